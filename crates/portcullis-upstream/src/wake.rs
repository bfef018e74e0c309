//! Waking from the store: [`rebuild_from_store`] projects the tool map from
//! each server's cached listing without contacting any server, then
//! connects them all in the background ([`crate::Toolset::reconciled`]); a
//! call to a server waits for its connection and the drift guard's check.

use portcullis_catalog::ServerIdentity;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cold_start::assemble;
use crate::config::McpServerConfig;
use crate::error::WiringError;
use crate::options::ConnectOptions;
use crate::options::check_wiring;
use crate::report::DiagnosticSink;
use crate::state::Waking;
use crate::toolset::Toolset;
use crate::trust::{config_mismatch, matches, no_matching_config, row_ids};

/// Rebuilds a toolset from the store in `options` (a wake).
///
/// Every stored row is matched to the configured server whose effective
/// name is the row's id; the config supplies what the store never holds
/// (headers, env, credentials). The tool map is projected from each
/// matching row's cached listing, guarded by the row's baseline (recorded,
/// or derived from that cached listing), and handed back **without
/// contacting any server**: no handshake and no `tools/list` is on the path
/// to a usable tool map, only one read of the store.
///
/// In the background every matching server is then connected (handshake
/// and `tools/list`), and its live listing is compared with the baseline
/// exactly as a cold start's would be: a rewritten tool is quarantined, a
/// withdrawn one leaves the map, an added one is withheld; the cache is
/// refreshed, the baseline kept, and the corrected tool map swapped in and
/// announced ([`Toolset::watch_catalogue`]). [`Toolset::reconciled`]
/// resolves once every server's first attempt has ended.
///
/// **No call reaches a server before that check.** A call to a tool of a
/// server still connecting waits for it (or for the caller's cancellation),
/// then routes on the corrected map: the tool it named may by then be
/// quarantined (refused, never sent) or no longer published.
///
/// * A row with no configured server: `connection-failure` "…has no
///   matching config on wake; supply the server definition again."
/// * A row whose config now has another type or URL (or command line):
///   `connection-failure` "…does not match the supplied config (type or url
///   differ)." — a different endpoint is a different catalogue.
/// * A configured server with no row is not connected, and an empty store
///   gives an empty toolset: a wake rebuilds what was persisted and never
///   falls back to a cold start ([`crate::connect`] is the cold start).
/// * A row whose cache was never written (or was dropped as corrupt)
///   projects no tools until its server lists them.
/// * A server that cannot be connected or listed is a `connection-failure`
///   diagnostic; its cached tools stay listed but every call to them is
///   refused as unavailable while it is retried in the background (unless
///   [`ConnectOptions::reconnect`] is off: then its tools leave the map, as
///   a server that failed a cold start is not in it).
///
/// Errors: the wiring mistakes of [`crate::connect`], no store
/// ([`WiringError::StoreRequired`]), and a store that cannot be read
/// ([`WiringError::StoreUnreadable`]).
pub async fn rebuild_from_store(
    servers: Vec<McpServerConfig>,
    options: ConnectOptions,
) -> Result<Toolset, WiringError> {
    check_wiring(&options)?;
    let configured: Vec<ServerIdentity> = servers.iter().map(McpServerConfig::identity).collect();
    let Some(store) = options.store.clone() else {
        return Err(WiringError::StoreRequired);
    };
    let rows = store
        .list()
        .await
        .map_err(|e| WiringError::StoreUnreadable {
            reason: e.to_string(),
        })?;
    let diagnostics = DiagnosticSink::new(options.on_diagnostic.clone());
    let ids = row_ids(&servers, &options.projection, &options.other_sources);

    let mut waking = Vec::with_capacity(rows.len());
    for mut row in rows {
        let Some(index) = ids.iter().position(|id| *id == row.id) else {
            diagnostics.report(no_matching_config(&row.id));
            continue;
        };
        let config = servers[index].clone();
        if !matches(&row, &config.identity()) {
            diagnostics.report(config_mismatch(&row.id));
            continue;
        }
        // A recorded baseline is moved out of the row, not copied (5 000
        // digests on a large wake); only a row without one derives it.
        let recorded = row.tool_fingerprints.is_some();
        let baseline = match row.tool_fingerprints.take() {
            Some(recorded) => Some(recorded),
            None => row.baseline_or_derived(),
        };
        let filter = options
            .server_tools
            .get(config.name())
            .cloned()
            .unwrap_or_else(|| options.tools.clone());
        waking.push(Waking {
            identity: config.identity(),
            classification: options.classification_of(config.name()),
            filter,
            recorded,
            // The store's own digests of the cache (trusted as the baseline
            // beside them is): see `Waking::digests`.
            digests: row.take_cached_digests(),
            tools: row.tools.unwrap_or_default().into(),
            baseline,
            id: row.id,
            config,
            settled: CancellationToken::new(),
        });
    }
    let nothing_to_check = waking.is_empty();
    let (done, reconciled) = watch::channel(nothing_to_check);
    let toolset = assemble(
        Vec::new(),
        waking,
        configured,
        &options,
        diagnostics,
        reconciled,
    );
    if !nothing_to_check {
        // Spawned last, with nothing awaited after it: the tool map is
        // handed back before any server is contacted.
        crate::reconcile::spawn(&toolset.inner, done);
    }
    Ok(toolset)
}
