//! The [`Toolset`] that [`crate::connect`] returns: the projected tool map
//! and the call path through every guard.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};

use futures::future::join_all;
use portcullis_catalog::catalogue::Route;
use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::gate::CallDecision;
use portcullis_catalog::policy::{Decision, DeniedResult, Policy, PolicyRequest};
use portcullis_catalog::validation::normalize_arguments;
use portcullis_catalog::{
    Catalogue, Diagnostic, ProjectionOptions, ServerIdentity, ServerListing, Tool, ToolResult,
};
use portcullis_store::Store;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::connection::Connection;
use crate::credentials::Auth;
use crate::error::CallError;
use crate::options::ConnectOptions;
use crate::report::DiagnosticSink;
use crate::state::{self, Snapshot, Source, Waking};

pub use crate::call_context::CallContext;

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
    /// Every configured server, connected or not: names are decided over
    /// these (and `other_sources`), so a server that is down renames
    /// nothing. A reconfigure replaces them.
    pub(crate) configured: Mutex<Vec<ServerIdentity>>,
    /// Sources projected beside the servers and never called through the
    /// toolset ([`ConnectOptions::other_sources`]).
    pub(crate) other_sources: Vec<ServerListing>,
    pub(crate) store: Option<Arc<dyn Store>>,
    pub(crate) diagnostics: DiagnosticSink,
    pub(crate) policy: Arc<dyn Policy>,
    pub(crate) auth: Option<Auth>,
    /// Per-server resolvers (`ConnectOptions::server_auth`).
    pub(crate) server_auth: HashMap<String, Auth>,
    pub(crate) session: Option<String>,
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
    pub(crate) listeners: Mutex<crate::notifications::Listeners>,
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
    pub(crate) fn listeners(&self) -> MutexGuard<'_, crate::notifications::Listeners> {
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
        let projection = resolved(
            &self.projection,
            &self
                .configured
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            &self.other_sources,
        );
        let next = state::project(
            sources,
            &self.waking(),
            &self.other_sources,
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

/// `projection` with names decided over the `configured` servers and the
/// `others` beside them, connected or not.
pub(crate) fn resolved(
    projection: &ProjectionOptions,
    configured: &[ServerIdentity],
    others: &[ServerListing],
) -> ProjectionOptions {
    let mut resolved = projection.clone();
    resolved.configured = crate::trust::naming_set(configured, projection, others);
    if resolved.threads == 0 {
        resolved.threads = projection_threads();
    }
    resolved
}

/// The threads a projection uses when the caller left the count to the
/// toolset: the machine's parallelism (read once), at most four. Only a
/// projection's per-listing work is spread, in runs of about equal
/// weight; more threads would mostly add thread starts.
fn projection_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)))
}

impl Toolset {
    /// The servers still making their first connection attempt after
    /// [`crate::connect`] returned at its start deadline, by configured name: their
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

    /// The sources projected beside the servers
    /// ([`ConnectOptions::other_sources`]): their entries are in the
    /// catalogue, and their calls are the caller's to serve.
    pub fn other_sources(&self) -> &[ServerListing] {
        &self.inner.other_sources
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
        let Some(connection) = state.connections.get(&server) else {
            // Listed beside the servers, served by whoever put it there.
            let elsewhere = state
                .catalogue
                .server(&server)
                .is_some_and(|s| inner.other_sources.iter().any(|o| o.identity == s.identity));
            if elsewhere {
                return Err(CallError::UnknownTool {
                    tool: name.to_owned(),
                });
            }
            return Err(unavailable());
        };
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
        // Only a call the effect log keeps needs its arguments afterwards.
        let logged = inner.store.is_some() && key.is_some();
        let effect_args = logged.then(|| arguments.clone());
        // A closure, so the call's future is built where it is awaited: a
        // future kept in a local and then awaited takes its room twice in
        // this one, which every call moves into a box.
        let (state, server) = (&state, &server);
        let send = move || async move {
            let result = connection
                .call(name, server, &entry.remote_name, arguments, context, token)
                .await?;
            // It answered, whichever path the call took: up (again).
            connection.health().set_reachable(true);
            if let Some(output) = state.outputs.get(name).and_then(|o| o.validator()) {
                output.check(name, &result)?;
            }
            Ok(result)
        };
        match effect_args {
            None => send().await,
            Some(args) => {
                let replay = crate::effects::replay_or_call(
                    inner.store.as_ref(),
                    session,
                    key,
                    name,
                    &args,
                    send(),
                );
                Box::pin(replay).await
            }
        }
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

impl Toolset {
    /// Whether the server of that effective name is up: connected, its
    /// connection open (a stdio child that exited closes it), and — for a
    /// remote server — reachable at its last call or check. A server that
    /// failed to connect is not up, nor is one whose closed connection is
    /// being reopened, until the new connection is swapped in.
    pub fn is_up(&self, server: &str) -> bool {
        self.inner
            .snapshot()
            .connections
            .get(server)
            .is_some_and(|c| c.is_available() && c.health().is_reachable())
    }

    /// Pings every connected remote server (Streamable HTTP, SSE) at once,
    /// each bounded by ten seconds and its own timeout, and records
    /// which answered ([`Toolset::is_up`]). Stdio servers are left out:
    /// their child process is watched instead.
    pub async fn check_remotes(&self) {
        let remotes: Vec<_> = self
            .inner
            .snapshot()
            .connections
            .values()
            .filter(|c| c.pid().is_none() && c.is_available())
            .cloned()
            .collect();
        futures::future::join_all(remotes.iter().map(|c| c.ping(crate::health::PING_TIMEOUT)))
            .await;
    }
}
