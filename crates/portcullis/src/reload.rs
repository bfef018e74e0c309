//! The served tool set as something that can change under a running
//! `serve`: the config re-read on SIGHUP or when the file changes, and every
//! call observed on its way through.
//!
//! [`Live`] holds the current [`Generation`] (a config and the gateway
//! built from it). [`LiveTools`] is the `ServerHandler` the surfaces serve:
//! each request takes the generation current when it arrives and keeps it to
//! the end, so a reload never changes the ground under an in-flight call,
//! and an old generation's connections are closed only once its last call
//! has answered.
//!
//! What a reload does depends on what changed:
//!
//! | change | effect |
//! | --- | --- |
//! | nothing (the file was only touched) | nothing |
//! | the gate (`allow_write`, `allow_tools`, `identity`, `max_output_length`, `approval_timeout_ms`) | the tool server is rebuilt on the same connections: every upstream keeps its connection and its child process |
//! | only upstreams (added, removed, changed, or their `tools` filters), with no plugins, tool plugins or apps configured | the connector reconfigures in place ([`Gateway::reconfigured`]): an unchanged upstream keeps its connection and child process, a new or changed one is connected and trusted through the same store, a removed one is closed |
//! | the other sources (plugins, apps, `prefix`, `approval`, disclosure, store, an upstream's `timeout_ms`) | a new gateway is connected beside the old one and swapped in when ready; the old one closes once its in-flight calls finish; every upstream reconnects |
//! | the HTTP surface (`listen`, `allowed_hosts`, `allowed_origins`, `token`, `oauth`, `max_connections`, `header_read_timeout_ms`, `idle_timeout_ms`, `max_sessions`, `session_idle_timeout_ms`) | logged as needing a restart; the rest of the reload applies |
//! | an invalid file | logged with the file, line and field; the old config keeps serving |
//! | an upstream's listing (reconciled by the connector, not a config change) | the tool server is rebuilt on the same connections ([`follow_catalogue`]) |
//! | `audit_retention_days`, `effects_retention_days` | applied by the next retention round, which a change starts at once (`crate::retention`) |
//!
//! The downstream sessions outlive every generation: a reload's proxy takes
//! over the sessions of the one in force (`Proxy::take_over`, when the new
//! generation is swapped in), so the upstreams' notices keep reaching them,
//! a newly connected upstream's included.
//!
//! Clients hear about a new tool set: 2026-07-28 clients through
//! `subscriptions/listen` (`notifications/tools/list_changed`), and
//! initialize-era clients with a live session (stdio) through the same
//! notification on their session. Stateless HTTP clients of the 2025 era
//! have no channel to be told on and see the change on their next
//! `tools/list`.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use portcullis_store::audit::ArgumentShape;
use portcullis_upstream::McpServerConfig;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CancelledNotificationParam,
    CompleteRequestParams, CompleteResult, CustomNotification, CustomRequest, CustomResult,
    DiscoverResult, GetPromptRequestParams, GetPromptResponse, GetSkillRequestParams,
    GetSkillResult, GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListSkillsResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion,
    ReadResourceDirectoryRequestParams, ReadResourceDirectoryResult, ReadResourceRequestParams,
    ReadResourceResponse, ServerConfig, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams, UpdateTaskParams,
};
// Logging is deprecated by SEP-2577, still served for older clients.
#[allow(deprecated)]
use rmcp::model::SetLevelRequestParams;
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::watch;

use crate::audit::{Decision, Recorder, Verdict};
use crate::config::{self, App, Config, StoreChoice};
use crate::gateway::{Gateway, server_configs};
use crate::metrics::{Outcome, Snapshot, UNKNOWN_TOOL};

/// How often the config file is looked at for changes.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Initialize-era sessions kept for notifications, at most; the oldest are
/// forgotten first (a closed one is forgotten as soon as it is seen).
const MAX_PEERS: usize = 1024;

/// What, in a config, needs the sources reconnected when it changes.
#[derive(Debug, PartialEq)]
struct SourcesKey {
    /// The connector's view of every upstream, secrets included (compared,
    /// never printed).
    servers: Vec<McpServerConfig>,
    store: StoreChoice,
    apps: BTreeMap<String, App>,
    /// Each upstream's `timeout_ms` and `tools` filter.
    per_upstream: String,
    /// Everything else that shapes the catalogue, none of it secret.
    rest: String,
}

impl SourcesKey {
    fn of(config: &Config) -> anyhow::Result<SourcesKey> {
        let servers = server_configs(config)?;
        let per_upstream: Vec<_> = config
            .upstreams
            .values()
            .map(|u| {
                (
                    &u.name,
                    u.timeout_ms,
                    format!("{:?}", u.tools),
                    &u.allowed_hosts,
                    &u.classification,
                )
            })
            .collect();
        let rest = format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
            config.disclosure,
            config.gateway.prefix,
            config.gateway.approval,
            config.gateway.data_dir,
            config.plugins,
            config.tool_plugins,
        );
        Ok(SourcesKey {
            servers,
            store: config.gateway.store.clone(),
            apps: config.apps.clone(),
            per_upstream: format!("{per_upstream:?}"),
            rest,
        })
    }
}

/// Whether a reload from `old` to `new` changes only the upstreams, so the
/// connector can keep the connections of the unchanged ones
/// ([`Gateway::reconfigured`]): the store and everything else that shapes
/// the catalogue are the same, no plugin, tool plugin or app is configured
/// (their projection depends on the upstreams'), and no upstream present in
/// both changed its `timeout_ms` (a kept connection keeps its timeout).
fn only_upstreams_changed(
    old: &Config,
    new: &Config,
    old_key: &SourcesKey,
    new_key: &SourcesKey,
) -> bool {
    let no_sources =
        |c: &Config| c.plugins.is_empty() && c.tool_plugins.is_empty() && c.apps.is_empty();
    let same_timeouts = new.upstreams.iter().all(|(name, upstream)| {
        old.upstreams
            .get(name)
            .is_none_or(|before| before.timeout_ms == upstream.timeout_ms)
    });
    // A kept connection keeps its host guard too.
    let same_hosts = new.upstreams.iter().all(|(name, upstream)| {
        old.upstreams
            .get(name)
            .is_none_or(|before| before.allowed_hosts == upstream.allowed_hosts)
    });
    no_sources(old)
        && no_sources(new)
        && same_timeouts
        && same_hosts
        && old_key.store == new_key.store
        && old_key.rest == new_key.rest
}

/// The parts of `[gateway]` the HTTP surface was started with: changing
/// them needs a restart.
fn surface_key(config: &Config) -> (String, Vec<String>, Vec<String>, String) {
    let g = &config.gateway;
    (
        g.listen.to_string(),
        g.allowed_hosts.clone(),
        g.allowed_origins.clone(),
        // The token is compared by value where this is used.
        format!(
            "{:?}",
            (
                g.max_connections,
                g.header_read_timeout,
                g.idle_timeout,
                g.max_sessions,
                g.session_idle_timeout,
            )
        ),
    )
}

/// One config and the gateway built from it.
pub struct Generation {
    /// The config it was built from.
    pub config: Config,
    /// The connected gateway.
    pub gateway: Gateway,
    /// Each served name's source (upstream, plugin or app), for labels.
    sources: HashMap<String, Arc<str>>,
    /// Set when a newer generation replaced this one: its connections are
    /// closed when the last request holding it lets go.
    retired: AtomicBool,
}

impl Generation {
    /// Wraps a started gateway.
    pub fn new(config: Config, gateway: Gateway) -> Self {
        let sources = gateway
            .rows()
            .into_iter()
            .map(|row| (row.name, Arc::from(row.source.as_str())))
            .collect();
        Generation {
            config,
            gateway,
            sources,
            retired: AtomicBool::new(false),
        }
    }

    /// What `/metrics` and `/healthz` show about this generation: tool
    /// counts by status, and each configured upstream up or down (down: it
    /// failed to connect, its connection has since ended, or a remote one
    /// stopped answering; see [`crate::health`]).
    pub fn snapshot(&self) -> Snapshot {
        let rows = self.gateway.rows();
        let count = |status: &str| rows.iter().filter(|r| r.status == status).count();
        let catalogue = self.gateway.toolset.catalogue();
        let upstreams = self
            .config
            .upstreams
            .keys()
            .map(|name| {
                let connected = catalogue
                    .servers()
                    .iter()
                    .find(|s| &s.identity.name == name)
                    .is_some_and(|s| crate::health::upstream_up(&self.gateway.toolset, &s.name));
                (name.clone(), connected)
            })
            .collect();
        Snapshot {
            available: count("available"),
            quarantined: count("quarantined"),
            withheld: count("withheld"),
            upstreams,
        }
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if self.retired.load(Ordering::Acquire) {
            // The last in-flight call on the old generation has answered:
            // close its connections politely (dropping them would kill the
            // children too, without telling remote servers).
            let toolset = self.gateway.toolset.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { toolset.close().await });
            }
        }
    }
}

/// The running gateway's state, shared by every request and the reload
/// task.
pub struct Live {
    current: RwLock<Arc<Generation>>,
    recorder: Recorder,
    /// Bumped whenever the served tool list changed; `subscriptions/listen`
    /// streams wait on it.
    changed: watch::Sender<u64>,
    /// Bumped whenever a new generation is swapped in.
    swaps: watch::Sender<u64>,
    /// Initialize-era sessions to tell about a new tool set.
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// One reload at a time (a SIGHUP during a file-change reload waits).
    reloading: tokio::sync::Mutex<()>,
}

impl Live {
    /// The state of a gateway serving `generation`.
    pub fn new(generation: Generation, recorder: Recorder) -> Arc<Live> {
        Arc::new(Live {
            current: RwLock::new(Arc::new(generation)),
            recorder,
            changed: watch::Sender::new(0),
            swaps: watch::Sender::new(0),
            peers: Mutex::new(Vec::new()),
            reloading: tokio::sync::Mutex::new(()),
        })
    }

    /// The generation serving new requests.
    pub fn current(&self) -> Arc<Generation> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The recorder every call goes through.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// Changes whenever a new generation is swapped in (a reload, or a
    /// catalogue change rebuilding the tool server).
    pub fn watch_swaps(&self) -> watch::Receiver<u64> {
        self.swaps.subscribe()
    }

    /// Re-reads the config at `path` and applies it. Returns whether a new
    /// tool set was swapped in. An invalid config, or one whose sources fail
    /// to start, is logged and changes nothing.
    pub async fn reload(&self, path: &Path) -> bool {
        let _one_at_a_time = self.reloading.lock().await;
        let config = match config::load(path) {
            Ok(config) => config,
            Err(error) => {
                tracing::error!(%error, "config reload rejected; still serving the previous config");
                self.recorder.metrics().record_reload(false);
                return false;
            }
        };
        crate::redact::remember(&config.redactions);
        let old = self.current();
        let (old_key, new_key) = match (SourcesKey::of(&old.config), SourcesKey::of(&config)) {
            (Ok(old_key), Ok(new_key)) => (old_key, new_key),
            (_, Err(error)) | (Err(error), _) => {
                tracing::error!(error = %format!("{error:#}"), "config reload rejected; still serving the previous config");
                self.recorder.metrics().record_reload(false);
                return false;
            }
        };
        if surface_key(&old.config) != surface_key(&config)
            || old.config.gateway.token != config.gateway.token
            || old.config.gateway.oauth != config.gateway.oauth
        {
            tracing::warn!(
                "listen, allowed_hosts, allowed_origins, token, oauth and the connection and session limits apply at startup only; restart the gateway to change them"
            );
        }
        let changed = old_key != new_key;
        // Upstreams alone changed: the connector keeps the unchanged
        // connections, so nothing is retired.
        let in_place = changed && only_upstreams_changed(&old.config, &config, &old_key, &new_key);
        let reconnect = changed && !in_place;
        let built = if in_place {
            tracing::info!("config reload: the upstreams changed; keeping the unchanged ones");
            old.gateway.reconfigured(&config).await
        } else if reconnect {
            tracing::info!("config reload: the sources changed; connecting them");
            Gateway::start_after(&config, Some(&old.gateway.proxy)).await
        } else {
            old.gateway.regated(&config)
        };
        let gateway = match built {
            Ok(gateway) => gateway,
            Err(error) => {
                tracing::error!(error = %format!("{error:#}"), "config reload failed; still serving the previous config");
                self.recorder.metrics().record_reload(false);
                return false;
            }
        };
        let generation = Generation::new(config, gateway);
        let before: Vec<&str> = old.gateway.tools.tool_names();
        let after: Vec<&str> = generation.gateway.tools.tool_names();
        let tools_changed = before != after
            || old.gateway.tools.listed_tools() != generation.gateway.tools.listed_tools();
        let snapshot = generation.snapshot();
        if reconnect {
            old.retired.store(true, Ordering::Release);
        }
        // The sessions hear the new generation's upstreams (a reload's new
        // connections included) from now on, and the old proxy falls
        // silent.
        generation.gateway.proxy.take_over(&old.gateway.proxy).await;
        drop(old);
        self.swap(generation, tools_changed);
        self.recorder.metrics().record_reload(true);
        // Logged once the new generation serves: the line is an event an
        // operator (or a test) can act on.
        tracing::info!(
            exposed = snapshot.available,
            quarantined = snapshot.quarantined,
            withheld = snapshot.withheld,
            reconnected = reconnect,
            "config reloaded"
        );
        true
    }

    /// Makes `generation` the one serving new requests.
    fn swap(&self, generation: Generation, tools_changed: bool) {
        // A gateway built on another store (the config's `store` changed)
        // takes the audit trail with it.
        self.recorder.follow_store(&generation.gateway.store);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(generation);
        self.swaps.send_modify(|n| *n = n.wrapping_add(1));
        if tools_changed {
            self.announce();
        }
    }

    /// The upstreams' catalogue changed under the current generation (a
    /// server's listing changed and was reconciled): the tool server is
    /// rebuilt on the same connections and clients are told.
    async fn refresh(&self) {
        let _one_at_a_time = self.reloading.lock().await;
        let old = self.current();
        let generation = match old.gateway.refollowed(&old.config).await {
            Ok(gateway) => Generation::new(old.config.clone(), gateway),
            Err(error) => {
                tracing::error!(error = %format!("{error:#}"), "the catalogue changed but the tool server cannot be rebuilt; serving the previous tools");
                return;
            }
        };
        let tools_changed =
            old.gateway.tools.listed_tools() != generation.gateway.tools.listed_tools();
        // A server that joined late is heard from now on.
        generation.gateway.proxy.take_over(&old.gateway.proxy).await;
        drop(old);
        tracing::info!(tools_changed, "upstream catalogue changed; tools rebuilt");
        self.swap(generation, tools_changed);
    }

    /// Tells every client that can hear it that the tool list changed.
    fn announce(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        let peers: Vec<Peer<RoleServer>> = {
            let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
            peers.retain(|p| !p.is_transport_closed());
            peers.clone()
        };
        for peer in peers {
            tokio::spawn(async move {
                let _ = peer.notify_tool_list_changed().await;
            });
        }
    }

    fn remember(&self, peer: Peer<RoleServer>) {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.retain(|p| !p.is_transport_closed());
        if peers.len() >= MAX_PEERS {
            peers.remove(0);
        }
        peers.push(peer);
    }

    /// Closes the current generation's connections (stdio children end).
    pub async fn close(&self) {
        self.current().gateway.close().await;
    }
}

/// Watches `path`: a SIGHUP, or a change of the file's contents (looked at
/// every [`POLL_INTERVAL`]), reloads it. Runs until the task is dropped.
pub async fn watch(live: Arc<Live>, path: PathBuf) {
    let mut last = read_config_bytes(&path);
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        #[cfg(unix)]
        let signalled = async {
            match hangup.as_mut() {
                Some(signal) => signal.recv().await.is_some(),
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let signalled = std::future::pending::<bool>();
        tokio::select! {
            true = signalled => {
                tracing::info!(path = %path.display(), "SIGHUP: re-reading the config");
                last = read_config_bytes(&path);
                live.reload(&path).await;
            }
            _ = tick.tick() => {
                // Contents, not the mtime: two saves within the mtime's
                // granularity are still seen, and a touch is not a reload.
                let now = read_config_bytes(&path);
                if now.is_some() && now != last {
                    last = now;
                    tracing::info!(path = %path.display(), "config file changed: re-reading it");
                    live.reload(&path).await;
                }
            }
        }
    }
}

/// Keeps the served tools in step with the upstreams' catalogue: whenever
/// the current generation's catalogue changes (an upstream's listing changed
/// and was reconciled), its tool server is rebuilt. Runs until dropped.
pub async fn follow_catalogue(live: Arc<Live>) {
    loop {
        let mut swaps = live.swaps.subscribe();
        swaps.mark_unchanged();
        // Only the receiver is kept: holding the generation here would keep
        // a replaced one (and its connections) alive.
        let mut catalogue = live.current().gateway.toolset.watch_catalogue();
        catalogue.mark_unchanged();
        tokio::select! {
            changed = catalogue.changed() => {
                if changed.is_ok() {
                    live.refresh().await;
                } else if swaps.changed().await.is_err() {
                    return;
                }
            }
            swapped = swaps.changed() => {
                if swapped.is_err() {
                    return;
                }
            }
        }
    }
}

/// The `ServerHandler` the surfaces serve: every request goes to the
/// current generation's tool server; calls are observed (log line,
/// metrics, audit trail); `tools/list_changed` reaches clients after a
/// reload.
#[derive(Clone)]
pub struct LiveTools {
    live: Arc<Live>,
}

impl LiveTools {
    /// The handler over `live`.
    pub fn new(live: Arc<Live>) -> Self {
        LiveTools { live }
    }

    async fn observed_call(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let time = SystemTime::now();
        let started = Instant::now();
        let generation = self.live.current();
        let recorder = self.live.recorder();
        // The shape is taken here, before the arguments move on, so the
        // trail never holds a value.
        let shape = recorder.keeps_trail().then(|| {
            let args = Value::Object(request.arguments.take().unwrap_or_default());
            let shape = ArgumentShape::of(&args);
            if let Value::Object(map) = args {
                request.arguments = Some(map);
            }
            shape
        });
        let name = request.name.to_string();
        // Who called, as the access token said (a typed value the guard
        // put in the request, never a header read again here).
        let caller =
            portcullis_server::oauth::caller_of(&context).map(|caller| caller.subject.clone());
        let (answer, verdict) =
            crate::audit::with_verdict(generation.gateway.tools.call_tool(request, context)).await;
        // A question put to the client (the 2026 approval round trip) does
        // not end the call: the retry carrying the answer is recorded.
        if matches!(answer, Ok(CallToolResponse::InputRequired(_))) {
            return answer;
        }
        let (upstream, tool) = match generation.sources.get(&name) {
            Some(source) => (&**source, name.as_str()),
            None => ("", UNKNOWN_TOOL),
        };
        let verdict = match (&answer, verdict) {
            // Unknown, or withheld by the gate: never registered.
            (Err(_), _) => Verdict {
                decision: Decision::Denied,
                outcome: Outcome::Refused,
                code: None,
            },
            (Ok(_), Some(verdict)) => verdict,
            (Ok(response), None) => edge_verdict(response),
        };
        recorder.record(
            time,
            caller.as_deref(),
            upstream,
            tool,
            verdict,
            started.elapsed(),
            shape,
        );
        answer
    }
}

/// The verdict on an answer no handler noted: the edge refused the call
/// itself (validation, approval, the identity backstop).
fn edge_verdict(response: &CallToolResponse) -> Verdict {
    match response {
        CallToolResponse::Complete(result) => crate::audit::classify_served(result),
        _ => Verdict {
            decision: Decision::Allowed,
            outcome: Outcome::Ok,
            code: None,
        },
    }
}

#[allow(deprecated)]
impl ServerHandler for LiveTools {
    fn get_info(&self) -> ServerConfig {
        let mut info = self.live.current().gateway.tools.get_info();
        // The tool set can change on reload, and clients are told.
        if let Some(tools) = info.capabilities.tools.as_mut() {
            tools.list_changed = Some(true);
        }
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.live
            .current()
            .gateway
            .tools
            .supported_protocol_versions()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.observed_call(request, context).await
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let generation = self.live.current();
        generation.gateway.tools.list_tools(request, context).await
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.live.current().gateway.tools.get_tool(name)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.live
            .current()
            .gateway
            .tools
            .accepted_subscription_filter(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changed = self.live.changed.subscribe();
        changed.mark_unchanged();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                seen = changed.changed() => {
                    if seen.is_err() || context.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let generation = self.live.current();
        generation.gateway.tools.complete(request, context).await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let generation = self.live.current();
        generation.gateway.tools.set_level(request, context).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let generation = self.live.current();
        generation.gateway.tools.get_prompt(request, context).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let generation = self.live.current();
        generation
            .gateway
            .tools
            .list_prompts(request, context)
            .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let generation = self.live.current();
        generation
            .gateway
            .tools
            .list_resources(request, context)
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let generation = self.live.current();
        generation
            .gateway
            .tools
            .list_resource_templates(request, context)
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let generation = self.live.current();
        generation
            .gateway
            .tools
            .read_resource(request, context)
            .await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let generation = self.live.current();
        generation.gateway.tools.subscribe(request, context).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let generation = self.live.current();
        generation.gateway.tools.unsubscribe(request, context).await
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let generation = self.live.current();
        generation
            .gateway
            .tools
            .on_custom_request(request, context)
            .await
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        let generation = self.live.current();
        generation
            .gateway
            .tools
            .on_cancelled(notification, context)
            .await;
    }

    async fn on_progress(
        &self,
        notification: ProgressNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        let generation = self.live.current();
        generation
            .gateway
            .tools
            .on_progress(notification, context)
            .await;
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A session that stays open (stdio, legacy HTTP sessions) can be told
        // about a new tool set; a stateless request's peer closes with it
        // and is forgotten.
        self.live.remember(context.peer.clone());
        let generation = self.live.current();
        generation.gateway.tools.on_initialized(context).await;
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        let generation = self.live.current();
        generation
            .gateway
            .tools
            .on_roots_list_changed(context)
            .await;
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleServer>,
    ) {
        let generation = self.live.current();
        generation
            .gateway
            .tools
            .on_custom_notification(notification, context)
            .await;
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let generation = self.live.current();
        generation.gateway.tools.get_task(request, context).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let generation = self.live.current();
        generation.gateway.tools.update_task(request, context).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let generation = self.live.current();
        generation.gateway.tools.cancel_task(request, context).await
    }

    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, ErrorData> {
        let generation = self.live.current();
        generation.gateway.tools.list_skills(request, context).await
    }

    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, ErrorData> {
        let generation = self.live.current();
        generation.gateway.tools.get_skill(request, context).await
    }

    async fn read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceDirectoryResult, ErrorData> {
        let generation = self.live.current();
        generation
            .gateway
            .tools
            .read_resource_directory(request, context)
            .await
    }
}

/// The config file's bytes, if it is a regular file that can be read (a
/// FIFO swapped in would otherwise block this watcher, and the runtime
/// thread under it, forever).
fn read_config_bytes(path: &std::path::Path) -> Option<Vec<u8>> {
    portcullis_sources::files::read_regular(path, crate::config::MAX_CONFIG_BYTES).ok()
}
