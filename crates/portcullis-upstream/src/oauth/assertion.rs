//! `private_key_jwt` client authentication (RFC 7523 §2.2): instead of a
//! shared secret, the client signs a short-lived JWT with its own private
//! key and sends it with every token request. The authorization server
//! holds only the public half, so nothing it stores can impersonate the
//! client.
//!
//! The assertion: `iss` and `sub` are the client id, `aud` the
//! authorization server's issuer identifier, `iat` now, `exp` a minute
//! later, and a random `jti` so it cannot be replayed.

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;

use super::OAuthError;
use super::tokens::now;

/// The `client_assertion_type` of a JWT client assertion.
pub const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How long an assertion is valid: long enough for one token request.
const LIFETIME: Duration = Duration::from_secs(60);

/// A client's private key for `private_key_jwt`. Its `Debug` shows the
/// algorithm only.
#[derive(Clone)]
pub struct ClientKey {
    algorithm: Algorithm,
    key: EncodingKey,
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientKey")
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
    jti: String,
}

impl ClientKey {
    /// A key from its PEM text and the JWS algorithm to sign with: `ES256`
    /// or `ES384` (a PKCS#8 `PRIVATE KEY`), `EdDSA` (PKCS#8 Ed25519), or
    /// `RS256`/`RS384`/`RS512`/`PS256`/`PS384`/`PS512` (an `RSA PRIVATE
    /// KEY` or PKCS#8). Symmetric algorithms are refused: a shared secret
    /// is `client_secret`'s job.
    pub fn from_pem(pem: &str, algorithm: &str) -> Result<ClientKey, OAuthError> {
        let refused = |reason: String| OAuthError::ClientKey { reason };
        let algorithm: Algorithm = algorithm
            .parse()
            .map_err(|_| refused(format!("unknown signing algorithm {algorithm:?}")))?;
        let key = match algorithm {
            Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(pem.as_bytes()),
            Algorithm::EdDSA => EncodingKey::from_ed_pem(pem.as_bytes()),
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512 => EncodingKey::from_rsa_pem(pem.as_bytes()),
            other => return Err(refused(format!("{other:?} is not an asymmetric algorithm"))),
        }
        // The library's message says what is wrong with the PEM, never
        // its content.
        .map_err(|e| refused(format!("not a usable {algorithm:?} private key: {e}")))?;
        let client = ClientKey { algorithm, key };
        // Sign once now, so a key that cannot sign is refused at start
        // rather than at the first token request.
        client.assertion("check", "check")?;
        Ok(client)
    }

    /// The JWS algorithm's name (`ES256`, …), as the authorization server
    /// metadata lists it.
    pub fn algorithm(&self) -> String {
        format!("{:?}", self.algorithm)
    }

    /// A fresh assertion for `client_id` towards the authorization server
    /// `issuer`.
    pub(crate) fn assertion(&self, client_id: &str, issuer: &str) -> Result<String, OAuthError> {
        let mut jti = [0u8; 16];
        aws_lc_rs::rand::fill(&mut jti).map_err(|_| OAuthError::ClientKey {
            reason: "no randomness for the assertion's jti".into(),
        })?;
        let issued = now();
        let claims = Claims {
            iss: client_id,
            sub: client_id,
            aud: issuer,
            iat: issued,
            exp: issued + LIFETIME.as_secs(),
            jti: jti.iter().map(|b| format!("{b:02x}")).collect(),
        };
        jsonwebtoken::encode(&Header::new(self.algorithm), &claims, &self.key).map_err(|e| {
            OAuthError::ClientKey {
                reason: format!("cannot sign the client assertion: {e}"),
            }
        })
    }
}
