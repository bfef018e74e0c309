//! Gateway load bench: an rmcp echo upstream over Streamable HTTP, driven
//! directly and through `portcullis serve`, side by side in one run, at 1, 8
//! and 32 concurrent clients.
//!
//! ```text
//! cargo build --release -p portcullis --bins --examples
//! target/release/examples/gateway_load [CALLS_PER_LEVEL]
//! ```
//!
//! The gateway binary is looked for beside the examples directory
//! (`target/release/portcullis`); `PORTCULLIS_BIN` overrides it. Each call
//! is one stateless 2026-07-28 `tools/call` POST with a JSON response, on a shared
//! keep-alive client. The direct and gateway runs of a level follow each
//! other, so both see the same machine. Reported per level: calls/s of
//! each and their ratio, p50 of each and the latency the gateway adds, the
//! gateway's CPU time per call (user + system, from `/proc`), and the
//! gateway's RSS idle (after connecting, before load) and peak (`VmHWM`).
//!
//! The gateway's store is in memory (`GATEWAY_LOAD_STORE=sqlite` for the
//! default SQLite file, which then also takes one audit record a call).
//! The gateway runs with its default logging (one info line per call on
//! stderr, read and dropped here); set `RUST_LOG=warn` to measure without
//! it. `GATEWAY_LOAD_WORKERS=N` runs the gateway alone with N tokio worker
//! threads (`TOKIO_WORKER_THREADS`), the driver and upstream unchanged.

// The driver `load_bench` uses too, so both benches load the same way.
#[path = "../../portcullis-server/examples/load_driver/mod.rs"]
mod load_driver;
use load_driver::{CallShape, LEVELS, cpu_seconds, measure, memory, run};

mod gateway_process;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Runtime::new()?;
    if args.get(1).map(String::as_str) == Some("upstream") {
        return runtime.block_on(load_driver::serve_rmcp_echo());
    }
    let calls: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(4000);
    runtime.block_on(drive(calls))
}

async fn drive(calls: usize) -> Result<(), Box<dyn std::error::Error>> {
    use tokio::io::AsyncBufReadExt;
    let exe = std::env::current_exe()?;
    let mut upstream = tokio::process::Command::new(&exe)
        .arg("upstream")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let upstream_pid = upstream.id().ok_or("no upstream pid")?;
    let upstream_url = tokio::io::BufReader::new(upstream.stdout.take().ok_or("no stdout")?)
        .lines()
        .next_line()
        .await?
        .ok_or("the upstream printed no URL")?;

    let dir = tempfile::tempdir()?;
    let config = dir.path().join("portcullis.toml");
    // The store holds the trust baseline and the audit trail (one record a
    // call): in memory by default here, or the real default, SQLite in the
    // data directory, with GATEWAY_LOAD_STORE=sqlite.
    let store = match std::env::var("GATEWAY_LOAD_STORE").as_deref() {
        Ok("sqlite") => "sqlite",
        _ => "memory",
    };
    std::fs::write(
        &config,
        format!(
            "[gateway]\nstore = \"{store}\"\nprefix = \"never\"\n\n[upstreams.echo]\ntype = \"streamable-http\"\nurl = \"{upstream_url}\"\n"
        ),
    )?;
    let bin = gateway_process::binary()?;
    let mut command = tokio::process::Command::new(&bin);
    if let Ok(workers) = std::env::var("GATEWAY_LOAD_WORKERS") {
        command.env("TOKIO_WORKER_THREADS", workers);
    }
    let gateway_process::Served {
        child: mut gateway,
        pid: gateway_pid,
        url: gateway_url,
    } = gateway_process::serve(command, &bin, &config).await?;

    let client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    // Warm-up: connections, allocator, lazy statics, both paths.
    let shape = CallShape::stateless_2026();
    run(&client, &upstream_url, &shape, 8, 400).await?;
    run(&client, &gateway_url, &shape, 8, 400).await?;
    let idle = memory(gateway_pid);

    println!(
        "upstream {upstream_url} (pid {upstream_pid}); gateway {gateway_url} (pid {gateway_pid})"
    );
    println!(
        "{calls} calls per level; store {store}; gateway RSS idle {:.1} MiB\n",
        idle.0
    );
    println!(
        "| c | direct calls/s | gateway calls/s | ratio | direct p50 | gateway p50 | added p50 | gateway p99 | gateway CPU/call | upstream CPU/call (via gateway) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for concurrency in LEVELS {
        let direct = measure(
            &client,
            &upstream_url,
            &shape,
            concurrency,
            calls,
            upstream_pid,
        )
        .await?;
        let upstream_cpu = cpu_seconds(upstream_pid);
        let through = measure(
            &client,
            &gateway_url,
            &shape,
            concurrency,
            calls,
            gateway_pid,
        )
        .await?;
        let upstream_cpu = (cpu_seconds(upstream_pid) - upstream_cpu) / calls as f64 * 1e6;
        println!(
            "| {concurrency} | {:.0} | {:.0} | {:.2}x | {:.3} ms | {:.3} ms | {:+.3} ms | {:.3} ms | {:.0} µs | {:.0} µs |",
            direct.calls_per_second,
            through.calls_per_second,
            through.calls_per_second / direct.calls_per_second,
            direct.p50_ms,
            through.p50_ms,
            through.p50_ms - direct.p50_ms,
            through.p99_ms,
            through.cpu_per_call_us,
            upstream_cpu,
        );
    }
    println!(
        "\ngateway RSS: idle {:.1} MiB, peak {:.1} MiB",
        idle.0,
        memory(gateway_pid).1
    );
    // Stopped as an operator would (SIGTERM, a graceful exit), so a
    // profiler wrapped around it (PORTCULLIS_BIN pointing at a script that
    // runs valgrind, say) writes its results; killed if it does not stop.
    let _ = tokio::process::Command::new("kill")
        .args(["-TERM", &gateway_pid.to_string()])
        .status()
        .await;
    if tokio::time::timeout(std::time::Duration::from_secs(20), gateway.wait())
        .await
        .is_err()
    {
        let _ = gateway.kill().await;
    }
    let _ = upstream.kill().await;
    Ok(())
}
