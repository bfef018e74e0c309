//! Signing requests towards applications, and verifying them on the other
//! side.
//!
//! The gateway keeps one Ed25519 key pair under its data directory
//! ([`GatewayKey::load_or_create`]: created once with mode 0600, reused
//! across restarts) and writes the public half to the application's
//! `key_file` (base64 of its 32 bytes, one line), so the application can
//! allow-list the gateway.
//!
//! # The signature
//!
//! Every forwarded request is signed as an HTTP Message Signature (RFC 9421,
//! algorithm `ed25519`), its body bound by a `Content-Digest` (RFC 9530).
//! It carries:
//!
//! | header | value |
//! |---|---|
//! | `x-portcullis-identity` | the caller's identity as JSON (`{"user":…,"perms":[…]}`); absent when none is configured |
//! | `content-digest` | `sha-256=:<base64 of SHA-256(body)>:`, for an empty body too |
//! | `signature-input` | `portcullis=("@method" "@authority" "@path" "@query" "content-digest" "x-portcullis-identity");created=…;nonce="…";keyid="…";alg="ed25519";tag="portcullis"` (the identity is listed only when it is sent) |
//! | `signature` | `portcullis=:<base64 of the 64-byte Ed25519 signature>:` |
//!
//! What is signed is RFC 9421's signature base: one line per covered
//! component, in the listed order, then the parameters, joined by `\n`
//! without a trailing one:
//!
//! ```text
//! "@method": POST
//! "@authority": 127.0.0.1:9000
//! "@path": /devices/d7/reboot
//! "@query": ?verbose=true
//! "content-digest": sha-256=:…:
//! "x-portcullis-identity": {"user":{"userId":"agent"},"perms":["read"]}
//! "@signature-params": ("@method" "@authority" "@path" "@query" "content-digest" "x-portcullis-identity");created=1700000000;nonce="…";keyid="…";alg="ed25519";tag="portcullis"
//! ```
//!
//! - `@method` is the method as sent; `@path` the path as sent (still
//!   percent-encoded); `@query` is `?` and the query as sent, or `?` alone
//!   when there is none.
//! - `@authority` is the host of the application's `base_url`, lowercase,
//!   with its port unless it is the scheme's default: what the request's
//!   `Host` says. A request signed for one application therefore does not
//!   verify at another that trusts the same key.
//! - `created` is when the gateway signed (Unix seconds); `nonce` is 16
//!   random bytes in unpadded base64url, new for every request; `keyid` is
//!   [`PublicKey::key_id`] (unpadded base64url of the SHA-256 of the public
//!   key's 32 bytes); `tag="portcullis"` marks the gateway's signature among
//!   any others an intermediary might add.
//!
//! # Verifying
//!
//! [`Verifier`] is the application's side, in Rust. It checks, in order:
//!
//! 1. exactly one `signature-input` member is tagged `portcullis`; its
//!    `keyid` is the gateway's key and its `alg` is `ed25519`;
//! 2. it covers the five components above, and the identity header whenever
//!    the request has one (an identity nobody signed is never read);
//! 3. `created` is within `max_skew` (default 5 minutes) of the
//!    application's clock, in either direction (`expires`, if ever present,
//!    is not past);
//! 4. the request's authority (the request target's, else `Host`) is one
//!    the application answers to;
//! 5. the body matches `content-digest`, and the signature verifies
//!    (strict Ed25519);
//! 6. the nonce was never seen: it is recorded until `created + max_skew`,
//!    after which step 3 refuses the request anyway, so the record covers
//!    exactly the time a replay could otherwise pass.
//!
//! Only then is the identity trusted. The nonces live in a [`NonceStore`];
//! the default [`MemoryNonceStore`] is bounded ([`DEFAULT_NONCE_CAPACITY`])
//! and, when full, refuses new requests rather than forget a nonce still
//! inside its window. Several replicas of one application must share one
//! store, or a request replayed to the replica that did not see it passes:
//! implement [`NonceStore`] over the database they share (an insert that
//! fails on a duplicate key, expiring at `until`).
//!
//! In another language, any RFC 9421 implementation with Ed25519 and the
//! key file's public key checks the signature; the checks of steps 1–4 and
//! 6 beyond the signature itself are the application's to make, as most
//! libraries leave them to their caller.
//!
//! Earlier versions signed a private line format carried in
//! `x-portcullis-timestamp`, `x-portcullis-content-digest` and
//! `x-portcullis-signature` and checked by a `verify_request` function. It
//! covered neither the host nor a nonce, so a captured request could be
//! replayed for five minutes, to any application trusting the key. Those
//! headers are no longer sent: an application still checking them refuses
//! every request until it moves to [`Verifier`] or an RFC 9421 verifier.

mod nonce;
mod verify;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use sfv::{BareItem, FieldType, InnerList, Item, Key, ListEntry, Parameters};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::files::write_regular;
use crate::key_file;
pub use crate::key_file::KeyError;

pub use nonce::{DEFAULT_NONCE_CAPACITY, MemoryNonceStore, NonceStore, NonceStoreError};
pub use verify::{Verified, Verifier, VerifyError};

/// Header carrying the caller's identity (JSON); covered by the signature
/// whenever it is sent.
pub const IDENTITY_HEADER: &str = "x-portcullis-identity";
/// RFC 9421's header naming the covered components and the parameters.
pub const SIGNATURE_INPUT_HEADER: &str = "signature-input";
/// RFC 9421's header carrying the signature.
pub const SIGNATURE_HEADER: &str = "signature";
/// RFC 9530's header carrying the body digest.
pub const CONTENT_DIGEST_HEADER: &str = "content-digest";
/// The label of the gateway's signature in `signature-input` and
/// `signature`, and its `tag` parameter.
pub const SIGNATURE_TAG: &str = "portcullis";
/// The `alg` parameter: Ed25519, as RFC 9421 registers it.
pub const ALGORITHM: &str = "ed25519";
/// The private key's file name under the data directory.
pub const KEY_FILE_NAME: &str = "gateway-signing.key";
/// A reasonable clock tolerance for [`Verifier`]; also how long a nonce is
/// remembered past its `created` time.
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(300);

/// The components every gateway signature covers, in this order; the
/// identity header follows when it is sent.
const COVERED: [&str; 5] = [
    "@method",
    "@authority",
    "@path",
    "@query",
    CONTENT_DIGEST_HEADER,
];

/// Random bytes in one nonce: 128 bits never repeat by chance.
const NONCE_BYTES: usize = 16;

/// The gateway's signing key.
#[derive(Clone)]
pub struct GatewayKey {
    signing: SigningKey,
}

impl std::fmt::Debug for GatewayKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret half.
        f.debug_struct("GatewayKey")
            .field("public", &self.public_key().to_base64())
            .finish()
    }
}

impl GatewayKey {
    /// A key from its 32-byte seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        GatewayKey {
            signing: SigningKey::from_bytes(&seed),
        }
    }

    /// A fresh random key.
    pub fn generate() -> Result<Self, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(Self::from_seed(seed))
    }

    /// Loads `<data_dir>/gateway-signing.key`, creating the directory (0700)
    /// and the key (0600) on first use. A key file others can read is refused.
    pub fn load_or_create(data_dir: impl AsRef<Path>) -> Result<Self, KeyError> {
        let seed = key_file::load_or_create(data_dir.as_ref(), KEY_FILE_NAME)?;
        Ok(Self::from_seed(seed))
    }

    /// The public half.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.signing.verifying_key())
    }

    /// Writes the public key (base64, one line) to `path`, creating parent
    /// directories; what the application reads to allow-list the gateway.
    pub fn write_public_key(&self, path: impl AsRef<Path>) -> Result<(), KeyError> {
        let path = path.as_ref();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| KeyError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        // A FIFO or device at that path is refused, never blocked on.
        write_regular(
            path,
            format!("{}\n", self.public_key().to_base64()).as_bytes(),
        )
        .map_err(|e| KeyError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })
    }

    /// Signs one request with a fresh nonce, `created` being the signing
    /// time in Unix seconds. The headers it answers go on the request as
    /// they are, beside the identity header when `request.identity` is set.
    pub fn sign(
        &self,
        request: &RequestToSign<'_>,
        created: u64,
    ) -> Result<SignedHeaders, SignError> {
        let mut bytes = [0u8; NONCE_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| SignError::Random(e.to_string()))?;
        self.sign_with_nonce(request, created, &URL_SAFE_NO_PAD.encode(bytes))
    }

    /// [`GatewayKey::sign`] with a chosen nonce; private so that no caller
    /// can reuse one.
    fn sign_with_nonce(
        &self,
        request: &RequestToSign<'_>,
        created: u64,
        nonce: &str,
    ) -> Result<SignedHeaders, SignError> {
        let digest = content_digest(request.body);
        let mut components: Vec<(&str, Vec<u8>)> = vec![
            ("@method", request.method.as_bytes().to_vec()),
            (
                "@authority",
                request.authority.to_ascii_lowercase().into_bytes(),
            ),
            ("@path", path_component(request.path).into_bytes()),
            ("@query", query_component(request.query).into_bytes()),
            (CONTENT_DIGEST_HEADER, digest.clone().into_bytes()),
        ];
        if let Some(identity) = request.identity {
            components.push((IDENTITY_HEADER, field_value([identity.as_bytes()])));
        }
        let names: Vec<&str> = components.iter().map(|(name, _)| *name).collect();
        let params = signature_params(&names, created, nonce, &self.public_key().key_id())
            .map_err(SignError::Unsignable)?;
        let serialized = serialize_params(&params)
            .ok_or_else(|| SignError::Unsignable("empty signature parameters".into()))?;
        let base = signature_base(&components, &serialized);
        let signature = self.signing.sign(&base).to_bytes();
        Ok(SignedHeaders {
            content_digest: digest,
            signature_input: format!("{SIGNATURE_TAG}={serialized}"),
            signature: format!("{SIGNATURE_TAG}=:{}:", STANDARD.encode(signature)),
            created,
            nonce: nonce.to_owned(),
        })
    }
}

/// What of one request the gateway signs.
#[derive(Debug, Clone, Copy)]
pub struct RequestToSign<'a> {
    /// The method as sent, e.g. `POST`.
    pub method: &'a str,
    /// `host[:port]` the request goes to (the port only when it is not the
    /// scheme's default): what its `Host` header says.
    pub authority: &'a str,
    /// The path as sent, percent-encoded.
    pub path: &'a str,
    /// The query as sent, without its `?`; `None` when there is none.
    pub query: Option<&'a str>,
    /// The identity header's value, when one is sent.
    pub identity: Option<&'a str>,
    /// The body as sent (empty when none).
    pub body: &'a [u8],
}

/// The headers one signed request carries (besides the identity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    /// The `content-digest` value.
    pub content_digest: String,
    /// The `signature-input` value.
    pub signature_input: String,
    /// The `signature` value.
    pub signature: String,
    /// The `created` parameter (Unix seconds).
    pub created: u64,
    /// The `nonce` parameter.
    pub nonce: String,
}

impl SignedHeaders {
    /// The three headers as (name, value) pairs, ready to be set.
    pub fn headers(&self) -> [(&'static str, &str); 3] {
        [
            (CONTENT_DIGEST_HEADER, self.content_digest.as_str()),
            (SIGNATURE_INPUT_HEADER, self.signature_input.as_str()),
            (SIGNATURE_HEADER, self.signature.as_str()),
        ]
    }
}

/// Why a request could not be signed.
#[derive(Debug, Error)]
pub enum SignError {
    /// The OS random source failed (no nonce).
    #[error("no randomness for a nonce: {0}")]
    Random(String),
    /// A parameter cannot be written as a structured field.
    #[error("the request cannot be signed: {0}")]
    Unsignable(String),
}

/// The gateway's public key, as an application holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// Parses the key file's content (base64 of 32 bytes, whitespace ignored).
    pub fn from_base64(text: &str) -> Result<Self, String> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|e| format!("not base64: {e}"))?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|_| "not a 32-byte Ed25519 public key".to_owned())?;
        VerifyingKey::from_bytes(&bytes)
            .map(PublicKey)
            .map_err(|e| format!("not an Ed25519 public key: {e}"))
    }

    /// Reads a key file written by [`GatewayKey::write_public_key`].
    pub fn read_file(path: impl AsRef<Path>) -> Result<Self, KeyError> {
        let path = path.as_ref();
        let text = key_file::read(path).map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_base64(&text).map_err(|reason| KeyError::Malformed {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// The key as base64 (the key file's content).
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0.to_bytes())
    }
}

impl PublicKey {
    /// The `keyid` the gateway signs with: unpadded base64url of the
    /// SHA-256 of the key's 32 bytes. It names the key without carrying it,
    /// so no verifier is tempted to trust a key a request brings along.
    pub fn key_id(&self) -> String {
        URL_SAFE_NO_PAD.encode(Sha256::digest(self.0.to_bytes()))
    }
}

/// RFC 9530's `sha-256=:<base64>:` of `body`.
pub fn content_digest(body: &[u8]) -> String {
    format!("sha-256=:{}:", STANDARD.encode(Sha256::digest(body)))
}

/// `@path`: the path as sent, `/` when empty.
fn path_component(path: &str) -> String {
    if path.is_empty() {
        "/".to_owned()
    } else {
        path.to_owned()
    }
}

/// `@query`: `?` and the query, `?` alone when there is none.
fn query_component(query: Option<&str>) -> String {
    format!("?{}", query.unwrap_or(""))
}

/// A header component's value: each field line's value without leading or
/// trailing whitespace, several joined by `, ` (RFC 9421, section 2.1).
fn field_value<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut value = Vec::new();
    for (i, line) in lines.into_iter().enumerate() {
        if i > 0 {
            value.extend_from_slice(b", ");
        }
        value.extend_from_slice(line.trim_ascii());
    }
    value
}

/// The inner list and parameters of the gateway's signature.
fn signature_params(
    components: &[&str],
    created: u64,
    nonce: &str,
    key_id: &str,
) -> Result<InnerList, String> {
    let string = |text: &str| {
        sfv::String::from_string(text.to_owned())
            .map(BareItem::String)
            .map_err(|(e, text)| format!("{text:?}: {e}"))
    };
    let key =
        |name: &str| Key::from_string(name.to_owned()).map_err(|(e, name)| format!("{name}: {e}"));
    let items = components
        .iter()
        .map(|name| string(name).map(Item::new))
        .collect::<Result<Vec<_>, _>>()?;
    let mut params = Parameters::new();
    let created = sfv::Integer::try_from(created).map_err(|e| format!("created: {e}"))?;
    params.insert(key("created")?, BareItem::Integer(created));
    params.insert(key("nonce")?, string(nonce)?);
    params.insert(key("keyid")?, string(key_id)?);
    params.insert(key("alg")?, string(ALGORITHM)?);
    params.insert(key("tag")?, string(SIGNATURE_TAG)?);
    Ok(InnerList::with_params(items, params))
}

/// The `@signature-params` value: the inner list serialized as a structured
/// field (RFC 8941), exactly as it appears after the label in
/// `signature-input`.
fn serialize_params(params: &InnerList) -> Option<String> {
    vec![ListEntry::InnerList(params.clone())].serialize()
}

/// RFC 9421's signature base: `"<name>": <value>` per component, then
/// `"@signature-params": <params>`, joined by `\n`.
fn signature_base(components: &[(&str, Vec<u8>)], params: &str) -> Vec<u8> {
    let mut base = Vec::new();
    for (name, value) in components {
        base.push(b'"');
        base.extend_from_slice(name.as_bytes());
        base.extend_from_slice(b"\": ");
        base.extend_from_slice(value);
        base.push(b'\n');
    }
    base.extend_from_slice(b"\"@signature-params\": ");
    base.extend_from_slice(params.as_bytes());
    base
}

/// Seconds since the Unix epoch at `time` (0 before it): `created` as the
/// gateway writes it.
pub fn unix_time(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Seconds since the Unix epoch, now.
pub(crate) fn unix_now() -> u64 {
    unix_time(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_created_once_private_and_reused() {
        let dir = tempfile::TempDir::new().unwrap();
        let data = dir.path().join("data");
        let first = GatewayKey::load_or_create(&data).unwrap();
        let again = GatewayKey::load_or_create(&data).unwrap();
        assert_eq!(first.public_key(), again.public_key());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(data.join(KEY_FILE_NAME))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
            std::fs::set_permissions(
                data.join(KEY_FILE_NAME),
                std::fs::Permissions::from_mode(0o644),
            )
            .unwrap();
            assert!(matches!(
                GatewayKey::load_or_create(&data),
                Err(KeyError::TooOpen { .. })
            ));
        }
        assert!(!format!("{first:?}").contains(&STANDARD.encode(first.signing.to_bytes())));
    }

    #[test]
    fn the_public_key_file_round_trips() {
        let dir = tempfile::TempDir::new().unwrap();
        let key = GatewayKey::from_seed([1; 32]);
        let file = dir.path().join("keys/gateway.pub");
        key.write_public_key(&file).unwrap();
        assert_eq!(PublicKey::read_file(&file).unwrap(), key.public_key());
        std::fs::write(&file, "not a key").unwrap();
        assert!(PublicKey::read_file(&file).is_err());
    }

    fn request<'a>(identity: Option<&'a str>) -> RequestToSign<'a> {
        RequestToSign {
            method: "POST",
            authority: "App.Example:9000",
            path: "/devices/d%2F1",
            query: Some("verbose=true"),
            identity,
            body: b"{\"reason\":\"stuck\"}",
        }
    }

    #[test]
    fn the_signature_base_is_rfc_9421s() {
        let key = GatewayKey::from_seed([2; 32]);
        let identity = r#"{"user":"u","perms":["read"]}"#;
        let signed = key
            .sign_with_nonce(
                &request(Some(identity)),
                1_700_000_000,
                "bm9uY2Vub25jZW5vbmNl",
            )
            .unwrap();
        let key_id = key.public_key().key_id();
        let params = format!(
            r#"("@method" "@authority" "@path" "@query" "content-digest" "x-portcullis-identity");created=1700000000;nonce="bm9uY2Vub25jZW5vbmNl";keyid="{key_id}";alg="ed25519";tag="portcullis""#
        );
        assert_eq!(signed.signature_input, format!("portcullis={params}"));
        let digest = content_digest(b"{\"reason\":\"stuck\"}");
        assert_eq!(signed.content_digest, digest);
        let base = format!(
            "\"@method\": POST\n\"@authority\": app.example:9000\n\"@path\": /devices/d%2F1\n\"@query\": ?verbose=true\n\"content-digest\": {digest}\n\"x-portcullis-identity\": {identity}\n\"@signature-params\": {params}"
        );
        let signature = signed
            .signature
            .strip_prefix("portcullis=:")
            .and_then(|s| s.strip_suffix(':'))
            .unwrap();
        let signature =
            ed25519_dalek::Signature::from_slice(&STANDARD.decode(signature).unwrap()).unwrap();
        key.public_key()
            .0
            .verify_strict(base.as_bytes(), &signature)
            .unwrap();
        // Without an identity the header is not listed.
        let bare = key.sign(&request(None), 1).unwrap();
        assert!(bare.signature_input.starts_with(
            r#"portcullis=("@method" "@authority" "@path" "@query" "content-digest");created=1;nonce=""#
        ));
        // Every signature has its own nonce.
        assert_ne!(bare.nonce, key.sign(&request(None), 1).unwrap().nonce);
        assert_eq!(bare.nonce.len(), 22);
    }

    fn headers_of(signed: &SignedHeaders, identity: Option<&str>, host: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        for (name, value) in signed.headers() {
            headers.insert(name, value.parse().unwrap());
        }
        if let Some(identity) = identity {
            headers.insert(IDENTITY_HEADER, identity.parse().unwrap());
        }
        headers.insert(http::header::HOST, host.parse().unwrap());
        headers
    }

    #[test]
    fn a_non_ascii_identity_is_signed_and_read_as_sent() {
        let key = GatewayKey::from_seed([4; 32]);
        let identity = r#"{"user":{"name":"José"},"perms":["read"]}"#;
        let now = SystemTime::now();
        let signed = key.sign(&request(Some(identity)), unix_time(now)).unwrap();
        let mut headers = headers_of(&signed, None, "app.example:9000");
        headers.insert(
            IDENTITY_HEADER,
            http::HeaderValue::from_bytes(identity.as_bytes()).unwrap(),
        );
        let uri: http::Uri = "/devices/d%2F1?verbose=true".parse().unwrap();
        let verified = Verifier::new(key.public_key(), "app.example:9000")
            .verify("POST", &uri, &headers, b"{\"reason\":\"stuck\"}", now)
            .unwrap();
        assert_eq!(verified.identity.unwrap().user["name"], "José");
    }

    #[test]
    fn foreign_keys_unsigned_identities_and_odd_inputs_fail() {
        let key = GatewayKey::from_seed([2; 32]);
        let now = SystemTime::now();
        let uri: http::Uri = "/devices/d%2F1?verbose=true".parse().unwrap();
        let body = b"{\"reason\":\"stuck\"}";
        let signed = key.sign(&request(None), unix_time(now)).unwrap();
        let verify = |verifier: &Verifier, headers: &http::HeaderMap| {
            verifier.verify("POST", &uri, headers, body, now)
        };
        let fresh = || Verifier::new(key.public_key(), "app.example:9000");
        let headers = headers_of(&signed, None, "app.example:9000");

        let other = GatewayKey::from_seed([3; 32]).public_key();
        assert_eq!(
            verify(&Verifier::new(other, "app.example:9000"), &headers),
            Err(VerifyError::UnknownKey(key.public_key().key_id()))
        );
        // An identity added by someone else is not covered by the signature.
        let added = headers_of(&signed, Some(r#"{"perms":["admin"]}"#), "app.example:9000");
        assert_eq!(
            verify(&fresh(), &added),
            Err(VerifyError::NotCovered(IDENTITY_HEADER))
        );
        // A second signature-input member tagged portcullis is ambiguous.
        let mut doubled = headers.clone();
        doubled.append(
            SIGNATURE_INPUT_HEADER,
            r#"x=("@method");tag="portcullis""#.parse().unwrap(),
        );
        assert_eq!(
            verify(&fresh(), &doubled),
            Err(VerifyError::AmbiguousSignature)
        );
        // The authority compares without case; the host itself must match.
        assert!(verify(&fresh(), &headers_of(&signed, None, "APP.example:9000")).is_ok());
        assert_eq!(
            verify(&fresh(), &headers_of(&signed, None, "app.example:9001")),
            Err(VerifyError::WrongAuthority("app.example:9001".into()))
        );
        let mut missing = headers.clone();
        missing.remove(SIGNATURE_HEADER);
        assert_eq!(
            verify(&fresh(), &missing),
            Err(VerifyError::MissingHeader(SIGNATURE_HEADER))
        );
        let mut garbled = headers.clone();
        garbled.insert(SIGNATURE_INPUT_HEADER, "portcullis=(".parse().unwrap());
        assert!(matches!(
            verify(&fresh(), &garbled),
            Err(VerifyError::Malformed { .. })
        ));
        // A full store refuses instead of forgetting.
        let full =
            fresh().with_nonce_store(std::sync::Arc::new(MemoryNonceStore::with_capacity(0)));
        assert_eq!(
            verify(&full, &headers),
            Err(VerifyError::NonceStore(NonceStoreError::Full(0)))
        );
        // Clones share their nonces.
        let verifier = fresh();
        assert!(verify(&verifier, &headers).is_ok());
        assert_eq!(
            verify(&verifier.clone(), &headers),
            Err(VerifyError::Replayed)
        );
    }
}
