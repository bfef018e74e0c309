//! Application route tables (`mdk-plugin.json`, the Gateway plugin format):
//! one tool per route, forwarded to the application over HTTP.
//!
//! ```json
//! {
//!   "name": "site", "version": "1.0.0", "description": "The site app",
//!   "routes": [
//!     { "id": "devices.get", "safety": "read-only",
//!       "http": { "method": "GET", "path": "/devices/{id}",
//!                 "parameters": [{ "in": "path", "name": "id", "required": true,
//!                                  "schema": { "type": "string" } }] } }
//!   ]
//! }
//! ```
//!
//! Checks follow the Gateway loader: an object with `name`, `version` and a
//! non-empty `routes` array; each route with an `id` (unique), a method
//! (`http.method` or legacy `method`; `GET POST PUT DELETE PATCH`) and a path
//! (`http.path` or legacy `path`). The route's `handler` is not read: no
//! application code runs in the gateway. `stream: true` routes are skipped
//! (an MCP call has no raw response to stream into).

use std::path::Path;

use http::Method;
use portcullis_handler::Access;
use serde_json::{Map, Value};

use crate::error::SourceError;
use crate::native::read_json_inside;
use crate::route::{HttpRoute, Param, ParamLocation, Safety, is_reserved_header, sanitize_id};
use crate::schema::SchemaConverter;

/// The route table's file name inside an application directory.
pub const ROUTE_TABLE_FILE: &str = "mdk-plugin.json";

/// A loaded route table.
#[derive(Debug, Clone)]
pub struct RouteTable {
    /// The path as given (what errors name).
    pub label: String,
    /// The manifest's `name`.
    pub name: String,
    /// The manifest's `version`.
    pub version: String,
    /// The routes that become tools (stream routes dropped), in order.
    pub routes: Vec<HttpRoute>,
    /// Ids of the `stream: true` routes that were skipped.
    pub skipped_streams: Vec<String>,
}

impl RouteTable {
    /// Loads `path`: an application directory holding `mdk-plugin.json`, or
    /// the route table file itself.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        let path = path.as_ref();
        let label = path.display().to_string();
        let value = if path.is_dir() {
            read_json_inside(path, &label, ROUTE_TABLE_FILE, true)?
        } else {
            let (dir, file) = match (path.parent(), path.file_name().and_then(|f| f.to_str())) {
                (Some(dir), Some(file)) => (
                    if dir.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        dir
                    },
                    file,
                ),
                _ => return Err(SourceError::ManifestMissing { dir: label }),
            };
            read_json_inside(dir, &label, file, true)?
        };
        Self::from_value(&label, &value)
    }

    /// Validates and converts an already parsed route table.
    pub fn from_value(label: &str, value: &Value) -> Result<Self, SourceError> {
        let Value::Object(manifest) = value else {
            return Err(SourceError::invalid(label, "must be a JSON object"));
        };
        let name = required_string(manifest, "name", label)?;
        let version = required_string(manifest, "version", label)?;
        let description = manifest.get("description").and_then(Value::as_str);
        let routes = match manifest.get("routes") {
            Some(Value::Array(routes)) if !routes.is_empty() => routes,
            _ => {
                return Err(SourceError::invalid(
                    label,
                    "\"routes\" must be a non-empty array",
                ));
            }
        };

        let mut seen = std::collections::HashSet::new();
        let mut converted = Vec::new();
        let mut skipped_streams = Vec::new();
        for route in routes {
            let id = match route.get("id") {
                Some(Value::String(id)) if !id.is_empty() => id.as_str(),
                _ => {
                    return Err(SourceError::invalid(
                        label,
                        "route missing required field \"id\"",
                    ));
                }
            };
            if !seen.insert(id) {
                return Err(SourceError::DuplicateRouteId {
                    dir: label.to_owned(),
                    id: id.to_owned(),
                });
            }
            let route = parse_route(label, id, route, description)?;
            if route.1 {
                skipped_streams.push(id.to_owned());
            } else {
                converted.push(route.0);
            }
        }
        Ok(RouteTable {
            label: label.to_owned(),
            name,
            version,
            routes: converted,
            skipped_streams,
        })
    }
}

fn required_string(
    manifest: &Map<String, Value>,
    field: &str,
    label: &str,
) -> Result<String, SourceError> {
    match manifest.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(SourceError::invalid(
            label,
            format!("missing required field \"{field}\""),
        )),
    }
}

/// One route, and whether it is a stream route (skipped).
fn parse_route(
    label: &str,
    id: &str,
    route: &Value,
    manifest_description: Option<&str>,
) -> Result<(HttpRoute, bool), SourceError> {
    let invalid = |reason: String| SourceError::invalid(label, format!("route \"{id}\" {reason}"));
    let http = route.get("http");
    let field = |name: &str| http.and_then(|h| h.get(name)).or_else(|| route.get(name));

    let method = match field("method") {
        Some(Value::String(m)) if !m.is_empty() => m.to_ascii_uppercase(),
        _ => return Err(invalid("missing required field \"method\"".into())),
    };
    let method = match method.as_str() {
        "GET" => Method::GET,
        "POST" => Method::POST,
        "PUT" => Method::PUT,
        "DELETE" => Method::DELETE,
        "PATCH" => Method::PATCH,
        other => return Err(invalid(format!("has an unsupported method \"{other}\""))),
    };
    let path = match field("path") {
        Some(Value::String(p)) if p.starts_with('/') => p.clone(),
        _ => return Err(invalid("missing required field \"path\"".into())),
    };

    let mut converter = SchemaConverter::new(None);
    let mut params = Vec::new();
    match http.and_then(|h| h.get("parameters")) {
        None => {}
        Some(Value::Array(list)) => {
            for param in list {
                let (Some(name), Some(location)) = (
                    param.get("name").and_then(Value::as_str),
                    param.get("in").and_then(Value::as_str),
                ) else {
                    return Err(invalid(
                        "has a parameter without \"name\" and \"in\"".into(),
                    ));
                };
                let location = match location {
                    "path" => ParamLocation::Path,
                    "query" => ParamLocation::Query,
                    "header" => ParamLocation::Header,
                    // Cookies and unknown locations are ignored: no argument is sent there.
                    _ => continue,
                };
                if location == ParamLocation::Header && is_reserved_header(name) {
                    return Err(invalid(format!("header parameter \"{name}\" is reserved")));
                }
                let mut schema = converter.convert(param.get("schema").unwrap_or(&Value::Null), 0);
                if let (Some(Value::String(d)), Some(object)) =
                    (param.get("description"), schema.as_object_mut())
                {
                    object.insert("description".into(), Value::String(d.clone()));
                }
                params.push(Param {
                    name: name.to_owned(),
                    location,
                    required: param.get("required") == Some(&Value::Bool(true)),
                    schema,
                });
            }
        }
        Some(_) => return Err(invalid("field \"http.parameters\" must be an array".into())),
    }
    let body = http
        .and_then(|h| h.pointer("/requestBody/content/application~1json/schema"))
        .map(|schema| converter.convert(schema, 0))
        .filter(|schema| schema.get("type").and_then(Value::as_str) == Some("object"));

    let safety = match route.get("safety").and_then(Value::as_str) {
        Some("read-only") => Safety::ReadOnly,
        // "write", unstated or anything else fails safe to a write.
        _ => Safety::Write,
    };
    let permissions = match route.get("permissions") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|p| p.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| invalid("field \"permissions\" must be an array of strings".into()))?,
        Some(_) => {
            return Err(invalid(
                "field \"permissions\" must be an array of strings".into(),
            ));
        }
    };
    let access = Access {
        auth: route.get("auth") == Some(&Value::Bool(true)),
        permissions,
    };
    let description = route
        .get("description")
        .and_then(Value::as_str)
        .filter(|d| !d.is_empty())
        .or(manifest_description)
        .map(str::to_owned);
    for note in converter.notes {
        tracing::debug!(route = id, %note, "route schema simplified");
    }
    let stream = route.get("stream") == Some(&Value::Bool(true));
    Ok((
        HttpRoute {
            id: sanitize_id(id),
            declared_id: id.to_owned(),
            description,
            method,
            path,
            params,
            body,
            safety,
            access,
        },
        stream,
    ))
}
