//! The memory backend: maps behind one mutex, for tests and runs that need
//! no persistence. One lock makes every `save` atomic, which is all the
//! baseline rules need.
//!
//! The audit trail is the one part that grows with every call (about
//! 0.7 KiB a record) and nothing in the process reads it back, so this
//! backend keeps only the newest [`MEMORY_AUDIT_RECORDS`]: a long-running
//! gateway on the memory store does not grow without bound between
//! retention prunes.

use std::collections::{BTreeMap, VecDeque};
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
    /// In order of recording; at most `MemoryStore::audit_capacity`.
    audit: VecDeque<AuditRecord>,
    grants: BTreeMap<String, SealedGrant>,
}

/// How many audit records the memory backend keeps, newest first out.
pub const MEMORY_AUDIT_RECORDS: usize = 10_000;

/// A store held in process memory; gone when the process ends.
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
    audit_capacity: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            state: Mutex::default(),
            audit_capacity: MEMORY_AUDIT_RECORDS,
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
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
        let recorded = state
            .effects
            .entry(key.to_owned())
            .or_insert_with(|| Recorded {
                key: key.to_owned(),
                tool_name: tool_name.to_owned(),
                outcome: outcome.clone(),
                // Stored to the millisecond, as the SQL backends store it.
                recorded_at: from_millis(to_millis(at)),
            });
        Ok(recorded.clone())
    }

    async fn prune_before(&self, cutoff: SystemTime) -> Result<u64, StoreError> {
        let cutoff = to_millis(cutoff);
        let mut state = self.state();
        let before = state.effects.len();
        state
            .effects
            .retain(|_, r| to_millis(r.recorded_at) >= cutoff);
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
        let store = MemoryStore {
            state: Mutex::default(),
            audit_capacity: 3,
        };
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
}
