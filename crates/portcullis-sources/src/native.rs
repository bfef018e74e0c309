//! Native plugins: a directory with an `mcp-plugin.json` manifest whose tools
//! are commands (scripts or binaries) inside the directory.
//!
//! ```json
//! {
//!   "name": "site", "version": "1.0.0",
//!   "tools": [
//!     { "id": "get_status", "handler": "./tools/get-status.sh",
//!       "description": "Reports fleet status",
//!       "annotations": { "readOnlyHint": true },
//!       "inputSchema": "./tools/get-status.schema.json" }
//!   ]
//! }
//! ```
//!
//! A tool's handler is a command: Portcullis checks at load time that it exists inside the directory (lexically and through symlinks)
//! and is executable, and at call time runs it as [`crate::command`]
//! describes. Validation runs in a fixed order with fixed messages
//! (object → `name`/`version` → `tools` → each tool's `id`, `handler`,
//! `description` → `annotations`/`agent` objects → duplicate ids), then the
//! Portcullis additions (`inputSchema`, handler resolution).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use portcullis_catalog::{ArgumentValidator, Tool, ToolAnnotations};
use portcullis_handler::Registration;
use serde_json::{Map, Value};

use crate::command::{CommandHandler, CommandOptions};
use crate::containment::{Escape, resolve_inside};
use crate::error::SourceError;

/// The manifest's file name.
pub const MANIFEST_FILE: &str = "mcp-plugin.json";

/// A manifest or schema file larger than this is refused: nothing legitimate
/// is that big, and reading it would let a plugin hog memory at startup.
pub const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;

/// The `_meta` key the `agent` block travels under (annotations would strip it).
pub const AGENT_META_KEY: &str = "x-mdk-agent";

/// How a native plugin's tools run.
#[derive(Debug, Clone)]
pub struct NativeOptions {
    /// The plugin's configuration, handed to every call as `context.config`.
    pub config: Value,
    /// How long one call may run before the handler is killed (default 60 s).
    pub timeout: Duration,
    /// How much a handler may write to stdout (default 16 MiB).
    pub max_output_bytes: usize,
}

impl Default for NativeOptions {
    fn default() -> Self {
        NativeOptions {
            config: Value::Object(Map::new()),
            timeout: crate::command::DEFAULT_TIMEOUT,
            max_output_bytes: crate::command::DEFAULT_MAX_OUTPUT_BYTES,
        }
    }
}

/// One loaded tool: its definition and the command that runs it.
#[derive(Debug, Clone)]
pub struct NativeTool {
    /// The definition the model sees, shared by every registration made
    /// from it.
    pub tool: Arc<Tool>,
    /// The resolved (canonical) handler path.
    pub command: PathBuf,
}

/// A loaded, validated native plugin.
#[derive(Debug, Clone)]
pub struct NativePlugin {
    dir: PathBuf,
    label: String,
    name: String,
    version: String,
    tools: Vec<NativeTool>,
    options: NativeOptions,
}

impl NativePlugin {
    /// Loads the plugin in `dir` with default options (empty config, 60 s).
    pub fn load(dir: impl AsRef<Path>) -> Result<Self, SourceError> {
        Self::load_with(dir, NativeOptions::default())
    }

    /// Loads the plugin in `dir`, failing on the first problem with an
    /// `ERR_…` code and a message naming the directory and the tool.
    pub fn load_with(dir: impl AsRef<Path>, options: NativeOptions) -> Result<Self, SourceError> {
        let dir = dir.as_ref();
        let label = dir.display().to_string();
        let manifest = read_json_inside(dir, &label, MANIFEST_FILE, true)?;
        let Value::Object(manifest) = manifest else {
            return Err(SourceError::invalid(&label, "must be a JSON object"));
        };
        let name = required_string(&manifest, "name", &label)?;
        let version = required_string(&manifest, "version", &label)?;
        let tools = match manifest.get("tools") {
            Some(Value::Array(tools)) if !tools.is_empty() => tools,
            _ => {
                return Err(SourceError::invalid(
                    &label,
                    "\"tools\" must be a non-empty array",
                ));
            }
        };

        // First pass: the field checks, in the documented order, for every tool
        // before any file is touched.
        let mut seen = std::collections::HashSet::new();
        for tool in tools {
            let id = match tool.get("id") {
                Some(Value::String(id)) if !id.is_empty() => id.as_str(),
                _ => {
                    return Err(SourceError::invalid(
                        &label,
                        "tool missing required field \"id\"",
                    ));
                }
            };
            for field in ["handler", "description"] {
                if !matches!(tool.get(field), Some(Value::String(s)) if !s.is_empty()) {
                    return Err(SourceError::invalid(
                        &label,
                        format!("tool \"{id}\" missing required field \"{field}\""),
                    ));
                }
            }
            for field in ["annotations", "agent"] {
                if let Some(value) = tool.get(field)
                    && !value.is_object()
                {
                    return Err(SourceError::invalid(
                        &label,
                        format!("tool \"{id}\" field \"{field}\" must be an object"),
                    ));
                }
            }
            if !seen.insert(id) {
                return Err(SourceError::DuplicateToolId {
                    dir: label,
                    id: id.to_owned(),
                });
            }
        }

        let mut loaded = Vec::with_capacity(tools.len());
        for tool in tools {
            loaded.push(load_tool(dir, &label, tool)?);
        }
        Ok(NativePlugin {
            dir: dir.to_path_buf(),
            label,
            name,
            version,
            tools: loaded,
            options,
        })
    }

    /// The plugin's `name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's `version`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The directory, as given (what errors and duplicate-id messages name).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory as given, as text (the source name).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The tools, in manifest order.
    pub fn tools(&self) -> &[NativeTool] {
        &self.tools
    }

    /// One registration per tool, ready for `ToolServer::builder().register_all(..)`.
    pub fn registrations(&self) -> Vec<Registration> {
        let config = Arc::new(self.options.config.clone());
        self.tools
            .iter()
            .map(|native| {
                let handler = CommandHandler::new(
                    native.command.clone(),
                    self.dir.clone(),
                    config.clone(),
                    CommandOptions {
                        timeout: self.options.timeout,
                        max_output_bytes: self.options.max_output_bytes,
                    },
                );
                Registration::new(native.tool.clone(), handler).with_source(self.label.clone())
            })
            .collect()
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

fn load_tool(dir: &Path, label: &str, tool: &Value) -> Result<NativeTool, SourceError> {
    // The first pass guarantees these are non-empty strings.
    let id = tool["id"].as_str().unwrap_or_default();
    let handler = tool["handler"].as_str().unwrap_or_default();
    let description = tool["description"].as_str().unwrap_or_default();

    let annotations = match tool.get("annotations") {
        // Only MCP's keys survive; a wrong type for one of them is an error
        // rather than a silently dropped hint.
        Some(value) => serde_json::from_value::<ToolAnnotations>(value.clone()).map_err(|e| {
            SourceError::invalid(label, format!("tool \"{id}\" field \"annotations\": {e}"))
        })?,
        None => ToolAnnotations::default(),
    };
    let annotations = ToolAnnotations {
        // A tool that does not declare itself read-only is a write.
        read_only_hint: Some(annotations.read_only_hint.unwrap_or(false)),
        ..annotations
    };

    let mut definition = Tool::new(id)
        .with_description(description)
        .with_annotations(annotations);
    if let Some(agent) = tool.get("agent") {
        let mut meta = Map::new();
        meta.insert(AGENT_META_KEY.to_owned(), agent.clone());
        definition.meta = Some(meta);
    }
    if let Some(schema) = tool.get("inputSchema") {
        let schema = match schema {
            Value::Object(_) => schema.clone(),
            Value::String(path) => {
                read_json_inside(dir, label, path, false).map_err(|e| match e {
                    SourceError::ManifestInvalid { reason, .. } => SourceError::invalid(
                        label,
                        format!("tool \"{id}\" field \"inputSchema\": {reason}"),
                    ),
                    other => other,
                })?
            }
            _ => {
                return Err(SourceError::invalid(
                    label,
                    format!("tool \"{id}\" field \"inputSchema\" must be an object or a path"),
                ));
            }
        };
        if let Err(e) = ArgumentValidator::compile(id, &schema) {
            return Err(SourceError::invalid(
                label,
                format!("tool \"{id}\" field \"inputSchema\": {e}"),
            ));
        }
        definition.input_schema = Some(schema.into());
    }

    let command = resolve_handler(dir, label, id, handler)?;
    Ok(NativeTool {
        tool: Arc::new(definition),
        command,
    })
}

fn resolve_handler(
    dir: &Path,
    label: &str,
    id: &str,
    handler: &str,
) -> Result<PathBuf, SourceError> {
    let not_found = |reason: Option<String>| SourceError::HandlerNotFound {
        dir: label.to_owned(),
        tool: id.to_owned(),
        handler: handler.to_owned(),
        reason,
    };
    let path = resolve_inside(dir, handler).map_err(|e| not_found(e.reason()))?;
    let not_function = |reason: &str| SourceError::HandlerNotFunction {
        dir: label.to_owned(),
        tool: id.to_owned(),
        handler: handler.to_owned(),
        reason: reason.to_owned(),
    };
    let metadata = std::fs::metadata(&path).map_err(|_| not_found(None))?;
    if !metadata.is_file() {
        return Err(not_function("not a file"));
    }
    if !is_executable(&metadata) {
        return Err(not_function("not executable (chmod +x it)"));
    }
    Ok(path)
}

#[cfg(unix)]
fn is_executable(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    metadata.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_metadata: &std::fs::Metadata) -> bool {
    // No execute bit to check; spawning will tell.
    true
}

/// Reads a JSON file named relative to `dir`, refusing escapes, huge files
/// and malformed JSON. `manifest` selects the missing-file error: the
/// manifest itself is `ERR_PLUGIN_MANIFEST_MISSING`, anything else it names
/// is `ERR_PLUGIN_MANIFEST_INVALID`.
pub(crate) fn read_json_inside(
    dir: &Path,
    label: &str,
    relative: &str,
    manifest: bool,
) -> Result<Value, SourceError> {
    let path = match resolve_inside(dir, relative) {
        Ok(path) => path,
        Err(Escape::Missing(_)) if manifest => {
            return Err(SourceError::ManifestMissing {
                dir: label.to_owned(),
            });
        }
        Err(Escape::Missing(e)) => {
            return Err(SourceError::invalid(
                label,
                format!("cannot read \"{relative}\": {e}"),
            ));
        }
        Err(escape) => {
            return Err(SourceError::invalid(
                label,
                format!("\"{relative}\": {}", escape.reason().unwrap_or_default()),
            ));
        }
    };
    let text = read_bounded(&path)
        .map_err(|e| SourceError::invalid(label, format!("\"{relative}\": {e}")))?;
    serde_json::from_str(&text)
        .map_err(|e| SourceError::invalid(label, format!("\"{relative}\" is not valid JSON: {e}")))
}

/// Reads a UTF-8 regular file of at most [`MAX_MANIFEST_BYTES`] (a FIFO or
/// device is refused, never waited on).
pub(crate) fn read_bounded(path: &Path) -> Result<String, String> {
    crate::files::read_regular_to_string(path, MAX_MANIFEST_BYTES).map_err(|e| e.to_string())
}
