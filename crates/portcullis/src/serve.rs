//! `portcullis serve`: the gateway. Connects every upstream, serves the
//! catalogue behind every guard over HTTP on loopback (or stdio), and on
//! SIGINT/SIGTERM drains in-flight calls, closes the upstreams (stdio
//! children are killed) and exits 0.

use std::net::SocketAddr;

use anyhow::Context as _;
use portcullis_server::{HttpOptions, serve_http, serve_stdio};

use crate::Exit;
use crate::config::Config;
use crate::gateway::Gateway;

/// Runs the gateway until a signal (HTTP) or until the client closes stdin
/// (stdio).
pub async fn serve(
    config: &Config,
    listen: Option<SocketAddr>,
    stdio: bool,
) -> anyhow::Result<Exit> {
    let gateway = Gateway::start(config).await?;
    let rows = gateway.rows();
    let count = |status: &str| rows.iter().filter(|r| r.status == status).count();
    let summary = format!(
        "{} tools exposed, {} quarantined, {} withheld, from {} upstream(s)",
        count("available"),
        count("quarantined"),
        count("withheld"),
        config.upstreams.len()
    );
    if stdio {
        eprintln!("portcullis: serving MCP on stdio; {summary}");
        tokio::select! {
            served = serve_stdio(gateway.tools.clone()) => {
                if let Err(error) = served {
                    tracing::warn!(%error, "stdio session ended with an error");
                }
            }
            () = shutdown_signal() => tracing::info!("signal received; shutting down"),
        }
        gateway.close().await;
        return Ok(Exit::Success);
    }
    let options = HttpOptions {
        listen: listen.unwrap_or(config.gateway.listen),
        allowed_hosts: config.gateway.allowed_hosts.clone(),
        allowed_origins: config.gateway.allowed_origins.clone(),
        token: config.gateway.token.as_ref().map(|t| t.expose().to_owned()),
        // Signals are handled here rather than by the surface, so the
        // upstreams are closed (and their children ended) before exiting.
        handle_signals: false,
        // Initialize-era clients get a session: an upstream's sampling,
        // elicitation and roots requests can only reach such a client on
        // one (its answer comes back as a POST of the same session).
        // 2026-07-28 clients stay stateless.
        legacy_sessions: true,
        ..HttpOptions::default()
    };
    let server = match serve_http(gateway.tools.clone(), options).await {
        Ok(server) => server,
        Err(error) => {
            gateway.close().await;
            return Err(error).context("cannot start the HTTP surface");
        }
    };
    eprintln!("portcullis: listening on {}; {summary}", server.url());
    let stop = server.stop_token();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("signal received; draining in-flight calls");
        stop.cancel();
    });
    server.wait().await;
    gateway.close().await;
    eprintln!("portcullis: stopped");
    Ok(Exit::Success)
}

/// Resolves on SIGINT or SIGTERM (Ctrl-C elsewhere).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}
