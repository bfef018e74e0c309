//! What every client sees when the HTTP surface drains (`HttpServer::close`,
//! what the gateway does on SIGINT or SIGTERM), over real loopback HTTP: a
//! call in flight on each path (a session's call answered JSON, the same
//! call streaming progress, its answer resumed, a stateless 2026-07-28
//! call plain and streaming) is answered, and the server stops as soon as
//! it is; a session's standalone `GET` stream ends at once; a new
//! connection is refused; a call still running when the grace runs out
//! gets a JSON-RPC error saying the server is shutting down, never a torn
//! stream or a wait past the deadline.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use portcullis_catalog::ToolResult;
use portcullis_server::{CallContext, HttpOptions, HttpServer, ToolError, serve_http};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::session_call::{open_session, ro, slow_tool};

// Only a guard against a hung test, never an assertion about speed.
const HANG: Duration = Duration::from_secs(60);
/// The grace of the tests whose calls end within it.
const GRACE: Duration = Duration::from_secs(5);
/// How long the slow tools take.
const SLOW: Duration = Duration::from_millis(1500);
/// How long a call is let run before the server is stopped under it.
const UNDER_WAY: Duration = Duration::from_millis(400);
const SESSION_VERSION: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";

/// `slow` (from the session tests) and `slow_steps`, which reports one
/// progress step first, both answering "late answer" after `delay`.
fn tools(delay: Duration) -> portcullis_server::ToolServerBuilder {
    slow_tool(delay).tool(
        ro("slow_steps"),
        move |_: Value, ctx: CallContext| async move {
            ctx.progress(1.0, None, Some("under way")).await;
            tokio::time::sleep(delay).await;
            Ok::<_, ToolError>(ToolResult::text("late answer"))
        },
    )
}

async fn serve(delay: Duration, grace: Duration, keep_alive: Duration) -> HttpServer {
    let options = HttpOptions {
        legacy_sessions: true,
        client_requests_in_context: true,
        shutdown_grace: grace,
        keep_alive: Some(keep_alive),
        ..HttpOptions::default()
    };
    serve_http(tools(delay).build().unwrap(), options)
        .await
        .unwrap()
}

/// Closes `server` on a task of its own: how long the close took.
fn close(server: HttpServer) -> JoinHandle<Duration> {
    tokio::spawn(async move {
        let started = Instant::now();
        server.close().await;
        started.elapsed()
    })
}

/// How a test call is sent.
#[derive(Clone, Copy, Debug)]
enum Era<'a> {
    /// On a 2025-11-25 session.
    Session(&'a str),
    /// Stateless 2026-07-28.
    Modern,
}

/// How a test call asks: for progress reports, and for log messages
/// (which sends it to rmcp's own service rather than the direct paths).
#[derive(Clone, Copy, Debug)]
struct Asks {
    progress: bool,
    logs: bool,
}

const PLAIN: Asks = Asks {
    progress: false,
    logs: false,
};
const PROGRESS: Asks = Asks {
    progress: true,
    logs: false,
};

/// A `tools/call` of `tool`, with `_meta` asking what `asks` says.
fn call_request(
    http: &reqwest::Client,
    url: &str,
    era: Era<'_>,
    id: u64,
    tool: &str,
    asks: Asks,
) -> reqwest::RequestBuilder {
    let mut meta = serde_json::Map::new();
    if asks.logs {
        meta.insert("io.modelcontextprotocol/logLevel".into(), json!("debug"));
    }
    if asks.progress {
        meta.insert("progressToken".into(), json!(format!("p-{id}")));
    }
    let request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    let request = match era {
        Era::Session(session) => request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", SESSION_VERSION),
        Era::Modern => {
            meta.insert(
                "io.modelcontextprotocol/protocolVersion".into(),
                json!(MODERN),
            );
            meta.insert(
                "io.modelcontextprotocol/clientInfo".into(),
                json!({"name": "drain", "version": "0"}),
            );
            meta.insert(
                "io.modelcontextprotocol/clientCapabilities".into(),
                json!({}),
            );
            request
                .header("mcp-protocol-version", MODERN)
                .header("mcp-method", "tools/call")
                .header("mcp-name", tool)
        }
    };
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": meta}});
    request.body(body.to_string())
}

/// What a client got for a call: status, content type and whole body.
type Answer = (StatusCode, String, String);

async fn answer_of(response: reqwest::Response) -> Answer {
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = tokio::time::timeout(HANG, response.text())
        .await
        .expect("the answer ends")
        .unwrap_or_else(|error| format!("<torn: {error}>"));
    (status, content_type, body)
}

/// The JSON-RPC message of an answer: the body itself, or a stream's last
/// `data:` event.
fn message(answer: &Answer) -> Value {
    let (_, content_type, body) = answer;
    let text = if content_type.starts_with("text/event-stream") {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .rfind(|data| !data.is_empty())
            .unwrap_or_default()
    } else {
        body.as_str()
    };
    serde_json::from_str(text).unwrap_or_else(|_| panic!("not one JSON-RPC message: {answer:?}"))
}

/// The call's real answer, with its id.
fn assert_answered(answer: &Answer, id: u64) {
    assert_eq!(answer.0, StatusCode::OK, "{answer:?}");
    let message = message(answer);
    assert_eq!(message["id"], json!(id), "{answer:?}");
    let text = message["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("late answer"), "{answer:?}");
}

/// A JSON-RPC error for the call, saying the server is shutting down.
fn assert_shutting_down(answer: &Answer, id: u64) {
    let message = message(answer);
    assert_eq!(message["id"], json!(id), "{answer:?}");
    assert_eq!(message["error"]["code"], json!(-32000), "{answer:?}");
    let text = message["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("shutting down"), "{answer:?}");
}

/// Sends a call, waits until it is under way, closes the server, and
/// returns what the client got and how long the close took.
async fn call_through_close(
    server: HttpServer,
    http: &reqwest::Client,
    era: Era<'_>,
    id: u64,
    tool: &str,
    asks: Asks,
) -> (Answer, Duration) {
    let url = server.url();
    let sent = call_request(http, &url, era, id, tool, asks).send();
    let waiting = tokio::spawn(async move { answer_of(sent.await.expect("answered")).await });
    tokio::time::sleep(UNDER_WAY).await;
    let closing = close(server);
    let answer = tokio::time::timeout(HANG, waiting).await.unwrap().unwrap();
    let took = tokio::time::timeout(HANG, closing).await.unwrap().unwrap();
    (answer, took)
}

/// A call in flight on a session, answered plain JSON (the keep-alive
/// interval is longer than the call), gets its real answer, and the
/// server stops once it is out, not at the end of the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_call_in_flight_is_answered_and_the_drain_ends_with_it() {
    let server = serve(SLOW, GRACE, Duration::from_secs(15)).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let (answer, took) =
        call_through_close(server, &http, Era::Session(&session), 3, "slow", PLAIN).await;
    assert_answered(&answer, 3);
    assert!(answer.1.starts_with("application/json"), "{answer:?}");
    assert!(took < GRACE, "the drain waited out its grace: {took:?}");
}

/// The same while it streams progress: the stream carries the report and
/// then the answer, and ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_call_streaming_progress_is_answered_on_its_stream() {
    let server = serve(SLOW, GRACE, Duration::from_secs(15)).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let (answer, took) = call_through_close(
        server,
        &http,
        Era::Session(&session),
        4,
        "slow_steps",
        PROGRESS,
    )
    .await;
    assert!(answer.1.starts_with("text/event-stream"), "{answer:?}");
    assert!(answer.2.contains("notifications/progress"), "{answer:?}");
    assert_answered(&answer, 4);
    assert!(took < GRACE, "the drain waited out its grace: {took:?}");
}

/// Stateless 2026-07-28 calls in flight, plain and streaming progress, on
/// the direct path and on rmcp's, get their real answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_calls_in_flight_are_answered_and_the_drain_ends_with_them() {
    let logs = |asks: Asks| Asks { logs: true, ..asks };
    for (tool, asks, streamed) in [
        ("slow", PLAIN, false),
        ("slow", PROGRESS, false),
        ("slow_steps", PROGRESS, true),
        // rmcp's path.
        ("slow", logs(PLAIN), false),
        ("slow_steps", logs(PROGRESS), true),
    ] {
        let server = serve(SLOW, GRACE, Duration::from_secs(15)).await;
        let http = reqwest::Client::new();
        let (answer, took) = call_through_close(server, &http, Era::Modern, 5, tool, asks).await;
        assert_answered(&answer, 5);
        let expected = if streamed {
            "text/event-stream"
        } else {
            "application/json"
        };
        assert!(answer.1.starts_with(expected), "{tool}: {answer:?}");
        assert!(
            took < GRACE,
            "{tool}: the drain waited out its grace: {took:?}"
        );
    }
}

/// A session's standalone `GET` stream carries no call: it ends as soon as
/// the server stops, and does not hold the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standalone_stream_ends_at_once_when_the_server_stops() {
    let server = serve(SLOW, GRACE, Duration::from_secs(15)).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let response = http
        .get(server.url())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", SESSION_VERSION)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let stopped = Instant::now();
    let closing = close(server);
    let mut body = response.bytes_stream();
    let ended = tokio::time::timeout(HANG, async {
        while let Some(chunk) = body.next().await {
            if chunk.is_err() {
                return "torn";
            }
        }
        "ended"
    })
    .await
    .unwrap();
    let ended_after = stopped.elapsed();
    let took = tokio::time::timeout(HANG, closing).await.unwrap().unwrap();
    assert_eq!(ended, "ended", "the stream was cut, not ended");
    assert!(
        ended_after < GRACE / 2,
        "the stream lasted {ended_after:?} into the drain"
    );
    assert!(
        took < GRACE / 2,
        "the drain waited for the stream: {took:?}"
    );
}

/// A long call's answer resumed with `Last-Event-ID` (its first stream
/// gone) is a call in flight: the resumed stream gets the answer, and the
/// drain ends with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_answer_in_flight_is_answered() {
    let server = serve(SLOW, GRACE, Duration::from_millis(200)).await;
    let http = reqwest::Client::new();
    let session = open_session(&http, &server, json!({})).await;
    let response = call_request(
        &http,
        &server.url(),
        Era::Session(&session),
        6,
        "slow",
        PLAIN,
    )
    .send()
    .await
    .unwrap();
    let mut body = Box::pin(response.bytes_stream());
    let mut seen = String::new();
    while !seen.contains("id:") {
        let chunk = tokio::time::timeout(HANG, body.next()).await.unwrap();
        seen.push_str(std::str::from_utf8(&chunk.unwrap().unwrap()).unwrap());
    }
    let last_event_id = seen
        .lines()
        .find_map(|l| l.strip_prefix("id:"))
        .unwrap()
        .trim()
        .to_owned();
    drop(body);
    let resumed = http
        .get(server.url())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", SESSION_VERSION)
        .header("last-event-id", &last_event_id)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), StatusCode::OK);
    let closing = close(server);
    let answer = answer_of(resumed).await;
    assert_answered(&answer, 6);
    let took = tokio::time::timeout(HANG, closing).await.unwrap().unwrap();
    assert!(took < GRACE, "the drain waited out its grace: {took:?}");
}

/// While a call keeps the server draining, a new connection is refused:
/// the listener is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_connection_during_the_drain_is_refused() {
    let server = serve(SLOW, GRACE, Duration::from_secs(15)).await;
    let url = server.url();
    let http = reqwest::Client::new();
    let sent = call_request(&http, &url, Era::Modern, 7, "slow", PLAIN).send();
    let waiting = tokio::spawn(async move { answer_of(sent.await.expect("answered")).await });
    tokio::time::sleep(UNDER_WAY).await;
    let closing = close(server);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let late = reqwest::Client::new();
    let refused = call_request(&late, &url, Era::Modern, 8, "slow", PLAIN)
        .send()
        .await;
    match refused {
        Err(error) => assert!(error.is_connect(), "{error}"),
        Ok(response) => panic!("a new request was taken during the drain: {response:?}"),
    }
    assert_answered(&waiting.await.unwrap(), 7);
    tokio::time::timeout(HANG, closing).await.unwrap().unwrap();
}

/// A call still running when the grace runs out, on every path (the direct
/// ones, and rmcp's for a call asking for log messages), gets a JSON-RPC
/// error naming its id and saying the server is shutting down, soon after
/// the grace, and the server stops: never a `500`, a torn stream, an empty
/// answer or a wait for the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_outliving_the_grace_is_told_the_server_is_shutting_down() {
    let grace = Duration::from_millis(600);
    let slow = Duration::from_secs(20);
    let logs = |asks: Asks| Asks { logs: true, ..asks };
    for (case, tool, asks, session) in [
        ("session JSON", "slow", PLAIN, true),
        ("session stream", "slow_steps", PROGRESS, true),
        ("stateless JSON", "slow", PLAIN, false),
        ("stateless stream", "slow_steps", PROGRESS, false),
        ("rmcp's session JSON", "slow", logs(PLAIN), true),
        ("rmcp's session stream", "slow_steps", logs(PROGRESS), true),
        ("rmcp's stateless JSON", "slow", logs(PLAIN), false),
        (
            "rmcp's stateless stream",
            "slow_steps",
            logs(PROGRESS),
            false,
        ),
    ] {
        let server = serve(slow, grace, Duration::from_secs(15)).await;
        let http = reqwest::Client::new();
        let session = if session {
            Some(open_session(&http, &server, json!({})).await)
        } else {
            None
        };
        let era = session.as_deref().map_or(Era::Modern, Era::Session);
        let started = Instant::now();
        let (answer, took) = call_through_close(server, &http, era, 9, tool, asks).await;
        let answered_after = started.elapsed();
        assert_eq!(answer.0, StatusCode::OK, "{case}: {answer:?}");
        assert_shutting_down(&answer, 9);
        assert!(
            answered_after < UNDER_WAY + grace * 2 + Duration::from_secs(1),
            "{case}: answered after {answered_after:?}"
        );
        assert!(
            took < grace * 2 + Duration::from_secs(1),
            "{case}: the close took {took:?}"
        );
    }
}
