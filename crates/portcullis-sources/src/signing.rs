//! Signing requests towards applications, and verifying them on the other
//! side.
//!
//! The gateway keeps one Ed25519 key pair under its data directory
//! ([`GatewayKey::load_or_create`]: created once with mode 0600, reused
//! across restarts) and writes the public half to the application's
//! `key_file`, so the application can allow-list the gateway, as the seed's
//! app runtimes do. Every forwarded request carries:
//!
//! | header | value |
//! |---|---|
//! | `x-portcullis-identity` | the caller's identity as JSON (`{"user":…,"perms":[…]}`); absent when none is configured |
//! | `x-portcullis-timestamp` | Unix time in seconds when the request was signed |
//! | `x-portcullis-content-digest` | `sha-256=:<base64 of SHA-256(body)>:` (the body may be empty) |
//! | `x-portcullis-signature` | base64 (standard, padded) of the Ed25519 signature of the signing string |
//!
//! The signing string is six lines joined by `\n` (no trailing newline):
//!
//! ```text
//! portcullis-request-v1
//! <METHOD, uppercase>
//! <path and query exactly as sent, e.g. /devices/d1?verbose=true>
//! <the x-portcullis-content-digest value>
//! <the x-portcullis-identity value, or empty>
//! <the x-portcullis-timestamp value>
//! ```
//!
//! A verifier in any language: recompute the digest of the body it received
//! and compare; check the timestamp is within its tolerance of its clock;
//! rebuild the string from what it received and check the signature with the
//! gateway's public key (the key file holds its 32 bytes in base64 on one
//! line). Only then trust the identity header. [`verify_request`] is that
//! function in Rust. RFC 9421 (HTTP Message Signatures) was considered; the
//! scheme above is smaller, covers the same fields and needs no library on
//! the application side beyond Ed25519 and SHA-256. It does not prevent a
//! replay inside the timestamp window; an application that needs that keeps
//! the signatures it has seen for the window.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use http::HeaderMap;
use portcullis_server::Identity;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::files::{read_regular_to_string, write_regular};

/// Header carrying the caller's identity (JSON).
pub const IDENTITY_HEADER: &str = "x-portcullis-identity";
/// Header carrying the signing time (Unix seconds).
pub const TIMESTAMP_HEADER: &str = "x-portcullis-timestamp";
/// Header carrying the body digest.
pub const DIGEST_HEADER: &str = "x-portcullis-content-digest";
/// Header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-portcullis-signature";
/// The private key's file name under the data directory.
pub const KEY_FILE_NAME: &str = "gateway-signing.key";
/// A reasonable clock tolerance for [`verify_request`].
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(300);

const SCHEME: &str = "portcullis-request-v1";

/// Why a key could not be loaded, created or written.
#[derive(Debug, Error)]
pub enum KeyError {
    /// Filesystem trouble.
    #[error("key file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file does not hold a key.
    #[error("key file {path}: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The private key is readable by others.
    #[error("key file {path} is accessible by group or others (mode {mode:o}); chmod 600 it")]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The OS random source failed.
    #[error("no randomness for a new key: {0}")]
    Random(String),
}

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

/// The headers one signed request carries (besides the identity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    /// `x-portcullis-timestamp`.
    pub timestamp: String,
    /// `x-portcullis-content-digest`.
    pub digest: String,
    /// `x-portcullis-signature`.
    pub signature: String,
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
        let dir = data_dir.as_ref();
        let path = dir.join(KEY_FILE_NAME);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| KeyError::Io { path, source }
        };
        match read_key_file(&path) {
            Ok(text) => return Self::parse_private(&path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&path)(e)),
        }
        create_private_dir(dir).map_err(io(dir))?;
        let key = Self::generate()?;
        let encoded = format!("{}\n", STANDARD.encode(key.signing.to_bytes()));
        // Written to a private temporary file, then linked into place: the
        // link fails if another process won the race, and nobody ever reads
        // a half-written key.
        let tmp = dir.join(format!(".{KEY_FILE_NAME}.{}.tmp", std::process::id()));
        let written = write_private(&tmp, encoded.as_bytes());
        let linked = written.and_then(|()| std::fs::hard_link(&tmp, &path));
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(key),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let text = read_key_file(&path).map_err(io(&path))?;
                Self::parse_private(&path, &text)
            }
            Err(e) => Err(io(&path)(e)),
        }
    }

    fn parse_private(path: &Path, text: &str) -> Result<Self, KeyError> {
        check_private_mode(path)?;
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|e| malformed(path, format!("not base64: {e}")))?;
        let seed: [u8; 32] = bytes
            .try_into()
            .map_err(|_| malformed(path, "not a 32-byte Ed25519 seed".into()))?;
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

    /// Signs one request. `path_and_query` is exactly what goes on the
    /// request line; `identity` the identity header's value, if sent.
    pub fn sign(
        &self,
        method: &str,
        path_and_query: &str,
        body: &[u8],
        identity: Option<&str>,
        timestamp: u64,
    ) -> SignedHeaders {
        let digest = content_digest(body);
        let timestamp = timestamp.to_string();
        let base = signing_string(
            method,
            path_and_query,
            &digest,
            identity.unwrap_or(""),
            &timestamp,
        );
        let signature = STANDARD.encode(self.signing.sign(base.as_bytes()).to_bytes());
        SignedHeaders {
            timestamp,
            digest,
            signature,
        }
    }
}

fn malformed(path: &Path, reason: String) -> KeyError {
    KeyError::Malformed {
        path: path.to_path_buf(),
        reason,
    }
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// A key file's text: a regular file only (a FIFO would block the read),
/// and small (a key is 45 bytes of base64).
fn read_key_file(path: &Path) -> std::io::Result<String> {
    read_regular_to_string(path, MAX_KEY_FILE_BYTES).map_err(Into::into)
}

/// Far more than a key file holds; anything bigger is not one.
const MAX_KEY_FILE_BYTES: u64 = 4096;

#[cfg(unix)]
fn check_private_mode(path: &Path) -> Result<(), KeyError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::TooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private_mode(_path: &Path) -> Result<(), KeyError> {
    Ok(())
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
        let text = read_key_file(path).map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_base64(&text).map_err(|reason| malformed(path, reason))
    }

    /// The key as base64 (the key file's content).
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0.to_bytes())
    }
}

/// Why a request was not verified.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VerifyError {
    /// A signature header is absent or not valid UTF-8.
    #[error("missing or unreadable header {0}")]
    MissingHeader(&'static str),
    /// The body does not match the digest.
    #[error("the body does not match x-portcullis-content-digest")]
    DigestMismatch,
    /// The timestamp is malformed or outside the tolerance.
    #[error("the timestamp is outside the allowed window")]
    Stale,
    /// The signature does not verify.
    #[error("the signature does not verify")]
    BadSignature,
    /// The identity header is not a valid identity.
    #[error("the identity header is not a valid identity: {0}")]
    BadIdentity(String),
}

/// What a verified request tells the application.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// The caller's identity, when the gateway sent one.
    pub identity: Option<Identity>,
    /// When the gateway signed the request (Unix seconds).
    pub timestamp: u64,
}

/// Verifies a request forwarded by the gateway: digest, timestamp (within
/// `max_skew` of `now`), signature, then parses the identity.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use portcullis_sources::signing::{verify_request, GatewayKey, DEFAULT_MAX_SKEW};
///
/// let key = GatewayKey::from_seed([7; 32]);
/// let now = SystemTime::now();
/// let ts = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
/// let identity = r#"{"user":{"userId":"agent"},"perms":["read"]}"#;
/// let signed = key.sign("POST", "/devices?x=1", b"{}", Some(identity), ts);
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-portcullis-timestamp", signed.timestamp.parse().unwrap());
/// headers.insert("x-portcullis-content-digest", signed.digest.parse().unwrap());
/// headers.insert("x-portcullis-signature", signed.signature.parse().unwrap());
/// headers.insert("x-portcullis-identity", identity.parse().unwrap());
///
/// let ok = verify_request(&key.public_key(), "POST", "/devices?x=1", &headers, b"{}", now, DEFAULT_MAX_SKEW).unwrap();
/// assert_eq!(ok.identity.unwrap().perms, ["read"]);
/// // Any change breaks it.
/// assert!(verify_request(&key.public_key(), "POST", "/devices?x=2", &headers, b"{}", now, DEFAULT_MAX_SKEW).is_err());
/// ```
pub fn verify_request(
    key: &PublicKey,
    method: &str,
    path_and_query: &str,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
    max_skew: Duration,
) -> Result<Verified, VerifyError> {
    let header = |name: &'static str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .ok_or(VerifyError::MissingHeader(name))
    };
    let timestamp_text = header(TIMESTAMP_HEADER)?;
    let digest = header(DIGEST_HEADER)?;
    let signature = header(SIGNATURE_HEADER)?;
    let identity = match headers.get(IDENTITY_HEADER) {
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| VerifyError::MissingHeader(IDENTITY_HEADER))?,
        ),
        None => None,
    };

    if content_digest(body) != digest {
        return Err(VerifyError::DigestMismatch);
    }
    let timestamp: u64 = timestamp_text.parse().map_err(|_| VerifyError::Stale)?;
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_err(|_| VerifyError::Stale)?
        .as_secs();
    if now.abs_diff(timestamp) > max_skew.as_secs() {
        return Err(VerifyError::Stale);
    }
    let signature = STANDARD
        .decode(signature)
        .ok()
        .and_then(|bytes| <[u8; 64]>::try_from(bytes).ok())
        .map(|bytes| Signature::from_bytes(&bytes))
        .ok_or(VerifyError::BadSignature)?;
    let base = signing_string(
        &method.to_ascii_uppercase(),
        path_and_query,
        digest,
        identity.unwrap_or(""),
        timestamp_text,
    );
    key.0
        .verify_strict(base.as_bytes(), &signature)
        .map_err(|_| VerifyError::BadSignature)?;
    let identity = identity
        .map(serde_json::from_str::<Identity>)
        .transpose()
        .map_err(|e| VerifyError::BadIdentity(e.to_string()))?;
    Ok(Verified {
        identity,
        timestamp,
    })
}

/// `sha-256=:<base64>:` of `body`.
pub fn content_digest(body: &[u8]) -> String {
    format!("sha-256=:{}:", STANDARD.encode(Sha256::digest(body)))
}

fn signing_string(
    method: &str,
    path: &str,
    digest: &str,
    identity: &str,
    timestamp: &str,
) -> String {
    format!("{SCHEME}\n{method}\n{path}\n{digest}\n{identity}\n{timestamp}")
}

/// Seconds since the Unix epoch, now.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
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

    #[test]
    fn tampering_stale_and_foreign_keys_fail() {
        let key = GatewayKey::from_seed([2; 32]);
        let now = SystemTime::now();
        let ts = unix_now();
        let signed = key.sign("GET", "/a", b"", None, ts);
        let mut headers = HeaderMap::new();
        headers.insert(TIMESTAMP_HEADER, signed.timestamp.parse().unwrap());
        headers.insert(DIGEST_HEADER, signed.digest.parse().unwrap());
        headers.insert(SIGNATURE_HEADER, signed.signature.parse().unwrap());
        let public = key.public_key();
        assert_eq!(
            verify_request(&public, "get", "/a", &headers, b"", now, DEFAULT_MAX_SKEW)
                .unwrap()
                .identity,
            None
        );
        assert_eq!(
            verify_request(&public, "GET", "/a", &headers, b"x", now, DEFAULT_MAX_SKEW),
            Err(VerifyError::DigestMismatch)
        );
        let later = now + Duration::from_secs(600);
        assert_eq!(
            verify_request(&public, "GET", "/a", &headers, b"", later, DEFAULT_MAX_SKEW),
            Err(VerifyError::Stale)
        );
        let other = GatewayKey::from_seed([3; 32]).public_key();
        assert_eq!(
            verify_request(&other, "GET", "/a", &headers, b"", now, DEFAULT_MAX_SKEW),
            Err(VerifyError::BadSignature)
        );
        // An identity added by someone else is not covered by the signature.
        headers.insert(IDENTITY_HEADER, r#"{"perms":["admin"]}"#.parse().unwrap());
        assert_eq!(
            verify_request(&public, "GET", "/a", &headers, b"", now, DEFAULT_MAX_SKEW),
            Err(VerifyError::BadSignature)
        );
        headers.remove(SIGNATURE_HEADER);
        assert_eq!(
            verify_request(&public, "GET", "/a", &headers, b"", now, DEFAULT_MAX_SKEW),
            Err(VerifyError::MissingHeader(SIGNATURE_HEADER))
        );
    }
}
