//! OAuth against implementations we did not write: the Python MCP SDK's
//! (run on the SDK that `.ci/peers.sh` installs).
//!
//! * The gateway as the client: `auth login` and `serve` against the SDK's
//!   authorization server and bearer guard (`oauth_peer.py`). This checks our
//!   discovery, dynamic registration (the SDK hands out a confidential client
//!   with a secret), PKCE, the `resource` parameter (the SDK's guard refuses
//!   a token issued for another resource), refreshing, and a revoked grant.
//! * The gateway as the protected resource: the SDK's OAuth client
//!   (`oauth_peer_client.py`) finds the gateway's authorization server from
//!   its challenge and metadata, logs in there (the same script, issuing JWT
//!   access tokens) and calls through the gateway as the token's subject.
//!
//! Outside CI a missing peer skips the test (it says so); with `CI=true` it
//! is a failure.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{self, DEMO, eventually, portcullis, text, write_config};
use crate::oauth_login::{browser_login, call, healthz};

/// The Python SDK's authorization server and protected MCP server, one
/// process; killed on drop.
struct PythonProvider {
    child: Child,
    /// `http://127.0.0.1:PORT`, the issuer and the server's origin.
    origin: String,
    /// Its stdout, one JSON event a line.
    events: Arc<Mutex<Vec<Value>>>,
    runtime: tokio::runtime::Runtime,
}

impl PythonProvider {
    /// `jwt`: issue JWT access tokens and publish the key at `/jwks`.
    fn start(python: &Path, expires_in: u64, jwt: bool) -> PythonProvider {
        // A free port, for the script binds the one it is given (its
        // issuer and resource URLs are made from it before it listens).
        let port = free_port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/oauth_peer.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .arg(expires_in.to_string())
            .args(jwt.then_some("jwt"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the Python SDK's server starts");
        let events = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped stdout");
        let kept = events.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str(&line) {
                    kept.lock().unwrap().push(event);
                }
            }
        });
        let origin = format!("http://127.0.0.1:{port}");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let provider = PythonProvider {
            child,
            origin,
            events,
            runtime,
        };
        let metadata = format!("{}/.well-known/oauth-authorization-server", provider.origin);
        eventually("the Python SDK's server listens", || {
            provider.runtime.block_on(async {
                matches!(reqwest::get(&metadata).await, Ok(r) if r.status().is_success())
            })
        });
        provider
    }

    fn mcp_url(&self) -> String {
        format!("{}/mcp", self.origin)
    }

    /// Every code, token and client secret it handed out.
    fn issued(&self) -> Vec<String> {
        self.events_of("issued")
    }

    /// The grant types of the token requests it answered, in order.
    fn grants(&self) -> Vec<String> {
        self.events_of("grant")
    }

    fn events_of(&self, key: &str) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| e[key].as_str().map(str::to_owned))
            .collect()
    }

    /// The test's own route: every access and refresh token forgotten.
    fn revoke_all(&self) {
        let url = format!("{}/test/revoke", self.origin);
        self.runtime.block_on(async {
            let answer = reqwest::get(&url).await.expect("revoke answered");
            assert!(answer.status().is_success(), "{}", answer.status());
        });
    }

    /// Follows the authorization URL as a browser would: the SDK's
    /// authorize endpoint redirects (the provider approves at once) to the
    /// loopback listener of `auth login`, whose page is returned.
    fn visit(&self, url: &str) -> String {
        self.runtime.block_on(async {
            let page = reqwest::get(url).await.expect("the browser got an answer");
            assert!(page.status().is_success(), "{}", page.status());
            page.text().await.unwrap_or_default()
        })
    }
}

impl Drop for PythonProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `portcullis auth login notes --no-browser`, the test as the browser.
fn login(provider: &PythonProvider, config: &Path, printed: &mut Vec<String>) {
    let done = browser_login(config, "notes", &[], |url| provider.visit(url));
    printed.push(done.out.clone());
    printed.push(done.said.join("\n"));
    assert!(done.ok, "auth login failed: {}\n{:?}", done.out, done.said);
    assert!(
        done.out.contains(&format!(
            "logged in to notes: issuer {}; scopes notes",
            provider.origin
        )),
        "{}",
        done.out
    );
    let url = done.url;
    // What went to the SDK's authorize endpoint, as the person's browser
    // carried it.
    let query: Vec<(String, String)> = reqwest::Url::parse(&url)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(param("code_challenge_method").as_deref(), Some("S256"));
    assert_eq!(param("resource"), Some(provider.mcp_url()));
}

/// Login, a call, a refresh while idle, a revoked grant reported as
/// needing a login (not as down), and none of what the SDK issued (codes,
/// tokens, the registered client's secret) in any output, log line, the
/// audit trail or a file of the data directory.
#[test]
fn the_python_sdks_authorization_server_logs_in_refreshes_and_revokes() {
    let Some(python) = common::python() else {
        return;
    };
    // Tokens live 6 s: `serve` must refresh them on its own while idle.
    let provider = PythonProvider::start(&python, 6, false);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "[gateway]\ndata_dir = \"state\"\nallow_write = true\nreconnect_max_ms = 300\nhealth_interval_ms = 0\n\n\
             [upstreams.notes]\ntype = \"streamable-http\"\nurl = \"{}\"\n\n[upstreams.notes.oauth]\nredirect_port = 0\n",
            provider.mcp_url()
        ),
    );
    let data = dir.path().join("state");
    let mut printed = Vec::new();

    login(&provider, &config, &mut printed);
    assert_eq!(provider.grants(), ["authorization_code"]);

    let served = common::serve(&config);
    eventually("notes' tools are served", || {
        common::tool_names(&served.authority()).contains(&"note".to_owned())
    });
    let (failed, said) = call(&served, "note", json!({"text": "first"}));
    assert!(!failed && said.contains("noted: first"), "{said}");

    // Idle past the token's lifetime: refreshed by `serve` itself, and the
    // SDK's guard takes the new token.
    std::thread::sleep(Duration::from_secs(7));
    assert!(
        provider.grants().iter().any(|g| g == "refresh_token"),
        "no refresh while idle: {:?}",
        provider.grants()
    );
    let (failed, said) = call(&served, "note", json!({"text": "after idle"}));
    assert!(!failed && said.contains("noted: after idle"), "{said}");

    // Revoked at the authorization server: the upstream needs a login; it
    // is not counted as down.
    provider.revoke_all();
    let (failed, _) = call(&served, "note", json!({"text": "revoked"}));
    assert!(failed);
    served.wait_for_line("upstream \"notes\" needs a login: run `portcullis auth login notes`");
    eventually("notes needs a login, not down", || {
        healthz(&served)["upstreams"] == json!({"up": 0, "down": 0, "needs_login": 1})
    });
    let status = portcullis(&["--config", config.to_str().unwrap(), "auth", "status"]);
    printed.push(text(&status.stdout));
    printed.push(text(&status.stderr));

    let lines = served.lines_so_far(Duration::from_millis(300));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let trail = runtime
        .block_on(common::audit_trail(&data))
        .iter()
        .map(|r| format!("{r:?}"))
        .collect::<Vec<_>>()
        .join("\n");
    let issued = provider.issued();
    // A code, two access and refresh token pairs, the client's secret.
    assert!(issued.len() >= 6, "{issued:?}");
    for secret in &issued {
        for (i, out) in printed.iter().enumerate() {
            assert!(!out.contains(secret), "output {i} holds a secret: {out}");
        }
        for line in &lines {
            assert!(!line.contains(secret), "a log line holds a secret: {line}");
        }
        assert!(!trail.contains(secret), "the audit trail holds a secret");
        common::assert_nowhere_in(&data, secret);
    }
}

/// A free loopback port, for a gateway whose public URL (its tokens'
/// audience) must be written in its config before it listens.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The gateway behind the SDK's authorization server (`[gateway.oauth]`):
/// the SDK's client is refused without a token, follows the challenge to
/// the gateway's protected-resource metadata and on to the authorization
/// server, registers, logs in with PKCE for the gateway's resource URL, and
/// its token (a JWT the gateway checks against the published key) lists
/// and calls; the audit trail names the token's subject as the caller.
#[test]
fn the_python_sdks_client_logs_in_to_the_gateway_behind_its_authorization_server() {
    let Some(python) = common::python() else {
        return;
    };
    let provider = PythonProvider::start(&python, 600, true);
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let config = write_config(
        dir.path(),
        &format!(
            "[gateway]\ndata_dir = \"state\"\n\n[gateway.oauth]\nissuer = \"{origin}\"\n\
             audience = \"http://{listen}/mcp\"\njwks_uri = \"{origin}/jwks\"\nrequired_scopes = [\"notes\"]\n\n{DEMO}",
            origin = provider.origin
        ),
    );
    let served = common::serve_on(&config, &listen, &[], &[]);
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/oauth_peer_client.py");
    let out = Command::new(&python)
        .args([client, &served.url, "echo", "hello from python"])
        .stdin(Stdio::null())
        .output()
        .expect("the Python SDK's client runs");
    assert!(
        out.status.success(),
        "the Python client failed: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let said: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(said["is_error"], false, "{said}");
    assert!(
        said["tools"].as_array().unwrap().contains(&json!("echo")),
        "{said}"
    );
    assert!(
        said["texts"][0]
            .as_str()
            .unwrap_or_default()
            .contains("hello from python"),
        "{said}"
    );
    // It was refused first (no token), then let in with the SDK's JWT.
    served.wait_for_line("refused a request: no access token");
    assert!(
        provider.grants().iter().any(|g| g == "authorization_code"),
        "{:?}",
        provider.grants()
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let trail = runtime.block_on(common::audit_trail(&dir.path().join("state")));
    let call = trail
        .iter()
        .find(|r| r.tool.ends_with("echo"))
        .expect("the call is in the audit trail");
    assert_eq!(call.identity.as_deref(), Some("alice"), "{call:?}");
}
