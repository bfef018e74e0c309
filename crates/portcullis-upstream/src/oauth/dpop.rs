//! DPoP (RFC 9449): access and refresh tokens bound to a key pair the
//! client holds, so a stolen token is useless without the private key.
//!
//! When it is used: when the authorization server lists `ES256` in its
//! `dpop_signing_alg_values_supported`, or when the server asks for DPoP
//! (its protected-resource metadata's `dpop_bound_access_tokens_required`,
//! or a `WWW-Authenticate` challenge with the `DPoP` scheme and no
//! `Bearer` one), unless the operator forbids it ([`super::OAuthSettings`]'s
//! `dpop`); forcing it makes a login fail rather than fall back to Bearer.
//! A server that asks for DPoP from an authorization server that lists
//! algorithms without `ES256` is refused ([`OAuthError::DpopUnsupported`]).
//!
//! What is sent: each token request (code, refresh, client credentials)
//! carries a proof in its `DPoP` header, and the token response must say
//! `token_type: DPoP` (a Bearer token answering a proof is refused, as is a
//! DPoP token nobody asked for). Every request to the server carries
//! `Authorization: DPoP <token>` and a fresh proof with `ath` (never the
//! token as Bearer). A proof is a JWT typed `dpop+jwt`, signed ES256, with
//! the public key alone in its `jwk` header; claims `jti` (random), `htm`,
//! `htu` (no query, no fragment), `iat`, `ath` (resource requests) and
//! `nonce` when the server gave one.
//!
//! Nonces: every response carrying `DPoP-Nonce` updates the nonce kept for
//! its server (the authorization server by token endpoint origin, the MCP
//! server on its own); a `use_dpop_nonce` refusal (`400` from the token
//! endpoint, `401` with `WWW-Authenticate: DPoP error="use_dpop_nonce"`
//! from the server) is retried once with the nonce it carries.
//!
//! The key: one ES256 pair per server, made at a DPoP login that holds no
//! key yet and kept in its [`super::Grant`] (so whoever keeps grants sealed
//! keeps the key sealed with them, and a restart refreshes with the same
//! key); a refresh, a step-up or a login while a key is held reuses it, a
//! logout forgets it. Its `Debug` shows only the public
//! key's thumbprint; no log line or error carries the private half.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{
    AlgorithmParameters, CommonParameters, EllipticCurve, EllipticCurveKeyParameters,
    EllipticCurveKeyType, Jwk, ThumbprintHash,
};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use url::Url;

use super::discovery::{Challenge, Discovered};
use super::{OAuthError, OAuthHttp};
use crate::credentials::Presentation;

/// The `typ` of a DPoP proof.
pub const PROOF_TYPE: &str = "dpop+jwt";
/// The one signing algorithm this client uses.
pub const ALGORITHM: &str = "ES256";
/// The header a proof travels in.
pub const PROOF_HEADER: &str = "dpop";
/// The header a server hands a nonce in.
pub const NONCE_HEADER: &str = "dpop-nonce";
/// The error code of a refusal that asks for a nonce.
pub const USE_NONCE: &str = "use_dpop_nonce";

/// A server's DPoP key pair (ES256). Cheap to clone. Serialised as its
/// PKCS#8 document (base64url) so a grant keeper can seal it with the
/// grant; its `Debug` shows the public key's thumbprint only.
#[derive(Clone)]
pub struct DpopKey(Arc<KeyInner>);

struct KeyInner {
    pkcs8: Vec<u8>,
    signing: EncodingKey,
    jwk: Jwk,
    thumbprint: String,
}

impl std::fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopKey")
            .field("thumbprint", &self.0.thumbprint)
            .finish_non_exhaustive()
    }
}

fn key_error(reason: impl Into<String>) -> OAuthError {
    OAuthError::Dpop {
        reason: reason.into(),
    }
}

#[derive(Serialize)]
struct ProofClaims<'a> {
    jti: String,
    htm: &'a str,
    htu: &'a str,
    iat: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ath: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nonce: Option<&'a str>,
}

impl DpopKey {
    /// A fresh P-256 key pair.
    pub fn generate() -> Result<DpopKey, OAuthError> {
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING)
            .map_err(|_| key_error("cannot generate a DPoP key"))?;
        let document = pair
            .to_pkcs8v1()
            .map_err(|_| key_error("cannot encode the DPoP key"))?;
        DpopKey::from_pkcs8(document.as_ref())
    }

    /// The key pair of a PKCS#8 document (P-256 only).
    pub fn from_pkcs8(der: &[u8]) -> Result<DpopKey, OAuthError> {
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der)
            .map_err(|_| key_error("the kept DPoP key is not a P-256 private key"))?;
        // The public key is the uncompressed point 04 || x || y.
        let point = pair.public_key().as_ref();
        if point.len() != 65 || point[0] != 4 {
            return Err(key_error(
                "the DPoP public key is not an uncompressed point",
            ));
        }
        let jwk = Jwk {
            common: CommonParameters::default(),
            algorithm: AlgorithmParameters::EllipticCurve(EllipticCurveKeyParameters {
                key_type: EllipticCurveKeyType::EC,
                curve: EllipticCurve::P256,
                x: URL_SAFE_NO_PAD.encode(&point[1..33]),
                y: URL_SAFE_NO_PAD.encode(&point[33..]),
            }),
        };
        let thumbprint = jwk
            .thumbprint(ThumbprintHash::SHA256)
            .map_err(|_| key_error("cannot compute the DPoP key's thumbprint"))?;
        Ok(DpopKey(Arc::new(KeyInner {
            pkcs8: der.to_vec(),
            signing: EncodingKey::from_ec_der(der),
            jwk,
            thumbprint,
        })))
    }

    /// The public key's JWK SHA-256 thumbprint (RFC 7638), as a server
    /// binds tokens to it (`cnf.jkt`). Not a secret.
    pub fn thumbprint(&self) -> &str {
        &self.0.thumbprint
    }

    /// The public key, as proofs carry it.
    pub fn public_jwk(&self) -> &Jwk {
        &self.0.jwk
    }

    /// A fresh proof for `method` on `url` (its userinfo, query and
    /// fragment left out), with `ath` for `access_token` and the server's
    /// `nonce`.
    pub fn proof(
        &self,
        method: &str,
        url: &Url,
        access_token: Option<&str>,
        nonce: Option<&str>,
    ) -> Result<String, OAuthError> {
        let mut htu = url.clone();
        htu.set_query(None);
        htu.set_fragment(None);
        // Userinfo is no part of the target (and is a password): never
        // put in a proof the server may log. Both only fail for URLs
        // without a host, which a request cannot have.
        let _ = htu.set_username("");
        let _ = htu.set_password(None);
        let mut jti = [0u8; 16];
        aws_lc_rs::rand::fill(&mut jti).map_err(|_| key_error("no randomness for a jti"))?;
        let claims = ProofClaims {
            jti: URL_SAFE_NO_PAD.encode(jti),
            htm: method,
            htu: htu.as_str(),
            iat: super::tokens::now(),
            ath: access_token.map(access_token_hash),
            nonce,
        };
        let mut header = Header::new(Algorithm::ES256);
        header.typ = Some(PROOF_TYPE.to_owned());
        header.jwk = Some(self.0.jwk.clone());
        jsonwebtoken::encode(&header, &claims, &self.0.signing)
            .map_err(|e| key_error(format!("cannot sign a DPoP proof: {e}")))
    }
}

/// `ath`: the base64url SHA-256 of an access token.
pub fn access_token_hash(token: &str) -> String {
    URL_SAFE_NO_PAD.encode(aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA256,
        token.as_bytes(),
    ))
}

impl Serialize for DpopKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&URL_SAFE_NO_PAD.encode(&self.0.pkcs8))
    }
}

impl<'de> Deserialize<'de> for DpopKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let der = URL_SAFE_NO_PAD
            .decode(text.as_bytes())
            .map_err(|_| serde::de::Error::custom("the DPoP key is not base64url"))?;
        DpopKey::from_pkcs8(&der).map_err(serde::de::Error::custom)
    }
}

/// Whether a login uses DPoP. `forced`: the operator's `dpop` setting
/// (`Some(true)` always, `Some(false)` never, `None` as the servers say).
pub(crate) fn wanted(
    server: &str,
    forced: Option<bool>,
    discovered: &Discovered,
    challenge: Option<&Challenge>,
) -> Result<bool, OAuthError> {
    let listed = discovered.server.dpop_signing_alg_values_supported.as_ref();
    let es256 = listed.is_some_and(|algs| algs.iter().any(|a| a == ALGORITHM));
    let required = challenge.is_some_and(|c| c.dpop)
        || discovered
            .resource_metadata
            .as_ref()
            .and_then(|m| m.dpop_bound_access_tokens_required)
            == Some(true);
    let unsupported = || OAuthError::DpopUnsupported {
        issuer: discovered.issuer.clone(),
        algorithms: listed.map(|a| a.join(", ")).unwrap_or_default(),
    };
    match forced {
        Some(false) if required => Err(OAuthError::DpopRequired {
            server: server.to_owned(),
        }),
        Some(false) => Ok(false),
        // Listing algorithms without ES256 says it cannot verify ours; a
        // server that lists none may still accept DPoP, so it is tried.
        Some(true) | None if listed.is_some() && !es256 && (required || forced.is_some()) => {
            Err(unsupported())
        }
        Some(true) => Ok(true),
        None => Ok(es256 || required),
    }
}

/// A token response's `token_type` against what was asked for: a proof
/// asks for `DPoP`, none for `Bearer` (RFC 9449 §5: a client that asked
/// for a bound token does not use an unbound one, and a DPoP token is
/// useless without the key it was bound to).
pub(crate) fn check_token_type(token_type: &str, bound: bool) -> Result<(), OAuthError> {
    let dpop = token_type.eq_ignore_ascii_case("dpop");
    if bound != dpop {
        return Err(OAuthError::TokenType {
            expected: if bound { "DPoP" } else { "Bearer" }.to_owned(),
            found: super::secrets::shown(&token_type.chars().take(32).collect::<String>()),
        });
    }
    Ok(())
}

#[derive(Default)]
struct Held {
    key: Option<DpopKey>,
    /// The MCP server's latest nonce.
    resource: Option<String>,
    /// Authorization servers' latest nonces, by token endpoint origin.
    issuers: HashMap<String, String>,
}

/// One server's DPoP state: the key its current grant is bound to, and the
/// latest nonces. Shared by the OAuth client and the transport (which asks
/// it how to present each request).
#[derive(Default)]
pub(crate) struct Binding(Mutex<Held>);

impl Binding {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The key the grant now held is bound to (`None`: a Bearer grant).
    pub(crate) fn bind(&self, key: Option<DpopKey>) {
        self.held().key = key;
    }

    /// Forgets the key and the nonces (a logout).
    pub(crate) fn clear(&self) {
        *self.held() = Held::default();
    }

    /// The bound key, if any.
    pub(crate) fn key(&self) -> Option<DpopKey> {
        self.held().key.clone()
    }

    /// How one request to the server presents `token`: as DPoP with a
    /// fresh proof when the grant is bound, else as Bearer.
    pub(crate) fn present(
        &self,
        token: &str,
        method: &str,
        url: &Url,
    ) -> Result<Presentation, OAuthError> {
        let (key, nonce) = {
            let held = self.held();
            (held.key.clone(), held.resource.clone())
        };
        let Some(key) = key else {
            return Ok(Presentation::bearer(token));
        };
        Ok(Presentation {
            authorization: format!("DPoP {token}"),
            dpop: Some(key.proof(method, url, Some(token), nonce.as_deref())?),
        })
    }

    /// Told of a response from the server: keeps its nonce; `true` when it
    /// is a `use_dpop_nonce` refusal to retry with that nonce.
    pub(crate) fn answered(&self, status: u16, headers: &http::HeaderMap) -> bool {
        let nonce = headers
            .get(NONCE_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|n| usable_nonce(n));
        let mut held = self.held();
        if let Some(nonce) = nonce {
            held.resource = Some(nonce.to_owned());
        }
        status == 401
            && nonce.is_some()
            && held.key.is_some()
            && headers
                .get_all(http::header::WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .filter_map(Challenge::parse)
                .any(|c| c.error.as_deref() == Some(USE_NONCE))
    }

    fn issuer_nonce(&self, origin: &str) -> Option<String> {
        self.held().issuers.get(origin).cloned()
    }

    fn keep_issuer_nonce(&self, origin: &str, nonce: &str) {
        self.held()
            .issuers
            .insert(origin.to_owned(), nonce.to_owned());
    }
}

/// A nonce is opaque but must fit a JSON string and a header: printable
/// ASCII, bounded.
fn usable_nonce(nonce: &str) -> bool {
    !nonce.is_empty() && nonce.len() <= 512 && nonce.bytes().all(|b| (0x21..0x7f).contains(&b))
}

/// What signs an authorization server request: a key and where nonces
/// are kept.
#[derive(Clone)]
pub(crate) struct Prover {
    pub(crate) key: DpopKey,
    pub(crate) binding: Arc<Binding>,
}

/// Sends a token request with a proof; a `400 use_dpop_nonce` is retried
/// once with the nonce it carries; every `DPoP-Nonce` is kept.
pub(crate) async fn send(
    http: &OAuthHttp,
    prover: &Prover,
    request: http::Request<Vec<u8>>,
) -> Result<http::Response<Vec<u8>>, OAuthError> {
    let url = http.endpoint(&request.uri().to_string())?;
    let origin = url.origin().ascii_serialization();
    let (parts, body) = request.into_parts();
    let mut retried = false;
    loop {
        let nonce = prover.binding.issuer_nonce(&origin);
        let proof = prover
            .key
            .proof(parts.method.as_str(), &url, None, nonce.as_deref())?;
        let mut request = http::Request::new(body.clone());
        *request.method_mut() = parts.method.clone();
        *request.uri_mut() = parts.uri.clone();
        *request.headers_mut() = parts.headers.clone();
        request.headers_mut().insert(
            PROOF_HEADER,
            http::HeaderValue::from_str(&proof).map_err(|_| key_error("unusable proof"))?,
        );
        let response = http.send_plain(request).await?;
        let fresh = response
            .headers()
            .get(NONCE_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|n| usable_nonce(n))
            .map(str::to_owned);
        if let Some(fresh) = &fresh {
            prover.binding.keep_issuer_nonce(&origin, fresh);
        }
        let asks_nonce = response.status() == http::StatusCode::BAD_REQUEST
            && serde_json::from_slice::<serde_json::Value>(response.body())
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .as_deref()
                == Some(USE_NONCE);
        if asks_nonce && !retried && fresh.is_some() && fresh != nonce {
            retried = true;
            continue;
        }
        return Ok(response);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_carries_the_public_key_only_and_verifies_with_it() {
        let key = DpopKey::generate().unwrap();
        let url = Url::parse("https://mcp.example.com/mcp?x=1#f").unwrap();
        let proof = key.proof("POST", &url, Some("tok"), Some("n-1")).unwrap();
        let header = jsonwebtoken::decode_header(&proof).unwrap();
        assert_eq!(header.typ.as_deref(), Some(PROOF_TYPE));
        assert_eq!(header.alg, Algorithm::ES256);
        let jwk = header.jwk.expect("the jwk header");
        let shown = serde_json::to_value(&jwk).unwrap();
        assert!(shown.get("d").is_none(), "{shown}");
        let decoding = jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap();
        let mut validation = jsonwebtoken::Validation::new(Algorithm::ES256);
        validation.set_required_spec_claims::<&str>(&[]);
        validation.validate_exp = false;
        let claims = jsonwebtoken::decode::<serde_json::Value>(&proof, &decoding, &validation)
            .unwrap()
            .claims;
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], "https://mcp.example.com/mcp");
        assert_eq!(claims["ath"], access_token_hash("tok"));
        assert_eq!(claims["nonce"], "n-1");
        assert_eq!(
            jwk.thumbprint(ThumbprintHash::SHA256).unwrap(),
            key.thumbprint()
        );
        // Every proof is fresh.
        let again = key.proof("POST", &url, Some("tok"), None).unwrap();
        let jti = |p: &str| {
            jsonwebtoken::decode::<serde_json::Value>(p, &decoding, &validation)
                .unwrap()
                .claims["jti"]
                .clone()
        };
        assert_ne!(jti(&proof), jti(&again));
    }

    #[test]
    fn htu_is_the_target_without_userinfo_query_fragment_or_default_port() {
        let key = DpopKey::generate().unwrap();
        let htu = |raw: &str| {
            let proof = key
                .proof("GET", &Url::parse(raw).unwrap(), None, None)
                .unwrap();
            let claims = proof.split('.').nth(1).unwrap();
            let claims: serde_json::Value =
                serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
            claims["htu"].as_str().unwrap().to_owned()
        };
        assert_eq!(
            htu("https://ada:pa55w0rd@mcp.example.com:443/mcp?x=1#f"),
            "https://mcp.example.com/mcp"
        );
        assert_eq!(htu("http://[::1]:8080/a%20b"), "http://[::1]:8080/a%20b");
        assert_eq!(
            htu("HTTPS://MCP.Example.COM/Path"),
            "https://mcp.example.com/Path"
        );
    }

    #[test]
    fn a_kept_key_is_the_same_key_and_never_shows() {
        let key = DpopKey::generate().unwrap();
        let kept = serde_json::to_string(&key).unwrap();
        let back: DpopKey = serde_json::from_str(&kept).unwrap();
        assert_eq!(back.thumbprint(), key.thumbprint());
        let shown = format!("{key:?}");
        assert!(!shown.contains(kept.trim_matches('"')), "{shown}");
        assert!(serde_json::from_str::<DpopKey>("\"AAAA\"").is_err());
    }

    fn discovered(algs: Option<&[&str]>, required: Option<bool>) -> Discovered {
        Discovered {
            resource: "https://mcp.example.com/mcp".into(),
            issuer: "https://as.example.com".into(),
            resource_metadata: Some(
                serde_json::from_value(serde_json::json!({
                    "resource": "https://mcp.example.com/mcp",
                    "dpop_bound_access_tokens_required": required,
                }))
                .unwrap(),
            ),
            server: serde_json::from_value(serde_json::json!({
                "issuer": "https://as.example.com",
                "authorization_endpoint": "https://as.example.com/authorize",
                "token_endpoint": "https://as.example.com/token",
                "dpop_signing_alg_values_supported": algs,
            }))
            .unwrap(),
        }
    }

    #[test]
    fn dpop_is_used_as_the_servers_and_the_operator_say() {
        let es256 = discovered(Some(&["ES256", "RS256"]), None);
        let rsa_only = discovered(Some(&["RS256"]), None);
        let silent = discovered(None, None);
        let required = discovered(None, Some(true));
        let required_rsa = discovered(Some(&["RS256"]), Some(true));
        let dpop_challenge = Challenge::parse(r#"DPoP resource_metadata="x""#).unwrap();
        let both = Challenge::parse(r#"Bearer, DPoP algs="ES256""#).unwrap();
        assert!(dpop_challenge.dpop && !both.dpop);
        let w = |forced, d: &Discovered, c: Option<&Challenge>| wanted("docs", forced, d, c);
        assert!(w(None, &es256, None).unwrap());
        assert!(!w(None, &rsa_only, None).unwrap());
        assert!(!w(None, &silent, None).unwrap());
        assert!(!w(None, &silent, Some(&both)).unwrap());
        assert!(w(None, &silent, Some(&dpop_challenge)).unwrap());
        assert!(w(None, &required, None).unwrap());
        assert!(w(Some(true), &silent, None).unwrap());
        assert!(!w(Some(false), &es256, None).unwrap());
        assert!(matches!(
            w(None, &required_rsa, None),
            Err(OAuthError::DpopUnsupported { .. })
        ));
        assert!(matches!(
            w(None, &rsa_only, Some(&dpop_challenge)),
            Err(OAuthError::DpopUnsupported { .. })
        ));
        assert!(matches!(
            w(Some(true), &rsa_only, None),
            Err(OAuthError::DpopUnsupported { .. })
        ));
        assert!(matches!(
            w(Some(false), &required, None),
            Err(OAuthError::DpopRequired { .. })
        ));
    }

    #[test]
    fn the_token_type_must_be_the_one_asked_for() {
        assert!(check_token_type("DPoP", true).is_ok());
        assert!(check_token_type("dpop", true).is_ok());
        assert!(check_token_type("Bearer", false).is_ok());
        assert!(matches!(
            check_token_type("Bearer", true),
            Err(OAuthError::TokenType { .. })
        ));
        assert!(matches!(
            check_token_type("DPoP", false),
            Err(OAuthError::TokenType { .. })
        ));
    }
}
