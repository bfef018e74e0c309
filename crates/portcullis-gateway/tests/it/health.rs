//! `/healthz` counts an upstream as up only once its tools are served: a
//! client that waits for "up" and then calls never meets "unknown tool".
//!
//! The upstream is a real MCP server on loopback HTTP that is not listening
//! when the gateway starts, so it joins later. The gateway's rebuild of its
//! served tool map (`follow_catalogue`) is held back until the test lets it
//! run: the window between the upstreams' catalogue taking the joiner in
//! and the served map following it is then as wide as the test wants.

use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_gateway::audit::Recorder;
use portcullis_gateway::gateway::Gateway;
use portcullis_gateway::metrics::Metrics;
use portcullis_gateway::reload::{Generation, Live, follow_catalogue};
use portcullis_server::{CallContext, HttpOptions, ToolError, ToolServer, serve_http};
use serde_json::Value;

/// Only a guard against a hung test, never an assertion about speed.
const PATIENCE: Duration = Duration::from_secs(60);

async fn echo(args: Value, _ctx: CallContext) -> Result<ToolResult, ToolError> {
    Ok(ToolResult::text(args["text"].as_str().unwrap_or("ok")))
}

/// `/healthz`'s (up, down, needs login) counts.
fn counts(live: &Live) -> (usize, usize, usize) {
    live.current().snapshot().upstream_counts()
}

/// Whether the served tool map lists `name`.
fn served(live: &Live, name: &str) -> bool {
    live.served().listed_tools().iter().any(|t| t.name == name)
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A gateway whose one upstream, `late`, was not listening when it started
/// and has joined since: the upstreams' catalogue has taken it in, the
/// served tool map not yet (nothing follows the catalogue until the test
/// spawns [`follow_catalogue`]). The upstream's task and its config's
/// directory are kept alive with it.
async fn joined_late() -> (Arc<Live>, portcullis_server::HttpServer, tempfile::TempDir) {
    // A free loopback port, nothing listening on it yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("portcullis.toml");
    std::fs::write(
        &path,
        format!(
            "[gateway]\nstore = \"memory\"\nreconnect_max_ms = 500\nstart_timeout_ms = 0\n\n\
             [upstreams.late]\ntype = \"streamable-http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
        ),
    )
    .expect("config written");
    let config = portcullis_gateway::config::load(&path).expect("config");
    let gateway = Gateway::start(&config).await.expect("gateway starts");
    let live = Live::new(
        Generation::new(config, gateway),
        Recorder::new(Arc::new(Metrics::default()), None),
    );
    assert_eq!(counts(&live), (0, 1, 0));

    // The upstream comes up; the gateway's retry connects it.
    let upstream = ToolServer::builder()
        .tool(
            Tool::new("echo").with_annotations(ToolAnnotations::read_only(true)),
            echo,
        )
        .build()
        .expect("upstream tools");
    let options = HttpOptions {
        listen: ([127, 0, 0, 1], port).into(),
        ..HttpOptions::default()
    };
    let upstream = serve_http(upstream, options)
        .await
        .expect("the upstream listens");
    eventually("the upstreams' catalogue takes `late` in", || {
        live.current().gateway.toolset.is_up("late")
    })
    .await;
    (live, upstream, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_is_up_only_once_its_tools_are_served() {
    let (live, _upstream, _dir) = joined_late().await;

    // Connected, but its tools are not served yet: not up. (One upstream:
    // its tools keep their own names.)
    assert!(!served(&live, "echo"));
    assert_eq!(
        counts(&live),
        (0, 1, 0),
        "healthz says up while `echo` is not served"
    );

    // Once the served map follows, up — and never before its tools.
    let follower = tokio::spawn(follow_catalogue(live.clone()));
    eventually("`late` is up", || {
        let up = counts(&live) == (1, 0, 0);
        assert!(!up || served(&live, "echo"), "up before `echo` is served");
        up
    })
    .await;
    follower.abort();
    live.close().await;
}

/// `/healthz`'s tool counts: (available, quarantined, withheld).
fn tool_counts(live: &Live) -> (usize, usize, usize) {
    let snapshot = live.current().snapshot();
    (snapshot.available, snapshot.quarantined, snapshot.withheld)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_counts_the_tools_served_not_the_newest_catalogues() {
    let (live, _upstream, _dir) = joined_late().await;

    // `echo` is in the newest catalogue but not served: not available yet,
    // as its upstream is not up yet.
    assert!(!served(&live, "echo"));
    assert_eq!(
        tool_counts(&live),
        (0, 0, 0),
        "healthz counts `echo` available while it is not served"
    );

    // Once served, counted; never before.
    let follower = tokio::spawn(follow_catalogue(live.clone()));
    eventually("`echo` is counted", || {
        let counted = tool_counts(&live) == (1, 0, 0);
        assert!(!counted || served(&live, "echo"), "counted before served");
        counted
    })
    .await;
    assert_eq!(counts(&live), (1, 0, 0));
    follower.abort();
    live.close().await;
}
