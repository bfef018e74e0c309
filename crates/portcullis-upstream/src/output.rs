//! Output schemas: a tool that declares `outputSchema` must answer with
//! `structuredContent` matching it, and a result that does not is rejected
//! rather than passed to the model (as the TypeScript SDK's client does).
//!
//! Schemas are compiled on a tool's first call ([`LazyOutput`]), as argument
//! validators are, with `jsonschema` built without network or file
//! resolvers. An output schema that cannot be compiled is ignored (the tool
//! still works; nothing is checked), since it is the server's promise, not
//! our guard.

use std::sync::OnceLock;

use portcullis_catalog::{Schema, ToolResult};
use serde_json::Value;

use crate::error::CallError;

/// At most this many problems are listed.
const MAX_PROBLEMS: usize = 5;

/// An output schema a tool promised, compiled on its first call: a wake
/// projects thousands of tools, few of which are called before the next
/// listing replaces them.
pub(crate) struct LazyOutput {
    schema: Schema,
    compiled: OnceLock<Option<OutputValidator>>,
}

impl LazyOutput {
    /// `schema`, not compiled yet.
    pub(crate) fn new(schema: Schema) -> Self {
        LazyOutput {
            schema,
            compiled: OnceLock::new(),
        }
    }

    /// The compiled schema (compiled now on first use); `None` when it is
    /// unusable.
    pub(crate) fn validator(&self) -> Option<&OutputValidator> {
        self.compiled
            .get_or_init(|| OutputValidator::compile(self.schema.value()))
            .as_ref()
    }
}

/// A compiled output schema.
pub(crate) struct OutputValidator {
    validator: jsonschema::Validator,
}

impl OutputValidator {
    /// Compiles `schema`, or `None` when it is unusable.
    pub(crate) fn compile(schema: &Value) -> Option<Self> {
        jsonschema::validator_for(schema)
            .ok()
            .map(|validator| OutputValidator { validator })
    }

    /// Checks a successful result; error results carry no promise.
    pub(crate) fn check(&self, tool: &str, result: &ToolResult) -> Result<(), CallError> {
        if result.is_error {
            return Ok(());
        }
        let failure = |problem: String| CallError::OutputSchema {
            tool: tool.to_owned(),
            problem,
        };
        let Some(structured) = &result.structured_content else {
            return Err(failure("the result has no structuredContent".to_owned()));
        };
        if self.validator.is_valid(structured) {
            return Ok(());
        }
        let problems: Vec<String> = self
            .validator
            .iter_errors(structured)
            .take(MAX_PROBLEMS)
            .map(|e| {
                let path = e.instance_path().to_string();
                let at = if path.is_empty() {
                    "/".to_owned()
                } else {
                    path
                };
                format!("{at}: {}", e.masked_with("the value"))
            })
            .collect();
        Err(failure(problems.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn validator() -> OutputValidator {
        OutputValidator::compile(&json!({
            "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]
        }))
        .unwrap()
    }

    fn structured(value: Value) -> ToolResult {
        ToolResult {
            structured_content: Some(value),
            ..Default::default()
        }
    }

    #[test]
    fn matching_results_pass_and_others_are_rejected_without_echoing_values() {
        let v = validator();
        assert!(v.check("t", &structured(json!({"n": 1}))).is_ok());
        let error = v
            .check("t", &structured(json!({"n": "secret-value"})))
            .unwrap_err();
        assert!(error.to_string().contains("output schema"));
        assert!(!error.to_string().contains("secret-value"));
        assert!(v.check("t", &ToolResult::text("no structure")).is_err());
        assert!(v.check("t", &ToolResult::error_text("failed")).is_ok());
    }
}
