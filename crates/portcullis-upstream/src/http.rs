//! Guarded HTTP: every request to a remote server goes through
//! [`GuardedHttp::send`], which checks the host, follows redirects by hand,
//! withholds credentials across origins and notices 401/403.
//!
//! reqwest's own redirect following is off: it would re-send our configured
//! headers to whatever origin a server names, and it cannot re-check the
//! allow-list per hop. Here, per hop: the SSRF guard runs before the request;
//! at most [`MAX_REDIRECTS`] redirects are followed; a 303 (or a 301/302
//! answering a POST) becomes a bodiless GET; a hop to another origin drops
//! `Authorization` and every configured header for the rest of the chain and
//! reports `cross-origin-headers-withheld` once per origin.
//!
//! [`GuardedHttp`] also implements rmcp's `StreamableHttpClient`, so rmcp's
//! Streamable HTTP transport (both protocol generations, sessions, the 2026
//! headers) runs on top of it; the legacy SSE transport uses `send` directly.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use portcullis_catalog::{Diagnostic, Rule};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, GetExtensions, ServerJsonRpcMessage, ServerResult,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};
use thiserror::Error;
use url::Url;

use crate::config::is_loopback_host;
use crate::health::{ServerHealth, rejection_message};
use crate::hosts::HostGuard;
use crate::report::DiagnosticSink;

/// Redirects followed per request; the next one fails.
pub const MAX_REDIRECTS: usize = 5;

pub(crate) const SESSION_HEADER: &str = "mcp-session-id";
pub(crate) const LAST_EVENT_ID_HEADER: &str = "last-event-id";
pub(crate) const EVENT_STREAM: &str = "text/event-stream";
pub(crate) const JSON: &str = "application/json";

/// A bearer token for one call, carried to the transport in the request's
/// extensions (the per-call `auth` resolution).
#[derive(Clone)]
pub(crate) struct CallCredential(pub(crate) String);

/// Why a guarded request failed. Messages are fixed sentences ready for a
/// person and never contain a credential.
#[derive(Debug, Error)]
pub(crate) enum HttpFailure {
    /// The SSRF guard refused a host (the message is ready for a person).
    #[error("{0}")]
    Refused(String),
    /// A redirect chain longer than [`MAX_REDIRECTS`].
    #[error("MCP server \"{0}\" exceeded {MAX_REDIRECTS} redirects.")]
    TooManyRedirects(String),
    /// A redirect we will not follow.
    #[error("MCP server \"{server}\" sent an unusable redirect: {reason}")]
    BadRedirect { server: String, reason: String },
    /// 401 or 403.
    #[error("{0}")]
    Rejected(String),
    /// The request itself failed.
    #[error("HTTP request failed: {0}")]
    Http(#[from] reqwest::Error),
    /// A header we were given is not a valid HTTP header.
    #[error("MCP server \"{server}\" has an invalid header {name:?}")]
    InvalidHeader { server: String, name: String },
    /// A body over its size limit.
    #[error("response body exceeded {0} bytes")]
    TooLarge(usize),
    /// The credential could not be presented (a DPoP proof not signed);
    /// the message carries no token.
    #[error("{0}")]
    Credentials(String),
    /// The request failed on the call lane (`crate::lane`).
    #[error("HTTP request failed: {0}")]
    Lane(#[from] crate::lane::LaneError),
}

struct Shared {
    http: reqwest::Client,
    server: String,
    guard: HostGuard,
    /// Configured headers; withheld after a cross-origin hop.
    configured: HeaderMap,
    /// The token `auth` resolved at connect time, if any.
    bearer: Option<String>,
    /// The `auth` resolver, told of 401/403 challenges.
    auth: Option<crate::credentials::Auth>,
    health: Arc<ServerHealth>,
    diagnostics: DiagnosticSink,
    /// Origins already reported as `cross-origin-headers-withheld`.
    reported: Mutex<HashSet<String>>,
    /// Set once a POST answer opened a session: rmcp then opens the
    /// session's standalone GET stream in the background.
    session_opened: AtomicBool,
    /// `true` once that GET stream's first attempt was answered (opened,
    /// refused or failed): see [`GuardedHttp::standalone_settled`].
    standalone: tokio::sync::watch::Sender<bool>,
    /// The endpoint rmcp posts to, parsed once: rmcp hands the same URI
    /// string to every request, and parsing it was a measurable part of a
    /// proxied call.
    endpoint: OnceLock<(Arc<str>, Url)>,
    /// The session rmcp is on: the id it last posted with, or the one the
    /// server's answer to its `initialize` gave. The direct call path posts
    /// into the same session.
    session: Mutex<Option<Arc<str>>>,
    /// Set once rmcp posted `initialize`: the server is held to the
    /// handshake's lifecycle (a session, if it gives one), not to
    /// `server/discover`'s per-request metadata, whatever the version.
    handshake: AtomicBool,
    /// Where the direct call path's requests go when the server's client
    /// is our own (`crate::lane`).
    lane: Option<Arc<crate::lane::Lane>>,
}

/// A reqwest client bound to one server's guard, headers and health.
#[derive(Clone)]
pub(crate) struct GuardedHttp {
    shared: Arc<Shared>,
}

/// Everything a guarded client needs besides the reqwest client.
pub(crate) struct GuardedHttpParts {
    pub(crate) server: String,
    pub(crate) guard: HostGuard,
    pub(crate) headers: std::collections::BTreeMap<String, String>,
    pub(crate) bearer: Option<String>,
    pub(crate) auth: Option<crate::credentials::Auth>,
    pub(crate) health: Arc<ServerHealth>,
    pub(crate) diagnostics: DiagnosticSink,
    /// The call lane built beside the client, if any.
    pub(crate) lane: Option<Arc<crate::lane::Lane>>,
}

impl GuardedHttp {
    pub(crate) fn new(http: reqwest::Client, parts: GuardedHttpParts) -> Result<Self, HttpFailure> {
        let mut configured = HeaderMap::new();
        for (name, value) in &parts.headers {
            let invalid = || HttpFailure::InvalidHeader {
                server: parts.server.clone(),
                name: name.clone(),
            };
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
            let mut value = HeaderValue::from_str(value).map_err(|_| invalid())?;
            value.set_sensitive(true);
            configured.insert(name, value);
        }
        Ok(GuardedHttp {
            shared: Arc::new(Shared {
                http,
                server: parts.server,
                guard: parts.guard,
                configured,
                bearer: parts.bearer,
                auth: parts.auth,
                health: parts.health,
                diagnostics: parts.diagnostics,
                reported: Mutex::new(HashSet::new()),
                session_opened: AtomicBool::new(false),
                session: Mutex::new(None),
                handshake: AtomicBool::new(false),
                standalone: tokio::sync::watch::Sender::new(false),
                endpoint: OnceLock::new(),
                lane: parts.lane,
            }),
        })
    }

    pub(crate) fn server(&self) -> &str {
        &self.shared.server
    }

    /// The id of the session rmcp is on, if the server gave one.
    pub(crate) fn session(&self) -> Option<Arc<str>> {
        self.shared
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether rmcp opened the connection with the `initialize` handshake.
    pub(crate) fn handshook(&self) -> bool {
        self.shared.handshake.load(Ordering::Acquire)
    }

    fn note_session(&self, session: &Arc<str>) {
        let mut current = self
            .shared
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_none_or(|known| known != session) {
            *current = Some(session.clone());
        }
    }

    /// Waits, at most `limit`, until the session's standalone GET stream has
    /// been answered; returns at once when no session was opened (a
    /// stateless server has no such stream). A server sends requests and
    /// notifications unrelated to any call (an elicitation of its own, a
    /// list change) on that stream, and some drop them while it is not
    /// open: a connection handed out before it opened could lose the first
    /// of them.
    pub(crate) async fn standalone_settled(&self, limit: Duration) {
        if !self.shared.session_opened.load(Ordering::Acquire) {
            return;
        }
        let mut settled = self.shared.standalone.subscribe();
        let waited = tokio::time::timeout(limit, settled.wait_for(|done| *done)).await;
        if waited.is_err() {
            tracing::debug!(
                server = %self.shared.server,
                "the session's event stream was not answered within {} ms; going on",
                limit.as_millis()
            );
        }
    }

    /// The token to present: per-call auth over connect-time auth; an
    /// empty token is no token (see `crate::credentials`).
    fn token<'a>(&'a self, call_token: Option<&'a str>) -> Option<&'a str> {
        call_token
            .or(self.shared.bearer.as_deref())
            .filter(|t| !t.is_empty())
    }

    /// Configured headers < the token, presented as the resolver says for
    /// this request (a DPoP proof is bound to `method` and `url`).
    fn credentials(
        &self,
        token: Option<&str>,
        method: &Method,
        url: &Url,
    ) -> Result<HeaderMap, HttpFailure> {
        let mut headers = self.shared.configured.clone();
        let Some(token) = token else {
            return Ok(headers);
        };
        let presented = match &self.shared.auth {
            Some(auth) => auth
                .present(token, method.as_str(), url)
                .map_err(HttpFailure::Credentials)?,
            None => crate::credentials::Presentation::bearer(token),
        };
        let invalid = |name: &str| HttpFailure::InvalidHeader {
            server: self.shared.server.clone(),
            name: name.into(),
        };
        let mut value = HeaderValue::from_str(&presented.authorization)
            .map_err(|_| invalid("Authorization"))?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
        if let Some(proof) = presented.dpop {
            let mut value = HeaderValue::from_str(&proof).map_err(|_| invalid("DPoP"))?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static("dpop"), value);
        }
        Ok(headers)
    }

    /// Sends one request, guarded, following redirects by hand. Returns the
    /// final response and the URL that produced it.
    pub(crate) async fn send(
        &self,
        method: Method,
        url: Url,
        protocol: HeaderMap,
        body: Option<Bytes>,
        call_token: Option<&str>,
    ) -> Result<(reqwest::Response, Url), HttpFailure> {
        self.send_on(method, url, protocol, body, call_token, false)
            .await
    }

    /// [`GuardedHttp::send`] for a short exchange, one whose answer is read
    /// to its end before anything else waits on the connection (a direct
    /// `tools/call`, a legacy SSE POST): on the call lane when the server
    /// has one (`crate::lane`), everything else as `send` does it. Never
    /// for a stream a server holds open.
    pub(crate) async fn send_exchange(
        &self,
        method: Method,
        url: Url,
        protocol: HeaderMap,
        body: Option<Bytes>,
        call_token: Option<&str>,
    ) -> Result<(reqwest::Response, Url), HttpFailure> {
        self.send_on(method, url, protocol, body, call_token, true)
            .await
    }

    async fn send_on(
        &self,
        method: Method,
        url: Url,
        protocol: HeaderMap,
        body: Option<Bytes>,
        call_token: Option<&str>,
        on_lane: bool,
    ) -> Result<(reqwest::Response, Url), HttpFailure> {
        let shared = &self.shared;
        let lane = shared.lane.as_ref().filter(|_| on_lane);
        let token = self.token(call_token);
        let (mut method, mut url, mut body) = (method, url, body);
        let mut withheld = false;
        // Set by a redirect to another origin; acted on once the new host has
        // passed the guard, so a refused hop reports only the refusal.
        let mut crossing = false;
        // A server that asks for a DPoP nonce is answered once per request.
        let mut nonce_retried = false;
        let mut hop = 0;
        loop {
            if let Err(refusal) = shared.guard.check(&url).await {
                let message = refusal.message(&shared.server);
                shared.health.record_failure(message.clone());
                return Err(HttpFailure::Refused(message));
            }
            if crossing {
                withheld = true;
                self.report_withheld(&url);
            }
            let response = match lane {
                Some(lane) => {
                    // The headers as reqwest's builder below merges them.
                    let mut headers = protocol.clone();
                    if !withheld {
                        replace_headers(&mut headers, self.credentials(token, &method, &url)?);
                    }
                    if body.is_some() {
                        headers.append(CONTENT_TYPE, HeaderValue::from_static(JSON));
                    }
                    lane.send(method.clone(), &url, headers, body.clone())
                        .await?
                }
                None => {
                    let mut request = shared
                        .http
                        .request(method.clone(), url.clone())
                        .headers(protocol.clone());
                    if !withheld {
                        // Per hop: a proof names the URL it is sent to.
                        request = request.headers(self.credentials(token, &method, &url)?);
                    }
                    if let Some(body) = &body {
                        request = request.header(CONTENT_TYPE, JSON).body(body.clone());
                    }
                    request.send().await?
                }
            };
            let status = response.status();
            if !withheld
                && token.is_some()
                && let Some(auth) = &shared.auth
                && auth.answered(&shared.server, status.as_u16(), response.headers())
                && !nonce_retried
            {
                nonce_retried = true;
                continue;
            }
            let location = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            match (status, location) {
                (status, Some(location))
                    if status.is_redirection() && status != StatusCode::NOT_MODIFIED =>
                {
                    if hop == MAX_REDIRECTS {
                        let failure = HttpFailure::TooManyRedirects(shared.server.clone());
                        shared.health.record_failure(failure.to_string());
                        return Err(failure);
                    }
                    let next = self.next_hop(&url, &location).inspect_err(|e| {
                        shared.health.record_failure(e.to_string());
                    })?;
                    crossing = !withheld && next.origin() != url.origin();
                    hop += 1;
                    if status == StatusCode::SEE_OTHER
                        || (matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND)
                            && method == Method::POST)
                    {
                        method = Method::GET;
                        body = None;
                    }
                    url = next;
                }
                (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, _) => {
                    if let Some(auth) = &shared.auth {
                        let challenge = response
                            .headers()
                            .get(http::header::WWW_AUTHENTICATE)
                            .and_then(|v| v.to_str().ok());
                        auth.challenged(&shared.server, status.as_u16(), challenge);
                        // A credential that can be renewed (an OAuth grant
                        // refreshed, stepped up or logged in anew): this
                        // request fails, the connection stays usable.
                        if auth.renewable() && shared.health.is_available() {
                            shared.health.reject_once(status.as_u16());
                            return Err(HttpFailure::Rejected(rejection_message(
                                &shared.server,
                                status.as_u16(),
                            )));
                        }
                    }
                    shared.health.reject(status.as_u16());
                    return Err(HttpFailure::Rejected(rejection_message(
                        &shared.server,
                        status.as_u16(),
                    )));
                }
                _ => return Ok((response, url)),
            }
        }
    }

    fn next_hop(&self, from: &Url, location: &str) -> Result<Url, HttpFailure> {
        let bad = |reason: String| HttpFailure::BadRedirect {
            server: self.shared.server.clone(),
            reason,
        };
        let mut next = from
            .join(location)
            .map_err(|_| bad("its Location is not a URL".into()))?;
        next.set_fragment(None);
        match next.scheme() {
            "https" => {}
            "http" if next.host_str().is_some_and(is_loopback_host) => {}
            "http" => return Err(bad("it downgrades to plain http: off loopback".into())),
            other => return Err(bad(format!("it names scheme \"{other}:\""))),
        }
        if !next.username().is_empty() || next.password().is_some() {
            return Err(bad("its Location carries userinfo".into()));
        }
        Ok(next)
    }

    fn report_withheld(&self, next: &Url) {
        let origin = next.origin().ascii_serialization();
        let first = self
            .shared
            .reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(origin.clone());
        if first {
            self.shared.diagnostics.report(Diagnostic::new(
                Rule::CrossOriginHeadersWithheld,
                self.shared.server.clone(),
                format!(
                    "MCP server \"{}\" redirected to another origin ({origin}); Authorization and configured headers were withheld.",
                    self.shared.server
                ),
            ));
        }
    }

    fn parse_uri(&self, uri: &Arc<str>) -> Result<Url, StreamableHttpError<HttpFailure>> {
        if let Some((known, url)) = self.shared.endpoint.get()
            && known == uri
        {
            return Ok(url.clone());
        }
        let url = Url::parse(uri).map_err(|_| {
            StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
                "MCP server \"{}\" has an unusable URL",
                self.shared.server
            )))
        })?;
        // The first endpoint is the one rmcp keeps using; another URI (none
        // today) is parsed each time.
        let _ = self.shared.endpoint.set((uri.clone(), url.clone()));
        Ok(url)
    }
}

/// `src` over `dst` as reqwest's `RequestBuilder::headers` puts them: each
/// name in `src` replaces that name's values in `dst`.
fn replace_headers(dst: &mut HeaderMap, src: HeaderMap) {
    let mut previous: Option<http::header::OccupiedEntry<'_, HeaderValue>> = None;
    for (name, value) in src {
        match name {
            Some(name) => match dst.entry(name) {
                http::header::Entry::Occupied(mut entry) => {
                    entry.insert(value);
                    previous = Some(entry);
                }
                http::header::Entry::Vacant(entry) => {
                    previous = Some(entry.insert_entry(value));
                }
            },
            // A further value of the name before it.
            None => {
                if let Some(entry) = previous.as_mut() {
                    entry.append(value);
                }
            }
        }
    }
}

fn protocol_headers(
    custom: HashMap<HeaderName, HeaderValue>,
    session_id: Option<&str>,
) -> Result<HeaderMap, StreamableHttpError<HttpFailure>> {
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        // JSON first: a server that may choose answers a plain call
        // with one JSON body rather than an event stream.
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    for (name, value) in custom {
        headers.insert(name, value);
    }
    if let Some(session) = session_id {
        let value = HeaderValue::from_str(session).map_err(|_| {
            StreamableHttpError::UnexpectedServerResponse(Cow::Borrowed("invalid session id"))
        })?;
        headers.insert(SESSION_HEADER, value);
    }
    Ok(headers)
}

pub(crate) fn content_type(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.to_ascii_lowercase())
}

pub(crate) fn is_media(content_type: Option<&str>, media: &str) -> bool {
    content_type.is_some_and(|ct| ct.split(';').next().map(str::trim) == Some(media))
}

/// Reads at most `max` bytes of body.
pub(crate) async fn read_bounded(
    response: reqwest::Response,
    max: usize,
) -> Result<Vec<u8>, HttpFailure> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > max {
            return Err(HttpFailure::TooLarge(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads a prefix of at most `max` bytes (for error bodies).
async fn read_prefix(response: reqwest::Response, max: usize) -> String {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        let room = max.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= max {
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// An SSE response as rmcp wants it, each event bounded to `max` bytes.
pub(crate) fn sse_events(
    response: reqwest::Response,
    max: usize,
) -> BoxStream<'static, Result<Sse, SseError>> {
    SseStream::from_bytes_stream(BoundedEvents::new(response.bytes_stream(), max)).boxed()
}

/// Whether an event stream failed because its connection broke (worth
/// resuming), not because of what the server sent (an oversized or
/// malformed event).
pub(crate) fn interrupted(error: &SseError) -> bool {
    matches!(error, SseError::Body(e) if !e.is::<EventStreamError>()
        || matches!(e.downcast_ref::<EventStreamError>(), Some(EventStreamError::Http(_))))
}

/// Fails a byte stream once one SSE event (the bytes between blank lines)
/// exceeds `max`: sse-stream buffers an event whole, so an unbounded event
/// from a hostile server would be unbounded memory.
struct BoundedEvents<S> {
    inner: S,
    max: usize,
    in_event: usize,
    newline: bool,
}

impl<S> BoundedEvents<S> {
    fn new(inner: S, max: usize) -> Self {
        BoundedEvents {
            inner,
            max,
            in_event: 0,
            newline: false,
        }
    }
}

/// The error a [`BoundedEvents`] stream ends with.
#[derive(Debug, Error)]
enum EventStreamError {
    #[error("SSE event exceeded {0} bytes")]
    TooLarge(usize),
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

impl<S> Stream for BoundedEvents<S>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Unpin,
{
    type Item = Result<Bytes, EventStreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match this.inner.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                for &byte in chunk.iter() {
                    match byte {
                        b'\n' if this.newline => this.in_event = 0,
                        b'\n' => this.newline = true,
                        b'\r' => {}
                        _ => {
                            this.newline = false;
                            this.in_event += 1;
                        }
                    }
                    if this.in_event > this.max {
                        return Poll::Ready(Some(Err(EventStreamError::TooLarge(this.max))));
                    }
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn client_error(e: HttpFailure) -> StreamableHttpError<HttpFailure> {
    StreamableHttpError::Client(e)
}

/// The credential a request carries in its extensions, if any.
fn call_token(message: &ClientJsonRpcMessage) -> Option<String> {
    let ClientJsonRpcMessage::Request(request) = message else {
        return None;
    };
    request
        .request
        .extensions()
        .get::<CallCredential>()
        .map(|c| c.0.clone())
}

fn is_discover(message: &ClientJsonRpcMessage) -> Option<rmcp::model::RequestId> {
    match message {
        ClientJsonRpcMessage::Request(r)
            if matches!(r.request, ClientRequest::DiscoverRequest(_)) =>
        {
            Some(r.id.clone())
        }
        _ => None,
    }
}

/// The answer to a `server/discover` probe that rmcp's Auto lifecycle reads
/// as "a legacy server": fall back to `initialize`.
fn legacy_signal(id: rmcp::model::RequestId, why: &str) -> ServerJsonRpcMessage {
    let error = rmcp::model::ErrorData::invalid_request(why.to_owned(), None);
    ServerJsonRpcMessage::error(error, Some(id))
}

impl StreamableHttpClient for GuardedHttp {
    type Error = HttpFailure;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        // Credentials are ours (configured headers, `auth`), never rmcp's.
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let url = self.parse_uri(&uri)?;
        let had_session = session_id.is_some();
        if let ClientJsonRpcMessage::Request(request) = &message
            && matches!(request.request, ClientRequest::InitializeRequest(_))
        {
            self.shared.handshake.store(true, Ordering::Release);
        }
        if let Some(session) = &session_id {
            self.note_session(session);
        }
        let protocol = protocol_headers(custom_headers, session_id.as_deref())?;
        let body = Bytes::from(serde_json::to_vec(&message)?);
        let token = call_token(&message);
        let (response, _) = self
            .send(Method::POST, url, protocol, Some(body), token.as_deref())
            .await
            .map_err(client_error)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && had_session {
            return Err(StreamableHttpError::SessionExpired);
        }
        let awaits_nothing = !matches!(message, ClientJsonRpcMessage::Request(_));
        let session = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Some(opened) = session.as_deref().filter(|_| !had_session) {
            self.shared.session_opened.store(true, Ordering::Release);
            self.note_session(&Arc::from(opened));
        }
        let kind = content_type(&response);
        if !status.is_success() {
            let body = read_prefix(response, limits.max_error_response_size).await;
            if let Ok(error @ ServerJsonRpcMessage::Error(_)) =
                serde_json::from_str::<ServerJsonRpcMessage>(&body)
            {
                return Ok(StreamableHttpPostResponse::Json(error, session));
            }
            // The 2026 fallback rule: a 4xx to `server/discover` that is not a
            // modern JSON-RPC error means "legacy server": answer the probe
            // with an error rmcp's Auto lifecycle reads as that signal.
            if let Some(id) =
                is_discover(&message).filter(|_| status.is_client_error() && !had_session)
            {
                return Ok(StreamableHttpPostResponse::Json(
                    legacy_signal(id, &format!("server/discover rejected with HTTP {status}")),
                    None,
                ));
            }
            let failure = format!("HTTP {status}");
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                failure,
            )));
        }
        if is_media(kind.as_deref(), EVENT_STREAM) {
            return Ok(StreamableHttpPostResponse::Sse(
                sse_events(response, limits.max_sse_event_size),
                session,
            ));
        }
        if is_media(kind.as_deref(), JSON) {
            let body = read_bounded(response, limits.max_json_response_size)
                .await
                .map_err(client_error)?;
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                // A server that answers methods it does not know with an
                // empty result (some 2025-era servers do) has not answered
                // `server/discover`: that is the legacy signal too.
                Ok(ServerJsonRpcMessage::Response(response))
                    if !had_session
                        && is_discover(&message).is_some()
                        && !matches!(response.result, ServerResult::DiscoverResult(_)) =>
                {
                    Ok(StreamableHttpPostResponse::Json(
                        legacy_signal(
                            response.id,
                            "server/discover answered without a discover result",
                        ),
                        None,
                    ))
                }
                Ok(parsed) => Ok(StreamableHttpPostResponse::Json(parsed, session)),
                Err(_) if awaits_nothing || body.is_empty() => {
                    Ok(StreamableHttpPostResponse::Accepted)
                }
                Err(e) => Err(StreamableHttpError::Deserialize(e)),
            };
        }
        if awaits_nothing {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        Err(StreamableHttpError::UnexpectedContentType(kind))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        let url = self.parse_uri(&uri)?;
        let protocol = protocol_headers(custom_headers, Some(&session_id))?;
        let (response, _) = self
            .send(Method::DELETE, url, protocol, None, None)
            .await
            .map_err(client_error)?;
        match response.status() {
            // 405: the server has no session termination; nothing to do.
            status if status.is_success() || status == StatusCode::METHOD_NOT_ALLOWED => Ok(()),
            status => Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("HTTP {status} to the session DELETE"),
            ))),
        }
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            None,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        let opened = self
            .open_stream(
                uri,
                session_id,
                last_event_id,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.shared.standalone.send_replace(true);
        opened
    }
}

impl GuardedHttp {
    async fn open_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<HttpFailure>> {
        let url = self.parse_uri(&uri)?;
        let mut protocol = protocol_headers(custom_headers, session_id.as_deref())?;
        if let Some(id) = last_event_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
            protocol.insert(LAST_EVENT_ID_HEADER, id);
        }
        let (response, _) = self
            .send(Method::GET, url, protocol, None, None)
            .await
            .map_err(client_error)?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !status.is_success() {
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("HTTP {status} to the event stream GET"),
            )));
        }
        let kind = content_type(&response);
        if !is_media(kind.as_deref(), EVENT_STREAM) {
            return Err(StreamableHttpError::UnexpectedContentType(kind));
        }
        Ok(sse_events(response, max_sse_event_size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounded_events_cut_an_oversized_event_and_pass_normal_ones() {
        let chunks: Vec<Result<Bytes, reqwest::Error>> = vec![
            Ok(Bytes::from_static(b"data: hello\n\n")),
            Ok(Bytes::from_static(b"data: ")),
            Ok(Bytes::from(vec![b'x'; 64])),
        ];
        let mut stream = BoundedEvents::new(futures::stream::iter(chunks), 32);
        assert!(stream.next().await.unwrap().is_ok());
        assert!(stream.next().await.unwrap().is_ok());
        assert!(matches!(
            stream.next().await.unwrap(),
            Err(EventStreamError::TooLarge(32))
        ));
    }

    /// Serves `router` on `ip` (port chosen by the system) until the test ends.
    async fn serve(ip: &str, router: axum::Router) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        addr
    }

    /// A POST to `origin`'s `/mcp` through a guarded client wired as a
    /// remote server's is.
    async fn post_through_guard(origin: std::net::SocketAddr) -> Result<StatusCode, HttpFailure> {
        use crate::hosts::{GuardedResolver, Reach};
        let url = Url::parse(&format!("http://{origin}/mcp")).unwrap();
        let guard = HostGuard::new(None, Reach::of(&url).await);
        let client = crate::hosts::guarded_client(GuardedResolver {
            guard: guard.clone(),
            server: "remote".into(),
        })
        .unwrap();
        let http = GuardedHttp::new(
            client,
            GuardedHttpParts {
                server: "remote".into(),
                guard,
                headers: Default::default(),
                bearer: None,
                auth: None,
                health: Arc::new(ServerHealth::new("remote")),
                diagnostics: DiagnosticSink::new(None),
                lane: None,
            },
        )
        .unwrap();
        let body = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"to":"x"}}}"#);
        let (response, _) = http
            .send(Method::POST, url, HeaderMap::new(), Some(body), None)
            .await?;
        Ok(response.status())
    }

    #[tokio::test]
    async fn a_public_servers_redirect_never_reaches_a_loopback_service() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let admin = serve(
            "127.0.0.1",
            axum::Router::new().route(
                "/internal/admin",
                axum::routing::post(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async { "done" }
                }),
            ),
        )
        .await;
        let redirect = axum::Router::new().route(
            "/mcp",
            axum::routing::post(move || async move {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(LOCATION, format!("http://{admin}/internal/admin"))],
                )
            }),
        );
        // 127.0.0.77 stands in for a server on the internet.
        let public_ip: std::net::IpAddr = "127.0.0.77".parse().unwrap();
        crate::hosts::PRETEND_PUBLIC.lock().unwrap().push(public_ip);
        let public = serve("127.0.0.77", redirect.clone()).await;
        match post_through_guard(public).await {
            Err(HttpFailure::Refused(message)) => {
                assert!(message.contains("loopback or private"), "{message}")
            }
            other => panic!("the redirect was not refused: {other:?}"),
        }
        assert_eq!(
            hits.load(Ordering::SeqCst),
            0,
            "the loopback service was reached"
        );
        // The same redirect from a server that is on loopback itself is
        // followed: the refusal above is the guard's, not the setup's.
        let internal = serve("127.0.0.78", redirect).await;
        assert_eq!(
            post_through_guard(internal).await.ok(),
            Some(StatusCode::OK)
        );
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_empty_result_to_discover_reads_as_a_legacy_server() {
        use crate::hosts::{GuardedResolver, Reach};
        let generic = axum::Router::new().route(
            "/mcp",
            axum::routing::post(|| async {
                (
                    [(CONTENT_TYPE, JSON)],
                    r#"{"jsonrpc":"2.0","id":0,"result":{}}"#,
                )
            }),
        );
        let addr = serve("127.0.0.1", generic).await;
        let url = format!("http://{addr}/mcp");
        let parsed = Url::parse(&url).unwrap();
        let guard = HostGuard::new(None, Reach::of(&parsed).await);
        let client = crate::hosts::guarded_client(GuardedResolver {
            guard: guard.clone(),
            server: "old".into(),
        })
        .unwrap();
        let http = GuardedHttp::new(
            client,
            GuardedHttpParts {
                server: "old".into(),
                guard,
                headers: Default::default(),
                bearer: None,
                auth: None,
                health: Arc::new(ServerHealth::new("old")),
                diagnostics: DiagnosticSink::new(None),
                lane: None,
            },
        )
        .unwrap();
        let discover = ClientJsonRpcMessage::request(
            ClientRequest::DiscoverRequest(rmcp::model::DiscoverRequest::new(
                rmcp::model::DiscoverRequestParams {},
            )),
            rmcp::model::RequestId::Number(0),
        );
        let answer = http
            .post_message(
                Arc::from(url.as_str()),
                discover,
                None,
                None,
                HashMap::new(),
            )
            .await
            .unwrap();
        match answer {
            StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(error), None) => {
                assert!(error.error.message.contains("without a discover result"))
            }
            other => panic!("not the legacy signal: {other:?}"),
        }
    }

    #[test]
    fn media_types_ignore_parameters_and_case() {
        assert!(is_media(Some("application/json; charset=utf-8"), JSON));
        assert!(!is_media(Some("application/jsonx"), JSON));
        assert!(!is_media(None, JSON));
    }
}
