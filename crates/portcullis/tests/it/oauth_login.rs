//! Logging in to an upstream that needs OAuth, through the real binary: an
//! authorization server and a protected MCP server on loopback (the
//! authorization server approves at once; the test plays the browser,
//! following the URL `auth login --no-browser` prints), `serve` taking up
//! the login, refreshing it, asking for a step-up, telling a revoked grant
//! apart from an outage, and no token anywhere it must not be.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::common::{self, DEMO, Served, eventually, portcullis, text, write_config};

/// What the authorization server and the protected server share and saw.
#[derive(Default)]
struct AuthState {
    issuer: Mutex<String>,
    resource: Mutex<String>,
    /// Lifetime of the access tokens issued, in seconds.
    expires_in: AtomicU64,
    /// Authorization requests' query parameters.
    authorizations: Mutex<Vec<HashMap<String, String>>>,
    /// Token requests' `grant_type`s.
    grant_types: Mutex<Vec<String>>,
    /// code -> (PKCE challenge, scope).
    codes: Mutex<HashMap<String, (String, String)>>,
    /// access token -> (scopes, valid until).
    tokens: Mutex<HashMap<String, (Vec<String>, Instant)>>,
    /// refresh token -> scopes.
    refresh: Mutex<HashMap<String, Vec<String>>>,
    /// Every code, access and refresh token ever issued: none may show up
    /// where it must not.
    issued: Mutex<Vec<String>>,
    /// Bearer tokens the protected server accepted, in order.
    accepted: Mutex<Vec<String>>,
    /// DPoP (RFC 9449): listed as supported (ES256), and a proof binds the
    /// tokens issued to its key.
    dpop: AtomicBool,
    /// DPoP: access and refresh token -> the thumbprint of its key.
    bound: Mutex<HashMap<String, String>>,
    /// DPoP: the thumbprint of every proof accepted, at either server.
    proof_keys: Mutex<Vec<String>>,
    /// DPoP: proof `jti`s seen (a replay is refused).
    jtis: Mutex<Vec<String>>,
    /// DPoP: a bound token presented without a valid proof by its key, or
    /// as Bearer.
    misused: Mutex<Vec<String>>,
    /// JWTs trusted as JWT bearer grants (a workload's, or ID-JAGs the
    /// identity provider issued).
    assertions: Mutex<Vec<String>>,
    /// The `assertion` of each JWT bearer grant request, in order.
    presented: Mutex<Vec<String>>,
    /// ID tokens the identity provider accepts.
    id_tokens: Mutex<Vec<String>>,
    /// The identity provider's token exchange requests.
    exchanges: Mutex<Vec<HashMap<String, String>>>,
    /// The protected server refuses every token (`401 invalid_token`),
    /// however fresh.
    reject_all: AtomicBool,
    /// The scope `publish` asks for in its `403`, instead of `notes:write`.
    demanded: Mutex<Option<String>>,
    counter: AtomicUsize,
}

/// Checks a DPoP proof (RFC 9449 §4.3): one, typed `dpop+jwt`, ES256,
/// verified with the public `jwk` it carries (no private part), `htm`,
/// `htu`, `iat` within a minute, a fresh `jti`, `ath` for `token`. Its
/// key's thumbprint.
fn dpop_proof(
    state: &AuthState,
    headers: &axum::http::HeaderMap,
    method: &str,
    htu: &str,
    token: Option<&str>,
) -> Result<String, String> {
    use base64::Engine as _;
    use sha2::Digest as _;
    let mut all = headers.get_all("dpop").iter();
    let (Some(proof), None) = (all.next(), all.next()) else {
        return Err("not exactly one proof".into());
    };
    let proof = proof.to_str().map_err(|e| e.to_string())?;
    let header = jsonwebtoken::decode_header(proof).map_err(|e| e.to_string())?;
    if header.typ.as_deref() != Some("dpop+jwt") || header.alg != jsonwebtoken::Algorithm::ES256 {
        return Err("typ or alg".into());
    }
    let jwk = header.jwk.ok_or("no jwk")?;
    if serde_json::to_value(&jwk).unwrap().get("d").is_some() {
        return Err("a private jwk".into());
    }
    let key = jsonwebtoken::DecodingKey::from_jwk(&jwk).map_err(|e| e.to_string())?;
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_required_spec_claims::<&str>(&[]);
    validation.validate_exp = false;
    let claims = jsonwebtoken::decode::<Value>(proof, &key, &validation)
        .map_err(|e| e.to_string())?
        .claims;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let ath = token.map(|t| {
        Value::from(
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(t)),
        )
    });
    if claims["htm"] != method
        || claims["htu"] != htu
        || (now - claims["iat"].as_i64().unwrap_or(0)).abs() > 60
        || claims.get("ath").cloned() != ath
    {
        return Err(format!("claims {claims}"));
    }
    let jti = claims["jti"].as_str().ok_or("no jti")?.to_owned();
    let mut seen = state.jtis.lock().unwrap();
    if seen.contains(&jti) {
        return Err("a replayed proof".into());
    }
    seen.push(jti);
    let jkt = jwk
        .thumbprint(jsonwebtoken::jwk::ThumbprintHash::SHA256)
        .map_err(|e| e.to_string())?;
    state.proof_keys.lock().unwrap().push(jkt.clone());
    Ok(jkt)
}

impl AuthState {
    fn mint(&self, kind: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        // Distinctive, so a grep for it cannot match anything else.
        let value = format!("zq{kind}{n}x{}", std::process::id());
        self.issued.lock().unwrap().push(value.clone());
        value
    }

    /// Revokes every grant (access and refresh tokens).
    fn revoke(&self) {
        self.tokens.lock().unwrap().clear();
        self.refresh.lock().unwrap().clear();
    }

    fn refreshes(&self) -> usize {
        self.grant_types
            .lock()
            .unwrap()
            .iter()
            .filter(|g| *g == "refresh_token")
            .count()
    }
}

/// The authorization server and the protected MCP server, on their own
/// runtime.
struct Provider {
    state: Arc<AuthState>,
    mcp_url: String,
    /// The enterprise identity provider's token endpoint.
    idp_token_endpoint: String,
    runtime: tokio::runtime::Runtime,
}

impl Provider {
    /// Tokens live `expires_in` seconds.
    fn start(expires_in: u64) -> Provider {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let state = Arc::new(AuthState::default());
        state.expires_in.store(expires_in, Ordering::SeqCst);
        let (auth, mcp) = runtime.block_on(async {
            (
                tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
                tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
            )
        });
        let issuer = format!("http://{}", auth.local_addr().unwrap());
        let mcp_url = format!("http://{}/mcp", mcp.local_addr().unwrap());
        *state.issuer.lock().unwrap() = issuer;
        *state.resource.lock().unwrap() = mcp_url.clone();
        let auth_router = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(metadata),
            )
            .route("/register", axum::routing::post(register))
            .route("/authorize", axum::routing::get(authorize))
            .route("/token", axum::routing::post(token))
            .with_state(state.clone());
        let mcp_router = protected_server(state.clone());
        let idp = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"));
        let idp = idp.unwrap();
        let idp_token_endpoint = format!("http://{}/token", idp.local_addr().unwrap());
        let idp_router = axum::Router::new()
            .route("/token", axum::routing::post(idp_token))
            .with_state(state.clone());
        runtime.spawn(async move { axum::serve(idp, idp_router).await });
        runtime.spawn(async move { axum::serve(auth, auth_router).await });
        runtime.spawn(async move { axum::serve(mcp, mcp_router).await });
        Provider {
            state,
            mcp_url,
            idp_token_endpoint,
            runtime,
        }
    }

    /// A listener on its runtime that takes connections and holds them,
    /// never answering: a server that hangs.
    fn hanging(&self) -> std::net::SocketAddr {
        self.runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move {
                let mut held = Vec::new();
                while let Ok((socket, _)) = listener.accept().await {
                    held.push(socket);
                }
            });
            addr
        })
    }

    /// Follows the authorization URL as a browser would (the server
    /// approves at once and redirects to the loopback listener of `auth
    /// login`); the listener's page.
    fn visit(&self, url: &str) -> String {
        self.runtime.block_on(async {
            let page = reqwest::get(url).await.expect("the browser got an answer");
            assert!(page.status().is_success(), "{}", page.status());
            page.text().await.unwrap_or_default()
        })
    }
}

async fn metadata(State(state): State<Arc<AuthState>>) -> Response {
    let issuer = state.issuer.lock().unwrap().clone();
    axum::Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "registration_endpoint": format!("{issuer}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token", JWT_BEARER],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "scopes_supported": ["notes:read", "notes:write", "offline_access"],
        "authorization_response_iss_parameter_supported": true,
        "dpop_signing_alg_values_supported":
            state.dpop.load(Ordering::SeqCst).then(|| json!(["ES256"])),
    }))
    .into_response()
}

async fn register() -> Response {
    (
        StatusCode::CREATED,
        axum::Json(json!({"client_id": "registered-gateway"})),
    )
        .into_response()
}

async fn authorize(
    State(state): State<Arc<AuthState>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    state.authorizations.lock().unwrap().push(query.clone());
    let code = state.mint("code");
    state.codes.lock().unwrap().insert(
        code.clone(),
        (
            query.get("code_challenge").cloned().unwrap_or_default(),
            query.get("scope").cloned().unwrap_or_default(),
        ),
    );
    let Some(mut back) = query
        .get("redirect_uri")
        .and_then(|r| url::Url::parse(r).ok())
    else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    back.query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", query.get("state").map_or("", String::as_str))
        .append_pair("iss", &state.issuer.lock().unwrap());
    (StatusCode::FOUND, [(header::LOCATION, back.to_string())]).into_response()
}

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The enterprise identity provider's token endpoint: token exchange of an
/// ID token it accepts for an ID-JAG, every parameter checked, the client
/// authenticated as `idp-gw:idp-s3cret`; a refusal echoes the ID token, as
/// a careless server might.
async fn idp_token(
    State(state): State<Arc<AuthState>>,
    headers: axum::http::HeaderMap,
    axum::Form(form): axum::Form<HashMap<String, String>>,
) -> Response {
    use base64::Engine as _;
    state.exchanges.lock().unwrap().push(form.clone());
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("idp-gw:idp-s3cret")
    );
    if headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        != Some(basic.as_str())
    {
        return token_error("invalid_client");
    }
    let get = |k: &str| form.get(k).map(String::as_str).unwrap_or_default();
    if get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange"
        || get("requested_token_type") != "urn:ietf:params:oauth:token-type:id-jag"
        || get("subject_token_type") != "urn:ietf:params:oauth:token-type:id_token"
        || get("audience") != state.issuer.lock().unwrap().as_str()
        || get("resource") != state.resource.lock().unwrap().as_str()
    {
        return token_error("invalid_request");
    }
    let subject = get("subject_token").to_owned();
    if !state.id_tokens.lock().unwrap().contains(&subject) {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "invalid_grant", "error_description": format!("ID token {subject} has expired")})),
        )
            .into_response();
    }
    let jag = format!(
        "eyJ0eXAiOiJvYXV0aC1pZC1qYWcrand0In0.{}.sig",
        state.mint("jag")
    );
    state.assertions.lock().unwrap().push(jag.clone());
    axum::Json(json!({
        "access_token": jag,
        "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag",
        "token_type": "N_A",
    }))
    .into_response()
}

fn token_error(error: &str) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(json!({"error": error}))).into_response()
}

async fn token(
    State(state): State<Arc<AuthState>>,
    headers: axum::http::HeaderMap,
    axum::Form(form): axum::Form<HashMap<String, String>>,
) -> Response {
    use base64::Engine as _;
    use sha2::Digest as _;
    let grant_type = form.get("grant_type").cloned().unwrap_or_default();
    state.grant_types.lock().unwrap().push(grant_type.clone());
    // DPoP: the proof must hold; a bound refresh token needs its own key.
    let dpop = state.dpop.load(Ordering::SeqCst);
    let jkt = if dpop && headers.contains_key("dpop") {
        let htu = format!("{}/token", state.issuer.lock().unwrap());
        match dpop_proof(&state, &headers, "POST", &htu, None) {
            Ok(jkt) => Some(jkt),
            Err(_) => return token_error("invalid_dpop_proof"),
        }
    } else {
        None
    };
    if let Some(bound) = form
        .get("refresh_token")
        .and_then(|r| state.bound.lock().unwrap().get(r).cloned())
        && Some(&bound) != jkt.as_ref()
    {
        return token_error("invalid_grant");
    }
    let scopes: Vec<String> = match grant_type.as_str() {
        "authorization_code" => {
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
        "refresh_token" => {
            let presented = form.get("refresh_token").cloned().unwrap_or_default();
            // Rotated: the old refresh token is spent.
            match state.refresh.lock().unwrap().remove(&presented) {
                Some(scopes) => scopes,
                None => return token_error("invalid_grant"),
            }
        }
        JWT_BEARER => {
            let assertion = form.get("assertion").cloned().unwrap_or_default();
            state.presented.lock().unwrap().push(assertion.clone());
            if !state.assertions.lock().unwrap().contains(&assertion)
                || form.get("resource") != Some(&*state.resource.lock().unwrap())
            {
                return (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({"error": "invalid_grant", "error_description": format!("{assertion} is not trusted")})),
                )
                    .into_response();
            }
            form.get("scope")
                .map(|s| s.split(' ').map(str::to_owned).collect())
                .unwrap_or_default()
        }
        _ => return token_error("unsupported_grant_type"),
    };
    let (access, refresh) = (state.mint("access"), state.mint("refresh"));
    let lifetime = state.expires_in.load(Ordering::SeqCst);
    state.tokens.lock().unwrap().insert(
        access.clone(),
        (
            scopes.clone(),
            Instant::now() + Duration::from_secs(lifetime),
        ),
    );
    state
        .refresh
        .lock()
        .unwrap()
        .insert(refresh.clone(), scopes.clone());
    if let Some(jkt) = &jkt {
        let mut bound = state.bound.lock().unwrap();
        bound.insert(access.clone(), jkt.clone());
        bound.insert(refresh.clone(), jkt.clone());
    }
    axum::Json(json!({
        "access_token": access,
        "token_type": if jkt.is_some() { "DPoP" } else { "Bearer" },
        "expires_in": lifetime,
        "refresh_token": refresh,
        "scope": scopes.join(" "),
    }))
    .into_response()
}

/// An MCP server over Streamable HTTP behind a bearer check against the
/// authorization server's tokens: `echo` needs `notes:read` (any valid
/// token), the write tool `publish` needs `notes:write` too (else `403
/// insufficient_scope`, a step-up).
fn protected_server(state: Arc<AuthState>) -> axum::Router {
    use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
    use portcullis_server::{CallContext, ToolError, ToolServer};
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

    let tools =
        ToolServer::builder()
            .tool(
                Tool::new("echo").with_annotations(ToolAnnotations::read_only(true)),
                |args: Value, _: CallContext| async move {
                    let said = args["message"].as_str().unwrap_or_default().to_owned();
                    Ok::<_, ToolError>(ToolResult::text(format!("echo: {said}")))
                },
            )
            // Read-only to this server's own exposure gate (which withholds
            // writes); the scope is what guards it here.
            .tool(
                Tool::new("publish").with_annotations(ToolAnnotations::read_only(true)),
                |_: Value, _: CallContext| async move {
                    Ok::<_, ToolError>(ToolResult::text("published"))
                },
            )
            .build()
            .unwrap();
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let metadata_state = state.clone();
    axum::Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let state = state.clone();
                async move { bearer_check(state, request, next).await }
            },
        ))
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            axum::routing::get(move || {
                let state = metadata_state.clone();
                async move {
                    axum::Json(json!({
                        "resource": state.resource.lock().unwrap().clone(),
                        "authorization_servers": [state.issuer.lock().unwrap().clone()],
                        "scopes_supported": ["notes:read", "notes:write"],
                    }))
                }
            }),
        )
}

async fn bearer_check(state: Arc<AuthState>, request: Request, next: Next) -> Response {
    let metadata = state
        .resource
        .lock()
        .unwrap()
        .replace("/mcp", "/.well-known/oauth-protected-resource/mcp");
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .map(|(scheme, token)| (scheme.to_owned(), token.to_owned()));
    let mut token = None;
    if let Some((scheme, presented)) = presented {
        let bound = state.bound.lock().unwrap().get(&presented).cloned();
        match bound {
            // A bound token: as DPoP, with a proof by its key for this
            // request (RFC 9449 §7).
            Some(bound) => {
                let resource = state.resource.lock().unwrap().clone();
                let method = request.method().as_str().to_owned();
                let proof = dpop_proof(
                    &state,
                    request.headers(),
                    &method,
                    &resource,
                    Some(&presented),
                );
                if scheme == "DPoP" && proof.as_ref() == Ok(&bound) {
                    token = Some(presented);
                } else {
                    state
                        .misused
                        .lock()
                        .unwrap()
                        .push(format!("{method} {scheme}: {proof:?}"));
                }
            }
            None if scheme == "Bearer" => token = Some(presented),
            None => {}
        }
    }
    let scopes = token.as_ref().and_then(|t| {
        state
            .tokens
            .lock()
            .unwrap()
            .get(t)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(scopes, _)| scopes.clone())
    });
    let scopes = scopes.filter(|_| !state.reject_all.load(Ordering::SeqCst));
    let (Some(token), Some(scopes)) = (token, scopes) else {
        let challenge = format!(
            "Bearer error=\"invalid_token\", scope=\"notes:read\", resource_metadata=\"{metadata}\""
        );
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, challenge)],
        )
            .into_response();
    };
    state.accepted.lock().unwrap().push(token);
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let message: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if message["method"] == "tools/call"
        && message["params"]["name"] == "publish"
        && !scopes.iter().any(|s| s == "notes:write")
    {
        let demanded = state
            .demanded
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| "notes:write".into());
        let challenge = format!(
            "Bearer error=\"insufficient_scope\", scope=\"{demanded}\", resource_metadata=\"{metadata}\""
        );
        return (
            StatusCode::FORBIDDEN,
            [(header::WWW_AUTHENTICATE, challenge)],
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

/// A gateway config: the stdio demo upstream and `docs`, which logs in.
fn config(dir: &Path, provider: &Provider) -> std::path::PathBuf {
    write_config(
        dir,
        &format!(
            "[gateway]\ndata_dir = \"state\"\nallow_write = true\nreconnect_max_ms = 300\nhealth_interval_ms = 0\n\n{DEMO}\n\
             [upstreams.docs]\ntype = \"streamable-http\"\nurl = \"{}\"\n\n[upstreams.docs.oauth]\nredirect_port = 0\n",
            provider.mcp_url
        ),
    )
}

/// Everything a run printed, for the secrets check.
#[derive(Default)]
struct Printed(Vec<String>);

impl Printed {
    fn keep(&mut self, output: &std::process::Output) -> (i32, String, String) {
        let (out, err) = (text(&output.stdout), text(&output.stderr));
        self.0.push(out.clone());
        self.0.push(err.clone());
        (output.status.code().unwrap_or(-1), out, err)
    }

    fn run(&mut self, config: &Path, args: &[&str]) -> (i32, String, String) {
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        self.keep(&portcullis(&all))
    }
}

/// `portcullis auth login docs --no-browser [extra…]`, with the test as
/// the person's browser: it reads the printed URL and follows it.
fn login(provider: &Provider, config: &Path, extra: &[&str], printed: &mut Printed) -> String {
    let done = browser_login(config, "docs", extra, |url| provider.visit(url));
    printed.0.push(done.out.clone());
    printed.0.push(done.said.join("\n"));
    assert!(done.ok, "auth login failed: {}\n{:?}", done.out, done.said);
    assert!(
        done.out
            .contains("logged in to docs: issuer http://127.0.0.1:"),
        "{}",
        done.out
    );
    done.url
}

/// What `auth login` printed and whether it succeeded.
pub(crate) struct BrowserLogin {
    /// The authorization URL it printed.
    pub(crate) url: String,
    /// Its stdout.
    pub(crate) out: String,
    /// Its stderr lines.
    pub(crate) said: Vec<String>,
    /// It exited 0.
    pub(crate) ok: bool,
}

/// `portcullis auth login UPSTREAM --no-browser [extra…]`, with the test as
/// the person's browser: `visit` follows the URL it prints and returns the
/// page the loopback listener answered, which must say it logged in.
pub(crate) fn browser_login(
    config: &Path,
    upstream: &str,
    extra: &[&str],
    visit: impl FnOnce(&str) -> String,
) -> BrowserLogin {
    let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args([
            "--config",
            config.to_str().unwrap(),
            "auth",
            "login",
            upstream,
        ])
        .arg("--no-browser")
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = common::stderr_lines(&mut child);
    let mut said = Vec::new();
    let url = loop {
        let line = lines
            .recv_timeout(common::PATIENCE)
            .unwrap_or_else(|_| panic!("auth login printed no URL: {said:?}"));
        said.push(line.clone());
        if let Some(url) = line.trim().strip_prefix("http://") {
            break format!("http://{url}");
        }
    };
    let page = visit(&url);
    assert!(page.contains("Logged in"), "{page}");
    let status = child.wait().unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    said.extend(lines.try_iter());
    BrowserLogin {
        url,
        out,
        said,
        ok: status.success(),
    }
}

pub(crate) fn healthz(served: &Served) -> Value {
    let authority = served.authority();
    let (status, response) = common::http(
        &authority,
        &format!("GET /healthz HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 200, "{response}");
    serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap()
}

/// A call through the gateway: (is an error, its text).
pub(crate) fn call(served: &Served, tool: &str, args: Value) -> (bool, String) {
    let (status, response) = common::mcp(
        &served.authority(),
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": tool, "arguments": args}}),
    );
    assert_eq!(status, 200, "{response}");
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    let answer: Value = serde_json::from_str(body).unwrap_or_default();
    let result = &answer["result"];
    let said = result["content"][0]["text"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| answer.to_string());
    (result["isError"] == true, said)
}

/// No token or code the authorization server issued appears in anything
/// printed, in the audit trail, or in any file of the data directory (the
/// store keeps grants encrypted).
fn assert_no_token_leaked(provider: &Provider, printed: &Printed, served: &Served, data: &Path) {
    let lines = served.lines_so_far(Duration::from_millis(300));
    let trail = provider
        .runtime
        .block_on(common::audit_trail(data))
        .iter()
        .map(|r| format!("{r:?}"))
        .collect::<Vec<_>>()
        .join("\n");
    let issued = provider.state.issued.lock().unwrap().clone();
    assert!(issued.len() >= 3, "{issued:?}");
    for secret in &issued {
        for (i, out) in printed.0.iter().enumerate() {
            assert!(!out.contains(secret), "output {i} holds a token: {out}");
        }
        for line in &lines {
            assert!(!line.contains(secret), "a log line holds a token: {line}");
        }
        assert!(!trail.contains(secret), "the audit trail holds a token");
        common::assert_nowhere_in(data, secret);
    }
}

/// The whole life of a login: none yet (needs login, not down, the other
/// upstream served; `check` and `auth status` say so), `auth login` with
/// the browser's redirect, `serve` taking it up and calling with it,
/// refreshing it before it expires while idle, `auth status`, `auth
/// logout` (taken up by `serve` too), and no token anywhere.
#[test]
fn login_call_refresh_and_logout_through_the_binary() {
    // Tokens live 6 s: refreshed half-way, by `serve` itself while idle.
    let provider = Provider::start(6);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &provider);
    let data = dir.path().join("state");
    let mut printed = Printed::default();

    let (code, out, _) = printed.run(&config, &["auth", "status"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("docs: needs login (not logged in): run `portcullis auth login docs`"),
        "{out}"
    );

    let served = common::serve(&config);
    // Said once, before it listens.
    let said = served.before.join("\n");
    assert!(
        said.contains("missing upstream docs: needs a login: run `portcullis auth login docs`"),
        "{said}"
    );
    let health = healthz(&served);
    assert_eq!(health["upstreams"]["needs_login"], 1, "{health}");
    assert_eq!(health["upstreams"]["down"], 0, "{health}");
    assert_eq!(health["upstreams"]["up"], 1, "{health}");
    assert_eq!(health["status"], "degraded", "{health}");
    let (failed, said) = call(&served, "demo__echo", json!({"text": "still here"}));
    assert!(!failed && said.contains("still here"), "{said}");

    let (code, out, err) = printed.run(&config, &["check"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("needs login: upstream docs: run `portcullis auth login docs`"),
        "{err}"
    );
    assert!(!err.contains("error: upstream docs"), "{err}");
    assert!(out.contains("connected demo"), "{out}");
    assert!(out.contains("; logs in with OAuth\n"), "{out}");

    login(&provider, &config, &[], &mut printed);
    let authorize = provider.state.authorizations.lock().unwrap()[0].clone();
    assert_eq!(authorize["code_challenge_method"], "S256");
    assert_eq!(authorize["resource"], provider.mcp_url);
    assert_eq!(authorize["scope"], "notes:read offline_access");

    // `serve` takes the login up and the upstream joins.
    served.wait_for_line("using the login stored by `portcullis auth login docs`");
    served.wait_for_line("upstream \"docs\" connected and joined the tool map");
    eventually("docs' tools are served", || {
        common::tool_names(&served.authority()).contains(&"docs__echo".to_owned())
    });
    eventually("docs is healthy", || {
        healthz(&served)["upstreams"] == json!({"up": 2, "down": 0, "needs_login": 0})
    });
    let (failed, said) = call(&served, "docs__echo", json!({"message": "hi"}));
    assert!(!failed && said.contains("echo: hi"), "{said}");

    // Idle past the token's lifetime: `serve` refreshed it before expiry,
    // with no call asking, and the next call is served with the new token.
    let refreshes = provider.state.refreshes();
    std::thread::sleep(Duration::from_secs(7));
    assert!(
        provider.state.refreshes() > refreshes,
        "no refresh while idle"
    );
    let (failed, said) = call(&served, "docs__echo", json!({"message": "after idle"}));
    assert!(!failed && said.contains("echo: after idle"), "{said}");
    let first = provider.state.accepted.lock().unwrap()[0].clone();
    let last = provider.state.accepted.lock().unwrap().last().cloned();
    assert_ne!(Some(first), last, "the upstream saw no refreshed token");

    let (code, out, _) = printed.run(&config, &["auth", "status", "docs"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("docs: logged in; issuer http://127.0.0.1:"),
        "{out}"
    );
    assert!(out.contains("scopes [notes:read offline_access]"), "{out}");
    assert!(out.contains("refreshable"), "{out}");
    let (code, out, _) = printed.run(&config, &["auth", "status", "--json"]);
    assert_eq!(code, 0, "{out}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["upstream"], "docs");
    assert_eq!(rows[0]["needs_login"], false);
    assert_eq!(rows[0]["refreshable"], true);
    let (code, out, _) = printed.run(&config, &["tools", "--json"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("docs__echo"), "{out}");

    // Logout: forgotten in the store, and `serve` stops using it.
    let (code, out, _) = printed.run(&config, &["auth", "logout", "docs"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("forgot the stored login of docs"), "{out}");
    let (code, out, _) = printed.run(&config, &["auth", "status"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("docs: needs login (not logged in)"), "{out}");
    served.wait_for_line("its stored login was forgotten");
    eventually("docs needs a login again", || {
        healthz(&served)["upstreams"]["needs_login"] == 1
    });
    let (failed, said) = call(&served, "demo__echo", json!({"text": "still here"}));
    assert!(!failed && said.contains("still here"), "{said}");

    assert_no_token_leaked(&provider, &printed, &served, &data);
}

/// A call refused for want of scope names the step-up command; the step-up
/// asks for the scopes held plus the new one and the call then passes. A
/// grant the authorization server revoked is reported as needing a login
/// in `/healthz` and `check`, while the other upstream keeps working.
#[test]
fn step_up_then_a_revoked_grant_needs_a_login_not_an_outage() {
    let provider = Provider::start(3600);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &provider);
    let data = dir.path().join("state");
    let mut printed = Printed::default();
    login(&provider, &config, &[], &mut printed);

    let served = common::serve(&config);
    assert_eq!(
        healthz(&served)["upstreams"],
        json!({"up": 2, "down": 0, "needs_login": 0})
    );
    let (failed, said) = call(&served, "docs__publish", json!({}));
    assert!(
        failed,
        "{said} {}",
        text(&portcullis(&["--config", config.to_str().unwrap(), "tools"]).stdout)
    );
    served.wait_for_line(
        "upstream \"docs\" refused a call for want of scope (notes:write): run `portcullis auth login docs --scope notes:write`",
    );

    login(
        &provider,
        &config,
        &["--scope", "notes:write"],
        &mut printed,
    );
    let last = provider
        .state
        .authorizations
        .lock()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert_eq!(last["scope"], "notes:read offline_access notes:write");
    served.wait_for_line("using the login stored by `portcullis auth login docs`");
    let (failed, said) = call(&served, "docs__publish", json!({}));
    assert!(!failed && said.contains("published"), "{said}");

    // Revoked at the authorization server; the access token stops working
    // and so does refreshing it.
    provider.state.revoke();
    let (failed, _) = call(&served, "docs__echo", json!({"message": "hi"}));
    assert!(failed);
    served.wait_for_line("upstream \"docs\" needs a login: run `portcullis auth login docs`");
    eventually("docs needs a login, not down", || {
        healthz(&served)["upstreams"] == json!({"up": 1, "down": 0, "needs_login": 1})
    });
    let (failed, said) = call(&served, "demo__echo", json!({"text": "still here"}));
    assert!(!failed && said.contains("still here"), "{said}");
    let (code, out, err) = printed.run(&config, &["check"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("needs login: upstream docs: run `portcullis auth login docs`"),
        "{err}"
    );
    assert!(out.contains("connected demo"), "{out}");

    assert_no_token_leaked(&provider, &printed, &served, &data);
}

/// A stored grant that does not open (the key in `data_dir` replaced, the
/// row from another machine) is a login to make again, not a crash: `serve`
/// starts and says so, `/healthz` and `auth status` count it as needing a
/// login, and a new login is taken up.
#[test]
fn a_grant_sealed_under_another_key_needs_a_login_and_crashes_nothing() {
    use base64::Engine as _;
    use std::os::unix::fs::PermissionsExt as _;
    let provider = Provider::start(3600);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &provider);
    let data = dir.path().join("state");
    let mut printed = Printed::default();
    login(&provider, &config, &[], &mut printed);
    let key = data.join("oauth.key");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key file is private");
    std::fs::remove_file(&key).unwrap();
    let other = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    std::fs::write(&key, format!("{other}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();

    let (code, out, _) = printed.run(&config, &["auth", "status"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("docs: needs login (the stored login cannot be read"),
        "{out}"
    );

    let served = common::serve(&config);
    let said = served.before.join("\n");
    assert!(
        said.contains("missing upstream docs: needs a login: run `portcullis auth login docs`"),
        "{said}"
    );
    assert!(said.contains("cannot be read"), "{said}");
    assert_eq!(healthz(&served)["upstreams"]["needs_login"], 1);
    let (failed, said) = call(&served, "demo__echo", json!({"text": "still here"}));
    assert!(!failed && said.contains("still here"), "{said}");

    login(&provider, &config, &[], &mut printed);
    served.wait_for_line("using the login stored by `portcullis auth login docs`");
    eventually("docs is logged in", || {
        healthz(&served)["upstreams"]["needs_login"] == 0
    });
    assert_no_token_leaked(&provider, &printed, &served, &data);
}

/// A DPoP-bound grant (the authorization server lists ES256; `dpop = true`
/// in the config): `auth login` binds it to a key made for it, `serve`
/// presents it as DPoP with a proof per request, and after a restart the
/// restored grant is refreshed with the same key (its refresh token is
/// bound to it; another key would be refused). The key is sealed with the
/// grant: it shows nowhere.
#[test]
fn a_dpop_bound_grant_survives_a_restart_with_its_key() {
    // Tokens live 4 s: `serve` refreshes them half-way.
    let provider = Provider::start(4);
    provider.state.dpop.store(true, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &provider);
    let mut file = std::fs::read_to_string(&config).unwrap();
    file.push_str("dpop = true\n");
    std::fs::write(&config, file).unwrap();
    let data = dir.path().join("state");
    let mut printed = Printed::default();
    login(&provider, &config, &[], &mut printed);
    let keys = provider.state.proof_keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 1, "the code was redeemed with one proof");
    let key = keys[0].clone();

    let mut lines = Vec::new();
    {
        let served = common::serve(&config);
        eventually("docs' tools are served", || {
            common::tool_names(&served.authority()).contains(&"docs__echo".to_owned())
        });
        let (failed, said) = call(&served, "docs__echo", json!({"message": "bound"}));
        assert!(!failed && said.contains("echo: bound"), "{said}");
        lines.extend(served.lines_so_far(Duration::from_millis(300)));
    }
    // Restarted: the grant and its key come back from the store, and the
    // refresh `serve` makes half-way is signed with that same key.
    let refreshes = provider.state.refreshes();
    let served = common::serve(&config);
    eventually("the restarted gateway refreshed the grant", || {
        provider.state.refreshes() > refreshes
    });
    eventually("docs' tools are served", || {
        common::tool_names(&served.authority()).contains(&"docs__echo".to_owned())
    });
    let (failed, said) = call(&served, "docs__echo", json!({"message": "after restart"}));
    assert!(!failed && said.contains("echo: after restart"), "{said}");
    let grant_types = provider.state.grant_types.lock().unwrap().clone();
    assert_eq!(grant_types[0], "authorization_code");
    assert!(
        grant_types[1..].iter().all(|g| g == "refresh_token"),
        "{grant_types:?}"
    );
    // Every proof, at the token endpoint and at the server, by that key;
    // the bound tokens never went out as Bearer or without a proof.
    let keys = provider.state.proof_keys.lock().unwrap().clone();
    assert!(keys.len() > 3, "{keys:?}");
    assert!(keys.iter().all(|k| *k == key), "another key: {keys:?}");
    assert!(
        provider.state.misused.lock().unwrap().is_empty(),
        "{:?}",
        provider.state.misused.lock().unwrap()
    );

    // The private key (a PKCS#8 P-256 document, base64url) is nowhere in
    // the clear: not printed, not logged, not in the trail or the store.
    let (code, out, _) = printed.run(&config, &["auth", "status", "--json"]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = printed.run(&config, &["tools", "--json"]);
    assert_eq!(code, 0, "{out}");
    const PKCS8_P256: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEH";
    lines.extend(served.lines_so_far(Duration::from_millis(300)));
    let trail = provider
        .runtime
        .block_on(common::audit_trail(&data))
        .iter()
        .map(|r| format!("{r:?}"))
        .collect::<Vec<_>>()
        .join("\n");
    for shown in printed.0.iter().chain(&lines).chain([&trail]) {
        assert!(!shown.contains(PKCS8_P256), "the DPoP key shows: {shown}");
    }
    common::assert_nowhere_in(&data, PKCS8_P256);
    assert_no_token_leaked(&provider, &printed, &served, &data);
}

/// A JWT-shaped secret, distinctive and recorded as issued (so the leak
/// check looks for it).
fn jwt(provider: &Provider, kind: &str) -> String {
    format!("eyJhbGciOiJFUzI1NiJ9.{}.sig", provider.state.mint(kind))
}

/// A gateway whose two upstreams log in without a person: `wl` with the
/// workload's token file (the JWT bearer grant), `ent` with an enterprise
/// ID token exchanged for an ID-JAG first.
fn unattended_config(dir: &Path, provider: &Provider) -> std::path::PathBuf {
    write_config(
        dir,
        &format!(
            "[gateway]\ndata_dir = \"state\"\nreconnect_max_ms = 300\nhealth_interval_ms = 0\n\n\
             [upstreams.wl]\ntype = \"streamable-http\"\nurl = \"{url}\"\n\n\
             [upstreams.wl.oauth]\nclient_id = \"workload\"\nassertion_file = \"workload.jwt\"\n\n\
             [upstreams.ent]\ntype = \"streamable-http\"\nurl = \"{url}\"\n\n\
             [upstreams.ent.oauth]\nclient_id = \"gateway\"\nid_token_file = \"id_token.jwt\"\n\
             idp_token_endpoint = \"{idp}\"\nidp_client_id = \"idp-gw\"\nidp_client_secret = \"idp-s3cret\"\n",
            url = provider.mcp_url,
            idp = provider.idp_token_endpoint,
        ),
    )
}

/// Both unattended grants through the binary: `serve` obtains them by
/// itself at start (no `auth login`), calls go through, `check` and `auth
/// status` say which grant each upstream uses, a rotated token file is
/// what the renewal presents, and no assertion, ID token, ID-JAG, token or
/// secret shows anywhere.
#[test]
fn workload_identity_and_enterprise_managed_grants_through_the_binary() {
    // Tokens live 6 s: renewed half-way by `serve` itself.
    let provider = Provider::start(6);
    let dir = tempfile::tempdir().unwrap();
    let config = unattended_config(dir.path(), &provider);
    let data = dir.path().join("state");
    let mut printed = Printed::default();
    let workload = jwt(&provider, "workload");
    let id_token = jwt(&provider, "idtoken");
    provider
        .state
        .assertions
        .lock()
        .unwrap()
        .push(workload.clone());
    provider
        .state
        .id_tokens
        .lock()
        .unwrap()
        .push(id_token.clone());
    std::fs::write(dir.path().join("workload.jwt"), format!("{workload}\n")).unwrap();
    std::fs::write(dir.path().join("id_token.jwt"), &id_token).unwrap();

    let served = common::serve(&config);
    eventually("both upstreams are served", || {
        healthz(&served)["upstreams"] == json!({"up": 2, "down": 0, "needs_login": 0})
    });
    eventually("both upstreams' tools are served", || {
        let names = common::tool_names(&served.authority());
        names.contains(&"wl__echo".to_owned()) && names.contains(&"ent__echo".to_owned())
    });
    let (failed, said) = call(&served, "wl__echo", json!({"message": "from a workload"}));
    assert!(!failed && said.contains("echo: from a workload"), "{said}");
    let (failed, said) = call(&served, "ent__echo", json!({"message": "from ada"}));
    assert!(!failed && said.contains("echo: from ada"), "{said}");
    // The exchange asked for an ID-JAG for this authorization server and
    // this MCP server; the ID-JAG it gave was presented.
    let exchange = provider.state.exchanges.lock().unwrap()[0].clone();
    assert_eq!(exchange["subject_token"], id_token);
    assert_eq!(exchange["audience"], *provider.state.issuer.lock().unwrap());
    assert_eq!(exchange["resource"], provider.mcp_url);
    let presented = provider.state.presented.lock().unwrap().clone();
    assert!(presented.contains(&workload), "{presented:?}");
    assert!(
        presented.iter().any(|a| a.contains("zqjag")),
        "{presented:?}"
    );
    // No person was asked.
    assert!(provider.state.authorizations.lock().unwrap().is_empty());

    let (code, out, err) = printed.run(&config, &["check"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("; logs in with OAuth: workload identity (jwt-bearer)"),
        "{out}"
    );
    assert!(
        out.contains("; logs in with OAuth: enterprise-managed (ID-JAG)"),
        "{out}"
    );
    let (code, out, _) = printed.run(&config, &["auth", "status"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("wl: logged in; issuer http://127.0.0.1:"),
        "{out}"
    );
    assert!(
        out.contains("grant: workload identity (jwt-bearer)"),
        "{out}"
    );
    assert!(out.contains("grant: enterprise-managed (ID-JAG)"), "{out}");
    let (code, out, _) = printed.run(&config, &["auth", "status", "--json"]);
    assert_eq!(code, 0, "{out}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["grant"], "enterprise-managed (ID-JAG)", "{rows}");
    assert_eq!(rows[1]["refreshable"], true, "{rows}");
    let (code, out, _) = printed.run(&config, &["tools", "--json"]);
    assert_eq!(code, 0, "{out}");
    // `auth login` of an unattended upstream runs its grant: no browser.
    let (code, out, err) = printed.run(&config, &["auth", "login", "wl"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("logged in to wl: issuer http://127.0.0.1:"),
        "{out}"
    );
    assert!(out.contains("; refreshable"), "{out}");
    assert!(!err.contains("open this URL"), "{err}");

    // The platform rotates the workload's token; the old one is no longer
    // trusted. The renewal (by `serve`, idle) reads the new file.
    let rotated = jwt(&provider, "rotated");
    provider
        .state
        .assertions
        .lock()
        .unwrap()
        .push(rotated.clone());
    std::fs::write(dir.path().join("workload.jwt"), &rotated).unwrap();
    provider
        .state
        .assertions
        .lock()
        .unwrap()
        .retain(|a| *a != workload);
    eventually("the rotated token was presented", || {
        provider.state.presented.lock().unwrap().contains(&rotated)
    });
    let (failed, said) = call(&served, "wl__echo", json!({"message": "after rotation"}));
    assert!(!failed && said.contains("echo: after rotation"), "{said}");
    assert_eq!(healthz(&served)["upstreams"]["needs_login"], 0);

    let mut secrets = provider.state.issued.lock().unwrap().clone();
    secrets.push("idp-s3cret".into());
    assert_no_secret_shown(&provider, &printed, &served, &data, &secrets);
}

/// An enterprise ID token the identity provider refuses: the upstream needs
/// a login (not down; the reason said, the ID token not), the other one is
/// served, and a new ID token written to the file is taken up at once.
#[test]
fn a_refused_token_exchange_needs_a_login_and_a_new_id_token_is_taken_up() {
    let provider = Provider::start(3600);
    let dir = tempfile::tempdir().unwrap();
    let config = unattended_config(dir.path(), &provider);
    let data = dir.path().join("state");
    let mut printed = Printed::default();
    let workload = jwt(&provider, "workload");
    provider
        .state
        .assertions
        .lock()
        .unwrap()
        .push(workload.clone());
    std::fs::write(dir.path().join("workload.jwt"), &workload).unwrap();
    // Expired: the provider no longer accepts it (and echoes it back).
    let stale = jwt(&provider, "stale");
    std::fs::write(dir.path().join("id_token.jwt"), &stale).unwrap();

    let served = common::serve(&config);
    let said = served.before.join("\n");
    assert!(
        said.contains("upstream \"ent\" needs a login: its enterprise-managed (ID-JAG) grant failed: the token request failed: the identity provider refused the token exchange: invalid_grant"),
        "{said}"
    );
    assert!(
        said.contains("missing upstream ent: needs a login"),
        "{said}"
    );
    eventually("ent needs a login, not down", || {
        healthz(&served)["upstreams"] == json!({"up": 1, "down": 0, "needs_login": 1})
    });
    let (failed, said) = call(&served, "wl__echo", json!({"message": "still here"}));
    assert!(!failed && said.contains("still here"), "{said}");
    // Nothing reached the authorization server for `ent`.
    assert!(
        !provider
            .state
            .presented
            .lock()
            .unwrap()
            .iter()
            .any(|a| a.contains("zqjag"))
    );
    let (code, out, err) = printed.run(&config, &["check"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("needs login: upstream ent"), "{err}");
    assert!(out.contains("connected wl"), "{out}");

    // A fresh ID token lands in the file: taken up without waiting out the
    // retry interval.
    let fresh = jwt(&provider, "idtoken");
    provider.state.id_tokens.lock().unwrap().push(fresh.clone());
    std::fs::write(dir.path().join("id_token.jwt"), &fresh).unwrap();
    let written = Instant::now();
    served.wait_for_line("upstream \"ent\": obtained its enterprise-managed (ID-JAG) grant");
    // Within a few watches, not after the 60 s retry interval.
    assert!(
        written.elapsed() < Duration::from_secs(30),
        "the new ID token was taken up only after {:?}",
        written.elapsed()
    );
    eventually("ent joins", || {
        healthz(&served)["upstreams"] == json!({"up": 2, "down": 0, "needs_login": 0})
    });
    // Connected is counted before its tools are in the map.
    eventually("ent's tools are served", || {
        common::tool_names(&served.authority()).contains(&"ent__echo".to_owned())
    });
    let (failed, said) = call(&served, "ent__echo", json!({"message": "back"}));
    assert!(!failed && said.contains("echo: back"), "{said}");

    let mut secrets = provider.state.issued.lock().unwrap().clone();
    secrets.push("idp-s3cret".into());
    assert_no_secret_shown(&provider, &printed, &served, &data, &secrets);
}

/// Three upstreams whose identity provider never answers: `serve` runs
/// their grants together, so its start waits one `timeout_ms` (5 s), not
/// one per upstream (15 s, as it did).
#[test]
fn hanging_identity_providers_delay_serve_by_one_timeout_not_one_each() {
    let provider = Provider::start(3600);
    let hanging = provider.hanging();
    let dir = tempfile::tempdir().unwrap();
    let mut text =
        "[gateway]\ndata_dir = \"state\"\nreconnect_max_ms = 300\nhealth_interval_ms = 0\n\n"
            .to_owned();
    for name in ["ent1", "ent2", "ent3"] {
        text.push_str(&format!(
            "[upstreams.{name}]\ntype = \"streamable-http\"\nurl = \"{url}\"\ntimeout_ms = 5000\n\n\
             [upstreams.{name}.oauth]\nclient_id = \"gateway\"\nid_token_file = \"id_token.jwt\"\n\
             idp_token_endpoint = \"http://{hanging}/token\"\nidp_client_id = \"idp-gw\"\n\n",
            url = provider.mcp_url,
        ));
    }
    let config = write_config(dir.path(), &text);
    std::fs::write(dir.path().join("id_token.jwt"), jwt(&provider, "idtoken")).unwrap();

    let started = Instant::now();
    let served = common::serve(&config);
    let took = started.elapsed();
    let said = served.before.join("\n");
    for name in ["ent1", "ent2", "ent3"] {
        assert!(
            said.contains(&format!("upstream \"{name}\" needs a login:")),
            "{said}"
        );
    }
    assert!(took < Duration::from_secs(12), "serve took {took:?}");
}

/// An identity provider that accepts the connection and never answers:
/// `serve` gives up on it after the upstream's `timeout_ms` (it waited for
/// ever), serves the other upstream, and says why `ent` needs a login.
#[test]
fn a_hanging_identity_provider_delays_serve_by_its_timeout_not_for_ever() {
    let provider = Provider::start(3600);
    let hanging = provider.hanging();
    let dir = tempfile::tempdir().unwrap();
    let config = unattended_config(dir.path(), &provider);
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(
            &provider.idp_token_endpoint,
            &format!("http://{hanging}/token"),
        )
        .replace(
            "[upstreams.ent.oauth]",
            "timeout_ms = 1500\n\n[upstreams.ent.oauth]",
        );
    std::fs::write(&config, text).unwrap();
    let workload = jwt(&provider, "workload");
    provider
        .state
        .assertions
        .lock()
        .unwrap()
        .push(workload.clone());
    std::fs::write(dir.path().join("workload.jwt"), &workload).unwrap();
    let id_token = jwt(&provider, "idtoken");
    std::fs::write(dir.path().join("id_token.jwt"), &id_token).unwrap();

    let started = Instant::now();
    let served = common::serve(&config);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "serve took {:?}",
        started.elapsed()
    );
    let said = served.before.join("\n");
    assert!(
        said.contains(
            "upstream \"ent\" needs a login: its enterprise-managed (ID-JAG) grant failed:"
        ) && said.contains("within 1500 ms"),
        "{said}"
    );
    eventually("ent needs a login, wl is served", || {
        healthz(&served)["upstreams"] == json!({"up": 1, "down": 0, "needs_login": 1})
    });
    let (failed, said) = call(&served, "wl__echo", json!({"message": "still here"}));
    assert!(!failed && said.contains("still here"), "{said}");
    let mut secrets = provider.state.issued.lock().unwrap().clone();
    secrets.push("idp-s3cret".into());
    assert_no_secret_shown(
        &provider,
        &Printed::default(),
        &served,
        &dir.path().join("state"),
        &secrets,
    );
}

/// An upstream that refuses every token with `401`, however fresh (a
/// broken or hostile server): `serve` renews the unattended grant once
/// for it, not at every watch while calls keep failing — the authorization
/// server and the identity provider are not hammered.
#[test]
fn a_server_refusing_every_fresh_token_does_not_make_serve_renew_in_a_loop() {
    let provider = Provider::start(3600);
    let dir = tempfile::tempdir().unwrap();
    let config = unattended_config(dir.path(), &provider);
    let workload = jwt(&provider, "workload");
    let id_token = jwt(&provider, "idtoken");
    provider
        .state
        .assertions
        .lock()
        .unwrap()
        .push(workload.clone());
    provider
        .state
        .id_tokens
        .lock()
        .unwrap()
        .push(id_token.clone());
    std::fs::write(dir.path().join("workload.jwt"), &workload).unwrap();
    std::fs::write(dir.path().join("id_token.jwt"), &id_token).unwrap();
    let served = common::serve(&config);
    eventually("both upstreams are served", || {
        healthz(&served)["upstreams"] == json!({"up": 2, "down": 0, "needs_login": 0})
    });
    let grants = || provider.state.presented.lock().unwrap().len();
    let exchanges = || provider.state.exchanges.lock().unwrap().len();
    let (before, exchanged) = (grants(), exchanges());
    provider.state.reject_all.store(true, Ordering::SeqCst);
    // Calls keep failing for five watches.
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let (failed, _) = call(&served, "ent__echo", json!({"message": "refused"}));
        assert!(failed);
        let (failed, _) = call(&served, "wl__echo", json!({"message": "refused"}));
        assert!(failed);
        std::thread::sleep(Duration::from_millis(250));
    }
    // At most one renewal each (two grants at the authorization server, one
    // exchange at the identity provider).
    assert!(grants() - before <= 2, "{} grants", grants() - before);
    assert!(
        exchanges() - exchanged <= 1,
        "{} exchanges",
        exchanges() - exchanged
    );
}

/// A server asking for a "scope" that is a shell command: the command
/// `serve` tells the person to run quotes it, so pasting it runs nothing
/// but the login.
#[test]
fn a_step_up_hint_quotes_what_the_server_asked_for() {
    let provider = Provider::start(3600);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &provider);
    let mut printed = Printed::default();
    login(&provider, &config, &[], &mut printed);
    *provider.state.demanded.lock().unwrap() =
        Some("notes:write;touch${IFS}pwned notes:it's".into());
    let served = common::serve(&config);
    let (failed, _) = call(&served, "docs__publish", json!({}));
    assert!(failed);
    let line = served.wait_for_line("refused a call for want of scope");
    assert!(
        line.contains(
            "run `portcullis auth login docs --scope 'notes:write;touch${IFS}pwned' --scope 'notes:it'\\''s'`"
        ),
        "{line}"
    );
}

/// None of `secrets` appears in anything printed, a log line, the audit
/// trail or the data directory.
fn assert_no_secret_shown(
    provider: &Provider,
    printed: &Printed,
    served: &Served,
    data: &Path,
    secrets: &[String],
) {
    let lines = served.lines_so_far(Duration::from_millis(300));
    let trail = provider
        .runtime
        .block_on(common::audit_trail(data))
        .iter()
        .map(|r| format!("{r:?}"))
        .collect::<Vec<_>>()
        .join("\n");
    for secret in secrets {
        for (i, out) in printed.0.iter().enumerate() {
            assert!(!out.contains(secret), "output {i} holds a secret: {out}");
        }
        for line in lines.iter().chain(served.before.iter()) {
            assert!(!line.contains(secret), "a log line holds a secret: {line}");
        }
        assert!(!trail.contains(secret), "the audit trail holds a secret");
        common::assert_nowhere_in(data, secret);
    }
}
