//! Trust on first use, through the store: the baselines recorded for the
//! configured upstreams are handed to the connector (so a drifted tool is
//! quarantined), and a server connected for the first time has its current
//! fingerprints recorded as its baseline. A recorded baseline is never
//! rewritten here (the store keeps the first one whatever it is handed).

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context as _;
use portcullis_catalog::ServerIdentity;
use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_store::{PersistedServer, Store, StoreSpec};
use portcullis_upstream::{McpServerConfig, Toolset};

use crate::config::{Config, StoreChoice};

/// Opens the store `[gateway] store` names, in `[gateway] data_dir`.
pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let spec = match &config.gateway.store {
        StoreChoice::Sqlite => StoreSpec::Sqlite(None),
        StoreChoice::Memory => StoreSpec::Memory,
        StoreChoice::Postgres(url) => StoreSpec::Postgres(url.expose().to_owned()),
    };
    portcullis_store::open(&spec, &config.gateway.data_dir)
        .await
        .with_context(|| {
            format!(
                "cannot open the store (data_dir {})",
                config.gateway.data_dir.display()
            )
        })
}

/// The baselines recorded for these servers, by identity. A row recorded for
/// a different endpoint under the same name is ignored (that is a different
/// server).
pub async fn baselines(
    store: &dyn Store,
    servers: &[McpServerConfig],
) -> anyhow::Result<HashMap<ServerIdentity, Fingerprints>> {
    let mut found = HashMap::new();
    for server in servers {
        let identity = server.identity();
        let Some(row) = store
            .get(server.name())
            .await
            .context("cannot read the trust baselines")?
        else {
            continue;
        };
        if row.url != PersistedServer::endpoint_key(&identity.endpoint) {
            tracing::warn!(
                server = server.name(),
                "the stored baseline belongs to another endpoint; not applied"
            );
            continue;
        }
        if let Some(baseline) = row.tool_fingerprints.clone() {
            found.insert(identity, baseline);
        }
    }
    Ok(found)
}

/// Records the current fingerprints of every connected server that had no
/// baseline yet (trust on first use).
pub async fn record_first_trust(
    store: &dyn Store,
    servers: &[McpServerConfig],
    known: &HashMap<ServerIdentity, Fingerprints>,
    toolset: &Toolset,
) -> anyhow::Result<()> {
    for server in servers {
        let identity = server.identity();
        if known.contains_key(&identity) {
            continue;
        }
        let Some(summary) = toolset
            .catalogue()
            .servers()
            .iter()
            .find(|s| s.identity == identity)
        else {
            continue; // not connected: nothing to trust
        };
        let row = PersistedServer::new(server.name(), &identity)
            .with_fingerprints(summary.fingerprints.clone());
        store
            .save(&row)
            .await
            .context("cannot record a trust baseline")?;
        tracing::info!(
            server = server.name(),
            "trusted on first use; baseline recorded"
        );
    }
    Ok(())
}
