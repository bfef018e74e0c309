//! Mid-call input through real MCP sessions: a handler asks the client of
//! its call through [`CallContext::input`], and a stateless 2026-07-28 rmcp
//! client (its own `input_required` driver) answers each question as a
//! round of the same call. The handler runs once however many rounds it
//! takes, and a handler that keeps asking is refused after
//! [`MAX_INPUT_ROUNDS`]. Questions a retry leaves unanswered are asked
//! again, and a run that fails after needing a capability the client did
//! not declare answers `-32021` (HTTP 400).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_server::input::{InputChannel, MAX_INPUT_ROUNDS};
use portcullis_server::{CallContext, HttpOptions, HttpServer, ToolError, ToolServer, serve_http};
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

/// A server with one read-only tool `name` that counts its runs and hands
/// its call's input channel to `body`: the count and the listening server.
async fn counting_server<F, Fut>(name: &'static str, body: F) -> (Arc<AtomicUsize>, HttpServer)
where
    F: Fn(InputChannel) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolResult, ToolError>> + Send + 'static,
{
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let tools = ToolServer::builder()
        .tool(
            Tool::new(name).with_annotations(ToolAnnotations::read_only(true)),
            move |_: serde_json::Value, ctx: CallContext| {
                let counted = counted.clone();
                let body = body.clone();
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let Some(input) = ctx.input() else {
                        return Err(ToolError::msg("ERR_NO_INPUT: no input channel"));
                    };
                    body(input.clone()).await
                }
            },
        )
        .build()
        .expect("tools");
    let server = serve_http(tools, HttpOptions::default())
        .await
        .expect("listens");
    (runs, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_asks_until_refused_and_runs_once() {
    let (runs, server) = counting_server("interview", |input: InputChannel| async move {
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
    })
    .await;
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

/// One stateless 2026-07-28 `tools/call` over raw HTTP: the status and the
/// JSON-RPC answer (plain JSON or the first object of an event stream).
async fn call_2026(
    url: &str,
    tool: &str,
    capabilities: serde_json::Value,
    extra: serde_json::Value,
) -> (u16, serde_json::Value) {
    let mut params = json!({
        "name": tool,
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities
        }
    });
    if let (Some(params), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
        params.extend(extra.clone());
    }
    let response = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", tool)
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
                .to_string(),
        )
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    let body = response.text().await.expect("a body");
    let start = body.find("{\"").expect("a JSON body");
    let answer = serde_json::Deserializer::from_str(&body[start..])
        .into_iter::<serde_json::Value>()
        .next()
        .and_then(Result::ok)
        .expect("a JSON-RPC answer");
    (status, answer)
}

/// The text of a tool result's first content block ("" when there is none).
fn first_text(answer: &serde_json::Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_a_retry_leaves_unanswered_are_asked_again() {
    let (runs, server) = counting_server("pair", |input: InputChannel| async move {
        // Two questions at once: one round.
        let (a, b) = futures::join!(
            input.request_keyed(Some("a".into()), question()),
            input.request_keyed(Some("b".into()), question())
        );
        let n = |answer: Result<serde_json::Value, ErrorData>| match answer {
            Ok(answer) => answer["content"]["n"].to_string(),
            Err(error) => error.message.to_string(),
        };
        Ok::<_, ToolError>(ToolResult::text(format!("a={} b={}", n(a), n(b))))
    })
    .await;
    let url = server.url();
    let capabilities = json!({"elicitation": {"form": {}}});
    let call = |extra: serde_json::Value| call_2026(&url, "pair", capabilities.clone(), extra);

    let (_, first) = call(json!({})).await;
    let asked = first["result"]["inputRequests"].clone();
    let keys: Vec<_> = asked
        .as_object()
        .map(|r| r.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(keys, ["a", "b"], "{first}");

    // Only `a` answered: `b` alone is asked again, as it was.
    let answer = |n: i64| json!({"action": "accept", "content": {"n": n}});
    let (_, second) = call(json!({
        "inputResponses": {"a": answer(1)},
        "requestState": first["result"]["requestState"]
    }))
    .await;
    assert_eq!(second["result"]["resultType"], "input_required", "{second}");
    assert_eq!(
        second["result"]["inputRequests"],
        json!({"b": asked["b"]}),
        "{second}"
    );

    let (status, done) = call(json!({
        "inputResponses": {"b": answer(2)},
        "requestState": second["result"]["requestState"]
    }))
    .await;
    assert_eq!(status, 200, "{done}");
    let text = first_text(&done);
    assert!(text.contains("a=1 b=2"), "{done}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
    server.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_fails_without_an_undeclared_capability_answers_32021() {
    let tools = ToolServer::builder()
        .tool(
            Tool::new("needs_roots").with_annotations(ToolAnnotations::read_only(true)),
            |args: serde_json::Value, ctx: CallContext| async move {
                let mut roots = ClientCapabilities::default();
                roots.roots = Some(Default::default());
                if let Some(input) = ctx.input() {
                    input.undeclared(roots);
                }
                if args["fall_back"] == true {
                    Ok(ToolResult::text("fell back"))
                } else {
                    Err(ToolError::msg("ERR_TOOL_FAILED"))
                }
            },
        )
        .build()
        .expect("tools");
    let server = serve_http(tools, HttpOptions::default())
        .await
        .expect("listens");
    let url = server.url();

    let (status, refused) = call_2026(&url, "needs_roots", json!({}), json!({})).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"],
        json!({"roots": {}}),
        "{refused}"
    );

    let (status, kept) = call_2026(
        &url,
        "needs_roots",
        json!({}),
        json!({"arguments": {"fall_back": true}}),
    )
    .await;
    assert_eq!(status, 200, "{kept}");
    let text = first_text(&kept);
    assert!(text.contains("fell back"), "{kept}");
    server.close().await;
}
