//! Progress and cancellation end to end through the real `portcullis`
//! binary: an rmcp client calls through `portcullis serve` to an upstream
//! served over Streamable HTTP on loopback by this test, which can see
//! exactly what reached it.
//!
//! * Every progress notification an upstream sends before its result
//!   reaches the client, with the client's own token, before the result —
//!   even when the upstream answers at once after the last one; a session
//!   client's call with a token (rmcp's client sends one on every request)
//!   is answered in front of rmcp's session, its reports on its stream; a
//!   stateless 2026-07-28 client's call with a token is answered in front
//!   of rmcp too, its reports events of the answer.
//! * A client that cancels its call makes the gateway tell the upstream,
//!   whose handler sees its cancellation.
//! * A 2026-07-28 upstream that answers `input_required` has its question
//!   put to an initialize-era client, and the call completes with the
//!   client's answer.
//! * The other way round: an initialize-era upstream that sends a sampling
//!   request during a call from a stateless 2026-07-28 client parks its
//!   call; the client gets `input_required` with the request, and its retry
//!   (with the answer and the request state) completes the same upstream
//!   call. Forged and replayed states are refused; a call nobody resumes is
//!   cancelled upstream when the approval timeout runs out. A retry that
//!   leaves the question unanswered is asked it again.
//! * A 2026-07-28 client that did not declare the capability an upstream's
//!   request needs is never asked: the upstream is refused, and if its tool
//!   then fails the client gets HTTP 400 with JSON-RPC `-32021` naming the
//!   capability (a tool that falls back keeps its result). A 2026 upstream
//!   is told the caller's own capabilities with each call, and its own
//!   `-32021` reaches the caller as it is.
//!
//! * An initialize-era upstream's sampling, elicitation and roots requests
//!   reach a capable session client on its call's stream when the gateway
//!   answers the call in front of rmcp, the same as through rmcp's session;
//!   another session cannot answer them.
//!
//! (Initialize-era clients' server-to-client requests through the gateway are also covered by
//! `interop.rs` and by the conformance run in `.ci/conformance.sh`.)

// Sampling is deprecated by SEP-2577, but 2025-era servers use it.
#![allow(deprecated)]

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_server::{CallContext, HttpOptions, ToolError, ToolServer, serve_http};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult,
    CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientRequest, ContentBlock,
    CreateMessageRequestParams, DiscoverRequestMethod, DiscoverResult, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, InputRequest, InputRequests,
    InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProgressToken, ProtocolVersion,
    ServerCapabilities, ServerConfig, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RequestContext};
use rmcp::{ErrorData, RoleServer};
use serde_json::json;
use tokio::sync::Notify;

/// How many progress reports the `burst` tool sends before answering.
const BURST: usize = 50;

fn ro(name: &str) -> Tool {
    Tool::new(name).with_annotations(ToolAnnotations::read_only(true))
}

/// What the upstream saw.
#[derive(Default)]
struct Seen {
    started: Notify,
    cancelled: Notify,
    cancellations: AtomicUsize,
}

/// The upstream: `burst` reports [`BURST`] steps and answers at once;
/// `wait` runs until it is cancelled and records that.
async fn upstream(seen: Arc<Seen>) -> portcullis_server::HttpServer {
    let tools = ToolServer::builder()
        .tool(
            ro("burst"),
            |_: serde_json::Value, ctx: CallContext| async move {
                for step in 1..=BURST {
                    ctx.progress(step as f64, Some(BURST as f64), None).await;
                }
                Ok::<_, ToolError>(ToolResult::text("burst done"))
            },
        )
        .tool(ro("wait"), move |_: serde_json::Value, ctx: CallContext| {
            let seen = seen.clone();
            async move {
                seen.started.notify_one();
                ctx.cancelled().await;
                seen.cancellations.fetch_add(1, Ordering::SeqCst);
                seen.cancelled.notify_one();
                Ok::<_, ToolError>(ToolResult::text("cancelled"))
            }
        })
        .build()
        .expect("the upstream's tools");
    serve_http(tools, HttpOptions::default())
        .await
        .expect("the upstream listens")
}

fn config(dir: &Path, upstream: &str) -> std::path::PathBuf {
    common::write_config(
        dir,
        &format!(
            "[gateway]\nstore = \"memory\"\n\n[upstreams.up]\ntype = \"streamable-http\"\nurl = \"{upstream}\"\ntimeout_ms = 60000\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_sent_just_before_the_result_all_arrives_first() {
    let upstream = upstream(Arc::default()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&config(dir.path(), &upstream.url()));

    // Records every notification and the order it came in, relative to
    // the result.
    #[derive(Clone, Default)]
    struct Client {
        progress: Arc<std::sync::Mutex<Vec<(ProgressToken, f64)>>>,
        /// Signalled when the burst is complete.
        all: Arc<Notify>,
    }
    impl rmcp::ClientHandler for Client {
        async fn on_progress(
            &self,
            params: rmcp::model::ProgressNotificationParam,
            _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
        ) {
            if let Ok(mut seen) = self.progress.lock() {
                seen.push((params.progress_token, params.progress));
                if seen.len() == BURST {
                    self.all.notify_one();
                }
            }
        }
    }
    // An initialize-era client, then a stateless 2026-07-28 one (whose
    // calls, each with a token, the gateway answers in front of rmcp).
    for modern in [false, true] {
        let handler = Client::default();
        let transport =
            rmcp::transport::StreamableHttpClientTransport::from_uri(served.url.clone());
        let client = if modern {
            use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
            let lifecycle = ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            };
            handler
                .clone()
                .serve_with_lifecycle(transport, lifecycle)
                .await
        } else {
            handler.clone().serve(transport).await
        }
        .expect("an MCP client connects");
        let version = client.peer_info().map(|info| info.protocol_version.clone());
        assert_eq!(
            version == Some(ProtocolVersion::V_2026_07_28),
            modern,
            "{version:?}"
        );
        for round in 0..3 {
            handler.progress.lock().expect("lock").clear();
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(
                CallToolRequestParams::new("burst"),
            ));
            let handle = client
                .send_request_with_option(request, PeerRequestOptions::no_options())
                .await
                .expect("sent");
            let token = handle.progress_token.clone();
            let answer = handle.await_response().await.expect("answered");
            let ServerResult::CallToolResult(result) = answer else {
                panic!("not a tool result: {answer:?}");
            };
            let text = result.content[0]
                .as_text()
                .map(|t| t.text.clone())
                .unwrap_or_default();
            assert!(text.contains("\nburst done\n"), "{text}");
            // rmcp hands notifications to this handler on tasks of their own,
            // so some may still be on their way; a lost one never comes.
            let complete =
                tokio::time::timeout(Duration::from_secs(30), handler.all.notified()).await;
            assert!(
                complete.is_ok(),
                "round {round} (2026: {modern}): progress lost: {:?}",
                handler.progress.lock().map(|p| p.len())
            );
            let progress = handler.progress.lock().expect("lock").clone();
            assert!(
                progress.iter().all(|(t, _)| *t == token),
                "round {round}: every report carries the client's own token"
            );
            let mut values: Vec<f64> = progress.iter().map(|(_, p)| *p).collect();
            values.sort_by(f64::total_cmp);
            let expected: Vec<f64> = (1..=BURST).map(|s| s as f64).collect();
            assert_eq!(values, expected, "round {round}");
        }
        let _ = client.cancel().await;
    }
    upstream.close().await;
}

/// The same burst over `portcullis serve --stdio`, where a session's plain
/// call is answered in front of rmcp's service loop: in each round every
/// report of the upstream's reaches the client before the call's result,
/// with the client's own token, in order (read as raw lines, so the order
/// seen is the order the gateway wrote).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_calls_progress_all_arrives_before_its_result() {
    let upstream = upstream(Arc::default()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = config(dir.path(), &upstream.url());
    let mut client = tokio::task::block_in_place(|| common::RawStdio::start(&path, false));
    client.send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "progress", "version": "1"}}}),
    );
    let initialized = tokio::task::block_in_place(|| client.answer_to(0, common::PATIENCE));
    assert!(initialized.is_some(), "initialize was not answered");
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for round in 1..=5_u64 {
        let token = format!("burst-{round}");
        client.send(
            json!({"jsonrpc": "2.0", "id": round, "method": "tools/call",
            "params": {"name": "burst", "arguments": {}, "_meta": {"progressToken": token}}}),
        );
        let mut reports = Vec::new();
        let result = tokio::task::block_in_place(|| {
            loop {
                let line = client
                    .lines
                    .recv_timeout(common::PATIENCE)
                    .expect("the gateway answers");
                if line["id"] == round {
                    break line;
                }
                if line["method"] == "notifications/progress" {
                    reports.push(line["params"].clone());
                }
            }
        });
        let text = result["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains("burst done"), "round {round}: {result}");
        assert_eq!(
            reports.len(),
            BURST,
            "round {round}: reports before the result"
        );
        for (step, report) in reports.iter().enumerate() {
            assert_eq!(
                report["progressToken"],
                token.as_str(),
                "round {round}: {report}"
            );
            assert_eq!(
                report["progress"],
                (step + 1) as f64,
                "round {round}: {report}"
            );
        }
    }
    drop(client);
    upstream.close().await;
}

/// A legacy HTTP+SSE upstream that asks the caller's model mid-call, in
/// front of a desktop client on `portcullis serve --stdio`: both ends take
/// their direct call paths, and the upstream's request still reaches the
/// client on its pipe, its answer goes back to the upstream, and the call
/// completes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sse_upstreams_request_mid_call_reaches_a_stdio_client() {
    let seen = Arc::new(Sampled::default());
    let upstream = common::legacy_sse(SamplesAModel(seen.clone())).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = common::write_config(
        dir.path(),
        &format!(
            "[gateway]\nstore = \"memory\"\n\n[upstreams.up]\ntype = \"sse\"\nurl = \"{}\"\ntimeout_ms = 60000\n",
            upstream.url()
        ),
    );
    let mut client = tokio::task::block_in_place(|| common::RawStdio::start(&path, false));
    client.send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}},
        "clientInfo": {"name": "desktop", "version": "1"}}}),
    );
    let initialized = tokio::task::block_in_place(|| client.answer_to(0, common::PATIENCE));
    assert!(initialized.is_some(), "initialize was not answered");
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for round in 1..=3_u64 {
        client.send(
            json!({"jsonrpc": "2.0", "id": round, "method": "tools/call",
            "params": {"name": "poem", "arguments": {}}}),
        );
        let asked = tokio::task::block_in_place(|| {
            client
                .lines
                .recv_timeout(common::PATIENCE)
                .expect("the upstream's request")
        });
        assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
        client.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {
            "role": "assistant", "model": "test",
            "content": {"type": "text", "text": format!("line {round}")}}}));
        let answer = tokio::task::block_in_place(|| client.answer_to(round, common::PATIENCE))
            .expect("the call is answered");
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(
            text.contains(&format!("The model said: line {round}")),
            "round {round}: {answer}"
        );
    }
    assert_eq!(seen.calls.load(Ordering::SeqCst), 3);
    drop(client);
}

/// The same burst for a session client whose call carries a
/// `progressToken` (as rmcp's client puts on every request), by hand so the
/// stream's bytes can be read: the gateway answers it in front of rmcp's
/// session (its events carry the session path's `d<n>.<k>` ids; rmcp's are
/// digits and `/`), every report of the upstream's with the client's token,
/// in order, then the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_calls_progress_rides_its_own_stream_through_the_session_path() {
    let upstream = upstream(Arc::default()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&config(dir.path(), &upstream.url()));
    let http = reqwest::Client::new();
    let post = |session: Option<&str>, body: serde_json::Value| {
        let mut request = http
            .post(&served.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send()
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let response = post(None, initialize).await.expect("initialize");
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .expect("a session id")
        .to_owned();
    let _ = response.bytes().await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = post(Some(&session), initialized)
        .await
        .expect("initialized");
    assert_eq!(response.status(), 202);
    // The session is adopted on a task of rmcp's after the `202`.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "burst", "arguments": {}, "_meta": {"progressToken": "tok"}}});
    let response = post(Some(&session), call).await.expect("the call");
    assert_eq!(response.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(60), response.text())
        .await
        .expect("answered in time")
        .expect("the body");
    let mut order = Vec::new();
    for event in body.split("\n\n") {
        let id = event.lines().find_map(|l| l.strip_prefix("id: "));
        let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) else {
            continue;
        };
        let Ok(message) = serde_json::from_str::<serde_json::Value>(data) else {
            continue;
        };
        if message["method"] == "notifications/progress" {
            assert!(
                id.is_some_and(|id| id.starts_with('d')),
                "not the session path: {event}"
            );
            assert_eq!(message["params"]["progressToken"], "tok", "{message}");
            order.push(message["params"]["progress"].as_f64().unwrap_or_default());
        } else {
            assert_eq!(message["id"], 1, "{message}");
            order.push(-1.0);
        }
    }
    let mut expected: Vec<f64> = (1..=BURST).map(|s| s as f64).collect();
    expected.push(-1.0);
    assert_eq!(order, expected, "{body}");
    upstream.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_is_cancelled_upstream() {
    let seen = Arc::new(Seen::default());
    let upstream = upstream(seen.clone()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&config(dir.path(), &upstream.url()));
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(served.url.clone());
    let client = ().serve(transport).await.expect("an MCP client connects");

    let request =
        ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("wait")));
    let handle = client
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .expect("sent");
    let id = handle.id.clone();
    let waiting = tokio::spawn(handle.await_response());
    tokio::time::timeout(Duration::from_secs(30), seen.started.notified())
        .await
        .expect("the call reached the upstream");
    assert_eq!(seen.cancellations.load(Ordering::SeqCst), 0);
    client
        .notify_cancelled(CancelledNotificationParam::new(
            Some(id),
            Some("the test changed its mind".into()),
        ))
        .await
        .expect("cancel sent");
    tokio::time::timeout(Duration::from_secs(30), seen.cancelled.notified())
        .await
        .expect("the upstream saw the cancellation");
    assert_eq!(seen.cancellations.load(Ordering::SeqCst), 1);
    waiting.abort();
    let _ = client.cancel().await;
    upstream.close().await;
}

/// A read-only tool taking any object, as the test upstreams list it.
fn read_only_tool(name: &'static str, description: &'static str) -> rmcp::model::Tool {
    let schema = serde_json::Map::from_iter([("type".to_owned(), json!("object"))]);
    let mut tool =
        rmcp::model::Tool::new_with_raw(name, Some(description.into()), Arc::new(schema));
    tool.annotations = Some(rmcp::model::ToolAnnotations::new().read_only(true));
    tool
}

/// A 2026-07-28 upstream whose `greet` takes input the MRTR way: the first
/// round answers `input_required` (an elicitation keyed `who`, and a
/// request state); the retry with the answer and the state completes.
#[derive(Clone)]
struct AsksForAName;

impl rmcp::ServerHandler for AsksForAName {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool = read_only_tool("greet", "Asks who you are");
        let needs = read_only_tool("needs_a_model", "Refuses a client without sampling");
        Ok(ListToolsResult::with_all_items(vec![tool, needs]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "needs_a_model" {
            // What the calling client declared reaches the server with the
            // call (not what the gateway could relay).
            if context
                .client_capabilities()
                .is_some_and(|c| c.sampling.is_some())
            {
                return Ok(CallToolResult::success(vec![ContentBlock::text("Success")]).into());
            }
            let mut required = ClientCapabilities::default();
            required.sampling = Some(Default::default());
            return Err(ErrorData::missing_required_client_capability(required));
        }
        let answer = request.input_responses.as_ref().and_then(|r| r.get("who"));
        if let Some(answer) = answer {
            if request.request_state.as_deref() != Some("asked-once") {
                return Err(ErrorData::invalid_params(
                    "the request state did not come back",
                    None,
                ));
            }
            let name = answer["content"]["name"].as_str().unwrap_or("nobody");
            return Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "Hello, {name}!"
            ))])
            .into());
        }
        let ask: InputRequest = serde_json::from_value(json!({
            "method": "elicitation/create",
            "params": {"mode": "form", "message": "Who are you?", "requestedSchema": {
                "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let requests = InputRequests::from_iter([("who".to_owned(), ask)]);
        Ok(InputRequiredResult::new(Some(requests), Some("asked-once".to_owned())).into())
    }
}

/// An initialize-era client that answers elicitations with a name.
#[derive(Clone, Default)]
struct Answers {
    asked: Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Answers {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<rmcp::RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request
            && let Ok(mut asked) = self.asked.lock()
        {
            asked.push(message.clone());
        }
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": "Ada"})))
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(Default::default());
        ClientConfig::new(capabilities, Implementation::new("relay-test", "1"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_upstreams_input_required_is_answered_by_an_initialize_era_client() {
    let upstream = serve_http(AsksForAName, HttpOptions::default())
        .await
        .expect("the upstream listens");
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&config(dir.path(), &upstream.url()));
    let handler = Answers::default();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(served.url.clone());
    let client = handler
        .clone()
        .serve(transport)
        .await
        .expect("an MCP client connects");
    let result = client
        .call_tool(CallToolRequestParams::new("greet"))
        .await
        .expect("tools/call");
    let text = result.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_default();
    assert!(text.contains("\nHello, Ada!\n"), "{text}");
    assert_eq!(
        handler.asked.lock().expect("lock").as_slice(),
        ["Who are you?"],
        "the upstream's question reached the client once"
    );
    let _ = client.cancel().await;
    upstream.close().await;
}

/// What the sampling upstream saw.
#[derive(Default)]
struct Sampled {
    calls: AtomicUsize,
    cancellations: AtomicUsize,
    cancelled: Notify,
}

/// An initialize-era upstream (it knows nothing of 2026-07-28, so the
/// gateway talks to it over a session) whose `poem` asks the calling
/// client's model for a line during the call and answers with it.
#[derive(Clone)]
struct SamplesAModel(Arc<Sampled>);

impl rmcp::ServerHandler for SamplesAModel {
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        // What a 2025-era SDK answers for a method it does not know.
        Err(ErrorData::method_not_found::<DiscoverRequestMethod>())
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool = read_only_tool("poem", "Asks the caller's model for a line");
        let mut survey = tool.clone();
        survey.name = "survey".into();
        let mut strict = tool.clone();
        strict.name = "strict_poem".into();
        let mut lenient = tool.clone();
        lenient.name = "lenient_poem".into();
        let mut impatient = tool.clone();
        impatient.name = "impatient_poem".into();
        Ok(ListToolsResult::with_all_items(vec![
            tool, survey, strict, lenient, impatient,
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        if request.name == "survey" {
            // Two questions, one after the other: two rounds for a 2026
            // client, one call here.
            let params: ElicitRequestParams = serde_json::from_value(json!({
                "mode": "form", "message": "Your name?", "requestedSchema": {
                    "type": "object", "properties": {"name": {"type": "string"}}}
            }))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            let asked =
                rmcp::model::ServerRequest::ElicitRequest(rmcp::model::ElicitRequest::new(params));
            let answer = context
                .peer
                .send_request(asked)
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            let rmcp::model::ClientResult::ElicitResult(name) = answer else {
                return Err(ErrorData::internal_error("not an elicitation result", None));
            };
            let name = name
                .content
                .as_ref()
                .and_then(|c| c["name"].as_str())
                .unwrap_or("nobody")
                .to_owned();
            let roots = context
                .peer
                .list_roots()
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            return Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "{name} has {} root(s)",
                roots.roots.len()
            ))])
            .into());
        }
        let params: CreateMessageRequestParams = serde_json::from_value(json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": "Write a line about roses"}}],
            "maxTokens": 50
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        if request.name == "impatient_poem" {
            // Gives up on its question after a moment: rmcp withdraws it
            // with `notifications/cancelled`.
            let asked = rmcp::model::ServerRequest::CreateMessageRequest(
                rmcp::model::CreateMessageRequest::new(params),
            );
            let options = PeerRequestOptions::with_timeout(Duration::from_millis(300));
            let handle = context
                .peer
                .send_request_with_option(asked, options)
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            let line = match handle.await_response().await {
                Ok(_) => "sampled",
                Err(_) => "no answer in time",
            };
            return Ok(CallToolResult::success(vec![ContentBlock::text(line)]).into());
        }
        if request.name != "poem" {
            // Without a model, `strict_poem` fails and `lenient_poem` falls
            // back to a line of its own.
            let line = match context.peer.create_message(params).await {
                Ok(_) => "sampled".to_owned(),
                Err(_) if request.name == "lenient_poem" => "a line of my own".to_owned(),
                Err(error) => return Err(ErrorData::internal_error(error.to_string(), None)),
            };
            return Ok(CallToolResult::success(vec![ContentBlock::text(line)]).into());
        }
        // A call given up on hears both that its question will not be
        // answered and that it is cancelled, in either order: what counts
        // is that the cancellation comes.
        let sampled = match context.peer.create_message(params).await {
            Ok(sampled) => sampled,
            Err(error) => {
                context.ct.cancelled().await;
                self.0.cancellations.fetch_add(1, Ordering::SeqCst);
                self.0.cancelled.notify_one();
                return Err(ErrorData::internal_error(error.to_string(), None));
            }
        };
        let line = serde_json::to_value(&sampled.message.content)
            .ok()
            .and_then(|c| {
                c["text"]
                    .as_str()
                    .or_else(|| c[0]["text"].as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        Ok(
            CallToolResult::success(vec![ContentBlock::text(format!("The model said: {line}"))])
                .into(),
        )
    }
}

/// One stateless 2026-07-28 `tools/call` of `poem` that declares the
/// sampling capability, with `extra` merged into its params; the JSON-RPC
/// answer.
fn call_poem(authority: &str, extra: serde_json::Value) -> serde_json::Value {
    call_tool_2026(authority, "poem", extra)
}

/// One stateless 2026-07-28 `tools/call` of `tool` from a client that
/// declares sampling, elicitation and roots.
fn call_tool_2026(authority: &str, tool: &str, extra: serde_json::Value) -> serde_json::Value {
    let capabilities = json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {}});
    let (status, answer) = call_as(authority, tool, capabilities, extra);
    assert_eq!(status, 200, "{answer}");
    answer
}

/// One stateless 2026-07-28 `tools/call` of `tool` from a client that
/// declares `capabilities`: the HTTP status and the JSON-RPC answer.
fn call_as(
    authority: &str,
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
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let raw = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, response) = common::http(authority, &raw);
    // Plain JSON or one SSE event, possibly chunked: the first JSON-RPC
    // object in the response is the answer.
    let start = response.find("{\"").expect("a JSON body");
    let answer = serde_json::Deserializer::from_str(&response[start..])
        .into_iter::<serde_json::Value>()
        .next()
        .and_then(Result::ok)
        .expect("a JSON-RPC answer");
    (status, answer)
}

fn sampling_config(dir: &Path, upstream: &str, timeout_ms: u64) -> std::path::PathBuf {
    common::write_config(
        dir,
        &format!(
            "[gateway]\nstore = \"memory\"\napproval_timeout_ms = {timeout_ms}\n\n[upstreams.up]\ntype = \"streamable-http\"\nurl = \"{upstream}\"\ntimeout_ms = 60000\n"
        ),
    )
}

async fn sampling_upstream(seen: Arc<Sampled>) -> portcullis_server::HttpServer {
    let options = HttpOptions {
        legacy_sessions: true,
        ..HttpOptions::default()
    };
    serve_http(SamplesAModel(seen), options)
        .await
        .expect("the upstream listens")
}

/// The gateway in front of a fresh sampling upstream, with
/// `approval_timeout_ms` (a parked call's deadline): what the upstream saw,
/// the upstream, the config's directory (kept while the gateway runs) and
/// the gateway.
async fn sampling_gateway(
    approval_timeout_ms: u64,
) -> (
    Arc<Sampled>,
    portcullis_server::HttpServer,
    tempfile::TempDir,
    common::Served,
) {
    let seen = Arc::new(Sampled::default());
    let upstream = sampling_upstream(seen.clone()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&sampling_config(
        dir.path(),
        &upstream.url(),
        approval_timeout_ms,
    ));
    (seen, upstream, dir, served)
}

/// [`call_tool_2026`] on a blocking task, so the test's runtime keeps
/// serving the upstream meanwhile.
async fn call_2026(
    authority: String,
    tool: &'static str,
    extra: serde_json::Value,
) -> serde_json::Value {
    tokio::task::spawn_blocking(move || call_tool_2026(&authority, tool, extra))
        .await
        .expect("a call")
}

/// The text of a tool result's first content block ("" when there is none).
fn first_text(answer: &serde_json::Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_sampling_reaches_a_2026_client_through_input_required() {
    let (seen, upstream, _dir, served) = sampling_gateway(60_000).await;
    let authority = served.authority();

    // The first attempt: the upstream's question comes back as input.
    let first = {
        let authority = authority.clone();
        tokio::task::spawn_blocking(move || call_poem(&authority, json!({})))
            .await
            .expect("first attempt")
    };
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let requests = result["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{first}");
    let (key, request) = requests.iter().next().expect("one request");
    assert_eq!(request["method"], "sampling/createMessage", "{first}");
    assert_eq!(
        request["params"]["messages"][0]["content"]["text"],
        "Write a line about roses"
    );
    let state = result["requestState"]
        .as_str()
        .expect("a request state")
        .to_owned();
    let answer = json!({
        "role": "assistant",
        "content": {"type": "text", "text": "roses are red, the gateway is too"},
        "model": "test-model",
        "stopReason": "endTurn"
    });
    let retry = |state: String| {
        let authority = authority.clone();
        let responses = json!({ key.clone(): answer.clone() });
        async move {
            tokio::task::spawn_blocking(move || {
                call_poem(
                    &authority,
                    json!({"inputResponses": responses, "requestState": state}),
                )
            })
            .await
            .expect("retry")
        }
    };

    // A forged state is refused and does not disturb the parked call.
    let forged = retry(format!("{state}0")).await;
    assert_eq!(forged["error"]["code"], -32602, "{forged}");

    // The genuine retry completes the very call that asked.
    let done = retry(state.clone()).await;
    let text = first_text(&done);
    assert!(
        text.contains("\nThe model said: roses are red, the gateway is too\n"),
        "{done}"
    );
    assert_ne!(done["result"]["resultType"], "input_required", "{done}");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1, "called exactly once");

    // The state was used once.
    let replayed = retry(state).await;
    assert_eq!(replayed["error"]["code"], -32602, "{replayed}");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    assert_eq!(seen.cancellations.load(Ordering::SeqCst), 0);
    upstream.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_call_nobody_resumes_is_cancelled_upstream() {
    // A short approval timeout: the parked call's deadline.
    let (seen, upstream, _dir, served) = sampling_gateway(300).await;
    let authority = served.authority();
    let first = tokio::task::spawn_blocking(move || call_poem(&authority, json!({})))
        .await
        .expect("first attempt");
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    tokio::time::timeout(Duration::from_secs(30), seen.cancelled.notified())
        .await
        .expect("the unresumed call was cancelled upstream");
    assert_eq!(seen.cancellations.load(Ordering::SeqCst), 1);
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    upstream.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_asks_twice_takes_two_rounds_of_one_call() {
    let (seen, upstream, _dir, served) = sampling_gateway(60_000).await;
    let authority = served.authority();
    let call = |extra: serde_json::Value| call_2026(authority.clone(), "survey", extra);
    let only_request = |answer: &serde_json::Value| {
        let requests = answer["result"]["inputRequests"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(requests.len(), 1, "{answer}");
        let (key, request) = requests.into_iter().next().expect("one request");
        let state = answer["result"]["requestState"]
            .as_str()
            .expect("a state")
            .to_owned();
        (key, request, state)
    };

    let first = call(json!({})).await;
    let (key, request, state) = only_request(&first);
    assert_eq!(request["method"], "elicitation/create", "{first}");
    assert_eq!(request["params"]["message"], "Your name?");
    let named = json!({"action": "accept", "content": {"name": "Grace"}});
    let second = call(json!({
        "inputResponses": {key: named},
        "requestState": state
    }))
    .await;
    let (key, request, state) = only_request(&second);
    assert_eq!(request["method"], "roots/list", "{second}");
    let roots = json!({"roots": [{"uri": "file:///work", "name": "work"}]});
    let done = call(json!({
        "inputResponses": {key: roots},
        "requestState": state
    }))
    .await;
    let text = first_text(&done);
    assert!(text.contains("\nGrace has 1 root(s)\n"), "{done}");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1, "called exactly once");
    upstream.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_can_still_be_asked_for_input() {
    let seen = Arc::new(Sampled::default());
    let upstream = sampling_upstream(seen.clone()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = common::write_config(
        dir.path(),
        &format!(
            "[gateway]\nstore = \"memory\"\napproval = [\"poem\"]\n\n[upstreams.up]\ntype = \"streamable-http\"\nurl = \"{}\"\ntimeout_ms = 60000\n",
            upstream.url()
        ),
    );
    let served = common::serve(&config);
    let authority = served.authority();
    let call = |extra: serde_json::Value| call_2026(authority.clone(), "poem", extra);

    // First the person approves the call...
    let asked = call(json!({})).await;
    let requests = &asked["result"]["inputRequests"];
    assert!(requests.get("portcullis_approval").is_some(), "{asked}");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 0, "not before approval");
    let approved = call(json!({
        "inputResponses": {"portcullis_approval": {"action": "accept", "content": {"approve": true}}},
        "requestState": asked["result"]["requestState"]
    }))
    .await;
    // ...then the running call's upstream asks the model, under a new state.
    assert_eq!(
        approved["result"]["resultType"], "input_required",
        "{approved}"
    );
    let requests = approved["result"]["inputRequests"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let (key, request) = requests.into_iter().next().expect("a request");
    assert_eq!(request["method"], "sampling/createMessage", "{approved}");
    assert_ne!(
        approved["result"]["requestState"],
        asked["result"]["requestState"]
    );
    let answer = json!({
        "role": "assistant",
        "content": {"type": "text", "text": "approved roses"},
        "model": "test-model"
    });
    let done = call(json!({
        "inputResponses": {key: answer},
        "requestState": approved["result"]["requestState"]
    }))
    .await;
    let text = first_text(&done);
    assert!(
        text.contains("\nThe model said: approved roses\n"),
        "{done}"
    );
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    upstream.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_upstreams_input_required_reaches_a_2026_client() {
    let upstream = serve_http(AsksForAName, HttpOptions::default())
        .await
        .expect("the upstream listens");
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&config(dir.path(), &upstream.url()));
    let authority = served.authority();
    let call = |extra: serde_json::Value| call_2026(authority.clone(), "greet", extra);
    let first = call(json!({})).await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let requests = first["result"]["inputRequests"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let (key, request) = requests.into_iter().next().expect("a request");
    assert_eq!(request["method"], "elicitation/create", "{first}");
    assert_eq!(request["params"]["message"], "Who are you?");
    assert_eq!(key, "who", "the upstream's key is kept");
    // The gateway's own state, not the upstream's: that one stays inside.
    assert_ne!(first["result"]["requestState"], "asked-once");
    let done = call(json!({
        "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": first["result"]["requestState"]
    }))
    .await;
    let text = first_text(&done);
    assert!(text.contains("\nHello, Ada!\n"), "{done}");
    upstream.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_upstream_hears_the_callers_capabilities_and_its_32021_passes_through() {
    let upstream = serve_http(AsksForAName, HttpOptions::default())
        .await
        .expect("the upstream listens");
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&config(dir.path(), &upstream.url()));
    let authority = served.authority();
    let call = move |capabilities: serde_json::Value| {
        let authority = authority.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                call_as(&authority, "needs_a_model", capabilities, json!({}))
            })
            .await
            .expect("a call")
        }
    };
    let (status, refused) = call(json!({"elicitation": {}})).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{refused}"
    );
    // The same through rmcp's client (a call that wants progress goes that
    // way rather than the direct path).
    let rmcp_path = {
        let authority = served.authority();
        tokio::task::spawn_blocking(move || {
            let meta = json!({"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
                "progressToken": "p1"
            }});
            call_as(&authority, "needs_a_model", json!({}), meta).1
        })
        .await
        .expect("a call")
    };
    assert_eq!(rmcp_path["error"]["code"], -32021, "{rmcp_path}");
    let (status, served) = call(json!({"sampling": {}})).await;
    assert_eq!(status, 200, "{served}");
    let text = first_text(&served);
    assert!(text.contains("\nSuccess\n"), "{served}");
    upstream.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_without_the_capability_gets_32021_when_the_upstream_fails() {
    let (seen, upstream, _dir, served) = sampling_gateway(60_000).await;
    let authority = served.authority();
    let call = move |tool: &'static str| {
        let authority = authority.clone();
        async move {
            // Elicitation and roots, but no sampling.
            let capabilities = json!({"elicitation": {"form": {}}, "roots": {}});
            tokio::task::spawn_blocking(move || call_as(&authority, tool, capabilities, json!({})))
                .await
                .expect("a call")
        }
    };

    // The upstream needs a model the client did not declare and fails:
    // the protocol's error, not a tool result.
    let (status, refused) = call("strict_poem").await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{refused}"
    );
    assert!(refused.get("result").is_none(), "{refused}");

    // A tool that gets by without one keeps its result.
    let (status, fell_back) = call("lenient_poem").await;
    assert_eq!(status, 200, "{fell_back}");
    let text = first_text(&fell_back);
    assert!(text.contains("\na line of my own\n"), "{fell_back}");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 2);
    upstream.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_leaves_the_question_unanswered_is_asked_again() {
    let (seen, upstream, _dir, served) = sampling_gateway(60_000).await;
    let authority = served.authority();
    let call = |extra: serde_json::Value| call_2026(authority.clone(), "survey", extra);
    let first = call(json!({})).await;
    let asked = first["result"]["inputRequests"].clone();
    let (key, _) = asked
        .as_object()
        .and_then(|r| r.iter().next())
        .expect("a request");
    let key = key.clone();
    let state = first["result"]["requestState"].clone();

    // Answered under another key (and with a non-answer under its own):
    // the same question again, under the same key, with a new state.
    let again = call(json!({
        "inputResponses": {"someone_else": {"action": "accept", "content": {"name": "x"}}, key.clone(): 42},
        "requestState": state
    }))
    .await;
    assert_eq!(again["result"]["resultType"], "input_required", "{again}");
    assert_eq!(again["result"]["inputRequests"], asked, "{again}");
    let state_again = again["result"]["requestState"].clone();
    assert_ne!(state_again, state, "{again}");

    // Answered this time: the call moves on to its next question.
    let named = json!({"action": "accept", "content": {"name": "Grace"}});
    let next = call(json!({"inputResponses": {key: named}, "requestState": state_again})).await;
    let requests = next["result"]["inputRequests"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(requests.len(), 1, "{next}");
    let (key, request) = requests.into_iter().next().expect("one request");
    assert_eq!(request["method"], "roots/list", "{next}");
    let done = call(json!({
        "inputResponses": {key: {"roots": []}},
        "requestState": next["result"]["requestState"]
    }))
    .await;
    let text = first_text(&done);
    assert!(text.contains("\nGrace has 0 root(s)\n"), "{done}");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1, "called exactly once");
    upstream.close().await;
}

/// An initialize-era client's session on the gateway, over plain HTTP,
/// that reads each call's answer as events (so it can answer the
/// gateway's requests on the call's stream itself).
struct RawSession {
    http: reqwest::Client,
    url: String,
    id: String,
}

const SESSION_VERSION: &str = "2025-11-25";

impl RawSession {
    /// Opens a session declaring `capabilities`, once the gateway has had
    /// a moment to take its calls in front of rmcp.
    async fn open(url: &str, capabilities: serde_json::Value) -> RawSession {
        Self::open_with(url, capabilities, true).await
    }

    /// Opens a session whose calls rmcp serves: its `initialized` goes out
    /// without a declared length (chunked), which only rmcp reads, so the
    /// gateway never takes its calls in front of rmcp.
    async fn open_on_rmcp(url: &str, capabilities: serde_json::Value) -> RawSession {
        Self::open_with(url, capabilities, false).await
    }

    async fn open_with(url: &str, capabilities: serde_json::Value, adopted: bool) -> RawSession {
        let http = reqwest::Client::new();
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": SESSION_VERSION, "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "1"}}});
        let response = http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(initialize.to_string())
            .send()
            .await
            .expect("initialize");
        let id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .expect("a session")
            .to_owned();
        let session = RawSession {
            http,
            url: url.to_owned(),
            id,
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let status = if adopted {
            session.post(&initialized).await
        } else {
            let chunks = futures::stream::iter([Ok::<_, std::io::Error>(initialized.to_string())]);
            session
                .request(&initialized)
                .body(reqwest::Body::wrap_stream(chunks))
                .send()
                .await
                .expect("initialized")
                .status()
                .as_u16()
        };
        assert_eq!(status, 202);
        tokio::time::sleep(Duration::from_millis(300)).await;
        session
    }

    fn request(&self, message: &serde_json::Value) -> reqwest::RequestBuilder {
        self.http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", SESSION_VERSION)
            .body(message.to_string())
    }

    /// POSTs `message`: the status.
    async fn post(&self, message: &serde_json::Value) -> u16 {
        self.request(message)
            .send()
            .await
            .expect("a POST")
            .status()
            .as_u16()
    }

    /// Calls `tool` (with a progress token if `progress`); its answer as
    /// events.
    async fn call(&self, id: u64, tool: &str, progress: bool) -> SseMessages {
        let mut params = json!({"name": tool, "arguments": {}});
        if progress {
            params["_meta"] = json!({"progressToken": "p"});
        }
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let response = self.request(&call).send().await.expect("a call");
        assert_eq!(response.status(), 200);
        SseMessages {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// Answers `request` with `result`: the status.
    async fn answer(&self, request: &serde_json::Value, result: serde_json::Value) -> u16 {
        self.post(&json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
            .await
    }
}

/// The JSON-RPC messages of a streamed answer, in order.
struct SseMessages {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>,
    buffer: String,
}

impl SseMessages {
    async fn next(&mut self) -> serde_json::Value {
        use futures::StreamExt as _;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let data: String = block
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                if !data.is_empty() {
                    return serde_json::from_str(&data).expect("a JSON-RPC message");
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(60), self.body.next())
                .await
                .expect("the stream stalled")
                .expect("the stream ended early")
                .expect("a chunk");
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }
}

/// An initialize-era upstream's sampling, elicitation and roots requests
/// reach a capable session client on its call's stream when the gateway
/// answers the call in front of rmcp (ids of its own), and the client's
/// answers reach the upstream: the requests and the answers are the same
/// as through rmcp's session (a session the gateway never adopted), with
/// or without a progress token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_requests_reach_a_capable_session_client_as_through_rmcp() {
    let (_seen, upstream, _dir, served) = sampling_gateway(60_000).await;
    let capabilities = json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {}});
    let direct_session = RawSession::open(&served.url, capabilities.clone()).await;
    let rmcp_session = RawSession::open_on_rmcp(&served.url, capabilities).await;
    let mut runs = Vec::new();
    for (session, progress) in [
        (&direct_session, false),
        (&direct_session, true),
        (&rmcp_session, true),
    ] {
        let mut poem = session.call(1, "poem", progress).await;
        let sampling = poem.next().await;
        assert_eq!(sampling["method"], "sampling/createMessage", "{sampling}");
        let line = json!({"role": "assistant", "model": "test",
            "content": {"type": "text", "text": "Roses are red"}});
        assert_eq!(session.answer(&sampling, line).await, 202);
        let poem = poem.next().await;

        let mut survey = session.call(2, "survey", progress).await;
        let elicitation = survey.next().await;
        assert_eq!(elicitation["method"], "elicitation/create", "{elicitation}");
        let name = json!({"action": "accept", "content": {"name": "Ada"}});
        assert_eq!(session.answer(&elicitation, name).await, 202);
        let roots = survey.next().await;
        assert_eq!(roots["method"], "roots/list", "{roots}");
        let listed = json!({"roots": [{"uri": "file:///work", "name": "work"}]});
        assert_eq!(session.answer(&roots, listed).await, 202);
        let survey = survey.next().await;
        runs.push([sampling, poem, elicitation, roots, survey]);
    }
    // With a token the direct path answers alike.
    assert_eq!(runs[0][1], runs[1][1]);
    assert_eq!(runs[0][4], runs[1][4]);
    let (direct, rmcp) = (&runs[1], &runs[2]);
    assert!(
        first_text(&direct[1]).contains("The model said: Roses are red"),
        "{}",
        direct[1]
    );
    assert!(
        first_text(&direct[4]).contains("Ada has 1 root(s)"),
        "{}",
        direct[4]
    );
    for (direct, rmcp) in direct.iter().zip(rmcp) {
        if direct.get("method").is_some() {
            // A request: the gateway's own id on its path, rmcp's number on
            // rmcp's; rmcp adds a progress token of its own.
            let id = direct["id"].as_str().unwrap_or_default();
            assert!(id.starts_with("portcullis-"), "{direct}");
            assert!(rmcp["id"].is_number(), "{rmcp}");
            // (Params left empty by that are no params.)
            let mut params = rmcp["params"].clone();
            if let Some(object) = params.as_object_mut() {
                object.remove("_meta");
                if object.is_empty() {
                    params = serde_json::Value::Null;
                }
            }
            assert_eq!(direct["params"], params);
        } else {
            assert_eq!(direct, rmcp);
        }
    }
    upstream.close().await;
}

/// Through the gateway too, another session cannot answer a session's
/// request by naming its id: the call takes its own client's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_session_cannot_answer_a_relayed_request() {
    let (_seen, upstream, _dir, served) = sampling_gateway(60_000).await;
    let capabilities = json!({"sampling": {}});
    let victim = RawSession::open(&served.url, capabilities.clone()).await;
    let attacker = RawSession::open(&served.url, capabilities).await;
    let mut poem = victim.call(1, "poem", false).await;
    let sampling = poem.next().await;
    assert_eq!(sampling["method"], "sampling/createMessage", "{sampling}");
    let forged = json!({"role": "assistant", "model": "m",
        "content": {"type": "text", "text": "Mallory was here"}});
    assert_eq!(attacker.answer(&sampling, forged).await, 202);
    let own = json!({"role": "assistant", "model": "m",
        "content": {"type": "text", "text": "Roses are red"}});
    assert_eq!(victim.answer(&sampling, own).await, 202);
    let answer = poem.next().await;
    let text = first_text(&answer);
    assert!(text.contains("The model said: Roses are red"), "{answer}");
    assert!(!text.contains("Mallory"), "{answer}");
    upstream.close().await;
}

/// An upstream that withdraws its request (its own timeout) has the
/// gateway withdraw it from the client, on the call's stream, with the id
/// the client was asked under.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_withdrawing_its_request_withdraws_it_from_the_session_client() {
    let (_seen, upstream, _dir, served) = sampling_gateway(60_000).await;
    let session = RawSession::open(&served.url, json!({"sampling": {}})).await;
    let mut call = session.call(1, "impatient_poem", false).await;
    let sampling = call.next().await;
    assert_eq!(sampling["method"], "sampling/createMessage", "{sampling}");
    let withdrawn = call.next().await;
    assert_eq!(
        withdrawn["method"], "notifications/cancelled",
        "{withdrawn}"
    );
    assert_eq!(withdrawn["params"]["requestId"], sampling["id"]);
    let answer = call.next().await;
    assert!(
        first_text(&answer).contains("no answer in time"),
        "{answer}"
    );
    // A late answer is nobody's now: rmcp takes it, as any unknown id.
    let late = json!({"role": "assistant", "model": "m",
        "content": {"type": "text", "text": "too late"}});
    assert_eq!(session.answer(&sampling, late).await, 202);
    upstream.close().await;
}
