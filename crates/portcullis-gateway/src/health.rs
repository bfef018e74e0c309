//! `/healthz` and `/metrics` on the gateway's HTTP surface, beside `/mcp`.
//!
//! Both pass the surface's Host and Origin guards (a page in a browser
//! cannot read them through DNS rebinding). The token, when one is
//! configured (or, behind an identity provider, a valid access token), is
//! required on `/metrics` (it names every upstream and tool) but not on
//! `/healthz`, which tells a probe only whether the gateway is up
//! and how many upstreams are connected:
//!
//! ```json
//! {"status":"ok","upstreams":{"up":2,"down":0,"needs_login":0},"tools":{"available":7,"quarantined":0,"withheld":1}}
//! ```
//!
//! `status` is `ok` when every configured upstream is up, `degraded` when
//! some are down or need a login (the answer is still 200: the gateway
//! serves what it has; alert on `degraded` or on `portcullis_upstream_up`).
//! An upstream that logs in with OAuth and has no usable grant (never
//! logged in, the grant revoked or expired past refreshing, the stored one
//! unreadable) counts under `needs_login`, not `down`: a person must run
//! `portcullis auth login NAME`; nothing is broken.
//!
//! What "down" means ([`upstream_up`]): the upstream failed to connect at
//! start (or at the reload that added it); its connection ended (a stdio
//! child that exited, a transport closed for good); or — a remote upstream
//! (Streamable HTTP, SSE) — its last call failed at the transport, or it did
//! not answer the health check: an MCP `ping` sent to every remote
//! upstream every `health_interval_ms` (30 s by default, `0` turns the
//! pings off; [`watch_upstreams`]). A remote upstream that answers again (a
//! ping's reply, any call's answer) is up again. A connection that ended
//! is re-opened in the background (`[gateway] reconnect_max_ms`, see
//! `portcullis_upstream::Backoff`), and an upstream that failed at start is
//! retried the same way: each is down until its new connection is in (with
//! `reconnect_max_ms = 0`, until a reload reconnects it or the gateway
//! restarts). An upstream that joins late is up only once the served tool
//! map has its tools: a client that waits for "up" and then calls never
//! meets "unknown tool". The tool counts are of the served map too.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use portcullis_server::guard::Guard;
use portcullis_server::oauth::ResourceServer;
use serde_json::json;

pub use crate::liveness::{child_alive, upstream_up};
use crate::reload::Live;

/// The path of the health probe.
pub const HEALTHZ_PATH: &str = "/healthz";
/// The path of the Prometheus scrape.
pub const METRICS_PATH: &str = "/metrics";

/// The routes to hand to the HTTP surface (`HttpOptions::extra_routes`).
/// `token` is the surface's bearer token, required on `/metrics` when set;
/// with `oauth`, an access token that checker accepts is required instead.
pub fn routes(
    live: Arc<Live>,
    token: Option<&str>,
    oauth: Option<Arc<ResourceServer>>,
) -> Vec<(String, MethodRouter)> {
    // A guard used only for its constant-time token comparison.
    let token_check = Arc::new(Guard::new(0, &[], &[], token, 0));
    let health = {
        let live = live.clone();
        get(move || {
            let live = live.clone();
            async move { healthz(&live) }
        })
    };
    let metrics = get(move |headers: HeaderMap| {
        let live = live.clone();
        let token_check = token_check.clone();
        let oauth = oauth.clone();
        async move {
            let authorization = headers
                .get(header::AUTHORIZATION)
                .and_then(|h| h.to_str().ok());
            let allowed = match &oauth {
                Some(oauth) => oauth.authenticate(authorization).await.is_ok(),
                None => token_check.authorized(authorization),
            };
            if !allowed {
                let mut refused = StatusCode::UNAUTHORIZED.into_response();
                refused
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return refused;
            }
            metrics(&live)
        }
    });
    vec![
        (HEALTHZ_PATH.to_owned(), health),
        (METRICS_PATH.to_owned(), metrics),
    ]
}

fn healthz(live: &Live) -> Response {
    let snapshot = live.current().snapshot();
    let (up, down, needs_login) = snapshot.upstream_counts();
    let body = json!({
        "status": if down == 0 && needs_login == 0 { "ok" } else { "degraded" },
        "upstreams": {"up": up, "down": down, "needs_login": needs_login},
        "tools": {
            "available": snapshot.available,
            "quarantined": snapshot.quarantined,
            "withheld": snapshot.withheld,
        },
    });
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response()
}

fn metrics(live: &Live) -> Response {
    let snapshot = live.current().snapshot();
    let text = live.recorder().metrics().render(&snapshot);
    (
        [
            (
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            ),
            (header::CACHE_CONTROL, "no-store"),
        ],
        text,
    )
        .into_response()
}

/// How often the health check looks at the config again while
/// `health_interval_ms = 0` has the pings off.
const CHECK_CONFIG_EVERY: Duration = Duration::from_secs(5);

/// Pings the current generation's remote upstreams every
/// `[gateway] health_interval_ms` (read again each round, so a reload
/// applies). Runs until dropped.
pub async fn watch_upstreams(live: Arc<Live>) {
    loop {
        let Some(interval) = live.current().config.gateway.health_interval else {
            tokio::time::sleep(CHECK_CONFIG_EVERY).await;
            continue;
        };
        tokio::time::sleep(interval).await;
        // The toolset, not the generation: a retired generation must not
        // be held open by a ping in flight.
        let toolset = live.current().gateway.toolset.clone();
        toolset.check_remotes().await;
    }
}
