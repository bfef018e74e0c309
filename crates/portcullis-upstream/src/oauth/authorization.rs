//! The authorization request (code + PKCE S256, `resource`, `state`) and
//! the checks on its response: the redirect is ours, `state` matches, and
//! `iss` (RFC 9207) is the issuer the metadata was fetched for — compared
//! as strings, with no URL normalisation; absent only when the server does
//! not advertise sending it.

use oauth2::{
    AuthUrl, ClientId, CsrfToken, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    basic::BasicClient,
};
use url::Url;

use super::OAuthError;
use super::discovery::Discovered;
use super::registration::RegisteredClient;

/// An authorization request on its way: the URL to send the person's
/// browser to, and what is needed to check and redeem its answer.
pub(crate) struct Pending {
    /// The authorization URL.
    pub(crate) url: Url,
    /// The `state` sent.
    pub(crate) state: String,
    /// The PKCE verifier (kept secret until the code is redeemed).
    pub(crate) verifier: PkceCodeVerifier,
}

/// Builds the authorization request.
pub(crate) fn request(
    discovered: &Discovered,
    client: &RegisteredClient,
    redirect_uri: &str,
    scopes: &[String],
) -> Result<Pending, OAuthError> {
    let bad = |what: &str| OAuthError::Discovery {
        server: discovered.issuer.clone(),
        reason: format!("its {what} is not a URL"),
    };
    let auth_url = AuthUrl::new(discovered.server.authorization_endpoint.clone())
        .map_err(|_| bad("authorization endpoint"))?;
    let redirect = RedirectUrl::new(redirect_uri.to_owned())
        .map_err(|_| OAuthError::UserAgent("the redirect URI is not a URL".into()))?;
    let oauth = BasicClient::new(ClientId::new(client.client_id.clone()))
        .set_auth_uri(auth_url)
        .set_redirect_uri(redirect);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, state) = oauth
        .authorize_url(CsrfToken::new_random)
        .set_pkce_challenge(challenge)
        .add_scopes(scopes.iter().cloned().map(Scope::new))
        .add_extra_param("resource", discovered.resource.clone())
        .url();
    Ok(Pending {
        url,
        state: state.secret().clone(),
        verifier,
    })
}

/// Checks the authorization response (`redirected`: the URL the server
/// sent the browser back to) and returns its code.
pub(crate) fn code_from(
    redirected: &Url,
    redirect_uri: &str,
    pending: &Pending,
    discovered: &Discovered,
) -> Result<String, OAuthError> {
    let expected = Url::parse(redirect_uri)
        .map_err(|_| OAuthError::UserAgent("the redirect URI is not a URL".into()))?;
    if redirected.origin() != expected.origin() || redirected.path() != expected.path() {
        return Err(OAuthError::UserAgent(
            "the authorization server redirected somewhere other than the redirect URI".into(),
        ));
    }
    let param = |name: &str| {
        redirected
            .query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    // `iss` first: an error response from the wrong server is no more to
    // be believed than a code from it.
    let issuer = &discovered.issuer;
    match param("iss") {
        Some(iss) if &iss != issuer => {
            return Err(OAuthError::IssuerMismatch {
                expected: issuer.clone(),
                found: Some(iss),
            });
        }
        None if discovered
            .server
            .authorization_response_iss_parameter_supported
            == Some(true) =>
        {
            return Err(OAuthError::IssuerMismatch {
                expected: issuer.clone(),
                found: None,
            });
        }
        _ => {}
    }
    if param("state").as_deref() != Some(pending.state.as_str()) {
        return Err(OAuthError::StateMismatch);
    }
    if let Some(error) = param("error") {
        // The server's words, which a person's terminal will print.
        return Err(OAuthError::Denied {
            error: super::secrets::shown(&error),
            description: param("error_description").map(|d| super::secrets::shown(&d)),
        });
    }
    param("code").ok_or(OAuthError::NoCode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::discovery::ServerMetadata;
    use crate::oauth::registration::TokenAuth;

    fn discovered(iss_supported: Option<bool>) -> Discovered {
        let server: ServerMetadata = serde_json::from_value(serde_json::json!({
            "issuer": "http://127.0.0.1:9",
            "authorization_endpoint": "http://127.0.0.1:9/authorize",
            "token_endpoint": "http://127.0.0.1:9/token",
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": iss_supported,
        }))
        .unwrap();
        Discovered {
            resource: "http://127.0.0.1:8/mcp".into(),
            issuer: "http://127.0.0.1:9".into(),
            resource_metadata: None,
            server,
        }
    }

    fn pending(d: &Discovered) -> Pending {
        let client = RegisteredClient {
            issuer: d.issuer.clone(),
            client_id: "c".into(),
            client_secret: None,
            auth: TokenAuth::None,
        };
        request(
            d,
            &client,
            "http://127.0.0.1:7/cb",
            &["a".into(), "b".into()],
        )
        .unwrap()
    }

    #[test]
    fn the_request_carries_pkce_s256_resource_scope_and_state() {
        let d = discovered(None);
        let p = pending(&d);
        let q: std::collections::HashMap<_, _> = p.url.query_pairs().into_owned().collect();
        assert_eq!(q["code_challenge_method"], "S256");
        assert_eq!(q["resource"], "http://127.0.0.1:8/mcp");
        assert_eq!(q["scope"], "a b");
        assert_eq!(q["state"], p.state);
        assert_eq!(q["response_type"], "code");
        assert!(!q.contains_key("code_verifier"));
    }

    #[test]
    fn iss_is_compared_without_normalisation() {
        let d = discovered(Some(true));
        let p = pending(&d);
        let back = |iss: Option<&str>| {
            let mut u = Url::parse("http://127.0.0.1:7/cb").unwrap();
            u.query_pairs_mut()
                .append_pair("code", "x")
                .append_pair("state", &p.state);
            if let Some(iss) = iss {
                u.query_pairs_mut().append_pair("iss", iss);
            }
            code_from(&u, "http://127.0.0.1:7/cb", &p, &d)
        };
        assert_eq!(back(Some("http://127.0.0.1:9")).unwrap(), "x");
        assert!(matches!(
            back(Some("http://127.0.0.1:9/")),
            Err(OAuthError::IssuerMismatch { .. })
        ));
        assert!(matches!(
            back(None),
            Err(OAuthError::IssuerMismatch { found: None, .. })
        ));
        // Not advertised: absent is accepted, a wrong one still refused.
        let d = discovered(None);
        let p = pending(&d);
        let mut u = Url::parse("http://127.0.0.1:7/cb").unwrap();
        u.query_pairs_mut()
            .append_pair("code", "x")
            .append_pair("state", &p.state);
        assert_eq!(code_from(&u, "http://127.0.0.1:7/cb", &p, &d).unwrap(), "x");
        u.query_pairs_mut()
            .append_pair("iss", "https://evil.example.com");
        assert!(code_from(&u, "http://127.0.0.1:7/cb", &p, &d).is_err());
    }
}
