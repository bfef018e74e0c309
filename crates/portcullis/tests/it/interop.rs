//! Interop through the gateway: `@modelcontextprotocol/server-everything`
//! (the TypeScript SDK's reference server, 2025 era, over stdio) behind the
//! real `portcullis` binary, reached by real clients:
//!
//! * the Python SDK (`mcp` 2.3.0) over Streamable HTTP and over
//!   `portcullis serve --stdio`: list, call, progress, and the server's
//!   sampling, elicitation and roots requests answered by the Python client
//!   through the gateway;
//! * `@modelcontextprotocol/inspector-cli` over Streamable HTTP: list tools,
//!   call a tool;
//! * the TypeScript SDK's client and the Python SDK's, over Streamable
//!   HTTP in each protocol they negotiate: sequential calls, none stalled.
//!
//! The peers are installed under `.peers/` by `.ci/peers.sh`. Outside CI a
//! missing peer skips the test (it says so); with `CI=true` a missing peer
//! is a failure, so CI cannot pass without running these.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

/// The real peers, by absolute path.
struct Peers {
    node: PathBuf,
    everything: PathBuf,
    python: PathBuf,
    inspector: PathBuf,
}

/// The peers, or `None` (outside CI only) when one is missing.
fn peers() -> Option<Peers> {
    let root = common::peers_dir();
    let modules = root.join("node_modules/@modelcontextprotocol");
    let wanted = [
        modules.join("server-everything/dist/index.js"),
        root.join("venv/bin/python"),
        modules.join("inspector-cli/build/index.js"),
    ];
    if let Some(missing) = wanted.iter().find(|p| !p.is_file()) {
        return common::missing(missing, "run .ci/peers.sh to install the MCP peers");
    }
    // Absolute but not canonical: the venv's python is a symlink whose
    // target would not see the venv's packages.
    let [everything, python, inspector] =
        wanted.map(|p| std::path::absolute(p).expect("a peer path"));
    // server-everything and the inspector CLI run on the Node on PATH
    // (20 or newer); the Node 22 that .ci/peers.sh installs for the
    // conformance runner works too.
    let node22 = root.join("node22/node_modules/.bin/node");
    let node = if Command::new("node").arg("--version").output().is_ok() {
        PathBuf::from("node")
    } else {
        node22
            .canonicalize()
            .expect("node on PATH or in .peers/node22")
    };
    Some(Peers {
        node,
        everything,
        python,
        inspector,
    })
}

/// A gateway config with server-everything as its one upstream (stdio),
/// writes allowed (its sampling, elicitation and roots tools are not
/// declared read-only), an in-memory store.
fn config(peers: &Peers, dir: &Path) -> PathBuf {
    let node = which(&peers.node);
    let toml = format!(
        "[gateway]\nallow_write = true\nstore = \"memory\"\n\n[upstreams.everything]\ntype = \"stdio\"\ncommand = {}\nargs = [{}, \"stdio\"]\ntimeout_ms = 60000\n",
        Value::from(node.display().to_string()),
        Value::from(peers.everything.display().to_string()),
    );
    common::write_config(dir, &toml)
}

/// An absolute path for `program` (the gateway resolves bare names on its
/// own PATH, which is ours; absolute keeps the config unambiguous).
fn which(program: &Path) -> PathBuf {
    if program.is_absolute() {
        return program.to_owned();
    }
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {}", program.display())])
        .output()
        .expect("sh runs");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The Python SDK client: connects (the initialize handshake), lists, calls
/// `echo`, a long-running operation with progress, and the three tools
/// that make server-everything ask its client something, answering each
/// request itself. Prints one JSON object.
const PYTHON_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import Client, StdioServerParameters, types

async def sampling(context, params):
    asked = params.messages[0].content.text
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="relayed sample for: " + asked),
        model="interop-model",
        stopReason="endTurn",
    )

async def elicitation(context, params):
    return types.ElicitResult(action="accept", content={"name": "Interop Tester"})

async def roots(context):
    return types.ListRootsResult(roots=[types.Root(uri="file:///interop/root", name="interop-root")])

def texts(result):
    return [block.text for block in result.content if block.type == "text"]

async def main():
    if sys.argv[1] == "http":
        server = sys.argv[2]
    else:
        server = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:])
    out = {}
    async with Client(server, mode="legacy", sampling_callback=sampling,
                      elicitation_callback=elicitation, list_roots_callback=roots) as client:
        out["protocol"] = client.protocol_version
        listed = await client.list_tools()
        out["tools"] = sorted(tool.name for tool in listed.tools)
        out["echo"] = texts(await client.call_tool("echo", {"message": "hi from python"}))
        progress = []
        async def on_progress(value, total, message):
            progress.append(value)
        out["long"] = texts(await client.call_tool(
            "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress_callback=on_progress))
        out["progress"] = progress
        out["sampling"] = texts(await client.call_tool(
            "trigger-sampling-request", {"prompt": "the capital of France", "maxTokens": 20}))
        out["elicitation"] = texts(await client.call_tool("trigger-elicitation-request", {}))
        out["roots"] = texts(await client.call_tool("get-roots-list", {}))
    print(json.dumps(out))

asyncio.run(main())
"#;

/// Two Python SDK clients at once through the gateway, each calling
/// `trigger-sampling-request` while the other's call is in flight; each
/// answers sampling with its own tag. Prints each client's result.
const PYTHON_PAIR: &str = r#"
import asyncio, json, sys
from mcp import Client, types

def answering(tag):
    async def sampling(context, params):
        await asyncio.sleep(0.3)  # keep both calls in flight together
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="answered by " + tag),
            model="model-" + tag, stopReason="endTurn")
    return sampling

async def one(url, tag):
    async with Client(url, mode="legacy", sampling_callback=answering(tag)) as client:
        result = await client.call_tool("trigger-sampling-request", {"prompt": "from " + tag, "maxTokens": 5})
        return [block.text for block in result.content if block.type == "text"]

async def main():
    url = sys.argv[1]
    first, second = await asyncio.gather(one(url, "alpha"), one(url, "beta"))
    print(json.dumps({"alpha": first, "beta": second}))

asyncio.run(main())
"#;

fn run(command: &mut Command) -> Output {
    command
        .stdin(Stdio::null())
        .output()
        .expect("the peer process runs")
}

fn python(peers: &Peers, args: &[&str]) -> Value {
    common::python_json(&peers.python, PYTHON_CLIENT, args)
}

fn joined(value: &Value) -> String {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// What every Python run must show, whatever the transport to the gateway.
fn assert_python_run(out: &Value, transport: &str) {
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for tool in [
        "echo",
        "trigger-long-running-operation",
        // Registered by server-everything because the gateway declares
        // what it can relay.
        "trigger-sampling-request",
        "trigger-elicitation-request",
        "get-roots-list",
    ] {
        assert!(
            tools.contains(&tool),
            "{transport}: {tool} missing: {tools:?}"
        );
    }
    let echo = joined(&out["echo"]);
    assert!(
        echo.contains("\nEcho: hi from python\n"),
        "{transport}: {echo}"
    );
    assert!(
        echo.starts_with("<untrusted-tool-output tool=\"echo\">"),
        "{echo}"
    );
    assert!(
        joined(&out["long"]).contains("Steps: 3"),
        "{transport}: {}",
        out["long"]
    );
    assert_eq!(
        out["progress"],
        serde_json::json!([1.0, 2.0, 3.0]),
        "{transport}: progress reaches the client in order"
    );
    let sampling = joined(&out["sampling"]);
    assert!(
        sampling.contains(
            "relayed sample for: Resource trigger-sampling-request context: the capital of France"
        ),
        "{transport}: the sampling request reached the Python client and its answer the server: {sampling}"
    );
    assert!(sampling.contains("interop-model"), "{sampling}");
    let elicitation = joined(&out["elicitation"]);
    assert!(
        elicitation.contains("Interop Tester"),
        "{transport}: the elicitation was answered by the Python client: {elicitation}"
    );
    let roots = joined(&out["roots"]);
    assert!(
        roots.contains("file:///interop/root"),
        "{transport}: the roots came from the Python client: {roots}"
    );
}

#[test]
fn python_sdk_over_http_reaches_server_everything_and_answers_its_requests() {
    let Some(peers) = peers() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&config(&peers, dir.path()));
    let out = python(&peers, &["http", &served.url]);
    assert_python_run(&out, "http");
}

#[test]
fn python_sdk_over_serve_stdio_reaches_server_everything_and_answers_its_requests() {
    let Some(peers) = peers() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(&peers, dir.path());
    let out = python(
        &peers,
        &[
            "stdio",
            env!("CARGO_BIN_EXE_portcullis"),
            "serve",
            "--stdio",
            "--config",
            config.to_str().expect("a UTF-8 path"),
        ],
    );
    assert_python_run(&out, "stdio");
}

#[test]
fn inspector_cli_lists_and_calls_through_the_gateway() {
    let Some(peers) = peers() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&config(&peers, dir.path()));
    // inspector-cli 1.0.3 must run from its own build directory (it looks
    // for its package.json relative to the working directory).
    let build = peers.inspector.parent().expect("the build directory");
    let inspector = |args: &[&str]| {
        let out = run(Command::new(&peers.node)
            .current_dir(build)
            .arg(&peers.inspector)
            .arg(&served.url)
            .args(["--transport", "http"])
            .args(args));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "inspector-cli {args:?} failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        // It prints the raw JSON result (after a deprecation notice on
        // stderr).
        let start = stdout.find('{').unwrap_or(0);
        serde_json::from_str::<Value>(&stdout[start..])
            .unwrap_or_else(|e| panic!("inspector-cli printed no JSON ({e}): {stdout}"))
    };
    let listed = inspector(&["--method", "tools/list"]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(names.contains(&"echo"), "{listed}");
    assert!(names.contains(&"get-sum"), "{listed}");
    let called = inspector(&[
        "--method",
        "tools/call",
        "--tool-name",
        "get-sum",
        "--tool-arg",
        "a=2",
        "b=40",
    ]);
    let text = called["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("The sum of 2 and 40 is 42."), "{called}");
    assert!(
        text.starts_with("<untrusted-tool-output tool=\"get-sum\">"),
        "{called}"
    );
}

/// Calls per client in [`the_sdk_clients_sequential_calls_do_not_stall`].
const SEQUENTIAL_CALLS: usize = 200;

/// The TypeScript SDK's client (`StreamableHTTPClientTransport`, as Claude
/// Code and most Node agents use it): connects, then makes `CALLS` `echo`
/// calls one after the other, each checked. Prints the negotiated protocol
/// and the calls' wall time. Arguments: `SDK_DIR URL CALLS`.
const TS_SEQUENTIAL: &str = r#"
const [sdk, url, calls] = process.argv.slice(1);
const { Client } = await import(sdk + '/dist/esm/client/index.js');
const { StreamableHTTPClientTransport } = await import(sdk + '/dist/esm/client/streamableHttp.js');
const client = new Client({ name: 'interop', version: '1' });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
const started = performance.now();
for (let i = 0; i < +calls; i++) {
  const result = await client.callTool({ name: 'echo', arguments: { message: 'call ' + i } });
  const text = (result.content ?? []).map((b) => b.text ?? '').join('\n');
  if (!text.includes('Echo: call ' + i + '\n')) throw new Error('call ' + i + ': ' + JSON.stringify(result));
}
const ms = performance.now() - started;
await client.close();
console.log(JSON.stringify({ protocol: transport.protocolVersion ?? '', ms }));
"#;

/// The Python SDK's client, the same way: `URL MODE CALLS`, where MODE is
/// `auto` (the SDK's default: 2026-07-28 where the server takes it) or
/// `legacy` (initialize and a session).
const PYTHON_SEQUENTIAL: &str = r#"
import asyncio, json, sys, time
from mcp import Client

async def main():
    url, mode, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    async with Client(url, mode=mode) as client:
        started = time.perf_counter()
        for i in range(calls):
            result = await client.call_tool("echo", {"message": f"call {i}"})
            text = "\n".join(getattr(b, "text", "") or "" for b in result.content)
            if f"Echo: call {i}\n" not in text:
                raise SystemExit(f"call {i}: {result}")
        ms = (time.perf_counter() - started) * 1000
        print(json.dumps({"protocol": client.protocol_version, "ms": ms}))

asyncio.run(main())
"#;

/// The official SDKs' clients make their calls one after the other on one
/// connection, as the agents and editors that embed them do. A wait a call
/// anywhere on the way (a delayed ACK, a flush on a timer, a read that
/// waits out a timeout) would cost each call tens of milliseconds, as
/// every session-era call once waited 40 ms for the client's delayed ACK:
/// 200 sequential `echo` calls through the gateway to server-everything
/// take about half a second in a debug build, and over 5 s with a wait of
/// 20 ms a call (checked by putting one in the gateway's call path). Each client in the protocol it negotiates with the
/// gateway: the TypeScript SDK at 2025-11-25 with a session, the Python
/// SDK at 2026-07-28 by default and at 2025-11-25 when told to.
#[test]
fn the_sdk_clients_sequential_calls_do_not_stall() {
    let Some(peers) = peers() else { return };
    let sdk = common::peers_dir().join("node_modules/@modelcontextprotocol/sdk");
    if !sdk.join("dist/esm/client/streamableHttp.js").is_file() {
        common::missing::<()>(&sdk, "run .ci/peers.sh to install the MCP peers");
        return;
    }
    let sdk = std::path::absolute(sdk).expect("an absolute path");
    let dir = tempfile::tempdir().expect("temp dir");
    let served = common::serve(&config(&peers, dir.path()));
    let calls = SEQUENTIAL_CALLS.to_string();
    let out = run(Command::new(&peers.node)
        .args(["--input-type=module", "-e", TS_SEQUENTIAL])
        .arg(&sdk)
        .arg(&served.url)
        .arg(&calls));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the TypeScript client failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let typescript: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the TypeScript client printed no JSON ({e}): {stdout}"));
    let python = |mode: &str| {
        common::python_json(
            &peers.python,
            PYTHON_SEQUENTIAL,
            &[&served.url, mode, &calls],
        )
    };
    for (client, out, protocol) in [
        ("TypeScript SDK", typescript, "2025-11-25"),
        ("Python SDK", python("auto"), "2026-07-28"),
        ("Python SDK, legacy mode", python("legacy"), "2025-11-25"),
    ] {
        assert_eq!(out["protocol"], protocol, "{client}: {out}");
        let ms = out["ms"].as_f64().unwrap_or(f64::MAX);
        assert!(
            ms < 3000.0,
            "{client}: {SEQUENTIAL_CALLS} sequential calls took {ms:.0} ms: a call waits on something"
        );
    }
}

/// server-everything over Streamable HTTP (sessions, port from `PORT`) on a
/// free loopback port; killed on drop.
struct Everything {
    child: Child,
    url: String,
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn everything_over_http(peers: &Peers) -> Everything {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let preload = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.peers/loopback-only.cjs");
    let child = Command::new(&peers.node)
        .arg(&peers.everything)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .env("NODE_OPTIONS", format!("--require {}", preload.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("server-everything starts");
    let everything = Everything {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    };
    // Listening is the event; a refused connection means not yet.
    for _ in 0..600 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return everything;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("server-everything did not listen on {port}");
}

#[test]
fn concurrent_calls_over_an_http_upstream_each_reach_their_own_client() {
    let Some(peers) = peers() else { return };
    let upstream = everything_over_http(&peers);
    let dir = tempfile::tempdir().expect("temp dir");
    let config = common::write_config(
        dir.path(),
        &format!(
            "[gateway]\nallow_write = true\nstore = \"memory\"\n\n[upstreams.everything]\ntype = \"streamable-http\"\nurl = \"{}\"\ntimeout_ms = 60000\n",
            upstream.url
        ),
    );
    let served = common::serve(&config);
    // One upstream session, two callers: each sampling request arrives on
    // the response stream of the call that caused it, and must reach that
    // call's client, never the other.
    let out = common::python_json(&peers.python, PYTHON_PAIR, &[&served.url]);
    for (tag, other) in [("alpha", "beta"), ("beta", "alpha")] {
        let text = joined(&out[tag]);
        assert!(
            text.contains(&format!("answered by {tag}")),
            "{tag}: {text}"
        );
        assert!(
            !text.contains(&format!("answered by {other}")),
            "{tag}: {text}"
        );
    }
}
