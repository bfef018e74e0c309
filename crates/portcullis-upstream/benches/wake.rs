//! Time to a usable tool map for 50 servers × 100 tools: a wake from a
//! SQLite store (projected from the cached listings, no server contacted)
//! against a cold connect (handshake and `tools/list` per server, every
//! listing saved in one transaction), side by side in one run, against
//! loopback Streamable HTTP servers in this process.
//!
//! `cargo bench -p portcullis-upstream --bench wake` prints the medians of
//! several rounds of each, how many `tools/list` pages and HTTP requests
//! the servers served before the wake's map was handed back (a wake's
//! handshakes and listings happen in the background, after the map is
//! usable), and the time from the wake to a first call's answer (the call
//! waits for its server's live listing to be checked).

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use portcullis_catalog::catalogue::ListingRef;
use portcullis_catalog::classification::Classification;
use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::{Catalogue, ProjectionOptions, ServerIdentity, Tool, ToolFilter};
use portcullis_store::{SqliteStore, Store};
use portcullis_upstream::{
    CallContext, ConnectOptions, McpServerConfig, connect, rebuild_from_store,
};

const SERVERS: usize = 50;
/// The fixture publishes 10 tools of its own; padding makes 100.
const PAD: usize = 90;
const ROUNDS: usize = 9;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => panic!("tokio runtime: {e}"),
    };
    runtime.block_on(run());
}

async fn run() {
    let mut servers = Vec::with_capacity(SERVERS);
    for i in 0..SERVERS {
        servers.push(
            common::http_fixture(common::FixtureConfig {
                label: i.to_string(),
                pad: PAD,
                ..Default::default()
            })
            .await,
        );
    }
    let configs: Vec<McpServerConfig> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| McpServerConfig::streamable_http(format!("s{i}"), s.mcp_url()))
        .collect();
    let lists = || -> usize {
        servers
            .iter()
            .map(|s| s.state.list_pages.load(Ordering::SeqCst))
            .sum()
    };
    // Requests that arrived in `[from, to)`: the wake's background
    // connections start as it returns, so counting after it returned would
    // count some of theirs.
    let requests = |from: Instant, to: Instant| -> usize {
        servers
            .iter()
            .flat_map(|s| s.seen())
            .filter(|seen| seen.at >= from && seen.at < to)
            .count()
    };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let store: Arc<dyn Store> = match SqliteStore::open(&dir.path().join("bench.sqlite")).await {
        Ok(store) => Arc::new(store),
        Err(e) => panic!("sqlite: {e}"),
    };
    let with_store = || ConnectOptions::default().with_store(store.clone());

    // Persist the catalogues once (and warm every connection pool).
    let first = connect(configs.clone(), with_store())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = first.catalogue().entries().len();
    assert_eq!(first.catalogue().servers().len(), SERVERS);
    assert!(tools >= SERVERS * 100, "{tools} tools");
    first.close().await;

    let (mut cold, mut cold_plain, mut wake, mut wake_settled, mut wake_call) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut cold_lists, mut wake_lists_at_map, mut wake_lists_total) = (0, 0, 0);
    let mut wake_requests_at_map = 0;
    let (mut read, mut projected, mut projected_alone) = (Vec::new(), Vec::new(), Vec::new());
    let (mut saved_each, mut saved_batch) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let before = lists();
        let start = Instant::now();
        let toolset = connect(configs.clone(), with_store())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        cold.push(start.elapsed());
        cold_lists += lists() - before;
        assert_eq!(toolset.catalogue().entries().len(), tools);
        toolset.close().await;

        let start = Instant::now();
        let toolset = connect(configs.clone(), ConnectOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        cold_plain.push(start.elapsed());
        toolset.close().await;

        let before = lists();
        let start = Instant::now();
        let toolset = rebuild_from_store(configs.clone(), with_store())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let usable = Instant::now();
        wake.push(usable - start);
        wake_lists_at_map += lists() - before;
        wake_requests_at_map += requests(start, usable);
        assert_eq!(toolset.catalogue().entries().len(), tools);
        // One call as soon as the map is there: it waits for its server's
        // handshake and checked listing (the others connect meanwhile).
        let answer = toolset
            .call(
                "s7__echo",
                Some(serde_json::json!({"message": "awake"})),
                &CallContext::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!answer.is_error, "{answer:?}");
        wake_call.push(start.elapsed());
        toolset.reconciled().await;
        wake_settled.push(start.elapsed());
        // The wake's two parts, alone: one read of the store, and the
        // projection of every cached listing against its baseline.
        let start = Instant::now();
        let rows = store.list().await.unwrap_or_else(|e| panic!("{e}"));
        read.push(start.elapsed());
        let identities: Vec<ServerIdentity> = rows
            .iter()
            .map(|row| {
                configs
                    .iter()
                    .find(|c| c.name() == row.id)
                    .map(McpServerConfig::identity)
                    .unwrap_or_else(|| panic!("config of {}", row.id))
            })
            .collect();
        let baselines: Vec<Option<Fingerprints>> =
            rows.iter().map(|row| row.baseline_or_derived()).collect();
        let (filter, classification) = (ToolFilter::All, Classification::default());
        // As the wake lends them: the toolset keeps each cached listing
        // (with the digests the store wrote beside it) for later
        // projections, and the catalogue copies what it keeps.
        let shared: Vec<Arc<[Tool]>> = rows
            .iter()
            .map(|row| row.tools.clone().unwrap_or_default().into())
            .collect();
        let listings = rows
            .iter()
            .zip(&shared)
            .zip(&identities)
            .zip(&baselines)
            .map(|(((row, tools), identity), baseline)| ListingRef {
                identity,
                tools,
                digests: row.cached_digests(),
                baseline: baseline.as_ref(),
                filter: &filter,
                classification: &classification,
                shared: Some(tools),
            });
        // On as many threads as a toolset's projection takes, and on this
        // thread alone; which goes first alternates by round (a projection
        // inherits the allocator's state its predecessor left).
        let spread = ProjectionOptions {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            ..Default::default()
        };
        let alone = ProjectionOptions::default();
        let runs = if round % 2 == 0 {
            [(&spread, &mut projected), (&alone, &mut projected_alone)]
        } else {
            [(&alone, &mut projected_alone), (&spread, &mut projected)]
        };
        for (options, times) in runs {
            let start = Instant::now();
            let catalogue = Catalogue::project(listings.clone(), options);
            times.push(start.elapsed());
            assert_eq!(catalogue.entries().len(), tools);
        }
        // A cold start's writes alone: every row saved one by one (as
        // before) against one batch in one transaction (as now).
        let rows = store.list().await.unwrap_or_else(|e| panic!("{e}"));
        let start = Instant::now();
        for row in &rows {
            store.save(row).await.unwrap_or_else(|e| panic!("{e}"));
        }
        saved_each.push(start.elapsed());
        let start = Instant::now();
        store
            .save_all(&rows)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        saved_batch.push(start.elapsed());
        wake_lists_total += lists() - before;
        // 100 padded tools exceed the default disclosure budget (a
        // warning, expected); anything else means the wake went wrong.
        let unexpected: Vec<_> = toolset
            .diagnostics()
            .into_iter()
            .filter(|d| d.rule != portcullis_catalog::Rule::DisclosureBudgetExceeded)
            .collect();
        assert!(unexpected.is_empty(), "{unexpected:?}");
        toolset.close().await;
    }

    println!(
        "{SERVERS} servers x {} tools each, {ROUNDS} rounds, medians:",
        tools / SERVERS
    );
    println!(
        "  cold connect, SQLite store    {:>8.1} ms   tools/list pages per round: {}",
        ms(median(cold)),
        cold_lists / ROUNDS
    );
    println!(
        "    its saves alone: one by one {:>8.1} ms   in one transaction {:.1} ms",
        ms(median(saved_each)),
        ms(median(saved_batch))
    );
    println!(
        "  cold connect, no store        {:>8.1} ms",
        ms(median(cold_plain))
    );
    println!(
        "  wake from SQLite (map usable) {:>8.1} ms   tools/list pages before the map: {}, HTTP requests: {}",
        ms(median(wake)),
        wake_lists_at_map / ROUNDS,
        wake_requests_at_map / ROUNDS
    );
    println!(
        "    of which: store read        {:>8.1} ms   projection {:.1} ms (on one thread {:.1} ms)",
        ms(median(read)),
        ms(median(projected)),
        ms(median(projected_alone))
    );
    println!(
        "  wake, first call answered     {:>8.1} ms",
        ms(median(wake_call))
    );
    println!(
        "  wake, until reconciled()      {:>8.1} ms   tools/list pages per round: {}",
        ms(median(wake_settled)),
        wake_lists_total / ROUNDS
    );
}
