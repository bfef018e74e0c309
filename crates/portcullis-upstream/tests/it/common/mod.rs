//! Real servers on loopback for the integration tests: the fixture behind
//! rmcp's Streamable HTTP service (with request recording, redirects and an
//! auth gate), a legacy HTTP+SSE server written here with axum, a server
//! that never answers, and the stdio fixture binary.

#![allow(dead_code, unused_imports)] // each test (and the bench) uses a different part

#[path = "../../fixtures/handler.rs"]
pub mod handler;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use futures::{SinkExt, StreamExt};
use rmcp::ServiceExt;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use tokio_util::sync::CancellationToken;

pub use handler::{Fixture, FixtureConfig, FixtureState, HOSTILE_INSTRUCTIONS};

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
}

/// Who may pass the auth gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Everyone.
    Open,
    /// `Authorization: Bearer good`, else 401.
    Bearer,
    /// Everyone gets 403.
    Forbidden,
}

/// A loopback HTTP server.
pub struct Server {
    pub addr: SocketAddr,
    pub state: Arc<FixtureState>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    stop: CancellationToken,
}

impl Server {
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    /// The same server under the name `localhost`: another origin.
    pub fn base_localhost(&self) -> String {
        format!("http://localhost:{}", self.addr.port())
    }

    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base())
    }

    /// A URL on this server that redirects (307) to `to`.
    pub fn redirect_to(&self, to: &str) -> String {
        url::Url::parse_with_params(&format!("{}/redirect", self.base()), [("to", to)])
            .map(String::from)
            .unwrap_or_default()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn calls(&self) -> usize {
        self.state.calls.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Clone)]
struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    gate: Gate,
}

async fn record(State(recorder): State<Recorder>, request: Request, next: Next) -> Response {
    if let Ok(mut seen) = recorder.seen.lock() {
        seen.push(Seen {
            method: request.method().to_string(),
            path: request
                .uri()
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            headers: request.headers().clone(),
        });
    }
    let authorized = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some("Bearer good");
    let path = request.uri().path().to_owned();
    let gated = path == "/mcp";
    match recorder.gate {
        Gate::Bearer if gated && !authorized => StatusCode::UNAUTHORIZED.into_response(),
        Gate::Forbidden if gated => StatusCode::FORBIDDEN.into_response(),
        _ => next.run(request).await,
    }
}

async fn redirect(Query(params): Query<HashMap<String, String>>) -> Response {
    let to = params.get("to").cloned().unwrap_or_else(|| "/mcp".into());
    Response::builder()
        .status(StatusCode::TEMPORARY_REDIRECT)
        .header(header::LOCATION, to)
        .body(Body::empty())
        .unwrap_or_default()
}

async fn see_other() -> Response {
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, "/mcp")
        .body(Body::empty())
        .unwrap_or_default()
}

async fn redirect_forever() -> Response {
    Response::builder()
        .status(StatusCode::TEMPORARY_REDIRECT)
        .header(header::LOCATION, "/loop")
        .body(Body::empty())
        .unwrap_or_default()
}

async fn spawn_router(router: Router) -> (SocketAddr, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await;
    });
    (addr, stop)
}

/// Options for an HTTP fixture.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub gate: Gate,
    /// Stateful sessions (the 2025 era's `Mcp-Session-Id`) instead of
    /// stateless.
    pub sessions: bool,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            gate: Gate::Open,
            sessions: false,
        }
    }
}

/// The fixture over Streamable HTTP on 127.0.0.1, with `/redirect?to=`,
/// `/loop` (redirects to itself) and request recording.
pub async fn http_fixture(config: FixtureConfig) -> Server {
    http_fixture_with(config, HttpOptions::default()).await
}

pub async fn http_fixture_with(config: FixtureConfig, options: HttpOptions) -> Server {
    let fixture = Fixture::new(config);
    let state = fixture.state.clone();
    let server_config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(options.sessions)
        .with_json_response(!options.sessions);
    let mcp = if options.sessions {
        let f = fixture.clone();
        Router::new().route_service(
            "/mcp",
            StreamableHttpService::new(
                move || Ok(f.clone()),
                Arc::new(LocalSessionManager::default()),
                server_config,
            ),
        )
    } else {
        let f = fixture.clone();
        Router::new().route_service(
            "/mcp",
            StreamableHttpService::new(
                move || Ok(f.clone()),
                Arc::new(NeverSessionManager::default()),
                server_config,
            ),
        )
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder {
        seen: seen.clone(),
        gate: options.gate,
    };
    let router = mcp
        .route("/redirect", any(redirect))
        .route("/loop", any(redirect_forever))
        .route("/see-other", any(see_other))
        .layer(middleware::from_fn_with_state(recorder, record));
    let (addr, stop) = spawn_router(router).await;
    Server {
        addr,
        state,
        seen,
        stop,
    }
}

/// A server that accepts every request and never answers.
pub async fn hanging_server() -> Server {
    let router = Router::new().route(
        "/mcp",
        any(|| async {
            std::future::pending::<()>().await;
            StatusCode::OK
        }),
    );
    let (addr, stop) = spawn_router(router).await;
    Server {
        addr,
        state: Arc::default(),
        seen: Arc::default(),
        stop,
    }
}

/// A loopback URL nothing listens on.
pub async fn closed_port_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let port = listener.local_addr().expect("local addr").port();
    drop(listener);
    format!("http://127.0.0.1:{port}/mcp")
}

type ToServer = futures::channel::mpsc::UnboundedSender<ClientJsonRpcMessage>;

#[derive(Clone)]
struct SseState {
    fixture: Fixture,
    sessions: Arc<Mutex<HashMap<String, ToServer>>>,
    next: Arc<AtomicUsize>,
    endpoint: Option<String>,
    posts: Arc<AtomicUsize>,
}

async fn sse_open(State(state): State<SseState>) -> impl IntoResponse {
    let id = state.next.fetch_add(1, Ordering::SeqCst).to_string();
    let (to_server, from_client) = futures::channel::mpsc::unbounded::<ClientJsonRpcMessage>();
    let (to_client, from_server) = futures::channel::mpsc::unbounded();
    if let Ok(mut sessions) = state.sessions.lock() {
        sessions.insert(id.clone(), to_server);
    }
    let fixture = state.fixture.clone();
    tokio::spawn(async move {
        let sink = to_client.sink_map_err(|_| std::io::Error::other("client gone"));
        if let Ok(running) = fixture.serve((sink, from_client)).await {
            let _ = running.waiting().await;
        }
    });
    let endpoint = state
        .endpoint
        .clone()
        .unwrap_or_else(|| format!("/message?sessionId={id}"));
    let first = futures::stream::once(async move {
        Ok::<_, Infallible>(Event::default().event("endpoint").data(endpoint))
    });
    let messages = from_server.map(|message: rmcp::model::ServerJsonRpcMessage| {
        let data = serde_json::to_string(&message).unwrap_or_default();
        Ok::<_, Infallible>(Event::default().event("message").data(data))
    });
    Sse::new(first.chain(messages))
}

async fn sse_post(
    State(state): State<SseState>,
    Query(params): Query<HashMap<String, String>>,
    body: String,
) -> StatusCode {
    state.posts.fetch_add(1, Ordering::SeqCst);
    let Some(id) = params.get("sessionId") else {
        return StatusCode::BAD_REQUEST;
    };
    let Ok(message) = serde_json::from_str::<ClientJsonRpcMessage>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let sender = state.sessions.lock().ok().and_then(|s| s.get(id).cloned());
    match sender {
        Some(sender) if sender.unbounded_send(message).is_ok() => StatusCode::ACCEPTED,
        _ => StatusCode::NOT_FOUND,
    }
}

/// A legacy (2024-11-05) HTTP+SSE server: `GET /sse`, `POST /message`.
pub struct SseServer {
    pub server: Server,
    pub posts: Arc<AtomicUsize>,
    sessions: Arc<Mutex<HashMap<String, ToServer>>>,
    opened: Arc<AtomicUsize>,
}

impl SseServer {
    pub fn sse_url(&self) -> String {
        format!("{}/sse", self.server.base())
    }

    /// Ends every open event stream, as a server restart would: each
    /// session's server stops, and its stream with it.
    pub fn end_streams(&self) {
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.clear();
        }
    }

    /// How many event streams clients have opened (`GET /sse`).
    pub fn streams_opened(&self) -> usize {
        self.opened.load(Ordering::SeqCst)
    }
}

/// `endpoint`: what the `endpoint` event says (default: this server's
/// `/message?sessionId=N`).
pub async fn sse_fixture(config: FixtureConfig, endpoint: Option<String>) -> SseServer {
    let fixture = Fixture::new(config);
    let posts = Arc::new(AtomicUsize::new(0));
    let state = SseState {
        fixture: fixture.clone(),
        sessions: Arc::default(),
        next: Arc::default(),
        endpoint,
        posts: posts.clone(),
    };
    let (sessions, opened) = (state.sessions.clone(), state.next.clone());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder {
        seen: seen.clone(),
        gate: Gate::Open,
    };
    let router = Router::new()
        .route("/sse", get(sse_open))
        .route("/message", post(sse_post))
        .with_state(state)
        .layer(middleware::from_fn_with_state(recorder, record));
    let (addr, stop) = spawn_router(router).await;
    SseServer {
        server: Server {
            addr,
            state: fixture.state,
            seen,
            stop,
        },
        posts,
        sessions,
        opened,
    }
}

/// The stdio fixture binary.
pub fn fixture_bin() -> &'static str {
    env!("CARGO_BIN_EXE_upstream-fixture")
}

/// Waits (polling) until `condition` holds, at most `limit`. Returns whether
/// it held. Used to wait for an effect on the server side, never to assert
/// how long something took.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
