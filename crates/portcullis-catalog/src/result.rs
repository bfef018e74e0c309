//! Call results: the MCP `CallToolResult` shape the surfaces speak.
//!
//! Content items stay JSON values so that images, audio, resource links and
//! anything a later protocol revision adds pass through in their own shape;
//! framing ([`crate::framing`]) reads every kind it knows and cleans and
//! counts the strings of the rest.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The result of one tool call.
///
/// ```
/// use portcullis_catalog::ToolResult;
///
/// let ok = ToolResult::text("42");
/// assert_eq!(ok.text_blocks().collect::<Vec<_>>(), ["42"]);
/// assert!(!ok.is_error);
/// assert!(ToolResult::error_text("ERR_BOOM").is_error);
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// Content items (`{"type":"text","text":…}`, images, resources, …).
    #[serde(default)]
    pub content: Vec<Value>,
    /// Structured output, when the tool declares an output schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// True when the tool reports failure (a tool error, not a protocol error).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Free-form metadata.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

impl ToolResult {
    /// A successful result with one text item.
    pub fn text(text: impl Into<String>) -> Self {
        ToolResult {
            content: vec![text_item(text)],
            ..Default::default()
        }
    }

    /// An error result (`isError: true`) with one text item.
    pub fn error_text(text: impl Into<String>) -> Self {
        ToolResult {
            content: vec![text_item(text)],
            is_error: true,
            ..Default::default()
        }
    }

    /// The text of every text item, in order.
    pub fn text_blocks(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(text_of)
    }
}

/// A `{"type":"text","text":…}` content item.
pub fn text_item(text: impl Into<String>) -> Value {
    json!({"type": "text", "text": text.into()})
}

/// The text of a content item, if it is a text item.
pub fn text_of(item: &Value) -> Option<&str> {
    if item.get("type").and_then(Value::as_str) == Some("text") {
        item.get("text").and_then(Value::as_str)
    } else {
        None
    }
}
