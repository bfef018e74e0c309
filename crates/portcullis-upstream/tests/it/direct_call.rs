//! Calls to a Streamable HTTP server go the direct way
//! (`connection::direct`); these pin what that path must do besides a
//! plain JSON answer, which every HTTP test in `integration.rs` covers: a
//! server that answers with an event stream, log messages on that stream
//! handed over before the call returns, a JSON-RPC error, and a caller
//! that wants progress getting every report, in order, before the answer.
//!
//! For an initialize-era server the call goes into rmcp's session: the
//! session's id rides along, a session the server dropped is reopened by
//! rmcp and the call still answered, a cancelled call is cancelled with
//! `notifications/cancelled`, and the server's requests on the call's
//! stream are answered by the call's client.
//!
//! Hand-written hostile session servers pin the bounds on that path: a
//! flood of requests whose replies are never taken, a reused request id,
//! a cancellation never taken, a session lost late in a call, requests
//! the caller did not declare, an answer stream held open or carrying a
//! forged answer for the next call after the call's own.

// Logging is deprecated by SEP-2577, but 2026 servers may still log on a
// call's stream, and the gateway passes it on.
#![allow(deprecated)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::future::BoxFuture;
use portcullis_upstream::{
    CallContext, CallError, ClientRelay, ConnectOptions, LogSink, McpServerConfig, Toolset, connect,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientResult,
    ContentBlock, DiscoverRequestMethod, DiscoverResult, ElicitRequestParams, ElicitResult,
    ListToolsResult, LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ServerCapabilities, ServerConfig, ServerRequest,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// A stateless server that answers every POST with an event stream.
#[derive(Clone)]
struct Streaming;

impl ServerHandler for Streaming {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        read_only_tools(&["echo", "fail", "count"])
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            "echo" => {
                let _ = context
                    .peer
                    .notify_logging_message(LoggingMessageNotificationParam::new(
                        LoggingLevel::Info,
                        json!("echoing"),
                    ))
                    .await;
                let text = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
            }
            "count" => {
                count_to_three(&context).await;
                Ok(CallToolResult::success(vec![ContentBlock::text("counted")]).into())
            }
            _ => Err(ErrorData::invalid_params("no such luck", None)),
        }
    }
}

/// A listing of read-only tools taking any object.
fn read_only_tools(names: &[&str]) -> Result<ListToolsResult, ErrorData> {
    let tools = names.iter().map(|name| {
        serde_json::from_value::<Tool>(json!({
            "name": name,
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true}
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    });
    Ok(ListToolsResult::with_all_items(
        tools.collect::<Result<_, _>>()?,
    ))
}

/// Reports progress 1, 2, 3 of 3 to the caller, if it asked for progress;
/// whether it did.
async fn count_to_three(context: &RequestContext<RoleServer>) -> bool {
    let Some(token) = context.meta.get_progress_token() else {
        return false;
    };
    for step in 1..=3 {
        let _ = context
            .peer
            .notify_progress(
                ProgressNotificationParam::new(token.clone(), f64::from(step)).with_total(3.0),
            )
            .await;
    }
    true
}

async fn serve() -> (String, tokio::task::JoinHandle<()>) {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(false);
    let service = StreamableHttpService::new(
        || Ok(Streaming),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let url = format!(
        "http://{}/mcp",
        listener.local_addr().expect("has an address")
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

#[derive(Default)]
struct Logs(Mutex<Vec<Value>>);

impl LogSink for Logs {
    fn log(&self, _server: &str, message: LoggingMessageNotificationParam) -> BoxFuture<'_, ()> {
        if let Ok(mut seen) = self.0.lock() {
            seen.push(message.data);
        }
        Box::pin(async {})
    }
}

async fn connected(url: &str) -> Toolset {
    let toolset = connect(
        vec![McpServerConfig::streamable_http("sx", url)],
        ConnectOptions::default(),
    )
    .await
    .expect("wiring is fine");
    assert!(
        toolset.diagnostics().is_empty(),
        "{:?}",
        toolset.diagnostics()
    );
    toolset
}

fn text(result: &portcullis_catalog::ToolResult) -> String {
    result.content[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_answer_is_read_and_its_logs_handed_over_first() {
    let (url, server) = serve().await;
    let toolset = connected(&url).await;
    let logs = Arc::new(Logs::default());
    toolset.passthrough().route_logs(logs.clone());
    for round in 0..5 {
        let result = toolset
            .call(
                "echo",
                Some(json!({"message": "hello"})),
                &CallContext::default(),
            )
            .await
            .expect("the tool answers");
        assert_eq!(text(&result), "hello", "round {round}");
        let seen = std::mem::take(&mut *logs.0.lock().expect("not poisoned"));
        assert_eq!(seen, [json!("echoing")], "round {round}");
    }
    let error = toolset
        .call("fail", Some(json!({})), &CallContext::default())
        .await
        .expect_err("the server refuses");
    assert!(
        matches!(&error, CallError::Protocol { message, .. } if message == "no such luck"),
        "{error:?}"
    );
    toolset.close().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_wants_progress_still_gets_it() {
    let (url, server) = serve().await;
    let toolset = connected(&url).await;
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let result = toolset
        .call(
            "count",
            Some(json!({})),
            &CallContext::default().with_progress(sender),
        )
        .await
        .expect("the tool answers");
    assert_eq!(text(&result), "counted");
    let mut steps = Vec::new();
    while let Ok(progress) = receiver.try_recv() {
        steps.push(progress.progress);
    }
    assert_eq!(steps, [1.0, 2.0, 3.0]);
    toolset.close().await;
    server.abort();
}

/// What the session server saw.
#[derive(Default)]
struct Sessions {
    /// Each `tools/call`: its JSON-RPC id and the `Mcp-Session-Id` it came with.
    calls: Mutex<Vec<(Value, Option<String>)>>,
    /// Calls of `wait` that reached the tool.
    waiting: tokio::sync::Notify,
    /// Calls whose cancellation reached the tool.
    cancelled: tokio::sync::Notify,
}

/// How many pings the `pings` tool sends during its call.
const PINGS: usize = 500;

/// An initialize-era session server: it knows nothing of 2026-07-28.
#[derive(Clone)]
struct Sessioned(Arc<Sessions>);

impl ServerHandler for Sessioned {
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
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
        read_only_tools(&["echo", "ask", "wait", "pings", "count"])
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = match request.name.as_ref() {
            "ask" => {
                let params: ElicitRequestParams = serde_json::from_value(json!({
                    "mode": "form", "message": "Your name?", "requestedSchema": {
                        "type": "object", "properties": {"name": {"type": "string"}}}
                }))
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                let asked = ServerRequest::ElicitRequest(rmcp::model::ElicitRequest::new(params));
                match context.peer.send_request(asked).await {
                    Ok(ClientResult::ElicitResult(answer)) => format!(
                        "hello {}",
                        answer
                            .content
                            .as_ref()
                            .and_then(|c| c["name"].as_str())
                            .unwrap_or("nobody")
                    ),
                    Ok(other) => format!("not asked: answered {other:?}"),
                    Err(error) => format!("not asked: {error}"),
                }
            }
            "pings" => {
                // A server that asks again and again during one call.
                let pings = (0..PINGS).map(|_| {
                    let peer = context.peer.clone();
                    async move {
                        let ping = ServerRequest::PingRequest(Default::default());
                        matches!(
                            peer.send_request(ping).await,
                            Ok(ClientResult::EmptyResult(_))
                        )
                    }
                });
                let answered = futures::future::join_all(pings).await;
                format!("{} answered", answered.into_iter().filter(|a| *a).count())
            }
            "count" => {
                if !count_to_three(&context).await {
                    return Err(ErrorData::invalid_params("no progress token", None));
                }
                "counted".to_owned()
            }
            "wait" => {
                self.0.waiting.notify_one();
                context.ct.cancelled().await;
                self.0.cancelled.notify_one();
                return Err(ErrorData::internal_error("cancelled", None));
            }
            _ => request
                .arguments
                .as_ref()
                .and_then(|a| a.get("message"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// The same server as rmcp serves a 2025-era handler by default: it
/// answers `server/discover` for the versions it speaks, so rmcp's client
/// takes the discover lifecycle at 2025-11-25 (metadata on every request,
/// no session) instead of the handshake.
#[derive(Clone)]
struct Discovered(Sessioned);

impl ServerHandler for Discovered {
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        self.0.supported_protocol_versions()
    }

    fn get_info(&self) -> ServerConfig {
        self.0.get_info()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.0.list_tools(request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.0.call_tool(request, context).await
    }
}

/// Serves [`Sessioned`] with sessions and event-stream answers, noting
/// every `tools/call` on its way in.
async fn serve_sessions(seen: Arc<Sessions>) -> (String, tokio::task::JoinHandle<()>) {
    serve_legacy(seen.clone(), Sessioned(seen)).await
}

/// Serves `handler` as [`serve_sessions`] does.
async fn serve_legacy<H: ServerHandler + Clone>(
    seen: Arc<Sessions>,
    handler: H,
) -> (String, tokio::task::JoinHandle<()>) {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_json_response(false);
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let note = move |request: axum::extract::Request, next: axum::middleware::Next| {
        let seen = seen.clone();
        async move {
            let (parts, body) = request.into_parts();
            let bytes = axum::body::to_bytes(body, 1 << 20)
                .await
                .unwrap_or_default();
            if let Ok(message) = serde_json::from_slice::<Value>(&bytes)
                && message["method"] == "tools/call"
            {
                let session = parts
                    .headers
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                seen.calls
                    .lock()
                    .expect("not poisoned")
                    .push((message["id"].clone(), session));
            }
            next.run(axum::extract::Request::from_parts(parts, bytes.into()))
                .await
        }
    };
    let app = axum::Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn(note));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let url = format!(
        "http://{}/mcp",
        listener.local_addr().expect("has an address")
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

/// The ids rmcp's own requests never reach: the direct path numbers its
/// requests from here.
const DIRECT_IDS: u64 = 1 << 48;

fn last_call(seen: &Sessions) -> (Value, Option<String>) {
    seen.calls
        .lock()
        .expect("not poisoned")
        .last()
        .cloned()
        .expect("a call reached the server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_calls_go_direct_into_rmcps_session_and_survive_its_loss() {
    let seen = Arc::new(Sessions::default());
    let (url, server) = serve_sessions(seen.clone()).await;
    let toolset = connected(&url).await;
    let call = |message: &'static str| {
        let toolset = &toolset;
        async move {
            toolset
                .call(
                    "echo",
                    Some(json!({"message": message})),
                    &CallContext::default(),
                )
                .await
                .expect("the tool answers")
        }
    };
    assert_eq!(text(&call("one").await), "one");
    let (id, first_session) = last_call(&seen);
    assert!(
        id.as_u64() >= Some(DIRECT_IDS),
        "went through rmcp: id {id}"
    );
    let first_session = first_session.expect("the call came in the session");

    // The server forgets the session: the next call is still answered
    // (rmcp opens a new session), and the one after goes direct into it.
    let ended = reqwest::Client::new()
        .delete(&url)
        .header("mcp-session-id", &first_session)
        .send()
        .await
        .expect("the server answers");
    assert!(ended.status().is_success(), "{}", ended.status());
    assert_eq!(text(&call("two").await), "two");
    assert_eq!(text(&call("three").await), "three");
    let (id, session) = last_call(&seen);
    assert!(
        id.as_u64() >= Some(DIRECT_IDS),
        "went through rmcp: id {id}"
    );
    let session = session.expect("the call came in a session");
    assert_ne!(
        session, first_session,
        "the call went into the dropped session"
    );
    toolset.close().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_session_call_is_cancelled_on_the_server() {
    let seen = Arc::new(Sessions::default());
    let (url, server) = serve_sessions(seen.clone()).await;
    let toolset = connected(&url).await;
    let cancel = tokio_util::sync::CancellationToken::new();
    let context = CallContext::default().with_cancel(cancel.clone());
    let call = toolset.call("wait", Some(json!({})), &context);
    let cancelled = async {
        // Cancelled once the tool runs: a cancellation that reaches the
        // server before it has taken the call in (the POST seen, the
        // request not yet registered) may be ignored, as MCP allows.
        tokio::time::timeout(std::time::Duration::from_secs(10), seen.waiting.notified())
            .await
            .expect("the server's tool started");
        let (id, _) = last_call(&seen);
        assert!(
            id.as_u64() >= Some(DIRECT_IDS),
            "went through rmcp: id {id}"
        );
        cancel.cancel();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            seen.cancelled.notified(),
        )
        .await
        .expect("the server's tool saw its cancellation");
    };
    let (answer, ()) = tokio::join!(call, cancelled);
    assert!(
        matches!(answer, Err(CallError::Cancelled { .. })),
        "{answer:?}"
    );
    toolset.close().await;
    server.abort();
}

/// A calling client that answers every elicitation with a name.
struct Names(Mutex<Vec<String>>);

impl ClientRelay for Names {
    fn capabilities(&self) -> ClientCapabilities {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(Default::default());
        capabilities
    }

    fn request(
        &self,
        request: ServerRequest,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'static, Result<ClientResult, ErrorData>> {
        if let ServerRequest::ElicitRequest(asked) = &request
            && let Ok(mut seen) = self.0.lock()
        {
            seen.push(
                serde_json::to_value(&asked.params).expect("serialisable")["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        Box::pin(async {
            serde_json::from_value::<ElicitResult>(
                json!({"action": "accept", "content": {"name": "Ada"}}),
            )
            .map(ClientResult::ElicitResult)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_servers_request_during_a_call_is_answered_by_the_calls_client() {
    let seen = Arc::new(Sessions::default());
    let (url, server) = serve_sessions(seen.clone()).await;
    let toolset = connected(&url).await;
    let names = Arc::new(Names(Mutex::default()));
    let result = toolset
        .call(
            "ask",
            Some(json!({})),
            &CallContext::default().with_relay(names.clone()),
        )
        .await
        .expect("the tool answers");
    assert_eq!(text(&result), "hello Ada");
    assert_eq!(*names.0.lock().expect("not poisoned"), ["Your name?"]);
    let (id, _) = last_call(&seen);
    assert!(
        id.as_u64() >= Some(DIRECT_IDS),
        "went through rmcp: id {id}"
    );

    // A call made without a client: the server is refused and says so.
    let result = toolset
        .call("ask", Some(json!({})), &CallContext::default())
        .await
        .expect("the tool answers");
    assert!(
        text(&result).starts_with("not asked:")
            && text(&result).contains("not made by an MCP client"),
        "{}",
        text(&result)
    );
    toolset.close().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_server_that_pings_all_through_a_call_gets_every_ping_answered() {
    let seen = Arc::new(Sessions::default());
    let (url, server) = serve_sessions(seen.clone()).await;
    let toolset = connected(&url).await;
    let result = toolset
        .call("pings", Some(json!({})), &CallContext::default())
        .await
        .expect("the tool answers");
    assert_eq!(text(&result), format!("{PINGS} answered"));
    let (id, _) = last_call(&seen);
    assert!(
        id.as_u64() >= Some(DIRECT_IDS),
        "went through rmcp: id {id}"
    );
    // The connection still serves calls.
    let result = toolset
        .call(
            "echo",
            Some(json!({"message": "still here"})),
            &CallContext::default(),
        )
        .await
        .expect("the tool answers");
    assert_eq!(text(&result), "still here");
    toolset.close().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_server_reached_by_discover_is_called_with_metadata_not_a_session() {
    let seen = Arc::new(Sessions::default());
    let (url, server) = serve_legacy(seen.clone(), Discovered(Sessioned(seen.clone()))).await;
    let toolset = connected(&url).await;
    for message in ["one", "two"] {
        let result = toolset
            .call(
                "echo",
                Some(json!({"message": message})),
                &CallContext::default(),
            )
            .await
            .expect("the tool answers");
        assert_eq!(text(&result), message);
    }
    let (id, session) = last_call(&seen);
    assert!(
        id.as_u64() >= Some(DIRECT_IDS),
        "went through rmcp: id {id}"
    );
    assert_eq!(session, None, "a discovered server has no session");
    toolset.close().await;
    server.abort();
}

/// What a hand-written 2025-era session server answers to everything but
/// `tools/call`: `server/discover` refused as a 2025 SDK refuses it, the
/// handshake (session `s1`), a listing of one `echo` tool, `202` for
/// notifications and replies. `None` for a `tools/call`.
fn handshake_answer(message: &Value, name: &str) -> Option<axum::response::Response> {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let id = message["id"].clone();
    let json = |result: Value| {
        (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::HeaderName::from_static("mcp-session-id"), "s1"),
            ],
            json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
        )
            .into_response()
    };
    Some(match message["method"].as_str() {
        Some("server/discover") => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            json!({"jsonrpc": "2.0", "id": message["id"],
                "error": {"code": -32601, "message": "Method not found"}})
            .to_string(),
        )
            .into_response(),
        Some("initialize") => json(json!({
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": name, "version": "1"}})),
        Some("tools/list") => json(json!({"tools": [{"name": "echo",
            "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}]})),
        Some("tools/call") => return None,
        _ => StatusCode::ACCEPTED.into_response(),
    })
}

/// Serves `app` on a free loopback port: its `/mcp` URL and its task.
async fn listen(app: axum::Router) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let url = format!(
        "http://{}/mcp",
        listener.local_addr().expect("has an address")
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

/// A hostile session server written by hand: a handshake, one tool, and
/// an answer stream for every call that gives an event id, asks for no
/// wait and closes, again on every resumption, never answering.
async fn serve_closing_streams(gets: Arc<AtomicUsize>) -> (String, tokio::task::JoinHandle<()>) {
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::IntoResponse;
    let post = |body: axum::body::Bytes| async move {
        let message: Value = serde_json::from_slice(&body).unwrap_or_default();
        handshake_answer(&message, "closing").unwrap_or_else(|| {
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                "id: 1\nretry: 0\ndata: \n\n",
            )
                .into_response()
        })
    };
    let get = move |headers: HeaderMap| {
        let gets = gets.clone();
        async move {
            if !headers.contains_key("last-event-id") {
                return StatusCode::METHOD_NOT_ALLOWED.into_response();
            }
            let n = gets.fetch_add(1, Ordering::SeqCst) + 2;
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                format!("id: {n}\nretry: 0\ndata: \n\n"),
            )
                .into_response()
        }
    };
    listen(axum::Router::new().route("/mcp", axum::routing::post(post).get(get))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_closes_its_answer_stream_for_ever_is_given_up_on_not_polled() {
    let gets = Arc::new(AtomicUsize::new(0));
    let (url, server) = serve_closing_streams(gets.clone()).await;
    let toolset = connected(&url).await;
    let started = std::time::Instant::now();
    let error = toolset
        .call("echo", Some(json!({})), &CallContext::default())
        .await
        .expect_err("the server never answers");
    assert!(
        matches!(&error, CallError::Protocol { message, .. } if message.contains("without an answer")),
        "{error:?}"
    );
    // Every resumption was tried, and no more: the call's 60 s timeout
    // was not what ended it.
    assert_eq!(gets.load(Ordering::SeqCst), 32);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    toolset.close().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_call_that_wants_progress_goes_direct_and_gets_every_report_first() {
    let seen = Arc::new(Sessions::default());
    let (url, server) = serve_sessions(seen.clone()).await;
    let toolset = connected(&url).await;
    for round in 0..3 {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let result = toolset
            .call(
                "count",
                Some(json!({})),
                &CallContext::default().with_progress(sender),
            )
            .await
            .expect("the tool answers");
        assert_eq!(text(&result), "counted", "round {round}");
        let mut steps = Vec::new();
        while let Ok(progress) = receiver.try_recv() {
            steps.push(progress.progress);
        }
        assert_eq!(steps, [1.0, 2.0, 3.0], "round {round}");
        let (id, _) = last_call(&seen);
        assert!(
            id.as_u64() >= Some(DIRECT_IDS),
            "went through rmcp: id {id}"
        );
    }
    toolset.close().await;
    server.abort();
}

/// What a [`serve_hostile`] server saw of the gateway's replies (POSTed
/// responses to its own requests).
#[derive(Default)]
struct Replies {
    /// Replies that reached the server; each is held open for ever.
    held: AtomicUsize,
    /// Of those, the ones whose request the gateway has not let go of.
    open: Arc<AtomicUsize>,
    /// `notifications/cancelled` that reached the server, held likewise.
    cancels: AtomicUsize,
    /// Of those, the ones the gateway has not let go of.
    cancels_open: Arc<AtomicUsize>,
    /// Every reply, as it came.
    bodies: Mutex<Vec<Value>>,
    /// Take replies (202) instead of holding them.
    take: std::sync::atomic::AtomicBool,
}

/// Counts a held reply as open until the gateway lets go of its request
/// (the server then drops the handler).
struct Held(Arc<AtomicUsize>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Calls `echo` for a client that declared elicitation and never answers,
/// checks the call's own answer, and gives withdrawals a moment to land.
async fn call_with_silent_client(toolset: &Toolset) -> Arc<Silent> {
    let client = Arc::new(Silent::default());
    let result = toolset
        .call(
            "echo",
            Some(json!({})),
            &CallContext::default().with_relay(client.clone()),
        )
        .await
        .expect("the tool answers");
    assert_eq!(text(&result), "done");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    client
}

/// A hostile session server written by hand: a handshake, one tool, and
/// for every call an answer stream of `events` (the text of server
/// messages, one an event; `{id}` in one is the call's id) followed by the
/// call's answer. It never answers a reply POSTed to it (the request hangs).
async fn serve_hostile(
    events: Vec<String>,
    replies: Arc<Replies>,
) -> (String, tokio::task::JoinHandle<()>) {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let events = Arc::new(events);
    let post = move |body: axum::body::Bytes| {
        let (events, replies) = (events.clone(), replies.clone());
        async move {
            let message: Value = serde_json::from_slice(&body).unwrap_or_default();
            let id = message["id"].clone();
            if message.get("method").is_none() {
                replies
                    .bodies
                    .lock()
                    .expect("not poisoned")
                    .push(message.clone());
                if replies.take.load(Ordering::SeqCst) {
                    return StatusCode::ACCEPTED.into_response();
                }
            }
            let (count, open) = if message.get("method").is_none() {
                (&replies.held, &replies.open)
            } else {
                (&replies.cancels, &replies.cancels_open)
            };
            if message.get("method").is_none() || message["method"] == "notifications/cancelled" {
                count.fetch_add(1, Ordering::SeqCst);
                open.fetch_add(1, Ordering::SeqCst);
                let _held = Held(open.clone());
                std::future::pending::<()>().await;
            }
            if let Some(answer) = handshake_answer(&message, "hostile") {
                return answer;
            }
            // A call that never ends: its answer stream stays open.
            if events.is_empty() {
                return (
                    [(header::CONTENT_TYPE, "text/event-stream")],
                    axum::body::Body::from_stream(futures::stream::pending::<
                        Result<axum::body::Bytes, std::io::Error>,
                    >()),
                )
                    .into_response();
            }
            let mut stream = String::new();
            for event in events.iter() {
                stream.push_str(&format!(
                    "data: {}\n\n",
                    event.replace("{id}", &id.to_string())
                ));
            }
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": {
                    "content": [{"type": "text", "text": "done"}]}});
            // The answer a moment later, as a server that went on
            // working would send it.
            let answer = format!("data: {answer}\n\n");
            let body = futures::stream::iter([Ok::<_, std::io::Error>(stream)]).chain(
                futures::stream::once(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    Ok(answer)
                }),
            );
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                axum::body::Body::from_stream(body),
            )
                .into_response()
        }
    };
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(post).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
    );
    listen(app).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_holding_the_cancellation_of_a_timed_out_call_is_let_go() {
    let replies = Arc::new(Replies::default());
    let (url, server) = serve_hostile(Vec::new(), replies.clone()).await;
    let options = ConnectOptions {
        timeout: std::time::Duration::from_secs(1),
        ..ConnectOptions::default()
    };
    let toolset = connect(vec![McpServerConfig::streamable_http("sx", &url)], options)
        .await
        .expect("wiring is fine");
    let error = toolset
        .call("echo", Some(json!({})), &CallContext::default())
        .await
        .expect_err("the server never answers");
    assert!(matches!(error, CallError::Timeout { .. }), "{error:?}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        replies.cancels.load(Ordering::SeqCst),
        1,
        "cancelled on the server"
    );
    // The server never takes it; the gateway lets go of it rather than
    // keep a task and a connection for ever per call that timed out.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert_eq!(
        replies.cancels_open.load(Ordering::SeqCst),
        0,
        "the cancellation still open"
    );
    toolset.close().await;
    server.abort();
}

/// A calling client that declares elicitation and answers nothing: each
/// request waits until it is withdrawn, which is counted.
#[derive(Default)]
struct Silent {
    asked: AtomicUsize,
    withdrawn: Arc<AtomicUsize>,
}

impl ClientRelay for Silent {
    fn capabilities(&self) -> ClientCapabilities {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(Default::default());
        capabilities
    }

    fn request(
        &self,
        _request: ServerRequest,
        cancel: tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'static, Result<ClientResult, ErrorData>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let withdrawn = self.withdrawn.clone();
        Box::pin(async move {
            cancel.cancelled().await;
            withdrawn.fetch_add(1, Ordering::SeqCst);
            Err(ErrorData::internal_error("withdrawn", None))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reusing_a_request_id_cannot_leave_a_request_open_after_the_call() {
    let elicit = |id: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {
            "mode": "form", "message": "?", "requestedSchema": {"type": "object", "properties": {}}}})
        .to_string()
    };
    let events = vec![elicit("dup"), elicit("dup")];
    let (url, server) = serve_hostile(events, Arc::default()).await;
    let toolset = connected(&url).await;
    let client = call_with_silent_client(&toolset).await;
    // Whatever reached the client was withdrawn when the call ended:
    // nothing the server asked outlives the call it asked in.
    let asked = client.asked.load(Ordering::SeqCst);
    assert!(asked >= 1, "the client was asked");
    assert_eq!(client.withdrawn.load(Ordering::SeqCst), asked);
    toolset.close().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_flooding_requests_and_holding_the_replies_gets_a_bounded_number_at_once() {
    let events = (0..300)
        .map(|n| json!({"jsonrpc": "2.0", "id": format!("p{n}"), "method": "ping"}).to_string())
        .collect();
    let replies = Arc::new(Replies::default());
    let (url, server) = serve_hostile(events, replies.clone()).await;
    let options = ConnectOptions {
        timeout: std::time::Duration::from_secs(3),
        ..ConnectOptions::default()
    };
    let toolset = connect(vec![McpServerConfig::streamable_http("sx", &url)], options)
        .await
        .expect("wiring is fine");
    // The call itself may end either way (its replies never get through);
    // what matters is how many replies were open at once.
    let _ = toolset
        .call("echo", Some(json!({})), &CallContext::default())
        .await;
    let held = replies.held.load(Ordering::SeqCst);
    assert!(
        held <= 64,
        "{held} replies were open at once against a server that holds them"
    );
    // And none of them outlives the reply timeout (5 s): a call that ended
    // unanswered still answers the server's requests, but gives up on a
    // server that holds the answers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(8);
    while replies.open.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(replies.open.load(Ordering::SeqCst), 0, "replies still open");
    assert!(replies.held.load(Ordering::SeqCst) <= 64);
    toolset.close().await;
    server.abort();
}

/// A hostile session server written by hand: it holds every direct call
/// (ids from [`DIRECT_IDS`]) for `hold`, then says it does not know the
/// session (404), and never answers the call when rmcp sends it again.
async fn serve_late_404(hold: std::time::Duration) -> (String, tokio::task::JoinHandle<()>) {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let post = move |body: axum::body::Bytes| async move {
        let message: Value = serde_json::from_slice(&body).unwrap_or_default();
        if let Some(answer) = handshake_answer(&message, "late") {
            return answer;
        }
        if message["id"].as_u64() >= Some(DIRECT_IDS) {
            tokio::time::sleep(hold).await;
            return StatusCode::NOT_FOUND.into_response();
        }
        std::future::pending().await
    };
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(post).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
    );
    listen(app).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_loses_the_session_late_does_not_stretch_the_calls_timeout() {
    let timeout = std::time::Duration::from_secs(2);
    let (url, server) = serve_late_404(std::time::Duration::from_millis(1500)).await;
    let options = ConnectOptions {
        timeout,
        ..ConnectOptions::default()
    };
    let toolset = connect(vec![McpServerConfig::streamable_http("sx", &url)], options)
        .await
        .expect("wiring is fine");
    let started = std::time::Instant::now();
    let error = toolset
        .call("echo", Some(json!({})), &CallContext::default())
        .await
        .expect_err("the server never answers");
    let took = started.elapsed();
    assert!(matches!(error, CallError::Timeout { .. }), "{error:?}");
    // The session's loss sends the call through rmcp in what is left of
    // its time, not in a whole new timeout.
    assert!(
        took < timeout + std::time::Duration::from_millis(700),
        "took {took:?}"
    );
    toolset.close().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_request_the_caller_did_not_declare_never_reaches_it() {
    let sampling = json!({"jsonrpc": "2.0", "id": "s", "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
            "maxTokens": 5}});
    let roots = json!({"jsonrpc": "2.0", "id": "r", "method": "roots/list"});
    let custom = json!({"jsonrpc": "2.0", "id": "c", "method": "secrets/read", "params": {}});
    let events = [sampling, roots, custom].map(|e| e.to_string()).to_vec();
    let replies = Arc::new(Replies::default());
    replies.take.store(true, Ordering::SeqCst);
    let (url, server) = serve_hostile(events, replies.clone()).await;
    let toolset = connected(&url).await;
    // It declared elicitation only.
    let client = call_with_silent_client(&toolset).await;
    assert_eq!(
        client.asked.load(Ordering::SeqCst),
        0,
        "the client was asked"
    );
    let mut codes: Vec<(String, i64)> = replies
        .bodies
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|reply| {
            (
                reply["id"].as_str().unwrap_or_default().to_owned(),
                reply["error"]["code"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        [
            ("c".to_owned(), -32601),
            ("r".to_owned(), -32601),
            ("s".to_owned(), -32601)
        ]
    );
    toolset.close().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_request_is_answered_whatever_its_params() {
    // `params` is optional in a JSON-RPC request, and may be an array: a
    // request rmcp's types cannot read is still owed an answer (the server
    // may wait on it), not silence.
    let bare = json!({"jsonrpc": "2.0", "id": "bare", "method": "secrets/read"});
    let with = json!({"jsonrpc": "2.0", "id": "with", "method": "secrets/read", "params": {}});
    let array = json!({"jsonrpc": "2.0", "id": "array", "method": "secrets/read", "params": [1]});
    let known = json!({"jsonrpc": "2.0", "id": 7, "method": "elicitation/create", "params": []});
    let events = [bare, with, array, known].map(|e| e.to_string()).to_vec();
    let replies = Arc::new(Replies::default());
    replies.take.store(true, Ordering::SeqCst);
    let (url, server) = serve_hostile(events, replies.clone()).await;
    let toolset = connected(&url).await;
    let client = call_with_silent_client(&toolset).await;
    assert_eq!(
        client.asked.load(Ordering::SeqCst),
        0,
        "the client was asked"
    );
    let mut codes: Vec<(String, i64)> = replies
        .bodies
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|reply| {
            (
                reply["id"].to_string(),
                reply["error"]["code"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        [
            ("\"array\"".to_owned(), -32601),
            ("\"bare\"".to_owned(), -32601),
            ("\"with\"".to_owned(), -32601),
            ("7".to_owned(), -32602),
        ]
    );
    toolset.close().await;
    server.abort();
}

/// A hostile session server written by hand whose answer stream for a
/// call carries the answer and then, when `forge`, a forged answer to the
/// next request id and the stream's end, or else nothing more, held open
/// for ever.
async fn serve_streams_after_the_answer(forge: bool) -> (String, tokio::task::JoinHandle<()>) {
    use axum::http::header;
    use axum::response::IntoResponse;
    let post = move |body: axum::body::Bytes| async move {
        let message: Value = serde_json::from_slice(&body).unwrap_or_default();
        handshake_answer(&message, "lingering").unwrap_or_else(|| {
            let id = message["id"].as_u64().unwrap_or_default();
            let text = message["params"]["arguments"]["message"].clone();
            let answer = json!({"jsonrpc": "2.0", "id": id,
                "result": {"content": [{"type": "text", "text": text}]}});
            let forged = json!({"jsonrpc": "2.0", "id": id + 1,
                "result": {"content": [{"type": "text", "text": "forged"}]}});
            let first =
                futures::stream::iter([Ok::<_, std::io::Error>(format!("data: {answer}\n\n"))]);
            let body = if forge {
                axum::body::Body::from_stream(
                    first.chain(futures::stream::iter([Ok(format!("data: {forged}\n\n"))])),
                )
            } else {
                axum::body::Body::from_stream(first.chain(futures::stream::pending()))
            };
            ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
        })
    };
    listen(axum::Router::new().route("/mcp", axum::routing::post(post))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_server_sends_after_a_calls_answer_never_holds_up_or_answers_the_next_call() {
    for forge in [false, true] {
        let (url, server) = serve_streams_after_the_answer(forge).await;
        let toolset = connected(&url).await;
        let started = std::time::Instant::now();
        for round in 0..5 {
            let message = format!("round {round}");
            let result = toolset
                .call(
                    "echo",
                    Some(json!({ "message": message })),
                    &CallContext::default(),
                )
                .await
                .expect("answered");
            // Its own answer, never the one forged for it on the stream
            // of the call before.
            assert_eq!(text(&result), message, "forge: {forge}");
        }
        // No call waited on a stream left open (the call timeout is 60 s).
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        toolset.close().await;
        server.abort();
    }
}
