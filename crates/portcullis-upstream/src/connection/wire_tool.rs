//! A tool as a server lists it (rmcp's `Tool`) made ours, field by field.
//!
//! rmcp has already read each tool of a `tools/list` page into its typed
//! form (a page with a tool it cannot read fails whole), so every field has
//! a place in ours and nothing here can fail. The fields are moved, not
//! copied: going through a JSON tree and back copied every description
//! and schema of a listing once more (a gateway's cold start reads
//! thousands). Fields our model does not keep (`icons`) are dropped, as
//! reading the tool's JSON drops them. A test holds it to that route.

use std::sync::Arc;

use portcullis_catalog::{Schema, Tool, ToolAnnotations};
use rmcp::model::JsonObject;
use serde_json::Value;

/// `tool` as ours.
pub(super) fn from_wire_tool(tool: rmcp::model::Tool) -> Tool {
    let object =
        |schema: Arc<JsonObject>| Schema::from(Value::Object(Arc::unwrap_or_clone(schema)));
    let mut ours = Tool::new(tool.name.into_owned());
    ours.title = tool.title;
    ours.description = tool.description.map(|d| d.into_owned());
    ours.input_schema = Some(object(tool.input_schema));
    ours.output_schema = tool.output_schema.map(object);
    ours.annotations = tool.annotations.map(|hints| ToolAnnotations {
        title: hints.title,
        read_only_hint: hints.read_only_hint,
        destructive_hint: hints.destructive_hint,
        idempotent_hint: hints.idempotent_hint,
        open_world_hint: hints.open_world_hint,
    });
    ours.meta = tool.meta.map(|meta| meta.0);
    ours
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What reading the tool's JSON gives.
    fn through_json(tool: &rmcp::model::Tool) -> Tool {
        let value = serde_json::to_value(tool).unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn every_field_reads_as_the_tools_json_does() {
        let listed: Vec<rmcp::model::Tool> = serde_json::from_value(json!([
            {
                "name": "search",
                "title": "Search",
                "description": "Search the docs",
                "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
                "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "annotations": {"title": "Old title", "readOnlyHint": true, "destructiveHint": false,
                                "idempotentHint": true, "openWorldHint": false},
                "icons": [{"src": "https://example.com/i.png"}],
                "_meta": {"x-vendor": {"k": [1, 2]}}
            },
            {"name": "bare", "inputSchema": {}},
            {"name": "no hints", "inputSchema": {"type": "object"}, "annotations": {}},
            {"name": "empty output", "inputSchema": {"type": "object"}, "outputSchema": {}},
            {"name": "null output", "inputSchema": {"type": "object"}, "outputSchema": null, "_meta": {}},
            {"name": "titled only", "inputSchema": {"type": "object"}, "annotations": {"title": "T"}}
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        for tool in listed {
            let expected = through_json(&tool);
            let read = from_wire_tool(tool);
            assert_eq!(read, expected);
            let json = |tool: &Tool| serde_json::to_value(tool).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(json(&read), json(&expected), "{}", read.name);
        }
    }

    #[test]
    fn a_schema_rmcp_still_shares_is_copied_not_taken() {
        let mut tool = rmcp::model::Tool::default();
        tool.name = "t".into();
        tool.input_schema = Arc::new(JsonObject::from_iter([(
            "type".to_owned(),
            json!("object"),
        )]));
        let kept = Arc::clone(&tool.input_schema);
        let read = from_wire_tool(tool);
        assert_eq!(
            read.input_schema.as_deref(),
            Some(&json!({"type": "object"}))
        );
        assert_eq!(
            Arc::strong_count(&kept),
            1,
            "the conversion holds no share of it"
        );
        assert_eq!(kept.get("type"), Some(&json!("object")));
    }
}
