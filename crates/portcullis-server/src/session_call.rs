//! A plain `tools/call` on an initialize-era session, answered in front of
//! rmcp's session machinery.
//!
//! On a session, rmcp parses every POST into its untagged client message,
//! hands it to the session's worker task, which hands it to the session's
//! service loop, which spawns the request's task; the response goes back
//! the same way and out as an SSE stream (made plain JSON again by
//! `crate::json_answer`). For the requests today's clients send most, a
//! session's `tools/call`, that machinery costs more than the call. This
//! path answers such a call with one parse of the body, the handler's
//! `call_tool` wrapped as rmcp wraps it for the session's era
//! (`crate::tool_call`), run by the request itself until it stops waiting
//! (then on a task of its own: `crate::detached`), and one write.
//!
//! Only the plain case is taken; anything else goes to rmcp untouched:
//! - the session is *adopted* (`crate::sessions`): its client negotiated an
//!   initialize-era version, and its service is alive;
//! - headers: one `Mcp-Session-Id`; at most one `MCP-Protocol-Version`,
//!   naming the session's version; no `Mcp-Method`, `Mcp-Name` or
//!   `Mcp-Param-*`; JSON content with a declared length; an `Accept`
//!   naming JSON and event streams;
//! - body: a JSON-RPC `tools/call` carrying no protocol keys in its
//!   `_meta` (a progress token is no such key), whose id is not already in
//!   flight on the session.
//!
//! What rmcp's session gives a call, this path gives too: the session's
//! peer and the request's `_meta` and HTTP parts in its context; a
//! `notifications/cancelled` from the client cancels it (seen here on its
//! way to rmcp); the session's end cancels it; the call counts as an open
//! stream of its session; rmcp's idle timer hears of the session's use; a
//! client that declared sampling, elicitation or roots can be asked them
//! on the call's stream (`crate::session_ask`, in place of rmcp's routing
//! by originating request); a call that sent a progress token has its
//! reports put on its stream too (`crate::call_progress`, in place of
//! rmcp's routing by token). A call still running after one keep-alive
//! interval, asking its client something or reporting progress, is
//! answered as a stream instead, like rmcp's: an event with an id
//! (`d<n>`), its requests and reports as events with ids of their own
//! (`d<n>.<k>`), keep-alive comments, then the response; the call runs
//! on if the client goes away, and a `GET` with one of those ids as
//! `Last-Event-ID` resumes the stream after it (also once the answer was
//! written out, for a while: see `crate::sessions`).
//! As on rmcp's session path, a client that goes away does not cancel its
//! call. A call still running when the server closes its streams (the
//! drain's grace ran out) is cancelled and answered, JSON or as its
//! stream's last event, with `crate::shutdown::cut_off`'s JSON-RPC error.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::header::CACHE_CONTROL;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use rmcp::model::{RequestId, ServerJsonRpcMessage};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::transport::streamable_http_server::session::SessionId;
use rmcp::{RoleServer, ServerHandler};
use serde::Deserialize;

use tokio_util::sync::CancellationToken;

use crate::call_progress;
use crate::detached::Detached;
use crate::media_type::accepts_events;
use crate::session_ask;
use crate::sessions::{BoundedSessions, Deciding, Outbox, Reply};
use crate::sse;
use crate::tool_call::{
    Era, METHOD_HEADER, NAME_HEADER, PROTOCOL_VERSION_HEADER, PlainCall, SESSION_HEADER, call_tool,
    json_response, plain_json_post, promotes_params, sole, status_only,
};

const LAST_EVENT_ID_HEADER: &str = "last-event-id";
/// `_meta` keys of the protocol itself (a 2026-07-28 request's envelope,
/// its log level): a request carrying one is rmcp's to judge.
const PROTOCOL_META_PREFIX: &str = "io.modelcontextprotocol/";
/// Event ids of this path's streams: rmcp's are digits and `/`, so a
/// `Last-Event-ID` starting with this is never rmcp's.
const EVENT_ID_PREFIX: &str = "d";
/// Notifications larger than this are not read here (a client's
/// `initialized` or `cancelled` is a few hundred bytes).
const MAX_NOTICE_BYTES: usize = 64 * 1024;

/// The session path: rmcp's sessions, and how long an answer may be held
/// before it is streamed.
#[derive(Clone)]
pub(crate) struct SessionPath {
    sessions: Arc<BoundedSessions>,
    keep_alive: Option<Duration>,
    /// Cancelled when the server closes its streams (the drain's grace ran
    /// out): a call still running is cut off (`crate::shutdown::cut_off`).
    closed: CancellationToken,
}

/// Put into the HTTP parts of a session's `notifications/initialized` on
/// its way to rmcp, so that the handler can hand the session's peer over
/// ([`adopt`]).
#[derive(Clone)]
pub(crate) struct Adoption {
    sessions: Arc<BoundedSessions>,
    id: SessionId,
    /// Tells calls waiting on the adoption that it is decided.
    deciding: Option<Arc<Deciding>>,
}

/// Called by the handler when a client says `initialized`: a session whose
/// notification came through [`SessionPath`] is offered to the direct
/// path.
pub(crate) fn adopt(context: &NotificationContext<RoleServer>) {
    let adoption = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Adoption>());
    if let Some(adoption) = adoption {
        adoption.sessions.adopt(&adoption.id, context.peer.clone());
        if let Some(deciding) = &adoption.deciding {
            deciding.decided();
        }
    }
}

impl SessionPath {
    /// The path over `sessions`; answers are held at most `keep_alive`;
    /// calls still running when `closed` is cancelled are cut off.
    pub(crate) fn new(
        sessions: Arc<BoundedSessions>,
        keep_alive: Option<Duration>,
        closed: CancellationToken,
    ) -> Self {
        SessionPath {
            sessions,
            keep_alive,
            closed,
        }
    }

    /// Answers the request, or hands it back (its body read into memory)
    /// for rmcp to serve.
    pub(crate) async fn serve<H>(
        &self,
        handler: &H,
        request: Request<Body>,
    ) -> Result<Response, Request<Body>>
    where
        H: ServerHandler + Clone + Send + Sync + 'static,
    {
        if request.method() == Method::GET {
            return self.resume(request.headers()).ok_or(request);
        }
        if !plain_headers(&request) {
            return Err(request);
        }
        let (mut parts, body) = request.into_parts();
        // The guard held a declared length to the body limit, and the
        // malformed-body layer has read the body into memory already.
        let bytes = match axum::body::to_bytes(body, usize::MAX).await {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::debug!(%error, "request body not read");
                return Ok(status_only(StatusCode::BAD_REQUEST));
            }
        };
        let Some(session) = sole(&parts.headers, SESSION_HEADER).map(SessionId::from) else {
            return Err(Request::from_parts(parts, Body::from(bytes)));
        };
        let Some(call) = PlainCall::read(&bytes) else {
            if self.answer(&parts.headers, &session, &bytes) {
                // What rmcp answers a posted response with.
                return Ok(status_only(StatusCode::ACCEPTED));
            }
            self.notice(&mut parts.extensions, &session, &bytes);
            return Err(Request::from_parts(parts, Body::from(bytes)));
        };
        let PlainCall { id, mut params, .. } = call;
        let meta = params.meta.take().unwrap_or_default();
        // A progress token is plain: its reports go on the call's stream
        // (`crate::call_progress`).
        let plain = !meta.keys().any(|key| key.starts_with(PROTOCOL_META_PREFIX));
        if !plain || !self.sessions.holds(&session).await {
            return Err(Request::from_parts(parts, Body::from(bytes)));
        }
        let version = sole(&parts.headers, PROTOCOL_VERSION_HEADER);
        let mut admitted = self.sessions.begin_call(&session, version, &id);
        // The session's `initialized` may still be on its way to the
        // handler (the client sent this call on its `202`).
        if admitted.is_none() && self.sessions.adoption_decided(&session).await {
            admitted = self.sessions.begin_call(&session, version, &id);
        }
        let Some(admitted) = admitted else {
            return Err(Request::from_parts(parts, Body::from(bytes)));
        };
        if admitted.touch {
            let sessions = self.sessions.clone();
            let session = session.clone();
            tokio::spawn(async move { sessions.tell_worker(&session).await });
        }

        // As rmcp's service loop does: the request's `_meta` goes into the
        // context, and the HTTP parts into its extensions.
        let mut extensions = rmcp::model::Extensions::new();
        extensions.insert(parts);
        let outbox = Arc::new(tokio::sync::watch::Sender::new(Outbox::default()));
        let mut answered = outbox.subscribe();
        // Held until this request returns, so the call's end (its share of
        // the outbox dropped) does not close the channel under `answered`:
        // a close wakes the waiter, here this request's own task.
        let mut outbox_open = Some(outbox.clone());
        if admitted.asks {
            extensions.insert(session_ask::for_call(
                self.sessions.clone(),
                session.clone(),
                id.clone(),
                admitted.cancel.clone(),
                &outbox,
            ));
        }
        if meta.get_progress_token().is_some() {
            extensions.insert(call_progress::for_call(Arc::downgrade(&outbox)));
        }
        let mut context = RequestContext::new(id.clone(), admitted.peer);
        context.ct = admitted.cancel;
        context.meta = meta;
        context.extensions = extensions;
        let handler = handler.clone();
        let open = admitted.open;
        let call_id = id.clone();
        // Boxed for the reason `crate::direct_call` boxes its call; not
        // cancelled when this future is dropped (see the module docs): run
        // here while the request waits, on a task of its own after that.
        let mut call = Detached::with_attachment(move |attachment| async move {
            let answer = call_tool(&handler, params, context, Era::Session).await;
            let message = match answer {
                Ok(result) => ServerJsonRpcMessage::response(result, id.clone()),
                Err(error) => ServerJsonRpcMessage::error(error, Some(id.clone())),
            };
            let bytes = serde_json::to_vec(&message).unwrap_or_else(|error| {
                tracing::error!(%error, "response not serialised");
                let error =
                    rmcp::ErrorData::internal_error("the response could not be written", None);
                serde_json::to_vec(&ServerJsonRpcMessage::error(error, Some(id)))
                    .unwrap_or_default()
            });
            // Still run by this request, the answer is read as soon as the
            // call returns; a wake-up would only wake this request's own task
            // (which the runtime answers by waking another worker).
            let notify = !attachment.is_attached();
            outbox.send_if_modified(|outbox| {
                outbox.answer = Some(Bytes::from(bytes));
                notify
            });
            drop(open);
        });
        let waited = tokio::select! {
            biased;
            ran = call.run() => {
                if ran.is_none() {
                    // It panicked, so no answer comes: the channel closes
                    // now, as the call's end closed it.
                    drop(outbox_open.take());
                }
                wait(&mut answered, 0, self.keep_alive).await
            }
            waited = wait(&mut answered, 0, self.keep_alive) => waited,
            () = self.closed.cancelled() => {
                self.sessions.cancel_call(&session, &call_id);
                return Ok(plain_json(crate::shutdown::cut_off(&call_id)));
            }
        };
        // A request to the client, a report or a long call: the answer
        // becomes a stream, and the call goes on without this request.
        call.detach();
        match waited {
            Waited::Answered(message) => Ok(plain_json(message)),
            Waited::Gone => {
                tracing::error!("tool call task ended without an answer");
                Ok(status_only(StatusCode::INTERNAL_SERVER_ERROR))
            }
            Waited::CutOff => Ok(plain_json(crate::shutdown::cut_off(&call_id))),
            // A request to the client, or a long call: a stream.
            Waited::Event(_) | Waited::Running => {
                let stream = self.sessions.park(&session, answered.clone(), &call_id);
                Ok(self.stream(session, call_id, stream, answered, 0, true))
            }
        }
    }

    /// A client's response to a request a direct call of `session` sent
    /// it: handed to the waiting request (`true`), or left for rmcp.
    fn answer(&self, headers: &HeaderMap, session: &SessionId, body: &[u8]) -> bool {
        let Some((request, answer)) = session_ask::read_answer(body) else {
            return false;
        };
        // rmcp refuses a response naming another version; so does this.
        if sole(headers, PROTOCOL_VERSION_HEADER)
            .is_some_and(|version| !self.sessions.speaks(session, version))
        {
            return false;
        }
        match self.sessions.answer(session, &request, answer) {
            None => false,
            Some(touch) => {
                if touch {
                    let sessions = self.sessions.clone();
                    let session = session.clone();
                    tokio::spawn(async move { sessions.tell_worker(&session).await });
                }
                true
            }
        }
    }

    /// A notification on its way to rmcp: an `initialized` carries the
    /// adoption offer, a `cancelled` cancels a direct call.
    fn notice(&self, extensions: &mut http::Extensions, session: &SessionId, body: &[u8]) {
        #[derive(Deserialize)]
        struct Notice {
            method: String,
            #[serde(default)]
            params: Option<NoticeParams>,
        }
        #[derive(Deserialize)]
        struct NoticeParams {
            #[serde(rename = "requestId")]
            request_id: Option<RequestId>,
        }
        if body.len() > MAX_NOTICE_BYTES {
            return;
        }
        let Ok(notice) = serde_json::from_slice::<Notice>(body) else {
            return;
        };
        match notice.method.as_str() {
            "notifications/initialized" => {
                extensions.insert(Adoption {
                    sessions: self.sessions.clone(),
                    id: session.clone(),
                    deciding: self.sessions.adopting(session).map(Arc::new),
                });
            }
            "notifications/cancelled" => {
                if let Some(request) = notice.params.and_then(|p| p.request_id) {
                    self.sessions.cancel_call(session, &request);
                }
            }
            _ => {}
        }
    }

    /// A `GET` resuming a stream of this path: the rest of it, or `None`
    /// for rmcp to serve. Held to what rmcp holds a `GET` to (an `Accept`
    /// naming event streams, the session's version if one is named), so
    /// that rmcp answers anything else with its own refusal.
    fn resume(&self, headers: &HeaderMap) -> Option<Response> {
        if !accepts_events(headers) || headers.get_all(PROTOCOL_VERSION_HEADER).iter().count() > 1 {
            return None;
        }
        let version = sole(headers, PROTOCOL_VERSION_HEADER);
        let last = sole(headers, LAST_EVENT_ID_HEADER)?.strip_prefix(EVENT_ID_PREFIX)?;
        // `d<n>`: the stream's first event; `d<n>.<k>`: its k-th request.
        let (stream, seen) = match last.split_once('.') {
            Some((stream, seen)) => (stream, seen.parse::<usize>().ok()?),
            None => (last, 0),
        };
        let stream = stream.parse::<u64>().ok()?;
        let session = SessionId::from(sole(headers, SESSION_HEADER)?);
        let (reply, call) = self.sessions.parked(&session, stream, version)?;
        Some(self.stream(session, call, Some(stream), reply, seen, false))
    }

    /// An SSE answer: the event naming `stream` (when new and parked), the
    /// call's events after the first `seen`, keep-alive comments while the
    /// call runs, then its response (or, past the drain's grace, the error
    /// cutting it off).
    fn stream(
        &self,
        session: SessionId,
        call: RequestId,
        stream: Option<u64>,
        reply: Reply,
        seen: usize,
        new: bool,
    ) -> Response {
        let first = match (stream, new) {
            (Some(number), true) => Some(Bytes::from(format!(
                "id: {EVENT_ID_PREFIX}{number}\ndata: \n\n"
            ))),
            _ => None,
        };
        let state = Streaming {
            first,
            reply: Some(reply),
            seen,
            keep_alive: self.keep_alive,
            sessions: self.sessions.clone(),
            session,
            call,
            stream,
            closed: self.closed.clone(),
        };
        let events = futures::stream::unfold(state, Streaming::next);
        sse::response(Body::from_stream(events))
    }
}

/// Where a stream of this path is.
struct Streaming {
    first: Option<Bytes>,
    /// `None` once the response went out.
    reply: Option<Reply>,
    /// Events of the call sent so far (or seen before a resume).
    seen: usize,
    keep_alive: Option<Duration>,
    sessions: Arc<BoundedSessions>,
    session: SessionId,
    /// The call's id, for cutting it off.
    call: RequestId,
    stream: Option<u64>,
    /// See [`SessionPath`].
    closed: CancellationToken,
}

impl Streaming {
    async fn next(mut self) -> Option<(Result<Bytes, std::convert::Infallible>, Self)> {
        if let Some(first) = self.first.take() {
            return Some((Ok(first), self));
        }
        let mut reply = self.reply.take()?;
        let waited = tokio::select! {
            biased;
            waited = wait(&mut reply, self.seen, self.keep_alive) => waited,
            () = self.closed.cancelled() => Waited::CutOff,
        };
        let message = match waited {
            Waited::Running => {
                self.reply = Some(reply);
                return Some((Ok(Bytes::from_static(sse::KEEP_ALIVE)), self));
            }
            Waited::Gone => return None,
            Waited::CutOff => {
                self.sessions.cancel_call(&self.session, &self.call);
                crate::shutdown::cut_off(&self.call)
            }
            Waited::Event(message) => {
                self.seen += 1;
                self.reply = Some(reply);
                // A parked stream's events can be resumed after.
                let id = self
                    .stream
                    .map(|stream| format!("id: {EVENT_ID_PREFIX}{stream}.{}\n", self.seen));
                return Some((Ok(sse::event(id.as_deref(), &message)), self));
            }
            Waited::Answered(message) => message,
        };
        if let Some(stream) = self.stream {
            self.sessions.sent(&self.session, stream);
        }
        Some((Ok(sse::event(None, &message)), self))
    }
}

/// What waiting for a direct call's next event found.
enum Waited {
    /// A message to the client before the response.
    Event(Bytes),
    Answered(Bytes),
    /// Still running after the wait's limit.
    Running,
    /// The call's task ended without a response (it panicked).
    Gone,
    /// The server closed its streams first.
    CutOff,
}

/// Waits for the call's event after the first `seen`, or its response
/// once every event is out, at most `limit` (`None`: until it comes).
async fn wait(reply: &mut Reply, seen: usize, limit: Option<Duration>) -> Waited {
    let answered = async {
        let ready = |outbox: &Outbox| outbox.events.len() > seen || outbox.answer.is_some();
        match reply.wait_for(ready).await {
            Ok(outbox) => match outbox.events.get(seen) {
                Some(event) => Waited::Event(event.clone()),
                None => Waited::Answered(outbox.answer.clone().unwrap_or_default()),
            },
            Err(_) => Waited::Gone,
        }
    };
    match limit {
        Some(limit) => tokio::time::timeout(limit, answered)
            .await
            .unwrap_or(Waited::Running),
        None => answered.await,
    }
}

/// The headers of a request this path may take (see the module docs).
fn plain_headers<T>(request: &Request<T>) -> bool {
    let headers = request.headers();
    request.method() == Method::POST
        && sole(headers, SESSION_HEADER).is_some()
        && headers.get_all(PROTOCOL_VERSION_HEADER).iter().count() <= 1
        && !headers.contains_key(METHOD_HEADER)
        && !headers.contains_key(NAME_HEADER)
        && !promotes_params(headers)
        && plain_json_post(headers)
}

/// A plain JSON answer with the headers rmcp gives its streams (what
/// `crate::json_answer` answers with too).
fn plain_json(message: Bytes) -> Response {
    let mut response = json_response(message, StatusCode::OK);
    let headers: &mut HeaderMap = response.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
