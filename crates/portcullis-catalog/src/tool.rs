//! The tool model: what a source publishes and what the model is shown.
//!
//! The shape follows MCP's `Tool` (2025-11-25 and 2026-07-28 agree on these
//! fields). Unknown keys are dropped on the way in, which is deliberate: a
//! server cannot smuggle extra fields through `annotations` (an `x-mdk-agent`
//! key placed there is dropped for the same reason); free-form metadata
//! travels in `_meta` only.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::schema::Schema;

/// One tool definition, as a source publishes it or as the catalogue
/// discloses it.
///
/// ```
/// use portcullis_catalog::Tool;
///
/// let tool: Tool = serde_json::from_str(
///     r#"{"name":"search","description":"Search the docs","inputSchema":{"type":"object"}}"#,
/// ).unwrap();
/// assert_eq!(tool.name, "search");
/// assert!(!tool.is_read_only());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", from = "ToolWire<Schema>")]
pub struct Tool {
    /// The name the source uses for this tool (not yet qualified).
    pub name: String,
    /// Optional human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Free-text description; what the model routes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments. `None` when the source published none;
    /// treated as `{"type":"object"}` everywhere it matters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Schema>,
    /// JSON Schema of `structuredContent`, when the tool declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Schema>,
    /// Behaviour hints. Advisory only: the policy gate never consults them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// Free-form metadata (`_meta`), passed through verbatim.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

impl Tool {
    /// A tool with only a name; fill in the rest with the `with_*` methods.
    pub fn new(name: impl Into<String>) -> Self {
        Tool {
            name: name.into(),
            title: None,
            description: None,
            input_schema: None,
            output_schema: None,
            annotations: None,
            meta: None,
        }
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the title.
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Sets the input schema.
    pub fn with_input_schema(mut self, schema: impl Into<Schema>) -> Self {
        self.input_schema = Some(schema.into());
        self
    }

    /// Sets the output schema.
    pub fn with_output_schema(mut self, schema: impl Into<Schema>) -> Self {
        self.output_schema = Some(schema.into());
        self
    }

    /// Sets the annotations.
    pub fn with_annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// The input schema, or `{"type":"object"}` when none was published.
    pub fn input_schema_or_default(&self) -> Value {
        self.input_schema
            .as_ref()
            .map_or_else(|| json!({"type": "object"}), |s| s.value().clone())
    }

    /// The description, or the name when there is none (what the disclosure
    /// estimate and the catalogue floor count).
    pub fn description_or_name(&self) -> &str {
        self.description.as_deref().unwrap_or(&self.name)
    }

    /// True only when the tool declares `readOnlyHint: true`. Anything else —
    /// `false`, unstated, no annotations — is a write. Used by the exposure
    /// gate of the serve surface, never by policy.
    pub fn is_read_only(&self) -> bool {
        self.annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false)
    }
}

/// What a tool is read from: [`Tool`]'s fields with each schema as `S`
/// (a [`Schema`] parsed as a value, or stored text for
/// [`CachedTools`]), so both read the same keys the same
/// way.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolWire<S> {
    name: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default = "none")]
    input_schema: Option<S>,
    #[serde(default = "none")]
    output_schema: Option<S>,
    #[serde(default)]
    annotations: Option<ToolAnnotations>,
    #[serde(default, rename = "_meta")]
    meta: Option<Map<String, Value>>,
}

/// An absent schema (without asking `S` for a default).
fn none<S>() -> Option<S> {
    None
}

impl<S> ToolWire<S> {
    /// The tool, its input schema made a [`Schema`] by `input` and its
    /// output schema by `output`.
    pub(crate) fn into_tool<E>(
        self,
        input: impl FnOnce(S) -> Result<Schema, E>,
        output: impl FnOnce(S) -> Result<Schema, E>,
    ) -> Result<Tool, E> {
        Ok(Tool {
            name: self.name,
            title: self.title,
            description: self.description,
            input_schema: self.input_schema.map(input).transpose()?,
            output_schema: self.output_schema.map(output).transpose()?,
            annotations: self.annotations,
            meta: self.meta,
        })
    }
}

impl From<ToolWire<Schema>> for Tool {
    fn from(wire: ToolWire<Schema>) -> Self {
        match wire.into_tool(
            Ok::<Schema, std::convert::Infallible>,
            Ok::<Schema, std::convert::Infallible>,
        ) {
            Ok(tool) => tool,
            Err(never) => match never {},
        }
    }
}

/// MCP tool annotations. Only the keys the protocol defines survive parsing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// Human-readable title (older servers put it here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Repeating a call with the same arguments has no additional effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl ToolAnnotations {
    /// Annotations with `readOnlyHint` set.
    pub fn read_only(value: bool) -> Self {
        ToolAnnotations {
            read_only_hint: Some(value),
            ..Default::default()
        }
    }

    /// True when no hint is set at all; such annotations are treated as absent.
    pub fn is_empty(&self) -> bool {
        self == &ToolAnnotations::default()
    }
}

/// A cached listing read from the store's JSON text: the same tools as
/// `Vec<Tool>` would read (held to it by a test), with each schema kept as
/// text where [`Schema::from_json_text`] can.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedTools(pub Vec<Tool>);

impl<'de> Deserialize<'de> for CachedTools {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire: Vec<ToolWire<Box<RawValue>>> = Vec::deserialize(deserializer)?;
        let mut tools = Vec::with_capacity(wire.len());
        // An input schema's deferred form is written as it is checked (a
        // deferred tier then shares it); an output schema is never deferred.
        let mut outline = String::new();
        for tool in wire {
            tools.push(tool.into_tool(
                |text| Schema::read(text, Some(&mut outline)).map_err(serde::de::Error::custom),
                |text| Schema::read(text, None).map_err(serde::de::Error::custom),
            )?);
        }
        Ok(CachedTools(tools))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_annotation_keys_are_dropped() {
        let tool: Tool = serde_json::from_value(json!({
            "name": "t",
            "annotations": {"readOnlyHint": true, "x-mdk-agent": {"enabled": true}},
            "_meta": {"x-mdk-agent": {"enabled": true}}
        }))
        .unwrap();
        assert!(tool.is_read_only());
        let back = serde_json::to_value(&tool).unwrap();
        assert_eq!(back["annotations"], json!({"readOnlyHint": true}));
        assert_eq!(back["_meta"]["x-mdk-agent"]["enabled"], json!(true));
    }

    #[test]
    fn a_tool_without_metadata_serialises_without_meta_or_annotations() {
        let back = serde_json::to_value(Tool::new("t").with_description("d")).unwrap();
        assert_eq!(back, json!({"name": "t", "description": "d"}));
    }

    #[test]
    fn read_only_needs_an_explicit_true() {
        assert!(!Tool::new("t").is_read_only());
        assert!(
            !Tool::new("t")
                .with_annotations(ToolAnnotations::read_only(false))
                .is_read_only()
        );
        let destructive_only = ToolAnnotations {
            destructive_hint: Some(false),
            ..Default::default()
        };
        assert!(
            !Tool::new("t")
                .with_annotations(destructive_only)
                .is_read_only()
        );
        assert!(
            Tool::new("t")
                .with_annotations(ToolAnnotations::read_only(true))
                .is_read_only()
        );
    }
}
