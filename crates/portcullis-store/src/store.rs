//! The `Store` trait every backend implements, and `retrust`.

use async_trait::async_trait;
use portcullis_catalog::Tool;
use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::pins::tool_part;

use crate::audit::AuditLog;
use crate::effects::EffectLog;
use crate::error::{Backend, StoreError};
use crate::grants::GrantLog;
use crate::row::PersistedServer;

/// Persists connected servers, their catalogue caches, their immutable trust
/// baselines, the effect log and the audit trail. Every backend behaves identically; the
/// shared suite in `tests/` holds them to it.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Which backend this is.
    fn backend(&self) -> Backend;

    /// Every row, ordered by id. A cached listing or baseline that no longer
    /// parses comes back as `None` (it is a cache: losing it costs one
    /// `tools/list`), never as an error.
    async fn list(&self) -> Result<Vec<PersistedServer>, StoreError>;

    /// The row with this id, if any.
    async fn get(&self, id: &str) -> Result<Option<PersistedServer>, StoreError> {
        Ok(self.list().await?.into_iter().find(|row| row.id == id))
    }

    /// The row with this id as a trust decision needs it
    /// ([`crate::trust::proposal`]): its cached listing (and the digests
    /// beside it) left out when a baseline is recorded, kept when none is
    /// (a row from before baselines, whose baseline is derived from that
    /// listing). A cold start asks this of every server it connects: a
    /// cached listing can be megabytes, and this default reads it whole.
    async fn get_for_trust(&self, id: &str) -> Result<Option<PersistedServer>, StoreError> {
        self.get(id).await
    }

    /// Inserts or updates `row` and returns the baseline **now in force**,
    /// which the caller must enforce instead of its own.
    ///
    /// `name`, `type`, `url` and `tools` are overwritten. `tool_fingerprints`
    /// is only a proposal: it is recorded when the row has no baseline yet
    /// and ignored otherwise, and a save without one never erases one. When
    /// two savers race on a new row, exactly one proposal is recorded and
    /// both get it back. When the row's `tools` fingerprint to exactly the
    /// baseline in force and no trusted definitions are kept yet, they are
    /// kept as [`Store::trusted_tools`]. A save that would change nothing
    /// (name, transport, endpoint and cache stored already as given, a
    /// baseline recorded and definitions kept for it) writes nothing: a
    /// restart's cold start finds most servers as it left them.
    async fn save(&self, row: &PersistedServer) -> Result<Option<Fingerprints>, StoreError>;

    /// Saves every row as [`Store::save`] would, returning the baselines in
    /// force in row order. The SQL backends write them in one transaction
    /// (one commit for a cold start's whole catalogue instead of one per
    /// server; nothing is saved when one row fails); this default saves
    /// them one by one.
    async fn save_all(
        &self,
        rows: &[PersistedServer],
    ) -> Result<Vec<Option<Fingerprints>>, StoreError> {
        let mut in_force = Vec::with_capacity(rows.len());
        for row in rows {
            in_force.push(self.save(row).await?);
        }
        Ok(in_force)
    }

    /// Deletes the row and its trusted definitions; true when a row existed.
    async fn remove(&self, id: &str) -> Result<bool, StoreError>;

    /// The definitions the baseline was recorded from (written once, with the
    /// baseline; cleared by [`retrust`]), for showing an operator what
    /// drifted. `None` when none are kept or they no longer parse.
    async fn trusted_tools(&self, id: &str) -> Result<Option<Vec<Tool>>, StoreError>;

    /// The durable effect log.
    fn effects(&self) -> &dyn EffectLog;

    /// The audit trail of calls.
    fn audit(&self) -> &dyn AuditLog;

    /// The upstreams' OAuth grants, sealed by their keeper.
    fn grants(&self) -> &dyn GrantLog;
}

/// Clears a server's baseline so the next connect records a new one from
/// what the server publishes then: the only sanctioned way to replace a
/// baseline. Finds the row (`false` when there is none), removes it (with its
/// trusted definitions) and saves it back without fingerprints, keeping the
/// cached listing.
///
/// The cached listing stays, so the next connect's
/// [`PersistedServer::baseline_or_derived`] derives the new baseline from it:
/// the operator accepts the definitions they were shown (the cache, which
/// every reconcile refreshes), not whatever the server answers next.
pub async fn retrust(store: &dyn Store, id: &str) -> Result<bool, StoreError> {
    let Some(mut row) = store.get(id).await? else {
        return Ok(false);
    };
    store.remove(id).await?;
    row.tool_fingerprints = None;
    store.save(&row).await?;
    Ok(true)
}

/// Whether `tools` are the definitions `baseline` was computed from: the
/// condition for keeping them as trusted definitions. Only the baseline's
/// tool part counts: its pins of prompts and resources
/// ([`portcullis_catalog::pins`]) say nothing about tools, and the pinned
/// text of those is kept inside the baseline itself. `digests` are the
/// tools' fingerprints in order ([`PersistedServer::digests_of`], computed
/// once per save for this and the digests column alike).
pub(crate) fn defines(
    tools: Option<(&[Tool], &[String])>,
    baseline: Option<&Fingerprints>,
) -> bool {
    match (tools, baseline) {
        (Some((tools, digests)), Some(baseline)) => {
            // `fingerprint_listing(tools)`, from digests already computed.
            let listed: Fingerprints = tools
                .iter()
                .zip(digests)
                .map(|(tool, digest)| (tool.name.clone(), digest.clone()))
                .collect();
            listed == *tool_part(baseline)
        }
        _ => false,
    }
}
