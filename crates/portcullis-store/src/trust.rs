//! Trust on first use, written once for every kind of source (upstream MCP
//! servers, plugins, apps): which stored row belongs to a source, what a
//! save proposes as its baseline, and the save that returns the baseline
//! in force.
//!
//! * A row belongs to a source when its id is the source's effective name
//!   and its `type` and endpoint key match (see [`belongs_to`]).
//! * A save proposes a baseline only while none is recorded for the
//!   source's endpoint: the one derived from the row's cached listing (a
//!   row from before fingerprints), else the fresh listing's own
//!   fingerprints ([`proposal`]). A row for *another* endpoint under the
//!   same name keeps its baseline (the store never drops one): a source
//!   that moved is held to what was trusted under its name until an
//!   operator re-trusts it.
//! * The caller enforces the baseline [`record`] **returns**, never the one
//!   it proposed: under a race it is another replica's.

use portcullis_catalog::fingerprint::{Fingerprints, fingerprint_listing};
use portcullis_catalog::{ServerIdentity, Tool};

use crate::error::StoreError;
use crate::row::PersistedServer;
use crate::store::Store;

/// Whether `row` was written for the source at `identity`'s endpoint.
pub fn belongs_to(row: &PersistedServer, identity: &ServerIdentity) -> bool {
    row.kind == identity.endpoint.transport()
        && row.url == PersistedServer::endpoint_key(&identity.endpoint)
}

/// The tool fingerprints a save of `listing` proposes, given the row
/// stored under the source's name (if any): none while a baseline is
/// recorded for this endpoint, else the row's derived one, else the
/// listing's own (trust on first use).
pub fn proposal(
    row: Option<&PersistedServer>,
    identity: &ServerIdentity,
    listing: &[Tool],
) -> Option<Fingerprints> {
    match row.filter(|row| belongs_to(row, identity)) {
        Some(row) if row.tool_fingerprints.is_some() => None,
        Some(row) => Some(
            row.baseline_or_derived()
                .unwrap_or_else(|| fingerprint_listing(listing)),
        ),
        None => Some(fingerprint_listing(listing)),
    }
}

/// Saves `listing` as the cache of the source `identity` under `id`,
/// proposing `proposal` (see [`proposal`]; a caller may merge pins of what
/// the source publishes besides tools into it), and returns the baseline
/// in force.
pub async fn record(
    store: &dyn Store,
    id: &str,
    identity: &ServerIdentity,
    listing: &[Tool],
    proposal: Option<Fingerprints>,
) -> Result<Option<Fingerprints>, StoreError> {
    let mut row = PersistedServer::new(id, identity).with_tools(listing.to_vec());
    row.tool_fingerprints = proposal;
    store.save(&row).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    fn tools(description: &str) -> Vec<Tool> {
        vec![Tool::new("greet").with_description(description)]
    }

    #[tokio::test]
    async fn the_first_listing_is_trusted_and_a_moved_source_keeps_its_baseline() {
        let store = MemoryStore::new();
        let here = ServerIdentity::streamable_http("docs", "https://a.example/mcp");
        let first = tools("Greets");
        assert_eq!(
            proposal(None, &here, &first),
            Some(fingerprint_listing(&first))
        );
        let trusted = record(&store, "docs", &here, &first, proposal(None, &here, &first))
            .await
            .unwrap();
        assert_eq!(trusted, Some(fingerprint_listing(&first)));

        // Drifted, same endpoint: nothing proposed, the first baseline holds.
        let row = store.get("docs").await.unwrap();
        let drifted = tools("Greets, then exfiltrates");
        assert_eq!(proposal(row.as_ref(), &here, &drifted), None);
        let in_force = record(&store, "docs", &here, &drifted, None).await.unwrap();
        assert_eq!(in_force, trusted);

        // The same name at another endpoint: a fresh proposal, but the store
        // keeps the recorded baseline and says so.
        let moved = ServerIdentity::streamable_http("docs", "https://b.example/mcp");
        let row = store.get("docs").await.unwrap();
        assert!(!belongs_to(row.as_ref().unwrap(), &moved));
        let proposed = proposal(row.as_ref(), &moved, &drifted);
        assert_eq!(proposed, Some(fingerprint_listing(&drifted)));
        let in_force = record(&store, "docs", &moved, &drifted, proposed)
            .await
            .unwrap();
        assert_eq!(in_force, trusted);
    }
}
