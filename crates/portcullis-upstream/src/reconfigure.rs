//! [`Toolset::reconfigure`]: a config reload without a restart. Servers
//! whose config did not change keep their connection (and child process);
//! new ones are connected as in a cold start; removed ones are closed; the
//! tool map is projected again and swapped in like a reconcile's correction.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;

use crate::config::McpServerConfig;
use crate::connection::Connection;
use crate::error::WiringError;
use crate::open::{cold_source, http_client};
use crate::options::ConnectOptions;
use crate::options::check_wiring;
use crate::state::Source;
use crate::toolset::Toolset;
use crate::trust::row_ids;

/// What a reconfigure did, by effective server name (the store's row ids).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconfigured {
    /// Servers whose config is unchanged: their connections were kept.
    pub kept: Vec<String>,
    /// Servers connected now (new, or with a changed config), whether or not
    /// the connection succeeded (a failure is a diagnostic).
    pub connected: Vec<String>,
    /// Servers whose connections were closed (removed, or changed).
    pub closed: Vec<String>,
}

impl Toolset {
    /// Applies a new server list: keeps every connection whose server's
    /// config (name, transport, URL or command line, headers, env) is
    /// unchanged, connects the new and changed ones exactly as
    /// [`crate::connect`] would (listing them, and with a store recording and
    /// enforcing their baselines), swaps in the tool map projected from the
    /// result, and closes the removed and changed connections once the
    /// calls in flight on them have answered (in the background: this
    /// returns without waiting). A call already in flight keeps the snapshot
    /// it started with; the next one sees the new map
    /// ([`Toolset::watch_catalogue`] announces it).
    ///
    /// From `options` it takes the per-server filters (applied to kept
    /// servers too) and what connecting needs (host guard, timeouts,
    /// credentials, store). The policy, session, credential resolver of
    /// calls, projection options and store of the toolset stay those it was
    /// built with: changing those means building a new toolset.
    pub async fn reconfigure(
        &self,
        servers: Vec<McpServerConfig>,
        options: &ConnectOptions,
    ) -> Result<Reconfigured, WiringError> {
        check_wiring(options)?;
        let inner = &self.inner;
        let ids = row_ids(&servers, &inner.projection, &inner.other_sources);
        let identities = servers.iter().map(McpServerConfig::identity).collect();
        let desired: Vec<(McpServerConfig, String)> = servers.into_iter().zip(ids).collect();
        // Servers still retried since they failed are connected here (a
        // retry that already joined is kept like any connection), and
        // retried anew below if they fail again.
        crate::supervisor::stop_pending(inner);
        // So are servers of a wake still connecting: taken out here, so
        // none joins behind this reconfigure's back (its attempt finds its
        // entry gone and closes what it opened); their cached tools stay in
        // the map in force until the swap below.
        let woken = std::mem::take(&mut *inner.waking());
        let fresh: Vec<(McpServerConfig, String)> = {
            let sources = inner.sources();
            desired
                .iter()
                .filter(|(config, id)| !sources.iter().any(|s| &s.id == id && &s.config == config))
                .cloned()
                .collect()
        };
        let mut report = Reconfigured {
            connected: fresh.iter().map(|(_, id)| id.clone()).collect(),
            ..Reconfigured::default()
        };
        let http = http_client(options);
        let attempts = fresh
            .iter()
            .cloned()
            .map(|(config, id)| cold_source(config, id, options, &inner.diagnostics, http.clone()));
        let outcomes = join_all(attempts).await;
        let failed: Vec<(McpServerConfig, String)> = outcomes
            .iter()
            .zip(&fresh)
            .filter(|(outcome, _)| outcome.is_none())
            .map(|(_, configured)| configured.clone())
            .collect();
        let connected: Vec<Source> = outcomes.into_iter().flatten().collect();
        let watched: Vec<(String, Arc<Connection>)> = connected
            .iter()
            .map(|s| (s.id.clone(), s.connection.clone()))
            .collect();
        // New connections are reopened as these options say.
        *inner
            .reopen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = options.clone();

        let mut retired: Vec<Arc<Connection>> = Vec::new();
        {
            let mut sources = inner.sources();
            let mut kept = Vec::with_capacity(sources.len());
            for mut source in sources.drain(..) {
                let wanted = desired
                    .iter()
                    .any(|(config, id)| *id == source.id && *config == source.config);
                if wanted {
                    source.filter = options
                        .server_tools
                        .get(source.config.name())
                        .cloned()
                        .unwrap_or_else(|| options.tools.clone());
                    source.classification = options.classification_of(source.config.name());
                    report.kept.push(source.id.clone());
                    kept.push(source);
                } else {
                    report.closed.push(source.id.clone());
                    retired.push(source.connection.clone());
                }
            }
            kept.extend(connected);
            *sources = kept;
            *inner
                .configured
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = identities;
            inner.reproject(&sources);
        }
        // Calls that waited for a woken server route on the new map.
        for waking in woken {
            waking.settled.cancel();
        }
        for (id, connection) in &watched {
            crate::supervisor::supervise(inner, id, connection);
        }
        for (config, id) in failed {
            crate::supervisor::join_later(inner, id, config);
        }
        // Closed after the swap (the new map no longer routes to them), and
        // only once the calls still running on them have answered: a call
        // keeps the snapshot, and so the connection, it started with.
        for connection in retired {
            tokio::spawn(close_when_idle(connection));
        }
        Ok(report)
    }
}

/// How long a replaced connection waits for its calls in flight before it
/// is closed under them: longer than any sensible call timeout, only a
/// bound against a holder that never lets go.
const RETIRE_PATIENCE: Duration = Duration::from_secs(600);

/// Closes `connection` once nothing but this task holds it (every snapshot
/// a call in flight kept has been dropped), or after [`RETIRE_PATIENCE`].
/// Polled: dropping an `Arc` announces nothing, and a check every 50 ms is
/// cheap next to a reload.
async fn close_when_idle(connection: Arc<Connection>) {
    let deadline = tokio::time::Instant::now() + RETIRE_PATIENCE;
    while Arc::strong_count(&connection) > 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    connection.close().await;
}
