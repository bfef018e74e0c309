//! The HTTP guards: what a request must show before any MCP parsing.
//!
//! In order, each answering with a short JSON-RPC error (no id) that says
//! what was refused and nothing about the server:
//!
//! 1. `Host` must be a loopback name on this port (`127.0.0.1:<port>`,
//!    `localhost:<port>`, `[::1]:<port>`) or one of `allowed_hosts` → else
//!    **403**. This defeats DNS rebinding: a hostile page can make a browser
//!    reach 127.0.0.1 under its own name, never under ours.
//! 2. An `Origin` header, if present, must be this server's own origin
//!    (`http://` and one of the loopback names on this port: a page the
//!    server itself would serve) or one of `allowed_origins` → else **403**.
//!    Browsers always send one; MCP clients do not.
//! 3. The path must be `/mcp` → else **404**.
//! 4. With a token configured, `Authorization: Bearer <token>`, compared in
//!    constant time → else **401** with `WWW-Authenticate: Bearer` (so MCP
//!    clients classify it as "authorization required"). In the OAuth
//!    resource-server mode instead ([`crate::oauth`]), an access token of
//!    the configured issuer → else **401** with a challenge naming the
//!    resource metadata (and `error="invalid_token"` when a token was
//!    sent), or **403** `insufficient_scope`; the caller it names goes on
//!    in the request's extensions as a [`Caller`], and the
//!    `Authorization` header does not go on at all. A legacy session
//!    (`Mcp-Session-Id`) is then usable only by the caller who opened it
//!    → else **404**, as for a session that ended.
//! 5. A declared `Content-Length` over the body limit → **413**. A chunked
//!    body is cut off at the same limit by rmcp while it is read.
//!
//! At each step a header that must appear once (`Host`, `Origin`,
//! `Authorization`) sent twice is refused with **400** (RFC 9112 §3.2): a
//! proxy in front may read the other copy than this guard does. (A
//! `Content-Length` beside a `Transfer-Encoding` never gets here: hyper
//! reads the body as chunked, as RFC 9112 §6.3 says.)
//!
//! A page from an admitted origin (one of `allowed_origins`; the gateway's
//! own needs nothing) gets what a browser asks before it lets the page read
//! an answer: a CORS preflight (`OPTIONS` with
//! `Access-Control-Request-Method`) that passed steps 1-3 is answered here,
//! 204, before the token check (a browser never sends credentials on one),
//! and every answer to an admitted `Origin` carries
//! `Access-Control-Allow-Origin` with that origin. A refused origin gets no
//! CORS header at all, so its page can read nothing, not even the refusal.
//!
//! A refused `Host`, `Origin` or token is logged (WARN, one line each, at
//! most ten lines every ten seconds): which header, its value escaped (never
//! the token's), and the setting that would admit it.
//!
//! The method is left to rmcp: `POST` is MCP, `GET`/`DELETE` answer 405
//! with `Allow: POST` as the 2026-07-28 revision requires (or serve the
//! legacy session stream when legacy sessions are on).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::oauth::{Caller, ResourceServer, SessionOwners, TokenError, bearer_token};
use crate::throttle::{LogThrottle, escape};

/// The MCP endpoint's path.
pub const MCP_PATH: &str = "/mcp";

/// The header naming a legacy session.
const SESSION_ID: &str = "mcp-session-id";

/// Everything the guards check, fixed once the port is known.
#[derive(Clone)]
pub struct Guard {
    hosts: Arc<[String]>,
    origins: Arc<[String]>,
    token_digest: Option<[u8; 32]>,
    oauth: Option<Arc<ResourceServer>>,
    sessions: Arc<SessionOwners>,
    max_body_bytes: usize,
    warnings: Arc<LogThrottle>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token, not even its digest.
        f.debug_struct("Guard")
            .field("hosts", &self.hosts)
            .field("origins", &self.origins)
            .field("token", &self.token_digest.map(|_| "<set>"))
            .field("oauth", &self.oauth)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}

impl Guard {
    /// The guard for a server bound to `port`.
    ///
    /// ```
    /// use portcullis_server::guard::Guard;
    ///
    /// let guard = Guard::new(8765, &["mcp.internal:443".into()], &[], None, 1024);
    /// assert!(guard.host_allowed("localhost:8765"));
    /// assert!(guard.host_allowed("[::1]:8765"));
    /// assert!(guard.host_allowed("MCP.internal:443"));
    /// assert!(!guard.host_allowed("localhost:8766"));
    /// assert!(!guard.host_allowed("evil.example:8765"));
    /// // Its own origin is admitted; any other needs `allowed_origins`.
    /// assert!(guard.origin_allowed("http://localhost:8765"));
    /// assert!(guard.origin_allowed("http://127.0.0.1:8765"));
    /// assert!(!guard.origin_allowed("http://localhost:3000"));
    /// assert!(!guard.origin_allowed("http://evil.example:8765"));
    /// ```
    pub fn new(
        port: u16,
        allowed_hosts: &[String],
        allowed_origins: &[String],
        token: Option<&str>,
        max_body_bytes: usize,
    ) -> Self {
        let mut hosts = vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ];
        // A page this server itself served has one of these origins: the
        // same server, so no rebinding (another port is another origin).
        let mut origins: Vec<String> = hosts.iter().map(|h| format!("http://{h}")).collect();
        hosts.extend(allowed_hosts.iter().map(|h| h.to_ascii_lowercase()));
        origins.extend(
            allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_owned()),
        );
        Guard {
            hosts: hosts.into(),
            origins: origins.into(),
            token_digest: token.map(digest),
            oauth: None,
            sessions: Arc::default(),
            max_body_bytes,
            warnings: Arc::new(LogThrottle::new()),
        }
    }

    /// The same guard taking access tokens checked by `server` in place of
    /// a static token (the OAuth resource-server mode).
    pub fn with_oauth(mut self, server: Arc<ResourceServer>) -> Self {
        self.oauth = Some(server);
        self
    }

    /// True when `host` (a `Host` header value) names this server.
    pub fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// True when `origin` is one of the admitted origins.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        let origin = origin.trim().trim_end_matches('/');
        self.origins
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(origin))
    }

    /// True when no token is configured, or `authorization` carries it.
    pub fn authorized(&self, authorization: Option<&str>) -> bool {
        let Some(expected) = &self.token_digest else {
            return true;
        };
        let Some(presented) = authorization.and_then(bearer_token) else {
            return false;
        };
        // Both sides hashed to a fixed length first, so the comparison time
        // depends on neither the token's content nor its length.
        bool::from(digest(presented).ct_eq(expected))
    }

    /// Checks one request; `Err` says why it is refused. (In the OAuth
    /// mode the token is checked by [`Guard::pass_on`], which can wait for the
    /// issuer's keys; this checks everything else.)
    pub fn check(&self, request: &Request) -> Result<(), Refusal> {
        if self.front(request)? == Front::Preflight {
            // Answered by `Guard::pass_on`; what follows it is checked then.
            return Ok(());
        }
        if self.oauth.is_none() {
            let authorization = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|h| h.to_str().ok());
            if !self.authorized(authorization) {
                return Err(Refusal::Unauthorized);
            }
        }
        self.size(request)
    }

    /// Steps 1-3 and the duplicate `Authorization`: what is checked before
    /// the token.
    fn front(&self, request: &Request) -> Result<Front, Refusal> {
        let once = |name: header::HeaderName, what: &'static str| {
            if request.headers().get_all(name).iter().nth(1).is_some() {
                Err(Refusal::Ambiguous(what))
            } else {
                Ok(())
            }
        };
        once(header::HOST, "Host")?;
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| request.uri().authority().map(|a| a.to_string()));
        if !host.is_some_and(|h| self.host_allowed(&h)) {
            return Err(Refusal::ForeignHost);
        }
        once(header::ORIGIN, "Origin")?;
        if let Some(origin) = request.headers().get(header::ORIGIN) {
            let allowed = origin.to_str().is_ok_and(|o| self.origin_allowed(o));
            if !allowed {
                return Err(Refusal::ForeignOrigin);
            }
        }
        if request.uri().path() != MCP_PATH {
            return Err(Refusal::UnknownPath);
        }
        once(header::AUTHORIZATION, "Authorization")?;
        Ok(if is_preflight(request) {
            Front::Preflight
        } else {
            Front::Request
        })
    }

    /// Step 5: the declared body size.
    fn size(&self, request: &Request) -> Result<(), Refusal> {
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.parse::<u64>().ok());
        if declared.is_some_and(|len| len > self.max_body_bytes as u64) {
            return Err(Refusal::TooLarge);
        }
        Ok(())
    }
}

/// What passed the checks before the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Front {
    /// A CORS preflight, answered without a token.
    Preflight,
    /// Anything else: the token and the size are checked next.
    Request,
}

/// Why a request was refused by the guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `Host` names neither this server nor an allowed host (403).
    ForeignHost,
    /// `Origin` is present and not admitted (403).
    ForeignOrigin,
    /// The path is not `/mcp` (404).
    UnknownPath,
    /// The bearer token is missing or wrong (401).
    Unauthorized,
    /// An access token was sent and refused (401, `invalid_token`; OAuth
    /// mode).
    InvalidToken,
    /// The access token lacks a required scope (403, `insufficient_scope`;
    /// OAuth mode).
    InsufficientScope,
    /// The issuer's keys cannot be fetched, so no token can be checked
    /// (503; OAuth mode).
    KeysUnavailable,
    /// A session another caller opened, or one not known (404, as for a
    /// session that ended, so the client opens its own; OAuth mode).
    ForeignSession,
    /// The declared body is over the limit (413).
    TooLarge,
    /// A header that must appear once appears more than once (400); names
    /// which.
    Ambiguous(&'static str),
}

impl Refusal {
    /// The HTTP status answered.
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::ForeignHost | Refusal::ForeignOrigin | Refusal::InsufficientScope => {
                StatusCode::FORBIDDEN
            }
            Refusal::UnknownPath | Refusal::ForeignSession => StatusCode::NOT_FOUND,
            Refusal::Unauthorized | Refusal::InvalidToken => StatusCode::UNAUTHORIZED,
            Refusal::KeysUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Refusal::Ambiguous(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// What the response body says: what was refused, never why in any
    /// more detail (the log has that).
    pub fn message(self) -> &'static str {
        match self {
            Refusal::ForeignHost => "Forbidden: the Host header does not name this server",
            Refusal::ForeignOrigin => "Forbidden: requests from this Origin are not allowed",
            Refusal::UnknownPath => "Not Found: the MCP endpoint is /mcp",
            Refusal::Unauthorized => "Unauthorized: a valid bearer token is required",
            Refusal::InvalidToken => "Unauthorized: the bearer token was refused",
            Refusal::ForeignSession => "Not Found: no such session for this caller",
            Refusal::InsufficientScope => "Forbidden: the token lacks a required scope",
            Refusal::KeysUnavailable => {
                "Service Unavailable: the token cannot be checked now; try again later"
            }
            Refusal::TooLarge => "Payload Too Large: the request body is over the limit",
            Refusal::Ambiguous(_) => {
                "Bad Request: Host, Origin and Authorization may each appear only once"
            }
        }
    }

    /// The response: the status, a JSON-RPC error without an id saying
    /// what was refused, and for 401 the `WWW-Authenticate: Bearer`
    /// challenge (without it rmcp clients do not classify the 401 as
    /// "authorization required").
    pub fn into_response(self) -> Response {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32000,"message":"{}"}}}}"#,
            self.message()
        );
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = self.status();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if matches!(self, Refusal::Unauthorized | Refusal::InvalidToken) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl Guard {
    /// Logs why `request` was refused: one WARN line for a refused Host,
    /// Origin or token (the header, its value escaped, the setting that
    /// would admit it; never a token), a debug line for the rest.
    pub fn log_refusal(&self, refusal: Refusal, request: &Request) {
        let header = |name: header::HeaderName| {
            request
                .headers()
                .get(name)
                .map_or_else(|| "(none)".to_owned(), |v| escape(v.as_bytes()))
        };
        let (name, what) = match refusal {
            Refusal::ForeignHost => (
                "Host",
                format!(
                    "Host {} does not name this server; if it should reach the server, add it (host:port) to allowed_hosts",
                    header(header::HOST)
                ),
            ),
            Refusal::ForeignOrigin => (
                "Origin",
                format!(
                    "Origin {} is not allowed; if pages from it may call the server, add it to allowed_origins",
                    header(header::ORIGIN)
                ),
            ),
            Refusal::Unauthorized if self.oauth.is_some() => (
                "token",
                "no access token; the client must get one from the configured issuer".to_owned(),
            ),
            Refusal::Unauthorized => {
                let presented = if request.headers().contains_key(header::AUTHORIZATION) {
                    "the bearer token does not match"
                } else {
                    "no bearer token"
                };
                (
                    "token",
                    format!(
                        "{presented}; send Authorization: Bearer <token> with the configured token"
                    ),
                )
            }
            Refusal::Ambiguous(what) => (what, format!("{what} sent more than once")),
            // Logged with the reason by `refuse_token`.
            Refusal::InvalidToken | Refusal::InsufficientScope | Refusal::KeysUnavailable => return,
            Refusal::ForeignSession => (
                "Mcp-Session-Id",
                "a session this caller did not open, or one no longer known".to_owned(),
            ),
            Refusal::UnknownPath | Refusal::TooLarge => {
                tracing::debug!(?refusal, path = %request.uri().path(), "request refused");
                return;
            }
        };
        self.warn(refusal, name, &what);
    }

    /// One WARN line, through the throttle.
    fn warn(&self, refusal: Refusal, name: &str, what: &str) {
        match self.warnings.admit() {
            None => {}
            Some(0) => tracing::warn!(
                status = refusal.status().as_u16(),
                header = name,
                "refused a request: {what}"
            ),
            Some(held_back) => tracing::warn!(
                status = refusal.status().as_u16(),
                header = name,
                held_back,
                "refused a request: {what} ({held_back} refusals before it went unlogged)"
            ),
        }
    }
}

/// The guard as axum middleware, for an embedder's own router: a refusal
/// is logged and answered, a CORS preflight answered, anything else passed
/// on; answers to an admitted `Origin` carry the CORS headers. (The
/// server's own front calls [`Guard::pass_on`] directly.)
pub async fn guard_layer(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    guard.pass(request, next, &[]).await
}

impl Guard {
    /// Runs every check on `request` and passes it on, or answers the
    /// refusal. A path of `open_paths` is admitted once Host and Origin
    /// passed (the path check comes right after them), without a token:
    /// such a route decides about the token itself.
    pub async fn pass(&self, request: Request, next: Next, open_paths: &[String]) -> Response {
        self.pass_on(request, open_paths, |request| next.run(request))
            .await
    }

    /// [`Guard::pass`] handing an admitted request to `next`, whatever
    /// serves it (the server's own front calls its service directly, with
    /// no middleware in between).
    pub async fn pass_on<F, Fut>(
        &self,
        mut request: Request,
        open_paths: &[String],
        next: F,
    ) -> Response
    where
        F: FnOnce(Request) -> Fut,
        Fut: Future<Output = Response>,
    {
        match self.front(&request) {
            Ok(Front::Preflight) => return admitted_on(request, next).await,
            Ok(Front::Request) => {}
            Err(Refusal::UnknownPath) if open_paths.iter().any(|p| p == request.uri().path()) => {
                return admitted_on(request, next).await;
            }
            Err(refusal) => return self.refuse(refusal, &request),
        }
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok());
        let mut opener = None;
        match &self.oauth {
            Some(server) => match server.authenticate(authorization).await {
                Ok(caller) => {
                    // A legacy session is its opener's alone.
                    match request.headers().get(SESSION_ID) {
                        Some(id) => {
                            let id = String::from_utf8_lossy(id.as_bytes());
                            if !self.sessions.owned_by(&id, &caller) {
                                return self.refuse(Refusal::ForeignSession, &request);
                            }
                        }
                        None => opener = Some(caller.clone()),
                    }
                    request.extensions_mut().insert::<Caller>(caller);
                }
                Err(error) => return self.refuse_token(&error, &request),
            },
            None if !self.authorized(authorization) => {
                return self.refuse(Refusal::Unauthorized, &request);
            }
            None => {}
        }
        // The caller's credential is for this gate only: nothing past it
        // (a tool, a handler reading the request's parts, an upstream) may
        // see it, let alone send it on.
        request.headers_mut().remove(header::AUTHORIZATION);
        if let Err(refusal) = self.size(&request) {
            return self.refuse(refusal, &request);
        }
        let response = admitted_on(request, next).await;
        if let Some(caller) = opener
            && let Some(id) = response.headers().get(SESSION_ID)
        {
            self.sessions
                .bind(String::from_utf8_lossy(id.as_bytes()).into_owned(), &caller);
        }
        response
    }

    /// Answers a refused access token: the status and challenge RFC 6750
    /// and RFC 9728 ask for, a WARN line saying which check failed (never
    /// the token).
    fn refuse_token(&self, error: &TokenError, request: &Request) -> Response {
        let refusal = match error {
            TokenError::Missing => Refusal::Unauthorized,
            TokenError::InsufficientScope(_) => Refusal::InsufficientScope,
            TokenError::KeysUnavailable(_) => Refusal::KeysUnavailable,
            _ => Refusal::InvalidToken,
        };
        if refusal != Refusal::Unauthorized {
            self.warn(
                refusal,
                "token",
                &format!("the access token was refused: {error}"),
            );
        }
        let mut response = self.refuse(refusal, request);
        if let Some(challenge) = self.challenge(refusal) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, challenge);
        }
        response
    }

    /// The `WWW-Authenticate` challenge of the OAuth mode for `refusal`.
    fn challenge(&self, refusal: Refusal) -> Option<HeaderValue> {
        let options = self.oauth.as_ref()?.options();
        let metadata = format!("resource_metadata=\"{}\"", options.metadata_url());
        // Scope tokens hold no quote or backslash (checked with the
        // options), so they need no escaping here.
        let scope = if options.required_scopes.is_empty() {
            String::new()
        } else {
            format!(", scope=\"{}\"", options.required_scopes.join(" "))
        };
        let value = match refusal {
            Refusal::Unauthorized => format!("Bearer {metadata}{scope}"),
            Refusal::InvalidToken => format!("Bearer {metadata}, error=\"invalid_token\""),
            Refusal::InsufficientScope => {
                format!("Bearer {metadata}, error=\"insufficient_scope\"{scope}")
            }
            _ => return None,
        };
        HeaderValue::from_str(&value).ok()
    }
}

/// A request the guards admitted: a preflight is answered, anything else
/// passed on, its answer given the CORS headers for its `Origin`.
pub async fn admitted(request: Request, next: Next) -> Response {
    admitted_on(request, |request| next.run(request)).await
}

/// [`admitted`] handing the request to `next`, whatever serves it.
async fn admitted_on<F, Fut>(request: Request, next: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    if is_preflight(&request) {
        return preflight_response(&request);
    }
    let origin = request.headers().get(header::ORIGIN).cloned();
    with_cors(next(request).await, origin)
}

impl Guard {
    /// Logs `refusal` and answers it; past the Origin check (a wrong path,
    /// token or size), an admitted `Origin` may read why.
    pub fn refuse(&self, refusal: Refusal, request: &Request) -> Response {
        self.log_refusal(refusal, request);
        let response = refusal.into_response();
        match refusal {
            Refusal::ForeignHost | Refusal::ForeignOrigin => response,
            _ => with_cors(response, request.headers().get(header::ORIGIN).cloned()),
        }
    }
}

/// Whether `request` is a CORS preflight: `OPTIONS` with an `Origin` and
/// `Access-Control-Request-Method`.
fn is_preflight(request: &Request) -> bool {
    request.method() == http::Method::OPTIONS
        && request.headers().contains_key(header::ORIGIN)
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The answer to a preflight whose `Host`, `Origin` and path passed: the
/// methods the endpoint serves, the headers the page asked for (its origin
/// is admitted, and MCP adds headers as it grows: `Mcp-Param-*`), no
/// credentials mode (a bearer token is a header, not a cookie).
fn preflight_response(request: &Request) -> Response {
    let headers = request.headers();
    let mut response = with_cors(
        Response::new(Body::empty()),
        headers.get(header::ORIGIN).cloned(),
    );
    *response.status_mut() = StatusCode::NO_CONTENT;
    let out = response.headers_mut();
    out.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, DELETE"),
    );
    if let Some(asked) = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
        out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
    }
    // Chromium asks before a public page may reach a private address; an
    // admitted origin may.
    if headers
        .get("access-control-request-private-network")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
    {
        out.insert(
            "access-control-allow-private-network",
            HeaderValue::from_static("true"),
        );
    }
    out.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    out.append(
        header::VARY,
        HeaderValue::from_static("Access-Control-Request-Method, Access-Control-Request-Headers"),
    );
    response
}

/// `response` with the CORS headers for `origin`, an `Origin` the guard
/// has admitted (none: `response` as it is).
fn with_cors(mut response: Response, origin: Option<HeaderValue>) -> Response {
    let Some(origin) = origin else {
        return response;
    };
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    // A page reads the session it was given and a 401's challenge.
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("Mcp-Session-Id, WWW-Authenticate"),
    );
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    response
}

fn digest(value: &str) -> [u8; 32] {
    Sha256::digest(value.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(host: Option<&str>, path: &str, extra: &[(&str, &str)]) -> Request {
        let mut builder = http::Request::builder().method("POST").uri(path);
        if let Some(host) = host {
            builder = builder.header(header::HOST, host);
        }
        for (name, value) in extra {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::empty()).unwrap()
    }

    fn status(guard: &Guard, req: Request) -> StatusCode {
        match guard.check(&req) {
            Ok(()) => StatusCode::OK,
            Err(refusal) => refusal.status(),
        }
    }

    #[test]
    fn a_header_that_must_appear_once_sent_twice_is_refused() {
        let guard = Guard::new(9000, &[], &[], Some("s3cret"), 100);
        let host = "localhost:9000";
        let bearer = ("authorization", "Bearer s3cret");
        for extra in [
            vec![("host", "evil.example"), bearer],
            vec![("origin", host), ("origin", "http://evil.example"), bearer],
            vec![bearer, ("authorization", "Bearer other")],
        ] {
            let refused = guard.check(&request(Some(host), "/mcp", &extra));
            assert!(
                matches!(refused, Err(Refusal::Ambiguous(_))),
                "{extra:?}: {refused:?}"
            );
            assert_eq!(refused.unwrap_err().status(), StatusCode::BAD_REQUEST);
        }
        assert!(guard.check(&request(Some(host), "/mcp", &[bearer])).is_ok());
    }

    #[test]
    fn checks_run_in_order() {
        let guard = Guard::new(9000, &[], &["http://app.local".into()], Some("s3cret"), 10);
        // A foreign host is refused before anything else is looked at.
        assert_eq!(
            status(&guard, request(Some("evil.example:9000"), "/nope", &[])),
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            status(&guard, request(None, "/mcp", &[])),
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            status(
                &guard,
                request(
                    Some("localhost:9000"),
                    "/nope",
                    &[("origin", "http://evil.example")]
                )
            ),
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            status(&guard, request(Some("localhost:9000"), "/nope", &[])),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status(&guard, request(Some("localhost:9000"), "/mcp", &[])),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            status(
                &guard,
                request(
                    Some("localhost:9000"),
                    "/mcp",
                    &[("authorization", "Bearer s3cret"), ("content-length", "11")]
                )
            ),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(
            status(
                &guard,
                request(
                    Some("127.0.0.1:9000"),
                    "/mcp",
                    &[
                        ("authorization", "bearer s3cret"),
                        ("origin", "http://app.local")
                    ]
                )
            ),
            StatusCode::OK
        );
    }

    #[test]
    fn tokens_must_match_exactly() {
        let guard = Guard::new(1, &[], &[], Some("s3cret"), 10);
        assert!(guard.authorized(Some("Bearer s3cret")));
        assert!(!guard.authorized(Some("Bearer s3cre")));
        assert!(!guard.authorized(Some("Bearer s3cret2")));
        assert!(!guard.authorized(Some("Basic s3cret")));
        assert!(!guard.authorized(Some("s3cret")));
        assert!(!guard.authorized(None));
        assert!(Guard::new(1, &[], &[], None, 10).authorized(None));
    }

    #[test]
    fn the_401_carries_a_bearer_challenge() {
        let guard = Guard::new(1, &[], &[], Some("t"), 10);
        let refusal = guard
            .check(&request(Some("localhost:1"), "/mcp", &[]))
            .unwrap_err();
        assert_eq!(refusal, Refusal::Unauthorized);
        let response = refusal.into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let guard = Guard::new(1, &[], &[], Some("hunter2"), 10);
        assert!(!format!("{guard:?}").contains("hunter2"));
    }
}
