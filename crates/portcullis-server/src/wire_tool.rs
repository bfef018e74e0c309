//! A tool definition in the form MCP lists it (rmcp's `Tool`), made field
//! by field: a tool server builds one for every tool it serves, and a
//! gateway's catalogue holds thousands, so going through a JSON tree and
//! back (what the definitions' serde shapes would allow) cost several
//! times the rest of a build. A test holds it to that round trip.

use std::borrow::Cow;
use std::sync::Arc;

use portcullis_catalog::{CatalogError, Schema, Tool};
use rmcp::model::{JsonObject, MetaObject, ToolAnnotations};

use crate::error::ServerError;

/// `tool` as MCP lists it. A tool that published no input schema takes
/// `{"type":"object"}`; a schema that is not a JSON object is refused
/// (`InvalidSchema`), as MCP requires objects there.
pub(crate) fn to_wire_tool(tool: &Tool) -> Result<rmcp::model::Tool, ServerError> {
    let object = |schema: &Schema, field: &str| {
        schema.to_object().ok_or_else(|| {
            ServerError::InvalidSchema(CatalogError::InvalidSchema {
                tool: tool.name.clone(),
                reason: format!("not an MCP tool definition: its {field} is not a JSON object"),
            })
        })
    };
    let input_schema = match &tool.input_schema {
        Some(schema) => object(schema, "inputSchema")?,
        None => JsonObject::from_iter([("type".to_owned(), "object".into())]),
    };
    let output_schema = match &tool.output_schema {
        // `null` there reads as no output schema, as MCP's own parse has it.
        Some(schema) if schema.is_null() => None,
        Some(schema) => Some(Arc::new(object(schema, "outputSchema")?)),
        None => None,
    };
    let mut wire = rmcp::model::Tool::default();
    wire.name = Cow::Owned(tool.name.clone());
    wire.title = tool.title.clone();
    wire.description = tool.description.clone().map(Cow::Owned);
    wire.input_schema = Arc::new(input_schema);
    wire.output_schema = output_schema;
    wire.annotations = tool.annotations.as_ref().map(|hints| {
        let mut annotations = ToolAnnotations::default();
        annotations.title = hints.title.clone();
        annotations.read_only_hint = hints.read_only_hint;
        annotations.destructive_hint = hints.destructive_hint;
        annotations.idempotent_hint = hints.idempotent_hint;
        annotations.open_world_hint = hints.open_world_hint;
        annotations
    });
    wire.meta = tool.meta.clone().map(MetaObject);
    Ok(wire)
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_catalog::ToolAnnotations as Hints;
    use portcullis_catalog::tool::CachedTools;
    use serde_json::{Value, json};

    /// What the definition's serde shapes make of it: the reference.
    fn through_json(tool: &Tool) -> Option<rmcp::model::Tool> {
        let mut value = serde_json::to_value(tool).ok()?;
        value
            .as_object_mut()?
            .entry("inputSchema")
            .or_insert_with(|| json!({"type": "object"}));
        serde_json::from_value(value).ok()
    }

    fn tools() -> Vec<Tool> {
        let schema =
            json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
        let full = Tool::new("full")
            .with_title("Full")
            .with_description("Every field.")
            .with_input_schema(schema.clone())
            .with_output_schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}}))
            .with_annotations(Hints {
                title: Some("Old title".into()),
                read_only_hint: Some(true),
                destructive_hint: Some(false),
                idempotent_hint: None,
                open_world_hint: Some(true),
            });
        let mut with_meta = Tool::new("meta").with_description("Has _meta.");
        with_meta.meta = Some(
            json!({"ui": {"resourceUri": "ui://x"}, "k": [1, 2]})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        let stored: CachedTools = serde_json::from_value(json!([
            {"name": "stored", "description": "Schema kept as text.", "inputSchema": schema},
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        let mut listed = vec![
            full,
            with_meta,
            Tool::new("null_output").with_output_schema(Value::Null),
            Tool::new("bare"),
            Tool::new("empty_hints").with_annotations(Hints::default()),
            Tool::new("ünïcode").with_description("«quotes» \"and\" \\ \u{1f}"),
        ];
        listed.extend(stored.0);
        listed
    }

    #[test]
    fn the_wire_form_is_what_the_json_round_trip_makes() {
        for tool in tools() {
            let direct = to_wire_tool(&tool).unwrap_or_else(|e| panic!("{}: {e}", tool.name));
            assert_eq!(Some(&direct), through_json(&tool).as_ref(), "{}", tool.name);
        }
    }

    #[test]
    fn a_stored_schema_stays_text_in_the_definition() {
        let stored = tools().pop().unwrap_or_else(|| panic!("a stored tool"));
        let before = serde_json::to_string(&stored).unwrap_or_default();
        let wire = to_wire_tool(&stored).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(wire.input_schema["required"], json!(["q"]));
        // Serialised from its text, byte for byte, after the copy.
        assert_eq!(serde_json::to_string(&stored).unwrap_or_default(), before);
    }

    #[test]
    fn a_schema_that_is_not_an_object_is_refused() {
        for (tool, field) in [
            (Tool::new("t").with_input_schema(json!(true)), "inputSchema"),
            (
                Tool::new("t").with_output_schema(Value::Array(vec![])),
                "outputSchema",
            ),
        ] {
            let error = to_wire_tool(&tool).map(|_| ()).unwrap_err();
            assert_eq!(error.code(), Some("ERR_PLUGIN_MANIFEST_INVALID"));
            assert!(error.to_string().contains(field), "{error}");
            assert_eq!(through_json(&tool), None, "the round trip refused it too");
        }
    }
}
