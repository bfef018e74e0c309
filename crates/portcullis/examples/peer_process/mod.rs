//! Peer proxies the load matrix can put where the gateway stands, so a
//! ratio against them is measured the same way as ours: each turns a stdio
//! MCP server into a Streamable HTTP endpoint, as `portcullis serve` does
//! with a stdio upstream.
//!
//! `bash .ci/peers.sh --proxies` installs them in `.peers/` at the
//! repository's root (git-ignored):
//! * `supergateway`: the npm package `supergateway`, stdio to Streamable
//!   HTTP with sessions (`--stateful`; one stdio child per session);
//! * `ts-mcp-proxy`: the npm package `mcp-proxy` (TypeScript), one stdio
//!   child for every client;
//! * `py-mcp-proxy`: the PyPI package `mcp-proxy` (Python), one stdio child
//!   for every client.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A peer proxy the matrix knows how to start.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Peer {
    Supergateway,
    TsMcpProxy,
    PyMcpProxy,
}

const ALL: [Peer; 3] = [Peer::Supergateway, Peer::TsMcpProxy, Peer::PyMcpProxy];

impl Peer {
    /// The name `LOAD_MATRIX_PEERS` takes and the tables print.
    pub fn name(self) -> &'static str {
        match self {
            Peer::Supergateway => "supergateway",
            Peer::TsMcpProxy => "ts-mcp-proxy",
            Peer::PyMcpProxy => "py-mcp-proxy",
        }
    }

    /// `LOAD_MATRIX_PEERS` (comma-separated names, or `all`); none when
    /// unset. An unknown name is an error, not a silent skip.
    pub fn selected() -> Result<Vec<Peer>, String> {
        let Ok(list) = std::env::var("LOAD_MATRIX_PEERS") else {
            return Ok(Vec::new());
        };
        let mut peers = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "all" {
                return Ok(ALL.to_vec());
            }
            let peer = ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
                let known: Vec<&str> = ALL.iter().map(|p| p.name()).collect();
                format!(
                    "LOAD_MATRIX_PEERS: unknown peer {name:?} (known: {}, all)",
                    known.join(", ")
                )
            })?;
            if !peers.contains(&peer) {
                peers.push(peer);
            }
        }
        Ok(peers)
    }

    /// The command line that starts this peer on `port` in front of the
    /// stdio server `server` (a program and its arguments).
    fn command(self, peers: &Path, port: u16, server: &[String]) -> tokio::process::Command {
        let node = node();
        let port = port.to_string();
        match self {
            Peer::Supergateway => {
                let mut command = tokio::process::Command::new(node);
                // supergateway has no host option: the preload keeps its
                // listener on loopback.
                command
                    .env(
                        "NODE_OPTIONS",
                        format!("--require {}", peers.join("loopback-only.cjs").display()),
                    )
                    .arg(peers.join("proxies/supergateway/node_modules/.bin/supergateway"))
                    .args(["--stdio", &shell_words(server)])
                    .args(["--outputTransport", "streamableHttp", "--stateful"])
                    .args(["--port", &port, "--logLevel", "none"]);
                command
            }
            Peer::TsMcpProxy => {
                let mut command = tokio::process::Command::new(node);
                command
                    .arg(peers.join("proxies/ts-mcp-proxy/node_modules/.bin/mcp-proxy"))
                    .args(["--host", "127.0.0.1", "--port", &port, "--"])
                    .args(server);
                command
            }
            Peer::PyMcpProxy => {
                let mut command =
                    tokio::process::Command::new(peers.join("venv-mcp-proxy/bin/mcp-proxy"));
                command
                    .args(["--host", "127.0.0.1", "--port", &port, "--"])
                    .args(server);
                command
            }
        }
    }

    /// The file whose absence means the peer is not installed.
    fn installed_at(self, peers: &Path) -> PathBuf {
        match self {
            Peer::Supergateway => peers.join("proxies/supergateway/node_modules/.bin/supergateway"),
            Peer::TsMcpProxy => peers.join("proxies/ts-mcp-proxy/node_modules/.bin/mcp-proxy"),
            Peer::PyMcpProxy => peers.join("venv-mcp-proxy/bin/mcp-proxy"),
        }
    }
}

/// `LOAD_MATRIX_PEERS_DIR`, else the first `.peers` directory above this
/// example's binary (the repository root's, for a binary under `target/`).
pub fn directory() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("LOAD_MATRIX_PEERS_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    exe.ancestors()
        .map(|dir| dir.join(".peers"))
        .find(|dir| dir.is_dir())
        .ok_or_else(|| "no .peers directory above this binary; set LOAD_MATRIX_PEERS_DIR".into())
}

/// A running peer proxy.
pub struct Served {
    /// The process (killed when dropped; its stdio children end with
    /// their stdin).
    pub child: tokio::process::Child,
    /// Its pid, for `/proc`.
    pub pid: u32,
    /// Its MCP endpoint.
    pub url: String,
}

/// Starts `peer` on a free loopback port in front of `server` and waits
/// until it accepts connections.
pub async fn serve(peer: Peer, peers: &Path, server: &[String]) -> Result<Served, String> {
    let installed = peer.installed_at(peers);
    if !installed.exists() {
        return Err(format!(
            "{} is not installed ({} is missing; `bash .ci/peers.sh --proxies` installs the peers)",
            peer.name(),
            installed.display()
        ));
    }
    let port = free_port()?;
    let mut child = peer
        .command(peers, port, server)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", peer.name()))?;
    let pid = child.id().ok_or("no peer pid")?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{} exited before listening: {status}", peer.name()));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} did not listen on {addr} within 30 s",
                peer.name()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Served {
        child,
        pid,
        url: format!("http://{addr}/mcp"),
    })
}

/// A port nothing listens on now (the peers take a port number, not a
/// listener; another process could take it in between, which would fail
/// the start loudly).
fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| e.to_string())?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|e| e.to_string())
}

/// `words` as one `sh -c` command line (supergateway takes its server
/// that way), each word single-quoted.
fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|word| format!("'{}'", word.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The Node.js the matrix runs: `LOAD_MATRIX_NODE`, else `node` on `PATH`.
pub fn node() -> PathBuf {
    std::env::var_os("LOAD_MATRIX_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from)
}
