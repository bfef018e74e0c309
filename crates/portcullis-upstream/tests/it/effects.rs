//! Effect-log replay through `Toolset::call`, against the fixture server on
//! loopback, which counts every `tools/call` it receives: a call repeated
//! under one idempotency key reaches the server once; the describe tool is
//! never recorded; a SQLite store replays across toolsets (a restarted
//! gateway).

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use common::*;
use portcullis_catalog::ProjectionOptions;
use portcullis_catalog::disclosure::DESCRIBE_TOOL_NAME;
use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::naming::Prefix;
use portcullis_catalog::{Tool, ToolResult};
use portcullis_store::{
    AuditLog, Backend, EffectLog, MemoryStore, Outcome, PersistedServer, Recorded, SqliteStore,
    Store, StoreError,
};
use portcullis_upstream::{CallContext, CallError, ConnectOptions, McpServerConfig, connect};
use serde_json::json;

/// A memory store whose effect log counts what the toolset asks of it.
#[derive(Debug, Default)]
struct Watched {
    inner: MemoryStore,
    lookups: AtomicUsize,
    /// The tool of every `record`, in order.
    records: Mutex<Vec<String>>,
}

impl Watched {
    fn recorded_tools(&self) -> Vec<String> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl Store for Watched {
    fn backend(&self) -> Backend {
        self.inner.backend()
    }
    async fn list(&self) -> Result<Vec<PersistedServer>, StoreError> {
        self.inner.list().await
    }
    async fn save(&self, row: &PersistedServer) -> Result<Option<Fingerprints>, StoreError> {
        self.inner.save(row).await
    }
    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        self.inner.remove(id).await
    }
    async fn trusted_tools(&self, id: &str) -> Result<Option<Vec<Tool>>, StoreError> {
        self.inner.trusted_tools(id).await
    }
    fn effects(&self) -> &dyn EffectLog {
        self
    }
    fn audit(&self) -> &dyn AuditLog {
        self.inner.audit()
    }

    fn grants(&self) -> &dyn portcullis_store::GrantLog {
        self.inner.grants()
    }
}

#[async_trait]
impl EffectLog for Watched {
    async fn recorded(&self, key: &str) -> Result<Option<Recorded>, StoreError> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        self.inner.effects().recorded(key).await
    }
    async fn record_at(
        &self,
        key: &str,
        tool_name: &str,
        outcome: &Outcome,
        at: SystemTime,
    ) -> Result<Recorded, StoreError> {
        if let Ok(mut records) = self.records.lock() {
            records.push(tool_name.to_owned());
        }
        self.inner
            .effects()
            .record_at(key, tool_name, outcome, at)
            .await
    }
    async fn prune_before(&self, cutoff: SystemTime) -> Result<u64, StoreError> {
        self.inner.effects().prune_before(cutoff).await
    }
}

fn text(result: &ToolResult) -> String {
    result.text_blocks().collect::<Vec<_>>().join("\n")
}

/// Options with `store`, names always prefixed (`fx__echo`).
fn with_store(store: Arc<dyn Store>) -> ConnectOptions {
    ConnectOptions::default()
        .with_projection(ProjectionOptions {
            prefix: Prefix::Always,
            ..Default::default()
        })
        .with_store(store)
}

fn keyed(key: &str) -> CallContext {
    CallContext::default().with_idempotency_key(key)
}

async fn echo(
    toolset: &portcullis_upstream::Toolset,
    message: &str,
    context: &CallContext,
) -> ToolResult {
    toolset
        .call("fx__echo", Some(json!({"message": message})), context)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_replayed_key_reaches_the_server_once() {
    let server = http_fixture(FixtureConfig::default()).await;
    let store = Arc::new(Watched::default());
    let toolset = connect(
        vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
        with_store(store.clone()),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let first = echo(&toolset, "hello", &keyed("turn-1/0")).await;
    assert_eq!(text(&first), "hello");
    assert_eq!(server.calls(), 1);
    let replayed = echo(&toolset, "hello", &keyed("turn-1/0")).await;
    assert_eq!(replayed, first);
    assert_eq!(server.calls(), 1, "a replayed key reached the server");

    // Another key is another call; so is the same key with other arguments.
    echo(&toolset, "hello", &keyed("turn-1/1")).await;
    assert_eq!(server.calls(), 2);
    let other = echo(&toolset, "bye", &keyed("turn-1/0")).await;
    assert_eq!(text(&other), "bye");
    assert_eq!(server.calls(), 3);

    // Sessions never share outcomes, even under one key.
    let in_session = CallContext::for_session("alice").with_idempotency_key("turn-1/0");
    echo(&toolset, "hello", &in_session).await;
    assert_eq!(server.calls(), 4);
    echo(&toolset, "hello", &in_session).await;
    assert_eq!(server.calls(), 4);

    // No key, no log: every call runs, and the log is not consulted.
    let lookups = store.lookups.load(Ordering::SeqCst);
    echo(&toolset, "hello", &CallContext::default()).await;
    echo(&toolset, "hello", &CallContext::default()).await;
    assert_eq!(server.calls(), 6);
    assert_eq!(store.lookups.load(Ordering::SeqCst), lookups);

    // An error result is an outcome like any other: replayed, not retried.
    let failed = toolset
        .call("fx__fail", Some(json!({})), &keyed("turn-2/0"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(failed.is_error);
    let again = toolset
        .call("fx__fail", Some(json!({})), &keyed("turn-2/0"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, failed);
    assert_eq!(server.calls(), 7);
    assert_eq!(
        store.recorded_tools(),
        ["fx__echo", "fx__echo", "fx__echo", "fx__echo", "fx__fail"]
    );
    toolset.close().await;
}

#[tokio::test]
async fn the_describe_tool_is_never_recorded() {
    // Enough tools to defer schemas behind mcp__describe_tool.
    let server = http_fixture(FixtureConfig {
        pad: 200,
        ..Default::default()
    })
    .await;
    let store = Arc::new(Watched::default());
    let toolset = connect(
        vec![McpServerConfig::streamable_http("broad", server.mcp_url())],
        with_store(store.clone()),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(toolset.catalogue().has_describe_tool());
    for _ in 0..2 {
        let described = toolset
            .call(
                DESCRIBE_TOOL_NAME,
                Some(json!({"tool": "broad__tool_7"})),
                &keyed("turn-1/0"),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!described.is_error, "{}", text(&described));
    }
    assert_eq!(store.recorded_tools(), Vec::<String>::new());
    assert_eq!(store.lookups.load(Ordering::SeqCst), 0);
    // A real tool under the same key is recorded as usual.
    let called = toolset
        .call(
            "broad__tool_7",
            Some(json!({"payload": "x"})),
            &keyed("turn-1/0"),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text(&called), "called tool_7 with payload");
    assert_eq!(store.recorded_tools(), ["broad__tool_7"]);
    assert_eq!(server.calls(), 1, "describing reached the server");
    toolset.close().await;
}

#[tokio::test]
async fn a_failure_is_replayed_not_retried() {
    let server = http_fixture(FixtureConfig::default()).await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let toolset = connect(
        vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
        with_store(store.clone())
            // Long enough to connect on a loaded machine; `hang` never answers.
            .with_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let timed_out = toolset
        .call("fx__hang", Some(json!({})), &keyed("turn-1/0"))
        .await;
    let Err(first @ CallError::Timeout { .. }) = timed_out else {
        panic!("expected a timeout, got {timed_out:?}")
    };
    assert_eq!(server.state.hanging.load(Ordering::SeqCst), 1);
    // The server may have acted on it: the replay fails the same way
    // instead of sending it again.
    let replayed = toolset
        .call("fx__hang", Some(json!({})), &keyed("turn-1/0"))
        .await;
    match replayed {
        Err(CallError::Replayed { tool, message }) => {
            assert_eq!(tool, "fx__hang");
            assert_eq!(message, first.to_string());
        }
        other => panic!("expected a replayed failure, got {other:?}"),
    }
    assert_eq!(server.state.hanging.load(Ordering::SeqCst), 1);
    assert_eq!(server.calls(), 1);
    toolset.close().await;
}

/// A fresh SQLite file under cargo's per-target temp dir.
fn sqlite_path(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("effects-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir.join("store.db")
}

#[tokio::test]
async fn a_sqlite_store_replays_after_a_restart_until_pruned() {
    let server = http_fixture(FixtureConfig::default()).await;
    let path = sqlite_path("restart");
    let servers = || vec![McpServerConfig::streamable_http("fx", server.mcp_url())];
    let context = CallContext::for_session("s1").with_idempotency_key("turn-9/3");

    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&path)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let first_run = connect(servers(), with_store(store))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let first = echo(&first_run, "durable", &context).await;
    assert_eq!(server.calls(), 1);
    first_run.close().await;

    // A new process: a new pool on the same file, a new toolset.
    let reopened = SqliteStore::open(&path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let store: Arc<dyn Store> = Arc::new(reopened);
    let second_run = connect(servers(), with_store(store.clone()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let replayed = echo(&second_run, "durable", &context).await;
    assert_eq!(replayed, first);
    assert_eq!(server.calls(), 1, "the restarted gateway called again");

    // Once the record is pruned, the same key runs again.
    let pruned = store
        .effects()
        .prune_before(SystemTime::now() + Duration::from_secs(3600))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pruned, 1);
    echo(&second_run, "durable", &context).await;
    assert_eq!(server.calls(), 2);
    second_run.close().await;
}
