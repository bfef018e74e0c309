//! Argument validation: call arguments are checked against the tool's input
//! schema before any handler or server sees them.
//!
//! Schemas are JSON Schema (2020-12 unless they say otherwise in `$schema`),
//! compiled once per tool by the `jsonschema` crate with no network or file
//! access (an external `$ref` fails to compile rather than fetching anything).
//! A schema is enforced as written: an MCP server's or a plugin's tool takes
//! whatever length its own schema allows (a file body, a long prompt). The
//! default cap on strings without a `maxLength` ([`DEFAULT_MAX_STRING_LENGTH`],
//! via [`apply_default_max_length`]) belongs to the schemas Portcullis itself
//! writes, for routes of route tables and OpenAPI documents, where it is
//! part of the published schema. `integer` admits whole numbers only, as JSON
//! Schema already says.
//!
//! A failure is a *tool* error (`isError: true`, code
//! `ERR_INVALID_ARGUMENTS`), not a protocol error, so the model sees what was
//! wrong and can correct its call. Messages mask argument values: they name
//! the path and the rule, never echo what the model sent.

use serde_json::{Map, Value, json};

use crate::error::CatalogError;
use crate::error_mapping::codes::ERR_INVALID_ARGUMENTS;
use crate::result::ToolResult;

/// Cap on a string argument whose schema states no `maxLength`, in the
/// schemas Portcullis generates for routes.
pub const DEFAULT_MAX_STRING_LENGTH: u64 = 16_384;

/// At most this many problems are listed in one failure message.
const MAX_REPORTED_PROBLEMS: usize = 10;

/// A compiled input schema.
///
/// ```
/// use portcullis_catalog::ArgumentValidator;
/// use serde_json::json;
///
/// let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]});
/// let validator = ArgumentValidator::compile("count", &schema).unwrap();
/// assert!(validator.validate(&json!({"n": 3})).is_ok());
/// let failure = validator.validate(&json!({"n": 1.5})).unwrap_err();
/// assert!(failure.message().starts_with("ERR_INVALID_ARGUMENTS: "));
/// assert!(failure.to_tool_result().is_error);
/// ```
#[derive(Debug, Clone)]
pub struct ArgumentValidator {
    tool: String,
    validator: jsonschema::Validator,
}

impl ArgumentValidator {
    /// Compiles `schema`, as written, for `tool`.
    pub fn compile(tool: &str, schema: &Value) -> Result<Self, CatalogError> {
        let validator =
            jsonschema::validator_for(schema).map_err(|e| CatalogError::InvalidSchema {
                tool: tool.to_owned(),
                reason: e.masked().to_string(),
            })?;
        Ok(ArgumentValidator {
            tool: tool.to_owned(),
            validator,
        })
    }

    /// Checks `args`; on failure, says what is wrong and where.
    pub fn validate(&self, args: &Value) -> Result<(), ArgumentErrors> {
        if self.validator.is_valid(args) {
            return Ok(());
        }
        let mut problems = Vec::new();
        let mut total = 0usize;
        for error in self.validator.iter_errors(args) {
            total += 1;
            if problems.len() < MAX_REPORTED_PROBLEMS {
                let path = error.instance_path().to_string();
                let location = if path.is_empty() {
                    "/".to_owned()
                } else {
                    path
                };
                problems.push(format!("{location}: {}", error.masked_with("the value")));
            }
        }
        Err(ArgumentErrors {
            tool: self.tool.clone(),
            problems,
            omitted: total.saturating_sub(MAX_REPORTED_PROBLEMS),
        })
    }
}

/// Why a call's arguments were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentErrors {
    /// The tool called.
    pub tool: String,
    /// One line per problem: `<JSON pointer>: <rule>`.
    pub problems: Vec<String>,
    /// How many further problems were not listed.
    pub omitted: usize,
}

impl ArgumentErrors {
    /// The message the model reads.
    pub fn message(&self) -> String {
        let mut message = format!(
            "{ERR_INVALID_ARGUMENTS}: arguments for tool \"{}\" do not match its input schema: {}",
            self.tool,
            self.problems.join("; ")
        );
        if self.omitted > 0 {
            message.push_str(&format!(" (and {} more)", self.omitted));
        }
        message
    }

    /// As a tool error result.
    pub fn to_tool_result(&self) -> ToolResult {
        ToolResult::error_text(self.message())
    }
}

impl std::fmt::Display for ArgumentErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for ArgumentErrors {}

/// `schema` with a `maxLength` of [`DEFAULT_MAX_STRING_LENGTH`] added to every
/// string-typed subschema that states none: for schemas Portcullis writes
/// itself (a route's), never for a tool's own schema.
///
/// ```
/// use portcullis_catalog::validation::apply_default_max_length;
/// use serde_json::json;
///
/// let schema = json!({"type": "object", "properties": {"q": {"type": "string"}, "id": {"type": "string", "maxLength": 8}}});
/// let capped = apply_default_max_length(&schema);
/// assert_eq!(capped["properties"]["q"]["maxLength"], 16384);
/// assert_eq!(capped["properties"]["id"]["maxLength"], 8);
/// ```
pub fn apply_default_max_length(schema: &Value) -> Value {
    let mut out = schema.clone();
    cap_strings(&mut out);
    out
}

// Keywords whose value is one subschema, and those whose value is an array or
// a map of subschemas (JSON Schema 2020-12 and draft-07 spellings).
const SINGLE: &[&str] = &[
    "additionalProperties",
    "items",
    "additionalItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
];
const ARRAYS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
const MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

fn cap_strings(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    if is_string_typed(map) && !map.contains_key("maxLength") {
        map.insert("maxLength".into(), json!(DEFAULT_MAX_STRING_LENGTH));
    }
    for key in SINGLE {
        if let Some(sub) = map.get_mut(*key).filter(|v| v.is_object()) {
            cap_strings(sub);
        }
    }
    for key in ARRAYS {
        if let Some(Value::Array(subs)) = map.get_mut(*key) {
            subs.iter_mut().for_each(cap_strings);
        }
    }
    for key in MAPS {
        if let Some(Value::Object(subs)) = map.get_mut(*key) {
            subs.values_mut().for_each(cap_strings);
        }
    }
}

fn is_string_typed(map: &Map<String, Value>) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(types)) => types.iter().any(|t| t == "string"),
        _ => false,
    }
}

/// The arguments a handler receives: an object passes unchanged, a missing
/// or `null` value becomes `{}`, anything else is wrapped as `{"value": x}`.
///
/// ```
/// use portcullis_catalog::validation::normalize_arguments;
/// use serde_json::json;
///
/// assert_eq!(normalize_arguments(None), json!({}));
/// assert_eq!(normalize_arguments(Some(json!("hi"))), json!({"value": "hi"}));
/// assert_eq!(normalize_arguments(Some(json!({"a": 1}))), json!({"a": 1}));
/// ```
pub fn normalize_arguments(args: Option<Value>) -> Value {
    match args {
        None | Some(Value::Null) => json!({}),
        Some(object @ Value::Object(_)) => object,
        Some(other) => json!({"value": other}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "id": {"type": "string", "minLength": 2, "maxLength": 8, "pattern": "^dev-[0-9]+$"},
                "query": {"type": "string"},
                "mode": {"type": "string", "enum": ["low", "high"]},
                "count": {"type": "integer", "minimum": 1, "maximum": 10},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
                "filter": {
                    "type": "object",
                    "properties": {"since": {"type": "string"}},
                    "required": ["since"]
                }
            },
            "required": ["id"]
        })
    }

    /// As a route's generated schema is: with the default cap written in.
    fn check(args: Value) -> Result<(), ArgumentErrors> {
        ArgumentValidator::compile("devices_get", &apply_default_max_length(&route_schema()))
            .unwrap()
            .validate(&args)
    }

    #[test]
    fn a_schema_is_enforced_as_written_without_a_default_cap() {
        let v = ArgumentValidator::compile("devices_get", &route_schema()).unwrap();
        assert!(
            v.validate(&json!({"id": "dev-1", "query": "q".repeat(100_000)}))
                .is_ok()
        );
        assert!(
            v.validate(&json!({"id": "dev-123456"})).is_err(),
            "a stated maxLength holds"
        );
    }

    #[test]
    fn valid_arguments_pass() {
        assert!(check(json!({"id": "dev-1"})).is_ok());
        assert!(check(json!({"id": "dev-12", "count": 10, "mode": "low", "tags": ["a"], "filter": {"since": "x"}})).is_ok());
        // 3.0 is a whole number.
        assert!(check(json!({"id": "dev-1", "count": 3.0})).is_ok());
    }

    #[test]
    fn each_keyword_is_enforced() {
        let cases = [
            json!({}),                                           // required
            json!({"id": "d"}),                                  // minLength
            json!({"id": "dev-123456"}),                         // maxLength
            json!({"id": "xx-1"}),                               // pattern
            json!({"id": "dev-1", "mode": "medium"}),            // enum
            json!({"id": "dev-1", "count": 0}),                  // minimum
            json!({"id": "dev-1", "count": 11}),                 // maximum
            json!({"id": "dev-1", "count": 1.5}),                // integer
            json!({"id": "dev-1", "tags": []}),                  // minItems
            json!({"id": "dev-1", "tags": ["a", "b", "c"]}),     // maxItems
            json!({"id": "dev-1", "filter": {}}),                // nested required
            json!({"id": "dev-1", "filter": {"since": 5}}),      // nested type
            json!({"id": "dev-1", "query": "q".repeat(16_385)}), // default cap
        ];
        for args in cases {
            let shown = args.to_string();
            let err = check(args).expect_err(&shown);
            assert!(
                err.message()
                    .starts_with("ERR_INVALID_ARGUMENTS: arguments for tool \"devices_get\"")
            );
        }
        assert!(check(json!({"id": "dev-1", "query": "q".repeat(16_384)})).is_ok());
    }

    #[test]
    fn messages_name_the_path_and_mask_the_value() {
        let secret = "s3cr3t-value-the-model-sent";
        let err = check(json!({"id": "dev-1", "mode": secret})).unwrap_err();
        assert_eq!(err.problems.len(), 1);
        assert!(
            err.problems[0].starts_with("/mode: "),
            "{}",
            err.problems[0]
        );
        assert!(!err.message().contains(secret), "{}", err.message());
        let result = err.to_tool_result();
        assert!(result.is_error);
    }

    #[test]
    fn many_problems_are_summarised() {
        let props: Map<String, Value> = (0..15)
            .map(|i| (format!("p{i}"), json!({"type": "integer"})))
            .collect();
        let schema = json!({"type": "object", "properties": props});
        let args: Map<String, Value> = (0..15).map(|i| (format!("p{i}"), json!("x"))).collect();
        let err = ArgumentValidator::compile("t", &schema)
            .unwrap()
            .validate(&Value::Object(args))
            .unwrap_err();
        assert_eq!(err.problems.len(), 10);
        assert_eq!(err.omitted, 5);
        assert!(err.message().ends_with("(and 5 more)"));
    }

    #[test]
    fn caps_reach_nested_and_combined_schemas() {
        let schema = json!({
            "type": "object",
            "properties": {
                "list": {"type": "array", "items": {"type": "string"}},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "nullable": {"type": ["string", "null"]},
                "ref": {"$ref": "#/$defs/name"}
            },
            "$defs": {"name": {"type": "string"}}
        });
        let capped = apply_default_max_length(&schema);
        assert_eq!(capped["properties"]["list"]["items"]["maxLength"], 16384);
        assert_eq!(
            capped["properties"]["either"]["anyOf"][0]["maxLength"],
            16384
        );
        assert!(
            capped["properties"]["either"]["anyOf"][1]
                .get("maxLength")
                .is_none()
        );
        assert_eq!(capped["properties"]["nullable"]["maxLength"], 16384);
        assert_eq!(capped["$defs"]["name"]["maxLength"], 16384);
        let v = ArgumentValidator::compile("t", &capped).unwrap();
        assert!(v.validate(&json!({"ref": "x".repeat(16_385)})).is_err());
        assert!(
            v.validate(&json!({"list": ["ok"], "nullable": null}))
                .is_ok()
        );
    }

    #[test]
    fn an_unusable_schema_is_a_wiring_error_not_a_panic() {
        let bad = json!({"type": "object", "properties": {"x": {"type": "no-such-type"}}});
        let err = ArgumentValidator::compile("t", &bad).unwrap_err();
        assert!(matches!(err, CatalogError::InvalidSchema { .. }));
        let remote = json!({"$ref": "https://example.invalid/schema.json"});
        assert!(ArgumentValidator::compile("t", &remote).is_err());
        let bad_pattern = json!({"type": "string", "pattern": "(["});
        assert!(ArgumentValidator::compile("t", &bad_pattern).is_err());
    }
}
