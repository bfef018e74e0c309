//! The memory backend: maps behind one mutex, for tests and runs that need
//! no persistence. One lock makes every `save` atomic, which is all the
//! baseline rules need.
//!
//! The audit trail is the one part that grows with every call (about
//! 0.7 KiB a record) and nothing in the process reads it back, so this
//! backend keeps only the newest [`MEMORY_AUDIT_RECORDS`]: a long-running
//! gateway on the memory store does not grow without bound between
//! retention prunes.
//!
//! The effect log grows with every call that carries an idempotency key, and
//! each record holds a whole result, so it is bounded the same way: the
//! newest [`MEMORY_EFFECT_RECORDS`] are kept. Dropping the oldest is what a
//! retention prune does too (a turn replayed after its record is gone calls
//! the server again); the first drop is logged as a warning, since from then
//! on a replay older than the window calls the server again.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;
use portcullis_catalog::Tool;
use portcullis_catalog::fingerprint::Fingerprints;

use crate::audit::{AuditLog, AuditRecord};
use crate::effects::{EffectLog, Outcome, Recorded, ensure_recordable};
use crate::error::{Backend, StoreError};
use crate::grants::{GrantLog, SealedGrant};
use crate::row::PersistedServer;
use crate::store::{Store, defines};
use crate::time::{from_millis, to_millis};

#[derive(Debug, Default)]
struct State {
    servers: BTreeMap<String, PersistedServer>,
    trusted: BTreeMap<String, Vec<Tool>>,
    effects: BTreeMap<String, Recorded>,
    /// The keys of `effects` in order of recording, oldest first.
    effect_order: VecDeque<String>,
    /// In order of recording; at most `MemoryStore::audit_capacity`.
    audit: VecDeque<AuditRecord>,
    grants: BTreeMap<String, SealedGrant>,
}

/// How many audit records the memory backend keeps, newest first out.
pub const MEMORY_AUDIT_RECORDS: usize = 10_000;

/// How many effect-log records the memory backend keeps, oldest first out.
pub const MEMORY_EFFECT_RECORDS: usize = 10_000;

/// A store held in process memory; gone when the process ends.
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
    audit_capacity: usize,
    effect_capacity: usize,
    /// Whether the effect log has dropped a record yet (warned once).
    effects_dropped: AtomicBool,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::with_capacities(MEMORY_AUDIT_RECORDS, MEMORY_EFFECT_RECORDS)
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    fn with_capacities(audit_capacity: usize, effect_capacity: usize) -> Self {
        MemoryStore {
            state: Mutex::default(),
            audit_capacity,
            effect_capacity,
            effects_dropped: AtomicBool::new(false),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-written
        // (each operation is a few map calls), so a poisoned lock is safe.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn backend(&self) -> Backend {
        Backend::Memory
    }

    async fn list(&self) -> Result<Vec<PersistedServer>, StoreError> {
        Ok(self.state().servers.values().cloned().collect())
    }

    async fn get(&self, id: &str) -> Result<Option<PersistedServer>, StoreError> {
        Ok(self.state().servers.get(id).cloned())
    }

    async fn get_for_trust(&self, id: &str) -> Result<Option<PersistedServer>, StoreError> {
        let state = self.state();
        let Some(row) = state.servers.get(id) else {
            return Ok(None);
        };
        if row.tool_fingerprints.is_none() {
            return Ok(Some(row.clone()));
        }
        let trust = PersistedServer::from_columns(
            row.id.clone(),
            row.name.clone(),
            row.kind,
            row.url.clone(),
            None,
            row.tool_fingerprints.clone(),
            None,
        );
        Ok(Some(trust))
    }

    async fn save(&self, row: &PersistedServer) -> Result<Option<Fingerprints>, StoreError> {
        if let Some(reason) = row.refusal() {
            return Err(StoreError::InvalidRow {
                backend: Backend::Memory,
                id: row.id.clone(),
                reason,
            });
        }
        let mut state = self.state();
        let kept = state
            .servers
            .get(&row.id)
            .and_then(|old| old.tool_fingerprints.clone());
        let baseline = kept.or_else(|| row.tool_fingerprints.clone());
        // Rebuilt from named fields: nothing but the six columns and the
        // digests of the cache (computed here, as the SQL stores do) is kept.
        let digests = row.tools.as_deref().map(PersistedServer::digests_of);
        let defined = defines(
            row.tools.as_deref().zip(digests.as_deref()),
            baseline.as_ref(),
        );
        let stored = PersistedServer::from_columns(
            row.id.clone(),
            row.name.clone(),
            row.kind,
            row.url.clone(),
            row.tools.clone(),
            baseline.clone(),
            digests,
        );
        state.servers.insert(row.id.clone(), stored);
        if defined && !state.trusted.contains_key(&row.id) {
            let tools = row.tools.clone().unwrap_or_default();
            state.trusted.insert(row.id.clone(), tools);
        }
        Ok(baseline)
    }

    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let mut state = self.state();
        state.trusted.remove(id);
        Ok(state.servers.remove(id).is_some())
    }

    async fn trusted_tools(&self, id: &str) -> Result<Option<Vec<Tool>>, StoreError> {
        Ok(self.state().trusted.get(id).cloned())
    }

    fn effects(&self) -> &dyn EffectLog {
        self
    }

    fn audit(&self) -> &dyn AuditLog {
        self
    }

    fn grants(&self) -> &dyn GrantLog {
        self
    }
}

#[async_trait]
impl EffectLog for MemoryStore {
    async fn recorded(&self, key: &str) -> Result<Option<Recorded>, StoreError> {
        Ok(self.state().effects.get(key).cloned())
    }

    async fn record_at(
        &self,
        key: &str,
        tool_name: &str,
        outcome: &Outcome,
        at: SystemTime,
    ) -> Result<Recorded, StoreError> {
        ensure_recordable(Backend::Memory, tool_name)?;
        let mut state = self.state();
        if let Some(first) = state.effects.get(key) {
            return Ok(first.clone());
        }
        let recorded = Recorded {
            key: key.to_owned(),
            tool_name: tool_name.to_owned(),
            outcome: outcome.clone(),
            // Stored to the millisecond, as the SQL backends store it.
            recorded_at: from_millis(to_millis(at)),
        };
        let mut dropped = 0usize;
        while state.effect_order.len() >= self.effect_capacity {
            let Some(oldest) = state.effect_order.pop_front() else {
                break;
            };
            state.effects.remove(&oldest);
            dropped += 1;
        }
        state.effects.insert(key.to_owned(), recorded.clone());
        state.effect_order.push_back(key.to_owned());
        drop(state);
        if dropped > 0 && !self.effects_dropped.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                kept = self.effect_capacity,
                "the memory store's effect log is full: its oldest records are dropped, \
                 and a call replayed after its record is gone reaches the server again"
            );
        }
        Ok(recorded)
    }

    async fn prune_before(&self, cutoff: SystemTime) -> Result<u64, StoreError> {
        let cutoff = to_millis(cutoff);
        let mut state = self.state();
        let before = state.effects.len();
        state
            .effects
            .retain(|_, r| to_millis(r.recorded_at) >= cutoff);
        let State {
            effects,
            effect_order,
            ..
        } = &mut *state;
        effect_order.retain(|key| effects.contains_key(key));
        Ok((before - state.effects.len()) as u64)
    }
}

#[async_trait]
impl AuditLog for MemoryStore {
    async fn record(&self, record: &AuditRecord) -> Result<(), StoreError> {
        let mut record = record.clone();
        record.time = from_millis(to_millis(record.time));
        let mut state = self.state();
        if state.audit.len() >= self.audit_capacity {
            state.audit.pop_front();
        }
        state.audit.push_back(record);
        Ok(())
    }

    async fn recent(&self, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        let state = self.state();
        // Newest first by time; among equal times, the later recorded first
        // (a stable sort of the reversed log keeps that order).
        let mut records: Vec<AuditRecord> = state.audit.iter().rev().cloned().collect();
        records.sort_by_key(|r| std::cmp::Reverse(r.time));
        records.truncate(limit);
        Ok(records)
    }

    async fn prune_before(&self, cutoff: SystemTime) -> Result<u64, StoreError> {
        let cutoff = to_millis(cutoff);
        let mut state = self.state();
        let before = state.audit.len();
        state.audit.retain(|r| to_millis(r.time) >= cutoff);
        Ok((before - state.audit.len()) as u64)
    }
}

#[async_trait]
impl GrantLog for MemoryStore {
    async fn put(&self, grant: &SealedGrant) -> Result<(), StoreError> {
        let mut stored = grant.clone();
        // The SQL backends keep milliseconds; so does this one, so every
        // backend reads back the same value.
        stored.updated_at = from_millis(to_millis(grant.updated_at));
        self.state().grants.insert(grant.upstream.clone(), stored);
        Ok(())
    }

    async fn get(&self, upstream: &str) -> Result<Option<SealedGrant>, StoreError> {
        Ok(self.state().grants.get(upstream).cloned())
    }

    async fn remove(&self, upstream: &str) -> Result<bool, StoreError> {
        Ok(self.state().grants.remove(upstream).is_some())
    }

    async fn list(&self) -> Result<Vec<SealedGrant>, StoreError> {
        Ok(self.state().grants.values().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditDecision, AuditOutcome};
    use std::time::Duration;

    #[tokio::test]
    async fn the_audit_trail_keeps_only_the_newest_records() {
        let store = MemoryStore::with_capacities(3, MEMORY_EFFECT_RECORDS);
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        for i in 0..5u64 {
            let record = AuditRecord::new(
                start + Duration::from_secs(i),
                format!("tool{i}"),
                &serde_json::json!({}),
                AuditDecision::Allowed,
                AuditOutcome::Ok,
            );
            store.audit().record(&record).await.unwrap();
        }
        let kept: Vec<String> = store
            .audit()
            .recent(10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.tool)
            .collect();
        assert_eq!(kept, ["tool4", "tool3", "tool2"]);
    }

    #[tokio::test]
    async fn the_effect_log_keeps_only_the_newest_records() {
        let store = MemoryStore::with_capacities(MEMORY_AUDIT_RECORDS, 3);
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let outcome = |i: u64| Outcome::Errored {
            message: format!("call {i}"),
        };
        for i in 0..5u64 {
            let key = format!("key{i}");
            let at = start + Duration::from_secs(i);
            store
                .effects()
                .record_at(&key, "echo", &outcome(i), at)
                .await
                .unwrap();
            // A second record under a kept key changes nothing and drops nothing.
            store
                .effects()
                .record_at(&key, "echo", &outcome(99), at)
                .await
                .unwrap();
        }
        for i in 0..2u64 {
            let gone = store.effects().recorded(&format!("key{i}")).await.unwrap();
            assert!(gone.is_none(), "key{i} should have been dropped");
        }
        for i in 2..5u64 {
            let kept = store.effects().recorded(&format!("key{i}")).await.unwrap();
            assert_eq!(kept.map(|r| r.outcome), Some(outcome(i)));
        }
        // A prune forgets the pruned keys' places too: three new records
        // after it drop nothing that is still within the window.
        let pruned = store
            .effects()
            .prune_before(start + Duration::from_secs(4))
            .await
            .unwrap();
        assert_eq!(pruned, 2);
        for i in 5..7u64 {
            let at = start + Duration::from_secs(i);
            store
                .effects()
                .record_at(&format!("key{i}"), "echo", &outcome(i), at)
                .await
                .unwrap();
        }
        for i in 4..7u64 {
            let kept = store.effects().recorded(&format!("key{i}")).await.unwrap();
            assert_eq!(kept.map(|r| r.outcome), Some(outcome(i)), "key{i}");
        }
    }
}
