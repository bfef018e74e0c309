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
//! need server-to-client requests (sampling, elicitation) in the 2025 era.
//! A plain stateless 2026-07-28 `tools/call` is answered in front of rmcp's
//! service, with the same rules, by `crate::direct_call`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::MethodRouter;
use axum::serve::ListenerExt as _;
use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::direct_call::DirectCall;
use crate::error::ServerError;
use crate::guard::{Guard, MCP_PATH, Refusal, guard_layer};

/// Default cap on a request body (4 MiB, rmcp's own default).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

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
    /// Requests with a larger body are refused with 413.
    pub max_body_bytes: usize,
    /// Keep sessions for initialize-era clients (needed for server-to-client
    /// requests such as sampling or elicitation in the 2025 era). Off by
    /// default: stateless, as the seed.
    pub legacy_sessions: bool,
    /// Answer with plain JSON when nothing needs streaming (default on).
    pub json_response: bool,
    /// Install SIGINT/SIGTERM handlers that drain and exit 0. Off by
    /// default: a library never takes over signals unless asked.
    pub handle_signals: bool,
    /// How long `close()` waits for in-flight requests before cutting open
    /// streams.
    pub shutdown_grace: Duration,
    /// Routes served beside `/mcp` (a gateway's `/healthz` and `/metrics`),
    /// as `(path, handler)`. They pass the Host and Origin guards like
    /// `/mcp`, but not the token or body checks: each route decides about
    /// the token itself ([`crate::guard::Guard::authorized`] compares in
    /// constant time), since a health probe usually has none.
    pub extra_routes: Vec<(String, MethodRouter)>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            token: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            legacy_sessions: false,
            json_response: true,
            handle_signals: false,
            shutdown_grace: Duration::from_secs(10),
            extra_routes: Vec::new(),
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
            .field("max_body_bytes", &self.max_body_bytes)
            .field("legacy_sessions", &self.legacy_sessions)
            .field("json_response", &self.json_response)
            .field("handle_signals", &self.handle_signals)
            .field("shutdown_grace", &self.shutdown_grace)
            .field(
                "extra_routes",
                &self.extra_routes.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl HttpOptions {
    /// Checks what can be wrong before binding: an empty token is
    /// `ERR_INVALID_MCP_TOKEN`.
    pub fn validate(&self) -> Result<(), ServerError> {
        if self.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(ServerError::InvalidToken);
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
}

impl HttpServer {
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

    /// Stops accepting connections, lets in-flight requests finish (up to
    /// the shutdown grace), then cuts whatever streams are still open.
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

/// The guards with extra routes: the same checks in the same order, except
/// that an extra route's path is admitted once Host and Origin have passed
/// (the path check comes right after them, so `UnknownPath` says exactly
/// that).
#[derive(Clone)]
struct ExtraGuard {
    guard: Guard,
    paths: Arc<[String]>,
}

async fn extra_guard_layer(
    State(state): State<ExtraGuard>,
    request: Request,
    next: Next,
) -> Response {
    match state.guard.check(&request) {
        Ok(()) => next.run(request).await,
        Err(Refusal::UnknownPath) if state.paths.iter().any(|p| p == request.uri().path()) => {
            next.run(request).await
        }
        Err(refusal) => {
            state.guard.log_refusal(refusal, &request);
            refusal.into_response()
        }
    }
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
    if !options.listen.ip().is_loopback() {
        tracing::warn!(
            addr = %options.listen,
            "listening beyond loopback: any host that can reach this port can call every exposed tool unless a token is set"
        );
    }
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| ServerError::Bind {
            addr: options.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: options.listen,
        source,
    })?;
    let guard = Guard::new(
        addr.port(),
        &options.allowed_hosts,
        &options.allowed_origins,
        options.token.as_deref(),
        options.max_body_bytes,
    );

    let streams = CancellationToken::new();
    // Our guard owns Host and Origin (exact host:port matching, which rmcp's
    // bare-host entries do not give); rmcp's own copies are switched off so
    // the two lists cannot disagree.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_legacy_session_mode(options.legacy_sessions)
        .with_json_response(options.json_response)
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_cancellation_token(streams.clone());
    // Plain 2026-07-28 `tools/call` requests skip rmcp's per-request
    // service when answers may be plain JSON (see `crate::direct_call`).
    let direct = options.json_response.then(|| handler.clone());
    let factory = move || Ok(handler.clone());
    let mcp = if options.legacy_sessions {
        let rmcp =
            StreamableHttpService::new(factory, Arc::new(LocalSessionManager::default()), config);
        match direct {
            Some(handler) => Router::new().route_service(MCP_PATH, DirectCall::new(handler, rmcp)),
            None => Router::new().route_service(MCP_PATH, rmcp),
        }
    } else {
        let rmcp =
            StreamableHttpService::new(factory, Arc::new(NeverSessionManager::default()), config);
        match direct {
            Some(handler) => Router::new().route_service(MCP_PATH, DirectCall::new(handler, rmcp)),
            None => Router::new().route_service(MCP_PATH, rmcp),
        }
    };
    let app = if options.extra_routes.is_empty() {
        mcp.layer(axum::middleware::from_fn_with_state(guard, guard_layer))
    } else {
        let mut app = mcp;
        let mut paths = Vec::with_capacity(options.extra_routes.len());
        for (path, route) in options.extra_routes.clone() {
            app = app.route(&path, route);
            paths.push(path);
        }
        let state = ExtraGuard {
            guard,
            paths: paths.into(),
        };
        app.layer(axum::middleware::from_fn_with_state(
            state,
            extra_guard_layer,
        ))
    };

    let stop = CancellationToken::new();
    let finished = CancellationToken::new();
    let shutdown = stop.clone();
    let done = finished.clone();
    // Nagle's algorithm off on every accepted socket: an SSE answer is
    // written in pieces, and with Nagle on a piece written while the one
    // before is unacknowledged waits for the client's delayed ACK (40 ms a
    // call for a keep-alive client).
    let listener = listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
    });
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "HTTP surface stopped with an error");
        }
        done.cancel();
    });
    tracing::info!(url = %format!("http://{addr}{MCP_PATH}"), "MCP server listening");

    let server = HttpServer {
        addr,
        stop,
        streams,
        grace: options.shutdown_grace,
        task,
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
