//! How long a wake's `list()` takes from SQLite: 50 servers × 100 tools.
//!
//! `cargo run --release -p portcullis-store --example list_timing [DIR]`
//!
//! Prints the median and the fastest of 30 runs. Not a test: nothing asserts
//! on time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use portcullis_catalog::fingerprint::fingerprint_listing;
use portcullis_catalog::{ServerIdentity, Tool, ToolAnnotations};
use portcullis_store::{PersistedServer, SqliteStore, Store};
use serde_json::json;

const SERVERS: usize = 50;
const TOOLS: usize = 100;
const RUNS: usize = 30;

fn tools(server: usize) -> Vec<Tool> {
    (0..TOOLS)
        .map(|t| {
            Tool::new(format!("tool_{t}"))
                .with_description(format!(
                    "Tool {t} of server {server}: searches the records it is given and returns the matching ones, \
                     paginated, with their identifiers and a short summary of each."
                ))
                .with_input_schema(json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What to look for"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                        "cursor": {"type": "string"}
                    },
                    "required": ["query"]
                }))
                .with_annotations(ToolAnnotations::read_only(t % 2 == 0))
        })
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("portcullis-list-timing"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let store = SqliteStore::open(&dir.join("store.db")).await?;
    for s in 0..SERVERS {
        let name = format!("server_{s}");
        let server =
            ServerIdentity::streamable_http(&name, format!("http://127.0.0.1:{}/mcp", 9000 + s));
        let listing = tools(s);
        let baseline = fingerprint_listing(&listing);
        store
            .save(
                &PersistedServer::new(&name, &server)
                    .with_tools(listing)
                    .with_fingerprints(baseline),
            )
            .await?;
    }
    let mut times: Vec<Duration> = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        let rows = store.list().await?;
        times.push(started.elapsed());
        let tools: usize = rows
            .iter()
            .map(|r| r.tools.as_ref().map_or(0, Vec::len))
            .sum();
        assert_eq!(tools, SERVERS * TOOLS);
    }
    times.sort();
    let bytes = std::fs::metadata(dir.join("store.db"))?.len();
    println!(
        "list() of {SERVERS} servers x {TOOLS} tools from SQLite ({} KiB file): median {:.2} ms, fastest {:.2} ms over {RUNS} runs",
        bytes / 1024,
        times[RUNS / 2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3
    );
    Ok(())
}
