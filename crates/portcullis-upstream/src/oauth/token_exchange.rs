//! The first half of enterprise-managed authorization: OAuth 2.0 token
//! exchange (RFC 8693) at the enterprise identity provider, turning the
//! person's identity assertion (an ID token the provider issued) into an
//! identity assertion JWT authorization grant (ID-JAG) for one MCP server.
//!
//! The request: `grant_type=urn:ietf:params:oauth:grant-type:token-exchange`,
//! `requested_token_type=urn:ietf:params:oauth:token-type:id-jag`, the ID
//! token as `subject_token` (`subject_token_type=…:id_token`), the MCP
//! server's authorization server (its issuer identifier) as `audience`, the
//! MCP server as `resource`, and the scopes wanted; the client
//! authenticates as the provider knows it (`idp_client_id`, with its secret
//! when it has one). The answer's `issued_token_type` must be the ID-JAG's.
//! The ID-JAG is then the assertion of the JWT bearer grant at the MCP
//! server's authorization server ([`super::jwt_bearer`]), which checks it.
//!
//! The provider's token endpoint is configured, or found from its issuer
//! through its metadata (RFC 8414 / OpenID Connect discovery, the issuer
//! checked). Both go through the server's guarded HTTP.

use serde::Deserialize;

use super::jwt_bearer::{AssertionSource, ClientAuth, token_request};
use super::registration::{RegisteredClient, TokenAuth};
use super::{OAuthError, OAuthHttp};

/// The `grant_type` of a token exchange.
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The token type of an ID token (RFC 8693 §3).
pub const ID_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:id_token";
/// The token type of an identity assertion JWT authorization grant.
pub const ID_JAG_TYPE: &str = "urn:ietf:params:oauth:token-type:id-jag";

/// Where the enterprise identity provider's token endpoint is.
#[derive(Debug, Clone)]
pub enum IdpEndpoint {
    /// Configured directly.
    TokenEndpoint(String),
    /// Found in the metadata of this issuer.
    Issuer(String),
}

/// The enterprise identity provider and this client's standing there.
/// Its `Debug` shows no secret and no token.
#[derive(Clone)]
pub struct EnterpriseIdp {
    /// Its token endpoint, or its issuer.
    pub endpoint: IdpEndpoint,
    /// The client id the provider knows this gateway by.
    pub client_id: String,
    /// Its secret there, if it has one.
    pub client_secret: Option<String>,
    /// The person's ID token from the provider.
    pub id_token: AssertionSource,
}

impl std::fmt::Debug for EnterpriseIdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnterpriseIdp")
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("id_token", &self.id_token)
            .finish()
    }
}

/// The identity provider's metadata, the fields used.
#[derive(Deserialize)]
struct IdpMetadata {
    issuer: String,
    token_endpoint: String,
    #[serde(default)]
    token_endpoint_auth_methods_supported: Option<Vec<String>>,
}

/// The provider's token endpoint and how to authenticate there.
async fn token_endpoint(
    http: &OAuthHttp,
    idp: &EnterpriseIdp,
) -> Result<(String, TokenAuth), OAuthError> {
    let has_secret = idp.client_secret.is_some();
    let issuer = match &idp.endpoint {
        IdpEndpoint::TokenEndpoint(endpoint) => {
            let auth = if has_secret {
                TokenAuth::Basic
            } else {
                TokenAuth::None
            };
            return Ok((endpoint.clone(), auth));
        }
        IdpEndpoint::Issuer(issuer) => issuer,
    };
    let issuer_url = http.endpoint(issuer)?;
    for url in super::discovery::server_metadata_urls(&issuer_url) {
        let Some(found) = http.get_json::<IdpMetadata>(&url).await? else {
            continue;
        };
        if found.issuer != *issuer {
            return Err(OAuthError::IssuerMetadataMismatch {
                issuer: issuer.clone(),
                found: super::secrets::shown(&found.issuer),
            });
        }
        http.endpoint(&found.token_endpoint)?;
        let supported = found.token_endpoint_auth_methods_supported.as_deref();
        let offers = |m: &str| supported.is_none_or(|s| s.iter().any(|x| x == m));
        let auth = match has_secret {
            false => TokenAuth::None,
            true if offers("client_secret_basic") => TokenAuth::Basic,
            true if offers("client_secret_post") => TokenAuth::Post,
            true => TokenAuth::Basic,
        };
        return Ok((found.token_endpoint, auth));
    }
    Err(OAuthError::Discovery {
        server: issuer.clone(),
        reason: "the identity provider publishes no metadata".into(),
    })
}

/// Exchanges the ID token for an ID-JAG for `audience` (the MCP server's
/// authorization server) and `resource` (the MCP server).
pub(crate) async fn id_jag(
    http: &OAuthHttp,
    idp: &EnterpriseIdp,
    audience: &str,
    resource: &str,
    scopes: &[String],
) -> Result<String, OAuthError> {
    let id_token = idp.id_token.read().await?;
    let (endpoint, auth) = token_endpoint(http, idp).await?;
    let client = RegisteredClient {
        issuer: endpoint.clone(),
        client_id: idp.client_id.clone(),
        client_secret: idp.client_secret.clone(),
        auth,
    };
    let mut form = vec![
        ("grant_type", GRANT_TYPE.to_owned()),
        ("requested_token_type", ID_JAG_TYPE.to_owned()),
        ("subject_token", id_token.clone()),
        ("subject_token_type", ID_TOKEN_TYPE.to_owned()),
        ("audience", audience.to_owned()),
        ("resource", resource.to_owned()),
    ];
    if !scopes.is_empty() {
        form.push(("scope", scopes.join(" ")));
    }
    let auth = ClientAuth {
        client: Some(&client),
        key: None,
        audience: &endpoint,
    };
    let answer = token_request(http, &endpoint, &auth, form, &[&id_token])
        .await
        .map_err(|e| match e {
            OAuthError::Token { reason } => OAuthError::Token {
                reason: format!("the identity provider refused the token exchange: {reason}"),
            },
            other => other,
        })?;
    match answer.issued_token_type.as_deref() {
        Some(ID_JAG_TYPE) => Ok(answer.access_token),
        other => Err(OAuthError::Token {
            reason: format!(
                "the identity provider issued {} instead of an ID-JAG",
                other.map_or_else(
                    || "a token of no stated type".to_owned(),
                    |t| format!("\"{}\"", super::secrets::shown(t))
                )
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::{AssertionGrant, OAuthClient, OAuthSettings};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn serve(ip: &str, router: axum::Router) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        addr
    }

    /// The identity provider is reached through the MCP server's SSRF
    /// guard: a server on the internet whose configured provider is on a
    /// private address gets no request sent there (the ID token stays
    /// home).
    #[tokio::test]
    async fn the_identity_provider_is_reached_through_the_servers_ssrf_guard() {
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
        // The MCP server and its authorization server "on the internet".
        let public: std::net::IpAddr = "127.0.0.81".parse().unwrap();
        crate::hosts::PRETEND_PUBLIC.lock().unwrap().push(public);
        let listener = tokio::net::TcpListener::bind((public, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let base = format!("http://{addr}");
        let (prm, metadata) = (
            serde_json::json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]}),
            serde_json::json!({
                "issuer": base,
                "token_endpoint": format!("{base}/token"),
                "grant_types_supported": [crate::oauth::jwt_bearer::GRANT_TYPE],
            }),
        );
        let router = axum::Router::new()
            .route(
                "/.well-known/oauth-protected-resource/mcp",
                axum::routing::get(move || async move { axum::Json(prm) }),
            )
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || async move { axum::Json(metadata) }),
            );
        tokio::spawn(async move { axum::serve(listener, router).await });
        let settings = OAuthSettings {
            client_id: Some("gateway".into()),
            assertion_grant: Some(AssertionGrant::Enterprise(EnterpriseIdp {
                endpoint: IdpEndpoint::TokenEndpoint(format!("http://{internal}/token")),
                client_id: "idp-client".into(),
                client_secret: None,
                id_token: AssertionSource::Value("eyJh.id-token.sig".into()),
            })),
            ..OAuthSettings::default()
        };
        let oauth = OAuthClient::new("crm", &format!("{base}/mcp"), None, settings)
            .await
            .unwrap();
        match oauth.obtain().await {
            Err(OAuthError::Refused(message)) => {
                assert!(message.contains("loopback or private"), "{message}")
            }
            other => panic!("the private provider was not refused: {other:?}"),
        }
        assert_eq!(
            hits.load(Ordering::SeqCst),
            0,
            "the private address was reached"
        );
    }
}
