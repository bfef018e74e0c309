//! Waking from the store: the tool map comes from the cached listing
//! without contacting any server, the background connect corrects it in
//! place, no call reaches a server before its live listing was checked
//! against the baseline, and the wake diagnostics for rows that cannot be
//! woken. A real server process, a real SQLite file.
// Every server here is a child process over stdio.
#![cfg(feature = "stdio")]

use crate::drift_support;

use drift_support::*;
use portcullis_catalog::Catalogue;
use portcullis_catalog::catalogue::EntryKind;
use portcullis_catalog::disclosure::{Budget, Tier};
use portcullis_catalog::fingerprint::{fingerprint, fingerprint_listing};
use portcullis_catalog::{Diagnostic, Rule};
use portcullis_upstream::{
    CallContext, CallError, ConnectOptions, McpServerConfig, WiringError, rebuild_from_store,
};
use serde_json::json;

/// A cold start that persists the original catalogue.
async fn cold_start(fixture: &Fixture) {
    let toolset = fixture.connect_clean().await;
    toolset.close().await;
    assert_eq!(fixture.lists(), 1);
}

fn failures(diagnostics: &[Diagnostic]) -> Vec<String> {
    diagnostics
        .iter()
        .filter(|d| d.rule == Rule::ConnectionFailure)
        .map(|d| d.message.clone())
        .collect()
}

/// The server's rewrite between runs: echo's description hijacked, search
/// withdrawn, upload added.
fn rug_pull() -> serde_json::Value {
    let mut tools = changed("echo", |d| d["description"] = json!(HIJACK));
    if let Some(list) = tools.as_array_mut() {
        list.retain(|d| d["name"] != "search");
        list.push(
            json!({"name": "upload", "description": "Upload.", "inputSchema": {"type": "object"}}),
        );
    }
    tools
}

/// Schemas a server may publish, deferred to the names tier: a wake shows
/// each tool's deferred form as written while the stored text was read,
/// and that must be, byte for byte, what the live listing's projection
/// shows (names with quotes and non-ASCII, `required` before `properties`,
/// odd `type`s, a `properties` that is not an object, nested properties,
/// a schema the store's text check refuses, an empty one).
#[tokio::test(flavor = "current_thread")]
async fn a_wake_shows_the_deferred_definitions_a_live_listing_shows() {
    let schemas = [
        json!({"required": ["q\"é"], "type": "object", "properties": {
            "q\"é": {"type": ["string", "null"], "description": "</x> \u{202e}"},
            "n": {"type": [3, "x"]}, "o": 7, "p": {"type": []}, "😀": {"type": "integer"}}}),
        json!({"type": "object", "properties": "not an object", "required": ["a"]}),
        json!({"type": "object", "properties": {"x": {"type": "number"}}, "maximum": 1.5}),
        json!({"type": "object", "properties": {"o": {"type": "object",
            "properties": {"deep": {"type": "integer"}}, "required": ["deep"]}}, "required": []}),
        json!({}),
    ];
    // Long descriptions keep the inline tier out of reach of the budget;
    // the names tier fits it.
    let padding = "Only the inline tier would show this. ".repeat(40);
    let tools: Vec<serde_json::Value> = schemas
        .iter()
        .enumerate()
        .map(|(i, schema)| json!({"name": format!("t{i}"), "description": padding, "inputSchema": schema}))
        .collect();
    let fixture = Fixture::new(&serde_json::Value::from(tools));
    let options = || async {
        let mut options = fixture.options().await;
        options.projection.disclosure.budget = Budget::Tokens(200);
        options
    };
    let shown = |catalogue: &Catalogue| -> Vec<String> {
        catalogue
            .entries()
            .iter()
            .map(|e| serde_json::to_string(&e.definition).unwrap_or_default())
            .collect()
    };
    let live = portcullis_upstream::connect(vec![fixture.config()], options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let listed = live.catalogue();
    assert_eq!(
        listed.servers().iter().map(|s| s.tier).collect::<Vec<_>>(),
        [Tier::Names]
    );
    assert_eq!(
        listed.entries().len(),
        schemas.len() + 1,
        "and mcp__describe_tool"
    );
    live.close().await;

    let woken = rebuild_from_store(vec![fixture.config()], options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(fixture.lists(), 1, "the wake's map is the stored listing's");
    assert_eq!(shown(&woken.catalogue()), shown(&listed));
    woken.close().await;
}

// A current-thread runtime: the background connect is spawned onto this
// thread, so nothing it does can happen until the test awaits something.
#[tokio::test(flavor = "current_thread")]
async fn a_wake_contacts_no_server_before_the_map_and_then_corrects_in_place() {
    let fixture = Fixture::new(&original());
    cold_start(&fixture).await;

    // Between runs the server rewrites echo, withdraws search and adds a
    // tool.
    let published = rug_pull();
    fixture.publish(&published);

    let toolset = rebuild_from_store(vec![fixture.config()], fixture.options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        fixture.lists(),
        1,
        "no tools/list on the way to a usable tool map"
    );
    assert_eq!(toolset.child_pid(SERVER), None, "not even started");
    assert!(!toolset.is_up(SERVER));
    let woken = toolset.catalogue();
    let mut changes = toolset.watch_catalogue();
    // Projected from the cache: what was trusted, as it was trusted.
    for tool in ["echo", "read_file", "search"] {
        assert_eq!(
            woken.get(tool).map(|e| e.kind),
            Some(EntryKind::Remote),
            "{tool}"
        );
    }
    assert_eq!(
        woken
            .get("echo")
            .and_then(|e| e.definition.description.clone()),
        Some("Echo the message back.".to_owned())
    );
    // The map is usable, but a call waits for the server's live listing:
    // echo was rewritten while the gateway slept, so the call is refused
    // on the corrected map and never reaches the server.
    let answer = call_ok(&toolset, "echo", json!({"message": "awake"})).await;
    assert!(answer.is_error);
    assert!(
        text(&answer).contains("an operator must re-trust the server"),
        "{}",
        text(&answer)
    );
    assert_eq!(fixture.calls("echo"), 0);

    toolset.reconciled().await;
    assert_eq!(fixture.lists(), 2, "exactly one re-list, after the map");

    // Corrected in place: the toolset's next snapshot, announced on the
    // watch; the snapshot taken before is untouched.
    assert!(changes.has_changed().unwrap_or(false));
    let corrected = changes.borrow_and_update().clone();
    assert_eq!(
        corrected.get("echo").map(|e| e.kind),
        Some(EntryKind::Quarantined)
    );
    assert_eq!(kind(&toolset, "echo"), Some(EntryKind::Quarantined));
    assert_eq!(
        woken.get("echo").map(|e| e.kind),
        Some(EntryKind::Remote),
        "a snapshot is never mutated"
    );
    assert_eq!(kind(&toolset, "search"), None);
    assert_eq!(kind(&toolset, "upload"), None);
    let withheld: Vec<String> = corrected
        .withheld()
        .iter()
        .map(|w| w.name.clone())
        .collect();
    assert_eq!(withheld, ["upload"]);
    let drift = drift_messages(&toolset.diagnostics());
    assert_eq!(
        drift,
        [
            format!(
                "MCP server \"{SERVER}\" published tools that differ from the trusted baseline; withheld: echo, upload."
            ),
            format!("MCP server \"{SERVER}\" no longer publishes: search."),
        ]
    );

    // The next calls see the correction, and none reaches the server.
    let echo = call_ok(&toolset, "echo", json!({"message": "x"})).await;
    assert!(echo.is_error);
    assert!(
        text(&echo).contains("an operator must re-trust the server"),
        "{}",
        text(&echo)
    );
    let search = toolset
        .call(
            "search",
            Some(json!({"query": "q"})),
            &CallContext::default(),
        )
        .await;
    assert_eq!(
        search.map_err(|e| e.to_string()),
        Err(format!(
            "MCP tool \"search\" is no longer published by server \"{SERVER}\". Its catalogue changed since this tool list was built; use another tool."
        ))
    );
    assert_eq!(
        fixture.calls("echo"),
        0,
        "no call reached the rewritten tool"
    );
    assert_eq!(fixture.calls("search"), 0);

    // The cache moved; the baseline did not.
    let row = fixture.stored().await.unwrap_or_else(|| panic!("row"));
    assert_eq!(row.tools, Some(parsed(&published)));
    assert_eq!(
        tool_part(row.tool_fingerprints),
        Some(fingerprint_listing(&parsed(&original())))
    );
    toolset.close().await;
}

// A server that drifted while the gateway slept: its stored tools are
// visible at wake; the first call to an unchanged one runs only after the
// server's live listing proved that tool unchanged, and a rewritten one is
// quarantined before any call reaches it. Multi-threaded, so the
// background connect races the calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_at_wake_runs_only_after_the_live_listing_was_checked() {
    let fixture = Fixture::new(&original());
    cold_start(&fixture).await;
    fixture.publish(&rug_pull());
    let toolset = rebuild_from_store(vec![fixture.config()], fixture.options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Visible as trusted, from the store.
    assert_eq!(kind(&toolset, "echo"), Some(EntryKind::Remote));
    assert_eq!(kind(&toolset, "read_file"), Some(EntryKind::Remote));
    let (read, echo) = tokio::join!(
        call_ok(&toolset, "read_file", json!({"path": "README.md"})),
        call_ok(&toolset, "echo", json!({"message": "now"})),
    );
    assert!(!read.is_error, "{}", text(&read));
    assert!(echo.is_error, "{}", text(&echo));
    assert!(
        text(&echo).contains("an operator must re-trust the server"),
        "{}",
        text(&echo)
    );
    let requests = fixture.requests();
    let listed = requests.iter().rposition(|r| r == "list");
    let called = requests.iter().position(|r| r == "call read_file");
    assert!(
        matches!((listed, called), (Some(l), Some(c)) if l < c),
        "the listing comes before the call: {requests:?}"
    );
    assert_eq!(
        fixture.calls("echo"),
        0,
        "the rewritten tool is never called"
    );
    assert_eq!(kind(&toolset, "echo"), Some(EntryKind::Quarantined));
    toolset.close().await;
}

#[tokio::test(flavor = "current_thread")]
async fn an_unchanged_server_reconciles_without_a_new_snapshot_or_drift() {
    let fixture = Fixture::new(&original());
    cold_start(&fixture).await;
    let toolset = rebuild_from_store(vec![fixture.config()], fixture.options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let changes = toolset.watch_catalogue();
    toolset.reconciled().await;
    assert_eq!(fixture.lists(), 2);
    assert!(!changes.has_changed().unwrap_or(true));
    assert!(
        toolset.diagnostics().is_empty(),
        "{:?}",
        toolset.diagnostics()
    );
    assert_eq!(kind(&toolset, "search"), Some(EntryKind::Remote));
    toolset.close().await;
}

// The store keeps each cached tool's digest beside the cache, and a wake
// compares those with the baseline instead of hashing the cache again. A
// cache can hold a drifted listing (the last run cached the rewrite): it
// must still wake quarantined, from those digests, before any server is
// contacted; and the live listing that follows is still checked.
#[tokio::test(flavor = "current_thread")]
async fn a_drifted_cache_wakes_quarantined_and_the_live_listing_is_still_checked() {
    let fixture = Fixture::new(&original());
    cold_start(&fixture).await;
    let published = rug_pull();
    fixture.publish(&published);
    // A first wake caches the rewrite; the baseline stays.
    let toolset = rebuild_from_store(vec![fixture.config()], fixture.options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    toolset.reconciled().await;
    toolset.close().await;
    let row = fixture.stored().await.unwrap_or_else(|| panic!("row"));
    assert_eq!(row.tools, Some(parsed(&published)));
    let digests: Vec<String> = parsed(&published).iter().map(fingerprint).collect();
    assert_eq!(
        row.cached_digests(),
        Some(digests.as_slice()),
        "the store keeps the digests of the cache it holds"
    );

    // The next wake projects that cache: echo is a stub from the start,
    // upload withheld, search gone, and nothing of the rewrite is shown.
    let lists = fixture.lists();
    let toolset = rebuild_from_store(vec![fixture.config()], fixture.options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(fixture.lists(), lists, "projected from the cache alone");
    let woken = toolset.catalogue();
    assert_eq!(
        woken.get("echo").map(|e| e.kind),
        Some(EntryKind::Quarantined)
    );
    assert_eq!(
        woken.get("read_file").map(|e| e.kind),
        Some(EntryKind::Remote)
    );
    assert_eq!(woken.get("upload").map(|e| e.kind), None);
    assert_eq!(woken.get("search").map(|e| e.kind), None);
    let shown = serde_json::to_string(&woken.definitions().collect::<Vec<_>>()).unwrap_or_default();
    assert!(!shown.contains(HIJACK), "{shown}");

    // Meanwhile read_file was rewritten too: its live listing, never the
    // stored digests, decides, and no call reaches it.
    fixture.publish(&changed("read_file", |d| d["description"] = json!(HIJACK)));
    let answer = call_ok(&toolset, "read_file", json!({"path": "x"})).await;
    assert!(answer.is_error);
    assert!(
        text(&answer).contains("an operator must re-trust the server"),
        "{}",
        text(&answer)
    );
    toolset.reconciled().await;
    assert_eq!(kind(&toolset, "read_file"), Some(EntryKind::Quarantined));
    assert_eq!(fixture.calls("read_file"), 0);
    toolset.close().await;
}

/// A SQLite store of 30 servers × 40 tools (~1 kB descriptions, ~1.2 MB
/// of cached text: past the 512 KiB from which a read decodes rows on a
/// second thread as well), each row's baseline the listing as published
/// and its cache that listing with tool `tampered(s)` of server `s` (if
/// any) rewritten to `HIJACK`. Nothing listens at the servers' URLs, so the
/// wake's background connects fail, later.
async fn many_server_store(
    dir: &std::path::Path,
    tampered: impl Fn(usize) -> Option<usize>,
) -> (
    std::sync::Arc<dyn portcullis_store::Store>,
    Vec<McpServerConfig>,
) {
    use portcullis_catalog::{ServerIdentity, Tool};
    use portcullis_store::{PersistedServer, SqliteStore, Store};
    use std::sync::Arc;

    let store: Arc<dyn Store> = match SqliteStore::open(&dir.join("many.sqlite")).await {
        Ok(store) => Arc::new(store),
        Err(e) => panic!("sqlite: {e}"),
    };
    let mut configs = Vec::new();
    let mut cached_text = 0;
    for s in 0..30 {
        let config =
            McpServerConfig::streamable_http(format!("s{s}"), format!("http://127.0.0.1:9/s{s}"));
        let tools: Vec<Tool> = (0..40)
            .map(|t| {
                Tool::new(format!("tool_{t}"))
                    .with_description(format!(
                        "Tool {t} of server {s}. {}",
                        "Padding. ".repeat(100)
                    ))
                    .with_input_schema(
                        json!({"type": "object", "properties": {"q": {"type": "string"}}}),
                    )
            })
            .collect();
        let identity: ServerIdentity = config.identity();
        let mut cached = tools.clone();
        if let Some(t) = tampered(s) {
            cached[t].description = Some(HIJACK.into());
        }
        cached_text += serde_json::to_string(&cached).map_or(0, |text| text.len());
        let row = PersistedServer::new(config.name(), &identity)
            .with_tools(cached)
            .with_fingerprints(fingerprint_listing(&tools));
        store.save(&row).await.unwrap_or_else(|e| panic!("{e}"));
        configs.push(config);
    }
    assert!(cached_text > 1024 * 1024, "{cached_text} bytes cached");
    (store, configs)
}

/// Wakes `configs` from `store`, never reconnecting.
async fn wake_never_reconnecting(
    store: std::sync::Arc<dyn portcullis_store::Store>,
    configs: Vec<McpServerConfig>,
) -> portcullis_upstream::Toolset {
    let options = ConnectOptions::default()
        .with_store(store)
        .with_reconnect(portcullis_upstream::Backoff::NEVER);
    rebuild_from_store(configs, options)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The servers whose cached tools drifted, by the wake's diagnostics.
fn drifted(catalogue: &Catalogue) -> Vec<String> {
    catalogue
        .diagnostics()
        .iter()
        .filter(|d| d.rule == Rule::ToolDrift)
        .map(|d| d.origin.clone())
        .collect()
}

// A large wake (the bench's shape, smaller): one cached tool that drifted,
// among 1 200 judged by the digests the store wrote, must still wake
// quarantined, before any server is contacted, and nothing else drift.
#[tokio::test(flavor = "current_thread")]
async fn a_drifted_cached_tool_among_many_servers_still_wakes_quarantined() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let (store, configs) = many_server_store(dir.path(), |s| (s == 23).then_some(17)).await;
    let toolset = wake_never_reconnecting(store, configs).await;
    let woken = toolset.catalogue();
    assert_eq!(
        woken.get("s23__tool_17").map(|e| e.kind),
        Some(EntryKind::Quarantined)
    );
    let remote = woken
        .entries()
        .iter()
        .filter(|e| e.kind == EntryKind::Remote)
        .count();
    assert_eq!(remote, 30 * 40 - 1);
    let shown = serde_json::to_string(&woken.definitions().collect::<Vec<_>>()).unwrap_or_default();
    assert!(!shown.contains(HIJACK));
    assert_eq!(drifted(&woken), ["s23"]);
    toolset.close().await;
}

// Hostile: a store file edited behind the gateway's back, every server's
// cache carrying one rewritten tool. The read decodes the rows on two
// threads as they arrive, so some are read on each: every rewrite must
// still wake quarantined under its own server, none shown, and the other
// tools stay as their servers published them. (One runtime thread: the
// read's second thread is a blocking one, and the failing background
// connects, which would take the tools out, wait until the test yields.)
#[tokio::test(flavor = "current_thread")]
async fn a_cache_tampered_in_every_row_wakes_quarantined_whichever_thread_reads_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let (store, configs) = many_server_store(dir.path(), |s| Some(s % 40)).await;
    let toolset = wake_never_reconnecting(store, configs).await;
    let woken = toolset.catalogue();
    for s in 0..30 {
        let name = format!("s{s}__tool_{}", s % 40);
        assert_eq!(
            woken.get(&name).map(|e| e.kind),
            Some(EntryKind::Quarantined),
            "{name}"
        );
    }
    let remote = woken
        .entries()
        .iter()
        .filter(|e| e.kind == EntryKind::Remote)
        .count();
    assert_eq!(remote, 30 * 40 - 30);
    let shown = serde_json::to_string(&woken.definitions().collect::<Vec<_>>()).unwrap_or_default();
    assert!(!shown.contains(HIJACK));
    let mut drift = drifted(&woken);
    drift.sort();
    let mut servers: Vec<String> = (0..30).map(|s| format!("s{s}")).collect();
    servers.sort();
    assert_eq!(drift, servers);
    toolset.close().await;
}

#[tokio::test]
async fn a_failed_listing_keeps_the_cached_map_but_no_call_is_sent() {
    let fixture = Fixture::new(&original());
    cold_start(&fixture).await;
    // The server can no longer list (its definitions file is gone).
    std::fs::remove_file(fixture.tools_path()).unwrap_or_else(|e| panic!("{e}"));
    let toolset = rebuild_from_store(vec![fixture.config()], fixture.options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    toolset.reconciled().await;
    let failed = failures(&toolset.diagnostics());
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].starts_with(&format!(
            "MCP server \"{SERVER}\" could not list its tools: "
        )) && failed[0].ends_with(
            "Its tools stay listed from the store's cache, but no call reaches it until it connects and lists them; it is retried in the background."
        ),
        "{}",
        failed[0]
    );
    for tool in ["echo", "read_file", "search"] {
        assert_eq!(kind(&toolset, tool), Some(EntryKind::Remote), "{tool}");
    }
    // Its listing was never compared with the baseline: refused, not sent.
    let refused = toolset
        .call(
            "echo",
            Some(json!({"message": "x"})),
            &CallContext::default(),
        )
        .await;
    assert!(
        matches!(refused, Err(CallError::Unavailable { .. })),
        "{refused:?}"
    );
    assert_eq!(fixture.calls("echo"), 0);
    let row = fixture.store().await.get(SERVER).await.ok().flatten();
    assert_eq!(
        row.and_then(|r| r.tools),
        Some(parsed(&original())),
        "the cache stays"
    );
    toolset.close().await;
}

#[tokio::test]
async fn an_empty_store_wakes_nothing_and_never_falls_back() {
    let fixture = Fixture::new(&original());
    let toolset = rebuild_from_store(vec![fixture.config()], fixture.options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    toolset.reconciled().await;
    assert!(toolset.tools().is_empty());
    assert!(toolset.catalogue().servers().is_empty());
    assert!(fixture.requests().is_empty(), "no server was started");
    toolset.close().await;
}

#[tokio::test]
async fn a_wake_needs_a_store() {
    let refused = rebuild_from_store(Vec::new(), ConnectOptions::default()).await;
    assert!(
        matches!(refused, Err(WiringError::StoreRequired)),
        "{refused:?}"
    );
}

#[tokio::test]
async fn rows_without_a_matching_config_are_refused_with_a_diagnostic() {
    let fixture = Fixture::new(&original());
    cold_start(&fixture).await;
    // Same name, another command line: another endpoint.
    let moved = McpServerConfig::stdio(SERVER, env!("CARGO_BIN_EXE_drift-fixture"), ["--moved"]);
    let toolset = rebuild_from_store(vec![moved], fixture.options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        failures(&toolset.diagnostics()),
        [format!(
            "MCP server \"{SERVER}\" does not match the supplied config (type or url differ)."
        )]
    );
    assert!(toolset.tools().is_empty());
    toolset.close().await;

    // No config at all for the stored row.
    let toolset = rebuild_from_store(Vec::new(), fixture.options().await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        failures(&toolset.diagnostics()),
        [format!(
            "MCP server \"{SERVER}\" has no matching config on wake; supply the server definition again."
        )]
    );
    toolset.reconciled().await;
    assert_eq!(fixture.lists(), 1, "nothing was listed");
}
