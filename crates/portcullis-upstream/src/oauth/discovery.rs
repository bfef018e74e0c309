//! Discovery: from a server's `WWW-Authenticate` challenge to its
//! protected-resource metadata (RFC 9728) and on to its authorization
//! server's metadata (RFC 8414, or OpenID Connect discovery).
//!
//! Order, as the MCP authorization spec lays it down:
//! - protected-resource metadata from the challenge's `resource_metadata`,
//!   else the path-based well-known URL
//!   (`/.well-known/oauth-protected-resource/<path>`), else the root one;
//! - its `resource` must name this server (same origin, and a path the
//!   server's path lies under); the `resource` parameter sent later is that
//!   value exactly as published;
//! - authorization-server metadata for an issuer with a path at
//!   `/.well-known/oauth-authorization-server/<path>`,
//!   `/.well-known/openid-configuration/<path>`, then
//!   `<path>/.well-known/openid-configuration`; for an issuer without one at
//!   the two root documents. The document's `issuer` must equal the issuer
//!   it was fetched for, character for character;
//! - a server that publishes no protected-resource metadata at all is of the
//!   2025-03-26 generation: its origin is its authorization server (whose
//!   metadata there may name an issuer on that same origin, and no other),
//!   and when that publishes no metadata either, the default endpoints
//!   `/authorize`, `/token` and `/register` are used.
//!
//! Every fetch passes the server's SSRF guard ([`super::OAuthHttp`]).

use serde::Deserialize;
use url::Url;

use super::{OAuthError, OAuthHttp};

/// A parsed `WWW-Authenticate: Bearer …` (or `DPoP …`) challenge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// The `error` parameter (`invalid_token`, `insufficient_scope`, …).
    pub error: Option<String>,
    /// The `scope` parameter, split on spaces.
    pub scopes: Vec<String>,
    /// The `resource_metadata` parameter (RFC 9728 §5.1).
    pub resource_metadata: Option<String>,
    /// The server challenged with the `DPoP` scheme and not `Bearer`: it
    /// accepts DPoP-bound tokens only (RFC 9449 §7.1).
    pub dpop: bool,
}

impl Challenge {
    /// Parses the value of a `WWW-Authenticate` header; `None` when it holds
    /// no `Bearer` or `DPoP` challenge. Parameters of other schemes are
    /// ignored.
    pub fn parse(header: &str) -> Option<Challenge> {
        let mut rest = header.trim();
        let mut found = None;
        let (mut bearer, mut dpop) = (false, false);
        // Schemes and their parameters, comma separated; a token that is not
        // followed by `=` starts a new scheme.
        let mut in_bearer = false;
        while !rest.is_empty() {
            rest = rest.trim_start_matches([',', ' ', '\t']);
            let end = rest
                .find(|c: char| c == '=' || c == ',' || c.is_whitespace())
                .unwrap_or(rest.len());
            let token = &rest[..end];
            let after = rest[end..].trim_start_matches([' ', '\t']);
            if let Some(value_part) = after.strip_prefix('=') {
                // An auth-param (or a token68 ending in `=`; skipped).
                let value_part = value_part.trim_start_matches([' ', '\t']);
                let (value, remaining) = parse_value(value_part);
                if in_bearer {
                    let challenge: &mut Challenge = found.get_or_insert_with(Challenge::default);
                    match token.to_ascii_lowercase().as_str() {
                        "error" => challenge.error = Some(value),
                        "scope" => {
                            challenge.scopes = value.split_whitespace().map(str::to_owned).collect()
                        }
                        "resource_metadata" => challenge.resource_metadata = Some(value),
                        _ => {}
                    }
                }
                rest = remaining;
            } else {
                if token.is_empty() {
                    break;
                }
                let is_bearer = token.eq_ignore_ascii_case("bearer");
                let is_dpop = token.eq_ignore_ascii_case("dpop");
                bearer |= is_bearer;
                dpop |= is_dpop;
                in_bearer = is_bearer || is_dpop;
                if in_bearer {
                    found.get_or_insert_with(Challenge::default);
                }
                rest = after;
            }
        }
        if let Some(challenge) = found.as_mut() {
            challenge.dpop = dpop && !bearer;
        }
        found
    }

    /// Whether the server asks for more scope (a 403 step-up).
    pub fn insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

/// One auth-param value: a quoted string (with `\` escapes) or a token.
/// Returns the value and what follows it.
fn parse_value(input: &str) -> (String, &str) {
    if let Some(quoted) = input.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(escaped);
                    }
                }
                '"' => return (value, &quoted[i + 1..]),
                c => value.push(c),
            }
        }
        (value, "")
    } else {
        let end = input.find(',').unwrap_or(input.len());
        (input[..end].trim().to_owned(), &input[end..])
    }
}

/// Protected-resource metadata (RFC 9728 §2), the fields used.
#[derive(Debug, Clone, Deserialize)]
pub struct ResourceMetadata {
    /// The resource identifier.
    pub resource: String,
    /// Issuers of the authorization servers that protect it.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    /// Scopes the resource understands.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// RFC 9449 §5.2: the resource accepts DPoP-bound tokens only.
    #[serde(default)]
    pub dpop_bound_access_tokens_required: Option<bool>,
}

/// Authorization-server metadata (RFC 8414 §2), the fields used.
#[derive(Debug, Clone, Deserialize)]
pub struct ServerMetadata {
    /// The issuer identifier.
    pub issuer: String,
    /// Where the person is sent to authorize (empty: none, a server of
    /// machine grants only).
    #[serde(default)]
    pub authorization_endpoint: String,
    /// Where codes and refresh tokens are exchanged.
    pub token_endpoint: String,
    /// Dynamic client registration (RFC 7591), if offered.
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    /// Scopes the server knows.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// Grant types it supports.
    #[serde(default)]
    pub grant_types_supported: Option<Vec<String>>,
    /// PKCE methods; a server without `S256` is refused.
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// Client authentication methods at the token endpoint.
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// RFC 9207: the authorization response carries `iss`.
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: Option<bool>,
    /// Client ID metadata documents accepted as `client_id`.
    #[serde(default)]
    pub client_id_metadata_document_supported: Option<bool>,
    /// RFC 9449 §5.1: the algorithms it accepts DPoP proofs signed with.
    #[serde(default)]
    pub dpop_signing_alg_values_supported: Option<Vec<String>>,
}

impl ServerMetadata {
    /// Whether the server offers refresh tokens (grant types unlisted:
    /// RFC 8414's default, which does not include them).
    pub fn offers_refresh(&self) -> bool {
        self.grant_types_supported
            .as_ref()
            .is_some_and(|g| g.iter().any(|t| t == "refresh_token"))
    }
}

/// Everything discovery found for one server.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The `resource` parameter to send: the metadata's `resource` exactly
    /// as published, or the server's URL when it publishes none.
    pub resource: String,
    /// The issuer, exactly as named by the resource metadata.
    pub issuer: String,
    /// The protected-resource metadata, when the server publishes it.
    pub resource_metadata: Option<ResourceMetadata>,
    /// The authorization server's metadata (or the 2025-03-26 defaults).
    pub server: ServerMetadata,
}

/// The well-known locations of `url`'s protected-resource metadata, the
/// path-based one first.
pub(crate) fn resource_metadata_urls(url: &Url) -> Vec<Url> {
    let path = url.path().trim_end_matches('/');
    let mut urls = Vec::new();
    let mut root = url.clone();
    root.set_query(None);
    root.set_fragment(None);
    if !path.is_empty() {
        let mut based = root.clone();
        based.set_path(&format!("/.well-known/oauth-protected-resource{path}"));
        urls.push(based);
    }
    root.set_path("/.well-known/oauth-protected-resource");
    urls.push(root);
    urls
}

/// The well-known locations of an issuer's metadata (RFC 8414 §3.1 and
/// OpenID Connect discovery, path insertion first).
pub(crate) fn server_metadata_urls(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let mut base = issuer.clone();
    base.set_query(None);
    base.set_fragment(None);
    let at = |p: String| {
        let mut u = base.clone();
        u.set_path(&p);
        u
    };
    if path.is_empty() {
        vec![
            at("/.well-known/oauth-authorization-server".into()),
            at("/.well-known/openid-configuration".into()),
        ]
    } else {
        vec![
            at(format!("/.well-known/oauth-authorization-server{path}")),
            at(format!("/.well-known/openid-configuration{path}")),
            at(format!("{path}/.well-known/openid-configuration")),
        ]
    }
}

/// Whether the resource metadata's `resource` names `server`: same origin,
/// and the server's path equal to or under the resource's path.
pub(crate) fn resource_matches(resource: &str, server: &Url) -> bool {
    let Ok(resource) = Url::parse(resource) else {
        return false;
    };
    if resource.fragment().is_some() || resource.origin() != server.origin() {
        return false;
    }
    let prefix = resource.path().trim_end_matches('/');
    let path = server.path();
    path == prefix
        || prefix.is_empty()
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Runs discovery for `server` (its configured URL) after `challenge`.
pub(crate) async fn discover(
    http: &OAuthHttp,
    server: &Url,
    challenge: Option<&Challenge>,
) -> Result<Discovered, OAuthError> {
    let candidates = match challenge.and_then(|c| c.resource_metadata.as_deref()) {
        Some(named) => vec![http.endpoint(named)?],
        None => resource_metadata_urls(server),
    };
    let mut resource_metadata = None;
    for url in candidates {
        if let Some(found) = http.get_json::<ResourceMetadata>(&url).await? {
            resource_metadata = Some(found);
            break;
        }
    }
    let Some(prm) = resource_metadata else {
        return legacy(http, server).await;
    };
    if !resource_matches(&prm.resource, server) {
        return Err(OAuthError::ResourceMismatch {
            server: http.server.clone(),
            resource: super::secrets::shown(&prm.resource),
        });
    }
    let issuer =
        prm.authorization_servers
            .first()
            .cloned()
            .ok_or_else(|| OAuthError::Discovery {
                server: http.server.clone(),
                reason: "its protected-resource metadata names no authorization server".into(),
            })?;
    let issuer_url = http.endpoint(&issuer)?;
    let mut metadata = None;
    for url in server_metadata_urls(&issuer_url) {
        if let Some(found) = http.get_json::<ServerMetadata>(&url).await? {
            metadata = Some(found);
            break;
        }
    }
    let metadata = metadata.ok_or_else(|| OAuthError::Discovery {
        server: http.server.clone(),
        reason: format!(
            "authorization server \"{}\" publishes no metadata",
            super::secrets::shown(&issuer)
        ),
    })?;
    checked(http, &issuer, metadata).map(|server_metadata| Discovered {
        resource: prm.resource.clone(),
        issuer,
        resource_metadata: Some(prm),
        server: server_metadata,
    })
}

/// A 2025-03-26 server: no protected-resource metadata; its origin is the
/// authorization server.
async fn legacy(http: &OAuthHttp, server: &Url) -> Result<Discovered, OAuthError> {
    let origin = server.origin().ascii_serialization();
    let issuer_url = http.endpoint(&origin)?;
    let mut metadata = None;
    for url in server_metadata_urls(&issuer_url) {
        if let Some(found) = http.get_json::<ServerMetadata>(&url).await? {
            metadata = Some(found);
            break;
        }
    }
    let mut resource = server.clone();
    resource.set_fragment(None);
    let (issuer, server_metadata) = match metadata {
        // Nothing named the issuer here: the server's origin was a guess.
        // A document there naming an issuer on the same origin (a path
        // under it) is that origin's own word and is taken as the issuer.
        Some(found) if found.issuer != origin && same_origin(&found.issuer, server) => {
            let issuer = found.issuer.clone();
            (issuer.clone(), checked(http, &issuer, found)?)
        }
        Some(found) => (origin.clone(), checked(http, &origin, found)?),
        // No metadata at all: the defaults of that generation. PKCE is
        // still sent; there is no document to say S256 is understood.
        None => (
            origin.clone(),
            ServerMetadata {
                issuer: origin.clone(),
                authorization_endpoint: format!("{origin}/authorize"),
                token_endpoint: format!("{origin}/token"),
                registration_endpoint: Some(format!("{origin}/register")),
                scopes_supported: None,
                grant_types_supported: None,
                code_challenge_methods_supported: Some(vec!["S256".into()]),
                token_endpoint_auth_methods_supported: None,
                authorization_response_iss_parameter_supported: None,
                client_id_metadata_document_supported: None,
                dpop_signing_alg_values_supported: None,
            },
        ),
    };
    Ok(Discovered {
        resource: resource.to_string(),
        issuer,
        resource_metadata: None,
        server: server_metadata,
    })
}

fn same_origin(raw: &str, server: &Url) -> bool {
    Url::parse(raw).is_ok_and(|u| u.origin() == server.origin())
}

/// The checks on an authorization server's metadata: its issuer is the one
/// asked for (no normalisation), it supports PKCE S256, and its endpoints
/// are usable URLs.
fn checked(
    http: &OAuthHttp,
    issuer: &str,
    metadata: ServerMetadata,
) -> Result<ServerMetadata, OAuthError> {
    if metadata.issuer != issuer {
        return Err(OAuthError::IssuerMetadataMismatch {
            issuer: super::secrets::shown(issuer),
            found: super::secrets::shown(&metadata.issuer),
        });
    }
    let s256 = metadata
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|m| m.iter().any(|m| m == "S256"));
    // PKCE guards the authorization code; a server that lists its grants
    // without that one (machine grants only) has nothing for it to guard.
    let code_flow = metadata
        .grant_types_supported
        .as_ref()
        .is_none_or(|g| g.iter().any(|t| t == "authorization_code"));
    if !s256 && code_flow {
        return Err(OAuthError::PkceUnsupported {
            issuer: issuer.to_owned(),
        });
    }
    if code_flow || !metadata.authorization_endpoint.is_empty() {
        http.endpoint(&metadata.authorization_endpoint)?;
    }
    http.endpoint(&metadata.token_endpoint)?;
    if let Some(registration) = &metadata.registration_endpoint {
        http.endpoint(registration)?;
    }
    Ok(metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_quoted_and_bare_parameters() {
        let c = Challenge::parse(
            r#"Bearer error="insufficient_scope", scope="mcp:basic mcp:write", resource_metadata="https://x.example/.well-known/oauth-protected-resource/mcp""#,
        )
        .unwrap();
        assert!(c.insufficient_scope());
        assert_eq!(c.scopes, ["mcp:basic", "mcp:write"]);
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://x.example/.well-known/oauth-protected-resource/mcp")
        );
        let c = Challenge::parse(r#"Basic realm="x", bearer error=invalid_token, scope="a\"b""#)
            .unwrap();
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(c.scopes, ["a\"b"]);
        assert_eq!(Challenge::parse(r#"Basic realm="x""#), None);
        assert_eq!(Challenge::parse("Bearer"), Some(Challenge::default()));
    }

    #[test]
    fn well_known_locations_follow_the_documented_order() {
        let u = Url::parse("https://mcp.example.com/tenant/mcp").unwrap();
        let found: Vec<String> = resource_metadata_urls(&u)
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            found,
            [
                "https://mcp.example.com/.well-known/oauth-protected-resource/tenant/mcp",
                "https://mcp.example.com/.well-known/oauth-protected-resource"
            ]
        );
        let issuer = Url::parse("https://as.example.com/tenant1").unwrap();
        let found: Vec<String> = server_metadata_urls(&issuer)
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            found,
            [
                "https://as.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://as.example.com/.well-known/openid-configuration/tenant1",
                "https://as.example.com/tenant1/.well-known/openid-configuration"
            ]
        );
        let root = Url::parse("https://as.example.com").unwrap();
        assert_eq!(server_metadata_urls(&root).len(), 2);
    }

    #[test]
    fn a_resource_must_name_this_server() {
        let server = Url::parse("https://mcp.example.com/mcp").unwrap();
        assert!(resource_matches("https://mcp.example.com/mcp", &server));
        assert!(resource_matches("https://mcp.example.com", &server));
        assert!(resource_matches("https://mcp.example.com/", &server));
        assert!(!resource_matches("https://evil.example.com/mcp", &server));
        assert!(!resource_matches("https://mcp.example.com/mc", &server));
        assert!(!resource_matches("https://mcp.example.com/other", &server));
        assert!(!resource_matches("http://mcp.example.com/mcp", &server));
        assert!(!resource_matches("not a url", &server));
    }
}
