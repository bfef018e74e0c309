//! Interop with `@modelcontextprotocol/server-everything` (the TypeScript
//! SDK's reference server, 2025 era) over all three transports: stdio,
//! Streamable HTTP (which it speaks with sessions and `initialize`, so this
//! exercises the Auto lifecycle's fallback) and legacy HTTP+SSE.
//!
//! The server is installed by `.ci/peers.sh` into `.peers/`; when that
//! folder is absent the tests say so and pass without running (CI installs
//! it first). HTTP servers are started with the loopback-only preload.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use portcullis_upstream::{CallContext, ConnectOptions, McpServerConfig, Toolset, connect};
use serde_json::json;

struct Peers {
    node: String,
    everything: String,
    preload: String,
}

fn peers() -> Option<Peers> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.peers");
    let everything =
        root.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let preload = root.join("loopback-only.cjs");
    if !everything.is_file() || !preload.is_file() {
        println!(
            "SKIPPED: {} not found; run .ci/peers.sh to install MCP peers",
            everything.display()
        );
        return None;
    }
    Some(Peers {
        node: "node".to_owned(),
        everything: everything.canonicalize().ok()?.display().to_string(),
        preload: preload.canonicalize().ok()?.display().to_string(),
    })
}

fn text(result: &portcullis_catalog::ToolResult) -> String {
    result.text_blocks().collect::<Vec<_>>().join("\n")
}

/// A server-everything process over HTTP on a free loopback port; killed on
/// drop.
struct Running {
    _child: tokio::process::Child,
    port: u16,
}

async fn start(peers: &Peers, mode: &str) -> Running {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.local_addr().expect("addr").port()
    };
    let child = tokio::process::Command::new(&peers.node)
        .arg(&peers.everything)
        .arg(mode)
        .env("PORT", port.to_string())
        .env("NODE_OPTIONS", format!("--require {}", peers.preload))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start server-everything");
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Running {
        _child: child,
        port,
    }
}

async fn exercise(toolset: &Toolset, name: &str) {
    assert!(
        toolset.diagnostics().is_empty(),
        "{name}: {:?}",
        toolset.diagnostics()
    );
    let tools: Vec<String> = toolset.tools().into_iter().map(|t| t.name).collect();
    println!("{name}: {} tools: {}", tools.len(), tools.join(", "));
    assert!(tools.contains(&"echo".to_owned()), "{tools:?}");
    assert!(tools.contains(&"trigger-long-running-operation".to_owned()));
    let echo = toolset
        .call(
            "echo",
            Some(json!({"message": "hi"})),
            &CallContext::default(),
        )
        .await
        .unwrap();
    assert_eq!(text(&echo), "Echo: hi");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let long = toolset
        .call(
            "trigger-long-running-operation",
            Some(json!({"duration": 0.3, "steps": 3})),
            &CallContext::default().with_progress(tx),
        )
        .await
        .unwrap();
    assert!(text(&long).contains("Steps: 3"), "{}", text(&long));
    let mut progress = Vec::new();
    while let Ok(p) = rx.try_recv() {
        progress.push(p.progress);
    }
    assert_eq!(progress, [1.0, 2.0, 3.0], "{name}");
}

fn options() -> ConnectOptions {
    ConnectOptions::default().with_timeout(Duration::from_secs(30))
}

#[cfg(feature = "stdio")]
#[tokio::test]
async fn server_everything_over_stdio() {
    let Some(peers) = peers() else { return };
    let config = McpServerConfig::stdio(
        "everything",
        &peers.node,
        [peers.everything.clone(), "stdio".to_owned()],
    );
    let toolset = connect(vec![config], options()).await.unwrap();
    exercise(&toolset, "stdio").await;
    toolset.close().await;
}

#[tokio::test]
async fn server_everything_over_streamable_http() {
    let Some(peers) = peers() else { return };
    let server = start(&peers, "streamableHttp").await;
    let url = format!("http://127.0.0.1:{}/mcp", server.port);
    let toolset = connect(
        vec![McpServerConfig::streamable_http("everything", url)],
        options(),
    )
    .await
    .unwrap();
    exercise(&toolset, "streamable-http").await;
    toolset.close().await;
}

#[tokio::test]
async fn server_everything_over_legacy_sse() {
    let Some(peers) = peers() else { return };
    let server = start(&peers, "sse").await;
    let url = format!("http://127.0.0.1:{}/sse", server.port);
    let toolset = connect(vec![McpServerConfig::sse("everything", url)], options())
        .await
        .unwrap();
    exercise(&toolset, "sse").await;
    toolset.close().await;
}
