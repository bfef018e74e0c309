//! A stateless 2026-07-28 `tools/call` answered without rmcp's per-request
//! service.
//!
//! rmcp's Streamable HTTP service serves every stateless request by starting
//! a small MCP service of its own: a one-shot transport, a service loop on a
//! spawned task, the handler on another, a channel back, and on the way in a
//! re-serialisation of the whole message to check the SEP-2243 headers. For
//! the gateway's hottest request, a 2026-07-28 client's `tools/call`, that
//! machinery cost more CPU than the call itself. This path answers such a
//! request with one parse of the body, the same header rules, the handler's
//! `call_tool` wrapped in what rmcp's `handle_request` does around it for a
//! 2026-07-28 request (result shaping, error codes; see `call_tool`), run
//! in the request itself unless it is let go (`crate::detached`), and one
//! serialisation of the answer.
//!
//! Only the plain case is taken. Anything else goes to rmcp untouched (with
//! the body already read, handed back as it came), so every error response
//! for an unusual request is rmcp's own (or, for a body that is not one
//! JSON-RPC message, `crate::malformed`'s):
//! - headers: exactly one `MCP-Protocol-Version: 2026-07-28`, one
//!   `Mcp-Method: tools/call`, one `Mcp-Name`, no `Mcp-Param-*`, no session
//!   id; JSON content; an `Accept` naming JSON and event streams; a declared
//!   `Content-Length` (the guard has already held it to the body limit);
//! - body: a JSON-RPC `tools/call` whose `_meta` carries every key 2026-07-28
//!   requires and the header's version, whose `Mcp-Name` matches `name` as
//!   written (no Base64 form), and which asks for no log messages (a
//!   handler sends those through the call's peer, which only rmcp's path
//!   gives a stream to);
//! - the tool's input schema promotes no argument to an `Mcp-Param-*` header.
//!
//! A call with a progress token (rmcp's client puts one on every request)
//! is taken too: its context carries a `CallProgress` (`crate::call_progress`)
//! whose reports go into the call's outbox. A call that reports nothing is
//! answered plain JSON as above. The first report makes the answer what
//! rmcp's path makes it: `200 text/event-stream`, each report an event
//! (`data:` and the message, no id: a 2026-07-28 answer cannot be resumed),
//! a keep-alive comment after each keep-alive interval without one, the
//! response as the last event, and the end of the stream. Reports are taken
//! out of the outbox as they are sent; at most
//! `call_progress::MAX_PROGRESS_BYTES` of them wait for a slow client, later
//! ones are dropped (rmcp holds the reporter back instead). A client that
//! goes away mid-stream cancels the call, as before the answer and as on
//! rmcp's path. A call still running when the server closes its streams
//! (`close` after the shutdown grace) is answered, JSON or as the stream's
//! last event, with the JSON-RPC error of `crate::shutdown::cut_off`, and
//! cancelled.
//!
//! The handler gets a [`RequestContext`] like rmcp's: the request's id and
//! `_meta`, the HTTP request parts in its extensions, a cancellation token
//! cancelled if the client goes away before the answer, and a peer. The peer
//! is one whose connection is already closed: a 2026-07-28 client cannot be
//! sent requests or notifications outside the response (rmcp refuses them
//! too), so anything a handler tries to send through it fails at once
//! instead of waiting.

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ErrorCode, Implementation, InitializeRequestParams,
    JsonObject, ProtocolVersion, RequestId, RequestMetaObject, ServerJsonRpcMessage,
};
use rmcp::service::{RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{Peer, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::call_progress;
use crate::detached::Detached;
use crate::front::SharedService;
use crate::json_answer::BoxFuture;
use crate::session_call::SessionPath;
use crate::sessions::{Outbox, Reply};
use crate::sse;
use crate::tool_call::{
    Era, METHOD_HEADER, NAME_HEADER, PROTOCOL_VERSION_HEADER, PlainCall, SESSION_HEADER, call_tool,
    json_response, plain_json_post, promotes_params, sole, status_only,
};

const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";
const PARAM_HEADER_ANNOTATION: &str = "x-mcp-header";
const VERSION: &str = "2026-07-28";

/// The `/mcp` service: plain stateless 2026-07-28 `tools/call` requests are
/// answered here, everything else by `fallback` (rmcp's service). Shared,
/// so that a request's future takes one reference count, not a copy of
/// each part (the handler's and rmcp's cancellation tokens among them).
pub(crate) struct DirectCall<H, S>(Arc<DirectCallState<H, S>>);

/// What [`DirectCall`] shares between its requests.
struct DirectCallState<H, S> {
    handler: H,
    fallback: S,
    peer: Peer<RoleServer>,
    /// The handler speaks 2026-07-28 (rmcp refuses a version it does not
    /// list, and so this path is not taken for it).
    modern: bool,
    /// With legacy sessions: their plain calls (`crate::session_call`).
    sessions: Option<SessionPath>,
    /// How streamed answers are kept alive and cut, as rmcp's are.
    streams: Streams,
}

/// What a streamed answer needs of the server: rmcp's keep-alive interval
/// (`None`: no keep-alive comments) and the token that cuts open streams
/// at shutdown.
#[derive(Clone)]
pub(crate) struct Streams {
    /// The interval rmcp's streams use.
    pub(crate) keep_alive: Option<Duration>,
    /// Cancelled when the server closes its streams.
    pub(crate) closed: CancellationToken,
}

impl<H, S> DirectCall<H, S>
where
    H: ServerHandler + Clone + Send + Sync + 'static,
{
    /// Wraps `fallback`. Must run inside a tokio runtime: the closed peer is
    /// made by starting (and at once ending) an rmcp service.
    pub(crate) fn new(
        handler: H,
        fallback: S,
        sessions: Option<SessionPath>,
        streams: Streams,
    ) -> Self {
        let info =
            InitializeRequestParams::new(ClientCapabilities::default(), Implementation::default())
                .with_protocol_version(ProtocolVersion::V_2026_07_28);
        let running = rmcp::service::serve_directly(handler.clone(), ClosedTransport, Some(info));
        let peer = running.peer().clone();
        // The service loop ends on its own: the transport yields nothing.
        drop(running);
        let modern = handler
            .supported_protocol_versions()
            .contains(&ProtocolVersion::V_2026_07_28);
        DirectCall(Arc::new(DirectCallState {
            handler,
            fallback,
            peer,
            modern,
            sessions,
            streams,
        }))
    }
}

impl<H, S> SharedService for DirectCall<H, S>
where
    H: ServerHandler + Clone + Send + Sync + 'static,
    S: tower::Service<Request<Body>, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Response: IntoResponse,
    S::Future: Send,
{
    fn call_shared(&self, request: Request<Body>) -> BoxFuture {
        let state = Arc::clone(&self.0);
        Box::pin(async move {
            let request = if state.modern && plain_headers(&request) {
                match try_direct(&state.handler, &state.peer, &state.streams, request).await {
                    Ok(response) => return Ok(response),
                    Err(request) => request,
                }
            } else if let Some(sessions) = &state.sessions
                && request.headers().contains_key(SESSION_HEADER)
            {
                match sessions.serve(&state.handler, request).await {
                    Ok(response) => return Ok(response),
                    Err(request) => request,
                }
            } else {
                request
            };
            // rmcp's service is called by `&mut`: a copy for the requests
            // that reach it.
            let mut fallback = state.fallback.clone();
            let response = fallback.call(request).await?;
            Ok(response.into_response())
        })
    }
}

/// Answers the request, or hands it back (its body read into memory) for
/// rmcp to serve.
async fn try_direct<H>(
    handler: &H,
    peer: &Peer<RoleServer>,
    streams: &Streams,
    request: Request<Body>,
) -> Result<Response, Request<Body>>
where
    H: ServerHandler + Clone + Send + Sync + 'static,
{
    let (parts, body) = request.into_parts();
    // The guard refused a declared length over the limit; the header
    // check made sure there is one.
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::debug!(%error, "request body not read");
            return Ok(status_only(StatusCode::BAD_REQUEST));
        }
    };
    let Some((id, params, meta)) = plain_call(&parts.headers, &bytes) else {
        return Err(Request::from_parts(parts, Body::from(bytes)));
    };
    let promoted = handler
        .get_tool(&params.name)
        .is_some_and(|tool| promotes_headers(&tool.input_schema));
    if promoted {
        return Err(Request::from_parts(parts, Body::from(bytes)));
    }
    // As rmcp's service loop does: the request's `_meta` goes into the
    // context, and the HTTP parts into its extensions.
    let mut extensions = rmcp::model::Extensions::new();
    extensions.insert(parts);
    // A call that asked for progress reports it into its outbox.
    let outbox = meta
        .get_progress_token()
        .map(|_| Arc::new(watch::Sender::new(Outbox::default())));
    if let Some(outbox) = &outbox {
        extensions.insert(call_progress::for_call(Arc::downgrade(outbox)));
    }

    let cancel = CancellationToken::new();
    let mut context = RequestContext::new(id.clone(), peer.clone());
    context.ct = cancel.clone();
    context.meta = meta;
    context.extensions = extensions;
    // As on rmcp's path the handler is never dropped mid-await when the
    // client goes away: this future (or the answer's stream) is dropped,
    // the guard cancels the call's token, and what is left of the call
    // goes on on a task of its own (`Detached`), sees the cancellation and
    // finishes (a gateway then cancels its upstream call). Until then the
    // call runs here, in the request, which spares a task and a hand-off
    // for every call answered while its request waits.
    let disconnect = cancel.drop_guard();
    let handler = handler.clone();
    let call_id = id.clone();
    let answered = outbox.clone();
    // Answering with the serialised message: a tool call's future is many
    // kilobytes, and moving it or its output costs copies (measured: those
    // copies were a third of the gateway's instructions per call once).
    let mut call = Detached::new(async move {
        let answer = call_tool(&handler, params, context, Era::Stateless).await;
        let (message, status) = match answer {
            Ok(result) => (ServerJsonRpcMessage::response(result, id), StatusCode::OK),
            Err(error) => {
                let status = error_status(error.code);
                (ServerJsonRpcMessage::error(error, Some(id)), status)
            }
        };
        let body = serde_json::to_vec(&message).map(Bytes::from);
        if let Some(outbox) = answered {
            // Nothing is reported after the answer.
            let answer = body.as_ref().map(Bytes::clone).unwrap_or_default();
            outbox.send_modify(|outbox| outbox.answer = Some(answer));
        }
        (body, status)
    });
    // Past the drain's grace the call is cut off (`shutdown::cut_off`);
    // the guard then cancels it.
    let closed = &streams.closed;
    let Some(outbox) = outbox else {
        let answer = tokio::select! {
            answer = call.run() => answer,
            () = closed.cancelled() => return Ok(cut_off(&call_id)),
        };
        disconnect.disarm();
        return Ok(json_answer(answer));
    };
    // The first of the answer and a report decides what the answer is.
    let mut reply = outbox.subscribe();
    let reported = |outbox: &Outbox| !outbox.events.is_empty();
    let ended = tokio::select! {
        biased;
        answer = call.run() => Some(answer),
        _ = reply.wait_for(reported) => None,
        () = closed.cancelled() => return Ok(cut_off(&call_id)),
    };
    if reply.borrow().events.is_empty() {
        let answer = match ended {
            Some(answer) => answer,
            None => tokio::select! {
                answer = call.run() => answer,
                () = closed.cancelled() => return Ok(cut_off(&call_id)),
            },
        };
        disconnect.disarm();
        return Ok(json_answer(answer));
    }
    // A stream: the call goes on on a task of its own, so that a client
    // slow to read its reports does not hold the call back.
    let task = match ended {
        Some(answer) => Joined::Done(answer),
        None => match call.detach() {
            Some(task) => Joined::Running(task),
            None => Joined::Done(None),
        },
    };
    let streaming = Streaming {
        call: call_id,
        outbox,
        reply,
        task,
        streams: streams.clone(),
        disconnect: Some(disconnect),
    };
    Ok(sse::response(Body::from_stream(futures::stream::unfold(
        streaming,
        Streaming::next,
    ))))
}

/// What the call gives back: its serialised answer and status.
type Answered = (Result<Bytes, serde_json::Error>, StatusCode);

/// The answer of a call cut off by the shutdown (`crate::shutdown`).
fn cut_off(call: &RequestId) -> Response {
    json_response(crate::shutdown::cut_off(call), StatusCode::OK)
}

/// The call's answer as plain JSON with its status (`None`: the call
/// panicked or its task failed, which was logged).
fn json_answer(answer: Option<Answered>) -> Response {
    match answer {
        Some((Ok(body), status)) => json_response(body, status),
        Some((Err(error), _)) => {
            tracing::error!(%error, "response not serialised");
            status_only(StatusCode::INTERNAL_SERVER_ERROR)
        }
        None => status_only(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

/// What a detached call's task gave back (`None`: it panicked or failed).
fn joined(outcome: Result<Option<Answered>, JoinError>) -> Option<Answered> {
    outcome.unwrap_or_else(|error| {
        tracing::error!(%error, "tool call task failed");
        None
    })
}

/// The call's task, or what it gave back.
enum Joined {
    Running(JoinHandle<Option<Answered>>),
    Done(Option<Answered>),
    /// The answer went out (or could not).
    Sent,
}

/// A streamed answer: the call's reports as they come, then its response.
struct Streaming {
    /// The call's id, for the error that cuts it off at shutdown.
    call: RequestId,
    /// Held so that the reports sent can be taken out.
    outbox: Arc<watch::Sender<Outbox>>,
    reply: Reply,
    task: Joined,
    streams: Streams,
    /// Cancels the call if the stream is dropped before its end.
    disconnect: Option<DropGuard>,
}

/// What waiting on a streamed call found.
enum Next {
    Reported,
    Joined(Option<Answered>),
    Closed,
}

impl Streaming {
    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, Self)> {
        loop {
            // Reports waiting: sent at once, in order, and forgotten (there
            // is nothing to resume).
            let reports = self.take_reports();
            if !reports.is_empty() {
                return Some((Ok(reports), self));
            }
            let task = match &mut self.task {
                Joined::Sent => return None,
                Joined::Done(_) => {
                    let Joined::Done(answer) = std::mem::replace(&mut self.task, Joined::Sent)
                    else {
                        return None;
                    };
                    if let Some(disconnect) = self.disconnect.take() {
                        disconnect.disarm();
                    }
                    return match answer {
                        Some((Ok(body), _)) => Some((Ok(sse::event(None, &body)), self)),
                        Some((Err(error), _)) => {
                            tracing::error!(%error, "response not serialised");
                            None
                        }
                        None => None,
                    };
                }
                Joined::Running(task) => task,
            };
            let reply = &mut self.reply;
            let closed = &self.streams.closed;
            let waited = async {
                tokio::select! {
                    biased;
                    () = closed.cancelled() => Next::Closed,
                    outcome = task => Next::Joined(joined(outcome)),
                    // The sender is held here, so this never fails.
                    _ = reply.changed() => Next::Reported,
                }
            };
            let next = match self.streams.keep_alive {
                Some(interval) => match tokio::time::timeout(interval, waited).await {
                    Ok(next) => next,
                    Err(_) => return Some((Ok(Bytes::from_static(sse::KEEP_ALIVE)), self)),
                },
                None => waited.await,
            };
            match next {
                Next::Reported => {}
                Next::Joined(answer) => self.task = Joined::Done(answer),
                // Cut off: told so, then the end; the guard cancels the call.
                Next::Closed => {
                    self.task = Joined::Sent;
                    let error = crate::shutdown::cut_off(&self.call);
                    return Some((Ok(sse::event(None, &error)), self));
                }
            }
        }
    }

    /// The reports waiting, as events, taken out of the outbox.
    fn take_reports(&mut self) -> Bytes {
        self.reply.borrow_and_update();
        let mut reports = Vec::new();
        self.outbox.send_if_modified(|outbox| {
            for report in outbox.events.drain(..) {
                sse::push_event(&mut reports, &report);
            }
            outbox.progress_bytes = 0;
            false
        });
        Bytes::from(reports)
    }
}

/// The headers of a request this path takes (see the module docs).
fn plain_headers<T>(request: &Request<T>) -> bool {
    let headers = request.headers();
    request.method() == Method::POST
        && sole(headers, PROTOCOL_VERSION_HEADER) == Some(VERSION)
        && sole(headers, METHOD_HEADER) == Some("tools/call")
        && sole(headers, NAME_HEADER).is_some()
        && !headers.contains_key(SESSION_HEADER)
        && !promotes_params(headers)
        && plain_json_post(headers)
}

/// A plain call's id, request and `_meta` (see the module docs). `None`
/// sends the request to rmcp.
fn plain_call(
    headers: &HeaderMap,
    body: &[u8],
) -> Option<(RequestId, CallToolRequestParams, RequestMetaObject)> {
    let PlainCall { id, mut params, .. } = PlainCall::read(body)?;
    if sole(headers, NAME_HEADER) != Some(params.name.as_ref()) {
        return None;
    }
    let meta = params.meta.take()?;
    if meta.protocol_version()?.as_str() != VERSION
        || !meta
            .missing_required_keys(&ProtocolVersion::V_2026_07_28)
            .is_empty()
        || meta.contains_key(LOG_LEVEL_META)
    {
        return None;
    }
    Some((id, params, meta))
}

/// True when an input schema marks a property for an `Mcp-Param-*` header
/// (SEP-2243), which rmcp's path checks against the request's headers.
fn promotes_headers(schema: &JsonObject) -> bool {
    fn within(value: &Value) -> bool {
        match value {
            Value::Object(map) => promotes_headers(map),
            Value::Array(items) => items.iter().any(within),
            _ => false,
        }
    }
    schema.contains_key(PARAM_HEADER_ANNOTATION) || schema.values().any(within)
}

/// The HTTP status rmcp gives a JSON-RPC error on the 2026-07-28 path.
fn error_status(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// A transport that is closed from the start: it yields no message and
/// refuses every send.
struct ClosedTransport;

/// What [`ClosedTransport`] answers every send with.
#[derive(Debug, thiserror::Error)]
#[error("a 2026-07-28 client is answered only in the response to its request")]
struct Closed;

impl Transport<RoleServer> for ClosedTransport {
    type Error = Closed;

    fn name() -> Cow<'static, str> {
        "closed".into()
    }

    fn send(
        &mut self,
        _item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        std::future::ready(Err(Closed))
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        std::future::ready(None)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        std::future::ready(Ok(()))
    }
}

/// Property tests of what this module and the guard read from outside: any
/// headers and any body are taken, handed to rmcp or refused, never a panic.
/// `PROPTEST_CASES` sets the number of cases (default 256).
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::guard::Guard;
    use proptest::prelude::*;
    use serde_json::json;

    /// Keys a JSON-RPC `tools/call` has, and a few of anything else.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "jsonrpc",
                "id",
                "method",
                "params",
                "name",
                "arguments",
                "_meta",
                "progressToken",
                "io.modelcontextprotocol/protocolVersion",
                "io.modelcontextprotocol/clientCapabilities",
                "io.modelcontextprotocol/logLevel",
            ])
            .prop_map(str::to_owned),
            "[a-zA-Z_/.]{0,10}",
        ]
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            prop::sample::select(vec!["2.0", "1.0", "tools/call", "2026-07-28", "echo", ""])
                .prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
                prop::collection::vec((key(), inner), 0..6)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
            ]
        })
    }

    /// A `tools/call` with each part either right or arbitrary.
    fn call_body() -> impl Strategy<Value = Value> {
        let meta = prop_oneof![
            Just(
                json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {}})
            ),
            json(),
        ];
        let params = (prop_oneof![Just(json!("echo")), json()], json(), meta).prop_map(
            |(name, arguments, meta)| json!({"name": name, "arguments": arguments, "_meta": meta}),
        );
        (
            prop_oneof![Just(json!("2.0")), json()],
            json(),
            prop_oneof![Just(json!("tools/call")), json()],
            prop_oneof![params, json()],
        )
            .prop_map(|(jsonrpc, id, method, params)| {
                json!({"jsonrpc": jsonrpc, "id": id, "method": method, "params": params})
            })
    }

    /// Near misses of the admitted names and origins, or any bytes.
    fn header_value() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::sample::select(vec![
                "localhost:9000",
                "LOCALHOST:9000",
                "127.0.0.1:9000",
                "[::1]:9000",
                "proxy.local:443",
                "localhost.:9000",
                "user@localhost:9000",
                "localhost",
                "http://localhost:9000",
                "http://localhost:9000/x",
                "null",
                "file://",
            ])
            .prop_map(|v| v.as_bytes().to_vec()),
            prop::collection::vec(any::<u8>(), 0..24),
        ]
    }

    fn headers(name: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = http::HeaderValue::from_bytes(name) {
            headers.insert(NAME_HEADER, value);
        }
        headers
    }

    proptest! {
        #[test]
        fn plain_call_takes_any_bytes(body in prop::collection::vec(any::<u8>(), 0..512),
                                      name in prop::collection::vec(any::<u8>(), 0..16)) {
            let _ = plain_call(&headers(&name), &body);
        }

        #[test]
        fn plain_call_takes_any_json_rpc_shape(body in call_body()) {
            let bytes = body.to_string().into_bytes();
            let taken = plain_call(&headers(b"echo"), &bytes);
            // Only a request exactly of the plain shape is taken.
            if let Some((_, params, _)) = taken {
                prop_assert_eq!(params.name.as_ref(), "echo");
                prop_assert_eq!(&body["jsonrpc"], "2.0");
                prop_assert_eq!(&body["method"], "tools/call");
            }
        }

        #[test]
        fn the_guard_takes_any_headers(
            hosts in prop::collection::vec(header_value(), 0..3),
            origins in prop::collection::vec(header_value(), 0..3),
            authorization in prop::collection::vec(any::<u8>(), 0..24),
            length in prop::collection::vec(any::<u8>(), 0..24),
            path in "/[a-z%./]{0,8}",
        ) {
            let guard = Guard::new(9000, &["proxy.local:443".into()], &[], Some("t0ken"), 1024);
            let mut builder = http::Request::builder().method("POST").uri(path);
            for host in &hosts {
                if let Ok(value) = http::HeaderValue::from_bytes(host) {
                    builder = builder.header(http::header::HOST, value);
                }
            }
            for origin in &origins {
                if let Ok(value) = http::HeaderValue::from_bytes(origin) {
                    builder = builder.header(http::header::ORIGIN, value);
                }
            }
            for (name, value) in [(http::header::AUTHORIZATION, &authorization), (http::header::CONTENT_LENGTH, &length)] {
                if let Ok(value) = http::HeaderValue::from_bytes(value) {
                    builder = builder.header(name, value);
                }
            }
            let Ok(request) = builder.body(Body::empty()) else { return Ok(()) };
            if guard.check(&request).is_ok() {
                // Admitted only with one Host naming this server.
                let admitted: Vec<_> = request.headers().get_all(http::header::HOST).iter().collect();
                prop_assert_eq!(admitted.len(), 1);
                prop_assert!(guard.host_allowed(admitted[0].to_str().unwrap_or_default()));
            }
        }
    }
}
