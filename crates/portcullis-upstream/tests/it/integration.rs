//! portcullis-upstream against real MCP servers over real transports:
//! Streamable HTTP (rmcp's server on 127.0.0.1), legacy HTTP+SSE (written in
//! `common`), and a stdio child process (the `upstream-fixture` binary).

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use portcullis_catalog::disclosure::DESCRIBE_TOOL_NAME;
use portcullis_catalog::fingerprint::fingerprint_listing;
use portcullis_catalog::naming::Prefix;
use portcullis_catalog::policy::read_only_policy;
use portcullis_catalog::{ProjectionOptions, Rule, Tier, Tool, ToolResult};
use portcullis_upstream::{
    AllowedHosts, CallContext, CallError, ConnectOptions, McpServerConfig, Toolset, WiringError,
    connect,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

fn options() -> ConnectOptions {
    ConnectOptions::default().with_projection(ProjectionOptions {
        prefix: Prefix::Always,
        ..Default::default()
    })
}

fn text(result: &ToolResult) -> String {
    result.text_blocks().collect::<Vec<_>>().join("\n")
}

fn names(toolset: &Toolset) -> Vec<String> {
    toolset.tools().into_iter().map(|t| t.name).collect()
}

fn rules(toolset: &Toolset) -> Vec<(Rule, String)> {
    toolset
        .diagnostics()
        .into_iter()
        .map(|d| (d.rule, d.message))
        .collect()
}

async fn call(
    toolset: &Toolset,
    name: &str,
    args: serde_json::Value,
) -> Result<ToolResult, CallError> {
    toolset
        .call(name, Some(args), &CallContext::default())
        .await
}

#[tokio::test]
async fn streamable_http_round_trip_discards_instructions() {
    let server = http_fixture(FixtureConfig::default()).await;
    let toolset = connect(
        vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
        options(),
    )
    .await
    .unwrap();
    assert!(
        toolset.diagnostics().is_empty(),
        "{:?}",
        toolset.diagnostics()
    );
    assert!(names(&toolset).contains(&"fx__echo".to_owned()));
    let result = call(&toolset, "fx__echo", json!({"message": "hello-mcp"}))
        .await
        .unwrap();
    assert_eq!(text(&result), "hello-mcp");
    assert!(!result.is_error);
    let prompt = toolset.compose_system_prompt();
    assert!(prompt.contains("fx__echo"));
    assert!(!prompt.contains(HOSTILE_INSTRUCTIONS));
    let failed = call(&toolset, "fx__fail", json!({})).await.unwrap();
    assert!(failed.is_error);
    assert_eq!(text(&failed), "boom");
    toolset.close().await;
}

#[tokio::test]
async fn results_must_match_a_declared_output_schema() {
    let server = http_fixture(FixtureConfig::default()).await;
    let toolset = connect(
        vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
        options(),
    )
    .await
    .unwrap();
    let good = call(&toolset, "fx__structured", json!({"mode": "good"}))
        .await
        .unwrap();
    assert_eq!(good.structured_content, Some(json!({"n": 7})));
    for mode in ["bad", "none"] {
        let error = call(&toolset, "fx__structured", json!({ "mode": mode }))
            .await
            .unwrap_err();
        assert!(matches!(error, CallError::OutputSchema { .. }), "{error:?}");
        assert!(error.to_string().contains("output schema"));
    }
    toolset.close().await;
}

/// A tool the server withdrew after the catalogue was built is refused with
/// "no longer published" instead of reaching the server.
async fn withdrawn_tools_are_no_longer_published(toolset: &Toolset, server: &str) {
    let echo = format!("{server}__echo");
    assert_eq!(
        text(&call(toolset, &echo, json!({"message": "a"})).await.unwrap()),
        "a"
    );
    call(toolset, &format!("{server}__withdraw"), json!({}))
        .await
        .unwrap();
    // The watcher re-lists in the background; poll until it has.
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut refused = false;
    while !refused && tokio::time::Instant::now() < deadline {
        refused = matches!(
            call(toolset, &echo, json!({"message": "b"})).await,
            Err(CallError::NoLongerPublished { .. })
        );
        if !refused {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(
        refused,
        "{echo} is still callable after the server withdrew it"
    );
    let error = call(toolset, &echo, json!({"message": "c"}))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "MCP tool \"{echo}\" is no longer published by server \"{server}\". Its catalogue changed since this tool list was built; use another tool."
        )
    );
}

#[tokio::test]
async fn a_withdrawn_tool_is_no_longer_published_2026_subscription() {
    let server = http_fixture(FixtureConfig::default()).await;
    let toolset = connect(
        vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
        options(),
    )
    .await
    .unwrap();
    assert!(eventually(WAIT, || server.state.listeners.load(Ordering::SeqCst) == 1).await);
    withdrawn_tools_are_no_longer_published(&toolset, "fx").await;
    toolset.close().await;
}

#[cfg(feature = "stdio")]
#[tokio::test]
async fn a_withdrawn_tool_is_no_longer_published_handshake_era() {
    let config = McpServerConfig::stdio("old", fixture_bin(), ["--legacy-only"]);
    let toolset = connect(vec![config], options()).await.unwrap();
    withdrawn_tools_are_no_longer_published(&toolset, "old").await;
    toolset.close().await;
}

#[tokio::test]
async fn listing_follows_next_cursor() {
    let server = http_fixture(FixtureConfig {
        page_size: 3,
        pad: 4,
        ..Default::default()
    })
    .await;
    let toolset = connect(
        vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
        options(),
    )
    .await
    .unwrap();
    // 10 fixture tools + 4 padding tools, 3 per page.
    assert_eq!(
        toolset.catalogue().server("fx").unwrap().published.len(),
        14
    );
    let cursors = server.state.cursors.lock().unwrap().clone();
    assert_eq!(cursors, ["page-3", "page-6", "page-9", "page-12"]);
    toolset.close().await;
}

#[tokio::test]
async fn two_servers_with_one_name_are_both_suffixed_and_routed_to_their_own_backend() {
    let a = http_fixture(FixtureConfig {
        label: "A".into(),
        ..Default::default()
    })
    .await;
    let b = http_fixture(FixtureConfig {
        label: "B".into(),
        ..Default::default()
    })
    .await;
    let configs = vec![
        McpServerConfig::streamable_http("local", a.mcp_url()),
        McpServerConfig::streamable_http("local", b.mcp_url()),
    ];
    let mut maps = Vec::new();
    for order in [configs.clone(), configs.into_iter().rev().collect()] {
        let toolset = connect(order, ConnectOptions::default()).await.unwrap();
        let whoami: Vec<String> = names(&toolset)
            .into_iter()
            .filter(|n| n.ends_with("__whoami"))
            .collect();
        assert_eq!(whoami.len(), 2, "{whoami:?}");
        assert!(
            whoami
                .iter()
                .all(|n| n.starts_with("local_") && n != "local__whoami")
        );
        let mut map = BTreeMap::new();
        for name in whoami {
            let label = text(&call(&toolset, &name, json!({})).await.unwrap());
            map.insert(name, label);
        }
        assert_eq!(map.values().cloned().collect::<Vec<_>>().len(), 2);
        assert!(map.values().any(|l| l == "A") && map.values().any(|l| l == "B"));
        let collisions = toolset
            .diagnostics()
            .into_iter()
            .filter(|d| d.rule == Rule::ServerNameCollision)
            .count();
        assert_eq!(collisions, 1);
        maps.push(map);
        toolset.close().await;
    }
    assert_eq!(
        maps[0], maps[1],
        "the name→backend map depends on load order"
    );
}

#[tokio::test]
async fn a_server_that_is_down_is_skipped_and_its_sibling_works() {
    let up = http_fixture(FixtureConfig::default()).await;
    let reported = Arc::new(AtomicUsize::new(0));
    let count = reported.clone();
    let toolset = connect(
        vec![
            McpServerConfig::streamable_http("down", closed_port_url().await),
            McpServerConfig::streamable_http("up", up.mcp_url()),
        ],
        options().on_diagnostic(move |_| {
            count.fetch_add(1, Ordering::SeqCst);
        }),
    )
    .await
    .unwrap();
    assert_eq!(reported.load(Ordering::SeqCst), 1);
    let diagnostics = toolset.diagnostics();
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(diagnostics[0].rule, Rule::ConnectionFailure);
    assert_eq!(diagnostics[0].origin, "down");
    assert!(names(&toolset).iter().all(|n| !n.starts_with("down__")));
    let result = call(&toolset, "up__echo", json!({"message": "still here"}))
        .await
        .unwrap();
    assert_eq!(text(&result), "still here");
    toolset.close().await;
}

#[tokio::test]
async fn a_hanging_server_times_out_and_its_sibling_works() {
    let hang = hanging_server().await;
    let up = http_fixture(FixtureConfig::default()).await;
    let toolset = connect(
        vec![
            McpServerConfig::streamable_http("hang", format!("{}/mcp", hang.base())),
            McpServerConfig::streamable_http("up", up.mcp_url()),
        ],
        options().with_server_timeout("hang", Duration::from_millis(1500)),
    )
    .await
    .unwrap();
    let failures: Vec<_> = toolset
        .diagnostics()
        .into_iter()
        .filter(|d| d.rule == Rule::ConnectionFailure)
        .collect();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].origin, "hang");
    assert!(
        failures[0]
            .message
            .contains("did not complete connecting within 1500 ms"),
        "{}",
        failures[0].message
    );
    assert_eq!(
        text(
            &call(&toolset, "up__echo", json!({"message": "fine"}))
                .await
                .unwrap()
        ),
        "fine"
    );
    toolset.close().await;
}

#[tokio::test]
async fn a_call_that_hangs_times_out_and_the_server_is_told() {
    let server = http_fixture(FixtureConfig::default()).await;
    let toolset = connect(
        vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
        options().with_timeout(Duration::from_millis(2500)),
    )
    .await
    .unwrap();
    let error = call(&toolset, "fx__hang", json!({})).await.unwrap_err();
    assert_eq!(
        error,
        CallError::Timeout {
            tool: "fx__hang".into(),
            timeout_ms: 2500
        }
    );
    assert!(
        eventually(WAIT, || server.state.cancelled.load(Ordering::SeqCst) == 1).await,
        "the server never saw the cancellation"
    );
    // The connection survives a timed-out call.
    assert_eq!(
        text(
            &call(&toolset, "fx__echo", json!({"message": "ok"}))
                .await
                .unwrap()
        ),
        "ok"
    );
    toolset.close().await;
}

#[tokio::test]
async fn cancellation_reaches_the_server() {
    let server = http_fixture(FixtureConfig::default()).await;
    let toolset = connect(
        vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
        options(),
    )
    .await
    .unwrap();
    let cancel = CancellationToken::new();
    let context = CallContext::default().with_cancel(cancel.clone());
    let pending = {
        let toolset = toolset.clone();
        tokio::spawn(async move { toolset.call("fx__hang", None, &context).await })
    };
    assert!(eventually(WAIT, || server.state.hanging.load(Ordering::SeqCst) == 1).await);
    cancel.cancel();
    let outcome = pending.await.unwrap();
    assert_eq!(
        outcome.unwrap_err(),
        CallError::Cancelled {
            tool: "fx__hang".into()
        }
    );
    assert!(
        eventually(WAIT, || server.state.cancelled.load(Ordering::SeqCst) == 1).await,
        "the server never saw the cancellation"
    );
    toolset.close().await;
}

#[tokio::test]
async fn progress_reaches_the_caller() {
    let server = http_fixture(FixtureConfig::default()).await;
    let toolset = connect(
        vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
        options(),
    )
    .await
    .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let context = CallContext::default().with_progress(tx);
    let result = toolset
        .call("fx__progress", Some(json!({"steps": 3})), &context)
        .await
        .unwrap();
    assert_eq!(text(&result), "done after 3 steps");
    let mut seen = Vec::new();
    while let Ok(p) = rx.try_recv() {
        seen.push(p);
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[2].progress, 3.0);
    assert_eq!(seen[2].total, Some(3.0));
    assert_eq!(seen[0].message.as_deref(), Some("step 1"));
    toolset.close().await;
}

#[tokio::test]
async fn an_over_budget_listing_is_deferred_behind_the_describe_tool() {
    let big = http_fixture(FixtureConfig {
        pad: 200,
        ..Default::default()
    })
    .await;
    let small = http_fixture(FixtureConfig::default()).await;
    let toolset = connect(
        vec![
            McpServerConfig::streamable_http("broad", big.mcp_url()),
            McpServerConfig::streamable_http("small", small.mcp_url()),
        ],
        ConnectOptions::default(),
    )
    .await
    .unwrap();
    let catalogue = toolset.catalogue();
    assert!(catalogue.has_describe_tool());
    assert_ne!(catalogue.server("broad").unwrap().tier, Tier::Inline);
    assert_eq!(catalogue.server("small").unwrap().tier, Tier::Inline);
    let names = names(&toolset);
    assert!(
        names.contains(&"broad__tool_0".to_owned())
            && names.contains(&"broad__tool_199".to_owned())
    );
    let described = call(
        &toolset,
        DESCRIBE_TOOL_NAME,
        json!({"tool": "broad__tool_7"}),
    )
    .await
    .unwrap();
    assert!(
        text(&described).contains("What to send."),
        "{}",
        text(&described)
    );
    let unknown = call(&toolset, DESCRIBE_TOOL_NAME, json!({"tool": "nope"}))
        .await
        .unwrap();
    assert!(unknown.is_error);
    let result = call(&toolset, "broad__tool_7", json!({"payload": "x"}))
        .await
        .unwrap();
    assert_eq!(text(&result), "called tool_7 with payload");
    toolset.close().await;
}

#[tokio::test]
async fn the_policy_gate_runs_first_and_a_denied_call_never_reaches_the_server() {
    let server = http_fixture(FixtureConfig::default()).await;
    let toolset = connect(
        vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
        options().with_policy(read_only_policy(["fx__echo"])),
    )
    .await
    .unwrap();
    let denied = call(&toolset, "fx__echo", json!({"message": "x"}))
        .await
        .unwrap();
    assert!(denied.is_error);
    let shape = denied.structured_content.unwrap();
    assert_eq!(shape["__denied"], json!(true));
    assert_eq!(shape["toolName"], json!("fx__echo"));
    assert_eq!(server.calls(), 0);
    // Invalid arguments are refused here too, before the server.
    let invalid = call(&toolset, "fx__progress", json!({"steps": "many"}))
        .await
        .unwrap();
    assert!(invalid.is_error);
    assert!(
        text(&invalid).starts_with("ERR_INVALID_ARGUMENTS"),
        "{}",
        text(&invalid)
    );
    assert_eq!(server.calls(), 0);
    assert!(matches!(
        call(&toolset, "fx__nope", json!({})).await,
        Err(CallError::UnknownTool { .. })
    ));
    toolset.close().await;
}

#[tokio::test]
async fn a_drifted_tool_is_quarantined_and_never_called() {
    let server = http_fixture(FixtureConfig::default()).await;
    let config = McpServerConfig::streamable_http("fx", server.mcp_url());
    let trusted = vec![
        Tool::new("echo").with_description("Echo, as first trusted."),
        Tool::new("whoami")
            .with_description("Say which fixture answered.")
            .with_input_schema(json!({"type": "object"})),
    ];
    let toolset = connect(
        vec![config.clone()],
        options().with_baseline(config.identity(), fingerprint_listing(&trusted)),
    )
    .await
    .unwrap();
    let catalogue = toolset.catalogue();
    let stub = catalogue.get("fx__echo").unwrap();
    assert!(
        stub.definition
            .description
            .as_deref()
            .unwrap()
            .contains("quarantined")
    );
    let refused = call(&toolset, "fx__echo", json!({"message": "x"}))
        .await
        .unwrap();
    assert!(refused.is_error);
    assert_eq!(server.calls(), 0);
    // Tools published after the baseline are withheld, not callable.
    assert!(toolset.catalogue().get("fx__hang").is_none());
    assert!(rules(&toolset).iter().any(|(r, _)| *r == Rule::ToolDrift));
    toolset.close().await;
}

mod redirects {
    use super::*;

    fn secret(config: McpServerConfig) -> McpServerConfig {
        config.with_header("X-Secret", "s3cret")
    }

    #[tokio::test]
    async fn same_origin_redirects_keep_headers_and_credentials() {
        let server = http_fixture(FixtureConfig::default()).await;
        let toolset = connect(
            vec![secret(McpServerConfig::streamable_http(
                "fx",
                server.redirect_to("/mcp"),
            ))],
            options()
                .with_session("s1")
                .with_auth(|_, _| async { Ok::<_, String>("good".to_owned()) }),
        )
        .await
        .unwrap();
        assert!(rules(&toolset).is_empty(), "{:?}", rules(&toolset));
        let result = toolset
            .call(
                "fx__echo",
                Some(json!({"message": "via redirect"})),
                &CallContext::for_session("s1"),
            )
            .await
            .unwrap();
        assert_eq!(text(&result), "via redirect");
        let at_mcp: Vec<_> = server
            .seen()
            .into_iter()
            .filter(|s| s.path == "/mcp")
            .collect();
        assert!(!at_mcp.is_empty());
        assert!(
            at_mcp
                .iter()
                .all(|s| s.header("x-secret").as_deref() == Some("s3cret"))
        );
        assert!(
            at_mcp
                .iter()
                .all(|s| s.header("authorization").as_deref() == Some("Bearer good"))
        );
        toolset.close().await;
    }

    #[tokio::test]
    async fn a_cross_origin_hop_withholds_credentials_and_headers() {
        let first = http_fixture(FixtureConfig::default()).await;
        let other = http_fixture(FixtureConfig::default()).await;
        // Same machine, another origin: a different port under "localhost".
        let target = format!("{}/mcp", other.base_localhost());
        let toolset = connect(
            vec![secret(McpServerConfig::streamable_http(
                "fx",
                first.redirect_to(&target),
            ))],
            options()
                .with_session("s1")
                .with_auth(|_, _| async { Ok::<_, String>("good".to_owned()) }),
        )
        .await
        .unwrap();
        let withheld: Vec<_> = rules(&toolset)
            .into_iter()
            .filter(|(r, _)| *r == Rule::CrossOriginHeadersWithheld)
            .collect();
        assert_eq!(withheld.len(), 1, "{:?}", rules(&toolset));
        let reached = other.seen();
        assert!(!reached.is_empty(), "the other origin was never reached");
        assert!(reached.iter().all(|s| s.header("x-secret").is_none()));
        assert!(reached.iter().all(|s| s.header("authorization").is_none()));
        // The first origin did get them.
        assert!(first.seen().iter().all(|s| s.header("x-secret").is_some()));
        toolset.close().await;
    }

    #[tokio::test]
    async fn a_303_turns_the_post_into_a_bodiless_get() {
        let server = http_fixture(FixtureConfig::default()).await;
        let toolset = connect(
            vec![McpServerConfig::streamable_http(
                "fx",
                format!("{}/see-other", server.base()),
            )],
            options(),
        )
        .await
        .unwrap();
        let seen = server.seen();
        assert_eq!(seen[0].method, "POST");
        assert_eq!(seen[0].path, "/see-other");
        assert_eq!(seen[1].method, "GET");
        assert_eq!(seen[1].path, "/mcp");
        assert!(seen[1].header("content-type").is_none());
        // A GET is not an MCP request: the server refuses it.
        assert_eq!(toolset.diagnostics()[0].rule, Rule::ConnectionFailure);
    }

    #[tokio::test]
    async fn more_than_five_redirects_fail() {
        let server = http_fixture(FixtureConfig::default()).await;
        let toolset = connect(
            vec![McpServerConfig::streamable_http(
                "fx",
                format!("{}/loop", server.base()),
            )],
            options(),
        )
        .await
        .unwrap();
        let diagnostics = toolset.diagnostics();
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert_eq!(diagnostics[0].rule, Rule::ConnectionFailure);
        assert_eq!(
            diagnostics[0].message,
            "MCP server \"fx\" exceeded 5 redirects."
        );
        // The first request plus five followed hops, then it stops.
        let loops = server.seen().iter().filter(|s| s.path == "/loop").count();
        assert_eq!(loops, 6);
        assert!(toolset.tools().is_empty());
    }

    #[tokio::test]
    async fn a_redirect_to_a_blocked_host_is_refused_before_any_request() {
        let first = http_fixture(FixtureConfig::default()).await;
        let other = http_fixture(FixtureConfig::default()).await;
        let target = format!("{}/mcp", other.base_localhost());
        let toolset = connect(
            vec![McpServerConfig::streamable_http(
                "fx",
                first.redirect_to(&target),
            )],
            options().with_allowed_hosts(AllowedHosts::list(["127.0.0.1"])),
        )
        .await
        .unwrap();
        let diagnostics = toolset.diagnostics();
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert_eq!(
            diagnostics[0].message,
            "MCP server \"fx\" host \"localhost\" is not in allowedHosts."
        );
        assert!(other.seen().is_empty());
    }

    #[tokio::test]
    async fn a_redirect_to_a_metadata_address_is_refused() {
        let first = http_fixture(FixtureConfig::default()).await;
        let toolset = connect(
            vec![McpServerConfig::streamable_http(
                "fx",
                first.redirect_to("https://169.254.169.254/latest/meta-data/"),
            )],
            options(),
        )
        .await
        .unwrap();
        let diagnostics = toolset.diagnostics();
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert!(
            diagnostics[0]
                .message
                .contains("link-local or cloud-metadata"),
            "{}",
            diagnostics[0].message
        );
    }
}

#[tokio::test]
async fn a_handshake_era_server_is_reached_through_the_initialize_fallback() {
    let server = http_fixture_with(
        FixtureConfig {
            legacy_only: true,
            ..Default::default()
        },
        HttpOptions {
            sessions: true,
            ..Default::default()
        },
    )
    .await;
    let toolset = connect(
        vec![McpServerConfig::streamable_http("old", server.mcp_url())],
        options(),
    )
    .await
    .unwrap();
    assert!(
        toolset.diagnostics().is_empty(),
        "{:?}",
        toolset.diagnostics()
    );
    let result = call(&toolset, "old__echo", json!({"message": "handshake"}))
        .await
        .unwrap();
    assert_eq!(text(&result), "handshake");
    let sessions: Vec<String> = server
        .seen()
        .iter()
        .filter_map(|s| s.header("mcp-session-id"))
        .collect();
    assert!(!sessions.is_empty(), "no request carried a session id");
    toolset.close().await;
    // close() ends the legacy session with a DELETE carrying its id.
    assert!(
        eventually(WAIT, || server.seen().iter().any(
            |s| s.method == "DELETE" && s.header("mcp-session-id").is_some()
        ))
        .await,
        "no session DELETE"
    );
}

#[tokio::test]
async fn a_session_is_handed_out_only_once_its_event_stream_is_answered() {
    // A server sends requests of its own (an elicitation, a list change) on
    // the session's standalone GET stream, and may drop them while that
    // stream is not open: the connection must not be handed out before it
    // is, or the first call's server request can be lost.
    let server = http_fixture_with(
        FixtureConfig {
            legacy_only: true,
            ..Default::default()
        },
        HttpOptions {
            sessions: true,
            slow_standalone: Some(Duration::from_millis(400)),
            ..Default::default()
        },
    )
    .await;
    let toolset = connect(
        vec![McpServerConfig::streamable_http("old", server.mcp_url())],
        options(),
    )
    .await
    .unwrap();
    let connected = std::time::Instant::now();
    let answered = server.standalone_answered.get().copied();
    assert!(
        answered.is_some_and(|at| at <= connected),
        "connect returned before the session's event stream was answered"
    );
    toolset.close().await;
}

mod guard {
    use super::*;

    #[tokio::test]
    async fn a_host_outside_allowed_hosts_gets_zero_requests() {
        let server = http_fixture(FixtureConfig::default()).await;
        let toolset = connect(
            vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
            options().with_allowed_hosts(AllowedHosts::list(["mcp.example.com"])),
        )
        .await
        .unwrap();
        assert!(toolset.tools().is_empty());
        let diagnostics = toolset.diagnostics();
        assert_eq!(diagnostics.len(), 1);
        assert_eq!(diagnostics[0].rule, Rule::ConnectionFailure);
        assert_eq!(
            diagnostics[0].message,
            "MCP server \"fx\" host \"127.0.0.1\" is not in allowedHosts."
        );
        assert!(server.seen().is_empty());
    }

    #[tokio::test]
    async fn a_resolver_is_asked_per_server_and_session() {
        let server = http_fixture(FixtureConfig::default()).await;
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = asked.clone();
        let hosts = AllowedHosts::resolver(move |server, session| {
            if let Ok(mut a) = record.lock() {
                a.push(format!("{server}/{session}"));
            }
            vec!["127.0.0.1".to_owned()]
        });
        let toolset = connect(
            vec![McpServerConfig::streamable_http("fx", server.mcp_url())],
            options().with_allowed_hosts(hosts).with_session("sess-9"),
        )
        .await
        .unwrap();
        assert!(!toolset.tools().is_empty());
        assert_eq!(asked.lock().unwrap().clone(), ["fx/sess-9"]);
        toolset.close().await;
    }

    #[tokio::test]
    async fn wiring_mistakes_name_the_session() {
        let auth = connect(
            vec![],
            options().with_auth(|_, _| async { Ok::<_, String>("t".to_owned()) }),
        )
        .await
        .unwrap_err();
        assert!(matches!(auth, WiringError::AuthWithoutSession));
        assert!(auth.to_string().contains("session"));
        let hosts = connect(
            vec![],
            options().with_allowed_hosts(AllowedHosts::resolver(|_, _| vec![])),
        )
        .await
        .unwrap_err();
        assert!(matches!(hosts, WiringError::HostResolverWithoutSession));
        assert!(hosts.to_string().contains("session"));
    }
}

mod auth {
    use super::*;

    #[tokio::test]
    async fn credentials_are_resolved_before_the_handshake_and_per_call() {
        let server = http_fixture_with(
            FixtureConfig::default(),
            HttpOptions {
                gate: Gate::Bearer,
                ..Default::default()
            },
        )
        .await;
        let sessions = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = sessions.clone();
        let toolset = connect(
            vec![McpServerConfig::streamable_http("locked", server.mcp_url())],
            options()
                .with_session("alice")
                .with_auth(move |server, session| {
                    if let Ok(mut s) = record.lock() {
                        s.push(format!("{server}/{session}"));
                    }
                    async { Ok::<_, String>("good".to_owned()) }
                }),
        )
        .await
        .unwrap();
        assert!(
            toolset.diagnostics().is_empty(),
            "{:?}",
            toolset.diagnostics()
        );
        let result = toolset
            .call(
                "locked__echo",
                Some(json!({"message": "in"})),
                &CallContext::for_session("alice"),
            )
            .await
            .unwrap();
        assert_eq!(text(&result), "in");
        assert_eq!(
            sessions.lock().unwrap().clone(),
            ["locked/alice", "locked/alice"]
        );
        assert!(
            server
                .seen()
                .iter()
                .all(|s| s.header("authorization").as_deref() == Some("Bearer good"))
        );
        // A call without a session is refused before anything else.
        assert_eq!(
            toolset
                .call("locked__echo", None, &CallContext::default())
                .await
                .unwrap_err()
                .to_string(),
            "MCP tool \"locked__echo\" requires a session context."
        );
        toolset.close().await;
    }

    #[tokio::test]
    async fn each_session_sends_only_its_own_bearer() {
        let server = http_fixture(FixtureConfig::default()).await;
        let config = McpServerConfig::streamable_http("fx", server.mcp_url());
        let mut toolsets = Vec::new();
        for session in ["alice", "bob"] {
            let toolset = connect(
                vec![config.clone()],
                options()
                    .with_session(session)
                    .with_auth(|_, session: String| async move {
                        Ok::<_, String>(format!("token-{session}"))
                    }),
            )
            .await
            .unwrap();
            let result = toolset
                .call(
                    "fx__echo",
                    Some(json!({"message": session})),
                    &CallContext::for_session(session),
                )
                .await
                .unwrap();
            assert_eq!(text(&result), session);
            toolsets.push(toolset);
        }
        let seen = server.seen();
        let bearers: Vec<Vec<String>> = seen
            .iter()
            .map(|s| {
                s.headers
                    .get_all("authorization")
                    .iter()
                    .filter_map(|v| v.to_str().ok().map(str::to_owned))
                    .collect()
            })
            .collect();
        assert!(bearers.iter().all(|b| b.len() == 1), "{bearers:?}");
        assert!(bearers.iter().any(|b| b[0] == "Bearer token-alice"));
        assert!(bearers.iter().any(|b| b[0] == "Bearer token-bob"));
        assert!(
            bearers
                .iter()
                .all(|b| b[0] == "Bearer token-alice" || b[0] == "Bearer token-bob")
        );
        for toolset in toolsets {
            // Nothing a toolset shows carries a token.
            assert!(!format!("{toolset:?} {:?}", toolset.diagnostics()).contains("token-"));
            toolset.close().await;
        }
    }

    #[tokio::test]
    async fn a_401_drops_only_that_server() {
        let locked = http_fixture_with(
            FixtureConfig::default(),
            HttpOptions {
                gate: Gate::Bearer,
                ..Default::default()
            },
        )
        .await;
        let open = http_fixture(FixtureConfig::default()).await;
        let toolset = connect(
            vec![
                McpServerConfig::streamable_http("locked", locked.mcp_url()),
                McpServerConfig::streamable_http("open", open.mcp_url()),
            ],
            options(),
        )
        .await
        .unwrap();
        let diagnostics = toolset.diagnostics();
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert_eq!(
            diagnostics[0].message,
            "MCP server \"locked\" rejected authorization (HTTP 401)."
        );
        assert_eq!(
            text(
                &call(&toolset, "open__echo", json!({"message": "ok"}))
                    .await
                    .unwrap()
            ),
            "ok"
        );
        toolset.close().await;
    }

    #[tokio::test]
    async fn a_403_is_reported_as_denied_access() {
        let server = http_fixture_with(
            FixtureConfig::default(),
            HttpOptions {
                gate: Gate::Forbidden,
                ..Default::default()
            },
        )
        .await;
        let toolset = connect(
            vec![McpServerConfig::streamable_http("nope", server.mcp_url())],
            options(),
        )
        .await
        .unwrap();
        let diagnostics = toolset.diagnostics();
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert_eq!(
            diagnostics[0].message,
            "MCP server \"nope\" denied access (HTTP 403)."
        );
    }

    #[tokio::test]
    async fn a_401_during_a_call_marks_the_server_unavailable() {
        let server = http_fixture_with(
            FixtureConfig::default(),
            HttpOptions {
                gate: Gate::Bearer,
                ..Default::default()
            },
        )
        .await;
        // The handshake gets a good token; calls get a revoked one.
        let resolved = Arc::new(AtomicUsize::new(0));
        let count = resolved.clone();
        let toolset = connect(
            vec![McpServerConfig::streamable_http("locked", server.mcp_url())],
            options().with_session("bob").with_auth(move |_, _| {
                let n = count.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, String>(if n == 0 { "good" } else { "revoked" }.to_owned()) }
            }),
        )
        .await
        .unwrap();
        assert!(!toolset.tools().is_empty());
        let context = CallContext::for_session("bob");
        let first = toolset
            .call("locked__echo", Some(json!({"message": "x"})), &context)
            .await;
        assert_eq!(
            first.unwrap_err(),
            CallError::Unauthorized {
                server: "locked".into()
            }
        );
        let second = toolset
            .call("locked__echo", Some(json!({"message": "x"})), &context)
            .await;
        assert_eq!(
            second.unwrap_err().to_string(),
            "MCP server \"locked\" is unavailable."
        );
        assert_eq!(server.calls(), 0);
        toolset.close().await;
    }
}

mod legacy_sse {
    use super::*;

    /// The tests' legacy SSE server, and a toolset connected to it as `old`.
    async fn old_server() -> (SseServer, Toolset) {
        let server = sse_fixture(FixtureConfig::default(), None).await;
        let toolset = connect(
            vec![McpServerConfig::sse("old", server.sse_url())],
            options(),
        )
        .await
        .unwrap();
        (server, toolset)
    }

    #[tokio::test]
    async fn list_call_and_progress_over_http_sse() {
        let (_server, toolset) = old_server().await;
        assert!(
            toolset.diagnostics().is_empty(),
            "{:?}",
            toolset.diagnostics()
        );
        assert!(names(&toolset).contains(&"old__echo".to_owned()));
        let result = call(&toolset, "old__echo", json!({"message": "over sse"}))
            .await
            .unwrap();
        assert_eq!(text(&result), "over sse");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let context = CallContext::default().with_progress(tx);
        let done = toolset
            .call("old__progress", Some(json!({"steps": 2})), &context)
            .await
            .unwrap();
        assert_eq!(text(&done), "done after 2 steps");
        let mut count = 0;
        while rx.try_recv().is_ok() {
            count += 1;
        }
        assert_eq!(count, 2);
        toolset.close().await;
        assert_eq!(
            call(&toolset, "old__echo", json!({"message": "x"}))
                .await
                .unwrap_err()
                .to_string(),
            "MCP server \"old\" is unavailable."
        );
    }

    /// Calls to a legacy SSE server are posted by the direct path: each
    /// with an id of its own from the direct range (past every id rmcp
    /// gives), answered by the event carrying that id.
    #[tokio::test]
    async fn calls_to_a_legacy_sse_server_take_the_direct_path() {
        let (server, toolset) = old_server().await;
        let calls = (0..4).map(|n| {
            let toolset = toolset.clone();
            async move {
                let message = format!("call {n}");
                let result = call(&toolset, "old__echo", json!({"message": message}))
                    .await
                    .unwrap();
                assert_eq!(text(&result), message);
            }
        });
        futures::future::join_all(calls).await;
        let ids = server.calls.lock().unwrap().clone();
        assert_eq!(ids.len(), 4, "{ids:?}");
        let mut numbers: Vec<i64> = ids
            .iter()
            .map(|id| match id {
                rmcp::model::RequestId::Number(n) => *n,
                other => panic!("not a number: {other:?}"),
            })
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), 4, "{ids:?}");
        assert!(numbers.iter().all(|n| *n >= 1 << 48), "{ids:?}");
        toolset.close().await;
    }

    /// A server that names a new endpoint mid-session gets the next call
    /// posted there.
    #[tokio::test]
    async fn a_call_after_a_moved_endpoint_is_posted_to_it() {
        let (server, toolset) = old_server().await;
        let posted_to_moved = || {
            server
                .server
                .seen
                .lock()
                .unwrap()
                .iter()
                .filter(|seen| seen.method == "POST" && seen.path.contains("moved=1"))
                .count()
        };
        call(&toolset, "old__echo", json!({"message": "before"}))
            .await
            .unwrap();
        assert_eq!(posted_to_moved(), 0);
        server.move_endpoint("moved=1");
        // The event is read on the stream; calls before that still go to
        // the old endpoint, which the fixture also serves.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            call(&toolset, "old__echo", json!({"message": "after"}))
                .await
                .unwrap();
            if posted_to_moved() > 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no call was posted to the new endpoint"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        toolset.close().await;
    }

    /// A call waiting on a legacy SSE server whose stream ends fails as a
    /// lost connection, long before its timeout (60 s here).
    #[tokio::test]
    async fn a_call_waiting_when_the_stream_ends_fails_long_before_its_timeout() {
        let (server, toolset) = old_server().await;
        let pending = {
            let toolset = toolset.clone();
            tokio::spawn(async move {
                toolset
                    .call("old__hang", None, &CallContext::default())
                    .await
            })
        };
        assert!(
            eventually(WAIT, || server.server.state.hanging.load(Ordering::SeqCst)
                == 1)
            .await
        );
        server.end_streams();
        let failed = tokio::time::timeout(Duration::from_secs(20), pending)
            .await
            .expect("the call fails within 20 s")
            .unwrap();
        assert!(
            matches!(failed, Err(CallError::ConnectionLost { .. })),
            "{failed:?}"
        );
        toolset.close().await;
    }

    #[tokio::test]
    async fn cancellation_reaches_a_legacy_sse_server() {
        let (server, toolset) = old_server().await;
        let cancel = CancellationToken::new();
        let context = CallContext::default().with_cancel(cancel.clone());
        let pending = {
            let toolset = toolset.clone();
            tokio::spawn(async move { toolset.call("old__hang", None, &context).await })
        };
        assert!(
            eventually(WAIT, || server.server.state.hanging.load(Ordering::SeqCst)
                == 1)
            .await
        );
        cancel.cancel();
        assert!(matches!(
            pending.await.unwrap(),
            Err(CallError::Cancelled { .. })
        ));
        assert!(
            eventually(WAIT, || server
                .server
                .state
                .cancelled
                .load(Ordering::SeqCst)
                == 1)
            .await
        );
        toolset.close().await;
    }

    /// A legacy SSE server of its own that answers `initialize` and
    /// `tools/list` (one tool, `garble`) and every `tools/call` first with
    /// `unreadable` requests of its own that cannot be read (their params
    /// are a number; ids `srv-1`…), then with an answer nested past what
    /// JSON is read to (rmcp cannot read either). Every message posted to
    /// it is kept; with `hold_refusals`, a posted error is never answered.
    async fn garbling_sse_server(
        unreadable: usize,
        hold_refusals: bool,
    ) -> (String, Arc<std::sync::Mutex<Vec<serde_json::Value>>>) {
        use axum::extract::State;
        use axum::response::sse::{Event, Sse};
        use axum::routing::{get, post};
        use futures::StreamExt;
        type Stream =
            Arc<std::sync::Mutex<Option<futures::channel::mpsc::UnboundedSender<String>>>>;
        #[derive(Clone)]
        struct Garble {
            stream: Stream,
            posted: Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
            unreadable: usize,
            hold_refusals: bool,
        }
        async fn open(
            State(state): State<Garble>,
        ) -> Sse<impl futures::Stream<Item = Result<Event, std::convert::Infallible>>> {
            let (sender, messages) = futures::channel::mpsc::unbounded();
            *state.stream.lock().unwrap() = Some(sender);
            let endpoint = Event::default().event("endpoint").data("/message");
            Sse::new(
                futures::stream::once(async move { Ok(endpoint) })
                    .chain(messages.map(|m| Ok(Event::default().event("message").data(m)))),
            )
        }
        async fn message(State(state): State<Garble>, body: String) -> axum::http::StatusCode {
            let message: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            state.posted.lock().unwrap().push(message.clone());
            if state.hold_refusals && message.get("error").is_some() {
                std::future::pending::<()>().await;
            }
            let id = message["id"].clone();
            let answers = match message["method"].as_str() {
                Some("initialize") => vec![
                    json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "garble", "version": "1"}}})
                    .to_string(),
                ],
                Some("tools/list") => vec![
                    json!({"jsonrpc": "2.0", "id": id, "result": {
                    "tools": [{"name": "garble", "inputSchema": {"type": "object"}}]}})
                    .to_string(),
                ],
                Some("tools/call") => (1..=state.unreadable)
                    .map(|n| {
                        json!({"jsonrpc": "2.0", "id": format!("srv-{n}"),
                            "method": "sampling/createMessage", "params": 5})
                        .to_string()
                    })
                    .chain([format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[],"structuredContent":{}{}}}}}"#,
                        "[".repeat(200),
                        "]".repeat(200)
                    )])
                    .collect(),
                Some(_) => vec![json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string()],
                None => Vec::new(),
            };
            if let Some(stream) = state.stream.lock().unwrap().as_ref() {
                for answer in answers {
                    let _ = stream.unbounded_send(answer);
                }
            }
            axum::http::StatusCode::ACCEPTED
        }
        let posted = Arc::new(std::sync::Mutex::new(Vec::new()));
        let state = Garble {
            stream: Arc::default(),
            posted: posted.clone(),
            unreadable,
            hold_refusals,
        };
        let router = axum::Router::new()
            .route("/sse", get(open))
            .route("/message", post(message))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/sse", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        (url, posted)
    }

    /// A legacy SSE server's unreadable answer fails its call at once (it
    /// used to be dropped, and the call waited out its timeout: a minute by
    /// default), and its unreadable request is refused by its id (it used
    /// to be dropped, and the server waited for an answer that never came).
    #[tokio::test]
    async fn a_legacy_sse_servers_unreadable_answer_fails_the_call_and_its_request_is_refused() {
        let (url, posted) = garbling_sse_server(1, false).await;
        let toolset = connect(vec![McpServerConfig::sse("old", url)], options())
            .await
            .unwrap();
        assert_eq!(names(&toolset), ["old__garble"]);
        let failed = tokio::time::timeout(
            Duration::from_secs(20),
            call(&toolset, "old__garble", json!({})),
        )
        .await
        .expect("the call fails at once, not at its timeout")
        .unwrap_err()
        .to_string();
        assert!(failed.contains("could not be read"), "{failed}");
        assert!(
            eventually(WAIT, || posted
                .lock()
                .unwrap()
                .iter()
                .any(|m| m["id"] == "srv-1" && m["error"]["code"] == -32600))
            .await,
            "{:?}",
            posted.lock().unwrap()
        );
        toolset.close().await;
    }

    /// A server that streams unreadable requests and never takes the
    /// refusals gets at most 8 of them at once (the rest are dropped), not
    /// one open POST per request.
    #[tokio::test]
    async fn a_legacy_sse_servers_unreadable_requests_get_a_bounded_number_of_refusals() {
        let (url, posted) = garbling_sse_server(50, true).await;
        let toolset = connect(vec![McpServerConfig::sse("old", url)], options())
            .await
            .unwrap();
        let refusals = || {
            posted
                .lock()
                .unwrap()
                .iter()
                .filter(|m| m.get("error").is_some())
                .count()
        };
        let failed = tokio::time::timeout(
            Duration::from_secs(20),
            call(&toolset, "old__garble", json!({})),
        )
        .await
        .expect("the call fails at once");
        assert!(failed.is_err());
        assert!(eventually(WAIT, || refusals() == 8).await, "{}", refusals());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(refusals(), 8, "refusals past the cap were posted");
        toolset.close().await;
    }

    #[tokio::test]
    async fn an_endpoint_on_another_origin_is_refused() {
        let server = sse_fixture(
            FixtureConfig::default(),
            Some("http://localhost:9/message?sessionId=0".into()),
        )
        .await;
        let toolset = connect(
            vec![McpServerConfig::sse("old", server.sse_url())],
            options(),
        )
        .await
        .unwrap();
        assert!(toolset.tools().is_empty());
        let diagnostics = toolset.diagnostics();
        assert_eq!(diagnostics.len(), 1);
        assert!(
            diagnostics[0]
                .message
                .to_lowercase()
                .contains("endpoint origin does not match"),
            "{}",
            diagnostics[0].message
        );
        assert_eq!(server.posts.load(Ordering::SeqCst), 0);
    }
}

#[cfg(feature = "stdio")]
mod stdio {
    use super::*;

    fn fixture(name: &str, args: &[&str]) -> McpServerConfig {
        McpServerConfig::stdio(name, fixture_bin(), args.iter().copied())
    }

    fn alive(pid: u32) -> bool {
        // A zombie still has a /proc entry; check its state too.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat.contains(") Z "),
            Err(_) => false,
        }
    }

    #[tokio::test]
    async fn a_stdio_child_is_gone_after_close() {
        let toolset = connect(vec![fixture("kid", &[])], options()).await.unwrap();
        assert!(
            toolset.diagnostics().is_empty(),
            "{:?}",
            toolset.diagnostics()
        );
        let pid = toolset.child_pid("kid").expect("a child pid");
        let reported = text(&call(&toolset, "kid__pid", json!({})).await.unwrap());
        assert_eq!(reported, pid.to_string());
        assert!(alive(pid));
        toolset.close().await;
        assert!(
            eventually(WAIT, || !alive(pid)).await,
            "child {pid} survived close()"
        );
        assert_eq!(
            call(&toolset, "kid__pid", json!({}))
                .await
                .unwrap_err()
                .to_string(),
            "MCP server \"kid\" is unavailable."
        );
        // Idempotent.
        toolset.close().await;
    }

    #[tokio::test]
    async fn a_stdio_child_dies_with_a_dropped_toolset() {
        let toolset = connect(vec![fixture("kid", &[])], options()).await.unwrap();
        let pid = toolset.child_pid("kid").expect("a child pid");
        assert!(alive(pid));
        drop(toolset);
        assert!(
            eventually(WAIT, || !alive(pid)).await,
            "child {pid} outlived its toolset"
        );
    }

    #[tokio::test]
    async fn a_command_given_by_name_is_found_on_the_childs_path_and_keeps_its_name() {
        // Only on the PATH the config gives the child, not on ours.
        let dir = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(fixture_bin(), dir.path().join("kid-server")).expect("symlink");
        let path = format!("{}:/usr/bin:/bin", dir.path().display());
        let toolset = connect(
            vec![
                McpServerConfig::stdio("kid", "kid-server", Vec::<String>::new())
                    .with_env("PATH", path),
            ],
            options(),
        )
        .await
        .unwrap();
        let answer = call(&toolset, "kid__whoami", json!({})).await.unwrap();
        assert!(!answer.is_error, "{answer:?}");
        // The child's argv[0] is the configured name, not the path it was
        // found at.
        let pid = toolset.child_pid("kid").expect("a child pid");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
        let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(argv0), "kid-server");
        toolset.close().await;
    }

    #[tokio::test]
    async fn a_relative_path_entry_is_searched_from_the_childs_directory() {
        // `bin` on the child's PATH means `bin` in the child's working
        // directory, where only the child's own program is; the gateway's
        // directory has none. The search is then left to execvp in the
        // child, after it changed directory.
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("bin")).expect("bin");
        std::os::unix::fs::symlink(fixture_bin(), dir.path().join("bin").join("kid-server"))
            .expect("symlink");
        let McpServerConfig::Stdio(mut config) =
            McpServerConfig::stdio("kid", "kid-server", Vec::<String>::new())
                .with_env("PATH", "bin:/usr/bin:/bin")
        else {
            unreachable!("a stdio config")
        };
        config.cwd = Some(dir.path().to_path_buf());
        let toolset = connect(vec![McpServerConfig::Stdio(config)], options())
            .await
            .unwrap();
        let answer = call(&toolset, "kid__whoami", json!({})).await.unwrap();
        assert!(!answer.is_error, "{answer:?}");
        toolset.close().await;
    }

    #[tokio::test]
    async fn a_stdio_child_gets_a_minimal_environment() {
        // Some variable of ours that is not on the allow-list.
        let (leaked, _) = std::env::vars()
            .find(|(k, _)| !portcullis_upstream::stdio::AMBIENT_ALLOWLIST.contains(&k.as_str()))
            .expect("the test process has some environment");
        let toolset = connect(
            vec![fixture("kid", &[]).with_env("FIXTURE_GREETING", "hi")],
            options(),
        )
        .await
        .unwrap();
        let env = |name: &str| {
            let toolset = toolset.clone();
            let name = name.to_owned();
            async move {
                text(
                    &call(&toolset, "kid__env", json!({ "name": name }))
                        .await
                        .unwrap(),
                )
            }
        };
        assert_eq!(env("FIXTURE_GREETING").await, "hi");
        assert_eq!(
            env(&leaked).await,
            "<unset>",
            "{leaked} leaked into the child"
        );
        assert_ne!(env("PATH").await, "<unset>");
        toolset.close().await;
    }

    #[tokio::test]
    async fn a_child_that_crashes_mid_call_fails_that_call_and_leaves_siblings() {
        let http = http_fixture(FixtureConfig::default()).await;
        let toolset = connect(
            vec![
                fixture("kid", &["--crash"]),
                McpServerConfig::streamable_http("web", http.mcp_url()),
            ],
            // Not reopened, so the closed connection stays visible (the
            // reconnect tests cover reopening).
            options().with_reconnect(portcullis_upstream::Backoff::NEVER),
        )
        .await
        .unwrap();
        let crashed = call(&toolset, "kid__crash", json!({})).await.unwrap_err();
        assert!(
            matches!(crashed, CallError::ConnectionLost { .. }),
            "{crashed:?}"
        );
        let after = call(&toolset, "kid__echo", json!({"message": "x"}))
            .await
            .unwrap_err();
        assert_eq!(after.to_string(), "MCP server \"kid\" is unavailable.");
        assert_eq!(
            text(
                &call(&toolset, "web__echo", json!({"message": "y"}))
                    .await
                    .unwrap()
            ),
            "y"
        );
        toolset.close().await;
    }

    #[tokio::test]
    async fn cancellation_reaches_a_stdio_child() {
        let marker = std::env::temp_dir().join(format!("portcullis-cancel-{}", std::process::id()));
        let _ = std::fs::remove_file(&marker);
        let config =
            fixture("kid", &[]).with_env("FIXTURE_CANCEL_MARKER", marker.display().to_string());
        let toolset = connect(vec![config], options()).await.unwrap();
        let cancel = CancellationToken::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let context = CallContext::default()
            .with_cancel(cancel.clone())
            .with_progress(tx);
        let pending = {
            let toolset = toolset.clone();
            tokio::spawn(async move { toolset.call("kid__hang", None, &context).await })
        };
        // The child reports (as progress) that the call arrived.
        let arrived = rx.recv().await.expect("progress from the child");
        assert_eq!(arrived.message.as_deref(), Some("hanging"));
        cancel.cancel();
        assert!(matches!(
            pending.await.unwrap(),
            Err(CallError::Cancelled { .. })
        ));
        assert!(
            eventually(WAIT, || std::fs::read_to_string(&marker)
                .is_ok_and(|m| m == "cancelled"))
            .await,
            "the child never saw the cancellation"
        );
        let _ = std::fs::remove_file(&marker);
        toolset.close().await;
    }

    #[tokio::test]
    async fn a_handshake_era_stdio_child_is_reached() {
        let toolset = connect(vec![fixture("old", &["--legacy-only"])], options())
            .await
            .unwrap();
        assert!(
            toolset.diagnostics().is_empty(),
            "{:?}",
            toolset.diagnostics()
        );
        assert_eq!(
            text(
                &call(&toolset, "old__echo", json!({"message": "hs"}))
                    .await
                    .unwrap()
            ),
            "hs"
        );
        toolset.close().await;
    }

    /// A stdio MCP server as a shell script: it reads each request's id and
    /// method, answers `initialize` as `name` (a 2025-06-18 server with
    /// tools), the other methods by `arms` (shell `case` arms), and
    /// anything else with "no such method".
    fn sh_server(name: &str, arms: &str) -> String {
        const SCRIPT: &str = r#"
while IFS= read -r line; do
  case $line in *'"id":'*) ;; *) continue ;; esac
  rest=${line#*\"id\":}; id=${rest%%[,\}]*}
  rest=${line#*\"method\":\"}; method=${rest%%\"*}
  case $method in
    initialize)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"NAME","version":"1"}}}\n' "$id" ;;
ARMS
    *)
      printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no such method"}}\n' "$id" ;;
  esac
done
"#;
        SCRIPT
            .replace("NAME", name)
            .replace("ARMS", arms.trim_matches('\n'))
    }

    /// The arms of an [`sh_server`] that answers a call with the id it
    /// was sent with; `forge` first answers the *next* id with
    /// "forged", as if it knew the next call before it was made.
    const ID_ECHO_ARMS: &str = r#"
    tools/list)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"id","inputSchema":{"type":"object"}},{"name":"forge","inputSchema":{"type":"object"}}]}}\n' "$id" ;;
    tools/call)
      case $line in
        *'"name":"forge"'*)
          printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"forged"}]}}\n' "$((id + 1))" ;;
      esac
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}\n' "$id" "$id" ;;
"#;

    /// Connected to the [`ID_ECHO_ARMS`] server, `ids`.
    async fn id_echo() -> Toolset {
        connect(
            vec![McpServerConfig::stdio(
                "ids",
                "sh",
                ["-c", &sh_server("ids", ID_ECHO_ARMS)],
            )],
            options(),
        )
        .await
        .unwrap()
    }

    /// A stdio call is written to the child by the call itself, with an id
    /// from a range rmcp's own numbering never reaches (so the transport
    /// hands its answer straight back: `connection::direct::stdio`).
    #[tokio::test]
    async fn stdio_calls_go_direct_with_ids_rmcp_never_uses() {
        let toolset = id_echo().await;
        let mut seen = Vec::new();
        for _ in 0..3 {
            let id: u64 = text(&call(&toolset, "ids__id", json!({})).await.unwrap())
                .parse()
                .unwrap();
            assert!(id >= 1 << 48, "sent through rmcp, as request {id}");
            seen.push(id);
        }
        seen.dedup();
        assert_eq!(seen.len(), 3, "{seen:?}");
        toolset.close().await;
    }

    /// An answer to a direct id no call waits for yet is dropped, not kept
    /// for the call that is later made with that id.
    #[tokio::test]
    async fn an_answer_sent_ahead_for_the_next_call_is_not_its_answer() {
        let toolset = id_echo().await;
        let first = text(&call(&toolset, "ids__forge", json!({})).await.unwrap());
        let second = text(&call(&toolset, "ids__id", json!({})).await.unwrap());
        assert_ne!(second, "forged");
        assert_eq!(
            second.parse::<u64>().unwrap(),
            first.parse::<u64>().unwrap() + 1
        );
        toolset.close().await;
    }

    /// The arms of an [`sh_server`] whose answers to some calls no MCP
    /// reader can read: `deep` answers with structured content nested
    /// 200 levels deep (past `serde_json`'s recursion limit of 128),
    /// `both` with a result and an error in one answer, `mangled` with an
    /// error that is not an object. `ok` answers normally.
    const UNREADABLE_ANSWERS_ARMS: &str = r#"
    tools/list)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[' "$id"
      for name in deep both mangled ok; do
        [ $name = deep ] || printf ','
        printf '{"name":"%s","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}' $name
      done
      printf ']}}\n' ;;
    tools/call)
      case $line in
        *'"name":"deep"'*)
          printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[],"structuredContent":DEEP}}\n' "$id" ;;
        *'"name":"both"'*)
          printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[]},"error":{"code":-32000,"message":"SERVER TEXT"}}\n' "$id" ;;
        *'"name":"mangled"'*)
          printf '{"jsonrpc":"2.0","id":%s,"error":"SERVER TEXT"}\n' "$id" ;;
        *)
          printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"fine"}]}}\n' "$id" ;;
      esac ;;
"#;

    /// Connects to the [`UNREADABLE_ANSWERS_ARMS`] server with a 30 s timeout,
    /// calls each of `tools`, and checks that every call fails at once
    /// (an unreadable answer used to be dropped, and the call waited out
    /// its timeout) with a clear error that repeats none of the server's
    /// text, and that the connection keeps serving.
    async fn each_fails_at_once(tools: &[&str]) {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let script = sh_server("odd", UNREADABLE_ANSWERS_ARMS).replace("DEEP", &deep);
        let toolset = connect(
            vec![McpServerConfig::stdio("odd", "sh", ["-c", script.as_str()])],
            options().with_timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap();
        assert!(
            toolset.diagnostics().is_empty(),
            "{:?}",
            toolset.diagnostics()
        );
        for tool in tools {
            let started = std::time::Instant::now();
            let error = call(&toolset, tool, json!({})).await.unwrap_err();
            let took = started.elapsed();
            assert!(took < Duration::from_secs(10), "{tool} took {took:?}");
            let message = error.to_string();
            assert!(
                matches!(error, CallError::Protocol { .. })
                    && message.contains("answer could not be read"),
                "{tool}: {message}"
            );
            assert!(!message.contains("SERVER TEXT"), "{message}");
            let fine = call(&toolset, "odd__ok", json!({})).await.unwrap();
            assert_eq!(text(&fine), "fine");
        }
        toolset.close().await;
    }

    #[tokio::test]
    async fn an_answer_nested_past_the_recursion_limit_fails_its_call_at_once() {
        each_fails_at_once(&["odd__deep"]).await;
    }

    #[tokio::test]
    async fn an_answer_of_the_wrong_shape_fails_its_call_at_once() {
        each_fails_at_once(&["odd__mangled", "odd__both"]).await;
    }

    #[tokio::test]
    async fn a_stdio_server_that_never_answers_times_out() {
        // `sleep` reads nothing and writes nothing: a server that hangs.
        let toolset = connect(
            vec![McpServerConfig::stdio("mute", "sleep", ["30"])],
            options().with_timeout(Duration::from_millis(800)),
        )
        .await
        .unwrap();
        let diagnostics = toolset.diagnostics();
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert_eq!(diagnostics[0].rule, Rule::ConnectionFailure);
        assert!(toolset.tools().is_empty());
    }
}

#[cfg(not(feature = "stdio"))]
#[tokio::test]
async fn without_the_stdio_feature_a_stdio_config_yields_no_tools_and_says_how_to_enable_it() {
    let http = http_fixture(FixtureConfig::default()).await;
    let toolset = connect(
        vec![
            McpServerConfig::stdio("local", fixture_bin(), Vec::<String>::new()),
            McpServerConfig::streamable_http("web", http.mcp_url()),
        ],
        options(),
    )
    .await
    .unwrap();
    let diagnostics = toolset.diagnostics();
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(diagnostics[0].rule, Rule::UnsupportedTransport);
    assert_eq!(diagnostics[0].origin, "local");
    assert!(diagnostics[0].message.contains("`stdio` cargo feature"));
    assert!(names(&toolset).iter().all(|n| !n.starts_with("local__")));
    assert!(names(&toolset).contains(&"web__echo".to_owned()));
}

#[tokio::test]
async fn a_cursor_style_config_connects_end_to_end() {
    let server = http_fixture(FixtureConfig::default()).await;
    let stdio = if cfg!(feature = "stdio") {
        format!(
            r#""local": {{"command": {:?}, "args": ["--label", "L"]}},"#,
            fixture_bin()
        )
    } else {
        String::new()
    };
    let json = format!(
        r#"{{"mcpServers": {{ {stdio} "web": {{"url": {:?}, "headers": {{"X-Team": "t1"}}}}, "bad": {{"url": "ftp://x"}} }}}}"#,
        server.mcp_url()
    );
    let parsed = portcullis_upstream::parse_mcp_servers_json(&json).unwrap();
    assert_eq!(parsed.diagnostics.len(), 1);
    let toolset = connect(parsed.servers, options()).await.unwrap();
    assert!(
        toolset.diagnostics().is_empty(),
        "{:?}",
        toolset.diagnostics()
    );
    assert_eq!(
        text(
            &call(&toolset, "web__echo", json!({"message": "w"}))
                .await
                .unwrap()
        ),
        "w"
    );
    assert!(
        server
            .seen()
            .iter()
            .all(|s| s.header("x-team").as_deref() == Some("t1"))
    );
    if cfg!(feature = "stdio") {
        assert_eq!(
            text(&call(&toolset, "local__whoami", json!({})).await.unwrap()),
            "L"
        );
    }
    toolset.close().await;
}

// OAuth against a real authorization server and a protected server, both on
// loopback (`common::auth_server`, `common::protected_fixture`).

mod oauth {
    use super::*;
    use portcullis_upstream::oauth::{AuthStatus, OAuthClient, OAuthError, OAuthSettings};
    use std::sync::Mutex;

    async fn client(server: &Server) -> OAuthClient {
        let settings = OAuthSettings {
            client_name: "portcullis tests".into(),
            redirect_uri: "http://127.0.0.1:9/callback".into(),
            ..OAuthSettings::default()
        };
        OAuthClient::new("docs", &server.mcp_url(), None, settings)
            .await
            .expect("an OAuth client")
    }

    /// Connects with the login as the server's own credential (as the
    /// gateway does: no session).
    async fn open(server: &Server, oauth: &OAuthClient) -> Toolset {
        connect(
            vec![McpServerConfig::streamable_http("docs", server.mcp_url())],
            ConnectOptions::default().with_server_auth("docs", oauth.clone()),
        )
        .await
        .expect("connect")
    }

    fn echo(toolset: &Toolset) -> String {
        toolset
            .tools()
            .into_iter()
            .map(|t| t.name)
            .find(|n| n.ends_with("echo"))
            .expect("the fixture's echo tool")
    }

    async fn call(toolset: &Toolset) -> Result<portcullis_catalog::ToolResult, CallError> {
        toolset
            .call(
                &echo(toolset),
                Some(json!({"message": "hi"})),
                &CallContext::default(),
            )
            .await
    }

    /// The first connection is refused with a challenge; logs in from it.
    async fn logged_in(server: &Server, oauth: &OAuthClient) {
        let refused = open(server, oauth).await;
        assert!(
            refused.tools().is_empty(),
            "the server let us in unauthenticated"
        );
        let (status, challenge) = oauth.take_challenge().expect("a 401 challenge");
        assert_eq!(status, 401);
        assert!(challenge.resource_metadata.is_some());
        refused.close().await;
        oauth
            .login(Some(&challenge), &oauth.follow_redirects())
            .await
            .expect("login");
    }

    #[tokio::test]
    async fn oauth_login_calls_with_the_token_and_refreshes_after_expiry() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection.clone()).await;
        let oauth = client(&server).await;
        let kept = Arc::new(Mutex::new(Vec::<Option<String>>::new()));
        let keeper = kept.clone();
        oauth.on_grant(Arc::new(move |server, grant| {
            assert_eq!(server, "docs");
            keeper
                .lock()
                .unwrap()
                .push(grant.map(|g| g.access_token.clone()));
        }));
        logged_in(&server, &oauth).await;
        // Code + PKCE S256, the resource parameter, the challenge's scope.
        let authorize = auth.authorizations.lock().unwrap()[0].clone();
        assert_eq!(authorize["code_challenge_method"], "S256");
        assert_eq!(authorize["resource"], server.mcp_url());
        assert_eq!(authorize["scope"], "mcp:read");
        let redeemed = auth.token_requests.lock().unwrap()[0].clone();
        assert_eq!(redeemed["grant_type"], "authorization_code");
        assert_eq!(redeemed["resource"], server.mcp_url());

        let toolset = open(&server, &oauth).await;
        assert_eq!(text(&call(&toolset).await.expect("the call")), "hi");
        let first = oauth.grant().await.expect("a grant").access_token;
        assert!(protection.tokens_seen.lock().unwrap().contains(&first));

        // The access token expires: the next call refreshes it first.
        auth.expire_access_tokens();
        let mut grant = oauth.grant().await.expect("a grant");
        grant.expires_at = Some(0);
        grant.refresh_at = Some(0);
        oauth.restore(grant).await;
        assert_eq!(
            text(&call(&toolset).await.expect("the call after refresh")),
            "hi"
        );
        let refreshed = oauth.grant().await.expect("a grant").access_token;
        assert_ne!(refreshed, first);
        assert_eq!(
            protection.tokens_seen.lock().unwrap().last(),
            Some(&refreshed)
        );
        let requests = auth.token_requests.lock().unwrap().clone();
        let refresh = requests.last().expect("a refresh request");
        assert_eq!(refresh["grant_type"], "refresh_token");
        assert_eq!(refresh["resource"], server.mcp_url());
        // Whoever keeps grants heard of the login and of the refresh.
        assert_eq!(*kept.lock().unwrap(), [Some(first), Some(refreshed)]);
        toolset.close().await;
    }

    #[tokio::test]
    async fn oauth_steps_up_on_insufficient_scope_within_a_limit() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            call_scope: Mutex::new(Some("mcp:write".into())),
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection.clone()).await;
        let oauth = client(&server).await;
        logged_in(&server, &oauth).await;
        let toolset = open(&server, &oauth).await;
        assert!(matches!(
            call(&toolset).await,
            Err(CallError::Forbidden { .. })
        ));
        let (status, challenge) = oauth.take_challenge().expect("a 403 challenge");
        assert_eq!(status, 403);
        assert!(challenge.insufficient_scope());
        oauth
            .step_up(&challenge, &oauth.follow_redirects())
            .await
            .expect("step-up");
        // The union of what was asked before and what is challenged now.
        let last = auth.authorizations.lock().unwrap().last().cloned().unwrap();
        assert_eq!(last["scope"], "mcp:read mcp:write");
        // The same connection: a refusal of a credential that can be
        // renewed did not make the server unavailable.
        assert_eq!(
            text(&call(&toolset).await.expect("the call after step-up")),
            "hi"
        );
        toolset.close().await;

        // A server that asks for a new scope on every call is followed
        // MAX_STEP_UPS times, then refused.
        *protection.call_scope.lock().unwrap() = Some("mcp:admin".into());
        let escalating = Arc::new(Protection {
            scope: "mcp:read".into(),
            call_scope: Mutex::new(Some("mcp:admin".into())),
            escalate: true,
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), escalating).await;
        let oauth = client(&server).await;
        logged_in(&server, &oauth).await;
        let before = auth.authorizations.lock().unwrap().len();
        let mut outcome = Ok(());
        for _ in 0..10 {
            let toolset = open(&server, &oauth).await;
            assert!(call(&toolset).await.is_err());
            toolset.close().await;
            let (_, challenge) = oauth.take_challenge().expect("a 403 challenge");
            outcome = oauth.step_up(&challenge, &oauth.follow_redirects()).await;
            if outcome.is_err() {
                break;
            }
        }
        assert!(
            matches!(outcome, Err(OAuthError::StepUpLimit { attempts, .. }) if attempts == portcullis_upstream::oauth::MAX_STEP_UPS),
            "{outcome:?}"
        );
        let made = auth.authorizations.lock().unwrap().len() - before;
        assert_eq!(made as u32, portcullis_upstream::oauth::MAX_STEP_UPS);
        // A challenge for a scope already asked for is not followed at all.
        let repeated = portcullis_upstream::oauth::Challenge {
            error: Some("insufficient_scope".into()),
            scopes: vec!["mcp:read".into()],
            resource_metadata: None,
            dpop: false,
        };
        oauth
            .login(Some(&repeated), &oauth.follow_redirects())
            .await
            .expect("login");
        let before = auth.authorizations.lock().unwrap().len();
        assert!(matches!(
            oauth.step_up(&repeated, &oauth.follow_redirects()).await,
            Err(OAuthError::StepUpLimit { attempts: 0, .. })
        ));
        assert_eq!(auth.authorizations.lock().unwrap().len(), before);
    }

    #[tokio::test]
    async fn oauth_a_revoked_grant_needs_a_login_and_is_not_reported_down() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection).await;
        let oauth = client(&server).await;
        logged_in(&server, &oauth).await;
        let forgotten = Arc::new(AtomicUsize::new(0));
        let counter = forgotten.clone();
        oauth.on_grant(Arc::new(move |_, grant| {
            if grant.is_none() {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        }));
        auth.revoke();
        let mut grant = oauth.grant().await.expect("a grant");
        grant.refresh_at = Some(0);
        oauth.restore(grant).await;
        // Connecting says the server needs a login, not that it is down.
        let toolset = open(&server, &oauth).await;
        let said: Vec<String> = toolset
            .diagnostics()
            .iter()
            .map(|d| d.to_string())
            .collect();
        assert!(
            said.iter()
                .any(|d| d.contains("\"docs\" needs a login") && d.contains("revoked")),
            "{said:?}"
        );
        toolset.close().await;
        match oauth.access_token().await {
            Err(OAuthError::LoginRequired { server, reason }) => {
                assert_eq!(server, "docs");
                assert!(reason.contains("revoked"), "{reason}");
            }
            other => panic!("expected LoginRequired, got {other:?}"),
        }
        assert_eq!(oauth.status().await, AuthStatus::NeedsLogin);
        assert_eq!(
            forgotten.load(Ordering::SeqCst),
            1,
            "the refused grant was not dropped"
        );
        // A new login restores it.
        oauth
            .login(None, &oauth.follow_redirects())
            .await
            .expect("login again");
        let toolset = open(&server, &oauth).await;
        assert_eq!(text(&call(&toolset).await.expect("the call")), "hi");
        toolset.close().await;
    }

    #[tokio::test]
    async fn oauth_an_authorization_response_from_another_issuer_is_refused() {
        let (_as, auth) = auth_server(Iss::Wrong).await;
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection).await;
        let oauth = client(&server).await;
        let refused = open(&server, &oauth).await;
        refused.close().await;
        let (_, challenge) = oauth.take_challenge().expect("a challenge");
        let outcome = oauth
            .login(Some(&challenge), &oauth.follow_redirects())
            .await;
        assert!(
            matches!(outcome, Err(OAuthError::IssuerMismatch { ref found, .. }) if found.as_deref() == Some("https://evil.example.com")),
            "{outcome:?}"
        );
        // The code never reached the token endpoint.
        assert_eq!(auth.authorizations.lock().unwrap().len(), 1);
        assert!(auth.token_requests.lock().unwrap().is_empty());
        assert_eq!(oauth.status().await, AuthStatus::LoggedOut);
    }
}

mod oauth_browser {
    use super::*;
    use portcullis_upstream::oauth::{LoopbackRedirect, OAuthClient, OAuthSettings};

    #[tokio::test]
    async fn oauth_login_through_a_browser_and_the_loopback_redirect_listener() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection).await;
        // The "browser": follows the authorization server's redirects,
        // ending at the listener, as a person's browser would.
        let shown = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = shown.clone();
        let strays = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stray_statuses = strays.clone();
        let listener_base = Arc::new(std::sync::OnceLock::<String>::new());
        let base = listener_base.clone();
        let browser: portcullis_upstream::oauth::redirect::Show = Arc::new(move |url| {
            seen.lock().unwrap().push(url.to_string());
            let url = url.clone();
            let stray_url = format!("{}/elsewhere", base.get().cloned().unwrap_or_default());
            let strays = stray_statuses.clone();
            tokio::spawn(async move {
                // A stray request first: answered 404, not taken for the
                // redirect.
                let stray = reqwest::get(stray_url).await.map(|r| r.status());
                strays.lock().unwrap().push(stray.ok());
                let page = reqwest::get(url).await.expect("the browser got an answer");
                assert!(page.status().is_success(), "{}", page.status());
                let text = page.text().await.unwrap_or_default();
                assert!(text.contains("Logged in"), "{text}");
            });
        });
        let redirect = LoopbackRedirect::bind(0, "/callback", browser)
            .await
            .expect("bind loopback")
            .with_timeout(Duration::from_secs(20));
        let settings = OAuthSettings {
            client_name: "portcullis tests".into(),
            redirect_uri: redirect.redirect_uri().to_owned(),
            ..OAuthSettings::default()
        };
        let oauth = OAuthClient::new("docs", &server.mcp_url(), None, settings)
            .await
            .unwrap();
        let _ = listener_base.set(redirect.redirect_uri().replace("/callback", ""));
        oauth
            .login(None, &redirect)
            .await
            .expect("login through the listener");
        assert_eq!(
            strays.lock().unwrap().as_slice(),
            [Some(reqwest::StatusCode::NOT_FOUND)]
        );
        assert_eq!(shown.lock().unwrap().len(), 1);
        assert!(oauth.grant().await.is_some());
        assert_eq!(
            auth.authorizations.lock().unwrap()[0]["redirect_uri"],
            redirect.redirect_uri()
        );
    }
}

mod oauth_waiting {
    use super::*;
    use portcullis_upstream::oauth::{AuthStatus, OAuthClient, OAuthSettings, UserAgent};

    /// A person who takes their time: the browser comes back only when
    /// `release` is notified.
    struct SlowPerson {
        release: Arc<tokio::sync::Notify>,
    }

    impl UserAgent for SlowPerson {
        fn authorize<'a>(
            &'a self,
            url: &'a url::Url,
            redirect_uri: &'a str,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<url::Url, String>> + Send + 'a>,
        > {
            Box::pin(async move {
                self.release.notified().await;
                let http = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|e| e.to_string())?;
                let answer = http
                    .get(url.clone())
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                let location = answer
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .ok_or("no redirect")?;
                assert!(location.starts_with(redirect_uri));
                url::Url::parse(location).map_err(|e| e.to_string())
            })
        }
    }

    #[tokio::test]
    async fn oauth_a_login_in_progress_holds_nothing_else_up() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            ..Protection::default()
        });
        let server = protected_fixture(auth, protection).await;
        let settings = OAuthSettings {
            client_name: "portcullis tests".into(),
            redirect_uri: "http://127.0.0.1:9/callback".into(),
            ..OAuthSettings::default()
        };
        let oauth = OAuthClient::new("docs", &server.mcp_url(), None, settings)
            .await
            .unwrap();
        let release = Arc::new(tokio::sync::Notify::new());
        let person = SlowPerson {
            release: release.clone(),
        };
        let logging_in = {
            let oauth = oauth.clone();
            tokio::spawn(async move { oauth.login(None, &person).await })
        };
        // While the person is in their browser, the client answers.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let status = tokio::time::timeout(Duration::from_secs(2), oauth.status())
            .await
            .expect("status() was held up by the login in progress");
        assert_eq!(status, AuthStatus::LoggedOut);
        release.notify_one();
        logging_in.await.unwrap().expect("login");
        assert!(matches!(oauth.status().await, AuthStatus::LoggedIn { .. }));
    }
}

mod oauth_machine {
    use super::*;
    use portcullis_upstream::oauth::{ClientKey, OAuthClient, OAuthSettings};

    /// A fresh P-256 key pair: the private half as PKCS#8 PEM, the public
    /// half as the authorization server holds it.
    fn client_key_pair() -> (String, jsonwebtoken::DecodingKey) {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
        use base64::Engine as _;
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
        let der = pair.to_pkcs8v1().unwrap();
        let body = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            lines.join("\n")
        );
        // The public key is the uncompressed point 04 || x || y.
        let point = pair.public_key().as_ref().to_vec();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let public =
            jsonwebtoken::DecodingKey::from_ec_components(&b64(&point[1..33]), &b64(&point[33..]))
                .unwrap();
        (pem, public)
    }

    #[tokio::test]
    async fn oauth_private_key_jwt_client_credentials_sign_each_request_and_send_no_secret() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        auth.machine_only.store(true, Ordering::SeqCst);
        let (pem, public) = client_key_pair();
        *auth.assertion_key.lock().unwrap() = Some(public);
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection).await;
        let settings = |key: &str| OAuthSettings {
            client_name: "portcullis tests".into(),
            redirect_uri: "http://127.0.0.1:9/callback".into(),
            client_id: Some("machine".into()),
            client_key: Some(ClientKey::from_pem(key, "ES256").expect("a usable key")),
            ..OAuthSettings::default()
        };
        let browser = FollowNothing;

        // Another key (the server holds only ours) is refused.
        let (stranger, _) = client_key_pair();
        let impostor = OAuthClient::new("docs", &server.mcp_url(), None, settings(&stranger))
            .await
            .unwrap();
        assert!(impostor.login(None, &browser).await.is_err());

        let oauth = OAuthClient::new("docs", &server.mcp_url(), None, settings(&pem))
            .await
            .unwrap();
        oauth.login(None, &browser).await.expect("private_key_jwt");
        let toolset = connect(
            vec![McpServerConfig::streamable_http("docs", server.mcp_url())],
            ConnectOptions::default().with_server_auth("docs", oauth.clone()),
        )
        .await
        .unwrap();
        let echo = toolset
            .tools()
            .into_iter()
            .map(|t| t.name)
            .find(|n| n.ends_with("echo"))
            .expect("echo");
        let context = CallContext::default();
        let call = |message: &'static str| {
            toolset.call(&echo, Some(json!({"message": message})), &context)
        };
        assert_eq!(text(&call("signed").await.expect("the call")), "signed");
        // Renewal signs a new assertion (a replayed one would be refused).
        auth.expire_access_tokens();
        let mut grant = oauth.grant().await.unwrap();
        grant.refresh_at = Some(0);
        oauth.restore(grant).await;
        assert_eq!(text(&call("again").await.expect("renewed")), "again");
        assert_eq!(auth.assertion_ids.lock().unwrap().len(), 2);
        // The key never shows.
        assert!(!format!("{oauth:?}{:?}", settings(&pem)).contains("PRIVATE"));
        toolset.close().await;
    }

    /// A user agent for flows that must not involve a person.
    struct FollowNothing;
    impl portcullis_upstream::oauth::UserAgent for FollowNothing {
        fn authorize<'a>(
            &'a self,
            _url: &'a url::Url,
            _redirect_uri: &'a str,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<url::Url, String>> + Send + 'a>,
        > {
            panic!("a browser was asked for a machine login")
        }
    }

    #[tokio::test]
    async fn oauth_client_credentials_when_the_server_offers_nothing_else() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        auth.machine_only.store(true, Ordering::SeqCst);
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection).await;
        let settings = OAuthSettings {
            client_name: "portcullis tests".into(),
            redirect_uri: "http://127.0.0.1:9/callback".into(),
            client_id: Some("machine".into()),
            client_secret: Some("secret".into()),
            ..OAuthSettings::default()
        };
        let oauth = OAuthClient::new("docs", &server.mcp_url(), None, settings)
            .await
            .unwrap();
        // No person: the "browser" must never be used.
        struct NoBrowser;
        impl portcullis_upstream::oauth::UserAgent for NoBrowser {
            fn authorize<'a>(
                &'a self,
                _url: &'a url::Url,
                _redirect_uri: &'a str,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<url::Url, String>> + Send + 'a>,
            > {
                panic!("a browser was asked for a machine login")
            }
        }
        oauth
            .login(None, &NoBrowser)
            .await
            .expect("client credentials");
        assert!(auth.authorizations.lock().unwrap().is_empty());
        let request = auth.token_requests.lock().unwrap()[0].clone();
        assert_eq!(request["grant_type"], "client_credentials");
        assert_eq!(request["resource"], server.mcp_url());
        let toolset = connect(
            vec![McpServerConfig::streamable_http("docs", server.mcp_url())],
            ConnectOptions::default().with_server_auth("docs", oauth.clone()),
        )
        .await
        .unwrap();
        let echo = toolset
            .tools()
            .into_iter()
            .map(|t| t.name)
            .find(|n| n.ends_with("echo"))
            .expect("echo");
        let result = toolset
            .call(
                &echo,
                Some(json!({"message": "hi"})),
                &CallContext::default(),
            )
            .await
            .expect("the call");
        assert_eq!(text(&result), "hi");
        // Expired: renewed with the same credentials, no person.
        auth.expire_access_tokens();
        let mut grant = oauth.grant().await.unwrap();
        grant.refresh_at = Some(0);
        oauth.restore(grant).await;
        let result = toolset
            .call(
                &echo,
                Some(json!({"message": "again"})),
                &CallContext::default(),
            )
            .await
            .expect("the call after renewal");
        assert_eq!(text(&result), "again");
        assert_eq!(auth.token_requests.lock().unwrap().len(), 2);
        toolset.close().await;
    }
}

// DPoP (RFC 9449) against an authorization server and a protected server on
// loopback that verify every proof (signature with the header's key, htm,
// htu, iat, jti, ath, the key the token is bound to, nonces).
mod oauth_dpop {
    use super::*;
    use portcullis_upstream::oauth::{OAuthClient, OAuthError, OAuthSettings};
    use std::sync::Mutex;

    async fn client(server: &Server, dpop: Option<bool>) -> OAuthClient {
        let settings = OAuthSettings {
            client_name: "portcullis tests".into(),
            redirect_uri: "http://127.0.0.1:9/callback".into(),
            dpop,
            ..OAuthSettings::default()
        };
        OAuthClient::new("docs", &server.mcp_url(), None, settings)
            .await
            .expect("an OAuth client")
    }

    async fn open(server: &Server, oauth: &OAuthClient) -> Toolset {
        connect(
            vec![McpServerConfig::streamable_http("docs", server.mcp_url())],
            ConnectOptions::default().with_server_auth("docs", oauth.clone()),
        )
        .await
        .expect("connect")
    }

    /// Logs in from the server's own challenge.
    async fn login(server: &Server, oauth: &OAuthClient) -> Result<(), OAuthError> {
        let refused = open(server, oauth).await;
        assert!(refused.tools().is_empty());
        refused.close().await;
        let (_, challenge) = oauth.take_challenge().expect("a 401 challenge");
        oauth
            .login(Some(&challenge), &oauth.follow_redirects())
            .await
    }

    async fn call(toolset: &Toolset, message: &str) -> Result<String, CallError> {
        let echo = toolset
            .tools()
            .into_iter()
            .map(|t| t.name)
            .find(|n| n.ends_with("echo"))
            .expect("the fixture's echo tool");
        toolset
            .call(
                &echo,
                Some(json!({"message": message})),
                &CallContext::default(),
            )
            .await
            .map(|r| text(&r))
    }

    fn dpop_server(auth: &AuthState) {
        *auth.dpop_algs.lock().unwrap() = Some(vec!["ES256".into()]);
    }

    #[tokio::test]
    async fn oauth_dpop_binds_every_request_and_the_refresh_to_one_key() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        dpop_server(&auth);
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            sessions: true,
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection.clone()).await;
        let oauth = client(&server, None).await;
        login(&server, &oauth).await.expect("login");
        let grant = oauth.grant().await.expect("a grant");
        let key = grant.dpop_key.clone().expect("a DPoP-bound grant");
        // The code was redeemed with a proof by that key; the token is bound.
        let proofs = auth.dpop_token_proofs.lock().unwrap().clone();
        assert_eq!(proofs, [(Some(key.thumbprint().to_owned()), None)]);
        assert_eq!(
            auth.dpop_bound.lock().unwrap().get(&grant.access_token),
            Some(&key.thumbprint().to_owned())
        );

        let toolset = open(&server, &oauth).await;
        assert_eq!(call(&toolset, "hi").await.expect("the call"), "hi");
        // The access token expires: refreshed with the same key (the
        // refresh token is bound to it), and the next call uses the new one.
        auth.expire_access_tokens();
        let mut due = oauth.grant().await.unwrap();
        due.refresh_at = Some(0);
        oauth.restore(due).await;
        assert_eq!(call(&toolset, "again").await.expect("refreshed"), "again");
        let refreshed = oauth.grant().await.unwrap();
        assert_ne!(refreshed.access_token, grant.access_token);
        assert_eq!(
            refreshed
                .dpop_key
                .as_ref()
                .map(|k| k.thumbprint().to_owned()),
            Some(key.thumbprint().to_owned())
        );
        let requests = auth.token_requests.lock().unwrap().clone();
        assert_eq!(requests.last().unwrap()["grant_type"], "refresh_token");
        toolset.close().await;
        // close() ends the session with a DELETE, in the background.
        assert!(
            eventually(WAIT, || protection
                .dpop_seen
                .lock()
                .unwrap()
                .iter()
                .any(|(m, _, _)| m == "DELETE"))
            .await
        );

        // Every request that carried a bound token carried it as DPoP, with
        // a valid proof by the key: the POSTs, the event stream's GET and
        // the session's DELETE.
        let seen = protection.dpop_seen.lock().unwrap().clone();
        for (method, scheme, verified) in &seen {
            assert_eq!(scheme, "DPoP", "{method} presented the token as {scheme}");
            assert_eq!(
                verified.as_deref(),
                Ok(key.thumbprint()),
                "{method}: {verified:?}"
            );
        }
        for method in ["POST", "GET", "DELETE"] {
            assert!(
                seen.iter().any(|(m, _, _)| m == method),
                "no {method} with a proof: {seen:?}"
            );
        }
        // The key never shows.
        let kept = serde_json::to_string(&refreshed).unwrap();
        let private = serde_json::to_value(&key).unwrap();
        let private = private.as_str().unwrap();
        assert!(kept.contains(private), "the grant keeps its key");
        assert!(!format!("{refreshed:?}{oauth:?}{key:?}").contains(private));
    }

    #[tokio::test]
    async fn oauth_dpop_nonces_from_both_servers_are_retried_once_and_kept() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        dpop_server(&auth);
        *auth.dpop_nonce.lock().unwrap() = Some("as-nonce-1".into());
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            dpop_only: true,
            dpop_nonce: Mutex::new(Some("rs-nonce-1".into())),
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection.clone()).await;
        let oauth = client(&server, None).await;
        login(&server, &oauth).await.expect("login");
        // The token request was refused once for want of the nonce, then
        // made again with it.
        let nonces: Vec<_> = auth
            .dpop_token_proofs
            .lock()
            .unwrap()
            .iter()
            .map(|(_, n)| n.clone())
            .collect();
        assert_eq!(nonces, [None, Some("as-nonce-1".into())]);

        let toolset = open(&server, &oauth).await;
        assert_eq!(call(&toolset, "one").await.expect("the call"), "one");
        assert_eq!(call(&toolset, "two").await.expect("the call"), "two");
        // One refusal: every later request carried the nonce kept.
        assert_eq!(protection.dpop_nonce_refusals.load(Ordering::SeqCst), 1);
        // The server moves to a new nonce: one more refusal, one retry.
        *protection.dpop_nonce.lock().unwrap() = Some("rs-nonce-2".into());
        assert_eq!(call(&toolset, "three").await.expect("the call"), "three");
        assert_eq!(protection.dpop_nonce_refusals.load(Ordering::SeqCst), 2);

        // A refresh carries the authorization server's nonce at once.
        auth.expire_access_tokens();
        let mut due = oauth.grant().await.unwrap();
        due.refresh_at = Some(0);
        oauth.restore(due).await;
        assert_eq!(call(&toolset, "four").await.expect("refreshed"), "four");
        let last = auth.dpop_token_proofs.lock().unwrap().last().cloned();
        assert_eq!(last.and_then(|(_, n)| n).as_deref(), Some("as-nonce-1"));
        assert_eq!(auth.dpop_token_proofs.lock().unwrap().len(), 3);
        toolset.close().await;
    }

    #[tokio::test]
    async fn oauth_dpop_refuses_what_the_servers_get_wrong() {
        // A Bearer token answering a proof.
        let (_as, auth) = auth_server(Iss::Correct).await;
        dpop_server(&auth);
        auth.dpop_unbound.store(true, Ordering::SeqCst);
        let server = protected_fixture(auth.clone(), Arc::default()).await;
        let oauth = client(&server, None).await;
        let outcome = login(&server, &oauth).await;
        assert!(
            matches!(&outcome, Err(OAuthError::TokenType { expected, .. }) if expected == "DPoP"),
            "{outcome:?}"
        );
        assert!(oauth.grant().await.is_none());

        // A server that accepts bound tokens only, behind an authorization
        // server that cannot verify ES256 proofs; and the same server with
        // DPoP turned off by the operator.
        let (_as, auth) = auth_server(Iss::Correct).await;
        *auth.dpop_algs.lock().unwrap() = Some(vec!["RS256".into()]);
        let protection = Arc::new(Protection {
            dpop_only: true,
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection).await;
        let oauth = client(&server, None).await;
        let outcome = login(&server, &oauth).await;
        assert!(
            matches!(&outcome, Err(OAuthError::DpopUnsupported { algorithms, .. }) if algorithms == "RS256"),
            "{outcome:?}"
        );
        let off = client(&server, Some(false)).await;
        let outcome = login(&server, &off).await;
        assert!(
            matches!(&outcome, Err(OAuthError::DpopRequired { .. })),
            "{outcome:?}"
        );
        // Neither reached the token endpoint.
        assert!(auth.token_requests.lock().unwrap().is_empty());

        // Turned off at a server that merely offers DPoP: Bearer, no proof.
        let (_as, auth) = auth_server(Iss::Correct).await;
        dpop_server(&auth);
        let protection = Arc::new(Protection::default());
        let server = protected_fixture(auth.clone(), protection.clone()).await;
        let oauth = client(&server, Some(false)).await;
        login(&server, &oauth).await.expect("login");
        assert!(oauth.grant().await.unwrap().dpop_key.is_none());
        assert_eq!(*auth.dpop_token_proofs.lock().unwrap(), [(None, None)]);
        let toolset = open(&server, &oauth).await;
        assert_eq!(call(&toolset, "plain").await.expect("the call"), "plain");
        toolset.close().await;
    }
}

// Unattended JWT bearer grants (RFC 7523): a workload's own JWT, and the
// enterprise-managed flow (ID token -> ID-JAG at the identity provider by
// token exchange, then the ID-JAG at the authorization server). Real HTTP
// on loopback; each server checks every parameter it is sent.
mod oauth_assertion {
    use super::*;
    use portcullis_upstream::oauth::{
        AssertionGrant, AssertionSource, AuthStatus, EnterpriseIdp, IdpEndpoint, OAuthClient,
        OAuthError, OAuthSettings,
    };

    async fn open(server: &Server, oauth: &OAuthClient) -> Toolset {
        connect(
            vec![McpServerConfig::streamable_http("docs", server.mcp_url())],
            ConnectOptions::default().with_server_auth("docs", oauth.clone()),
        )
        .await
        .expect("connect")
    }

    async fn echo(toolset: &Toolset, message: &str) -> Result<String, CallError> {
        let name = toolset
            .tools()
            .into_iter()
            .map(|t| t.name)
            .find(|n| n.ends_with("echo"))
            .expect("the fixture's echo tool");
        toolset
            .call(
                &name,
                Some(json!({"message": message})),
                &CallContext::default(),
            )
            .await
            .map(|r| text(&r))
    }

    /// Makes the grant due for renewal.
    async fn expire(oauth: &OAuthClient) {
        let mut grant = oauth.grant().await.expect("a grant");
        grant.expires_at = Some(0);
        grant.refresh_at = Some(0);
        oauth.restore(grant).await;
    }

    #[tokio::test]
    async fn oauth_workload_identity_grant_calls_and_renews_with_the_rotated_assertion() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        auth.jwt_bearer.store(true, Ordering::SeqCst);
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection.clone()).await;
        let (first, second) = ("eyJh.workload-one.sig", "eyJh.workload-two.sig");
        auth.trusted.lock().unwrap().insert(
            first.into(),
            (Some("workload".into()), Some(server.mcp_url())),
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, format!("{first}\n")).unwrap();
        let settings = OAuthSettings {
            client_id: Some("workload".into()),
            assertion_grant: Some(AssertionGrant::Workload {
                assertion: AssertionSource::File(file.clone()),
            }),
            ..OAuthSettings::default()
        };
        let oauth = OAuthClient::new("docs", &server.mcp_url(), None, settings)
            .await
            .unwrap();
        assert!(oauth.unattended().is_some());
        // No person, no challenge needed: discovery from the well-known
        // locations, then the grant.
        oauth.obtain().await.expect("the JWT bearer grant");
        assert!(auth.authorizations.lock().unwrap().is_empty());
        let request = auth.token_requests.lock().unwrap()[0].clone();
        assert_eq!(
            request["grant_type"],
            "urn:ietf:params:oauth:grant-type:jwt-bearer"
        );
        assert_eq!(request["assertion"], first);
        assert_eq!(request["resource"], server.mcp_url());
        assert_eq!(request["client_id"], "workload");
        assert!(!request.contains_key("client_secret"));
        assert_eq!(auth.token_auth_headers.lock().unwrap()[0], None);
        let toolset = open(&server, &oauth).await;
        assert_eq!(echo(&toolset, "hi").await.expect("the call"), "hi");

        // The platform rotates the token and the old one stops being
        // accepted: renewal reads the file again.
        std::fs::write(&file, second).unwrap();
        auth.trusted.lock().unwrap().clear();
        auth.trusted
            .lock()
            .unwrap()
            .insert(second.into(), (Some("workload".into()), None));
        auth.expire_access_tokens();
        expire(&oauth).await;
        assert_eq!(echo(&toolset, "again").await.expect("renewed"), "again");
        let renewal = auth.token_requests.lock().unwrap()[1].clone();
        assert_eq!(renewal["assertion"], second);
        assert_eq!(renewal["resource"], server.mcp_url());
        let token = oauth.grant().await.unwrap().access_token;
        assert_eq!(protection.tokens_seen.lock().unwrap().last(), Some(&token));
        toolset.close().await;
    }

    #[tokio::test]
    async fn oauth_enterprise_managed_grant_exchanges_the_id_token_for_an_id_jag() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        auth.jwt_bearer.store(true, Ordering::SeqCst);
        *auth.bearer_client.lock().unwrap() = Some(("gateway".into(), "gw-secret".into()));
        let (_idp, idp) = idp_server().await;
        *idp.audience.lock().unwrap() = Some(auth.clone());
        *idp.jag_client.lock().unwrap() = "gateway".into();
        let id_token = "eyJh.id-token-of-ada.sig";
        idp.id_tokens.lock().unwrap().push(id_token.into());
        let protection = Arc::new(Protection {
            scope: "mcp:read".into(),
            ..Protection::default()
        });
        let server = protected_fixture(auth.clone(), protection).await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("id_token");
        std::fs::write(&file, id_token).unwrap();
        let issuer = idp.issuer.lock().unwrap().clone();
        let settings = OAuthSettings {
            client_id: Some("gateway".into()),
            client_secret: Some("gw-secret".into()),
            assertion_grant: Some(AssertionGrant::Enterprise(EnterpriseIdp {
                endpoint: IdpEndpoint::Issuer(issuer.clone()),
                client_id: "idp-client".into(),
                client_secret: Some("idp-secret".into()),
                id_token: AssertionSource::File(file),
            })),
            ..OAuthSettings::default()
        };
        let oauth = OAuthClient::new("docs", &server.mcp_url(), None, settings)
            .await
            .unwrap();
        // The first connection's challenge says where, and for what scope.
        let refused = open(&server, &oauth).await;
        let (_, challenge) = oauth.take_challenge().expect("a challenge");
        refused.close().await;
        oauth
            .login(Some(&challenge), &oauth.follow_redirects())
            .await
            .expect("the enterprise-managed grant");
        assert!(auth.authorizations.lock().unwrap().is_empty());

        // At the identity provider: token exchange for an ID-JAG, for the
        // authorization server and the MCP server, authenticated.
        let (exchange, basic) = idp.requests.lock().unwrap()[0].clone();
        assert!(basic.is_some());
        assert_eq!(
            exchange["grant_type"],
            "urn:ietf:params:oauth:grant-type:token-exchange"
        );
        assert_eq!(
            exchange["requested_token_type"],
            "urn:ietf:params:oauth:token-type:id-jag"
        );
        assert_eq!(exchange["subject_token"], id_token);
        assert_eq!(
            exchange["subject_token_type"],
            "urn:ietf:params:oauth:token-type:id_token"
        );
        assert_eq!(exchange["audience"], *auth.issuer.lock().unwrap());
        assert_eq!(exchange["resource"], server.mcp_url());
        assert_eq!(exchange["scope"], "mcp:read");
        assert!(!exchange.contains_key("client_secret"));
        // At the authorization server: the ID-JAG as a JWT bearer grant,
        // the client authenticated with HTTP Basic.
        let jag = idp.issued.lock().unwrap()[0].clone();
        let request = auth.token_requests.lock().unwrap()[0].clone();
        assert_eq!(
            request["grant_type"],
            "urn:ietf:params:oauth:grant-type:jwt-bearer"
        );
        assert_eq!(request["assertion"], jag);
        assert_eq!(request["resource"], server.mcp_url());
        assert_eq!(request["scope"], "mcp:read");
        assert!(auth.token_auth_headers.lock().unwrap()[0].is_some());

        let toolset = open(&server, &oauth).await;
        assert_eq!(echo(&toolset, "hi").await.expect("the call"), "hi");
        // Renewal runs the whole flow again: a new ID-JAG.
        auth.expire_access_tokens();
        expire(&oauth).await;
        assert_eq!(echo(&toolset, "again").await.expect("renewed"), "again");
        assert_eq!(idp.issued.lock().unwrap().len(), 2);
        toolset.close().await;
    }

    /// An authorization server that issues DPoP-bound tokens only: the
    /// unattended grants bind theirs as a person's login does — when its
    /// metadata lists ES256, or when the upstream's `dpop` setting says
    /// so — with a proof at the token endpoint, the token presented as
    /// DPoP, and the renewal signed by the same key. Without either, the grant is refused, not sent as
    /// Bearer.
    #[tokio::test]
    async fn oauth_unattended_grants_are_dpop_bound_for_a_server_that_requires_it() {
        for (listed, forced, enterprise) in [
            (true, None, false),
            (false, Some(true), false),
            (true, None, true),
        ] {
            let (_as, auth) = auth_server(Iss::Correct).await;
            auth.jwt_bearer.store(true, Ordering::SeqCst);
            auth.dpop_required.store(true, Ordering::SeqCst);
            if listed {
                *auth.dpop_algs.lock().unwrap() = Some(vec!["ES256".into()]);
            }
            let protection = Arc::new(Protection {
                scope: "mcp:read".into(),
                dpop_only: true,
                ..Protection::default()
            });
            let server = protected_fixture(auth.clone(), protection.clone()).await;
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("token");
            let (_idp, idp) = idp_server().await;
            let assertion_grant = if enterprise {
                *idp.audience.lock().unwrap() = Some(auth.clone());
                *idp.jag_client.lock().unwrap() = "workload".into();
                idp.id_tokens
                    .lock()
                    .unwrap()
                    .push("eyJh.id-token.sig".into());
                std::fs::write(&file, "eyJh.id-token.sig").unwrap();
                AssertionGrant::Enterprise(EnterpriseIdp {
                    endpoint: IdpEndpoint::Issuer(idp.issuer.lock().unwrap().clone()),
                    client_id: "idp-client".into(),
                    client_secret: Some("idp-secret".into()),
                    id_token: AssertionSource::File(file.clone()),
                })
            } else {
                auth.trusted.lock().unwrap().insert(
                    "eyJh.workload.sig".into(),
                    (Some("workload".into()), Some(server.mcp_url())),
                );
                std::fs::write(&file, "eyJh.workload.sig").unwrap();
                AssertionGrant::Workload {
                    assertion: AssertionSource::File(file.clone()),
                }
            };
            let case = format!("listed {listed}, dpop {forced:?}, enterprise {enterprise}");
            let settings = OAuthSettings {
                client_id: Some("workload".into()),
                assertion_grant: Some(assertion_grant.clone()),
                dpop: forced,
                ..OAuthSettings::default()
            };
            let oauth = OAuthClient::new("docs", &server.mcp_url(), None, settings)
                .await
                .unwrap();
            oauth
                .obtain()
                .await
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            let grant = oauth.grant().await.expect("a grant");
            let key = grant.dpop_key.clone().expect("a DPoP-bound grant");
            let thumbprint = key.thumbprint().to_owned();
            assert_eq!(
                auth.dpop_token_proofs.lock().unwrap().clone(),
                [(Some(thumbprint.clone()), None)],
                "{case}"
            );
            assert_eq!(
                auth.dpop_bound.lock().unwrap().get(&grant.access_token),
                Some(&thumbprint),
                "{case}"
            );
            let toolset = open(&server, &oauth).await;
            assert_eq!(echo(&toolset, "hi").await.expect("the call"), "hi");
            // Renewal runs the grant again, with the same key.
            auth.expire_access_tokens();
            expire(&oauth).await;
            assert_eq!(echo(&toolset, "again").await.expect("renewed"), "again");
            let renewed = oauth.grant().await.unwrap();
            assert_ne!(renewed.access_token, grant.access_token, "{case}");
            let proofs = auth.dpop_token_proofs.lock().unwrap().clone();
            assert_eq!(proofs.len(), 2, "{case}");
            assert_eq!(proofs[1].0.as_ref(), Some(&thumbprint), "{case}");
            // Every request to the upstream carried the token as DPoP, with
            // a proof by that key.
            let seen = protection.dpop_seen.lock().unwrap().clone();
            assert!(!seen.is_empty(), "{case}");
            for (method, scheme, verified) in &seen {
                assert_eq!(scheme, "DPoP", "{case}: {method}");
                assert_eq!(verified.as_ref(), Ok(&thumbprint), "{case}: {method}");
            }
            toolset.close().await;

            // Neither listed nor asked for: the grant sends no proof and the
            // server refuses it.
            if !listed {
                let settings = OAuthSettings {
                    client_id: Some("workload".into()),
                    assertion_grant: Some(assertion_grant),
                    ..OAuthSettings::default()
                };
                let oauth = OAuthClient::new("docs", &server.mcp_url(), None, settings)
                    .await
                    .unwrap();
                let refused = oauth.obtain().await.expect_err("refused without a proof");
                assert!(
                    refused.to_string().contains("invalid_dpop_proof"),
                    "{refused}"
                );
            }
        }
    }

    #[tokio::test]
    async fn oauth_a_refused_exchange_needs_a_new_grant_and_never_shows_the_id_token() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        auth.jwt_bearer.store(true, Ordering::SeqCst);
        let (_idp, idp) = idp_server().await;
        *idp.audience.lock().unwrap() = Some(auth.clone());
        let server = protected_fixture(auth.clone(), Arc::default()).await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("id_token");
        // Not one the provider accepts (expired, say); its refusal echoes it.
        let id_token = "eyJh.stale-id-token-s3cret.sig";
        std::fs::write(&file, id_token).unwrap();
        let token_endpoint = format!("{}/oauth2/token", idp.issuer.lock().unwrap());
        let settings = OAuthSettings {
            client_id: Some("gateway".into()),
            assertion_grant: Some(AssertionGrant::Enterprise(EnterpriseIdp {
                endpoint: IdpEndpoint::TokenEndpoint(token_endpoint),
                client_id: "idp-client".into(),
                client_secret: Some("idp-secret".into()),
                id_token: AssertionSource::File(file),
            })),
            ..OAuthSettings::default()
        };
        let oauth = OAuthClient::new("docs", &server.mcp_url(), None, settings)
            .await
            .unwrap();
        let error = oauth.obtain().await.expect_err("refused");
        assert!(matches!(error, OAuthError::Token { .. }), "{error:?}");
        let said = error.to_string();
        assert!(
            said.contains("the identity provider refused the token exchange: invalid_grant"),
            "{said}"
        );
        assert!(!said.contains("s3cret"), "{said}");
        assert_eq!(idp.requests.lock().unwrap().len(), 1);
        // Nothing reached the authorization server.
        assert!(auth.token_requests.lock().unwrap().is_empty());
        // Needs a new grant (not an outage), and says why.
        assert_eq!(oauth.status().await, AuthStatus::NeedsLogin);
        let needed = oauth.access_token().await.expect_err("no token");
        assert!(matches!(needed, OAuthError::LoginRequired { .. }));
        assert!(needed.to_string().contains("invalid_grant"), "{needed}");
        assert!(!needed.to_string().contains("s3cret"), "{needed}");
        assert!(!format!("{oauth:?}{needed:?}").contains("s3cret"));
    }

    /// A server of machine grants only need not list PKCE (it guards the
    /// authorization code, which it does not offer); a server offering the
    /// code flow without S256 is still refused.
    #[tokio::test]
    async fn oauth_pkce_is_required_of_the_code_flow_only() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        auth.jwt_bearer.store(true, Ordering::SeqCst);
        auth.no_pkce.store(true, Ordering::SeqCst);
        let server = protected_fixture(auth.clone(), Arc::default()).await;
        let assertion = "eyJh.workload.sig";
        auth.trusted
            .lock()
            .unwrap()
            .insert(assertion.into(), (None, None));
        let settings = OAuthSettings {
            assertion_grant: Some(AssertionGrant::Workload {
                assertion: AssertionSource::Value(assertion.into()),
            }),
            ..OAuthSettings::default()
        };
        let oauth = OAuthClient::new("docs", &server.mcp_url(), None, settings)
            .await
            .unwrap();
        oauth.obtain().await.expect("no PKCE needed");

        auth.jwt_bearer.store(false, Ordering::SeqCst);
        let person = OAuthClient::new(
            "docs",
            &server.mcp_url(),
            None,
            OAuthSettings {
                redirect_uri: "http://127.0.0.1:9/callback".into(),
                ..OAuthSettings::default()
            },
        )
        .await
        .unwrap();
        let refused = person.login(None, &person.follow_redirects()).await;
        assert!(
            matches!(refused, Err(OAuthError::PkceUnsupported { .. })),
            "{refused:?}"
        );
        assert!(auth.authorizations.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn oauth_a_refused_workload_assertion_is_not_echoed() {
        let (_as, auth) = auth_server(Iss::Correct).await;
        auth.jwt_bearer.store(true, Ordering::SeqCst);
        let server = protected_fixture(auth.clone(), Arc::default()).await;
        let settings = OAuthSettings {
            assertion_grant: Some(AssertionGrant::Workload {
                assertion: AssertionSource::Value("eyJh.untrusted-s3cret.sig".into()),
            }),
            ..OAuthSettings::default()
        };
        let oauth = OAuthClient::new("docs", &server.mcp_url(), None, settings)
            .await
            .unwrap();
        let said = oauth.obtain().await.expect_err("refused").to_string();
        assert!(said.contains("invalid_grant"), "{said}");
        assert!(!said.contains("s3cret"), "{said}");
        // No client configured: no client authentication sent at all.
        let request = auth.token_requests.lock().unwrap()[0].clone();
        assert!(!request.contains_key("client_id"), "{request:?}");
        let refusal = oauth.refusal().await.expect("the reason kept");
        assert!(!refusal.contains("s3cret"), "{refusal}");
    }
}
