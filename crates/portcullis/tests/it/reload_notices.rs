//! An upstream a config reload connects is heard like one present at
//! start, end to end through the real `portcullis` binary: `portcullis
//! serve --stdio` in front of the in-repo conformance fixture (a stdio
//! child per upstream), driven by a client that writes and reads raw
//! JSON-RPC lines on one session that stays open across the reloads.
//!
//! 1. Start with `first`; the client sets its log level.
//! 2. Reload adding `second` (the in-place path, which keeps `first`'s
//!    connection): `second`'s log messages reach the client before its
//!    result, its prompt list change is announced, and `first` is still
//!    heard.
//! 3. Reload removing `first` (in place again): its prompts are gone and
//!    `second` is still heard.
//! 4. Reload changing `second`'s `timeout_ms` (every connection is
//!    replaced): the new connection is heard too.
//!
//! Before reloads handed the sessions on, a reload's proxy started with no
//! session at all, so after step 2 nothing of either upstream reached the
//! client.
//!
//! The fixture binary is built with the workspace (`cargo build
//! --workspace`); without it the test says it is skipped (outside CI).

use std::path::Path;
use std::time::Instant;

use common::{PATIENCE, RawStdio, conformance_fixture, toml_string, write_config};
use serde_json::{Value, json};

use crate::common;

/// What the fixture's `test_tool_with_logging` logs, in order.
const LOGGED: [&str; 3] = [
    "Tool execution started",
    "Tool processing data",
    "Tool execution completed",
];

/// A config with one fixture upstream per `(name, timeout_ms)`.
fn config(dir: &Path, fixture: &Path, upstreams: &[(&str, u64)]) {
    let command = toml_string(&fixture.display().to_string());
    let mut text = String::from("[gateway]\nstore = \"memory\"\nprefix = \"always\"\n");
    for (name, timeout_ms) in upstreams {
        text.push_str(&format!(
            "\n[upstreams.{name}]\ntype = \"stdio\"\ncommand = {command}\nargs = [\"--stdio\"]\ntimeout_ms = {timeout_ms}\n"
        ));
    }
    write_config(dir, &text);
}

/// `portcullis serve --stdio`: the lines it writes on stdout and on
/// stderr.
struct Gateway(RawStdio);

impl Gateway {
    fn start(config: &Path) -> Gateway {
        Gateway(RawStdio::start(config, true))
    }

    /// Waits for a stderr line containing `needle`.
    fn wait_for_line(&self, needle: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let stderr = self.0.stderr.as_ref().expect("stderr followed");
            match stderr.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(_) => panic!("no stderr line containing {needle:?}"),
            }
        }
    }

    fn send(&mut self, message: Value) {
        self.0.send(message);
    }

    fn next(&self, waiting_for: &str) -> Value {
        self.0.lines.recv_timeout(PATIENCE).unwrap_or_else(|e| {
            panic!("nothing more from the gateway ({e}); waiting for {waiting_for}")
        })
    }

    /// Sends request `id` and reads until its answer; returns the answer
    /// and the notifications written before it.
    fn request(&mut self, id: u64, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut before = Vec::new();
        loop {
            let message = self.next(&format!("the answer to {method}"));
            if message["id"] == json!(id) {
                assert!(message.get("error").is_none(), "{method} failed: {message}");
                return (message, before);
            }
            before.push(message);
        }
    }

    /// Initializes the session (requests 1 and 2) and sets its log level
    /// to debug.
    fn open_session(&mut self) {
        self.request(
            1,
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "reload-notices", "version": "0"}
            }),
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        // Answered once the gateway knows this session and its level.
        self.request(2, "logging/setLevel", json!({"level": "debug"}));
    }

    /// Calls `test_tool_with_logging` of `server` and checks that its log
    /// messages, named after the server, came before the result.
    fn logs_reach_the_client(&mut self, id: u64, server: &str) {
        let (answer, before) = self.request(
            id,
            "tools/call",
            json!({"name": format!("{server}__test_tool_with_logging"), "arguments": {}}),
        );
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
        let logged: Vec<(Value, Value)> = before
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .map(|m| (m["params"]["logger"].clone(), m["params"]["data"].clone()))
            .collect();
        let expected: Vec<(Value, Value)> =
            LOGGED.iter().map(|m| (json!(server), json!(m))).collect();
        assert_eq!(logged, expected, "{server}'s log messages reach the client");
    }

    /// Has `server` announce a prompt list change and waits until the
    /// client is told.
    fn prompt_change_reaches_the_client(&mut self, id: u64, server: &str) {
        let (_, before) = self.request(
            id,
            "tools/call",
            json!({"name": format!("{server}__test_trigger_prompt_change"), "arguments": {}}),
        );
        let announced = |m: &Value| m["method"] == "notifications/prompts/list_changed";
        if before.iter().any(announced) {
            return;
        }
        // A list change is not ordered against the call's result.
        while !announced(&self.next("notifications/prompts/list_changed")) {}
    }

    fn prompt_names(&mut self, id: u64) -> Vec<String> {
        let (answer, _) = self.request(id, "prompts/list", json!({}));
        answer["result"]["prompts"]
            .as_array()
            .expect("a prompt list")
            .iter()
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect()
    }
}

#[test]
fn upstreams_a_reload_connects_are_heard_by_the_sessions_already_open() {
    let Some(fixture) = conformance_fixture() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    config(dir.path(), &fixture, &[("first", 30_000)]);
    let mut gateway = Gateway::start(&dir.path().join("portcullis.toml"));
    gateway.open_session();
    gateway.logs_reach_the_client(3, "first");

    // 2. Added in place.
    config(
        dir.path(),
        &fixture,
        &[("first", 30_000), ("second", 30_000)],
    );
    gateway.wait_for_line("upstreams reconfigured");
    gateway.wait_for_line("config reloaded");
    gateway.logs_reach_the_client(10, "second");
    gateway.prompt_change_reaches_the_client(11, "second");
    gateway.logs_reach_the_client(12, "first");
    let prompts = gateway.prompt_names(13);
    assert!(
        prompts.iter().any(|p| p.starts_with("second__")),
        "{prompts:?}"
    );

    // 3. Removed in place.
    config(dir.path(), &fixture, &[("second", 30_000)]);
    gateway.wait_for_line("upstreams reconfigured");
    gateway.wait_for_line("config reloaded");
    let prompts = gateway.prompt_names(20);
    assert!(
        !prompts.iter().any(|p| p.starts_with("first__")),
        "the removed upstream's prompts are gone: {prompts:?}"
    );
    gateway.logs_reach_the_client(21, "second");
    gateway.prompt_change_reaches_the_client(22, "second");

    // 4. Every connection replaced.
    config(dir.path(), &fixture, &[("second", 20_000)]);
    gateway.wait_for_line("the sources changed");
    gateway.wait_for_line("config reloaded");
    gateway.logs_reach_the_client(30, "second");
    gateway.prompt_change_reaches_the_client(31, "second");
}

/// An upstream that could not start with the gateway and joined later
/// (retried in the background until its command existed) is heard like
/// one present at start: the catalogue swap it causes hands the sessions'
/// proxy over to one that routes it too.
#[test]
fn an_upstream_that_joins_late_is_heard_by_the_sessions_already_open() {
    let Some(fixture) = conformance_fixture() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let command = toml_string(&fixture.display().to_string());
    // `late.sh` does not exist yet: `late` fails to connect at start.
    let config = write_config(
        dir.path(),
        &format!(
            "[gateway]\nstore = \"memory\"\nprefix = \"always\"\nreconnect_max_ms = 500\n\n\
             [upstreams.first]\ntype = \"stdio\"\ncommand = {command}\nargs = [\"--stdio\"]\n\n\
             [upstreams.late]\ntype = \"stdio\"\ncommand = \"./late.sh\"\n"
        ),
    );
    let mut gateway = Gateway::start(&config);
    gateway.open_session();
    gateway.logs_reach_the_client(3, "first");

    // Written aside and renamed, so the retry never runs half a script.
    let script = dir.path().join("late.sh.partial");
    std::fs::write(&script, format!("#!/bin/sh\nexec {command} --stdio\n"))
        .expect("script written");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .expect("script made executable");
    }
    std::fs::rename(&script, dir.path().join("late.sh")).expect("script in place");
    // Told once the tool set with `late`'s tools serves.
    while gateway.next("notifications/tools/list_changed")["method"]
        != "notifications/tools/list_changed"
    {}
    gateway.logs_reach_the_client(10, "late");
    gateway.prompt_change_reaches_the_client(11, "late");
    gateway.logs_reach_the_client(12, "first");
}
