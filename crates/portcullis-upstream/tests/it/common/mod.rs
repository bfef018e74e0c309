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
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

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
    /// When it arrived.
    pub at: Instant,
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
    /// When the first GET to `/mcp` was answered.
    pub standalone_answered: Arc<OnceLock<Instant>>,
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
    slow_standalone: Option<Duration>,
    standalone_answered: Arc<OnceLock<Instant>>,
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
            at: Instant::now(),
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
        _ if gated && request.method() == axum::http::Method::GET => {
            if let Some(delay) = recorder.slow_standalone {
                tokio::time::sleep(delay).await;
            }
            let response = next.run(request).await;
            let _ = recorder.standalone_answered.set(Instant::now());
            response
        }
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
    /// Holds every GET (the session's standalone event stream) this long
    /// before answering it, like a busy server.
    pub slow_standalone: Option<Duration>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            gate: Gate::Open,
            sessions: false,
            slow_standalone: None,
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
    let standalone_answered = Arc::new(OnceLock::new());
    let recorder = Recorder {
        seen: seen.clone(),
        gate: options.gate,
        slow_standalone: options.slow_standalone,
        standalone_answered: standalone_answered.clone(),
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
        standalone_answered,
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
        standalone_answered: Arc::default(),
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
    calls: Arc<Mutex<Vec<rmcp::model::RequestId>>>,
    /// Each open stream's channel for `endpoint` events after its first.
    moves: Arc<Mutex<Vec<futures::channel::mpsc::UnboundedSender<String>>>>,
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
    // `None` marks the end of the server's messages, which ends the
    // stream (moved endpoints may still be pending: they end with it).
    let messages = from_server
        .map(|message: rmcp::model::ServerJsonRpcMessage| {
            let data = serde_json::to_string(&message).unwrap_or_default();
            Some(Ok::<_, Infallible>(
                Event::default().event("message").data(data),
            ))
        })
        .chain(futures::stream::once(async { None }));
    let (moved, moves) = futures::channel::mpsc::unbounded::<String>();
    if let Ok(mut open) = state.moves.lock() {
        open.push(moved);
    }
    let moves = moves.map(|endpoint| Some(Ok(Event::default().event("endpoint").data(endpoint))));
    let events = futures::stream::select(messages, moves)
        .take_while(|event| std::future::ready(event.is_some()))
        .filter_map(std::future::ready);
    Sse::new(first.chain(events))
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
    if let rmcp::model::JsonRpcMessage::Request(request) = &message
        && matches!(
            request.request,
            rmcp::model::ClientRequest::CallToolRequest(_)
        )
        && let Ok(mut calls) = state.calls.lock()
    {
        calls.push(request.id.clone());
    }
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
    /// The id of every `tools/call` posted, in order.
    pub calls: Arc<Mutex<Vec<rmcp::model::RequestId>>>,
    moves: Arc<Mutex<Vec<futures::channel::mpsc::UnboundedSender<String>>>>,
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

    /// Names a new endpoint on every open stream: session `N` is told to
    /// post to `/message?sessionId=N&{query}` from now on.
    pub fn move_endpoint(&self, query: &str) {
        if let Ok(open) = self.moves.lock() {
            for (n, stream) in open.iter().enumerate() {
                let _ = stream.unbounded_send(format!("/message?sessionId={n}&{query}"));
            }
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
        calls: Arc::default(),
        moves: Arc::default(),
    };
    let moves = state.moves.clone();
    let calls = state.calls.clone();
    let (sessions, opened) = (state.sessions.clone(), state.next.clone());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder {
        seen: seen.clone(),
        gate: Gate::Open,
        slow_standalone: None,
        standalone_answered: Arc::default(),
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
            standalone_answered: Arc::default(),
            stop,
        },
        posts,
        calls,
        moves,
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

/// How the loopback authorization server answers the `iss` of its
/// authorization responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Iss {
    /// Its own issuer.
    Correct,
    /// Another issuer's.
    Wrong,
}

/// An OAuth 2.1 authorization server on loopback (metadata, registration,
/// an authorization endpoint that approves at once, a token endpoint that
/// checks PKCE S256 and issues refreshable tokens), and what it saw.
#[derive(Default)]
pub struct AuthState {
    pub issuer: Mutex<String>,
    pub iss: Mutex<Option<Iss>>,
    /// Authorization requests' query parameters.
    pub authorizations: Mutex<Vec<HashMap<String, String>>>,
    /// Token requests' form parameters.
    pub token_requests: Mutex<Vec<HashMap<String, String>>>,
    /// Outstanding codes: code -> (challenge, scope).
    codes: Mutex<HashMap<String, (String, String)>>,
    /// Valid access tokens -> scopes.
    pub tokens: Mutex<HashMap<String, Vec<String>>>,
    /// Valid refresh tokens -> scopes.
    refresh: Mutex<HashMap<String, Vec<String>>>,
    /// Scopes this server never grants.
    pub withheld: Mutex<Vec<String>>,
    /// Offers only the client_credentials grant, to `machine:secret`
    /// (HTTP Basic).
    pub machine_only: std::sync::atomic::AtomicBool,
    /// With a key, `machine` authenticates with `private_key_jwt` signed by
    /// the private half of this (public) key instead of its secret.
    pub assertion_key: Mutex<Option<jsonwebtoken::DecodingKey>>,
    /// The `jti`s of the client assertions accepted (a replay is refused).
    pub assertion_ids: Mutex<Vec<String>>,
    /// DPoP: what the server lists in `dpop_signing_alg_values_supported`
    /// (`None`: it says nothing, and issues Bearer tokens whatever comes).
    pub dpop_algs: Mutex<Option<Vec<String>>>,
    /// DPoP: the nonce token requests must carry (`use_dpop_nonce`
    /// otherwise).
    pub dpop_nonce: Mutex<Option<String>>,
    /// DPoP: answer a proof with a Bearer token anyway (a misbehaving
    /// server).
    pub dpop_unbound: std::sync::atomic::AtomicBool,
    /// DPoP: refuse every token request without a proof (a server that
    /// issues bound tokens only), whatever its metadata lists.
    pub dpop_required: std::sync::atomic::AtomicBool,
    /// DPoP: access and refresh tokens -> the thumbprint they are bound to.
    pub dpop_bound: Mutex<HashMap<String, String>>,
    /// DPoP: token requests seen, each with the thumbprint of its proof's
    /// key (`None`: no proof) and the nonce it carried.
    pub dpop_token_proofs: Mutex<Vec<(Option<String>, Option<String>)>>,
    /// DPoP: the `jti`s of proofs accepted here or at the protected server
    /// (a replay is refused).
    pub dpop_jtis: Mutex<Vec<String>>,
    /// Offers only the JWT bearer grant, to the assertions trusted here:
    /// assertion -> the client id it must come with (`None`: any, or
    /// none) and the resource it is for (`None`: any).
    pub jwt_bearer: std::sync::atomic::AtomicBool,
    /// Its metadata lists no PKCE method.
    pub no_pkce: std::sync::atomic::AtomicBool,
    pub trusted: Mutex<HashMap<String, Trusted>>,
    /// With a secret, a JWT bearer request must authenticate as
    /// `client_id:secret` with HTTP Basic.
    pub bearer_client: Mutex<Option<(String, String)>>,
    /// The `Authorization` headers of the token requests, in order.
    pub token_auth_headers: Mutex<Vec<Option<String>>>,
    counter: AtomicUsize,
}

/// What a verified DPoP proof said.
pub struct Proof {
    /// The JWK thumbprint of the key that signed it.
    pub jkt: String,
    pub jti: String,
    pub nonce: Option<String>,
}

/// Checks a DPoP proof as RFC 9449 §4.3 says: one proof, typed
/// `dpop+jwt`, ES256, a public `jwk` header (no private part) whose key
/// verifies the signature, `htm` and `htu` (no query or fragment) naming
/// this request, `iat` within a minute, a `jti`, and `ath` for
/// `access_token` when one is presented.
pub fn verify_proof(
    headers: &HeaderMap,
    method: &str,
    htu: &str,
    access_token: Option<&str>,
) -> Result<Proof, String> {
    use base64::Engine;
    use sha2::Digest;
    let mut proofs = headers.get_all("dpop").iter();
    let proof = proofs.next().ok_or("no DPoP proof")?;
    if proofs.next().is_some() {
        return Err("more than one DPoP proof".into());
    }
    let proof = proof.to_str().map_err(|_| "an unreadable proof")?;
    let header = jsonwebtoken::decode_header(proof).map_err(|e| e.to_string())?;
    if header.typ.as_deref() != Some("dpop+jwt") || header.alg != jsonwebtoken::Algorithm::ES256 {
        return Err(format!("typ {:?} alg {:?}", header.typ, header.alg));
    }
    let jwk = header.jwk.ok_or("no jwk header")?;
    if serde_json::to_value(&jwk)
        .map_err(|e| e.to_string())?
        .get("d")
        .is_some()
    {
        return Err("the jwk carries the private key".into());
    }
    let key = jsonwebtoken::DecodingKey::from_jwk(&jwk).map_err(|e| e.to_string())?;
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_required_spec_claims::<&str>(&[]);
    validation.validate_exp = false;
    let claims = jsonwebtoken::decode::<serde_json::Value>(proof, &key, &validation)
        .map_err(|e| format!("the signature: {e}"))?
        .claims;
    let text = |name: &str| claims.get(name).and_then(|v| v.as_str()).map(str::to_owned);
    if text("htm").as_deref() != Some(method) {
        return Err(format!("htm {:?}, expected {method}", text("htm")));
    }
    if text("htu").as_deref() != Some(htu) {
        return Err(format!("htu {:?}, expected {htu}", text("htu")));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let iat = claims.get("iat").and_then(|v| v.as_i64()).ok_or("no iat")?;
    if (now - iat).abs() > 60 {
        return Err("iat out of the window".into());
    }
    let jti = text("jti").ok_or("no jti")?;
    let ath = access_token.map(|t| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(t.as_bytes()))
    });
    if text("ath") != ath {
        return Err("ath does not match the token".into());
    }
    Ok(Proof {
        jkt: jwk
            .thumbprint(jsonwebtoken::jwk::ThumbprintHash::SHA256)
            .map_err(|e| e.to_string())?,
        jti,
        nonce: text("nonce"),
    })
}

fn dpop_error(status: StatusCode, error: &str, nonce: Option<&str>) -> Response {
    let mut response = (status, axum::Json(serde_json::json!({"error": error}))).into_response();
    if let Some(nonce) = nonce {
        response
            .headers_mut()
            .insert("dpop-nonce", nonce.parse().unwrap());
    }
    response
}

impl AuthState {
    /// Expires every access token (the protected server refuses them).
    pub fn expire_access_tokens(&self) {
        self.tokens.lock().unwrap().clear();
    }

    /// Revokes every grant: refresh tokens included.
    pub fn revoke(&self) {
        self.tokens.lock().unwrap().clear();
        self.refresh.lock().unwrap().clear();
    }

    fn next(&self, prefix: &str) -> String {
        format!(
            "{prefix}-{}",
            self.counter.fetch_add(1, Ordering::SeqCst) + 1
        )
    }
}

/// Starts the authorization server; its issuer is its base URL.
pub async fn auth_server(iss: Iss) -> (Server, Arc<AuthState>) {
    let state = Arc::new(AuthState::default());
    *state.iss.lock().unwrap() = Some(iss);
    let router = Router::new()
        .route("/.well-known/oauth-authorization-server", get(as_metadata))
        .route("/register", post(as_register))
        .route("/authorize", get(as_authorize))
        .route("/token", post(as_token))
        .with_state(state.clone());
    let (addr, stop) = spawn_router(router).await;
    *state.issuer.lock().unwrap() = format!("http://127.0.0.1:{}", addr.port());
    let server = Server {
        addr,
        state: Fixture::new(FixtureConfig::default()).state,
        seen: Arc::default(),
        standalone_answered: Arc::default(),
        stop,
    };
    (server, state)
}

async fn as_metadata(State(state): State<Arc<AuthState>>) -> Response {
    let issuer = state.issuer.lock().unwrap().clone();
    let grants = if state.machine_only.load(Ordering::SeqCst) {
        serde_json::json!(["client_credentials"])
    } else if state.jwt_bearer.load(Ordering::SeqCst) {
        serde_json::json!(["urn:ietf:params:oauth:grant-type:jwt-bearer"])
    } else {
        serde_json::json!(["authorization_code", "refresh_token"])
    };
    let auth_methods = if state.assertion_key.lock().unwrap().is_some() {
        serde_json::json!(["private_key_jwt"])
    } else {
        serde_json::json!(["none", "client_secret_basic"])
    };
    axum::Json(serde_json::json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "registration_endpoint": format!("{issuer}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": grants,
        "code_challenge_methods_supported": if state.no_pkce.load(Ordering::SeqCst) {
            serde_json::json!([])
        } else {
            serde_json::json!(["S256"])
        },
        "token_endpoint_auth_methods_supported": auth_methods,
        "authorization_response_iss_parameter_supported": true,
        "dpop_signing_alg_values_supported": state.dpop_algs.lock().unwrap().clone(),
    }))
    .into_response()
}

async fn as_register() -> Response {
    (
        StatusCode::CREATED,
        axum::Json(serde_json::json!({"client_id": "loopback-client"})),
    )
        .into_response()
}

async fn as_authorize(
    State(state): State<Arc<AuthState>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    state.authorizations.lock().unwrap().push(query.clone());
    let code = state.next("code");
    let withheld = state.withheld.lock().unwrap().clone();
    let scope = query
        .get("scope")
        .map(|s| {
            s.split(' ')
                .filter(|s| !withheld.iter().any(|w| w == s))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    state.codes.lock().unwrap().insert(
        code.clone(),
        (
            query.get("code_challenge").cloned().unwrap_or_default(),
            scope,
        ),
    );
    let issuer = match *state.iss.lock().unwrap() {
        Some(Iss::Wrong) => "https://evil.example.com".to_owned(),
        _ => state.issuer.lock().unwrap().clone(),
    };
    let Some(mut back) = query
        .get("redirect_uri")
        .and_then(|r| url::Url::parse(r).ok())
    else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    back.query_pairs_mut()
        .append_pair("code", &code)
        .append_pair(
            "state",
            query.get("state").map(String::as_str).unwrap_or(""),
        )
        .append_pair("iss", &issuer);
    (StatusCode::FOUND, [(header::LOCATION, back.to_string())]).into_response()
}

fn token_error(error: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(serde_json::json!({"error": error})),
    )
        .into_response()
}

async fn as_token(
    State(state): State<Arc<AuthState>>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<HashMap<String, String>>,
) -> Response {
    use base64::Engine;
    use sha2::Digest;
    state.token_requests.lock().unwrap().push(form.clone());
    state.token_auth_headers.lock().unwrap().push(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    );
    // DPoP (RFC 9449 §5): a proof, when sent, must hold; the token (and
    // refresh token) are bound to its key.
    let required = state.dpop_required.load(Ordering::SeqCst);
    let dpop = required || state.dpop_algs.lock().unwrap().is_some();
    if required && !headers.contains_key("dpop") {
        state.dpop_token_proofs.lock().unwrap().push((None, None));
        return dpop_error(StatusCode::BAD_REQUEST, "invalid_dpop_proof", None);
    }
    let mut jkt = None;
    if dpop && headers.contains_key("dpop") {
        let issuer = state.issuer.lock().unwrap().clone();
        let proof = match verify_proof(&headers, "POST", &format!("{issuer}/token"), None) {
            Ok(proof) => proof,
            Err(_) => return dpop_error(StatusCode::BAD_REQUEST, "invalid_dpop_proof", None),
        };
        state
            .dpop_token_proofs
            .lock()
            .unwrap()
            .push((Some(proof.jkt.clone()), proof.nonce.clone()));
        let wanted = state.dpop_nonce.lock().unwrap().clone();
        if wanted.is_some() && proof.nonce != wanted {
            return dpop_error(StatusCode::BAD_REQUEST, "use_dpop_nonce", wanted.as_deref());
        }
        let mut seen = state.dpop_jtis.lock().unwrap();
        if seen.contains(&proof.jti) {
            return dpop_error(StatusCode::BAD_REQUEST, "invalid_dpop_proof", None);
        }
        seen.push(proof.jti);
        jkt = Some(proof.jkt);
    } else if dpop {
        state.dpop_token_proofs.lock().unwrap().push((None, None));
    }
    // A refresh token bound to a key is refreshed with that key only.
    if form.get("grant_type").map(String::as_str) == Some("refresh_token") {
        let presented = form.get("refresh_token").cloned().unwrap_or_default();
        if let Some(bound) = state.dpop_bound.lock().unwrap().get(&presented)
            && Some(bound) != jkt.as_ref()
        {
            return token_error("invalid_grant");
        }
    }
    let scopes: Vec<String> = match form.get("grant_type").map(String::as_str) {
        Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
            if state.jwt_bearer.load(Ordering::SeqCst) =>
        {
            let assertion = form.get("assertion").cloned().unwrap_or_default();
            let Some((client, resource)) = state.trusted.lock().unwrap().get(&assertion).cloned()
            else {
                // Echoes the assertion, as a careless server might.
                return (
                    StatusCode::BAD_REQUEST,
                    axum::Json(serde_json::json!({
                        "error": "invalid_grant",
                        "error_description": format!("assertion {assertion} is not trusted"),
                    })),
                )
                    .into_response();
            };
            let bearer_client = state.bearer_client.lock().unwrap().clone();
            let presented = match &bearer_client {
                Some((id, secret)) => {
                    let expected = format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"))
                    );
                    let basic = headers
                        .get(header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok());
                    if basic != Some(expected.as_str()) || form.contains_key("client_secret") {
                        return token_error("invalid_client");
                    }
                    Some(id.clone())
                }
                None => form.get("client_id").cloned(),
            };
            if client.is_some() && client != presented {
                return token_error("invalid_grant");
            }
            if resource.is_some() && resource.as_ref() != form.get("resource") {
                return token_error("invalid_target");
            }
            form.get("scope")
                .map(|s| s.split(' ').map(str::to_owned).collect())
                .unwrap_or_default()
        }
        Some("authorization_code") => {
            let code = form.get("code").cloned().unwrap_or_default();
            let Some((challenge, scope)) = state.codes.lock().unwrap().remove(&code) else {
                return token_error("invalid_grant");
            };
            let verifier = form.get("code_verifier").cloned().unwrap_or_default();
            let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(verifier.as_bytes()));
            if computed != challenge {
                return token_error("invalid_grant");
            }
            scope
                .split(' ')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        }
        Some("refresh_token") => {
            let keyed = state.assertion_key.lock().unwrap().is_some();
            if keyed && !client_assertion_holds(&state, &headers, &form) {
                return token_error("invalid_client");
            }
            let presented = form.get("refresh_token").cloned().unwrap_or_default();
            match state.refresh.lock().unwrap().get(&presented) {
                Some(scopes) => scopes.clone(),
                None => return token_error("invalid_grant"),
            }
        }
        Some("client_credentials")
            if state.machine_only.load(Ordering::SeqCst)
                && state.assertion_key.lock().unwrap().is_some() =>
        {
            if !client_assertion_holds(&state, &headers, &form) {
                return token_error("invalid_client");
            }
            form.get("scope")
                .map(|s| s.split(' ').map(str::to_owned).collect())
                .unwrap_or_default()
        }
        Some("client_credentials") if state.machine_only.load(Ordering::SeqCst) => {
            let expected = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode("machine:secret")
            );
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok());
            if presented != Some(expected.as_str()) {
                return token_error("invalid_client");
            }
            form.get("scope")
                .map(|s| s.split(' ').map(str::to_owned).collect())
                .unwrap_or_default()
        }
        _ => return token_error("unsupported_grant_type"),
    };
    let access = state.next("access");
    let refresh = state.next("refresh");
    state
        .tokens
        .lock()
        .unwrap()
        .insert(access.clone(), scopes.clone());
    state
        .refresh
        .lock()
        .unwrap()
        .insert(refresh.clone(), scopes.clone());
    let unbound = state.dpop_unbound.load(Ordering::SeqCst);
    let token_type = match &jkt {
        Some(jkt) if !unbound => {
            let mut bound = state.dpop_bound.lock().unwrap();
            bound.insert(access.clone(), jkt.clone());
            bound.insert(refresh.clone(), jkt.clone());
            "DPoP"
        }
        _ => "Bearer",
    };
    axum::Json(serde_json::json!({
        "access_token": access,
        "token_type": token_type,
        "expires_in": 3600,
        "refresh_token": refresh,
        "scope": scopes.join(" "),
    }))
    .into_response()
}

/// What a trusted assertion must come with: the client id (`None`: any,
/// or none) and the resource (`None`: any).
pub type Trusted = (Option<String>, Option<String>);

/// A form request's parameters and its `Authorization` header.
pub type FormRequest = (HashMap<String, String>, Option<String>);

/// The token-exchange requests an [`idp_server`] saw, and what it trusts.
#[derive(Default)]
pub struct IdpState {
    pub issuer: Mutex<String>,
    /// ID tokens it accepts as `subject_token`.
    pub id_tokens: Mutex<Vec<String>>,
    /// The authorization server its ID-JAGs are for (they are trusted
    /// there as they are issued).
    pub audience: Mutex<Option<Arc<AuthState>>>,
    /// The client id the ID-JAGs name (the client at the authorization
    /// server).
    pub jag_client: Mutex<String>,
    /// Its token requests' form parameters and `Authorization` headers.
    pub requests: Mutex<Vec<FormRequest>>,
    /// The ID-JAGs issued.
    pub issued: Mutex<Vec<String>>,
    counter: AtomicUsize,
}

/// An enterprise identity provider on loopback: OpenID metadata, and a
/// token endpoint doing RFC 8693 token exchange of an ID token for an
/// ID-JAG, authenticating its client as `idp-client:idp-secret` (Basic).
/// Every parameter is checked; a refusal echoes the subject token, as a
/// careless server might.
pub async fn idp_server() -> (Server, Arc<IdpState>) {
    let state = Arc::new(IdpState::default());
    let router = Router::new()
        .route(
            "/.well-known/openid-configuration",
            get(|State(state): State<Arc<IdpState>>| async move {
                let issuer = state.issuer.lock().unwrap().clone();
                axum::Json(serde_json::json!({
                    "issuer": issuer,
                    "authorization_endpoint": format!("{issuer}/authorize"),
                    "token_endpoint": format!("{issuer}/oauth2/token"),
                    "grant_types_supported": ["urn:ietf:params:oauth:grant-type:token-exchange"],
                    "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                }))
            }),
        )
        .route("/oauth2/token", post(idp_token))
        .with_state(state.clone());
    let (addr, stop) = spawn_router(router).await;
    *state.issuer.lock().unwrap() = format!("http://127.0.0.1:{}", addr.port());
    let server = Server {
        addr,
        state: Fixture::new(FixtureConfig::default()).state,
        seen: Arc::default(),
        standalone_answered: Arc::default(),
        stop,
    };
    (server, state)
}

async fn idp_token(
    State(state): State<Arc<IdpState>>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<HashMap<String, String>>,
) -> Response {
    use base64::Engine;
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    state
        .requests
        .lock()
        .unwrap()
        .push((form.clone(), basic.clone()));
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("idp-client:idp-secret")
    );
    if basic.as_deref() != Some(expected.as_str()) {
        return token_error("invalid_client");
    }
    let Some(audience) = state.audience.lock().unwrap().clone() else {
        return token_error("invalid_target");
    };
    let get = |k: &str| form.get(k).map(String::as_str);
    if get("grant_type") != Some("urn:ietf:params:oauth:grant-type:token-exchange")
        || get("requested_token_type") != Some("urn:ietf:params:oauth:token-type:id-jag")
        || get("subject_token_type") != Some("urn:ietf:params:oauth:token-type:id_token")
        || get("audience") != Some(audience.issuer.lock().unwrap().as_str())
        || get("resource").is_none()
    {
        return token_error("invalid_request");
    }
    let subject = get("subject_token").unwrap_or_default().to_owned();
    if !state.id_tokens.lock().unwrap().contains(&subject) {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(serde_json::json!({
                "error": "invalid_grant",
                "error_description": format!("ID token {subject} expired"),
            })),
        )
            .into_response();
    }
    let n = state.counter.fetch_add(1, Ordering::SeqCst) + 1;
    let jag = format!("eyJ0eXAiOiJvYXV0aC1pZC1qYWcrand0In0.idjag-{n}.sig");
    state.issued.lock().unwrap().push(jag.clone());
    audience.trusted.lock().unwrap().insert(
        jag.clone(),
        (
            Some(state.jag_client.lock().unwrap().clone()),
            get("resource").map(str::to_owned),
        ),
    );
    axum::Json(serde_json::json!({
        "access_token": jag,
        "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag",
        "token_type": "N_A",
        "expires_in": 300,
    }))
    .into_response()
}

/// RFC 7523 §3: the assertion is for `machine`, to this issuer, signed
/// with the client's key, fresh, and not seen before; no secret besides.
fn client_assertion_holds(
    state: &AuthState,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> bool {
    #[derive(serde::Deserialize)]
    struct Claims {
        iss: String,
        sub: String,
        jti: String,
    }
    if headers.contains_key(header::AUTHORIZATION) || form.contains_key("client_secret") {
        return false;
    }
    if form.get("client_assertion_type").map(String::as_str)
        != Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
    {
        return false;
    }
    let Some(assertion) = form.get("client_assertion") else {
        return false;
    };
    let issuer = state.issuer.lock().unwrap().clone();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_audience(&[issuer]);
    validation.set_required_spec_claims(&["exp", "aud", "iss", "sub"]);
    let key = state.assertion_key.lock().unwrap().clone();
    let Some(key) = key else { return false };
    let Ok(data) = jsonwebtoken::decode::<Claims>(assertion, &key, &validation) else {
        return false;
    };
    let claims = data.claims;
    let mut seen = state.assertion_ids.lock().unwrap();
    if claims.iss != "machine" || claims.sub != "machine" || seen.contains(&claims.jti) {
        return false;
    }
    seen.push(claims.jti);
    true
}

/// A request with a bound token: (method, scheme, the proof's thumbprint
/// or why it failed).
pub type DpopSeen = (String, String, Result<String, String>);

/// What a protected server demands.
#[derive(Default)]
pub struct Protection {
    /// The scope the first challenge names.
    pub scope: String,
    /// The scope `tools/call` needs, if more; with `escalate`, every call
    /// is refused with a new one (`{scope}-N`).
    pub call_scope: Mutex<Option<String>>,
    pub escalate: bool,
    pub refusals: AtomicUsize,
    /// Bearer tokens seen, in order.
    pub tokens_seen: Mutex<Vec<String>>,
    /// DPoP: the nonce every request with a bound token must carry
    /// (`401 use_dpop_nonce` otherwise).
    pub dpop_nonce: Mutex<Option<String>>,
    /// DPoP: challenge with the DPoP scheme only (a server that accepts
    /// bound tokens only).
    pub dpop_only: bool,
    /// DPoP: requests that presented a bound token, as (method, scheme,
    /// the proof's thumbprint or why it failed).
    pub dpop_seen: Mutex<Vec<DpopSeen>>,
    /// DPoP: `use_dpop_nonce` refusals sent.
    pub dpop_nonce_refusals: AtomicUsize,
    /// Serve with sessions (the client then opens the event stream with a
    /// GET and ends the session with a DELETE).
    pub sessions: bool,
}

#[derive(Clone)]
struct Protected {
    auth: Arc<AuthState>,
    protection: Arc<Protection>,
    base: Arc<Mutex<String>>,
}

/// The fixture over Streamable HTTP (2026, stateless) behind a bearer check
/// against `auth`'s tokens, publishing its protected-resource metadata.
pub async fn protected_fixture(auth: Arc<AuthState>, protection: Arc<Protection>) -> Server {
    // Sessions are the handshake era's.
    let fixture = Fixture::new(FixtureConfig {
        legacy_only: protection.sessions,
        ..FixtureConfig::default()
    });
    let state = fixture.state.clone();
    let f = fixture.clone();
    let mcp = if protection.sessions {
        Router::new().route_service(
            "/mcp",
            StreamableHttpService::new(
                move || Ok(f.clone()),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default().with_legacy_session_mode(true),
            ),
        )
    } else {
        Router::new().route_service(
            "/mcp",
            StreamableHttpService::new(
                move || Ok(f.clone()),
                Arc::new(NeverSessionManager::default()),
                StreamableHttpServerConfig::default().with_json_response(true),
            ),
        )
    };
    let base = Arc::new(Mutex::new(String::new()));
    let guard = Protected {
        auth: auth.clone(),
        protection,
        base: base.clone(),
    };
    let metadata_base = base.clone();
    let router = mcp
        .layer(middleware::from_fn_with_state(guard, bearer_check))
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || {
                let base = metadata_base.lock().unwrap().clone();
                let issuer = auth.issuer.lock().unwrap().clone();
                async move {
                    axum::Json(serde_json::json!({
                        "resource": format!("{base}/mcp"),
                        "authorization_servers": [issuer],
                    }))
                }
            }),
        );
    let (addr, stop) = spawn_router(router).await;
    *base.lock().unwrap() = format!("http://127.0.0.1:{}", addr.port());
    Server {
        addr,
        state,
        seen: Arc::default(),
        standalone_answered: Arc::default(),
        stop,
    }
}

async fn bearer_check(State(guard): State<Protected>, request: Request, next: Next) -> Response {
    let base = guard.base.lock().unwrap().clone();
    let metadata = format!("{base}/.well-known/oauth-protected-resource/mcp");
    let scheme = if guard.protection.dpop_only {
        "DPoP"
    } else {
        "Bearer"
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .map(|(scheme, token)| (scheme.to_owned(), token.to_owned()));
    // A token bound to a key (RFC 9449 §7): only as DPoP, with a proof for
    // this request signed by that key, carrying the nonce when one is due.
    let bound = presented
        .as_ref()
        .and_then(|(_, t)| guard.auth.dpop_bound.lock().unwrap().get(t).cloned());
    let mut token = None;
    if let (Some((scheme, presented)), Some(bound)) = (&presented, &bound) {
        let method = request.method().as_str().to_owned();
        let verified = verify_proof(
            request.headers(),
            &method,
            &format!("{base}/mcp"),
            Some(presented),
        )
        .and_then(|proof| {
            if &proof.jkt != bound {
                return Err("signed by another key".into());
            }
            Ok(proof)
        });
        guard.protection.dpop_seen.lock().unwrap().push((
            method,
            scheme.clone(),
            verified
                .as_ref()
                .map(|p| p.jkt.clone())
                .map_err(Clone::clone),
        ));
        let wanted = guard.protection.dpop_nonce.lock().unwrap().clone();
        match verified {
            Ok(proof) if scheme == "DPoP" => {
                if wanted.is_some() && proof.nonce != wanted {
                    guard
                        .protection
                        .dpop_nonce_refusals
                        .fetch_add(1, Ordering::SeqCst);
                    let mut refused = dpop_error(
                        StatusCode::UNAUTHORIZED,
                        "use_dpop_nonce",
                        wanted.as_deref(),
                    );
                    refused.headers_mut().insert(
                        header::WWW_AUTHENTICATE,
                        "DPoP error=\"use_dpop_nonce\"".parse().unwrap(),
                    );
                    return refused;
                }
                let mut seen = guard.auth.dpop_jtis.lock().unwrap();
                if !seen.contains(&proof.jti) {
                    seen.push(proof.jti);
                    token = Some(presented.clone());
                }
            }
            _ => {}
        }
    } else if let Some((scheme, presented)) = &presented
        && scheme == "Bearer"
        && !guard.protection.dpop_only
    {
        token = Some(presented.clone());
    }
    let scopes = token
        .as_ref()
        .and_then(|t| guard.auth.tokens.lock().unwrap().get(t).cloned());
    let Some(scopes) = scopes else {
        let challenge = format!(
            "{scheme} error=\"invalid_token\", scope=\"{}\", resource_metadata=\"{metadata}\"",
            guard.protection.scope
        );
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, challenge)],
        )
            .into_response();
    };
    if let Some(token) = token {
        guard.protection.tokens_seen.lock().unwrap().push(token);
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let is_call = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("method").and_then(|m| m.as_str()).map(str::to_owned))
        .as_deref()
        == Some("tools/call");
    let needed = guard.protection.call_scope.lock().unwrap().clone();
    let refused = match &needed {
        Some(_) if guard.protection.escalate => true,
        Some(needed) => !scopes.contains(needed),
        None => false,
    };
    if is_call
        && refused
        && let Some(needed) = needed
    {
        // Escalating: a scope never asked for before, every time.
        let challenged = if guard.protection.escalate {
            let n = guard.protection.refusals.fetch_add(1, Ordering::SeqCst) + 1;
            format!("{needed}-{n}")
        } else {
            needed
        };
        let challenge = format!(
            "Bearer error=\"insufficient_scope\", scope=\"{challenged}\", resource_metadata=\"{metadata}\""
        );
        return (
            StatusCode::FORBIDDEN,
            [(header::WWW_AUTHENTICATE, challenge)],
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
