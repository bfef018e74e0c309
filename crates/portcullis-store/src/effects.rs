//! The effect log: a tool call's outcome recorded under an idempotency key,
//! so a replayed turn gets the recorded outcome and the server is not called
//! twice: an MCP tool call is replayable.
//!
//! The caller computes the key ([`effect_key`]), asks
//! [`EffectLog::recorded`] before calling, and [`EffectLog::record`]s the
//! outcome after. The first record for a key wins. `mcp__describe_tool` is
//! never recorded (it is not replayable: describing costs nothing and must
//! reflect the current catalogue): callers skip it, and
//! `record` refuses it.
//!
//! Each record carries the time it was made, so an operator can bound the
//! log's size with [`EffectLog::prune_before`]: a turn replayed after its
//! record was pruned calls the server again.

use std::time::SystemTime;

use async_trait::async_trait;
use portcullis_catalog::ToolResult;
use portcullis_catalog::disclosure::DESCRIBE_TOOL_NAME;
use portcullis_catalog::fingerprint::canonical_json;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::{Backend, StoreError};

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Outcome {
    /// The server answered (possibly with `isError: true`).
    Finished {
        /// The result, replayed verbatim.
        result: ToolResult,
    },
    /// The call failed; a replay fails again with this message.
    Errored {
        /// The error message.
        message: String,
    },
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The idempotency key.
    pub key: String,
    /// The (qualified) tool that was called.
    pub tool_name: String,
    /// How it ended.
    pub outcome: Outcome,
    /// When it was recorded (to the millisecond).
    pub recorded_at: SystemTime,
}

/// The durable effect log of a store.
#[async_trait]
pub trait EffectLog: Send + Sync {
    /// The outcome recorded under `key`, if any.
    async fn recorded(&self, key: &str) -> Result<Option<Recorded>, StoreError>;

    /// Records `outcome` under `key` unless something is recorded already,
    /// and returns what is recorded now (the first record wins, so a racing
    /// replica gets the winner's outcome). Refuses `mcp__describe_tool`.
    async fn record(
        &self,
        key: &str,
        tool_name: &str,
        outcome: &Outcome,
    ) -> Result<Recorded, StoreError> {
        self.record_at(key, tool_name, outcome, SystemTime::now())
            .await
    }

    /// [`EffectLog::record`], stamped `at` instead of now.
    async fn record_at(
        &self,
        key: &str,
        tool_name: &str,
        outcome: &Outcome,
        at: SystemTime,
    ) -> Result<Recorded, StoreError>;

    /// Deletes every record made before `cutoff`; returns how many.
    async fn prune_before(&self, cutoff: SystemTime) -> Result<u64, StoreError>;
}

/// The effect key: lowercase hex SHA-256 of the canonical JSON
/// `{"callsite":…,"payload":{"args":…,"name":…},"runId":…}`. `run_id` is the
/// caller's run identity (for example `"<runId>#<epoch>"`), `callsite` the
/// call's ordinal within the run.
///
/// ```
/// use portcullis_store::effects::effect_key;
/// use serde_json::json;
///
/// let a = effect_key("run-1#0", 3, "docs__search", &json!({"q": "x", "n": 1}));
/// let b = effect_key("run-1#0", 3, "docs__search", &json!({"n": 1, "q": "x"}));
/// assert_eq!(a, b); // key order does not matter
/// assert_eq!(a.len(), 64);
/// assert_ne!(a, effect_key("run-1#0", 4, "docs__search", &json!({"q": "x", "n": 1})));
/// ```
pub fn effect_key(run_id: &str, callsite: u64, tool_name: &str, args: &Value) -> String {
    let material = json!({
        "runId": run_id,
        "callsite": callsite,
        "payload": {"name": tool_name, "args": args},
    });
    let digest = Sha256::digest(canonical_json(&material).as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Refuses tools that are never replayed.
pub(crate) fn ensure_recordable(backend: Backend, tool_name: &str) -> Result<(), StoreError> {
    if tool_name == DESCRIBE_TOOL_NAME {
        return Err(StoreError::NotRecordable {
            backend,
            tool: tool_name.to_owned(),
        });
    }
    Ok(())
}

/// The stored text of an outcome.
pub(crate) fn encode_outcome(outcome: &Outcome) -> String {
    // Serialising plain data (strings, JSON values) cannot fail.
    serde_json::to_string(outcome).unwrap_or_default()
}

/// An outcome read back from storage.
pub(crate) fn decode_outcome(
    backend: Backend,
    key: &str,
    tool_name: String,
    text: &str,
    recorded_at: SystemTime,
) -> Result<Recorded, StoreError> {
    serde_json::from_str(text)
        .map(|outcome| Recorded {
            key: key.to_owned(),
            tool_name,
            outcome,
            recorded_at,
        })
        .map_err(|e| StoreError::CorruptEffect {
            backend,
            key: key.to_owned(),
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_matches_an_independent_computation() {
        // sha256 of the canonical text, computed by hand from the documented shape.
        let text = r#"{"callsite":0,"payload":{"args":{"a":1},"name":"t"},"runId":"r#1"}"#;
        let expected: String = Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(effect_key("r#1", 0, "t", &json!({"a": 1})), expected);
    }

    #[test]
    fn outcomes_round_trip() {
        for outcome in [
            Outcome::Finished {
                result: ToolResult::text("42"),
            },
            Outcome::Errored {
                message: "MCP tool error: nope".into(),
            },
        ] {
            let text = encode_outcome(&outcome);
            let back = decode_outcome(Backend::Memory, "k", "t".into(), &text, SystemTime::now())
                .map(|r| r.outcome)
                .ok();
            assert_eq!(back, Some(outcome));
        }
        assert!(decode_outcome(Backend::Memory, "k", "t".into(), "{", SystemTime::now()).is_err());
    }
}
