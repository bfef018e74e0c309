//! A gateway starting on a large catalogue: `portcullis serve --stdio` over
//! 50 stdio servers of 100 tools each (~1.2 kB descriptions, a
//! two-property schema, all read-only), with its default store (SQLite in
//! a temporary data directory).
//!
//! ```text
//! cargo build --release -p portcullis --bin portcullis --example start_scale
//! target/release/examples/start_scale [ROUNDS]      # default 5
//! ```
//!
//! The first start records the baselines and is not counted; each of
//! ROUNDS starts after it is timed from the spawn of the gateway to its
//! answer to `initialize` (every server connected, listed and checked
//! against its baseline, the tool server built) and to its first
//! `tools/list` answer, then further `tools/list`s alone, one after the
//! other (`START_SCALE_LISTS` of them, default 1; their median time and the
//! gateway's CPU per list are printed); the gateway's own CPU (user +
//! system of its process from `/proc/PID/stat`, its children not counted,
//! 10 ms ticks), `VmRSS` and `VmHWM` are read right after the first list
//! and its `VmRSS` and `RssAnon` again after 2 s idle. Medians printed
//! last.
//!
//! Each server is a small `sh` script answering `initialize`, `tools/list`
//! (the same listing for every server) and `tools/call`. `START_SCALE_SERVERS`
//! and `START_SCALE_TOOLS` change the shape; `PORTCULLIS_BIN` is the gateway
//! (default: `portcullis` beside the examples directory). Linux only
//! (`/proc`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod gateway_process;
#[path = "../../portcullis-server/examples/load_driver/mod.rs"]
mod load_driver;

const SERVER_SH: &str = r#"#!/bin/sh
tools=$1
while IFS= read -r line; do
  case $line in *'"id":'*) ;; *) continue ;; esac
  rest=${line#*\"id\":}; id=${rest%%[,\}]*}
  rest=${line#*\"method\":\"}; method=${rest%%\"*}
  case $method in
    initialize)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"pad","version":"1"}}}\n' "$id" ;;
    tools/list)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":' "$id"; cat "$tools"; printf '}}\n' ;;
    tools/call)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"ok"}]}}\n' "$id" ;;
    *)
      printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id" ;;
  esac
done
"#;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Writes the script, the listing and the config into `dir`.
fn prepare(dir: &Path, servers: usize, tools: usize) -> Result<PathBuf, String> {
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    write("server.sh", SERVER_SH)?;
    let listing: Vec<Value> = (0..tools)
        .map(|i| {
            json!({
                "name": format!("tool_{i}"),
                "description": format!("Padding tool number {i}. {}", "Lorem ipsum dolor sit amet. ".repeat(40)),
                "inputSchema": {"type": "object", "properties": {
                    "payload": {"type": "string", "description": "What to send. ".repeat(20)},
                    "count": {"type": "integer", "description": "How many."}
                }, "required": ["payload"]},
                "annotations": {"readOnlyHint": true}
            })
        })
        .collect();
    write("tools.json", &Value::from(listing).to_string())?;
    let quoted = |path: &Path| Value::from(path.to_string_lossy().into_owned()).to_string();
    let mut config = format!("[gateway]\ndata_dir = {}\n", quoted(&dir.join("data")));
    for s in 0..servers {
        config.push_str(&format!(
            "\n[upstreams.s{s}]\ntype = \"stdio\"\ncommand = \"sh\"\nargs = [{}, {}]\n",
            quoted(&dir.join("server.sh")),
            quoted(&dir.join("tools.json"))
        ));
    }
    write("portcullis.toml", &config)?;
    Ok(dir.join("portcullis.toml"))
}

/// `(field, kB)` pairs of `/proc/PID/status`.
fn status_kb(pid: u32, fields: &[&str]) -> Vec<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    fields
        .iter()
        .map(|field| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

struct Start {
    initialized: Duration,
    listed: Duration,
    cpu_listed: Duration,
    tools: usize,
    second_list: Duration,
    cpu_per_list: Duration,
    rss_listed: u64,
    hwm_listed: u64,
    rss_idle: u64,
    anon_idle: u64,
}

fn start(bin: &Path, config: &Path, lists: usize) -> Result<Start, String> {
    let began = Instant::now();
    let mut child = Command::new(bin)
        .args(["serve", "--stdio", "--config"])
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let pid = child.id();
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut send = |message: Value| {
        writeln!(stdin, "{message}")
            .and_then(|()| stdin.flush())
            .map_err(|e| e.to_string())
    };
    let mut answer = || -> Result<Value, String> {
        let mut line = String::new();
        stdout.read_line(&mut line).map_err(|e| e.to_string())?;
        serde_json::from_str(&line).map_err(|e| format!("{e}: {line:.200}"))
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "start_scale", "version": "1"}}}),
    )?;
    answer()?;
    let initialized = began.elapsed();
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))?;
    let list = answer()?;
    let listed = began.elapsed();
    let tools = list["result"]["tools"].as_array().map_or(0, Vec::len);
    let cpu_listed = Duration::from_secs_f64(load_driver::cpu_seconds(pid));
    let at_list = status_kb(pid, &["VmRSS", "VmHWM"]);
    let mut again = Vec::with_capacity(lists);
    for id in 0..lists {
        let sent = Instant::now();
        send(json!({"jsonrpc": "2.0", "id": 3 + id, "method": "tools/list"}))?;
        answer()?;
        again.push(ms(sent.elapsed()));
    }
    let second_list = Duration::from_secs_f64(median(again) / 1e3);
    let cpu_per_list = Duration::from_secs_f64(
        (load_driver::cpu_seconds(pid) - cpu_listed.as_secs_f64()) / lists.max(1) as f64,
    );
    std::thread::sleep(Duration::from_secs(2));
    let idle = status_kb(pid, &["VmRSS", "RssAnon"]);
    // The client closing stdin ends the gateway.
    drop(stdin);
    let _ = child.wait();
    Ok(Start {
        initialized,
        listed,
        cpu_listed,
        tools,
        second_list,
        cpu_per_list,
        rss_listed: at_list[0],
        hwm_listed: at_list[1],
        rss_idle: idle[0],
        anon_idle: idle[1],
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> Result<(), String> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(5);
    let servers = env_number("START_SCALE_SERVERS", 50);
    let tools = env_number("START_SCALE_TOOLS", 100);
    let lists = env_number("START_SCALE_LISTS", 1);
    let bin = gateway_process::binary()?;
    let dir = std::env::temp_dir().join(format!("portcullis-start-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let config = prepare(&dir, servers, tools)?;
    println!(
        "{servers} stdio servers × {tools} tools, SQLite store; the first start records the baselines"
    );
    start(&bin, &config, 1)?;
    let mut starts = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let s = start(&bin, &config, lists)?;
        println!(
            "  initialize {:7.1} ms  first tools/list {:7.1} ms ({} tools, gateway CPU {:6.1} ms)  again {:6.1} ms (CPU {:5.1})  \
             RSS {:6.1} MiB (peak {:6.1})  after 2 s idle {:6.1} MiB ({:6.1} anonymous)",
            ms(s.initialized),
            ms(s.listed),
            s.tools,
            ms(s.cpu_listed),
            ms(s.second_list),
            ms(s.cpu_per_list),
            mib(s.rss_listed),
            mib(s.hwm_listed),
            mib(s.rss_idle),
            mib(s.anon_idle),
        );
        starts.push(s);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let of = |f: fn(&Start) -> f64| median(starts.iter().map(f).collect());
    println!(
        "medians: initialize {:.1} ms, first tools/list {:.1} ms (gateway CPU {:.1} ms), again {:.1} ms (CPU {:.1}), \
         RSS {:.1} MiB (peak {:.1}), idle {:.1} MiB ({:.1} anonymous)",
        of(|s| ms(s.initialized)),
        of(|s| ms(s.listed)),
        of(|s| ms(s.cpu_listed)),
        of(|s| ms(s.second_list)),
        of(|s| ms(s.cpu_per_list)),
        of(|s| mib(s.rss_listed)),
        of(|s| mib(s.hwm_listed)),
        of(|s| mib(s.rss_idle)),
        of(|s| mib(s.anon_idle)),
    );
    Ok(())
}
