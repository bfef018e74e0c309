//! Proptest strategies for hostile `mcpServers` files (feature
//! `strategies`, for tests): any JSON, with the keys a server entry has
//! among arbitrary ones, and values chosen to provoke (private addresses,
//! `${…}` references, text that would break out of a TOML string).

use proptest::prelude::*;
use serde_json::Value;

/// Any JSON, with the keys an `mcpServers` entry has among the others.
pub fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(vec![
            "stdio",
            "http",
            "sse",
            "streamable-http",
            "npx",
            "http://127.0.0.1:1/mcp",
            "https://example.com/mcp",
            "http://169.254.169.254/",
            "${input:token}",
            "${env:HOME}",
            "${VAR}",
            "\"]\n[gateway]\ntoken = \"x",
            "",
        ])
        .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

/// A key an `mcpServers` entry has, or any short text.
pub fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "command",
            "args",
            "env",
            "cwd",
            "url",
            "type",
            "headers",
            "transport",
            "serverUrl",
            "disabled",
            "timeout",
            "envFile",
        ])
        .prop_map(str::to_owned),
        "\\PC{0,8}",
    ]
}

/// `{"mcpServers": {name: entry, …}}` (or `servers`), entries arbitrary.
pub fn servers_file() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["mcpServers", "servers"]),
        prop::collection::vec(("\\PC{0,12}", json()), 0..5),
    )
        .prop_map(|(root, entries)| {
            let entries: serde_json::Map<String, Value> = entries.into_iter().collect();
            serde_json::json!({ root: entries })
        })
}
