//! Effect-log replay for [`crate::Toolset::call`]: a call that carries an
//! idempotency key ([`crate::CallContext::with_idempotency_key`]) through a
//! toolset with a store ([`crate::ConnectOptions::with_store`]) reaches its
//! server at most once per key; a replay gets the recorded outcome.
//!
//! * **Where.** Replay happens after every guard (session, availability,
//!   policy, quarantine, argument validation), right where the request
//!   would be sent: a recorded outcome never lets a call past a gate that
//!   refuses it now. `mcp__describe_tool` and quarantine stubs are answered
//!   before that point, so they are never recorded (describing must reflect the
//!   current catalogue, so it is not replayable).
//! * **Key.** [`portcullis_store::effect_key`] of the run `[session, key]`
//!   (so two sessions choosing the same key never see each other's
//!   results), callsite 0, the qualified tool name and the normalised
//!   arguments (so the same key with other arguments is another call).
//! * **What is recorded.** A result, error results (`isError`) included,
//!   and every failure once the request may have reached the server
//!   (timeout, protocol error, transport failure, output-schema
//!   violation…), which replays as [`CallError::Replayed`] with the same
//!   message. Not recorded: a call the caller cancelled, and a server found
//!   unavailable — the caller's retry should run.
//! * **Races.** Two calls with one key that both miss both run; the first
//!   record wins and both callers get it, so every replica agrees on one
//!   outcome from then on.
//! * **A store that fails** is logged and does not fail the call: a lookup
//!   that errors is treated as a miss, a record that errors returns the
//!   live outcome.

use std::future::Future;
use std::sync::Arc;

use portcullis_catalog::ToolResult;
use portcullis_catalog::disclosure::DESCRIBE_TOOL_NAME;
use portcullis_store::{Outcome, Store, effect_key};
use serde_json::{Map, Value};

use crate::error::CallError;

/// The effect key of a call to `tool` with `args` under the caller's
/// idempotency `key`, within `session`.
pub(crate) fn key_for(
    session: Option<&str>,
    key: &str,
    tool: &str,
    args: &Map<String, Value>,
) -> String {
    // A JSON array cannot be confused across its parts, whatever they hold.
    let run = Value::from(vec![
        Value::from(session.unwrap_or_default()),
        Value::from(key),
    ])
    .to_string();
    effect_key(&run, 0, tool, &Value::Object(args.clone()))
}

/// Runs `call` unless the effect log already holds its outcome, and records
/// the outcome when it runs. Without a store or an idempotency key, or for
/// `mcp__describe_tool`, this is just `call`.
pub(crate) async fn replay_or_call(
    store: Option<&Arc<dyn Store>>,
    session: Option<&str>,
    idempotency_key: Option<&str>,
    tool: &str,
    args: &Map<String, Value>,
    call: impl Future<Output = Result<ToolResult, CallError>>,
) -> Result<ToolResult, CallError> {
    let (Some(store), Some(key)) = (store, idempotency_key) else {
        return call.await;
    };
    if tool == DESCRIBE_TOOL_NAME {
        return call.await;
    }
    let log = store.effects();
    let effect = key_for(session, key, tool, args);
    match log.recorded(&effect).await {
        Ok(Some(recorded)) => {
            tracing::debug!(tool, "replaying a recorded outcome");
            return replay(tool, recorded.outcome);
        }
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(tool, %error, "the effect log could not be read; calling the server");
        }
    }
    let answer = call.await;
    let outcome = match &answer {
        Ok(result) => Outcome::Finished {
            result: result.clone(),
        },
        Err(CallError::Cancelled { .. } | CallError::Unavailable { .. }) => return answer,
        Err(error) => Outcome::Errored {
            message: error.to_string(),
        },
    };
    match log.record(&effect, tool, &outcome).await {
        // Ours won: hand back the live answer, with its own error type.
        Ok(recorded) if recorded.outcome == outcome => answer,
        // A racer recorded first: agree with it.
        Ok(recorded) => replay(tool, recorded.outcome),
        Err(error) => {
            tracing::warn!(tool, %error, "the outcome could not be recorded in the effect log");
            answer
        }
    }
}

/// A recorded outcome as `call` returns it.
fn replay(tool: &str, outcome: Outcome) -> Result<ToolResult, CallError> {
    match outcome {
        Outcome::Finished { result } => Ok(result),
        Outcome::Errored { message } => Err(CallError::Replayed {
            tool: tool.to_owned(),
            message,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn keys_separate_sessions_keys_tools_and_arguments() {
        let a = args(json!({"q": "x"}));
        let base = key_for(Some("s1"), "k", "fx__echo", &a);
        assert_eq!(base, key_for(Some("s1"), "k", "fx__echo", &a));
        for other in [
            key_for(Some("s2"), "k", "fx__echo", &a),
            key_for(None, "k", "fx__echo", &a),
            key_for(Some("s1"), "k2", "fx__echo", &a),
            key_for(Some("s1"), "k", "fx__other", &a),
            key_for(Some("s1"), "k", "fx__echo", &args(json!({"q": "y"}))),
        ] {
            assert_ne!(base, other);
        }
        // The parts cannot be shifted into one another.
        assert_ne!(
            key_for(Some("a\",\"b"), "c", "t", &a),
            key_for(Some("a"), "b\",\"c", "t", &a)
        );
    }
}
