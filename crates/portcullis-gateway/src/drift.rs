//! What changed since a server was trusted, as data: the report `portcullis
//! drift` prints and `retrust` shows before it records a new baseline.
//!
//! A [`ServerDrift`] holds, for one server, each quarantined tool's trusted
//! and current definition field by field ([`ToolDrift`]: title,
//! description, input schema, annotations, output schema, schemas
//! pretty-printed with sorted keys so only real changes show), the tools
//! withheld because they were published after the baseline, those removed,
//! and the same for prompts, resources and resource templates against their
//! pins ([`PinnedDrift`]). Collecting it needs a started gateway and its
//! store; rendering it is the command line's job.

use portcullis_catalog::Tool;
use portcullis_catalog::definition::{Prompt, Resource, ResourceTemplate};
use portcullis_catalog::drift::detect_drift;
use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::pins::{self, PinKind};
use portcullis_upstream::Toolset;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::config::Config;

/// What `drift` found, for every server it looked at. `--json` prints it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// True when at least one server drifted (the exit code says the same).
    pub drift: bool,
    /// The connected servers in scope, in catalogue order, drifted or not.
    pub servers: Vec<ServerDrift>,
    /// Servers in scope that could not be connected, so were not checked.
    pub unreachable: Vec<Unreachable>,
}

/// How one server differs from its baseline.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerDrift {
    /// The server's (effective) name, as `retrust` takes it.
    pub server: String,
    /// Tools whose definition changed since they were trusted.
    pub quarantined: Vec<ToolDrift>,
    /// Tools published after the baseline was recorded.
    pub withheld: Vec<AddedTool>,
    /// Tool names in the baseline that the server no longer publishes.
    pub removed: Vec<String>,
    /// Whether its baseline pins prompts, resources and templates. False
    /// for a baseline recorded before pinning (they then pass unpinned
    /// until a re-trust), and for a native plugin or app (which has none).
    pub pinned: bool,
    /// Its prompts against their pins.
    pub prompts: PinnedDrift,
    /// Its resources against their pins.
    pub resources: PinnedDrift,
    /// Its resource templates against their pins.
    pub templates: PinnedDrift,
    /// The baseline a re-trust of what was shown records: the current
    /// tools' fingerprints, with the pins of the current prompts, resources
    /// and templates.
    #[serde(skip)]
    pub fingerprints: Fingerprints,
    /// The server publishes prompts or resources its baseline does not pin
    /// (a baseline from before pinning): a re-trust pins them.
    #[serde(skip)]
    pub unpinned: bool,
    /// The current tool definitions, when they are known without the
    /// store's cache (a native plugin's or app's, from loading it): a
    /// re-trust keeps them as the trusted definitions.
    #[serde(skip)]
    pub listing: Option<Vec<Tool>>,
}

impl ServerDrift {
    /// True when the server matches its baseline exactly.
    pub fn is_clean(&self) -> bool {
        self.quarantined.is_empty()
            && self.withheld.is_empty()
            && self.removed.is_empty()
            && self.prompts.is_empty()
            && self.resources.is_empty()
            && self.templates.is_empty()
    }

    /// Each kind besides tools with its drift, in report order.
    pub fn pinned_kinds(&self) -> [(PinKind, &PinnedDrift); 3] {
        [
            (PinKind::Prompt, &self.prompts),
            (PinKind::Resource, &self.resources),
            (PinKind::Template, &self.templates),
        ]
    }
}

/// How one kind of a server's definitions besides tools (prompts,
/// resources or resource templates) differs from the pins of its baseline.
/// All three are withheld from clients until a re-trust.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PinnedDrift {
    /// Definitions whose pinned text changed.
    pub changed: Vec<DefinitionDrift>,
    /// Ids (prompt names, resource URIs, URI templates) published after
    /// the pins were recorded.
    pub added: Vec<String>,
    /// Pinned ids the server no longer publishes.
    pub removed: Vec<String>,
}

impl PinnedDrift {
    /// True when nothing of this kind drifted.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.added.is_empty() && self.removed.is_empty()
    }
}

/// One prompt, resource or template whose pinned text changed.
#[derive(Debug, Clone, Serialize)]
pub struct DefinitionDrift {
    /// Its name (a prompt), URI (a resource) or URI template.
    pub id: String,
    /// The pinned fields that differ (`title`, `description`, `arguments`
    /// of a prompt; `name`, `title`, `description`, `mimeType` of a
    /// resource or template); empty when the trusted text is unknown.
    pub changed: Vec<&'static str>,
    /// The pinned text that was trusted (the fields above, plus the id);
    /// null when the baseline does not keep it.
    pub trusted: Option<Value>,
    /// The same fields of what the server lists now.
    pub current: Value,
}

/// One quarantined tool: its trusted and current definitions.
#[derive(Debug, Clone, Serialize)]
pub struct ToolDrift {
    /// The tool's name on its server.
    pub tool: String,
    /// The qualified name it is listed under, when it is listed (a filter may
    /// hide it).
    pub name: Option<String>,
    /// The fields that differ (`title`, `description`, `inputSchema`,
    /// `annotations`, `outputSchema`); empty when the trusted definition is
    /// unknown.
    pub changed: Vec<&'static str>,
    /// The definition the baseline was recorded from; null when the store
    /// did not keep it (a baseline recorded by an older version, or from a
    /// listing that was not cached).
    pub trusted: Option<Tool>,
    /// The definition the server publishes now.
    pub current: Tool,
}

/// A tool published after the baseline: withheld until a re-trust.
#[derive(Debug, Clone, Serialize)]
pub struct AddedTool {
    /// The tool's name on its server.
    pub tool: String,
    /// The qualified name it would be listed under.
    pub name: String,
}

/// A server in scope that was not checked.
#[derive(Debug, Clone, Serialize)]
pub struct Unreachable {
    /// The configured name.
    pub server: String,
    /// Why, in the connector's words (never a server's).
    pub reason: String,
}

/// One field of a definition as shown: JSON name, label, rendered text
/// (`None`: the definition has no such field).
pub type Field = (&'static str, &'static str, Option<String>);

/// The fields of a definition the fingerprint covers, in the order they are
/// shown.
pub fn fields(tool: &Tool) -> [Field; 5] {
    let json = |value: Option<Value>| value.map(|v| pretty(&v));
    [
        ("title", "title", tool.title.clone()),
        ("description", "description", tool.description.clone()),
        (
            "inputSchema",
            "input schema",
            json(tool.input_schema.clone().map(Value::from)),
        ),
        (
            "annotations",
            "annotations",
            json(
                tool.annotations
                    .as_ref()
                    .and_then(|a| serde_json::to_value(a).ok()),
            ),
        ),
        (
            "outputSchema",
            "output schema",
            json(tool.output_schema.clone().map(Value::from)),
        ),
    ]
}

/// Pretty JSON with object keys sorted at every depth, so two schemas that
/// differ only in key order render identically (the fingerprint ignores key
/// order too), and a diff shows only what really changed.
pub fn pretty(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = Map::with_capacity(map.len());
                for key in keys {
                    out.insert(key.clone(), sorted(&map[key.as_str()]));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string_pretty(&sorted(value)).unwrap_or_else(|_| value.to_string())
}

/// The fields of `current` that differ from `trusted`.
pub fn changed_fields(trusted: &Tool, current: &Tool) -> Vec<&'static str> {
    fields(trusted)
        .into_iter()
        .zip(fields(current))
        .filter(|((_, _, a), (_, _, b))| a != b)
        .map(|((key, _, _), _)| key)
        .collect()
}

/// The pinned fields of a prompt, resource or template as shown: JSON
/// name, label, rendered text (`None`: absent).
pub fn pinned_fields(kind: PinKind, material: &Value) -> Vec<Field> {
    let keys: &[(&'static str, &'static str)] = match kind {
        PinKind::Prompt => &[
            ("title", "title"),
            ("description", "description"),
            ("arguments", "arguments"),
        ],
        PinKind::Resource | PinKind::Template => &[
            ("name", "name"),
            ("title", "title"),
            ("description", "description"),
            ("mimeType", "MIME type"),
        ],
    };
    keys.iter()
        .map(|(key, label)| {
            let text = material.get(*key).map(|value| match value {
                Value::String(text) => text.clone(),
                other => pretty(other),
            });
            (*key, *label, text)
        })
        .collect()
}

/// The pinned fields of `current` that differ from `trusted`.
pub fn changed_pinned_fields(kind: PinKind, trusted: &Value, current: &Value) -> Vec<&'static str> {
    pinned_fields(kind, trusted)
        .into_iter()
        .zip(pinned_fields(kind, current))
        .filter(|((_, _, a), (_, _, b))| a != b)
        .map(|((key, _, _), _)| key)
        .collect()
}

/// Compares the `kind` part of two pin maps (each with its pinned texts):
/// the baseline's and the current definitions'.
pub fn compare_pins(kind: PinKind, trusted: &Fingerprints, current: &Fingerprints) -> PinnedDrift {
    let drift = detect_drift(&pins::of_kind(trusted, kind), &pins::of_kind(current, kind));
    let trusted_texts = pins::trusted_definitions(trusted, kind);
    let current_texts = pins::trusted_definitions(current, kind);
    let changed = drift
        .changed
        .iter()
        .filter_map(|id| {
            let current = current_texts.get(id)?.clone();
            let trusted = trusted_texts.get(id).cloned();
            Some(DefinitionDrift {
                id: id.clone(),
                changed: trusted
                    .as_ref()
                    .map(|t| changed_pinned_fields(kind, t, &current))
                    .unwrap_or_default(),
                trusted,
                current,
            })
        })
        .collect();
    PinnedDrift {
        changed,
        added: drift.added,
        removed: drift.removed,
    }
}

/// What a server lists besides tools, now.
#[derive(Debug, Clone, Default)]
pub struct Published {
    /// Its prompts.
    pub prompts: Vec<Prompt>,
    /// Its resources.
    pub resources: Vec<Resource>,
    /// Its resource templates.
    pub templates: Vec<ResourceTemplate>,
}

/// Reads list items through JSON (rmcp's models and the catalogue's share
/// the MCP shape), as the gateway does; what it cannot read it never shows.
pub fn read_all<T: Serialize, U: serde::de::DeserializeOwned>(items: Vec<T>) -> Vec<U> {
    items
        .into_iter()
        .filter_map(|item| {
            serde_json::to_value(item)
                .ok()
                .and_then(|v| serde_json::from_value(v).ok())
        })
        .collect()
}

/// Lists `server`'s prompts, resources and templates (the kinds it
/// advertises).
pub async fn published(toolset: &Toolset, server: &str) -> Result<Published, String> {
    let upstream = toolset.passthrough();
    let capabilities = upstream.capabilities(server);
    let prompts = capabilities.as_ref().is_some_and(|c| c.prompts.is_some());
    let resources = capabilities.as_ref().is_some_and(|c| c.resources.is_some());
    let mut out = Published::default();
    if prompts {
        out.prompts = read_all(
            upstream
                .list_prompts(server)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    if resources {
        out.resources = read_all(
            upstream
                .list_resources(server)
                .await
                .map_err(|e| e.to_string())?,
        );
        out.templates = read_all(
            upstream
                .list_resource_templates(server)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(out)
}

/// `config` narrowed to the one upstream `server`, so asking about one
/// server connects only that one: its siblings are left out, and so are
/// plugins and apps. `None` (connect everything) when `server` is not an
/// upstream of the config (an Agent Plugin's server, a native plugin, an
/// app). An upstream's name, and so the row its baseline is kept under,
/// never depends on its siblings: it keeps its plain name against any
/// namesake (`resolve_server_names_keeping`). The prefix mode stays the
/// one decided over every configured source, so the tools' names are the
/// ones `serve` shows.
pub fn narrowed(config: &Config, server: &str) -> Option<Config> {
    config.upstreams.get(server)?;
    let mut narrow = config.clone();
    narrow.gateway.prefix = crate::sources::resolve_prefix(
        config.gateway.prefix,
        config.upstreams.len() + config.plugins.len(),
        config.tool_plugins.len() + config.apps.len(),
    );
    narrow.upstreams.retain(|name, _| name == server);
    narrow.plugins.clear();
    narrow.tool_plugins.clear();
    narrow.apps.clear();
    Some(narrow)
}
