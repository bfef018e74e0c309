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

use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_server::{CallContext, HttpOptions, ToolError, ToolServer, serve_http};
use serde_json::{Value, json};

mod load_driver;
use load_driver::{CallShape, LEVELS, measure, memory, run};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Runtime::new()?;
    match args.get(1).map(String::as_str) {
        Some("serve") => return runtime.block_on(serve()),
        Some("serve-bare") => return runtime.block_on(load_driver::serve_rmcp_echo()),
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
    let shape = CallShape::default();
    run(&client, &url, &shape, 8, 400).await?;
    let mut summary = Vec::new();
    for concurrency in LEVELS {
        let level = measure(&client, &url, &shape, concurrency, calls, pid).await?;
        println!(
            "| {concurrency} | {calls} | {:.0} | {:.3} ms | {:.3} ms | {:.1} µs | {:.1} MiB |",
            level.calls_per_second,
            level.p50_ms,
            level.p99_ms,
            level.cpu_per_call_us,
            memory(pid).1,
        );
        summary.push((concurrency, (level.calls_per_second, level.p50_ms)));
    }
    child.kill().await?;
    Ok(summary)
}
