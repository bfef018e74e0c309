//! Faithful proxying beyond tools, end to end through the real `portcullis`
//! binary: `portcullis serve` in front of the in-repo conformance fixture
//! (`portcullis-conformance-fixture --stdio`, a child process), reached by
//! an rmcp client over HTTP on loopback.
//!
//! * One upstream: resources, templates, prompts and completions pass with
//!   their own names and URIs; `logging/setLevel` is accepted and a log
//!   message the upstream sends during a call reaches the client.
//! * Two upstreams (the fixture twice): prompts are `server__prompt`, URIs
//!   `portcullis://server/<uri>`, and both route back to their server.
//!
//! The fixture binary is built with the workspace (`cargo build
//! --workspace`, or any workspace test run); when it is missing the tests
//! say so and pass without running, except under `CI=true`, where that is
//! a failure.

#![allow(deprecated)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::model::{
    ArgumentInfo, CallToolRequestParams, ClientCapabilities, ClientConfig, CompleteRequestParams,
    GetPromptRequestParams, Implementation, LoggingLevel, LoggingMessageNotificationParam,
    ReadResourceRequestParams, Reference, ResourceContents, SetLevelRequestParams,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::mpsc;

/// A config with one stdio upstream per name, each the fixture.
fn config(dir: &Path, fixture: &Path, names: &[&str]) -> PathBuf {
    let mut text = String::from("[gateway]\nstore = \"memory\"\n");
    for name in names {
        text.push_str(&format!(
            "\n[upstreams.{name}]\ntype = \"stdio\"\ncommand = {:?}\nargs = [\"--stdio\"]\ntimeout_ms = 30000\n",
            fixture.display().to_string()
        ));
    }
    common::write_config(dir, &text)
}

/// A client that hands every log message it receives to the test.
#[derive(Clone)]
struct Listener {
    logs: mpsc::UnboundedSender<LoggingMessageNotificationParam>,
}

impl ClientHandler for Listener {
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.logs.send(params);
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("proxy-test", "1"),
        )
    }
}

async fn client(
    url: &str,
) -> (
    RunningService<RoleClient, Listener>,
    mpsc::UnboundedReceiver<LoggingMessageNotificationParam>,
) {
    let (logs, received) = mpsc::unbounded_channel();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_owned());
    let client = Listener { logs }
        .serve(transport)
        .await
        .expect("an MCP client connects");
    (client, received)
}

fn text(contents: &ResourceContents) -> &str {
    match contents {
        ResourceContents::TextResourceContents { text, .. } => text,
        _ => "",
    }
}

/// `text` in the frame of untrusted output from `source`.
fn framed(source: &str, text: &str) -> String {
    use portcullis_catalog::framing::{UNTRUSTED_NOTICE, UNTRUSTED_TAG};
    format!("<{UNTRUSTED_TAG} tool=\"{source}\">\n{text}\n</{UNTRUSTED_TAG}>\n{UNTRUSTED_NOTICE}")
}

fn uri(contents: &ResourceContents) -> &str {
    match contents {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } => uri,
        _ => "",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upstream_passes_resources_prompts_completions_and_logs_unchanged() {
    let Some(fixture) = common::conformance_fixture() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&config(dir.path(), &fixture, &["fixture"]));
    let (client, mut logs) = client(&served.url).await;

    let info = client.peer_info().expect("initialized");
    let caps = &info.capabilities;
    assert!(
        caps.resources.as_ref().and_then(|r| r.subscribe) == Some(true),
        "{caps:?}"
    );
    assert!(caps.prompts.is_some() && caps.completions.is_some() && caps.logging.is_some());

    let resources = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "test://static-binary",
            "test://static-text",
            "test://watched-resource"
        ]
    );
    let read = client
        .read_resource(ReadResourceRequestParams::new("test://static-text"))
        .await
        .expect("resources/read");
    // Its text is untrusted content, framed like a tool's output.
    assert_eq!(
        text(&read.contents[0]),
        framed(
            "test://static-text",
            "This is the content of the static text resource."
        )
    );
    let templates = client
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list");
    assert_eq!(templates[0].uri_template, "test://template/{id}/data");
    let read = client
        .read_resource(ReadResourceRequestParams::new("test://template/42/data"))
        .await
        .expect("a template's expansion is read");
    assert!(text(&read.contents[0]).contains("Data for ID: 42"));
    // A URI nobody serves gets the server's own not-found error.
    let missing = client
        .read_resource(ReadResourceRequestParams::new("test://nonexistent"))
        .await
        .expect_err("not found");
    assert!(
        missing.to_string().contains("test://nonexistent"),
        "{missing}"
    );

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    assert!(
        prompts.iter().any(|p| p.name == "test_simple_prompt"),
        "{prompts:?}"
    );
    let args = json!({"arg1": "testValue1", "arg2": "testValue2"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let got = client
        .get_prompt(GetPromptRequestParams::new("test_prompt_with_arguments").with_arguments(args))
        .await
        .expect("prompts/get");
    let message = serde_json::to_value(&got.messages[0]).expect("json");
    assert_eq!(
        message["content"]["text"],
        "Prompt with arguments: arg1='testValue1', arg2='testValue2'"
    );
    let completion = client
        .complete(CompleteRequestParams::new(
            Reference::for_prompt("test_prompt_with_arguments"),
            ArgumentInfo::new("arg1", "test"),
        ))
        .await
        .expect("completion/complete");
    assert!(completion.completion.values.is_empty());

    client
        .subscribe(rmcp::model::SubscribeRequestParams::new(
            "test://watched-resource",
        ))
        .await
        .expect("resources/subscribe");
    client
        .unsubscribe(rmcp::model::UnsubscribeRequestParams::new(
            "test://watched-resource",
        ))
        .await
        .expect("resources/unsubscribe");

    client
        .set_level(SetLevelRequestParams::new(LoggingLevel::Debug))
        .await
        .expect("logging/setLevel");
    client
        .call_tool(CallToolRequestParams::new("test_tool_with_logging"))
        .await
        .expect("the tool runs");
    // A bound, not a synchronisation: the messages precede the result.
    let first = tokio::time::timeout(Duration::from_secs(20), logs.recv())
        .await
        .expect("a log message arrives")
        .expect("the client is still listening");
    assert_eq!(first.data, json!("Tool execution started"));

    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_upstreams_are_qualified_and_route_back() {
    let Some(fixture) = common::conformance_fixture() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&config(dir.path(), &fixture, &["a", "b"]));
    let (client, _logs) = client(&served.url).await;

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert!(names.contains(&"a__test_simple_prompt"), "{names:?}");
    assert!(
        names.contains(&"b__test_prompt_with_arguments"),
        "{names:?}"
    );
    assert!(!names.contains(&"test_simple_prompt"), "{names:?}");

    let resources = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert!(
        uris.contains(&"portcullis://a/test://static-text"),
        "{uris:?}"
    );
    assert!(
        uris.contains(&"portcullis://b/test://static-text"),
        "{uris:?}"
    );
    assert_eq!(uris.len(), 6);

    let read = client
        .read_resource(ReadResourceRequestParams::new(
            "portcullis://b/test://static-text",
        ))
        .await
        .expect("a wrapped URI is read from its server");
    assert_eq!(uri(&read.contents[0]), "portcullis://b/test://static-text");
    assert_eq!(
        text(&read.contents[0]),
        framed(
            "portcullis://b/test://static-text",
            "This is the content of the static text resource."
        )
    );
    let templates = client
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list");
    let wrapped: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    assert_eq!(
        wrapped,
        [
            "portcullis://a/test://template/{id}/data",
            "portcullis://b/test://template/{id}/data"
        ]
    );
    let read = client
        .read_resource(ReadResourceRequestParams::new(
            "portcullis://a/test://template/7/data",
        ))
        .await
        .expect("an expanded wrapped template is read");
    assert!(text(&read.contents[0]).contains("Data for ID: 7"));
    assert_eq!(
        uri(&read.contents[0]),
        "portcullis://a/test://template/7/data"
    );

    let args = json!({"arg1": "x", "arg2": "y"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let got = client
        .get_prompt(
            GetPromptRequestParams::new("b__test_prompt_with_arguments").with_arguments(args),
        )
        .await
        .expect("a qualified prompt routes back");
    let message = serde_json::to_value(&got.messages[0]).expect("json");
    assert_eq!(
        message["content"]["text"],
        "Prompt with arguments: arg1='x', arg2='y'"
    );
    // An embedded resource in a prompt is rewritten like any URI.
    let args = json!({"resourceUri": "test://example-resource"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let got = client
        .get_prompt(
            GetPromptRequestParams::new("a__test_prompt_with_embedded_resource")
                .with_arguments(args),
        )
        .await
        .expect("prompts/get");
    let embedded = serde_json::to_value(&got.messages[0]).expect("json");
    assert_eq!(
        embedded["content"]["resource"]["uri"],
        "portcullis://a/test://example-resource"
    );

    let unknown = client
        .get_prompt(GetPromptRequestParams::new("test_simple_prompt"))
        .await
        .expect_err("an unqualified name is unknown with two sources");
    assert!(unknown.to_string().contains("unknown prompt"), "{unknown}");
    let completion = client
        .complete(CompleteRequestParams::new(
            Reference::for_prompt("a__test_prompt_with_arguments"),
            ArgumentInfo::new("arg1", "t"),
        ))
        .await
        .expect("a qualified completion routes back");
    assert!(completion.completion.values.is_empty());

    let _ = client.cancel().await;
}
