//! Load bench for the HTTP surface: a trivial read-only tool served by
//! `portcullis-server` in a child process, driven over loopback at several
//! concurrencies. Reports calls per second, p50/p99 latency, the server's
//! CPU time per call and its peak RSS (VmHWM).
//!
//! ```text
//! cargo run --release -p portcullis-server --example load_bench [-- CALLS_PER_LEVEL]
//! ```
//!
//! Each call is one stateless `tools/call` POST (JSON response), through
//! every guard, validation and framing, on a shared keep-alive client. The
//! same load is then run against a bare rmcp server (the same rmcp service
//! and settings, no guards, no validation, no framing) so the cost of the
//! edge shows as a ratio.

use std::time::{Duration, Instant};

use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_server::{CallContext, HttpOptions, ToolError, ToolServer, serve_http};
use serde_json::{Value, json};

const LEVELS: [usize; 3] = [1, 8, 32];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Runtime::new()?;
    match args.get(1).map(String::as_str) {
        Some("serve") => return runtime.block_on(serve()),
        Some("serve-bare") => return runtime.block_on(serve_bare()),
        _ => {}
    }
    let calls: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(4000);
    runtime.block_on(drive(calls))
}

/// The server side: one echo tool, stateless HTTP on a free loopback port.
async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let tools = ToolServer::builder()
        .tool(
            Tool::new("echo")
                .with_annotations(ToolAnnotations::read_only(true))
                .with_input_schema(
                    json!({"type": "object", "properties": {"message": {"type": "string"}}}),
                ),
            |args: Value, _: CallContext| async move {
                Ok::<_, ToolError>(ToolResult::text(
                    args["message"].as_str().unwrap_or_default(),
                ))
            },
        )
        .build()?;
    let server = serve_http(tools, HttpOptions::default()).await?;
    println!("{}", server.url());
    server.wait().await;
    Ok(())
}

/// The baseline: rmcp's Streamable HTTP service with the same settings and
/// a hand-written echo handler, nothing of ours in between.
async fn serve_bare() -> Result<(), Box<dyn std::error::Error>> {
    use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    let service = StreamableHttpService::new(
        || Ok(Bare),
        std::sync::Arc::new(NeverSessionManager::default()),
        config,
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

#[derive(Clone)]
struct Bare;

impl rmcp::ServerHandler for Bare {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let text = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("message"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Ok(
            rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)])
                .into(),
        )
    }
}

async fn drive(calls: usize) -> Result<(), Box<dyn std::error::Error>> {
    println!("## portcullis-server (guards, validation, framing)");
    let ours = drive_one("serve", calls).await?;
    println!("\n## bare rmcp (same service settings, nothing of ours)");
    let bare = drive_one("serve-bare", calls).await?;
    println!("\n| concurrency | throughput ratio (ours / bare) | p50 added |");
    println!("|---|---|---|");
    for ((c, ours), (_, bare)) in ours.iter().zip(&bare) {
        println!(
            "| {c} | {:.2}x | {:+.3} ms |",
            ours.0 / bare.0,
            ours.1 - bare.1
        );
    }
    Ok(())
}

/// Runs every level against one server mode; returns (calls/s, p50 ms) per level.
async fn drive_one(
    mode: &str,
    calls: usize,
) -> Result<Vec<(usize, (f64, f64))>, Box<dyn std::error::Error>> {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .arg(mode)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("no pid")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let url = tokio::io::BufReader::new(stdout)
        .lines()
        .next_line()
        .await?
        .ok_or("server printed no URL")?;
    let client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let idle = memory(pid);
    println!("server pid {pid}, {url}; idle RSS {:.1} MiB", idle.0);
    println!("| concurrency | calls | calls/s | p50 | p99 | server CPU/call | server peak RSS |");
    println!("|---|---|---|---|---|---|---|");
    // Warm-up: connections, allocator, lazy statics.
    run(&client, &url, 8, 400).await?;
    let mut summary = Vec::new();
    for concurrency in LEVELS {
        let cpu_before = cpu_seconds(pid);
        let started = Instant::now();
        let mut latencies = run(&client, &url, concurrency, calls).await?;
        let elapsed = started.elapsed();
        let cpu = cpu_seconds(pid) - cpu_before;
        latencies.sort();
        let pct =
            |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        println!(
            "| {concurrency} | {} | {:.0} | {:.3} ms | {:.3} ms | {:.1} µs | {:.1} MiB |",
            latencies.len(),
            latencies.len() as f64 / elapsed.as_secs_f64(),
            ms(pct(0.50)),
            ms(pct(0.99)),
            cpu / latencies.len() as f64 * 1e6,
            memory(pid).1,
        );
        summary.push((
            concurrency,
            (
                latencies.len() as f64 / elapsed.as_secs_f64(),
                ms(pct(0.50)),
            ),
        ));
    }
    child.kill().await?;
    Ok(summary)
}

async fn run(
    client: &reqwest::Client,
    url: &str,
    concurrency: usize,
    calls: usize,
) -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
    let per_worker = calls.div_ceil(concurrency);
    let workers = (0..concurrency).map(|worker| {
        let client = client.clone();
        let url = url.to_owned();
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_worker);
            for i in 0..per_worker {
                let body = json!({"jsonrpc": "2.0", "id": worker * per_worker + i, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"message": "hi"}}});
                let started = Instant::now();
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .body(body.to_string())
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                let status = response.status();
                let text = response.text().await.map_err(|e| e.to_string())?;
                latencies.push(started.elapsed());
                if !status.is_success() || !text.contains("\"result\"") || !text.contains("hi") {
                    return Err(format!("bad answer {status}: {text}"));
                }
            }
            Ok::<_, String>(latencies)
        })
    });
    let mut all = Vec::with_capacity(calls);
    for worker in futures::future::join_all(workers).await {
        all.extend(worker??);
    }
    Ok(all)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// (VmRSS, VmHWM) of `pid` in MiB, from /proc (Linux only; zeros elsewhere).
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// User + system CPU seconds used so far by `pid`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields overall, in clock ticks (100 per second on Linux).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}
