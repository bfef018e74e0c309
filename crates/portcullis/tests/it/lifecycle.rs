//! Reload and shutdown with calls in flight, end to end through the real
//! `portcullis` binary. The upstreams are a Streamable HTTP server run by
//! this test (its `hold` tool answers only when the test releases it, so a
//! call is in flight for exactly as long as the test needs) and the
//! binary's own `demo-upstream` (a stdio child).
//!
//! * A config change that replaces both upstreams' connections while a call
//!   is in flight: the call still answers; the replaced child exits; the new
//!   connections serve.
//! * SIGTERM while a call is in flight: the call answers, the gateway exits
//!   0, and no child process (of any generation) survives it.
//!
//! (`ops.rs` covers reloads that keep connections, SIGHUP, and shutdown
//! over the demo upstream alone.)

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{alive, child_pids, eventually, toml_string, write_config};
use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_server::{CallContext, HttpOptions, HttpServer, ToolError, ToolServer, serve_http};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use tokio::sync::{Notify, Semaphore};

/// The upstream's side of a held call.
struct Hold {
    /// Signalled when a `hold` call arrives.
    started: Notify,
    /// One permit per call the test lets answer.
    release: Semaphore,
    /// Calls that answered.
    answered: AtomicUsize,
}

impl Default for Hold {
    fn default() -> Self {
        Hold {
            started: Notify::new(),
            release: Semaphore::new(0),
            answered: AtomicUsize::new(0),
        }
    }
}

/// A Streamable HTTP upstream with `hold`, which answers `released N` once
/// the test adds a permit.
async fn held_upstream(hold: Arc<Hold>) -> HttpServer {
    let tools = ToolServer::builder()
        .tool(
            Tool::new("hold").with_annotations(ToolAnnotations::read_only(true)),
            move |_: serde_json::Value, _: CallContext| {
                let hold = hold.clone();
                async move {
                    hold.started.notify_one();
                    let permit = hold.release.acquire().await;
                    permit.map(|p| p.forget()).ok();
                    let n = hold.answered.fetch_add(1, Ordering::SeqCst) + 1;
                    Ok::<_, ToolError>(ToolResult::text(format!("released {n}")))
                }
            },
        )
        .build()
        .expect("the upstream's tools");
    serve_http(tools, HttpOptions::default())
        .await
        .expect("the upstream listens")
}

/// Both upstreams; `generation` goes into the HTTP upstream's headers and
/// the demo child's environment, so changing it changes both configs.
fn config(dir: &std::path::Path, url: &str, generation: u32) -> std::path::PathBuf {
    write_config(
        dir,
        &format!(
            "[gateway]\nstore = \"memory\"\n\n\
             [upstreams.held]\ntype = \"streamable-http\"\nurl = {}\ntimeout_ms = 60000\nheaders = {{ X-Generation = \"{generation}\" }}\n\n\
             [upstreams.demo]\ntype = \"stdio\"\ncommand = \"portcullis\"\nargs = [\"demo-upstream\"]\nenv = {{ GENERATION = \"{generation}\" }}\n",
            toml_string(url)
        ),
    )
}

/// Starts `held__hold` through the gateway at `url` and waits until the
/// upstream has it: the call is in flight. The task yields its text.
async fn call_in_flight(url: &str, hold: &Hold) -> tokio::task::JoinHandle<String> {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_owned());
    let client = ().serve(transport).await.expect("an MCP client connects");
    let started = hold.started.notified();
    let call = tokio::spawn(async move {
        let answer = client
            .call_tool(CallToolRequestParams::new("held__hold"))
            .await;
        let _ = client.cancel().await;
        match answer {
            Ok(result) if result.is_error != Some(true) => result
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect(),
            Ok(result) => panic!("the call failed: {result:?}"),
            Err(error) => panic!("the call failed: {error}"),
        }
    });
    started.await;
    call
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_replaces_the_connections_lets_the_call_in_flight_finish() {
    let hold = Arc::new(Hold::default());
    let upstream = held_upstream(hold.clone()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = config(dir.path(), &upstream.url(), 1);
    let mut served = tokio::task::block_in_place(|| common::serve(&path));
    let first = child_pids(served.pid());
    assert_eq!(first.len(), 1, "one stdio child: {first:?}");

    let call = call_in_flight(&served.url, &hold).await;
    config(dir.path(), &upstream.url(), 2);
    tokio::task::block_in_place(|| {
        served.wait_for_line("upstreams reconfigured");
        served.wait_for_line("config reloaded");
    });
    assert_eq!(hold.answered.load(Ordering::SeqCst), 0, "still in flight");
    hold.release.add_permits(1);
    let text = call.await.expect("the call task");
    assert!(text.contains("\nreleased 1\n"), "{text}");

    // The replaced child is gone, its successor serves.
    tokio::task::block_in_place(|| {
        eventually("the replaced stdio child exits", || !alive(first[0]));
    });
    // Living children only: a reaped-late zombie is not a survivor.
    let now: Vec<u32> = child_pids(served.pid())
        .into_iter()
        .filter(|pid| alive(*pid))
        .collect();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, first, "the demo upstream was reconnected");
    let authority = served.authority();
    let names = tokio::task::block_in_place(|| common::tool_names(&authority));
    assert!(names.contains(&"demo__echo".to_owned()), "{names:?}");
    let second = call_in_flight(&served.url, &hold).await;
    hold.release.add_permits(1);
    let text = second.await.expect("the call task");
    assert!(
        text.contains("\nreleased 2\n"),
        "the new connection: {text}"
    );

    let code = tokio::task::block_in_place(|| served.terminate());
    assert_eq!(code, Some(0));
    for pid in first.into_iter().chain(now) {
        assert!(!alive(pid), "the stdio child {pid} outlived the gateway");
    }
    upstream.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_call_in_flight_answers_it_then_leaves_no_child() {
    let hold = Arc::new(Hold::default());
    let upstream = held_upstream(hold.clone()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = config(dir.path(), &upstream.url(), 1);
    let mut served = tokio::task::block_in_place(|| common::serve(&path));
    let children = child_pids(served.pid());
    assert_eq!(children.len(), 1, "{children:?}");

    let call = call_in_flight(&served.url, &hold).await;
    served.signal("TERM");
    tokio::task::block_in_place(|| served.wait_for_line("draining in-flight calls"));
    assert!(
        served.child.try_wait().expect("try_wait").is_none(),
        "the gateway waits for the call in flight"
    );
    hold.release.add_permits(1);
    let text = call.await.expect("the call task");
    assert!(text.contains("\nreleased 1\n"), "{text}");
    let code = tokio::task::block_in_place(|| served.exit_code());
    assert_eq!(code, Some(0));
    for pid in children {
        assert!(!alive(pid), "the stdio child {pid} outlived the gateway");
    }
    upstream.close().await;
}

/// SIGTERM with a stateless 2026-07-28 call in flight, answered plain
/// JSON: the call gets its real answer (`200`, never a bare `500`), a new
/// connection meanwhile is refused, and the gateway exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_stateless_call_in_flight_answers_it_and_refuses_new_connections() {
    use serde_json::json;
    let hold = Arc::new(Hold::default());
    let upstream = held_upstream(hold.clone()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = config(dir.path(), &upstream.url(), 1);
    let mut served = tokio::task::block_in_place(|| common::serve(&path));
    let authority = served.authority();
    let started = hold.started.notified();
    let call = tokio::task::spawn_blocking({
        let authority = authority.clone();
        move || {
            common::mcp(
                &authority,
                &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                    "params": {"name": "held__hold", "arguments": {}}}),
            )
        }
    });
    tokio::time::timeout(common::PATIENCE, started)
        .await
        .expect("the call reaches the upstream");
    served.signal("TERM");
    tokio::task::block_in_place(|| served.wait_for_line("draining in-flight calls"));
    // The listener closes right after the line is logged.
    tokio::task::block_in_place(|| {
        eventually("new connections are refused during the drain", || {
            std::net::TcpStream::connect(&authority).is_err()
        });
    });
    assert!(
        served.child.try_wait().expect("try_wait").is_none(),
        "the gateway waits for the call in flight"
    );
    hold.release.add_permits(1);
    let (status, response) = call.await.expect("the call task");
    assert_eq!(status, 200, "{response}");
    assert!(response.contains("released 1"), "{response}");
    let code = tokio::task::block_in_place(|| served.exit_code());
    assert_eq!(code, Some(0));
    upstream.close().await;
}

/// A stateless HTTP call still in flight when the drain's grace runs out
/// gets a JSON-RPC error saying the gateway is shutting down (`200`, its
/// id), and the gateway exits 0 soon after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_call_outliving_the_grace_is_told_the_gateway_is_shutting_down() {
    use serde_json::json;
    use std::time::{Duration, Instant};
    let hold = Arc::new(Hold::default());
    let upstream = held_upstream(hold.clone()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = config(dir.path(), &upstream.url(), 1);
    let mut served = tokio::task::block_in_place(|| common::serve(&path));
    let authority = served.authority();
    let started = hold.started.notified();
    let call = tokio::task::spawn_blocking(move || {
        common::mcp(
            &authority,
            &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": {"name": "held__hold", "arguments": {}}}),
        )
    });
    tokio::time::timeout(common::PATIENCE, started)
        .await
        .expect("the call reaches the upstream");
    let signalled = Instant::now();
    served.signal("TERM");
    let (status, response) = call.await.expect("the call task");
    assert_eq!(status, 200, "{response}");
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    let answer: serde_json::Value = serde_json::from_str(body).expect("one JSON-RPC message");
    assert_eq!(answer["id"], 5, "{answer}");
    assert_shutting_down(&answer);
    let code = tokio::task::block_in_place(|| served.exit_code());
    assert_eq!(code, Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(15),
        "exited {:?} after the signal",
        signalled.elapsed()
    );
    upstream.close().await;
}

/// `serve --stdio` with `held__hold` in flight: an MCP client on the pipe
/// (2025-11-25) is initialized; `held__hold` is sent and reaches the
/// upstream; the gateway is sent SIGTERM and says it drains.
async fn stdio_call_in_flight(
    dir: &std::path::Path,
    upstream: &HttpServer,
    hold: &Hold,
) -> common::RawStdio {
    use serde_json::json;
    let path = config(dir, &upstream.url(), 1);
    let mut client = tokio::task::block_in_place(|| common::RawStdio::start(&path, true));
    client.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "drain", "version": "1"}}}),
    );
    let initialized = tokio::task::block_in_place(|| client.answer_to(1, common::PATIENCE));
    assert!(initialized.is_some(), "initialize was not answered");
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let started = hold.started.notified();
    client.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "held__hold", "arguments": {}}}));
    tokio::time::timeout(common::PATIENCE, started)
        .await
        .expect("the call reaches the upstream");
    common::send_signal(client.pid(), "TERM");
    let stderr = client.stderr.as_ref().expect("stderr followed");
    let said = tokio::task::block_in_place(|| {
        loop {
            match stderr.recv_timeout(common::PATIENCE) {
                Ok(line) if line.contains("draining in-flight calls") => break true,
                Ok(_) => {}
                Err(_) => break false,
            }
        }
    });
    assert!(said, "the gateway did not say it drains");
    client
}

/// The JSON-RPC error a call cut off by the shutdown gets.
fn assert_shutting_down(message: &serde_json::Value) {
    assert_eq!(message["error"]["code"], -32000, "{message}");
    let text = message["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("shutting down"), "{message}");
}

/// SIGTERM on `serve --stdio` with a call in flight drains as the HTTP
/// surface does: a request sent after the signal is refused with a
/// JSON-RPC error saying the gateway is shutting down; the call in flight
/// gets its real answer once the upstream gives it; the gateway exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_on_stdio_answers_the_call_in_flight_and_refuses_new_ones() {
    use serde_json::json;
    let hold = Arc::new(Hold::default());
    let upstream = held_upstream(hold.clone()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut client = stdio_call_in_flight(dir.path(), &upstream, &hold).await;
    client.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    let refused = tokio::task::block_in_place(|| client.answer_to(3, common::PATIENCE));
    let refused = refused.expect("a request during the drain is answered");
    assert_shutting_down(&refused);
    hold.release.add_permits(1);
    let answer = tokio::task::block_in_place(|| client.answer_to(2, common::PATIENCE));
    let answer = answer.expect("the call in flight is answered");
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("released 1"), "{answer}");
    let code = tokio::task::block_in_place(|| client.exit_within(common::PATIENCE));
    assert_eq!(code, Some(0));
    upstream.close().await;
}

/// A stdio call still in flight when the drain's grace runs out gets a
/// JSON-RPC error saying the gateway is shutting down, and the gateway
/// exits 0 soon after: the client is never left waiting on its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_call_outliving_the_grace_is_told_the_gateway_is_shutting_down() {
    use std::time::{Duration, Instant};
    let hold = Arc::new(Hold::default());
    let upstream = held_upstream(hold.clone()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut client = stdio_call_in_flight(dir.path(), &upstream, &hold).await;
    let signalled = Instant::now();
    // The grace is 10 s; then the close of the upstreams (at most 3 s).
    let answer = tokio::task::block_in_place(|| client.answer_to(2, Duration::from_secs(20)));
    let answer = answer.expect("the call cut off by the shutdown is answered");
    assert_shutting_down(&answer);
    let code = tokio::task::block_in_place(|| client.exit_within(Duration::from_secs(20)));
    assert_eq!(code, Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(16),
        "exited {:?} after the signal",
        signalled.elapsed()
    );
    upstream.close().await;
}

/// A stdio session's end closes a 2026-07-28 upstream cleanly: every
/// listen the gateway opened on it (tool list, prompt/resource lists) is
/// cancelled before its stdin closes, so the child exits on EOF instead of
/// waiting out rmcp's drain and being ended by the close bound.
#[test]
fn the_end_of_a_stdio_session_closes_a_listening_upstream_cleanly() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    let Some(fixture) = common::conformance_fixture() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(
        dir.path(),
        &format!(
            "[gateway]\nstore = \"memory\"\nprefix = \"never\"\n\n\
             [upstreams.fixture]\ntype = \"stdio\"\ncommand = {}\nargs = [\"--stdio\"]\n",
            toml_string(&fixture.display().to_string())
        ),
    );
    let mut gateway = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["serve", "--stdio", "--config"])
        .arg(&config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gateway starts");
    let mut stdin = gateway.stdin.take().expect("stdin");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"lifecycle","version":"1"}}}}}}"#
    )
    .expect("initialize sent");
    let mut stdout = BufReader::new(gateway.stdout.take().expect("stdout"));
    let mut answer = String::new();
    stdout.read_line(&mut answer).expect("initialize answered");
    assert!(answer.contains("\"id\":1"), "initialize answer: {answer}");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .expect("initialized sent");
    drop(stdin);
    let out = gateway.wait_with_output().expect("the gateway exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}; stderr:\n{stderr}",
        out.status
    );
    assert!(
        !stderr.contains("did not close"),
        "the upstream had to be ended by force; stderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("ended with an error"),
        "a clean session end was logged as an error; stderr:\n{stderr}"
    );
}

/// SIGTERM while an upstream is still connecting (a stdio server that never
/// answers its handshake, with a long `timeout_ms`) stops `serve` at once,
/// exit 0, and the child it had started does not outlive it.
#[test]
fn sigterm_while_an_upstream_connects_stops_serve_at_once() {
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().expect("temp dir");
    let mute = dir.path().join("mute.sh");
    std::fs::write(&mute, "#!/bin/sh\nexec sleep 300\n").expect("script written");
    std::fs::set_permissions(&mute, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = write_config(
        dir.path(),
        "[gateway]\nstore = \"memory\"\n\n[upstreams.mute]\ntype = \"stdio\"\ncommand = \"./mute.sh\"\ntimeout_ms = 300000\n",
    );
    let mut gateway = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve starts");
    let mut children = Vec::new();
    eventually("the upstream's child is started", || {
        children = child_pids(gateway.id());
        !children.is_empty()
    });

    common::send_signal(gateway.id(), "TERM");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = gateway.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = gateway.kill();
            let _ = gateway.wait();
            for pid in &children {
                common::send_signal(*pid, "KILL");
            }
            panic!("serve ignored SIGTERM while an upstream was connecting");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    eventually("the child ends with the gateway", || {
        children.iter().all(|pid| !alive(*pid))
    });
}

/// `serve` takes its port before it connects anything: a port in use fails
/// at once (exit 2), with one message, before any upstream is started (one
/// that would take its whole `timeout_ms` leaves a mark when it starts).
#[test]
fn a_busy_port_fails_at_once_with_one_message() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port to hold");
    let port = taken.local_addr().expect("its address").port();
    let dir = tempfile::tempdir().expect("temp dir");
    // The upstream leaves a mark when it is started at all.
    let spawned = dir.path().join("spawned");
    let config = common::write_config(
        dir.path(),
        &format!(
            "[gateway]\nstore = \"memory\"\n\n[upstreams.slow]\ntype = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\ntimeout_ms = 60000\n",
            toml_string(&format!("touch '{}'; sleep 60", spawned.display()))
        ),
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("portcullis starts");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("serve was still waiting for its upstreams with its port taken");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("its output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("cannot listen on").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("in use").count(), 1, "{stderr}");
    assert!(
        !spawned.exists(),
        "an upstream was started although the port was taken"
    );
    drop(taken);
}
