//! The JWT bearer authorization grant (RFC 7523 §2.1): the client presents
//! a JWT it was given — not one it signs — as its authorization grant, and
//! the authorization server answers with an access token. No person and
//! no browser are involved, so the grant runs unattended and is simply run
//! again when its token expires.
//!
//! Two sources of that JWT are supported ([`AssertionGrant`]):
//!
//! - **workload identity**: a token the platform the gateway runs on
//!   issues to it (a Kubernetes projected service-account token, a cloud
//!   instance identity, a CI job's OIDC token), read from a file each time
//!   the grant runs, so a platform that rotates the file is followed;
//! - **enterprise-managed authorization**: the person's identity
//!   assertion from the enterprise identity provider (an ID token, read
//!   from a file likewise) is first exchanged at that provider for an
//!   identity assertion JWT authorization grant (ID-JAG) naming the MCP
//!   server's authorization server and the MCP server itself
//!   ([`super::token_exchange`]); the ID-JAG is then presented here.
//!
//! Every request goes through the server's guarded [`OAuthHttp`]. The
//! assertion, the ID-JAG and the tokens never appear in an error, a log
//! line or a `Debug` output; a server that echoes the assertion in its
//! error description has it cut out.

use std::path::PathBuf;

use base64::Engine as _;
use serde::Deserialize;

use super::assertion::{ASSERTION_TYPE, ClientKey};
use super::discovery::Discovered;
use super::registration::{RegisteredClient, TokenAuth};
use super::token_exchange::EnterpriseIdp;
use super::tokens::Grant;
use super::{OAuthError, OAuthHttp};

/// The `grant_type` of the JWT bearer authorization grant.
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The largest assertion file read: a JWT is a few kilobytes.
const MAX_ASSERTION: u64 = 64 * 1024;

/// Where a JWT the client is given comes from. Its `Debug` never shows an
/// inline value.
#[derive(Clone)]
pub enum AssertionSource {
    /// A file, read afresh each time the assertion is needed (surrounding
    /// whitespace trimmed).
    File(PathBuf),
    /// A value held in memory (for a caller that fetches it itself).
    Value(String),
}

impl std::fmt::Debug for AssertionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AssertionSource::File(path) => f.debug_tuple("File").field(path).finish(),
            AssertionSource::Value(_) => f.write_str("Value(<redacted>)"),
        }
    }
}

impl AssertionSource {
    /// The assertion now. A missing, oversized or empty file is an
    /// [`OAuthError::Assertion`] naming the file, never its content.
    pub async fn read(&self) -> Result<String, OAuthError> {
        let path = match self {
            AssertionSource::Value(value) => return Ok(value.trim().to_owned()),
            AssertionSource::File(path) => path,
        };
        let unusable = |reason: String| OAuthError::Assertion {
            origin: path.display().to_string(),
            reason,
        };
        let file = path.clone();
        let bytes = tokio::task::spawn_blocking(move || read_regular(&file, MAX_ASSERTION))
            .await
            .map_err(|_| unusable("the read was interrupted".into()))?
            .map_err(unusable)?;
        let text = String::from_utf8(bytes).map_err(|_| unusable("not UTF-8 text".into()))?;
        let assertion = text.trim();
        if assertion.is_empty() {
            return Err(unusable("empty".into()));
        }
        // A JWS compact serialisation: three non-empty base64url parts.
        // Anything else (a file of other secrets with two dots in it, two
        // JWTs) is refused here rather than sent (and echoed back) to a
        // server.
        let base64url = |part: &str| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        let parts: Vec<&str> = assertion.split('.').collect();
        if parts.len() != 3 || !parts.iter().all(|p| base64url(p)) {
            return Err(unusable("does not hold a JWT".into()));
        }
        Ok(assertion.to_owned())
    }

    /// A digest of the assertion now (`None` when it cannot be read): tells
    /// a caller whether a refused assertion has since been replaced.
    pub async fn fingerprint(&self) -> Option<String> {
        let assertion = self.read().await.ok()?;
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, assertion.as_bytes());
        Some(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect())
    }
}

/// Reads `path` whole, up to `limit` bytes: opened without blocking (a
/// FIFO swapped in after a check would otherwise wait for a writer
/// forever), refused unless what was opened is a regular file, read one
/// byte past the cap (a size the metadata claims, as `/proc` files claim
/// none, is never trusted). The reason never carries the content.
fn read_regular(path: &std::path::Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options
        .open(path)
        .map_err(|e| match std::fs::metadata(path) {
            Ok(metadata) if !metadata.is_file() => "not a regular file".to_owned(),
            _ => e.kind().to_string(),
        })?;
    let metadata = file.metadata().map_err(|e| e.kind().to_string())?;
    if !metadata.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| e.kind().to_string())?;
    if bytes.len() as u64 > limit {
        return Err(format!("larger than {limit} bytes: not a JWT"));
    }
    Ok(bytes)
}

/// An unattended grant of the JWT bearer kind, and where its assertion
/// comes from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AssertionGrant {
    /// Workload identity: the platform's JWT is the authorization grant.
    Workload {
        /// The platform-issued JWT.
        assertion: AssertionSource,
    },
    /// Enterprise-managed authorization: an ID-JAG from the enterprise
    /// identity provider is the authorization grant.
    Enterprise(EnterpriseIdp),
}

impl AssertionGrant {
    /// A short name for status lines: `workload identity (jwt-bearer)` or
    /// `enterprise-managed (ID-JAG)`.
    pub fn describe(&self) -> &'static str {
        match self {
            AssertionGrant::Workload { .. } => "workload identity (jwt-bearer)",
            AssertionGrant::Enterprise(_) => "enterprise-managed (ID-JAG)",
        }
    }

    /// The source of the JWT this grant starts from (the workload's
    /// token, or the enterprise ID token).
    pub fn source(&self) -> &AssertionSource {
        match self {
            AssertionGrant::Workload { assertion } => assertion,
            AssertionGrant::Enterprise(idp) => &idp.id_token,
        }
    }
}

/// A token endpoint's successful answer (RFC 6749 §5.1, RFC 8693 §2.2.1),
/// the fields used.
#[derive(Deserialize)]
pub(crate) struct TokenAnswer {
    pub(crate) access_token: String,
    #[serde(default, deserialize_with = "seconds")]
    pub(crate) expires_in: Option<u64>,
    #[serde(default)]
    pub(crate) scope: Option<String>,
    #[serde(default)]
    pub(crate) issued_token_type: Option<String>,
    #[serde(default)]
    pub(crate) token_type: Option<String>,
}

/// `expires_in` in whole seconds: a negative number is read as `0` (no
/// lifetime, [`super::tokens::lifetime`]) and a fraction cut, rather than
/// the whole answer refused; anything but a number is still refused.
fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let number = Option::<serde_json::Number>::deserialize(d)?;
    Ok(number.map(|n| {
        n.as_u64().unwrap_or_else(|| {
            // Saturating: a huge fraction is the largest lifetime.
            n.as_f64().filter(|f| *f > 0.0).map_or(0, |f| f as u64)
        })
    }))
}

/// A token endpoint's error answer (RFC 6749 §5.2).
#[derive(Deserialize)]
struct ErrorAnswer {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// How a client authenticates at a token endpoint for one request.
pub(crate) struct ClientAuth<'a> {
    /// The client (`None`: no client authentication at all).
    pub(crate) client: Option<&'a RegisteredClient>,
    /// Its key, for `private_key_jwt`.
    pub(crate) key: Option<&'a ClientKey>,
    /// The issuer the client assertion is addressed to.
    pub(crate) audience: &'a str,
}

/// RFC 6749 §2.3.1: the client id and secret are form-encoded before they
/// are joined for HTTP Basic.
fn basic(client_id: &str, secret: &str) -> String {
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!("{}:{}", encode(client_id), encode(secret));
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// POSTs a form to a token endpoint with the client's authentication.
/// Refusals are [`OAuthError::Token`] with the server's error code and
/// description (any of `hide` cut out of them).
pub(crate) async fn token_request(
    http: &OAuthHttp,
    endpoint: &str,
    auth: &ClientAuth<'_>,
    mut form: Vec<(&'static str, String)>,
    hide: &[&str],
) -> Result<TokenAnswer, OAuthError> {
    let url = http.endpoint(endpoint)?;
    let mut request = http::Request::post(url.as_str())
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(http::header::ACCEPT, "application/json");
    if let Some(client) = auth.client.filter(|c| !c.client_id.is_empty()) {
        match (client.auth, &client.client_secret) {
            (TokenAuth::Basic, Some(secret)) => {
                request = request.header(
                    http::header::AUTHORIZATION,
                    basic(&client.client_id, secret),
                );
            }
            (TokenAuth::Post, Some(secret)) => {
                form.push(("client_id", client.client_id.clone()));
                form.push(("client_secret", secret.clone()));
            }
            (TokenAuth::PrivateKeyJwt, _) => {
                let key = auth.key.ok_or_else(|| OAuthError::ClientKey {
                    reason:
                        "the client authenticates with private_key_jwt but no key is configured"
                            .into(),
                })?;
                form.push(("client_id", client.client_id.clone()));
                form.push(("client_assertion_type", ASSERTION_TYPE.to_owned()));
                form.push((
                    "client_assertion",
                    key.assertion(&client.client_id, auth.audience)?,
                ));
            }
            _ => form.push(("client_id", client.client_id.clone())),
        }
    }
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    let request = request
        .body(body.into_bytes())
        .map_err(|e| OAuthError::Http(e.to_string()))?;
    let response = http.send(request).await?;
    let status = response.status();
    // The server failing (or asking to slow down) is not a refusal of the
    // grant: the caller keeps what it holds and tries again later.
    if status.is_server_error() || status == http::StatusCode::TOO_MANY_REQUESTS {
        return Err(OAuthError::Http(format!(
            "\"{}\" answered HTTP {status}",
            url_shown(&url)
        )));
    }
    if status.is_success() {
        return serde_json::from_slice(response.body()).map_err(|_| OAuthError::Token {
            reason: format!(
                "the answer of \"{}\" is not a token response",
                url_shown(&url)
            ),
        });
    }
    let mut reason = match serde_json::from_slice::<ErrorAnswer>(response.body()) {
        Ok(e) => match e.error_description {
            Some(d) => format!("{}: {d}", e.error),
            None => e.error,
        },
        Err(_) => format!("HTTP {status}"),
    };
    for secret in hide.iter().filter(|s| !s.is_empty()) {
        reason = reason.replace(secret, "<redacted>");
    }
    Err(OAuthError::Token {
        reason: super::secrets::shown(&reason),
    })
}

fn url_shown(url: &url::Url) -> String {
    portcullis_catalog::redact::url(url.as_str())
}

/// The client presented to the authorization server: the configured one
/// (its authentication from what the server supports), or none — the JWT
/// bearer grant needs no client authentication (RFC 7523 §3.1), and no
/// registration is attempted (that is for a person's flow).
pub(crate) fn client_for(
    settings: &super::OAuthSettings,
    discovered: &Discovered,
) -> RegisteredClient {
    let issuer = discovered.issuer.clone();
    match &settings.client_id {
        Some(client_id) if settings.issuer.as_deref().is_none_or(|i| i == issuer) => {
            let auth = if settings.client_key.is_some() {
                TokenAuth::PrivateKeyJwt
            } else {
                super::registration::token_auth(
                    &discovered.server,
                    settings.client_secret.is_some(),
                )
            };
            RegisteredClient {
                issuer,
                client_id: client_id.clone(),
                client_secret: settings.client_secret.clone(),
                auth,
            }
        }
        // An empty id: no client authentication is sent.
        _ => RegisteredClient {
            issuer,
            client_id: String::new(),
            client_secret: None,
            auth: TokenAuth::None,
        },
    }
}

/// Where a grant is asked for: the authorization server and the resource.
pub(crate) struct Target<'a> {
    /// The authorization server's issuer identifier (the ID-JAG's audience).
    pub(crate) issuer: &'a str,
    /// Its token endpoint.
    pub(crate) token_endpoint: &'a str,
    /// The MCP server, as the resource (RFC 8707).
    pub(crate) resource: &'a str,
}

/// Runs the grant: reads (or, enterprise-managed, obtains) the assertion
/// and presents it at the authorization server's token endpoint — with a
/// DPoP proof when `http` proves a key, the token then bound to it. The
/// identity provider's exchange carries no proof: its ID-JAG is a grant
/// for the authorization server, not a token to present.
pub(crate) async fn obtain(
    http: &OAuthHttp,
    grant: &AssertionGrant,
    client: &RegisteredClient,
    key: Option<&ClientKey>,
    target: &Target<'_>,
    scopes: &[String],
) -> Result<Grant, OAuthError> {
    let assertion = match grant {
        AssertionGrant::Workload { assertion } => assertion.read().await?,
        AssertionGrant::Enterprise(idp) => {
            let plain = http.proving(None);
            super::token_exchange::id_jag(&plain, idp, target.issuer, target.resource, scopes)
                .await?
        }
    };
    let mut form = vec![
        ("grant_type", GRANT_TYPE.to_owned()),
        ("assertion", assertion.clone()),
        ("resource", target.resource.to_owned()),
    ];
    if !scopes.is_empty() {
        form.push(("scope", scopes.join(" ")));
    }
    let auth = ClientAuth {
        client: Some(client),
        key,
        audience: target.issuer,
    };
    let answer = token_request(http, target.token_endpoint, &auth, form, &[&assertion]).await?;
    // Bound when a proof was sent, Bearer otherwise: a token of the other
    // kind could not be presented (a bound one needs `token_type: DPoP`).
    let bound = http.dpop_key().is_some();
    match &answer.token_type {
        Some(token_type) => super::dpop::check_token_type(token_type, bound)?,
        None if bound => super::dpop::check_token_type("", bound)?,
        None => {}
    }
    super::tokens::check_access_token(&answer.access_token)?;
    let (expires_at, refresh_at) = super::tokens::lifetime(answer.expires_in);
    let granted = match &answer.scope {
        Some(scope) => super::tokens::granted_scopes(scope.split(' ')),
        None => scopes.to_vec(),
    };
    Ok(Grant {
        issuer: target.issuer.to_owned(),
        resource: target.resource.to_owned(),
        token_endpoint: target.token_endpoint.to_owned(),
        client: client.clone(),
        access_token: answer.access_token,
        // Renewal runs the grant again (a fresh assertion); a refresh token
        // is not needed for that and is not kept.
        refresh_token: None,
        expires_at,
        refresh_at,
        scopes: granted,
        client_credentials: false,
        dpop_key: http.dpop_key().cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_authentication_form_encodes_the_pair() {
        // RFC 6749 §2.3.1: "a:b c" and "s/t" are encoded before joining.
        let header = basic("a:b c", "s/t");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(header.trim_start_matches("Basic "))
            .unwrap();
        assert_eq!(String::from_utf8(decoded).unwrap(), "a%3Ab+c:s%2Ft");
    }

    #[tokio::test]
    async fn an_assertion_file_is_read_afresh_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let source = AssertionSource::File(path.clone());
        let missing = source.read().await.unwrap_err().to_string();
        assert!(missing.contains("token"), "{missing}");
        std::fs::write(&path, "h.first-s3cret.s\n").unwrap();
        assert_eq!(source.read().await.unwrap(), "h.first-s3cret.s");
        let first = source.fingerprint().await.unwrap();
        std::fs::write(&path, "h.second-s3cret.s").unwrap();
        assert_eq!(source.read().await.unwrap(), "h.second-s3cret.s");
        assert_ne!(source.fingerprint().await.unwrap(), first);
        std::fs::write(&path, "not a jwt s3cret").unwrap();
        let refused = source.read().await.unwrap_err().to_string();
        assert!(refused.contains("does not hold a JWT"), "{refused}");
        assert!(!refused.contains("s3cret"), "{refused}");
        let inline = AssertionSource::Value("h.inline-s3cret.s".into());
        assert!(!format!("{inline:?}").contains("s3cret"));
    }
}
