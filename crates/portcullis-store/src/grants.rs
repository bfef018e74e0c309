//! OAuth grants of upstream servers, kept **sealed**: the store holds bytes
//! it cannot read. Whoever keeps the key (the gateway, with a key file in
//! its data directory) seals a grant before [`GrantLog::put`] and opens it
//! after [`GrantLog::get`]; a database dump or a replica's logs show which
//! upstream is logged in with which issuer, never a token.
//!
//! One grant per upstream: a new login replaces the old one.

use std::time::SystemTime;

use async_trait::async_trait;

use crate::error::StoreError;

/// One upstream's grant as stored.
#[derive(Clone, PartialEq, Eq)]
pub struct SealedGrant {
    /// The upstream's configured name.
    pub upstream: String,
    /// The issuer that granted it (in the clear: `auth status` lists it
    /// without opening anything).
    pub issuer: String,
    /// The grant, encrypted by its keeper; opaque to the store.
    pub sealed: Vec<u8>,
    /// When it was last written (to the millisecond).
    pub updated_at: SystemTime,
}

impl std::fmt::Debug for SealedGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedGrant")
            .field("upstream", &self.upstream)
            .field("issuer", &self.issuer)
            .field("sealed", &format_args!("<{} bytes>", self.sealed.len()))
            .field("updated_at", &self.updated_at)
            .finish()
    }
}

/// Where a store keeps sealed grants, one per upstream.
#[async_trait]
pub trait GrantLog: Send + Sync {
    /// Stores `grant`, replacing any grant of the same upstream.
    async fn put(&self, grant: &SealedGrant) -> Result<(), StoreError>;

    /// The grant of `upstream`, if one is stored.
    async fn get(&self, upstream: &str) -> Result<Option<SealedGrant>, StoreError>;

    /// Forgets the grant of `upstream`; whether there was one.
    async fn remove(&self, upstream: &str) -> Result<bool, StoreError>;

    /// Every stored grant, ordered by upstream.
    async fn list(&self) -> Result<Vec<SealedGrant>, StoreError>;
}
