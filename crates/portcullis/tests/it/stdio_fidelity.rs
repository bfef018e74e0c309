//! Proxy fidelity through `portcullis serve --stdio`, measured with a real
//! client: the Python SDK (`mcp` 2.3.0, from `.peers/venv`) starts the
//! gateway as its stdio server; the gateway fronts the in-repo conformance
//! fixture (`portcullis-conformance-fixture --stdio`, one upstream,
//! `prefix = "never"`, writes allowed) — the set-up the conformance suite
//! measures over HTTP (`.ci/conformance.sh`). The client lists and calls
//! tools, lists and reads resources (a template's expansion among them),
//! lists and gets prompts, once per protocol era (`legacy`: the initialize
//! handshake; `auto`: `server/discover` first), and every answer is checked
//! for content.
//!
//! Outside CI a missing venv or fixture skips the test (it says so); with
//! `CI=true` it is a failure.

use crate::common;

use common::{toml_string, write_config};
use portcullis_catalog::framing::{UNTRUSTED_NOTICE, UNTRUSTED_TAG};

/// `text` in the frame of untrusted output from `tool`.
fn framed(tool: &str, text: &str) -> String {
    format!("<{UNTRUSTED_TAG} tool=\"{tool}\">\n{text}\n</{UNTRUSTED_TAG}>\n{UNTRUSTED_NOTICE}")
}
use serde_json::{Value, json};

/// The Python SDK client: for each mode, everything a client does with
/// tools, resources and prompts. Prints one JSON object, by mode.
const PYTHON_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import Client, StdioServerParameters

def dump(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)

async def session(mode, server):
    out = {}
    async with Client(server, mode=mode) as client:
        out["protocol"] = client.protocol_version
        out["tools"] = sorted(tool.name for tool in (await client.list_tools()).tools)
        out["simple_text"] = dump(await client.call_tool("test_simple_text", {}))
        out["image"] = dump(await client.call_tool("test_image_content", {}))
        out["embedded"] = dump(await client.call_tool("test_embedded_resource", {}))
        out["error"] = dump(await client.call_tool("test_error_handling", {}))
        out["resources"] = sorted(str(r.uri) for r in (await client.list_resources()).resources)
        out["templates"] = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        out["static_text"] = dump(await client.read_resource("test://static-text"))
        out["static_binary"] = dump(await client.read_resource("test://static-binary"))
        out["template_read"] = dump(await client.read_resource("test://template/42/data"))
        out["prompts"] = sorted(p.name for p in (await client.list_prompts()).prompts)
        out["simple_prompt"] = dump(await client.get_prompt("test_simple_prompt"))
        out["prompt_args"] = dump(await client.get_prompt(
            "test_prompt_with_arguments", {"arg1": "first", "arg2": "second"}))
        out["prompt_resource"] = dump(await client.get_prompt(
            "test_prompt_with_embedded_resource", {"resourceUri": "test://example-resource"}))
        out["prompt_image"] = dump(await client.get_prompt("test_prompt_with_image"))
    return out

async def main():
    server = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    out = {}
    for mode in ["legacy", "auto"]:
        out[mode] = await session(mode, server)
    print(json.dumps(out))

asyncio.run(main())
"#;

/// The image the fixture serves (a 1×1 transparent PNG), base64.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Everything one session must show.
fn assert_session(out: &Value, mode: &str) {
    let tools = strings(&out["tools"]);
    for tool in [
        "test_simple_text",
        "test_image_content",
        "test_embedded_resource",
        "test_error_handling",
        "test_sampling",
        "test_elicitation",
    ] {
        assert!(tools.contains(&tool), "{mode}: {tool} missing: {tools:?}");
    }
    assert!(
        tools.iter().all(|t| !t.contains("__")),
        "{mode}: prefix = never leaves names as the server gave them: {tools:?}"
    );

    // Tools: text framed by the gateway as untrusted data (the fixture, a
    // `portcullis-server` itself, frames it first: its closing tag arrives
    // escaped, so only the gateway's frame closes), other content unchanged.
    let text = out["simple_text"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with("<untrusted-tool-output tool=\"test_simple_text\">\n"),
        "{mode}: {text}"
    );
    assert!(
        text.contains("\nThis is a simple text response for testing.\n"),
        "{mode}: {text}"
    );
    assert_eq!(
        text.matches("</untrusted-tool-output>").count(),
        1,
        "{text}"
    );
    assert_eq!(
        out["image"]["content"][0],
        json!({"type": "image", "data": PNG, "mimeType": "image/png"}),
        "{mode}: {}",
        out["image"]
    );
    let embedded = &out["embedded"]["content"][0];
    assert_eq!(embedded["type"], "resource", "{mode}: {embedded}");
    assert_eq!(
        embedded["resource"]["uri"], "test://embedded-resource",
        "{mode}: {embedded}"
    );
    assert_eq!(out["error"]["isError"], true, "{mode}: {}", out["error"]);

    // Resources: listed and read under their own URIs, a read's text framed
    // as untrusted data like a tool's.
    assert_eq!(
        strings(&out["resources"]),
        [
            "test://static-binary",
            "test://static-text",
            "test://watched-resource"
        ],
        "{mode}"
    );
    assert_eq!(
        strings(&out["templates"]),
        ["test://template/{id}/data"],
        "{mode}"
    );
    let read = &out["static_text"]["contents"][0];
    assert_eq!(read["uri"], "test://static-text", "{mode}: {read}");
    assert_eq!(
        read["text"],
        framed(
            "test://static-text",
            "This is the content of the static text resource."
        ),
        "{mode}: {read}"
    );
    let blob = &out["static_binary"]["contents"][0];
    assert_eq!(blob["uri"], "test://static-binary", "{mode}: {blob}");
    assert_eq!(blob["blob"], PNG, "{mode}: {blob}");
    let expanded = &out["template_read"]["contents"][0];
    assert_eq!(expanded["uri"], "test://template/42/data", "{mode}");
    assert!(
        expanded["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Data for ID: 42"),
        "{mode}: {expanded}"
    );

    // Prompts: listed and got with their arguments.
    let prompts = strings(&out["prompts"]);
    for prompt in [
        "test_simple_prompt",
        "test_prompt_with_arguments",
        "test_prompt_with_embedded_resource",
        "test_prompt_with_image",
    ] {
        assert!(prompts.contains(&prompt), "{mode}: {prompts:?}");
    }
    assert_eq!(
        out["simple_prompt"]["messages"],
        json!([{"role": "user", "content": {"type": "text", "text": "This is a simple prompt for testing."}}]),
        "{mode}"
    );
    assert_eq!(
        out["prompt_args"]["messages"][0]["content"]["text"],
        "Prompt with arguments: arg1='first', arg2='second'",
        "{mode}"
    );
    let resource = &out["prompt_resource"]["messages"][0]["content"];
    assert_eq!(resource["type"], "resource", "{mode}: {resource}");
    assert_eq!(
        resource["resource"]["uri"], "test://example-resource",
        "{mode}: {resource}"
    );
    assert_eq!(
        resource["resource"]["text"], "Embedded resource content for testing.",
        "{mode}: {resource}"
    );
    assert_eq!(
        out["prompt_image"]["messages"][0]["content"],
        json!({"type": "image", "data": PNG, "mimeType": "image/png"}),
        "{mode}"
    );
}

#[test]
fn python_sdk_over_serve_stdio_gets_tools_resources_and_prompts_unchanged() {
    let Some(python) = common::python() else {
        return;
    };
    let Some(fixture) = common::conformance_fixture() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(
        dir.path(),
        &format!(
            "[gateway]\nstore = \"memory\"\nprefix = \"never\"\nallow_write = true\n\n\
             [upstreams.fixture]\ntype = \"stdio\"\ncommand = {}\nargs = [\"--stdio\"]\ntimeout_ms = 30000\n",
            toml_string(&fixture.display().to_string())
        ),
    );
    let out = common::python_json(
        &python,
        PYTHON_CLIENT,
        &[
            env!("CARGO_BIN_EXE_portcullis"),
            "serve",
            "--stdio",
            "--config",
            config.to_str().expect("a UTF-8 path"),
        ],
    );
    assert_eq!(
        out["legacy"]["protocol"], "2025-11-25",
        "the initialize handshake: {}",
        out["legacy"]["protocol"]
    );
    assert_eq!(
        out["auto"]["protocol"], "2026-07-28",
        "server/discover over stdio: {}",
        out["auto"]["protocol"]
    );
    for mode in ["legacy", "auto"] {
        assert_session(&out[mode], mode);
    }
}
