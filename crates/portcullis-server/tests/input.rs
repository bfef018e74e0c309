//! Mid-call input through real MCP sessions: a handler asks the client of
//! its call through [`CallContext::input`], and a stateless 2026-07-28 rmcp
//! client (its own `input_required` driver) answers each question as a
//! round of the same call. The handler runs once however many rounds it
//! takes, and a handler that keeps asking is refused after
//! [`MAX_INPUT_ROUNDS`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_server::input::MAX_INPUT_ROUNDS;
use portcullis_server::{CallContext, HttpOptions, ToolError, ToolServer, serve_http};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationCapability, Implementation, InputRequest,
    ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient};
use serde_json::json;

// Only a guard against a hung test, never an assertion about speed.
const HANG: Duration = Duration::from_secs(60);

/// The person: answers every question with its number.
#[derive(Clone, Default)]
struct Person {
    asked: Arc<AtomicUsize>,
}

impl ClientHandler for Person {
    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let n = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"n": n})))
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(ElicitationCapability::new());
        ClientConfig::new(capabilities, Implementation::new("input-test", "1"))
    }
}

fn question() -> InputRequest {
    let params: ElicitRequestParams = serde_json::from_value(json!({
        "mode": "form", "message": "A number?", "requestedSchema": {
            "type": "object", "properties": {"n": {"type": "integer"}}}
    }))
    .expect("a form");
    InputRequest::Elicitation(ElicitRequest::new(params))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_asks_until_refused_and_runs_once() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let tools = ToolServer::builder()
        .tool(
            Tool::new("interview").with_annotations(ToolAnnotations::read_only(true)),
            move |_: serde_json::Value, ctx: CallContext| {
                let counted = counted.clone();
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let Some(input) = ctx.input() else {
                        return Err(ToolError::msg("ERR_NO_INPUT: no input channel"));
                    };
                    let mut sum = 0;
                    for _ in 0..MAX_INPUT_ROUNDS + 4 {
                        match input.request(question()).await {
                            Ok(answer) => sum += answer["content"]["n"].as_i64().unwrap_or(0),
                            Err(error) => {
                                return Ok::<_, ToolError>(ToolResult::text(format!(
                                    "sum {sum}; then: {}",
                                    error.message
                                )));
                            }
                        }
                    }
                    Ok(ToolResult::text(format!("sum {sum}; never refused")))
                }
            },
        )
        .build()
        .expect("tools");
    let server = serve_http(tools, HttpOptions::default())
        .await
        .expect("listens");
    let person = Person::default();
    let client = person
        .clone()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(server.url()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a 2026-07-28 client");
    let result = tokio::time::timeout(
        HANG,
        client.call_tool_with_mrtr_max_rounds(CallToolRequestParams::new("interview"), 40),
    )
    .await
    .expect("call hung")
    .expect("tools/call");
    let text = result.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_default();
    // 1 + 2 + … + 16: every round's answer reached the one run.
    let sum: usize = (1..=MAX_INPUT_ROUNDS).sum();
    assert!(text.contains(&format!("sum {sum}; then: ")), "{text}");
    assert!(
        text.contains(&format!("{MAX_INPUT_ROUNDS} times")),
        "{text}"
    );
    assert_eq!(person.asked.load(Ordering::SeqCst), MAX_INPUT_ROUNDS);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
    client.cancel().await.expect("client closes");
    server.close().await;
}
