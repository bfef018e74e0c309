//! The load driver shared by the HTTP load benches (`load_bench` here,
//! `gateway_load` in the `portcullis` crate, which includes this file by
//! path): concurrent workers posting `tools/call` on one keep-alive client,
//! latencies, and the served process's CPU and memory from `/proc`.
//!
//! Not an example itself: Cargo builds `examples/*.rs` and
//! `examples/*/main.rs`, and this directory has no `main.rs`.

// Each bench uses its own part of the driver.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The concurrency levels every bench reports.
pub const LEVELS: [usize; 3] = [1, 8, 32];

/// What each call carries besides the echo tool's arguments.
#[derive(Clone, Default)]
pub struct CallShape {
    /// Extra HTTP headers on every POST.
    pub headers: Vec<(&'static str, &'static str)>,
    /// The request's `params._meta`, if any.
    pub meta: Option<Value>,
}

impl CallShape {
    /// A stateless 2026-07-28 call as a one-shot client sends it: the
    /// protocol in per-request `_meta` and the standard headers, no session.
    pub fn stateless_2026() -> Self {
        CallShape {
            headers: vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "echo"),
            ],
            meta: Some(json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "load-driver", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            })),
        }
    }
}

/// One level's measurements against one endpoint.
pub struct Level {
    /// Calls completed per second of wall time.
    pub calls_per_second: f64,
    /// Median latency.
    pub p50_ms: f64,
    /// 99th percentile latency.
    pub p99_ms: f64,
    /// The served process's user + system CPU per call.
    pub cpu_per_call_us: f64,
}

/// Runs `calls` calls at `concurrency` against `url` and measures them,
/// with `pid`'s CPU time over the run.
pub async fn measure(
    client: &reqwest::Client,
    url: &str,
    shape: &CallShape,
    concurrency: usize,
    calls: usize,
    pid: u32,
) -> Result<Level, Box<dyn std::error::Error>> {
    let cpu_before = cpu_seconds(pid);
    let started = Instant::now();
    let mut latencies = run(client, url, shape, concurrency, calls).await?;
    let elapsed = started.elapsed();
    let cpu = cpu_seconds(pid) - cpu_before;
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    Ok(Level {
        calls_per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: ms(pct(0.50)),
        p99_ms: ms(pct(0.99)),
        cpu_per_call_us: cpu / latencies.len() as f64 * 1e6,
    })
}

/// `concurrency` workers, each posting its share of `calls` one after
/// another; every answer must be a result echoing "hi". Returns each
/// call's latency.
pub async fn run(
    client: &reqwest::Client,
    url: &str,
    shape: &CallShape,
    concurrency: usize,
    calls: usize,
) -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
    let per_worker = calls.div_ceil(concurrency);
    let workers = (0..concurrency).map(|worker| {
        let client = client.clone();
        let url = url.to_owned();
        let shape = shape.clone();
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_worker);
            for i in 0..per_worker {
                let mut params = json!({"name": "echo", "arguments": {"message": "hi"}});
                if let Some(meta) = &shape.meta {
                    params["_meta"] = meta.clone();
                }
                let body = json!({"jsonrpc": "2.0", "id": worker * per_worker + i,
                    "method": "tools/call", "params": params});
                let started = Instant::now();
                let mut request = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream");
                for (name, value) in &shape.headers {
                    request = request.header(*name, *value);
                }
                let response = request
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

/// A duration in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// (VmRSS, VmHWM) of `pid` in MiB, from /proc (Linux only; zeros elsewhere).
pub fn memory(pid: u32) -> (f64, f64) {
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
pub fn cpu_seconds(pid: u32) -> f64 {
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

/// The yardstick: rmcp's Streamable HTTP service, stateless with JSON
/// responses, one read-only echo tool and nothing of ours. Prints its URL
/// and serves until killed (the direct upstream of `gateway_load`, the bare
/// baseline of `load_bench`).
pub async fn serve_rmcp_echo() -> Result<(), Box<dyn std::error::Error>> {
    use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    let service = StreamableHttpService::new(
        || Ok(RmcpEcho),
        std::sync::Arc::new(NeverSessionManager::default()),
        config,
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

/// The echo handler, written against rmcp alone.
#[derive(Clone)]
pub struct RmcpEcho;

impl rmcp::ServerHandler for RmcpEcho {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let tool: rmcp::model::Tool = serde_json::from_value(json!({
            "name": "echo",
            "description": "Returns the message.",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}
        }))
        .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))?;
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![tool]))
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
