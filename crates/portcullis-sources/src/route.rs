//! The HTTP route model both route tables and OpenAPI documents become, and
//! how a route becomes a tool.
//!
//! A route's path, query and header parameters and its JSON body's top-level
//! properties merge into one flat input schema (an MCP tool takes one
//! arguments object); a body property overrides a parameter of the same name
//! in the schema. A call splits the flat arguments back: a parameter's name
//! goes to its location (path first, then query, then header), anything
//! else to the body.

use http::Method;
use portcullis_catalog::{Tool, ToolAnnotations};
use portcullis_handler::Access;
use serde_json::{Map, Value, json};

/// Where a parameter travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamLocation {
    /// A `{name}` or `:name` segment of the path.
    Path,
    /// A query-string pair.
    Query,
    /// A request header.
    Header,
}

/// One route parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// Its name (also the argument name).
    pub name: String,
    /// Where it travels.
    pub location: ParamLocation,
    /// Whether the tool requires it.
    pub required: bool,
    /// Its (normalised) JSON Schema.
    pub schema: Value,
}

/// Whether a route changes anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Safety {
    /// `safety: "read-only"`: `readOnlyHint: true`.
    ReadOnly,
    /// `safety: "write"` or unstated: `readOnlyHint: false`, `destructiveHint: true`.
    Write,
}

/// One HTTP route an application serves, ready to become a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRoute {
    /// The tool id (sanitised).
    pub id: String,
    /// The id as the route table or document declared it.
    pub declared_id: String,
    /// What the model routes on.
    pub description: Option<String>,
    /// The HTTP method.
    pub method: Method,
    /// The path template (`/devices/{id}` or `/devices/:id`).
    pub path: String,
    /// Path, query and header parameters (cookies are ignored).
    pub params: Vec<Param>,
    /// The JSON body's object schema (normalised), if the route takes one.
    pub body: Option<Value>,
    /// Read-only or write.
    pub safety: Safety,
    /// Authentication and permissions (`auth`, `permissions`).
    pub access: Access,
}

/// The tool id rule: every run of characters outside `[a-zA-Z0-9]`
/// becomes one `_`.
///
/// ```
/// use portcullis_sources::route::sanitize_id;
///
/// assert_eq!(sanitize_id("devices.get"), "devices_get");
/// assert_eq!(sanitize_id("GET /devices/:id"), "GET_devices_id");
/// ```
pub fn sanitize_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    let mut in_run = false;
    for c in id.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    out
}

impl HttpRoute {
    /// The tool the model sees.
    pub fn tool(&self) -> Tool {
        let mut properties = Map::new();
        let mut required: Vec<String> = Vec::new();
        for param in &self.params {
            properties.insert(param.name.clone(), param.schema.clone());
            if param.required {
                required.push(param.name.clone());
            }
        }
        if let Some(body) = &self.body {
            if let Some(Value::Object(body_properties)) = body.get("properties") {
                for (name, schema) in body_properties {
                    // The body wins: its definition, and its say on whether
                    // the name is required.
                    properties.insert(name.clone(), schema.clone());
                    required.retain(|r| r != name);
                }
            }
            if let Some(Value::Array(names)) = body.get("required") {
                required.extend(names.iter().filter_map(Value::as_str).map(str::to_owned));
            }
        }
        // Each name once: a name listed twice (two parameters of one name,
        // a body repeating a parameter) makes a schema no validator takes.
        let mut seen = std::collections::HashSet::new();
        required.retain(|name| seen.insert(name.clone()));
        let mut schema = json!({"type": "object", "properties": properties});
        if !required.is_empty() {
            schema["required"] = json!(required);
        }
        let annotations = match self.safety {
            Safety::ReadOnly => ToolAnnotations::read_only(true),
            Safety::Write => ToolAnnotations {
                read_only_hint: Some(false),
                destructive_hint: Some(true),
                ..Default::default()
            },
        };
        let mut tool = Tool::new(self.id.clone())
            .with_input_schema(schema)
            .with_annotations(annotations);
        tool.description = self.description.clone();
        tool
    }

    /// Splits flat arguments into path, query, header and body groups.
    pub fn split(&self, args: &Value) -> SplitArgs {
        let mut split = SplitArgs::default();
        let Value::Object(args) = args else {
            return split;
        };
        for (name, value) in args {
            let location = [
                ParamLocation::Path,
                ParamLocation::Query,
                ParamLocation::Header,
            ]
            .into_iter()
            .find(|loc| {
                self.params
                    .iter()
                    .any(|p| p.location == *loc && &p.name == name)
            });
            let target = match location {
                Some(ParamLocation::Path) => &mut split.path,
                Some(ParamLocation::Query) => &mut split.query,
                Some(ParamLocation::Header) => &mut split.headers,
                None => &mut split.body,
            };
            target.insert(name.clone(), value.clone());
        }
        split
    }
}

/// Arguments split by where they travel.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SplitArgs {
    /// Path parameters.
    pub path: Map<String, Value>,
    /// Query parameters.
    pub query: Map<String, Value>,
    /// Header parameters.
    pub headers: Map<String, Value>,
    /// Everything else.
    pub body: Map<String, Value>,
}

/// Header names a route may not take as parameters: the transport's own and
/// the gateway's identity and signature headers (`x-portcullis-*` and
/// RFC 9421's and RFC 9530's), which a model must never set.
pub(crate) fn is_reserved_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.starts_with("x-portcullis-")
        || matches!(
            name.as_str(),
            "host"
                | "content-length"
                | "content-type"
                | "transfer-encoding"
                | "connection"
                | "upgrade"
                | "te"
                | "trailer"
                | "keep-alive"
                | "proxy-authorization"
                | "signature"
                | "signature-input"
                | "content-digest"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route() -> HttpRoute {
        HttpRoute {
            id: "devices_get".into(),
            declared_id: "devices.get".into(),
            description: Some("Get a device".into()),
            method: Method::GET,
            path: "/devices/:id".into(),
            params: vec![
                Param {
                    name: "id".into(),
                    location: ParamLocation::Path,
                    required: true,
                    schema: json!({"type": "string"}),
                },
                Param {
                    name: "verbose".into(),
                    location: ParamLocation::Query,
                    required: false,
                    schema: json!({"type": "boolean"}),
                },
                Param {
                    name: "x-trace".into(),
                    location: ParamLocation::Header,
                    required: false,
                    schema: json!({"type": "string"}),
                },
            ],
            body: Some(
                json!({"type": "object", "properties": {"verbose": {"type": "integer"}, "note": {"type": "string"}}, "required": ["note"]}),
            ),
            safety: Safety::ReadOnly,
            access: Access::open(),
        }
    }

    #[test]
    fn one_flat_schema_with_the_body_winning() {
        let tool = route().tool();
        let schema = tool.input_schema.clone().unwrap();
        assert_eq!(schema["properties"]["verbose"], json!({"type": "integer"}));
        assert_eq!(schema["required"], json!(["id", "note"]));
        assert!(tool.is_read_only());
        let mut write = route();
        write.safety = Safety::Write;
        let annotations = write.tool().annotations.unwrap();
        assert_eq!(annotations.read_only_hint, Some(false));
        assert_eq!(annotations.destructive_hint, Some(true));
    }

    #[test]
    fn arguments_split_back_by_location() {
        let split =
            route().split(&json!({"id": "d1", "verbose": true, "x-trace": "t", "note": "n"}));
        assert_eq!(Value::Object(split.path), json!({"id": "d1"}));
        assert_eq!(Value::Object(split.query), json!({"verbose": true}));
        assert_eq!(Value::Object(split.headers), json!({"x-trace": "t"}));
        assert_eq!(Value::Object(split.body), json!({"note": "n"}));
        assert_eq!(route().split(&json!(null)), SplitArgs::default());
    }

    #[test]
    fn sanitising_collapses_runs() {
        assert_eq!(sanitize_id("a..b--c"), "a_b_c");
        assert_eq!(sanitize_id("café"), "caf_");
    }
}
