//! `connect` and the [`Toolset`] it returns: the projected tool map and the
//! call path through every guard.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use futures::StreamExt as _;
use futures::future::{BoxFuture, join_all};
use futures::stream::FuturesUnordered;
use portcullis_catalog::catalogue::Route;
use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::gate::CallDecision;
use portcullis_catalog::policy::{Decision, DeniedResult, Policy, PolicyRequest};
use portcullis_catalog::validation::normalize_arguments;
use portcullis_catalog::{Catalogue, Diagnostic, ProjectionOptions, Rule, Tool, ToolResult};
use portcullis_store::Store;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::McpServerConfig;
use crate::connection::{ConnectPlan, Connected, Connection, connect as connect_one};
use crate::credentials::Auth;
use crate::error::{CallError, WiringError};
use crate::hosts::AllowedHosts;
use crate::options::ConnectOptions;
use crate::progress::Progress;
use crate::relay::ClientRelay;
use crate::report::DiagnosticSink;
use crate::state::{self, Snapshot, Source, Waking};

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
    /// The caller's idempotency key: with a store, a call repeated under
    /// the same key (and arguments) replays the recorded outcome instead of
    /// reaching the server again (see `crate::effects`).
    pub idempotency_key: Option<String>,
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

    /// Sets the idempotency key.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
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
            .field("idempotency_key", &self.idempotency_key.is_some())
            .finish()
    }
}

/// What [`Toolset::call_answer`] answers: the server's result, or the
/// toolset's own refusal (never sent to the server) with its decision.
#[derive(Debug, Clone, PartialEq)]
pub enum CallAnswer {
    /// The server answered (or, for `mcp__describe_tool`, the catalogue).
    Output(ToolResult),
    /// A guard of the toolset refused the call before any request was sent.
    Refused {
        /// Why: `Denied` (the policy), `Quarantined` (the tool drifted) or
        /// `Invalid` (the arguments).
        decision: CallDecision,
        /// What the model is told, written by the toolset.
        answer: ToolResult,
    },
}

/// The connected servers, their projected tools and the call path.
///
/// Cheap to clone; every clone shares the connections. Connections stay open
/// until [`Toolset::close`] (or until the last clone drops, which still kills
/// stdio children).
///
/// The tool map can be corrected in place (a reconcile after
/// [`crate::rebuild_from_store`]): [`Toolset::catalogue`] returns the
/// snapshot in force, a call keeps the snapshot it started with, and
/// [`Toolset::watch_catalogue`] announces each correction.
#[derive(Clone)]
pub struct Toolset {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The projection in force; swapped whole by a correction.
    pub(crate) state: RwLock<Arc<Snapshot>>,
    /// What the projection is built from. Held while a correction builds
    /// and swaps its snapshot, so two corrections never lose each other's.
    pub(crate) sources: Mutex<Vec<Source>>,
    /// Servers of a wake projected from the store's cache whose connection
    /// is not open yet (`crate::reconcile` opens them). Projected with the
    /// sources; locked only after `sources`, never the other way round.
    pub(crate) waking: Mutex<Vec<Waking>>,
    /// The projection options as given (`prefix` possibly `Auto`).
    pub(crate) projection: ProjectionOptions,
    /// How many servers are configured, connected or not: `Prefix::Auto`
    /// is decided by this count, so a server that is down renames nothing.
    pub(crate) configured: AtomicUsize,
    pub(crate) store: Option<Arc<dyn Store>>,
    pub(crate) diagnostics: DiagnosticSink,
    policy: Arc<dyn Policy>,
    auth: Option<Auth>,
    /// Per-server resolvers (`ConnectOptions::server_auth`).
    server_auth: HashMap<String, Auth>,
    session: Option<String>,
    pub(crate) closed: AtomicBool,
    /// `true` once every cached listing was checked against its server.
    pub(crate) reconciled: watch::Receiver<bool>,
    /// The catalogue in force, announced on every swap.
    pub(crate) changes: watch::Sender<Arc<Catalogue>>,
    /// What a supervisor reopens a connection with (host guard, timeouts,
    /// credentials, backoff); a reconfigure replaces it.
    pub(crate) reopen: Mutex<ConnectOptions>,
    /// The supervisors (`crate::supervisor`), awaited by `close`.
    pub(crate) supervisors: TaskTracker,
    /// Stops every supervisor: cancelled by `close` and when the last
    /// clone of the toolset drops.
    pub(crate) stop: CancellationToken,
    /// Servers that failed to connect and are retried in the background,
    /// by row id, each with the token that stops its retries.
    pub(crate) pending: Mutex<HashMap<String, CancellationToken>>,
    /// Servers whose first connection attempt outlived the start deadline
    /// and is still under way, by configured name.
    pub(crate) starting: Mutex<std::collections::BTreeSet<String>>,
    /// The passthrough's log sink and notice receivers, for servers that
    /// join later.
    pub(crate) listeners: Mutex<crate::passthrough::Listeners>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Inner {
    /// The snapshot in force.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The passthrough's listeners, locked.
    pub(crate) fn listeners(&self) -> MutexGuard<'_, crate::passthrough::Listeners> {
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The sources, locked. A poisoned lock means a projection panicked; the
    /// sources themselves were only read by it.
    pub(crate) fn sources(&self) -> MutexGuard<'_, Vec<Source>> {
        self.sources.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The servers still waking, locked (after `sources` when both are).
    pub(crate) fn waking(&self) -> MutexGuard<'_, Vec<Waking>> {
        self.waking.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Swaps in the snapshot in force with its routes recomputed (a woken
    /// server joined with the listing and baseline it was projected with:
    /// the projection would be the same, so it is not redone). Call with
    /// the sources lock held.
    pub(crate) fn relink(&self, sources: &[Source]) {
        let next = self.snapshot().relinked(sources, &self.waking());
        *self.state.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
    }

    /// Projects `sources` again and swaps the result in. Call with the
    /// sources lock held (pass the guarded list).
    pub(crate) fn reproject(&self, sources: &[Source]) {
        self.swap(sources, true);
    }

    /// Projects `sources` again and swaps the result in, announcing the
    /// new catalogue only when `announce` (a reconnect whose tool map did
    /// not move swaps only to route to its new connection). Call with the
    /// sources lock held.
    pub(crate) fn swap(&self, sources: &[Source], announce: bool) {
        let previous = self.snapshot();
        let projection = resolved(&self.projection, self.configured.load(Ordering::Acquire));
        let next = state::project(
            sources,
            &self.waking(),
            &projection,
            &self.diagnostics,
            Some(&previous),
        );
        let catalogue = next.catalogue.clone();
        *self.state.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
        if announce {
            self.changes.send_replace(catalogue);
        } else {
            // The catalogue in force stays readable without a change
            // notice.
            self.changes.send_if_modified(|current| {
                *current = catalogue;
                false
            });
        }
    }
}

/// The message for a stdio config in a build without the `stdio` feature.
pub(crate) fn unsupported_stdio_message(server: &str) -> String {
    format!(
        "MCP server \"{server}\" uses the stdio transport, which this build of portcullis-upstream does not include: enable the `stdio` cargo feature (on by default) to spawn local servers; remote transports (streamable-http, sse) work without it."
    )
}

fn default_builder(tls: rustls::ClientConfig) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        // Redirects are followed by hand, per hop, by the guard.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        // Built once per process (`crate::tls`), not once per client.
        .tls_backend_preconfigured(tls)
}

/// The default client for one remote server: its names are resolved by
/// `resolver`, which dials only the addresses the server's guard admits.
pub(crate) fn guarded_client(
    resolver: crate::hosts::GuardedResolver,
) -> Result<reqwest::Client, crate::tls::ClientBuildError> {
    guarded_client_with(resolver, crate::tls::shared()?)
}

/// [`guarded_client`] with the TLS configuration `tls` (the tests' own
/// roots added, say).
pub(crate) fn guarded_client_with(
    resolver: crate::hosts::GuardedResolver,
    tls: rustls::ClientConfig,
) -> Result<reqwest::Client, crate::tls::ClientBuildError> {
    Ok(default_builder(tls).dns_resolver(resolver).build()?)
}

/// The option combinations refused before anything connects.
pub(crate) fn check_wiring(options: &ConnectOptions) -> Result<(), WiringError> {
    if options.session.is_none() {
        if options.auth.is_some() {
            return Err(WiringError::AuthWithoutSession);
        }
        if matches!(options.allowed_hosts, AllowedHosts::Resolver(_)) {
            return Err(WiringError::HostResolverWithoutSession);
        }
    }
    Ok(())
}

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
    notices: Option<crate::passthrough::Notices>,
) -> Result<Connected, Diagnostic> {
    let name = config.name().to_owned();
    let failure = |message: String| Diagnostic::new(Rule::ConnectionFailure, name.clone(), message);
    if config.transport() == portcullis_catalog::TransportKind::Stdio && !cfg!(feature = "stdio") {
        return Err(Diagnostic::new(
            Rule::UnsupportedTransport,
            name.clone(),
            unsupported_stdio_message(&name),
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
        notices: notices.clone(),
    };
    match connect_one(plan).await {
        Ok(connected) => {
            // A reconnect reports unreadable tools only when its listing
            // moved (`crate::reconcile::apply`).
            if notices.is_none() {
                for raw in &connected.unreadable {
                    diagnostics.report(Diagnostic::new(
                        Rule::ServerEntryInvalid,
                        name.clone(),
                        format!("MCP tool \"{raw}\" of server \"{name}\" has a definition that cannot be read; the tool is skipped."),
                    ));
                }
            }
            Ok(connected)
        }
        Err(message) => Err(failure(message)),
    }
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
        tools,
        baseline,
        recorded,
        connection: Arc::new(connection),
    }
}

/// `projection` with its prefix mode decided for `configured` servers.
fn resolved(projection: &ProjectionOptions, configured: usize) -> ProjectionOptions {
    let mut projection = projection.clone();
    projection.prefix = projection.prefix.for_sources(configured);
    projection
}

/// Projects the sources (and, for a wake, the servers still waking) into a
/// toolset. `reconciled` says whether the tool map is already checked
/// against every server (a cold start) or a reconcile will report it.
pub(crate) fn assemble(
    sources: Vec<Source>,
    waking: Vec<Waking>,
    configured: usize,
    options: &ConnectOptions,
    diagnostics: DiagnosticSink,
    reconciled: watch::Receiver<bool>,
) -> Toolset {
    let projection = resolved(&options.projection, configured);
    let snapshot = state::project(&sources, &waking, &projection, &diagnostics, None);
    let (changes, _) = watch::channel(snapshot.catalogue.clone());
    let toolset = Toolset {
        inner: Arc::new(Inner {
            state: RwLock::new(Arc::new(snapshot)),
            sources: Mutex::new(sources),
            waking: Mutex::new(waking),
            projection: options.projection.clone(),
            configured: AtomicUsize::new(configured),
            store: options.store.clone(),
            diagnostics,
            policy: options.policy.clone(),
            auth: options.auth.clone(),
            server_auth: options.server_auth.clone(),
            session: options.session.clone(),
            closed: AtomicBool::new(false),
            reconciled,
            changes,
            reopen: Mutex::new(options.clone()),
            supervisors: TaskTracker::new(),
            stop: CancellationToken::new(),
            pending: Mutex::new(HashMap::new()),
            starting: Mutex::default(),
            listeners: Mutex::default(),
        }),
    };
    crate::supervisor::supervise_all(&toolset.inner);
    toolset
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
    index: usize,
    pub(crate) config: McpServerConfig,
    pub(crate) id: String,
    pub(crate) outcome: Option<Result<Source, Diagnostic>>,
}

/// Connects every server concurrently, lists their tools and projects them
/// (a cold start).
///
/// Never fails because of a server: one that cannot be reached, refuses our
/// credentials, names a blocked host or times out becomes a
/// `connection-failure` diagnostic and is skipped while the others connect;
/// unless [`ConnectOptions::reconnect`] is off, it is then retried in the
/// background and joins the tool map when it connects.
/// Only wiring mistakes are errors (`auth` or a resolver `allowed_hosts`
/// without a session).
///
/// With [`ConnectOptions::start_deadline`] it returns at the deadline with
/// the servers ready by then; the others keep connecting in the background
/// and join the tool map one by one, each settled against its baseline
/// first ([`Toolset::starting`] names them meanwhile).
///
/// With a store ([`ConnectOptions::with_store`]) every server that lists is
/// persisted — the fresh listing as the catalogue cache, and on first use its
/// fingerprints as the trust baseline — and the baseline the store holds is
/// enforced (a recorded one, else one derived from a pre-fingerprint row's
/// cached listing, else the first one recorded, possibly by a replica that
/// raced this one). Each server is settled as soon as it has answered (a
/// start deadline must not wait for the slowest to settle the others). A
/// server whose baseline cannot be read or recorded is not connected:
/// serving it would serve a possibly drifted listing as trusted. stdio servers are
/// persisted too, keyed by a hash of their command line. Without a store,
/// [`ConnectOptions::baselines`] applies.
pub async fn connect(
    servers: Vec<McpServerConfig>,
    options: ConnectOptions,
) -> Result<Toolset, WiringError> {
    check_wiring(&options)?;
    let diagnostics = DiagnosticSink::new(options.on_diagnostic.clone());
    let http = http_client(&options);
    let ids = crate::trust::row_ids(&servers);
    let names: Vec<String> = servers.iter().map(|s| s.name().to_owned()).collect();
    let tracker = crate::options::ConnectTracker::new(options.on_connect.clone(), &names);

    let configured: Vec<(McpServerConfig, String)> = servers.into_iter().zip(ids).collect();
    let count = configured.len();
    // Owned by each attempt, so one still running at the start deadline
    // can go on in the background; each has a token a reconfigure (or the
    // toolset's end) stops it with.
    let shared = Arc::new(options.clone());
    let mut running: FuturesUnordered<BoxFuture<'static, Attempted>> = FuturesUnordered::new();
    let mut tokens = Vec::with_capacity(count);
    for (index, (config, id)) in configured.iter().cloned().enumerate() {
        let token = CancellationToken::new();
        tokens.push(token.clone());
        let options = shared.clone();
        let diagnostics = diagnostics.clone();
        let http = http.clone();
        let tracker = tracker.clone();
        running.push(Box::pin(async move {
            let name = config.name().to_owned();
            let attempt = try_cold_source(config.clone(), id.clone(), &options, &diagnostics, http);
            let outcome = tokio::select! {
                () = token.cancelled() => None,
                outcome = tracker.track(name, attempt) => Some(outcome),
            };
            Attempted {
                index,
                config,
                id,
                outcome,
            }
        }));
    }
    let deadline = options
        .start_deadline
        .map(|wait| tokio::time::Instant::now() + wait);
    let mut finished = Vec::with_capacity(count);
    loop {
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, running.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
            None => running.next().await,
        };
        let Some(attempted) = next else { break };
        if let Some(Err(diagnostic)) = &attempted.outcome {
            diagnostics.report(diagnostic.clone());
        }
        finished.push(attempted);
    }
    // In the configured order, as if every server had been awaited.
    finished.sort_by_key(|a| a.index);
    let mut sources = Vec::with_capacity(finished.len());
    let mut failed = Vec::new();
    let mut done = vec![false; count];
    for attempted in finished {
        done[attempted.index] = true;
        match attempted.outcome {
            Some(Ok(source)) => sources.push(source),
            _ => failed.push((attempted.config, attempted.id)),
        }
    }
    // Every listing is live: nothing is left to reconcile.
    let (_, reconciled) = watch::channel(true);
    let toolset = assemble(
        sources,
        Vec::new(),
        count,
        &options,
        diagnostics,
        reconciled,
    );
    // A server that failed now is tried again in the background and joins
    // the tool map when it connects.
    for (config, id) in failed {
        crate::supervisor::join_later(&toolset.inner, id, config);
    }
    // Those still connecting at the deadline go on in the background.
    let late: Vec<(String, String, CancellationToken)> = configured
        .iter()
        .zip(tokens)
        .zip(&done)
        .filter(|(_, done)| !**done)
        .map(|(((config, id), token), _)| (id.clone(), config.name().to_owned(), token))
        .collect();
    if !late.is_empty() {
        crate::supervisor::finish_later(&toolset.inner, running, late);
    }
    Ok(toolset)
}

impl Toolset {
    /// The servers still making their first connection attempt after
    /// [`connect`] returned at its start deadline, by configured name: their
    /// tools join the tool map when they are ready.
    pub fn starting(&self) -> Vec<String> {
        self.inner
            .starting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// The definitions the model sees, sorted by name.
    pub fn tools(&self) -> Vec<Tool> {
        self.inner
            .snapshot()
            .catalogue
            .definitions()
            .cloned()
            .collect()
    }

    /// The projected catalogue in force (routes, withheld tools, per-server
    /// summaries, `status_rows`): a snapshot, which a later correction does
    /// not change — ask again to see it.
    pub fn catalogue(&self) -> Arc<Catalogue> {
        self.inner.snapshot().catalogue.clone()
    }

    /// A receiver that sees every catalogue swapped in by a correction (a
    /// reconcile), so a surface can tell its clients the tool list changed.
    /// Its current value is the catalogue in force.
    pub fn watch_catalogue(&self) -> watch::Receiver<Arc<Catalogue>> {
        self.inner.changes.subscribe()
    }

    /// The MCP part of a system prompt: tool definitions only, never a
    /// server's `instructions`.
    pub fn compose_system_prompt(&self) -> String {
        self.inner.snapshot().catalogue.compose_system_prompt()
    }

    /// Every diagnostic so far: connection failures, projection reports,
    /// and those raised by calls and reconciles since (such as withheld
    /// headers or a failed re-list).
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        self.inner.diagnostics.snapshot()
    }

    /// Settles once every cached listing has been checked against its
    /// server and the tool map corrected. A cold start lists every server
    /// before returning, so it is already settled; a toolset rebuilt from a
    /// store settles when its background reconcile ends. Never fails: a
    /// server that could not be re-listed keeps its cached listing and is
    /// reported as a diagnostic.
    pub async fn reconciled(&self) {
        let mut done = self.inner.reconciled.clone();
        // An error means the reconcile ended without saying so (it
        // panicked): nothing is left to wait for either way.
        let _ = done.wait_for(|done| *done).await;
    }

    /// The baseline enforced on a server (by effective name), if any: the
    /// one the store holds, or the one [`ConnectOptions::baselines`] gave.
    pub fn baseline(&self, server: &str) -> Option<Fingerprints> {
        let catalogue = self.catalogue();
        let identity = &catalogue.server(server)?.identity;
        let sources = self.inner.sources();
        match sources.iter().find(|s| &s.identity == identity) {
            Some(source) => source.baseline.clone(),
            None => self
                .inner
                .waking()
                .iter()
                .find(|w| &w.identity == identity)
                .and_then(|w| w.baseline.clone()),
        }
    }

    /// Everything the servers serve besides tools (resources, prompts,
    /// completions, logging, subscriptions), over the same connections.
    pub fn passthrough(&self) -> crate::passthrough::Passthrough {
        crate::passthrough::Passthrough::new(self.clone())
    }

    /// The process id of a connected stdio server's child, by effective
    /// server name.
    pub fn child_pid(&self, server: &str) -> Option<u32> {
        self.inner
            .snapshot()
            .connections
            .get(server)
            .and_then(|c| c.pid())
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
        Ok(match self.call_answer(name, args, context).await? {
            CallAnswer::Output(result) => result,
            CallAnswer::Refused { answer, .. } => answer,
        })
    }

    /// [`Toolset::call`], with the toolset's own refusals told apart from
    /// the server's results as a type: a caller that records calls (the
    /// gateway's audit trail) reads the decision, never the words.
    pub async fn call_answer(
        &self,
        name: &str,
        args: Option<Value>,
        context: &CallContext,
    ) -> Result<CallAnswer, CallError> {
        let inner = &self.inner;
        if inner.auth.is_some() && context.session.is_none() {
            return Err(CallError::SessionRequired {
                tool: name.to_owned(),
            });
        }
        // The call keeps this snapshot to the end, whatever a correction
        // swaps in meanwhile.
        let mut state = inner.snapshot();
        // A tool of a woken server that has no connection yet was projected
        // from the store's cache: the call waits until the server connected
        // and the drift guard compared its live listing with the baseline,
        // then routes on the snapshot that comparison produced (a drifted
        // tool is quarantined there, a withdrawn one gone). A server whose
        // first attempt failed is still waking afterwards and has no
        // connection: the call is refused below as unavailable.
        while let Some(settled) = state
            .catalogue
            .get(name)
            .and_then(|entry| state.waking.get(&entry.server))
            .filter(|settled| !settled.is_cancelled())
        {
            let settled = settled.clone();
            tokio::select! {
                _ = settled.cancelled() => {}
                _ = context.cancel.cancelled() => {
                    return Err(CallError::Cancelled { tool: name.to_owned() });
                }
            }
            state = inner.snapshot();
        }
        let Some(entry) = state.catalogue.get(name) else {
            if let Some(server) = state.retired.get(name) {
                return Err(CallError::NoLongerPublished {
                    tool: name.to_owned(),
                    server: server.clone(),
                });
            }
            return Err(CallError::UnknownTool {
                tool: name.to_owned(),
            });
        };
        if matches!(state.catalogue.route(name), Route::DescribeTool) {
            return Ok(CallAnswer::Output(describe(&state.catalogue, args)));
        }
        let server = entry.server.clone();
        let unavailable = || CallError::Unavailable {
            server: server.clone(),
        };
        let connection = state.connections.get(&server).ok_or_else(unavailable)?;
        if inner.closed.load(Ordering::Acquire) {
            return Err(unavailable());
        }
        if !connection.is_available() {
            // Refused at once, never queued: the call is not sent to the
            // connection that replaces this one either.
            return Err(match connection.health().reconnecting() {
                Some(retry) => CallError::Reconnecting {
                    server: server.clone(),
                    attempt: retry.map_or(0, |r| r.attempt),
                    retry_in_ms: retry.map_or(0, |r| {
                        r.at.saturating_duration_since(std::time::Instant::now())
                            .as_millis()
                    }),
                },
                None => unavailable(),
            });
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
                return Ok(CallAnswer::Refused {
                    decision: CallDecision::Denied,
                    answer: DeniedResult::new(name, "policy", &reason).to_tool_result(),
                });
            }
            ask @ Decision::Ask { .. } if !context.approved => {
                return Err(CallError::ApprovalRequired {
                    tool: name.to_owned(),
                    title: ask.ask_title(name).unwrap_or_default(),
                });
            }
            Decision::Ask { .. } => {}
        }
        let entry = match state.catalogue.route(name) {
            Route::Remote(entry) => entry,
            Route::Refused(denied) => {
                return Ok(CallAnswer::Refused {
                    decision: CallDecision::Quarantined,
                    answer: denied.to_tool_result(),
                });
            }
            Route::DescribeTool | Route::Unknown(_) => {
                return Err(CallError::UnknownTool {
                    tool: name.to_owned(),
                });
            }
        };
        if let Some(validator) = state.validator(name, &inner.diagnostics)
            && let Err(problems) = validator.validate(&args)
        {
            return Ok(CallAnswer::Refused {
                decision: CallDecision::Invalid,
                answer: problems.to_tool_result(),
            });
        }
        let server_auth = inner.server_auth.get(connection.server());
        let token = match (server_auth.or(inner.auth.as_ref()), &context.session) {
            (Some(auth), _) if server_auth.is_some() => Some(
                auth.token(connection.server().to_owned(), String::new())
                    .await
                    .map_err(|reason| CallError::Credentials {
                        server: server.clone(),
                        reason,
                    })?,
            ),
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
        let session = context.session.as_deref().or(inner.session.as_deref());
        let key = context.idempotency_key.as_deref();
        let effect_args = arguments.clone();
        let send = async {
            let result = connection
                .call(name, &server, &entry.remote_name, arguments, context, token)
                .await?;
            // It answered, whichever path the call took: up (again).
            connection.health().set_reachable(true);
            if let Some(output) = state.outputs.get(name) {
                output.check(name, &result)?;
            }
            Ok(result)
        };
        crate::effects::replay_or_call(inner.store.as_ref(), session, key, name, &effect_args, send)
            .await
            .map(CallAnswer::Output)
    }

    /// The session this toolset was built for.
    pub fn session(&self) -> Option<&str> {
        self.inner.session.as_deref()
    }

    /// Ends every connection and child process, and stops reopening
    /// closed ones (a reconnect under way is abandoned). Idempotent; a
    /// call after `close` gets `MCP server "<s>" is unavailable.`
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        // Supervisors first, so none swaps a new connection in behind the
        // list below; an attempt under way is dropped with its connection.
        self.inner.stop.cancel();
        self.inner.supervisors.close();
        self.inner.supervisors.wait().await;
        let connections: Vec<Arc<Connection>> = self
            .inner
            .sources()
            .iter()
            .map(|s| s.connection.clone())
            .collect();
        join_all(connections.iter().map(|c| c.close())).await;
    }
}

/// `mcp__describe_tool`, answered from the catalogue.
fn describe(catalogue: &Catalogue, args: Option<Value>) -> ToolResult {
    let tool = args
        .as_ref()
        .and_then(|a| a.get("tool"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    match catalogue.describe(tool) {
        Ok(schema) => {
            let mut result = ToolResult::text(schema.to_string());
            result.structured_content = Some(schema.clone());
            result
        }
        Err(message) => ToolResult::error_text(message),
    }
}

impl std::fmt::Debug for Toolset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.snapshot();
        f.debug_struct("Toolset")
            .field("tools", &state.catalogue.entries().len())
            .field("servers", &state.connections.len())
            .field("closed", &self.inner.closed.load(Ordering::Relaxed))
            .finish()
    }
}
