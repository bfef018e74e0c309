//! The passthrough (resources, templates, prompts, completions, logging,
//! subscriptions) against real servers, each a child process over stdio:
//!
//! * the in-repo conformance fixture (`portcullis-conformance-fixture
//!   --stdio`, built with the workspace: `cargo build --workspace` or any
//!   workspace test run), which an Auto client reaches at 2026-07-28 — so
//!   this exercises the modern path (no `logging/setLevel`, subscriptions
//!   through `subscriptions/listen`);
//! * `@modelcontextprotocol/server-everything` from `.peers/` (2025-era:
//!   `logging/setLevel`, `resources/subscribe`, log messages and
//!   `resources/updated` pushed by the server).
//!
//! A missing binary or `.peers/` folder is reported and the test passes
//! without running, as the interop tests do (CI builds and installs both).
// Every server here is a child process over stdio.
#![cfg(feature = "stdio")]
#![allow(deprecated)]

use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use portcullis_upstream::{
    CallContext, ConnectOptions, LogSink, McpServerConfig, Notice, Passthrough, PassthroughError,
    Toolset, connect,
};
use rmcp::model::{
    ArgumentInfo, CompleteRequestParams, GetPromptRequestParams, GetPromptResponse, LoggingLevel,
    LoggingMessageNotificationParam, ReadResourceRequestParams, ReadResourceResponse, Reference,
    ResourceContents,
};
use serde_json::json;

/// The fixture binary next to this test's own directory (`target/<profile>`).
fn fixture_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join(format!(
        "portcullis-conformance-fixture{}",
        std::env::consts::EXE_SUFFIX
    ));
    if path.is_file() {
        Some(path)
    } else {
        println!(
            "SKIPPED: {} not built; run `cargo build -p portcullis-server --bins`",
            path.display()
        );
        None
    }
}

fn everything() -> Option<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../.peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !path.is_file() {
        println!("SKIPPED: {} not found; run .ci/peers.sh", path.display());
        return None;
    }
    Some(path.canonicalize().ok()?.display().to_string())
}

async fn connected(server: McpServerConfig) -> (Toolset, Passthrough) {
    let name = server.name().to_owned();
    let toolset = connect(vec![server], ConnectOptions::default())
        .await
        .expect("wiring is fine");
    assert!(
        toolset.diagnostics().is_empty(),
        "{name}: {:?}",
        toolset.diagnostics()
    );
    let passthrough = toolset.passthrough();
    assert_eq!(passthrough.servers(), [name]);
    (toolset, passthrough)
}

fn text_of(contents: &ResourceContents) -> String {
    match contents {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        ResourceContents::BlobResourceContents { blob, .. } => blob.clone(),
        _ => String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fixture_serves_every_kind_through_the_modern_path() {
    let Some(binary) = fixture_binary() else {
        return;
    };
    let (toolset, upstream) = connected(McpServerConfig::stdio(
        "fixture",
        binary.display().to_string(),
        ["--stdio"],
    ))
    .await;
    assert!(
        !upstream.has_initialize("fixture"),
        "the fixture speaks 2026-07-28"
    );

    let resources = upstream
        .list_resources("fixture")
        .await
        .expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "test://static-text",
            "test://static-binary",
            "test://watched-resource"
        ]
    );
    let templates = upstream
        .list_resource_templates("fixture")
        .await
        .expect("resources/templates/list");
    assert_eq!(templates[0].uri_template, "test://template/{id}/data");

    let read = upstream
        .read_resource(
            "fixture",
            ReadResourceRequestParams::new("test://template/123/data"),
        )
        .await
        .expect("resources/read");
    let ReadResourceResponse::Complete(read) = read else {
        panic!("a complete read");
    };
    assert!(text_of(&read.contents[0]).contains("Data for ID: 123"));

    // A server's own JSON-RPC error comes back whole: code and data.
    let missing = upstream
        .read_resource("fixture", ReadResourceRequestParams::new("test://nope"))
        .await
        .expect_err("not found");
    match missing {
        PassthroughError::Protocol { data, message, .. } => {
            assert!(message.contains("test://nope"), "{message}");
            assert_eq!(data.as_deref(), Some(&json!({"uri": "test://nope"})));
        }
        other => panic!("{other:?}"),
    }

    let prompts = upstream
        .list_prompts("fixture")
        .await
        .expect("prompts/list");
    assert!(
        prompts
            .iter()
            .any(|p| p.name == "test_prompt_with_arguments")
    );
    let args = json!({"arg1": "one", "arg2": "two"})
        .as_object()
        .cloned()
        .unwrap();
    let got = upstream
        .get_prompt(
            "fixture",
            GetPromptRequestParams::new("test_prompt_with_arguments").with_arguments(args),
        )
        .await
        .expect("prompts/get");
    let GetPromptResponse::Complete(got) = got else {
        panic!("a complete prompt");
    };
    let message = serde_json::to_value(&got.messages[0]).unwrap();
    assert_eq!(
        message["content"]["text"],
        "Prompt with arguments: arg1='one', arg2='two'"
    );

    let completion = upstream
        .complete(
            "fixture",
            CompleteRequestParams::new(
                Reference::for_prompt("test_prompt_with_arguments"),
                ArgumentInfo::new("arg1", "te"),
            ),
        )
        .await
        .expect("completion/complete");
    assert!(completion.completion.values.is_empty());

    // 2026-07-28 has no logging/setLevel: refused here, never sent.
    assert!(matches!(
        upstream.set_level("fixture", LoggingLevel::Debug).await,
        Err(PassthroughError::Unsupported { .. })
    ));
    // A subscription is a `subscriptions/listen` for the URI.
    upstream
        .subscribe("fixture", "test://watched-resource")
        .await
        .expect("subscribe via listen");
    upstream
        .unsubscribe("fixture", "test://watched-resource")
        .await
        .expect("unsubscribe");
    assert!(matches!(
        upstream.list_prompts("nope").await,
        Err(PassthroughError::UnknownServer { .. })
    ));
    toolset.close().await;
    assert!(matches!(
        upstream.list_prompts("fixture").await,
        Err(PassthroughError::Unavailable { .. })
    ));
}

/// Waits for the first notice `wanted` accepts.
async fn first<T>(
    notices: &mut tokio::sync::mpsc::UnboundedReceiver<portcullis_upstream::ServerNotice>,
    wanted: impl Fn(&Notice) -> Option<T>,
) -> T {
    let wait = async {
        while let Some(notice) = notices.recv().await {
            assert_eq!(notice.server, "everything");
            if let Some(found) = wanted(&notice.notice) {
                return found;
            }
        }
        panic!("the notices ended");
    };
    // A bound, not a synchronisation: the server sends at once when asked.
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .expect("the notice arrives")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_logs_and_updates_through_the_handshake_path() {
    let Some(script) = everything() else {
        return;
    };
    let (toolset, upstream) = connected(McpServerConfig::stdio(
        "everything",
        "node",
        [script.as_str(), "stdio"],
    ))
    .await;
    assert!(upstream.has_initialize("everything"));
    let mut notices = upstream.notices();

    // Log messages at the level asked for.
    upstream
        .set_level("everything", LoggingLevel::Debug)
        .await
        .expect("logging/setLevel");
    toolset
        .call(
            "toggle-simulated-logging",
            Some(json!({})),
            &CallContext::default(),
        )
        .await
        .expect("the tool runs");
    let logged = first(&mut notices, |n| match n {
        Notice::Log(param) => Some(param.data.clone()),
        _ => None,
    })
    .await;
    assert!(
        logged.as_str().unwrap_or_default().contains("message"),
        "{logged}"
    );
    toolset
        .call(
            "toggle-simulated-logging",
            Some(json!({})),
            &CallContext::default(),
        )
        .await
        .expect("logging off again");

    // Resources, templates, a read, a subscription and its update.
    let resources = upstream
        .list_resources("everything")
        .await
        .expect("resources/list");
    assert!(!resources.is_empty());
    let read = upstream
        .read_resource(
            "everything",
            ReadResourceRequestParams::new(resources[0].uri.clone()),
        )
        .await
        .expect("resources/read");
    assert!(matches!(read, ReadResourceResponse::Complete(r) if !r.contents.is_empty()));
    let templates = upstream
        .list_resource_templates("everything")
        .await
        .expect("resources/templates/list");
    assert!(!templates.is_empty());
    let uri = "demo://resource/dynamic/text/1";
    upstream
        .subscribe("everything", uri)
        .await
        .expect("resources/subscribe");
    toolset
        .call(
            "toggle-subscriber-updates",
            Some(json!({})),
            &CallContext::default(),
        )
        .await
        .expect("the tool runs");
    let updated = first(&mut notices, |n| match n {
        Notice::ResourceUpdated(uri) => Some(uri.clone()),
        _ => None,
    })
    .await;
    assert_eq!(updated, uri);
    upstream
        .unsubscribe("everything", uri)
        .await
        .expect("resources/unsubscribe");

    // Prompts and a completion that depends on the argument's value.
    let prompts = upstream
        .list_prompts("everything")
        .await
        .expect("prompts/list");
    assert!(prompts.iter().any(|p| p.name == "simple-prompt"));
    let completion = upstream
        .complete(
            "everything",
            CompleteRequestParams::new(
                Reference::for_prompt("completable-prompt"),
                ArgumentInfo::new("department", "En"),
            ),
        )
        .await
        .expect("completion/complete");
    assert_eq!(completion.completion.values, ["Engineering"]);
    toolset.close().await;
}

/// Records what a gateway would hand its clients, as it is handed over.
#[derive(Default)]
struct Recorded(std::sync::Mutex<Vec<(String, serde_json::Value)>>);

impl Recorded {
    fn take(&self) -> Vec<(String, serde_json::Value)> {
        std::mem::take(&mut *self.0.lock().expect("not poisoned"))
    }
}

impl LogSink for Recorded {
    fn log(&self, server: &str, message: LoggingMessageNotificationParam) -> BoxFuture<'_, ()> {
        if let Ok(mut seen) = self.0.lock() {
            seen.push((server.to_owned(), message.data));
        }
        Box::pin(async {})
    }
}

/// The fixture's `test_tool_with_logging` logs three messages and returns
/// right after the last: each must be in the sink when the call returns,
/// since the transport hands a log message over before it reads the
/// result that followed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_messages_are_handed_over_before_the_call_returns() {
    let Some(binary) = fixture_binary() else {
        return;
    };
    let (toolset, upstream) = connected(McpServerConfig::stdio(
        "fixture",
        binary.display().to_string(),
        ["--stdio", "--legacy"],
    ))
    .await;
    let sink = std::sync::Arc::new(Recorded::default());
    upstream.route_logs(sink.clone());
    let expected: Vec<(String, serde_json::Value)> = [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    .into_iter()
    .map(|m| ("fixture".to_owned(), json!(m)))
    .collect();
    for round in 0..20 {
        let result = toolset
            .call(
                "test_tool_with_logging",
                Some(json!({})),
                &CallContext::default(),
            )
            .await
            .expect("the tool answers");
        assert!(!result.is_error, "round {round}: {result:?}");
        assert_eq!(sink.take(), expected, "round {round}");
    }
    toolset.close().await;
}
