//! The HTTP surface: rmcp's Streamable HTTP service behind the guards, on
//! loopback.
//!
//! By default the service is stateless (no `Mcp-Session-Id`, a fresh handler
//! clone per POST, JSON responses unless the handler sends progress or other
//! messages first, which switches that one response to SSE). The same
//! endpoint serves initialize-era clients (2025-11-25 and older) and
//! stateless 2026-07-28 clients (`server/discover`, per-request `_meta`,
//! `subscriptions/listen`, the `Mcp-Method`/`Mcp-Name` headers): rmcp
//! chooses per request. Legacy sessions can be switched on for clients that
//! need server-to-client requests (sampling, elicitation) in the 2025 era;
//! on a session, too, a request whose only event is its response is
//! answered plain JSON (`crate::json_answer`), the rest as rmcp's streams.
//! A plain stateless 2026-07-28 `tools/call` is answered in front of rmcp's
//! service, with the same rules, by `crate::direct_call`, and a plain call
//! on a session whose client takes no server requests by
//! `crate::session_call`; a body that is not
//! one JSON-RPC message gets a JSON-RPC error saying why from
//! `crate::malformed`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::MethodRouter;
use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::connections::Limits;
use crate::cut_off::CutOff;
use crate::direct_call::{DirectCall, Streams};
use crate::error::ServerError;
use crate::front::{Front, SharedService};
use crate::guard::{Guard, MCP_PATH};
use crate::json_answer::JsonAnswer;
use crate::oauth::{METADATA_PATH, OAuthOptions, ResourceServer};
use crate::session_call::SessionPath;
use crate::sessions::BoundedSessions;

/// Default cap on a request body (4 MiB, rmcp's own default).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Default cap on connections served at once: far more than the local
/// clients a gateway serves, well below a process's usual limit of 1024
/// open files (upstreams, children and the store need theirs).
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// Default time a connection has to send a request's headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Default time a kept-alive connection may wait for its next request
/// (under the 90 s clients such as reqwest keep idle connections, so the
/// server, not the client, usually closes them, between requests).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default keep-alive interval of an SSE stream (rmcp's own default).
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Default cap on legacy sessions alive at once (each costs tens of KiB).
pub const DEFAULT_MAX_SESSIONS: usize = 256;

/// Default time a legacy session may go without a message before it is
/// closed (rmcp's own default).
pub const DEFAULT_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// How the HTTP surface listens and guards. `Debug` never shows the token.
#[derive(Clone)]
pub struct HttpOptions {
    /// Where to listen; default `127.0.0.1:0` (a free loopback port).
    pub listen: SocketAddr,
    /// Extra `Host` values to admit (e.g. behind a local reverse proxy).
    pub allowed_hosts: Vec<String>,
    /// `Origin` values to admit besides the server's own (`http://` and a
    /// loopback name on its port); any other `Origin` is refused.
    pub allowed_origins: Vec<String>,
    /// Bearer token required on `/mcp`, if any.
    pub token: Option<String>,
    /// Take OAuth access tokens of an issuer on `/mcp` instead (the
    /// resource-server mode, [`crate::oauth`]); exclusive with `token`.
    /// Serves the protected-resource metadata beside `/mcp`.
    pub oauth: Option<OAuthOptions>,
    /// Requests with a larger body are refused with 413.
    pub max_body_bytes: usize,
    /// Keep sessions for initialize-era clients (needed for server-to-client
    /// requests such as sampling or elicitation in the 2025 era). Off by
    /// default: stateless.
    pub legacy_sessions: bool,
    /// Answer with plain JSON when nothing needs streaming (default on):
    /// a request whose only event is its response is answered
    /// `application/json`, with or without a session; one that gets
    /// progress, log messages or server requests first, an SSE stream.
    pub json_response: bool,
    /// The handler sends its requests to a calling client (sampling,
    /// elicitation, roots) through `CallContext::client_requests` when it
    /// is there, as the gateway does. Sessions whose client declared those
    /// capabilities then have their plain calls answered in front of
    /// rmcp's session too. Off by default: a handler that sends through
    /// `CallContext::peer` needs rmcp to serve the call, or its request
    /// would reach the session's standalone stream instead of the call's.
    pub client_requests_in_context: bool,
    /// How long an SSE stream may go without an event before it gets a
    /// keep-alive comment (`None`: never); default 15 s. It also bounds
    /// how long a session request's answer is held back to see whether it
    /// can be plain JSON.
    pub keep_alive: Option<Duration>,
    /// Install SIGINT/SIGTERM handlers that drain and exit 0. Off by
    /// default: a library never takes over signals unless asked.
    pub handle_signals: bool,
    /// How long `close()` waits for in-flight requests before cutting open
    /// streams (a call still running is then answered with a JSON-RPC error
    /// saying the server is shutting down, `crate::shutdown`).
    pub shutdown_grace: Duration,
    /// Routes served beside `/mcp` (a gateway's `/healthz` and `/metrics`),
    /// as `(path, handler)`. They pass the Host and Origin guards like
    /// `/mcp`, but not the token or body checks: each route decides about
    /// the token itself ([`crate::guard::Guard::authorized`] compares in
    /// constant time), since a health probe usually has none. Each path is
    /// exact and its own (not `/mcp`, no `{capture}`, no path twice):
    /// otherwise [`serve_http`] fails with [`ServerError::ExtraRoute`].
    pub extra_routes: Vec<(String, MethodRouter)>,
    /// Connections served at once (`None`: no cap). One more is answered
    /// `503` and closed at once, and the admitted ones keep being served.
    pub max_connections: Option<usize>,
    /// How long a connection may take to send a request's headers, from
    /// its accept or from the first byte of its next request (`None`: no
    /// limit). A slow or silent client is closed.
    pub header_read_timeout: Option<Duration>,
    /// How long a kept-alive connection may wait for its next request
    /// (`None`: no limit). A request in flight is never timed out.
    pub idle_timeout: Option<Duration>,
    /// Legacy sessions alive at once (`None`: no cap). At the cap a new
    /// session closes the one idle longest; with a stream open on every
    /// one, the new one is refused.
    pub max_sessions: Option<usize>,
    /// How long a legacy session may go without a message before it is
    /// closed (`None`: never).
    pub session_idle_timeout: Option<Duration>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            token: None,
            oauth: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            legacy_sessions: false,
            json_response: true,
            client_requests_in_context: false,
            keep_alive: Some(DEFAULT_KEEP_ALIVE),
            handle_signals: false,
            shutdown_grace: Duration::from_secs(10),
            extra_routes: Vec::new(),
            max_connections: Some(DEFAULT_MAX_CONNECTIONS),
            header_read_timeout: Some(DEFAULT_HEADER_READ_TIMEOUT),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_sessions: Some(DEFAULT_MAX_SESSIONS),
            session_idle_timeout: Some(DEFAULT_SESSION_IDLE_TIMEOUT),
        }
    }
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("listen", &self.listen)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("oauth", &self.oauth)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("legacy_sessions", &self.legacy_sessions)
            .field("json_response", &self.json_response)
            .field("keep_alive", &self.keep_alive)
            .field("handle_signals", &self.handle_signals)
            .field("shutdown_grace", &self.shutdown_grace)
            .field(
                "extra_routes",
                &self.extra_routes.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            )
            .field("max_connections", &self.max_connections)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_sessions", &self.max_sessions)
            .field("session_idle_timeout", &self.session_idle_timeout)
            .finish()
    }
}

impl HttpOptions {
    /// Checks what can be wrong before binding: an empty token is
    /// `ERR_INVALID_MCP_TOKEN`; a token beside OAuth, or OAuth options
    /// that cannot work, are [`ServerError::OAuth`].
    pub fn validate(&self) -> Result<(), ServerError> {
        if self.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(ServerError::InvalidToken);
        }
        if let Some(oauth) = &self.oauth {
            if self.token.is_some() {
                return Err(ServerError::TokenAndOAuth);
            }
            oauth.validate()?;
        }
        Ok(())
    }
}

/// A running HTTP surface. Dropping it leaves the server running; call
/// [`HttpServer::close`] to stop it.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    stop: CancellationToken,
    streams: CancellationToken,
    grace: Duration,
    task: JoinHandle<()>,
    sessions: Option<Arc<BoundedSessions>>,
}

impl HttpServer {
    /// Legacy sessions alive now (always 0 without legacy sessions).
    pub fn session_count(&self) -> usize {
        self.sessions.as_ref().map_or(0, |s| s.count())
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint URL (`http://127.0.0.1:<port>/mcp`).
    pub fn url(&self) -> String {
        format!("http://{}{MCP_PATH}", self.addr)
    }

    /// A token that stops the server when cancelled (what the signal
    /// handler uses); `close()` does the same and waits.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Stops accepting connections (a session's standalone streams end at
    /// once), lets in-flight requests finish (up to the shutdown grace),
    /// then answers the calls left with the shutdown's JSON-RPC error and
    /// cuts whatever streams are still open.
    pub async fn close(self) {
        self.stop.cancel();
        drain(self.task, self.streams, self.grace).await;
    }

    /// Waits until the server stops (after `close` from elsewhere, a signal,
    /// or the stop token).
    pub async fn wait(self) {
        self.stop.cancelled().await;
        drain(self.task, self.streams, self.grace).await;
    }
}

/// Refuses an extra route's path the front could not serve it at (see
/// [`ServerError::ExtraRoute`]) instead of letting axum panic on it or
/// leaving it unreachable behind `/mcp`.
fn check_extra_paths<'a>(paths: impl IntoIterator<Item = &'a str>) -> Result<(), ServerError> {
    let mut seen = std::collections::HashSet::new();
    for path in paths {
        let reason = if !path.starts_with('/') {
            "a path starts with \"/\""
        } else if path.contains(['{', '}']) {
            "captures are not served; give the exact path"
        } else if path == MCP_PATH {
            "it is the MCP endpoint's path"
        } else if !seen.insert(path) {
            "another extra route has it"
        } else {
            continue;
        };
        return Err(ServerError::ExtraRoute {
            path: path.to_owned(),
            reason,
        });
    }
    Ok(())
}

/// The protected-resource metadata routes (RFC 9728): the document at the
/// well-known path and at its `/mcp`-suffixed form, for GET.
fn metadata_routes(options: &OAuthOptions) -> Vec<(String, MethodRouter)> {
    let document = Arc::new(options.metadata());
    [
        METADATA_PATH.to_owned(),
        format!("{METADATA_PATH}{MCP_PATH}"),
    ]
    .into_iter()
    .map(|path| {
        let document = document.clone();
        let route = axum::routing::get(move || {
            let document = document.clone();
            async move { axum::Json((*document).clone()) }
        });
        (path, route)
    })
    .collect()
}

async fn drain(mut task: JoinHandle<()>, streams: CancellationToken, grace: Duration) {
    if tokio::time::timeout(grace, &mut task).await.is_err() {
        tracing::debug!("in-flight requests outlived the shutdown grace; closing streams");
        streams.cancel();
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// Serves `handler` over Streamable HTTP at `/mcp`, behind the guards.
/// Resolves once the listener is bound.
///
/// `handler` is cloned per request (stateless) or per session, so make it a
/// cheap `Arc` clone, as [`crate::ToolServer`] is.
pub async fn serve_http<H>(handler: H, options: HttpOptions) -> Result<HttpServer, ServerError>
where
    H: ServerHandler + Clone + Send + Sync + 'static,
{
    options.validate()?;
    let listener = bind(&options).await?;
    serve_http_on(handler, listener, options).await
}

/// Binds `options.listen`, so a caller can hold the port (and fail at once
/// when it is taken) before it has a handler to serve; then
/// [`serve_http_on`].
pub async fn bind(options: &HttpOptions) -> Result<tokio::net::TcpListener, ServerError> {
    tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| ServerError::Bind {
            addr: options.listen,
            source,
        })
}

/// [`serve_http`] on a listener already bound (by [`bind`]); `options.listen`
/// is not used.
pub async fn serve_http_on<H>(
    handler: H,
    listener: tokio::net::TcpListener,
    options: HttpOptions,
) -> Result<HttpServer, ServerError>
where
    H: ServerHandler + Clone + Send + Sync + 'static,
{
    options.validate()?;
    let addr = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: options.listen,
        source,
    })?;
    if !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "listening beyond loopback: any host that can reach this port can call every exposed tool unless a token is set"
        );
    }
    let mut guard = Guard::new(
        addr.port(),
        &options.allowed_hosts,
        &options.allowed_origins,
        options.token.as_deref(),
        options.max_body_bytes,
    );
    let mut extra_routes = options.extra_routes.clone();
    if let Some(oauth) = &options.oauth {
        guard = guard.with_oauth(Arc::new(ResourceServer::new(oauth.clone())?));
        extra_routes.extend(metadata_routes(oauth));
    }
    check_extra_paths(extra_routes.iter().map(|(path, _)| path.as_str()))?;

    // `stop`: no new connections, idle ones closed, requests in flight
    // drained; `streams`: the grace ran out, open streams are cut.
    let stop = CancellationToken::new();
    let streams = CancellationToken::new();
    // Our guard owns Host and Origin (exact host:port matching, which rmcp's
    // bare-host entries do not give); rmcp's own copies are switched off so
    // the two lists cannot disagree.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_legacy_session_mode(options.legacy_sessions)
        .with_json_response(options.json_response)
        .with_sse_keep_alive(options.keep_alive)
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_cancellation_token(streams.clone());
    // Plain 2026-07-28 `tools/call` requests skip rmcp's per-request
    // service when answers may be plain JSON (see `crate::direct_call`).
    let direct = options.json_response.then(|| handler.clone());
    let direct_streams = Streams {
        keep_alive: options.keep_alive,
        closed: streams.clone(),
    };
    let factory = move || Ok(handler.clone());
    let sessions = options.legacy_sessions.then(|| {
        Arc::new(BoundedSessions::new(
            options.max_sessions,
            options.session_idle_timeout,
            options.client_requests_in_context,
            stop.clone(),
        ))
    });
    let mcp: Box<dyn SharedService> = if let Some(sessions) = &sessions {
        let rmcp = StreamableHttpService::new(factory, sessions.clone(), config);
        // rmcp answers every session request with a stream; with JSON
        // answers on, one that needs none is answered plain JSON (see
        // `crate::json_answer`). Its requests still running when the
        // streams close are cut off (`crate::cut_off`).
        match direct {
            Some(handler) => {
                let path = SessionPath::new(sessions.clone(), options.keep_alive, streams.clone());
                let rmcp = CutOff::new(JsonAnswer::new(rmcp), streams.clone());
                Box::new(DirectCall::new(handler, rmcp, Some(path), direct_streams))
            }
            None => Box::new(CutOff::new(rmcp, streams.clone())),
        }
    } else {
        let rmcp =
            StreamableHttpService::new(factory, Arc::new(NeverSessionManager::default()), config);
        let rmcp = CutOff::new(rmcp, streams.clone());
        match direct {
            Some(handler) => Box::new(DirectCall::new(handler, rmcp, None, direct_streams)),
            None => Box::new(rmcp),
        }
    };
    let app = Front::new(guard, options.max_body_bytes, mcp, extra_routes);

    let limits = Limits {
        max_connections: options.max_connections,
        header_read_timeout: options.header_read_timeout,
        idle_timeout: options.idle_timeout,
    };
    let finished = CancellationToken::new();
    let shutdown = stop.clone();
    let done = finished.clone();
    let task = tokio::spawn(async move {
        crate::connections::serve(listener, app, limits, shutdown).await;
        done.cancel();
    });
    // Debug: the embedding binary announces where it listens, once.
    tracing::debug!(url = %format!("http://{addr}{MCP_PATH}"), "MCP server listening");

    let server = HttpServer {
        addr,
        stop,
        streams,
        grace: options.shutdown_grace,
        task,
        sessions,
    };
    if options.handle_signals {
        install_signal_handlers(
            server.stop.clone(),
            server.streams.clone(),
            finished,
            server.grace,
        );
    }
    Ok(server)
}

/// SIGINT/SIGTERM stop the server; the process exits 0 once in-flight calls
/// have drained (or the grace ran out twice). Only when asked for.
fn install_signal_handlers(
    stop: CancellationToken,
    streams: CancellationToken,
    finished: CancellationToken,
    grace: Duration,
) {
    let signal = crate::shutdown::ShutdownSignal::register();
    tokio::spawn(async move {
        signal.received().await;
        tracing::info!("signal received; draining in-flight calls");
        stop.cancel();
        if tokio::time::timeout(grace, finished.cancelled())
            .await
            .is_err()
        {
            streams.cancel();
            let _ = tokio::time::timeout(grace, finished.cancelled()).await;
        }
        std::process::exit(0);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extra_route_must_have_an_exact_path_of_its_own() {
        let refused = |paths: &[&str]| match check_extra_paths(paths.iter().copied()) {
            Err(ServerError::ExtraRoute { path, .. }) => Some(path),
            Err(other) => panic!("{other}"),
            Ok(()) => None,
        };
        assert_eq!(refused(&["/healthz", "/metrics", METADATA_PATH]), None);
        assert_eq!(refused(&["healthz"]).as_deref(), Some("healthz"));
        assert_eq!(refused(&["/items/{id}"]).as_deref(), Some("/items/{id}"));
        assert_eq!(refused(&["/healthz", MCP_PATH]).as_deref(), Some(MCP_PATH));
        assert_eq!(
            refused(&["/metrics", "/healthz", "/metrics"]).as_deref(),
            Some("/metrics")
        );
    }
}
