//! The official SDKs' clients as load: what most agents and editors run
//! is not a hand-written client but one of these, with its own transport
//! code (connection reuse, the event streams it opens, the headers and
//! version it negotiates), so the matrix measures the gateway behind them
//! too.
//!
//! * `ts-sdk`: `@modelcontextprotocol/sdk` (TypeScript; Claude Code's and
//!   most Node agents' client), `StreamableHTTPClientTransport`, on the
//!   Node.js on `PATH` (or `LOAD_MATRIX_NODE`).
//! * `py-sdk`: the `mcp` Python SDK's `Client` given a URL (it asks for
//!   `server/discover` first and uses 2026-07-28 where the server takes
//!   it, `initialize` and a session otherwise), in `.peers/venv`.
//!
//! Both are installed in `.peers/` by `.ci/peers.sh`. Each run of a side
//! is one child process: it opens its clients (one session or stateless
//! client each) and warms them up, says `ready`, waits for a line on its
//! stdin, makes its calls (every answer must echo its message), prints
//! one JSON line with each call's latency as the SDK's caller sees it,
//! waits for another line, then ends its sessions, closes its clients and
//! exits. The process's start, its imports, the handshakes and the
//! sessions' end are outside the clock and outside the CPU read.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

/// Calls each client makes before it says it is ready (connections open,
/// the runtime's code warm).
const WARM_UP: usize = 20;

/// How long a driver may take to open its clients and warm them up.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// How long a driver may take to make its calls.
const CALLS_WITHIN: Duration = Duration::from_secs(600);

/// What is kept of a driver's stderr, for the error when it fails.
const STDERR_KEPT: usize = 2000;

/// Which SDK a driver runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Sdk {
    /// `@modelcontextprotocol/sdk` on Node.js.
    TypeScript,
    /// The `mcp` package on Python.
    Python,
}

/// The TypeScript driver, run as an ES module: `SDK_DIR URL CLIENTS CALLS
/// WARM_UP`.
const TYPESCRIPT: &str = r#"
const [sdk, url, clients, calls, warmUp] = process.argv.slice(1);
const { Client } = await import(sdk + '/dist/esm/client/index.js');
const { StreamableHTTPClientTransport } = await import(sdk + '/dist/esm/client/streamableHttp.js');
const open = [];
for (let i = 0; i < +clients; i++) {
  const client = new Client({ name: 'load-matrix', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  open.push(client);
}
let next = 0;
const call = async (client) => {
  const message = 'm' + next++;
  const result = await client.callTool({ name: 'echo', arguments: { message } });
  const echoed = (result.content ?? []).some((b) => typeof b.text === 'string' && b.text.includes(message));
  if (result.isError || !echoed) throw new Error(`the call did not echo ${message}: ${JSON.stringify(result)}`);
};
await Promise.all(open.map(async (c) => { for (let i = 0; i < +warmUp; i++) await call(c); }));
process.stdout.write('ready\n');
await new Promise((go) => process.stdin.once('data', go));
const each = Math.ceil(+calls / open.length);
const latencies = [];
const started = process.hrtime.bigint();
await Promise.all(open.map(async (c) => {
  for (let i = 0; i < each; i++) {
    const at = process.hrtime.bigint();
    await call(c);
    latencies.push(Number(process.hrtime.bigint() - at));
  }
}));
const elapsed = Number(process.hrtime.bigint() - started);
const protocol = open[0].transport?.protocolVersion ?? '';
process.stdout.write(JSON.stringify({ protocol, elapsed_ns: elapsed, latencies_ns: latencies }) + '\n');
await new Promise((end) => process.stdin.once('data', end));
// close() alone only aborts: the session's DELETE is terminateSession().
await Promise.all(open.map(async (c) => {
  await c.transport?.terminateSession?.().catch(() => {});
  await c.close();
}));
process.exit(0);
"#;

/// The Python driver: `URL CLIENTS CALLS WARM_UP`.
const PYTHON: &str = r#"
import asyncio, contextlib, json, sys, time
from mcp import Client

async def main():
    url, clients, calls, warm_up = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    counter = iter(range(1 << 62))
    async def call(client):
        message = f"m{next(counter)}"
        result = await client.call_tool("echo", {"message": message})
        echoed = any(message in (getattr(b, "text", "") or "") for b in result.content)
        if result.is_error or not echoed:
            raise SystemExit(f"the call did not echo {message}: {result}")
    async with contextlib.AsyncExitStack() as stack:
        opened = [await stack.enter_async_context(Client(url)) for _ in range(clients)]
        async def warm(client):
            for _ in range(warm_up):
                await call(client)
        await asyncio.gather(*(warm(c) for c in opened))
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        each = -(-calls // clients)
        latencies = []
        async def run(client):
            for _ in range(each):
                at = time.perf_counter_ns()
                await call(client)
                latencies.append(time.perf_counter_ns() - at)
        started = time.perf_counter_ns()
        await asyncio.gather(*(run(c) for c in opened))
        elapsed = time.perf_counter_ns() - started
        print(json.dumps({"protocol": opened[0].protocol_version or "", "elapsed_ns": elapsed,
                          "latencies_ns": latencies}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

asyncio.run(main())
"#;

/// A driver that has opened its clients and waits for [`Driver::go`].
pub struct Driver {
    sdk: Sdk,
    child: tokio::process::Child,
    pid: u32,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// The end of its stderr, read as it comes so a chatty driver never
    /// blocks on a full pipe, and the task reading it.
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<tokio::task::JoinHandle<()>>,
}

/// What one driver's calls measured.
pub struct Outcome {
    /// The protocol version its first client negotiated.
    pub protocol: String,
    /// From the first call's start to the last call's answer.
    pub elapsed: Duration,
    /// Each call, as the SDK's caller waited for it.
    pub latencies: Vec<Duration>,
}

impl Driver {
    /// Starts a driver of `sdk` with `clients` clients of `url`, to make
    /// `calls` calls in all once told to; returns when it is ready.
    pub async fn start(
        sdk: Sdk,
        peers: &Path,
        url: &str,
        clients: usize,
        calls: usize,
    ) -> Result<Driver, String> {
        let numbers = [clients.to_string(), calls.to_string(), WARM_UP.to_string()];
        let mut command = match sdk {
            Sdk::TypeScript => {
                let sdk_dir = peers.join("node_modules/@modelcontextprotocol/sdk");
                let mut command = tokio::process::Command::new(crate::peer_process::node());
                command
                    .args(["--input-type=module", "-e", TYPESCRIPT])
                    .arg(absolute(&sdk_dir)?);
                command
            }
            Sdk::Python => {
                let mut command =
                    tokio::process::Command::new(absolute(&peers.join("venv/bin/python"))?);
                command.args(["-c", PYTHON]);
                command
            }
        };
        let mut child = command
            .arg(url)
            .args(numbers)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: cannot start its driver: {e}", sdk.name()))?;
        let pid = child.id().ok_or("the driver has no pid")?;
        let stdin = child.stdin.take().ok_or("the driver has no stdin")?;
        let lines = BufReader::new(child.stdout.take().ok_or("the driver has no stdout")?).lines();
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_reader = child
            .stderr
            .take()
            .map(|pipe| tokio::spawn(keep_end(pipe, stderr.clone())));
        let mut driver = Driver {
            sdk,
            child,
            pid,
            stdin,
            lines,
            stderr,
            stderr_reader,
        };
        match tokio::time::timeout(READY_WITHIN, driver.lines.next_line()).await {
            Ok(Ok(Some(line))) if line == "ready" => Ok(driver),
            other => Err(driver
                .failed(&format!("did not get ready ({other:?})"))
                .await),
        }
    }

    /// The driver's process, whose CPU is the client's.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Makes the calls and waits for their figures. The driver keeps its
    /// clients open until [`Driver::finish`].
    pub async fn go(&mut self) -> Result<Outcome, String> {
        let line = match self.stdin.write_all(b"go\n").await {
            Ok(()) => tokio::time::timeout(CALLS_WITHIN, self.lines.next_line()).await,
            Err(e) => return Err(self.failed(&format!("took no go ({e})")).await),
        };
        let line = match line {
            Ok(Ok(Some(line))) => line,
            other => return Err(self.failed(&format!("gave no figures ({other:?})")).await),
        };
        match figures(&line) {
            Some(outcome) => Ok(outcome),
            None => Err(self
                .failed(&format!("gave unreadable figures: {line}"))
                .await),
        }
    }

    /// Tells the driver to end its sessions and close its clients, and
    /// waits for it to exit (killed after 10 s).
    pub async fn finish(mut self) {
        let _ = self.stdin.write_all(b"close\n").await;
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }

    /// Stops a driver that failed and says why, with the end of its stderr.
    async fn failed(&mut self, what: &str) -> String {
        let _ = self.child.kill().await;
        // Its stderr ends with the process: read what it wrote last.
        if let Some(reader) = self.stderr_reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
        }
        let stderr = self
            .stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        format!("{}: the driver {what}: {stderr}", self.sdk.name())
    }
}

impl Sdk {
    /// The era name the matrix prints and `LOAD_MATRIX_ERAS` takes.
    pub fn name(self) -> &'static str {
        match self {
            Sdk::TypeScript => "ts-sdk",
            Sdk::Python => "py-sdk",
        }
    }
}

/// `path` made absolute, not canonical: the venv's python is a symlink
/// whose target would not see the venv's packages.
fn absolute(path: &Path) -> Result<PathBuf, String> {
    if !path.exists() {
        return Err(format!(
            "{} not found: run `bash .ci/peers.sh` to install the SDK clients",
            path.display()
        ));
    }
    std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The figures line: every value present and a whole number, at least one
/// call timed; `None` otherwise.
fn figures(line: &str) -> Option<Outcome> {
    let figures: Value = serde_json::from_str(line).ok()?;
    let nanos = |v: &Value| v.as_u64().map(Duration::from_nanos);
    let latencies = figures["latencies_ns"]
        .as_array()?
        .iter()
        .map(nanos)
        .collect::<Option<Vec<_>>>()?;
    let elapsed = nanos(&figures["elapsed_ns"])?;
    if latencies.is_empty() || elapsed.is_zero() {
        return None;
    }
    Some(Outcome {
        protocol: figures["protocol"].as_str()?.to_owned(),
        elapsed,
        latencies,
    })
}

/// Reads `pipe` to its end, keeping its last [`STDERR_KEPT`] bytes in `end`.
async fn keep_end(mut pipe: tokio::process::ChildStderr, end: Arc<Mutex<String>>) {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 4096];
    while let Ok(read) = pipe.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        let mut kept = end.lock().unwrap_or_else(PoisonError::into_inner);
        kept.push_str(&String::from_utf8_lossy(&buffer[..read]));
        if kept.len() > 2 * STDERR_KEPT {
            let mut cut = kept.len() - STDERR_KEPT;
            while !kept.is_char_boundary(cut) {
                cut += 1;
            }
            kept.drain(..cut);
        }
    }
}
