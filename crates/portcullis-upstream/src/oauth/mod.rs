//! OAuth 2.1 for upstream servers that need it: the client side of the MCP
//! authorization spec (revisions 2025-11-25 and 2026-07-28).
//!
//! An [`OAuthClient`] belongs to one remote server. It is also an
//! [`AuthResolver`](crate::credentials::AuthResolver): hand it to
//! [`ConnectOptions::with_auth`](crate::ConnectOptions::with_auth) and every
//! request carries its access token (refreshed before it expires), and the
//! server's `401`/`403` challenges are handed back to it. Before the first
//! login it sends no token, so the server's `401` says where to log in.
//!
//! | step | module |
//! |---|---|
//! | `WWW-Authenticate`, protected-resource and authorization-server metadata | [`discovery`] |
//! | pre-registered client, client ID metadata document, dynamic registration | [`registration`] |
//! | code + PKCE S256 + `resource`, `state` and `iss` checked | `authorization` (private) |
//! | code redeemed, grant refreshed | [`tokens`] |
//! | the person's browser comes back to a loopback listener | [`redirect`] |
//! | DPoP-bound tokens: proofs, nonces, the key kept in the grant | [`dpop`] |
//! | unattended: a JWT given to the client is the grant (RFC 7523) | [`jwt_bearer`] |
//! | enterprise-managed: ID token exchanged for an ID-JAG (RFC 8693) | [`token_exchange`] |
//!
//! What is checked: every discovery, registration and token request passes
//! the server's SSRF guard ([`crate::hosts`]: the same allow-list and reach
//! as the server itself, so a server on the internet cannot point its
//! metadata at loopback or private addresses), uses https (plain http only
//! on loopback), follows no redirect, and is given up on after
//! [`OAuthSettings::timeout`] (a server that never answers, or trickles its
//! answer, holds nothing up for good); a refusal's body loses the
//! credentials its request carried before it is read (a server that echoes
//! the request into its `error_description`), and the description is shown
//! bounded; the protected-resource metadata
//! must name this server; the authorization server's metadata must carry
//! the issuer it was fetched for and support PKCE S256; the authorization
//! response must carry our `state` and the right `iss`; a registration is
//! bound to its issuer and never shown to another; step-up re-authorizes
//! with the union of the scopes asked so far and the challenged ones, at
//! most [`MAX_STEP_UPS`] times, and never for a scope already asked for.
//! Tokens, client secrets, PKCE verifiers and the JWTs of unattended
//! grants (a workload's token, an ID token, an ID-JAG) never appear in a
//! log line, an error or a `Debug` output. An unattended grant
//! ([`OAuthSettings::assertion_grant`]) involves no person: no
//! registration, no browser; its identity provider is reached through the
//! same guard.
//!
//! Why this shape: rmcp's `auth` feature has a complete client
//! (`OAuthState`), but it runs discovery with its own HTTP stack and its own
//! private-address rule, and its transport wrapper would replace our
//! guarded transport (redirects re-checked per hop, credentials withheld
//! across origins). Enabling it would also turn it on for the whole
//! workspace (one rmcp feature set). So the MCP-specific parts (discovery,
//! registration order, scope selection, step-up, `iss`) are written here on
//! our guarded HTTP, and the OAuth mechanics — the authorization URL, PKCE,
//! the token requests with their client authentication, error responses —
//! are the `oauth2` crate's (no HTTP client of its own: it runs on
//! [`OAuthHttp`]).

pub mod assertion;
pub(crate) mod authorization;
pub mod discovery;
pub mod dpop;
pub mod jwt_bearer;
pub mod redirect;
pub mod registration;
mod secrets;
pub mod token_exchange;
pub mod tokens;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use thiserror::Error;
use url::Url;

use crate::config::is_loopback_host;
use crate::hosts::{GuardedResolver, HostGuard, Reach};
pub use assertion::ClientKey;
pub use discovery::{Challenge, Discovered};
pub use dpop::DpopKey;
pub use jwt_bearer::{AssertionGrant, AssertionSource};
pub use redirect::LoopbackRedirect;
pub use registration::{RegisteredClient, TokenAuth};
pub use token_exchange::{EnterpriseIdp, IdpEndpoint};
pub use tokens::Grant;

/// Step-ups (re-authorizations after `403 insufficient_scope`) allowed per
/// login before the client gives up: a server that keeps asking is not
/// followed round forever.
pub const MAX_STEP_UPS: u32 = 2;

/// How long one OAuth request may take when [`OAuthSettings::timeout`] is
/// not set.
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// After a renewal failed for a reason other than a refusal (the server
/// down, slow, answering 5xx), it is not tried again for this long: the
/// token held is used meanwhile while it has not expired, and the server
/// is not asked on every request.
pub const RENEW_BACKOFF: std::time::Duration = std::time::Duration::from_secs(10);

/// The largest metadata, registration or token response read.
const MAX_BODY: usize = 1 << 20;

/// Why an OAuth step failed. Messages are for a person and never carry a
/// token or a secret.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OAuthError {
    /// No usable grant: the person must log in (again). Not an outage.
    #[error("MCP server \"{server}\" needs a login: {reason}")]
    LoginRequired {
        /// The server's name.
        server: String,
        /// Why (never logged in, the grant was revoked or expired).
        reason: String,
    },
    /// The SSRF guard refused a host (the message names it).
    #[error("{0}")]
    Refused(String),
    /// An OAuth endpoint that is not https (plain http is for loopback).
    #[error("OAuth endpoint \"{url}\" is not usable: {reason}")]
    Endpoint {
        /// The endpoint, without its query.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Discovery found nothing usable.
    #[error("OAuth discovery for \"{server}\" failed: {reason}")]
    Discovery {
        /// The server (or issuer) concerned.
        server: String,
        /// What was missing.
        reason: String,
    },
    /// The protected-resource metadata is for another resource.
    #[error(
        "MCP server \"{server}\" publishes protected-resource metadata for \"{resource}\", which is not this server; refusing to authorize"
    )]
    ResourceMismatch {
        /// The server's name.
        server: String,
        /// The resource the metadata names.
        resource: String,
    },
    /// The authorization server's metadata names another issuer.
    #[error(
        "authorization server \"{issuer}\" publishes metadata for issuer \"{found}\"; refusing to use it"
    )]
    IssuerMetadataMismatch {
        /// The issuer asked for.
        issuer: String,
        /// The issuer the document names.
        found: String,
    },
    /// The authorization server does not advertise PKCE S256.
    #[error(
        "authorization server \"{issuer}\" does not support PKCE with S256; refusing to use it"
    )]
    PkceUnsupported {
        /// The issuer.
        issuer: String,
    },
    /// No pre-registered client, no client ID metadata document accepted,
    /// no dynamic registration offered.
    #[error(
        "authorization server \"{issuer}\" offers no way to register a client: configure a client_id registered there"
    )]
    NoRegistration {
        /// The issuer.
        issuer: String,
    },
    /// Dynamic client registration failed.
    #[error("registering a client at \"{issuer}\" failed: {reason}")]
    Registration {
        /// The issuer.
        issuer: String,
        /// What went wrong.
        reason: String,
    },
    /// The authorization response's `iss` is wrong, or missing though the
    /// server advertises sending it (RFC 9207: a mix-up attack).
    #[error(
        "the authorization response came from issuer {found:?}, expected \"{expected}\"; refused"
    )]
    IssuerMismatch {
        /// The issuer the request went to.
        expected: String,
        /// The `iss` received, if any.
        found: Option<String>,
    },
    /// The authorization response's `state` is not ours.
    #[error("the authorization response does not carry the state sent; refused")]
    StateMismatch,
    /// The authorization server answered with an error.
    #[error("authorization was refused: {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Denied {
        /// The `error` code.
        error: String,
        /// The `error_description`, if any.
        description: Option<String>,
    },
    /// The authorization response has no code.
    #[error("the authorization response carries no code")]
    NoCode,
    /// The token endpoint refused or failed.
    #[error("the token request failed: {reason}")]
    Token {
        /// The server's error code and description, or what broke.
        reason: String,
    },
    /// The server keeps asking for more scope.
    #[error(
        "MCP server \"{server}\" asked for more scope again ({scopes}); not re-authorizing after {attempts} step-ups"
    )]
    StepUpLimit {
        /// The server's name.
        server: String,
        /// The scopes last challenged.
        scopes: String,
        /// Step-ups made.
        attempts: u32,
    },
    /// The browser (or whatever stands in for it) failed.
    #[error("the authorization step failed: {0}")]
    UserAgent(String),
    /// An HTTP request failed.
    #[error("OAuth request failed: {0}")]
    Http(String),
    /// The client's private key (for `private_key_jwt`) is not usable.
    #[error("the OAuth client key is not usable: {reason}")]
    ClientKey {
        /// Why, without the key.
        reason: String,
    },
    /// DPoP is asked for (by the server or the operator) but the
    /// authorization server lists signing algorithms without `ES256`, the
    /// one this client signs proofs with.
    #[error(
        "authorization server \"{issuer}\" supports DPoP only with [{algorithms}], not ES256; refusing to log in without the token binding asked for"
    )]
    DpopUnsupported {
        /// The issuer.
        issuer: String,
        /// The algorithms it lists.
        algorithms: String,
    },
    /// The server accepts DPoP-bound tokens only, and the operator turned
    /// DPoP off for it.
    #[error(
        "MCP server \"{server}\" accepts DPoP-bound tokens only, but DPoP is turned off for it (oauth.dpop = false)"
    )]
    DpopRequired {
        /// The server's name.
        server: String,
    },
    /// A token response of another type than asked for (a Bearer token
    /// answering a DPoP proof, or the reverse).
    #[error("the token response is of type {found:?}, expected {expected}; refused")]
    TokenType {
        /// The type asked for.
        expected: String,
        /// The type received (truncated).
        found: String,
    },
    /// A DPoP key or proof failed (never carries the key).
    #[error("DPoP failed: {reason}")]
    Dpop {
        /// Why.
        reason: String,
    },
    /// An OAuth endpoint did not answer in time (a server that accepts the
    /// connection and never answers, or trickles its answer).
    #[error("OAuth endpoint \"{url}\" did not answer within {} ms", after.as_millis())]
    Timeout {
        /// The endpoint, without its query.
        url: String,
        /// The time it was given.
        after: std::time::Duration,
    },
    /// The assertion of a JWT bearer grant (or the ID token of an
    /// enterprise-managed one) cannot be read.
    #[error("the assertion {origin} is not usable: {reason}")]
    Assertion {
        /// Where it was read from (a file's path), never its content.
        origin: String,
        /// Why.
        reason: String,
    },
}

/// How a client presents itself; all optional but the name and redirect.
#[derive(Clone, Default)]
pub struct OAuthSettings {
    /// `client_name` for dynamic registration.
    pub client_name: String,
    /// The redirect URI the authorization server sends the browser back to
    /// (a loopback listener for a person at this machine).
    pub redirect_uri: String,
    /// A client registered beforehand.
    pub client_id: Option<String>,
    /// Its secret, if it has one (never logged).
    pub client_secret: Option<String>,
    /// The issuer the pre-registered client belongs to; when set, the
    /// client is not presented to another one.
    pub issuer: Option<String>,
    /// The HTTPS URL of this client's metadata document, used as its
    /// `client_id` where the server accepts those.
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for instead of the server's.
    pub scopes: Vec<String>,
    /// The pre-registered client's private key: with it the client
    /// authenticates with a signed assertion (`private_key_jwt`) instead
    /// of a secret.
    pub client_key: Option<ClientKey>,
    /// DPoP-bound tokens ([`dpop`]): `None` when the servers ask for them
    /// (the default), `Some(true)` always (a login fails rather than fall
    /// back to Bearer), `Some(false)` never.
    pub dpop: Option<bool>,
    /// An unattended JWT bearer grant (workload identity or
    /// enterprise-managed) instead of a person's login.
    pub assertion_grant: Option<AssertionGrant>,
    /// How long one OAuth request (discovery, registration, token, the
    /// identity provider's) may take, its answer read whole
    /// ([`OAuthError::Timeout`]). `None`: [`DEFAULT_TIMEOUT`].
    pub timeout: Option<std::time::Duration>,
}

impl std::fmt::Debug for OAuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthSettings")
            .field("client_name", &self.client_name)
            .field("redirect_uri", &self.redirect_uri)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("issuer", &self.issuer)
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scopes", &self.scopes)
            .field("client_key", &self.client_key)
            .field("dpop", &self.dpop)
            .field("assertion_grant", &self.assertion_grant)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Takes the person to the authorization URL and returns the URL the
/// authorization server redirected back to (the redirect URI with `code`,
/// `state` and `iss`). A browser plus a loopback listener for a person;
/// [`FollowRedirects`] for a server that approves by itself.
pub trait UserAgent: Send + Sync {
    /// Visits `url`; resolves to the redirect back to `redirect_uri`.
    fn authorize<'a>(
        &'a self,
        url: &'a Url,
        redirect_uri: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Url, String>> + Send + 'a>>;
}

/// The HTTP every OAuth request of one server goes through: its SSRF guard
/// before each request, its resolver on each connection, no redirects,
/// bounded bodies.
#[derive(Clone)]
pub struct OAuthHttp {
    server: String,
    guard: HostGuard,
    http: reqwest::Client,
    /// Set on a token request's copy: each request carries a DPoP proof.
    dpop: Option<dpop::Prover>,
    /// How long one request may take, its answer read whole.
    timeout: std::time::Duration,
}

impl OAuthHttp {
    async fn new(
        server: &str,
        url: &Url,
        allowed: Option<Vec<String>>,
        timeout: std::time::Duration,
    ) -> Result<OAuthHttp, OAuthError> {
        let guard = HostGuard::new(allowed, Reach::of(url).await);
        let http = crate::hosts::guarded_client(GuardedResolver {
            guard: guard.clone(),
            server: server.to_owned(),
        })
        .map_err(|e| OAuthError::Http(e.to_string()))?;
        Ok(OAuthHttp {
            server: server.to_owned(),
            guard,
            http,
            dpop: None,
            timeout,
        })
    }

    /// This HTTP with a DPoP proof on each request (`None`: without).
    fn proving(&self, prover: Option<dpop::Prover>) -> OAuthHttp {
        OAuthHttp {
            dpop: prover,
            ..self.clone()
        }
    }

    /// The key this HTTP proves possession of, if any.
    pub(crate) fn dpop_key(&self) -> Option<&DpopKey> {
        self.dpop.as_ref().map(|p| &p.key)
    }

    /// Parses an endpoint and holds it to the URL rules: https (http only
    /// on loopback), no userinfo, no fragment, no space or control
    /// character.
    pub(crate) fn endpoint(&self, raw: &str) -> Result<Url, OAuthError> {
        // A server's document may name it: escaped and bounded.
        let shown = secrets::shown(&portcullis_catalog::redact::url(raw));
        let bad = |reason: &str| OAuthError::Endpoint {
            url: shown.clone(),
            reason: reason.to_owned(),
        };
        // URL parsing would strip a line break or encode an escape; the
        // raw string is what is kept and shown (an issuer), so it must
        // hold none.
        if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(bad("it holds spaces or control characters"));
        }
        let url = Url::parse(raw).map_err(|_| bad("not an absolute URL"))?;
        let host = url.host_str().ok_or_else(|| bad("no host"))?;
        match url.scheme() {
            "https" => {}
            "http" if is_loopback_host(host) => {}
            "http" => return Err(bad("plain http: off loopback")),
            _ => return Err(bad("not http(s)")),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("it carries userinfo"));
        }
        if url.fragment().is_some() {
            return Err(bad("it carries a fragment"));
        }
        Ok(url)
    }

    /// Sends one request, guarded; redirects are not followed. With a
    /// DPoP prover, the request carries a proof ([`dpop::send`]).
    pub(crate) async fn send(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> Result<http::Response<Vec<u8>>, OAuthError> {
        match &self.dpop {
            Some(prover) => dpop::send(self, prover, request).await,
            None => self.send_plain(request).await,
        }
    }

    /// [`OAuthHttp::send`] without a proof.
    pub(crate) async fn send_plain(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> Result<http::Response<Vec<u8>>, OAuthError> {
        let url = self.endpoint(&request.uri().to_string())?;
        self.guard
            .check(&url)
            .await
            .map_err(|r| OAuthError::Refused(r.message(&self.server)))?;
        let (parts, body) = request.into_parts();
        // What this request carries that must not come back in an error a
        // server echoes it into.
        let sent = secrets::sent(&parts.headers, &body);
        let exchange = async {
            let response = self
                .http
                .request(parts.method, url.clone())
                .headers(parts.headers)
                .body(body)
                .send()
                .await
                .map_err(|e| OAuthError::Http(e.without_url().to_string()))?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = crate::http::read_bounded(response, MAX_BODY)
                .await
                .map_err(|e| OAuthError::Http(e.to_string()))?;
            Ok::<_, OAuthError>((status, headers, body))
        };
        // A server that accepts the connection and never answers (or
        // trickles its answer) is given up on: the caller may hold the
        // client's state, and every request to the server waits on it.
        let (status, headers, mut body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| OAuthError::Timeout {
                url: portcullis_catalog::redact::url(url.as_str()),
                after: self.timeout,
            })??;
        if !status.is_success() {
            secrets::scrub(&mut body, &sent);
        }
        let mut out = http::Response::new(body);
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        Ok(out)
    }

    /// GETs a JSON document: `None` when the server has none there (any
    /// status but 200, or a body that is not the document).
    pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &Url,
    ) -> Result<Option<T>, OAuthError> {
        let request = http::Request::get(url.as_str())
            .header(http::header::ACCEPT, "application/json")
            .body(Vec::new())
            .map_err(|e| OAuthError::Http(e.to_string()))?;
        let response = self.send(request).await?;
        if response.status() != http::StatusCode::OK {
            return Ok(None);
        }
        Ok(serde_json::from_slice(response.body()).ok())
    }
}

impl<'c> oauth2::AsyncHttpClient<'c> for OAuthHttp {
    type Error = OAuthError;
    type Future =
        Pin<Box<dyn Future<Output = Result<oauth2::HttpResponse, OAuthError>> + Send + 'c>>;

    fn call(&'c self, request: oauth2::HttpRequest) -> Self::Future {
        Box::pin(self.send(request))
    }
}

/// A [`UserAgent`] for authorization servers that approve without a
/// person (test servers, conformance suites): it requests the
/// authorization URL and follows redirects, each hop through the server's
/// SSRF guard, until one points at the redirect URI.
pub struct FollowRedirects {
    http: OAuthHttp,
}

impl UserAgent for FollowRedirects {
    fn authorize<'a>(
        &'a self,
        url: &'a Url,
        redirect_uri: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Url, String>> + Send + 'a>> {
        Box::pin(async move {
            let target = Url::parse(redirect_uri).map_err(|e| e.to_string())?;
            let mut next = url.clone();
            for _ in 0..=crate::MAX_REDIRECTS {
                let request = http::Request::get(next.as_str())
                    .body(Vec::new())
                    .map_err(|e| e.to_string())?;
                let response = self.http.send(request).await.map_err(|e| e.to_string())?;
                let location = response
                    .headers()
                    .get(http::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| {
                        format!(
                            "the authorization server answered HTTP {} without redirecting",
                            response.status()
                        )
                    })?;
                let hop = next.join(location).map_err(|e| e.to_string())?;
                if hop.origin() == target.origin() && hop.path() == target.path() {
                    return Ok(hop);
                }
                next = hop;
            }
            Err("too many redirects before the redirect URI".into())
        })
    }
}

/// The agent of an unattended grant: no person, nothing to visit.
struct NoAgent;

impl UserAgent for NoAgent {
    fn authorize<'a>(
        &'a self,
        _url: &'a Url,
        _redirect_uri: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Url, String>> + Send + 'a>> {
        Box::pin(async { Err("an unattended grant involves no browser".to_owned()) })
    }
}

/// Whether an authorization server offers `client_credentials` and not the
/// authorization code grant.
fn machine_only(metadata: &discovery::ServerMetadata) -> bool {
    metadata.grant_types_supported.as_ref().is_some_and(|g| {
        g.iter().any(|t| t == "client_credentials") && !g.iter().any(|t| t == "authorization_code")
    })
}

/// Where a server's login stands (never a token).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthStatus {
    /// Never logged in.
    LoggedOut,
    /// The grant was refused by the server (revoked or expired): log in
    /// again.
    NeedsLogin,
    /// A grant is held.
    LoggedIn {
        /// Its issuer.
        issuer: String,
        /// When its access token expires (seconds since the epoch).
        expires_at: Option<u64>,
        /// Whether it can be refreshed.
        refreshable: bool,
        /// Its scopes.
        scopes: Vec<String>,
    },
}

#[derive(Default)]
struct State {
    grant: Option<Grant>,
    /// Registrations, by issuer.
    clients: HashMap<String, RegisteredClient>,
    /// The scopes asked for in the last authorization.
    requested: Vec<String>,
    step_ups: u32,
    /// The last grant was refused (revoked, expired past refreshing).
    lost: bool,
    /// Why an unattended grant was last refused (no secret in it).
    refusal: Option<String>,
    /// When a renewal last failed for a reason other than a refusal, and
    /// why ([`RENEW_BACKOFF`]).
    renew_failed: Option<(std::time::Instant, String)>,
}

/// The OAuth client of one remote server. See the module doc. Clones
/// share one login.
#[derive(Clone)]
pub struct OAuthClient(Arc<Shared>);

struct Shared {
    server: String,
    url: Url,
    http: OAuthHttp,
    settings: OAuthSettings,
    state: tokio::sync::Mutex<State>,
    /// The last `401`/`403` challenge the server sent.
    challenge: Mutex<Option<(u16, Challenge)>>,
    /// Told of every change of grant.
    on_grant: Mutex<Option<GrantListener>>,
    /// Held for a whole login or step-up, so two never interleave; `state`
    /// is locked only briefly meanwhile, so requests are not held up while
    /// a person is in their browser.
    login: tokio::sync::Mutex<()>,
    /// The DPoP key of the grant held and the latest nonces.
    dpop: Arc<dpop::Binding>,
}

/// Told of every change of a server's grant — a login, a refresh, a grant
/// refused (`None`), a logout (`None`) — with the server's name, so that
/// whoever keeps grants (encrypted: they hold the tokens) stays current.
/// Called while the client holds its state: keep it short (hand the grant
/// to a task or channel).
pub type GrantListener = Arc<dyn Fn(&str, Option<&Grant>) + Send + Sync>;

impl std::fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClient")
            .field("server", &self.0.server)
            .field("url", &portcullis_catalog::redact::url(self.0.url.as_str()))
            .finish_non_exhaustive()
    }
}

impl OAuthClient {
    /// The client of server `server` at `url`, whose OAuth requests may
    /// reach `allowed` hosts (`None`: any, within the guard's rules) — pass
    /// the server's own allow-list.
    pub async fn new(
        server: &str,
        url: &str,
        allowed: Option<Vec<String>>,
        settings: OAuthSettings,
    ) -> Result<OAuthClient, OAuthError> {
        let url = crate::config::check_remote_url(url).map_err(|reason| OAuthError::Endpoint {
            url: portcullis_catalog::redact::url(url),
            reason,
        })?;
        let http = OAuthHttp::new(
            server,
            &url,
            allowed,
            settings.timeout.unwrap_or(DEFAULT_TIMEOUT),
        )
        .await?;
        Ok(OAuthClient(Arc::new(Shared {
            server: server.to_owned(),
            url,
            http,
            settings,
            state: tokio::sync::Mutex::default(),
            challenge: Mutex::new(None),
            on_grant: Mutex::new(None),
            login: tokio::sync::Mutex::new(()),
            dpop: Arc::default(),
        })))
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.0.server
    }

    /// Sets who is told of every change of grant (see [`GrantListener`]);
    /// not told of a [`OAuthClient::restore`], which comes from them.
    pub fn on_grant(&self, listener: GrantListener) {
        *self
            .0
            .on_grant
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(listener);
    }

    fn changed(&self, grant: Option<&Grant>) {
        // A refused grant keeps its key bound: a stale token is never
        // presented as Bearer to a server it was bound for.
        if let Some(grant) = grant {
            self.0.dpop.bind(grant.dpop_key.clone());
        }
        let listener = self
            .0
            .on_grant
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(listener) = listener {
            listener(&self.0.server, grant);
        }
    }

    /// A [`FollowRedirects`] agent on this server's guarded HTTP.
    pub fn follow_redirects(&self) -> FollowRedirects {
        FollowRedirects {
            http: self.0.http.clone(),
        }
    }

    /// Takes the last challenge the server sent (status and parsed
    /// `WWW-Authenticate`), if any.
    pub fn take_challenge(&self) -> Option<(u16, Challenge)> {
        self.0
            .challenge
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Logs in: discovery (from `challenge`, else the well-known
    /// locations), registration, then the authorization code flow through
    /// `agent`. Resets the step-up count.
    pub async fn login(
        &self,
        challenge: Option<&Challenge>,
        agent: &dyn UserAgent,
    ) -> Result<(), OAuthError> {
        let _login = self.0.login.lock().await;
        self.0.state.lock().await.step_ups = 0;
        self.authorize(challenge, Vec::new(), agent).await
    }

    /// Re-authorizes after a `403 insufficient_scope` challenge, asking for
    /// the scopes asked so far plus the challenged ones. Refused
    /// ([`OAuthError::StepUpLimit`]) after [`MAX_STEP_UPS`] step-ups since
    /// the last login, or when the challenge names no scope not already
    /// asked for (asking again cannot help).
    pub async fn step_up(
        &self,
        challenge: &Challenge,
        agent: &dyn UserAgent,
    ) -> Result<(), OAuthError> {
        let _login = self.0.login.lock().await;
        let scopes = {
            let mut state = self.0.state.lock().await;
            let mut scopes = state.requested.clone();
            let mut added = false;
            for scope in &challenge.scopes {
                if !scopes.contains(scope) {
                    scopes.push(scope.clone());
                    added = true;
                }
            }
            if !added || state.step_ups >= MAX_STEP_UPS {
                return Err(OAuthError::StepUpLimit {
                    server: self.0.server.clone(),
                    scopes: challenge.scopes.join(" "),
                    attempts: state.step_ups,
                });
            }
            state.step_ups += 1;
            scopes
        };
        self.authorize(Some(challenge), scopes, agent).await
    }

    async fn authorize(
        &self,
        challenge: Option<&Challenge>,
        union: Vec<String>,
        agent: &dyn UserAgent,
    ) -> Result<(), OAuthError> {
        // Discovery runs each time: the server may have moved to another
        // authorization server since the last login.
        let discovered = discovery::discover(&self.0.http, &self.0.url, challenge).await?;
        if let Some(assertion) = &self.0.settings.assertion_grant {
            let scopes = if union.is_empty() {
                self.scopes(challenge, &discovered)
            } else {
                union
            };
            return self
                .assertion_login(assertion, challenge, &discovered, scopes)
                .await;
        }
        let redirect_uri = self.0.settings.redirect_uri.as_str();
        let known = self
            .0
            .state
            .lock()
            .await
            .clients
            .get(&discovered.issuer)
            .cloned();
        let client = match known {
            Some(client) => client,
            None => {
                let client = registration::client_for(
                    &self.0.http,
                    &self.0.settings,
                    &discovered.issuer,
                    &discovered.server,
                    redirect_uri,
                )
                .await?;
                self.0
                    .state
                    .lock()
                    .await
                    .clients
                    .insert(discovered.issuer.clone(), client.clone());
                client
            }
        };
        let scopes = if union.is_empty() {
            self.scopes(challenge, &discovered)
        } else {
            union
        };
        let dpop = self.dpop_for(challenge, &discovered).await?;
        let http = self.0.http.proving(dpop);
        let has_credentials =
            client.client_secret.is_some() || client.auth == TokenAuth::PrivateKeyJwt;
        if machine_only(&discovered.server) && has_credentials {
            // The authorization server offers this client no person's
            // flow: its own credentials are the grant.
            let scopes: Vec<String> = scopes
                .into_iter()
                .filter(|s| s != "offline_access")
                .collect();
            let grant = tokens::client_credentials(
                &http,
                &client,
                self.0.settings.client_key.as_ref(),
                &discovered.server.token_endpoint,
                &discovered.resource,
                &scopes,
            )
            .await?;
            tracing::info!(server = %self.0.server, issuer = %grant.issuer, "upstream granted client credentials");
            self.granted(scopes, grant).await;
            return Ok(());
        }
        // Discovery lets a server of machine grants only through without
        // S256; a person's flow still needs it.
        if !discovered
            .server
            .code_challenge_methods_supported
            .as_ref()
            .is_some_and(|m| m.iter().any(|m| m == "S256"))
        {
            return Err(OAuthError::PkceUnsupported {
                issuer: discovered.issuer.clone(),
            });
        }
        let pending = authorization::request(&discovered, &client, redirect_uri, &scopes)?;
        let back = agent
            .authorize(&pending.url, redirect_uri)
            .await
            .map_err(OAuthError::UserAgent)?;
        let code = authorization::code_from(&back, redirect_uri, &pending, &discovered)?;
        let grant = tokens::redeem(
            &http,
            &client,
            self.0.settings.client_key.as_ref(),
            &discovered.server.token_endpoint,
            code,
            pending.verifier,
            redirect_uri,
            &discovered.resource,
            &scopes,
        )
        .await?;
        tracing::info!(server = %self.0.server, issuer = %grant.issuer, "logged in to upstream");
        self.granted(scopes, grant).await;
        Ok(())
    }

    /// The DPoP prover of a login, if it uses DPoP ([`dpop::wanted`]): the
    /// key of the grant held, if bound, else a new one.
    async fn dpop_for(
        &self,
        challenge: Option<&Challenge>,
        discovered: &Discovered,
    ) -> Result<Option<dpop::Prover>, OAuthError> {
        if !dpop::wanted(&self.0.server, self.0.settings.dpop, discovered, challenge)? {
            return Ok(None);
        }
        let held = self
            .0
            .state
            .lock()
            .await
            .grant
            .as_ref()
            .and_then(|g| g.dpop_key.clone());
        let key = match held.or_else(|| self.0.dpop.key()) {
            Some(key) => key,
            None => DpopKey::generate()?,
        };
        Ok(Some(dpop::Prover {
            key,
            binding: self.0.dpop.clone(),
        }))
    }

    /// Keeps a new grant (and tells the listener).
    async fn granted(&self, scopes: Vec<String>, grant: Grant) {
        let mut state = self.0.state.lock().await;
        state.requested = scopes;
        self.changed(Some(&grant));
        state.grant = Some(grant);
        state.lost = false;
        state.refusal = None;
        state.renew_failed = None;
    }

    /// Whether this client's grant is unattended (a JWT bearer grant): it
    /// is obtained with [`OAuthClient::obtain`] and renewed by running it
    /// again, never by a person.
    pub fn unattended(&self) -> Option<&AssertionGrant> {
        self.0.settings.assertion_grant.as_ref()
    }

    /// Runs the unattended grant now (discovery from the well-known
    /// locations, then the grant). Refused with
    /// [`OAuthError::LoginRequired`] for a client without one.
    pub async fn obtain(&self) -> Result<(), OAuthError> {
        if self.0.settings.assertion_grant.is_none() {
            return Err(OAuthError::LoginRequired {
                server: self.0.server.clone(),
                reason: "a person must log in: it has no unattended grant".into(),
            });
        }
        let _login = self.0.login.lock().await;
        self.0.state.lock().await.step_ups = 0;
        self.authorize(None, Vec::new(), &NoAgent).await
    }

    /// Why the unattended grant was last refused, if it was (no secret in
    /// it).
    pub async fn refusal(&self) -> Option<String> {
        self.0.state.lock().await.refusal.clone()
    }

    /// The JWT bearer grant at the discovered authorization server, DPoP-
    /// bound when a person's login would be ([`dpop::wanted`]); a refusal
    /// leaves the client needing a new grant, with the reason.
    async fn assertion_login(
        &self,
        assertion: &AssertionGrant,
        challenge: Option<&Challenge>,
        discovered: &Discovered,
        scopes: Vec<String>,
    ) -> Result<(), OAuthError> {
        // The grant gives no refresh token to ask offline access for.
        let scopes: Vec<String> = scopes
            .into_iter()
            .filter(|s| s != "offline_access")
            .collect();
        if let Some(types) = &discovered.server.grant_types_supported
            && !types.iter().any(|t| t == jwt_bearer::GRANT_TYPE)
        {
            return Err(OAuthError::Discovery {
                server: discovered.issuer.clone(),
                reason: format!(
                    "the authorization server does not offer the JWT bearer grant ({})",
                    jwt_bearer::GRANT_TYPE
                ),
            });
        }
        let client = jwt_bearer::client_for(&self.0.settings, discovered);
        let target = jwt_bearer::Target {
            issuer: &discovered.issuer,
            token_endpoint: &discovered.server.token_endpoint,
            resource: &discovered.resource,
        };
        let http = self
            .0
            .http
            .proving(self.dpop_for(challenge, discovered).await?);
        let outcome = jwt_bearer::obtain(
            &http,
            assertion,
            &client,
            self.0.settings.client_key.as_ref(),
            &target,
            &scopes,
        )
        .await;
        match outcome {
            Ok(grant) => {
                tracing::info!(server = %self.0.server, issuer = %grant.issuer, grant = assertion.describe(), "upstream granted");
                self.granted(scopes, grant).await;
                Ok(())
            }
            Err(e) => {
                if matches!(e, OAuthError::Token { .. } | OAuthError::Assertion { .. }) {
                    let mut state = self.0.state.lock().await;
                    let had = state.grant.take().is_some();
                    state.lost = true;
                    state.refusal = Some(e.to_string());
                    if had {
                        self.changed(None);
                    }
                }
                Err(e)
            }
        }
    }

    /// The scopes of a first authorization: configured ones, else the
    /// challenge's, else the resource's `scopes_supported`, else none; plus
    /// `offline_access` when the authorization server offers it and
    /// refresh tokens.
    fn scopes(&self, challenge: Option<&Challenge>, discovered: &Discovered) -> Vec<String> {
        let mut scopes = if !self.0.settings.scopes.is_empty() {
            self.0.settings.scopes.clone()
        } else if let Some(c) = challenge.filter(|c| !c.scopes.is_empty()) {
            c.scopes.clone()
        } else {
            discovered
                .resource_metadata
                .as_ref()
                .and_then(|m| m.scopes_supported.clone())
                .unwrap_or_default()
        };
        let offline = discovered
            .server
            .scopes_supported
            .as_ref()
            .is_some_and(|s| s.iter().any(|s| s == "offline_access"));
        if offline
            && discovered.server.offers_refresh()
            && !scopes.is_empty()
            && !scopes.iter().any(|s| s == "offline_access")
        {
            scopes.push("offline_access".into());
        }
        scopes
    }

    /// The access token to send, refreshed first when it expires within
    /// [`tokens::REFRESH_MARGIN`]. [`OAuthError::LoginRequired`] when there
    /// is no grant or the server refused to refresh it.
    pub async fn access_token(&self) -> Result<String, OAuthError> {
        let mut state = self.0.state.lock().await;
        let Some(grant) = state.grant.clone() else {
            return Err(self.login_required(&state));
        };
        if !grant.expiring() {
            return Ok(grant.access_token);
        }
        self.renew(&mut state, &grant).await
    }

    /// Refreshes the grant now (after a `401 invalid_token` with a token
    /// that had not expired by the clock).
    pub async fn refresh(&self) -> Result<String, OAuthError> {
        let mut state = self.0.state.lock().await;
        let Some(grant) = state.grant.clone() else {
            return Err(self.login_required(&state));
        };
        self.renew(&mut state, &grant).await
    }

    /// Renews `grant` ([`OAuthClient::refresh_locked`]); a failure that is
    /// not a refusal keeps the grant, and its token is used while it has
    /// not expired, the server not asked again for [`RENEW_BACKOFF`].
    async fn renew(&self, state: &mut State, grant: &Grant) -> Result<String, OAuthError> {
        let valid = grant.expires_at.is_none_or(|at| at > tokens::now());
        if let Some((at, reason)) = &state.renew_failed
            && at.elapsed() < RENEW_BACKOFF
        {
            return match valid {
                true => Ok(grant.access_token.clone()),
                false => Err(OAuthError::Http(format!(
                    "renewing the grant failed {} s ago ({reason}); tried again shortly",
                    at.elapsed().as_secs()
                ))),
            };
        }
        match self.refresh_locked(state, grant).await {
            Ok(token) => {
                state.renew_failed = None;
                Ok(token)
            }
            Err(e @ OAuthError::LoginRequired { .. }) => Err(e),
            Err(e) => {
                tracing::warn!(
                    server = %self.0.server,
                    "renewing the upstream grant failed ({e}); {}",
                    if valid {
                        "its token is used until it expires, and the renewal tried again shortly"
                    } else {
                        "tried again shortly"
                    }
                );
                state.renew_failed = Some((std::time::Instant::now(), e.to_string()));
                match valid {
                    true => Ok(grant.access_token.clone()),
                    false => Err(e),
                }
            }
        }
    }

    async fn refresh_locked(&self, state: &mut State, grant: &Grant) -> Result<String, OAuthError> {
        if let Some(assertion) = &self.0.settings.assertion_grant {
            return self.renew_locked(state, grant, assertion).await;
        }
        // A DPoP-bound grant is refreshed with its own key.
        let http = self
            .0
            .http
            .proving(grant.dpop_key.clone().map(|key| dpop::Prover {
                key,
                binding: self.0.dpop.clone(),
            }));
        match tokens::refresh(&http, grant, self.0.settings.client_key.as_ref()).await? {
            Some(fresh) => {
                let token = fresh.access_token.clone();
                self.changed(Some(&fresh));
                state.grant = Some(fresh);
                Ok(token)
            }
            None => {
                state.grant = None;
                state.lost = true;
                self.changed(None);
                tracing::warn!(server = %self.0.server, "upstream grant refused; a new login is needed");
                Err(self.login_required(state))
            }
        }
    }

    /// Renews an unattended grant by running it again (the assertion read
    /// afresh; a DPoP-bound grant with its own key); refused, the client
    /// needs a new grant.
    async fn renew_locked(
        &self,
        state: &mut State,
        grant: &Grant,
        assertion: &AssertionGrant,
    ) -> Result<String, OAuthError> {
        let target = jwt_bearer::Target {
            issuer: &grant.issuer,
            token_endpoint: &grant.token_endpoint,
            resource: &grant.resource,
        };
        let http = self
            .0
            .http
            .proving(grant.dpop_key.clone().map(|key| dpop::Prover {
                key,
                binding: self.0.dpop.clone(),
            }));
        match jwt_bearer::obtain(
            &http,
            assertion,
            &grant.client,
            self.0.settings.client_key.as_ref(),
            &target,
            &grant.scopes,
        )
        .await
        {
            Ok(fresh) => {
                let token = fresh.access_token.clone();
                self.changed(Some(&fresh));
                state.grant = Some(fresh);
                state.refusal = None;
                Ok(token)
            }
            Err(e @ (OAuthError::Token { .. } | OAuthError::Assertion { .. })) => {
                state.grant = None;
                state.lost = true;
                state.refusal = Some(e.to_string());
                self.changed(None);
                tracing::warn!(server = %self.0.server, grant = assertion.describe(), "upstream grant refused on renewal: {e}");
                Err(self.login_required(state))
            }
            Err(e) => Err(e),
        }
    }

    fn login_required(&self, state: &State) -> OAuthError {
        if let Some(refusal) = &state.refusal {
            return OAuthError::LoginRequired {
                server: self.0.server.clone(),
                reason: refusal.clone(),
            };
        }
        OAuthError::LoginRequired {
            server: self.0.server.clone(),
            reason: if state.lost {
                "the authorization server refused the grant (revoked or expired)".into()
            } else {
                "not logged in".into()
            },
        }
    }

    /// Where the login stands.
    pub async fn status(&self) -> AuthStatus {
        let state = self.0.state.lock().await;
        match (&state.grant, state.lost) {
            (Some(grant), _) => AuthStatus::LoggedIn {
                issuer: grant.issuer.clone(),
                expires_at: grant.expires_at,
                refreshable: grant.refresh_token.is_some(),
                scopes: grant.scopes.clone(),
            },
            (None, true) => AuthStatus::NeedsLogin,
            (None, false) => AuthStatus::LoggedOut,
        }
    }

    /// The grant held, to be kept in a store.
    pub async fn grant(&self) -> Option<Grant> {
        self.0.state.lock().await.grant.clone()
    }

    /// Restores a grant a store kept (its client becomes the one for its
    /// issuer).
    pub async fn restore(&self, grant: Grant) {
        let mut state = self.0.state.lock().await;
        state
            .clients
            .insert(grant.issuer.clone(), grant.client.clone());
        state.requested = grant.scopes.clone();
        self.0.dpop.bind(grant.dpop_key.clone());
        state.grant = Some(grant);
        state.lost = false;
        state.refusal = None;
        state.renew_failed = None;
    }

    /// Forgets the grant and registrations.
    pub async fn logout(&self) {
        *self.0.state.lock().await = State::default();
        self.0.dpop.clear();
        self.changed(None);
    }
}

impl crate::credentials::AuthResolver for OAuthClient {
    fn token(&self, _server: String, _session: String) -> crate::credentials::TokenFuture {
        let this = self.clone();
        Box::pin(async move {
            // Never logged in: no token at all, so the server's 401 says
            // where to log in (an empty token sends no header). A grant that
            // was refused stays "needs a login" until one is made.
            {
                let state = this.0.state.lock().await;
                if state.grant.is_none() && !state.lost {
                    return Ok(String::new());
                }
            }
            this.access_token().await.map_err(|e| e.to_string())
        })
    }

    fn renewable(&self) -> bool {
        true
    }

    fn challenged(&self, _server: &str, status: u16, www_authenticate: Option<&str>) {
        let challenge = www_authenticate
            .and_then(Challenge::parse)
            .unwrap_or_default();
        *self
            .0
            .challenge
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((status, challenge));
    }

    fn present(
        &self,
        token: &str,
        method: &str,
        url: &Url,
    ) -> Result<crate::credentials::Presentation, String> {
        self.0
            .dpop
            .present(token, method, url)
            .map_err(|e| e.to_string())
    }

    fn answered(&self, _server: &str, status: u16, headers: &http::HeaderMap) -> bool {
        self.0.dpop.answered(status, headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Serves `router` on `ip` until the test ends.
    async fn serve(ip: &str, router: axum::Router) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        addr
    }

    /// A server on `ip` publishing protected-resource metadata for itself
    /// that names `authorization_server`.
    async fn metadata_server(
        ip: &str,
        authorization_server: std::net::SocketAddr,
    ) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let document = serde_json::json!({
            "resource": format!("http://{addr}/mcp"),
            "authorization_servers": [format!("http://{authorization_server}")],
        });
        let router = axum::Router::new().route(
            "/.well-known/oauth-protected-resource/mcp",
            axum::routing::get(move || async move { axum::Json(document) }),
        );
        tokio::spawn(async move { axum::serve(listener, router).await });
        addr
    }

    #[tokio::test]
    async fn discovery_never_follows_a_public_servers_metadata_to_a_private_address() {
        // An "authorization server" on loopback, counting its visitors.
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let internal = serve(
            "127.0.0.1",
            axum::Router::new().fallback(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { "{}" }
            }),
        )
        .await;
        // A server "on the internet" (127.0.0.79, treated as public) whose
        // protected-resource metadata names the loopback one.
        let public_ip: std::net::IpAddr = "127.0.0.79".parse().unwrap();
        crate::hosts::PRETEND_PUBLIC.lock().unwrap().push(public_ip);
        let public = metadata_server("127.0.0.79", internal).await;
        let oauth = OAuthClient::new(
            "docs",
            &format!("http://{public}/mcp"),
            None,
            OAuthSettings::default(),
        )
        .await
        .unwrap();
        let outcome = oauth.login(None, &oauth.follow_redirects()).await;
        match outcome {
            Err(OAuthError::Refused(message)) => {
                assert!(message.contains("loopback or private"), "{message}")
            }
            other => panic!("discovery was not refused: {other:?}"),
        }
        assert_eq!(
            hits.load(Ordering::SeqCst),
            0,
            "the private address was reached"
        );
        // The same metadata from a server that is on loopback itself is
        // followed: the refusal above is the guard's.
        let neighbour = metadata_server("127.0.0.80", internal).await;
        let oauth = OAuthClient::new(
            "docs",
            &format!("http://{neighbour}/mcp"),
            None,
            OAuthSettings::default(),
        )
        .await
        .unwrap();
        let _ = oauth.login(None, &oauth.follow_redirects()).await;
        assert!(hits.load(Ordering::SeqCst) > 0);
    }
}
