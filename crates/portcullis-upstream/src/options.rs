//! What `connect` is told besides the servers.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use portcullis_catalog::classification::Classification;
use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::policy::{AllowAll, Policy};
use portcullis_catalog::{ProjectionOptions, ServerIdentity, ServerListing, ToolFilter};
use portcullis_store::Store;

use crate::credentials::{Auth, AuthResolver};
use crate::error::WiringError;
use crate::hosts::AllowedHosts;
use crate::report::DiagnosticCallback;

/// The default per-connection timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Options for [`crate::connect`]. `Default` is: no host check, no auth, no
/// filter, the default disclosure budget, `prefix = auto`, 60 s timeouts,
/// allow every call.
#[derive(Clone)]
pub struct ConnectOptions {
    /// The SSRF guard for remote URLs.
    pub allowed_hosts: AllowedHosts,
    /// Per-server allow-lists by configured name; each replaces
    /// `allowed_hosts` for its server.
    pub server_allowed_hosts: HashMap<String, Vec<String>>,
    /// Per-session credentials; needs `session`.
    pub auth: Option<Auth>,
    /// Per-server credentials by configured name: the toolset's own (an
    /// OAuth login to that server, say), not a session's, so no session is
    /// needed. Each replaces `auth` for its server.
    pub server_auth: HashMap<String, Auth>,
    /// The session this toolset belongs to.
    pub session: Option<String>,
    /// A visibility filter for every server (qualified or bare names).
    pub tools: ToolFilter,
    /// Per-server filters by configured name; they replace `tools` for that
    /// server.
    pub server_tools: HashMap<String, ToolFilter>,
    /// Which tools only read, by configured server name: the operator's
    /// declarations, and whether the server's own `readOnlyHint` counts.
    /// A server not listed has its claims taken.
    pub server_classification: HashMap<String, Classification>,
    /// The classification of servers `server_classification` does not
    /// name (by default: their claims taken).
    pub classification: Classification,
    /// Names, prefixes and the disclosure budget. Its `threads` left at 0,
    /// a large projection uses up to four of the machine's cores.
    pub projection: ProjectionOptions,
    /// Timeout for connecting (handshake and listing) and for each call.
    pub timeout: Duration,
    /// Per-server timeouts by configured name (the config's `timeout_ms`);
    /// they replace `timeout` for that server.
    pub server_timeouts: HashMap<String, Duration>,
    /// The approval gate; runs before anything reaches a server.
    pub policy: Arc<dyn Policy>,
    /// Trust baselines by server identity, for a caller that keeps them
    /// itself. A server with a baseline gets drift detection and quarantine.
    /// Ignored when `store` is set: the store's baselines apply.
    pub baselines: HashMap<ServerIdentity, Fingerprints>,
    /// Where catalogue caches and trust baselines persist: with a store,
    /// [`crate::connect`] trusts on first use and enforces recorded
    /// baselines, and [`crate::rebuild_from_store`] can wake from it.
    pub store: Option<Arc<dyn Store>>,
    /// Sees each diagnostic as it is reported.
    pub on_diagnostic: Option<DiagnosticCallback>,
    /// Told each time a server has finished connecting during
    /// [`crate::connect`] (connected and listed, or failed), for progress
    /// displays.
    pub on_connect: Option<ConnectCallback>,
    /// The reqwest client for remote servers; one with no redirects, a
    /// connect timeout and pooling is built when absent. Its redirect policy
    /// must be `none`: redirects are followed by hand.
    pub http: Option<reqwest::Client>,
    /// How a connection that closed (a stdio child that exited, an SSE
    /// stream that ended, a transport rmcp gave up on) is reopened: see
    /// [`Backoff`] and `crate::supervisor`.
    pub reconnect: Backoff,
    /// How long [`crate::connect`] waits for the servers before it returns
    /// with those ready so far; `None` (the default) waits for every one.
    /// A server still connecting at the deadline keeps connecting in the
    /// background and joins the tool map when it is ready, held to its
    /// baseline exactly as if it had been ready in time (a swap, announced
    /// by [`crate::Toolset::watch_catalogue`]); if it fails, it is retried
    /// like any server that failed to connect. Names never depend on it:
    /// they are decided over the configured servers.
    pub start_deadline: Option<Duration>,
    /// Tool sources the toolset does not connect to (a gateway's native
    /// plugins and apps), each listed with the baseline in force: projected
    /// in the same pass as the servers, so every name is decided once over
    /// all of them (prefix, collision suffixes, taken names) and one
    /// catalogue describes them all. Their entries are listed, never routed:
    /// a call to one through the toolset is refused as an unknown tool, and
    /// the caller serves them itself.
    pub other_sources: Vec<ServerListing>,
}

/// The delays between attempts to reopen a closed connection: `initial`
/// after the close, doubled after each failed attempt up to `max`, each
/// with up to a quarter of random jitter added; back to `initial` once a
/// reopened connection has stayed up for `max` (or ten seconds, if
/// longer). A `max` of zero never reopens: a closed connection stays closed
/// until the toolset is rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub initial: Duration,
    /// The longest delay; zero turns reconnecting off.
    pub max: Duration,
}

impl Backoff {
    /// 250 ms doubling to 30 s.
    pub const DEFAULT: Backoff = Backoff {
        initial: Duration::from_millis(250),
        max: Duration::from_secs(30),
    };

    /// Never reopens a closed connection.
    pub const NEVER: Backoff = Backoff {
        initial: Duration::ZERO,
        max: Duration::ZERO,
    };

    /// `initial` doubling to `max` (`initial` is capped at `max`).
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial: initial.min(max),
            max,
        }
    }

    /// Whether closed connections are reopened at all.
    pub fn enabled(&self) -> bool {
        !self.max.is_zero()
    }

    /// The delay after `delay`: doubled, at most `max`.
    pub(crate) fn next(&self, delay: Duration) -> Duration {
        delay.saturating_mul(2).min(self.max)
    }

    /// How long a reopened connection must stay up before the delays
    /// start again from `initial`.
    pub(crate) fn stable_after(&self) -> Duration {
        self.max.max(Duration::from_secs(10))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::DEFAULT
    }
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            allowed_hosts: AllowedHosts::Any,
            server_allowed_hosts: HashMap::new(),
            auth: None,
            server_auth: HashMap::new(),
            session: None,
            tools: ToolFilter::All,
            server_tools: HashMap::new(),
            server_classification: HashMap::new(),
            classification: Classification::default(),
            projection: ProjectionOptions::default(),
            timeout: DEFAULT_TIMEOUT,
            server_timeouts: HashMap::new(),
            policy: Arc::new(AllowAll),
            baselines: HashMap::new(),
            store: None,
            on_diagnostic: None,
            on_connect: None,
            http: None,
            reconnect: Backoff::DEFAULT,
            start_deadline: None,
            other_sources: Vec::new(),
        }
    }
}

impl ConnectOptions {
    /// Sets the host guard.
    pub fn with_allowed_hosts(mut self, hosts: AllowedHosts) -> Self {
        self.allowed_hosts = hosts;
        self
    }

    /// Sets the credential resolver.
    pub fn with_auth(mut self, auth: impl AuthResolver + 'static) -> Self {
        self.auth = Some(Arc::new(auth));
        self
    }

    /// Sets the credential resolver of one server (by configured name),
    /// the toolset's own: no session needed.
    pub fn with_server_auth(
        mut self,
        server: impl Into<String>,
        auth: impl AuthResolver + 'static,
    ) -> Self {
        self.server_auth.insert(server.into(), Arc::new(auth));
        self
    }

    /// Sets the session.
    pub fn with_session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// Sets the timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets one server's timeout.
    pub fn with_server_timeout(mut self, server: impl Into<String>, timeout: Duration) -> Self {
        self.server_timeouts.insert(server.into(), timeout);
        self
    }

    /// Sets one server's own allow-list, which replaces
    /// [`ConnectOptions::allowed_hosts`] for that server (list its URL's
    /// host too). A listed host may be reached on any address.
    pub fn with_server_allowed_hosts<I, S>(mut self, server: impl Into<String>, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.server_allowed_hosts
            .insert(server.into(), hosts.into_iter().map(Into::into).collect());
        self
    }

    /// Sets how one server's tools are classified read-only or write
    /// (see [`portcullis_catalog::classification`]).
    pub fn with_server_classification(
        mut self,
        server: impl Into<String>,
        classification: Classification,
    ) -> Self {
        self.server_classification
            .insert(server.into(), classification);
        self
    }

    /// The classification of the server configured as `server`.
    pub(crate) fn classification_of(&self, server: &str) -> Classification {
        self.server_classification
            .get(server)
            .cloned()
            .unwrap_or_else(|| self.classification.clone())
    }

    /// Sets one server's visibility filter.
    pub fn with_server_tools(mut self, server: impl Into<String>, filter: ToolFilter) -> Self {
        self.server_tools.insert(server.into(), filter);
        self
    }

    /// Sets the policy.
    pub fn with_policy(mut self, policy: impl Policy + 'static) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    /// Sets the projection options.
    pub fn with_projection(mut self, projection: ProjectionOptions) -> Self {
        self.projection = projection;
        self
    }

    /// Projects `listing` beside the servers: see
    /// [`ConnectOptions::other_sources`].
    pub fn with_other_source(mut self, listing: ServerListing) -> Self {
        self.other_sources.push(listing);
        self
    }

    /// Sets the filter for every server.
    pub fn with_tools(mut self, filter: ToolFilter) -> Self {
        self.tools = filter;
        self
    }

    /// Records a trust baseline for a server.
    pub fn with_baseline(mut self, server: ServerIdentity, baseline: Fingerprints) -> Self {
        self.baselines.insert(server, baseline);
        self
    }

    /// Persists catalogues and baselines in `store`: see
    /// [`ConnectOptions::store`].
    pub fn with_store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Sets the diagnostic callback.
    pub fn on_diagnostic(
        mut self,
        f: impl Fn(&portcullis_catalog::Diagnostic) + Send + Sync + 'static,
    ) -> Self {
        self.on_diagnostic = Some(Arc::new(f));
        self
    }

    /// Sets how closed connections are reopened ([`Backoff::NEVER`]: not
    /// at all).
    pub fn with_reconnect(mut self, backoff: Backoff) -> Self {
        self.reconnect = backoff;
        self
    }

    /// Sets how long [`crate::connect`] waits before returning with the
    /// servers ready so far: see [`ConnectOptions::start_deadline`].
    pub fn with_start_deadline(mut self, deadline: Duration) -> Self {
        self.start_deadline = Some(deadline);
        self
    }

    /// Sets the connect-progress callback: see [`ConnectOptions::on_connect`].
    pub fn on_connect(mut self, f: impl Fn(&ConnectEvent) + Send + Sync + 'static) -> Self {
        self.on_connect = Some(Arc::new(f));
        self
    }
}

/// One server finished connecting: what [`ConnectOptions::on_connect`] is
/// told, once per configured server, in the order they finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectEvent {
    /// The server's configured name.
    pub server: String,
    /// Whether it connected and listed (a failure is also a
    /// `connection-failure` diagnostic).
    pub ok: bool,
    /// How many servers have finished, this one included (1 to `total`).
    pub done: usize,
    /// How many have failed so far, this one included.
    pub failed: usize,
    /// How many servers are being connected.
    pub total: usize,
    /// The configured names of those still connecting, sorted.
    pub waiting: Vec<String>,
}

/// Sees each [`ConnectEvent`].
pub type ConnectCallback = Arc<dyn Fn(&ConnectEvent) + Send + Sync>;

/// Counts servers finishing for one [`crate::connect`] and tells the
/// callback.
pub(crate) struct ConnectTracker {
    callback: Option<ConnectCallback>,
    total: usize,
    state: Mutex<(BTreeSet<String>, usize, usize)>,
}

impl ConnectTracker {
    /// A tracker for the servers named `names` (duplicates counted once in
    /// `waiting` but each in `total`).
    pub(crate) fn new(callback: Option<ConnectCallback>, names: &[String]) -> Arc<Self> {
        Arc::new(ConnectTracker {
            callback,
            total: names.len(),
            state: Mutex::new((names.iter().cloned().collect(), 0, 0)),
        })
    }

    /// Runs `attempt` (one server's connection; `Ok` when it connected)
    /// and reports its end.
    pub(crate) async fn track<T, E>(
        self: Arc<Self>,
        server: String,
        attempt: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let outcome = attempt.await;
        self.finished(server, outcome.is_ok());
        outcome
    }

    fn finished(&self, server: String, ok: bool) {
        let Some(callback) = &self.callback else {
            return;
        };
        // The callback runs under the lock, so events arrive in `done`
        // order even when two servers finish at once.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (waiting, done, failed) = &mut *state;
        waiting.remove(&server);
        *done += 1;
        if !ok {
            *failed += 1;
        }
        callback(&ConnectEvent {
            server,
            ok,
            done: *done,
            failed: *failed,
            total: self.total,
            waiting: waiting.iter().cloned().collect(),
        });
    }
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never prints resolvers' internals or tokens.
        f.debug_struct("ConnectOptions")
            .field("allowed_hosts", &self.allowed_hosts)
            .field("server_allowed_hosts", &self.server_allowed_hosts)
            .field("auth", &self.auth.as_ref().map(|_| ".."))
            .field("server_auth", &self.server_auth.keys().collect::<Vec<_>>())
            .field("session", &self.session)
            .field("tools", &self.tools)
            .field("timeout", &self.timeout)
            .field("store", &self.store.as_ref().map(|s| s.backend()))
            .field("on_connect", &self.on_connect.as_ref().map(|_| ".."))
            .field("reconnect", &self.reconnect)
            .field("start_deadline", &self.start_deadline)
            .finish_non_exhaustive()
    }
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
