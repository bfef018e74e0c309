//! Projecting one 1 000-tool server: names, fingerprints against a baseline,
//! the drift guard, tier choice and disclosure — everything a (re)listing
//! costs before the first call can be routed.
//!
//! Run with `cargo bench -p portcullis-catalog --bench projection`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_catalog::fingerprint::fingerprint_listing;
use portcullis_catalog::{
    Catalogue, DisclosureOptions, ProjectionOptions, ServerIdentity, ServerListing, Tool,
};
use serde_json::json;

fn listing(count: usize) -> Vec<Tool> {
    (0..count)
        .map(|i| {
            // Every tenth name needs sanitising (a dot), as real servers do.
            let name = if i % 10 == 0 { format!("ns.tool_{i}") } else { format!("tool_{i}") };
            Tool::new(name)
                .with_description(format!("Tool {i}: fetches records of kind {i} and summarises them for the caller."))
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
        .collect()
}

fn bench_projection(c: &mut Criterion) {
    let tools = listing(1_000);
    let baseline = fingerprint_listing(&tools);
    let server = ServerIdentity::streamable_http("big", "https://big.example/mcp");
    let options = ProjectionOptions::default();

    // Projection borrows its listings and copies what it keeps; that copy
    // is measured. The default budget defers this server to the names tier
    // (its schemas come to about 30 000 tokens).
    let fresh = ServerListing::new(server.clone(), tools.clone());
    c.bench_function("project 1000 tools, no baseline", |b| {
        b.iter(|| black_box(Catalogue::project([&fresh], &options)))
    });
    let trusted = fresh.clone().with_baseline(baseline);
    c.bench_function("project 1000 tools against a baseline", |b| {
        b.iter(|| black_box(Catalogue::project([&trusted], &options)))
    });
    // `always_load` keeps every schema inline.
    let inline = ProjectionOptions {
        disclosure: DisclosureOptions {
            always_load: ["big".to_owned()].into(),
            ..Default::default()
        },
        ..Default::default()
    };
    c.bench_function("project 1000 tools against a baseline, inline tier", |b| {
        b.iter(|| black_box(Catalogue::project([&trusted], &inline)))
    });
    c.bench_function("fingerprint 1000 tools", |b| {
        b.iter(|| black_box(fingerprint_listing(&tools)))
    });
}

criterion_group!(benches, bench_projection);
criterion_main!(benches);
