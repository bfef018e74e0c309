//! JSON Schema for generated tools: the subset a route's parameters and body
//! may use, normalised into a plain schema with bounded strings.
//!
//! Kept: `type` (`string`, `integer`, `number`, `boolean`, `array`,
//! `object`), `description`, `enum`, `default`, string bounds and `pattern`,
//! number bounds, array `items` and bounds, object `properties` and
//! `required`, `allOf` of objects (merged), `oneOf`/`anyOf` of objects
//! (merged loosely: only what every alternative requires stays required). A `string` without `maxLength`
//! gets 16 384, so a model cannot push an unbounded string into an
//! application. Anything else (other `oneOf`/`anyOf`, `not`, formats, external
//! `$ref`s) accepts any value; a `$ref` into the same document is resolved,
//! and nesting deeper than [`MAX_DEPTH`] (which also stops `$ref` cycles)
//! accepts any value with a note.

use portcullis_catalog::ArgumentValidator;
use serde_json::{Map, Value, json};

/// Cap on free-text arguments when the schema states no `maxLength`,
/// written into every generated string schema (and only there: a tool that
/// brings its own schema is validated as written).
pub const DEFAULT_MAX_STRING_LENGTH: u64 =
    portcullis_catalog::validation::DEFAULT_MAX_STRING_LENGTH;

/// How deep a schema (counting `$ref` hops) is followed.
pub const MAX_DEPTH: usize = 32;

/// Converts schemas, resolving local `$ref`s against `root` when given, and
/// collecting notes about what it could not keep.
pub(crate) struct SchemaConverter<'a> {
    root: Option<&'a Value>,
    pub(crate) notes: Vec<String>,
    // The `$ref`s being expanded: one seen again is a recursive type.
    expanding: Vec<String>,
    // Schema nodes still allowed: a document whose refs fan out (a tree
    // with two self-references per level) cannot blow up the conversion.
    budget: usize,
}

/// How many schema nodes one converter produces before it stops expanding.
pub const MAX_NODES: usize = 50_000;

impl<'a> SchemaConverter<'a> {
    pub(crate) fn new(root: Option<&'a Value>) -> Self {
        SchemaConverter {
            root,
            notes: Vec::new(),
            expanding: Vec::new(),
            budget: MAX_NODES,
        }
    }

    /// Resolves a local reference (`#/components/schemas/X`).
    pub(crate) fn resolve_ref(&self, reference: &str) -> Option<&'a Value> {
        let pointer = reference.strip_prefix('#')?;
        self.root?.pointer(pointer)
    }

    /// Follows `$ref`s (at most [`MAX_DEPTH`] hops) to a non-reference value.
    pub(crate) fn deref<'v>(&mut self, mut value: &'v Value) -> Option<&'v Value>
    where
        'a: 'v,
    {
        for _ in 0..MAX_DEPTH {
            match value.get("$ref").and_then(Value::as_str) {
                Some(reference) => match self.resolve_ref(reference) {
                    Some(target) => value = target,
                    None => {
                        self.notes
                            .push(format!("unresolvable $ref \"{reference}\""));
                        return None;
                    }
                },
                None => return Some(value),
            }
        }
        self.notes.push("$ref chain too long".to_owned());
        None
    }

    /// The normalised form of `schema`.
    pub(crate) fn convert(&mut self, schema: &Value, depth: usize) -> Value {
        if depth > MAX_DEPTH {
            self.notes.push(format!(
                "schema nested deeper than {MAX_DEPTH} levels; accepted as any value"
            ));
            return json!({});
        }
        let Value::Object(schema) = schema else {
            return json!({});
        };
        if self.budget == 0 {
            return json!({});
        }
        self.budget -= 1;
        if self.budget == 0 {
            self.notes.push(format!(
                "schemas larger than {MAX_NODES} nodes; the rest accepted as any value"
            ));
        }
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            if self.expanding.iter().any(|r| r == reference) {
                self.notes.push(format!(
                    "recursive $ref \"{reference}\"; the inner occurrence accepted as any value"
                ));
                return json!({});
            }
            return match self.resolve_ref(reference) {
                Some(target) => {
                    self.expanding.push(reference.to_owned());
                    let converted = self.convert(target, depth + 1);
                    self.expanding.pop();
                    converted
                }
                None => {
                    self.notes.push(format!(
                        "unresolvable $ref \"{reference}\"; accepted as any value"
                    ));
                    json!({})
                }
            };
        }

        let mut out = Map::new();
        if let Some(Value::String(description)) = schema.get("description") {
            out.insert("description".into(), description.clone().into());
        }
        if let Some(default) = schema.get("default") {
            out.insert("default".into(), default.clone());
        }
        if let Some(Value::Array(values)) = schema.get("enum")
            && !values.is_empty()
        {
            out.insert("enum".into(), Value::Array(values.clone()));
        }

        let kind = match schema.get("type") {
            Some(Value::String(kind)) => Some(kind.as_str()),
            // 3.1 / 2020-12 `["string", "null"]`: the first non-null type.
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .find(|k| *k != "null"),
            _ => None,
        };
        let kind = kind.or_else(|| schema.contains_key("properties").then_some("object"));
        match kind {
            Some("string") => {
                out.insert("type".into(), "string".into());
                copy_numbers(schema, &mut out, &["minLength", "maxLength"]);
                out.entry("maxLength")
                    .or_insert_with(|| DEFAULT_MAX_STRING_LENGTH.into());
                if let Some(Value::String(pattern)) = schema.get("pattern") {
                    // Checked with the validator's own regex engine: one
                    // pattern it cannot compile would otherwise make the
                    // whole tool unusable.
                    let probe = json!({"type": "string", "pattern": pattern});
                    if ArgumentValidator::compile("pattern", &probe).is_ok() {
                        out.insert("pattern".into(), pattern.clone().into());
                    } else {
                        self.notes.push(format!(
                            "pattern \"{pattern}\" is not a usable regular expression; dropped"
                        ));
                    }
                }
            }
            Some(kind @ ("integer" | "number")) => {
                out.insert("type".into(), kind.into());
                copy_numbers(
                    schema,
                    &mut out,
                    &["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"],
                );
            }
            Some("boolean") => {
                out.insert("type".into(), "boolean".into());
            }
            Some("array") => {
                out.insert("type".into(), "array".into());
                if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
                    out.insert("items".into(), self.convert(items, depth + 1));
                }
                copy_numbers(schema, &mut out, &["minItems", "maxItems"]);
            }
            Some("object") => {
                let (properties, required) = self.object_parts(schema, depth);
                out.insert("type".into(), "object".into());
                out.insert("properties".into(), Value::Object(properties));
                if !required.is_empty() {
                    out.insert("required".into(), required.into());
                }
            }
            _ => {
                if let Some(Value::Array(parts)) = schema.get("allOf") {
                    return self.merge_all_of(parts, out, depth);
                }
                for key in ["oneOf", "anyOf"] {
                    if let Some(Value::Array(parts)) = schema.get(key) {
                        return self.merge_alternatives(parts, out, depth);
                    }
                }
            }
        }
        Value::Object(out)
    }

    /// An object schema's converted properties and its `required` names.
    pub(crate) fn object_parts(
        &mut self,
        schema: &Map<String, Value>,
        depth: usize,
    ) -> (Map<String, Value>, Vec<String>) {
        let mut properties = Map::new();
        if let Some(Value::Object(declared)) = schema.get("properties") {
            for (name, property) in declared {
                properties.insert(name.clone(), self.convert(property, depth + 1));
            }
        }
        let mut seen = std::collections::HashSet::new();
        let required = match schema.get("required") {
            Some(Value::Array(names)) => names
                .iter()
                .filter_map(Value::as_str)
                .filter(|name| properties.contains_key(*name))
                .filter(|name| seen.insert(*name))
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        (properties, required)
    }

    fn merge_all_of(
        &mut self,
        parts: &[Value],
        mut out: Map<String, Value>,
        depth: usize,
    ) -> Value {
        let mut properties = Map::new();
        let mut required: Vec<Value> = Vec::new();
        for part in parts {
            let converted = self.convert(part, depth + 1);
            if converted.get("type").and_then(Value::as_str) != Some("object") {
                // Not all objects: nothing sound to merge into.
                return Value::Object(out);
            }
            if let Some(Value::Object(props)) = converted.get("properties") {
                properties.extend(props.clone());
            }
            if let Some(Value::Array(names)) = converted.get("required") {
                // Each name once: parts that require the same name would
                // otherwise make a schema no validator takes.
                for name in names {
                    if !required.contains(name) {
                        required.push(name.clone());
                    }
                }
            }
        }
        out.insert("type".into(), "object".into());
        out.insert("properties".into(), Value::Object(properties));
        if !required.is_empty() {
            out.insert("required".into(), Value::Array(required));
        }
        Value::Object(out)
    }
}

impl SchemaConverter<'_> {
    /// `oneOf`/`anyOf` whose alternatives are all objects: one object with
    /// every alternative's properties (the first definition of a name wins)
    /// and only the names every alternative requires. Looser than the
    /// original, never stricter: the application still validates. Any other
    /// mix accepts any value.
    fn merge_alternatives(
        &mut self,
        parts: &[Value],
        mut out: Map<String, Value>,
        depth: usize,
    ) -> Value {
        let mut properties = Map::new();
        let mut required: Option<Vec<Value>> = None;
        for part in parts {
            let converted = self.convert(part, depth + 1);
            if converted.get("type").and_then(Value::as_str) != Some("object") {
                return Value::Object(out);
            }
            if let Some(Value::Object(props)) = converted.get("properties") {
                for (name, schema) in props {
                    properties
                        .entry(name.clone())
                        .or_insert_with(|| schema.clone());
                }
            }
            let names = match converted.get("required") {
                Some(Value::Array(names)) => names.clone(),
                _ => Vec::new(),
            };
            required = Some(match required {
                None => names,
                Some(kept) => kept.into_iter().filter(|n| names.contains(n)).collect(),
            });
        }
        if parts.is_empty() {
            return Value::Object(out);
        }
        out.insert("type".into(), "object".into());
        out.insert("properties".into(), Value::Object(properties));
        if let Some(required) = required.filter(|r| !r.is_empty()) {
            out.insert("required".into(), Value::Array(required));
        }
        Value::Object(out)
    }
}

fn copy_numbers(from: &Map<String, Value>, to: &mut Map<String, Value>, keys: &[&str]) {
    for key in keys {
        if let Some(value) = from.get(*key).filter(|v| v.is_number()) {
            to.insert((*key).to_owned(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(schema: Value) -> Value {
        SchemaConverter::new(None).convert(&schema, 0)
    }

    #[test]
    fn strings_get_a_default_cap_and_keep_their_bounds() {
        assert_eq!(
            convert(json!({"type": "string", "description": "d", "format": "uuid"})),
            json!({"description": "d", "type": "string", "maxLength": 16384})
        );
        assert_eq!(
            convert(json!({"type": "string", "maxLength": 5, "minLength": 1, "pattern": "^a"})),
            json!({"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^a"})
        );
        assert_eq!(
            convert(json!({"type": ["string", "null"], "enum": ["a", "b"]})),
            json!({"enum": ["a", "b"], "type": "string", "maxLength": 16384})
        );
    }

    #[test]
    fn objects_arrays_and_unknowns() {
        let converted = convert(json!({
            "properties": {"a": {"type": "integer", "minimum": 1}, "b": {"oneOf": []}},
            "required": ["a", "ghost"]
        }));
        assert_eq!(
            converted,
            json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}, "b": {}}, "required": ["a"]})
        );
        assert_eq!(
            convert(json!({"type": "array", "items": {"type": "boolean"}, "maxItems": 3})),
            json!({"type": "array", "items": {"type": "boolean"}, "maxItems": 3})
        );
        assert_eq!(convert(json!(true)), json!({}));
        let mut converter = SchemaConverter::new(None);
        let dropped = converter.convert(&json!({"type": "string", "pattern": "(?<"}), 0);
        assert!(dropped.get("pattern").is_none());
        assert_eq!(converter.notes.len(), 1);
    }

    #[test]
    fn a_name_required_twice_is_required_once_and_the_schema_compiles() {
        for schema in [
            json!({"type": "object", "required": ["a", "a"], "properties": {"a": {"type": "integer"}}}),
            json!({"allOf": [
                {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}},
                {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}
            ]}),
        ] {
            let converted = convert(schema);
            assert_eq!(converted["required"], json!(["a"]), "{converted}");
            assert!(
                ArgumentValidator::compile("t", &converted).is_ok(),
                "{converted}"
            );
        }
    }

    #[test]
    fn alternatives_of_objects_merge_loosely() {
        let merged = convert(json!({"oneOf": [
            {"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
            {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}, "c": {"type": "boolean"}}}
        ]}));
        assert_eq!(merged["properties"]["a"]["type"], "string");
        assert_eq!(merged["properties"]["c"]["type"], "boolean");
        assert_eq!(merged["required"], json!(["a"]));
        assert_eq!(
            convert(json!({"anyOf": [{"type": "object"}, {"type": "array"}]})),
            json!({})
        );
        assert_eq!(convert(json!({"oneOf": []})), json!({}));
    }

    #[test]
    fn refs_resolve_locally_and_cycles_stop() {
        let doc = json!({"components": {"schemas": {
            "Node": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/Node"}}},
            "Named": {"type": "string"}
        }}});
        let mut converter = SchemaConverter::new(Some(&doc));
        let named = converter.convert(&json!({"$ref": "#/components/schemas/Named"}), 0);
        assert_eq!(named["type"], "string");
        let node = converter.convert(&json!({"$ref": "#/components/schemas/Node"}), 0);
        assert_eq!(node["properties"]["next"], json!({}));
        assert!(converter.notes.iter().any(|n| n.contains("recursive $ref")));
        let deep = (0..40).fold(
            json!({"type": "string"}),
            |inner, _| json!({"type": "array", "items": inner}),
        );
        let mut converter = SchemaConverter::new(None);
        converter.convert(&deep, 0);
        assert!(converter.notes.iter().any(|n| n.contains("deeper than 32")));
        let mut converter = SchemaConverter::new(Some(&doc));
        assert_eq!(
            converter.convert(&json!({"$ref": "other.yaml#/X"}), 0),
            json!({})
        );
        assert_eq!(converter.notes.len(), 1);
    }
}
