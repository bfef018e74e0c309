//! Scaffolding shared by the end-to-end tests of the `portcullis` binary:
//! running it as a user would (one-shot commands, `serve --stdio` driven
//! by raw JSON-RPC lines, `serve` on a free loopback port with its stderr
//! followed line by line), writing configs,
//! finding the real peers (the Python SDK under `.peers/`) and the
//! conformance fixture binary, child-process bookkeeping, the audit trail
//! read back from the gateway's SQLite store, and a legacy
//! HTTP+SSE upstream served in-process (rmcp has no server for that
//! transport any more).
//!
//! Each test file uses a different part, hence `dead_code` is allowed.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

mod legacy_sse;
pub use legacy_sse::legacy_sse;

/// How long anything here may take before a test gives up: generous, since
/// the machine may be busy; never asserted on as a speed.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The one upstream most tests need: the binary's own `demo-upstream`
/// (`echo`, `add`, `count`, and the write tool `write_note`) as a stdio child.
pub const DEMO: &str =
    "[upstreams.demo]\ntype = \"stdio\"\ncommand = \"portcullis\"\nargs = [\"demo-upstream\"]\n";

/// A native tool plugin's `mcp-plugin.json`: one read-only tool `greet`
/// (a `name` string), its handler `./greet.sh` in the plugin directory.
pub const GREETER_MANIFEST: &str = r#"{
  "name": "greeter", "version": "1.0.0",
  "tools": [
    { "id": "greet", "handler": "./greet.sh", "description": "Greets someone",
      "annotations": { "readOnlyHint": true },
      "inputSchema": { "type": "object", "properties": { "name": { "type": "string" } }, "required": ["name"] } }
  ]
}"#;

/// `portcullis serve --stdio --config CONFIG` with stdin and stdout piped
/// (the MCP client's side) and stderr discarded.
pub fn serve_stdio(config: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["serve", "--stdio", "--config"])
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve --stdio starts")
}

/// `child`'s piped stderr, line by line, read on a thread of its own.
pub fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("piped stderr");
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        // Keep draining even when nobody listens any more, so the gateway
        // never blocks on a full pipe.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    receiver
}

/// `portcullis serve --stdio` driven by a client that writes and reads raw
/// JSON-RPC lines, so the order it sees is the order the gateway wrote:
/// every stdout line, parsed, on `lines`; with `follow_stderr`, every
/// stderr line on `stderr` (else stderr is discarded). Killed on drop.
pub struct RawStdio {
    child: Child,
    stdin: ChildStdin,
    /// The gateway's stdout lines, each parsed as JSON.
    pub lines: mpsc::Receiver<Value>,
    /// The gateway's stderr lines, when asked for at start.
    pub stderr: Option<mpsc::Receiver<String>>,
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RawStdio {
    /// Starts `portcullis serve --stdio --config CONFIG`.
    pub fn start(config: &Path, follow_stderr: bool) -> RawStdio {
        let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(["serve", "--stdio", "--config"])
            .arg(config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if follow_stderr {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("serve starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let message = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("the gateway wrote a line that is not JSON ({e}): {line}")
                });
                if sender.send(message).is_err() {
                    return;
                }
            }
        });
        let stderr = follow_stderr.then(|| stderr_lines(&mut child));
        RawStdio {
            child,
            stdin,
            lines,
            stderr,
        }
    }

    /// Writes `message` as one line on the gateway's stdin.
    pub fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").expect("the gateway reads its stdin");
        self.stdin.flush().expect("flushed");
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits at most `limit` for the gateway to exit: its exit code, or
    /// `None` when it is still running (it is then killed on drop).
    pub fn exit_within(&mut self, limit: Duration) -> Option<i32> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// The next stdout message with `id`, waiting at most `limit`; other
    /// messages are skipped.
    pub fn answer_to(&self, id: u64, limit: Duration) -> Option<Value> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let message = self.lines.recv_timeout(left).ok()?;
            if message["id"] == id {
                return Some(message);
            }
        }
    }
}

/// Runs `portcullis ARGS…` to completion with stdin closed (not a terminal).
pub fn portcullis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the portcullis binary runs")
}

/// [`portcullis`], failing the test when the command is still running
/// after `limit` (it is killed): for commands that must not wait on
/// something slow.
pub fn portcullis_within(args: &[&str], limit: std::time::Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the portcullis binary runs");
    let started = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("its output");
            panic!(
                "portcullis {args:?} still ran after {limit:?}: {}",
                text(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().expect("its output")
}

/// Bytes as text, for assertions and messages.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `dir/portcullis.toml` through a temporary file and a rename, as
/// editors do, so a gateway watching it never reads half a file.
pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("portcullis.toml");
    let partial = dir.join("portcullis.toml.partial");
    std::fs::write(&partial, text).expect("config written");
    std::fs::rename(&partial, &path).expect("config renamed");
    path
}

/// A TOML string literal (JSON's escaping is valid TOML basic-string
/// escaping), for paths in configs.
pub fn toml_string(value: &str) -> String {
    Value::from(value).to_string()
}

/// A running `portcullis serve` on a free loopback port: the URL and the
/// whole line it announced, and its later stderr lines as they come. Killed
/// on drop, so a failing test leaves no gateway behind.
pub struct Served {
    /// The gateway process.
    pub child: Child,
    /// The MCP endpoint (`http://127.0.0.1:PORT/mcp`).
    pub url: String,
    /// The `portcullis: listening on …` line (with the tool summary).
    pub listening: String,
    /// The stderr lines before it.
    pub before: Vec<String>,
    stderr: mpsc::Receiver<String>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// `host:port` of the HTTP surface.
    pub fn authority(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits for a stderr line containing `needle`; returns it.
    pub fn wait_for_line(&self, needle: &str) -> String {
        self.wait_for_line_of(&[needle])
    }

    /// Waits for a stderr line containing one of `needles`; returns it.
    pub fn wait_for_line_of(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) if needles.iter().any(|n| line.contains(n)) => return line,
                Ok(_) => {}
                Err(_) => panic!("no stderr line containing any of {needles:?}"),
            }
        }
    }

    /// The stderr lines written so far: those waiting, then any more until
    /// none has come for `quiet`.
    pub fn lines_so_far(&self, quiet: Duration) -> Vec<String> {
        let mut lines = Vec::new();
        while let Ok(line) = self.stderr.recv_timeout(quiet) {
            lines.push(line);
        }
        lines
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`TERM`, `HUP`, …) to the gateway.
    pub fn signal(&self, signal: &str) {
        send_signal(self.child.id(), signal);
    }

    /// Waits for the gateway to exit; its exit code.
    pub fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "the gateway did not exit within {PATIENCE:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then the exit code (0 is a clean, drained shutdown).
    pub fn terminate(&mut self) -> Option<i32> {
        self.signal("TERM");
        self.exit_code()
    }
}

/// `portcullis serve --config CONFIG --listen 127.0.0.1:0`, waiting for its
/// startup line.
pub fn serve(config: &Path) -> Served {
    serve_with(config, &[], &[])
}

/// As [`serve`], with global flags before the subcommand (`--log-format
/// json`) and extra environment for the gateway.
pub fn serve_with(config: &Path, global: &[&str], env: &[(&str, &str)]) -> Served {
    serve_on(config, "127.0.0.1:0", global, env)
}

/// As [`serve_with`], listening on `listen` (`host:port`): a test that
/// stops a gateway and starts it again where its clients expect it.
///
/// Upstreams that were still connecting at `start_timeout_ms` (a busy
/// machine) are waited for, so every upstream that can connect is served
/// when this returns, as these tests expect.
pub fn serve_on(config: &Path, listen: &str, global: &[&str], env: &[(&str, &str)]) -> Served {
    let served = start_serving(config, listen, global, env);
    let starting: usize = served
        .listening
        .split(", ")
        .find_map(|part| part.strip_suffix(" still connecting"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let mut joined = 0;
    for _ in 0..starting {
        let line = served.wait_for_line_of(&["joined the tool map", "failed to connect"]);
        joined += usize::from(line.contains("joined the tool map"));
    }
    if joined > 0 {
        served.wait_for_line("tools rebuilt");
    }
    served
}

/// `portcullis serve --config CONFIG --listen 127.0.0.1:0`, returning as
/// soon as it announced where it listens, whether or not every upstream
/// has connected.
pub fn serve_at_once(config: &Path) -> Served {
    start_serving(config, "127.0.0.1:0", &[], &[])
}

/// Starts `serve` and waits for its `listening on` line.
fn start_serving(config: &Path, listen: &str, global: &[&str], env: &[(&str, &str)]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(global)
        .args(["serve", "--config"])
        .arg(config)
        .args(["--listen", listen])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let receiver = stderr_lines(&mut child);
    let mut served = Served {
        child,
        url: String::new(),
        listening: String::new(),
        before: Vec::new(),
        stderr: receiver,
    };
    let deadline = Instant::now() + PATIENCE;
    let mut before = Vec::new();
    let line = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match served.stderr.recv_timeout(left) {
            Ok(line) if line.starts_with("portcullis: listening on ") => break line,
            Ok(line) => before.push(line),
            Err(_) => panic!(
                "serve never announced where it listens; its stderr:\n{}",
                before.join("\n")
            ),
        }
    };
    served.url = line
        .trim_start_matches("portcullis: listening on ")
        .split(';')
        .next()
        .unwrap_or_default()
        .to_owned();
    served.listening = line;
    served.before = before;
    served
}

/// Sends `signal` to `pid` with `kill`.
pub fn send_signal(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// The direct children of `parent`.
pub fn child_pids(parent: u32) -> Vec<u32> {
    let out = Command::new("pgrep")
        .args(["-P", &parent.to_string()])
        .output()
        .expect("pgrep runs");
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Whether `pid` is a live process (a zombie or a dead one is not).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the field after the parenthesised command name.
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or_default()
            .trim_start()
            .starts_with(['Z', 'X']),
        Err(_) => false,
    }
}

/// Waits (polling) until `condition` holds; panics naming `what` after
/// [`PATIENCE`]. For effects in another process that announce nothing.
pub fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The newest (at most 10) records of the audit trail a gateway wrote to
/// its default store, SQLite in `data_dir`; newest first.
pub async fn audit_trail(data_dir: &Path) -> Vec<portcullis_store::AuditRecord> {
    let store = portcullis_store::open(&portcullis_store::StoreSpec::Sqlite(None), data_dir)
        .await
        .expect("the gateway's SQLite store opens");
    store.audit().recent(10).await.expect("the trail reads")
}

/// Fails unless no file directly in `dir` holds `secret` (an argument
/// value that must never be written down).
pub fn assert_nowhere_in(dir: &Path, secret: &str) {
    for entry in std::fs::read_dir(dir).expect("data_dir") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).unwrap_or_default();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{} holds an argument value",
            path.display()
        );
    }
}

/// The project's `.peers/` directory (installed by `.ci/peers.sh`).
pub fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.peers")
}

/// Whether missing peers fail the test (`CI=true`) instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Reports a missing prerequisite: a failure under `CI=true`, else a
/// printed skip. Returns `None` so callers can `let Some(x) = … else
/// { return }`.
pub fn missing<T>(what: &Path, how: &str) -> Option<T> {
    let message = format!("{} not found; {how}", what.display());
    if in_ci() {
        panic!("{message} (CI=true: a missing peer is a failure)");
    }
    println!("SKIPPED: {message}");
    None
}

/// The venv's python with the MCP Python SDK, or `None` (outside CI only)
/// when it is missing.
pub fn python() -> Option<PathBuf> {
    let python = peers_dir().join("venv/bin/python");
    if !python.is_file() {
        return missing(&python, "run .ci/peers.sh to install the MCP peers");
    }
    // Absolute but not canonical: the venv's python is a symlink whose
    // target would not see the venv's packages.
    Some(std::path::absolute(python).expect("an absolute path"))
}

/// Runs a Python script (`-c`) with `args` and parses the last line it
/// printed as JSON; a non-zero exit fails the test with its stderr.
pub fn python_json(python: &Path, script: &str, args: &[&str]) -> Value {
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the Python client runs");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "the Python client failed: {}\n{stdout}",
        text(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the Python client printed no JSON ({e}): {stdout}"))
}

/// The conformance fixture server next to the `portcullis` binary
/// (`target/<profile>`; built by any workspace build or test run), or
/// `None` (outside CI only) when it is not built.
pub fn conformance_fixture() -> Option<PathBuf> {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_portcullis"));
    let path = binary
        .parent()
        .expect("the binary's directory")
        .join(format!(
            "portcullis-conformance-fixture{}",
            std::env::consts::EXE_SUFFIX
        ));
    if path.is_file() {
        Some(path)
    } else {
        missing(&path, "run `cargo build --workspace`")
    }
}

/// `message` as a one-shot, stateless 2026-07-28 request: the headers that
/// go with it (version, method, name) and the body with its per-request
/// `_meta` envelope. Raw requests use that revision because `serve` gives
/// initialize-era HTTP clients a session, which a one-shot request has not.
pub fn stateless(message: &Value) -> (String, String) {
    let mut message = message.clone();
    let method = message["method"].as_str().unwrap_or_default().to_owned();
    let mut headers = format!("MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n");
    if let Some(name) = message["params"]["name"].as_str() {
        headers.push_str(&format!("Mcp-Name: {name}\r\n"));
    }
    if message.get("params").is_none() {
        message["params"] = serde_json::json!({});
    }
    let params = &mut message["params"];
    if params.get("_meta").is_none() {
        params["_meta"] = serde_json::json!({});
    }
    if let Some(meta) = params["_meta"].as_object_mut() {
        meta.insert(
            "io.modelcontextprotocol/protocolVersion".into(),
            "2026-07-28".into(),
        );
        meta.insert(
            "io.modelcontextprotocol/clientCapabilities".into(),
            serde_json::json!({}),
        );
    }
    (headers, message.to_string())
}

/// The raw text of one MCP POST of `message` to `authority` (its own
/// `Host`), with extra `headers` (each ending in CRLF).
pub fn mcp_request(authority: &str, message: &Value, headers: &str) -> String {
    let (envelope, body) = stateless(message);
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{envelope}{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Sends one raw HTTP/1.1 request; the status and the whole response (the
/// request must say `Connection: close`).
pub fn http(authority: &str, raw: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(authority).expect("connects to the gateway");
    stream.write_all(raw.as_bytes()).expect("request written");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, response)
}

/// One stateless MCP request to the gateway at `authority`.
pub fn mcp(authority: &str, message: &Value) -> (u16, String) {
    http(authority, &mcp_request(authority, message, ""))
}

/// Opens a stateless MCP request and hands back its response as lines as
/// they arrive (an SSE stream for a call with a progress token), so a test
/// can act while the call is in flight.
pub fn mcp_streaming(
    authority: &str,
    message: &Value,
) -> std::io::Lines<BufReader<std::net::TcpStream>> {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(authority).expect("connects to the gateway");
    stream
        .write_all(mcp_request(authority, message, "").as_bytes())
        .expect("request written");
    BufReader::new(stream).lines()
}

/// The sorted tool names the gateway at `authority` lists.
pub fn tool_names(authority: &str) -> Vec<String> {
    let (status, response) = mcp(
        authority,
        &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    assert_eq!(status, 200, "{response}");
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    let listed: Value = serde_json::from_str(body).expect("a JSON-RPC answer");
    let mut names: Vec<String> = listed["result"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The test issuer's signing key (RS256, kid `key-1`), shared with
/// portcullis-server's tests.
pub const ISSUER_RSA: &[u8] =
    include_bytes!("../../../../portcullis-server/tests/fixtures/oauth/issuer-rsa.pem");

/// A key the test issuer never published.
pub const ATTACKER_RSA: &[u8] =
    include_bytes!("../../../../portcullis-server/tests/fixtures/oauth/attacker-rsa.pem");

/// The public resource URL the OAuth tests give the gateway.
pub const OAUTH_AUDIENCE: &str = "https://gateway.example/mcp";

/// An OAuth authorization server on loopback, on a runtime of its own:
/// RFC 8414 metadata and a key set with the one key of [`ISSUER_RSA`].
pub struct TestIssuer {
    /// Its issuer identifier (`http://127.0.0.1:PORT`).
    pub url: String,
    _runtime: tokio::runtime::Runtime,
}

impl TestIssuer {
    /// Starts it.
    pub fn start() -> TestIssuer {
        use jsonwebtoken::jwk::Jwk;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("binds");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(ISSUER_RSA).expect("test key");
        let mut jwk =
            Jwk::from_encoding_key(&key, jsonwebtoken::Algorithm::RS256).expect("public key");
        jwk.common.key_id = Some("key-1".into());
        let keys = serde_json::json!({"keys": [jwk]});
        let metadata = serde_json::json!({"issuer": url, "jwks_uri": format!("{url}/jwks")});
        let app = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || async move { axum::Json(metadata) }),
            )
            .route(
                "/jwks",
                axum::routing::get(move || async move { axum::Json(keys) }),
            );
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TestIssuer {
            url,
            _runtime: runtime,
        }
    }

    /// The `[gateway.oauth]` table for this issuer, requiring `mcp:tools`.
    pub fn config_table(&self) -> String {
        format!(
            "[gateway.oauth]\nissuer = \"{}\"\naudience = \"{OAUTH_AUDIENCE}\"\nrequired_scopes = [\"mcp:tools\"]\n",
            self.url
        )
    }

    /// Claims of a token of this issuer for `sub` with `scope`, valid for
    /// a minute.
    pub fn claims(&self, sub: &str, scope: &str) -> Value {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        serde_json::json!({
            "iss": self.url, "sub": sub, "aud": OAUTH_AUDIENCE,
            "exp": now + 60, "iat": now, "scope": scope,
        })
    }

    /// A good token for `sub` with `scope`.
    pub fn token(&self, sub: &str, scope: &str) -> String {
        sign(&self.claims(sub, scope), "key-1", ISSUER_RSA)
    }
}

/// `claims` signed RS256 under `kid` with the PEM key `pem`.
pub fn sign(claims: &Value, kid: &str, pem: &[u8]) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(kid.into());
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem).expect("test key");
    jsonwebtoken::encode(&header, claims, &key).expect("signs")
}
