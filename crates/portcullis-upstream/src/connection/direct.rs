//! The direct call path for Streamable HTTP servers: a `tools/call` is
//! POSTed through the guarded client and its answer read straight into a
//! result, without rmcp's client service in between.
//!
//! Why: rmcp's request loop, its transport worker task, its per-request
//! header derivation (the whole message serialised to a JSON value once
//! more) and its two-pass message parsing cost more gateway CPU than the
//! HTTP exchange itself, measured on loopback.
//!
//! Servers take it as rmcp opened them:
//!
//! * through **`server/discover`** (2026-07-28 servers, and servers that
//!   offered an earlier version in their discover answer): a call needs no
//!   session. The request carries the `_meta` rmcp stamps on every such
//!   request, and, from 2026-07-28 on, the `Mcp-Method` and `Mcp-Name`
//!   headers; closing the request cancels it.
//! * through the **`initialize` handshake** (2025-era servers): the call is
//!   posted into the session rmcp opened and keeps (its `Mcp-Session-Id`
//!   as rmcp last used it, the negotiated `MCP-Protocol-Version`). A server
//!   that no longer knows the session (404) has not run the call: it goes
//!   through rmcp, which opens a new session and sends it there
//!   ([`Answer::Unserved`]). Requests the server sends on the call's
//!   stream are answered by the call's client and POSTed back, a stream
//!   that ends after an event id is resumed with `Last-Event-ID`
//!   ([`events`]), and a cancelled call is cancelled with
//!   `notifications/cancelled` ([`Direct::cancel`]).
//!
//! A caller that wants progress gets the server's reports on the answer's
//! stream through the connection's progress routes, as on rmcp's path; the
//! call's token is its request id, a range rmcp's own tokens never reach.
//!
//! It is used only where it changes nothing a caller can see (see
//! [`Direct::serves`]): where the SEP-2243 headers apply, a tool name that goes in the
//! `Mcp-Name` header as it is and no tool that promotes arguments to
//! `Mcp-Param-*` headers.
//! Everything else — the same guard, credentials, redirects and body
//! limits ([`GuardedHttp::send`]), the same error mapping, an event stream
//! answer with its notifications delivered — is as on rmcp's path.

mod events;
mod sse;
#[cfg(feature = "stdio")]
mod stdio;

pub(crate) use sse::SseDirect;
#[cfg(feature = "stdio")]
pub(crate) use stdio::StdioDirect;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use http::header::ACCEPT;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use portcullis_catalog::ToolResult;
use rmcp::model::{
    CallToolRequestParams, CancelledNotification, CancelledNotificationParam, ClientCapabilities,
    ClientJsonRpcMessage, ClientNotification, ErrorData, Implementation, JsonObject,
    JsonRpcMessage, ProgressToken, ProtocolVersion, RequestId, RequestMetaObject,
    ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::ServiceError;
use rmcp::transport::DynamicTransportError;
use rmcp::transport::streamable_http_client::StreamableHttpResponseLimits;
use serde::Serialize;
use serde_json::Value;
use url::Url;

use crate::http::{
    EVENT_STREAM, GuardedHttp, HttpFailure, JSON, SESSION_HEADER, content_type, is_media,
};
use crate::progress::UpstreamHandler;
use crate::relay::ClientRelay;

/// The first request id of a direct path. rmcp numbers its own requests
/// from 0 on the same server; direct ids live in another range so the two
/// never meet.
pub(crate) const FIRST_DIRECT_ID: u64 = 1 << 48;

/// A way of sending a connection's `tools/call` without rmcp's client
/// service: [`Direct`] for Streamable HTTP, `stdio::StdioDirect` for a
/// child's pipes, [`SseDirect`] for a legacy HTTP+SSE session. `Connection::call_direct` puts the timeout,
/// cancellation, relay slot and progress route around a round.
pub(crate) trait DirectRoute: Send + Sync {
    /// The id of the next direct request.
    fn next_id(&self) -> u64;
    /// Whether requests the server sends during a call reach rmcp's
    /// handler (which finds the call by its relay slot) rather than the
    /// call's own answer stream.
    fn relays_through_handler(&self) -> bool;
    /// One `tools/call` round, sent with `round.id`. `params` is lent, not
    /// given: the caller keeps it for a later round (rmcp's path, an input
    /// round), and is handed it back as it was.
    fn call(
        &self,
        params: &mut CallToolRequestParams,
        round: Round<'_>,
    ) -> impl Future<Output = Result<Answer, ServiceError>> + Send;
    /// Tells the server that request `id` is cancelled, without waiting.
    fn cancel(&self, id: u64, reason: &str, token: Option<&str>);
}

impl DirectRoute for Direct {
    fn next_id(&self) -> u64 {
        Direct::next_id(self)
    }

    fn relays_through_handler(&self) -> bool {
        // A session server may ask on its standalone stream too, where
        // rmcp's handler finds the call by its slot; a stateless one asks
        // only on the call's stream.
        self.keeps_session()
    }

    fn call(
        &self,
        params: &mut CallToolRequestParams,
        round: Round<'_>,
    ) -> impl Future<Output = Result<Answer, ServiceError>> + Send {
        Direct::call(self, params, round)
    }

    fn cancel(&self, id: u64, reason: &str, token: Option<&str>) {
        Direct::cancel(self, id, reason, token)
    }
}

/// What a direct call answered.
pub(crate) enum Answer {
    /// A tool result, read straight from the wire.
    Result(ToolResult),
    /// Any other result (`input_required`, an empty or unexpected one), as
    /// rmcp reads it, for the caller's usual handling.
    Other(Box<ServerResult>),
    /// The server no longer knows the session the call was posted into
    /// (HTTP 404), so it did not run the call: rmcp's path opens a new
    /// session and sends it there.
    Unserved,
}

/// What a direct path over a message transport (stdio lines, legacy SSE
/// events) keeps: how its calls are written, and the next request id.
struct MessageCalls {
    era: Era,
    next_id: AtomicU64,
}

impl MessageCalls {
    /// Calls written as `era` says, numbered from [`FIRST_DIRECT_ID`].
    fn new(era: Era) -> MessageCalls {
        MessageCalls {
            era,
            next_id: AtomicU64::new(FIRST_DIRECT_ID),
        }
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The round's `tools/call` as one serialised message.
    fn encode(
        &self,
        params: &mut CallToolRequestParams,
        round: &Round<'_>,
    ) -> Result<Vec<u8>, ServiceError> {
        self.era
            .encode_call(round.id, params, round.progress.as_ref())
            .map_err(|e| unexpected(format!("cannot encode the request: {e}")))
    }
}

/// How rmcp opened the connection.
pub(crate) enum Lifecycle {
    /// `initialize`: the calls belong to the session it opened (if the
    /// server gave one), whatever the version.
    Handshake,
    /// `server/discover`: every request carries its own metadata.
    Discover,
}

/// How calls are sent, after the lifecycle rmcp went through.
pub(crate) enum Era {
    /// Discovered (2026-07-28, or an earlier version a server offered in
    /// its discover answer): no session; `meta` is what rmcp puts on every
    /// request (protocol version, client info and capabilities);
    /// `standard_headers` when the version has the SEP-2243 headers.
    Stateless {
        meta: RequestMetaObject,
        standard_headers: bool,
    },
    /// Handshake: calls go into the session rmcp keeps.
    Session,
}

impl Era {
    /// How calls to a server that negotiated `version` with the client
    /// described by `client` are sent, after `lifecycle`.
    pub(crate) fn new(
        version: &ProtocolVersion,
        lifecycle: Lifecycle,
        client: Implementation,
        capabilities: ClientCapabilities,
    ) -> Era {
        match lifecycle {
            Lifecycle::Handshake => Era::Session,
            Lifecycle::Discover => {
                let mut meta = RequestMetaObject::default();
                meta.set_protocol_version(version.clone());
                meta.set_client_info(client);
                meta.set_client_capabilities(capabilities);
                Era::Stateless {
                    meta,
                    standard_headers: *version >= ProtocolVersion::STANDARD_HEADERS,
                }
            }
        }
    }

    /// A `tools/call` request sent with `id`, as JSON: `params` as they
    /// are, with the `_meta` rmcp would put on it (the call's own entries,
    /// then the progress token, then a discovered server's per-request
    /// metadata under the keys the call did not set). The era's metadata
    /// is written from where it is kept, never copied.
    pub(crate) fn encode_call(
        &self,
        id: u64,
        params: &mut CallToolRequestParams,
        progress: Option<&ProgressToken>,
    ) -> serde_json::Result<Vec<u8>> {
        let own = params.meta.take();
        let base = match self {
            Era::Stateless { meta, .. } => Some(&meta.0.0),
            Era::Session => None,
        };
        let encoded = serde_json::to_vec(&Envelope {
            jsonrpc: "2.0",
            id,
            method: "tools/call",
            params: CallParams {
                params,
                meta: MergedMeta {
                    own: own.as_ref().map(|meta| &meta.0.0),
                    progress,
                    base,
                },
            },
        });
        params.meta = own;
        encoded
    }
}

/// A call's parameters with their `_meta` merged (see [`Era::encode_call`]);
/// `params` has no `_meta` of its own here.
#[derive(Serialize)]
struct CallParams<'a> {
    #[serde(flatten)]
    params: &'a CallToolRequestParams,
    #[serde(rename = "_meta", skip_serializing_if = "MergedMeta::is_empty")]
    meta: MergedMeta<'a>,
}

/// `_meta` written from three places without copying any: the call's own
/// entries, its progress token (over an own one), the era's entries under
/// keys neither set.
struct MergedMeta<'a> {
    own: Option<&'a JsonObject>,
    progress: Option<&'a ProgressToken>,
    base: Option<&'a JsonObject>,
}

impl MergedMeta<'_> {
    const PROGRESS_TOKEN: &'static str = "progressToken";

    fn is_empty(&self) -> bool {
        self.own.is_none_or(JsonObject::is_empty)
            && self.progress.is_none()
            && self.base.is_none_or(JsonObject::is_empty)
    }

    /// Whether an entry under `key` is written before the era's.
    fn set_before(&self, key: &str) -> bool {
        self.own.is_some_and(|own| own.contains_key(key))
            || (self.progress.is_some() && key == Self::PROGRESS_TOKEN)
    }
}

impl Serialize for MergedMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.own.into_iter().flatten() {
            if !(self.progress.is_some() && key == Self::PROGRESS_TOKEN) {
                map.serialize_entry(key, value)?;
            }
        }
        if let Some(token) = self.progress {
            map.serialize_entry(Self::PROGRESS_TOKEN, token)?;
        }
        for (key, value) in self.base.into_iter().flatten() {
            if !self.set_before(key) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

/// A Streamable HTTP server's direct call path.
pub(crate) struct Direct {
    http: GuardedHttp,
    url: Url,
    /// `MCP-Protocol-Version`: the negotiated version.
    version: HeaderValue,
    era: Era,
    /// Set once any listing had a tool with `x-mcp-header` annotations:
    /// rmcp promotes those arguments to headers, so such a 2026 server is
    /// called through rmcp from then on.
    promotes_headers: AtomicBool,
    next_id: AtomicU64,
}

/// The request body, serialised straight from the borrowed parameters.
#[derive(Serialize)]
struct Envelope<'a> {
    jsonrpc: &'static str,
    id: u64,
    method: &'static str,
    params: CallParams<'a>,
}

/// The call a direct round is for, as its answer stream needs it.
pub(crate) struct Round<'a> {
    /// The request id the call was posted with ([`Direct::next_id`]).
    pub(crate) id: u64,
    /// The call's own credential, if it has one.
    pub(crate) token: Option<&'a str>,
    /// Where notifications on the answer's stream go.
    pub(crate) handler: &'a UpstreamHandler,
    /// The call's client: it answers what the server asks on the stream.
    pub(crate) relay: Option<&'a Arc<dyn ClientRelay>>,
    /// The progress token the call is sent with, when its caller wants
    /// progress (its route is the caller's to open).
    pub(crate) progress: Option<ProgressToken>,
}

impl Direct {
    /// The direct path for a Streamable HTTP server that negotiated
    /// `version` with the client described by `client`, through
    /// `lifecycle`.
    pub(crate) fn new(
        http: GuardedHttp,
        url: Url,
        version: &ProtocolVersion,
        lifecycle: Lifecycle,
        client: Implementation,
        capabilities: ClientCapabilities,
    ) -> Option<Direct> {
        let header = HeaderValue::from_str(version.as_str()).ok()?;
        Some(Direct {
            http,
            url,
            version: header,
            era: Era::new(version, lifecycle, client, capabilities),
            promotes_headers: AtomicBool::new(false),
            next_id: AtomicU64::new(FIRST_DIRECT_ID),
        })
    }

    /// Whether calls go into a session (the server was opened with the
    /// handshake).
    pub(crate) fn keeps_session(&self) -> bool {
        matches!(self.era, Era::Session)
    }

    /// Whether calls carry the SEP-2243 headers (`Mcp-Method`,
    /// `Mcp-Name`, `Mcp-Param-*`).
    fn standard_headers(&self) -> bool {
        matches!(
            self.era,
            Era::Stateless {
                standard_headers: true,
                ..
            }
        )
    }

    /// Notes a listing's input schemas: on a 2026 server, a tool that
    /// annotates `x-mcp-header` sends its calls through rmcp from now on.
    /// (rmcp promotes no arguments to headers for earlier revisions.)
    pub(crate) fn saw_schemas<'a, S: Serialize + 'a>(
        &self,
        schemas: impl IntoIterator<Item = &'a S>,
    ) {
        if !self.standard_headers() {
            return;
        }
        let promotes = schemas.into_iter().any(|schema| {
            serde_json::to_string(schema).is_ok_and(|schema| schema.contains("x-mcp-header"))
        });
        if promotes {
            self.promotes_headers.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a call of `remote_name` can go this way: where the SEP-2243
    /// headers apply, no argument headers and a name that needs no header
    /// encoding.
    pub(crate) fn serves(&self, remote_name: &str) -> bool {
        !self.standard_headers()
            || (!self.promotes_headers.load(Ordering::Relaxed) && plain_header_value(remote_name))
    }

    /// The id of the next direct request.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// One `tools/call` round, posted with `round.id`. Notifications in an
    /// event-stream answer are delivered through `round.handler`, as
    /// rmcp's path delivers them.
    pub(crate) async fn call(
        &self,
        params: &mut CallToolRequestParams,
        round: Round<'_>,
    ) -> Result<Answer, ServiceError> {
        let session = match &self.era {
            Era::Session => self.http.session(),
            Era::Stateless { .. } => None,
        };
        let body = self
            .era
            .encode_call(round.id, params, round.progress.as_ref())
            .map_err(|e| unexpected(format!("cannot encode the request: {e}")))?;
        let mut headers = self.protocol_headers(session.as_deref(), BOTH);
        if self.standard_headers() {
            headers.insert(
                HeaderName::from_static("mcp-method"),
                HeaderValue::from_static("tools/call"),
            );
            let name = HeaderValue::from_str(&params.name)
                .map_err(|_| unexpected("the tool name is not a header value".into()))?;
            headers.insert(HeaderName::from_static("mcp-name"), name);
        }
        let (response, _) = self
            .http
            .send_exchange(
                Method::POST,
                self.url.clone(),
                headers,
                Some(Bytes::from(body)),
                round.token,
            )
            .await
            .map_err(transport)?;
        let limits = StreamableHttpResponseLimits::default();
        let status = response.status();
        if status == StatusCode::NOT_FOUND && session.is_some() {
            return Ok(Answer::Unserved);
        }
        let kind = content_type(&response);
        if !status.is_success() {
            // A JSON-RPC error in the body is the server's answer; anything
            // else is a failed request, as rmcp reports it.
            let body = crate::http::read_bounded(response, limits.max_error_response_size)
                .await
                .unwrap_or_default();
            if let Ok(JsonRpcMessage::Error(error)) =
                serde_json::from_slice::<ServerJsonRpcMessage>(&body)
            {
                return Err(ServiceError::McpError(error.error));
            }
            return Err(unexpected(format!("HTTP {status}")));
        }
        if status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT {
            return Err(unexpected(format!("HTTP {status} to a request")));
        }
        if is_media(kind.as_deref(), JSON) {
            let body = crate::http::read_bounded(response, limits.max_json_response_size)
                .await
                .map_err(transport)?;
            let message: Value = serde_json::from_slice(&body)
                .map_err(|e| unexpected(format!("unreadable answer: {e}")))?;
            if !answers(&message, round.id) {
                return Err(unexpected("the server answered another request".into()));
            }
            return answer(message);
        }
        if is_media(kind.as_deref(), EVENT_STREAM) {
            let stream = crate::http::sse_events(response, limits.max_sse_event_size);
            return events::read(self, stream, session, round).await;
        }
        Err(unexpected(format!(
            "unexpected content type {}",
            kind.as_deref().unwrap_or("(none)")
        )))
    }

    /// Tells an initialize-era server that the call posted as `id` is
    /// cancelled (`notifications/cancelled`, on a task of its own: the
    /// caller does not wait). A 2026 server needs nothing: the request's
    /// closed stream is that revision's signal.
    pub(crate) fn cancel(&self, id: u64, reason: &str, token: Option<&str>) {
        if !self.keeps_session() {
            return;
        }
        let message = cancelled(id, reason);
        let replier = self.replier(self.http.session(), token);
        tokio::spawn(async move { replier.post(&message).await });
    }

    /// The headers every request of this path carries: `Accept`, the
    /// negotiated protocol version and the session, if any.
    fn protocol_headers(&self, session: Option<&str>, accept: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::with_capacity(5);
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        headers.insert(
            HeaderName::from_static("mcp-protocol-version"),
            self.version.clone(),
        );
        if let Some(value) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
            headers.insert(SESSION_HEADER, value);
        }
        headers
    }

    /// Where messages that await no answer (replies to the server's
    /// requests, cancellations) are POSTed for a call.
    fn replier(&self, session: Option<Arc<str>>, token: Option<&str>) -> Replier {
        Replier {
            http: self.http.clone(),
            url: self.url.clone(),
            headers: self.protocol_headers(session.as_deref(), BOTH),
            token: token.map(str::to_owned),
        }
    }
}

/// Where a reply to one of the server's requests is POSTed.
pub(super) struct Replier {
    http: GuardedHttp,
    url: Url,
    headers: HeaderMap,
    token: Option<String>,
}

impl Replier {
    /// POSTs `message`, giving up after [`REPLY_TIMEOUT`]. A failure is
    /// only logged: the server times out its side of it.
    pub(super) async fn post(self, message: &ClientJsonRpcMessage) {
        let body = match serde_json::to_vec(message) {
            Ok(body) => Bytes::from(body),
            Err(e) => {
                tracing::debug!("a reply to the server could not be encoded: {e}");
                return;
            }
        };
        let sent = self.http.send(
            Method::POST,
            self.url,
            self.headers,
            Some(body),
            self.token.as_deref(),
        );
        let Ok(sent) = tokio::time::timeout(REPLY_TIMEOUT, sent).await else {
            tracing::debug!(
                server = self.http.server(),
                "the server did not take a message posted to it in time"
            );
            return;
        };
        match sent {
            Ok((response, _)) if response.status().is_success() => {}
            Ok((response, _)) => tracing::debug!(
                server = self.http.server(),
                status = response.status().as_u16(),
                "the server refused a message posted to it"
            ),
            Err(e) => tracing::debug!(
                server = self.http.server(),
                "a message could not be posted to the server: {e}"
            ),
        }
    }
}

/// How long a message that awaits no answer (a reply, a cancellation)
/// may take to be accepted: a server takes one at once, and one that
/// holds it would otherwise keep a task and a connection per call (a
/// cancellation outlives its call) for ever.
const REPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `Accept` for a request whose answer may be JSON or an event stream.
const BOTH: &str = "application/json, text/event-stream";

/// Whether `message` is the answer to the request posted as `id` (or an
/// error the server could not tie to any request).
fn answers(message: &Value, id: u64) -> bool {
    match message.get("id") {
        Some(Value::Null) | None => message.get("error").is_some(),
        Some(other) => other.as_u64() == Some(id),
    }
}

/// Reads one JSON-RPC answer: a tool result straight into [`ToolResult`],
/// anything else through rmcp's types.
fn answer(mut message: Value) -> Result<Answer, ServiceError> {
    if let Some(error) = message.get_mut("error") {
        let error: ErrorData = serde_json::from_value(error.take())
            .map_err(|e| unexpected(format!("unreadable error: {e}")))?;
        return Err(ServiceError::McpError(error));
    }
    let Some(result) = message.get_mut("result").map(Value::take) else {
        return Err(ServiceError::UnexpectedResponse);
    };
    if is_tool_result(&result) {
        return serde_json::from_value::<ToolResult>(result)
            .map(Answer::Result)
            .map_err(|e| unexpected(format!("unreadable tool result: {e}")));
    }
    serde_json::from_value::<ServerResult>(result)
        .map(|other| Answer::Other(Box::new(other)))
        .map_err(|e| unexpected(format!("unreadable result: {e}")))
}

/// A complete tool result: content or structured content, and no other
/// result type (`input_required`) or task in its place.
fn is_tool_result(result: &Value) -> bool {
    let Some(object) = result.as_object() else {
        return false;
    };
    let complete = object
        .get("resultType")
        .is_none_or(|t| t.as_str() == Some("complete"));
    complete
        && !object.contains_key("task")
        && (object.contains_key("content") || object.contains_key("structuredContent"))
}

/// A value `Mcp-Name` carries as it is (rmcp would Base64-wrap others).
fn plain_header_value(value: &str) -> bool {
    !value.is_empty()
        && !value.starts_with([' ', '\t'])
        && !value.ends_with([' ', '\t'])
        && value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !value.starts_with("=?base64?")
}

fn transport(failure: HttpFailure) -> ServiceError {
    ServiceError::TransportSend(DynamicTransportError::from_parts(
        "streamable-http",
        std::any::TypeId::of::<Direct>(),
        Box::new(failure),
    ))
}

/// Reads the answer a message transport (stdio, legacy SSE) handed a
/// direct call: `None` is a transport that ended first.
fn message_answer(message: Option<ServerJsonRpcMessage>) -> Result<Answer, ServiceError> {
    match message {
        Some(JsonRpcMessage::Response(response)) => match response.result {
            ServerResult::CallToolResult(result) => crate::connection::tool_result(result)
                .map(Answer::Result)
                .map_err(|e| unexpected(format!("unreadable tool result: {e}"))),
            other => Ok(Answer::Other(Box::new(other))),
        },
        Some(JsonRpcMessage::Error(error)) => Err(ServiceError::McpError(error.error)),
        Some(_) => Err(ServiceError::UnexpectedResponse),
        None => Err(ServiceError::TransportClosed),
    }
}

/// `notifications/cancelled` for direct request `id`.
fn cancelled(id: u64, reason: &str) -> ClientJsonRpcMessage {
    let mut param = CancelledNotificationParam::new(Some(RequestId::Number(id as i64)), None);
    param.reason = Some(reason.to_owned());
    ClientJsonRpcMessage::notification(ClientNotification::CancelledNotification(
        CancelledNotification::new(param),
    ))
}

fn unexpected(reason: String) -> ServiceError {
    ServiceError::McpError(ErrorData::internal_error(reason, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_results_are_read_directly_and_others_through_rmcp() {
        let body = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "content": [{"type": "text", "text": "hi"}], "isError": false}});
        match answer(body) {
            Ok(Answer::Result(result)) => assert_eq!(result, ToolResult::text("hi")),
            _ => panic!("expected a tool result"),
        }
        let empty = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
        assert!(matches!(answer(empty), Ok(Answer::Other(_))));
        let error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad"}});
        match answer(error) {
            Err(ServiceError::McpError(data)) => assert_eq!(data.message, "bad"),
            _ => panic!("expected the server's error"),
        }
    }

    /// The request as rmcp would write it: the era's `_meta` cloned, the
    /// call's capabilities and progress token set over it.
    fn as_rmcp_writes_it(
        era: &Era,
        id: u64,
        params: &CallToolRequestParams,
        progress: Option<&ProgressToken>,
    ) -> Value {
        let mut params = params.clone();
        if let Era::Stateless { meta, .. } = era {
            let own = params.meta.as_ref().and_then(|m| m.client_capabilities());
            let mut meta = meta.clone();
            if let Some(own) = own {
                meta.set_client_capabilities(own);
            }
            params.meta = Some(meta);
        }
        if let Some(token) = progress {
            params
                .meta
                .get_or_insert_with(Default::default)
                .set_progress_token(token.clone());
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    }

    #[test]
    fn a_call_is_written_with_the_meta_rmcp_would_give_it_and_no_key_twice() {
        let mut own = RequestMetaObject::default();
        own.set_client_capabilities(ClientCapabilities::builder().enable_elicitation().build());
        let token = ProgressToken(rmcp::model::NumberOrString::Number(7));
        let version = ProtocolVersion::V_2026_07_28;
        let client = Implementation::new("portcullis", "1");
        let eras = [
            Era::new(
                &version,
                Lifecycle::Discover,
                client.clone(),
                ClientCapabilities::default(),
            ),
            Era::new(
                &version,
                Lifecycle::Handshake,
                client,
                ClientCapabilities::default(),
            ),
        ];
        for era in &eras {
            for own in [None, Some(own.clone())] {
                for progress in [None, Some(&token)] {
                    let mut params = CallToolRequestParams::new("echo")
                        .with_arguments(json!({"m": "hi"}).as_object().unwrap().clone());
                    params.meta = own.clone();
                    let expected = as_rmcp_writes_it(era, 9, &params, progress);
                    let written = era.encode_call(9, &mut params, progress).unwrap();
                    let text = String::from_utf8(written.clone()).unwrap();
                    assert_eq!(
                        serde_json::from_slice::<Value>(&written).unwrap(),
                        expected,
                        "{text}"
                    );
                    for key in ["clientCapabilities", "progressToken", "\"_meta\""] {
                        assert!(text.matches(key).count() <= 1, "{key} twice: {text}");
                    }
                    // The parameters are left as they were given.
                    assert_eq!(params.meta, own);
                }
            }
        }
    }

    #[test]
    fn only_plain_names_go_in_the_header_as_they_are() {
        assert!(plain_header_value("echo"));
        assert!(plain_header_value("get-weather_2"));
        assert!(!plain_header_value(" echo"));
        assert!(!plain_header_value("écho"));
        assert!(!plain_header_value(""));
    }
}
