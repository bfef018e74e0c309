//! Reopening a connection that closed on its own: a stdio child that
//! exited or crashed, a legacy SSE stream that ended, any transport rmcp
//! gave up on. rmcp never reconnects a running service, so each source has
//! a supervisor task that waits for its connection to end and then builds
//! a new one.
//!
//! The rules:
//!
//! * **Backoff.** [`crate::options::Backoff`]: the first attempt after
//!   `initial`, then doubling to `max`, each delay with up to a quarter of
//!   jitter (so servers that died together do not all come back on the
//!   same tick); back to `initial` once a connection stayed up a while.
//!   Attempts never stop while the toolset lives.
//! * **Same guard as a reconcile.** The new connection is opened as a cold
//!   start opens one (the plugin launch checks, the host guard, the
//!   handshake credential), its tools listed, and the listing run through
//!   [`crate::reconcile::settle`] against the baseline the store holds:
//!   the cache moves, a baseline is only ever proposed while none is
//!   recorded, so a server that came back with a rewritten tool has it
//!   quarantined exactly as a reconcile would. The snapshot is swapped
//!   (its routes must reach the new connection) and announced on
//!   [`crate::Toolset::watch_catalogue`] only when the tool map changed.
//! * **Never a replay.** rmcp fails every request pending on the closed
//!   connection at once ([`crate::CallError::ConnectionLost`]); nothing is
//!   sent again. A call that arrives while the server is down is refused at
//!   once with [`crate::CallError::Reconnecting`].
//! * **Ends that were asked for stay ends.** A connection closed by
//!   [`crate::Toolset::close`], replaced by [`crate::Toolset::reconfigure`]
//!   or rejected by its server (401/403) is not reopened; closing the
//!   toolset stops every supervisor at once, an attempt under way included
//!   (its half-open connection is closed, its child killed).
//! * The notices of the closed connection (who listens, where log messages
//!   go) carry over to the new one, and what the passthrough had open on
//!   it (the list-changes listen, subscribed URIs) is opened again
//!   (`crate::passthrough::resume`).
//! * **A server that failed to connect** at the start (or at a
//!   reconfigure) is tried again in the background with the same backoff
//!   ([`join_later`]); when it connects it is trusted or held to its
//!   baseline exactly as a cold start would, joins the tool map (a swap,
//!   announced), and is supervised from then on. A reconfigure stops these
//!   retries and starts its own for the servers it could not connect.
//! * **A server still connecting at the start deadline**
//!   ([`crate::ConnectOptions::start_deadline`]) finishes that first attempt
//!   in the background ([`finish_later`]) and joins the same way; if the
//!   attempt fails, it is retried as above. A reconfigure or closing the
//!   toolset stops the attempt (its child killed).

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;

use crate::config::McpServerConfig;
use crate::connection::Connection;
use crate::health::Retry;
use crate::open::{Attempted, http_client, try_cold_source, try_open};
use crate::options::Backoff;
use crate::toolset::Inner;

/// Starts the supervisor of the source `id`, whose connection is
/// `connection`. Does nothing when reconnecting is off.
pub(crate) fn supervise(inner: &Arc<Inner>, id: &str, connection: &Arc<Connection>) {
    if !backoff(inner).enabled() {
        return;
    }
    connection.health().set_supervised(true);
    let run = run(
        Arc::downgrade(inner),
        id.to_owned(),
        connection.server().to_owned(),
        Arc::downgrade(connection),
    );
    let stop = inner.stop.clone();
    inner.supervisors.spawn(async move {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = run => {}
        }
    });
}

/// Starts a supervisor for every source.
pub(crate) fn supervise_all(inner: &Arc<Inner>) {
    let sources: Vec<(String, Arc<Connection>)> = inner
        .sources()
        .iter()
        .map(|s| (s.id.clone(), s.connection.clone()))
        .collect();
    for (id, connection) in sources {
        supervise(inner, &id, &connection);
    }
}

/// Retries the server `config` (row id `id`), which failed to connect, in
/// the background until it connects, the toolset closes, or a reconfigure
/// takes it over ([`stop_pending`]). Does nothing when reconnecting is off.
pub(crate) fn join_later(inner: &Arc<Inner>, id: String, config: McpServerConfig) {
    if !backoff(inner).enabled() {
        return;
    }
    let token = inner.stop.child_token();
    let replaced = inner
        .pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(id.clone(), token.clone());
    if let Some(previous) = replaced {
        previous.cancel();
    }
    let run = join(Arc::downgrade(inner), id, config, token.clone());
    inner.supervisors.spawn(async move {
        tokio::select! {
            _ = token.cancelled() => {}
            _ = run => {}
        }
    });
}

/// Stops every background retry of a server that failed to connect (a
/// reconfigure connects them itself).
pub(crate) fn stop_pending(inner: &Inner) {
    let pending =
        std::mem::take(&mut *inner.pending.lock().unwrap_or_else(PoisonError::into_inner));
    for token in pending.into_values() {
        token.cancel();
    }
}

/// The retries of one server that failed to connect.
async fn join(inner: Weak<Inner>, id: String, config: McpServerConfig, token: CancellationToken) {
    let server = config.name().to_owned();
    let mut delay: Option<Duration> = None;
    let mut attempt: u32 = 0;
    loop {
        attempt = attempt.saturating_add(1);
        let policy = match inner.upgrade() {
            Some(inner) => backoff(&inner),
            None => return,
        };
        let current = delay.unwrap_or(policy.initial);
        let wait = jittered(current);
        log_retry(&server, "is not connected: connect", attempt, wait);
        tokio::time::sleep(wait).await;
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if strong.closed.load(Ordering::Acquire) {
            return;
        }
        let options = strong
            .reopen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let http = http_client(&options);
        let attempted = try_cold_source(
            config.clone(),
            id.clone(),
            &options,
            &strong.diagnostics,
            http,
        )
        .await;
        let source = match attempted {
            Ok(source) => source,
            Err(diagnostic) => {
                tracing::warn!(
                    server = %server,
                    attempt,
                    "upstream \"{server}\" connect attempt {attempt} failed: {}",
                    diagnostic.message
                );
                delay = Some(policy.next(current));
                continue;
            }
        };
        admit(&strong, &id, source, &token, attempt).await;
        return;
    }
}

/// Adds `source`, a server that connected after the toolset was built (its
/// listing already settled against its baseline), to the tool map and
/// supervises it from then on — unless the toolset closed, `token` was
/// cancelled (a reconfigure took the server over) or the server is already
/// there, in which case the new connection is closed.
async fn admit(
    inner: &Arc<Inner>,
    id: &str,
    source: crate::state::Source,
    token: &CancellationToken,
    attempt: u32,
) {
    let server = source.config.name().to_owned();
    let connection = source.connection.clone();
    let joined = {
        let mut sources = inner.sources();
        let wanted = !inner.closed.load(Ordering::Acquire)
            && !token.is_cancelled()
            && !sources.iter().any(|s| s.id == id);
        if wanted {
            sources.push(source);
            inner.reproject(&sources);
            // Ours: a newer entry would have cancelled `token`.
            inner
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id);
        }
        wanted
    };
    if !joined {
        connection.close().await;
        return;
    }
    tracing::info!(server = %server, attempt, "upstream \"{server}\" connected and joined the tool map");
    crate::passthrough::adopt(
        &crate::Toolset {
            inner: inner.clone(),
        },
        &connection,
    );
    supervise(inner, id, &connection);
}

/// Lets the first connection attempts still under way at `connect`'s start
/// deadline (`running`; `late` names each by row id and server, with the
/// token that stops it) finish in the background: one that connects joins
/// the tool map ([`admit`]); one that fails is reported and retried like
/// any server that failed to connect ([`join_later`]). A reconfigure stops
/// them ([`stop_pending`]) and so does closing the toolset.
pub(crate) fn finish_later(
    inner: &Arc<Inner>,
    mut running: FuturesUnordered<BoxFuture<'static, Attempted>>,
    late: Vec<(String, String, CancellationToken)>,
) {
    {
        let mut pending = inner.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let mut starting = inner
            .starting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (id, server, token) in &late {
            pending.insert(id.clone(), token.clone());
            starting.insert(server.clone());
        }
    }
    let tokens: std::collections::HashMap<String, CancellationToken> =
        late.into_iter().map(|(id, _, token)| (id, token)).collect();
    let weak = Arc::downgrade(inner);
    let stop = inner.stop.clone();
    inner.supervisors.spawn(async move {
        let drain = async {
            while let Some(attempted) = running.next().await {
                let Some(strong) = weak.upgrade() else { return };
                let server = attempted.config.name().to_owned();
                strong
                    .starting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&server);
                let Some(token) = tokens.get(&attempted.id) else {
                    continue;
                };
                match attempted.outcome {
                    // Stopped: whoever stopped it connects the server.
                    None => {}
                    Some(Ok(source)) => admit(&strong, &attempted.id, source, token, 1).await,
                    Some(Err(diagnostic)) => {
                        tracing::warn!(
                            server = %server,
                            "upstream \"{server}\" failed to connect: {}",
                            diagnostic.message
                        );
                        strong.diagnostics.report(diagnostic);
                        if !token.is_cancelled() {
                            join_later(&strong, attempted.id, attempted.config);
                        }
                    }
                }
            }
        };
        tokio::select! {
            _ = stop.cancelled() => {}
            () = drain => {}
        }
    });
}

/// The backoff in force (a reconfigure may have changed it).
fn backoff(inner: &Inner) -> Backoff {
    inner
        .reopen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .reconnect
}

/// Whether `connection` is still the one the source `id` routes to.
fn is_current(inner: &Inner, id: &str, connection: &Arc<Connection>) -> bool {
    !inner.closed.load(Ordering::Acquire)
        && inner
            .sources()
            .iter()
            .any(|s| s.id == id && Arc::ptr_eq(&s.connection, connection))
}

/// `delay` plus up to a quarter of it, at random.
pub(crate) fn jittered(delay: Duration) -> Duration {
    let quarter = u64::try_from(delay.as_millis() / 4).unwrap_or(u64::MAX);
    if quarter == 0 {
        return delay;
    }
    // A fresh `RandomState` is randomly keyed: enough randomness for
    // spreading retries, without a dependency.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    delay + Duration::from_millis(random % (quarter + 1))
}

/// What one attempt came to.
enum Attempt {
    /// The new connection is in the source.
    Installed(Arc<Connection>),
    /// It failed; the reason, for the log.
    Failed(String),
    /// The source is gone, replaced or closed: nothing to reopen.
    Stop,
}

/// One supervisor: waits for the connection to end, then reopens it until
/// an attempt succeeds, and waits again. Holds the toolset and the
/// connection only weakly, so neither is kept alive by it (a replaced
/// connection is closed when its last call lets go of it).
async fn run(inner: Weak<Inner>, id: String, server: String, mut current: Weak<Connection>) {
    let Some(first) = current.upgrade() else {
        return;
    };
    let mut ended = first.ended();
    drop(first);
    let mut opened = Instant::now();
    let mut delay: Option<Duration> = None;
    loop {
        ended.cancelled().await;
        // An end that was asked for, or a connection no longer routed to.
        let Some(old) = current.upgrade() else { return };
        if old.is_closing() || old.health().rejected().is_some() {
            return;
        }
        let policy = {
            let Some(inner) = inner.upgrade() else { return };
            if !is_current(&inner, &id, &old) {
                return;
            }
            backoff(&inner)
        };
        if !policy.enabled() {
            old.health().set_supervised(false);
            return;
        }
        old.health().mark_unavailable();
        // Its tasks (listing watcher, listens) end with it.
        old.shut().await;
        drop(old);
        if delay.is_none() || opened.elapsed() >= policy.stable_after() {
            delay = Some(policy.initial);
        }
        let mut attempt: u32 = 0;
        let fresh = loop {
            attempt = attempt.saturating_add(1);
            let wait = jittered(delay.unwrap_or(policy.initial));
            let Some(old) = current.upgrade() else { return };
            old.health().set_retry(Retry {
                attempt,
                at: Instant::now() + wait,
            });
            drop(old);
            log_retry(&server, "is down: reconnect", attempt, wait);
            tokio::time::sleep(wait).await;
            let Some(strong) = inner.upgrade() else {
                return;
            };
            let Some(old) = current.upgrade() else { return };
            if old.is_closing() || !is_current(&strong, &id, &old) {
                return;
            }
            let outcome = reopen(&strong, &id, &old).await;
            // Doubled after a success too: a server that dies again soon
            // after each reconnect (a crash loop) is retried ever less
            // often, until one connection stays up (see `stable_after`).
            delay = Some(policy.next(delay.unwrap_or(policy.initial)));
            match outcome {
                Attempt::Installed(fresh) => break fresh,
                Attempt::Stop => return,
                Attempt::Failed(reason) => {
                    tracing::warn!(
                        server = %server,
                        attempt,
                        "upstream \"{server}\" reconnect attempt {attempt} failed: {reason}"
                    );
                }
            }
        };
        tracing::info!(server = %server, attempt, "upstream \"{server}\" reconnected");
        if let Some(strong) = inner.upgrade() {
            let toolset = crate::Toolset { inner: strong };
            crate::passthrough::resume(&toolset, &fresh).await;
        }
        current = Arc::downgrade(&fresh);
        ended = fresh.ended();
        opened = Instant::now();
    }
}

/// One attempt: open, list, settle the listing against the baseline, and
/// swap the new connection in for `old` — unless the toolset closed or
/// `old` was replaced meanwhile, in which case the new one is closed.
async fn reopen(inner: &Arc<Inner>, id: &str, old: &Arc<Connection>) -> Attempt {
    let found = inner
        .sources()
        .iter()
        .find(|s| s.id == id && Arc::ptr_eq(&s.connection, old))
        .map(|s| {
            (
                s.config.clone(),
                s.identity.clone(),
                s.recorded,
                s.baseline.clone(),
            )
        });
    let Some((config, identity, recorded, baseline)) = found else {
        return Attempt::Stop;
    };
    let name = config.name().to_owned();
    let options = inner
        .reopen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let http = http_client(&options);
    let notices = old.notices().clone();
    let connected = match try_open(&config, &options, &inner.diagnostics, http, Some(notices)).await
    {
        Ok(connected) => connected,
        Err(diagnostic) => return Attempt::Failed(diagnostic.message),
    };
    let connection = Arc::new(connected.connection);
    let fresh = connected.tools;
    let settled = crate::relist::settle(
        inner,
        id,
        &identity,
        &name,
        recorded,
        baseline,
        &fresh,
        &connection,
    )
    .await;
    let installed = crate::relist::apply(inner, id, Some((old, &connection)), fresh, settled);
    if installed {
        supervised(&connection);
        Attempt::Installed(connection)
    } else {
        connection.close().await;
        Attempt::Stop
    }
}

/// Marks a connection the supervisor now watches.
fn supervised(connection: &Arc<Connection>) {
    connection.health().set_supervised(true);
}

/// Logs a retry's schedule, one line per event: the first retry is
/// announced (WARN); after that each failed attempt logs its own line, so
/// the schedule is DEBUG. `state` reads "is down: reconnect" or "is not
/// connected: connect".
fn log_retry(server: &str, state: &str, attempt: u32, wait: Duration) {
    let next_try_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    if attempt == 1 {
        tracing::warn!(
            server = %server,
            attempt,
            next_try_ms,
            "upstream \"{server}\" {state} attempt {attempt}, next try in {next_try_ms} ms"
        );
    } else {
        tracing::debug!(
            server = %server,
            attempt,
            next_try_ms,
            "upstream \"{server}\" {state} attempt {attempt}, next try in {next_try_ms} ms"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_adds_at_most_a_quarter() {
        let base = Duration::from_millis(400);
        for _ in 0..100 {
            let delay = jittered(base);
            assert!(delay >= base && delay <= base + Duration::from_millis(100));
        }
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn delays_double_to_the_cap() {
        let backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(1));
        let mut delay = backoff.initial;
        let mut seen = vec![delay];
        for _ in 0..4 {
            delay = backoff.next(delay);
            seen.push(delay);
        }
        let ms: Vec<u128> = seen.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [250, 500, 1000, 1000, 1000]);
        assert!(!Backoff::NEVER.enabled());
        assert!(Backoff::default().enabled());
    }
}
