//! The audit trail: one record per tool call — when, who, which tool, what
//! the gate decided, how long it took, how it ended, and the **shape** of
//! its arguments, never their values.
//!
//! Arguments routinely carry secrets and personal data (a file's contents, a
//! customer's address, a token pasted into a prompt), and an audit trail is
//! kept longer and read by more people than the calls it describes. So an
//! [`AuditRecord`] cannot hold argument values at all: its
//! [`ArgumentShape`] can only be built by [`ArgumentShape::of`], which keeps
//! the keys and replaces every leaf with its JSON type name
//! ([`argument_shape`]).
//!
//! Retention is the operator's: [`AuditLog::prune_before`] drops what is
//! older than a cut-off.

use std::time::SystemTime;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::error::StoreError;

/// What the gate decided about a call: the gate's own type
/// ([`portcullis_catalog::gate::CallDecision`]), stored by its name.
pub use portcullis_catalog::gate::CallDecision as AuditDecision;

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AuditOutcome {
    /// The tool answered normally.
    Ok,
    /// The tool answered with an error result (`isError: true`), including
    /// the gate's own refusals.
    ToolError,
    /// The call failed before an answer (transport, timeout, cancellation,
    /// a broken output schema…), with the `ERR_…` code the model was given.
    Failed {
        /// The public error code (`ERR_TIMEOUT`, `ERR_TOOL_FAILED`, …).
        code: String,
    },
}

impl AuditOutcome {
    /// The stored kind: `ok`, `tool-error` or `failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            AuditOutcome::Ok => "ok",
            AuditOutcome::ToolError => "tool-error",
            AuditOutcome::Failed { .. } => "failed",
        }
    }

    /// The error code of a failed call.
    pub fn code(&self) -> Option<&str> {
        match self {
            AuditOutcome::Failed { code } => Some(code),
            _ => None,
        }
    }

    /// The outcome `kind` and `code` describe; `None` for a kind this build
    /// does not know.
    pub(crate) fn from_parts(kind: &str, code: Option<String>) -> Option<Self> {
        match kind {
            "ok" => Some(AuditOutcome::Ok),
            "tool-error" => Some(AuditOutcome::ToolError),
            "failed" => Some(AuditOutcome::Failed {
                code: code.unwrap_or_default(),
            }),
            _ => None,
        }
    }
}

/// The structure of a call's arguments with every value erased: see
/// [`argument_shape`]. The only way to make one from arguments is
/// [`ArgumentShape::of`], so an audit record cannot carry a value by
/// mistake.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgumentShape(Value);

impl ArgumentShape {
    /// The shape of `args`.
    pub fn of(args: &Value) -> Self {
        ArgumentShape(argument_shape(args))
    }

    /// The shape of a call's arguments object (`None`: none were sent, the
    /// shape of `{}`).
    pub fn of_arguments(args: Option<&Map<String, Value>>) -> Self {
        let shape = args
            .into_iter()
            .flatten()
            .map(|(key, value)| (key.clone(), argument_shape(value)))
            .collect::<Map<_, _>>();
        ArgumentShape(Value::Object(shape))
    }

    /// The shape as JSON.
    pub fn as_value(&self) -> &Value {
        &self.0
    }

    /// A shape read back from storage. Whatever was stored is re-shaped, so
    /// even a tampered row reads back without values.
    pub(crate) fn from_stored(text: &str) -> Self {
        let stored = serde_json::from_str(text).unwrap_or(Value::Null);
        ArgumentShape(reshape(&stored))
    }

    /// The stored text.
    pub(crate) fn to_stored(&self) -> String {
        self.0.to_string()
    }
}

/// The shape of a JSON value: objects keep their keys (sorted, as
/// `serde_json` maps are) with each value replaced by its shape; an array
/// becomes the list of its elements' distinct shapes, in first-seen order
/// (so neither its length nor its order of values leaks); every leaf becomes
/// its type name: `"null"`, `"boolean"`, `"integer"`, `"number"` or
/// `"string"`.
///
/// Keys are kept because they are the arguments' structure, which is what
/// an auditor needs to tell one kind of call from another.
///
/// ```
/// use portcullis_store::audit::argument_shape;
/// use serde_json::json;
///
/// let args = json!({"path": "/srv/ana/taxes.pdf", "limit": 5, "tags": ["a", "b", 3]});
/// assert_eq!(
///     argument_shape(&args),
///     json!({"limit": "integer", "path": "string", "tags": ["string", "integer"]})
/// );
/// ```
pub fn argument_shape(value: &Value) -> Value {
    match value {
        Value::Null => Value::from("null"),
        Value::Bool(_) => Value::from("boolean"),
        Value::Number(n) if n.is_i64() || n.is_u64() => Value::from("integer"),
        Value::Number(_) => Value::from("number"),
        Value::String(_) => Value::from("string"),
        Value::Array(items) => {
            let mut shapes: Vec<Value> = Vec::new();
            for item in items {
                let shape = argument_shape(item);
                if !shapes.contains(&shape) {
                    shapes.push(shape);
                }
            }
            Value::Array(shapes)
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| (key.clone(), argument_shape(value)))
                .collect::<Map<_, _>>(),
        ),
    }
}

/// Re-shapes something that should already be a shape: a type name stays,
/// anything else is shaped. Idempotent on shapes.
fn reshape(value: &Value) -> Value {
    match value {
        Value::String(name)
            if ["null", "boolean", "integer", "number", "string"].contains(&name.as_str()) =>
        {
            value.clone()
        }
        Value::Array(items) => {
            let mut shapes: Vec<Value> = Vec::new();
            for item in items {
                let shape = reshape(item);
                if !shapes.contains(&shape) {
                    shapes.push(shape);
                }
            }
            Value::Array(shapes)
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| (key.clone(), reshape(value)))
                .collect(),
        ),
        other => argument_shape(other),
    }
}

/// One audited call.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    /// When the call was made (stored to the millisecond).
    pub time: SystemTime,
    /// Who made it: the caller's user id, `None` when anonymous.
    pub identity: Option<String>,
    /// The qualified tool name.
    pub tool: String,
    /// What the gate decided.
    pub decision: AuditDecision,
    /// How long the call took, in milliseconds.
    pub duration_ms: u64,
    /// How it ended.
    pub outcome: AuditOutcome,
    /// The arguments' shape (never their values).
    pub argument_shape: ArgumentShape,
}

impl AuditRecord {
    /// A record of a call to `tool` with `args` made at `time`; only the
    /// arguments' shape is kept. Anonymous and instantaneous until
    /// [`AuditRecord::by`] and [`AuditRecord::took`] say otherwise.
    pub fn new(
        time: SystemTime,
        tool: impl Into<String>,
        args: &Value,
        decision: AuditDecision,
        outcome: AuditOutcome,
    ) -> Self {
        AuditRecord {
            time,
            identity: None,
            tool: tool.into(),
            decision,
            duration_ms: 0,
            outcome,
            argument_shape: ArgumentShape::of(args),
        }
    }

    /// Sets who made the call.
    pub fn by(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// Sets how long the call took.
    pub fn took(mut self, duration_ms: u64) -> Self {
        self.duration_ms = duration_ms;
        self
    }
}

/// The durable audit trail of a store.
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Appends `record`.
    async fn record(&self, record: &AuditRecord) -> Result<(), StoreError>;

    /// The `limit` most recent records, newest first (by time, then by
    /// order of recording). A row this build cannot read (written by a
    /// newer one) is skipped with a warning.
    async fn recent(&self, limit: usize) -> Result<Vec<AuditRecord>, StoreError>;

    /// Deletes every record made before `cutoff`; returns how many.
    async fn prune_before(&self, cutoff: SystemTime) -> Result<u64, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every string and number anywhere in `value`, keys excluded.
    fn leaves(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::String(s) => out.push(s.clone()),
            Value::Number(n) => out.push(n.to_string()),
            Value::Bool(b) => out.push(b.to_string()),
            Value::Array(items) => items.iter().for_each(|v| leaves(v, out)),
            Value::Object(map) => map.values().for_each(|v| leaves(v, out)),
            Value::Null => {}
        }
    }

    const TYPE_NAMES: [&str; 5] = ["null", "boolean", "integer", "number", "string"];

    fn assert_no_values(args: &Value) {
        let shape = argument_shape(args);
        let mut found = Vec::new();
        leaves(&shape, &mut found);
        for leaf in &found {
            assert!(
                TYPE_NAMES.contains(&leaf.as_str()),
                "a value leaked into the shape: {leaf} in {shape}"
            );
        }
        let text = shape.to_string();
        let mut values = Vec::new();
        leaves(args, &mut values);
        for value in values {
            if !TYPE_NAMES.contains(&value.as_str()) && value.len() > 1 {
                assert!(!text.contains(&value), "{value} leaked: {text}");
            }
        }
    }

    #[test]
    fn strings_become_their_type() {
        let args = json!({"token": "sk-live-9f8e7d", "note": "meet Ana at 5"});
        assert_eq!(
            argument_shape(&args),
            json!({"note": "string", "token": "string"})
        );
        assert_no_values(&args);
    }

    #[test]
    fn numbers_and_booleans_become_their_type() {
        let args =
            json!({"amount": 1234.56, "account": 987654321, "neg": -42, "ok": true, "none": null});
        assert_eq!(
            argument_shape(&args),
            json!({"account": "integer", "amount": "number", "neg": "integer", "none": "null", "ok": "boolean"})
        );
        assert_no_values(&args);
    }

    #[test]
    fn nested_arrays_keep_structure_not_values_or_length() {
        let args = json!({
            "rows": [[1, 2, 3], [4.5], [], ["x", {"ssn": "123-45-6789"}]],
            "deep": {"a": {"b": [{"c": "secret-c"}, {"c": "other"}]}},
        });
        assert_eq!(
            argument_shape(&args),
            json!({
                "deep": {"a": {"b": [{"c": "string"}]}},
                "rows": [["integer"], ["number"], [], ["string", {"ssn": "string"}]],
            })
        );
        assert_no_values(&args);
        // Two calls that differ only in values have the same shape; the
        // number of elements does not show either.
        assert_eq!(
            argument_shape(&json!({"ids": [1, 2, 3, 4, 5, 6]})),
            argument_shape(&json!({"ids": [99]}))
        );
    }

    #[test]
    fn a_top_level_scalar_is_only_its_type() {
        for (args, shape) in [
            (json!("rm -rf /"), "string"),
            (json!(7), "integer"),
            (json!(0.5), "number"),
            (json!(false), "boolean"),
            (Value::Null, "null"),
        ] {
            assert_eq!(argument_shape(&args), json!(shape));
        }
    }

    #[test]
    fn a_tampered_stored_shape_reads_back_without_values() {
        let shape = ArgumentShape::from_stored(r#"{"q":"leaked value","n":["string",5]}"#);
        assert_eq!(
            shape.as_value(),
            &json!({"n": ["string", "integer"], "q": "string"})
        );
        let shape = ArgumentShape::of(&json!({"a": [1, "x"]}));
        assert_eq!(ArgumentShape::from_stored(&shape.to_stored()), shape);
        assert_eq!(ArgumentShape::from_stored("not json").as_value(), "null");
    }

    #[test]
    fn decisions_and_outcomes_round_trip() {
        for decision in AuditDecision::ALL {
            assert_eq!(AuditDecision::parse(decision.as_str()), Some(decision));
        }
        assert_eq!(AuditDecision::parse("maybe"), None);
        for outcome in [
            AuditOutcome::Ok,
            AuditOutcome::ToolError,
            AuditOutcome::Failed {
                code: "ERR_TIMEOUT".into(),
            },
        ] {
            let back = AuditOutcome::from_parts(outcome.kind(), outcome.code().map(str::to_owned));
            assert_eq!(back, Some(outcome));
        }
        assert_eq!(AuditOutcome::from_parts("exploded", None), None);
    }
}
