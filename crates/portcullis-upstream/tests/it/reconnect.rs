//! A connection that closes on its own is reopened: against a real stdio
//! server process (`drift-fixture`) killed from outside or exiting mid-call,
//! with the trust baseline in a real SQLite file. While the server is down a
//! call is refused at once; after the reconnect calls reach the new process;
//! a server that came back rewritten is quarantined against the baseline it
//! was trusted with, which never moves; a call in flight when the process
//! died fails at once and is never sent again; and closing or reconfiguring
//! the toolset leaves no process behind and nothing reopened.
// Every server here is a child process over stdio.
#![cfg(feature = "stdio")]

use crate::common;
use crate::drift_support;

use std::future::Future;
use std::time::{Duration, Instant};

use drift_support::*;
use portcullis_catalog::catalogue::EntryKind;
use portcullis_catalog::fingerprint::fingerprint_listing;
use portcullis_upstream::{Backoff, CallContext, CallError, ConnectOptions, Toolset, connect};
use serde_json::{Value, json};

/// How long a condition may take before a test gives up: generous, the
/// machine may be busy; never asserted on as a speed.
const PATIENCE: Duration = Duration::from_secs(60);

/// Short delays, so the tests do not wait on the default backoff.
fn quick() -> Backoff {
    Backoff::new(Duration::from_millis(50), Duration::from_millis(400))
}

async fn connect_with(fixture: &Fixture, backoff: Backoff) -> Toolset {
    let options: ConnectOptions = fixture.options().await.with_reconnect(backoff);
    let toolset = connect(vec![fixture.config()], options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        toolset.diagnostics().is_empty(),
        "{:?}",
        toolset.diagnostics()
    );
    toolset
}

/// Polls `condition` until it holds; panics naming `what` after
/// [`PATIENCE`].
async fn eventually<F: Future<Output = bool>>(what: &str, mut condition: impl FnMut() -> F) {
    let deadline = Instant::now() + PATIENCE;
    while !condition().await {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The pids of every process the fixture started, in order.
fn starts(fixture: &Fixture) -> Vec<u32> {
    fixture
        .requests()
        .iter()
        .filter_map(|l| l.strip_prefix("start "))
        .filter_map(|pid| pid.trim().parse().ok())
        .collect()
}

fn kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap_or_else(|e| panic!("kill: {e}"));
    assert!(status.success(), "kill {pid}");
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or_default()
            .trim_start()
            .starts_with(['Z', 'X']),
        Err(_) => false,
    }
}

fn pid_of(toolset: &Toolset) -> u32 {
    toolset
        .child_pid(SERVER)
        .unwrap_or_else(|| panic!("a stdio child"))
}

async fn call(toolset: &Toolset, tool: &str, args: Value) -> Result<String, CallError> {
    toolset
        .call(tool, Some(args), &CallContext::default())
        .await
        .map(|result| {
            let content = serde_json::to_value(&result.content).unwrap_or_default();
            content[0]["text"].as_str().unwrap_or_default().to_owned()
        })
}

#[tokio::test]
async fn a_killed_child_is_restarted_and_calls_meanwhile_fail_fast() {
    let fixture = Fixture::new(&original());
    // A first delay long enough to see the outage from a test.
    let backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(2));
    let toolset = connect_with(&fixture, backoff).await;
    let announced = toolset.watch_catalogue();
    assert!(toolset.is_up(SERVER));
    let first = pid_of(&toolset);
    assert_eq!(starts(&fixture), [first]);

    kill(first);
    eventually("the server is seen down", || async {
        !toolset.is_up(SERVER)
    })
    .await;
    let refused = call(&toolset, "echo", json!({"message": "during"})).await;
    match &refused {
        Err(error @ CallError::Reconnecting { server, .. }) => {
            assert_eq!(server, SERVER);
            let message = error.to_string();
            assert!(
                message.contains("is down and being reconnected")
                    && message.contains("the call was not sent"),
                "{message}"
            );
        }
        other => panic!("expected a reconnecting refusal, got {other:?}"),
    }
    assert_eq!(fixture.calls("echo"), 0, "nothing was sent meanwhile");

    eventually("the server is back", || async { toolset.is_up(SERVER) }).await;
    let second = pid_of(&toolset);
    assert_ne!(second, first);
    assert_eq!(starts(&fixture), [first, second], "one new process");
    assert_eq!(fixture.lists(), 2, "the new process was listed once");
    assert_eq!(
        call(&toolset, "echo", json!({"message": "after"})).await,
        Ok("echo ran with {\"message\":\"after\"}".to_owned())
    );
    assert_eq!(fixture.calls("echo"), 1);
    assert!(
        !announced.has_changed().unwrap_or(true),
        "an unchanged listing swaps no new tool list in"
    );
    assert!(
        toolset.diagnostics().is_empty(),
        "{:?}",
        toolset.diagnostics()
    );
    toolset.close().await;
    eventually("the second child exits", || async { !alive(second) }).await;
}

#[tokio::test]
async fn a_server_that_comes_back_rewritten_is_quarantined_and_the_baseline_kept() {
    let fixture = Fixture::new(&original());
    let toolset = connect_with(&fixture, quick()).await;
    let announced = toolset.watch_catalogue();
    assert_eq!(kind(&toolset, "echo"), Some(EntryKind::Remote));
    let trusted = fingerprint_listing(&parsed(&original()));

    let pulled = changed("echo", |d| d["description"] = json!(HIJACK));
    fixture.publish(&pulled);
    let first = pid_of(&toolset);
    kill(first);
    eventually("echo is quarantined after the reconnect", || async {
        kind(&toolset, "echo") == Some(EntryKind::Quarantined)
    })
    .await;
    assert!(
        announced.has_changed().unwrap_or(false),
        "the new map is announced"
    );
    assert!(toolset.is_up(SERVER));
    assert_ne!(pid_of(&toolset), first);

    let drift = drift_messages(&toolset.diagnostics());
    assert_eq!(
        drift,
        [format!(
            "MCP server \"{SERVER}\" published tools that differ from the trusted baseline; withheld: echo."
        )]
    );
    let shown = serde_json::to_string(&toolset.tools()).unwrap_or_default();
    assert!(!shown.contains("id_rsa"), "{shown}");
    let refused = call_ok(&toolset, "echo", json!({"message": "x"})).await;
    assert!(refused.is_error);
    assert!(text(&refused).contains("an operator must re-trust the server"));
    assert_eq!(fixture.calls("echo"), 0, "the server never sees the call");
    assert_eq!(
        call(&toolset, "search", json!({"query": "q"})).await,
        Ok("search ran with {\"query\":\"q\"}".to_owned()),
        "a tool that did not drift still works"
    );

    // The store: the baseline is the first run's, the cache the new listing.
    let row = fixture.stored().await.unwrap_or_else(|| panic!("row"));
    assert_eq!(tool_part(row.tool_fingerprints), Some(trusted));
    assert_eq!(row.tools, Some(parsed(&pulled)));
    assert_eq!(
        toolset.baseline(SERVER).map(|b| tool_part(Some(b))),
        Some(Some(fingerprint_listing(&parsed(&original()))))
    );
    toolset.close().await;
}

#[tokio::test]
async fn a_call_in_flight_when_the_child_dies_fails_at_once_and_is_not_replayed() {
    let fixture = Fixture::new(&original());
    let toolset = connect_with(&fixture, quick()).await;
    let first = pid_of(&toolset);
    // The fixture exits on this call without answering. The default 60 s
    // timeout would turn a hang into `Timeout`, not `ConnectionLost`.
    let lost = call(&toolset, "echo", json!({"message": "x", "exit": true})).await;
    match &lost {
        Err(error @ CallError::ConnectionLost { tool, server }) => {
            assert_eq!((tool.as_str(), server.as_str()), ("echo", SERVER));
            assert!(
                error.to_string().contains("the call was not retried"),
                "{error}"
            );
        }
        other => panic!("expected the lost connection, got {other:?}"),
    }
    eventually("the first child is gone", || async { !alive(first) }).await;
    eventually("the server is back", || async { toolset.is_up(SERVER) }).await;
    assert_eq!(
        call(&toolset, "search", json!({"query": "q"})).await,
        Ok("search ran with {\"query\":\"q\"}".to_owned())
    );
    assert_eq!(starts(&fixture).len(), 2);
    assert_eq!(
        fixture.calls("echo"),
        1,
        "the lost call was never sent again"
    );
    toolset.close().await;
}

#[tokio::test]
async fn closing_while_reconnecting_leaves_no_process_and_reopens_nothing() {
    let fixture = Fixture::new(&original());
    let toolset = connect_with(&fixture, quick()).await;
    // From now on every new process fails its listing: the reconnect keeps
    // trying.
    std::fs::write(fixture.tools_path(), "not json").unwrap_or_else(|e| panic!("write: {e}"));
    kill(pid_of(&toolset));
    eventually("two failed reconnect attempts", || async {
        starts(&fixture).len() >= 3
    })
    .await;
    assert!(!toolset.is_up(SERVER));
    toolset.close().await;
    let started = starts(&fixture);
    for pid in &started {
        eventually("every started process exits", || async { !alive(*pid) }).await;
    }
    // Longer than the longest backoff: a supervisor still running would
    // have started another process by now.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        starts(&fixture),
        started,
        "nothing was reopened after close"
    );
    assert!(matches!(
        call(&toolset, "echo", json!({"message": "x"})).await,
        Err(CallError::Unavailable { .. })
    ));
}

#[tokio::test]
async fn a_connection_replaced_by_a_reconfigure_is_not_reopened() {
    let fixture = Fixture::new(&original());
    let toolset = connect_with(&fixture, quick()).await;
    let first = pid_of(&toolset);
    // The same server reading another (identical) file: a changed config,
    // so the reconfigure replaces its connection and closes the old one.
    let other = fixture.dir.path().join("other.json");
    write(&other, &original());
    let options = fixture.options().await.with_reconnect(quick());
    let report = toolset
        .reconfigure(vec![fixture.config_publishing(&other)], &options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.closed, [SERVER]);
    eventually("the replaced child exits", || async { !alive(first) }).await;
    let second = pid_of(&toolset);
    assert_ne!(second, first);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        starts(&fixture),
        [first, second],
        "the replaced connection was not reopened"
    );

    // The replacement is supervised in its turn.
    kill(second);
    eventually("the replacement is reopened", || async {
        toolset.is_up(SERVER) && toolset.child_pid(SERVER) != Some(second)
    })
    .await;
    assert_eq!(starts(&fixture).len(), 3);
    assert_eq!(
        call(&toolset, "echo", json!({"message": "m"})).await,
        Ok("echo ran with {\"message\":\"m\"}".to_owned())
    );
    toolset.close().await;
}

#[tokio::test]
async fn without_reconnecting_a_closed_connection_stays_closed() {
    let fixture = Fixture::new(&original());
    let toolset = connect_with(&fixture, Backoff::NEVER).await;
    let first = pid_of(&toolset);
    kill(first);
    eventually("the server is seen down", || async {
        !toolset.is_up(SERVER)
    })
    .await;
    assert_eq!(
        call(&toolset, "echo", json!({"message": "x"}))
            .await
            .map_err(|e| e.to_string()),
        Err(format!("MCP server \"{SERVER}\" is unavailable."))
    );
    assert_eq!(starts(&fixture), [first]);
    toolset.close().await;
}

#[tokio::test]
async fn a_server_that_failed_at_start_joins_the_tool_map_when_it_comes_up() {
    let fixture = Fixture::new(&original());
    // Its listing fails until the file is fixed.
    std::fs::write(fixture.tools_path(), "not json").unwrap_or_else(|e| panic!("write: {e}"));
    let options = fixture.options().await.with_reconnect(quick());
    let toolset = connect(vec![fixture.config()], options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let announced = toolset.watch_catalogue();
    assert!(!toolset.is_up(SERVER));
    assert!(toolset.catalogue().get("echo").is_none());
    assert_eq!(
        toolset.diagnostics().len(),
        1,
        "{:?}",
        toolset.diagnostics()
    );
    eventually("a retry in the background", || async {
        starts(&fixture).len() >= 2
    })
    .await;

    fixture.publish(&original());
    eventually("the server joins", || async { toolset.is_up(SERVER) }).await;
    assert_eq!(kind(&toolset, "echo"), Some(EntryKind::Remote));
    assert!(
        announced.has_changed().unwrap_or(false),
        "the new map is announced"
    );
    assert_eq!(
        call(&toolset, "echo", json!({"message": "joined"})).await,
        Ok("echo ran with {\"message\":\"joined\"}".to_owned())
    );
    // Trusted on first use, as a cold start would have.
    let row = fixture.stored().await.unwrap_or_else(|| panic!("row"));
    assert_eq!(
        tool_part(row.tool_fingerprints),
        Some(fingerprint_listing(&parsed(&original())))
    );
    // And supervised from then on.
    let joined = pid_of(&toolset);
    kill(joined);
    eventually("the joined server is reopened", || async {
        toolset.is_up(SERVER) && toolset.child_pid(SERVER) != Some(joined)
    })
    .await;
    toolset.close().await;
    for pid in starts(&fixture) {
        eventually("every started process exits", || async { !alive(pid) }).await;
    }
}

/// The fixture's server started through `sh`, which runs it only once the
/// file `go` exists in the fixture's directory (until then nothing answers,
/// not even the handshake). Returns the config and the path of `go`.
fn gated(fixture: &Fixture) -> (portcullis_upstream::McpServerConfig, std::path::PathBuf) {
    let go = fixture.dir.path().join("go");
    let script = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done; exec '{}'",
        go.display(),
        env!("CARGO_BIN_EXE_drift-fixture")
    );
    let config = portcullis_upstream::McpServerConfig::stdio(SERVER, "sh", ["-c", &script])
        .with_env("DRIFT_TOOLS", fixture.tools_path().to_string_lossy())
        .with_env("DRIFT_LOG", fixture.log_path().to_string_lossy());
    (config, go)
}

#[tokio::test]
async fn a_server_still_starting_at_the_deadline_joins_later_held_to_its_baseline() {
    let fixture = Fixture::new(&original());
    let (config, go) = gated(&fixture);
    // Trusted on first use.
    std::fs::write(&go, "").unwrap_or_else(|e| panic!("write: {e}"));
    let first = connect(vec![config.clone()], fixture.options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(kind(&first, "echo"), Some(EntryKind::Remote));
    first.close().await;

    // Rewritten, and slow to start.
    fixture.publish(&changed("echo", |d| d["description"] = json!(HIJACK)));
    std::fs::remove_file(&go).unwrap_or_else(|e| panic!("remove: {e}"));
    let options = fixture
        .options()
        .await
        .with_reconnect(quick())
        .with_start_deadline(Duration::from_millis(100));
    let toolset = tokio::time::timeout(PATIENCE, connect(vec![config], options))
        .await
        .unwrap_or_else(|_| panic!("connect waited past its start deadline"))
        .unwrap_or_else(|e| panic!("{e}"));
    let announced = toolset.watch_catalogue();
    assert_eq!(toolset.starting(), [SERVER]);
    assert!(toolset.catalogue().get("echo").is_none());
    assert!(
        toolset.diagnostics().is_empty(),
        "{:?}",
        toolset.diagnostics()
    );

    std::fs::write(&go, "").unwrap_or_else(|e| panic!("write: {e}"));
    eventually("the server joins", || async { toolset.is_up(SERVER) }).await;
    assert!(toolset.starting().is_empty());
    assert!(
        announced.has_changed().unwrap_or(false),
        "the new map is announced"
    );
    // Held to the baseline of its first trust from its first appearance.
    assert_eq!(kind(&toolset, "echo"), Some(EntryKind::Quarantined));
    assert_eq!(kind(&toolset, "search"), Some(EntryKind::Remote));
    let listed = serde_json::to_string(&toolset.tools()).unwrap_or_default();
    assert!(!listed.contains(HIJACK), "{listed}");
    let row = fixture.stored().await.unwrap_or_else(|| panic!("row"));
    assert_eq!(
        tool_part(row.tool_fingerprints),
        Some(fingerprint_listing(&parsed(&original())))
    );
    toolset.close().await;
    for pid in starts(&fixture) {
        eventually("every started process exits", || async { !alive(pid) }).await;
    }
}

#[tokio::test]
async fn closing_while_a_server_is_still_starting_ends_it() {
    let fixture = Fixture::new(&original());
    let (config, go) = gated(&fixture);
    let options = fixture
        .options()
        .await
        .with_reconnect(quick())
        .with_start_deadline(Duration::ZERO);
    let toolset = connect(vec![config], options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(toolset.starting(), [SERVER]);
    toolset.close().await;
    // A shell still waiting would start the server now.
    std::fs::write(&go, "").unwrap_or_else(|e| panic!("write: {e}"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        starts(&fixture),
        Vec::<u32>::new(),
        "the start went on after close"
    );
    assert!(toolset.catalogue().get("echo").is_none());
}

/// server-everything (installed by `.ci/peers.sh`), if present.
fn everything() -> Option<String> {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../.peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !path.is_file() {
        println!("SKIPPED: {} not found; run .ci/peers.sh", path.display());
        return None;
    }
    Some(path.canonicalize().ok()?.display().to_string())
}

/// Has server-everything start sending updates for what it is subscribed
/// to, and waits for the first `notifications/resources/updated` among
/// `notices` (panicking with `missing` when none comes): the server it came
/// from and its URI.
async fn toggle_and_await_update(
    toolset: &Toolset,
    notices: &mut tokio::sync::mpsc::UnboundedReceiver<portcullis_upstream::ServerNotice>,
    missing: &str,
) -> (String, String) {
    use portcullis_upstream::Notice;
    toolset
        .call(
            "toggle-subscriber-updates",
            Some(json!({})),
            &CallContext::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("the tool runs: {e}"));
    tokio::time::timeout(PATIENCE, async {
        loop {
            match notices.recv().await {
                Some(notice) => {
                    if let Notice::ResourceUpdated(updated) = notice.notice {
                        return (notice.server, updated);
                    }
                }
                None => panic!("the notices ended"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{missing}"))
}

#[tokio::test]
async fn notices_and_subscriptions_carry_over_to_the_reopened_connection() {
    use portcullis_upstream::McpServerConfig;
    let Some(script) = everything() else {
        return;
    };
    let server = "everything";
    let toolset = connect(
        vec![McpServerConfig::stdio(
            server,
            "node",
            [script.as_str(), "stdio"],
        )],
        ConnectOptions::default().with_reconnect(quick()),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(toolset.is_up(server), "{:?}", toolset.diagnostics());
    let passthrough = toolset.passthrough();
    // Taken before the reconnect: it must keep hearing the server.
    let mut notices = passthrough.notices();
    let uri = "demo://resource/dynamic/text/1";
    passthrough
        .subscribe(server, uri)
        .await
        .unwrap_or_else(|e| panic!("resources/subscribe: {e}"));

    let first = toolset
        .child_pid(server)
        .unwrap_or_else(|| panic!("a child"));
    kill(first);
    eventually("the server is reopened", || async {
        toolset.is_up(server) && toolset.child_pid(server) != Some(first)
    })
    .await;
    // The new process sends updates for what it was subscribed to again.
    let (_, updated) =
        toggle_and_await_update(&toolset, &mut notices, "no update after the reconnect").await;
    assert_eq!(updated, uri);
    toolset.close().await;
    eventually("the first child is gone", || async { !alive(first) }).await;
}

#[tokio::test]
async fn a_server_that_joins_later_is_heard_by_notices_taken_before() {
    use portcullis_upstream::McpServerConfig;
    let Some(script) = everything() else {
        return;
    };
    let server = "everything";
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    // Not there yet: node exits at once, the connect fails.
    let link = dir.path().join("index.js");
    let toolset = connect(
        vec![McpServerConfig::stdio(
            server,
            "node",
            [link.to_string_lossy().as_ref(), "stdio"],
        )],
        ConnectOptions::default().with_reconnect(quick()),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!toolset.is_up(server));
    let passthrough = toolset.passthrough();
    let mut notices = passthrough.notices();

    std::os::unix::fs::symlink(&script, &link).unwrap_or_else(|e| panic!("symlink: {e}"));
    eventually("the server joins", || async { toolset.is_up(server) }).await;
    let uri = "demo://resource/dynamic/text/1";
    passthrough
        .subscribe(server, uri)
        .await
        .unwrap_or_else(|e| panic!("resources/subscribe: {e}"));
    let (from, updated) = toggle_and_await_update(
        &toolset,
        &mut notices,
        "the joined server's update never arrived",
    )
    .await;
    assert_eq!(from, server);
    assert_eq!(updated, uri);
    toolset.close().await;
}

#[tokio::test]
async fn a_legacy_sse_upstream_whose_stream_ended_is_reopened() {
    let server = common::sse_fixture(common::FixtureConfig::default(), None).await;
    let toolset = connect(
        vec![portcullis_upstream::McpServerConfig::sse(
            "old",
            server.sse_url(),
        )],
        ConnectOptions::default().with_reconnect(quick()),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(toolset.is_up("old"), "{:?}", toolset.diagnostics());
    assert_eq!(server.streams_opened(), 1);

    server.end_streams();
    eventually("a new event stream is opened", || async {
        server.streams_opened() == 2
    })
    .await;
    eventually("the server is back", || async { toolset.is_up("old") }).await;
    assert_eq!(
        call(&toolset, "echo", json!({"message": "over a new stream"})).await,
        Ok("over a new stream".to_owned())
    );
    toolset.close().await;
}
