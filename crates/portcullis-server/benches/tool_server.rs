//! What building a tool server costs for a large catalogue: the 50 servers
//! × 100 tools of the wake bench, projected as the gateway projects them,
//! registered as the gateway registers an upstream's tools (definitions
//! another server published), and built. The gateway builds one when it
//! starts and again whenever its catalogue changes (a server joining late,
//! a reconnect's corrected listing, a reload), on a runtime thread.
//!
//! `cargo bench -p portcullis-server --bench tool_server` prints, as the
//! medians of several rounds: the registrations made from the catalogue
//! (each definition shared with the catalogue, as the gateway does); the
//! build alone; the build and a first call
//! to one tool of each server; and the listed tools taken once from the
//! built server (what a `tools/list` answer starts from).

use std::time::{Duration, Instant};

use portcullis_catalog::catalogue::{EntryKind, ListingRef};
use portcullis_catalog::{
    Catalogue, ProjectionOptions, ServerIdentity, ServerListing, Tool, ToolAnnotations, ToolResult,
};
use portcullis_server::{CallContext, Registration, ToolServer};
use serde_json::{Value, json};

const SERVERS: usize = 50;
const TOOLS: usize = 100;
const ROUNDS: usize = 9;

/// One server's listing: tools with ~1.2 kB descriptions and a
/// two-property schema, all read-only (so the exposure gate serves them).
fn listing() -> Vec<Tool> {
    (0..TOOLS)
        .map(|i| {
            Tool::new(format!("tool_{i}"))
                .with_description(format!(
                    "Padding tool number {i}. {}",
                    "Lorem ipsum dolor sit amet. ".repeat(40)
                ))
                .with_input_schema(json!({"type": "object", "properties": {
                    "payload": {"type": "string", "description": "What to send. ".repeat(20)},
                    "count": {"type": "integer", "description": "How many."}
                }, "required": ["payload"]}))
                .with_annotations(ToolAnnotations::read_only(true))
        })
        .collect()
}

fn catalogue() -> Catalogue {
    // Each server's own listing, as each upstream's is its own (a shared
    // one would share its schemas' values, which the build then reads warm).
    let listings: Vec<ServerListing> = (0..SERVERS)
        .map(|s| {
            let identity = ServerIdentity::streamable_http(
                format!("s{s}"),
                format!("http://127.0.0.1:{}/mcp", 9000 + s),
            );
            ServerListing::new(identity, listing())
        })
        .collect();
    Catalogue::project(
        listings.iter().map(ListingRef::from),
        &ProjectionOptions::default(),
    )
}

/// The catalogue's definitions as the gateway registers them.
fn registrations(catalogue: &Catalogue) -> Vec<Registration> {
    catalogue
        .entries()
        .iter()
        .map(|entry| {
            let mut definition = entry.definition.clone();
            if entry.kind == EntryKind::DescribeTool {
                // Read-only, as the gateway registers it.
                definition = std::sync::Arc::new(
                    (*definition)
                        .clone()
                        .with_annotations(ToolAnnotations::read_only(true)),
                );
            }
            Registration::new(definition, |_: Value, _: CallContext| async {
                Ok(ToolResult::text("ok"))
            })
            .with_source(entry.server.clone())
            .with_foreign_schema()
        })
        .collect()
}

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let catalogue = catalogue();
    let tools = catalogue.entries().len();
    let (mut registered, mut built, mut called, mut listed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let registrations = registrations(&catalogue);
        registered.push(start.elapsed());
        let start = Instant::now();
        let server = ToolServer::builder()
            .register_all(registrations)
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        built.push(start.elapsed());
        runtime.block_on(async {
            for s in 0..SERVERS {
                let name = format!("s{s}__tool_{s}");
                let result = server
                    .call(&name, json!({"payload": "x", "count": 1}), None)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(!result.is_error, "{name}: {result:?}");
            }
        });
        called.push(start.elapsed());
        let start = Instant::now();
        let answer = server.listed_tools();
        listed.push(start.elapsed());
        assert_eq!(answer.len(), tools);
        // Dropped outside the timings, as a replaced server is dropped
        // after the swap.
        drop(answer);
        drop(server);
    }
    println!(
        "tool server of {SERVERS} servers × {TOOLS} tools ({tools} tools), medians of {ROUNDS} rounds"
    );
    println!(
        "  registrations (as the gateway's) {:>8.1} ms",
        median(registered)
    );
    println!(
        "  build                            {:>8.1} ms",
        median(built)
    );
    println!(
        "  build and a first call to 50     {:>8.1} ms",
        median(called)
    );
    println!(
        "  the listed tools, taken once     {:>8.1} ms",
        median(listed)
    );
}
