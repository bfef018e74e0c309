//! The served tool set as something that can change under a running
//! `serve`: the config re-read on SIGHUP or when the file changes, and every
//! call observed on its way through.
//!
//! [`Live`] holds the current [`Generation`] (a config and the gateway
//! built from it). [`Live::served`] is the one `ServerHandler` the surfaces
//! serve, a live `ToolServer` whose tool set each swap replaces: each
//! request takes the tool set current when it arrives and keeps it (and its
//! generation) to the end, so a reload never changes the ground under an in-flight call,
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
//! | an upstream's listing (reconciled by the connector, not a config change), or an upstream joining late (still connecting at `start_timeout_ms`, or retried after a failure) | the tool server is rebuilt on the same connections ([`follow_catalogue`]) |
//! | `audit_retention_days`, `effects_retention_days` | applied by the next retention round, which a change starts at once (`crate::retention`) |
//!
//! The downstream sessions outlive every generation: a reload's proxy takes
//! over the sessions of the one in force (`Proxy::take_over`, when the new
//! generation is swapped in), so the upstreams' notices keep reaching them,
//! a newly connected upstream's included.
//!
//! Every surface serves one handler, [`Live::served`]: a live
//! `ToolServer` whose tool set is replaced in place on a swap, and which
//! hands every call's `CallReport` to the [`Recorder`] (an `Observer`).
//! Clients hear about a new tool set from it: 2026-07-28 clients through
//! `subscriptions/listen` (`notifications/tools/list_changed`), and
//! initialize-era clients with a live session (stdio) through the same
//! notification on their session. Stateless HTTP clients of the 2025 era
//! have no channel to be told on and see the change on their next
//! `tools/list`.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use portcullis_server::{CallObserver, ObservedCall, ToolServer};
use portcullis_store::audit::ArgumentShape;
use portcullis_upstream::McpServerConfig;
use rmcp::model::JsonObject;
use tokio::sync::watch;

use crate::audit::Recorder;
use crate::config::{self, App, Config, StoreChoice};
use crate::gateway::{Gateway, server_configs};
use crate::metrics::{Snapshot, UNKNOWN_TOOL};

/// How often the config file is looked at for changes.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

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
    /// Set when a newer generation replaced this one: its connections are
    /// closed when the last request holding it lets go.
    retired: AtomicBool,
}

impl Generation {
    /// Wraps a started gateway.
    pub fn new(config: Config, gateway: Gateway) -> Self {
        Generation {
            config,
            gateway,
            retired: AtomicBool::new(false),
        }
    }

    /// What `/metrics` and `/healthz` show about this generation: tool
    /// counts by status, and each configured upstream up or down (down: it
    /// failed to connect, its connection has since ended, or a remote one
    /// stopped answering; see [`crate::health`]). Up also means served: the
    /// upstream is in the catalogue this generation's tool server was built
    /// from, not only in the toolset's newer one that a rebuild has yet to
    /// follow (a client that waited for "up" would meet "unknown tool").
    /// The tool counts are of that catalogue too.
    pub fn snapshot(&self) -> Snapshot {
        let rows = self.gateway.served_rows();
        let count = |status: &str| rows.iter().filter(|r| r.status == status).count();
        let catalogue = &self.gateway.catalogue;
        let upstreams = self
            .config
            .upstreams
            .keys()
            .map(|name| {
                let connected = catalogue
                    .servers()
                    .iter()
                    .find(|s| &s.identity.name == name)
                    .is_some_and(|s| crate::liveness::upstream_up(&self.gateway.toolset, &s.name));
                (name.clone(), connected)
            })
            .collect();
        Snapshot {
            available: count("available"),
            quarantined: count("quarantined"),
            withheld: count("withheld"),
            needs_login: self
                .config
                .upstreams
                .keys()
                .filter(|name| self.gateway.oauth.needs_login(name))
                .cloned()
                .collect(),
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
    /// The one MCP handler every surface serves: the current generation's
    /// tool server, replaced in place on a swap (a request keeps the
    /// generation it started on alive until it is answered).
    served: ToolServer,
    recorder: Arc<Recorder>,
    /// Bumped whenever a new generation is swapped in.
    swaps: watch::Sender<u64>,
    /// One reload at a time (a SIGHUP during a file-change reload waits).
    reloading: tokio::sync::Mutex<()>,
}

impl Live {
    /// The state of a gateway serving `generation`.
    pub fn new(generation: Generation, recorder: Recorder) -> Arc<Live> {
        let recorder = Arc::new(recorder);
        let generation = Arc::new(generation);
        let observer = Arc::new(Observer {
            recorder: recorder.clone(),
        });
        let served = generation.gateway.tools.live(Some(observer));
        served.replace(&generation.gateway.tools, Some(generation.clone()));
        Arc::new(Live {
            current: RwLock::new(generation),
            served,
            recorder,
            swaps: watch::Sender::new(0),
            reloading: tokio::sync::Mutex::new(()),
        })
    }

    /// The MCP handler to serve: one tool server whose tool set follows
    /// every swap.
    pub fn served(&self) -> ToolServer {
        self.served.clone()
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
        let snapshot = generation.snapshot();
        if reconnect {
            old.retired.store(true, Ordering::Release);
        }
        // The sessions hear the new generation's upstreams (a reload's new
        // connections included) from now on, and the old proxy falls
        // silent.
        generation.gateway.proxy.take_over(&old.gateway.proxy).await;
        drop(old);
        self.swap(generation);
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

    /// Makes `generation` the one serving new requests; returns whether
    /// the listed tools changed.
    fn swap(&self, generation: Generation) -> bool {
        // A gateway built on another store (the config's `store` changed)
        // takes the audit trail with it.
        self.recorder.follow_store(&generation.gateway.store);
        let generation = Arc::new(generation);
        // The tools are served before the generation is current: what
        // `/healthz` reads of it is never ahead of what a call finds.
        // Clients hear of it when the listed tools changed.
        let changed = self
            .served
            .replace(&generation.gateway.tools, Some(generation.clone()));
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = generation;
        self.swaps.send_modify(|n| *n = n.wrapping_add(1));
        changed
    }

    /// The upstreams' catalogue changed under the current generation (a
    /// server joined, or its listing changed and was reconciled): the tool
    /// server is rebuilt on the same connections and clients are told.
    /// Returns whether a rebuilt generation was swapped in.
    async fn refresh(&self) -> bool {
        let _one_at_a_time = self.reloading.lock().await;
        let old = self.current();
        let generation = match old.gateway.refollowed(&old.config).await {
            Ok(gateway) => Generation::new(old.config.clone(), gateway),
            Err(error) => {
                tracing::error!(error = %format!("{error:#}"), "the catalogue changed but the tool server cannot be rebuilt; serving the previous tools");
                return false;
            }
        };
        // A server that joined late is heard from now on.
        generation.gateway.proxy.take_over(&old.gateway.proxy).await;
        drop(old);
        let tools_changed = self.swap(generation);
        tracing::info!(tools_changed, "upstream catalogue changed; tools rebuilt");
        true
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
/// the current generation's catalogue changes (an upstream joined late, or
/// its listing changed and was reconciled), its tool server is rebuilt. A
/// change made before this started watching (a server that joined while
/// `serve` was still setting up) is caught up at once. Runs until dropped.
pub async fn follow_catalogue(live: Arc<Live>) {
    loop {
        let mut swaps = live.swaps.subscribe();
        swaps.mark_unchanged();
        // Only the receiver is kept: holding the generation here would keep
        // a replaced one (and its connections) alive.
        let (mut catalogue, behind) = {
            let current = live.current();
            let mut catalogue = current.gateway.toolset.watch_catalogue();
            let latest = catalogue.borrow_and_update().clone();
            (catalogue, !Arc::ptr_eq(&latest, &current.gateway.catalogue))
        };
        if behind && live.refresh().await {
            continue;
        }
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

/// What the served tool server tells about every call: the recorder's log
/// line, metrics and audit record, labelled with the tool's source.
struct Observer {
    recorder: Arc<Recorder>,
}

impl CallObserver for Observer {
    fn started(&self, _tool: Option<&str>, arguments: Option<&JsonObject>) -> Box<dyn Any + Send> {
        // The shape is taken before the arguments move on, so the trail
        // never holds a value.
        let shape = self
            .recorder
            .keeps_trail()
            .then(|| ArgumentShape::of_arguments(arguments));
        Box::new(shape)
    }

    fn finished(&self, call: ObservedCall<'_>, note: Box<dyn Any + Send>) {
        let shape = note
            .downcast::<Option<ArgumentShape>>()
            .ok()
            .and_then(|shape| *shape);
        let tool = call.tool.unwrap_or(UNKNOWN_TOOL);
        self.recorder.record(
            call.time,
            call.caller,
            call.source,
            tool,
            call.report,
            call.duration,
            shape,
        );
    }
}

/// The config file's bytes, if it is a regular file that can be read (a
/// FIFO swapped in would otherwise block this watcher, and the runtime
/// thread under it, forever).
fn read_config_bytes(path: &std::path::Path) -> Option<Vec<u8>> {
    portcullis_sources::files::read_regular(path, crate::config::MAX_CONFIG_BYTES).ok()
}
