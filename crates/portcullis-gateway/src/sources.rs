//! Sources besides `[upstreams.*]`: Agent Plugins directories
//! (`[[plugins]]`), native tool plugins (`[[tool_plugins]]`) and
//! applications (`[apps.NAME]`, a route table or an OpenAPI document), joined
//! into the gateway's one catalogue.
//!
//! How each kind joins:
//!
//! - An **Agent Plugins directory** is loaded with
//!   [`portcullis_upstream::load_agent_plugin`]; its MCP servers are
//!   upstreams like any other (named as `mcp.json` names them, a name shared
//!   with another server suffixed on both sides by the connector), with the
//!   same trust baseline, filters and call path. A rejected plugin or a
//!   skipped server entry is a finding; the other plugins and servers load.
//! - A **native plugin** or an **app** is loaded with `portcullis-sources`
//!   into tool registrations (a command handler per tool, or an HTTP
//!   forwarder per route, signed with the gateway key). Their tools are
//!   projected through [`Catalogue::project`], the same function that
//!   projects the upstreams' listings, with the same [`ProjectionOptions`]
//!   (prefix, disclosure budget, `always_load`): names, collisions between
//!   sources, trust baseline, quarantine stubs and disclosure tiers follow
//!   exactly the upstreams' rules. [`SourceCatalogue::registrations`] then
//!   wraps each tool's handler in the upstream call path's order (policy and
//!   approval, quarantine refusal, validation against the full schema) and
//!   hands them to the same `ToolServer`, so the exposure gate, framing and
//!   the output budget apply once, at the edge.
//!
//! Two catalogues exist (the connector's and this one) because the connector
//! projects inside `connect`; what makes them one map:
//!
//! - under `prefix = "auto"` the caller resolves the prefix once, counting
//!   every configured source (upstreams, plugin servers, native plugins,
//!   apps), and hands the resolved mode to both projections;
//! - a source whose name is an upstream's is projected under its suffixed
//!   name (`name_<hash>`) with a `server-name-collision` diagnostic; the
//!   upstream keeps its name, so adding a plugin never renames an upstream's
//!   tools or moves its trust baseline;
//! - a source tool whose projected name an upstream tool already has is
//!   withheld with the reason, as the catalogue does inside one projection;
//! - one `mcp__describe_tool` answers from both catalogues.
//!
//! Trust: a source's tool fingerprints are recorded in the store on first
//! use under its effective name, exactly like an upstream's, and enforced on
//! every later run: a manifest or document edited between runs quarantines
//! the changed tools and withholds added ones. A native plugin's identity is
//! its directory, an app's its `base_url`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use portcullis_catalog::catalogue::{EntryKind, Route, StatusRow, WithheldTool};
use portcullis_catalog::disclosure::{DESCRIBE_TOOL_NAME, describe_tool_definition};
use portcullis_catalog::gate::CallDecision;
use portcullis_catalog::naming::Prefix;
use portcullis_catalog::server::resolve_server_names;
use portcullis_catalog::validation::normalize_arguments;
use portcullis_catalog::{
    ArgumentValidator, Catalogue, Diagnostic, Endpoint, ProjectionOptions, Rule, ServerIdentity,
    ServerListing, Tool, ToolAnnotations, ToolResult,
};
use portcullis_handler::{Access, CallContext, Registration, ToolError, ToolHandler};
use portcullis_sources::{
    App, AppOptions, AppSource, GatewayKey, NativePlugin, OpenApiDocument, RouteTable, ToolSource,
};
use portcullis_store::{Store, trust};
use portcullis_upstream::{McpServerConfig, PluginLoad, Toolset, load_agent_plugin};
use serde_json::Value;

use crate::config::{AppDescription, Config};

/// The public key file written beside the private key when an app names no
/// `key_file`.
pub const DEFAULT_PUBLIC_KEY_FILE: &str = "gateway.pub";

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Something did not load (a plugin, a server entry, a manifest, an app).
    Error,
    /// It loaded, with a remark (an unknown manifest field, a skipped
    /// OpenAPI operation, a secret-looking env value).
    Warning,
}

/// One thing loading a source reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How much it matters.
    pub severity: Severity,
    /// Where, in config terms: `plugins[0] (path)`, `tool_plugins[1] (path)`,
    /// `apps.site`.
    pub origin: String,
    /// What happened.
    pub message: String,
}

impl Finding {
    fn error(origin: &str, message: impl Into<String>) -> Self {
        Finding {
            severity: Severity::Error,
            origin: origin.to_owned(),
            message: message.into(),
        }
    }

    fn warning(origin: &str, message: impl Into<String>) -> Self {
        Finding {
            severity: Severity::Warning,
            origin: origin.to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.message)
    }
}

/// Which key signs requests to applications.
#[derive(Debug, Clone)]
pub enum Signing {
    /// No key: `check` validates without creating or reading one.
    Unsigned,
    /// The gateway key.
    Key(Arc<GatewayKey>),
    /// The key could not be loaded: every app is skipped (an unsigned
    /// request would let anyone on the machine pose as the gateway).
    Broken(String),
}

/// The gateway key for `config`'s apps: loaded from (or created in)
/// `data_dir`, its public half written to every app's `key_file` (default
/// `data_dir/gateway.pub`). Nothing happens without apps.
pub fn signing(config: &Config) -> Signing {
    if config.apps.is_empty() {
        return Signing::Unsigned;
    }
    let data_dir = &config.gateway.data_dir;
    let key = match GatewayKey::load_or_create(data_dir) {
        Ok(key) => Arc::new(key),
        Err(e) => return Signing::Broken(e.to_string()),
    };
    let mut written = BTreeSet::new();
    for app in config.apps.values() {
        let path = app
            .key_file
            .clone()
            .unwrap_or_else(|| data_dir.join(DEFAULT_PUBLIC_KEY_FILE));
        if written.insert(path.clone())
            && let Err(e) = key.write_public_key(&path)
        {
            return Signing::Broken(e.to_string());
        }
    }
    Signing::Key(key)
}

/// The prefix mode both projections use. `auto` means "no prefix with one
/// source": it is resolved here, counting every configured source
/// (`upstreams`: configured upstreams plus plugin servers; `sources`:
/// `[[tool_plugins]]` plus `[apps.*]`), so the connector and the source
/// catalogue agree, and a source that is down or fails to load does not
/// rename the others' tools.
pub fn resolve_prefix(configured: Prefix, upstreams: usize, sources: usize) -> Prefix {
    configured.for_sources(upstreams + sources)
}

/// The kind of a native source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// `[[tool_plugins]]`.
    ToolPlugin,
    /// `[apps.NAME]`.
    App,
}

/// A native plugin or an app, loaded: its tools with their handlers.
pub struct Source {
    /// The plugin manifest's `name`, or the app's table key.
    pub name: String,
    /// Which kind.
    pub kind: SourceKind,
    /// What makes it this source: the plugin directory, the app's base URL.
    pub endpoint: Endpoint,
    /// Its tools.
    pub registrations: Vec<Registration>,
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tools: Vec<&str> = self
            .registrations
            .iter()
            .map(|r| r.tool.name.as_str())
            .collect();
        f.debug_struct("Source")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("tools", &tools)
            .finish()
    }
}

/// Everything `[[plugins]]`, `[[tool_plugins]]` and `[apps.*]` hold, loaded.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The MCP servers of the Agent Plugins directories: they join the
    /// upstreams.
    pub plugin_servers: Vec<McpServerConfig>,
    /// The native plugins and apps that loaded.
    pub sources: Vec<Source>,
    /// Every finding, in config order.
    pub findings: Vec<Finding>,
}

/// Agent Plugins rules that report a remark on something that still loads;
/// every other rule means a plugin or a server entry did not load.
fn is_advisory(rule: Rule) -> bool {
    matches!(
        rule,
        Rule::UnknownTopLevelField | Rule::ExtensionsNotAnObject | Rule::SecretInEnv
    )
}

/// Loads every plugin, tool plugin and app of `config`. Never fails: a
/// broken one becomes a finding and the others load.
pub fn load(config: &Config, signing: &Signing) -> Loaded {
    let mut loaded = Loaded::default();
    for (i, dir) in config.plugins.iter().enumerate() {
        let origin = format!("plugins[{i}] ({})", dir.display());
        let load = load_agent_plugin(dir);
        let rejection = match &load {
            PluginLoad::Rejected { rejection, .. } => Some(rejection),
            PluginLoad::Ok { .. } => None,
        };
        for diagnostic in load.diagnostics() {
            let text = format!("{diagnostic} (Agent Plugins §{})", diagnostic.section);
            let advisory = is_advisory(diagnostic.rule) && Some(diagnostic) != rejection;
            loaded.findings.push(if advisory {
                Finding::warning(&origin, text)
            } else {
                Finding::error(&origin, text)
            });
        }
        loaded.plugin_servers.extend(load.servers().iter().cloned());
    }
    for (i, dir) in config.tool_plugins.iter().enumerate() {
        let origin = format!("tool_plugins[{i}] ({})", dir.display());
        match NativePlugin::load(dir) {
            Ok(plugin) => loaded.sources.push(Source {
                name: plugin.name().to_owned(),
                kind: SourceKind::ToolPlugin,
                endpoint: Endpoint::Stdio {
                    command: canonical(dir),
                    args: Vec::new(),
                },
                registrations: plugin.registrations(),
            }),
            Err(e) => loaded.findings.push(Finding::error(&origin, e.to_string())),
        }
    }
    for app in config.apps.values() {
        let origin = format!("apps.{}", app.name);
        let mut options = AppOptions::new(app.name.clone(), app.base_url.clone());
        if let Some(ms) = app.timeout_ms {
            options = options.with_timeout(Duration::from_millis(ms));
        }
        match signing {
            Signing::Unsigned => {}
            Signing::Key(key) => options = options.with_key(key.clone()),
            Signing::Broken(reason) => {
                loaded.findings.push(Finding::error(
                    &origin,
                    format!("skipped: the gateway signing key is unusable: {reason}"),
                ));
                continue;
            }
        }
        let described = match &app.description {
            AppDescription::Routes(path) => RouteTable::load(path).map(|table| {
                for id in &table.skipped_streams {
                    loaded.findings.push(Finding::warning(
                        &origin,
                        format!("route \"{id}\" is a stream route and is skipped"),
                    ));
                }
                Described::Routes(table)
            }),
            AppDescription::OpenApi(path) => OpenApiDocument::load(path).map(Described::OpenApi),
        };
        let described = match described {
            Ok(described) => described,
            Err(e) => {
                loaded.findings.push(Finding::error(&origin, e.to_string()));
                continue;
            }
        };
        let handle = match App::new(options) {
            Ok(handle) => handle,
            Err(e) => {
                loaded.findings.push(Finding::error(&origin, e.to_string()));
                continue;
            }
        };
        let source = match described {
            Described::Routes(table) => AppSource::from_route_table(table, handle),
            Described::OpenApi(document) => AppSource::from_openapi(document, handle),
        };
        for diagnostic in source.diagnostics() {
            loaded
                .findings
                .push(Finding::warning(&origin, diagnostic.to_string()));
        }
        if source.routes().is_empty() {
            loaded
                .findings
                .push(Finding::warning(&origin, "describes no routes: no tools"));
        }
        loaded.sources.push(Source {
            name: app.name.clone(),
            kind: SourceKind::App,
            endpoint: Endpoint::StreamableHttp {
                url: app.base_url.clone(),
            },
            registrations: source.registrations(),
        });
    }
    loaded
}

enum Described {
    Routes(RouteTable),
    OpenApi(OpenApiDocument),
}

/// The directory as an absolute, resolved path when it can be (a plugin's
/// identity must not depend on the working directory).
fn canonical(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// One source tool as the gateway calls it.
struct SourceTool {
    /// Compiled from the full input schema, whatever the tier disclosed.
    validator: Option<ArgumentValidator>,
    /// The source's own handler.
    handler: Arc<dyn ToolHandler>,
}

/// A source entry as it will be registered.
struct Entry {
    definition: Tool,
    source: String,
    access: Access,
    call: EntryCall,
}

enum EntryCall {
    Tool(Arc<SourceTool>),
    /// A quarantine stub: refused with this result, never run.
    Refused(ToolResult),
}

/// The native plugins' and apps' tools, projected by the catalogue's rules.
pub struct SourceCatalogue {
    catalogue: Catalogue,
    entries: Vec<Entry>,
    /// Source tools whose name an upstream tool already has.
    taken: Vec<WithheldTool>,
    diagnostics: Vec<Diagnostic>,
}

impl fmt::Debug for SourceCatalogue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self
            .entries
            .iter()
            .map(|e| e.definition.name.as_str())
            .collect();
        f.debug_struct("SourceCatalogue")
            .field("entries", &names)
            .field("taken", &self.taken)
            .finish()
    }
}

impl SourceCatalogue {
    /// No sources.
    pub fn empty() -> Self {
        SourceCatalogue {
            catalogue: Catalogue::default(),
            entries: Vec::new(),
            taken: Vec::new(),
            diagnostics: Vec::new(),
        }
    }

    /// Projects `sources` beside the connected `upstream` toolset: names
    /// (against `upstream_names`, every declared upstream and plugin server
    /// name), trust baselines from `store` (recorded on first use), tiers,
    /// and the name-taken rule against the upstream tools.
    pub async fn project(
        sources: Vec<Source>,
        upstream_names: &BTreeSet<String>,
        upstream: &Catalogue,
        projection: &ProjectionOptions,
        store: &dyn Store,
    ) -> anyhow::Result<Self> {
        if sources.is_empty() {
            return Ok(Self::empty());
        }
        let declared: Vec<ServerIdentity> = sources
            .iter()
            .map(|s| ServerIdentity {
                name: s.name.clone(),
                endpoint: s.endpoint.clone(),
            })
            .collect();
        // Among sources, a name clash suffixes both; against an
        // upstream, the source alone gives way (see the module doc).
        let resolved = resolve_server_names(&declared);
        let mut diagnostics = resolved.diagnostics;
        let mut identities = Vec::with_capacity(declared.len());
        let taken_by_upstreams: HashSet<&str> = upstream
            .servers()
            .iter()
            .map(|s| s.name.as_str())
            .chain(upstream_names.iter().map(String::as_str))
            .collect();
        for (identity, name) in declared.iter().zip(resolved.names) {
            let name = if taken_by_upstreams.contains(name.as_str()) {
                let suffixed = identity.suffixed_name();
                diagnostics.push(Diagnostic::new(
                    Rule::ServerNameCollision,
                    identity.name.clone(),
                    format!(
                        "source \"{}\" has the name of an upstream MCP server; its tools are projected under \"{suffixed}\". Rename one of the two to get the plain name back.",
                        identity.name
                    ),
                ));
                suffixed
            } else {
                name
            };
            identities.push(ServerIdentity {
                name,
                endpoint: identity.endpoint.clone(),
            });
        }

        let mut handlers: HashMap<(String, String), (Access, Arc<dyn ToolHandler>)> =
            HashMap::new();
        let mut listings = Vec::with_capacity(sources.len());
        for (source, identity) in sources.into_iter().zip(&identities) {
            let mut tools = Vec::with_capacity(source.registrations.len());
            for registration in source.registrations {
                handlers.insert(
                    (identity.name.clone(), registration.tool.name.clone()),
                    (registration.access, registration.handler),
                );
                tools.push(registration.tool);
            }
            // Trust on first use, by the store's one rule for every kind
            // of source: the listing is the cache, a baseline is proposed
            // only while none is recorded for this endpoint, and the one
            // the store returns is enforced.
            let row = store
                .get(&identity.name)
                .await
                .context("cannot read the trust baselines")?;
            let proposal = trust::proposal(row.as_ref(), identity, &tools);
            let first_use = row.as_ref().is_none_or(|r| r.tool_fingerprints.is_none());
            let in_force = trust::record(store, &identity.name, identity, &tools, proposal)
                .await
                .context("cannot record a source's trust baseline")?;
            if first_use {
                tracing::info!(source = %identity.name, "trusted on first use; baseline recorded");
            }
            let mut listing = ServerListing::new(identity.clone(), tools);
            if let Some(baseline) = in_force {
                listing = listing.with_baseline(baseline);
            }
            listings.push(listing);
        }
        let catalogue = Catalogue::project(listings, projection);
        diagnostics.extend(catalogue.diagnostics().iter().cloned());

        let upstream_tools: HashSet<&str> =
            upstream.entries().iter().map(|e| e.name.as_str()).collect();
        let mut entries = Vec::new();
        let mut taken = Vec::new();
        for entry in catalogue.entries() {
            if entry.kind == EntryKind::DescribeTool {
                continue;
            }
            if upstream_tools.contains(entry.name.as_str()) {
                diagnostics.push(Diagnostic::new(
                    Rule::ServerEntryInvalid,
                    entry.server.clone(),
                    format!(
                        "tool \"{}\" of source \"{}\" projects to \"{}\", which an upstream tool already has; the source tool is skipped.",
                        entry.remote_name, entry.server, entry.name
                    ),
                ));
                taken.push(WithheldTool {
                    name: entry.name.clone(),
                    server: entry.server.clone(),
                    remote_name: entry.remote_name.clone(),
                    reason: format!(
                        "its name \"{}\" is already taken by an upstream tool",
                        entry.name
                    ),
                });
                continue;
            }
            let call = match (entry.kind, catalogue.route(&entry.name)) {
                (EntryKind::Quarantined, Route::Refused(denied)) => {
                    EntryCall::Refused(denied.to_tool_result())
                }
                _ => {
                    let Some((access, handler)) =
                        handlers.get(&(entry.server.clone(), entry.remote_name.clone()))
                    else {
                        continue;
                    };
                    let validator =
                        match ArgumentValidator::compile(&entry.name, entry.full_input_schema()) {
                            Ok(validator) => Some(validator),
                            Err(e) => {
                                diagnostics.push(Diagnostic::new(
                                    Rule::ServerEntryInvalid,
                                    entry.server.clone(),
                                    format!("{e}; its arguments are passed on unchecked."),
                                ));
                                None
                            }
                        };
                    let tool = SourceTool {
                        validator,
                        handler: handler.clone(),
                    };
                    entries.push(Entry {
                        definition: entry.definition.clone(),
                        source: entry.server.clone(),
                        access: access.clone(),
                        call: EntryCall::Tool(Arc::new(tool)),
                    });
                    continue;
                }
            };
            entries.push(Entry {
                definition: crate::gateway::quarantine_stub_definition(entry.definition.clone()),
                source: entry.server.clone(),
                access: Access::open(),
                call,
            });
        }
        Ok(SourceCatalogue {
            catalogue,
            entries,
            taken,
            diagnostics,
        })
    }

    /// The sources' own projection, for `drift` and `retrust` (which read
    /// a source's drift as they read an upstream's).
    pub fn catalogue(&self) -> &Catalogue {
        &self.catalogue
    }

    /// Whether any source contributed a tool (available or not).
    pub fn is_empty(&self) -> bool {
        self.catalogue.servers().is_empty()
    }

    /// What the projection reported.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// Whether the describe tool must answer from both catalogues: any
    /// source present while either side defers a schema.
    pub fn needs_joint_describe(&self, upstream: &Catalogue) -> bool {
        !self.is_empty() && (self.catalogue.has_describe_tool() || upstream.has_describe_tool())
    }

    /// One registration per source tool, each running validation against
    /// the full schema, then the source's handler (the gate at the edge ran
    /// first); a quarantine stub is refused without running.
    pub fn registrations(&self) -> Vec<Registration> {
        self.entries
            .iter()
            .map(|entry| {
                let registration = match &entry.call {
                    EntryCall::Tool(tool) => {
                        let tool = tool.clone();
                        Registration::new(
                            entry.definition.clone(),
                            move |args: Value, ctx: CallContext| run(tool.clone(), args, ctx),
                        )
                    }
                    EntryCall::Refused(result) => {
                        let result = result.clone();
                        Registration::new(
                            entry.definition.clone(),
                            move |_args: Value, _ctx: CallContext| {
                                let refusal =
                                    ToolError::refused(CallDecision::Quarantined, result.clone());
                                async move { Err::<ToolResult, _>(refusal) }
                            },
                        )
                    }
                };
                // A schema this gateway cannot compile was reported as
                // passed on unchecked; it must not fail the whole server.
                registration
                    .with_source(entry.source.clone())
                    .with_access(entry.access.clone())
                    .with_foreign_schema()
            })
            .collect()
    }

    /// `mcp__describe_tool` answering from the upstream catalogue and this
    /// one: registered in place of the connector's when
    /// [`Self::needs_joint_describe`].
    pub fn describe_registration(&self, upstream: Toolset) -> Registration {
        let sources = self.catalogue.clone();
        let definition =
            describe_tool_definition().with_annotations(ToolAnnotations::read_only(true));
        Registration::new(definition, move |args: Value, _ctx: CallContext| {
            let tool = args
                .get("tool")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let answer = match upstream.catalogue().describe(&tool) {
                Ok(schema) => Ok(schema.clone()),
                Err(message) => sources.describe(&tool).cloned().map_err(|_| message),
            };
            async move {
                Ok::<_, ToolError>(match answer {
                    Ok(schema) => {
                        let mut result = ToolResult::text(schema.to_string());
                        result.structured_content = Some(schema);
                        result
                    }
                    Err(message) => ToolResult::error_text(message),
                })
            }
        })
        .with_source("portcullis")
    }

    /// The rows of `tools --json` for the sources: the catalogue's rows,
    /// minus what an upstream name took (listed as withheld instead), minus
    /// the describe tool when the upstream rows list it already.
    pub fn status_rows(&self, upstream_has_describe: bool) -> Vec<StatusRow> {
        let taken: HashSet<&str> = self.taken.iter().map(|w| w.name.as_str()).collect();
        let mut rows: Vec<StatusRow> = self
            .catalogue
            .status_rows()
            .into_iter()
            .filter(|row| !(row.status != "withheld" && taken.contains(row.name.as_str())))
            .filter(|row| !(upstream_has_describe && row.name == DESCRIBE_TOOL_NAME))
            .collect();
        rows.extend(self.taken.iter().map(|w| {
            StatusRow {
                name: w.name.clone(),
                source: w.server.clone(),
                tier: self
                    .catalogue
                    .server(&w.server)
                    .map_or(portcullis_catalog::Tier::Inline, |s| s.tier),
                status: "withheld",
                reason: Some(w.reason.clone()),
                access: None,
                classified_by: None,
            }
        }));
        rows
    }
}

/// The native plugins and apps, projected, as one source beside the
/// upstreams' (each registration names its own plugin or app).
impl ToolSource for SourceCatalogue {
    fn source_name(&self) -> &str {
        NATIVE_SOURCES
    }

    fn registrations(&self) -> Vec<Registration> {
        SourceCatalogue::registrations(self)
    }

    fn diagnostics(&self) -> &[Diagnostic] {
        SourceCatalogue::diagnostics(self)
    }
}

/// The source name of the native plugins and apps as a whole.
pub const NATIVE_SOURCES: &str = "tool plugins and apps";

/// One call to a source tool, after the gate at the edge (exposure, the
/// identity backstop, validation against the listed schema, the policy and
/// its approval) let it through: validation against the full schema (the
/// listed one may be deferred by the disclosure budget), then the handler.
/// Framing and error mapping happen at the edge.
async fn run(
    tool: Arc<SourceTool>,
    args: Value,
    ctx: CallContext,
) -> Result<ToolResult, ToolError> {
    let args = normalize_arguments(Some(args));
    if let Some(validator) = &tool.validator
        && let Err(problems) = validator.validate(&args)
    {
        return Err(ToolError::refused(
            CallDecision::Invalid,
            problems.to_tool_result(),
        ));
    }
    tool.handler.call(args, ctx).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_counts_every_configured_source_once_sources_exist() {
        assert_eq!(resolve_prefix(Prefix::Auto, 1, 0), Prefix::Never);
        assert_eq!(resolve_prefix(Prefix::Auto, 2, 0), Prefix::Always);
        assert_eq!(resolve_prefix(Prefix::Auto, 0, 1), Prefix::Never);
        assert_eq!(resolve_prefix(Prefix::Auto, 1, 1), Prefix::Always);
        assert_eq!(resolve_prefix(Prefix::Auto, 0, 2), Prefix::Always);
        assert_eq!(resolve_prefix(Prefix::Never, 3, 2), Prefix::Never);
        assert_eq!(resolve_prefix(Prefix::Always, 0, 1), Prefix::Always);
    }

    #[test]
    fn advisories_are_warnings_and_the_rest_errors() {
        assert!(is_advisory(Rule::SecretInEnv));
        assert!(is_advisory(Rule::UnknownTopLevelField));
        assert!(!is_advisory(Rule::ServerEntryInvalid));
        assert!(!is_advisory(Rule::ManifestMissing));
    }

    #[test]
    fn a_missing_plugin_directory_is_an_error_and_others_still_load() {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("portcullis.toml");
        let text = "[[plugins]]\npath = \"nope\"\n\n[[tool_plugins]]\npath = \"also-nope\"\n";
        let config = crate::config::parse(&config_path, text, &|_| None).unwrap();
        let loaded = load(&config, &Signing::Unsigned);
        assert!(
            loaded
                .findings
                .iter()
                .all(|f| f.severity == Severity::Error)
        );
        assert_eq!(loaded.findings.len(), 2, "{:?}", loaded.findings);
        assert!(
            loaded.findings[0].origin.starts_with("plugins[0]"),
            "{:?}",
            loaded.findings
        );
        assert!(
            loaded.findings[0].message.contains("manifest-missing"),
            "{:?}",
            loaded.findings
        );
        assert!(
            loaded.findings[1]
                .message
                .starts_with("ERR_PLUGIN_MANIFEST_MISSING"),
            "{:?}",
            loaded.findings
        );
    }
}
