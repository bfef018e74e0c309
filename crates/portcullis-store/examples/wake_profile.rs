//! A wake's two parts in a plain loop, for a profiler: one read of 50
//! cached listings of 100 tools from SQLite (shaped like the wake bench's
//! fixture: 10 small tools and 90 with ~1.2 kB descriptions) and their
//! projection against the baselines, as a wake lends them.
//!
//! ```sh
//! cargo build --profile profiling -p portcullis-store --example wake_profile
//! valgrind --tool=callgrind target/profiling/examples/wake_profile 3
//! ```
//!
//! `wake_profile ROUNDS [both|read]`: each round reads the store and
//! projects what it read, as a wake does (default), or only reads it; the
//! store is written once, before the rounds, in a fresh temporary
//! directory. Take the difference of two runs of different lengths to leave
//! the set-up out, and of the two modes for the projection alone. Prints
//! the median time of a round (not a test: nothing asserts on time).

use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis_catalog::catalogue::ListingRef;
use portcullis_catalog::classification::Classification;
use portcullis_catalog::fingerprint::{Fingerprints, fingerprint_listing};
use portcullis_catalog::{Catalogue, ProjectionOptions, ServerIdentity, Tool, ToolFilter};
use portcullis_store::{PersistedServer, SqliteStore, Store};
use serde_json::json;

const SERVERS: usize = 50;

/// The bench fixture's listing: its 10 tools and 90 padding tools.
fn listing() -> Vec<Tool> {
    let small = |name: &str, description: &str| {
        Tool::new(name)
            .with_description(description)
            .with_input_schema(json!({"type": "object"}))
    };
    let mut tools = vec![
        Tool::new("echo")
            .with_description("Echo the message back.")
            .with_input_schema(json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]})),
        small("whoami", "Say which fixture answered."),
        Tool::new("slow")
            .with_description("Sleep for ms milliseconds.")
            .with_input_schema(json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}})),
        small("hang", "Never answer (until cancelled)."),
        Tool::new("progress")
            .with_description("Report progress `steps` times, then answer.")
            .with_input_schema(json!({"type": "object", "properties": {"steps": {"type": "integer", "minimum": 1, "maximum": 50}}})),
        small("fail", "Answer with a tool error."),
        small("pid", "The server's process id."),
        small("withdraw", "Stop publishing `echo` and announce it."),
        Tool::new("env")
            .with_description("The value of one environment variable.")
            .with_input_schema(json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})),
        Tool::new("structured")
            .with_description("Answer with structured content: mode good, bad or none.")
            .with_input_schema(json!({"type": "object", "properties": {"mode": {"type": "string"}}}))
            .with_output_schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})),
    ];
    for i in 0..90 {
        tools.push(
            Tool::new(format!("tool_{i}"))
                .with_description(format!(
                    "Padding tool number {i}. {}",
                    "Lorem ipsum dolor sit amet. ".repeat(40)
                ))
                .with_input_schema(json!({"type": "object", "properties": {
                    "payload": {"type": "string", "description": "What to send. ".repeat(20)},
                    "count": {"type": "integer", "description": "How many."}
                }, "required": ["payload"]})),
        );
    }
    tools
}

/// Projects the rows' cached listings as a wake lends them: shared, with
/// the store's digests, against the recorded baselines.
fn project(rows: &mut [PersistedServer], identities: &[ServerIdentity]) -> Catalogue {
    let (filter, classification) = (ToolFilter::All, Classification::default());
    let digests: Vec<Option<Vec<String>>> =
        rows.iter_mut().map(|r| r.take_cached_digests()).collect();
    let baselines: Vec<Option<Fingerprints>> = rows
        .iter_mut()
        .map(|r| r.tool_fingerprints.take())
        .collect();
    let shared: Vec<Arc<[Tool]>> = rows
        .iter_mut()
        .map(|r| r.tools.take().unwrap_or_default().into())
        .collect();
    let listings = identities
        .iter()
        .zip(&shared)
        .zip(&digests)
        .zip(&baselines)
        .map(|(((identity, tools), digests), baseline)| ListingRef {
            identity,
            tools,
            digests: digests.as_deref(),
            baseline: baseline.as_ref(),
            filter: &filter,
            classification: &classification,
            shared: Some(tools),
        });
    Catalogue::project(listings, &ProjectionOptions::default())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let mode = std::env::args().nth(2).unwrap_or_else(|| "both".to_owned());
    let dir = std::env::temp_dir().join(format!("portcullis-wake-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = SqliteStore::open(&dir.join("store.db")).await?;
    let tools = listing();
    let baseline = fingerprint_listing(&tools);
    let identities: Vec<ServerIdentity> = (0..SERVERS)
        .map(|s| {
            ServerIdentity::streamable_http(
                format!("s{s}"),
                format!("http://127.0.0.1:{}/mcp", 9000 + s),
            )
        })
        .collect();
    for identity in &identities {
        store
            .save(
                &PersistedServer::new(&identity.name, identity)
                    .with_tools(tools.clone())
                    .with_fingerprints(baseline.clone()),
            )
            .await?;
    }
    let mut times: Vec<Duration> = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let entries = match mode.as_str() {
            "read" => std::hint::black_box(store.list().await?).len(),
            _ => {
                let mut rows = store.list().await?;
                project(&mut rows, &identities).entries().len()
            }
        };
        times.push(started.elapsed());
        std::hint::black_box(entries);
    }
    let _ = std::fs::remove_dir_all(&dir);
    times.sort();
    if let Some(median) = times.get(rounds / 2) {
        println!(
            "{mode}: median {:.2} ms over {rounds} rounds",
            median.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
