//! The projection bench's main case in a plain loop, for a profiler
//! (criterion's harness does not run under valgrind):
//!
//! ```sh
//! cargo build --profile profiling -p portcullis-catalog --example projection_profile
//! valgrind --tool=callgrind target/profiling/examples/projection_profile 20
//! ```
//!
//! Projects one 1 000-tool server against its baseline N times (default 20);
//! with `wake` as the second argument, 50 servers of 100 tools with long
//! descriptions instead (the wake bench's catalogue); with `stored` as the
//! third, each listing comes with its digests and is shared, as a wake's
//! from the store; with `text` or `values` as the fourth, each round also
//! reads every listing from its stored JSON text first, as `CachedTools`
//! (schemas kept as text) or as `Vec<Tool>` (schemas parsed), or not
//! (anything else, e.g. `-`); a fifth
//! argument is the number of threads the projection may use (default 1).

use std::hint::black_box;
use std::sync::Arc;

use portcullis_catalog::catalogue::ListingRef;
use portcullis_catalog::fingerprint::{fingerprint, fingerprint_listing};
use portcullis_catalog::{
    CachedTools, Catalogue, ProjectionOptions, ServerIdentity, ServerListing, Tool,
};
use serde_json::json;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let wake = std::env::args().nth(2).is_some_and(|a| a == "wake");
    let stored = std::env::args().nth(3).is_some_and(|a| a == "stored");
    let read = std::env::args()
        .nth(4)
        .filter(|r| r == "text" || r == "values");
    let (servers, per_server, padding) = if wake { (50, 100, 40) } else { (1, 1_000, 0) };
    let tools: Vec<Tool> = (0..per_server)
        .map(|i| {
            let name = if i % 10 == 0 { format!("ns.tool_{i}") } else { format!("tool_{i}") };
            Tool::new(name)
                .with_description(format!("Tool {i}: fetches records of kind {i} and summarises them for the caller. {}", "Lorem ipsum dolor sit amet. ".repeat(padding)))
                .with_input_schema(json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What to look for", "maxLength": 200},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
                        "include_archived": {"type": "boolean", "description": "Also search the archive"},
                        "sort": {"type": "string", "enum": ["asc", "desc"]}
                    },
                    "required": ["query"]
                }))
        })
        .collect();
    let baseline = fingerprint_listing(&tools);
    let listings: Vec<ServerListing> = (0..servers)
        .map(|s| {
            let server = ServerIdentity::streamable_http(
                format!("s{s}"),
                format!("https://s{s}.example/mcp"),
            );
            ServerListing::new(server, tools.clone()).with_baseline(baseline.clone())
        })
        .collect();
    let options = ProjectionOptions {
        threads: std::env::args()
            .nth(5)
            .and_then(|n| n.parse().ok())
            .unwrap_or(1),
        ..Default::default()
    };
    if stored {
        // As a wake lends a cached listing: with the digests the store
        // wrote beside it.
        let digests: Vec<String> = tools.iter().map(fingerprint).collect();
        let shared: Vec<Arc<[Tool]>> = listings.iter().map(|l| l.tools.clone().into()).collect();
        let lent = || {
            listings
                .iter()
                .zip(&shared)
                .map(|(listing, tools)| ListingRef {
                    tools,
                    digests: Some(&digests),
                    shared: Some(tools),
                    ..ListingRef::from(listing)
                })
        };
        if let Some(read) = read {
            let text = serde_json::to_string(&tools).unwrap_or_default();
            for _ in 0..rounds {
                let shared: Vec<Arc<[Tool]>> = listings
                    .iter()
                    .map(|_| {
                        let tools: Vec<Tool> = if read == "text" {
                            serde_json::from_str::<CachedTools>(&text).map(|t| t.0)
                        } else {
                            serde_json::from_str(&text)
                        }
                        .unwrap_or_default();
                        tools.into()
                    })
                    .collect();
                let lent = listings
                    .iter()
                    .zip(&shared)
                    .map(|(listing, tools)| ListingRef {
                        tools,
                        digests: Some(&digests),
                        shared: Some(tools),
                        ..ListingRef::from(listing)
                    });
                black_box(Catalogue::project(lent, &options));
            }
            return;
        }
        for _ in 0..rounds {
            black_box(Catalogue::project(lent(), &options));
        }
    } else {
        for _ in 0..rounds {
            black_box(Catalogue::project(&listings, &options));
        }
    }
}
