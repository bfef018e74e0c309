//! The store behind trust on first use. The connector does the rest
//! ([`portcullis_upstream::ConnectOptions::with_store`]): it records each
//! upstream's catalogue cache and, the first time it is seen, its baseline,
//! and enforces the baseline the store keeps (so a drifted tool is
//! quarantined). A recorded baseline is never rewritten; `retrust` is the
//! only way to replace it.

use std::sync::Arc;

use anyhow::Context as _;
use portcullis_store::{Store, StoreSpec};

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
