//! The background half of a wake (`crate::wake`): every server projected
//! from the store's cache is connected and listed, its live listing settled
//! against the baseline ([`settle`]: the cache is saved, the baseline kept)
//! and the server joins the toolset's sources, the corrected tool map
//! swapped in (announced when it moved). Until then the server has no
//! connection, so no call reaches it. A reconnect (`crate::supervisor`)
//! settles and applies its fresh listing through the same two steps
//! ([`settle`], [`apply`]).
//!
//! A server whose first attempt fails is a `connection-failure`
//! diagnostic; its cached tools stay listed, calls to them are refused as
//! unavailable, and it is retried with the reconnect backoff until it
//! joins (or, with reconnecting off, its tools leave the map). A closed
//! toolset, or a reconfigure that took the server over, stops it. Nothing
//! here fails the toolset.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use futures::future::join_all;
use portcullis_catalog::ServerIdentity;
use portcullis_catalog::fingerprint::Fingerprints;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::connection::{Connected, Connection};
use crate::open::{http_client, try_open};
use crate::state::Source;
use crate::toolset::Inner;
use crate::trust::wake_failure;

/// Connects every server still waking in the background; `done` turns
/// `true` once each one's first attempt has ended.
pub(crate) fn spawn(inner: &Arc<Inner>, done: watch::Sender<bool>) {
    let woken: Vec<(String, CancellationToken)> = inner
        .waking()
        .iter()
        .map(|w| (w.id.clone(), w.settled.clone()))
        .collect();
    for (id, settled) in &woken {
        let run = wake_one(Arc::downgrade(inner), id.clone(), settled.clone());
        let stop = inner.stop.clone();
        // The token fires however the task ends (closed, dropped), so a call
        // waiting for the server never waits for a task that is gone.
        let guard = settled.clone().drop_guard();
        inner.supervisors.spawn(async move {
            let _guard = guard;
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = run => {}
            }
        });
    }
    tokio::spawn(async move {
        join_all(woken.iter().map(|(_, settled)| settled.cancelled())).await;
        done.send_replace(true);
    });
}

/// One waking server: attempts until it joins the sources, the toolset
/// closes, or its entry is gone (a reconfigure took it over). Holds the
/// toolset weakly between attempts.
async fn wake_one(inner: Weak<Inner>, id: String, settled: CancellationToken) {
    let mut delay: Option<Duration> = None;
    let mut attempt: u32 = 0;
    loop {
        attempt = attempt.saturating_add(1);
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let found = strong.waking().iter().find(|w| w.id == id).map(|w| {
            (
                w.config.clone(),
                w.identity.clone(),
                w.recorded,
                w.baseline.clone(),
            )
        });
        let Some((config, identity, recorded, baseline)) = found else {
            return;
        };
        if strong.closed.load(Ordering::Acquire) {
            return;
        }
        let name = config.name().to_owned();
        let options = strong
            .reopen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let http = http_client(&options);
        // Listed live (no `known` listing): the drift guard needs it.
        let opened = try_open(&config, &options, &strong.diagnostics, http, None).await;
        let connected = match opened {
            Ok(connected) => connected,
            Err(diagnostic) => {
                if strong.closed.load(Ordering::Acquire) {
                    return;
                }
                let policy = options.reconnect;
                if attempt == 1 {
                    strong
                        .diagnostics
                        .report(wake_failure(&name, &diagnostic.message));
                    if !policy.enabled() {
                        withdraw(&strong, &id);
                        settled.cancel();
                        return;
                    }
                    settled.cancel();
                } else {
                    tracing::warn!(
                        server = %name,
                        attempt,
                        "upstream \"{name}\" connect attempt {attempt} failed: {}",
                        diagnostic.message
                    );
                }
                let current = delay.unwrap_or(policy.initial);
                delay = Some(policy.next(current));
                drop(strong);
                tokio::time::sleep(crate::supervisor::jittered(current)).await;
                continue;
            }
        };
        let joined = join(
            &strong, &id, &identity, &name, recorded, baseline, connected,
        )
        .await;
        settled.cancel();
        if let Some(connection) = joined {
            crate::passthrough::adopt(
                &crate::Toolset {
                    inner: strong.clone(),
                },
                &connection,
            );
            crate::supervisor::supervise(&strong, &id, &connection);
        }
        return;
    }
}

/// Settles a woken server's live listing against its baseline and moves it
/// from the waking servers to the sources, swapping the tool map in (and
/// announcing it when it moved). `None`, with the connection closed, when
/// the toolset closed or the server is no longer waking meanwhile.
async fn join(
    inner: &Inner,
    id: &str,
    identity: &ServerIdentity,
    name: &str,
    recorded: bool,
    baseline: Option<Fingerprints>,
    connected: Connected,
) -> Option<Arc<Connection>> {
    let connection = Arc::new(connected.connection);
    let fresh = connected.tools;
    let (in_force, now_recorded) = crate::relist::settle(
        inner,
        id,
        identity,
        name,
        recorded,
        baseline,
        &fresh,
        &connection,
    )
    .await;
    let joined = {
        let mut sources = inner.sources();
        let woken = {
            let mut waking = inner.waking();
            let index = waking.iter().position(|w| w.id == id);
            match index {
                Some(index) if !inner.closed.load(Ordering::Acquire) => Some(waking.remove(index)),
                _ => None,
            }
        };
        match woken {
            Some(woken) => {
                let same = crate::relist::same_listing(&woken.tools, &fresh);
                let changed = !same || woken.baseline != in_force;
                // Unchanged, the cached listing stays: the map projected
                // from it already shares it.
                let tools = if same { woken.tools } else { fresh.into() };
                sources.push(Source {
                    id: woken.id,
                    config: woken.config,
                    identity: woken.identity,
                    filter: woken.filter,
                    classification: woken.classification,
                    tools,
                    baseline: in_force,
                    recorded: now_recorded,
                    connection: connection.clone(),
                });
                // Swapped in before `settled` fires: a waiting call then
                // finds the server's connection and the checked map. An
                // unchanged server only gains its route: re-projecting every
                // server's tools once per server that joins would cost a
                // wake of many servers seconds.
                if changed {
                    inner.swap(&sources, true);
                } else {
                    inner.relink(&sources);
                }
                true
            }
            None => false,
        }
    };
    if joined {
        Some(connection)
    } else {
        connection.close().await;
        None
    }
}

/// Takes a server that will not be retried out of the tool map.
fn withdraw(inner: &Inner, id: &str) {
    let sources = inner.sources();
    let removed = {
        let mut waking = inner.waking();
        let before = waking.len();
        waking.retain(|w| w.id != id);
        waking.len() != before
    };
    if removed && !inner.closed.load(Ordering::Acquire) {
        inner.reproject(&sources);
    }
}
