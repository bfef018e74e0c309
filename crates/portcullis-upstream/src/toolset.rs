//! `connect` and the [`Toolset`] it returns: the projected tool map and the
//! call path through every guard.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::join_all;
use portcullis_catalog::catalogue::Route;
use portcullis_catalog::policy::{Decision, DeniedResult, Policy, PolicyRequest};
use portcullis_catalog::validation::normalize_arguments;
use portcullis_catalog::{
    ArgumentValidator, Catalogue, Diagnostic, Rule, ServerIdentity, ServerListing, Tool, ToolResult,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::McpServerConfig;
use crate::connection::{ConnectPlan, Connection, connect as connect_one};
use crate::credentials::Auth;
use crate::error::{CallError, WiringError};
use crate::hosts::AllowedHosts;
use crate::options::ConnectOptions;
use crate::output::OutputValidator;
use crate::progress::Progress;
use crate::relay::ClientRelay;
use crate::report::DiagnosticSink;

/// What one call carries besides its name and arguments.
#[derive(Clone, Default)]
pub struct CallContext {
    /// The caller's session; required when the toolset has `auth`.
    pub session: Option<String>,
    /// Cancels the call; the server is told.
    pub cancel: CancellationToken,
    /// Receives the server's progress notifications for this call.
    pub progress: Option<mpsc::UnboundedSender<Progress>>,
    /// A person approved this call (the policy answered `ask` earlier).
    pub approved: bool,
    /// The client that made the call, to answer the server's sampling,
    /// elicitation and roots requests (see [`crate::relay`]). Without one,
    /// such requests are refused with an error.
    pub relay: Option<Arc<dyn ClientRelay>>,
}

impl CallContext {
    /// A context for `session`.
    pub fn for_session(session: impl Into<String>) -> Self {
        CallContext {
            session: Some(session.into()),
            ..Default::default()
        }
    }

    /// Sets the cancellation token.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Sets the progress sink.
    pub fn with_progress(mut self, progress: mpsc::UnboundedSender<Progress>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Sets the client that answers the server's requests during the call.
    pub fn with_relay(mut self, relay: Arc<dyn ClientRelay>) -> Self {
        self.relay = Some(relay);
        self
    }

    /// Marks the call as approved by a person.
    pub fn approved(mut self) -> Self {
        self.approved = true;
        self
    }
}

impl std::fmt::Debug for CallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("session", &self.session)
            .field("cancelled", &self.cancel.is_cancelled())
            .field("progress", &self.progress.is_some())
            .field("approved", &self.approved)
            .field("relay", &self.relay.is_some())
            .finish()
    }
}

/// The connected servers, their projected tools and the call path.
///
/// Cheap to clone; every clone shares the connections. Connections stay open
/// until [`Toolset::close`] (or until the last clone drops, which still kills
/// stdio children).
#[derive(Clone)]
pub struct Toolset {
    inner: Arc<Inner>,
}

struct Inner {
    catalogue: Catalogue,
    /// Compiled once per catalogue build: a call looks its validator up.
    validators: HashMap<String, ArgumentValidator>,
    /// Output schemas the servers promised, compiled once.
    outputs: HashMap<String, OutputValidator>,
    /// By effective (projected) server name.
    connections: HashMap<String, Arc<Connection>>,
    diagnostics: DiagnosticSink,
    policy: Arc<dyn Policy>,
    auth: Option<Auth>,
    session: Option<String>,
    closed: AtomicBool,
}

/// The seed's message for a stdio config in a build without the `stdio`
/// feature.
pub(crate) fn unsupported_stdio_message(server: &str) -> String {
    format!(
        "MCP server \"{server}\" uses the stdio transport, which this build of portcullis-upstream does not include: enable the `stdio` cargo feature (on by default) to spawn local servers; remote transports (streamable-http, sse) work without it."
    )
}

fn default_http() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        // Redirects are followed by hand, per hop, by the guard.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .build()
}

/// Connects every server concurrently and projects their tools.
///
/// Never fails because of a server: one that cannot be reached, refuses our
/// credentials, names a blocked host or times out becomes a
/// `connection-failure` diagnostic and is skipped while the others connect.
/// Only wiring mistakes are errors (`auth` or a resolver `allowed_hosts`
/// without a session).
pub async fn connect(
    servers: Vec<McpServerConfig>,
    options: ConnectOptions,
) -> Result<Toolset, WiringError> {
    if options.session.is_none() {
        if options.auth.is_some() {
            return Err(WiringError::AuthWithoutSession);
        }
        if matches!(options.allowed_hosts, AllowedHosts::Resolver(_)) {
            return Err(WiringError::HostResolverWithoutSession);
        }
    }
    let diagnostics = DiagnosticSink::new(options.on_diagnostic.clone());
    let http = match options.http.clone() {
        Some(http) => Some(http),
        None => match default_http() {
            Ok(http) => Some(http),
            Err(e) => {
                // Only remote servers need it; stdio servers still connect.
                tracing::warn!("could not build the HTTP client: {e}");
                None
            }
        },
    };

    let attempts = servers.into_iter().map(|config| {
        let options = &options;
        let diagnostics = diagnostics.clone();
        let http = http.clone();
        async move {
            let name = config.name().to_owned();
            let failure = |message: String| Diagnostic::new(Rule::ConnectionFailure, name.clone(), message);
            if config.transport() == portcullis_catalog::TransportKind::Stdio && !cfg!(feature = "stdio") {
                diagnostics.report(Diagnostic::new(
                    Rule::UnsupportedTransport,
                    name.clone(),
                    unsupported_stdio_message(&name),
                ));
                return None;
            }
            // A plugin's server is held to its plugin before it may start:
            // a writable PLUGIN_DATA, and command and cwd inside their roots
            // with symlinks resolved. A failure skips only this server.
            if let McpServerConfig::Stdio(stdio) = &config
                && let Err(diagnostic) = crate::plugins::prepare_launch(stdio)
            {
                diagnostics.report(diagnostic);
                return None;
            }
            let bearer = match (&options.auth, &options.session) {
                (Some(auth), Some(session)) => match auth.token(name.clone(), session.clone()).await {
                    Ok(token) => Some(token),
                    Err(reason) => {
                        diagnostics.report(failure(format!(
                            "Resolving credentials for MCP server \"{name}\" failed: {reason}"
                        )));
                        return None;
                    }
                },
                _ => None,
            };
            let plan = ConnectPlan {
                allowed: options.allowed_hosts.resolve(&name, options.session.as_deref()),
                http,
                bearer,
                diagnostics: diagnostics.clone(),
                timeout: options
                    .server_timeouts
                    .get(&name)
                    .copied()
                    .unwrap_or(options.timeout),
                config: config.clone(),
            };
            match connect_one(plan).await {
                Ok(connected) => {
                    for raw in &connected.unreadable {
                        diagnostics.report(Diagnostic::new(
                            Rule::ServerEntryInvalid,
                            name.clone(),
                            format!("MCP tool \"{raw}\" of server \"{name}\" has a definition that cannot be read; the tool is skipped."),
                        ));
                    }
                    Some((config, connected))
                }
                Err(message) => {
                    diagnostics.report(failure(message));
                    None
                }
            }
        }
    });
    let connected: Vec<_> = join_all(attempts).await.into_iter().flatten().collect();

    let mut listings = Vec::with_capacity(connected.len());
    let mut by_identity = Vec::with_capacity(connected.len());
    // Output schemas by (server, remote tool name): the catalogue keeps
    // disclosed definitions, and the promise is the server's own.
    let mut output_schemas: HashMap<(ServerIdentity, String), Value> = HashMap::new();
    for (config, result) in connected {
        let identity = config.identity();
        for tool in &result.tools {
            if let Some(schema) = &tool.output_schema {
                output_schemas.insert((identity.clone(), tool.name.clone()), schema.clone());
            }
        }
        let filter = options
            .server_tools
            .get(config.name())
            .cloned()
            .unwrap_or_else(|| options.tools.clone());
        let mut listing = ServerListing::new(identity.clone(), result.tools).with_filter(filter);
        if let Some(baseline) = options.baselines.get(&identity) {
            listing = listing.with_baseline(baseline.clone());
        }
        listings.push(listing);
        by_identity.push((identity, Arc::new(result.connection)));
    }
    let catalogue = Catalogue::project(listings, &options.projection);
    for diagnostic in catalogue.diagnostics() {
        diagnostics.report(diagnostic.clone());
    }

    let mut connections = HashMap::new();
    for summary in catalogue.servers() {
        if let Some((_, connection)) = by_identity.iter().find(|(id, _)| *id == summary.identity) {
            connections.insert(summary.name.clone(), connection.clone());
        }
    }
    let mut validators = HashMap::new();
    let mut outputs = HashMap::new();
    for entry in catalogue.entries() {
        if entry.kind != portcullis_catalog::catalogue::EntryKind::Remote {
            continue;
        }
        let output = catalogue
            .server(&entry.server)
            .and_then(|s| output_schemas.get(&(s.identity.clone(), entry.remote_name.clone())))
            .and_then(OutputValidator::compile);
        if let Some(output) = output {
            outputs.insert(entry.name.clone(), output);
        }
        match ArgumentValidator::compile(&entry.name, entry.full_input_schema()) {
            Ok(validator) => {
                validators.insert(entry.name.clone(), validator);
            }
            // The server checks its own arguments; we report that ours cannot.
            Err(e) => diagnostics.report(Diagnostic::new(
                Rule::ServerEntryInvalid,
                entry.server.clone(),
                format!("{e}; its arguments are passed to the server unchecked."),
            )),
        }
    }

    Ok(Toolset {
        inner: Arc::new(Inner {
            catalogue,
            validators,
            outputs,
            connections,
            diagnostics,
            policy: options.policy.clone(),
            auth: options.auth.clone(),
            session: options.session.clone(),
            closed: AtomicBool::new(false),
        }),
    })
}

impl Toolset {
    /// The definitions the model sees, sorted by name.
    pub fn tools(&self) -> Vec<Tool> {
        self.inner.catalogue.definitions().cloned().collect()
    }

    /// The whole projected catalogue (routes, withheld tools, per-server
    /// summaries, `status_rows`).
    pub fn catalogue(&self) -> &Catalogue {
        &self.inner.catalogue
    }

    /// The MCP part of a system prompt: tool definitions only, never a
    /// server's `instructions`.
    pub fn compose_system_prompt(&self) -> String {
        self.inner.catalogue.compose_system_prompt()
    }

    /// Every diagnostic so far: connection failures, projection reports,
    /// and those raised by calls since (such as withheld headers).
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        self.inner.diagnostics.snapshot()
    }

    /// Settles once every cached listing has been checked against its
    /// server. A cold start lists every server before returning, so this is
    /// already settled; it exists so a toolset rebuilt from a store (warm
    /// start) has the same shape.
    pub async fn reconciled(&self) {}

    /// The process id of a connected stdio server's child, by effective
    /// server name.
    pub fn child_pid(&self, server: &str) -> Option<u32> {
        self.inner.connections.get(server).and_then(|c| c.pid())
    }

    /// Calls the tool projected as `name`.
    ///
    /// In order: the session check (with `auth`), the server's availability,
    /// whether the server still publishes the tool, the policy gate, the
    /// quarantine refusal, argument validation, per-call credentials, then
    /// `tools/call` with the context's cancellation and progress. A denied,
    /// quarantined or invalid call is answered with an error *result* the
    /// model can read (`is_error: true`) and never reaches the server.
    /// `mcp__describe_tool` is answered from the catalogue.
    pub async fn call(
        &self,
        name: &str,
        args: Option<Value>,
        context: &CallContext,
    ) -> Result<ToolResult, CallError> {
        let inner = &self.inner;
        if inner.auth.is_some() && context.session.is_none() {
            return Err(CallError::SessionRequired {
                tool: name.to_owned(),
            });
        }
        let Some(entry) = inner.catalogue.get(name) else {
            return Err(CallError::UnknownTool {
                tool: name.to_owned(),
            });
        };
        if matches!(inner.catalogue.route(name), Route::DescribeTool) {
            return Ok(self.describe(args));
        }
        let server = entry.server.clone();
        let unavailable = || CallError::Unavailable {
            server: server.clone(),
        };
        let connection = inner.connections.get(&server).ok_or_else(unavailable)?;
        if inner.closed.load(Ordering::Acquire) || !connection.is_available() {
            return Err(unavailable());
        }
        if !connection.publishes(&entry.remote_name) {
            return Err(CallError::NoLongerPublished {
                tool: name.to_owned(),
                server,
            });
        }
        let args = normalize_arguments(args);
        let request = PolicyRequest {
            tool_name: name,
            args: &args,
            def: Some(&entry.definition),
            needs_approval: false,
        };
        match inner.policy.decide(&request) {
            Decision::Allow => {}
            Decision::Deny { reason } => {
                return Ok(DeniedResult::new(name, "policy", &reason).to_tool_result());
            }
            ask @ Decision::Ask { .. } if !context.approved => {
                return Err(CallError::ApprovalRequired {
                    tool: name.to_owned(),
                    title: ask.ask_title(name).unwrap_or_default(),
                });
            }
            Decision::Ask { .. } => {}
        }
        let entry = match inner.catalogue.route(name) {
            Route::Remote(entry) => entry,
            Route::Refused(denied) => return Ok(denied.to_tool_result()),
            Route::DescribeTool | Route::Unknown(_) => {
                return Err(CallError::UnknownTool {
                    tool: name.to_owned(),
                });
            }
        };
        if let Some(validator) = inner.validators.get(name)
            && let Err(problems) = validator.validate(&args)
        {
            return Ok(problems.to_tool_result());
        }
        let token = match (&inner.auth, &context.session) {
            (Some(auth), Some(session)) => Some(
                auth.token(connection.server().to_owned(), session.clone())
                    .await
                    .map_err(|reason| CallError::Credentials {
                        server: server.clone(),
                        reason,
                    })?,
            ),
            _ => None,
        };
        let Value::Object(arguments) = args else {
            // normalize_arguments always yields an object.
            return Err(CallError::UnknownTool {
                tool: name.to_owned(),
            });
        };
        let result = connection
            .call(name, &server, &entry.remote_name, arguments, context, token)
            .await?;
        if let Some(output) = inner.outputs.get(name) {
            output.check(name, &result)?;
        }
        Ok(result)
    }

    fn describe(&self, args: Option<Value>) -> ToolResult {
        let tool = args
            .as_ref()
            .and_then(|a| a.get("tool"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        match self.inner.catalogue.describe(tool) {
            Ok(schema) => {
                let mut result = ToolResult::text(schema.to_string());
                result.structured_content = Some(schema.clone());
                result
            }
            Err(message) => ToolResult::error_text(message),
        }
    }

    /// The session this toolset was built for.
    pub fn session(&self) -> Option<&str> {
        self.inner.session.as_deref()
    }

    /// Ends every connection and child process. Idempotent; a call after
    /// `close` gets `MCP server "<s>" is unavailable.`
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        join_all(self.inner.connections.values().map(|c| c.close())).await;
    }
}

impl std::fmt::Debug for Toolset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolset")
            .field("tools", &self.inner.catalogue.entries().len())
            .field("servers", &self.inner.connections.len())
            .field("closed", &self.inner.closed.load(Ordering::Relaxed))
            .finish()
    }
}
