//! Faithful proxying beyond tools: the gateway's
//! [`PassthroughProvider`] over the upstreams' resources, resource
//! templates, prompts, completions, logging and resource subscriptions.
//!
//! Names and URIs follow the tools' prefix rule (the catalogue's
//! [`portcullis_catalog::passthrough`]): with one source under `auto` (or
//! `never`) prompt names and URIs pass unchanged; otherwise prompts are
//! `server__prompt` and URIs `portcullis://server/<uri>`, and every request
//! is routed back to its server under its own names. URIs inside answers
//! (`resources/read` contents, resources embedded in prompt messages,
//! `resources/updated`) are rewritten the same way. The answers are
//! sealed after that, at the tool server's exit (budget, cleaning, URI
//! rule; a read framed), not here.
//!
//! Pins: prompts, resources and templates are compared with the pins of the
//! server's baseline in force (kept beside its tool fingerprints in the
//! store, under `prompt:` / `resource:` / `template:` keys and the
//! `pins:v1` marker, see [`portcullis_catalog::pins`]); what drifted or was
//! added since is withheld and a request for it refused. A first trust
//! records the pins (the upstream's proposal lists these definitions); a
//! baseline without the marker (recorded before pinning) pins nothing here:
//! every definition passes until a re-trust records pins.
//!
//! Lists are fetched live on every list request (so a server whose list
//! moves is followed), then pinned and projected. Notifications flow the
//! other way: each upstream's log messages go to every downstream session
//! (each at the level it asked for; the upstreams are set to the most
//! verbose level any session asked for), handed over in the upstream's
//! transport before it reads on, so a log message reaches the sessions
//! before a result the server sent after it, `resources/updated` to the
//! sessions subscribed to that URI, and list changes to every session and
//! every 2026-07-28 `subscriptions/listen` that asked for them.
//!
//! A config reload builds a new proxy over the new generation's upstreams
//! ([`Proxy::successor`]) that shares the sessions with the one in force;
//! [`Proxy::take_over`] then routes every upstream's notices to it, silences
//! the old one, and subscribes the connections the reload opened to what
//! the sessions subscribed to (and sets their log level), so an upstream a
//! reload added is heard like one present at start. A server that joins
//! the catalogue later on its own (it failed to connect and was retried)
//! is taken over the same way when the catalogue swaps ([`Proxy::follow`]).
//!
//! Pins are read when a proxy is built (at start, on every reload, and
//! when a server joins or leaves the connected set). A baseline the
//! connector records later for a server already connected (a woken
//! toolset's reconcile; `serve` does not wake) applies from the next
//! reload or restart. Known gaps: a 2026-07-28 `subscriptions/listen` open across a
//! reload that reconnects every upstream keeps its events but not its
//! upstream subscriptions (sessions' `resources/subscribe`s are renewed).

// Logging and resources/subscribe are deprecated by SEP-2577 but are what
// every 2025-era client uses; they are proxied.
#![allow(deprecated)]

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use portcullis_catalog::definition::{Prompt, Resource, ResourceTemplate};
use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::naming::Prefix;
use portcullis_catalog::passthrough::{
    Passthrough as Projection, PromptRoute, ServerDefinitions, UriRoute,
};
use portcullis_catalog::pins::split_baseline;
use portcullis_server::{PassthroughCapabilities, PassthroughProvider};
use portcullis_upstream::{LogSink, Notice, Passthrough, PassthroughError, ServerNotice, Toolset};
use rmcp::model::{
    CompleteRequestParams, CompleteResult, ErrorCode, GetPromptRequestParams, GetPromptResponse,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, LoggingLevel,
    LoggingMessageNotificationParam, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, Reference, ResourceUpdatedNotificationParam, ServerNotification,
    SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, Peer, RoleServer};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// One downstream session that can be told things later.
struct Session {
    peer: Peer<RoleServer>,
    /// The level it asked for (`logging/setLevel`); `None`: everything.
    level: Option<LoggingLevel>,
    /// The URIs (as it sees them) it subscribed to.
    subscriptions: BTreeSet<String>,
}

/// What a 2026-07-28 listen may be told.
#[derive(Debug, Clone)]
enum Event {
    PromptsChanged,
    ResourcesChanged,
    ResourceUpdated(String),
}

/// A kind of definition the servers list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Prompts,
    Resources,
    Templates,
}

impl Kind {
    /// What one entry is called in an error.
    fn noun(self) -> &'static str {
        match self {
            Kind::Prompts => "prompt",
            Kind::Resources => "resource",
            Kind::Templates => "resource template",
        }
    }

    /// The projection's entries of this kind as JSON (the catalogue's
    /// models and rmcp's share the MCP shape); `None` if one does not
    /// serialise.
    fn exposed(self, projection: &Projection) -> Option<Vec<Value>> {
        fn json<'a, T: Serialize + 'a>(entries: impl Iterator<Item = &'a T>) -> Option<Vec<Value>> {
            entries.map(|e| serde_json::to_value(e).ok()).collect()
        }
        match self {
            Kind::Prompts => json(projection.prompts().iter().map(|p| &p.prompt)),
            Kind::Resources => json(projection.resources().iter().map(|r| &r.resource)),
            Kind::Templates => json(projection.templates().iter().map(|t| &t.template)),
        }
    }
}

/// How long one log message may take to reach one session before the
/// upstream's connection moves on without it.
const LOG_HANDOFF: Duration = Duration::from_secs(1);

/// The gateway's end of the upstreams' log messages. Weak: the connections
/// hold it, and must not keep the proxy alive.
struct Logs(Weak<Inner>);

impl LogSink for Logs {
    fn log(&self, server: &str, message: LoggingMessageNotificationParam) -> BoxFuture<'_, ()> {
        let server = server.to_owned();
        Box::pin(async move {
            if let Some(inner) = self.0.upgrade() {
                Proxy { inner }.log(&server, message).await;
            }
        })
    }
}

/// The gateway's passthrough: cheap to clone.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    upstream: Passthrough,
    prefix: Prefix,
    source_count: usize,
    capabilities: PassthroughCapabilities,
    /// The pins part of each server's baseline (`None`: not pinned).
    pins: HashMap<String, Option<Fingerprints>>,
    /// The last definitions listed per server.
    definitions: Mutex<HashMap<String, ServerDefinitions>>,
    projection: RwLock<Arc<Projection>>,
    /// The downstream side, shared with the proxies that succeed this one.
    downstream: Arc<Downstream>,
    /// Upstream subscriptions by (server, its URI): how many downstream
    /// subscribers share each. Shared with a successor over the same
    /// connections (an in-place reload), whose kept servers still hold
    /// them.
    subscribed: Arc<tokio::sync::Mutex<HashMap<(String, String), usize>>>,
    /// The servers whose connections a successor took over as they were
    /// (`None`: every connection is new); what [`Proxy::take_over`] must
    /// not subscribe or set a level on again.
    kept: Option<Vec<String>>,
    /// The servers whose notices this proxy routes, set when it starts
    /// routing (at start, or when it took over from its predecessor);
    /// `None` before.
    routed: Mutex<Option<Vec<String>>>,
    /// Cancelled when a successor took over: this proxy's notice relay
    /// stops, so no session hears a notice twice.
    retired: CancellationToken,
}

/// What outlives a generation of the gateway: the downstream sessions (a
/// stdio client or an HTTP session stays connected across a config
/// reload), what each asked for, and the 2026-07-28 listens' events. Every
/// proxy built by a reload shares its predecessor's, so the upstreams a
/// reload connects reach the sessions that were there before it.
#[derive(Default)]
struct Downstream {
    sessions: Mutex<Vec<Session>>,
    events: Events,
}

/// The broadcast of [`Event`]s to 2026-07-28 listens.
struct Events(broadcast::Sender<Event>);

impl Default for Events {
    fn default() -> Self {
        Events(broadcast::channel(64).0)
    }
}

/// Reads a wire type through JSON (the catalogue's models and rmcp's share
/// the MCP shape).
fn convert<T: Serialize, U: DeserializeOwned>(value: &T) -> Option<U> {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
}

fn level_rank(level: LoggingLevel) -> u8 {
    level as u8
}

fn same_session(a: &Peer<RoleServer>, b: &Peer<RoleServer>) -> bool {
    match (a.peer_info(), b.peer_info()) {
        (Some(a), Some(b)) => Arc::ptr_eq(&a, &b),
        _ => false,
    }
}

impl Proxy {
    /// Lists every server's prompts, resources and templates, pins and
    /// projects them, and starts relaying the servers' notifications.
    /// `prefix` is the mode the tools were projected under.
    pub async fn start(toolset: &Toolset, prefix: Prefix) -> Proxy {
        let proxy = Proxy::build(toolset, prefix, Arc::default(), Arc::default(), None).await;
        proxy.route();
        proxy
    }

    /// The proxy over `toolset` after a config reload: it lists and
    /// projects as [`Proxy::start`] does, but serves this proxy's sessions
    /// (and their levels and subscriptions) and relays nothing until
    /// [`Proxy::take_over`] makes it the one in force. `kept` names the
    /// servers whose connections `toolset` kept as they were (an in-place
    /// reconfigure of the same toolset); `None` when every connection is
    /// new.
    pub async fn successor(
        &self,
        toolset: &Toolset,
        prefix: Prefix,
        kept: Option<&[String]>,
    ) -> Proxy {
        let subscribed = match kept {
            // The same connections: what the kept servers were subscribed
            // to still stands, and is still counted here.
            Some(_) => self.inner.subscribed.clone(),
            None => Arc::default(),
        };
        Proxy::build(
            toolset,
            prefix,
            self.inner.downstream.clone(),
            subscribed,
            kept.map(<[String]>::to_vec),
        )
        .await
    }

    /// Makes this proxy (built by [`Proxy::successor`]) the one in force
    /// instead of `predecessor`: the upstreams' notices are routed here,
    /// the predecessor stops relaying, and the connections that are new
    /// are subscribed to what the sessions subscribed to and set to the
    /// level they asked for, so a server a reload connected is heard like
    /// one present at start. Nothing when it is the same proxy or this one
    /// already routes.
    pub async fn take_over(&self, predecessor: &Proxy) {
        if Arc::ptr_eq(&self.inner, &predecessor.inner) || self.routed().is_some() {
            return;
        }
        if let Some(kept) = &self.inner.kept {
            // Entries of servers that were closed or reconnected name
            // subscriptions that ended with their connections.
            self.inner
                .subscribed
                .lock()
                .await
                .retain(|(server, _), _| kept.contains(server));
        }
        self.route();
        predecessor.inner.retired.cancel();
        let kept = self.inner.kept.as_deref().unwrap_or_default();
        let fresh = |server: &str| !kept.iter().any(|k| k == server);
        // One hold per session and URI, as `subscribe` counts them.
        let wanted: Vec<String> = {
            let sessions = self
                .inner
                .downstream
                .sessions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            sessions
                .iter()
                .filter(|s| !s.peer.is_transport_closed())
                .flat_map(|s| s.subscriptions.iter().cloned())
                .collect()
        };
        for uri in wanted {
            let Ok((server, upstream_uri)) = self.route_uri(&uri) else {
                continue;
            };
            if fresh(&server)
                && let Err(error) = self.hold(&server, &upstream_uri).await
            {
                tracing::warn!(server, error = %error.message, "could not subscribe a reconnected upstream for a session");
            }
        }
        if let Some(level) = self.wanted_level(None) {
            self.forward_level(level, |server| fresh(server)).await;
        }
    }

    async fn build(
        toolset: &Toolset,
        prefix: Prefix,
        downstream: Arc<Downstream>,
        subscribed: Arc<tokio::sync::Mutex<HashMap<(String, String), usize>>>,
        kept: Option<Vec<String>>,
    ) -> Proxy {
        let upstream = toolset.passthrough();
        let catalogue = toolset.catalogue();
        let source_count = catalogue.servers().len();
        let mut pins = HashMap::new();
        let mut capabilities = PassthroughCapabilities::default();
        for summary in catalogue.servers() {
            let server_pins = toolset
                .baseline(&summary.name)
                .and_then(|baseline| split_baseline(&baseline).1);
            pins.insert(summary.name.clone(), server_pins);
            let Some(caps) = upstream.capabilities(&summary.name) else {
                continue;
            };
            if let Some(resources) = &caps.resources {
                capabilities.resources = true;
                capabilities.subscribe |= resources.subscribe.unwrap_or(false);
                capabilities.resources_list_changed |= resources.list_changed.unwrap_or(false);
            }
            if let Some(prompts) = &caps.prompts {
                capabilities.prompts = true;
                capabilities.prompts_list_changed |= prompts.list_changed.unwrap_or(false);
            }
            capabilities.completions |= caps.completions.is_some();
            capabilities.logging |= caps.logging.is_some();
        }
        let proxy = Proxy {
            inner: Arc::new(Inner {
                upstream,
                prefix,
                source_count,
                capabilities,
                pins,
                definitions: Mutex::default(),
                projection: RwLock::default(),
                downstream,
                subscribed,
                kept,
                routed: Mutex::default(),
                retired: CancellationToken::new(),
            }),
        };
        proxy
            .refresh(&[Kind::Prompts, Kind::Resources, Kind::Templates])
            .await;
        for diagnostic in proxy.projection().diagnostics() {
            tracing::warn!(rule = %diagnostic.rule, origin = %diagnostic.origin, "{}", diagnostic.message);
        }
        proxy
    }

    /// Starts handing the upstreams' notices to the sessions, until a
    /// successor takes over.
    fn route(&self) {
        *self
            .inner
            .routed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(self.inner.upstream.servers());
        // Log messages are handed over in each upstream's transport, so
        // they reach the sessions before a result the server sent after
        // them (`portcullis_upstream::notifications`).
        let logs = Logs(Arc::downgrade(&self.inner));
        self.inner.upstream.route_logs(Arc::new(logs));
        let mut notices = self.inner.upstream.notices();
        let relay = self.clone();
        let retired = self.inner.retired.clone();
        tokio::spawn(async move {
            loop {
                let notice = tokio::select! {
                    () = retired.cancelled() => return,
                    notice = notices.recv() => notice,
                };
                match notice {
                    Some(notice) => relay.relay(notice).await,
                    None => return,
                }
            }
        });
    }

    /// The servers this proxy routes the notices of, once it routes.
    fn routed(&self) -> Option<Vec<String>> {
        self.inner
            .routed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// This proxy, or — when servers joined `toolset` since it started
    /// routing (a server that failed to connect at start or at a reload,
    /// retried in the background until it came up) — its successor over
    /// the same connections, which [`Proxy::take_over`] makes route the
    /// joined servers too. A server that left is dropped the same way.
    pub async fn follow(&self, toolset: &Toolset) -> Proxy {
        let now = toolset.passthrough().servers();
        let Some(routed) = self.routed() else {
            return self.clone();
        };
        if routed == now {
            return self.clone();
        }
        let kept: Vec<String> = routed.into_iter().filter(|s| now.contains(s)).collect();
        self.successor(toolset, self.inner.prefix, Some(&kept))
            .await
    }

    /// The projection in force.
    pub fn projection(&self) -> Arc<Projection> {
        self.inner
            .projection
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Lists the asked kinds again from every server that serves them, and
    /// projects the result. A server that fails keeps its last listing.
    async fn refresh(&self, kinds: &[Kind]) {
        let prompts = kinds.contains(&Kind::Prompts);
        let resources = kinds.contains(&Kind::Resources);
        let templates = kinds.contains(&Kind::Templates);
        let upstream = &self.inner.upstream;
        let servers: Vec<String> = self.inner.pins.keys().cloned().collect();
        let listings = futures::future::join_all(servers.iter().map(|server| async move {
            let caps = upstream.capabilities(server);
            let has_prompts = caps.as_ref().is_some_and(|c| c.prompts.is_some());
            let has_resources = caps.as_ref().is_some_and(|c| c.resources.is_some());
            let prompts = match prompts && has_prompts {
                true => Some(upstream.list_prompts(server).await),
                false => None,
            };
            let resources = match resources && has_resources {
                true => Some(upstream.list_resources(server).await),
                false => None,
            };
            let templates = match templates && has_resources {
                true => Some(upstream.list_resource_templates(server).await),
                false => None,
            };
            (server.clone(), prompts, resources, templates)
        }))
        .await;
        let projection = {
            let mut definitions = self
                .inner
                .definitions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for (server, prompts, resources, templates) in listings {
                let entry =
                    definitions
                        .entry(server.clone())
                        .or_insert_with(|| ServerDefinitions {
                            server: server.clone(),
                            pins: self.inner.pins.get(&server).cloned().flatten(),
                            ..Default::default()
                        });
                if let Some(listed) = keep(&server, prompts) {
                    entry.prompts = listed.iter().filter_map(convert::<_, Prompt>).collect();
                }
                if let Some(listed) = keep(&server, resources) {
                    entry.resources = listed.iter().filter_map(convert::<_, Resource>).collect();
                }
                if let Some(listed) = keep(&server, templates) {
                    entry.templates = listed
                        .iter()
                        .filter_map(convert::<_, ResourceTemplate>)
                        .collect();
                }
            }
            Projection::project(
                definitions.values().cloned().collect(),
                self.inner.prefix,
                self.inner.source_count,
            )
        };
        *self
            .inner
            .projection
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(projection);
    }

    /// Registers (or finds) the session `peer` belongs to and applies `f`.
    fn with_session<T>(&self, peer: &Peer<RoleServer>, f: impl FnOnce(&mut Session) -> T) -> T {
        let mut sessions = self
            .inner
            .downstream
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sessions.retain(|s| !s.peer.is_transport_closed());
        match sessions.iter_mut().find(|s| same_session(&s.peer, peer)) {
            Some(session) => f(session),
            None => {
                let mut session = Session {
                    peer: peer.clone(),
                    level: None,
                    subscriptions: BTreeSet::new(),
                };
                let answer = f(&mut session);
                sessions.push(session);
                answer
            }
        }
    }

    /// The live sessions a notice should reach.
    fn sessions_where(&self, wanted: impl Fn(&Session) -> bool) -> Vec<Peer<RoleServer>> {
        let mut sessions = self
            .inner
            .downstream
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sessions.retain(|s| !s.peer.is_transport_closed());
        sessions
            .iter()
            .filter(|s| wanted(s))
            .map(|s| s.peer.clone())
            .collect()
    }

    /// Hands one upstream notice on.
    async fn relay(&self, notice: ServerNotice) {
        let ServerNotice { server, notice } = notice;
        match notice {
            // Only a 2026 listen's log messages come this way; the
            // transport's go straight to `log` (see `Logs`).
            Notice::Log(param) => self.log(&server, param).await,
            Notice::ResourceUpdated(uri) => {
                let exposed = self.projection().expose_uri(&server, &uri);
                let _ = self
                    .inner
                    .downstream
                    .events
                    .0
                    .send(Event::ResourceUpdated(exposed.clone()));
                for peer in self.sessions_where(|s| s.subscriptions.contains(&exposed)) {
                    let _ = peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(
                            exposed.clone(),
                        ))
                        .await;
                }
            }
            Notice::ResourcesChanged => {
                self.refresh(&[Kind::Resources, Kind::Templates]).await;
                let _ = self.inner.downstream.events.0.send(Event::ResourcesChanged);
                for peer in self.sessions_where(|_| true) {
                    let _ = peer.notify_resource_list_changed().await;
                }
            }
            Notice::PromptsChanged => {
                self.refresh(&[Kind::Prompts]).await;
                let _ = self.inner.downstream.events.0.send(Event::PromptsChanged);
                for peer in self.sessions_where(|_| true) {
                    let _ = peer.notify_prompt_list_changed().await;
                }
            }
            _ => {}
        }
    }

    /// Hands one upstream log message to every session that asked for its
    /// level, the logger named after the server when names are qualified.
    /// The sessions are told at once, each within [`LOG_HANDOFF`]: the
    /// upstream's connection waits for this, so a stuck client must not
    /// hold it long.
    async fn log(&self, server: &str, mut param: LoggingMessageNotificationParam) {
        if self.projection().is_qualified() {
            param.logger = Some(match param.logger.take() {
                Some(logger) => format!("{server}/{logger}"),
                None => server.to_owned(),
            });
        }
        let rank = level_rank(param.level);
        let peers = self.sessions_where(|s| s.level.is_none_or(|l| rank >= level_rank(l)));
        futures::future::join_all(peers.iter().map(|peer| {
            tokio::time::timeout(LOG_HANDOFF, peer.notify_logging_message(param.clone()))
        }))
        .await;
    }

    /// The most verbose level any live session asked for, `also` counted
    /// too; `None` when nobody asked.
    fn wanted_level(&self, also: Option<LoggingLevel>) -> Option<LoggingLevel> {
        let sessions = self
            .inner
            .downstream
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sessions
            .iter()
            .filter(|s| !s.peer.is_transport_closed())
            .filter_map(|s| s.level)
            .chain(also)
            .min_by_key(|l| level_rank(*l))
    }

    /// Sets `level` on every server `which` names that logs and has
    /// `logging/setLevel` (a 2026-07-28 server has none).
    async fn forward_level(&self, level: LoggingLevel, which: impl Fn(&str) -> bool) {
        let upstream = &self.inner.upstream;
        for server in upstream.servers() {
            let logs = upstream
                .capabilities(&server)
                .is_some_and(|c| c.logging.is_some());
            if !which(&server) || !logs || !upstream.has_initialize(&server) {
                continue;
            }
            if let Err(error) = upstream.set_level(&server, level).await {
                tracing::warn!(server, %error, "could not set the upstream log level");
            }
        }
    }

    /// Subscribes upstream unless another subscriber already did.
    async fn hold(&self, server: &str, uri: &str) -> Result<(), ErrorData> {
        let mut subscribed = self.inner.subscribed.lock().await;
        let key = (server.to_owned(), uri.to_owned());
        if let Some(count) = subscribed.get_mut(&key) {
            *count += 1;
            return Ok(());
        }
        self.inner
            .upstream
            .subscribe(server, uri)
            .await
            .map_err(|e| upstream_error(&e, None))?;
        subscribed.insert(key, 1);
        Ok(())
    }

    /// Drops one subscriber; the last one unsubscribes upstream.
    async fn release(&self, server: &str, uri: &str) {
        let mut subscribed = self.inner.subscribed.lock().await;
        let key = (server.to_owned(), uri.to_owned());
        let Some(count) = subscribed.get_mut(&key) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            subscribed.remove(&key);
            if let Err(error) = self.inner.upstream.unsubscribe(server, uri).await {
                tracing::debug!(%error, "upstream unsubscribe failed");
            }
        }
    }

    /// The upstream and its own URI for `uri` as the client wrote it.
    fn route_uri(&self, uri: &str) -> Result<(String, String), ErrorData> {
        route_uri(&self.projection(), uri)
    }

    /// Lists `kind` afresh from every server and hands the client what the
    /// projection exposes of it, wrapped by `wrap`.
    async fn list<W: DeserializeOwned, L>(
        &self,
        kind: Kind,
        wrap: fn(Vec<W>) -> L,
    ) -> Result<L, ErrorData> {
        self.refresh(&[kind]).await;
        kind.exposed(&self.projection())
            .and_then(|entries| {
                entries
                    .into_iter()
                    .map(|entry| serde_json::from_value(entry).ok())
                    .collect()
            })
            .map(wrap)
            .ok_or_else(|| {
                ErrorData::internal_error(format!("could not build the {} list", kind.noun()), None)
            })
    }

    /// Hands one request on to the server it routes to, and the answer
    /// back in the client's names. A failure reaches the client as
    /// [`upstream_error`] puts it.
    async fn forward<F: Forwarded>(&self, mut request: F) -> Result<F::Answer, ErrorData> {
        let projection = self.projection();
        let client_uri = request.client_uri();
        let server = request.route(&projection)?;
        let answer = request
            .send(&self.inner.upstream, &server)
            .await
            .map_err(|e| upstream_error(&e, client_uri.as_deref()))?;
        Ok(F::expose(answer, &projection, &server))
    }
}

/// A request the gateway hands on to one server: the per-method part of
/// [`Proxy::forward`].
trait Forwarded: Send + Sized {
    /// The server's answer.
    type Answer: Send;

    /// The URI as the client wrote it, put back into an error's `data.uri`.
    fn client_uri(&self) -> Option<String> {
        None
    }

    /// Names the server the request goes to and rewrites it to that
    /// server's own names, or refuses it.
    fn route(&mut self, projection: &Projection) -> Result<String, ErrorData>;

    /// Sends the rewritten request to `server`.
    fn send(
        self,
        upstream: &Passthrough,
        server: &str,
    ) -> impl Future<Output = Result<Self::Answer, PassthroughError>> + Send;

    /// The answer with the resource URIs in it in the client's form.
    fn expose(answer: Self::Answer, projection: &Projection, server: &str) -> Self::Answer {
        let _ = (projection, server);
        answer
    }
}

impl Forwarded for ReadResourceRequestParams {
    type Answer = ReadResourceResponse;

    fn client_uri(&self) -> Option<String> {
        Some(self.uri.clone())
    }

    fn route(&mut self, projection: &Projection) -> Result<String, ErrorData> {
        let (server, uri) = route_uri(projection, &self.uri)?;
        self.uri = uri;
        Ok(server)
    }

    fn send(
        self,
        upstream: &Passthrough,
        server: &str,
    ) -> impl Future<Output = Result<Self::Answer, PassthroughError>> + Send {
        upstream.read_resource(server, self)
    }

    fn expose(answer: Self::Answer, projection: &Projection, server: &str) -> Self::Answer {
        match answer {
            ReadResourceResponse::Complete(read) => rewrite(projection, server, read).into(),
            other => other,
        }
    }
}

impl Forwarded for GetPromptRequestParams {
    type Answer = GetPromptResponse;

    fn route(&mut self, projection: &Projection) -> Result<String, ErrorData> {
        let (server, name) = route_prompt(projection, &self.name)?;
        self.name = name;
        Ok(server)
    }

    fn send(
        self,
        upstream: &Passthrough,
        server: &str,
    ) -> impl Future<Output = Result<Self::Answer, PassthroughError>> + Send {
        upstream.get_prompt(server, self)
    }

    fn expose(answer: Self::Answer, projection: &Projection, server: &str) -> Self::Answer {
        match answer {
            GetPromptResponse::Complete(prompt) => rewrite(projection, server, prompt).into(),
            other => other,
        }
    }
}

impl Forwarded for CompleteRequestParams {
    type Answer = CompleteResult;

    fn route(&mut self, projection: &Projection) -> Result<String, ErrorData> {
        match &mut self.r#ref {
            Reference::Prompt(prompt) => {
                // A withheld prompt is not named as such here: completion
                // says only that it knows no such prompt.
                let (server, name) = route_prompt(projection, &prompt.name)
                    .map_err(|_| unknown_prompt(&prompt.name))?;
                prompt.name = name;
                Ok(server)
            }
            Reference::Resource(resource) => {
                let (server, uri) = route_uri(projection, &resource.uri)?;
                resource.uri = uri;
                Ok(server)
            }
            _ => Err(ErrorData::invalid_params(
                "unsupported completion reference",
                None,
            )),
        }
    }

    fn send(
        self,
        upstream: &Passthrough,
        server: &str,
    ) -> impl Future<Output = Result<Self::Answer, PassthroughError>> + Send {
        upstream.complete(server, self)
    }
}

/// The upstream and its own URI for `uri` as the client wrote it.
fn route_uri(projection: &Projection, uri: &str) -> Result<(String, String), ErrorData> {
    match projection.route_uri(uri) {
        UriRoute::Upstream { server, uri } => Ok((server.to_owned(), uri)),
        UriRoute::Withheld(withheld) => Err(ErrorData::invalid_params(
            format!("resource {uri} is withheld: {}", withheld.reason),
            Some(json!({"uri": uri})),
        )),
        UriRoute::Unknown => Err(ErrorData::resource_not_found(
            format!("Resource not found: {uri}"),
            Some(json!({"uri": uri})),
        )),
    }
}

/// The upstream and its own prompt name for `name` as the client wrote it.
fn route_prompt(projection: &Projection, name: &str) -> Result<(String, String), ErrorData> {
    match projection.route_prompt(name) {
        PromptRoute::Upstream {
            server,
            remote_name,
        } => Ok((server.to_owned(), remote_name.to_owned())),
        PromptRoute::Withheld(withheld) => Err(ErrorData::invalid_params(
            format!("prompt {name} is withheld: {}", withheld.reason),
            None,
        )),
        PromptRoute::Unknown => Err(unknown_prompt(name)),
    }
}

fn unknown_prompt(name: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown prompt: {name}"), None)
}

/// A listing, or `None` (keep the last one) when it failed or was not asked.
fn keep<T>(server: &str, listed: Option<Result<Vec<T>, PassthroughError>>) -> Option<Vec<T>> {
    match listed? {
        Ok(items) => Some(items),
        Err(error) => {
            tracing::warn!(server, %error, "listing failed; keeping the last one");
            None
        }
    }
}

/// An upstream failure as the client should see it: a server's own
/// JSON-RPC error keeps its code and data (with `data.uri` put back as the
/// client wrote it); anything else is an internal error naming the server.
fn upstream_error(error: &PassthroughError, client_uri: Option<&str>) -> ErrorData {
    match error {
        PassthroughError::Protocol {
            code,
            message,
            data,
            ..
        } => {
            let mut data = data.as_deref().cloned();
            if let (Some(Value::Object(map)), Some(uri)) = (&mut data, client_uri)
                && map.contains_key("uri")
            {
                map.insert("uri".into(), Value::String(uri.to_owned()));
            }
            ErrorData::new(ErrorCode(*code), message.clone(), data)
        }
        PassthroughError::Unsupported { method, .. } => ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("{error}"),
            Some(json!({"method": method})),
        ),
        other => ErrorData::internal_error(other.to_string(), None),
    }
}

/// Rewrites every resource URI in an answer of `server` to the client's
/// form: `contents[].uri` of a read, and the resources embedded in or
/// linked from prompt messages.
fn expose_uris(projection: &Projection, server: &str, value: &mut Value) {
    if !projection.is_qualified() {
        return;
    }
    let fix = |uri: &mut Value| {
        if let Value::String(text) = uri {
            *text = projection.expose_uri(server, text);
        }
    };
    if let Some(Value::Array(contents)) = value.get_mut("contents") {
        for content in contents {
            if let Some(uri) = content.get_mut("uri") {
                fix(uri);
            }
        }
    }
    if let Some(Value::Array(messages)) = value.get_mut("messages") {
        for message in messages {
            let Some(content) = message.get_mut("content") else {
                continue;
            };
            match content.get("type").and_then(Value::as_str) {
                Some("resource") => {
                    if let Some(uri) = content.get_mut("resource").and_then(|r| r.get_mut("uri")) {
                        fix(uri);
                    }
                }
                Some("resource_link") => {
                    if let Some(uri) = content.get_mut("uri") {
                        fix(uri);
                    }
                }
                _ => {}
            }
        }
    }
}

fn rewrite<T: Serialize + DeserializeOwned>(projection: &Projection, server: &str, answer: T) -> T {
    if !projection.is_qualified() {
        return answer;
    }
    let Ok(mut value) = serde_json::to_value(&answer) else {
        return answer;
    };
    expose_uris(projection, server, &mut value);
    serde_json::from_value(value).unwrap_or(answer)
}

impl PassthroughProvider for Proxy {
    fn capabilities(&self) -> PassthroughCapabilities {
        self.inner.capabilities
    }

    fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<ListResourcesResult, ErrorData>> {
        Box::pin(self.list(Kind::Resources, ListResourcesResult::with_all_items))
    }

    fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<ListResourceTemplatesResult, ErrorData>> {
        Box::pin(self.list(Kind::Templates, ListResourceTemplatesResult::with_all_items))
    }

    fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<ReadResourceResponse, ErrorData>> {
        Box::pin(self.forward(request))
    }

    fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<(), ErrorData>> {
        Box::pin(async move {
            let (server, uri) = self.route_uri(&request.uri)?;
            let fresh = self.with_session(&context.peer, |s| {
                s.subscriptions.insert(request.uri.clone())
            });
            if fresh && let Err(error) = self.hold(&server, &uri).await {
                self.with_session(&context.peer, |s| s.subscriptions.remove(&request.uri));
                return Err(error);
            }
            Ok(())
        })
    }

    fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<(), ErrorData>> {
        Box::pin(async move {
            let (server, uri) = self.route_uri(&request.uri)?;
            if self.with_session(&context.peer, |s| s.subscriptions.remove(&request.uri)) {
                self.release(&server, &uri).await;
            }
            Ok(())
        })
    }

    fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<ListPromptsResult, ErrorData>> {
        Box::pin(self.list(Kind::Prompts, ListPromptsResult::with_all_items))
    }

    fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<GetPromptResponse, ErrorData>> {
        Box::pin(self.forward(request))
    }

    fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<CompleteResult, ErrorData>> {
        Box::pin(self.forward(request))
    }

    fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> BoxFuture<'_, Result<(), ErrorData>> {
        Box::pin(async move {
            self.with_session(&context.peer, |s| s.level = Some(request.level));
            // The upstreams are shared: set them to the most verbose level
            // any live session asked for, and filter per session on the way
            // out.
            let level = self
                .wanted_level(Some(request.level))
                .unwrap_or(request.level);
            self.forward_level(level, |_| true).await;
            Ok(())
        })
    }

    fn session_started(&self, peer: Peer<RoleServer>) {
        self.with_session(&peer, |_| {});
    }

    fn listen(&self, context: SubscriptionContext) -> BoxFuture<'_, Result<(), ErrorData>> {
        Box::pin(async move {
            let mut events = self.inner.downstream.events.0.subscribe();
            let uris = context
                .accepted()
                .resource_subscriptions
                .clone()
                .unwrap_or_default();
            let mut held = Vec::new();
            for uri in &uris {
                if let Ok((server, upstream_uri)) = self.route_uri(uri)
                    && self.hold(&server, &upstream_uri).await.is_ok()
                {
                    held.push((server, upstream_uri));
                }
            }
            loop {
                let event = tokio::select! {
                    _ = context.cancelled() => break,
                    event = events.recv() => event,
                };
                let notification = match event {
                    Ok(Event::PromptsChanged) => {
                        ServerNotification::PromptListChangedNotification(Default::default())
                    }
                    Ok(Event::ResourcesChanged) => {
                        ServerNotification::ResourceListChangedNotification(Default::default())
                    }
                    Ok(Event::ResourceUpdated(uri)) if uris.contains(&uri) => {
                        ServerNotification::ResourceUpdatedNotification(
                            rmcp::model::ResourceUpdatedNotification::new(
                                ResourceUpdatedNotificationParam::new(uri),
                            ),
                        )
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => break,
                };
                // A kind the client did not ask for is refused by the sink;
                // only a closed subscription ends the loop.
                if let Err(rmcp::service::SubscriptionSendError::SubscriptionClosed) =
                    context.sink().send(notification).await
                {
                    break;
                }
            }
            for (server, uri) in held {
                self.release(&server, &uri).await;
            }
            Ok(())
        })
    }
}
