//! The application's side: [`Verifier`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ed25519_dalek::Signature;
use http::{HeaderMap, Uri};
use portcullis_handler::Identity;
use sfv::{BareItem, Dictionary, InnerList, ListEntry, Parser, Version};
use sha2::{Digest, Sha256};
use thiserror::Error;

use super::nonce::{MemoryNonceStore, NonceStore, NonceStoreError};
use super::{
    ALGORITHM, CONTENT_DIGEST_HEADER, COVERED, DEFAULT_MAX_SKEW, IDENTITY_HEADER, PublicKey,
    SIGNATURE_HEADER, SIGNATURE_INPUT_HEADER, SIGNATURE_TAG, field_value, path_component,
    query_component, serialize_params, signature_base, unix_time,
};

/// The longest nonce accepted: the gateway's are 22 characters, and a
/// store should not hold arbitrary lengths.
const MAX_NONCE_LEN: usize = 128;
/// The shortest: fewer characters cannot hold enough randomness.
const MIN_NONCE_LEN: usize = 16;

/// Why a request was not verified.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VerifyError {
    /// A header the signature needs is absent.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A signature header does not parse, or a parameter is missing or of
    /// the wrong type.
    #[error("malformed {header}: {reason}")]
    Malformed {
        /// The header.
        header: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// No `signature-input` member is tagged `portcullis`.
    #[error("no signature tagged \"portcullis\"")]
    NoSignature,
    /// More than one member is tagged `portcullis`.
    #[error("more than one signature tagged \"portcullis\"")]
    AmbiguousSignature,
    /// The `keyid` names another key.
    #[error("signed with another key (keyid {0})")]
    UnknownKey(String),
    /// The `alg` is not `ed25519`.
    #[error("unsupported signature algorithm {0}")]
    UnsupportedAlgorithm(String),
    /// A component that must be signed is not.
    #[error("the signature does not cover {0}")]
    NotCovered(&'static str),
    /// The signature covers a component this verifier does not compute.
    #[error("the signature covers an unsupported component {0}")]
    UnsupportedComponent(String),
    /// The request names an authority this application does not answer to:
    /// signed for another application, or sent to this one under another
    /// name.
    #[error("the request is addressed to {0}, not to this application")]
    WrongAuthority(String),
    /// The body does not match `content-digest`.
    #[error("the body does not match content-digest")]
    DigestMismatch,
    /// `created` is outside the allowed window (or `expires` is past).
    #[error("the signature was not created within the allowed window")]
    Stale,
    /// The signature does not verify.
    #[error("the signature does not verify")]
    BadSignature,
    /// The nonce was already accepted: a replay.
    #[error("the request was already received (its nonce was seen)")]
    Replayed,
    /// The nonce could not be recorded, so the request is refused.
    #[error("{0}")]
    NonceStore(NonceStoreError),
    /// The signed identity header is not a valid identity.
    #[error("the identity header is not a valid identity: {0}")]
    BadIdentity(String),
}

/// What a verified request tells the application.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// The caller's identity, when the gateway sent one.
    pub identity: Option<Identity>,
    /// When the gateway signed the request (Unix seconds).
    pub created: u64,
    /// The request's nonce, now recorded.
    pub nonce: String,
}

/// Verifies requests forwarded by the gateway and refuses replays.
///
/// Built once per application and shared by its handlers (clones share the
/// nonce store). `authority` is what the application is reached as in the
/// gateway's `base_url`: `host:port`, or the host alone when the port is
/// the scheme's default.
///
/// ```
/// use std::time::SystemTime;
/// use portcullis_sources::signing::{GatewayKey, RequestToSign, Verifier, VerifyError, unix_time};
///
/// // The gateway's side.
/// let key = GatewayKey::from_seed([7; 32]);
/// let identity = r#"{"user":{"userId":"agent"},"perms":["read"]}"#;
/// let request = RequestToSign {
///     method: "POST",
///     authority: "127.0.0.1:9000",
///     path: "/devices",
///     query: Some("x=1"),
///     identity: Some(identity),
///     body: b"{}",
/// };
/// let now = SystemTime::now();
/// let signed = key.sign(&request, unix_time(now)).unwrap();
/// let mut headers = http::HeaderMap::new();
/// for (name, value) in signed.headers() {
///     headers.insert(name, value.parse().unwrap());
/// }
/// headers.insert("x-portcullis-identity", identity.parse().unwrap());
/// headers.insert("host", "127.0.0.1:9000".parse().unwrap());
///
/// // The application's side.
/// let verifier = Verifier::new(key.public_key(), "127.0.0.1:9000");
/// let uri: http::Uri = "/devices?x=1".parse().unwrap();
/// let ok = verifier.verify("POST", &uri, &headers, b"{}", now).unwrap();
/// assert_eq!(ok.identity.unwrap().perms, ["read"]);
/// // The same request again is a replay…
/// assert_eq!(verifier.verify("POST", &uri, &headers, b"{}", now), Err(VerifyError::Replayed));
/// // …and any change breaks the signature.
/// let other: http::Uri = "/devices?x=2".parse().unwrap();
/// assert_eq!(verifier.verify("POST", &other, &headers, b"{}", now), Err(VerifyError::BadSignature));
/// ```
#[derive(Clone)]
pub struct Verifier {
    key: PublicKey,
    key_id: String,
    authorities: Vec<String>,
    max_skew: Duration,
    nonces: Arc<dyn NonceStore>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("key_id", &self.key_id)
            .field("authorities", &self.authorities)
            .field("max_skew", &self.max_skew)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier for the gateway's `key`, for an application reached as
    /// `authority`, with [`DEFAULT_MAX_SKEW`] and a fresh
    /// [`MemoryNonceStore`].
    pub fn new(key: PublicKey, authority: impl Into<String>) -> Self {
        Verifier {
            key_id: key.key_id(),
            key,
            authorities: vec![normalize_authority(&authority.into())],
            max_skew: DEFAULT_MAX_SKEW,
            nonces: Arc::new(MemoryNonceStore::new()),
        }
    }

    /// Also accepts requests addressed to `authority` (an application the
    /// gateway reaches under several names).
    pub fn with_authority(mut self, authority: impl Into<String>) -> Self {
        self.authorities
            .push(normalize_authority(&authority.into()));
        self
    }

    /// The clock tolerance: how far `created` may be from this
    /// application's clock, either way. Nonces are remembered this long past
    /// their `created`.
    pub fn with_max_skew(mut self, max_skew: Duration) -> Self {
        self.max_skew = max_skew;
        self
    }

    /// Records nonces in `store` (shared by the application's replicas).
    pub fn with_nonce_store(mut self, store: Arc<dyn NonceStore>) -> Self {
        self.nonces = store;
        self
    }

    /// Verifies one request as received: its method, target, headers and
    /// body, at `now` (the application's clock). On success the nonce is
    /// recorded, so the same request is refused the next time.
    pub fn verify(
        &self,
        method: &str,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Verified, VerifyError> {
        let now = unix_time(now);
        let (label, params) = find_signature(headers)?;
        let signed = self.check_params(&params)?;
        let skew = self.max_skew.as_secs();
        if now.abs_diff(signed.created) > skew || signed.expires.is_some_and(|e| now > e) {
            return Err(VerifyError::Stale);
        }
        let names = covered_names(&params)?;
        let has_identity = headers.contains_key(IDENTITY_HEADER);
        for required in COVERED {
            if !names.contains(&required) {
                return Err(VerifyError::NotCovered(required));
            }
        }
        if has_identity && !names.contains(&IDENTITY_HEADER) {
            return Err(VerifyError::NotCovered(IDENTITY_HEADER));
        }

        let authority = request_authority(uri, headers)?;
        if !self.authorities.contains(&authority) {
            return Err(VerifyError::WrongAuthority(authority));
        }

        let mut components = Vec::with_capacity(names.len());
        for name in &names {
            let value = match *name {
                "@method" => method.as_bytes().to_vec(),
                "@authority" => authority.clone().into_bytes(),
                "@path" => path_component(uri.path()).into_bytes(),
                "@query" => query_component(uri.query()).into_bytes(),
                CONTENT_DIGEST_HEADER => header_component(headers, CONTENT_DIGEST_HEADER)?,
                IDENTITY_HEADER => header_component(headers, IDENTITY_HEADER)?,
                // covered_names admits nothing else.
                other => return Err(VerifyError::UnsupportedComponent(other.to_owned())),
            };
            components.push((*name, value));
        }
        check_digest(headers, body)?;

        let signature = signature_bytes(headers, &label)?;
        let serialized = serialize_params(&params).ok_or_else(|| VerifyError::Malformed {
            header: SIGNATURE_INPUT_HEADER,
            reason: "no parameters".into(),
        })?;
        let base = signature_base(&components, &serialized);
        self.key
            .0
            .verify_strict(&base, &signature)
            .map_err(|_| VerifyError::BadSignature)?;

        let identity = match headers.get(IDENTITY_HEADER) {
            Some(_) => {
                let text = header_component(headers, IDENTITY_HEADER)?;
                Some(
                    serde_json::from_slice::<Identity>(&text)
                        .map_err(|e| VerifyError::BadIdentity(e.to_string()))?,
                )
            }
            None => None,
        };
        // Last, so that nothing refused above uses up a nonce.
        match self
            .nonces
            .claim(&signed.nonce, signed.created.saturating_add(skew), now)
        {
            Ok(true) => {}
            Ok(false) => return Err(VerifyError::Replayed),
            Err(e) => return Err(VerifyError::NonceStore(e)),
        }
        Ok(Verified {
            identity,
            created: signed.created,
            nonce: signed.nonce,
        })
    }

    fn check_params(&self, list: &InnerList) -> Result<SignedParams, VerifyError> {
        let malformed = |reason: &str| VerifyError::Malformed {
            header: SIGNATURE_INPUT_HEADER,
            reason: reason.to_owned(),
        };
        let string = |name: &str| {
            list.params
                .get(name)
                .and_then(BareItem::as_string)
                .map(|s| s.as_str().to_owned())
                .ok_or_else(|| malformed(&format!("no string parameter {name}")))
        };
        let time = |name: &str| -> Result<Option<u64>, VerifyError> {
            match list.params.get(name) {
                None => Ok(None),
                Some(item) => item
                    .as_integer()
                    .and_then(|i| u64::try_from(i64::from(i)).ok())
                    .map(Some)
                    .ok_or_else(|| malformed(&format!("{name} is not a time"))),
            }
        };
        let key_id = string("keyid")?;
        if key_id != self.key_id {
            return Err(VerifyError::UnknownKey(key_id));
        }
        let alg = string("alg")?;
        if alg != ALGORITHM {
            return Err(VerifyError::UnsupportedAlgorithm(alg));
        }
        let created = time("created")?.ok_or_else(|| malformed("no created parameter"))?;
        let nonce = string("nonce")?;
        if !(MIN_NONCE_LEN..=MAX_NONCE_LEN).contains(&nonce.len()) {
            return Err(malformed("the nonce is too short or too long"));
        }
        Ok(SignedParams {
            created,
            expires: time("expires")?,
            nonce,
        })
    }
}

/// The one `signature-input` member tagged `portcullis`: its label and
/// inner list.
fn find_signature(headers: &HeaderMap) -> Result<(String, InnerList), VerifyError> {
    let input = parse_dictionary(headers, SIGNATURE_INPUT_HEADER)?;
    let mut found = None;
    for (label, entry) in input {
        let ListEntry::InnerList(list) = entry else {
            continue;
        };
        let tagged = list
            .params
            .get("tag")
            .and_then(BareItem::as_string)
            .is_some_and(|tag| tag.as_str() == SIGNATURE_TAG);
        if tagged {
            if found.is_some() {
                return Err(VerifyError::AmbiguousSignature);
            }
            found = Some((label.as_str().to_owned(), list));
        }
    }
    found.ok_or(VerifyError::NoSignature)
}

struct SignedParams {
    created: u64,
    expires: Option<u64>,
    nonce: String,
}

/// The covered component names, each a plain string at most once, and only
/// those this verifier computes.
fn covered_names(list: &InnerList) -> Result<Vec<&'static str>, VerifyError> {
    let mut names = Vec::with_capacity(list.items.len());
    for item in &list.items {
        let name = item.bare_item.as_string().map(|s| s.as_str());
        let Some(name) = name.filter(|_| item.params.is_empty()) else {
            return Err(VerifyError::UnsupportedComponent(format!(
                "{:?}",
                item.bare_item
            )));
        };
        let known = COVERED
            .iter()
            .chain(&[IDENTITY_HEADER])
            .find(|known| **known == name)
            .copied()
            .ok_or_else(|| VerifyError::UnsupportedComponent(name.to_owned()))?;
        if names.contains(&known) {
            return Err(VerifyError::Malformed {
                header: SIGNATURE_INPUT_HEADER,
                reason: format!("{known} is listed twice"),
            });
        }
        names.push(known);
    }
    Ok(names)
}

/// The authority the request was sent to: the request target's when it
/// has one (HTTP/2, absolute form), else the one `Host` header; lowercase.
fn request_authority(uri: &Uri, headers: &HeaderMap) -> Result<String, VerifyError> {
    if let Some(authority) = uri.authority() {
        let host = authority.host();
        return Ok(normalize_authority(&match authority.port_u16() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        }));
    }
    let mut hosts = headers.get_all(http::header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(host), None) => {
            host.to_str()
                .map(normalize_authority)
                .map_err(|_| VerifyError::Malformed {
                    header: "host",
                    reason: "not ASCII".into(),
                })
        }
        (None, _) => Err(VerifyError::MissingHeader("host")),
        (Some(_), Some(_)) => Err(VerifyError::Malformed {
            header: "host",
            reason: "sent more than once".into(),
        }),
    }
}

fn normalize_authority(authority: &str) -> String {
    authority.trim().to_ascii_lowercase()
}

/// A covered header's value as RFC 9421 reads it.
fn header_component(headers: &HeaderMap, name: &'static str) -> Result<Vec<u8>, VerifyError> {
    let mut lines = headers.get_all(name).iter().peekable();
    if lines.peek().is_none() {
        return Err(VerifyError::MissingHeader(name));
    }
    Ok(field_value(lines.map(|v| v.as_bytes())))
}

/// A structured-field dictionary header (RFC 8941, as RFC 9421 uses).
fn parse_dictionary(headers: &HeaderMap, name: &'static str) -> Result<Dictionary, VerifyError> {
    let value = header_component(headers, name)?;
    Parser::new(&value)
        .with_version(Version::Rfc8941)
        .parse::<Dictionary>()
        .map_err(|e| VerifyError::Malformed {
            header: name,
            reason: e.to_string(),
        })
}

/// The body against `content-digest`: a `sha-256` entry must be there and
/// match.
fn check_digest(headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
    let digests = parse_dictionary(headers, CONTENT_DIGEST_HEADER)?;
    let sha256 = match digests.get("sha-256") {
        Some(ListEntry::Item(item)) => item.bare_item.as_byte_sequence(),
        _ => None,
    }
    .ok_or_else(|| VerifyError::Malformed {
        header: CONTENT_DIGEST_HEADER,
        reason: "no sha-256 digest".into(),
    })?;
    if sha256 != Sha256::digest(body).as_slice() {
        return Err(VerifyError::DigestMismatch);
    }
    Ok(())
}

/// The 64 signature bytes under `label` in `signature`.
fn signature_bytes(headers: &HeaderMap, label: &str) -> Result<Signature, VerifyError> {
    let signatures = parse_dictionary(headers, SIGNATURE_HEADER)?;
    let bytes = match signatures.get(label) {
        Some(ListEntry::Item(item)) => item.bare_item.as_byte_sequence(),
        _ => None,
    }
    .ok_or_else(|| VerifyError::Malformed {
        header: SIGNATURE_HEADER,
        reason: format!("no byte sequence labelled {label}"),
    })?;
    <[u8; 64]>::try_from(bytes)
        .map(|bytes| Signature::from_bytes(&bytes))
        .map_err(|_| VerifyError::BadSignature)
}
