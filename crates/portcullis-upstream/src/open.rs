//! Opening one server: connected, listed and (with a store) settled
//! against its trust baseline, as a cold start, a late join and a
//! reconnect all do it.

use std::sync::Arc;

use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::{Diagnostic, Rule, Tool};

use crate::config::McpServerConfig;
use crate::connection::{ConnectPlan, Connected, Connection, connect as connect_one};
use crate::options::ConnectOptions;
use crate::report::DiagnosticSink;
use crate::state::Source;

/// The caller's own HTTP client, which remote servers then share; without
/// one each remote server gets its own guarded client when it connects
/// (`connection::guarded`).
pub(crate) fn http_client(options: &ConnectOptions) -> Option<reqwest::Client> {
    options.http.clone()
}

/// Opens one server: the stdio feature and plugin launch checks, the
/// handshake credential, then the connection and its `tools/list`. The
/// failure is handed back (a reconnect logs its failed attempts rather
/// than piling up diagnostics). `notices` carries a replaced connection's
/// notices over.
pub(crate) async fn try_open(
    config: &McpServerConfig,
    options: &ConnectOptions,
    diagnostics: &DiagnosticSink,
    http: Option<reqwest::Client>,
    notices: Option<crate::notifications::Notices>,
) -> Result<Connected, Diagnostic> {
    let name = config.name().to_owned();
    let failure = |message: String| Diagnostic::new(Rule::ConnectionFailure, name.clone(), message);
    if config.transport() == portcullis_catalog::TransportKind::Stdio && !cfg!(feature = "stdio") {
        return Err(Diagnostic::new(
            Rule::UnsupportedTransport,
            name.clone(),
            crate::config::unsupported_stdio_message(&name),
        ));
    }
    // A plugin's server is held to its plugin before it may start: a
    // writable PLUGIN_DATA, and command and cwd inside their roots with
    // symlinks resolved. A failure skips only this server.
    if let McpServerConfig::Stdio(stdio) = config {
        crate::plugins::prepare_launch(stdio)?;
    }
    // The server's own resolver first (no session needed), else the
    // per-session one.
    let server_auth = options.server_auth.get(&name).cloned();
    let auth = server_auth.clone().or_else(|| options.auth.clone());
    let session = match &server_auth {
        Some(_) => Some(options.session.clone().unwrap_or_default()),
        None => options.session.clone(),
    };
    let bearer = match (&auth, &session) {
        (Some(auth), Some(session)) => match auth.token(name.clone(), session.clone()).await {
            Ok(token) => Some(token),
            Err(reason) => {
                return Err(failure(format!(
                    "Resolving credentials for MCP server \"{name}\" failed: {reason}"
                )));
            }
        },
        _ => None,
    };
    let plan = ConnectPlan {
        allowed: match options.server_allowed_hosts.get(&name) {
            Some(hosts) => Some(hosts.clone()),
            None => options
                .allowed_hosts
                .resolve(&name, options.session.as_deref()),
        },
        http,
        bearer,
        auth,
        diagnostics: diagnostics.clone(),
        timeout: options
            .server_timeouts
            .get(&name)
            .copied()
            .unwrap_or(options.timeout),
        config: config.clone(),
        notices,
    };
    connect_one(plan).await.map_err(failure)
}

/// A connected server as a source, with the configured filter.
pub(crate) fn source(
    id: String,
    config: McpServerConfig,
    options: &ConnectOptions,
    connection: Connection,
    tools: Vec<Tool>,
    baseline: Option<Fingerprints>,
    recorded: bool,
) -> Source {
    let filter = options
        .server_tools
        .get(config.name())
        .cloned()
        .unwrap_or_else(|| options.tools.clone());
    Source {
        id,
        identity: config.identity(),
        classification: options.classification_of(config.name()),
        config,
        filter,
        tools: tools.into(),
        baseline,
        recorded,
        connection: Arc::new(connection),
    }
}

/// One server of a cold start: connected and listed, its listing saved to
/// the store (when there is one) and the baseline the store keeps enforced;
/// without a store, [`ConnectOptions::baselines`] applies. A failure is
/// reported and gives `None`.
pub(crate) async fn cold_source(
    config: McpServerConfig,
    id: String,
    options: &ConnectOptions,
    diagnostics: &DiagnosticSink,
    http: Option<reqwest::Client>,
) -> Option<Source> {
    match try_cold_source(config, id, options, diagnostics, http).await {
        Ok(source) => Some(source),
        Err(diagnostic) => {
            diagnostics.report(diagnostic);
            None
        }
    }
}

/// [`cold_source`], handing the failure back instead of reporting it (a
/// server retried in the background, `crate::supervisor::join_later`).
pub(crate) async fn try_cold_source(
    config: McpServerConfig,
    id: String,
    options: &ConnectOptions,
    diagnostics: &DiagnosticSink,
    http: Option<reqwest::Client>,
) -> Result<Source, Diagnostic> {
    let connected = try_open(&config, options, diagnostics, http, None).await?;
    let identity = config.identity();
    let (baseline, recorded) = match &options.store {
        Some(store) => {
            let settled = crate::trust::settle_cold(
                store.as_ref(),
                &id,
                &identity,
                &connected.tools,
                &connected.connection,
            );
            match settled.await {
                Ok(in_force) => (in_force, true),
                Err(reason) => {
                    connected.connection.close().await;
                    return Err(crate::trust::store_failure(config.name(), &reason));
                }
            }
        }
        None => (options.baselines.get(&identity).cloned(), false),
    };
    Ok(source(
        id,
        config,
        options,
        connected.connection,
        connected.tools,
        baseline,
        recorded,
    ))
}

/// One server's first connection attempt, as [`connect`] runs it:
/// `outcome` is `None` when it was stopped before it ended.
pub(crate) struct Attempted {
    /// Its place among the configured servers.
    pub(crate) index: usize,
    pub(crate) config: McpServerConfig,
    pub(crate) id: String,
    pub(crate) outcome: Option<Result<Source, Diagnostic>>,
}
