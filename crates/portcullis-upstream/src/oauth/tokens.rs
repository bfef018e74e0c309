//! Tokens: the code redeemed (with the PKCE verifier and `resource`), the
//! grant kept, and refreshed before it expires.
//!
//! The token endpoint exchanges are the `oauth2` crate's (client
//! authentication `client_secret_basic`, `client_secret_post` or `none`,
//! form encoding, error responses); they run on [`super::OAuthHttp`], so
//! the SSRF guard sees every request.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use oauth2::basic::{BasicClient, BasicErrorResponseType};
use oauth2::{
    AuthType, AuthorizationCode, ClientId, ClientSecret, PkceCodeVerifier, RefreshToken,
    RequestTokenError, TokenResponse, TokenUrl,
};
use serde::{Deserialize, Serialize};

use super::assertion::{ASSERTION_TYPE, ClientKey};
use super::dpop::{self, DpopKey};
use super::registration::{RegisteredClient, TokenAuth};
use super::{OAuthError, OAuthHttp};

/// A token this long from expiry is refreshed before use (or at half its
/// lifetime, for a token that lives less than twice this).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// What a login obtained, per server and issuer. Serialisable so a store
/// can keep it (encrypted: it holds the tokens); its `Debug` shows none.
#[derive(Clone, Serialize, Deserialize)]
pub struct Grant {
    /// The issuer that granted it.
    pub issuer: String,
    /// The `resource` it was granted for.
    pub resource: String,
    /// The issuer's token endpoint (for refreshing).
    pub token_endpoint: String,
    /// The client it was granted to.
    pub client: RegisteredClient,
    /// The access token.
    pub access_token: String,
    /// The refresh token, when the server issued one.
    pub refresh_token: Option<String>,
    /// When the access token expires, in seconds since the epoch (`None`:
    /// the server did not say).
    pub expires_at: Option<u64>,
    /// When to refresh it, in seconds since the epoch: [`REFRESH_MARGIN`]
    /// before expiry, or half-way for a short-lived token.
    #[serde(default)]
    pub refresh_at: Option<u64>,
    /// The scopes requested (or granted, when the server said).
    pub scopes: Vec<String>,
    /// Obtained with the client's own credentials (the `client_credentials`
    /// grant): renewed the same way when it expires, no person involved.
    #[serde(default)]
    pub client_credentials: bool,
    /// The DPoP key its tokens are bound to ([`super::dpop`]); `None`: a
    /// Bearer grant. Kept with the grant, so sealed wherever it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop_key: Option<DpopKey>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("client", &self.client)
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("expires_at", &self.expires_at)
            .field("scopes", &self.scopes)
            .field("dpop", &self.dpop_key.is_some())
            .finish_non_exhaustive()
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The shortest time a token is used before it is renewed ahead of its
/// expiry. A token that lives less than this is used until it expires —
/// never past — and renewed then: a server answering `expires_in: 1` is
/// asked about once a second, not on every request. Two seconds, since
/// times here are whole seconds: at least one real second between two
/// renewals.
pub const MIN_RENEWAL_INTERVAL: Duration = Duration::from_secs(2);

/// When a token of `expires_in` seconds expires and when to refresh it
/// ([`Grant::expires_at`], [`Grant::refresh_at`]). Saturating: a server's
/// `expires_in` near `u64::MAX` must not wrap round to an expiry in the
/// past (renewing on every request) or panic. `0` (what a negative value
/// is read as) is no time a token can be used in, so it states no
/// lifetime, as an absent one does (some servers mean "does not expire"):
/// the token is used until the server refuses it, and a `401` renews it.
pub(crate) fn lifetime(expires_in: Option<u64>) -> (Option<u64>, Option<u64>) {
    lifetime_from(now(), expires_in)
}

fn lifetime_from(now: u64, expires_in: Option<u64>) -> (Option<u64>, Option<u64>) {
    let Some(lifetime) = expires_in.filter(|&l| l > 0) else {
        return (None, None);
    };
    // Never later than the expiry: each term is at most `lifetime`.
    let early = lifetime
        .saturating_sub(REFRESH_MARGIN.as_secs())
        .max(lifetime / 2)
        .max(lifetime.min(MIN_RENEWAL_INTERVAL.as_secs()));
    (
        Some(now.saturating_add(lifetime)),
        Some(now.saturating_add(early)),
    )
}

/// The scope tokens of a server's `scope` answer that are scope tokens
/// (RFC 6749 §3.3: visible ASCII but `"` and `\`); the others (a control
/// character a status line would print) are left out.
pub(crate) fn granted_scopes<'a>(scopes: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    scopes
        .into_iter()
        .filter(|s| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        })
        .map(str::to_owned)
        .collect()
}

/// Refuses an access token that cannot be presented: empty (it would be
/// sent as no credential at all) or holding anything but visible ASCII (a
/// space, a line break: not a header value). RFC 6750's `b64token` and
/// RFC 9449's DPoP tokens are visible ASCII.
pub(crate) fn check_access_token(token: &str) -> Result<(), OAuthError> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(OAuthError::Token {
            reason: "the token response carries no usable access token".into(),
        });
    }
    Ok(())
}

impl Grant {
    /// Whether the access token is due for a refresh (see
    /// [`Grant::refresh_at`]).
    pub fn expiring(&self) -> bool {
        match (self.refresh_at, self.expires_at) {
            (Some(at), _) => at <= now(),
            (None, Some(at)) => at <= now() + REFRESH_MARGIN.as_secs(),
            (None, None) => false,
        }
    }
}

type Oauth2Client = BasicClient<
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointSet,
>;

fn client(registered: &RegisteredClient, token_endpoint: &str) -> Result<Oauth2Client, OAuthError> {
    let token_url = TokenUrl::new(token_endpoint.to_owned()).map_err(|_| OAuthError::Token {
        reason: "the token endpoint is not a URL".into(),
    })?;
    let mut oauth = BasicClient::new(ClientId::new(registered.client_id.clone()))
        .set_token_uri(token_url)
        .set_auth_type(match registered.auth {
            TokenAuth::Basic => AuthType::BasicAuth,
            TokenAuth::Post | TokenAuth::None | TokenAuth::PrivateKeyJwt => AuthType::RequestBody,
        });
    if matches!(registered.auth, TokenAuth::Basic | TokenAuth::Post)
        && let Some(secret) = &registered.client_secret
    {
        oauth = oauth.set_client_secret(ClientSecret::new(secret.clone()));
    }
    Ok(oauth)
}

/// The `client_assertion` form parameters of a `private_key_jwt` client
/// (none for the others): a fresh assertion per request.
fn assertion_params(
    registered: &RegisteredClient,
    key: Option<&ClientKey>,
) -> Result<Vec<(&'static str, String)>, OAuthError> {
    if registered.auth != TokenAuth::PrivateKeyJwt {
        return Ok(Vec::new());
    }
    let key = key.ok_or_else(|| OAuthError::ClientKey {
        reason: "the client authenticates with private_key_jwt but no key is configured".into(),
    })?;
    Ok(vec![
        ("client_assertion_type", ASSERTION_TYPE.to_owned()),
        (
            "client_assertion",
            key.assertion(&registered.client_id, &registered.issuer)?,
        ),
    ])
}

/// What went wrong at the token endpoint, in words without a token.
fn token_failure(
    e: RequestTokenError<OAuthError, oauth2::basic::BasicErrorResponse>,
) -> (Option<BasicErrorResponseType>, OAuthError) {
    match e {
        RequestTokenError::ServerResponse(response) => {
            let code = response.error().clone();
            let reason = super::secrets::shown(&match response.error_description() {
                Some(d) => format!("{code}: {d}"),
                None => code.to_string(),
            });
            (Some(code), OAuthError::Token { reason })
        }
        RequestTokenError::Request(inner) => (None, inner),
        RequestTokenError::Parse(_, _) => (
            None,
            OAuthError::Token {
                reason: "the token response could not be read".into(),
            },
        ),
        RequestTokenError::Other(reason) => (None, OAuthError::Token { reason }),
    }
}

/// The grant a token response makes; refused when its `token_type` is not
/// the one asked for (DPoP when the template is bound to a key).
fn grant_from(
    response: &oauth2::basic::BasicTokenResponse,
    template: Grant,
    requested: &[String],
) -> Result<Grant, OAuthError> {
    dpop::check_token_type(response.token_type().as_ref(), template.dpop_key.is_some())?;
    check_access_token(response.access_token().secret())?;
    let (expires_at, refresh_at) = lifetime(response.expires_in().map(|d| d.as_secs()));
    let scopes = match response.scopes() {
        Some(granted) => granted_scopes(granted.iter().map(|s| s.as_str())),
        None => requested.to_vec(),
    };
    Ok(Grant {
        access_token: response.access_token().secret().clone(),
        refresh_token: response
            .refresh_token()
            .map(|r| r.secret().clone())
            // RFC 6749 §6: a refresh may keep the old refresh token.
            .or(template.refresh_token.clone()),
        expires_at,
        refresh_at,
        scopes,
        ..template
    })
}

/// Redeems an authorization code.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn redeem(
    http: &OAuthHttp,
    registered: &RegisteredClient,
    key: Option<&ClientKey>,
    token_endpoint: &str,
    code: String,
    verifier: PkceCodeVerifier,
    redirect_uri: &str,
    resource: &str,
    scopes: &[String],
) -> Result<Grant, OAuthError> {
    http.endpoint(token_endpoint)?;
    let redirect = oauth2::RedirectUrl::new(redirect_uri.to_owned())
        .map_err(|_| OAuthError::UserAgent("the redirect URI is not a URL".into()))?;
    let oauth = client(registered, token_endpoint)?.set_redirect_uri(redirect);
    let mut request = oauth
        .exchange_code(AuthorizationCode::new(code))
        .set_pkce_verifier(verifier)
        .add_extra_param("resource", resource.to_owned());
    for (name, value) in assertion_params(registered, key)? {
        request = request.add_extra_param(name, value);
    }
    let response = request
        .request_async(http)
        .await
        .map_err(|e| token_failure(e).1)?;
    grant_from(
        &response,
        Grant {
            issuer: registered.issuer.clone(),
            resource: resource.to_owned(),
            token_endpoint: token_endpoint.to_owned(),
            client: registered.clone(),
            access_token: String::new(),
            refresh_token: None,
            expires_at: None,
            refresh_at: None,
            scopes: scopes.to_vec(),
            client_credentials: false,
            dpop_key: http.dpop_key().cloned(),
        },
        scopes,
    )
}

/// The `client_credentials` grant: the client's own credentials, no person
/// (for an authorization server that offers nothing else to this client).
pub(crate) async fn client_credentials(
    http: &OAuthHttp,
    registered: &RegisteredClient,
    key: Option<&ClientKey>,
    token_endpoint: &str,
    resource: &str,
    scopes: &[String],
) -> Result<Grant, OAuthError> {
    http.endpoint(token_endpoint)?;
    let oauth = client(registered, token_endpoint)?;
    let mut request = oauth
        .exchange_client_credentials()
        .add_scopes(scopes.iter().cloned().map(oauth2::Scope::new))
        .add_extra_param("resource", resource.to_owned());
    for (name, value) in assertion_params(registered, key)? {
        request = request.add_extra_param(name, value);
    }
    let response = request
        .request_async(http)
        .await
        .map_err(|e| token_failure(e).1)?;
    grant_from(
        &response,
        Grant {
            issuer: registered.issuer.clone(),
            resource: resource.to_owned(),
            token_endpoint: token_endpoint.to_owned(),
            client: registered.clone(),
            access_token: String::new(),
            refresh_token: None,
            expires_at: None,
            refresh_at: None,
            scopes: scopes.to_vec(),
            client_credentials: true,
            dpop_key: http.dpop_key().cloned(),
        },
        scopes,
    )
}

/// Refreshes `grant`. `Ok(None)`: the server refused the refresh token
/// (`invalid_grant`: revoked or expired), so a new login is needed.
pub(crate) async fn refresh(
    http: &OAuthHttp,
    grant: &Grant,
    key: Option<&ClientKey>,
) -> Result<Option<Grant>, OAuthError> {
    let Some(refresh_token) = &grant.refresh_token else {
        if grant.client_credentials {
            return match client_credentials(
                http,
                &grant.client,
                key,
                &grant.token_endpoint,
                &grant.resource,
                &grant.scopes,
            )
            .await
            {
                Ok(fresh) => Ok(Some(fresh)),
                // Refused credentials are the operator's to fix.
                Err(OAuthError::Token { .. }) => Ok(None),
                Err(e) => Err(e),
            };
        }
        return Ok(None);
    };
    http.endpoint(&grant.token_endpoint)?;
    let oauth = client(&grant.client, &grant.token_endpoint)?;
    let refresh_token = RefreshToken::new(refresh_token.clone());
    let mut request = oauth
        .exchange_refresh_token(&refresh_token)
        .add_extra_param("resource", grant.resource.clone());
    for (name, value) in assertion_params(&grant.client, key)? {
        request = request.add_extra_param(name, value);
    }
    match request.request_async(http).await {
        Ok(response) => grant_from(&response, grant.clone(), &grant.scopes).map(Some),
        Err(e) => match token_failure(e) {
            (Some(BasicErrorResponseType::InvalidGrant), _) => Ok(None),
            (_, error) => Err(error),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_renewed_neither_past_its_expiry_nor_on_every_request() {
        let now = 1_000_000;
        assert_eq!(lifetime_from(now, None), (None, None));
        assert_eq!(lifetime_from(now, Some(0)), (None, None));
        // Short lives are used to their end; longer ones renewed ahead.
        assert_eq!(lifetime_from(now, Some(1)), (Some(now + 1), Some(now + 1)));
        assert_eq!(lifetime_from(now, Some(2)), (Some(now + 2), Some(now + 2)));
        assert_eq!(lifetime_from(now, Some(3)), (Some(now + 3), Some(now + 2)));
        assert_eq!(lifetime_from(now, Some(6)), (Some(now + 6), Some(now + 3)));
        assert_eq!(
            lifetime_from(now, Some(100)),
            (Some(now + 100), Some(now + 50))
        );
        assert_eq!(
            lifetime_from(now, Some(3600)),
            (Some(now + 3600), Some(now + 3540))
        );
        for life in 1..1000 {
            let (Some(expires), Some(refresh)) = lifetime_from(now, Some(life)) else {
                panic!("{life}: no lifetime");
            };
            assert_eq!(expires, now + life);
            assert!(refresh <= expires, "{life}: renewed past its expiry");
            assert!(
                refresh >= now + life.min(MIN_RENEWAL_INTERVAL.as_secs()),
                "{life}: renewed sooner than the floor"
            );
        }
    }

    #[test]
    fn a_grant_never_shows_its_tokens() {
        let grant = Grant {
            issuer: "https://as.example.com".into(),
            resource: "https://mcp.example.com/mcp".into(),
            token_endpoint: "https://as.example.com/token".into(),
            client: RegisteredClient {
                issuer: "https://as.example.com".into(),
                client_id: "id".into(),
                client_secret: Some("client-s3cret".into()),
                auth: TokenAuth::Basic,
            },
            access_token: "access-s3cret".into(),
            refresh_token: Some("refresh-s3cret".into()),
            expires_at: Some(now() + 30),
            refresh_at: None,
            scopes: vec![],
            client_credentials: false,
            dpop_key: Some(DpopKey::generate().unwrap()),
        };
        let shown = format!("{grant:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        let key = serde_json::to_value(&grant.dpop_key).unwrap();
        assert!(!shown.contains(key.as_str().unwrap()), "{shown}");
        assert!(grant.expiring());
    }
}
