//! The session path for plain `tools/call`s of initialize-era clients
//! (`src/session_call.rs`), over real loopback HTTP: answers equal to
//! rmcp's own, and what a session gives a call (cancellation by the
//! client, the session's end, the session kept alive by its calls, its
//! requests to the client on the call's stream).
//!
//! A call is sent on a session the session path adopted, which it answers,
//! and on one it never adopted (its `notifications/initialized` was sent
//! without a declared length, so the session path never read it), whose
//! calls rmcp serves.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_server::{CallContext, HttpOptions, HttpServer, ToolError, ToolServer, serve_http};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Notify;

// Only a guard against a hung test, never an assertion about speed.
const HANG: Duration = Duration::from_secs(60);
const VERSION: &str = "2025-11-25";

pub(crate) fn ro(name: &str) -> Tool {
    Tool::new(name).with_annotations(ToolAnnotations::read_only(true))
}

/// Sessions, with a handler that asks its clients through the call's
/// context (as the gateway's does), so every session's plain calls may
/// be answered in front of rmcp.
fn with_sessions() -> HttpOptions {
    HttpOptions {
        legacy_sessions: true,
        client_requests_in_context: true,
        ..HttpOptions::default()
    }
}

async fn serve(builder: portcullis_server::ToolServerBuilder, options: HttpOptions) -> HttpServer {
    serve_http(builder.build().unwrap(), options).await.unwrap()
}

/// A POST of `message` on `session` (none for `initialize`): status,
/// `Mcp-Session-Id`, content type and body, read to the end.
async fn post(
    http: &reqwest::Client,
    server: &HttpServer,
    session: Option<&str>,
    message: &Value,
) -> (StatusCode, Option<String>, String, String) {
    let mut request = http
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(message.to_string());
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", VERSION);
    }
    let response = tokio::time::timeout(HANG, request.send())
        .await
        .unwrap()
        .unwrap();
    let status = response.status();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let id = header("mcp-session-id");
    let content_type = header("content-type").unwrap_or_default();
    (status, id, content_type, response.text().await.unwrap())
}

/// Opens a session of a client declaring `capabilities`; its id, once the
/// server has had a moment to adopt it.
pub(crate) async fn open_session(
    http: &reqwest::Client,
    server: &HttpServer,
    capabilities: Value,
) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": capabilities,
        "clientInfo": {"name": "test", "version": "1"}}});
    let (status, id, _, body) = post(http, server, None, &initialize).await;
    let id = id.unwrap_or_else(|| panic!("no session ({status}): {body}"));
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, ..) = post(http, server, Some(&id), &initialized).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // The handler adopts the session on a task of rmcp's after the `202`;
    // a call sent before that waits for it.
    id
}

/// Opens a session as [`open_session`] does, but one the session path
/// never adopts: its `initialized` goes out without a declared length
/// (chunked), which only rmcp reads, so rmcp serves all its calls.
async fn open_rmcp_session(
    http: &reqwest::Client,
    server: &HttpServer,
    capabilities: Value,
) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": capabilities,
        "clientInfo": {"name": "test", "version": "1"}}});
    let (status, id, _, body) = post(http, server, None, &initialize).await;
    let id = id.unwrap_or_else(|| panic!("no session ({status}): {body}"));
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let chunks = futures::stream::iter([Ok::<_, std::io::Error>(initialized.to_string())]);
    let response = http
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", VERSION)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    tokio::time::sleep(Duration::from_millis(200)).await;
    id
}

fn call(id: u64, name: &str, arguments: Value, progress: bool) -> Value {
    let mut params = json!({"name": name, "arguments": arguments});
    if progress {
        params["_meta"] = json!({"progressToken": format!("p-{id}")});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

fn tools() -> portcullis_server::ToolServerBuilder {
    ToolServer::builder()
        .tool(
            ro("echo").with_input_schema(json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"]
            })),
            |args: Value, _ctx: CallContext| async move {
                Ok::<_, ToolError>(ToolResult::text(args["text"].as_str().unwrap_or_default()))
            },
        )
        .tool(ro("fail"), |_: Value, _ctx: CallContext| async move {
            Err::<ToolResult, _>(ToolError::msg("it broke"))
        })
        .tool(ro("structured"), |_: Value, _ctx: CallContext| async move {
            let mut result = ToolResult::text("listed");
            result.structured_content = Some(json!(["a", "b"]));
            Ok::<_, ToolError>(result)
        })
        .tool(Tool::new("write_thing"), |_: Value, _ctx: CallContext| async move {
            Ok::<_, ToolError>(ToolResult::text("written"))
        })
}

/// Every kind of answer (a result, a tool error, a schema refusal, a
/// non-object structured result, an unknown or withheld tool) is the same
/// on the session path as on rmcp's, with the id, and in the shape of the
/// session's era (no `resultType`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_session_calls_answer_as_rmcp_does() {
    let server = serve(tools(), with_sessions()).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let rmcp_session = open_rmcp_session(&http, &server, json!({})).await;
    let cases = [
        ("echo", json!({"text": "hello"})),
        ("echo", json!({"text": 5})),
        ("fail", json!({})),
        ("structured", json!({})),
        ("missing", json!({})),
        ("write_thing", json!({})),
    ];
    for (n, (name, arguments)) in cases.into_iter().enumerate() {
        let id = 10 + n as u64;
        let direct = post(
            &http,
            &server,
            Some(&session),
            &call(id, name, arguments.clone(), false),
        )
        .await;
        // A progress token the tool never reports on: still plain JSON.
        let direct_token = post(
            &http,
            &server,
            Some(&session),
            &call(id, name, arguments.clone(), true),
        )
        .await;
        let rmcp = post(
            &http,
            &server,
            Some(&rmcp_session),
            &call(id, name, arguments, true),
        )
        .await;
        assert_eq!(direct.0, rmcp.0, "{name}");
        assert_eq!(direct_token.0, rmcp.0, "{name}");
        assert_eq!(direct.2, "application/json", "{name}: {}", direct.3);
        assert_eq!(
            direct_token.2, "application/json",
            "{name}: {}",
            direct_token.3
        );
        assert_eq!(rmcp.2, "application/json", "{name}: {}", rmcp.3);
        let direct: Value = serde_json::from_str(&direct.3).unwrap();
        let direct_token: Value = serde_json::from_str(&direct_token.3).unwrap();
        let rmcp: Value = serde_json::from_str(&rmcp.3).unwrap();
        assert_eq!(direct, rmcp, "{name}");
        assert_eq!(direct_token, rmcp, "{name}");
        assert_eq!(direct["id"], id, "{direct}");
        assert!(direct["result"].get("resultType").is_none(), "{direct}");
    }
    server.close().await;
}

/// A tool that waits for its call's cancellation and counts the calls
/// that saw it.
fn waiting_tool(
    cancelled: Arc<AtomicUsize>,
    started: Arc<Notify>,
) -> portcullis_server::ToolServerBuilder {
    ToolServer::builder().tool(ro("wait"), move |_: Value, ctx: CallContext| {
        let cancelled = cancelled.clone();
        let started = started.clone();
        async move {
            started.notify_one();
            ctx.cancelled().await;
            cancelled.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>(ToolResult::text("stopped"))
        }
    })
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(HANG, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"));
}

/// The client's `notifications/cancelled` reaches a call the session path
/// runs, as it reaches one rmcp runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_call_is_cancelled_by_its_clients_notification() {
    let cancelled = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(Notify::new());
    let server = serve(
        waiting_tool(cancelled.clone(), started.clone()),
        with_sessions(),
    )
    .await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let running = send_call(&http, &server, &session, call(7, "wait", json!({}), false));
    tokio::time::timeout(HANG, started.notified())
        .await
        .unwrap();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "changed my mind"}});
    let (status, ..) = post(&http, &server, Some(&session), &cancel).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    until("the call never saw its cancellation", || {
        cancelled.load(Ordering::SeqCst) == 1
    })
    .await;
    running.abort();
    server.close().await;
}

/// A call goes on when its client drops the request, as a call on rmcp's
/// path does (its answer can be resumed): after the request is gone, the
/// client's cancellation still reaches the running call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_call_outlives_its_dropped_request() {
    let cancelled = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(Notify::new());
    let server = serve(
        waiting_tool(cancelled.clone(), started.clone()),
        with_sessions(),
    )
    .await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let running = send_call(&http, &server, &session, call(8, "wait", json!({}), false));
    tokio::time::timeout(HANG, started.notified())
        .await
        .unwrap();
    // The client goes away; the server notices and drops the request.
    running.abort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(cancelled.load(Ordering::SeqCst), 0);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 8, "reason": "changed my mind"}});
    let (status, ..) = post(&http, &server, Some(&session), &cancel).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(
        soon(|| cancelled.load(Ordering::SeqCst) == 1).await,
        "the call ended with its request"
    );
    server.close().await;
}

/// Closing a session (`DELETE`) cancels the calls it has in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_cancels_its_calls_in_flight() {
    let cancelled = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(Notify::new());
    let server = serve(
        waiting_tool(cancelled.clone(), started.clone()),
        with_sessions(),
    )
    .await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let running = send_call(&http, &server, &session, call(8, "wait", json!({}), false));
    tokio::time::timeout(HANG, started.notified())
        .await
        .unwrap();
    let closed = http
        .delete(server.url())
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", VERSION)
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    until("the call outlived its session", || {
        cancelled.load(Ordering::SeqCst) == 1
    })
    .await;
    running.abort();
    server.close().await;
}

/// A session whose client only calls tools stays open while it does:
/// rmcp's idle timer hears of calls it never sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_busy_with_calls_is_not_closed_as_idle() {
    let options = HttpOptions {
        session_idle_timeout: Some(Duration::from_millis(800)),
        ..with_sessions()
    };
    let server = serve(tools(), options).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    // Calls for three idle timeouts, never a gap of one.
    let until = tokio::time::Instant::now() + Duration::from_millis(2400);
    let mut id = 100;
    while tokio::time::Instant::now() < until {
        let (status, _, _, body) = post(
            &http,
            &server,
            Some(&session),
            &call(id, "echo", json!({"text": "x"}), false),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "call {id}: {body}");
        id += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let (status, _, _, body) = post(&http, &server, Some(&session), &list).await;
    assert_eq!(status, StatusCode::OK, "the session was closed: {body}");
    server.close().await;
}

/// A client that declared sampling, elicitation or roots takes the
/// direct path too; its calls that ask nothing are answered plain JSON,
/// as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capable_clients_calls_are_answered_plain() {
    let server = serve(tools(), with_sessions()).await;
    let http = reqwest::Client::new();
    for capabilities in [
        json!({"sampling": {}}),
        json!({"elicitation": {}}),
        json!({"roots": {"listChanged": true}}),
    ] {
        let session = open_session(&http, &server, capabilities.clone()).await;
        let (status, _, content_type, body) = post(
            &http,
            &server,
            Some(&session),
            &call(1, "echo", json!({"text": "hi"}), false),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{capabilities}: {body}");
        assert_eq!(content_type, "application/json", "{capabilities}");
        assert!(body.contains("hi"), "{body}");
    }
    server.close().await;
}

/// A client that refuses JSON (`q=0`) is answered as rmcp answers it,
/// never with JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_call_refusing_json_is_refused_as_before() {
    let server = serve(tools(), with_sessions()).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let response = http
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json;q=0, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", VERSION)
        .body(call(3, "echo", json!({"text": "hi"}), false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_ACCEPTABLE);
    server.close().await;
}

/// A plain call on `session`, sent on a task of its own (its answer is
/// not read).
fn send_call(
    http: &reqwest::Client,
    server: &HttpServer,
    session: &str,
    message: Value,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let (http, url, session) = (http.clone(), server.url(), session.to_owned());
    tokio::spawn(async move {
        http.post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", VERSION)
            .body(message.to_string())
            .send()
            .await
    })
}

/// Waits a few seconds at most for `done` (a failure here is a missing
/// effect, so it should not cost the minute `until` allows).
async fn soon(done: impl Fn() -> bool) -> bool {
    for _ in 0..300 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done()
}

/// A client saying `initialized` again does not unhook the calls it has
/// in flight: closing the session still cancels them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_initialized_leaves_calls_in_flight_cancellable() {
    let cancelled = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(Notify::new());
    let server = serve(
        waiting_tool(cancelled.clone(), started.clone()),
        with_sessions(),
    )
    .await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let running = send_call(&http, &server, &session, call(7, "wait", json!({}), false));
    tokio::time::timeout(HANG, started.notified())
        .await
        .unwrap();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, ..) = post(&http, &server, Some(&session), &initialized).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let closed = http
        .delete(server.url())
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", VERSION)
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    assert!(
        soon(|| cancelled.load(Ordering::SeqCst) == 1).await,
        "the call outlived its session"
    );
    running.abort();
    server.close().await;
}

/// A session that ends on its own (idle) cancels its calls in flight:
/// rmcp closes it through the session table once its service ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ending_idle_cancels_its_calls_in_flight() {
    let cancelled = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(Notify::new());
    let options = HttpOptions {
        session_idle_timeout: Some(Duration::from_millis(600)),
        ..with_sessions()
    };
    let server = serve(waiting_tool(cancelled.clone(), started.clone()), options).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let running = send_call(&http, &server, &session, call(7, "wait", json!({}), false));
    tokio::time::timeout(HANG, started.notified())
        .await
        .unwrap();
    assert!(
        soon(|| cancelled.load(Ordering::SeqCst) == 1).await,
        "the call outlived its idle session"
    );
    running.abort();
    server.close().await;
}

/// Calls `slow` (id 9), which outlives a keep-alive interval, reads its
/// stream up to the event id and goes away; the id.
async fn streamed_call_event_id(
    http: &reqwest::Client,
    server: &HttpServer,
    session: &str,
) -> String {
    streamed_call(http, server, session, 9).await.0
}

/// Calls `slow` (id `id`), which outlives a keep-alive interval, and reads
/// its stream up to the event id: the id, and the rest of the stream.
async fn streamed_call(
    http: &reqwest::Client,
    server: &HttpServer,
    session: &str,
    id: u64,
) -> (
    String,
    impl futures::Stream<Item = reqwest::Result<bytes::Bytes>>,
) {
    use futures::StreamExt as _;
    let response = send_call(http, server, session, call(id, "slow", json!({}), false))
        .await
        .unwrap()
        .unwrap();
    let mut body = Box::pin(response.bytes_stream());
    let mut seen = String::new();
    while !seen.contains("id:") {
        let chunk = tokio::time::timeout(HANG, body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let id = seen
        .lines()
        .find_map(|l| l.strip_prefix("id:"))
        .unwrap()
        .trim()
        .to_owned();
    (id, body)
}

/// Resumes the stream whose last event was `last_event_id` with a `GET`:
/// its status and body.
async fn resume_after(
    http: &reqwest::Client,
    server: &HttpServer,
    session: &str,
    last_event_id: &str,
) -> (StatusCode, String) {
    let resumed = http
        .get(server.url())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", VERSION)
        .header("last-event-id", last_event_id)
        .send()
        .await
        .unwrap();
    let status = resumed.status();
    let text = tokio::time::timeout(HANG, resumed.text())
        .await
        .unwrap()
        .unwrap_or_default();
    (status, text)
}

/// A tool `slow` that answers "late answer" after `delay`.
pub(crate) fn slow_tool(delay: Duration) -> portcullis_server::ToolServerBuilder {
    ToolServer::builder().tool(ro("slow"), move |_: Value, _ctx: CallContext| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, ToolError>(ToolResult::text("late answer"))
    })
}

/// A streamed answer written to a connection whose client no longer reads
/// it (it died without the server noticing) is not lost: as on rmcp's
/// path, which keeps a finished stream's events for a while, a `GET` with
/// the stream's `Last-Event-ID` still gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_written_to_a_dead_connection_can_still_be_resumed() {
    let builder = slow_tool(Duration::from_millis(300));
    let options = HttpOptions {
        keep_alive: Some(Duration::from_millis(100)),
        ..with_sessions()
    };
    let server = serve(builder, options).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let (last_event_id, unread) = streamed_call(&http, &server, &session, 9).await;
    // The answer goes out on the connection while the client reads nothing
    // more of it; then the connection is gone.
    tokio::time::sleep(Duration::from_millis(800)).await;
    drop(unread);
    let (status, text) = resume_after(&http, &server, &session, &last_event_id).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains("late answer"), "{text}");
    // Resumed again (that answer too may have been lost): still there.
    let (status, text) = resume_after(&http, &server, &session, &last_event_id).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains("late answer"), "{text}");
    server.close().await;
}

/// Answers kept for resumption stay bounded per session without costing a
/// new call its resumption: once the session holds its most, a new long
/// call's stream makes room by forgetting an answer already written out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_answers_make_room_for_a_new_calls_resumption() {
    use futures::StreamExt as _;
    let builder = slow_tool(Duration::from_millis(150));
    let options = HttpOptions {
        keep_alive: Some(Duration::from_millis(50)),
        ..with_sessions()
    };
    let server = serve(builder, options).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    // More long calls than a session keeps answers of, each read to its end.
    for id in 1..=20 {
        let (_, rest) = streamed_call(&http, &server, &session, id).await;
        let rest: Vec<_> = rest.collect().await;
        let text: String = rest
            .into_iter()
            .map(|chunk| String::from_utf8_lossy(&chunk.unwrap()).into_owned())
            .collect();
        assert!(text.contains("late answer"), "call {id}: {text}");
    }
    // The next one's client goes away before its answer: it can resume.
    let last_event_id = streamed_call_event_id(&http, &server, &session).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (status, text) = resume_after(&http, &server, &session, &last_event_id).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains("late answer"), "{text}");
    server.close().await;
}

/// A parked answer is not served once its session has ended (idle): the
/// `GET` resuming it is answered as rmcp answers any request on an ended
/// session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_answer_is_not_served_after_its_session_ended() {
    let builder = slow_tool(Duration::from_millis(400));
    let options = HttpOptions {
        keep_alive: Some(Duration::from_millis(100)),
        session_idle_timeout: Some(Duration::from_millis(800)),
        ..with_sessions()
    };
    let server = serve(builder, options).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    // The client goes away; the answer is parked; the session then ends.
    let last_event_id = streamed_call_event_id(&http, &server, &session).await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let resumed = http
        .get(server.url())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", VERSION)
        .header("last-event-id", &last_event_id)
        .send()
        .await
        .unwrap();
    let status = resumed.status();
    let text = tokio::time::timeout(Duration::from_secs(5), resumed.text())
        .await
        .map(Result::unwrap_or_default)
        .unwrap_or_default();
    assert!(
        !text.contains("late answer"),
        "an ended session's answer was served ({status}): {text}"
    );
    assert_ne!(status, StatusCode::OK, "{text}");
    server.close().await;
}

/// A `GET` resuming a parked answer is held to what rmcp holds any `GET`
/// to: an `Accept` naming event streams (else `406`) and a known
/// `MCP-Protocol-Version` (else `400`); only then is the answer served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_a_parked_answer_checks_accept_and_version_as_rmcp_does() {
    let builder = slow_tool(Duration::from_millis(300));
    let options = HttpOptions {
        keep_alive: Some(Duration::from_millis(100)),
        ..with_sessions()
    };
    let server = serve(builder, options).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let last_event_id = streamed_call_event_id(&http, &server, &session).await;
    let resume = |accept: &'static str, version: &'static str| {
        http.get(server.url())
            .header("accept", accept)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", version)
            .header("last-event-id", &last_event_id)
            .send()
    };
    let wrong_accept = resume("application/json", VERSION).await.unwrap();
    assert_eq!(wrong_accept.status(), StatusCode::NOT_ACCEPTABLE);
    let wrong_version = resume("text/event-stream", "1999-01-01").await.unwrap();
    assert_eq!(wrong_version.status(), StatusCode::BAD_REQUEST);
    let right = resume("text/event-stream", VERSION).await.unwrap();
    assert_eq!(right.status(), StatusCode::OK);
    let text = tokio::time::timeout(HANG, right.text())
        .await
        .unwrap()
        .unwrap();
    assert!(text.contains("late answer"), "{text}");
    server.close().await;
}

/// The server-sent events of a streamed answer, one JSON-RPC message at a
/// time, with their ids.
struct Events {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl Events {
    fn new(response: reqwest::Response) -> Self {
        Events {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// The next event carrying a message: its id (if any) and the message;
    /// `None` at the end of the stream.
    async fn next(&mut self) -> Option<(Option<String>, Value)> {
        use futures::StreamExt as _;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("id:") {
                        id = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim());
                    }
                }
                if !data.is_empty() {
                    return Some((id, serde_json::from_str(&data).unwrap()));
                }
            }
            let chunk = tokio::time::timeout(HANG, self.body.next())
                .await
                .unwrap()?;
            self.buffer
                .push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        }
    }

    /// The next message, which must be there.
    async fn message(&mut self) -> (Option<String>, Value) {
        self.next().await.expect("the stream ended early")
    }
}

/// How the `ask` tool asks: through the call's own requests when the
/// server answers the call in front of rmcp, through the session's peer
/// when rmcp serves it (rmcp routes it onto the call's stream).
async fn ask_client(
    ctx: &CallContext,
    request: rmcp::model::ServerRequest,
) -> Result<rmcp::model::ClientResult, rmcp::service::ServiceError> {
    match ctx.client_requests() {
        Some(direct) => direct.send(request, None).await,
        None => ctx.peer().unwrap().send_request(request).await,
    }
}

/// What the `ask` tool's question came to (counted by the tests).
#[derive(Default)]
struct Asking {
    failed: AtomicUsize,
    started: Notify,
}

/// Tools that ask their client during the call: `ask` elicits a name and
/// answers with what came back (the answer, or the client's error); `ask_briefly`
/// gives up on its question after a moment.
fn asking_tools(asking: Arc<Asking>) -> portcullis_server::ToolServerBuilder {
    let briefly = asking.clone();
    tools()
        .tool(ro("ask"), move |_: Value, ctx: CallContext| {
            let asking = asking.clone();
            async move {
                let params: rmcp::model::ElicitRequestParams = serde_json::from_value(json!({
                    "mode": "form", "message": "Your name?", "requestedSchema": {
                        "type": "object", "properties": {"name": {"type": "string"}}}
                }))
                .unwrap();
                let request = rmcp::model::ServerRequest::ElicitRequest(
                    rmcp::model::ElicitRequest::new(params),
                );
                asking.started.notify_one();
                let text = match ask_client(&ctx, request).await {
                    Ok(answer) => format!("answered: {}", serde_json::to_value(answer).unwrap()),
                    Err(rmcp::service::ServiceError::McpError(error)) => {
                        format!("refused: {} {}", error.code.0, error.message)
                    }
                    Err(error) => {
                        asking.failed.fetch_add(1, Ordering::SeqCst);
                        format!("failed: {error}")
                    }
                };
                Ok::<_, ToolError>(ToolResult::text(text))
            }
        })
        .tool(ro("ask_briefly"), move |_: Value, ctx: CallContext| {
            let asking = briefly.clone();
            async move {
                let request = rmcp::model::ServerRequest::ListRootsRequest(Default::default());
                let direct = ctx.client_requests().unwrap().clone();
                let gave_up =
                    tokio::time::timeout(Duration::from_millis(300), direct.send(request, None))
                        .await
                        .is_err();
                asking.started.notify_one();
                // Long enough for the withdrawal to be read before the
                // answer.
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<_, ToolError>(ToolResult::text(format!("gave up: {gave_up}")))
            }
        })
}

const ELICITATION: &str = r#"{"elicitation": {"form": {}}}"#;

/// A call of `name` on `session`, its answer read as events.
async fn stream_call(
    http: &reqwest::Client,
    server: &HttpServer,
    session: &str,
    message: Value,
) -> Events {
    let response = send_call(http, server, session, message)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(content_type, "text/event-stream");
    Events::new(response)
}

/// The client's JSON-RPC answer `result` to `request`, POSTed on
/// `session`: the HTTP status.
async fn answer(
    http: &reqwest::Client,
    server: &HttpServer,
    session: &str,
    request: &Value,
    result: Value,
) -> StatusCode {
    let message = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
    post(http, server, Some(session), &message).await.0
}

/// Two sessions of a client declaring elicitation: one the session path
/// adopts, one it never does (served by rmcp), to send a call both ways.
async fn capable_sessions(http: &reqwest::Client, server: &HttpServer) -> (String, String) {
    let capabilities: Value = serde_json::from_str(ELICITATION).unwrap();
    let direct = open_session(http, server, capabilities.clone()).await;
    let rmcp = open_rmcp_session(http, server, capabilities).await;
    (direct, rmcp)
}

/// A capable client's session takes the direct path (the request during
/// its call has an id of the session path's, never rmcp's numbers), the
/// request reaches the client on the call's stream, and its POSTed answer
/// (`202`) reaches the tool: the request and the final answer are the
/// same as on rmcp's path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capable_clients_call_asks_it_on_the_calls_stream_as_rmcp_does() {
    let server = serve(asking_tools(Arc::default()), with_sessions()).await;
    let http = reqwest::Client::new();
    let (direct_session, rmcp_session) = capable_sessions(&http, &server).await;
    let mut seen = Vec::new();
    for (session, progress) in [(&direct_session, false), (&rmcp_session, true)] {
        let mut events = stream_call(
            &http,
            &server,
            session,
            call(20, "ask", json!({}), progress),
        )
        .await;
        let (_, request) = events.message().await;
        assert_eq!(request["method"], "elicitation/create", "{request}");
        let status = answer(
            &http,
            &server,
            session,
            &request,
            json!({"action": "accept", "content": {"name": "Ada"}}),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let (_, response) = events.message().await;
        assert_eq!(response["id"], 20, "{response}");
        assert!(events.next().await.is_none(), "the stream went on");
        seen.push((request, response));
    }
    let (direct, rmcp) = (&seen[0], &seen[1]);
    let direct_id = direct.0["id"].as_str().unwrap_or_default();
    assert!(direct_id.starts_with("portcullis-"), "{}", direct.0);
    assert!(rmcp.0["id"].is_number(), "rmcp's own request: {}", rmcp.0);
    // rmcp gives each request it sends a progress token of its own; the
    // session path listens for no progress, so names none.
    let mut rmcp_params = rmcp.0["params"].clone();
    assert!(
        rmcp_params["_meta"]["progressToken"].is_number(),
        "{rmcp_params}"
    );
    rmcp_params.as_object_mut().unwrap().remove("_meta");
    assert_eq!(direct.0["params"], rmcp_params);
    assert_eq!(direct.1, rmcp.1);
    let text = direct.1["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"Ada\""), "{text}");
    server.close().await;
}

/// A client's first call, sent the moment its `notifications/initialized`
/// is answered, takes the session path: it does not race the session's
/// adoption (which the handler does on a task of rmcp's) into rmcp's path.
/// The call can tell which path it is on: only the session path gives a
/// capable client's call its own way to ask it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_call_right_after_initialized_takes_the_session_path() {
    let builder =
        ToolServer::builder().tool(ro("which"), |_: Value, ctx: CallContext| async move {
            let path = if ctx.client_requests().is_some() {
                "session path"
            } else {
                "rmcp"
            };
            Ok::<_, ToolError>(ToolResult::text(path))
        });
    let server = serve(builder, with_sessions()).await;
    let http = reqwest::Client::new();
    let capabilities: Value = serde_json::from_str(ELICITATION).unwrap();
    for round in 0..20 {
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": capabilities,
            "clientInfo": {"name": "test", "version": "1"}}});
        let (_, id, _, body) = post(&http, &server, None, &initialize).await;
        let session = id.unwrap_or_else(|| panic!("no session: {body}"));
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let (status, ..) = post(&http, &server, Some(&session), &initialized).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let (status, _, _, body) = post(
            &http,
            &server,
            Some(&session),
            &call(1, "which", json!({}), false),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        let text = answer["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("session path"), "round {round}: {answer}");
    }
    server.close().await;
}

/// Without `client_requests_in_context` (the default: a library handler
/// may ask through the session's peer, which only rmcp can put on the
/// call's stream) a capable client's calls stay on rmcp's path: the
/// request during the call is rmcp's own, and the call completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_opt_in_a_capable_clients_calls_stay_on_rmcps_path() {
    let options = HttpOptions {
        legacy_sessions: true,
        ..HttpOptions::default()
    };
    let server = serve(asking_tools(Arc::default()), options).await;
    let http = reqwest::Client::new();
    let capabilities: Value = serde_json::from_str(ELICITATION).unwrap();
    let session = open_session(&http, &server, capabilities).await;
    let mut events = stream_call(&http, &server, &session, call(22, "ask", json!({}), false)).await;
    let (_, request) = events.message().await;
    assert!(request["id"].is_number(), "not rmcp's request: {request}");
    let status = answer(
        &http,
        &server,
        &session,
        &request,
        json!({"action": "accept", "content": {"name": "Ada"}}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, response) = events.message().await;
    assert_eq!(response["id"], 22, "{response}");
    server.close().await;
}

/// The client's JSON-RPC error answer reaches the tool as it is, as on
/// rmcp's path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_error_answer_reaches_the_tool_as_on_rmcps_path() {
    let server = serve(asking_tools(Arc::default()), with_sessions()).await;
    let http = reqwest::Client::new();
    let (direct_session, rmcp_session) = capable_sessions(&http, &server).await;
    let mut answers = Vec::new();
    for (session, progress) in [(&direct_session, false), (&rmcp_session, true)] {
        let mut events = stream_call(
            &http,
            &server,
            session,
            call(21, "ask", json!({}), progress),
        )
        .await;
        let (_, request) = events.message().await;
        let error = json!({"jsonrpc": "2.0", "id": request["id"],
            "error": {"code": -32601, "message": "no forms here"}});
        let (status, ..) = post(&http, &server, Some(session), &error).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        answers.push(events.message().await.1);
    }
    assert_eq!(answers[0], answers[1]);
    let text = answers[0]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\nrefused: -32601 no forms here\n"), "{text}");
    server.close().await;
}

/// Another session cannot answer this session's request, though it names
/// its id: its answer goes to rmcp, which knows no such request, and the
/// call takes its own client's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_session_cannot_answer_a_sessions_request() {
    let server = serve(asking_tools(Arc::default()), with_sessions()).await;
    let http = reqwest::Client::new();
    let capabilities: Value = serde_json::from_str(ELICITATION).unwrap();
    let victim = open_session(&http, &server, capabilities.clone()).await;
    let attacker = open_session(&http, &server, capabilities).await;
    let mut events = stream_call(&http, &server, &victim, call(22, "ask", json!({}), false)).await;
    let (_, request) = events.message().await;
    let forged = json!({"action": "accept", "content": {"name": "Mallory"}});
    let status = answer(&http, &server, &attacker, &request, forged).await;
    assert_eq!(status, StatusCode::ACCEPTED, "as rmcp answers any response");
    // Nor does its own session's answer naming another protocol version:
    // rmcp refuses that one.
    let other_version = json!({"jsonrpc": "2.0", "id": request["id"],
        "result": {"action": "accept", "content": {"name": "Eve"}}});
    let refused = http
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &victim)
        .header("mcp-protocol-version", "1999-01-01")
        .body(other_version.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let own = json!({"action": "accept", "content": {"name": "Ada"}});
    assert_eq!(
        answer(&http, &server, &victim, &request, own).await,
        StatusCode::ACCEPTED
    );
    let (_, response) = events.message().await;
    let text = response["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"Ada\""), "{text}");
    assert!(!text.contains("Mallory") && !text.contains("Eve"), "{text}");
    server.close().await;
}

/// A request still waiting fails when its call is cancelled, and the
/// client hears it withdrawn; one the tool gives up on is withdrawn too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_fails_with_its_call_and_is_withdrawn() {
    let asking = Arc::new(Asking::default());
    let server = serve(asking_tools(asking.clone()), with_sessions()).await;
    let http = reqwest::Client::new();
    let capabilities: Value = serde_json::from_str(ELICITATION).unwrap();
    let session = open_session(&http, &server, capabilities).await;

    let mut events = stream_call(&http, &server, &session, call(23, "ask", json!({}), false)).await;
    let (_, request) = events.message().await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 23}});
    let (status, ..) = post(&http, &server, Some(&session), &cancel).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, withdrawn) = events.message().await;
    assert_eq!(
        withdrawn["method"], "notifications/cancelled",
        "{withdrawn}"
    );
    assert_eq!(withdrawn["params"]["requestId"], request["id"]);
    let (_, response) = events.message().await;
    assert_eq!(response["id"], 23, "{response}");
    assert_eq!(asking.failed.load(Ordering::SeqCst), 1);
    // Its answer, late, is rmcp's now (and goes nowhere).
    let late = json!({"action": "accept", "content": {"name": "Ada"}});
    assert_eq!(
        answer(&http, &server, &session, &request, late).await,
        StatusCode::ACCEPTED
    );

    let roots: Value = json!({"roots": {}});
    let session = open_session(&http, &server, roots).await;
    let mut events = stream_call(
        &http,
        &server,
        &session,
        call(24, "ask_briefly", json!({}), false),
    )
    .await;
    let (_, request) = events.message().await;
    assert_eq!(request["method"], "roots/list", "{request}");
    let (_, withdrawn) = events.message().await;
    assert_eq!(
        withdrawn["method"], "notifications/cancelled",
        "{withdrawn}"
    );
    assert_eq!(withdrawn["params"]["requestId"], request["id"]);
    let (_, response) = events.message().await;
    let text = response["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\ngave up: true\n"), "{text}");
    server.close().await;
}

/// Closing the session fails a request its call is waiting on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_fails_its_waiting_requests() {
    let asking = Arc::new(Asking::default());
    let server = serve(asking_tools(asking.clone()), with_sessions()).await;
    let http = reqwest::Client::new();
    let capabilities: Value = serde_json::from_str(ELICITATION).unwrap();
    let session = open_session(&http, &server, capabilities).await;
    let mut events = stream_call(&http, &server, &session, call(25, "ask", json!({}), false)).await;
    let (_, request) = events.message().await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let closed = http
        .delete(server.url())
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", VERSION)
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    assert!(
        soon(|| asking.failed.load(Ordering::SeqCst) == 1).await,
        "the request outlived its session"
    );
    drop(events);
    server.close().await;
}

/// A streamed call that asked its client can be resumed: from its first
/// event the request comes again (same id), from the request's own event
/// only what follows; the answer POSTed meanwhile completes the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_carrying_a_request_resumes_after_its_last_event() {
    let server = serve(asking_tools(Arc::default()), with_sessions()).await;
    let http = reqwest::Client::new();
    let capabilities: Value = serde_json::from_str(ELICITATION).unwrap();
    let session = open_session(&http, &server, capabilities).await;
    let mut events = stream_call(&http, &server, &session, call(26, "ask", json!({}), false)).await;
    let (request_event, request) = events.message().await;
    let request_event = request_event.expect("the request's event has an id");
    // The client goes away before answering.
    drop(events);
    let resume = |last: String| {
        http.get(server.url())
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", VERSION)
            .header("last-event-id", last)
            .send()
    };
    let (stream, _) = request_event.split_once('.').expect("d<n>.<k>");
    let again = resume(stream.to_owned()).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    let mut again = Events::new(again);
    let (id, replayed) = again.message().await;
    assert_eq!(replayed, request);
    assert_eq!(id.as_deref(), Some(request_event.as_str()));
    drop(again);
    let after = resume(request_event).await.unwrap();
    assert_eq!(after.status(), StatusCode::OK);
    let mut after = Events::new(after);
    let own = json!({"action": "accept", "content": {"name": "Ada"}});
    assert_eq!(
        answer(&http, &server, &session, &request, own).await,
        StatusCode::ACCEPTED
    );
    let (_, response) = after.message().await;
    assert_eq!(response["id"], 26, "{response}");
    let text = response["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"Ada\""), "{text}");
    server.close().await;
}

/// The approval form goes out on the call's stream too: approved, the tool
/// runs; declined, it does not; the same as on rmcp's path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_is_asked_on_the_calls_stream_as_rmcp_asks_it() {
    use portcullis_catalog::policy::{Decision, PolicyRequest};
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let builder = tools()
        .tool(ro("charge"), move |_: Value, ctx: CallContext| {
            let runs = counted.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(ToolResult::text(format!("approved: {}", ctx.approved())))
            }
        })
        .policy(|request: &PolicyRequest<'_>| match request.tool_name {
            "charge" => Decision::Ask { title: None },
            _ => Decision::Allow,
        });
    let server = serve(builder, with_sessions()).await;
    let http = reqwest::Client::new();
    let (direct_session, rmcp_session) = capable_sessions(&http, &server).await;
    let mut seen = Vec::new();
    for (approve, progress) in [(true, false), (true, true), (false, false), (false, true)] {
        let id = 30 + seen.len() as u64;
        // The calls with a token go to the session rmcp serves.
        let session = if progress {
            &rmcp_session
        } else {
            &direct_session
        };
        let mut events = stream_call(
            &http,
            &server,
            session,
            call(id, "charge", json!({}), progress),
        )
        .await;
        let (_, request) = events.message().await;
        assert_eq!(request["method"], "elicitation/create", "{request}");
        let reply = json!({"action": "accept", "content": {"approve": approve}});
        assert_eq!(
            answer(&http, &server, session, &request, reply).await,
            StatusCode::ACCEPTED
        );
        let (_, mut response) = events.message().await;
        response["id"] = json!(null);
        seen.push((request, response));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2, "approved twice");
    for pair in seen.chunks(2) {
        let ((direct, direct_answer), (rmcp, rmcp_answer)) = (&pair[0], &pair[1]);
        assert!(
            direct["id"]
                .as_str()
                .unwrap_or_default()
                .starts_with("portcullis-"),
            "{direct}"
        );
        assert!(rmcp["id"].is_number(), "{rmcp}");
        assert_eq!(direct["params"]["message"], rmcp["params"]["message"]);
        assert_eq!(direct_answer, rmcp_answer);
    }
    let approved = seen[0].1["result"]["content"][0]["text"].as_str().unwrap();
    assert!(approved.contains("approved: true"), "{approved}");
    assert_eq!(seen[2].1["result"]["isError"], true, "{}", seen[2].1);
    server.close().await;
}

/// What the `held` tool waits for and reports (see [`progress_tools`]).
#[derive(Default)]
struct Held {
    release: Notify,
    /// Its context's report sent after its answer was made.
    late: Notify,
}

/// Tools that report progress: `steps` three reports (with a total and a
/// message) before its answer; `held` one, then waits to be released,
/// then a second before its answer, and a third from a clone of its
/// context once the answer is out; `flood` reports far more than a call
/// holds for its client.
fn progress_tools(held: Arc<Held>) -> portcullis_server::ToolServerBuilder {
    tools()
        .tool(ro("steps"), |_: Value, ctx: CallContext| async move {
            for step in 1..=3 {
                let message = format!("step {step}");
                ctx.progress(f64::from(step), Some(3.0), Some(&message))
                    .await;
            }
            Ok::<_, ToolError>(ToolResult::text("stepped"))
        })
        .tool(ro("held"), move |_: Value, ctx: CallContext| {
            let held = held.clone();
            async move {
                ctx.progress(1.0, None, None).await;
                held.release.notified().await;
                ctx.progress(2.0, None, None).await;
                let late = ctx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    late.progress(99.0, None, Some("after the answer")).await;
                    held.late.notify_one();
                });
                Ok::<_, ToolError>(ToolResult::text("released"))
            }
        })
        .tool(ro("flood"), |_: Value, ctx: CallContext| async move {
            let message = "x".repeat(100);
            for step in 1..=5000 {
                ctx.progress(f64::from(step), None, Some(&message)).await;
            }
            Ok::<_, ToolError>(ToolResult::text("flooded"))
        })
}

/// Every event of a streamed answer: ids and messages.
async fn all_events(mut events: Events) -> Vec<(Option<String>, Value)> {
    let mut all = Vec::new();
    while let Some(event) = events.next().await {
        all.push(event);
    }
    all
}

/// A call with a progress token (as rmcp's client sends on every request)
/// is answered in front of rmcp: its reports ride its own stream (with the
/// session path's event ids, `d<n>.<k>`; rmcp's are digits and `/`), in
/// order, before the answer, and they and the answer are the same messages
/// rmcp's path sends for the same call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_rides_the_calls_own_stream_as_on_rmcps_path() {
    let server = serve(progress_tools(Arc::default()), with_sessions()).await;
    let http = reqwest::Client::new();
    let direct_session = open_session(&http, &server, json!({})).await;
    let rmcp_session = open_rmcp_session(&http, &server, json!({})).await;
    let mut seen = Vec::new();
    for session in [&direct_session, &rmcp_session] {
        let events = stream_call(&http, &server, session, call(40, "steps", json!({}), true)).await;
        seen.push(all_events(events).await);
    }
    let (direct, rmcp) = (&seen[0], &seen[1]);
    for (id, message) in direct {
        if message.get("method").is_some() {
            let id = id.as_deref().unwrap_or_default();
            assert!(
                id.starts_with('d'),
                "not the session path's: {id} {message}"
            );
        }
    }
    for (id, _) in rmcp {
        assert!(
            !id.as_deref().unwrap_or_default().starts_with('d'),
            "{rmcp:?}"
        );
    }
    let messages = |events: &[(Option<String>, Value)]| -> Vec<Value> {
        events.iter().map(|(_, message)| message.clone()).collect()
    };
    assert_eq!(messages(direct), messages(rmcp));
    let order: Vec<String> = messages(direct)
        .iter()
        .map(|m| match m["method"].as_str() {
            Some(method) => format!(
                "{method} {} {} {} {}",
                m["params"]["progressToken"],
                m["params"]["progress"],
                m["params"]["total"],
                m["params"]["message"]
            ),
            None => format!("response {}", m["id"]),
        })
        .collect();
    assert_eq!(
        order,
        [
            r#"notifications/progress "p-40" 1.0 3.0 "step 1""#,
            r#"notifications/progress "p-40" 2.0 3.0 "step 2""#,
            r#"notifications/progress "p-40" 3.0 3.0 "step 3""#,
            "response 40",
        ]
    );
    server.close().await;
}

/// A stream carrying progress resumes after its last event seen: from its
/// first event the first report comes again (same id), from a report only
/// what follows; a report the call's context sends once the answer is out
/// never reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_carrying_progress_resumes_after_its_last_event() {
    let held = Arc::new(Held::default());
    // Short keep-alives: a stream whose client went away is noticed (its
    // next write fails) and dropped before the answer comes, which would
    // otherwise be written to it and no longer be held for a resume.
    let options = HttpOptions {
        keep_alive: Some(Duration::from_millis(50)),
        ..with_sessions()
    };
    let server = serve(progress_tools(held.clone()), options).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let mut events = stream_call(&http, &server, &session, call(41, "held", json!({}), true)).await;
    let (first_event, first) = events.message().await;
    let first_event = first_event.expect("the report's event has an id");
    assert_eq!(first["params"]["progress"], 1.0, "{first}");
    // The client goes away mid-call.
    drop(events);
    let resume = |last: String| {
        http.get(server.url())
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", VERSION)
            .header("last-event-id", last)
            .send()
    };
    let (stream, _) = first_event.split_once('.').expect("d<n>.<k>");
    let again = resume(stream.to_owned()).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    let mut again = Events::new(again);
    let (id, replayed) = again.message().await;
    assert_eq!(replayed, first);
    assert_eq!(id.as_deref(), Some(first_event.as_str()));
    drop(again);
    tokio::time::sleep(Duration::from_millis(500)).await;
    held.release.notify_one();
    tokio::time::timeout(HANG, held.late.notified())
        .await
        .expect("the late report was never sent");
    let after = resume(first_event).await.unwrap();
    assert_eq!(after.status(), StatusCode::OK);
    let rest = all_events(Events::new(after)).await;
    let progress: Vec<&Value> = rest
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .map(|(_, m)| &m["params"]["progress"])
        .collect();
    assert_eq!(progress, [&json!(2.0)], "{rest:?}");
    let (_, response) = rest.last().expect("the response");
    assert_eq!(response["id"], 41, "{response}");
    server.close().await;
}

/// A call that reports more progress than a call holds for its client has
/// its first reports sent in order, the rest dropped, and still its
/// answer (the memory a call holds is bounded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_flooding_progress_holds_a_bounded_amount() {
    let server = serve(progress_tools(Arc::default()), with_sessions()).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let events = stream_call(&http, &server, &session, call(42, "flood", json!({}), true)).await;
    let all = all_events(events).await;
    let (_, response) = all.last().expect("the response");
    assert_eq!(response["id"], 42, "{response}");
    let reports = &all[..all.len() - 1];
    let bytes: usize = reports.iter().map(|(_, m)| m.to_string().len()).sum();
    assert!(!reports.is_empty());
    assert!(
        reports.len() < 5000,
        "every report was held: {}",
        reports.len()
    );
    assert!(bytes <= 256 * 1024, "{bytes} bytes of progress held");
    for (n, (_, report)) in reports.iter().enumerate() {
        assert_eq!(report["params"]["progress"], json!(n as f64 + 1.0));
    }
    server.close().await;
}

/// A call whose `_meta` carries a key of the protocol's own besides its
/// progress token is still rmcp's to judge: its reports come with rmcp's
/// event ids, not the session path's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_with_protocol_meta_keys_stays_on_rmcps_path() {
    let server = serve(progress_tools(Arc::default()), with_sessions()).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let mut message = call(43, "steps", json!({}), true);
    message["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("debug");
    let events = all_events(stream_call(&http, &server, &session, message).await).await;
    let reports: Vec<&Option<String>> = events
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(reports.len(), 3, "{events:?}");
    for id in reports {
        let id = id.as_deref().unwrap_or_default();
        assert!(!id.starts_with('d'), "taken in front of rmcp: {id}");
    }
    server.close().await;
}

/// A client cannot answer ahead: a response POSTed for the id the next
/// request will have (the ids are predictable) before it is sent is not
/// kept for it, and a second response to a request already answered
/// changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_answer_a_request_before_it_is_sent_nor_twice() {
    let server = serve(asking_tools(Arc::default()), with_sessions()).await;
    let http = reqwest::Client::new();
    let capabilities: Value = serde_json::from_str(ELICITATION).unwrap();
    let session = open_session(&http, &server, capabilities).await;
    let mut events = stream_call(&http, &server, &session, call(30, "ask", json!({}), false)).await;
    let (_, first) = events.message().await;
    let n: u64 = first["id"]
        .as_str()
        .and_then(|id| id.strip_prefix("portcullis-"))
        .and_then(|n| n.parse().ok())
        .expect("an id of the session path");
    let ada = json!({"action": "accept", "content": {"name": "Ada"}});
    assert_eq!(
        answer(&http, &server, &session, &first, ada).await,
        StatusCode::ACCEPTED
    );
    let (_, response) = events.message().await;
    assert_eq!(response["id"], 30, "{response}");
    // Again, and ahead for the next request's id.
    let eve = json!({"action": "accept", "content": {"name": "Eve"}});
    answer(&http, &server, &session, &first, eve.clone()).await;
    let next = json!({"id": format!("portcullis-{}", n + 1)});
    answer(&http, &server, &session, &next, eve).await;
    let mut events = stream_call(&http, &server, &session, call(31, "ask", json!({}), false)).await;
    let (_, second) = events.message().await;
    assert_eq!(second["id"], next["id"], "{second}");
    // The pre-posted answer did not answer it: the call waits for its own.
    let early = tokio::time::timeout(Duration::from_millis(300), events.next()).await;
    assert!(early.is_err(), "answered ahead: {early:?}");
    let grace = json!({"action": "accept", "content": {"name": "Grace"}});
    answer(&http, &server, &session, &second, grace).await;
    let (_, response) = events.message().await;
    let text = response["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("\"Grace\"") && !text.contains("Eve"),
        "{text}"
    );
    server.close().await;
}
