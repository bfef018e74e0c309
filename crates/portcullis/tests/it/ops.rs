//! Operations, end to end on the real binary: graceful shutdown (in-flight
//! calls finish, no child survives, a child killed from outside does not
//! keep the gateway alive), `/healthz` and `/metrics`, JSON logs, and config
//! reload (on change and on SIGHUP) that keeps unchanged connections.
//!
//! The upstream is the binary's own `demo-upstream` (a stdio child).

use crate::common;

use std::io::{BufRead, BufReader, Write};

use common::{
    DEMO, PATIENCE, alive, assert_nowhere_in, audit_trail, child_pids, eventually, http, mcp,
    mcp_request, mcp_streaming, portcullis, send_signal, serve, serve_on, serve_stdio, serve_with,
    text, tool_names, write_config,
};
use serde_json::{Value, json};

/// A GET of `path` at `authority` naming `host` as its `Host`, with extra
/// `headers` (each ending in CRLF); the status and the whole response.
fn get(authority: &str, path: &str, host: &str, headers: &str) -> (u16, String) {
    http(
        authority,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n"),
    )
}

/// Writes the config most tests need: the demo upstream, an in-memory
/// store, everything else at its default.
fn demo_config(dir: &std::path::Path) -> std::path::PathBuf {
    write_config(dir, &format!("[gateway]\nstore = \"memory\"\n\n{DEMO}"))
}

/// The body after the headers.
fn body(response: &str) -> &str {
    response.split("\r\n\r\n").nth(1).unwrap_or_default()
}

#[test]
fn sigterm_lets_the_in_flight_call_finish_and_no_child_survives() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = demo_config(dir.path());
    let mut served = serve(&config);
    let children = child_pids(served.child.id());
    assert_eq!(children.len(), 1, "one stdio child: {children:?}");

    let authority = served.authority();
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "count", "arguments": {"n": 25}, "_meta": {"progressToken": "slow"}}});
    let mut lines = mcp_streaming(&authority, &call);
    let first = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("notifications/progress"));
    assert!(first.is_some(), "the call never got going");

    served.signal("TERM");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(
        rest.iter().any(|l| l.contains("counted to 25")),
        "the in-flight call was cut off: {rest:?}"
    );
    assert_eq!(served.exit_code(), Some(0));
    for pid in children {
        assert!(!alive(pid), "the stdio child {pid} outlived the gateway");
    }
}

#[test]
fn a_child_killed_from_outside_does_not_keep_the_gateway_alive() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Not reopened, so the dead child stays dead (tests/reconnect.rs
    // covers the gateway restarting it).
    let config = write_config(
        dir.path(),
        &format!("[gateway]\nstore = \"memory\"\nreconnect_max_ms = 0\n\n{DEMO}"),
    );
    for signal in ["TERM", "KILL"] {
        let mut served = serve(&config);
        let children = child_pids(served.child.id());
        assert_eq!(children.len(), 1, "{children:?}");
        send_signal(children[0], signal);
        let authority = served.authority();
        // The gateway notices: the upstream is reported down.
        eventually("the upstream is reported down", || {
            let (_, response) = get(&authority, "/healthz", &authority, "");
            body(&response).contains("\"down\":1")
        });
        // A call now fails cleanly instead of hanging.
        let (status, response) = mcp(
            &authority,
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}),
        );
        assert_eq!(status, 200, "{response}");
        assert!(response.contains("\"isError\":true"), "{response}");

        served.signal("TERM");
        assert_eq!(served.exit_code(), Some(0), "after a SIG{signal}ed child");
        assert!(!alive(children[0]));
    }
}

#[test]
fn healthz_is_open_and_metrics_need_the_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &format!(
            "[gateway]\nstore = \"memory\"\nprefix = \"never\"\ntoken = \"${{OPS_TEST_TOKEN}}\"\n\n{DEMO}\n[upstreams.broken]\ntype = \"stdio\"\ncommand = \"./no-such-server\"\n"
        ),
    );
    let served = serve_with(&config, &[], &[("OPS_TEST_TOKEN", "t0ken-for-ops")]);
    let authority = served.authority();

    let (status, response) = get(&authority, "/healthz", &authority, "");
    assert_eq!(status, 200, "{response}");
    let health: Value = serde_json::from_str(body(&response)).expect("JSON");
    assert_eq!(
        health,
        json!({"status": "degraded", "upstreams": {"up": 1, "down": 1, "needs_login": 0},
               "tools": {"available": 3, "quarantined": 0, "withheld": 1}})
    );
    let (status, _) = get(&authority, "/healthz", "evil.example", "");
    assert_eq!(status, 403, "the Host guard covers /healthz");
    let (status, _) = get(
        &authority,
        "/healthz",
        &authority,
        "Origin: http://evil.example\r\n",
    );
    assert_eq!(status, 403, "the Origin guard covers /healthz");

    let (status, _) = get(&authority, "/metrics", &authority, "");
    assert_eq!(status, 401, "no token, no metrics");
    let (status, _) = get(&authority, "/nothing-here", &authority, "");
    assert_eq!(status, 404);

    let bearer = "Authorization: Bearer t0ken-for-ops\r\n";
    for (id, text) in [(1, "one"), (2, "two")] {
        let (status, response) = http(
            &authority,
            &mcp_request(
                &authority,
                &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}}),
                bearer,
            ),
        );
        assert_eq!(status, 200, "{response}");
    }
    let (status, _) = http(
        &authority,
        &mcp_request(
            &authority,
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "write_note", "arguments": {"text": "x"}}}),
            bearer,
        ),
    );
    assert_eq!(status, 200);

    let (status, response) = get(&authority, "/metrics", &authority, bearer);
    assert_eq!(status, 200, "{response}");
    assert!(response.contains("text/plain; version=0.0.4"), "{response}");
    let text = body(&response);
    for expected in [
        "portcullis_calls_total{upstream=\"demo\",tool=\"echo\",outcome=\"ok\"} 2",
        "portcullis_call_duration_seconds_count{upstream=\"demo\",tool=\"echo\"} 2",
        "portcullis_call_errors_total{upstream=\"demo\",tool=\"echo\"} 0",
        // A withheld tool is refused before any upstream sees it.
        "outcome=\"refused\"} 1",
        "portcullis_tools_withheld 1",
        "portcullis_tools_quarantined 0",
        "portcullis_upstream_up{upstream=\"demo\"} 1",
        "portcullis_upstream_up{upstream=\"broken\"} 0",
    ] {
        assert!(text.contains(expected), "{expected} missing from:\n{text}");
    }
}

/// Each refused Host, Origin or token is one WARN line on stderr naming the
/// header, its value escaped (never the token), and the setting that would
/// admit it; the client gets a body saying what was refused.
#[test]
fn a_refused_host_origin_or_token_is_logged_with_the_way_to_allow_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &format!("[gateway]\nstore = \"memory\"\ntoken = \"${{OPS_TEST_TOKEN}}\"\n\n{DEMO}"),
    );
    let served = serve_with(&config, &[], &[("OPS_TEST_TOKEN", "t0ken-for-ops")]);
    let authority = served.authority();

    let (status, response) = get(&authority, "/healthz", "evil.example:1", "");
    assert_eq!(status, 403);
    assert!(body(&response).contains("Host"), "{response}");
    let line = served.wait_for_line("refused a request");
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains(r#"Host "evil.example:1""#), "{line}");
    assert!(line.contains("allowed_hosts"), "{line}");

    // A right-to-left override in the value is written as bytes, not obeyed.
    let (status, response) = get(
        &authority,
        "/healthz",
        &authority,
        "Origin: http://evil.example\u{202e}moc\r\n",
    );
    assert_eq!(status, 403);
    assert!(body(&response).contains("Origin"), "{response}");
    let line = served.wait_for_line("refused a request");
    assert!(
        line.contains(r#"Origin "http://evil.example\xe2\x80\xaemoc""#),
        "{line}"
    );
    assert!(line.contains("allowed_origins"), "{line}");
    // The gateway's own origin is admitted.
    let (status, _) = get(
        &authority,
        "/healthz",
        &authority,
        &format!("Origin: http://{authority}\r\n"),
    );
    assert_eq!(status, 200);

    let (status, response) = http(
        &authority,
        &mcp_request(
            &authority,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            "Authorization: Bearer wr0ng-t0ken\r\n",
        ),
    );
    assert_eq!(status, 401);
    assert!(body(&response).contains("token"), "{response}");
    let line = served.wait_for_line("refused a request");
    assert!(line.contains("bearer token does not match"), "{line}");
    assert!(!line.contains("wr0ng-t0ken"), "{line}");
}

/// `[gateway] max_connections` caps the connections `serve` holds: one
/// more is answered 503 at once; a freed slot admits the next client.
#[test]
fn the_connection_cap_comes_from_the_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &format!("[gateway]\nstore = \"memory\"\nmax_connections = 2\n\n{DEMO}"),
    );
    let served = serve(&config);
    let authority = served.authority();
    let first = std::net::TcpStream::connect(&authority).expect("connects");
    let _second = std::net::TcpStream::connect(&authority).expect("connects");
    eventually("the third connection is refused", || {
        get(&authority, "/healthz", &authority, "").0 == 503
    });
    served.wait_for_line("connection limit (max_connections)");
    drop(first);
    eventually("a freed slot admits the next client", || {
        get(&authority, "/healthz", &authority, "").0 == 200
    });
}

#[test]
fn json_logs_carry_call_fields_and_never_argument_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = demo_config(dir.path());
    let served = serve_with(&config, &["--log-format", "json"], &[]);
    let authority = served.authority();
    let (status, _) = mcp(
        &authority,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "sup3r-secret-value"}}}),
    );
    assert_eq!(status, 200);
    let line = served.wait_for_line("\"tool call\"");
    let event: Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(event["tool"], "echo", "{event}");
    assert_eq!(event["upstream"], "demo", "{event}");
    assert_eq!(event["outcome"], "ok", "{event}");
    assert_eq!(event["decision"], "allowed", "{event}");
    // Whole milliseconds, not `0.0079…`.
    assert!(event["duration_ms"].is_u64(), "{event}");
    assert!(!line.contains("sup3r-secret-value"), "{line}");
}

#[test]
fn a_changed_config_is_applied_without_restarting_unchanged_children() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = demo_config(dir.path());
    let served = serve(&config);
    let authority = served.authority();
    let children = child_pids(served.child.id());
    assert_eq!(children.len(), 1, "{children:?}");
    assert_eq!(tool_names(&authority), ["add", "count", "echo"]);

    // The gate opens to writes: write_note appears, the child stays.
    write_config(
        dir.path(),
        &format!("[gateway]\nstore = \"memory\"\nallow_write = true\n\n{DEMO}"),
    );
    served.wait_for_line("config reloaded");
    assert_eq!(
        tool_names(&authority),
        ["add", "count", "echo", "write_note"]
    );
    assert_eq!(
        child_pids(served.child.id()),
        children,
        "the child was restarted"
    );

    // A broken config is refused and the last good one keeps serving.
    write_config(dir.path(), "[gateway]\nallow_write = \"yes\"\n");
    let refused = served.wait_for_line("config reload rejected");
    assert!(refused.contains("allow_write"), "{refused}");
    assert_eq!(
        tool_names(&authority),
        ["add", "count", "echo", "write_note"]
    );

    // SIGHUP re-reads it too.
    write_config(
        dir.path(),
        &format!("[gateway]\nstore = \"memory\"\nallow_write = true\n\n{DEMO}"),
    );
    served.wait_for_line("config reloaded");
    served.signal("HUP");
    served.wait_for_line("SIGHUP: re-reading the config");
    served.wait_for_line("config reloaded");
    assert_eq!(child_pids(served.child.id()), children);
}

#[test]
fn adding_and_removing_an_upstream_keeps_the_unchanged_ones_connected() {
    const MORE: &str = "[upstreams.more]\ntype = \"stdio\"\ncommand = \"portcullis\"\nargs = [\"demo-upstream\"]\n";
    let dir = tempfile::tempdir().expect("tempdir");
    let config = demo_config(dir.path());
    let served = serve(&config);
    let authority = served.authority();
    let first = child_pids(served.child.id());
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(tool_names(&authority), ["add", "count", "echo"]);

    // A second upstream: connected beside the first, whose child stays; with
    // two sources the auto prefix qualifies every name.
    write_config(
        dir.path(),
        &format!("[gateway]\nstore = \"memory\"\n\n{DEMO}\n{MORE}"),
    );
    served.wait_for_line("upstreams reconfigured");
    served.wait_for_line("config reloaded");
    let both = child_pids(served.child.id());
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(
        both.contains(&first[0]),
        "the unchanged child was restarted: {first:?} → {both:?}"
    );
    assert_eq!(
        tool_names(&authority),
        [
            "demo__add",
            "demo__count",
            "demo__echo",
            "more__add",
            "more__count",
            "more__echo"
        ]
    );

    // Removing it closes its child only.
    demo_config(dir.path());
    served.wait_for_line("upstreams reconfigured");
    served.wait_for_line("config reloaded");
    let added: Vec<u32> = both
        .iter()
        .copied()
        .filter(|pid| *pid != first[0])
        .collect();
    eventually("the removed upstream's child exits", || {
        added.iter().all(|pid| !alive(*pid))
    });
    assert!(alive(first[0]), "the unchanged child died");
    assert_eq!(tool_names(&authority), ["add", "count", "echo"]);
}

#[test]
fn stdio_clients_hear_that_the_tool_list_changed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = demo_config(dir.path());
    let mut child = serve_stdio(&config);
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    writeln!(stdin, "{initialize}").expect("written");
    let answer: Value =
        serde_json::from_str(&stdout.next().and_then(Result::ok).unwrap_or_default())
            .expect("JSON-RPC on stdout");
    assert_eq!(
        answer["result"]["capabilities"]["tools"]["listChanged"], true,
        "{answer}"
    );
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .expect("written");
    // Answered only once the initialized notification was handled (the
    // session is known to the gateway from then on).
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    )
    .expect("written");
    let pong = stdout.next().and_then(Result::ok).unwrap_or_default();
    assert!(pong.contains("\"id\":2"), "{pong}");

    write_config(
        dir.path(),
        &format!("[gateway]\nstore = \"memory\"\nallow_write = true\n\n{DEMO}"),
    );
    let notified = stdout
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("notifications/tools/list_changed"));
    assert!(notified.is_some(), "no list_changed before stdout closed");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    )
    .expect("written");
    let listed = stdout.next().and_then(Result::ok).unwrap_or_default();
    assert!(listed.contains("write_note"), "{listed}");
    drop(stdin);
    let status = child.wait().expect("exits when stdin closes");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn every_call_is_in_the_audit_trail_with_its_argument_shape_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The default store: SQLite in data_dir, beside the config.
    let config = write_config(
        dir.path(),
        &format!(
            "[gateway]\nidentity = {{ user = {{ userId = \"ops-agent\" }}, perms = [] }}\n\n{DEMO}"
        ),
    );
    let before = std::time::SystemTime::now();
    let mut served = serve(&config);
    let authority = served.authority();
    let secret = "audit-s3cret-value";
    for (id, message) in [
        (1, json!({"name": "echo", "arguments": {"text": secret}})),
        (2, json!({"name": "echo", "arguments": {}})),
        (
            3,
            json!({"name": "write_note", "arguments": {"text": secret}}),
        ),
    ] {
        let (status, response) = mcp(
            &authority,
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": message}),
        );
        assert_eq!(status, 200, "{response}");
    }
    served.signal("TERM");
    assert_eq!(served.exit_code(), Some(0));

    // `portcullis call` leaves the same record, in the same store.
    let arguments = json!({"a": 2, "b": 3, "note": secret}).to_string();
    let called = portcullis(&[
        "call",
        "--config",
        config.to_str().expect("utf-8 path"),
        "add",
        &arguments,
    ]);
    assert_eq!(called.status.code(), Some(0), "{}", text(&called.stderr));
    let after = std::time::SystemTime::now();

    let records = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(audit_trail(&dir.path().join(".portcullis")));
    assert_eq!(records.len(), 4, "{records:?}");
    // Newest first.
    let (from_cli, refused, invalid, ok) = (&records[0], &records[1], &records[2], &records[3]);
    assert_eq!(ok.tool, "echo");
    assert_eq!(ok.identity.as_deref(), Some("ops-agent"));
    assert_eq!(ok.decision.as_str(), "allowed");
    assert_eq!(ok.outcome.kind(), "ok");
    assert_eq!(ok.argument_shape.as_value(), &json!({"text": "string"}));
    assert_eq!(invalid.decision.as_str(), "invalid", "{invalid:?}");
    assert_eq!(invalid.argument_shape.as_value(), &json!({}));
    assert_eq!(refused.tool, "write_note");
    assert_eq!(refused.decision.as_str(), "denied", "{refused:?}");
    assert_eq!(from_cli.tool, "add");
    assert_eq!(from_cli.identity.as_deref(), Some("ops-agent"));
    assert_eq!(from_cli.decision.as_str(), "allowed", "{from_cli:?}");
    assert_eq!(from_cli.outcome.kind(), "ok", "{from_cli:?}");
    assert_eq!(
        from_cli.argument_shape.as_value(),
        &json!({"a": "integer", "b": "integer", "note": "string"})
    );
    for record in &records {
        assert!(
            before <= record.time && record.time <= after,
            "{record:?} outside the run"
        );
        let took = after.duration_since(before).unwrap_or_default();
        assert!(
            u128::from(record.duration_ms) <= took.as_millis(),
            "{record:?} took longer than the whole run"
        );
    }
    // The value is nowhere on disk.
    assert_nowhere_in(&dir.path().join(".portcullis"), secret);
}

/// `/healthz` as JSON.
fn health(authority: &str) -> Value {
    let (status, response) = get(authority, "/healthz", authority, "");
    assert_eq!(status, 200, "{response}");
    serde_json::from_str(body(&response)).expect("JSON")
}

/// `/metrics` as text.
fn metrics(authority: &str) -> String {
    let (status, response) = get(authority, "/metrics", authority, "");
    assert_eq!(status, 200, "{response}");
    body(&response).to_owned()
}

/// A gateway whose one upstream is remote: another gateway serving the
/// demo over Streamable HTTP, which a test stops and starts again.
struct BehindARemote {
    /// The remote gateway (the upstream).
    remote: common::Served,
    /// Its config, to start it again.
    remote_config: std::path::PathBuf,
    /// The gateway under test.
    gateway: common::Served,
    _dirs: [tempfile::TempDir; 2],
}

impl BehindARemote {
    /// Both gateways running, the one under test pinging its upstream
    /// every `health_interval_ms` (0: never).
    fn start(health_interval_ms: u64) -> Self {
        let remote_dir = tempfile::tempdir().expect("tempdir");
        let remote_config = demo_config(remote_dir.path());
        let remote = serve(&remote_config);
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(
            dir.path(),
            &format!(
                "[gateway]\nstore = \"memory\"\nhealth_interval_ms = {health_interval_ms}\n\n[upstreams.remote]\ntype = \"streamable-http\"\nurl = \"{}\"\ntimeout_ms = 5000\n",
                remote.url
            ),
        );
        let gateway = serve(&config);
        Self {
            remote,
            remote_config,
            gateway,
            _dirs: [remote_dir, dir],
        }
    }

    /// Stops the remote gateway (cleanly: exit 0).
    fn stop_remote(&mut self) {
        assert_eq!(self.remote.terminate(), Some(0));
    }

    /// Starts the remote gateway again on the address it had; running
    /// until the returned value is dropped.
    fn restart_remote(&self) -> common::Served {
        serve_on(&self.remote_config, &self.remote.authority(), &[], &[])
    }

    /// Calls `echo` with `text` through the gateway under test.
    fn echo(&self, id: u32, text: &str) -> (u16, String) {
        mcp(
            &self.gateway.authority(),
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}}),
        )
    }
}

#[test]
fn a_remote_upstream_that_stops_is_reported_down_and_up_again_when_back() {
    let mut pair = BehindARemote::start(100);
    let authority = pair.gateway.authority();
    assert_eq!(
        health(&authority)["upstreams"],
        json!({"up": 1, "down": 0, "needs_login": 0})
    );
    assert!(metrics(&authority).contains("portcullis_upstream_up{upstream=\"remote\"} 1"));

    // Stopped: the health check notices without any call being made.
    pair.stop_remote();
    eventually("the stopped upstream is reported down", || {
        health(&authority)["upstreams"] == json!({"up": 0, "down": 1, "needs_login": 0})
    });
    assert_eq!(health(&authority)["status"], "degraded");
    assert!(metrics(&authority).contains("portcullis_upstream_up{upstream=\"remote\"} 0"));
    let (status, response) = pair.echo(1, "anyone?");
    assert_eq!(status, 200, "{response}");
    assert!(response.contains("\"isError\":true"), "{response}");

    // Back on the same address: up again, and calls go through.
    let _back = pair.restart_remote();
    eventually("the upstream is reported up again", || {
        health(&authority)["upstreams"] == json!({"up": 1, "down": 0, "needs_login": 0})
    });
    assert!(metrics(&authority).contains("portcullis_upstream_up{upstream=\"remote\"} 1"));
    let (status, response) = pair.echo(2, "welcome back");
    assert_eq!(status, 200, "{response}");
    assert!(response.contains("welcome back"), "{response}");
    assert!(!response.contains("\"isError\":true"), "{response}");
}

#[test]
fn with_the_pings_off_a_failed_call_marks_a_remote_upstream_down_and_an_answer_up() {
    let mut pair = BehindARemote::start(0);
    let authority = pair.gateway.authority();

    pair.stop_remote();
    // No ping is sent, so nothing has noticed yet.
    assert_eq!(
        health(&authority)["upstreams"],
        json!({"up": 1, "down": 0, "needs_login": 0})
    );
    // The failed call is what tells: down at once.
    let (_, response) = pair.echo(1, "anyone?");
    assert!(response.contains("\"isError\":true"), "{response}");
    assert_eq!(
        health(&authority)["upstreams"],
        json!({"up": 0, "down": 1, "needs_login": 0})
    );

    // Back: the next call is still sent, and its answer marks it up.
    let _back = pair.restart_remote();
    let (_, response) = pair.echo(2, "welcome back");
    assert!(response.contains("welcome back"), "{response}");
    assert_eq!(
        health(&authority)["upstreams"],
        json!({"up": 1, "down": 0, "needs_login": 0})
    );
    assert!(metrics(&authority).contains("portcullis_upstream_up{upstream=\"remote\"} 1"));
}

/// A client handler that reports `notifications/tools/list_changed`.
#[derive(Clone)]
struct ListWatcher(tokio::sync::mpsc::UnboundedSender<()>);

impl rmcp::ClientHandler for ListWatcher {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_clients_of_both_eras_hear_that_the_tool_list_changed() {
    use rmcp::ServiceExt as _;
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};

    let dir = tempfile::tempdir().expect("tempdir");
    let config = demo_config(dir.path());
    let served = tokio::task::block_in_place(|| serve(&config));
    let url = served.url.clone();

    // An initialize-era client: a session, told on its session stream.
    let (legacy_tx, mut legacy_heard) = tokio::sync::mpsc::unbounded_channel();
    let legacy = ListWatcher(legacy_tx)
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.clone(),
        ))
        .await
        .expect("an initialize-era client connects");
    let advertised = legacy
        .peer_info()
        .and_then(|info| info.capabilities.tools.clone())
        .and_then(|tools| tools.list_changed);
    assert_eq!(advertised, Some(true));

    // A 2026-07-28 client: stateless, told on a subscriptions/listen stream.
    let modern = ()
        .serve_with_lifecycle(
            rmcp::transport::StreamableHttpClientTransport::from_uri(url.clone()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a 2026 client connects");
    let mut subscription = modern
        .peer()
        .listen(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build(),
        )
        .await
        .expect("subscriptions/listen is accepted");

    write_config(
        dir.path(),
        &format!("[gateway]\nstore = \"memory\"\nallow_write = true\n\n{DEMO}"),
    );
    tokio::time::timeout(PATIENCE, legacy_heard.recv())
        .await
        .expect("the session client was told in time")
        .expect("the session client was told");
    let heard = tokio::time::timeout(PATIENCE, subscription.next())
        .await
        .expect("the subscriber was told in time")
        .expect("the subscription stayed open");
    assert!(
        matches!(
            heard,
            Some(rmcp::model::ServerNotification::ToolListChangedNotification(_))
        ),
        "{heard:?}"
    );
    let names: Vec<String> = modern
        .list_all_tools()
        .await
        .expect("tools/list")
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.iter().any(|n| n == "write_note"), "{names:?}");
    let _ = legacy.cancel().await;
    let _ = modern.cancel().await;
    drop(served);
}

/// One handler serves every method: a 2026-07-28 client's
/// `subscriptions/listen` stream carries an upstream's prompt list change
/// too, not only the gateway's own tool list changes. (The gateway used to
/// acknowledge a prompt subscription and then deliver only tool changes on
/// it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_subscriber_hears_an_upstreams_prompt_list_change() {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};

    let Some(fixture) = common::conformance_fixture() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &format!(
            "[gateway]\nstore = \"memory\"\nprefix = \"always\"\n\n[upstreams.fixture]\ntype = \"stdio\"\ncommand = {}\nargs = [\"--stdio\"]\n",
            common::toml_string(&fixture.display().to_string())
        ),
    );
    let served = tokio::task::block_in_place(|| serve(&config));
    let modern = ()
        .serve_with_lifecycle(
            rmcp::transport::StreamableHttpClientTransport::from_uri(served.url.clone()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a 2026 client connects");
    let mut subscription = modern
        .peer()
        .listen(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .build(),
        )
        .await
        .expect("subscriptions/listen is accepted");
    modern
        .call_tool(rmcp::model::CallToolRequestParams::new(
            "fixture__test_trigger_prompt_change",
        ))
        .await
        .expect("the trigger tool answers");
    let heard = tokio::time::timeout(PATIENCE, subscription.next())
        .await
        .expect("the subscriber was told in time")
        .expect("the subscription stayed open");
    assert!(
        matches!(
            heard,
            Some(rmcp::model::ServerNotification::PromptListChangedNotification(_))
        ),
        "{heard:?}"
    );
    let _ = modern.cancel().await;
    drop(served);
}

/// Runs `portcullis` with `args` and extra environment; the output.
fn portcullis_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the portcullis binary runs")
}

/// `serve` on a free port with `env`, stopped after `seconds`: every line
/// it wrote to stderr.
fn serve_stderr_for(config: &std::path::Path, env: &[(&str, &str)], seconds: u64) -> String {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("serve starts");
    let lines = common::stderr_lines(&mut child);
    std::thread::sleep(std::time::Duration::from_secs(seconds));
    send_signal(child.id(), "TERM");
    let _ = child.wait();
    lines.try_iter().collect::<Vec<_>>().join("\n")
}

#[test]
fn secrets_in_upstream_urls_and_headers_never_reach_the_output() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("PORTCULLIS_TEST_HEADER", "HEADERSECRET-from-env")];
    // Nothing listens on port 1: every connect fails, and is logged.
    let config = write_config(
        dir.path(),
        "[gateway]\nstore = \"memory\"\nreconnect_max_ms = 500\n\n\
         [upstreams.remote]\ntype = \"streamable-http\"\n\
         url = \"http://127.0.0.1:1/mcp?api_key=SECRETVALUE\"\n\
         headers = { Authorization = \"Bearer ${PORTCULLIS_TEST_HEADER}\" }\n",
    );
    let path = config.to_str().expect("utf-8 path");
    for args in [
        &["check", "--config", path][..],
        &["tools", "--config", path],
        &["tools", "--json", "--config", path],
    ] {
        let out = portcullis_env(args, &env);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!all.contains("SECRETVALUE"), "{args:?}: {all}");
        assert!(!all.contains("HEADERSECRET"), "{args:?}: {all}");
    }
    // `check` still says which upstream and where, credentials masked.
    let out = portcullis_env(&["check", "--config", path], &env);
    assert!(
        text(&out.stdout).contains("http://127.0.0.1:1/mcp?api_key=***"),
        "{}",
        text(&out.stdout)
    );
    // `serve` retries the connect (and rmcp logs each failure with the
    // request's URL): none of those lines carries the key.
    let stderr = serve_stderr_for(&config, &env, 3);
    assert!(
        stderr.matches("connect attempt").count() >= 2,
        "several attempts were logged: {stderr}"
    );
    assert!(!stderr.contains("SECRETVALUE"), "{stderr}");
    assert!(!stderr.contains("HEADERSECRET"), "{stderr}");

    // With userinfo the URL is refused, and the refusal repeats neither the
    // password nor the query.
    let config = write_config(
        dir.path(),
        "[gateway]\nstore = \"memory\"\n\n[upstreams.remote]\ntype = \"streamable-http\"\n\
         url = \"http://user:SECRETVALUE@127.0.0.1:1/mcp?api_key=SECRETVALUE\"\n",
    );
    let path = config.to_str().expect("utf-8 path");
    for args in [
        &["check", "--config", path][..],
        &["tools", "--config", path],
        &["serve", "--listen", "127.0.0.1:0", "--config", path],
    ] {
        let out = portcullis_env(args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(all.contains("userinfo"), "{args:?}: {all}");
        assert!(!all.contains("SECRETVALUE"), "{args:?}: {all}");
    }
}

#[test]
fn a_config_error_shows_the_variable_never_its_value() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(
        dir.path(),
        "[upstreams.remote]\ntype = \"streamable-http\"\nurl = \"${PORTCULLIS_TEST_URL}\"\n",
    );
    let path = config.to_str().expect("utf-8 path");
    for value in [
        // Plain http to a host that is not loopback.
        "http://example.com/ENVSECRET/mcp?k=ENVSECRET",
        // Not http at all.
        "ftp://example.com/ENVSECRET",
        "not a url ENVSECRET",
    ] {
        for command in ["check", "tools", "serve"] {
            let out = portcullis_env(
                &[command, "--config", path],
                &[("PORTCULLIS_TEST_URL", value)],
            );
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} {value}: {err}");
            assert!(err.contains("upstreams.remote.url"), "{err}");
            assert!(err.contains("${PORTCULLIS_TEST_URL}"), "{err}");
            assert!(!err.contains("ENVSECRET"), "{command} {value}: {err}");
        }
    }
}

#[test]
fn an_upstreams_error_text_cannot_forge_log_lines() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A stdio "server" answering every request with a JSON-RPC error whose
    // message carries a line break, a fake log line, a colour escape and a
    // right-to-left override.
    let script = dir.path().join("forge.sh");
    std::fs::write(
        &script,
        r#"while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  [ -n "$id" ] || continue
  printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"boom\\n2026-01-01T00:00:00Z ERROR forged \\u001b[31mred\\u202e"}}\n' "$id"
done
"#,
    )
    .expect("script written");
    let config = write_config(
        dir.path(),
        &format!(
            "[gateway]\nstore = \"memory\"\n\n[upstreams.forge]\ntype = \"stdio\"\ncommand = \"sh\"\nargs = [{}]\n",
            common::toml_string(&script.display().to_string())
        ),
    );
    let out = portcullis(&["tools", "--config", config.to_str().expect("utf-8 path")]);
    let err = text(&out.stderr);
    // The error was logged (escaped, on its own line)…
    assert!(
        err.contains("boom\\n2026-01-01T00:00:00Z ERROR forged \\u{1b}[31mred\\u{202e}"),
        "{err}"
    );
    // …and forged nothing.
    assert!(
        !err.lines().any(|l| l.starts_with("2026-01-01T00:00:00Z")),
        "a forged line: {err}"
    );
    assert!(!err.contains('\u{1b}'), "a raw escape: {err:?}");
    assert!(!err.contains('\u{202e}'), "a raw override: {err:?}");
}

#[cfg(unix)]
#[test]
fn the_data_directory_and_the_store_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let dir = tempfile::tempdir().expect("temp dir");
    // The default store: SQLite in a new data_dir.
    let config = write_config(dir.path(), "[gateway]\ndata_dir = \"state/portcullis\"\n");
    let path = config.to_str().expect("utf-8 path");
    let out = portcullis(&["tools", "--config", path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let data_dir = dir.path().join("state/portcullis");
    let store = data_dir.join("store.db");
    assert_eq!(mode(&data_dir), 0o700);
    assert_eq!(mode(&dir.path().join("state")), 0o700);
    assert_eq!(mode(&store), 0o600);
    // A store left readable by others (an older version made it 0644) is
    // made private when opened again.
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = portcullis(&["tools", "--config", path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(mode(&store), 0o600);
}

/// The attacker's page: three `fetch`es of the gateway at `?gw=URL`, each
/// outcome (the status and body the page could read, or the error it got)
/// posted back to `/report` on the page's own server.
///
/// `list` and `call` are what an MCP client in a page would send
/// (`Content-Type: application/json` and the MCP headers, so the browser
/// asks first with a CORS preflight); `simple` is a "simple request"
/// (`text/plain`, only safelisted headers) that the browser sends without asking,
/// so only the server's own Origin check stands in its way.
const ATTACKER_PAGE: &str = r#"<!doctype html>
<html><body><pre id="result">pending</pre><script>
const gw = new URLSearchParams(location.search).get("gw");
const meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
              "io.modelcontextprotocol/clientCapabilities": {}};
const mcpHeaders = (method, name) => {
  const h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method};
  if (name) h["Mcp-Name"] = name;
  return h;
};
const out = {};
async function attempt(name, init) {
  try {
    const r = await fetch(gw, init);
    out[name] = {status: r.status, body: await r.text()};
  } catch (e) {
    out[name] = {error: String(e)};
  }
}
(async () => {
  await attempt("list", {method: "POST", headers: mcpHeaders("tools/list"),
    body: JSON.stringify({jsonrpc: "2.0", id: 1, method: "tools/list", params: {_meta: meta}})});
  const note = {jsonrpc: "2.0", id: 2, method: "tools/call",
    params: {name: "write_note", arguments: {text: "planted by a web page"}, _meta: meta}};
  await attempt("call", {method: "POST", headers: mcpHeaders("tools/call", "write_note"),
    body: JSON.stringify(note)});
  // Both headers are CORS-safelisted: no preflight.
  await attempt("simple", {method: "POST",
    headers: {"Content-Type": "text/plain", "Accept": "application/json, text/event-stream"},
    body: JSON.stringify(note)});
  document.getElementById("result").textContent = "done";
  await fetch("/report", {method: "POST", body: JSON.stringify(out)});
})();
</script></body></html>
"#;

/// The attacker's web server on its own loopback port (another origin
/// than the gateway's): `GET` of anything is [`ATTACKER_PAGE`], `POST
/// /report` hands the body to `reports`. Stops when dropped.
struct AttackerSite {
    origin: String,
    reports: std::sync::mpsc::Receiver<String>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for AttackerSite {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn attacker_site() -> AttackerSite {
    use std::sync::atomic::{AtomicBool, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let origin = format!("http://{}", listener.local_addr().expect("address"));
    listener.set_nonblocking(true).expect("non-blocking");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (sender, reports) = std::sync::mpsc::channel();
    let stopped = stop.clone();
    std::thread::spawn(move || {
        while !stopped.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, _)) => serve_attacker(stream, &sender),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(_) => return,
            }
        }
    });
    AttackerSite {
        origin,
        reports,
        stop,
    }
}

/// One request on one connection (each answer closes it).
fn serve_attacker(stream: std::net::TcpStream, reports: &std::sync::mpsc::Sender<String>) {
    use std::io::Read;
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let mut reader = BufReader::new(&stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let (status, content_type, answer) = if request_line.starts_with("POST /report ") {
        let _ = reports.send(String::from_utf8_lossy(&body).into_owned());
        ("204 No Content", "text/plain", "")
    } else if request_line.starts_with("GET /?") {
        ("200 OK", "text/html; charset=utf-8", ATTACKER_PAGE)
    } else {
        ("404 Not Found", "text/plain", "")
    };
    let mut stream = &stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    );
}

/// Chromium on `PATH`, or `None` (outside CI only) with a skip message.
fn chromium() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file());
    match found {
        Some(found) => Some(found),
        None => common::missing(
            std::path::Path::new("chromium"),
            "install it (Debian: apt-get install chromium) to run the browser test",
        ),
    }
}

/// Opens `url` in headless Chromium with a fresh profile and waits for
/// the page's report (the page posts it when its fetches are done).
fn run_page(browser: &std::path::Path, site: &AttackerSite, url: &str) -> Value {
    let profile = tempfile::tempdir().expect("tempdir");
    let mut chromium = std::process::Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            // Containers often have a tiny /dev/shm.
            "--disable-dev-shm-usage",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", url])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chromium starts");
    let report = site.reports.recv_timeout(PATIENCE);
    let _ = chromium.kill();
    let _ = chromium.wait();
    let report = report.expect("the page never reported (did Chromium load it?)");
    serde_json::from_str(&report).expect("the page's report is JSON")
}

/// A web page from another origin in a real browser (headless Chromium)
/// cannot use the gateway: the preflight of an MCP `fetch` and a "simple"
/// `text/plain` POST alike are refused by Origin (403, logged), the write
/// tool never runs, and the page reads nothing. The same page, its origin
/// listed in `allowed_origins`, lists the tools and calls one: so the page
/// and the browser do work, and the refusal is the gateway's.
#[test]
fn a_page_from_another_origin_cannot_call_the_gateway_from_a_browser() {
    let Some(browser) = chromium() else {
        return;
    };
    let site = attacker_site();
    let config_for = |extra: &str| {
        format!(
            "[gateway]\nstore = \"memory\"\nallow_write = true\nprefix = \"never\"\n{extra}\n{DEMO}"
        )
    };

    // The default config: only the gateway's own loopback origins.
    let dir = tempfile::tempdir().expect("tempdir");
    let served = serve(&write_config(dir.path(), &config_for("")));
    let authority = served.authority();
    let page = format!("{}/?gw={}", site.origin, served.url);
    let outcome = run_page(&browser, &site, &page);
    for attempt in ["list", "call", "simple"] {
        let seen = &outcome[attempt];
        assert!(
            seen["error"]
                .as_str()
                .is_some_and(|e| e.contains("Failed to fetch")),
            "the page read an answer to {attempt}: {outcome}"
        );
    }
    let refusals: Vec<String> = served
        .lines_so_far(std::time::Duration::from_millis(500))
        .into_iter()
        .filter(|l| l.contains("refused a request"))
        .collect();
    let from_page = format!(r#"Origin "{}""#, site.origin);
    // Two preflights and the simple POST, each refused by Origin.
    assert_eq!(
        refusals
            .iter()
            .filter(|l| l.contains(&from_page) && l.contains("status=403"))
            .count(),
        3,
        "{refusals:#?}"
    );
    // The page's note was never written: ours is the first.
    let (status, response) = mcp(
        &authority,
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "write_note", "arguments": {"text": "ours"}}}),
    );
    assert_eq!(status, 200, "{response}");
    assert!(response.contains("saved note 1"), "{response}");
    drop(served);

    // The page's origin admitted: it reads the tool list and its call runs.
    let dir = tempfile::tempdir().expect("tempdir");
    let listed = format!("allowed_origins = [\"{}\"]\n", site.origin);
    let served = serve(&write_config(dir.path(), &config_for(&listed)));
    let page = format!("{}/?gw={}", site.origin, served.url);
    let outcome = run_page(&browser, &site, &page);
    assert_eq!(outcome["list"]["status"], 200, "{outcome}");
    let list = outcome["list"]["body"].as_str().unwrap_or_default();
    assert!(
        list.contains("\"write_note\"") && list.contains("\"echo\""),
        "{outcome}"
    );
    assert_eq!(outcome["call"]["status"], 200, "{outcome}");
    let call = outcome["call"]["body"].as_str().unwrap_or_default();
    assert!(call.contains("saved note 1"), "{outcome}");
}

/// An upstream over Streamable HTTP on loopback that writes down the
/// `Authorization` header of every request it receives (`None`: none
/// sent), serving one read-only tool `lookup`.
struct RecordingUpstream {
    url: String,
    authorizations: std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>>,
    _runtime: tokio::runtime::Runtime,
}

impl RecordingUpstream {
    fn start() -> Self {
        use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
        use portcullis_server::{CallContext, ToolError, ToolServer};
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
        use std::sync::{Arc, Mutex};

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("binds");
        let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
        let tools = ToolServer::builder()
            .tool(
                Tool::new("lookup").with_annotations(ToolAnnotations::read_only(true)),
                |_: Value, _: CallContext| async move {
                    Ok::<_, ToolError>(ToolResult::text("found it"))
                },
            )
            .build()
            .expect("tools");
        let authorizations = Arc::new(Mutex::new(Vec::new()));
        let service = StreamableHttpService::new(
            move || Ok(tools.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let seen = authorizations.clone();
        let app =
            axum::Router::new()
                .route_service("/mcp", service)
                .layer(axum::middleware::from_fn(
                    move |request: axum::extract::Request, next: axum::middleware::Next| {
                        let value = request
                            .headers()
                            .get("authorization")
                            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                        seen.lock().expect("lock").push(value);
                        next.run(request)
                    },
                ));
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RecordingUpstream {
            url,
            authorizations,
            _runtime: runtime,
        }
    }

    fn seen(&self) -> Vec<Option<String>> {
        self.authorizations.lock().expect("lock").clone()
    }
}

/// Behind an identity provider: a request without a token is sent to the
/// metadata; a caller with a good token is served, audited under its own
/// subject, and its token never reaches the upstream, which sees only the
/// gateway's own credential.
#[test]
fn behind_an_identity_provider_the_caller_is_audited_and_its_token_never_reaches_the_upstream() {
    let issuer = common::TestIssuer::start();
    let upstream = RecordingUpstream::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &format!(
            "[gateway]\n\n{}\n[upstreams.records]\ntype = \"streamable-http\"\nurl = \"{}\"\nheaders = {{ Authorization = \"Bearer gateway-own-credential\" }}\n",
            issuer.config_table(),
            upstream.url
        ),
    );
    let checked = portcullis(&[
        "check",
        "--offline",
        "--config",
        config.to_str().expect("utf-8 path"),
    ]);
    assert!(
        text(&checked.stdout).contains(&format!(
            "callers: access tokens of {} for https://gateway.example/mcp (scopes required: [mcp:tools])",
            issuer.url
        )),
        "{}",
        text(&checked.stdout)
    );
    let mut served = serve(&config);
    let authority = served.authority();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "lookup", "arguments": {}}});

    let (status, response) = http(&authority, &mcp_request(&authority, &call, ""));
    assert_eq!(status, 401, "{response}");
    assert!(
        response.contains(
            "resource_metadata=\"https://gateway.example/.well-known/oauth-protected-resource/mcp\""
        ),
        "{response}"
    );
    let (status, metadata) = get(
        &authority,
        "/.well-known/oauth-protected-resource",
        &authority,
        "",
    );
    assert_eq!(status, 200, "{metadata}");
    let metadata: Value = serde_json::from_str(body(&metadata)).expect("JSON");
    assert_eq!(metadata["resource"], "https://gateway.example/mcp");
    assert_eq!(metadata["authorization_servers"], json!([issuer.url]));

    let token = issuer.token("alice@example", "mcp:tools");
    // `/metrics` names every upstream and tool: an access token is needed.
    let (status, _) = get(&authority, "/metrics", &authority, "");
    assert_eq!(status, 401, "no token, no metrics");
    let (status, response) = get(
        &authority,
        "/metrics",
        &authority,
        &format!("Authorization: Bearer {token}\r\n"),
    );
    assert_eq!(status, 200, "{response}");
    let (status, response) = http(
        &authority,
        &mcp_request(
            &authority,
            &call,
            &format!("Authorization: Bearer {token}\r\n"),
        ),
    );
    assert_eq!(status, 200, "{response}");
    assert!(response.contains("found it"), "{response}");

    served.signal("TERM");
    assert_eq!(served.exit_code(), Some(0));
    let seen = upstream.seen();
    assert!(!seen.is_empty(), "the upstream was reached");
    for authorization in &seen {
        assert_eq!(
            authorization.as_deref(),
            Some("Bearer gateway-own-credential"),
            "{seen:?}"
        );
    }
    assert!(
        !seen.iter().flatten().any(|a| a.contains(&token)),
        "{seen:?}"
    );
    let records = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(audit_trail(&dir.path().join(".portcullis")));
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].tool, "lookup");
    assert_eq!(records[0].identity.as_deref(), Some("alice@example"));
    // The token is nowhere on disk.
    assert_nowhere_in(&dir.path().join(".portcullis"), &token);
}
