//! The HTTP surface as an OAuth 2.1 protected resource (opt-in).
//!
//! With [`OAuthOptions`] set on [`crate::HttpOptions::oauth`], `/mcp` takes
//! JWT access tokens issued by one authorization server instead of a
//! static bearer token:
//!
//! - `/.well-known/oauth-protected-resource` (and the same document at
//!   `/.well-known/oauth-protected-resource/mcp`, the path-suffixed form of
//!   RFC 9728 §3.1) says which resource this is and which issuer serves it;
//! - a request without a token is answered 401 with
//!   `WWW-Authenticate: Bearer resource_metadata="…"`, one with a token
//!   that does not pass 401 with `error="invalid_token"` added, one whose
//!   token lacks a required scope 403 with `error="insufficient_scope"` and
//!   the scopes needed;
//! - a token passes when it is signed by a key of the issuer's JWKS with an
//!   asymmetric algorithm (RSA, RSA-PSS, ECDSA, EdDSA: never `none`, never
//!   an HMAC whose secret would be the public key), its `iss` is the issuer,
//!   its `aud` holds the gateway's public resource URL (RFC 8707: a token
//!   minted for another service is refused), `exp` is in the future and
//!   `nbf` in the past (each with [`OAuthOptions::leeway`]), it names a
//!   `sub`, and its scopes hold every required one.
//!
//! The keys are fetched from `jwks_uri`, or from the issuer's metadata
//! (RFC 8414, then OpenID discovery), kept, and fetched again when a token
//! names a key not seen yet (the issuer rotated its keys) or the copy is
//! older than [`OAuthOptions::jwks_max_age`]; never more often than once
//! per [`OAuthOptions::jwks_min_refetch`], so a flood of tokens naming
//! made-up keys cannot make the gateway hammer the identity provider.
//!
//! A token that passes becomes a [`Caller`] in the request's extensions
//! (rmcp hands them on in the `http::request::Parts` of each request
//! context: [`caller_of`]). The token itself goes nowhere: it is not logged,
//! not kept, and never forwarded to an upstream, whose credentials are the
//! gateway's own.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde::Deserialize;
use serde_json::{Value, json};
use thiserror::Error;
use tokio::sync::{Mutex, RwLock};

use portcullis_catalog::redact;

use crate::exposure::Identity;

/// The path of the protected-resource metadata document (RFC 9728).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Default leeway on `exp` and `nbf`: clocks drift, a little.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);

/// Default shortest time between two fetches of the issuer's keys.
pub const DEFAULT_JWKS_MIN_REFETCH: Duration = Duration::from_secs(30);

/// Default age after which the issuer's keys are fetched again (so a key
/// the issuer withdrew stops being accepted).
pub const DEFAULT_JWKS_MAX_AGE: Duration = Duration::from_secs(3600);

/// The most bytes read of a metadata or JWKS document.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// The algorithms a token may be signed with: asymmetric only. `none` and
/// the HMAC family are refused before any key is looked at (an HMAC
/// "verified" with a public key would let anyone who can read the JWKS
/// forge tokens).
const ASYMMETRIC: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// How the surface checks access tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthOptions {
    /// The authorization server's issuer identifier (`iss` of its tokens,
    /// and where its metadata is found).
    pub issuer: String,
    /// The gateway's public resource URL, e.g. `https://mcp.example/mcp`:
    /// tokens must name it in `aud`, and the metadata document names it.
    pub audience: String,
    /// Where the issuer's keys are; `None`: from the issuer's metadata.
    pub jwks_uri: Option<String>,
    /// Scopes every token must hold.
    pub required_scopes: Vec<String>,
    /// Leeway on `exp` and `nbf`.
    pub leeway: Duration,
    /// Shortest time between two fetches of the keys.
    pub jwks_min_refetch: Duration,
    /// Age after which the keys are fetched again.
    pub jwks_max_age: Duration,
}

impl OAuthOptions {
    /// Options for tokens of `issuer` meant for `audience`, with the
    /// defaults for the rest.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>) -> Self {
        OAuthOptions {
            issuer: issuer.into(),
            audience: audience.into(),
            jwks_uri: None,
            required_scopes: Vec::new(),
            leeway: DEFAULT_LEEWAY,
            jwks_min_refetch: DEFAULT_JWKS_MIN_REFETCH,
            jwks_max_age: DEFAULT_JWKS_MAX_AGE,
        }
    }

    /// Checks the URLs: the issuer, the audience and `jwks_uri` must be
    /// absolute `https` URLs (`http` only to a loopback host), without a
    /// fragment; the audience without a query either (RFC 8707 §2).
    pub fn validate(&self) -> Result<(), OAuthConfigError> {
        check_url("issuer", &self.issuer)?;
        let audience = check_url("audience", &self.audience)?;
        if audience.query().is_some() {
            return Err(OAuthConfigError::Url {
                field: "audience",
                reason: "a resource URL has no query",
            });
        }
        if let Some(jwks) = &self.jwks_uri {
            check_url("jwks_uri", jwks)?;
        }
        if self.required_scopes.iter().any(|s| !is_scope_token(s)) {
            return Err(OAuthConfigError::Scope);
        }
        Ok(())
    }

    /// Where the metadata document of [`OAuthOptions::audience`] is
    /// published (RFC 9728 §3.1: the well-known path inserted between the
    /// host and the resource's path).
    ///
    /// ```
    /// use portcullis_server::oauth::OAuthOptions;
    ///
    /// let o = OAuthOptions::new("https://idp.example", "https://mcp.example/mcp");
    /// assert_eq!(o.metadata_url(), "https://mcp.example/.well-known/oauth-protected-resource/mcp");
    /// let o = OAuthOptions::new("https://idp.example", "https://mcp.example/");
    /// assert_eq!(o.metadata_url(), "https://mcp.example/.well-known/oauth-protected-resource");
    /// ```
    pub fn metadata_url(&self) -> String {
        match reqwest::Url::parse(&self.audience) {
            Ok(url) => {
                let path = url.path().trim_end_matches('/');
                format!(
                    "{}{METADATA_PATH}{path}",
                    url.origin().ascii_serialization()
                )
            }
            Err(_) => METADATA_PATH.to_owned(),
        }
    }

    /// The protected-resource metadata document (RFC 9728 §2).
    pub fn metadata(&self) -> Value {
        let mut document = json!({
            "resource": self.audience,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
        });
        if !self.required_scopes.is_empty() {
            document["scopes_supported"] = json!(self.required_scopes);
        }
        document
    }
}

fn check_url(field: &'static str, value: &str) -> Result<reqwest::Url, OAuthConfigError> {
    let url = reqwest::Url::parse(value).map_err(|_| OAuthConfigError::Url {
        field,
        reason: "not an absolute URL",
    })?;
    let loopback = url.host_str().is_some_and(|host| {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    match url.scheme() {
        "https" => {}
        "http" if loopback => {}
        _ => {
            return Err(OAuthConfigError::Url {
                field,
                reason: "must be https (http only to a loopback host)",
            });
        }
    }
    if url.fragment().is_some() {
        return Err(OAuthConfigError::Url {
            field,
            reason: "must not have a fragment",
        });
    }
    Ok(url)
}

/// RFC 6749 §3.3: a scope token is printable ASCII without space, `"` or `\`.
fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// A mistake in [`OAuthOptions`], found before anything listens.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OAuthConfigError {
    /// A URL that cannot be used.
    #[error("oauth {field}: {reason}")]
    Url {
        /// Which setting.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A required scope that is not a scope token (RFC 6749 §3.3).
    #[error(
        "oauth required_scopes: a scope is printable ASCII without spaces, quotes or backslashes"
    )]
    Scope,
}

/// Who called, as the access token says: what the exposure gate, the
/// tools (as their [`Identity`]) and the audit trail see of an
/// authenticated request. Never holds the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's `sub`.
    pub subject: String,
    /// The token's `iss` (the configured issuer).
    pub issuer: String,
    /// The token's scopes (`scope`, or `scp`), in its order.
    pub scopes: Vec<String>,
    /// The OAuth client the token was issued to (`client_id`, or `azp`).
    pub client_id: Option<String>,
}

impl Caller {
    /// The caller as an [`Identity`]: `user` is `{userId, issuer}` (and
    /// `clientId` when known), `perms` the scopes.
    pub fn identity(&self) -> Identity {
        let mut user = json!({"userId": self.subject, "issuer": self.issuer});
        if let Some(client) = &self.client_id {
            user["clientId"] = json!(client);
        }
        Identity::new(user, self.scopes.iter().cloned())
    }
}

/// The authenticated caller of a request, if the surface checked one: the
/// [`Caller`] the guard put in the HTTP request's extensions.
pub fn caller_of(context: &RequestContext<RoleServer>) -> Option<&Caller> {
    context
        .extensions
        .get::<http::request::Parts>()?
        .extensions
        .get::<Caller>()
}

/// The token of an `Authorization` header value in the `Bearer` scheme
/// (RFC 6750, the scheme's name in any case): how an access token is
/// presented, and the surface's static token too.
pub(crate) fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Why a request's token was refused. Says which check failed, never the
/// token.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TokenError {
    /// No `Authorization: Bearer` header.
    #[error("no bearer token")]
    Missing,
    /// Not a JWS compact token, or a header or claims that do not parse
    /// (`alg: none` among them).
    #[error("the token is not a well-formed JWT")]
    Malformed,
    /// Signed with an algorithm that is not asymmetric.
    #[error("the token's algorithm {0} is refused (asymmetric algorithms only)")]
    Algorithm(String),
    /// Its key is in none of the issuer's key sets, even after a fetch.
    #[error("the token's key is not one of the issuer's")]
    UnknownKey,
    /// The key names another algorithm than the token.
    #[error("the token's algorithm does not match its key")]
    KeyMismatch,
    /// The signature does not verify.
    #[error("the token's signature does not verify")]
    Signature,
    /// `exp` has passed.
    #[error("the token has expired")]
    Expired,
    /// `nbf` is still to come.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `iss` is not the configured issuer.
    #[error("the token was issued by another issuer")]
    Issuer,
    /// `aud` does not hold this gateway's resource URL.
    #[error("the token is meant for another audience")]
    Audience,
    /// A claim the gateway needs (`exp`, `iss`, `aud`, `sub`) is missing.
    #[error("the token lacks a required claim")]
    MissingClaim,
    /// A required scope is not granted; holds the ones missing.
    #[error("the token lacks the scope(s) {}", .0.join(" "))]
    InsufficientScope(Vec<String>),
    /// The issuer's keys could not be fetched, and none are known.
    #[error("the issuer's keys are unavailable: {0}")]
    KeysUnavailable(String),
}

impl TokenError {
    fn from_jwt(error: &jsonwebtoken::errors::Error) -> Self {
        use jsonwebtoken::errors::ErrorKind as K;
        match error.kind() {
            K::ExpiredSignature => TokenError::Expired,
            K::ImmatureSignature => TokenError::NotYetValid,
            K::InvalidIssuer => TokenError::Issuer,
            K::InvalidAudience => TokenError::Audience,
            K::MissingRequiredClaim(_) => TokenError::MissingClaim,
            K::InvalidSignature => TokenError::Signature,
            K::InvalidAlgorithm | K::InvalidKeyFormat => TokenError::KeyMismatch,
            _ => TokenError::Malformed,
        }
    }
}

/// The claims read from a token beyond those `jsonwebtoken` checks.
#[derive(Deserialize)]
struct Claims {
    sub: String,
    iss: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Scopes>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    azp: Option<String>,
}

/// `scp` is a list at some issuers, a space-separated string at others.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scopes {
    List(Vec<String>),
    Text(String),
}

/// One key of the issuer's set.
struct Key {
    key: DecodingKey,
    /// The `alg` the JWKS names for the key, if any.
    alg: Option<Algorithm>,
}

#[derive(Default)]
struct KeyCache {
    by_kid: HashMap<String, Arc<Key>>,
    /// Keys published without a `kid`.
    unnamed: Vec<Arc<Key>>,
    /// When the keys in hand were fetched.
    fetched: Option<Instant>,
}

/// Checks access tokens against one issuer's keys; shared by every
/// request of a surface.
pub struct ResourceServer {
    options: OAuthOptions,
    client: reqwest::Client,
    keys: RwLock<KeyCache>,
    /// The last fetch attempt; held while fetching, so concurrent requests
    /// wait for one fetch instead of starting their own.
    last_attempt: Mutex<Option<Instant>>,
    /// `jwks_uri` found in the issuer's metadata, once.
    discovered: Mutex<Option<String>>,
}

impl std::fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceServer")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl ResourceServer {
    /// A checker for `options` (validated first).
    pub fn new(options: OAuthOptions) -> Result<Self, OAuthConfigError> {
        options.validate()?;
        // Redirects are not followed: the issuer's documents are where its
        // metadata says, and a redirect is a way to send the gateway
        // elsewhere.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|_| OAuthConfigError::Url {
                field: "issuer",
                reason: "no HTTP client can be built for it",
            })?;
        Ok(ResourceServer {
            options,
            client,
            keys: RwLock::new(KeyCache::default()),
            last_attempt: Mutex::new(None),
            discovered: Mutex::new(None),
        })
    }

    /// The options this checker was built with.
    pub fn options(&self) -> &OAuthOptions {
        &self.options
    }

    /// Checks the token in `authorization` (an `Authorization` header
    /// value): the caller it names, or why it is refused.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, TokenError> {
        let token = authorization
            .and_then(bearer_token)
            .filter(|t| !t.is_empty())
            .ok_or(TokenError::Missing)?;
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Malformed)?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(TokenError::Algorithm(format!("{:?}", header.alg)));
        }
        let key = self.key_for(header.kid.as_deref()).await?;
        if key.alg.is_some_and(|alg| alg != header.alg) {
            return Err(TokenError::KeyMismatch);
        }
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.options.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.options.issuer]);
        validation.set_audience(&[&self.options.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(token, &key.key, &validation)
            .map_err(|e| TokenError::from_jwt(&e))?;
        let claims = data.claims;
        let scopes: Vec<String> = match (claims.scope, claims.scp) {
            (Some(text), _) | (None, Some(Scopes::Text(text))) => {
                text.split_ascii_whitespace().map(str::to_owned).collect()
            }
            (None, Some(Scopes::List(list))) => list,
            (None, None) => Vec::new(),
        };
        let missing: Vec<String> = self
            .options
            .required_scopes
            .iter()
            .filter(|s| !scopes.contains(s))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(TokenError::InsufficientScope(missing));
        }
        Ok(Caller {
            subject: claims.sub,
            issuer: claims.iss,
            scopes,
            client_id: claims.client_id.or(claims.azp),
        })
    }

    /// The key a token names: from the keys in hand, else (at most once per
    /// `jwks_min_refetch`) from a fresh fetch.
    async fn key_for(&self, kid: Option<&str>) -> Result<Arc<Key>, TokenError> {
        {
            let keys = self.keys.read().await;
            let fresh = keys
                .fetched
                .is_some_and(|at| at.elapsed() < self.options.jwks_max_age);
            if fresh && let Some(key) = find(&keys, kid) {
                return Ok(key);
            }
        }
        let fetched = self.refresh().await;
        let keys = self.keys.read().await;
        match (find(&keys, kid), fetched) {
            (Some(key), _) => Ok(key),
            // No keys at all: not the caller's fault, say why.
            (None, fetched) if keys.fetched.is_none() => {
                Err(TokenError::KeysUnavailable(fetched.err().unwrap_or_else(
                    || "the last fetch failed; it is tried again shortly".to_owned(),
                )))
            }
            (None, _) => Err(TokenError::UnknownKey),
        }
    }

    /// Fetches the keys unless a fetch was tried within
    /// `jwks_min_refetch`; `Err` when the fetch was tried and failed.
    async fn refresh(&self) -> Result<(), String> {
        let mut last = self.last_attempt.lock().await;
        if last.is_some_and(|at| at.elapsed() < self.options.jwks_min_refetch) {
            return Ok(());
        }
        *last = Some(Instant::now());
        match self.fetch_keys().await {
            Ok(set) => {
                let mut cache = KeyCache {
                    fetched: Some(Instant::now()),
                    ..KeyCache::default()
                };
                for jwk in &set {
                    let Some(key) = usable(jwk) else { continue };
                    match &jwk.common.key_id {
                        Some(kid) => {
                            cache.by_kid.insert(kid.clone(), Arc::new(key));
                        }
                        None => cache.unnamed.push(Arc::new(key)),
                    }
                }
                tracing::debug!(
                    keys = cache.by_kid.len() + cache.unnamed.len(),
                    "fetched the issuer's signing keys"
                );
                *self.keys.write().await = cache;
                Ok(())
            }
            Err(reason) => {
                tracing::warn!(issuer = %self.options.issuer, "cannot fetch the issuer's signing keys: {reason}");
                Err(reason)
            }
        }
    }

    /// The issuer's keys. Each key is read on its own: a set may hold
    /// keys of kinds this gateway does not know (encryption keys, new
    /// curves), which are skipped, not a reason to refuse the others.
    async fn fetch_keys(&self) -> Result<Vec<Jwk>, String> {
        let uri = match &self.options.jwks_uri {
            Some(uri) => uri.clone(),
            None => self.discover_jwks_uri().await?,
        };
        #[derive(Deserialize)]
        struct Set {
            keys: Vec<Value>,
        }
        let body = self.get(&uri).await?;
        let set: Set = serde_json::from_slice(&body)
            .map_err(|_| format!("{} is not a JWK set", redact::url(&uri)))?;
        Ok(set
            .keys
            .into_iter()
            .filter_map(|key| serde_json::from_value(key).ok())
            .collect())
    }

    /// `jwks_uri` from the issuer's metadata: RFC 8414's well-known URL
    /// first, then OpenID discovery's; the document must name the
    /// configured issuer (RFC 8414 §3.3).
    async fn discover_jwks_uri(&self) -> Result<String, String> {
        let mut found = self.discovered.lock().await;
        if let Some(uri) = found.as_ref() {
            return Ok(uri.clone());
        }
        let issuer = reqwest::Url::parse(&self.options.issuer).map_err(|e| e.to_string())?;
        let path = issuer.path().trim_end_matches('/');
        let origin = issuer.origin().ascii_serialization();
        let candidates = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ];
        let mut last = String::new();
        for url in candidates {
            let metadata = match self.get(&url).await {
                Ok(body) => body,
                Err(error) => {
                    last = error;
                    continue;
                }
            };
            #[derive(Deserialize)]
            struct Metadata {
                issuer: String,
                jwks_uri: String,
            }
            let metadata: Metadata = serde_json::from_slice(&metadata).map_err(|_| {
                format!("{} is not authorization server metadata", redact::url(&url))
            })?;
            if metadata.issuer != self.options.issuer {
                return Err(format!(
                    "{} names issuer {}, not the configured one",
                    redact::url(&url),
                    redact::visible(&metadata.issuer)
                ));
            }
            check_url("jwks_uri", &metadata.jwks_uri).map_err(|e| e.to_string())?;
            *found = Some(metadata.jwks_uri.clone());
            return Ok(metadata.jwks_uri);
        }
        Err(last)
    }

    /// One GET of a JSON document, at most [`MAX_DOCUMENT_BYTES`].
    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let shown = redact::url(url);
        let mut response = self
            .client
            .get(url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("{shown}: {}", e.without_url()))?;
        if !response.status().is_success() {
            return Err(format!("{shown} answered {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("{shown}: {}", e.without_url()))?
        {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(format!(
                    "{shown} answered more than {MAX_DOCUMENT_BYTES} bytes"
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// Which caller opened each legacy session, so that a session is only
/// ever used by the caller who opened it: another caller who learned its
/// id could otherwise read the server's requests on it (sampling,
/// elicitation, an approval question) or answer them in the owner's name.
/// Bounded: the oldest binding goes first, and a session without one is
/// refused (its owner opens a new one), so forgetting fails closed.
#[derive(Debug, Default)]
pub(crate) struct SessionOwners {
    inner: std::sync::Mutex<SessionMap>,
}

#[derive(Debug, Default)]
struct SessionMap {
    owners: HashMap<String, (String, String)>,
    order: std::collections::VecDeque<String>,
}

/// Bindings kept: far more than the sessions a surface keeps alive.
const MAX_SESSION_OWNERS: usize = 4096;

impl SessionOwners {
    fn lock(&self) -> std::sync::MutexGuard<'_, SessionMap> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `caller` may use session `id`.
    pub(crate) fn owned_by(&self, id: &str, caller: &Caller) -> bool {
        self.lock()
            .owners
            .get(id)
            .is_some_and(|(issuer, subject)| *issuer == caller.issuer && *subject == caller.subject)
    }

    /// Records that `caller` opened session `id`.
    pub(crate) fn bind(&self, id: String, caller: &Caller) {
        let mut map = self.lock();
        if map.owners.len() >= MAX_SESSION_OWNERS
            && let Some(oldest) = map.order.pop_front()
        {
            map.owners.remove(&oldest);
        }
        map.order.push_back(id.clone());
        map.owners
            .insert(id, (caller.issuer.clone(), caller.subject.clone()));
    }
}

fn find(keys: &KeyCache, kid: Option<&str>) -> Option<Arc<Key>> {
    match kid {
        Some(kid) => keys.by_kid.get(kid).cloned(),
        // A token without `kid` is taken only when the set leaves no
        // choice: one key.
        None if keys.by_kid.len() + keys.unnamed.len() == 1 => keys
            .unnamed
            .first()
            .or_else(|| keys.by_kid.values().next())
            .cloned(),
        None => None,
    }
}

/// A JWK the gateway can verify with: a public asymmetric key meant for
/// signatures (no `use`, or `use: sig`) whose `alg`, if named, is
/// asymmetric.
fn usable(jwk: &Jwk) -> Option<Key> {
    use jsonwebtoken::jwk::{AlgorithmParameters, PublicKeyUse};
    if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
        return None;
    }
    if jwk
        .common
        .public_key_use
        .as_ref()
        .is_some_and(|u| *u != PublicKeyUse::Signature)
    {
        return None;
    }
    let alg = match jwk.common.key_algorithm {
        Some(named) => {
            let alg = Algorithm::try_from(named).ok()?;
            if !ASYMMETRIC.contains(&alg) {
                return None;
            }
            Some(alg)
        }
        None => None,
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(Key { key, alg })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_be_https_or_loopback_http() {
        let ok = OAuthOptions::new("https://idp.example", "https://mcp.example/mcp");
        assert_eq!(ok.validate(), Ok(()));
        let loopback = OAuthOptions::new("http://127.0.0.1:9000", "http://localhost:8080/mcp");
        assert_eq!(loopback.validate(), Ok(()));
        for (issuer, audience) in [
            ("http://idp.example", "https://mcp.example/mcp"),
            ("https://idp.example", "http://mcp.example/mcp"),
            ("idp.example", "https://mcp.example/mcp"),
            ("https://idp.example", "https://mcp.example/mcp#x"),
            ("https://idp.example", "https://mcp.example/mcp?tenant=a"),
        ] {
            assert!(
                OAuthOptions::new(issuer, audience).validate().is_err(),
                "{issuer} {audience}"
            );
        }
        let mut scoped = ok.clone();
        scoped.required_scopes = vec!["mcp tools".into()];
        assert_eq!(scoped.validate(), Err(OAuthConfigError::Scope));
    }

    #[test]
    fn the_metadata_names_the_resource_and_its_issuer() {
        let mut options = OAuthOptions::new("https://idp.example", "https://mcp.example/mcp");
        options.required_scopes = vec!["mcp:tools".into()];
        assert_eq!(
            options.metadata(),
            json!({
                "resource": "https://mcp.example/mcp",
                "authorization_servers": ["https://idp.example"],
                "bearer_methods_supported": ["header"],
                "scopes_supported": ["mcp:tools"],
            })
        );
    }

    #[test]
    fn a_caller_becomes_an_identity_with_its_scopes_as_permissions() {
        let caller = Caller {
            subject: "alice".into(),
            issuer: "https://idp.example".into(),
            scopes: vec!["mcp:tools".into(), "read".into()],
            client_id: Some("desk".into()),
        };
        let identity = caller.identity();
        assert_eq!(identity.user["userId"], "alice");
        assert_eq!(identity.user["clientId"], "desk");
        assert_eq!(identity.perms, ["mcp:tools", "read"]);
    }
}
