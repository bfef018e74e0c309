//! Log messages an upstream sends while a tool runs reach the client before
//! the tool's result: `portcullis serve --stdio` in front of the in-repo
//! conformance fixture (`portcullis-conformance-fixture --stdio --legacy`,
//! a stdio child), driven by a client that writes and reads raw JSON-RPC
//! lines, so the order it sees is the order the gateway wrote.
//!
//! The fixture's `test_tool_with_logging` logs three messages and returns
//! right after the last one. Before log messages were delivered in the
//! upstream's transport they went through rmcp's notification tasks and a
//! relay task while the result took the direct path, so the last message
//! of a call often came after its result (and was counted in the next
//! round); every round must now see all three first.
//!
//! The fixture binary is built with the workspace (`cargo build
//! --workspace`); without it the test says it is skipped (outside CI).

use std::path::{Path, PathBuf};

use common::{PATIENCE, RawStdio, conformance_fixture, toml_string, write_config};
use serde_json::{Value, json};

use crate::common;

/// Calls of the logging tool, each checked on its own.
const ROUNDS: u64 = 40;

/// What the fixture logs per call, in order.
const LOGGED: [&str; 3] = [
    "Tool execution started",
    "Tool processing data",
    "Tool execution completed",
];

fn config(dir: &Path, fixture: &Path) -> PathBuf {
    let command = toml_string(&fixture.display().to_string());
    write_config(
        dir,
        &format!(
            "[gateway]\nstore = \"memory\"\nprefix = \"never\"\n\n[upstreams.fixture]\ntype = \"stdio\"\ncommand = {command}\nargs = [\"--stdio\", \"--legacy\"]\ntimeout_ms = 60000\n"
        ),
    )
}

/// `portcullis serve --stdio` and the lines it writes.
struct Gateway(RawStdio);

impl Gateway {
    fn start(config: &Path) -> Gateway {
        Gateway(RawStdio::start(config, false))
    }

    fn send(&mut self, message: Value) {
        self.0.send(message);
    }

    /// Reads until the answer to request `id`, and returns it with the
    /// log messages (their `data`) written before it.
    fn answer(&mut self, id: u64) -> (Value, Vec<Value>) {
        let mut logged = Vec::new();
        loop {
            let message = self
                .0
                .lines
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|e| panic!("no answer to request {id}: {e}"));
            if message["id"] == json!(id) {
                return (message, logged);
            }
            if message["method"] == "notifications/message" {
                logged.push(message["params"]["data"].clone());
            }
        }
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let (answer, logged) = self.answer(id);
        assert!(answer.get("error").is_none(), "{method} failed: {answer}");
        (answer, logged)
    }
}

#[test]
fn log_messages_sent_before_a_result_reach_the_client_first() {
    let Some(fixture) = conformance_fixture() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut gateway = Gateway::start(&config(dir.path(), &fixture));

    gateway.request(
        1,
        "initialize",
        json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "log-order", "version": "0"}
        }),
    );
    gateway.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // Answered only once the gateway knows this session and its level, so
    // every later log message is meant for it.
    gateway.request(2, "logging/setLevel", json!({"level": "debug"}));

    let expected: Vec<Value> = LOGGED.iter().map(|m| json!(m)).collect();
    for round in 0..ROUNDS {
        let id = 10 + round;
        let (answer, logged) = gateway.request(
            id,
            "tools/call",
            json!({"name": "test_tool_with_logging", "arguments": {}}),
        );
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(
            text.contains("Tool with logging executed successfully"),
            "round {round}: {answer}"
        );
        assert_eq!(
            logged, expected,
            "round {round}: every log message of the call comes before its result, in order"
        );
    }
}
