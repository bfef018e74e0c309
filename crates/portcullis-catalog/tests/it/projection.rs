//! The projection's output pinned byte for byte (`tests/vectors/projection.json`):
//! names, tiers, definitions as the model sees them, full schemas,
//! withheld tools, per-server summaries and diagnostics of a mixed set of
//! listings (inline, names and bare tiers; drifted, added and filtered
//! tools; illegal and colliding names; odd schemas). Work on the
//! projection's speed must leave every byte of it as it is.
//!
//! To rewrite the vector after a deliberate change of behaviour:
//! `PORTCULLIS_BLESS=1 cargo test -p portcullis-catalog --test it projection::`.

use std::collections::BTreeSet;
use std::sync::Arc;

use portcullis_catalog::catalogue::ListingRef;
use portcullis_catalog::classification::Classification;
use portcullis_catalog::disclosure::{Budget, DisclosureOptions};
use portcullis_catalog::fingerprint::{fingerprint, fingerprint_listing};
use portcullis_catalog::{
    CachedTools, Catalogue, ProjectionOptions, ServerIdentity, ServerListing, Tool,
    ToolAnnotations, ToolFilter,
};
use serde_json::{Value, json};

const VECTOR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/projection.json");

/// A tool whose schema exercises what a deferred schema keeps and drops.
fn rich(i: usize, words: usize, wide: usize) -> Tool {
    let mut tool = Tool::new(format!("tool_{i}"))
        .with_description(format!("Tool {i} «é😀». {}", "Explains what it does. ".repeat(words)))
        .with_input_schema(json!({
            "type": "object",
            "properties": {
                "query \"q\"": {"type": "string", "description": "What to look for\n", "maxLength": 200},
                "limit": {"type": ["integer", "null"], "minimum": 1, "default": 10},
                "tags": {"type": "array", "items": {"type": "string"}},
                "opaque": {"description": "no type"},
                "weird": 5,
                "mode": {"type": 7}
            },
            "required": ["query \"q\"", 3, {"x": 1}]
        }));
    if let Some(Value::Object(properties)) = tool
        .input_schema
        .as_mut()
        .and_then(|s| s.get_mut("properties"))
    {
        for p in 0..wide {
            properties.insert(format!("extra_parameter_{p}"), json!({"type": "string"}));
        }
    }
    tool
}

fn listings() -> Vec<ServerListing> {
    let odd_schemas = [
        Tool::new("no_schema").with_description("Nothing declared."),
        Tool::new("true_schema").with_input_schema(json!(true)),
        Tool::new("array_properties")
            .with_input_schema(json!({"type": "object", "properties": [1, 2]})),
        Tool::new("empty_required")
            .with_input_schema(json!({"properties": {"x": {"type": "boolean"}}, "required": []})),
        Tool::new("unicode.name/é")
            .with_title("Unicode")
            .with_description("Has an illegal name.")
            .with_input_schema(
                json!({"type": "object", "properties": {"ключ": {"type": "number"}}}),
            )
            .with_output_schema(
                json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
            )
            .with_annotations(ToolAnnotations::read_only(true)),
    ];
    let mut big: Vec<Tool> = (0..20).map(|i| rich(i, 12, 0)).collect();
    big.extend(odd_schemas.iter().cloned());
    big[3].meta = Some(serde_json::Map::from_iter([(
        "k".to_owned(),
        json!({"v": [1, 2]}),
    )]));
    // Names tier: deferred schemas fit, full ones do not.
    let names = ServerListing::new(
        ServerIdentity::streamable_http("names", "https://names.example/mcp"),
        big.clone(),
    );
    // Bare tier (a tight budget, set below per server count) with a baseline
    // that one tool drifted from and one tool is missing from.
    let mut trusted: Vec<Tool> = (0..12).map(|i| rich(i, 30, 30)).collect();
    let baseline = fingerprint_listing(&trusted);
    trusted[5] = trusted[5]
        .clone()
        .with_description("Rewritten behind the operator's back.");
    trusted.push(Tool::new("added_later").with_description("Not in the baseline."));
    trusted.remove(7);
    let bare = ServerListing::new(
        ServerIdentity::stdio("bare", "server-bare", &["--flag"]),
        trusted,
    )
    .with_baseline(baseline)
    .with_filter(ToolFilter::Block(BTreeSet::from([
        "tool_9".to_owned(),
        "bare__tool_10".to_owned(),
    ])))
    .with_classification(Classification {
        read_only: vec!["tool_1".into()],
        writes: vec!["bare__tool_2".into()],
        trust_claims: false,
    });
    // Inline: small; a colliding projected name (`a.b` and `a_b` differ but
    // `x-y` twice does not).
    let small = ServerListing::new(
        ServerIdentity::streamable_http("small", "https://small.example/mcp"),
        vec![
            Tool::new("search")
                .with_description("Search")
                .with_input_schema(
                    json!({"type": "object", "properties": {"q": {"type": "string"}}}),
                )
                .with_annotations(ToolAnnotations::read_only(true)),
            Tool::new("x-y"),
            Tool::new("x-y").with_description("Duplicate name."),
            Tool::new("a.b"),
            Tool::new("a_b"),
        ],
    );
    // Two servers with one name: both suffixed.
    let twin_a = ServerListing::new(
        ServerIdentity::streamable_http("twin", "https://a.example/mcp"),
        vec![Tool::new("ping")],
    );
    let twin_b = ServerListing::new(
        ServerIdentity::sse("twin", "https://b.example/sse"),
        vec![Tool::new("ping")],
    );
    vec![names, bare, small, twin_a, twin_b]
}

fn options() -> ProjectionOptions {
    ProjectionOptions {
        disclosure: DisclosureOptions {
            budget: Budget::Tokens(1_500),
            always_load: BTreeSet::new(),
        },
        ..ProjectionOptions::default()
    }
}

/// Everything the projection decides, as JSON.
fn render(catalogue: &Catalogue) -> Value {
    let entries: Vec<Value> = catalogue
        .entries()
        .iter()
        .map(|e| {
            json!({
                "name": e.name,
                "server": e.server,
                "remote_name": e.remote_name,
                "kind": e.kind,
                "tier": e.tier,
                "definition": serde_json::to_string(&e.definition).unwrap_or_default(),
                "full_input_schema": serde_json::to_string(e.full_input_schema()).unwrap_or_default(),
                "classified_by": e.classified_by,
            })
        })
        .collect();
    let servers: Vec<Value> = catalogue
        .servers()
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "identity": s.identity.endpoint.identity(),
                "tier": s.tier,
                "inline_tokens": s.inline_tokens,
                "published": s.published,
                "fingerprints": s.fingerprints,
                "drift": s.drift,
                "quarantined": s.quarantined,
            })
        })
        .collect();
    json!({
        "entries": entries,
        "withheld": catalogue.withheld(),
        "servers": servers,
        "diagnostics": catalogue.diagnostics(),
        "system_prompt": catalogue.compose_system_prompt(),
        "status_rows": catalogue.status_rows(),
    })
}

#[test]
fn the_projection_of_a_mixed_listing_is_pinned() {
    let listings = listings();
    let options = options();
    let owned = Catalogue::project(&listings, &options);
    // Lent as a wake lends them: shared, with the store's digests.
    let digests: Vec<Vec<String>> = listings
        .iter()
        .map(|l| l.tools.iter().map(fingerprint).collect())
        .collect();
    let shared: Vec<Arc<[Tool]>> = listings.iter().map(|l| l.tools.clone().into()).collect();
    let lent = Catalogue::project(
        listings
            .iter()
            .zip(&shared)
            .zip(&digests)
            .map(|((listing, tools), digests)| ListingRef {
                tools,
                digests: Some(digests),
                shared: Some(tools),
                ..ListingRef::from(listing)
            }),
        &options,
    );
    // Read back from the store's text, schemas kept as that text.
    let stored: Vec<Arc<[Tool]>> = listings
        .iter()
        .map(|l| {
            let text = serde_json::to_string(&l.tools).unwrap_or_default();
            let cached: CachedTools = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
            cached.0.into()
        })
        .collect();
    let read = Catalogue::project(
        listings
            .iter()
            .zip(&stored)
            .zip(&digests)
            .map(|((listing, tools), digests)| ListingRef {
                tools,
                digests: Some(digests),
                shared: Some(tools),
                ..ListingRef::from(listing)
            }),
        &options,
    );
    let rendered = render(&owned);
    assert_eq!(render(&lent), rendered);
    assert_eq!(render(&read), rendered);
    // The mix covers what it claims to.
    let tiers: BTreeSet<&str> = owned.servers().iter().map(|s| s.tier.as_str()).collect();
    assert_eq!(tiers, BTreeSet::from(["bare", "inline", "names"]));
    assert!(!owned.withheld().is_empty() && !owned.diagnostics().is_empty());
    let text = serde_json::to_string_pretty(&rendered).unwrap_or_default() + "\n";
    if std::env::var_os("PORTCULLIS_BLESS").is_some() {
        std::fs::write(VECTOR, &text).unwrap_or_else(|e| panic!("{VECTOR}: {e}"));
    }
    let pinned = std::fs::read_to_string(VECTOR).unwrap_or_else(|e| panic!("{VECTOR}: {e}"));
    assert!(pinned == text, "the projection differs from {VECTOR}");
}
