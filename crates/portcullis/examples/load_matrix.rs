//! The load matrix: every client era × every upstream transport × 1, 8 and
//! 32 concurrent clients, each cell measured directly and through
//! `portcullis serve`, interleaved in one run. `docs/performance.md` says
//! what it measures and holds the latest figures.
//!
//! ```text
//! cargo build --release -p portcullis --bins --examples
//! target/release/examples/load_matrix [CALLS_PER_CELL]
//! ```
//!
//! Client eras (hand-written HTTP clients, so every byte on the wire is
//! known; each reads every answer to the end of its body before the next
//! call on its connection):
//! * `2025-sse`: a 2025-11-25 client with a session: `initialize`,
//!   `notifications/initialized`, then `tools/call` POSTs carrying
//!   `Mcp-Session-Id`, answered directly as SSE streams (what most deployed
//!   clients do, and the path that once stalled 40 ms on delayed ACKs).
//! * `2025-json`: the same client, but talking directly to a stateless
//!   server that answers `initialize` and every call with plain JSON and
//!   no session. The gateway keeps a session for every initialize-era
//!   client, so through it the same client gets a session; both eras get
//!   plain JSON from the gateway when a call's only event is its result
//!   (SSE before 2026-12-01).
//! * `2026`: a stateless 2026-07-28 client: one POST per call, the protocol
//!   in `_meta` and the standard headers, a JSON answer.
//! * `stdio`: a desktop client (`stdio_client`): it launches the server as
//!   its child and talks 2025-11-25 over stdin/stdout, `initialize` then
//!   calls; its concurrent clients share the one pipe, their requests told
//!   apart by id. Through the gateway: `portcullis serve --stdio`.
//! * `ts-sdk` and `py-sdk` (only when `LOAD_MATRIX_ERAS` names them): the
//!   official TypeScript and Python SDKs' clients over Streamable HTTP, each
//!   run of a side one child process (`sdk_client`), with the protocol each
//!   negotiates (the TypeScript client 2025-11-25 with a session, the
//!   Python one 2026-07-28 where the server takes it). Their direct server
//!   is the session echo. Needs `.ci/peers.sh`'s `.peers/`.
//!
//! Upstreams behind the gateway (all the same rmcp echo handler, served by
//! this example itself):
//! * `stdio`: a child process of the gateway speaking over stdin/stdout.
//! * `http-session`: Streamable HTTP with sessions, 2025-era only (it
//!   refuses `server/discover`, so the gateway falls back to `initialize`
//!   and one session).
//! * `http-stateless`: stateless Streamable HTTP with JSON answers, both
//!   eras (the gateway reaches it as a 2026-07-28 server).
//! * `sse`: legacy HTTP+SSE (2024-11-05), 2025-era: each request POSTed,
//!   every answer an event on one long-lived stream (servers that predate
//!   Streamable HTTP).
//!
//! "Direct" is the same echo handler served over Streamable HTTP in the
//! client's own era: a session server for `2025-sse`, a stateless JSON
//! server for `2025-json` and `2026`. It does not depend on the upstream
//! column, so each ratio answers "what does this client lose by going
//! through the gateway to this kind of upstream". For a stdio upstream no
//! HTTP client can reach the server without something in between; the
//! HTTP twin is the honest yardstick. The stdio era's direct side is the
//! same echo launched over stdio by the same client.
//!
//! Each cell runs its calls in two rounds, direct then gateway each round,
//! so both sides see the same machine. Each call carries a distinct
//! message and the echoed text is checked. Reported per cell: calls/s of
//! each side and their ratio, the p50 and p99 the gateway adds, the
//! gateway's own CPU per call (its process tree's user + system time from
//! `/proc` minus its children's, i.e. without the stdio upstream), and the
//! gateway's peak RSS during the cell (`VmHWM`, reset through
//! `/proc/PID/clear_refs` before the cell). A second table splits the
//! machine's CPU a call between the load client, the gateway and the server
//! on each side, and gives the ratio a saturated machine would allow
//! (direct's total over the gateway side's) and the most any gateway could
//! get against this yardstick (the same with the gateway costing nothing).
//! Each era × upstream block gets
//! a fresh gateway (its idle RSS is read once it is connected, before any
//! call). Linux only.
//!
//! Environment: `LOAD_MATRIX_CALLS` (calls per side per cell, default 2000,
//! also the first argument), `LOAD_MATRIX_ERAS` (e.g. `2025-sse,2026`;
//! default the four hand-written eras; `ts-sdk`, `py-sdk` on request),
//! `LOAD_MATRIX_UPSTREAMS` (e.g. `stdio`), `LOAD_MATRIX_LEVELS` (e.g.
//! `1,32`), `PORTCULLIS_BIN` (the gateway binary; default
//! `target/release/portcullis` beside the examples directory),
//! `LOAD_MATRIX_STORE=sqlite` (the default store, SQLite in the gateway's
//! data directory, instead of the memory store, which keeps the newest
//! 10 000 audit records in memory), `LOAD_MATRIX_CAPABILITIES` (the capabilities the
//! 2025-era clients declare, as JSON; default `{}`, e.g.
//! `{"elicitation":{},"sampling":{},"roots":{}}` as VS Code-like clients
//! declare them), `LOAD_MATRIX_PROGRESS_TOKEN=1` (the clients of every era
//! put a `progressToken` in every call's `_meta`, numbered like rmcp's
//! client, which sends one on every request), `LOAD_MATRIX_PEERS` (peer
//! proxies measured beside the gateway in every HTTP era's stdio-upstream
//! cell (they serve HTTP only), in the same
//! rounds and against the same direct server: `supergateway`,
//! `ts-mcp-proxy`, `py-mcp-proxy`, or `all`; installed under `.peers/`, or
//! `LOAD_MATRIX_PEERS_DIR`; `LOAD_MATRIX_NODE` names the Node.js binary;
//! see `peer_process` and `docs/performance.md`, "Peers in the matrix"; a
//! peer that refuses an era is reported as refused). The gateway runs with
//! its default logging (stderr read and dropped here).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "../../portcullis-server/examples/load_driver/mod.rs"]
mod load_driver;
use load_driver::{RmcpEcho, memory, ms};

mod gateway_process;
#[path = "../tests/it/common/legacy_sse.rs"]
mod legacy_sse;
mod peer_process;
mod sdk_client;
mod stdio_client;
use peer_process::Peer;
use sdk_client::Sdk;
use stdio_client::StdioClient;

/// The eras measured unless `LOAD_MATRIX_ERAS` names others.
const ERAS: [Era; 4] = [
    Era::Sse2025,
    Era::Json2025,
    Era::Stateless2026,
    Era::Stdio2025,
];
/// Every era `LOAD_MATRIX_ERAS` may name: the SDK clients need `.peers/`.
const ALL_ERAS: [Era; 6] = [
    Era::Sse2025,
    Era::Json2025,
    Era::Stateless2026,
    Era::Stdio2025,
    Era::Sdk(Sdk::TypeScript),
    Era::Sdk(Sdk::Python),
];
const UPSTREAMS: [Upstream; 4] = [
    Upstream::Stdio,
    Upstream::HttpSession,
    Upstream::HttpStateless,
    Upstream::LegacySse,
];
const LEVELS: [usize; 3] = [1, 8, 32];
/// Each side's calls of a cell are split into this many rounds, direct and
/// gateway alternating, so a change in the machine's load hits both.
const ROUNDS: usize = 2;
const LEGACY_VERSION: &str = "2025-11-25";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Runtime::new()?;
    match args.get(1).map(String::as_str) {
        Some("serve-http") => match args.get(2).map(String::as_str) {
            Some("sse") => runtime.block_on(serve_legacy_sse()),
            mode => runtime.block_on(serve_http(mode == Some("session"))),
        },
        Some("serve-stdio") => runtime.block_on(serve_stdio()),
        other => {
            let calls = other
                .and_then(|n| n.parse().ok())
                .or_else(|| {
                    std::env::var("LOAD_MATRIX_CALLS")
                        .ok()
                        .and_then(|n| n.parse().ok())
                })
                .unwrap_or(2000);
            runtime.block_on(matrix(calls))
        }
    }
}

// ---------------------------------------------------------------------------
// The servers.

/// The echo, 2025-era only: `server/discover` is refused as a 2025-era SDK
/// refuses a method it does not know, so a dual-era client (the gateway)
/// falls back to `initialize` and a session. (rmcp's default would answer
/// a discover at 2025-11-25, and its client would then skip the handshake.)
#[derive(Clone)]
struct LegacyEcho;

impl rmcp::ServerHandler for LegacyEcho {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        RmcpEcho.get_info()
    }

    async fn discover(
        &self,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, rmcp::ErrorData> {
        Err(rmcp::ErrorData::method_not_found::<
            rmcp::model::DiscoverRequestMethod,
        >())
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        std::borrow::Cow::Borrowed(rmcp::model::ProtocolVersion::known_up_to(
            &rmcp::model::ProtocolVersion::V_2025_11_25,
        ))
    }

    async fn list_tools(
        &self,
        request: Option<rmcp::model::PaginatedRequestParams>,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        RmcpEcho.list_tools(request, context).await
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        RmcpEcho.call_tool(request, context).await
    }
}

/// Serves the echo over Streamable HTTP on a free loopback port, printing
/// its URL: with sessions (2025-era only), or stateless with JSON answers.
/// Accepted sockets get `TCP_NODELAY`, as the gateway's do, so neither side
/// of a comparison waits on delayed ACKs.
async fn serve_http(sessions: bool) -> Result<(), Box<dyn std::error::Error>> {
    use axum::serve::ListenerExt;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(sessions)
        .with_json_response(!sessions);
    let app = if sessions {
        let service = StreamableHttpService::new(
            || Ok(LegacyEcho),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        axum::Router::new().route_service("/mcp", service)
    } else {
        let service = StreamableHttpService::new(
            || Ok(RmcpEcho),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        axum::Router::new().route_service("/mcp", service)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("http://{}/mcp", listener.local_addr()?);
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await?;
    Ok(())
}

/// Serves the echo over stdin/stdout until stdin closes.
/// Serves the 2025-era echo over legacy HTTP+SSE (2024-11-05: `GET /sse`
/// for the event stream, `POST /message` for each request) on a free
/// loopback port, printing the stream's URL.
async fn serve_legacy_sse() -> Result<(), Box<dyn std::error::Error>> {
    let server = legacy_sse::legacy_sse(LegacyEcho).await;
    println!("{}", server.url());
    std::future::pending::<()>().await;
    Ok(())
}

async fn serve_stdio() -> Result<(), Box<dyn std::error::Error>> {
    use rmcp::ServiceExt;
    let running = RmcpEcho.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The matrix.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Era {
    Sse2025,
    Json2025,
    Stateless2026,
    /// A desktop client: the server launched as its child, 2025-11-25 over
    /// stdin/stdout.
    Stdio2025,
    /// An official SDK's client over Streamable HTTP (`sdk_client`).
    Sdk(Sdk),
}

impl Era {
    fn name(self) -> &'static str {
        match self {
            Era::Sse2025 => "2025-sse",
            Era::Json2025 => "2025-json",
            Era::Stateless2026 => "2026",
            Era::Stdio2025 => "stdio",
            Era::Sdk(sdk) => sdk.name(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Upstream {
    Stdio,
    HttpSession,
    HttpStateless,
    /// Legacy HTTP+SSE (2024-11-05): requests POSTed, answers on one
    /// long-lived event stream.
    LegacySse,
}

impl Upstream {
    fn name(self) -> &'static str {
        match self {
            Upstream::Stdio => "stdio",
            Upstream::HttpSession => "http-session",
            Upstream::HttpStateless => "http-stateless",
            Upstream::LegacySse => "sse",
        }
    }
}

/// A process this run started, killed when dropped.
struct Child {
    child: tokio::process::Child,
    pid: u32,
}

/// The first line a child prints on stdout (the echo servers' URL).
async fn spawn_echo(exe: &Path, mode: &str) -> Result<(Child, String), Box<dyn std::error::Error>> {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(exe)
        .args(["serve-http", mode])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("no pid")?;
    let url = tokio::io::BufReader::new(child.stdout.take().ok_or("no stdout")?)
        .lines()
        .next_line()
        .await?
        .ok_or("the echo server printed no URL")?;
    Ok((Child { child, pid }, url))
}

/// Where a side's calls go.
#[derive(Clone)]
enum Endpoint {
    /// An MCP endpoint over HTTP.
    Http(String),
    /// A stdio server this run started (the direct echo, or `portcullis
    /// serve --stdio`).
    Stdio(Arc<StdioClient>),
}

/// Where the HTTP echo servers listen.
struct EchoUrls {
    session: String,
    stateless: String,
    sse: String,
}

/// One gateway in front of one upstream.
struct Gateway {
    process: Child,
    front: Endpoint,
    idle_mib: f64,
    _dir: tempfile::TempDir,
}

/// A gateway for `upstream`, served over HTTP, or over stdio to this
/// process for the stdio era.
async fn spawn_gateway(
    bin: &Path,
    exe: &Path,
    era: Era,
    upstream: Upstream,
    urls: &EchoUrls,
    store: &str,
) -> Result<Gateway, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("portcullis.toml");
    let table = match upstream {
        Upstream::Stdio => format!(
            "type = \"stdio\"\ncommand = {}\nargs = [\"serve-stdio\"]\n",
            Value::from(exe.to_string_lossy().into_owned())
        ),
        Upstream::HttpSession => {
            format!("type = \"streamable-http\"\nurl = \"{}\"\n", urls.session)
        }
        Upstream::HttpStateless => {
            format!("type = \"streamable-http\"\nurl = \"{}\"\n", urls.stateless)
        }
        Upstream::LegacySse => format!("type = \"sse\"\nurl = \"{}\"\n", urls.sse),
    };
    std::fs::write(
        &config,
        format!(
            "[gateway]\nstore = \"{store}\"\ndata_dir = \"data\"\nprefix = \"never\"\n\n[upstreams.echo]\n{table}"
        ),
    )?;
    let (process, front) = if era == Era::Stdio2025 {
        let mut command = tokio::process::Command::new(bin);
        command.args(["serve", "--stdio", "--config"]).arg(&config);
        let (child, client) = StdioClient::start(command, LEGACY_VERSION, capabilities()?).await?;
        let pid = child.id().ok_or("no gateway pid")?;
        (Child { child, pid }, Endpoint::Stdio(Arc::new(client)))
    } else {
        let gateway_process::Served { child, pid, url } =
            gateway_process::serve(tokio::process::Command::new(bin), bin, &config).await?;
        (Child { child, pid }, Endpoint::Http(url))
    };
    // Settled: connected to its upstream, nothing served yet.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_mib = memory(process.pid).0;
    Ok(Gateway {
        process,
        front,
        idle_mib,
        _dir: dir,
    })
}

/// The echo server over stdio, started and initialized: the direct side
/// of the stdio era.
async fn spawn_stdio_echo(exe: &Path) -> Result<(Child, Endpoint), Box<dyn std::error::Error>> {
    let mut command = tokio::process::Command::new(exe);
    command.arg("serve-stdio");
    let (child, client) = StdioClient::start(command, LEGACY_VERSION, capabilities()?).await?;
    let pid = child.id().ok_or("no echo pid")?;
    Ok((Child { child, pid }, Endpoint::Stdio(Arc::new(client))))
}

/// One side's measurements of one cell.
#[derive(Default)]
struct Side {
    latencies: Vec<Duration>,
    elapsed: Duration,
    cpu: Cpu,
    sse_answers: usize,
    json_answers: usize,
    line_answers: usize,
    /// The protocol an SDK's client negotiated (it does not show its
    /// answers' framing).
    protocol: Option<String>,
}

impl Side {
    fn calls_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn pct_ms(&mut self, p: f64) -> f64 {
        self.latencies.sort();
        let n = self.latencies.len();
        ms(self.latencies[((n as f64 * p) as usize).min(n - 1)])
    }

    fn answers(&self) -> String {
        if let Some(protocol) = &self.protocol {
            return protocol.clone();
        }
        match (
            self.sse_answers > 0,
            self.json_answers > 0,
            self.line_answers > 0,
        ) {
            (true, false, false) => "sse",
            (false, true, false) => "json",
            (false, false, true) => "lines",
            _ => "mixed",
        }
        .to_owned()
    }

    fn add(&mut self, run: Run) {
        self.latencies.extend(run.latencies);
        self.elapsed += run.elapsed;
        self.cpu.add(run.cpu);
        self.sse_answers += run.sse_answers;
        self.json_answers += run.json_answers;
        self.line_answers += run.line_answers;
        if run.protocol.is_some() {
            self.protocol = run.protocol;
        }
    }
}

/// One cell's row.
struct Row {
    era: Era,
    upstream: Upstream,
    concurrency: usize,
    direct_cps: f64,
    gateway_cps: f64,
    added_p50_ms: f64,
    added_p99_ms: f64,
    direct_p50_ms: f64,
    gateway_p50_ms: f64,
    cpu_us: f64,
    /// The machine's CPU a call on each side, in µs: (client, server) for
    /// direct, (client, gateway + upstream) through the gateway.
    budget: Budget,
    peak_mib: f64,
    answers: String,
}

/// Where the machine's CPU went a call, on both sides of one cell (µs).
struct Budget {
    direct_client: f64,
    direct_server: f64,
    gateway_client: f64,
    upstream: f64,
}

/// A peer proxy started for one era × stdio block.
struct Standing {
    peer: Peer,
    process: Child,
    endpoint: Endpoint,
    idle_mib: f64,
}

/// One proxy's figures in one stdio cell, beside the same direct yardstick
/// as the gateway's (Portcullis's own row is repeated among them).
struct PeerRow {
    era: Era,
    concurrency: Option<usize>,
    proxy: &'static str,
    /// The figures, or why the proxy could not be measured.
    figures: Result<PeerFigures, String>,
}

struct PeerFigures {
    cps: f64,
    ratio: f64,
    added_p50_ms: f64,
    added_p99_ms: f64,
    cpu_us: f64,
    peak_mib: f64,
    answers: String,
}

impl PeerRow {
    fn portcullis(row: &Row) -> PeerRow {
        PeerRow {
            era: row.era,
            concurrency: Some(row.concurrency),
            proxy: "portcullis",
            figures: Ok(PeerFigures {
                cps: row.gateway_cps,
                ratio: row.gateway_cps / row.direct_cps,
                added_p50_ms: row.added_p50_ms,
                added_p99_ms: row.added_p99_ms,
                cpu_us: row.cpu_us,
                peak_mib: row.peak_mib,
                answers: row
                    .answers
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
            }),
        }
    }

    fn measured(row: &Row, peer: &Standing, side: &mut Side, direct: &mut Side) -> PeerRow {
        let cps = side.calls_per_second();
        PeerRow {
            era: row.era,
            concurrency: Some(row.concurrency),
            proxy: peer.peer.name(),
            figures: Ok(PeerFigures {
                cps,
                ratio: cps / row.direct_cps,
                added_p50_ms: side.pct_ms(0.50) - direct.pct_ms(0.50),
                added_p99_ms: side.pct_ms(0.99) - direct.pct_ms(0.99),
                cpu_us: side.cpu.gateway / side.latencies.len() as f64 * 1e6,
                peak_mib: memory(peer.process.pid).1,
                answers: side.answers().to_owned(),
            }),
        }
    }

    fn refused(era: Era, peer: Peer, why: &str) -> PeerRow {
        // One line of the refusal is enough to tell what happened.
        let mut why: String = why
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(120)
            .collect();
        why = why.replace('|', "/");
        PeerRow {
            era,
            concurrency: None,
            proxy: peer.name(),
            figures: Err(why),
        }
    }
}

/// The peers' table: each proxy in front of the same stdio echo, against
/// the same direct server, measured in the same rounds as the gateway.
fn peer_table(rows: &[PeerRow], ours: &[(Era, f64)], idle: &[(Era, Peer, f64)]) {
    println!(
        "Peers in front of the same stdio upstream (CPU/call: the proxy's process without its stdio children):"
    );
    println!(
        "| era | c | proxy | calls/s | ratio | added p50 | added p99 | proxy CPU/call | proxy peak RSS | answers |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        let c = row.concurrency.map_or("–".to_owned(), |c| c.to_string());
        match &row.figures {
            Ok(f) => println!(
                "| {} | {c} | {} | {:.0} | {:.2}x | {:+.3} ms | {:+.3} ms | {:.0} µs | {:.1} MiB | {} |",
                row.era.name(),
                row.proxy,
                f.cps,
                f.ratio,
                f.added_p50_ms,
                f.added_p99_ms,
                f.cpu_us,
                f.peak_mib,
                f.answers,
            ),
            Err(why) => println!(
                "| {} | {c} | {} | refused: {why} | | | | | | |",
                row.era.name(),
                row.proxy
            ),
        }
    }
    for (era, mib) in ours {
        println!(
            "- idle RSS of portcullis for {} × stdio (started, connected, nothing served): {mib:.1} MiB",
            era.name()
        );
    }
    for (era, peer, mib) in idle {
        println!(
            "- idle RSS of {} for {} × stdio (started, nothing served): {mib:.1} MiB",
            peer.name(),
            era.name()
        );
    }
}

/// The items of `all` that `var` names (comma-separated), or `default`
/// when it is unset.
fn selected<T: Copy>(all: &[T], default: &[T], var: &str, name: impl Fn(T) -> String) -> Vec<T> {
    match std::env::var(var) {
        Ok(list) => {
            let wanted: Vec<&str> = list.split(',').map(str::trim).collect();
            all.iter()
                .copied()
                .filter(|item| wanted.contains(&name(*item).as_str()))
                .collect()
        }
        Err(_) => default.to_vec(),
    }
}

async fn matrix(calls: usize) -> Result<(), Box<dyn std::error::Error>> {
    let eras = selected(&ALL_ERAS, &ERAS, "LOAD_MATRIX_ERAS", |e| {
        e.name().to_owned()
    });
    let upstreams = selected(&UPSTREAMS, &UPSTREAMS, "LOAD_MATRIX_UPSTREAMS", |u| {
        u.name().to_owned()
    });
    let levels = selected(&LEVELS, &LEVELS, "LOAD_MATRIX_LEVELS", |c| c.to_string());
    let exe = std::env::current_exe()?;
    let bin = gateway_process::binary()?;

    let store = match std::env::var("LOAD_MATRIX_STORE").as_deref() {
        Ok("sqlite") => "sqlite",
        _ => "memory",
    };
    let peers = Peer::selected()?;
    let peers_dir = if peers.is_empty() {
        None
    } else {
        Some(peer_process::directory()?)
    };
    let (session_echo, session_url) = spawn_echo(&exe, "session").await?;
    let (stateless_echo, stateless_url) = spawn_echo(&exe, "stateless").await?;
    let (sse_echo, sse_url) = spawn_echo(&exe, "sse").await?;
    let urls = EchoUrls {
        session: session_url.clone(),
        stateless: stateless_url.clone(),
        sse: sse_url,
    };
    let client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let stdio_echo = if eras.contains(&Era::Stdio2025) {
        Some(spawn_stdio_echo(&exe).await?)
    } else {
        None
    };
    let session_direct = Endpoint::Http(session_url.clone());
    let stateless_direct = Endpoint::Http(stateless_url.clone());

    println!(
        "load matrix: {calls} calls per side per cell in {ROUNDS} rounds (direct, gateway, direct, gateway); store {store}; gateway {}",
        bin.display()
    );
    println!("load average at start: {}\n", load_average());

    let started = Instant::now();
    let mut rows = Vec::new();
    let mut idle = Vec::new();
    let mut peer_rows = Vec::new();
    let mut idle_peers = Vec::new();
    for era in &eras {
        let (direct_endpoint, direct_pid) = match (era, &stdio_echo) {
            // The SDK clients, like most deployed ones, talk to a server
            // with sessions directly.
            (Era::Sse2025 | Era::Sdk(_), _) => (&session_direct, session_echo.pid),
            (Era::Json2025 | Era::Stateless2026, _) => (&stateless_direct, stateless_echo.pid),
            (Era::Stdio2025, Some((process, endpoint))) => (endpoint, process.pid),
            (Era::Stdio2025, None) => unreachable!("started when the era is selected"),
        };
        for upstream in &upstreams {
            // A fresh gateway for each era and upstream, so what one block
            // leaves behind (sessions, the memory store's audit records)
            // does not weigh on the next one's memory.
            let gateway = spawn_gateway(&bin, &exe, *era, *upstream, &urls, store).await?;
            idle.push((*era, *upstream, gateway.idle_mib));
            // Warm-up of both sides: connections, sessions, allocator.
            let unwatched = Watch {
                client: None,
                gateway: None,
                server: ServerProcess::None,
            };
            run(&client, direct_endpoint, *era, 8, 200, &unwatched).await?;
            run(&client, &gateway.front, *era, 8, 200, &unwatched).await?;
            // The peers stand where the gateway does, in front of the same
            // stdio server; one that refuses this era is reported, not
            // measured. They serve HTTP only, so not in the stdio era.
            let mut standing = Vec::new();
            if let (Upstream::Stdio, Some(dir), false) =
                (upstream, &peers_dir, *era == Era::Stdio2025)
            {
                let server = [exe.to_string_lossy().into_owned(), "serve-stdio".to_owned()];
                for &peer in &peers {
                    let served = peer_process::serve(peer, dir, &server).await?;
                    let process = Child {
                        child: served.child,
                        pid: served.pid,
                    };
                    // Idle as the gateway's is read: started, nothing served.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    let idle_mib = memory(process.pid).0;
                    let endpoint = Endpoint::Http(served.url.clone());
                    match run(&client, &endpoint, *era, 8, 200, &unwatched).await {
                        Ok(_) => {
                            standing.push(Standing {
                                peer,
                                process,
                                endpoint,
                                idle_mib,
                            });
                        }
                        Err(refusal) => {
                            peer_rows.push(PeerRow::refused(*era, peer, &refusal.to_string()));
                            stop(process).await;
                        }
                    }
                }
            }
            for &concurrency in &levels {
                let mut direct = Side::default();
                let mut through = Side::default();
                let mut beside: Vec<Result<Side, String>> =
                    standing.iter().map(|_| Ok(Side::default())).collect();
                reset_peak(gateway.process.pid);
                for peer in &standing {
                    reset_peak(peer.process.pid);
                }
                let per_round = calls.div_ceil(ROUNDS);
                // With peers in the rounds, each side starts once the one
                // before it has finished its own work: a peer tears down
                // sessions and their stdio children after its calls, and
                // that must not land in the next side's figures.
                let settle = || async {
                    if !standing.is_empty() {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                };
                for _ in 0..ROUNDS {
                    settle().await;
                    let direct_watch = Watch {
                        client: None,
                        gateway: None,
                        server: ServerProcess::Alone(direct_pid),
                    };
                    direct.add(
                        run(
                            &client,
                            direct_endpoint,
                            *era,
                            concurrency,
                            per_round,
                            &direct_watch,
                        )
                        .await?,
                    );
                    settle().await;
                    let gateway_watch = Watch {
                        client: None,
                        gateway: Some(gateway.process.pid),
                        server: match upstream {
                            Upstream::Stdio => ServerProcess::ChildrenOf(gateway.process.pid),
                            Upstream::HttpSession => ServerProcess::Alone(session_echo.pid),
                            Upstream::HttpStateless => ServerProcess::Alone(stateless_echo.pid),
                            Upstream::LegacySse => ServerProcess::Alone(sse_echo.pid),
                        },
                    };
                    through.add(
                        run(
                            &client,
                            &gateway.front,
                            *era,
                            concurrency,
                            per_round,
                            &gateway_watch,
                        )
                        .await?,
                    );
                    for (peer, side) in standing.iter().zip(beside.iter_mut()) {
                        let Ok(measured) = side else { continue };
                        settle().await;
                        let peer_watch = Watch {
                            client: None,
                            gateway: Some(peer.process.pid),
                            server: ServerProcess::ChildrenOf(peer.process.pid),
                        };
                        match run(
                            &client,
                            &peer.endpoint,
                            *era,
                            concurrency,
                            per_round,
                            &peer_watch,
                        )
                        .await
                        {
                            Ok(round) => measured.add(round),
                            Err(refusal) => *side = Err(refusal.to_string()),
                        }
                    }
                }
                let peak_mib = memory(gateway.process.pid).1;
                let direct_p50 = direct.pct_ms(0.50);
                let gateway_p50 = through.pct_ms(0.50);
                let row = Row {
                    era: *era,
                    upstream: *upstream,
                    concurrency,
                    direct_cps: direct.calls_per_second(),
                    gateway_cps: through.calls_per_second(),
                    added_p50_ms: gateway_p50 - direct_p50,
                    added_p99_ms: through.pct_ms(0.99) - direct.pct_ms(0.99),
                    direct_p50_ms: direct_p50,
                    gateway_p50_ms: gateway_p50,
                    cpu_us: through.cpu.gateway / through.latencies.len() as f64 * 1e6,
                    budget: Budget {
                        direct_client: direct.cpu.client / direct.latencies.len() as f64 * 1e6,
                        direct_server: direct.cpu.server / direct.latencies.len() as f64 * 1e6,
                        gateway_client: through.cpu.client / through.latencies.len() as f64 * 1e6,
                        upstream: through.cpu.server / through.latencies.len() as f64 * 1e6,
                    },
                    peak_mib,
                    answers: format!("{}/{}", direct.answers(), through.answers()),
                };
                eprintln!(
                    "{} × {} × {}: {:.0} vs {:.0} calls/s ({:.2}x), load {}",
                    era.name(),
                    upstream.name(),
                    concurrency,
                    row.direct_cps,
                    row.gateway_cps,
                    row.gateway_cps / row.direct_cps,
                    load_average()
                );
                if !standing.is_empty() {
                    peer_rows.push(PeerRow::portcullis(&row));
                }
                for (peer, side) in standing.iter().zip(beside) {
                    peer_rows.push(match side {
                        Ok(mut side) => PeerRow::measured(&row, peer, &mut side, &mut direct),
                        Err(refusal) => PeerRow::refused(*era, peer.peer, &refusal),
                    });
                }
                rows.push(row);
            }
            stop(gateway.process).await;
            for peer in standing {
                idle_peers.push((*era, peer.peer, peer.idle_mib));
                stop(peer.process).await;
            }
        }
    }

    println!(
        "| era | upstream | c | direct calls/s | gateway calls/s | ratio | direct p50 | gateway p50 | added p50 | added p99 | gateway CPU/call | gateway peak RSS | answers (direct/gateway) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in &rows {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2}x | {:.3} ms | {:.3} ms | {:+.3} ms | {:+.3} ms | {:.0} µs | {:.1} MiB | {} |",
            row.era.name(),
            row.upstream.name(),
            row.concurrency,
            row.direct_cps,
            row.gateway_cps,
            row.gateway_cps / row.direct_cps,
            row.direct_p50_ms,
            row.gateway_p50_ms,
            row.added_p50_ms,
            row.added_p99_ms,
            row.cpu_us,
            row.peak_mib,
            row.answers,
        );
    }
    if !peer_rows.is_empty() {
        println!();
        let ours: Vec<(Era, f64)> = idle
            .iter()
            .filter(|(_, upstream, _)| *upstream == Upstream::Stdio)
            .map(|(era, _, mib)| (*era, *mib))
            .collect();
        peer_table(&peer_rows, &ours, &idle_peers);
    }
    println!();
    budget(&rows);
    println!();
    targets(&rows, &idle);
    println!(
        "\nload average at end: {}; {:.0} s",
        load_average(),
        started.elapsed().as_secs_f64()
    );

    drop(session_echo);
    drop(stateless_echo);
    drop(sse_echo);
    Ok(())
}

/// Where the machine's CPU goes a call on each side of each cell. On a
/// machine whose cores are all busy, throughput follows CPU per call: the
/// "CPU-bound" ratio is direct's total over the gateway side's total, and
/// "with a free gateway" is that ratio if the gateway process itself cost
/// nothing (client and upstream only) — the most any gateway could get
/// against this yardstick on this machine.
fn budget(rows: &[Row]) {
    println!("Where the machine's CPU goes, µs a call (user + system from /proc):");
    println!(
        "| era | upstream | c | direct: client | server | total | through: client | gateway | upstream | total | CPU-bound ratio | with a free gateway | measured ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        let b = &row.budget;
        let direct = b.direct_client + b.direct_server;
        let through = b.gateway_client + row.cpu_us + b.upstream;
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2}x | {:.2}x | {:.2}x |",
            row.era.name(),
            row.upstream.name(),
            row.concurrency,
            b.direct_client,
            b.direct_server,
            direct,
            b.gateway_client,
            row.cpu_us,
            b.upstream,
            through,
            direct / through,
            direct / (b.gateway_client + b.upstream),
            row.gateway_cps / row.direct_cps,
        );
    }
}

/// How far each cell is from the design's targets.
fn targets(rows: &[Row], idle: &[(Era, Upstream, f64)]) {
    let mark = |ok: bool| if ok { "met" } else { "MISSED" };
    println!("Targets:");
    for row in rows {
        let ratio = row.gateway_cps / row.direct_cps;
        let mut notes = Vec::new();
        if row.concurrency >= 8 {
            notes.push(format!("ratio {ratio:.2} ≥ 0.65: {}", mark(ratio >= 0.65)));
        }
        if row.concurrency == 1 {
            notes.push(format!(
                "added p50 {:.3} ≤ 0.2 ms: {}",
                row.added_p50_ms,
                mark(row.added_p50_ms <= 0.2)
            ));
        }
        notes.push(format!(
            "CPU {:.0} ≤ 150 µs: {}",
            row.cpu_us,
            mark(row.cpu_us <= 150.0)
        ));
        if row.concurrency == 32 {
            notes.push(format!(
                "peak {:.1} ≤ 60 MiB: {}",
                row.peak_mib,
                mark(row.peak_mib <= 60.0)
            ));
        }
        println!(
            "- {} × {} × {}: {}",
            row.era.name(),
            row.upstream.name(),
            row.concurrency,
            notes.join("; ")
        );
    }
    for (era, upstream, mib) in idle {
        println!(
            "- idle RSS (started, connected, nothing served), gateway for {} × {}: {mib:.1} ≤ 30 MiB: {}",
            era.name(),
            upstream.name(),
            mark(*mib <= 30.0)
        );
    }
    // The stateless era against a stdio upstream, beside the session era.
    let find = |era: Era, c: usize| {
        rows.iter()
            .find(|r| r.era == era && r.upstream == Upstream::Stdio && r.concurrency == c)
    };
    for c in LEVELS {
        if let (Some(stateless), Some(session)) =
            (find(Era::Stateless2026, c), find(Era::Sse2025, c))
        {
            let slower = session.gateway_cps / stateless.gateway_cps;
            println!(
                "- stdio at c={c}: 2026 {:.0} calls/s vs 2025-sse {:.0} calls/s through the gateway (2026 is {slower:.2}x slower; ≤ 2: {})",
                stateless.gateway_cps,
                session.gateway_cps,
                mark(slower <= 2.0)
            );
        }
    }
}

/// SIGTERM, as an operator stops it; killed if it does not exit.
async fn stop(mut process: Child) {
    let _ = tokio::process::Command::new("kill")
        .args(["-TERM", &process.pid.to_string()])
        .status()
        .await;
    if tokio::time::timeout(Duration::from_secs(20), process.child.wait())
        .await
        .is_err()
    {
        let _ = process.child.kill().await;
    }
}

// ---------------------------------------------------------------------------
// The clients.

/// One round of one side: `concurrency` clients, each with its own session
/// where its era has one (opened before the clock starts and closed after
/// it stops), posting their share of `calls` one after another.
struct Run {
    latencies: Vec<Duration>,
    elapsed: Duration,
    cpu: Cpu,
    sse_answers: usize,
    json_answers: usize,
    line_answers: usize,
    protocol: Option<String>,
}

/// Over stdio the `concurrency` clients share the one pipe, as the
/// concurrent requests of a desktop client do.
async fn run(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    era: Era,
    concurrency: usize,
    calls: usize,
    watch: &Watch,
) -> Result<Run, Box<dyn std::error::Error>> {
    if let (Era::Sdk(sdk), Endpoint::Http(url)) = (era, endpoint) {
        return run_sdk(sdk, url, concurrency, calls, watch).await;
    }
    let per_worker = calls.div_ceil(concurrency);
    let sessions = match endpoint {
        Endpoint::Http(url) => {
            futures::future::try_join_all((0..concurrency).map(|_| open(client, url, era))).await?
        }
        Endpoint::Stdio(_) => vec![None; concurrency],
    };
    let cpu_before = watch.read();
    let started = Instant::now();
    let workers = sessions.iter().map(|session| {
        let client = client.clone();
        let endpoint = endpoint.clone();
        let session = session.clone();
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_worker);
            let mut kinds = [0; 3];
            for i in 0..per_worker {
                let id = 1 + i;
                let message = format!("m{}", NEXT_MESSAGE.fetch_add(1, Ordering::Relaxed));
                let started = Instant::now();
                let kind = match &endpoint {
                    Endpoint::Http(url) => {
                        call(&client, url, era, session.as_deref(), id, &message).await?
                    }
                    Endpoint::Stdio(stdio) => call_stdio(stdio, &message).await?,
                };
                latencies.push(started.elapsed());
                kinds[kind as usize] += 1;
            }
            Ok::<_, String>((latencies, kinds))
        })
    });
    let results = futures::future::join_all(workers).await;
    let elapsed = started.elapsed();
    let cpu = watch.read().since(cpu_before);
    if let Endpoint::Http(url) = endpoint {
        for session in sessions.iter().flatten() {
            let _ = client
                .delete(url)
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", LEGACY_VERSION)
                .send()
                .await;
        }
    }
    let mut run = Run {
        latencies: Vec::with_capacity(calls),
        elapsed,
        cpu,
        sse_answers: 0,
        json_answers: 0,
        line_answers: 0,
        protocol: None,
    };
    for result in results {
        let (latencies, [sse, json, lines]) = result??;
        run.latencies.extend(latencies);
        run.sse_answers += sse;
        run.json_answers += json;
        run.line_answers += lines;
    }
    Ok(run)
}

/// One round of one side made by an SDK's client process: its start and
/// handshakes are outside the clock and the CPU read, its own CPU is the
/// client's.
async fn run_sdk(
    sdk: Sdk,
    url: &str,
    concurrency: usize,
    calls: usize,
    watch: &Watch,
) -> Result<Run, Box<dyn std::error::Error>> {
    let peers = peer_process::directory()?;
    let mut driver = sdk_client::Driver::start(sdk, &peers, url, concurrency, calls).await?;
    let watch = watch.with_client(driver.pid());
    let cpu_before = watch.read();
    let outcome = driver.go().await?;
    // Read before the driver ends its sessions: that is not a call's work.
    let cpu = watch.read().since(cpu_before);
    driver.finish().await;
    Ok(Run {
        latencies: outcome.latencies,
        elapsed: outcome.elapsed,
        cpu,
        sse_answers: 0,
        json_answers: 0,
        line_answers: 0,
        protocol: Some(outcome.protocol),
    })
}

/// Numbers every call of the run, so no two carry the same message.
static NEXT_MESSAGE: AtomicU64 = AtomicU64::new(0);

/// How an answer came.
#[derive(Clone, Copy)]
enum Kind {
    Sse,
    Json,
    /// A line on a stdio pipe.
    Line,
}

/// Opens a client of `era`: the initialize handshake for the 2025 eras
/// (returning the session the server made, if it made one), nothing for
/// the stateless era.
async fn open(client: &reqwest::Client, url: &str, era: Era) -> Result<Option<String>, String> {
    if era == Era::Stateless2026 {
        return Ok(None);
    }
    let capabilities = capabilities()?;
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY_VERSION, "capabilities": capabilities,
        "clientInfo": {"name": "load-matrix", "version": "1"}}});
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("initialize: {e}"))?;
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (message, _) = read_answer(response, 0).await?;
    let version = message["result"]["protocolVersion"].as_str();
    if version != Some(LEGACY_VERSION) {
        return Err(format!("initialize answered {message}"));
    }
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", LEGACY_VERSION);
    if let Some(session) = &session {
        request = request.header("mcp-session-id", session);
    }
    let response = request
        .body(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string())
        .send()
        .await
        .map_err(|e| format!("initialized: {e}"))?;
    let status = response.status();
    let _ = response.bytes().await;
    if status != reqwest::StatusCode::ACCEPTED {
        return Err(format!("notifications/initialized answered {status}"));
    }
    Ok(session)
}

/// The capabilities the 2025-era clients declare
/// (`LOAD_MATRIX_CAPABILITIES`, default none).
fn capabilities() -> Result<Value, String> {
    match std::env::var("LOAD_MATRIX_CAPABILITIES") {
        Ok(text) => {
            serde_json::from_str(&text).map_err(|e| format!("LOAD_MATRIX_CAPABILITIES: {e}"))
        }
        Err(_) => Ok(json!({})),
    }
}

/// Whether the clients ask for progress (`LOAD_MATRIX_PROGRESS_TOKEN`).
fn progress_token() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOAD_MATRIX_PROGRESS_TOKEN").is_ok_and(|v| v == "1"))
}

/// One `tools/call` of `era`, its answer read to the end and checked to
/// echo `message`.
async fn call(
    client: &reqwest::Client,
    url: &str,
    era: Era,
    session: Option<&str>,
    id: usize,
    message: &str,
) -> Result<Kind, String> {
    let mut params = json!({"name": "echo", "arguments": {"message": message}});
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    match era {
        Era::Stateless2026 => {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "load-matrix", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            });
            if progress_token() {
                params["_meta"]["progressToken"] = json!(id);
            }
            request = request
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "echo");
        }
        Era::Stdio2025 => return Err("the stdio era is not called over HTTP".to_owned()),
        Era::Sdk(sdk) => return Err(format!("{} makes its own calls", sdk.name())),
        Era::Sse2025 | Era::Json2025 => {
            if progress_token() {
                params["_meta"] = json!({"progressToken": id});
            }
            request = request.header("mcp-protocol-version", LEGACY_VERSION);
            if let Some(session) = session {
                request = request.header("mcp-session-id", session);
            }
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let response = request
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let (answer, kind) = read_answer(response, id).await?;
    echoes(&answer, message)?;
    Ok(kind)
}

/// One `tools/call` over a stdio pipe, checked to echo `message`.
async fn call_stdio(stdio: &StdioClient, message: &str) -> Result<Kind, String> {
    let mut params = json!({"name": "echo", "arguments": {"message": message}});
    if progress_token() {
        // Unique among the calls sharing the pipe, as a token must be.
        params["_meta"] = json!({"progressToken": message});
    }
    let answer = stdio.request("tools/call", params).await?;
    echoes(&answer, message)?;
    Ok(Kind::Line)
}

/// `Ok` when `answer` is a successful result whose text echoes `message`.
fn echoes(answer: &Value, message: &str) -> Result<(), String> {
    let echoed = answer["result"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| block["text"].as_str())
        .any(|text| text.contains(message));
    if !echoed || answer["result"]["isError"] == Value::Bool(true) {
        return Err(format!("the call did not echo {message:?}: {answer}"));
    }
    Ok(())
}

/// Reads an answer to the end of its body and returns the JSON-RPC message
/// answering `id`: the whole body for JSON, the event carrying it for SSE.
async fn read_answer(response: reqwest::Response, id: usize) -> Result<(Value, Kind), String> {
    let status = response.status();
    let events = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    // To the end of the body: the next call on this connection cannot start
    // before it.
    let text = response.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("HTTP {status}: {text}"));
    }
    if !events {
        let message: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        return Ok((message, Kind::Json));
    }
    let mut data = String::new();
    for line in text.lines().chain(std::iter::once("")) {
        if let Some(rest) = line.strip_prefix("data:") {
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            data.push('\n');
        } else if line.is_empty() && !data.is_empty() {
            if let Ok(message) = serde_json::from_str::<Value>(&data)
                && message["id"] == json!(id)
            {
                return Ok((message, Kind::Sse));
            }
            data.clear();
        }
    }
    Err(format!("no answer to {id} in the event stream: {text}"))
}

// ---------------------------------------------------------------------------
// /proc.

/// CPU seconds (user + system) spent by the load client, the gateway
/// and the server behind it over one run.
#[derive(Default, Clone, Copy)]
struct Cpu {
    /// This process: the clients (the echo servers are processes of their
    /// own).
    client: f64,
    /// The gateway's process alone, without its stdio upstream.
    gateway: f64,
    /// The server that answered: the direct echo, or the gateway's upstream.
    server: f64,
}

impl Cpu {
    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            client: self.client - before.client,
            gateway: self.gateway - before.gateway,
            server: self.server - before.server,
        }
    }

    fn add(&mut self, other: Cpu) {
        self.client += other.client;
        self.gateway += other.gateway;
        self.server += other.server;
    }
}

/// Which server process answers a run's calls.
#[derive(Clone, Copy)]
enum ServerProcess {
    /// Not measured (warm-up).
    None,
    /// A process of its own (an HTTP echo).
    Alone(u32),
    /// The descendants of this process (the gateway's stdio upstream).
    ChildrenOf(u32),
}

/// The processes whose CPU a run reads.
struct Watch {
    /// The client's process when it is not this one (an SDK's driver).
    client: Option<u32>,
    gateway: Option<u32>,
    server: ServerProcess,
}

impl Watch {
    /// The same processes, with `pid` as the client.
    fn with_client(&self, pid: u32) -> Watch {
        Watch {
            client: Some(pid),
            gateway: self.gateway,
            server: self.server,
        }
    }

    fn read(&self) -> Cpu {
        let table = processes();
        let cpu = |p: &u32| table.get(p).map_or(0.0, |(_, cpu)| *cpu);
        let gateway = self.gateway.map_or(0.0, |pid| cpu(&pid));
        let server = match self.server {
            ServerProcess::None => 0.0,
            ServerProcess::Alone(pid) => cpu(&pid),
            ServerProcess::ChildrenOf(pid) => descendants(&table, pid).iter().map(cpu).sum(),
        };
        Cpu {
            client: cpu(&self.client.unwrap_or_else(std::process::id)),
            gateway,
            server,
        }
    }
}

/// Every process below `pid`, however deep.
fn descendants(table: &HashMap<u32, (u32, f64)>, pid: u32) -> Vec<u32> {
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            table
                .iter()
                .filter(|(_, (ppid, _))| *ppid == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    tree.split_off(1)
}

/// Every process: pid → (parent pid, user + system CPU seconds).
fn processes() -> HashMap<u32, (u32, f64)> {
    let mut table = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return table;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised command name: state, ppid, …;
        // utime and stime are the 14th and 15th overall, in clock ticks.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
        if let (Some(ppid), Some(user), Some(system)) = (field(1), field(11), field(12)) {
            table.insert(pid, (ppid as u32, (user + system) / 100.0));
        }
    }
    table
}

/// Resets `pid`'s peak RSS (`VmHWM`) to its current RSS.
fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// The 1-minute load average.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
