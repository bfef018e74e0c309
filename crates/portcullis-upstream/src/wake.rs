//! Waking from the store: [`rebuild_from_store`] projects the tool map from
//! each server's cached listing before asking any server for one, then
//! checks the cache in the background ([`crate::Toolset::reconciled`]).

use futures::future::join_all;
use tokio::sync::watch;

use crate::config::McpServerConfig;
use crate::error::WiringError;
use crate::options::ConnectOptions;
use crate::report::DiagnosticSink;
use crate::state::Source;
use crate::toolset::{Toolset, assemble, check_wiring, http_client, open_server, source};
use crate::trust::{config_mismatch, matches, no_matching_config, row_ids};

/// Rebuilds a toolset from the store in `options` (a wake).
///
/// Every stored row is matched to the configured server whose effective
/// name is the row's id; the config supplies what the store never holds
/// (headers, env, credentials). Each matching server is connected with the
/// **handshake only** and projected from the row's cached listing, guarded
/// by the row's baseline (recorded, or derived from that cached listing): no
/// `tools/list` is on the path to a usable tool map. A background reconcile
/// then re-lists every server, corrects the tool map in place when a listing
/// moved (re-running the drift guard), refreshes the cache and keeps the
/// baseline; [`Toolset::reconciled`] resolves when it is done.
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
///   projects no tools until the reconcile lists them.
/// * A matching server that cannot be connected is a diagnostic and, unless
///   [`ConnectOptions::reconnect`] is off, is retried in the background
///   like a server that failed a cold start.
///
/// Errors: the wiring mistakes of [`crate::connect`], no store
/// ([`WiringError::StoreRequired`]), and a store that cannot be read
/// ([`WiringError::StoreUnreadable`]).
pub async fn rebuild_from_store(
    servers: Vec<McpServerConfig>,
    options: ConnectOptions,
) -> Result<Toolset, WiringError> {
    check_wiring(&options)?;
    let configured = servers.len();
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
    let http = http_client(&options);
    let ids = row_ids(&servers);

    let mut woken = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(index) = ids.iter().position(|id| *id == row.id) else {
            diagnostics.report(no_matching_config(&row.id));
            continue;
        };
        let config = servers[index].clone();
        if !matches(&row, &config.identity()) {
            diagnostics.report(config_mismatch(&row.id));
            continue;
        }
        woken.push((row, config));
    }

    let attempts = woken.into_iter().map(|(row, config)| {
        let options = &options;
        let diagnostics = diagnostics.clone();
        let http = http.clone();
        async move {
            let cached = row.tools.clone().unwrap_or_default();
            let connected = open_server(&config, options, &diagnostics, http, Some(cached)).await;
            let Some(connected) = connected else {
                return Err((config, row.id.clone()));
            };
            Ok(source(
                row.id.clone(),
                config,
                options,
                connected.connection,
                connected.tools,
                row.baseline_or_derived(),
                row.tool_fingerprints.is_some(),
            ))
        }
    });
    let mut sources: Vec<Source> = Vec::new();
    let mut failed = Vec::new();
    for outcome in join_all(attempts).await {
        match outcome {
            Ok(source) => sources.push(source),
            Err(configured) => failed.push(configured),
        }
    }
    let nothing_to_check = sources.is_empty();
    let (done, reconciled) = watch::channel(nothing_to_check);
    let toolset = assemble(sources, configured, &options, diagnostics, reconciled);
    // A server that could not be woken is retried in the background as a
    // cold start (listed, held to the baseline its row keeps).
    for (config, id) in failed {
        crate::supervisor::join_later(&toolset.inner, id, config);
    }
    if !nothing_to_check {
        // Spawned last, with nothing awaited after it: the tool map is
        // handed back before the reconcile can send a request.
        crate::reconcile::spawn(toolset.inner.clone(), done);
    }
    Ok(toolset)
}
