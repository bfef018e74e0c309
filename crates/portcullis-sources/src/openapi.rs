//! OpenAPI 3.0 and 3.1 documents (JSON or YAML) as route tables.
//!
//! Each operation becomes an [`HttpRoute`]: the tool id is the
//! `operationId` (sanitised as route ids are) or else the method and path
//! (`GET /devices/{id}` → `GET_devices_id`); the description is the
//! operation's `summary` and `description`; path, query and header
//! parameters (path-level ones included, the operation's overriding) and a
//! JSON request body merge into the input schema. `GET` and `HEAD` are
//! read-only, anything else a write, unless the operation says
//! `x-portcullis-safety: read-only | write`. `x-portcullis-auth: true` and
//! `x-portcullis-permissions: [...]` map to the route's access, and
//! `x-portcullis-stream: true` skips it, as in a route table.
//!
//! `$ref`s inside the document (`#/components/...`) are resolved, cycles
//! and deep nesting cut off (see [`crate::schema`]). What cannot be served
//! is skipped with a [`Diagnostic`] and never stops the rest: an operation
//! whose body is not a JSON object, a required body in another media type,
//! an external `$ref`, a reserved header parameter, a duplicate id.
//! Swagger 2.0 documents are refused. The document's `servers` are ignored:
//! the operator's `base_url` says where the application listens.

use std::collections::HashSet;
use std::path::Path;

use http::Method;
use portcullis_catalog::{ArgumentValidator, Diagnostic, Rule};
use portcullis_handler::Access;
use serde_json::{Map, Value};

use crate::error::SourceError;
use crate::route::{HttpRoute, Param, ParamLocation, Safety, is_reserved_header, sanitize_id};
use crate::schema::SchemaConverter;

/// A document larger than this is refused (public API descriptions reach a
/// few MiB; this leaves room without letting a file exhaust memory).
pub const MAX_DOCUMENT_BYTES: u64 = 32 * 1024 * 1024;

/// The section diagnostics from this module carry.
pub const DIAGNOSTIC_SECTION: &str = "openapi";

const METHODS: [(&str, Method); 6] = [
    ("get", Method::GET),
    ("put", Method::PUT),
    ("post", Method::POST),
    ("delete", Method::DELETE),
    ("patch", Method::PATCH),
    ("head", Method::HEAD),
];

/// A converted OpenAPI document.
#[derive(Debug, Clone)]
pub struct OpenApiDocument {
    /// The path as given (what errors and diagnostics name).
    pub label: String,
    /// `info.title`, if any.
    pub title: Option<String>,
    /// The routes that become tools, in document order.
    pub routes: Vec<HttpRoute>,
    /// What was skipped or simplified, and why.
    pub diagnostics: Vec<Diagnostic>,
}

impl OpenApiDocument {
    /// Reads and converts a document file (JSON or YAML).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        let path = path.as_ref();
        let label = path.display().to_string();
        let text = crate::files::read_regular_to_string(path, MAX_DOCUMENT_BYTES).map_err(|e| {
            if e.is_not_found() {
                SourceError::ManifestMissing { dir: label.clone() }
            } else {
                SourceError::invalid(&label, e.to_string())
            }
        })?;
        Self::parse(&label, &text)
    }

    /// Converts a document's text: JSON when it starts with `{`, else YAML.
    pub fn parse(label: &str, text: &str) -> Result<Self, SourceError> {
        let value = if text.trim_start().starts_with('{') {
            serde_json::from_str(text)
                .map_err(|e| SourceError::invalid(label, format!("is not valid JSON: {e}")))?
        } else {
            if flow_depth_exceeds(text, MAX_FLOW_DEPTH) {
                return Err(SourceError::invalid(label, "is nested too deeply"));
            }
            let yaml: serde_norway::Value = serde_norway::from_str(text)
                .map_err(|e| SourceError::invalid(label, format!("is not valid YAML: {e}")))?;
            yaml_to_json(yaml, 0)
                .ok_or_else(|| SourceError::invalid(label, "is nested too deeply"))?
        };
        Self::from_value(label, &value)
    }

    /// Converts a parsed document.
    pub fn from_value(label: &str, doc: &Value) -> Result<Self, SourceError> {
        let Value::Object(root) = doc else {
            return Err(SourceError::invalid(label, "must be a JSON object"));
        };
        match root.get("openapi").and_then(Value::as_str) {
            Some(v) if v.starts_with("3.0") || v.starts_with("3.1") => {}
            Some(v) => {
                return Err(SourceError::invalid(
                    label,
                    format!("unsupported \"openapi\" version \"{v}\" (3.0 and 3.1 are)"),
                ));
            }
            None if root.contains_key("swagger") => {
                return Err(SourceError::invalid(
                    label,
                    "Swagger 2.0 is not supported; convert it to OpenAPI 3",
                ));
            }
            None => {
                return Err(SourceError::invalid(
                    label,
                    "missing required field \"openapi\"",
                ));
            }
        }
        let title = doc
            .pointer("/info/title")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut converted = OpenApiDocument {
            label: label.to_owned(),
            title,
            routes: Vec::new(),
            diagnostics: Vec::new(),
        };
        let paths = match root.get("paths") {
            Some(Value::Object(paths)) => paths,
            Some(_) => return Err(SourceError::invalid(label, "\"paths\" must be an object")),
            None => {
                converted.note("document", "has no \"paths\"; no tools");
                return Ok(converted);
            }
        };
        let mut ids = HashSet::new();
        for (path, item) in paths {
            converted.convert_path(doc, path, item, &mut ids);
        }
        Ok(converted)
    }

    fn note(&mut self, what: &str, message: impl std::fmt::Display) {
        self.diagnostics.push(
            Diagnostic::new(
                Rule::ServerEntryInvalid,
                self.label.clone(),
                format!("{what}: {message}"),
            )
            .with_section(DIAGNOSTIC_SECTION),
        );
    }

    fn convert_path(&mut self, doc: &Value, path: &str, item: &Value, ids: &mut HashSet<String>) {
        let mut converter = SchemaConverter::new(Some(doc));
        let Some(item) = converter.deref(item).and_then(Value::as_object) else {
            self.note(
                &format!("path \"{path}\""),
                "is not a usable path item; skipped",
            );
            return;
        };
        if !path.starts_with('/') {
            self.note(
                &format!("path \"{path}\""),
                "does not start with \"/\"; skipped",
            );
            return;
        }
        let shared = item.get("parameters");
        for (key, method) in METHODS.iter() {
            let Some(operation) = item.get(*key) else {
                continue;
            };
            let what = format!("operation \"{} {path}\"", method.as_str());
            let mut converter = SchemaConverter::new(Some(doc));
            match convert_operation(
                &mut converter,
                method.clone(),
                path,
                operation,
                shared,
                &mut |m| self.note(&what, m),
            ) {
                Some(mut route) => {
                    if route.description.is_none() {
                        route.description = self.title.clone();
                    }
                    let mut notes: Vec<String> = converter.notes;
                    notes.sort();
                    notes.dedup();
                    for note in notes {
                        self.note(&what, format!("schema simplified: {note}"));
                    }
                    // A schema the server could not compile would fail the
                    // whole server; skip just this operation instead.
                    if let Err(error) = ArgumentValidator::compile(
                        &route.id,
                        &route.tool().input_schema_or_default(),
                    ) {
                        self.note(&what, format!("input schema unusable ({error}); skipped"));
                        continue;
                    }
                    if !ids.insert(route.id.clone()) {
                        self.note(
                            &what,
                            format!("tool id \"{}\" is already taken; skipped", route.id),
                        );
                        continue;
                    }
                    self.routes.push(route);
                }
                None => continue,
            }
        }
        for key in ["options", "trace"] {
            if item.contains_key(key) {
                self.note(
                    &format!("operation \"{} {path}\"", key.to_ascii_uppercase()),
                    "method not served as a tool; skipped",
                );
            }
        }
    }
}

fn convert_operation(
    converter: &mut SchemaConverter<'_>,
    method: Method,
    path: &str,
    operation: &Value,
    shared: Option<&Value>,
    note: &mut dyn FnMut(String),
) -> Option<HttpRoute> {
    let Some(operation) = operation.as_object() else {
        note("is not an object; skipped".into());
        return None;
    };
    if operation.get("x-portcullis-stream") == Some(&Value::Bool(true)) {
        note("is a stream (x-portcullis-stream); skipped".into());
        return None;
    }

    // Path-level parameters first; the operation's replace same (name, in).
    let mut declared: Vec<(String, String, &Value)> = Vec::new();
    for list in [shared, operation.get("parameters")].into_iter().flatten() {
        let Value::Array(list) = list else {
            note("has \"parameters\" that is not an array; skipped".into());
            return None;
        };
        for param in list {
            let Some(param) = converter.deref(param) else {
                note("has a parameter $ref that cannot be resolved; skipped".into());
                return None;
            };
            let (Some(name), Some(location)) = (
                param.get("name").and_then(Value::as_str),
                param.get("in").and_then(Value::as_str),
            ) else {
                note("has a parameter without \"name\" and \"in\"; skipped".into());
                return None;
            };
            declared.retain(|(n, l, _)| !(n == name && l == location));
            declared.push((name.to_owned(), location.to_owned(), param));
        }
    }
    let mut params = Vec::new();
    for (name, location, param) in declared {
        let location = match location.as_str() {
            "path" => ParamLocation::Path,
            "query" => ParamLocation::Query,
            "header" => ParamLocation::Header,
            _ => continue, // cookies are ignored, as in route tables
        };
        if location == ParamLocation::Header && is_reserved_header(&name) {
            note(format!(
                "header parameter \"{name}\" is set by the gateway; not offered"
            ));
            continue;
        }
        let mut schema = match param.get("schema") {
            Some(schema) => converter.convert(schema, 0),
            None => Value::Object(Map::new()),
        };
        if let (Some(Value::String(d)), Some(object)) =
            (param.get("description"), schema.as_object_mut())
        {
            object.insert("description".into(), Value::String(d.clone()));
        }
        params.push(Param {
            name,
            required: location == ParamLocation::Path
                || param.get("required") == Some(&Value::Bool(true)),
            location,
            schema,
        });
    }

    let mut body = None;
    if let Some(request_body) = operation.get("requestBody") {
        let Some(request_body) = converter.deref(request_body) else {
            note("has a requestBody $ref that cannot be resolved; skipped".into());
            return None;
        };
        let required = request_body.get("required") == Some(&Value::Bool(true));
        let content = request_body.get("content").and_then(Value::as_object);
        let json = content.and_then(|c| {
            c.iter()
                .find(|(media, _)| {
                    let media = media.split(';').next().unwrap_or("").trim();
                    media == "application/json" || media.ends_with("+json")
                })
                .map(|(_, m)| m)
        });
        match json.and_then(|m| m.get("schema")) {
            Some(schema) => {
                let converted = converter.convert(schema, 0);
                if converted.get("type").and_then(Value::as_str) == Some("object") {
                    body = Some(converted);
                } else {
                    note("has a JSON body that is not an object (a tool takes one arguments object); skipped".into());
                    return None;
                }
            }
            None if required => {
                let media: Vec<&str> = content
                    .map(|c| c.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                note(format!(
                    "requires a body in an unsupported media type ({}); skipped",
                    media.join(", ")
                ));
                return None;
            }
            None => {}
        }
    }

    let safety = match operation.get("x-portcullis-safety").and_then(Value::as_str) {
        Some("read-only") => Safety::ReadOnly,
        Some(_) => Safety::Write,
        None if matches!(method, Method::GET | Method::HEAD) => Safety::ReadOnly,
        None => Safety::Write,
    };
    let permissions = operation
        .get("x-portcullis-permissions")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let access = Access {
        auth: operation.get("x-portcullis-auth") == Some(&Value::Bool(true)),
        permissions,
    };

    let declared_id = operation
        .get("operationId")
        .and_then(Value::as_str)
        .filter(|id| id.chars().any(|c| c.is_ascii_alphanumeric()))
        .map(str::to_owned);
    let id = match &declared_id {
        Some(id) => sanitize_id(id),
        None => sanitize_id(&format!("{} {path}", method.as_str()))
            .trim_matches('_')
            .to_owned(),
    };
    let summary = operation
        .get("summary")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let details = operation
        .get("description")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let description = match (summary, details) {
        (Some(s), Some(d)) if s != d => Some(format!("{s}\n\n{d}")),
        (Some(s), _) => Some(s.to_owned()),
        (None, Some(d)) => Some(d.to_owned()),
        (None, None) => None,
    };
    Some(HttpRoute {
        declared_id: declared_id.unwrap_or_else(|| format!("{} {path}", method.as_str())),
        id,
        description,
        method,
        path: path.to_owned(),
        params,
        body,
        safety,
        access,
    })
}

/// Deepest `[`/`{` nesting a YAML document may use. The YAML parser's own
/// recursion limit fires only after it has scanned the whole document, which
/// takes time quadratic in the nesting: 50 000 brackets (100 KB) cost
/// tens of seconds. This scan is linear and runs first.
const MAX_FLOW_DEPTH: usize = 200;

/// True when `[`/`{` outside quotes and comments nest deeper than `limit`.
fn flow_depth_exceeds(text: &str, limit: usize) -> bool {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut comment = false;
    let mut previous = '\n';
    for c in text.chars() {
        if comment {
            comment = c != '\n';
        } else if let Some(q) = quote {
            if c == q {
                quote = None;
            }
        } else {
            match c {
                '"' | '\'' => quote = Some(c),
                '#' if previous.is_whitespace() => comment = true,
                '[' | '{' => {
                    depth += 1;
                    if depth > limit {
                        return true;
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        previous = c;
    }
    false
}

/// YAML to JSON: keys stringified (YAML allows `200:` as an integer key),
/// tags dropped, nesting bounded.
fn yaml_to_json(value: serde_norway::Value, depth: usize) -> Option<Value> {
    use serde_norway::Value as Y;
    if depth > 256 {
        return None;
    }
    Some(match value {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                n.as_f64()
                    .and_then(serde_json::Number::from_f64)
                    .map(Value::Number)
                    .unwrap_or(Value::Null)
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(
            items
                .into_iter()
                .map(|v| yaml_to_json(v, depth + 1))
                .collect::<Option<Vec<_>>>()?,
        ),
        Y::Mapping(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                let key = match key {
                    Y::String(s) => s,
                    Y::Number(n) => n.to_string(),
                    Y::Bool(b) => b.to_string(),
                    Y::Null => "null".to_owned(),
                    // Complex keys mean nothing in OpenAPI.
                    _ => continue,
                };
                out.insert(key, yaml_to_json(value, depth + 1)?);
            }
            Value::Object(out)
        }
        Y::Tagged(tagged) => yaml_to_json(tagged.value, depth + 1)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_keys_become_strings() {
        let doc = OpenApiDocument::parse(
            "t.yaml",
            "openapi: 3.0.3\ninfo: {title: T, version: '1'}\npaths:\n  /x:\n    get:\n      responses:\n        200: {description: ok}\n",
        )
        .unwrap();
        assert_eq!(doc.routes.len(), 1);
        assert_eq!(doc.routes[0].id, "GET_x");
        assert_eq!(doc.routes[0].description.as_deref(), Some("T"));
    }

    #[test]
    fn flow_nesting_is_measured_outside_quotes_and_comments() {
        assert!(flow_depth_exceeds("a: [[[[x]]]]", 3));
        assert!(!flow_depth_exceeds("a: [[[x]]]", 3));
        assert!(!flow_depth_exceeds(
            "a: \"[[[[[[\"\nb: '{{{{{{' # [[[[[[\n",
            3
        ));
    }

    #[test]
    fn versions_and_shapes_are_checked() {
        let e = OpenApiDocument::from_value("d", &json!({"swagger": "2.0"})).unwrap_err();
        assert!(e.to_string().contains("Swagger 2.0"));
        assert!(OpenApiDocument::from_value("d", &json!({"openapi": "4.0"})).is_err());
        assert!(OpenApiDocument::from_value("d", &json!([])).is_err());
        let empty = OpenApiDocument::from_value("d", &json!({"openapi": "3.1.0"})).unwrap();
        assert!(empty.routes.is_empty());
        assert_eq!(empty.diagnostics.len(), 1);
    }
}
