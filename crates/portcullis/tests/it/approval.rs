//! Human approval end to end: the real `portcullis` binary with
//! `[gateway] approval` set, the built-in demo upstream behind it, and the
//! Python SDK (`mcp` 2.3.0) as the person's client, answering the approval
//! question through its elicitation callback:
//!
//! * a stateless 2026-07-28 client over HTTP (the `input_required` round
//!   trip) and an initialize-era client over HTTP (an elicitation on its
//!   session), with `approval = ["demo__write_note"]`;
//! * an initialize-era client over `serve --stdio`, with
//!   `approval = "writes"`.
//!
//! The demo upstream's `write_note` answers `saved note N`, N counting the
//! calls that reached it: a declined call must not move N, an approved one
//! must move it by exactly one.
//!
//! The Python venv is installed under `.peers/` by `.ci/peers.sh`. Outside
//! CI a missing venv skips the test (it says so); with `CI=true` it is a
//! failure.

use crate::common;

use std::path::{Path, PathBuf};

use common::{audit_trail, python, python_json, serve, write_config};
use serde_json::{Value, json};

/// A gateway config: the demo upstream (this very binary) under the prefix
/// `demo__`, writes allowed, an in-memory store, and `approval` as given
/// (a TOML value).
fn config(dir: &Path, approval: &str) -> PathBuf {
    config_with(dir, approval, "store = \"memory\"")
}

/// [`config`] with `more` (TOML lines, the store among them) in
/// `[gateway]`.
fn config_with(dir: &Path, approval: &str, more: &str) -> PathBuf {
    let toml = format!(
        "[gateway]\nallow_write = true\nprefix = \"always\"\napproval = {approval}\n{more}\n\
         [upstreams.demo]\ntype = \"stdio\"\ncommand = \"portcullis\"\nargs = [\"demo-upstream\"]\ntimeout_ms = 30000\n"
    );
    write_config(dir, &toml)
}

/// The Python SDK client: connects in the given mode and makes the planned
/// calls, answering each approval question with the answer planned for
/// that call (`approve`, `decline` or `cancel`). Prints one JSON object:
/// the negotiated protocol, every question it was asked, every result.
/// `late-approve` approves only after 2.5 s, past a short
/// `approval_timeout_ms`.
const PYTHON_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import Client, StdioServerParameters, types

answers = []
asked = []

async def elicitation(context, params):
    asked.append(params.message)
    answer = answers.pop(0) if answers else "decline"
    if answer == "late-approve":
        # A person who answers only after the gateway stopped waiting.
        await asyncio.sleep(2.5)
        answer = "approve"
    if answer == "approve":
        return types.ElicitResult(action="accept", content={"approve": True})
    return types.ElicitResult(action=answer)

async def main():
    mode, plan, target = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
    if target[0].startswith("http"):
        server = target[0]
    else:
        server = StdioServerParameters(command=target[0], args=target[1:])
    out = {"calls": [], "asked": asked}
    async with Client(server, mode=mode, elicitation_callback=elicitation) as client:
        out["protocol"] = client.protocol_version
        for tool, arguments, answer in plan:
            if answer:
                answers.append(answer)
            result = await client.call_tool(tool, arguments)
            out["calls"].append(result.model_dump(by_alias=True, mode="json", exclude_none=True))
    print(json.dumps(out))

asyncio.run(main())
"#;

/// Runs the client with `plan` (`[tool, arguments, answer or null]`) and
/// returns what it printed.
fn client(python: &Path, mode: &str, plan: &Value, target: &[&str]) -> Value {
    let plan = plan.to_string();
    let mut args = vec![mode, plan.as_str()];
    args.extend_from_slice(target);
    python_json(python, PYTHON_CLIENT, &args)
}

fn text(call: &Value) -> String {
    call["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn write(note: &str, answer: &str) -> Value {
    json!(["demo__write_note", {"text": note}, answer])
}

/// An approved call reached the upstream as its `n`th note.
fn assert_saved(call: &Value, n: usize) {
    assert_ne!(call["isError"], true, "{call}");
    let text = text(call);
    assert!(
        text.contains(&format!("\nsaved note {n}\n")),
        "expected note {n}: {text}"
    );
}

/// A refused call: the denied shape (`isError`, `structuredContent.__denied`,
/// `deniedBy`, "was not approved by …"), and the reason.
fn assert_denied(call: &Value, by: &str, reason: &str) {
    assert_eq!(call["isError"], true, "{call}");
    assert_eq!(call["structuredContent"]["__denied"], true, "{call}");
    assert_eq!(call["structuredContent"]["deniedBy"], by, "{call}");
    let text = text(call);
    assert!(
        text.starts_with("The \"demo__write_note\" action was not approved by"),
        "{text}"
    );
    assert!(text.contains(reason), "{text}");
}

#[test]
fn approval_over_http_in_both_protocol_eras() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let served = serve(&config(dir.path(), "[\"demo__write_note\"]"));

    // A stateless 2026-07-28 client: the input_required round trip.
    let plan = json!([
        write("declined note", "decline"),
        write("approved note", "approve"),
        ["demo__echo", {"text": "no question for reads"}, null],
        write("api key sk-live-0123456789abcdef0123", "cancel"),
        write("second approved note", "approve"),
    ]);
    let out = client(&python, "2026-07-28", &plan, &[&served.url]);
    assert_eq!(out["protocol"], "2026-07-28", "{out}");
    let calls = out["calls"].as_array().expect("calls");
    assert_denied(&calls[0], "the user", "the user declined it");
    // The declined call never reached the upstream: this is its first note.
    assert_saved(&calls[1], 1);
    assert!(text(&calls[2]).contains("\nno question for reads\n"));
    assert_denied(&calls[3], "the user", "dismissed");
    assert_saved(&calls[4], 2);
    // Four questions (the read was not asked about), each naming the tool
    // and showing the arguments the upstream would receive, a key-looking
    // value included: the person cannot judge what they are not shown.
    let asked: Vec<&str> = out["asked"]
        .as_array()
        .expect("asked")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(asked.len(), 4, "{asked:?}");
    assert!(asked.iter().all(|q| q.contains("\"demo__write_note\"")));
    assert!(asked[1].contains("text=\"approved note\""), "{}", asked[1]);
    assert!(
        asked[2].contains("text=\"api key sk-live-0123456789abcdef0123\""),
        "{}",
        asked[2]
    );

    // An initialize-era client: an elicitation on its session.
    let plan = json!([
        write("legacy approved", "approve"),
        write("legacy declined", "decline"),
    ]);
    let out = client(&python, "legacy", &plan, &[&served.url]);
    assert_ne!(out["protocol"], "2026-07-28", "{out}");
    let calls = out["calls"].as_array().expect("calls");
    assert_saved(&calls[0], 3);
    assert_denied(&calls[1], "the user", "the user declined it");
    assert_eq!(out["asked"].as_array().map(Vec::len), Some(2), "{out}");

    // And the upstream saw exactly the three approved calls.
    let out = client(
        &python,
        "legacy",
        &json!([write("closing note", "approve")]),
        &[&served.url],
    );
    assert_saved(&out["calls"][0], 4);
}

#[test]
fn approval_over_stdio_for_every_write() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path(), "\"writes\"");
    let plan = json!([
        write("declined over stdio", "decline"),
        ["demo__add", {"a": 2, "b": 40}, null],
        write("approved over stdio", "approve"),
    ]);
    let binary = env!("CARGO_BIN_EXE_portcullis");
    let config = config.display().to_string();
    let out = client(
        &python,
        "legacy",
        &plan,
        &[binary, "serve", "--stdio", "--config", &config],
    );
    let calls = out["calls"].as_array().expect("calls");
    assert_denied(&calls[0], "the user", "the user declined it");
    assert!(text(&calls[1]).contains("\n42\n"), "{}", calls[1]);
    assert_saved(&calls[2], 1);
    assert_eq!(out["asked"].as_array().map(Vec::len), Some(2), "{out}");
}

#[test]
fn an_unanswered_approval_times_out_as_configured_and_the_upstream_is_never_called() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    // The default store, SQLite in data_dir: the audit trail is read back.
    let mut served = serve(&config_with(
        dir.path(),
        "[\"demo__write_note\"]",
        "approval_timeout_ms = 1000",
    ));
    let timed_out = "no answer came within 1 s";

    // A 2026-07-28 client retries with its approval after the deadline.
    let plan = json!([
        write("too late", "late-approve"),
        write("in time", "approve"),
    ]);
    let out = client(&python, "2026-07-28", &plan, &[&served.url]);
    assert_eq!(out["protocol"], "2026-07-28", "{out}");
    let calls = out["calls"].as_array().expect("calls");
    assert_denied(&calls[0], "policy", timed_out);
    // The late approval did not run the call: this is the first note.
    assert_saved(&calls[1], 1);

    // An initialize-era client: the elicitation goes unanswered past the
    // deadline.
    let plan = json!([
        write("too late again", "late-approve"),
        write("in time again", "approve"),
    ]);
    let out = client(&python, "legacy", &plan, &[&served.url]);
    assert_ne!(out["protocol"], "2026-07-28", "{out}");
    let calls = out["calls"].as_array().expect("calls");
    assert_denied(&calls[0], "policy", timed_out);
    assert_saved(&calls[1], 2);

    // The trail tells an unanswered question from an approved call (one
    // record a call: the 2026 question round is not a call of its own).
    assert_eq!(served.terminate(), Some(0));
    let records = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(audit_trail(&dir.path().join(".portcullis")));
    let decisions: Vec<(&str, &str)> = records
        .iter()
        .rev()
        .map(|r| (r.tool.as_str(), r.decision.as_str()))
        .collect();
    let note = "demo__write_note";
    assert_eq!(
        decisions,
        [
            (note, "declined"),
            (note, "approved"),
            (note, "declined"),
            (note, "approved")
        ],
        "{records:?}"
    );
}

/// With `prefix = "auto"` and two upstreams configured, names carry the
/// prefix even while one of them is down: an approval list written for the
/// configured names keeps matching, so the write still asks first.
#[test]
fn names_and_approval_hold_while_a_sibling_upstream_is_down() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(
        dir.path(),
        &format!(
            "[gateway]\nallow_write = true\nstore = \"memory\"\nreconnect_max_ms = 0\n\
             approval = [\"demo__write_note\"]\n\n{}timeout_ms = 30000\n\n\
             [upstreams.down]\ntype = \"streamable-http\"\nurl = \"http://127.0.0.1:9/mcp\"\ntimeout_ms = 2000\n",
            common::DEMO
        ),
    );
    let config = config.to_string_lossy().into_owned();
    let listed = common::portcullis(&["tools", "--json", "--config", &config]);
    let tools: Value = serde_json::from_slice(&listed.stdout).expect("tools --json is JSON");
    let names: Vec<&str> = tools
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"demo__echo"), "{names:?}");
    assert!(names.contains(&"demo__write_note"), "{names:?}");
    assert!(
        !names.iter().any(|n| *n == "write_note" || *n == "echo"),
        "{names:?}"
    );
    let call = common::portcullis(&[
        "call",
        "--config",
        &config,
        "demo__write_note",
        r#"{"text":"unasked"}"#,
    ]);
    let said = format!(
        "{}{}",
        common::text(&call.stdout),
        common::text(&call.stderr)
    );
    assert_eq!(call.status.code(), Some(1), "{said}");
    assert!(
        !said.contains("saved note"),
        "the write ran unasked: {said}"
    );
    assert!(said.contains("approv"), "{said}");
}

/// `tools --json` rows by name: (status, access, classified_by).
fn classified(config: &str) -> std::collections::BTreeMap<String, (String, String, String)> {
    let listed = common::portcullis(&["tools", "--json", "--config", config]);
    let tools: Value = serde_json::from_slice(&listed.stdout).expect("tools --json is JSON");
    let field = |t: &Value, k: &str| t[k].as_str().unwrap_or("-").to_owned();
    tools
        .as_array()
        .expect("an array")
        .iter()
        .map(|t| {
            (
                field(t, "name"),
                (
                    field(t, "status"),
                    field(t, "access"),
                    field(t, "classified_by"),
                ),
            )
        })
        .collect()
}

/// A server's `readOnlyHint` is its claim: the operator's `writes` makes a
/// tool a write whatever the server says, so it is withheld without
/// `allow_write` and asks first under `approval = "writes"`;
/// `trust_annotations = false` takes no claim at all; `read_only` declares
/// a tool read-only. `tools` shows who decided.
#[test]
fn the_operator_classifies_what_a_server_claims_read_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let demo = |more: &str, gateway: &str| {
        write_config(
            dir.path(),
            &format!(
                "[gateway]\nstore = \"memory\"\n{gateway}\n\
                 [upstreams.demo]\ntype = \"stdio\"\ncommand = \"portcullis\"\nargs = [\"demo-upstream\"]\ntimeout_ms = 30000\n{more}"
            ),
        )
        .to_string_lossy()
        .into_owned()
    };
    let row = |s: &str, a: &str, b: &str| (s.to_owned(), a.to_owned(), b.to_owned());

    // The server's claims, as they are: echo read-only, write_note a write.
    let rows = classified(&demo("", ""));
    assert_eq!(rows["echo"], row("available", "read-only", "server"));
    assert_eq!(rows["write_note"].1, "write");

    // `writes` overrules the claim: echo is withheld like any write.
    let config = demo("writes = [\"echo\"]\nread_only = [\"write_note\"]\n", "");
    let rows = classified(&config);
    assert_eq!(rows["echo"].0, "withheld", "{rows:?}");
    assert_eq!(rows["echo"].1, "write");
    assert_eq!(rows["echo"].2, "operator");
    assert_eq!(
        rows["write_note"],
        row("available", "read-only", "operator")
    );

    // With writes allowed and approval for writes, echo now asks first:
    // `call` has no one to ask, so it is refused and never runs.
    let config = demo(
        "writes = [\"echo\"]\n",
        "allow_write = true\napproval = \"writes\"\n",
    );
    let call = common::portcullis(&["call", "--config", &config, "echo", r#"{"text":"unasked"}"#]);
    let said = format!(
        "{}{}",
        common::text(&call.stdout),
        common::text(&call.stderr)
    );
    assert_eq!(call.status.code(), Some(1), "{said}");
    assert!(!said.contains("unasked\n"), "the write ran unasked: {said}");

    // trust_annotations = false (here for the whole gateway): no claim is
    // taken, every tool is a write by the operator's word.
    let rows = classified(&demo("", "trust_annotations = false\n"));
    assert!(
        rows.values()
            .all(|(status, access, by)| status == "withheld"
                && access == "write"
                && by == "operator"),
        "{rows:?}"
    );
    // …and an upstream may say otherwise.
    let rows = classified(&demo(
        "trust_annotations = true\n",
        "trust_annotations = false\n",
    ));
    assert_eq!(rows["echo"], row("available", "read-only", "server"));
}
