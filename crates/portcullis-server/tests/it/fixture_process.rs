//! The conformance fixture as a real process: the HTTP surface's signal
//! handling (drain, then exit 0), the stdio surface under a real child
//! process, and interop with the Python `mcp` SDK client when the peers are
//! installed (`bash .ci/peers.sh`).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

// Only a guard against a hung test, never an assertion about speed.
const HANG: Duration = Duration::from_secs(60);
const FIXTURE: &str = env!("CARGO_BIN_EXE_portcullis-conformance-fixture");

/// Starts the fixture over HTTP on a free port; returns it and its URL.
async fn start_http(extra: &[&str]) -> (Child, String) {
    let mut child = Command::new(FIXTURE)
        .args(["--port", "0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let url = tokio::time::timeout(HANG, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("fixture listening on ") {
                return url.to_owned();
            }
        }
        panic!("the fixture exited before listening");
    })
    .await
    .unwrap();
    // Keep draining stderr so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

fn signal(child: &Child, name: &str) {
    let pid = child.id().unwrap().to_string();
    let status = std::process::Command::new("kill")
        .args(["-s", name, &pid])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn sigterm_drains_the_call_in_flight_then_exits_zero() {
    let (mut child, url) = start_http(&["--stateless"]).await;
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "drain"}}});
    let mut response = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    // Once the first progress event is out, the call is in flight.
    let mut seen = String::new();
    while !seen.contains("notifications/progress") {
        let chunk = tokio::time::timeout(HANG, response.chunk())
            .await
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(
            &chunk.expect("the stream ended before any progress"),
        ));
    }
    assert!(
        !seen.contains("\"id\":9"),
        "the call finished before the signal: {seen}"
    );
    signal(&child, "TERM");
    let mut rest = seen;
    while let Some(chunk) = tokio::time::timeout(HANG, response.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        rest.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        rest.contains("\"id\":9") && rest.contains("drain"),
        "the call was cut: {rest}"
    );
    let status = tokio::time::timeout(HANG, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn sigint_exits_zero_when_idle() {
    let (mut child, _url) = start_http(&[]).await;
    signal(&child, "INT");
    let status = tokio::time::timeout(HANG, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn the_stdio_surface_serves_a_child_process_client() {
    let mut command = Command::new(FIXTURE);
    command.arg("--stdio");
    let transport = TokioChildProcess::new(command).unwrap();
    let client = ().serve(transport).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "test_simple_text"));
    let result = client
        .call_tool(CallToolRequestParams::new("test_simple_text"))
        .await
        .unwrap();
    let text = result.content[0].as_text().unwrap().text.clone();
    assert!(
        text.contains("\nThis is a simple text response for testing.\n"),
        "{text}"
    );
    client.cancel().await.unwrap();
}

fn python() -> Option<PathBuf> {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.peers/venv/bin/python");
    python.exists().then_some(python)
}

const PY_CLIENT: &str = r#"
import json, sys, anyio
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

async def main():
    mode, kind, target = sys.argv[1], sys.argv[2], sys.argv[3:]
    t = StdioServerParameters(command=target[0], args=target[1:]) if kind == "stdio" else streamable_http_client(target[0])
    async with Client(t, mode=mode) as c:
        tools = [t.name for t in (await c.list_tools()).tools]
        r = await c.call_tool("test_simple_text", {})
        print(json.dumps({"protocol": str(c.protocol_version), "tools": tools, "text": r.content[0].text}))
anyio.run(main)
"#;

async fn python_client(python: &PathBuf, args: &[&str]) -> Value {
    let output = tokio::time::timeout(
        HANG,
        Command::new(python)
            .arg("-c")
            .arg(PY_CLIENT)
            .args(args)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test]
async fn the_python_sdk_client_lists_and_calls_over_http_and_stdio() {
    let Some(python) = python() else {
        eprintln!("SKIPPED: .peers/venv is not installed (run `bash .ci/peers.sh`)");
        return;
    };
    // Legacy sessions on (the fixture's default) and the library's default,
    // stateless.
    let (child, url) = start_http(&[]).await;
    let (stateless_child, stateless_url) = start_http(&["--stateless"]).await;
    for (mode, protocol) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let seen = python_client(&python, &[mode, "http", &stateless_url]).await;
        assert_eq!(seen["protocol"], protocol, "{seen}");
        assert!(
            seen["text"]
                .as_str()
                .unwrap()
                .contains("This is a simple text response for testing.")
        );

        let seen = python_client(&python, &[mode, "http", &url]).await;
        assert_eq!(seen["protocol"], protocol, "{seen}");
        assert!(
            seen["tools"]
                .as_array()
                .unwrap()
                .contains(&json!("test_simple_text"))
        );
        assert!(
            seen["text"]
                .as_str()
                .unwrap()
                .contains("This is a simple text response for testing.")
        );

        let seen = python_client(&python, &[mode, "stdio", FIXTURE, "--stdio"]).await;
        assert_eq!(seen["protocol"], protocol, "{seen}");
        assert!(
            seen["text"]
                .as_str()
                .unwrap()
                .contains("This is a simple text response for testing.")
        );
    }
    drop(child);
    drop(stateless_child);
}

#[tokio::test]
async fn the_inspector_cli_lists_and_calls_over_http_and_stdio() {
    let build = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../.peers/node_modules/@modelcontextprotocol/inspector-cli/build");
    if !build.join("index.js").exists() {
        eprintln!("SKIPPED: the inspector CLI is not installed (run `bash .ci/peers.sh`)");
        return;
    }
    // Inspector v1 must run from its own build directory (peers.md §2.4).
    let inspector = |args: Vec<String>| {
        let build = build.clone();
        async move {
            let output = tokio::time::timeout(
                HANG,
                Command::new("node")
                    .current_dir(&build)
                    .arg("index.js")
                    .args(&args)
                    .output(),
            )
            .await
            .unwrap()
            .unwrap();
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            serde_json::from_slice::<Value>(&output.stdout).unwrap()
        }
    };
    let (child, url) = start_http(&["--stateless"]).await;
    let call = |target: Vec<&str>| {
        let mut args: Vec<String> = target.iter().map(|s| s.to_string()).collect();
        args.extend(
            ["--method", "tools/call", "--tool-name", "test_simple_text"].map(String::from),
        );
        args
    };
    let over_http = inspector(call(vec![url.as_str(), "--transport", "http"])).await;
    assert!(
        over_http["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("This is a simple text response")
    );
    let over_stdio = inspector(call(vec![FIXTURE, "--stdio"])).await;
    assert!(
        over_stdio["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("This is a simple text response")
    );
    let listed = inspector(vec![
        url.clone(),
        "--transport".into(),
        "http".into(),
        "--method".into(),
        "tools/list".into(),
    ])
    .await;
    assert!(
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "test_simple_text")
    );
    drop(child);
}
