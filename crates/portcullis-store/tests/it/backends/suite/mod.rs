//! The behaviour every backend must share. Each function takes a
//! [`Harness`]: the store under test, a second instance on the same data (a
//! second pool, as a second replica would have; the same store for memory),
//! and, for SQL backends, raw access to the tables.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use portcullis_catalog::fingerprint::{Fingerprints, fingerprint, fingerprint_listing};
use portcullis_catalog::{ServerIdentity, Tool, ToolAnnotations, ToolResult, TransportKind};
use portcullis_store::{
    AuditDecision, AuditOutcome, AuditRecord, Outcome, PersistedServer, Store, StoreError,
    effect_key, retrust,
};
use serde_json::json;

/// Raw SQL access to a backend's tables.
#[async_trait::async_trait]
pub trait Raw: Send + Sync {
    /// Runs one statement.
    async fn exec(&self, sql: &str);
    /// Every column of every row of every table, as text.
    async fn dump(&self) -> String;
    /// Starts counting the `mcp_servers` rows that statements update.
    async fn count_server_updates(&self);
    /// How many `mcp_servers` rows were updated since counting started.
    async fn server_updates(&self) -> i64;
}

/// A backend under test.
pub struct Harness {
    pub store: Arc<dyn Store>,
    pub twin: Arc<dyn Store>,
    pub raw: Option<Box<dyn Raw>>,
}

fn docs() -> ServerIdentity {
    ServerIdentity::streamable_http("docs", "https://mcp.example.com/mcp")
}

fn listing(version: &str) -> Vec<Tool> {
    vec![
        Tool::new("search")
            .with_description(format!("Search the docs ({version})"))
            .with_input_schema(json!({"type": "object", "properties": {"q": {"type": "string"}}})),
        Tool::new("fetch")
            .with_description("Fetch a page")
            .with_annotations(ToolAnnotations::read_only(true)),
    ]
}

/// A row for `docs` caching `tools` and proposing their fingerprints.
fn trusting(tools: &[Tool]) -> PersistedServer {
    PersistedServer::new("docs", &docs())
        .with_tools(tools.to_vec())
        .with_fingerprints(fingerprint_listing(tools))
}

async fn row(store: &dyn Store, id: &str) -> PersistedServer {
    match store.get(id).await {
        Ok(Some(row)) => row,
        other => panic!("row {id:?}: {other:?}"),
    }
}

fn ok<T>(result: Result<T, StoreError>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

pub async fn baseline_survives_a_save_with_another_baseline(h: Harness) {
    let store = &*h.store;
    let v1 = listing("v1");
    let v2 = listing("v2");
    let first = ok(store.save(&trusting(&v1)).await);
    assert_eq!(first, Some(fingerprint_listing(&v1)));
    let second = ok(store.save(&trusting(&v2)).await);
    assert_eq!(
        second, first,
        "save returned the proposal, not the baseline in force"
    );
    let stored = row(store, "docs").await;
    assert_eq!(stored.tool_fingerprints, first);
    // The cache moves; the baseline does not.
    assert_eq!(stored.tools, Some(v2));
    assert_eq!(ok(store.trusted_tools("docs").await), Some(v1));
}

pub async fn the_cache_keeps_the_digests_of_what_it_holds(h: Harness) {
    let store = &*h.store;
    let digests = |tools: &[Tool]| tools.iter().map(fingerprint).collect::<Vec<_>>();
    let v1 = listing("v1");
    // Whatever a caller's row held, the store's own digests are kept.
    let row_read = row_with_digests(store, &v1).await;
    ok(store.save(&row_read).await);
    let stored = row(&*h.twin, "docs").await;
    assert_eq!(stored.cached_digests(), Some(digests(&v1).as_slice()));
    // The cache moves and its digests with it; the baseline stays.
    let v2 = listing("v2");
    ok(store.save(&trusting(&v2)).await);
    let listed = ok(h.twin.list().await);
    assert_eq!(listed[0].cached_digests(), Some(digests(&v2).as_slice()));
    assert_eq!(listed[0].tool_fingerprints, Some(fingerprint_listing(&v1)));
    if let Some(raw) = &h.raw {
        // Digests that do not pair up with the cache, or do not parse, are
        // not used: the wake hashes the cache instead.
        for bad in [r#"["one"]"#, "not json"] {
            raw.exec(&format!(
                "UPDATE mcp_servers SET tool_digests = '{bad}' WHERE id = 'docs'"
            ))
            .await;
            let stored = row(store, "docs").await;
            assert_eq!(stored.tools, Some(v2.clone()));
            assert_eq!(stored.cached_digests(), None, "{bad}");
        }
    }
    // A row without a cache has no digests.
    ok(store.save(&PersistedServer::new("docs", &docs())).await);
    assert_eq!(row(store, "docs").await.cached_digests(), None);
}

/// A row read back after saving `tools` under another id: it carries the
/// store's digests of `tools`, which a save of it under "docs" with other
/// tools must not keep.
async fn row_with_digests(store: &dyn Store, tools: &[Tool]) -> PersistedServer {
    let other = listing("other");
    let mut scratch = trusting(&other);
    scratch.id = "scratch".into();
    ok(store.save(&scratch).await);
    let mut read = row(store, "scratch").await;
    assert!(read.cached_digests().is_some());
    ok(store.remove("scratch").await);
    read.id = "docs".into();
    read.tools = Some(tools.to_vec());
    read.tool_fingerprints = Some(fingerprint_listing(tools));
    read
}

pub async fn a_baseline_with_pins_keeps_its_tools_and_pins(h: Harness) {
    use portcullis_catalog::definition::Prompt;
    use portcullis_catalog::pins::{merge_baseline, pin_all, split_baseline};
    let store = &*h.store;
    let v1 = listing("v1");
    let pins = pin_all(&[Prompt::new("greet").with_description("Say hi")], &[], &[]);
    let baseline = merge_baseline(&fingerprint_listing(&v1), &pins);
    let proposal = PersistedServer::new("docs", &docs())
        .with_tools(v1.clone())
        .with_fingerprints(baseline.clone());
    assert_eq!(ok(store.save(&proposal).await), Some(baseline.clone()));
    // The pins are no tools: the listing still defines the tool part, so it
    // is kept as the trusted definitions.
    assert_eq!(ok(store.trusted_tools("docs").await), Some(v1));
    let stored = row(&*h.twin, "docs").await;
    let (tools, kept) = split_baseline(&stored.tool_fingerprints.unwrap_or_default());
    assert_eq!(tools, split_baseline(&baseline).0);
    assert_eq!(kept, Some(pins), "the pins and their texts round-trip");
    // A listing that drifted is not kept as trusted, pins or not.
    assert!(ok(retrust(store, "docs").await));
    let drifted = PersistedServer::new("docs", &docs())
        .with_tools(listing("v2"))
        .with_fingerprints(baseline);
    ok(store.save(&drifted).await);
    assert_eq!(ok(store.trusted_tools("docs").await), None);
}

pub async fn save_all_saves_each_row_as_save_does_in_one_go(h: Harness) {
    let store = &*h.store;
    let v1 = listing("v1");
    let v2 = listing("v2");
    ok(store.save(&trusting(&v1)).await);
    let files = ServerIdentity::stdio("files", "npx", &["files"]);
    let fresh = PersistedServer::new("files", &files)
        .with_tools(v2.clone())
        .with_fingerprints(fingerprint_listing(&v2));
    let bare = PersistedServer::new(
        "bare",
        &ServerIdentity::streamable_http("bare", "https://bare.example/mcp"),
    )
    .with_tools(listing("v0"));
    // `docs` keeps its first baseline, `files` records its proposal,
    // `bare` proposes none: in row order, as three saves would answer.
    let in_force = ok(store.save_all(&[trusting(&v2), fresh, bare]).await);
    assert_eq!(
        in_force,
        [
            Some(fingerprint_listing(&v1)),
            Some(fingerprint_listing(&v2)),
            None
        ]
    );
    let stored = row(&*h.twin, "docs").await;
    assert_eq!(stored.tools, Some(v2.clone()), "the cache moves");
    assert_eq!(stored.tool_fingerprints, Some(fingerprint_listing(&v1)));
    assert_eq!(ok(store.trusted_tools("docs").await), Some(v1));
    assert_eq!(ok(store.trusted_tools("files").await), Some(v2));
    assert_eq!(row(&*h.twin, "bare").await.tool_fingerprints, None);
    assert_eq!(ok(store.save_all(&[]).await), Vec::new());
    // A row the store refuses saves nothing of the batch.
    let mut refused = trusting(&listing("v3"));
    refused.id = String::new();
    let fine = PersistedServer::new("later", &docs()).with_tools(listing("v3"));
    assert!(store.save_all(&[fine, refused]).await.is_err());
    if h.raw.is_some() {
        assert!(ok(store.get("later").await).is_none(), "one transaction");
    }
}

pub async fn a_save_without_baseline_never_erases_it(h: Harness) {
    let store = &*h.store;
    // No baseline yet, none proposed: none recorded.
    let bare = PersistedServer::new("docs", &docs()).with_tools(listing("v0"));
    assert_eq!(ok(store.save(&bare).await), None);
    assert_eq!(row(store, "docs").await.tool_fingerprints, None);
    let v1 = listing("v1");
    let recorded = ok(store.save(&trusting(&v1)).await);
    assert_eq!(recorded, Some(fingerprint_listing(&v1)));
    let mut uncached = PersistedServer::new("docs", &docs());
    uncached.tools = None;
    assert_eq!(ok(store.save(&uncached).await), recorded);
    let stored = row(store, "docs").await;
    assert_eq!(stored.tool_fingerprints, recorded);
    assert_eq!(stored.tools, None);
    // The other instance sees the same.
    assert_eq!(row(&*h.twin, "docs").await.tool_fingerprints, recorded);
}

pub async fn trust_reads_carry_the_cache_only_without_a_baseline(h: Harness) {
    let store = &*h.store;
    assert_eq!(ok(store.get_for_trust("docs").await), None);
    // A row with a cache and no baseline (as from before baselines): the
    // baseline is derived from the cache, so the cache comes with it.
    let v0 = listing("v0");
    let bare = PersistedServer::new("docs", &docs()).with_tools(v0.clone());
    assert_eq!(ok(store.save(&bare).await), None);
    let legacy = ok(store.get_for_trust("docs").await).unwrap_or_else(|| panic!("no row"));
    assert_eq!(legacy, row(store, "docs").await);
    assert_eq!(legacy.baseline_or_derived(), Some(fingerprint_listing(&v0)));
    // Once one is recorded, the cache stays in the store.
    let v1 = listing("v1");
    let recorded = ok(store.save(&trusting(&v1)).await);
    assert_eq!(recorded, Some(fingerprint_listing(&v1)));
    let trust = ok(h.twin.get_for_trust("docs").await).unwrap_or_else(|| panic!("no row"));
    assert_eq!(trust.tools, None);
    assert_eq!(trust.cached_digests(), None);
    assert_eq!(trust.tool_fingerprints, recorded);
    let full = row(store, "docs").await;
    assert_eq!(full.tools.as_deref(), Some(v1.as_slice()));
    assert_eq!(
        (&trust.id, &trust.name, trust.kind, &trust.url),
        (&full.id, &full.name, full.kind, &full.url)
    );
    assert!(trust_proposal_matches(&trust, &full, &listing("v2")));
}

/// The store's trust rule decides the same on the row read for trust as
/// on the whole row.
fn trust_proposal_matches(trust: &PersistedServer, full: &PersistedServer, live: &[Tool]) -> bool {
    use portcullis_store::trust::proposal;
    proposal(Some(trust), &docs(), live) == proposal(Some(full), &docs(), live)
}

pub async fn concurrent_first_saves_record_one_baseline(h: Harness) {
    let proposals: Vec<Vec<Tool>> = (0..8).map(|i| listing(&format!("replica {i}"))).collect();
    let mut tasks = Vec::new();
    for (i, tools) in proposals.iter().enumerate() {
        // Alternate instances: for SQL backends, two pools racing on one database.
        let store = if i % 2 == 0 {
            h.store.clone()
        } else {
            h.twin.clone()
        };
        let row = trusting(tools);
        tasks.push(tokio::spawn(async move { store.save(&row).await }));
    }
    let mut returned = BTreeSet::new();
    for task in tasks {
        let baseline = ok(task.await.unwrap_or_else(|e| panic!("{e}")));
        returned.insert(format!("{baseline:?}"));
        let baseline = baseline.unwrap_or_else(|| panic!("a racer got no baseline"));
        assert!(
            proposals.iter().any(|p| fingerprint_listing(p) == baseline),
            "the baseline in force is nobody's proposal"
        );
    }
    assert_eq!(
        returned.len(),
        1,
        "racers got different baselines: {returned:?}"
    );
    let stored = row(&*h.store, "docs").await;
    let winner = stored.tool_fingerprints.clone();
    assert_eq!(
        format!("{winner:?}"),
        returned.into_iter().next().unwrap_or_default()
    );
    assert_eq!(row(&*h.twin, "docs").await.tool_fingerprints, winner);
    // The trusted definitions are the winner's listing, not a loser's.
    let trusted =
        ok(h.store.trusted_tools("docs").await).unwrap_or_else(|| panic!("no trusted tools"));
    assert_eq!(Some(fingerprint_listing(&trusted)), winner);
}

pub async fn retrust_then_save_rebaselines(h: Harness) {
    let store = &*h.store;
    let v1 = listing("v1");
    let v2 = listing("v2");
    ok(store.save(&trusting(&v1)).await);
    // A reconcile caches the drifted listing; the baseline holds.
    assert_eq!(
        ok(store.save(&trusting(&v2)).await),
        Some(fingerprint_listing(&v1))
    );
    assert!(ok(retrust(store, "docs").await));
    let cleared = row(store, "docs").await;
    assert_eq!(cleared.tool_fingerprints, None);
    assert_eq!(cleared.tools, Some(v2.clone()), "retrust keeps the cache");
    assert_eq!(ok(store.trusted_tools("docs").await), None);
    // The next connect — here another replica's, through the twin —
    // derives from what the operator was shown, and records it.
    let reconnect = row(&*h.twin, "docs").await;
    let proposal = reconnect.baseline_or_derived();
    assert_eq!(proposal, Some(fingerprint_listing(&v2)));
    let row_again = PersistedServer::new("docs", &docs()).with_tools(v2.clone());
    let in_force = ok(h
        .twin
        .save(&row_again.with_fingerprints(proposal.unwrap_or_default()))
        .await);
    assert_eq!(in_force, Some(fingerprint_listing(&v2)));
    assert_eq!(ok(store.trusted_tools("docs").await), Some(v2.clone()));
    // And it is immutable again.
    assert_eq!(ok(store.save(&trusting(&v1)).await), in_force);
}

pub async fn retrust_and_remove_of_unknown_ids(h: Harness) {
    let store = &*h.store;
    assert!(!ok(retrust(store, "nobody").await));
    assert!(!ok(store.remove("nobody").await));
    ok(store.save(&trusting(&listing("v1"))).await);
    assert!(ok(store.remove("docs").await));
    assert!(!ok(store.remove("docs").await));
    assert!(ok(store.list().await).is_empty());
    assert_eq!(ok(store.trusted_tools("docs").await), None);
    // Removal forgets the baseline too: a new row trusts on first use.
    let v2 = listing("v2");
    assert_eq!(
        ok(store.save(&trusting(&v2)).await),
        Some(fingerprint_listing(&v2))
    );
}

pub async fn rows_round_trip_every_transport(h: Harness) {
    let store = &*h.store;
    let tools = vec![
        Tool::new("t")
            .with_title("T")
            .with_description("d")
            .with_input_schema(json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}))
            .with_output_schema(json!({"type": "object"}))
            .with_annotations(ToolAnnotations::read_only(false)),
    ];
    let servers = [
        ("b_sse", ServerIdentity::sse("b", "http://127.0.0.1:9/sse")),
        (
            "a_stdio",
            ServerIdentity::stdio("a", "./server", &["--flag"]),
        ),
        (
            "c",
            ServerIdentity::streamable_http("c", "https://c.example/mcp"),
        ),
    ];
    for (id, server) in &servers {
        ok(store
            .save(&PersistedServer::new(*id, server).with_tools(tools.clone()))
            .await);
    }
    let rows = ok(h.twin.list().await);
    let ids: Vec<_> = rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a_stdio", "b_sse", "c"], "list is ordered by id");
    for (id, server) in &servers {
        let expected = PersistedServer::new(*id, server).with_tools(tools.clone());
        assert_eq!(rows.iter().find(|r| r.id == *id), Some(&expected));
    }
    for row in &rows {
        assert_eq!(ok(h.store.get(&row.id).await).as_ref(), Some(row));
    }
    assert_eq!(ok(h.store.get("absent").await), None);
    assert_eq!(rows[0].kind, TransportKind::Stdio);
    // A pre-fingerprint row: the caller derives the baseline from the cache.
    assert_eq!(
        rows[0].baseline_or_derived(),
        Some(fingerprint_listing(&tools))
    );
}

pub async fn trusted_definitions_always_match_the_baseline(h: Harness) {
    let store = &*h.store;
    let v1 = listing("v1");
    let v2 = listing("v2");
    // A baseline proposed with a listing it was not computed from (a derived
    // baseline meeting a drifted server): the baseline is recorded, the
    // listing is not kept as its definitions.
    let mismatched = PersistedServer::new("docs", &docs())
        .with_tools(v2.clone())
        .with_fingerprints(fingerprint_listing(&v1));
    assert_eq!(
        ok(store.save(&mismatched).await),
        Some(fingerprint_listing(&v1))
    );
    assert_eq!(ok(store.trusted_tools("docs").await), None);
    // The first listing that matches the baseline becomes its definitions...
    ok(store.save(&trusting(&v1)).await);
    assert_eq!(ok(store.trusted_tools("docs").await), Some(v1.clone()));
    // ...and nothing later replaces them.
    ok(store.save(&trusting(&v2)).await);
    assert_eq!(ok(h.twin.trusted_tools("docs").await), Some(v1));
}

pub async fn a_save_that_would_change_nothing_writes_nothing(h: Harness) {
    let store = &*h.store;
    let v1 = listing("v1");
    let v2 = listing("v2");
    let baseline = ok(store.save(&trusting(&v1)).await);
    assert_eq!(baseline, Some(fingerprint_listing(&v1)));
    if let Some(raw) = &h.raw {
        raw.count_server_updates().await;
    }
    // Rows of `mcp_servers` rewritten so far, where the backend has rows.
    let updates = || async {
        match &h.raw {
            Some(raw) => Some(raw.server_updates().await),
            None => None,
        }
    };
    let expect = |n: i64| h.raw.as_ref().map(|_| n);

    // The same row again, proposing another baseline: the recorded one is
    // in force, and nothing is written.
    let same = PersistedServer::new("docs", &docs())
        .with_tools(v1.clone())
        .with_fingerprints(fingerprint_listing(&v2));
    assert_eq!(ok(store.save(&same).await), baseline);
    assert_eq!(updates().await, expect(0), "an unchanged row was rewritten");
    // A changed cache is written, once.
    assert_eq!(ok(store.save(&trusting(&v2)).await), baseline);
    assert_eq!(row(store, "docs").await.tools, Some(v2.clone()));
    assert_eq!(ok(store.save(&trusting(&v2)).await), baseline);
    assert_eq!(updates().await, expect(1));
    // Another endpoint under the same name is written; the baseline stays.
    let moved = ServerIdentity::streamable_http("docs", "https://mirror.example.com/mcp");
    let elsewhere = PersistedServer::new("docs", &moved)
        .with_tools(v2.clone())
        .with_fingerprints(fingerprint_listing(&v2));
    assert_eq!(ok(store.save(&elsewhere).await), baseline);
    assert_eq!(
        row(store, "docs").await.url,
        PersistedServer::endpoint_key(&moved.endpoint)
    );
    assert_eq!(updates().await, expect(2));
    // Back at the first endpoint with the first cache (saved without a
    // proposal this time): written, then not again.
    let back = PersistedServer::new("docs", &docs()).with_tools(v1.clone());
    assert_eq!(ok(store.save(&back).await), baseline);
    assert_eq!(updates().await, expect(3));
    assert_eq!(ok(store.save(&back).await), baseline);
    assert_eq!(updates().await, expect(3));
    // Another declared name, or another transport, at the same address:
    // written.
    let renamed = ServerIdentity::streamable_http("docs-v2", "https://mcp.example.com/mcp");
    let legacy = ServerIdentity::sse("docs", "https://mcp.example.com/mcp");
    for identity in [&renamed, &legacy, &docs()] {
        let moved = PersistedServer::new("docs", identity).with_tools(v1.clone());
        assert_eq!(ok(store.save(&moved).await), baseline);
    }
    assert_eq!(updates().await, expect(6));
    // In a batch, the unchanged row is left and the changed one written.
    let wiki = |tools: &[Tool]| {
        PersistedServer::new(
            "wiki",
            &ServerIdentity::streamable_http("wiki", "https://wiki.example.com/mcp"),
        )
        .with_tools(tools.to_vec())
        .with_fingerprints(fingerprint_listing(&v1))
    };
    ok(store.save(&wiki(&v1)).await);
    assert_eq!(
        ok(store.save_all(&[trusting(&v1), wiki(&v2)]).await),
        vec![baseline.clone(), baseline.clone()]
    );
    assert_eq!(row(store, "wiki").await.tools, Some(v2.clone()));
    assert_eq!(updates().await, expect(7));

    let Some(raw) = &h.raw else { return };
    // Definitions lost behind the store's back are kept again by the next
    // save of a cache that defines the baseline, though nothing else moved
    // (and though another server still has its own).
    raw.exec("DELETE FROM mcp_trusted_tools WHERE server_id = 'docs'")
        .await;
    assert_eq!(ok(store.trusted_tools("docs").await), None);
    assert_eq!(ok(store.save(&trusting(&v1)).await), baseline);
    assert_eq!(ok(store.trusted_tools("docs").await), Some(v1.clone()));
    // A cache text changed behind the store's back (its digests untouched)
    // is written again whole.
    raw.exec("UPDATE mcp_servers SET tools = '[]' WHERE id = 'docs'")
        .await;
    assert_eq!(ok(store.save(&trusting(&v1)).await), baseline);
    assert_eq!(row(store, "docs").await.tools, Some(v1.clone()));
    // A cache whose digests were lost (a row from before they were kept)
    // has them written again.
    raw.exec("UPDATE mcp_servers SET tool_digests = NULL WHERE id = 'docs'")
        .await;
    assert_eq!(ok(store.save(&trusting(&v1)).await), baseline);
    let digests: Vec<String> = v1.iter().map(fingerprint).collect();
    assert_eq!(
        row(store, "docs").await.cached_digests(),
        Some(&digests[..])
    );
    // A baseline that no longer parses is none: the proposal is recorded.
    raw.exec("UPDATE mcp_servers SET tool_fingerprints = '{' WHERE id = 'docs'")
        .await;
    assert_eq!(ok(store.save(&same).await), Some(fingerprint_listing(&v2)));
}

pub async fn batches_that_read_first_survive_a_concurrent_writer(h: Harness) {
    // A batch whose first row is unchanged reads before it writes; another
    // store writing the same tables meanwhile must make it wait, not fail.
    let v1 = listing("v1");
    let v2 = listing("v2");
    let server = |id: &str, tools: &[Tool]| {
        PersistedServer::new(
            id,
            &ServerIdentity::streamable_http(id, format!("https://{id}.example/mcp")),
        )
        .with_tools(tools.to_vec())
        .with_fingerprints(fingerprint_listing(&v1))
    };
    for id in ["steady", "moving", "other"] {
        ok(h.store.save(&server(id, &v1)).await);
    }
    let twin = h.twin.clone();
    let (writer_v1, writer_v2) = (v1.clone(), v2.clone());
    let writer = tokio::spawn(async move {
        for i in 0..60 {
            let tools = if i % 2 == 0 { &writer_v2 } else { &writer_v1 };
            let row = PersistedServer::new(
                "other",
                &ServerIdentity::streamable_http("other", "https://other.example/mcp"),
            )
            .with_tools(tools.to_vec());
            twin.save(&row).await.map(|_| ())?;
        }
        Ok::<(), StoreError>(())
    });
    for i in 0..60 {
        let tools = if i % 2 == 0 { &v2 } else { &v1 };
        ok(h.store
            .save_all(&[server("steady", &v1), server("moving", tools)])
            .await);
    }
    match writer.await {
        Ok(result) => ok(result),
        Err(panicked) => panic!("{panicked}"),
    }
}

pub async fn secrets_are_never_persisted(h: Harness) {
    let store = &*h.store;
    let secret = "s3cr3t-T0KEN";
    let stdio = ServerIdentity::stdio(
        "files",
        "npx",
        &["-y", "server-fs", &format!("--token={secret}")],
    );
    let remote = ServerIdentity::streamable_http(
        "docs",
        format!("https://bob:{secret}@mcp.example.com/mcp?api_key={secret}"),
    );
    // A smuggled header in a row deserialised from JSON has nowhere to go.
    let smuggled: PersistedServer = serde_json::from_value(json!({
        "id": "sse", "name": "sse", "type": "sse", "url": "https://sse.example/sse",
        "headers": {"Authorization": format!("Bearer {secret}")},
        "env": {"API_KEY": secret},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    for row in [
        PersistedServer::new("files", &stdio).with_tools(listing("v1")),
        PersistedServer::new("docs", &remote).with_fingerprints(Fingerprints::new()),
        smuggled,
    ] {
        ok(store.save(&row).await);
    }
    // Rows that would store a secret are refused outright.
    let mut raw_command = PersistedServer::new("leak", &stdio);
    raw_command.url = stdio.endpoint.identity();
    assert!(matches!(
        store.save(&raw_command).await,
        Err(StoreError::InvalidRow { .. })
    ));
    let mut raw_url = PersistedServer::new("leak", &remote);
    raw_url.url = format!("https://bob:{secret}@mcp.example.com/mcp");
    assert!(matches!(
        store.save(&raw_url).await,
        Err(StoreError::InvalidRow { .. })
    ));
    assert_eq!(ok(store.get("leak").await), None);

    let listed = format!("{:?}", ok(store.list().await));
    assert!(!listed.contains(secret), "{listed}");
    if let Some(raw) = &h.raw {
        let dump = raw.dump().await;
        assert!(
            dump.contains("stdio:sha256:"),
            "the dump missed the rows: {dump}"
        );
        assert!(
            !dump.contains(secret),
            "a secret reached the database: {dump}"
        );
        assert!(
            !dump.contains("server-fs"),
            "a command line reached the database"
        );
    }
}

pub async fn effect_log_first_write_wins(h: Harness) {
    let log = h.store.effects();
    let key = effect_key("run-1#0", 0, "docs__search", &json!({"q": "rust"}));
    assert_eq!(ok(log.recorded(&key).await), None);
    let mut result = ToolResult::text("found 3");
    result.structured_content = Some(json!({"hits": 3}));
    let finished = Outcome::Finished { result };
    let first = ok(log.record(&key, "docs__search", &finished).await);
    assert_eq!(first.outcome, finished);
    assert_eq!(first.tool_name, "docs__search");
    let again = ok(log
        .record(
            &key,
            "docs__search",
            &Outcome::Errored {
                message: "late".into(),
            },
        )
        .await);
    assert_eq!(
        again.outcome, finished,
        "a second record replaced the first"
    );
    let replayed = ok(h.twin.effects().recorded(&key).await);
    assert_eq!(replayed.map(|r| r.outcome), Some(finished));

    // Errors and error results replay as recorded.
    let errored = Outcome::Errored {
        message: "MCP tool error: boom".into(),
    };
    let k2 = effect_key("run-1#0", 1, "docs__search", &json!({"q": "rust"}));
    ok(log.record(&k2, "docs__search", &errored).await);
    assert_eq!(
        ok(log.recorded(&k2).await).map(|r| r.outcome),
        Some(errored)
    );
    let k3 = effect_key("run-1#0", 2, "docs__search", &json!({}));
    let tool_error = Outcome::Finished {
        result: ToolResult::error_text("ERR_X"),
    };
    ok(log.record(&k3, "docs__search", &tool_error).await);
    assert_eq!(
        ok(log.recorded(&k3).await).map(|r| r.outcome),
        Some(tool_error)
    );

    // The meta-tool is never recorded.
    let k4 = effect_key("run-1#0", 3, "mcp__describe_tool", &json!({"name": "x"}));
    let refused = log
        .record(
            &k4,
            "mcp__describe_tool",
            &Outcome::Errored {
                message: "x".into(),
            },
        )
        .await;
    assert!(matches!(refused, Err(StoreError::NotRecordable { .. })));
    assert_eq!(ok(log.recorded(&k4).await), None);

    // Racing replicas all get the one outcome recorded first.
    let k5 = effect_key("run-2#0", 0, "docs__search", &json!({}));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = if i % 2 == 0 {
            h.store.clone()
        } else {
            h.twin.clone()
        };
        let key = k5.clone();
        tasks.push(tokio::spawn(async move {
            let outcome = Outcome::Finished {
                result: ToolResult::text(format!("racer {i}")),
            };
            store.effects().record(&key, "docs__search", &outcome).await
        }));
    }
    let mut seen = BTreeSet::new();
    for task in tasks {
        let recorded = ok(task.await.unwrap_or_else(|e| panic!("{e}")));
        seen.insert(format!("{:?}", recorded.outcome));
    }
    assert_eq!(seen.len(), 1, "{seen:?}");
}

/// SQL backends: garbage in the cache columns is dropped, not thrown.
/// Saves server `id` (at `https://{id}.example/mcp`) caching `tools` and
/// trusting them.
async fn save_trusted(store: &dyn Store, id: &str, tools: &[Tool]) {
    let server = ServerIdentity::streamable_http(id, format!("https://{id}.example/mcp"));
    ok(store
        .save(
            &PersistedServer::new(id, &server)
                .with_tools(tools.to_vec())
                .with_fingerprints(fingerprint_listing(tools)),
        )
        .await);
}

pub async fn corrupt_cache_is_dropped(h: Harness) {
    let Some(raw) = &h.raw else {
        panic!("corrupt_cache_is_dropped needs raw SQL access")
    };
    let store = &*h.store;
    let v1 = listing("v1");
    for id in ["garbage", "wrong_shape", "nameless", "good"] {
        save_trusted(store, id, &v1).await;
    }
    raw.exec("UPDATE mcp_servers SET tools = 'not json at all', tool_fingerprints = '{\"search\":' WHERE id = 'garbage'").await;
    raw.exec("UPDATE mcp_servers SET tools = '{\"name\":\"x\"}', tool_fingerprints = '{\"search\": 42}' WHERE id = 'wrong_shape'").await;
    raw.exec("UPDATE mcp_servers SET tools = '[{\"description\":\"no name\"}]', tool_fingerprints = '[\"a\"]' WHERE id = 'nameless'").await;
    raw.exec("UPDATE mcp_trusted_tools SET tools = 'garbage' WHERE server_id = 'garbage'")
        .await;
    let rows = ok(store.list().await);
    assert_eq!(
        rows.len(),
        4,
        "a corrupt row was dropped whole or the list failed"
    );
    for row in &rows {
        if row.id == "good" {
            assert_eq!(row.tools, Some(v1.clone()));
            assert_eq!(row.tool_fingerprints, Some(fingerprint_listing(&v1)));
        } else {
            assert_eq!(row.tools, None, "{}", row.id);
            assert_eq!(row.tool_fingerprints, None, "{}", row.id);
        }
    }
    assert_eq!(ok(store.trusted_tools("garbage").await), None);
    // A baseline that no longer parses reads as none everywhere: the next
    // proposal is recorded, and a fresh save repairs the cache.
    let server = ServerIdentity::streamable_http("nameless", "https://nameless.example/mcp");
    let v2 = listing("v2");
    let repaired = ok(store
        .save(
            &PersistedServer::new("nameless", &server)
                .with_tools(v2.clone())
                .with_fingerprints(fingerprint_listing(&v2)),
        )
        .await);
    assert_eq!(repaired, Some(fingerprint_listing(&v2)));
    let stored = row(store, "nameless").await;
    assert_eq!(stored.tools, Some(v2.clone()));
    assert_eq!(stored.tool_fingerprints, repaired);
    assert_eq!(ok(store.trusted_tools("nameless").await), Some(v2));
}

pub async fn a_trust_read_of_a_corrupt_baseline_keeps_the_cache(h: Harness) {
    let Some(raw) = &h.raw else {
        panic!("a_trust_read_of_a_corrupt_baseline_keeps_the_cache needs raw SQL access")
    };
    let store = &*h.store;
    let v1 = listing("v1");
    save_trusted(store, "docs", &v1).await;
    raw.exec("UPDATE mcp_servers SET tool_fingerprints = '{\"search\":' WHERE id = 'docs'")
        .await;
    // The baseline reads as none, as everywhere; the cache comes with it,
    // so the baseline is derived from what was cached, not from what the
    // server lists now.
    let trust = ok(store.get_for_trust("docs").await).unwrap_or_else(|| panic!("no row"));
    assert_eq!(trust.tool_fingerprints, None);
    assert_eq!(trust.tools.as_deref(), Some(v1.as_slice()));
    let server = ServerIdentity::streamable_http("docs", "https://docs.example/mcp");
    let drifted = listing("drifted");
    let proposal = portcullis_store::trust::proposal(Some(&trust), &server, &drifted);
    assert_eq!(proposal, Some(fingerprint_listing(&v1)));
    let whole = ok(store.get("docs").await);
    assert_eq!(
        proposal,
        portcullis_store::trust::proposal(whole.as_ref(), &server, &drifted)
    );
}

/// A listing of 60 tools with ~2 kB descriptions (~130 kB stored), told
/// apart by `label`.
fn large_listing(label: usize) -> Vec<Tool> {
    (0..60)
        .map(|i| {
            Tool::new(format!("tool_{i}"))
                .with_description(format!("{label}:{i} {}", "lorem ipsum ".repeat(170)))
                .with_input_schema(json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": label * 100 + i}}}))
        })
        .collect()
}

/// Enough cached text (~1.5 MB) that a SQL backend decodes rows on a
/// second thread too, as they arrive: every row comes back, in order,
/// whole, and a corrupt cache among the later rows is dropped wherever it
/// is decoded.
pub async fn a_large_read_comes_back_whole_and_in_order(h: Harness) {
    let store = &*h.store;
    let ids: Vec<String> = (0..12).map(|i| format!("server_{i:02}")).collect();
    for (label, id) in ids.iter().enumerate() {
        save_trusted(store, id, &large_listing(label)).await;
    }
    let corrupt = "server_10";
    if let Some(raw) = &h.raw {
        raw.exec(&format!(
            "UPDATE mcp_servers SET tools = '[{{\"name\":' WHERE id = '{corrupt}'"
        ))
        .await;
    }
    let rows = ok(h.twin.list().await);
    let listed: Vec<&str> = rows.iter().map(|row| row.id.as_str()).collect();
    assert_eq!(listed, ids, "rows lost or out of order");
    for (label, row) in rows.iter().enumerate() {
        let tools = large_listing(label);
        assert_eq!(row.tool_fingerprints, Some(fingerprint_listing(&tools)));
        if h.raw.is_some() && row.id == corrupt {
            assert_eq!(row.tools, None, "a corrupt cache was read");
            continue;
        }
        let digests: Vec<String> = tools.iter().map(fingerprint).collect();
        assert_eq!(row.cached_digests(), Some(digests.as_slice()), "{}", row.id);
        assert!(row.tools == Some(tools), "{}: another listing", row.id);
    }
}

/// A fixed instant, whole milliseconds, so it survives storage exactly.
fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_764_500_000_000)
}

pub async fn effect_log_prunes_before_a_cutoff(h: Harness) {
    let log = h.store.effects();
    let hour = Duration::from_secs(3600);
    let old_key = effect_key("run-1#0", 0, "docs__search", &json!({"q": "old"}));
    let new_key = effect_key("run-1#0", 1, "docs__search", &json!({"q": "new"}));
    let finished = |text: &str| Outcome::Finished {
        result: ToolResult::text(text),
    };
    let old = ok(log
        .record_at(&old_key, "docs__search", &finished("old"), t0())
        .await);
    assert_eq!(old.recorded_at, t0());
    ok(log
        .record_at(&new_key, "docs__search", &finished("new"), t0() + hour)
        .await);
    // Strictly before: a record made at the cut-off stays.
    assert_eq!(ok(log.prune_before(t0()).await), 0);
    assert_eq!(
        ok(h.twin
            .effects()
            .prune_before(t0() + Duration::from_millis(1))
            .await),
        1
    );
    assert_eq!(ok(log.recorded(&old_key).await), None);
    let kept = ok(h.twin.effects().recorded(&new_key).await);
    assert_eq!(kept.map(|r| r.outcome), Some(finished("new")));
    // A pruned key is free again: the replayed turn runs and records anew.
    let again = ok(log
        .record(&old_key, "docs__search", &finished("again"))
        .await);
    assert_eq!(again.outcome, finished("again"));
    assert!(
        again.recorded_at > t0() + hour,
        "record() stamps the present"
    );
    let everything = SystemTime::now() + hour;
    assert_eq!(ok(log.prune_before(everything).await), 2);
    assert_eq!(ok(log.recorded(&new_key).await), None);
    assert_eq!(ok(log.prune_before(everything).await), 0);
}

pub async fn audit_trail_keeps_shapes_newest_first_and_prunes(h: Harness) {
    let log = h.store.audit();
    let secret = "s3cr3t-ARGUMENT-value";
    let number = 918_273_645_i64;
    let args = json!({
        "path": format!("/home/{secret}/notes.txt"),
        "limit": number,
        "nested": [[{"k": secret}], 3.25, [true, null]],
    });
    let second = Duration::from_secs(1);
    let records = vec![
        AuditRecord::new(
            t0(),
            "files__read",
            &args,
            AuditDecision::Allowed,
            AuditOutcome::Ok,
        )
        .by("alice@example.com")
        .took(12),
        AuditRecord::new(
            t0() + second,
            "files__write",
            &json!({"content": secret}),
            AuditDecision::Denied,
            AuditOutcome::ToolError,
        )
        .by("bob"),
        AuditRecord::new(
            t0() + 2 * second,
            "docs__search",
            &json!({"q": secret}),
            AuditDecision::Approved,
            AuditOutcome::Failed {
                code: "ERR_TIMEOUT".into(),
            },
        )
        .took(60_000),
        // Same time as the previous one: recorded later, listed first.
        AuditRecord::new(
            t0() + 2 * second,
            "docs__fetch",
            &json!(secret),
            AuditDecision::Quarantined,
            AuditOutcome::ToolError,
        ),
    ];
    for record in &records {
        ok(log.record(record).await);
    }
    let newest_first: Vec<AuditRecord> = records.iter().rev().cloned().collect();
    assert_eq!(ok(h.twin.audit().recent(10).await), newest_first);
    assert_eq!(ok(log.recent(2).await), newest_first[..2].to_vec());
    assert_eq!(ok(log.recent(0).await), Vec::new());
    let read = &ok(log.recent(10).await)[3];
    assert_eq!(read.identity.as_deref(), Some("alice@example.com"));
    assert_eq!(read.duration_ms, 12);
    assert_eq!(
        read.argument_shape.as_value(),
        &json!({"limit": "integer", "nested": [[{"k": "string"}], "number", ["boolean", "null"]], "path": "string"})
    );
    // No argument value anywhere: not in what is read back, not in the tables.
    let shown = format!("{:?}", ok(log.recent(10).await));
    assert!(!shown.contains(secret) && !shown.contains(&number.to_string()));
    if let Some(raw) = &h.raw {
        let dump = raw.dump().await;
        assert!(
            dump.contains("files__write"),
            "the dump missed the audit: {dump}"
        );
        assert!(
            !dump.contains(secret),
            "an argument value reached the database: {dump}"
        );
        assert!(!dump.contains(&number.to_string()), "{dump}");
    }
    // Retention: strictly before the cut-off goes.
    assert_eq!(ok(log.prune_before(t0()).await), 0);
    assert_eq!(ok(log.prune_before(t0() + second).await), 1);
    assert_eq!(ok(log.recent(10).await), newest_first[..3].to_vec());
    assert_eq!(ok(h.twin.audit().prune_before(t0() + 3 * second).await), 3);
    assert!(ok(log.recent(10).await).is_empty());
}

/// Two replicas pruning the same tables at once (as `serve`'s retention
/// does on every replica sharing PostgreSQL): every old record is deleted
/// exactly once between them, nothing recent is touched, and neither fails.
pub async fn concurrent_prunes_delete_each_record_once(h: Harness) {
    const OLD: u64 = 40;
    let second = Duration::from_secs(1);
    let finished = Outcome::Finished {
        result: ToolResult::text("done"),
    };
    for i in 0..OLD {
        let at = t0() + second * i as u32;
        let record = AuditRecord::new(
            at,
            "docs__search",
            &json!({"q": "x"}),
            AuditDecision::Allowed,
            AuditOutcome::Ok,
        );
        ok(h.store.audit().record(&record).await);
        let key = effect_key("run-prune#0", i, "docs__search", &json!({}));
        ok(h.store
            .effects()
            .record_at(&key, "docs__search", &finished, at)
            .await);
    }
    let recent = t0() + Duration::from_secs(86_400);
    let record = AuditRecord::new(
        recent,
        "docs__fetch",
        &json!({}),
        AuditDecision::Allowed,
        AuditOutcome::Ok,
    );
    ok(h.store.audit().record(&record).await);
    let recent_key = effect_key("run-prune#0", OLD, "docs__fetch", &json!({}));
    ok(h.store
        .effects()
        .record_at(&recent_key, "docs__fetch", &finished, recent)
        .await);

    let cutoff = t0() + Duration::from_secs(3600);
    let (a, b, c, d) = tokio::join!(
        h.store.audit().prune_before(cutoff),
        h.twin.audit().prune_before(cutoff),
        h.store.effects().prune_before(cutoff),
        h.twin.effects().prune_before(cutoff),
    );
    assert_eq!(ok(a) + ok(b), OLD, "audit records deleted once each");
    assert_eq!(ok(c) + ok(d), OLD, "effect records deleted once each");
    let left = ok(h.twin.audit().recent(100).await);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].tool, "docs__fetch");
    assert!(ok(h.twin.effects().recorded(&recent_key).await).is_some());
}

pub async fn grants_are_kept_one_per_upstream_as_sealed(h: Harness) {
    use portcullis_store::SealedGrant;
    let grants = h.store.grants();
    // Whole milliseconds, so every backend reads the time back exactly.
    let at = UNIX_EPOCH + Duration::from_millis(1_764_500_000_123);
    // Every byte value, so an encoding that loses some would show.
    let sealed: Vec<u8> = (0..=255u8).collect();
    let docs = SealedGrant {
        upstream: "docs".into(),
        issuer: "https://auth.example".into(),
        sealed: sealed.clone(),
        updated_at: at,
    };
    assert_eq!(ok(grants.get("docs").await), None);
    ok(grants.put(&docs).await);
    ok(grants
        .put(&SealedGrant {
            upstream: "crm".into(),
            issuer: "https://id.crm.example".into(),
            sealed: vec![],
            updated_at: at,
        })
        .await);
    assert_eq!(ok(grants.get("docs").await), Some(docs.clone()));
    // A twin (another replica on the same database) reads the same grant.
    assert_eq!(ok(h.twin.grants().get("docs").await), Some(docs.clone()));

    // A new login replaces the grant, issuer included.
    let relogin = SealedGrant {
        issuer: "https://other-auth.example".into(),
        sealed: b"new".to_vec(),
        updated_at: at + Duration::from_secs(60),
        ..docs.clone()
    };
    ok(grants.put(&relogin).await);
    let listed = ok(grants.list().await);
    assert_eq!(
        listed
            .iter()
            .map(|g| g.upstream.as_str())
            .collect::<Vec<_>>(),
        ["crm", "docs"]
    );
    assert_eq!(listed[1], relogin);

    assert!(ok(grants.remove("docs").await));
    assert!(!ok(grants.remove("docs").await));
    assert_eq!(ok(grants.get("docs").await), None);
    assert_eq!(ok(grants.list().await).len(), 1);

    // The debug form names the upstream and issuer, never the bytes.
    let shown = format!("{relogin:?}");
    assert!(
        shown.contains("docs") && shown.contains("<3 bytes>"),
        "{shown}"
    );
    assert!(!shown.contains("110, 101, 119"), "{shown}");
}
