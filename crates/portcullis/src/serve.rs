//! `portcullis serve`: the gateway. Takes its port, connects the upstreams
//! (waiting at most `[gateway] start_timeout_ms`: the tools of those ready
//! are served, the others join when ready and clients are told), serves
//! the catalogue behind every guard over HTTP on loopback (or stdio), with
//! `/healthz` and `/metrics` beside `/mcp`, every call logged, counted and
//! audited; re-reads the config on SIGHUP or when the file changes (see
//! [`crate::reload`]).
//!
//! A signal while the upstreams connect stops the start-up at once (exit 0).
//! Shutdown, on SIGINT or SIGTERM: stop accepting connections (on stdio:
//! requests), let in-flight calls finish (up to [`SHUTDOWN_GRACE`]; then
//! those left are answered with a JSON-RPC error saying so), close
//! every upstream (stdio children, spawned in their own process groups, are
//! killed with their groups), exit 0. Closing is bounded too
//! ([`CLOSE_BOUND`]): an upstream that does not answer its goodbye (a child
//! killed from outside, a remote server gone) cannot keep the gateway alive;
//! whatever is left is killed when its handle drops.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use portcullis_server::oauth::ResourceServer;
use portcullis_server::{HttpOptions, ShutdownSignal, serve_http_on, serve_stdio_until};
use tokio_util::sync::CancellationToken;

use crate::Exit;
use crate::audit::Recorder;
use crate::config::Config;
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::reload::{Generation, Live};

/// How long in-flight calls may take to finish once a signal arrived,
/// before their streams are cut.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long closing the upstreams may take before the gateway exits
/// anyway.
pub const CLOSE_BOUND: Duration = Duration::from_secs(3);

/// Runs the gateway until a signal (HTTP) or until the client closes stdin
/// (stdio).
pub async fn serve(
    config: &Config,
    listen: Option<SocketAddr>,
    stdio: bool,
) -> anyhow::Result<Exit> {
    // Ours from the start: a signal while upstreams connect, or right after
    // the listening line, must not kill the process with children alive.
    let signal = ShutdownSignal::register();
    // The port first: a port in use fails at once, before any upstream
    // child is spawned; clients that connect meanwhile wait in the backlog.
    let listen = listen.unwrap_or(config.gateway.listen);
    let listener = if stdio {
        None
    } else {
        let probe = HttpOptions {
            listen,
            ..HttpOptions::default()
        };
        Some(portcullis_server::bind(&probe).await?)
    };
    // The first signal, whenever it comes: while the upstreams connect (a
    // slow handshake can take a whole `timeout_ms`) it stops the start-up
    // at once; dropping the half-built gateway kills the children spawned
    // so far (their process groups die with their handles).
    let signalled = CancellationToken::new();
    tokio::spawn({
        let signalled = signalled.clone();
        async move {
            signal.received().await;
            signalled.cancel();
        }
    });
    let gateway = tokio::select! {
        started = Gateway::start(config) => started?,
        () = signalled.cancelled() => {
            tracing::info!("signal received while starting; stopping");
            errln!("portcullis: stopped");
            return Ok(Exit::Success);
        }
    };
    // Which servers are missing, one line each, whatever the log level:
    // the first thing to look at when a client lacks tools.
    let missing = gateway.missing();
    crate::gateway::report_missing(&missing);
    // Those still connecting at `start_timeout_ms`: served without them
    // until they join (each logs when it does, and clients are told).
    let starting = gateway.toolset.starting();
    for server in &starting {
        errln!(
            "{}",
            crate::gateway::missing_line(
                "still connecting upstream",
                server,
                "its tools are served once it is ready"
            )
        );
    }
    let withheld = gateway.tools.withheld();
    if !withheld.is_empty() {
        let names: Vec<&str> = withheld.iter().map(|w| w.id.as_str()).collect();
        // Once per serve (not on every command, not on every reload).
        tracing::warn!(
            "withholding {} tool(s) ({}); pass allow_write, allow_tools or identity (with the route permissions in identity.perms) to expose them",
            withheld.len(),
            names.join(", ")
        );
    }
    let generation = Generation::new(config.clone(), gateway);
    let snapshot = generation.snapshot();
    let declared = config.upstreams.len();
    let mut upstreams = if missing.is_empty() {
        format!("from {declared} upstream(s)")
    } else {
        let retried = if config.gateway.reconnect_max.is_some() {
            " (retried in the background)"
        } else {
            ""
        };
        format!(
            "from {declared} upstream(s), {} missing{retried}",
            missing.len()
        )
    };
    if !starting.is_empty() {
        upstreams.push_str(&format!(", {} still connecting", starting.len()));
    }
    let summary = format!(
        "{} tools exposed, {} quarantined, {} withheld, {upstreams}",
        snapshot.available, snapshot.quarantined, snapshot.withheld,
    );
    // The audit trail goes to the gateway's own store (with `store =
    // "memory"` too: one store per process, not a second one).
    let recorder = Recorder::new(Arc::new(Metrics::default()), crate::audit::identity(config))
        .with_trail(generation.gateway.store.clone());
    let live = Live::new(generation, recorder);
    let watcher = tokio::spawn(crate::reload::watch(live.clone(), config.path.clone()));
    let follower = tokio::spawn(crate::reload::follow_catalogue(live.clone()));
    let pinger = tokio::spawn(crate::health::watch_upstreams(live.clone()));
    // Audit trail and effect log retention: pruned now, then hourly.
    let pruner = tokio::spawn(crate::retention::watch(live.clone()));
    let handler = live.served();

    if stdio {
        errln!("portcullis: serving MCP on stdio; {summary}");
        // A signal drains the session as it drains HTTP: the calls in
        // flight are answered (new requests refused) for up to the grace.
        let stop = CancellationToken::new();
        tokio::spawn({
            let stop = stop.clone();
            async move {
                signalled.cancelled().await;
                tracing::info!("signal received; draining in-flight calls");
                stop.cancel();
            }
        });
        if let Err(error) = serve_stdio_until(handler, stop, SHUTDOWN_GRACE).await {
            tracing::warn!(%error, "stdio session ended with an error");
        }
        watcher.abort();
        follower.abort();
        pinger.abort();
        pruner.abort();
        close(&live).await;
        return Ok(Exit::Success);
    }
    let token = config.gateway.token.as_ref().map(|t| t.expose().to_owned());
    let oauth = config
        .gateway
        .oauth
        .as_ref()
        .map(crate::config::OAuth::options);
    // `/metrics` checks access tokens too, with a checker of its own.
    let metrics_oauth = match oauth.clone().map(ResourceServer::new).transpose() {
        Ok(checker) => checker.map(Arc::new),
        Err(error) => {
            watcher.abort();
            follower.abort();
            pinger.abort();
            pruner.abort();
            close(&live).await;
            return Err(error).context("[gateway.oauth]");
        }
    };
    let options = HttpOptions {
        listen,
        allowed_hosts: config.gateway.allowed_hosts.clone(),
        allowed_origins: config.gateway.allowed_origins.clone(),
        extra_routes: crate::health::routes(live.clone(), token.as_deref(), metrics_oauth),
        token,
        oauth,
        max_connections: config.gateway.max_connections,
        header_read_timeout: config.gateway.header_read_timeout,
        idle_timeout: config.gateway.idle_timeout,
        max_sessions: config.gateway.max_sessions,
        session_idle_timeout: config.gateway.session_idle_timeout,
        // Signals are handled here rather than by the surface, so the
        // upstreams are closed (and their children ended) before exiting.
        handle_signals: false,
        // Initialize-era clients get a session: an upstream's sampling,
        // elicitation and roots requests can only reach such a client on
        // one (its answer comes back as a POST of the same session).
        // 2026-07-28 clients stay stateless.
        legacy_sessions: true,
        // The gateway's relay and approval ask through the call's context,
        // so every session's plain calls can skip rmcp's session worker.
        client_requests_in_context: true,
        shutdown_grace: SHUTDOWN_GRACE,
        ..HttpOptions::default()
    };
    let listener = listener.context("the HTTP surface's port was not bound")?;
    let server = match serve_http_on(handler, listener, options).await {
        Ok(server) => server,
        Err(error) => {
            watcher.abort();
            follower.abort();
            pinger.abort();
            pruner.abort();
            close(&live).await;
            return Err(error).context("cannot start the HTTP surface");
        }
    };
    errln!("portcullis: listening on {}; {summary}", server.url());
    let stop = server.stop_token();
    tokio::spawn(async move {
        signalled.cancelled().await;
        tracing::info!("signal received; draining in-flight calls");
        stop.cancel();
    });
    server.wait().await;
    watcher.abort();
    follower.abort();
    pinger.abort();
    pruner.abort();
    close(&live).await;
    errln!("portcullis: stopped");
    Ok(Exit::Success)
}

/// Writes the audit records still queued and closes the upstreams, each
/// within [`CLOSE_BOUND`].
async fn close(live: &Live) {
    if tokio::time::timeout(CLOSE_BOUND, live.recorder().flush())
        .await
        .is_err()
    {
        tracing::warn!("the audit trail did not catch up before shutdown");
    }
    if tokio::time::timeout(CLOSE_BOUND, live.close())
        .await
        .is_err()
    {
        tracing::warn!(
            "upstreams did not close within {} s; ending them",
            CLOSE_BOUND.as_secs()
        );
    }
}
