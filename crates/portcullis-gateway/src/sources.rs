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
//!   forwarder per route, signed with the gateway key), trusted on first
//!   use ([`SourceCatalogue::trust`]) and handed to the connector as a
//!   listing to project beside the servers
//!   (`ConnectOptions::other_sources`).
//!
//! So there is one catalogue and one naming pass over every configured
//! source (upstreams, plugin servers, native plugins, apps, an app that
//! failed to load included): the same prefix decision, collision suffixes
//! on both sides of a shared name, the same name-taken rule, one
//! `mcp__describe_tool`, one set of `tools --json` rows. The tool server
//! registers the upstreams' entries through the toolset and the sources'
//! entries through their own handlers ([`SourceCatalogue::published`]),
//! each run after the gate at the edge: validation against the full
//! schema, then the handler; a quarantine stub is refused without running.
//!
//! Trust: a source's tool fingerprints are recorded in the store on first
//! use under its effective name, exactly like an upstream's, and enforced on
//! every later run: a manifest or document edited between runs quarantines
//! the changed tools and withholds added ones. A native plugin's identity is
//! its directory, an app's its `base_url`.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use portcullis_catalog::catalogue::{EntryKind, Route};
use portcullis_catalog::gate::CallDecision;
use portcullis_catalog::naming::Prefix;
use portcullis_catalog::server::SourceNames;
use portcullis_catalog::validation::normalize_arguments;
use portcullis_catalog::{
    ArgumentValidator, Catalogue, Diagnostic, Endpoint, Rule, ServerIdentity, ServerListing,
    ToolResult,
};
use portcullis_handler::{Access, CallContext, Registration, ToolError, ToolHandler};
use portcullis_sources::{
    App, AppOptions, AppSource, GatewayKey, NativePlugin, OpenApiDocument, RouteTable, ToolSource,
};
use portcullis_store::{Store, trust};
use portcullis_upstream::{McpServerConfig, PluginLoad, load_agent_plugin};
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
    /// The apps that did not load, as the projection names them: a source
    /// that is down still takes part in naming, so its return renames
    /// nothing. (A tool plugin whose manifest does not load has no name.)
    pub unloaded: Vec<ServerIdentity>,
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
    for app in config.apps.values() {
        let identity = app_identity(&app.name, &app.base_url);
        let present = loaded
            .sources
            .iter()
            .any(|s| s.kind == SourceKind::App && s.name == app.name);
        if !present {
            loaded.unloaded.push(identity);
        }
    }
    loaded
}

/// What makes an app this source: its name and base URL.
fn app_identity(name: &str, base_url: &str) -> ServerIdentity {
    ServerIdentity {
        name: name.to_owned(),
        endpoint: Endpoint::StreamableHttp {
            url: base_url.to_owned(),
        },
    }
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
    /// Compiled from the full input schema, whatever the tier disclosed,
    /// under the name the model calls it by.
    validator: Option<ArgumentValidator>,
    /// The source's own handler.
    handler: Arc<dyn ToolHandler>,
}

/// One source tool as it was loaded.
struct LoadedTool {
    /// Its full input schema; `None` when this gateway cannot compile it
    /// (reported when the source was trusted: arguments pass unchecked).
    schema: Option<Value>,
    /// The source's own handler.
    handler: Arc<dyn ToolHandler>,
    /// Who may call it.
    access: Access,
}

/// The native plugins and apps, trusted and ready to be projected with the
/// upstreams in one pass (their listings go to the connector as
/// `ConnectOptions::other_sources`), and the handler of each of their tools.
pub struct SourceCatalogue {
    listings: Vec<ServerListing>,
    /// By source identity, then the tool's own name.
    tools: HashMap<ServerIdentity, HashMap<String, LoadedTool>>,
    diagnostics: Vec<Diagnostic>,
}

impl fmt::Debug for SourceCatalogue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self
            .listings
            .iter()
            .map(|l| l.identity.name.as_str())
            .collect();
        f.debug_struct("SourceCatalogue")
            .field("sources", &names)
            .finish_non_exhaustive()
    }
}

impl SourceCatalogue {
    /// Trusts `sources` on first use through `store` (each under the name
    /// the one projection gives it among `named`, the upstreams and every
    /// other configured source, with `keep_names` keeping theirs) and
    /// keeps their handlers. Names, tiers and
    /// quarantine are the projection's, done with the upstreams'.
    pub async fn trust(
        sources: Vec<Source>,
        named: &[ServerIdentity],
        keep_names: &[ServerIdentity],
        store: &dyn Store,
    ) -> anyhow::Result<Self> {
        let identities: Vec<ServerIdentity> = sources
            .iter()
            .map(|s| ServerIdentity {
                name: s.name.clone(),
                endpoint: s.endpoint.clone(),
            })
            .collect();
        let names = SourceNames::new(named.iter().chain(&identities), keep_names);
        let mut tools = HashMap::new();
        let mut listings = Vec::with_capacity(sources.len());
        let mut diagnostics = Vec::new();
        for (source, identity) in sources.into_iter().zip(identities) {
            let id = names
                .name_of(&identity)
                .map_or_else(|| identity.name.clone(), str::to_owned);
            let mut listed = Vec::with_capacity(source.registrations.len());
            let mut handlers = HashMap::new();
            for registration in source.registrations {
                let schema = registration.tool.input_schema_or_default();
                let schema = match ArgumentValidator::compile(&registration.tool.name, &schema) {
                    Ok(_) => Some(schema),
                    Err(e) => {
                        diagnostics.push(Diagnostic::new(
                            Rule::ServerEntryInvalid,
                            id.clone(),
                            format!("{e}; its arguments are passed on unchecked."),
                        ));
                        None
                    }
                };
                handlers.insert(
                    registration.tool.name.clone(),
                    LoadedTool {
                        schema,
                        handler: registration.handler,
                        access: registration.access,
                    },
                );
                listed.push(Arc::unwrap_or_clone(registration.tool));
            }
            // Trust on first use, by the store's one rule for every kind
            // of source: the listing is the cache, a baseline is proposed
            // only while none is recorded for this endpoint, and the one
            // the store returns is enforced.
            let row = store
                .get_for_trust(&id)
                .await
                .context("cannot read the trust baselines")?;
            let proposal = trust::proposal(row.as_ref(), &identity, &listed);
            let first_use = row.as_ref().is_none_or(|r| r.tool_fingerprints.is_none());
            let in_force = trust::record(store, &id, &identity, &listed, proposal)
                .await
                .context("cannot record a source's trust baseline")?;
            if first_use {
                tracing::info!(source = %id, "trusted on first use; baseline recorded");
            }
            let mut listing = ServerListing::new(identity.clone(), listed);
            if let Some(baseline) = in_force {
                listing = listing.with_baseline(baseline);
            }
            listings.push(listing);
            tools.insert(identity, handlers);
        }
        Ok(SourceCatalogue {
            listings,
            tools,
            diagnostics,
        })
    }

    /// The sources' listings, each with the baseline in force, for the one
    /// projection (`ConnectOptions::other_sources`).
    pub fn listings(&self) -> &[ServerListing] {
        &self.listings
    }

    /// Whether any source loaded.
    pub fn is_empty(&self) -> bool {
        self.listings.is_empty()
    }

    /// What trusting the sources reported (schemas this gateway cannot
    /// compile).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// The sources' entries of `catalogue` (the one projection) as a
    /// [`ToolSource`].
    pub fn published<'a>(&'a self, catalogue: &'a Catalogue) -> PublishedSources<'a> {
        PublishedSources {
            sources: self,
            catalogue,
        }
    }

    /// One registration per source entry of `catalogue`, each running
    /// validation against the full schema, then the source's handler (the
    /// gate at the edge ran first); a quarantine stub is refused without
    /// running.
    fn registrations(&self, catalogue: &Catalogue) -> Vec<Registration> {
        let mut registrations = Vec::new();
        for entry in catalogue.entries() {
            let Some(tools) = catalogue
                .server(&entry.server)
                .and_then(|summary| self.tools.get(&summary.identity))
            else {
                continue;
            };
            let registration = match (entry.kind, catalogue.route(&entry.name)) {
                (EntryKind::Quarantined, Route::Refused(denied)) => {
                    let result = denied.to_tool_result();
                    Registration::new(
                        crate::quarantine::quarantine_stub_definition((*entry.definition).clone()),
                        move |_args: Value, _ctx: CallContext| {
                            let refusal =
                                ToolError::refused(CallDecision::Quarantined, result.clone());
                            async move { Err::<ToolResult, _>(refusal) }
                        },
                    )
                }
                (EntryKind::Remote, _) => {
                    let Some(loaded) = tools.get(&entry.remote_name) else {
                        continue;
                    };
                    let tool = Arc::new(SourceTool {
                        validator: loaded
                            .schema
                            .as_ref()
                            .and_then(|s| ArgumentValidator::compile(&entry.name, s).ok()),
                        handler: loaded.handler.clone(),
                    });
                    let access = loaded.access.clone();
                    Registration::new(
                        entry.definition.clone(),
                        move |args: Value, ctx: CallContext| run(tool.clone(), args, ctx),
                    )
                    .with_access(access)
                }
                _ => continue,
            };
            // A schema this gateway cannot compile was reported as passed
            // on unchecked; it must not fail the whole server.
            registrations.push(
                registration
                    .with_source(entry.server.clone())
                    .with_foreign_schema(),
            );
        }
        registrations
    }
}

/// The native plugins' and apps' entries of the one catalogue, as one
/// [`ToolSource`] beside the upstreams' (each registration names its own
/// plugin or app).
pub struct PublishedSources<'a> {
    sources: &'a SourceCatalogue,
    catalogue: &'a Catalogue,
}

impl ToolSource for PublishedSources<'_> {
    fn source_name(&self) -> &str {
        NATIVE_SOURCES
    }

    fn registrations(&self) -> Vec<Registration> {
        self.sources.registrations(self.catalogue)
    }

    fn diagnostics(&self) -> &[Diagnostic] {
        self.sources.diagnostics()
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
