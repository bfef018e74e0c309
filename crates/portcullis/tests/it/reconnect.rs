//! `portcullis serve` heals: a stdio upstream whose child is killed from
//! outside is restarted in the background (`[gateway] reconnect_max_ms`),
//! the log says so, `/healthz` reports it up again and calls reach the new
//! child; stopping the gateway afterwards leaves no child behind.

use crate::common;

use common::{DEMO, alive, child_pids, eventually, http, mcp, send_signal, serve, write_config};
use serde_json::{Value, json};

/// `/healthz`'s upstream counts.
fn upstreams(authority: &str) -> Value {
    let (status, response) = http(
        authority,
        &format!("GET /healthz HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 200, "{response}");
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    let health: Value = serde_json::from_str(body).expect("JSON");
    health["upstreams"].clone()
}

/// Calls the demo upstream's `echo` with `text` and checks it answered.
fn echo_is_served(authority: &str, text: &str) {
    let (status, response) = mcp(
        authority,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": text}}}),
    );
    assert_eq!(status, 200, "{response}");
    assert!(response.contains(text), "{response}");
    assert!(!response.contains("\"isError\":true"), "{response}");
}

/// Stops the gateway with SIGTERM and checks it exits cleanly and takes
/// its stdio children with it.
fn stop_leaving_no_child(mut served: common::Served) {
    let children = child_pids(served.pid());
    assert_eq!(served.terminate(), Some(0));
    for pid in children {
        assert!(!alive(pid), "the stdio child {pid} outlived the gateway");
    }
}

#[test]
fn a_killed_stdio_upstream_is_restarted_and_serves_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &format!("[gateway]\nstore = \"memory\"\nreconnect_max_ms = 1000\n\n{DEMO}"),
    );
    let served = serve(&config);
    let authority = served.authority();
    assert_eq!(upstreams(&authority), json!({"up": 1, "down": 0}));
    let children = child_pids(served.pid());
    assert_eq!(children.len(), 1, "{children:?}");
    let first = children[0];

    send_signal(first, "KILL");
    let line = served.wait_for_line("reconnect attempt 1");
    assert!(line.contains("next try in"), "{line}");
    eventually("a new child runs", || {
        !alive(first)
            && child_pids(served.pid())
                .iter()
                .any(|&pid| pid != first && alive(pid))
    });
    eventually("the upstream is reported up again", || {
        upstreams(&authority) == json!({"up": 1, "down": 0})
    });
    echo_is_served(&authority, "back again");

    stop_leaving_no_child(served);
}

#[test]
fn an_upstream_that_failed_at_start_is_served_once_it_comes_up() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        "[gateway]\nstore = \"memory\"\nreconnect_max_ms = 1000\n\n[upstreams.later]\ntype = \"stdio\"\ncommand = \"./later.sh\"\n",
    );
    let served = serve(&config);
    let authority = served.authority();
    assert_eq!(upstreams(&authority), json!({"up": 0, "down": 1}));
    served.wait_for_line("connect attempt");

    // The server's command appears: written aside, then moved in whole.
    let script = format!(
        "#!/bin/sh\nexec '{}' demo-upstream\n",
        env!("CARGO_BIN_EXE_portcullis")
    );
    let aside = dir.path().join("later.tmp");
    std::fs::write(&aside, script).expect("script written");
    std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::rename(&aside, dir.path().join("later.sh")).expect("script moved in");

    eventually("the upstream joins", || {
        upstreams(&authority) == json!({"up": 1, "down": 0})
    });
    // Until the tool server is rebuilt a list may still be refused (a
    // gateway with no tools has no tools/list): asked again until served.
    eventually("its tools are served", || {
        let (status, response) = mcp(
            &authority,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        );
        status == 200 && response.contains("\"echo\"")
    });
    echo_is_served(&authority, "joined");
    stop_leaving_no_child(served);
}
