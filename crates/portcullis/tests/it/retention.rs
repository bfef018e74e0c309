//! Retention of the audit trail and the effect log, end to end through the
//! real `portcullis serve` and its real SQLite file: records older than
//! `audit_retention_days` / `effects_retention_days` are gone once the
//! gateway has started, recent ones are kept, and `0` keeps everything.
//!
//! The records are written through the store's own API with old
//! timestamps (`AuditRecord::new(time, …)`, `EffectLog::record_at`) before
//! the gateway opens the file, and read back through it after the gateway
//! has exited.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::{DEMO, PATIENCE, send_signal, stderr_lines, write_config};
use portcullis_catalog::ToolResult;
use portcullis_store::{AuditDecision, AuditOutcome, AuditRecord, Outcome, Store, StoreSpec};
use serde_json::json;

const DAY: Duration = Duration::from_secs(86_400);

async fn open(data_dir: &Path) -> std::sync::Arc<dyn Store> {
    portcullis_store::open(&StoreSpec::Sqlite(None), data_dir)
        .await
        .expect("the SQLite store opens")
}

/// Two audit records (40 days and 1 day old) and two effect-log records
/// (10 days and 1 hour old).
async fn fill(data_dir: &Path) {
    let store = open(data_dir).await;
    let now = SystemTime::now();
    for (tool, age) in [("demo__old", DAY * 40), ("demo__recent", DAY)] {
        let record = AuditRecord::new(
            now - age,
            tool,
            &json!({"q": "x"}),
            AuditDecision::Allowed,
            AuditOutcome::Ok,
        );
        store.audit().record(&record).await.expect("audit recorded");
    }
    let outcome = Outcome::Finished {
        result: ToolResult::text("done"),
    };
    for (key, age) in [("old-effect", DAY * 10), ("recent-effect", DAY / 24)] {
        store
            .effects()
            .record_at(key, "demo__echo", &outcome, now - age)
            .await
            .expect("effect recorded");
    }
}

/// What is left: the audit records' tools (newest first) and which effect
/// keys are still recorded.
async fn left(data_dir: &Path) -> (Vec<String>, Vec<&'static str>) {
    let store = open(data_dir).await;
    let tools = store
        .audit()
        .recent(10)
        .await
        .expect("the trail reads")
        .into_iter()
        .map(|r| r.tool)
        .collect();
    let mut effects = Vec::new();
    for key in ["old-effect", "recent-effect"] {
        if store
            .effects()
            .recorded(key)
            .await
            .expect("the effect log reads")
            .is_some()
        {
            effects.push(key);
        }
    }
    (tools, effects)
}

/// Runs `portcullis serve` on `config` until a stderr line contains
/// `needle` (whenever it comes, before or after the listening line), then
/// stops it with SIGTERM; returns that line.
fn serve_until(config: &Path, needle: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let lines = stderr_lines(&mut child);
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(needle) => break line,
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "no stderr line containing {needle:?}; stderr:\n{}",
                    seen.join("\n")
                )
            }
        }
    };
    send_signal(child.id(), "TERM");
    let status = child.wait().expect("the gateway exits");
    assert!(status.success(), "exit {status:?}");
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_older_than_the_windows_are_gone_once_the_gateway_started() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join(".portcullis");
    fill(&data_dir).await;
    // The defaults: 30 days of audit trail, 7 of effect log.
    let config = write_config(dir.path(), &format!("[gateway]\n\n{DEMO}"));
    let line = tokio::task::block_in_place(|| serve_until(&config, "retention: pruned"));
    assert!(line.contains("audit=1"), "{line}");
    assert!(line.contains("effects=1"), "{line}");
    let (tools, effects) = left(&data_dir).await;
    assert_eq!(tools, ["demo__recent"]);
    assert_eq!(effects, ["recent-effect"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_windows_apply_and_zero_keeps_everything() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join(".portcullis");
    fill(&data_dir).await;

    // Both kept forever.
    let config = write_config(
        dir.path(),
        &format!("[gateway]\naudit_retention_days = 0\neffects_retention_days = 0\n\n{DEMO}"),
    );
    tokio::task::block_in_place(|| serve_until(&config, "kept forever"));
    let (tools, effects) = left(&data_dir).await;
    assert_eq!(tools, ["demo__recent", "demo__old"]);
    assert_eq!(effects, ["old-effect", "recent-effect"]);

    // The audit trail forever, the effect log for 5 days.
    let config = write_config(
        dir.path(),
        &format!("[gateway]\naudit_retention_days = 0\neffects_retention_days = 5\n\n{DEMO}"),
    );
    let line = tokio::task::block_in_place(|| serve_until(&config, "retention: pruned"));
    assert!(line.contains("audit=0"), "{line}");
    assert!(line.contains("effects=1"), "{line}");
    let (tools, effects) = left(&data_dir).await;
    assert_eq!(tools, ["demo__recent", "demo__old"]);
    assert_eq!(effects, ["recent-effect"]);
}

#[test]
fn check_refuses_a_window_past_a_century() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(
        dir.path(),
        &format!("[gateway]\naudit_retention_days = 40000\n\n{DEMO}"),
    );
    let out = common::portcullis(&["check", "--config", &config.display().to_string()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = common::text(&out.stderr);
    assert!(
        stderr.contains("portcullis.toml:2:") && stderr.contains("gateway.audit_retention_days"),
        "{stderr}"
    );
}
