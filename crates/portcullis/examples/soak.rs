//! Soak: `portcullis serve` under mixed load for a while, its stdio
//! upstream killed and its config rewritten again and again, and its
//! resources sampled to show they stay flat.
//!
//! ```text
//! cargo build -p portcullis --bin portcullis --example soak
//! target/debug/examples/soak [SECONDS]      # default 600
//! ```
//!
//! The gateway under test has two upstreams: `local`, the binary's own
//! `demo-upstream` over stdio, and `remote`, a second `portcullis serve`
//! (with its own demo child) over Streamable HTTP. Both on loopback; the
//! store is the default, SQLite in a temporary data directory.
//!
//! While it runs, `SOAK_WORKERS` (default 3) clients loop until the end,
//! each a short pause between calls: stateless 2026-07-28 `tools/list` and
//! `tools/call` of `echo`, `add`, `count` (with progress, so an event
//! stream) and `write_note`, on both upstreams, and initialize-era sessions
//! (initialize, `tools/list`, a call, DELETE). Every SECONDS/30 (at least
//! 8 s) the stdio child is killed with SIGKILL and the gateway must start a
//! new one; every SECONDS/40 (at least 6 s) the config is rewritten, cycling
//! through the three kinds of reload (gateway settings only, one
//! upstream's filter in place, every source reconnected).
//!
//! Every tenth of the run (at most every minute) it samples the gateway's
//! RSS (`VmRSS`), threads, open file descriptors and child processes
//! (zombies included) from `/proc`, once the children have settled after
//! a kill or reload. At the end it prints the table and fails (exit 1)
//! unless, against the first sample (taken after a tenth of the run, as
//! warm-up): the last RSS is within +30 %, the fds within +10 and the
//! children the same; and unless every request got an HTTP answer, every
//! kill was followed by a new child, every rewrite by a reload, and a
//! final round of every kind of call succeeds.
//!
//! `SOAK_TOLERATED_UNANSWERED=N` lets up to N requests go without an answer
//! (default 0; CI sets a few, see `.ci/run`).
//!
//! The binary is looked for beside the examples directory
//! (`target/debug/portcullis`); `PORTCULLIS_BIN` overrides it. Linux only
//! (`/proc`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

mod gateway_process;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let workers: usize = std::env::var("SOAK_WORKERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let runtime = tokio::runtime::Runtime::new()?;
    let passed = runtime.block_on(soak(Duration::from_secs(seconds.max(10)), workers))?;
    if !passed {
        std::process::exit(1);
    }
    Ok(())
}

/// One `portcullis serve`, its stderr lines counted by what they say.
struct Gateway {
    child: tokio::process::Child,
    pid: u32,
    url: String,
    lines: Arc<LineCounts>,
}

/// Counts of the gateway's stderr lines the soak watches for.
#[derive(Default)]
struct LineCounts {
    reloaded: AtomicU64,
    rejected: AtomicU64,
    errors: AtomicU64,
    /// The first few ERROR lines, to print.
    first_errors: std::sync::Mutex<Vec<String>>,
}

impl Gateway {
    /// Starts `portcullis serve`; its WARN and ERROR lines go to stderr
    /// after `label`.
    async fn start(bin: &Path, config: &Path, label: &'static str) -> Result<Gateway, Error> {
        let mut child = tokio::process::Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(config)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
        let pid = child.id().ok_or("no gateway pid")?;
        let mut stderr = tokio::io::BufReader::new(child.stderr.take().ok_or("no stderr")?).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                match stderr.next_line().await {
                    Ok(Some(line)) => {
                        if let Some(rest) = line.strip_prefix("portcullis: listening on ") {
                            return Ok(rest.split(';').next().unwrap_or_default().to_owned());
                        }
                    }
                    _ => return Err("the gateway exited before listening"),
                }
            }
        })
        .await
        .map_err(|_| "the gateway did not listen within 60 s")??;
        let lines = Arc::new(LineCounts::default());
        let counts = lines.clone();
        // Keep the pipe drained (a line a call) and count what matters.
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                if line.contains("config reloaded") {
                    counts.reloaded.fetch_add(1, Ordering::Relaxed);
                } else if line.contains("reload rejected") || line.contains("reload failed") {
                    counts.rejected.fetch_add(1, Ordering::Relaxed);
                    eprintln!("{label}: {line}");
                }
                if line.contains("ERROR") || line.contains("WARN") {
                    eprintln!("{label}: {line}");
                }
                if line.contains("ERROR") {
                    counts.errors.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut first) = counts.first_errors.lock()
                        && first.len() < 5
                    {
                        first.push(line);
                    }
                }
            }
        });
        Ok(Gateway {
            child,
            pid,
            url,
            lines,
        })
    }

    async fn stop(mut self) {
        let _ = tokio::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await;
        if tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The gateway config, variant `n % 4`. Each step to the next variant is a
/// different kind of reload: 0→1 gateway settings only (the tools
/// re-gated), 1→2 one upstream's filter (in place, the other connection
/// kept), 2→3 and 3→0 the disclosure settings (every source reconnected,
/// so a new stdio child).
fn config_text(bin: &Path, data: &Path, remote: &str, n: usize) -> String {
    let bin = bin.display().to_string().replace('\\', "\\\\");
    let data = data.display().to_string().replace('\\', "\\\\");
    let output = if n % 4 == 1 {
        "max_output_length = 50000\n"
    } else {
        ""
    };
    let filter = if n % 4 == 2 {
        "tools = { block = [\"write_note\"] }\n"
    } else {
        ""
    };
    let disclosure = if n % 4 == 3 {
        "\n[disclosure]\nbudget = 50000\n"
    } else {
        ""
    };
    format!(
        "[gateway]\nallow_write = true\nprefix = \"always\"\nreconnect_max_ms = 2000\ndata_dir = \"{data}\"\n{output}{disclosure}\n\
         [upstreams.local]\ntype = \"stdio\"\ncommand = \"{bin}\"\nargs = [\"demo-upstream\"]\n\n\
         [upstreams.remote]\ntype = \"streamable-http\"\nurl = \"{remote}\"\n{filter}"
    )
}

/// One resource sample of the gateway process.
#[derive(Clone, Debug)]
struct Sample {
    at: Duration,
    rss_kib: u64,
    threads: u64,
    fds: usize,
    children: usize,
    calls: u64,
}

fn status_field(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix(field)?
                    .trim_start_matches(':')
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count())
}

/// The processes whose parent is `pid`, zombies included (an unreaped
/// child is a leak too).
fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let child: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
        // The parent is the second field after the parenthesised name.
        let ppid: u32 = stat
            .rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == pid).then_some(child)
    })
    .collect()
}

/// Waits (at most `limit`) until the gateway's children are `want` on two
/// polls in a row; the children then.
async fn settled_children(pid: u32, want: usize, limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    let mut last = children(pid);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = children(pid);
        if now.len() == want && now == last || Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    ok: AtomicU64,
    /// Answered, but a tool error or JSON-RPC error (expected while the
    /// stdio child is being restarted).
    refused: AtomicU64,
    /// No HTTP answer, a non-2xx status, or an unreadable body.
    broken: AtomicU64,
}

/// What became of one request.
enum Outcome {
    Ok,
    Refused(String),
    Broken(String),
}

/// A JSON-RPC answer from a JSON or event-stream body: the message with an
/// `id` (the last, if several).
fn answer(body: &str, content_type: &str) -> Option<Value> {
    if content_type.starts_with("text/event-stream") {
        body.lines()
            .rev()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some() && m.get("method").is_none())
    } else {
        serde_json::from_str(body).ok()
    }
}

fn judge(message: &Value) -> Outcome {
    if let Some(error) = message.get("error") {
        return Outcome::Refused(error.to_string());
    }
    let result = &message["result"];
    if result.is_null() {
        return Outcome::Broken(format!("no result: {message}"));
    }
    if result["isError"] == json!(true) {
        return Outcome::Refused(result.to_string());
    }
    Outcome::Ok
}

/// One stateless 2026-07-28 request.
async fn stateless(client: &reqwest::Client, url: &str, mut message: Value) -> Outcome {
    let method = message["method"].as_str().unwrap_or_default().to_owned();
    let name = message["params"]["name"].as_str().map(str::to_owned);
    let meta = &mut message["params"]["_meta"];
    if !meta.is_object() {
        *meta = json!({});
    }
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    send(request.body(message.to_string())).await.1
}

/// An error and its sources, as one line: reqwest's own message says
/// little ("error sending request"), its sources say why.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Sends a request; the session id it was given, if any, and the outcome.
async fn send(request: reqwest::RequestBuilder) -> (Option<String>, Outcome) {
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => return (None, Outcome::Broken(format!("no answer: {}", chain(&e)))),
    };
    let status = response.status();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = match response.text().await {
        Ok(body) => body,
        Err(e) => {
            return (
                session,
                Outcome::Broken(format!("body cut off: {}", chain(&e))),
            );
        }
    };
    if !status.is_success() {
        return (session, Outcome::Broken(format!("HTTP {status}: {body}")));
    }
    if status == reqwest::StatusCode::ACCEPTED {
        return (session, Outcome::Ok);
    }
    match answer(&body, &content_type) {
        Some(message) => (session, judge(&message)),
        None => (
            session,
            Outcome::Broken(format!("no JSON-RPC answer: {body}")),
        ),
    }
}

/// One initialize-era session: initialize, initialized, `tools/list`, a
/// call of `tool`, DELETE. The first outcome that is not OK, or OK.
async fn session(client: &reqwest::Client, url: &str, tool: &str, args: Value) -> Outcome {
    let post = |session: Option<&str>, body: Value| {
        let mut request = client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(id) = session {
            request = request
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", "2025-06-18");
        }
        request.body(body.to_string())
    };
    let (id, outcome) = send(post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "soak", "version": "1"}}}),
    ))
    .await;
    let Outcome::Ok = outcome else {
        return outcome;
    };
    let Some(id) = id else {
        return Outcome::Broken("initialize gave no session id".into());
    };
    let steps = [
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": tool, "arguments": args}}),
    ];
    let mut result = Outcome::Ok;
    for step in steps {
        let (_, outcome) = send(post(Some(&id), step)).await;
        if !matches!(outcome, Outcome::Ok) {
            result = outcome;
            break;
        }
    }
    let closed = client
        .delete(url)
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await;
    match closed {
        Ok(r) if r.status().is_success() => result,
        Ok(r) => Outcome::Broken(format!("DELETE of the session: HTTP {}", r.status())),
        Err(e) => Outcome::Broken(format!("DELETE of the session: {e}")),
    }
}

/// The `i`-th call of the mix.
async fn mixed_call(client: &reqwest::Client, url: &str, i: u64) -> Outcome {
    let call = |name: &str, arguments: Value| json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    match i % 9 {
        0 => {
            stateless(
                client,
                url,
                json!({"jsonrpc": "2.0", "id": i, "method": "tools/list"}),
            )
            .await
        }
        1 => {
            stateless(
                client,
                url,
                call("local__echo", json!({"text": format!("soak {i}")})),
            )
            .await
        }
        2 => {
            stateless(
                client,
                url,
                call("remote__echo", json!({"text": format!("soak {i}")})),
            )
            .await
        }
        3 => stateless(client, url, call("local__add", json!({"a": i, "b": 2}))).await,
        4 => stateless(client, url, call("remote__add", json!({"a": 1.5, "b": i}))).await,
        5 => {
            let mut message = call("local__count", json!({"n": 3}));
            message["params"]["_meta"] = json!({"progressToken": format!("p{i}")});
            stateless(client, url, message).await
        }
        6 => stateless(client, url, call("local__write_note", json!({"text": "n"}))).await,
        7 => session(client, url, "local__echo", json!({"text": "in a session"})).await,
        _ => session(client, url, "remote__add", json!({"a": 1, "b": 2})).await,
    }
}

async fn worker(
    client: reqwest::Client,
    url: String,
    tally: Arc<Tally>,
    first: u64,
    deadline: Instant,
    broken: Arc<std::sync::Mutex<BTreeMap<String, u64>>>,
) {
    let began = Instant::now();
    let mut i = first;
    while Instant::now() < deadline {
        let outcome = mixed_call(&client, &url, i).await;
        tally.calls.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Outcome::Ok => tally.ok.fetch_add(1, Ordering::Relaxed),
            Outcome::Refused(_) => tally.refused.fetch_add(1, Ordering::Relaxed),
            Outcome::Broken(why) => {
                eprintln!(
                    "soak: at {:.1}s, call kind {}: {why}",
                    began.elapsed().as_secs_f64(),
                    i % 9
                );
                if let Ok(mut seen) = broken.lock() {
                    let key: String = why.chars().take(160).collect();
                    *seen.entry(key).or_default() += 1;
                }
                tally.broken.fetch_add(1, Ordering::Relaxed)
            }
        };
        i += 1;
        // Load, not a flood: the machine is shared.
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

async fn soak(run: Duration, workers: usize) -> Result<bool, Error> {
    let bin = gateway_process::binary()?;
    let bin = std::path::absolute(bin)?;
    let dir = tempfile::tempdir()?;

    // The HTTP upstream: another gateway over its own demo child.
    let remote_config = dir.path().join("remote.toml");
    std::fs::write(
        &remote_config,
        format!(
            "[gateway]\nstore = \"memory\"\nallow_write = true\nprefix = \"never\"\n\n[upstreams.demo]\ntype = \"stdio\"\ncommand = \"{}\"\nargs = [\"demo-upstream\"]\n",
            bin.display().to_string().replace('\\', "\\\\")
        ),
    )?;
    let remote = Gateway::start(&bin, &remote_config, "upstream gateway").await?;

    let config = dir.path().join("portcullis.toml");
    let data = dir.path().join("data");
    let mut variant = 0;
    std::fs::write(&config, config_text(&bin, &data, &remote.url, variant))?;
    let gateway = Gateway::start(&bin, &config, "gateway").await?;
    let pid = gateway.pid;
    let url = gateway.url.clone();
    let start_children = settled_children(pid, 1, Duration::from_secs(30)).await;
    if start_children.len() != 1 {
        return Err(format!("the gateway has {} children, not 1", start_children.len()).into());
    }

    let kill_every = (run / 30).max(Duration::from_secs(8));
    let reload_every = (run / 40).max(Duration::from_secs(6));
    let sample_every = (run / 10).min(Duration::from_secs(60));
    println!(
        "soak: {}s, {workers} workers; gateway {url} (pid {pid}), HTTP upstream {} (pid {}); \
         the stdio child killed every {}s, the config rewritten every {}s, a sample every {}s",
        run.as_secs(),
        remote.url,
        remote.pid,
        kill_every.as_secs(),
        reload_every.as_secs(),
        sample_every.as_secs()
    );

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let tally = Arc::new(Tally::default());
    let broken = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let began = Instant::now();
    let deadline = began + run;
    let mut tasks = Vec::new();
    for w in 0..workers {
        tasks.push(tokio::spawn(worker(
            client.clone(),
            url.clone(),
            tally.clone(),
            w as u64 * 1000,
            deadline,
            broken.clone(),
        )));
    }

    let mut samples: Vec<Sample> = Vec::new();
    let mut kills = 0u64;
    let mut kills_unanswered = 0u64;
    let mut rewrites = 0u64;
    let mut next_kill = began + kill_every;
    let mut next_reload = began + reload_every / 2;
    let mut next_sample = began + sample_every;
    while Instant::now() < deadline {
        let now = Instant::now();
        if now >= next_sample {
            next_sample += sample_every;
            // Sampled once the children have settled (a kill or a reload
            // may be under way); a child that never comes back, or one
            // that is never reaped, still shows.
            let settled = settled_children(pid, 1, Duration::from_secs(15)).await;
            samples.push(Sample {
                at: began.elapsed(),
                rss_kib: status_field(pid, "VmRSS"),
                threads: status_field(pid, "Threads"),
                fds: fd_count(pid),
                children: settled.len(),
                calls: tally.calls.load(Ordering::Relaxed),
            });
        }
        if now >= next_kill {
            next_kill += kill_every;
            let before = settled_children(pid, 1, Duration::from_secs(15)).await;
            if let Some(&child) = before.first() {
                let _ = tokio::process::Command::new("kill")
                    .args(["-KILL", &child.to_string()])
                    .status()
                    .await;
                kills += 1;
                // The gateway must notice and start a new child.
                let back = Instant::now() + Duration::from_secs(30);
                loop {
                    let now = children(pid);
                    if now.iter().any(|&c| c != child) {
                        break;
                    }
                    if Instant::now() >= back {
                        kills_unanswered += 1;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        if now >= next_reload {
            next_reload += reload_every;
            variant += 1;
            std::fs::write(&config, config_text(&bin, &data, &remote.url, variant))?;
            rewrites += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for task in tasks {
        let _ = task.await;
    }
    // Let the last rewrite be read (the file is looked at every second).
    tokio::time::sleep(Duration::from_secs(3)).await;

    // A final round: every kind of call must work now.
    let mut final_round = Vec::new();
    settled_children(pid, 1, Duration::from_secs(15)).await;
    for i in 0..9u64 {
        let mut outcome = mixed_call(&client, &url, i).await;
        // `write_note` may be blocked on `remote` right now, never on `local`.
        for _ in 0..20 {
            if matches!(outcome, Outcome::Ok) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            outcome = mixed_call(&client, &url, i).await;
        }
        match outcome {
            Outcome::Ok => {}
            Outcome::Refused(why) | Outcome::Broken(why) => {
                final_round.push(format!("call kind {i}: {why}"));
            }
        }
    }
    let reloads = gateway.lines.reloaded.load(Ordering::Relaxed);
    let rejected = gateway.lines.rejected.load(Ordering::Relaxed);
    let error_lines = gateway.lines.errors.load(Ordering::Relaxed);
    let end_children = children(pid).len();

    println!("\n| t (s) | RSS (MiB) | threads | fds | children | calls so far |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for s in &samples {
        println!(
            "| {} | {:.1} | {} | {} | {} | {} |",
            s.at.as_secs(),
            s.rss_kib as f64 / 1024.0,
            s.threads,
            s.fds,
            s.children,
            s.calls
        );
    }
    let calls = tally.calls.load(Ordering::Relaxed);
    let ok = tally.ok.load(Ordering::Relaxed);
    let refused = tally.refused.load(Ordering::Relaxed);
    let broke = tally.broken.load(Ordering::Relaxed);
    println!(
        "\ncalls: {calls} ({:.0}/s): {ok} ok, {refused} answered with an error (upstream restarting), {broke} without a proper answer",
        calls as f64 / run.as_secs_f64()
    );
    println!(
        "stdio child killed {kills} times ({kills_unanswered} not restarted within 30 s); config rewritten {rewrites} times, {reloads} reloads logged, {rejected} rejected; {error_lines} ERROR lines"
    );
    if let Ok(first) = gateway.lines.first_errors.lock() {
        for line in first.iter() {
            println!("  gateway: {line}");
        }
    }
    if let Ok(seen) = broken.lock() {
        for (why, n) in seen.iter() {
            println!("  {n} x {why}");
        }
    }

    let mut failures = Vec::new();
    match (samples.first(), samples.last()) {
        (Some(first), Some(last)) if samples.len() >= 3 => {
            if last.rss_kib as f64 > first.rss_kib as f64 * 1.3 {
                failures.push(format!(
                    "RSS grew over 30 %: {} KiB → {} KiB",
                    first.rss_kib, last.rss_kib
                ));
            }
            if last.fds > first.fds + 10 {
                failures.push(format!("fds grew: {} → {}", first.fds, last.fds));
            }
            if last.children != first.children {
                failures.push(format!(
                    "children changed: {} → {}",
                    first.children, last.children
                ));
            }
        }
        _ => failures.push(format!("only {} samples", samples.len())),
    }
    // A rare request with no answer was seen (2 in 54 000 over 10 min,
    // cause not yet known; see the closing note of the soak's issue): CI
    // tolerates a few so it does not flake, and says how many it saw.
    let tolerated: u64 = std::env::var("SOAK_TOLERATED_UNANSWERED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if broke > tolerated {
        failures.push(format!("{broke} requests got no proper answer"));
    } else if broke > 0 {
        println!("{broke} requests got no proper answer (tolerated: {tolerated})");
    }
    if ok < calls / 2 {
        failures.push(format!("only {ok} of {calls} calls succeeded"));
    }
    if kills == 0 || kills_unanswered > 0 {
        failures.push(format!(
            "{kills_unanswered} of {kills} kills not followed by a new child"
        ));
    }
    if reloads != rewrites || rejected > 0 {
        failures.push(format!(
            "{rewrites} rewrites, {reloads} reloads, {rejected} rejected"
        ));
    }
    if end_children != 1 {
        failures.push(format!("{end_children} children at the end"));
    }
    failures.extend(final_round);

    gateway.stop().await;
    remote.stop().await;
    if failures.is_empty() {
        println!("\nsoak passed: RSS, fds and children flat");
        Ok(true)
    } else {
        for failure in &failures {
            println!("SOAK FAILED: {failure}");
        }
        Ok(false)
    }
}
