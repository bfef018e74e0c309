//! Registration: which `client_id` to present to an authorization server.
//!
//! In the order the MCP authorization spec prefers: a client registered
//! beforehand by the operator (bound to its issuer when one is named), a
//! client ID metadata document (an HTTPS URL used as the `client_id`, when
//! the server says it accepts them), then dynamic client registration
//! (RFC 7591) as the fallback. A registration belongs to the issuer that
//! made it and is never presented to another one.

use serde::{Deserialize, Serialize};

use super::discovery::ServerMetadata;
use super::{OAuthError, OAuthHttp, OAuthSettings};

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenAuth {
    /// `client_secret_basic`: HTTP Basic with the client id and secret.
    #[serde(rename = "client_secret_basic")]
    Basic,
    /// `client_secret_post`: both in the form body.
    #[serde(rename = "client_secret_post")]
    Post,
    /// `none`: a public client; only `client_id` in the body.
    None,
    /// `private_key_jwt`: a JWT signed with the client's private key
    /// (RFC 7523), in the form body.
    #[serde(rename = "private_key_jwt")]
    PrivateKeyJwt,
}

/// A client as one authorization server knows it.
#[derive(Clone, Serialize, Deserialize)]
pub struct RegisteredClient {
    /// The issuer this client belongs to.
    pub issuer: String,
    /// The client id.
    pub client_id: String,
    /// The client secret, if it has one (never logged or shown).
    pub client_secret: Option<String>,
    /// How it authenticates at the token endpoint.
    pub auth: TokenAuth,
}

impl std::fmt::Debug for RegisteredClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredClient")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("auth", &self.auth)
            .finish()
    }
}

/// The token endpoint authentication for a client with or without a
/// secret, from what the server supports (RFC 8414: unlisted means
/// `client_secret_basic`).
pub(crate) fn token_auth(metadata: &ServerMetadata, has_secret: bool) -> TokenAuth {
    if !has_secret {
        return TokenAuth::None;
    }
    let supported = metadata.token_endpoint_auth_methods_supported.as_deref();
    let offers = |m: &str| supported.is_none_or(|s| s.iter().any(|x| x == m));
    if offers("client_secret_basic") {
        TokenAuth::Basic
    } else if offers("client_secret_post") {
        TokenAuth::Post
    } else {
        TokenAuth::None
    }
}

/// The fields of an RFC 7591 registration response used.
#[derive(Deserialize)]
struct RegistrationResponse {
    client_id: String,
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
}

/// The client to present to `issuer`.
pub(crate) async fn client_for(
    http: &OAuthHttp,
    settings: &OAuthSettings,
    issuer: &str,
    metadata: &ServerMetadata,
    redirect_uri: &str,
) -> Result<RegisteredClient, OAuthError> {
    if let Some(client_id) = &settings.client_id
        && settings.issuer.as_deref().is_none_or(|i| i == issuer)
    {
        // A configured key is the operator's choice of authentication.
        let auth = if settings.client_key.is_some() {
            TokenAuth::PrivateKeyJwt
        } else {
            token_auth(metadata, settings.client_secret.is_some())
        };
        return Ok(RegisteredClient {
            issuer: issuer.to_owned(),
            client_id: client_id.clone(),
            client_secret: settings.client_secret.clone(),
            auth,
        });
    }
    if let Some(document) = &settings.client_metadata_url
        && metadata.client_id_metadata_document_supported == Some(true)
    {
        return Ok(RegisteredClient {
            issuer: issuer.to_owned(),
            client_id: document.clone(),
            client_secret: None,
            auth: TokenAuth::None,
        });
    }
    let Some(endpoint) = &metadata.registration_endpoint else {
        return Err(OAuthError::NoRegistration {
            issuer: issuer.to_owned(),
        });
    };
    let url = http.endpoint(endpoint)?;
    let mut grant_types = vec!["authorization_code"];
    if metadata.offers_refresh() {
        grant_types.push("refresh_token");
    }
    let body = serde_json::json!({
        "client_name": settings.client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": grant_types,
        "response_types": ["code"],
        // A public client that runs on the operator's machine.
        "token_endpoint_auth_method": "none",
        "application_type": "native",
    });
    let failed = |reason: String| OAuthError::Registration {
        issuer: issuer.to_owned(),
        reason,
    };
    let (status, bytes) = http
        .send(
            http::Request::post(url.as_str())
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::ACCEPT, "application/json")
                .body(serde_json::to_vec(&body).unwrap_or_default())
                .map_err(|e| failed(e.to_string()))?,
        )
        .await
        .map(|r| (r.status(), r.into_body()))?;
    if !status.is_success() {
        return Err(failed(format!("HTTP {status}")));
    }
    let registered: RegistrationResponse = serde_json::from_slice(&bytes)
        .map_err(|_| failed("the response is not a registration".into()))?;
    let auth = match registered.token_endpoint_auth_method.as_deref() {
        Some("client_secret_basic") => TokenAuth::Basic,
        Some("client_secret_post") => TokenAuth::Post,
        Some("none") => TokenAuth::None,
        _ => token_auth(metadata, registered.client_secret.is_some()),
    };
    Ok(RegisteredClient {
        issuer: issuer.to_owned(),
        client_id: registered.client_id,
        client_secret: registered.client_secret,
        auth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(methods: Option<&[&str]>) -> ServerMetadata {
        serde_json::from_value(serde_json::json!({
            "issuer": "https://as.example.com",
            "authorization_endpoint": "https://as.example.com/authorize",
            "token_endpoint": "https://as.example.com/token",
            "token_endpoint_auth_methods_supported": methods,
        }))
        .unwrap()
    }

    #[test]
    fn the_token_auth_method_follows_what_the_server_supports() {
        assert_eq!(token_auth(&metadata(None), true), TokenAuth::Basic);
        assert_eq!(
            token_auth(&metadata(Some(&["client_secret_post"])), true),
            TokenAuth::Post
        );
        assert_eq!(
            token_auth(&metadata(Some(&["none"])), true),
            TokenAuth::None
        );
        assert_eq!(token_auth(&metadata(None), false), TokenAuth::None);
    }

    #[test]
    fn a_secret_never_shows_in_debug_output() {
        let client = RegisteredClient {
            issuer: "https://as.example.com".into(),
            client_id: "id".into(),
            client_secret: Some("s3cr3t".into()),
            auth: TokenAuth::Basic,
        };
        assert!(!format!("{client:?}").contains("s3cr3t"));
    }
}
