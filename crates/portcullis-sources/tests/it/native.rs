//! The native plugin loader and handler runner, against plugin directories
//! written into a tempdir at test time.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use portcullis_catalog::Tool;
use portcullis_server::{CallContext, Exposure, Registration, ToolServer};
use portcullis_sources::{NativeOptions, NativePlugin, SourceError};
use serde_json::{Value, json};
use tempfile::TempDir;

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

fn script(dir: &Path, name: &str, body: &str) {
    write(dir, name, &format!("#!/bin/sh\n{body}\n"));
    let path = dir.join(name);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn manifest(dir: &Path, value: Value) {
    write(dir, "mcp-plugin.json", &value.to_string());
}

fn plugin_with(tools: Value) -> TempDir {
    let dir = TempDir::new().unwrap();
    script(dir.path(), "h.sh", "cat");
    manifest(
        dir.path(),
        json!({"name": "p", "version": "1.0.0", "tools": tools}),
    );
    dir
}

fn load_err(dir: &Path) -> String {
    NativePlugin::load(dir).unwrap_err().to_string()
}

fn label(dir: &TempDir) -> String {
    dir.path().display().to_string()
}

#[test]
fn a_valid_plugin_loads_in_manifest_order_with_write_default() {
    let dir = plugin_with(json!([
        {"id": "b_tool", "handler": "./h.sh", "description": "B"},
        {"id": "a_tool", "handler": "h.sh", "description": "A",
         "annotations": {"readOnlyHint": true, "x-mdk-agent": {"enabled": true}, "title": "Alpha"},
         "agent": {"enabled": true, "useWhen": ["x", "y"]}}
    ]));
    let plugin = NativePlugin::load(dir.path()).unwrap();
    assert_eq!(plugin.name(), "p");
    assert_eq!(plugin.version(), "1.0.0");
    let names: Vec<&str> = plugin
        .tools()
        .iter()
        .map(|t| t.tool.name.as_str())
        .collect();
    assert_eq!(names, ["b_tool", "a_tool"]);
    let b = serde_json::to_value(&plugin.tools()[0].tool).unwrap();
    assert_eq!(b["annotations"], json!({"readOnlyHint": false}));
    assert!(b.get("_meta").is_none());
    let a = serde_json::to_value(&plugin.tools()[1].tool).unwrap();
    // Only MCP's annotation keys survive; the agent block travels in _meta.
    assert_eq!(
        a["annotations"],
        json!({"readOnlyHint": true, "title": "Alpha"})
    );
    assert_eq!(
        a["_meta"]["x-mdk-agent"],
        json!({"enabled": true, "useWhen": ["x", "y"]})
    );
}

#[test]
fn a_missing_manifest_names_the_directory() {
    let dir = TempDir::new().unwrap();
    assert_eq!(
        load_err(dir.path()),
        format!("ERR_PLUGIN_MANIFEST_MISSING: {}", label(&dir))
    );
    let gone = dir.path().join("nope");
    assert_eq!(
        NativePlugin::load(&gone).unwrap_err(),
        SourceError::ManifestMissing {
            dir: gone.display().to_string()
        }
    );
}

#[test]
fn invalid_manifests_name_the_first_bad_field_in_check_order() {
    let l = |d: &TempDir| label(d);
    let cases: Vec<(Value, &str)> = vec![
        (json!([1, 2]), "must be a JSON object"),
        (json!("text"), "must be a JSON object"),
        (json!(null), "must be a JSON object"),
        (
            json!({"version": "1", "tools": []}),
            "missing required field \"name\"",
        ),
        (
            json!({"name": "", "version": "1"}),
            "missing required field \"name\"",
        ),
        (
            json!({"name": 7, "version": "1"}),
            "missing required field \"name\"",
        ),
        (
            json!({"name": "p", "tools": []}),
            "missing required field \"version\"",
        ),
        (
            json!({"name": "p", "version": "1"}),
            "\"tools\" must be a non-empty array",
        ),
        (
            json!({"name": "p", "version": "1", "tools": []}),
            "\"tools\" must be a non-empty array",
        ),
        (
            json!({"name": "p", "version": "1", "tools": {"id": "x"}}),
            "\"tools\" must be a non-empty array",
        ),
        (
            json!({"name": "p", "version": "1", "tools": [{"handler": "./h.sh", "description": "d"}]}),
            "tool missing required field \"id\"",
        ),
        (
            json!({"name": "p", "version": "1", "tools": ["x"]}),
            "tool missing required field \"id\"",
        ),
        (
            json!({"name": "p", "version": "1", "tools": [{"id": "x", "description": "d"}]}),
            "tool \"x\" missing required field \"handler\"",
        ),
        (
            json!({"name": "p", "version": "1", "tools": [{"id": "x", "handler": 5, "description": "d"}]}),
            "tool \"x\" missing required field \"handler\"",
        ),
        (
            json!({"name": "p", "version": "1", "tools": [{"id": "x", "handler": "./h.sh"}]}),
            "tool \"x\" missing required field \"description\"",
        ),
        (
            json!({"name": "p", "version": "1", "tools": [{"id": "x", "handler": "./h.sh", "description": "d", "annotations": [true]}]}),
            "tool \"x\" field \"annotations\" must be an object",
        ),
        (
            json!({"name": "p", "version": "1", "tools": [{"id": "x", "handler": "./h.sh", "description": "d", "agent": "yes"}]}),
            "tool \"x\" field \"agent\" must be an object",
        ),
        (
            json!({"name": "p", "version": "1", "tools": [{"id": "x", "handler": "./h.sh", "description": "d", "inputSchema": 3}]}),
            "tool \"x\" field \"inputSchema\" must be an object or a path",
        ),
    ];
    for (value, reason) in cases {
        let dir = TempDir::new().unwrap();
        script(dir.path(), "h.sh", "cat");
        manifest(dir.path(), value.clone());
        assert_eq!(
            load_err(dir.path()),
            format!("ERR_PLUGIN_MANIFEST_INVALID: {}: {reason}", l(&dir)),
            "for {value}"
        );
    }
}

#[test]
fn wrong_annotation_types_are_invalid_not_ignored() {
    let dir = plugin_with(json!([
        {"id": "x", "handler": "./h.sh", "description": "d", "annotations": {"readOnlyHint": "yes"}}
    ]));
    let error = load_err(dir.path());
    assert!(
        error.starts_with(&format!(
            "ERR_PLUGIN_MANIFEST_INVALID: {}: tool \"x\" field \"annotations\": ",
            label(&dir)
        )),
        "{error}"
    );
}

#[test]
fn malformed_json_huge_and_deeply_nested_manifests_are_invalid() {
    let dir = TempDir::new().unwrap();
    write(dir.path(), "mcp-plugin.json", "{\"name\": \"p\",");
    let error = load_err(dir.path());
    assert!(
        error.starts_with(&format!(
            "ERR_PLUGIN_MANIFEST_INVALID: {}: \"mcp-plugin.json\" is not valid JSON",
            label(&dir)
        )),
        "{error}"
    );

    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    write(dir.path(), "mcp-plugin.json", &nested);
    let error = load_err(dir.path());
    assert!(
        error.contains("is not valid JSON") && error.contains("recursion limit"),
        "{error}"
    );

    let huge = format!("{{\"name\": \"{}\"}}", "x".repeat(5 * 1024 * 1024));
    write(dir.path(), "mcp-plugin.json", &huge);
    let error = load_err(dir.path());
    assert!(
        error.ends_with("\"mcp-plugin.json\": is larger than 4194304 bytes"),
        "{error}"
    );

    std::fs::write(dir.path().join("mcp-plugin.json"), [0xff, 0xfe, b'{']).unwrap();
    assert!(load_err(dir.path()).ends_with("is not UTF-8"));
}

#[test]
fn duplicate_ids_within_a_plugin() {
    let dir = plugin_with(json!([
        {"id": "x", "handler": "./h.sh", "description": "d"},
        {"id": "x", "handler": "./h.sh", "description": "d"}
    ]));
    assert_eq!(
        load_err(dir.path()),
        format!(
            "ERR_PLUGIN_TOOL_DUPLICATE_ID: {}: duplicate tool id \"x\"",
            label(&dir)
        )
    );
}

#[test]
fn duplicate_ids_across_plugins_name_both_directories() {
    let a = plugin_with(json!([{"id": "x", "handler": "./h.sh", "description": "d"}]));
    let b = plugin_with(json!([{"id": "x", "handler": "./h.sh", "description": "d"}]));
    let error = ToolServer::builder()
        .register_all(NativePlugin::load(a.path()).unwrap().registrations())
        .register_all(NativePlugin::load(b.path()).unwrap().registrations())
        .build()
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "ERR_PLUGIN_TOOL_DUPLICATE_ID: {} and {}: duplicate tool id \"x\"",
            label(&a),
            label(&b)
        )
    );
}

#[test]
fn handlers_must_exist_inside_and_be_executable() {
    let dir = plugin_with(json!([{"id": "x", "handler": "./missing.sh", "description": "d"}]));
    assert_eq!(
        load_err(dir.path()),
        format!(
            "ERR_PLUGIN_HANDLER_NOT_FOUND: {}: tool \"x\" handler \"./missing.sh\"",
            label(&dir)
        )
    );

    let dir = plugin_with(json!([{"id": "x", "handler": "./data.txt", "description": "d"}]));
    write(dir.path(), "data.txt", "not a program");
    assert_eq!(
        load_err(dir.path()),
        format!(
            "ERR_PLUGIN_HANDLER_NOT_FUNCTION: {}: tool \"x\" handler \"./data.txt\": not executable (chmod +x it)",
            label(&dir)
        )
    );

    let dir = plugin_with(json!([{"id": "x", "handler": "./sub", "description": "d"}]));
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    assert!(load_err(dir.path()).starts_with("ERR_PLUGIN_HANDLER_NOT_FUNCTION:"));
}

#[test]
fn handler_paths_escaping_the_directory_are_refused() {
    let outside = TempDir::new().unwrap();
    script(outside.path(), "evil.sh", "echo pwned");

    for handler in ["../evil.sh", "/bin/sh", "./a/../../evil.sh"] {
        let dir = plugin_with(json!([{"id": "x", "handler": handler, "description": "d"}]));
        let error = load_err(dir.path());
        assert!(error.starts_with(&format!("ERR_PLUGIN_HANDLER_NOT_FOUND: {}: tool \"x\" handler \"{handler}\": path-escapes-plugin-root", label(&dir))), "{error}");
    }

    // Through a symlink inside the directory.
    let dir = plugin_with(json!([{"id": "x", "handler": "./link.sh", "description": "d"}]));
    std::os::unix::fs::symlink(outside.path().join("evil.sh"), dir.path().join("link.sh")).unwrap();
    let error = load_err(dir.path());
    assert!(
        error.contains("path-escapes-plugin-root") && error.contains("symlink"),
        "{error}"
    );

    // A symlinked directory pointing out.
    let dir = plugin_with(json!([{"id": "x", "handler": "./bin/evil.sh", "description": "d"}]));
    std::os::unix::fs::symlink(outside.path(), dir.path().join("bin")).unwrap();
    assert!(load_err(dir.path()).contains("path-escapes-plugin-root"));

    // A symlink that stays inside is fine.
    let dir = plugin_with(json!([{"id": "x", "handler": "./alias.sh", "description": "d"}]));
    std::os::unix::fs::symlink(dir.path().join("h.sh"), dir.path().join("alias.sh")).unwrap();
    assert!(NativePlugin::load(dir.path()).is_ok());

    // The manifest itself, symlinked out.
    let dir = TempDir::new().unwrap();
    write(outside.path(), "mcp-plugin.json", "{}");
    std::os::unix::fs::symlink(
        outside.path().join("mcp-plugin.json"),
        dir.path().join("mcp-plugin.json"),
    )
    .unwrap();
    assert!(load_err(dir.path()).contains("path-escapes-plugin-root"));
}

#[test]
fn input_schemas_inline_or_from_a_contained_file() {
    let dir = plugin_with(json!([
        {"id": "inline", "handler": "./h.sh", "description": "d", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        {"id": "file", "handler": "./h.sh", "description": "d", "inputSchema": "./schemas/file.json"}
    ]));
    write(
        dir.path(),
        "schemas/file.json",
        r#"{"type":"object","required":["q"],"properties":{"q":{"type":"string"}}}"#,
    );
    let plugin = NativePlugin::load(dir.path()).unwrap();
    assert_eq!(
        plugin.tools()[1].tool.input_schema.as_ref().unwrap()["required"],
        json!(["q"])
    );

    let dir = plugin_with(
        json!([{"id": "x", "handler": "./h.sh", "description": "d", "inputSchema": "../etc.json"}]),
    );
    let error = load_err(dir.path());
    assert!(
        error.contains("tool \"x\" field \"inputSchema\"")
            && error.contains("path-escapes-plugin-root"),
        "{error}"
    );

    let dir = plugin_with(
        json!([{"id": "x", "handler": "./h.sh", "description": "d", "inputSchema": {"type": "nope"}}]),
    );
    assert!(load_err(dir.path()).starts_with("ERR_PLUGIN_MANIFEST_INVALID:"));
}

fn server_for(dir: &Path, options: NativeOptions) -> ToolServer {
    let plugin = NativePlugin::load_with(dir, options).unwrap();
    ToolServer::builder()
        .exposure(Exposure {
            allow_write: true,
            ..Default::default()
        })
        .register_all(plugin.registrations())
        .build()
        .unwrap()
}

fn text(result: &portcullis_catalog::ToolResult) -> String {
    result.text_blocks().collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn a_handler_gets_arguments_and_frozen_config_on_stdin() {
    let dir = plugin_with(json!([
        {"id": "echo", "handler": "./h.sh", "description": "echoes its request",
         "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
        {"id": "result", "handler": "./result.sh", "description": "answers a CallToolResult"},
        {"id": "env", "handler": "./env.sh", "description": "prints env"}
    ]));
    script(
        dir.path(),
        "result.sh",
        r#"cat >/dev/null; echo '{"content":[{"type":"text","text":"from result"}]}'"#,
    );
    script(
        dir.path(),
        "env.sh",
        "cat >/dev/null; echo \"secret=${PORTCULLIS_TEST_SECRET:-unset} root=$PLUGIN_ROOT\"; echo to-log >&2",
    );
    // PORTCULLIS_TEST_SECRET would only be visible if the environment leaked;
    // the handler must see it unset either way.
    let options = NativeOptions {
        config: json!({"kernelKey": "k-1"}),
        ..Default::default()
    };
    let server = server_for(dir.path(), options);

    let echoed = server
        .call("echo", json!({"name": "world"}), None)
        .await
        .unwrap();
    assert!(!echoed.is_error, "{echoed:?}");
    let body = text(&echoed);
    let inner = body.lines().nth(1).unwrap();
    let request: Value = serde_json::from_str(inner).unwrap();
    assert_eq!(
        request,
        json!({"arguments": {"name": "world"}, "context": {"config": {"kernelKey": "k-1"}}})
    );

    // Validation runs before the handler.
    let refused = server.call("echo", json!({"name": 5}), None).await.unwrap();
    assert!(refused.is_error && text(&refused).starts_with("ERR_INVALID_ARGUMENTS"));

    let result = server.call("result", json!({}), None).await.unwrap();
    assert!(text(&result).contains("\nfrom result\n"));

    let env = server.call("env", json!({}), None).await.unwrap();
    let env = text(&env);
    assert!(env.contains("secret=unset"), "{env}");
    assert!(
        env.contains(&format!("root={}", dir.path().display())),
        "{env}"
    );
}

#[tokio::test]
async fn the_environment_is_cleared() {
    let dir = plugin_with(json!([{"id": "env", "handler": "./env.sh", "description": "d"}]));
    script(
        dir.path(),
        "env.sh",
        "env | cut -d= -f1 | sort | tr '\\n' ' '",
    );
    let server = server_for(dir.path(), NativeOptions::default());
    let out = text(&server.call("env", json!({}), None).await.unwrap());
    let names: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    for name in &names {
        assert!(
            [
                "PATH",
                "HOME",
                "TMPDIR",
                "LANG",
                "LC_ALL",
                "PLUGIN_ROOT",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD"
            ]
            .contains(name),
            "unexpected variable {name} in {names:?}"
        );
    }
}

#[tokio::test]
async fn failures_map_to_errors() {
    let dir = plugin_with(json!([
        {"id": "coded", "handler": "./coded.sh", "description": "d"},
        {"id": "coded_stderr", "handler": "./coded_stderr.sh", "description": "d"},
        {"id": "crash", "handler": "./crash.sh", "description": "d"},
        {"id": "garbage", "handler": "./garbage.sh", "description": "d"},
        {"id": "bad_result", "handler": "./bad_result.sh", "description": "d"},
        {"id": "flood", "handler": "./flood.sh", "description": "d"},
        {"id": "ok", "handler": "./h.sh", "description": "d"}
    ]));
    script(
        dir.path(),
        "coded.sh",
        "echo 'ERR_DEVICE_OFFLINE: miner-3'; exit 3",
    );
    script(
        dir.path(),
        "coded_stderr.sh",
        "echo 'trace at /srv/x' >&2; echo 'ERR_BOOM' >&2; exit 1",
    );
    script(
        dir.path(),
        "crash.sh",
        "echo 'segfault in /srv/secret'; exit 139",
    );
    script(dir.path(), "garbage.sh", "printf '\\377\\376garbage'");
    script(dir.path(), "bad_result.sh", "echo '{\"content\": 42}'");
    script(
        dir.path(),
        "flood.sh",
        "head -c 4096 /dev/zero | tr '\\0' a",
    );
    let options = NativeOptions {
        max_output_bytes: 1024,
        ..Default::default()
    };
    let server = server_for(dir.path(), options);

    let coded = server.call("coded", json!({}), None).await.unwrap();
    assert!(coded.is_error);
    // The handler's code in the clear, its words framed as its output.
    assert!(
        text(&coded).starts_with("ERR_DEVICE_OFFLINE\n<untrusted-tool-output tool=\"coded\">\nminer-3\n</untrusted-tool-output>\n"),
        "{}",
        text(&coded)
    );
    assert_eq!(
        text(&server.call("coded_stderr", json!({}), None).await.unwrap()),
        "ERR_BOOM"
    );
    for tool in ["crash", "garbage", "bad_result", "flood"] {
        let result = server.call(tool, json!({}), None).await.unwrap();
        assert!(result.is_error, "{tool}");
        assert_eq!(text(&result), "ERR_TOOL_FAILED", "{tool}");
    }
    // Still serving.
    let ok = server.call("ok", json!({"a": 1}), None).await.unwrap();
    assert!(!ok.is_error);
}

/// Waits until process `pid` has exited (gone, or a zombie awaiting its
/// reaper). The bound only stops a broken build from hanging the suite.
async fn wait_until_dead(pid: &str) {
    let stat = format!("/proc/{pid}/stat");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match std::fs::read_to_string(&stat) {
            Err(_) => return,
            Ok(s)
                if s.rsplit(')')
                    .next()
                    .and_then(|rest| rest.split_whitespace().next())
                    == Some("Z") =>
            {
                return;
            }
            Ok(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "process {pid} is still running"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test]
async fn a_hanging_handler_is_killed_at_the_timeout_with_what_it_started() {
    let dir = plugin_with(json!([{"id": "hang", "handler": "./hang.sh", "description": "d"}]));
    let pid_file = dir.path().join("sleep.pid");
    // A shell that starts a background sleep and waits: killing only the
    // shell would leave the sleep running.
    script(
        dir.path(),
        "hang.sh",
        &format!("sleep 300 & echo $! > {}; wait", pid_file.display()),
    );
    let plugin = NativePlugin::load_with(
        dir.path(),
        NativeOptions {
            timeout: Duration::from_millis(500),
            ..Default::default()
        },
    )
    .unwrap();
    let registration: Registration = plugin.registrations().remove(0);
    let error = registration
        .handler
        .call(json!({}), CallContext::detached("hang"))
        .await
        .unwrap_err();
    assert_eq!(error.message(), "handler timed out after 500 ms");
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    assert!(!pid.is_empty());
    wait_until_dead(&pid).await;
}

#[tokio::test]
async fn an_endless_flood_is_stopped_at_the_output_cap() {
    let dir = plugin_with(json!([{"id": "flood", "handler": "./flood.sh", "description": "d"}]));
    script(dir.path(), "flood.sh", "exec yes flood");
    // The timeout is far away: the cap, not the clock, must end the call.
    let plugin = NativePlugin::load_with(
        dir.path(),
        NativeOptions {
            max_output_bytes: 64 * 1024,
            timeout: Duration::from_secs(3600),
            ..Default::default()
        },
    )
    .unwrap();
    let registration = plugin.registrations().remove(0);
    let error = registration
        .handler
        .call(json!({}), CallContext::detached("flood"))
        .await
        .unwrap_err();
    assert_eq!(error.message(), "handler output exceeds 65536 bytes");
}

#[tokio::test]
async fn cancelling_a_call_kills_the_handler() {
    let dir = plugin_with(json!([{"id": "hang", "handler": "./hang.sh", "description": "d"}]));
    let pid_file = dir.path().join("pid");
    script(
        dir.path(),
        "hang.sh",
        &format!("echo $$ > {}; exec sleep 30", pid_file.display()),
    );
    let plugin = NativePlugin::load(dir.path()).unwrap();
    let registration = plugin.registrations().remove(0);
    let ctx = CallContext::detached("hang");
    let token = ctx.cancellation().clone();
    let call = tokio::spawn({
        let handler = registration.handler.clone();
        async move { handler.call(json!({}), ctx).await }
    });
    // Wait until the process has started, then cancel.
    while !pid_file.exists()
        || std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    token.cancel();
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.message(), "cancelled by the client");
    wait_until_dead(&pid).await;
}

#[test]
fn the_tool_definition_is_what_the_manifest_says() {
    let dir = plugin_with(json!([{"id": "t", "handler": "./h.sh", "description": "Reports"}]));
    let plugin = NativePlugin::load(dir.path()).unwrap();
    let expected = Tool::new("t")
        .with_description("Reports")
        .with_annotations(portcullis_catalog::ToolAnnotations::read_only(false));
    assert_eq!(*plugin.tools()[0].tool, expected);
    // Withheld by default: it is a write.
    let server = ToolServer::builder()
        .register_all(plugin.registrations())
        .build()
        .unwrap();
    assert!(server.tool_names().is_empty());
    assert_eq!(server.withheld()[0].id, "t");
}

/// Property tests of the manifest loader: any `mcp-plugin.json` (text, or
/// the right keys holding anything) loads or is a `SourceError`, never a
/// panic, and never names a handler outside the plugin. `PROPTEST_CASES`
/// sets the number of cases (default 256).
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            prop::sample::select(vec![
                "./run.sh",
                "../run.sh",
                "/bin/sh",
                "run.sh",
                "./sub/../run.sh",
                "./missing",
                "1.0.0",
                "object",
                "string",
                "",
            ])
            .prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::vec(
                    (
                        prop_oneof![
                            prop::sample::select(vec![
                                "id",
                                "handler",
                                "description",
                                "inputSchema",
                                "annotations",
                                "readOnlyHint",
                                "type",
                                "properties",
                                "required",
                                "$ref",
                                "timeoutMs",
                            ])
                            .prop_map(str::to_owned),
                            "\\PC{0,6}",
                        ],
                        inner
                    ),
                    0..5
                )
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
            ]
        })
    }

    fn tool() -> impl Strategy<Value = Value> {
        (
            prop_oneof!["[a-z_.-]{1,8}".prop_map(Value::from), json()],
            prop_oneof![Just(json!("./run.sh")), json()],
            json(),
            json(),
        )
            .prop_map(|(id, handler, schema, annotations)| {
                json!({"id": id, "handler": handler, "description": "d",
                       "inputSchema": schema, "annotations": annotations})
            })
    }

    proptest! {
        #[test]
        fn any_manifest_loads_or_errs(
            tools in prop::collection::vec(prop_oneof![tool(), json()], 0..4),
            text in prop::option::of("\\PC{0,64}"),
        ) {
            let dir = TempDir::new().unwrap();
            script(dir.path(), "run.sh", "echo ok");
            match text {
                Some(text) => write(dir.path(), "mcp-plugin.json", &text),
                None => manifest(dir.path(), json!({"name": "p", "version": "1.0.0", "tools": tools})),
            }
            if let Ok(plugin) = NativePlugin::load(dir.path()) {
                for tool in plugin.tools() {
                    let handler = tool.command.canonicalize().unwrap();
                    prop_assert!(handler.starts_with(dir.path().canonicalize().unwrap()), "{}", handler.display());
                }
            }
        }
    }
}
