//! `ConnectOptions::on_connect` against real servers on loopback: the
//! callback fires once per configured server as it finishes connecting
//! (Streamable HTTP and legacy SSE fixtures that connect, a closed port
//! that fails), with a running count, the failures so far, the total and
//! the servers still connecting.

use crate::common;

use std::sync::{Arc, Mutex};

use common::*;
use portcullis_upstream::options::ConnectEvent;
use portcullis_upstream::{ConnectOptions, McpServerConfig, connect};

#[tokio::test]
async fn the_callback_fires_once_per_server_with_the_running_totals() {
    let first = http_fixture(FixtureConfig::default()).await;
    let second = http_fixture(FixtureConfig::default()).await;
    let legacy = sse_fixture(FixtureConfig::default(), None).await;
    let closed = closed_port_url().await;
    let servers = vec![
        McpServerConfig::streamable_http("alpha", first.mcp_url()),
        McpServerConfig::streamable_http("beta", second.mcp_url()),
        McpServerConfig::sse("gamma", legacy.sse_url()),
        McpServerConfig::streamable_http("down", closed),
    ];
    let events: Arc<Mutex<Vec<ConnectEvent>>> = Arc::default();
    let seen = events.clone();
    let options = ConnectOptions::default().on_connect(move |event| {
        if let Ok(mut seen) = seen.lock() {
            seen.push(event.clone());
        }
    });
    let toolset = connect(servers, options).await.expect("no wiring mistake");
    let events = events.lock().expect("lock").clone();

    // Once per server, whatever the order they finished in.
    let mut finished: Vec<&str> = events.iter().map(|e| e.server.as_str()).collect();
    finished.sort_unstable();
    assert_eq!(finished, ["alpha", "beta", "down", "gamma"], "{events:?}");
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event.done, n + 1, "counted in order: {events:?}");
        assert_eq!(event.total, 4, "{event:?}");
        assert_eq!(event.ok, event.server != "down", "{event:?}");
        assert!(
            !event.waiting.contains(&event.server),
            "a finished server is not waited for: {event:?}"
        );
        assert_eq!(event.waiting.len(), 4 - event.done, "{event:?}");
        let failed_so_far = events[..=n].iter().filter(|e| !e.ok).count();
        assert_eq!(event.failed, failed_so_far, "{event:?}");
    }
    let last = events.last().expect("an event");
    assert!(last.waiting.is_empty() && last.failed == 1, "{last:?}");
    // The events agree with what connect reports.
    assert!(
        toolset
            .diagnostics()
            .iter()
            .any(|d| d.message.contains("down")),
        "{:?}",
        toolset.diagnostics()
    );
    toolset.close().await;
}

#[tokio::test]
async fn no_callback_and_no_servers_are_both_fine() {
    let server = http_fixture(FixtureConfig::default()).await;
    let toolset = connect(
        vec![McpServerConfig::streamable_http("only", server.mcp_url())],
        ConnectOptions::default(),
    )
    .await
    .expect("connects without a callback");
    assert!(!toolset.tools().is_empty());
    toolset.close().await;

    let events: Arc<Mutex<Vec<ConnectEvent>>> = Arc::default();
    let seen = events.clone();
    let options = ConnectOptions::default().on_connect(move |event| {
        if let Ok(mut seen) = seen.lock() {
            seen.push(event.clone());
        }
    });
    let empty = connect(Vec::new(), options)
        .await
        .expect("nothing to connect");
    assert!(
        events.lock().expect("lock").is_empty(),
        "no server, no event"
    );
    empty.close().await;
}
