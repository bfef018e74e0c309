//! The keeper of upstreams' OAuth grants: each grant sealed with a key that
//! never leaves this machine's data directory, stored sealed in the store.
//!
//! A grant holds access and refresh tokens, so the store (a database other
//! replicas, backups and operators read) only ever sees it encrypted:
//! AES-256-GCM under a random 32-byte key kept in `data_dir/oauth.key`
//! (created 0600 on first use, refused when others can read it), with a
//! fresh random nonce per seal. The upstream's name and the issuer are bound
//! in as associated data, so a sealed grant copied onto another upstream's
//! row — or relabelled with another issuer — does not open. A grant that
//! does not open (another key, a damaged row) is an
//! [`GrantError::Unreadable`]: the upstream needs a new login, nothing
//! crashes and nothing is guessed.
//!
//! Sealed layout: one version byte (`1`), the 12-byte nonce, then the
//! ciphertext of the grant's JSON with its 16-byte tag.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use aws_lc_rs::aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use portcullis_sources::key_file::{self, KeyError};
use portcullis_store::{SealedGrant, Store, StoreError};
use portcullis_upstream::oauth::Grant;
use thiserror::Error;

/// The key's file name under `data_dir`.
pub const KEY_FILE_NAME: &str = "oauth.key";

/// The first byte of every sealed grant this build writes.
const SEAL_VERSION: u8 = 1;

/// Why a grant could not be kept or read back.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GrantError {
    /// The sealing key could not be loaded or created.
    #[error("the OAuth grant key: {0}")]
    Key(#[from] KeyError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored grant does not open or does not parse: log in again.
    #[error(
        "the stored OAuth grant of upstream {upstream:?} cannot be read ({reason}); run `portcullis auth login {upstream}`"
    )]
    Unreadable {
        /// The upstream.
        upstream: String,
        /// Why, without any of its content.
        reason: &'static str,
    },
    /// Encryption failed (the crypto library refused; not expected).
    #[error("cannot seal the OAuth grant of upstream {upstream:?}")]
    Seal {
        /// The upstream.
        upstream: String,
    },
}

/// What `auth status` may show of a stored grant: never a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantSummary {
    /// The upstream's configured name.
    pub upstream: String,
    /// The issuer that granted it.
    pub issuer: String,
    /// When it was last written (a login or a refresh).
    pub updated_at: SystemTime,
}

/// Seals, stores, opens and forgets upstreams' OAuth grants. Clones share
/// one key and one store. (Who writes a client's changes in order, and
/// when, is [`crate::oauth`]'s job.)
#[derive(Clone)]
pub struct Grants {
    key: Arc<RandomizedNonceKey>,
    store: Arc<dyn Store>,
}

impl std::fmt::Debug for Grants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grants")
            .field("store", &self.store.backend())
            .finish_non_exhaustive()
    }
}

impl Grants {
    /// The keeper over `store`, with the key in `data_dir` (created on first
    /// use).
    pub fn open(data_dir: &Path, store: Arc<dyn Store>) -> Result<Grants, GrantError> {
        let bytes = key_file::load_or_create(data_dir, KEY_FILE_NAME)?;
        Ok(Grants::with_key(&bytes, store))
    }

    /// The keeper with an explicit key (tests, and embedders that keep the
    /// key elsewhere).
    pub fn with_key(key: &[u8; 32], store: Arc<dyn Store>) -> Grants {
        let key = match RandomizedNonceKey::new(&AES_256_GCM, key) {
            Ok(key) => key,
            // A 32-byte key is exactly what AES-256-GCM takes.
            Err(_) => unreachable!("AES-256-GCM accepts every 32-byte key"),
        };
        Grants {
            key: Arc::new(key),
            store,
        }
    }

    /// The grant stored for `upstream`, opened; `None` when there is none.
    pub async fn load(&self, upstream: &str) -> Result<Option<Grant>, GrantError> {
        let Some(stored) = self.store.grants().get(upstream).await? else {
            return Ok(None);
        };
        self.open_sealed(&stored).map(Some)
    }

    /// Seals and stores `grant` as `upstream`'s, replacing any before it.
    pub async fn save(&self, upstream: &str, grant: &Grant) -> Result<(), GrantError> {
        let sealed = self.seal(upstream, grant)?;
        self.store
            .grants()
            .put(&SealedGrant {
                upstream: upstream.to_owned(),
                issuer: grant.issuer.clone(),
                sealed,
                updated_at: SystemTime::now(),
            })
            .await?;
        Ok(())
    }

    /// Forgets `upstream`'s grant; whether one was stored.
    pub async fn forget(&self, upstream: &str) -> Result<bool, GrantError> {
        Ok(self.store.grants().remove(upstream).await?)
    }

    /// Every stored grant's upstream, issuer and time, ordered by upstream.
    pub async fn list(&self) -> Result<Vec<GrantSummary>, GrantError> {
        Ok(self
            .store
            .grants()
            .list()
            .await?
            .into_iter()
            .map(|g| GrantSummary {
                upstream: g.upstream,
                issuer: g.issuer,
                updated_at: g.updated_at,
            })
            .collect())
    }

    fn seal(&self, upstream: &str, grant: &Grant) -> Result<Vec<u8>, GrantError> {
        let failed = || GrantError::Seal {
            upstream: upstream.to_owned(),
        };
        let mut body = serde_json::to_vec(grant).map_err(|_| failed())?;
        let nonce = self
            .key
            .seal_in_place_append_tag(Aad::from(bound(upstream, &grant.issuer)), &mut body)
            .map_err(|_| failed())?;
        let mut sealed = Vec::with_capacity(1 + NONCE_LEN + body.len());
        sealed.push(SEAL_VERSION);
        sealed.extend_from_slice(nonce.as_ref());
        sealed.extend_from_slice(&body);
        Ok(sealed)
    }

    fn open_sealed(&self, stored: &SealedGrant) -> Result<Grant, GrantError> {
        let unreadable = |reason| GrantError::Unreadable {
            upstream: stored.upstream.clone(),
            reason,
        };
        let (version, rest) = stored
            .sealed
            .split_first()
            .ok_or_else(|| unreadable("empty"))?;
        if *version != SEAL_VERSION {
            return Err(unreadable("sealed by an unknown version"));
        }
        if rest.len() < NONCE_LEN {
            return Err(unreadable("truncated"));
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| unreadable("truncated"))?;
        let mut body = ciphertext.to_vec();
        let plain = self
            .key
            .open_in_place(
                nonce,
                Aad::from(bound(&stored.upstream, &stored.issuer)),
                &mut body,
            )
            .map_err(|_| {
                unreadable("it does not open with this data directory's key, or was altered")
            })?;
        let grant: Grant = serde_json::from_slice(plain)
            .map_err(|_| unreadable("not a grant this build reads"))?;
        if grant.issuer != stored.issuer {
            return Err(unreadable("its issuer does not match"));
        }
        Ok(grant)
    }
}

/// The associated data a grant is sealed under: which upstream, which
/// issuer, and what it is (so no other sealed value of ours passes as one).
fn bound(upstream: &str, issuer: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(32 + upstream.len() + issuer.len());
    aad.extend_from_slice(b"portcullis oauth grant v1\0");
    aad.extend_from_slice(upstream.as_bytes());
    aad.push(0);
    aad.extend_from_slice(issuer.as_bytes());
    aad
}

#[cfg(test)]
mod tests {
    use portcullis_store::{MemoryStore, SqliteStore, StoreSpec};
    use portcullis_upstream::oauth::{RegisteredClient, TokenAuth};

    use super::*;

    const ACCESS: &str = "at-7f3c9e1d-access";
    const REFRESH: &str = "rt-2b8a4c6f-refresh";
    const SECRET: &str = "cs-9d1e5a3b-client-secret";

    fn grant(issuer: &str) -> Grant {
        Grant {
            issuer: issuer.into(),
            resource: "https://mcp.example.com/mcp".into(),
            token_endpoint: format!("{issuer}/token"),
            client: RegisteredClient {
                issuer: issuer.into(),
                client_id: "portcullis".into(),
                client_secret: Some(SECRET.into()),
                auth: TokenAuth::Basic,
            },
            access_token: ACCESS.into(),
            refresh_token: Some(REFRESH.into()),
            expires_at: Some(1_900_000_000),
            refresh_at: None,
            scopes: vec!["read".into()],
            client_credentials: false,
            dpop_key: None,
        }
    }

    fn same(a: &Grant, b: &Grant) -> bool {
        serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
    }

    #[tokio::test]
    async fn a_grant_is_stored_sealed_and_opens_only_as_itself() {
        let dir = tempfile::TempDir::new().unwrap();
        let store: Arc<dyn Store> = portcullis_store::open(&StoreSpec::Sqlite(None), dir.path())
            .await
            .unwrap();
        let grants = Grants::open(dir.path(), store.clone()).unwrap();
        let docs = grant("https://auth.example");
        grants.save("docs", &docs).await.unwrap();
        assert!(same(&grants.load("docs").await.unwrap().unwrap(), &docs));
        assert!(grants.load("crm").await.unwrap().is_none());
        assert_eq!(
            grants
                .list()
                .await
                .unwrap()
                .into_iter()
                .map(|g| (g.upstream, g.issuer))
                .collect::<Vec<_>>(),
            [("docs".to_owned(), "https://auth.example".to_owned())]
        );

        // Nothing secret is in the database file, in any encoding we write.
        drop(store);
        let sqlite =
            SqliteStore::open(&dir.path().join(portcullis_store::spec::DEFAULT_SQLITE_FILE))
                .await
                .unwrap();
        let raw = sqlite.grants().get("docs").await.unwrap().unwrap();
        for secret in [ACCESS, REFRESH, SECRET] {
            assert!(
                !raw.sealed
                    .windows(secret.len())
                    .any(|w| w == secret.as_bytes()),
                "{secret} is stored in the clear"
            );
        }
        let file =
            std::fs::read(dir.path().join(portcullis_store::spec::DEFAULT_SQLITE_FILE)).unwrap();
        for secret in [ACCESS, REFRESH, SECRET] {
            assert!(!file.windows(secret.len()).any(|w| w == secret.as_bytes()));
        }

        // Copied onto another upstream's row, or relabelled with another
        // issuer, it does not open.
        let store: Arc<dyn Store> = Arc::new(sqlite);
        let grants = Grants::open(dir.path(), store.clone()).unwrap();
        for moved in [
            SealedGrant {
                upstream: "crm".into(),
                ..raw.clone()
            },
            SealedGrant {
                issuer: "https://evil.example".into(),
                ..raw.clone()
            },
        ] {
            store.grants().put(&moved).await.unwrap();
            let upstream = moved.upstream.clone();
            assert!(matches!(
                grants.load(&upstream).await,
                Err(GrantError::Unreadable { .. })
            ));
        }
        // One flipped bit, or a truncation, does not open either.
        let mut flipped = raw.clone();
        let last = flipped.sealed.len() - 1;
        flipped.sealed[last] ^= 1;
        store.grants().put(&flipped).await.unwrap();
        let err = grants.load("docs").await.unwrap_err();
        assert!(matches!(err, GrantError::Unreadable { .. }));
        assert!(
            err.to_string().contains("portcullis auth login docs"),
            "{err}"
        );
        let mut cut = raw.clone();
        cut.sealed.truncate(5);
        store.grants().put(&cut).await.unwrap();
        assert!(grants.load("docs").await.is_err());
    }

    #[tokio::test]
    async fn another_key_cannot_open_a_grant() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        Grants::with_key(&[7; 32], store.clone())
            .save("docs", &grant("https://auth.example"))
            .await
            .unwrap();
        let other = Grants::with_key(&[8; 32], store);
        let err = other.load("docs").await.unwrap_err();
        assert!(matches!(err, GrantError::Unreadable { .. }));
        for secret in [ACCESS, REFRESH, SECRET] {
            assert!(!err.to_string().contains(secret));
        }
        assert!(!format!("{other:?}").contains("7, 7"));
    }
}
