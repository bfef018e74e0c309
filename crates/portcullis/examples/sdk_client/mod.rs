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
//! closes its clients and exits. The process's start, its imports and the
//! handshakes are outside the clock and outside the CPU read.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

/// Calls each client makes before it says it is ready (connections open,
/// the runtime's code warm).
const WARM_UP: usize = 20;

/// How long a driver may take to open its clients and warm them up.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// Which SDK a driver runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Sdk {
    TypeScript,
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
await Promise.all(open.map((c) => c.close()));
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

asyncio.run(main())
"#;

/// A driver that has opened its clients and waits for [`Driver::go`].
pub struct Driver {
    child: tokio::process::Child,
    pid: u32,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
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
                let mut command = tokio::process::Command::new(node());
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
        let mut lines =
            BufReader::new(child.stdout.take().ok_or("the driver has no stdout")?).lines();
        let ready = tokio::time::timeout(READY_WITHIN, lines.next_line()).await;
        match ready {
            Ok(Ok(Some(line))) if line == "ready" => Ok(Driver {
                child,
                pid,
                stdin,
                lines,
            }),
            other => {
                let said = format!("{other:?}");
                Err(format!(
                    "{}: the driver did not get ready ({said}): {}",
                    sdk.name(),
                    stderr_of(&mut child).await
                ))
            }
        }
    }

    /// The driver's process, whose CPU is the client's.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Makes the calls and waits for their figures (the driver then closes
    /// its clients: [`Driver::finish`]).
    pub async fn go(&mut self, sdk: Sdk) -> Result<Outcome, String> {
        let told = self.stdin.write_all(b"go\n").await;
        let line = match told {
            Ok(()) => self.lines.next_line().await.ok().flatten(),
            Err(_) => None,
        };
        let Some(line) = line else {
            return Err(format!(
                "{}: the driver gave no figures: {}",
                sdk.name(),
                stderr_of(&mut self.child).await
            ));
        };
        let figures: Value = serde_json::from_str(&line)
            .map_err(|e| format!("{}: unreadable figures ({e}): {line}", sdk.name()))?;
        let nanos = |v: &Value| Duration::from_nanos(v.as_u64().unwrap_or_default());
        let outcome = Outcome {
            protocol: figures["protocol"].as_str().unwrap_or_default().to_owned(),
            elapsed: nanos(&figures["elapsed_ns"]),
            latencies: figures["latencies_ns"]
                .as_array()
                .map(|all| all.iter().map(nanos).collect())
                .unwrap_or_default(),
        };
        if outcome.latencies.is_empty() {
            return Err(format!("{}: the driver timed no call: {line}", sdk.name()));
        }
        Ok(outcome)
    }

    /// Waits for the driver to close its clients and exit (killed after
    /// 10 s).
    pub async fn finish(mut self) {
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
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

/// `LOAD_MATRIX_NODE`, else `node` on `PATH`.
fn node() -> PathBuf {
    std::env::var_os("LOAD_MATRIX_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from)
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

/// What a failed driver wrote on stderr (its last 2 000 bytes).
async fn stderr_of(child: &mut tokio::process::Child) -> String {
    use tokio::io::AsyncReadExt;
    let _ = child.start_kill();
    let mut text = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ =
            tokio::time::timeout(Duration::from_secs(5), stderr.read_to_string(&mut text)).await;
    }
    let mut cut = text.len().saturating_sub(2000);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_owned()
}
