//! Retention of the audit trail and the effect log: `serve` deletes what is
//! older than `[gateway] audit_retention_days` and `effects_retention_days`
//! from the gateway's one store, once at start and then about every
//! [`INTERVAL`], so a long-running gateway's SQLite file or PostgreSQL
//! tables stop growing without bound.
//!
//! * **Two windows.** The audit trail holds argument *shapes*, never
//!   values, and is read to answer "who called what, when": kept for a
//!   month by default. The effect log holds tool *results* (values, which
//!   may carry personal data) and exists only so a replayed turn is not run
//!   twice; a turn is replayed within minutes or hours, so a week is
//!   plenty. `0` keeps a log forever.
//! * **Several replicas.** Replicas sharing PostgreSQL each prune: the
//!   delete is one `DELETE … WHERE time < cutoff` per table (the store's
//!   `prune_before`), which is safe to run concurrently (a row is deleted
//!   once; the other replica's statement counts it as not there). Each
//!   round's wait is jittered (±25%), so replicas started together drift
//!   apart instead of deleting in lockstep.
//! * **Failures** are warnings: pruning never stops serving, and the next
//!   round tries again.
//! * **Reloads.** Each round prunes the store and windows of the generation
//!   in force (`Gateway::store`, which a reload may replace); a reload that
//!   brings another store or other windows is pruned at once.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use portcullis_store::Store;

use crate::config::Config;
use crate::reload::Live;

/// About how long between two rounds (each wait is jittered by ±25%).
pub const INTERVAL: Duration = Duration::from_secs(3600);

/// How long records are kept; `None`: forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// The audit trail's window.
    pub audit: Option<Duration>,
    /// The effect log's window.
    pub effects: Option<Duration>,
}

impl Retention {
    /// The windows `config` sets.
    pub fn of(config: &Config) -> Retention {
        Retention {
            audit: config.gateway.audit_retention,
            effects: config.gateway.effects_retention,
        }
    }
}

/// What one round deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Audit records deleted.
    pub audit: u64,
    /// Effect-log records deleted.
    pub effects: u64,
}

/// Deletes from `store` every record older than its window, as of `now`.
/// A failing log is warned about and counted as nothing deleted.
pub async fn prune(store: &dyn Store, retention: Retention, now: SystemTime) -> Pruned {
    let cutoff = |window: Option<Duration>| window.and_then(|w| now.checked_sub(w));
    let mut pruned = Pruned::default();
    if let Some(cutoff) = cutoff(retention.audit) {
        match store.audit().prune_before(cutoff).await {
            Ok(n) => pruned.audit = n,
            Err(error) => tracing::warn!(%error, "could not prune the audit trail"),
        }
    }
    if let Some(cutoff) = cutoff(retention.effects) {
        match store.effects().prune_before(cutoff).await {
            Ok(n) => pruned.effects = n,
            Err(error) => tracing::warn!(%error, "could not prune the effect log"),
        }
    }
    pruned
}

/// Prunes the current generation's store now, then about every
/// [`INTERVAL`] and whenever a reload changes the store or the windows.
/// Runs until the task is dropped.
pub async fn watch(live: Arc<Live>) {
    let mut swaps = live.watch_swaps();
    let mut last: Option<(Arc<dyn Store>, Retention)> = None;
    let mut next = tokio::time::Instant::now();
    loop {
        let (store, retention) = {
            let generation = live.current();
            (
                generation.gateway.store.clone(),
                Retention::of(&generation.config),
            )
        };
        let same = last
            .as_ref()
            .is_some_and(|(s, r)| Arc::ptr_eq(s, &store) && *r == retention);
        if !same || tokio::time::Instant::now() >= next {
            round(store.as_ref(), retention).await;
            last = Some((store, retention));
            next = tokio::time::Instant::now() + jittered(INTERVAL);
        }
        // A reload that changes nothing here does not postpone the round.
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            changed = swaps.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// One round, logged.
async fn round(store: &dyn Store, retention: Retention) {
    if retention.audit.is_none() && retention.effects.is_none() {
        tracing::info!("retention: the audit trail and the effect log are kept forever");
        return;
    }
    let pruned = prune(store, retention, SystemTime::now()).await;
    if pruned == Pruned::default() {
        tracing::debug!("retention: nothing older than the windows");
    } else {
        tracing::info!(
            audit = pruned.audit,
            effects = pruned.effects,
            "retention: pruned records older than the windows"
        );
    }
}

/// `interval` give or take a random quarter of it.
fn jittered(interval: Duration) -> Duration {
    // A fresh `RandomState` is randomly keyed: randomness enough to spread
    // replicas, with no dependency.
    let random = RandomState::new().hash_one(SystemTime::now());
    let quarter = interval / 4;
    let span = quarter.as_millis().saturating_mul(2).max(1);
    let offset = Duration::from_millis((u128::from(random) % span) as u64);
    interval - quarter + offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_a_quarter() {
        for _ in 0..100 {
            let wait = jittered(INTERVAL);
            assert!(
                wait >= INTERVAL * 3 / 4 && wait <= INTERVAL * 5 / 4,
                "{wait:?}"
            );
        }
    }
}
