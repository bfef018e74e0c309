//! The gateway pipeline, wired from a loaded [`Config`]: upstreams connected
//! into one catalogue ([`portcullis_upstream::Toolset`]), every catalogue
//! entry registered on a [`ToolServer`] behind the exposure gate, and each
//! handler forwarding to the toolset.
//!
//! `serve`, `tools` and `call` all start here, so the three commands see the
//! same catalogue, the same gate and the same call path.
//!
//! Framing and error mapping happen once, at the server edge: the toolset
//! returns upstream results unframed, the handler hands them on as they are,
//! and [`ToolServer`] frames them (or maps the error) exactly once.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use futures::stream::BoxStream;
use portcullis_catalog::catalogue::EntryKind;
use portcullis_catalog::diagnostic::Rule;
use portcullis_catalog::disclosure::DisclosureOptions;
use portcullis_catalog::policy::{Decision, Policy, PolicyRequest};
use portcullis_catalog::{
    Catalogue, ProjectionOptions, ServerIdentity, Tool, ToolAnnotations, ToolResult,
};
use portcullis_handler::{CallContext, Registration, ToolError, ToolFuture, ToolSource};
use portcullis_server::{Exposure, Identity, ToolServer};
use portcullis_upstream::{
    CallAnswer, CallContext as UpstreamContext, CallError, ConnectOptions, McpServerConfig,
    Progress, Toolset, connect,
};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::config::{Approval, Config, Upstream, UpstreamTransport};
// The sources register stubs too, so it lives below both; kept at its old path.
pub use crate::quarantine::quarantine_stub_definition;

/// The `command` of a stdio upstream that means "this very binary", so a
/// config can run `portcullis demo-upstream` without anything on `PATH`.
pub const SELF_COMMAND: &str = "portcullis";

/// A connected gateway: the toolset (sources and catalogue) and the tool
/// server built on it (gate and edge).
pub struct Gateway {
    /// The connected upstreams and their projected catalogue.
    pub toolset: Toolset,
    /// The tools behind the exposure gate, as MCP serves them.
    pub tools: ToolServer,
    /// The upstreams' catalogue `tools` was built from: when the toolset's
    /// is newer, a server joined (or its listing changed) since, and the
    /// tool server is rebuilt (`crate::reload::follow_catalogue`).
    pub catalogue: Arc<Catalogue>,
    /// The native plugins' and apps' tools, projected beside the upstreams.
    pub sources: Arc<crate::sources::SourceCatalogue>,
    /// Resources, prompts, completions and logging of the upstreams.
    pub proxy: crate::proxy::Proxy,
    /// The store the connector records baselines and catalogue caches in;
    /// kept so a reload that adds an upstream trusts it in the same store.
    pub store: Arc<dyn portcullis_store::Store>,
    /// The OAuth clients of the upstreams that log in
    /// (`[upstreams.NAME.oauth]`), their grants kept in `store`.
    pub oauth: crate::oauth::OAuthUpstreams,
}

/// Whether the gateway serves until stopped or answers one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifetime {
    /// `serve`: failed servers are retried; their first failure is logged
    /// here on a reload, by `serve` itself at start.
    Serve {
        /// Whether the connection failures are logged here.
        log_failures: bool,
        /// How long the first start waits for the upstreams before serving
        /// those ready (`start_timeout_ms`); a reload waits for all, since
        /// the previous generation serves meanwhile.
        start_deadline: Option<Duration>,
    },
    /// `tools`, `call`, `drift`, `retrust`: no retries, failures reported
    /// by the command.
    OneShot,
}

/// The servers that could not be connected, each with why: one
/// `(server, reason)` per server, in the order they were reported.
pub fn missing(toolset: &Toolset) -> Vec<(String, String)> {
    let mut seen = BTreeSet::new();
    toolset
        .diagnostics()
        .iter()
        .filter(|d| d.rule == Rule::ConnectionFailure)
        .filter(|d| seen.insert(d.origin.clone()))
        .map(|d| (d.origin.clone(), d.message.clone()))
        .collect()
}

/// Prints [`missing`] on stderr, one line per server, whatever the log
/// level: a person running a command must see why a server's tools are
/// absent.
pub fn report_missing(missing: &[(String, String)]) {
    for (server, reason) in missing {
        eprintln!("{}", missing_line("missing upstream", server, reason));
    }
}

/// `{label} {server}: {reason}` for stderr: secrets redacted and, since
/// the reason may quote a server's own error text, control, bidirectional
/// and zero-width characters written out, so it cannot forge another line.
pub fn missing_line(label: &str, server: &str, reason: &str) -> String {
    let line = format!("{label} {server}: {reason}");
    portcullis_catalog::redact::visible(&crate::redact::text(&line)).into_owned()
}

/// One row of `portcullis tools --json`: the contract shape of the design
/// brief.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// The qualified name.
    pub name: String,
    /// The upstream (or source) it comes from.
    pub source: String,
    /// `inline`, `names` or `bare`.
    pub tier: String,
    /// `available`, `quarantined` or `withheld`.
    pub status: String,
    /// Why it is not available, else null.
    pub reason: Option<String>,
    /// `read-only` or `write`, as decided for the exposure gate and
    /// `approval = "writes"`; null for the describe tool and for tools the
    /// catalogue holds back.
    pub access: Option<String>,
    /// Who decided `access`: `operator` (the config's `read_only`, `writes`
    /// or `trust_annotations = false`) or `server` (its own annotations,
    /// pinned at first trust).
    pub classified_by: Option<String>,
}

impl Gateway {
    /// Connects the upstreams of `config`, reports every diagnostic on
    /// stderr, and builds the tool server. A failing upstream becomes a
    /// diagnostic; only wiring mistakes are errors.
    /// The caller reports the servers that failed ([`missing`]).
    ///
    /// Waits at most `[gateway] start_timeout_ms`: the upstreams still
    /// connecting then go on in the background
    /// ([`Toolset::starting`] names them) and join the catalogue when
    /// ready, each held to its baseline first; `serve` rebuilds its tool
    /// server then and tells its clients (`crate::reload::follow_catalogue`).
    pub async fn start(config: &Config) -> anyhow::Result<Gateway> {
        Gateway::start_with(
            config,
            None,
            Lifetime::Serve {
                log_failures: false,
                start_deadline: Some(config.gateway.start_timeout),
            },
        )
        .await
    }

    /// [`Gateway::start`] for a one-shot command (`tools`, `call`, `drift`,
    /// `retrust`): a server that fails is not retried (the command ends
    /// long before a retry would help) and its failure is not logged; the
    /// command reports [`missing`] itself, where its user reads.
    pub async fn start_once(config: &Config) -> anyhow::Result<Gateway> {
        Gateway::start_with(config, None, Lifetime::OneShot).await
    }

    /// [`Gateway::start`] for a config reload that reconnects everything:
    /// the proxy succeeds `previous` (its sessions are served, see
    /// `Proxy::take_over`) instead of starting without any.
    pub async fn start_after(
        config: &Config,
        previous: Option<&crate::proxy::Proxy>,
    ) -> anyhow::Result<Gateway> {
        let lifetime = Lifetime::Serve {
            log_failures: true,
            start_deadline: None,
        };
        Gateway::start_with(config, previous, lifetime).await
    }

    async fn start_with(
        config: &Config,
        previous: Option<&crate::proxy::Proxy>,
        lifetime: Lifetime,
    ) -> anyhow::Result<Gateway> {
        let mut servers = server_configs(config)?;
        // Plugins, tool plugins and apps: a broken one is reported and
        // skipped. Agent Plugins' servers join the upstreams.
        let loaded = crate::sources::load(config, &crate::sources::signing(config));
        for finding in &loaded.findings {
            tracing::warn!(origin = %finding.origin, "{}", finding.message);
        }
        servers.extend(loaded.plugin_servers.iter().cloned());
        let store = crate::trust::open_store(config).await?;
        // Trust on first use through the store: the connector records each
        // server's baseline and catalogue cache and enforces what is kept.
        let mut options = connect_options(config).with_store(store.clone());
        // Upstreams that log in: their grants restored from the store; in
        // `serve`, watched (a new login, a refresh falling due).
        let oauth = crate::oauth::OAuthUpstreams::open(
            config,
            crate::oauth::keeper(config, &store)?,
            matches!(lifetime, Lifetime::Serve { .. }),
            None,
        )
        .await?;
        options = oauth.apply(options);
        let start_deadline = match lifetime {
            Lifetime::OneShot => {
                options = options.with_reconnect(portcullis_upstream::Backoff::NEVER);
                None
            }
            Lifetime::Serve { start_deadline, .. } => start_deadline,
        };
        options.start_deadline = start_deadline;
        // A line of progress on a terminal while they connect, and not
        // after: the servers that outlive the start deadline log when
        // they join.
        let names: Vec<String> = servers.iter().map(|s| s.name().to_owned()).collect();
        let drawing = Arc::new(std::sync::atomic::AtomicBool::new(true));
        options.on_connect = crate::connecting::progress(&names).map(|draw| {
            let drawing = drawing.clone();
            let only_while_starting: portcullis_upstream::options::ConnectCallback =
                Arc::new(move |event| {
                    if drawing.load(std::sync::atomic::Ordering::Acquire) {
                        draw(event);
                    }
                });
            only_while_starting
        });
        // The native plugins and apps, trusted through the same store, are
        // projected with the upstreams in one pass: one naming, one
        // catalogue.
        let upstream_identities: Vec<ServerIdentity> =
            servers.iter().map(McpServerConfig::identity).collect();
        options.projection.configured = loaded.unloaded.clone();
        let named: Vec<ServerIdentity> = upstream_identities
            .iter()
            .chain(&loaded.unloaded)
            .cloned()
            .collect();
        let sources = crate::sources::SourceCatalogue::trust(
            loaded.sources,
            &named,
            &options.projection.keep_names,
            store.as_ref(),
        )
        .await?;
        for diagnostic in sources.diagnostics() {
            tracing::warn!(rule = %diagnostic.rule, origin = %diagnostic.origin, "{}", diagnostic.message);
        }
        for listing in sources.listings() {
            options = options.with_other_source(listing.clone());
        }
        let native = config.tool_plugins.len() + config.apps.len();
        let prefix = crate::sources::resolve_prefix(config.gateway.prefix, servers.len(), native);
        // With native sources the mode is decided here, counting those
        // that failed to load too (a tool plugin's name is in its
        // manifest); without, the connector decides it over the configured
        // upstreams and decides again when a reload reconfigures them.
        if native > 0 {
            options.projection.prefix = prefix;
        }
        let toolset = connect(servers.clone(), options)
            .await
            .context("cannot connect the upstreams")?;
        drawing.store(false, std::sync::atomic::Ordering::Release);
        if !toolset.starting().is_empty() {
            crate::connecting::erase();
        }
        for diagnostic in toolset.diagnostics() {
            let reported_by_caller = matches!(
                lifetime,
                Lifetime::OneShot
                    | Lifetime::Serve {
                        log_failures: false,
                        ..
                    }
            );
            if reported_by_caller && diagnostic.rule == Rule::ConnectionFailure {
                continue;
            }
            tracing::warn!(rule = %diagnostic.rule, origin = %diagnostic.origin, "{}", diagnostic.message);
        }
        let proxy = match previous {
            Some(previous) => previous.successor(&toolset, prefix, None).await,
            None => crate::proxy::Proxy::start(&toolset, prefix).await,
        };
        let catalogue = toolset.catalogue();
        let tools = build_tool_server(config, &toolset, &catalogue, &sources, &proxy)?;
        Ok(Gateway {
            toolset,
            tools,
            catalogue,
            sources: Arc::new(sources),
            proxy,
            store,
            oauth,
        })
    }

    /// Every tool, available or not, with why it is held back: the
    /// catalogue's rows (quarantine, filters, drift) with the exposure gate's
    /// withheld tools marked `withheld`.
    pub fn rows(&self) -> Vec<Row> {
        self.rows_of(&self.toolset.catalogue())
    }

    /// [`Gateway::rows`] of the catalogue the served tools were built from
    /// ([`Gateway::catalogue`]), not the toolset's newer one a rebuild has
    /// yet to follow: what a call finds now.
    pub fn served_rows(&self) -> Vec<Row> {
        self.rows_of(&self.catalogue)
    }

    fn rows_of(&self, catalogue: &Catalogue) -> Vec<Row> {
        let withheld = self.tools.withheld();
        let gated: HashMap<&str, &str> = withheld
            .iter()
            .map(|w| (w.id.as_str(), w.reason.as_str()))
            .collect();
        catalogue
            .status_rows()
            .into_iter()
            .map(|row| {
                let tier = serde_json::to_value(row.tier)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let (status, reason) = match gated.get(row.name.as_str()) {
                    Some(reason) if row.status == "available" => {
                        ("withheld".to_owned(), Some((*reason).to_owned()))
                    }
                    _ => (row.status.to_owned(), row.reason),
                };
                Row {
                    name: row.name,
                    source: row.source,
                    tier,
                    status,
                    reason,
                    access: row.access.map(str::to_owned),
                    classified_by: row.classified_by.map(|by| by.as_str().to_owned()),
                }
            })
            .collect()
    }

    /// The same connections and sources behind a gate rebuilt from
    /// `config` (`allow_write`, `allow_tools`, `identity`,
    /// `max_output_length`): what a config reload that changed only the
    /// gate applies, so no upstream reconnects.
    pub fn regated(&self, config: &Config) -> anyhow::Result<Gateway> {
        let catalogue = self.toolset.catalogue();
        Ok(Gateway {
            toolset: self.toolset.clone(),
            tools: build_tool_server(
                config,
                &self.toolset,
                &catalogue,
                &self.sources,
                &self.proxy,
            )?,
            catalogue,
            sources: self.sources.clone(),
            proxy: self.proxy.clone(),
            store: self.store.clone(),
            oauth: self.oauth.clone(),
        })
    }

    /// [`Gateway::regated`] after the upstreams' catalogue swapped: the
    /// proxy follows the servers that joined since it started routing (see
    /// `Proxy::follow`), so a server that connected late is heard too.
    pub async fn refollowed(&self, config: &Config) -> anyhow::Result<Gateway> {
        let proxy = self.proxy.follow(&self.toolset).await;
        let catalogue = self.toolset.catalogue();
        Ok(Gateway {
            toolset: self.toolset.clone(),
            tools: build_tool_server(config, &self.toolset, &catalogue, &self.sources, &proxy)?,
            catalogue,
            sources: self.sources.clone(),
            proxy,
            store: self.store.clone(),
            oauth: self.oauth.clone(),
        })
    }

    /// The same toolset with its upstreams replaced by `config`'s: a server
    /// whose config did not change keeps its connection (and child
    /// process), a new or changed one is connected and trusted through the
    /// same store, a removed one is closed ([`Toolset::reconfigure`]). Then
    /// the proxy and the gate are rebuilt on the result.
    ///
    /// Only for configs without plugins, tool plugins or apps (the caller
    /// checks): their tools are projected against the upstreams' catalogue
    /// and the `auto` prefix counts them, so those reloads rebuild
    /// everything.
    pub async fn reconfigured(&self, config: &Config) -> anyhow::Result<Gateway> {
        let servers = server_configs(config)?;
        // A client whose upstream's URL and OAuth table did not change is
        // kept, with its grant.
        let oauth = self.oauth.reopen(config).await?;
        let options = oauth.apply(connect_options(config).with_store(self.store.clone()));
        // The connector decides `auto` over the configured upstreams; the
        // passthrough names follow the same decision.
        let prefix = crate::sources::resolve_prefix(options.projection.prefix, servers.len(), 0);
        let report = self
            .toolset
            .reconfigure(servers, &options)
            .await
            .context("cannot reconfigure the upstreams")?;
        tracing::info!(
            kept = ?report.kept,
            connected = ?report.connected,
            closed = ?report.closed,
            "upstreams reconfigured"
        );
        // The sessions stay; the reload's new connections are routed to
        // them once the new generation takes over (`Proxy::take_over`).
        let proxy = self
            .proxy
            .successor(&self.toolset, prefix, Some(&report.kept))
            .await;
        let catalogue = self.toolset.catalogue();
        Ok(Gateway {
            toolset: self.toolset.clone(),
            tools: build_tool_server(config, &self.toolset, &catalogue, &self.sources, &proxy)?,
            catalogue,
            sources: self.sources.clone(),
            proxy,
            store: self.store.clone(),
            oauth,
        })
    }

    /// The upstreams that could not be connected, each with why ([`missing`]);
    /// one that needs a login says so and names the command to run.
    pub fn missing(&self) -> Vec<(String, String)> {
        missing(&self.toolset)
            .into_iter()
            .map(|(server, reason)| {
                if self.oauth.needs_login(&server) {
                    let hint = format!(
                        "needs a login: run `{}`",
                        crate::oauth::login_command(&server)
                    );
                    (server, hint)
                } else {
                    (server, reason)
                }
            })
            .collect()
    }

    /// Ends every upstream connection; stdio children are killed. Every
    /// change of an OAuth grant is stored first.
    pub async fn close(&self) {
        self.oauth.flush().await;
        self.toolset.close().await;
    }
}

/// Every `[upstreams.*]` table as the connector's config, commands and
/// paths resolved against the config file's directory.
pub fn server_configs(config: &Config) -> anyhow::Result<Vec<McpServerConfig>> {
    let base = config
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    config
        .upstreams
        .values()
        .map(|u| server_config(u, &base))
        .collect()
}

/// The `[upstreams.NAME]` table as the connector's config, secrets exposed
/// (they go to the child or the server, never to a log).
pub fn server_config(upstream: &Upstream, base: &Path) -> anyhow::Result<McpServerConfig> {
    // Built through the constructors, not struct literals, so fields the
    // connector adds later (plugin launch data) keep their defaults.
    Ok(match &upstream.transport {
        UpstreamTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut server = McpServerConfig::stdio(
                upstream.name.clone(),
                resolve_command(command, base)?,
                args.iter().map(|a| a.expose().to_owned()),
            );
            for (key, value) in env {
                server = server.with_env(key.clone(), value.expose().to_owned());
            }
            if let McpServerConfig::Stdio(stdio) = &mut server {
                stdio.cwd = cwd.clone();
            }
            server
        }
        UpstreamTransport::Remote { kind, url, headers } => {
            let url = url.expose().to_owned();
            let mut server = match kind {
                portcullis_catalog::TransportKind::Sse => {
                    McpServerConfig::sse(upstream.name.clone(), url)
                }
                _ => McpServerConfig::streamable_http(upstream.name.clone(), url),
            };
            for (key, value) in headers {
                server = server.with_header(key.clone(), value.expose().to_owned());
            }
            server
        }
    })
}

/// Where a stdio upstream's program is: [`SELF_COMMAND`] is this binary; a
/// relative path with a directory part (`./bin/server`, `../target/…`) is
/// relative to the config file, as every path inside it; a bare name is
/// looked up on `PATH` by the connector.
pub fn resolve_command(command: &str, base: &Path) -> anyhow::Result<String> {
    if command == SELF_COMMAND {
        let exe = std::env::current_exe().context("cannot find the portcullis binary itself")?;
        return Ok(exe.to_string_lossy().into_owned());
    }
    let path = PathBuf::from(command);
    if path.is_relative() && path.components().count() > 1 {
        return Ok(base.join(path).to_string_lossy().into_owned());
    }
    Ok(command.to_owned())
}

/// The connector's options from `[gateway]`, `[disclosure]` and the
/// per-upstream `timeout_ms` and `tools`.
pub fn connect_options(config: &Config) -> ConnectOptions {
    let mut options = ConnectOptions::default().with_projection(ProjectionOptions {
        disclosure: DisclosureOptions {
            budget: config.disclosure.budget,
            always_load: config
                .disclosure
                .always_load
                .iter()
                .cloned()
                .collect::<BTreeSet<_>>(),
        },
        prefix: config.gateway.prefix,
        configured: Vec::new(),
        // The operator's own upstreams keep their names against a plugin's
        // or an app's namesake, and with them the store rows their
        // baselines are kept under.
        keep_names: server_configs(config)
            .map(|servers| servers.iter().map(McpServerConfig::identity).collect())
            .unwrap_or_default(),
        // Left to the connector: a large projection uses the machine's cores.
        threads: 0,
    });
    for upstream in config.upstreams.values() {
        if let Some(ms) = upstream.timeout_ms {
            options = options.with_server_timeout(&upstream.name, Duration::from_millis(ms));
        }
        options = options.with_server_tools(&upstream.name, upstream.tools.clone());
        options =
            options.with_server_classification(&upstream.name, upstream.classification.clone());
        if let (Some(hosts), UpstreamTransport::Remote { url, .. }) =
            (&upstream.allowed_hosts, &upstream.transport)
        {
            // The upstream's own host is the operator's choice already.
            let own = url
                .expose()
                .parse::<axum::http::Uri>()
                .ok()
                .and_then(|u| u.host().map(str::to_owned));
            let hosts = hosts.iter().cloned().chain(own).collect::<Vec<_>>();
            options = options.with_server_allowed_hosts(&upstream.name, hosts);
        }
    }
    // Agent Plugins' servers follow `[gateway] trust_annotations`.
    options.classification.trust_claims = config.gateway.trust_annotations;
    use portcullis_upstream::Backoff;
    options.with_reconnect(match config.gateway.reconnect_max {
        Some(max) => Backoff::new(Backoff::DEFAULT.initial, max),
        None => Backoff::NEVER,
    })
}

/// `[gateway] approval`: the calls that need a person's approval first.
/// Installed on the tool server only, where the gate rules once per call
/// and the tool server asks the person at the client (see
/// `portcullis_server::approval`); the toolset behind it carries no policy.
struct ApprovalPolicy(Approval);

impl Policy for ApprovalPolicy {
    fn decide(&self, request: &PolicyRequest<'_>) -> Decision {
        let asks = match &self.0 {
            Approval::Never => false,
            Approval::Writes => !request.def.is_some_and(Tool::is_read_only),
            Approval::Tools(names) => names.iter().any(|n| n == request.tool_name),
        };
        if asks {
            Decision::Ask { title: None }
        } else {
            Decision::Allow
        }
    }
}

/// The exposure gate from `[gateway]`.
pub fn exposure(config: &Config) -> Exposure {
    Exposure {
        allow_write: config.gateway.allow_write,
        allow_tools: (!config.gateway.allow_tools.is_empty())
            .then(|| config.gateway.allow_tools.clone()),
        identity: config
            .gateway
            .identity
            .as_ref()
            .map(|i| Identity::new(i.user.clone(), i.perms.iter().cloned())),
        // Behind an identity provider each HTTP caller brings its own
        // identity, checked per listing and call.
        authenticated_callers: config.gateway.oauth.is_some(),
    }
}

/// The tool server over the one catalogue: the upstreams' entries and the
/// native plugins' and apps', each kind published through [`ToolSource`].
fn build_tool_server(
    config: &Config,
    toolset: &Toolset,
    catalogue: &Arc<Catalogue>,
    sources: &crate::sources::SourceCatalogue,
    proxy: &crate::proxy::Proxy,
) -> anyhow::Result<ToolServer> {
    let upstreams = UpstreamTools::new(toolset.clone(), catalogue.clone());
    let natives = sources.published(catalogue);
    let published: [&dyn ToolSource; 2] = [&upstreams, &natives];
    ToolServer::builder()
        .register_all(published.into_iter().flat_map(ToolSource::registrations))
        .policy(ApprovalPolicy(config.gateway.approval.clone()))
        .exposure(exposure(config))
        .max_output_length(config.gateway.max_output_length)
        .approval_timeout(config.gateway.approval_timeout)
        .server_info("portcullis", env!("CARGO_PKG_VERSION"))
        .passthrough(Arc::new(proxy.clone()))
        .build()
        .context("cannot build the tool server from the catalogue")
}

/// The source name of the connected upstreams as a whole; each of their
/// registrations names its own server.
pub const UPSTREAMS_SOURCE: &str = "upstreams";

/// The connected upstream MCP servers as one [`ToolSource`]: the connector
/// projects them (with the native sources beside them: one catalogue, one
/// naming pass over every configured source), so they publish together.
/// Every upstream entry is a registration (quarantine stubs included: the
/// toolset refuses them), named after its server and forwarding to the
/// toolset under its qualified name, and so is `mcp__describe_tool`, which
/// answers for every source; the change signal is the toolset's catalogue
/// swaps.
#[derive(Clone)]
pub struct UpstreamTools {
    toolset: Toolset,
    catalogue: Arc<Catalogue>,
}

impl UpstreamTools {
    /// The upstreams' entries of `catalogue` (the toolset's catalogue in
    /// force), called through `toolset`.
    pub fn new(toolset: Toolset, catalogue: Arc<Catalogue>) -> Self {
        UpstreamTools { toolset, catalogue }
    }
}

impl fmt::Debug for UpstreamTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTools")
            .field("entries", &self.catalogue.entries().len())
            .finish_non_exhaustive()
    }
}

impl ToolSource for UpstreamTools {
    fn source_name(&self) -> &str {
        UPSTREAMS_SOURCE
    }

    fn registrations(&self) -> Vec<Registration> {
        let native: Vec<&ServerIdentity> = self
            .toolset
            .other_sources()
            .iter()
            .map(|o| &o.identity)
            .collect();
        let upstream = |server: &str| {
            self.catalogue
                .server(server)
                .is_none_or(|s| !native.contains(&&s.identity))
        };
        self.catalogue
            .entries()
            .iter()
            .filter(|entry| entry.kind == EntryKind::DescribeTool || upstream(&entry.server))
            .map(|entry| {
                let toolset = self.toolset.clone();
                let name: Arc<str> = entry.name.as_str().into();
                // Shared with the catalogue; only the two kinds the gateway
                // changes get a definition of their own.
                let mut definition = Arc::clone(&entry.definition);
                let source = if entry.kind == EntryKind::DescribeTool {
                    // The gateway answers it from the catalogue and changes
                    // nothing: read-only, so the exposure gate never
                    // withholds the way to a deferred tool's schema.
                    definition = Arc::new(
                        (*definition)
                            .clone()
                            .with_annotations(ToolAnnotations::read_only(true)),
                    );
                    "portcullis".to_owned()
                } else {
                    if entry.kind == EntryKind::Quarantined {
                        definition = Arc::new(quarantine_stub_definition((*definition).clone()));
                    }
                    entry.server.clone()
                };
                let handler = move |args: Value, ctx: CallContext| {
                    forward(toolset.clone(), name.clone(), args, ctx)
                };
                // The upstream published the schema: one it cannot have
                // compiled is its own problem (reported, arguments
                // unchecked), never the whole gateway's.
                Registration::new(definition, handler)
                    .with_source(source)
                    .with_foreign_schema()
            })
            .collect()
    }

    /// Forwarded to the toolset, which routes by its own snapshot: no
    /// registration is built for it.
    fn invoke(&self, tool: &str, args: Value, ctx: CallContext) -> ToolFuture {
        Box::pin(forward(self.toolset.clone(), tool.into(), args, ctx))
    }

    fn changes(&self) -> BoxStream<'static, ()> {
        let catalogue = self.toolset.watch_catalogue();
        futures::stream::unfold(catalogue, |mut catalogue| async move {
            catalogue.changed().await.ok().map(|()| ((), catalogue))
        })
        .boxed()
    }
}

/// Most progress reports held for a client that reads slower than the
/// server reports: past this, the oldest held one is dropped.
const PROGRESS_BACKLOG: usize = 256;

/// Most characters of a server's progress message passed on.
const PROGRESS_MESSAGE_CHARS: usize = 1000;

/// Passes a call's progress reports from its server to its client, in
/// order, until the server's side closes. The channel from the server is
/// emptied as fast as reports come into a backlog of at most
/// [`PROGRESS_BACKLOG`] (a server flooding reports at a slow client would
/// otherwise be held in memory whole; a client that keeps up loses none),
/// and each message is cut to [`PROGRESS_MESSAGE_CHARS`] with its control,
/// bidi and closing-tag characters neutralised, as tool output is.
async fn relay_progress(
    mut receiver: mpsc::UnboundedReceiver<Progress>,
    ctx: &portcullis_server::CallContext,
) {
    // Most calls that could report progress report none: nothing is set up
    // (no task, no backlog) until the first report comes.
    let Some(first) = receiver.recv().await else {
        return;
    };
    let backlog = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::from([
        Some(first),
    ])));
    let ready = Arc::new(tokio::sync::Notify::new());
    let pump = {
        let backlog = backlog.clone();
        let ready = ready.clone();
        let tool = ctx.tool().to_owned();
        tokio::spawn(async move {
            let mut dropped = 0_u64;
            while let Some(report) = receiver.recv().await {
                let mut held = backlog
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if held.len() == PROGRESS_BACKLOG {
                    held.pop_front();
                    dropped += 1;
                }
                held.push_back(Some(report));
                drop(held);
                ready.notify_one();
            }
            if dropped > 0 {
                tracing::debug!(
                    %tool,
                    dropped,
                    "progress reports dropped for a slow client"
                );
            }
            // The end: whatever is held is still passed on first.
            backlog
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push_back(None);
            ready.notify_one();
        })
    };
    loop {
        let next = backlog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front();
        match next {
            Some(Some(p)) => {
                let message = p.message.as_deref().map(progress_message);
                ctx.progress(p.progress, p.total, message.as_deref()).await;
            }
            Some(None) => break,
            None => ready.notified().await,
        }
    }
    let _ = pump.await;
}

/// A server's progress message as a client is shown it (see
/// [`relay_progress`]).
fn progress_message(message: &str) -> String {
    use portcullis_catalog::framing::{escape_closing_tags, neutralise_controls};
    let mut cut: String = message.chars().take(PROGRESS_MESSAGE_CHARS).collect();
    if cut.len() < message.len() {
        cut.push('…');
    }
    escape_closing_tags(&neutralise_controls(&cut)).into_owned()
}

/// Forwards one call to the toolset, with the caller's cancellation, a
/// progress relay and the caller as the answerer of the upstream's
/// requests; the result goes back unframed (the edge frames it).
async fn forward(
    toolset: Toolset,
    name: Arc<str>,
    args: Value,
    ctx: CallContext,
) -> Result<ToolResult, ToolError> {
    let mut upstream = UpstreamContext::default().with_cancel(ctx.cancellation().clone());
    // The upstream's sampling, elicitation and roots requests during this
    // call go to the client that made it.
    if let Some(client) = crate::relay::DownstreamRelay::for_call(&ctx) {
        upstream = upstream.with_relay(Arc::new(client));
    }
    // Boxed: the call's future is many kilobytes, and this one is moved
    // into the handler's box and the call's task; keeping it small saves
    // copying the whole call state each time (see `gateway_load`).
    let outcome = if ctx.wants_progress() {
        let (sender, receiver) = mpsc::unbounded_channel::<Progress>();
        upstream = upstream.with_progress(sender);
        let called = name.clone();
        let call = async move {
            let outcome = Box::pin(toolset.call_answer(&called, Some(args), &upstream)).await;
            // Dropping the context drops the progress sender, which ends
            // the relay once every report has been passed on.
            drop(upstream);
            outcome
        };
        // The relay runs beside the call in this task: every report is
        // passed on before the call's answer is.
        let (outcome, ()) = tokio::join!(call, Box::pin(relay_progress(receiver, &ctx)));
        outcome
    } else {
        Box::pin(toolset.call_answer(&name, Some(args), &upstream)).await
    };
    match outcome {
        Ok(CallAnswer::Output(result)) => Ok(result),
        // The toolset's own guards (a tool quarantined since this server's
        // tool map was built, arguments its full schema refuses): typed, so
        // the trail records the decision, not the words.
        Ok(CallAnswer::Refused { decision, answer }) => Err(ToolError::refused(decision, answer)),
        Err(error) => Err(call_error(&name, error)),
    }
}

/// A call that produced no result, as the edge should report it: the
/// connector's model-facing sentences pass as `ERR_TOOL_FAILED: …`; anything
/// that may carry a server's or transport's own words is logged and hidden.
fn call_error(tool: &str, error: CallError) -> ToolError {
    match &error {
        CallError::Unavailable { .. }
        | CallError::NoLongerPublished { .. }
        | CallError::UnknownTool { .. }
        | CallError::ApprovalRequired { .. }
        | CallError::Timeout { .. }
        | CallError::Cancelled { .. }
        | CallError::Unauthorized { .. }
        | CallError::Forbidden { .. }
        | CallError::Reconnecting { .. }
        | CallError::ConnectionLost { .. }
        | CallError::SessionRequired { .. } => ToolError::msg(format!("ERR_TOOL_FAILED: {error}")),
        _ => {
            tracing::warn!(tool, error = %error, "upstream call failed");
            ToolError::msg(error.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_resolve_against_the_config_file() {
        let base = Path::new("/etc/portcullis");
        assert_eq!(resolve_command("npx", base).ok().as_deref(), Some("npx"));
        assert_eq!(
            resolve_command("./bin/server", base).ok().as_deref(),
            Some("/etc/portcullis/./bin/server")
        );
        assert_eq!(
            resolve_command("/usr/bin/x", base).ok().as_deref(),
            Some("/usr/bin/x")
        );
        let me = resolve_command(SELF_COMMAND, base).unwrap_or_default();
        assert!(Path::new(&me).is_absolute(), "{me}");
    }

    #[tokio::test]
    async fn the_upstreams_are_a_source_that_forwards_and_announces_their_swaps() {
        let options = ConnectOptions::default();
        let toolset = connect(Vec::new(), options.clone()).await.unwrap();
        let upstreams = UpstreamTools::new(toolset.clone(), toolset.catalogue());
        assert_eq!(upstreams.source_name(), UPSTREAMS_SOURCE);
        let published = upstreams.registrations().len();
        assert_eq!(published, toolset.catalogue().entries().len());
        // A name the toolset does not route is its refusal, in words the
        // model may read.
        let error = upstreams
            .invoke(
                "files__nope",
                Value::Null,
                CallContext::detached("files__nope"),
            )
            .await
            .unwrap_err();
        assert!(error.message().starts_with("ERR_TOOL_FAILED: "), "{error}");
        // Every catalogue the toolset swaps in is announced.
        let mut changes = upstreams.changes();
        toolset.reconfigure(Vec::new(), &options).await.unwrap();
        let announced = tokio::time::timeout(Duration::from_secs(5), changes.next()).await;
        assert_eq!(announced, Ok(Some(())));
    }

    #[test]
    fn approval_asks_for_writes_only_when_told() {
        let write = Tool::new("w");
        let args = Value::Object(Default::default());
        let request = PolicyRequest {
            tool_name: "files__w",
            args: &args,
            def: Some(&write),
            needs_approval: false,
        };
        assert_eq!(
            ApprovalPolicy(Approval::Writes).decide(&request),
            Decision::Ask { title: None }
        );
        assert_eq!(
            ApprovalPolicy(Approval::Tools(vec!["other".into()])).decide(&request),
            Decision::Allow
        );
    }
}
