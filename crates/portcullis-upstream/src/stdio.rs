//! stdio child processes: spawned with a minimal environment, in their own
//! process group, killed with the toolset.
//!
//! A server launched from a plugin is third-party code, so it does not
//! inherit the host's environment (API keys, cloud credentials): it gets
//! [`AMBIENT_ALLOWLIST`] and the variables its config names. It runs as the
//! leader of a new process group so that `close()` — or dropping the toolset —
//! kills the whole tree (`npx` → `node` grandchildren included), not just the
//! direct child.

use std::process::Stdio;

use portcullis_catalog::log_line::{DEFAULT_MAX_LINE_BYTES, LineSplitter};
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::config::StdioConfig;

mod program;
mod request_line;
mod transport;

pub(crate) use transport::{ChildLines, ChildTransport};

/// Variables a child inherits from the host, when set there.
pub const AMBIENT_ALLOWLIST: &[&str] = &["PATH", "HOME", "TMPDIR", "LANG", "LC_ALL"];

/// A spawned child: the transport over its pipes and its pid.
pub(crate) struct Spawned {
    pub(crate) transport: ChildTransport,
    pub(crate) pid: Option<u32>,
}

/// Spawns `config`'s command. Its stderr is drained into `tracing` at debug
/// level (a full pipe would block the child).
pub(crate) fn spawn(config: &StdioConfig) -> std::io::Result<Spawned> {
    // The PATH the child gets: its config's, else the host's.
    let child_path = match config.env.get("PATH") {
        Some(path) => Some(std::ffi::OsString::from(path)),
        None => std::env::var_os("PATH"),
    };
    let mut command = match program::locate(&config.command, child_path.as_deref()) {
        Some(found) => {
            let mut command = tokio::process::Command::new(found);
            // The child sees the name it was configured with, as before.
            #[cfg(unix)]
            command.arg0(&config.command);
            command
        }
        None => tokio::process::Command::new(&config.command),
    };
    command.args(&config.args).env_clear();
    for key in AMBIENT_ALLOWLIST {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    command.envs(&config.env);
    if let Some(plugin) = &config.plugin {
        // Set last so a plugin's own `env` can never redirect them (the
        // parser already refuses such keys; this is the second line).
        command.env("PLUGIN_ROOT", &plugin.root);
        command.env("PLUGIN_DATA", &plugin.data_root);
    }
    match (&config.cwd, &config.plugin) {
        (Some(cwd), _) => {
            command.current_dir(cwd);
        }
        // A plugin server runs in its plugin, never in the host's directory.
        (None, Some(plugin)) => {
            command.current_dir(&plugin.root);
        }
        (None, None) => {}
    }
    let mut wrapped = CommandWrap::from(command);
    wrapped.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    wrapped
        .command_mut()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = wrapped.spawn()?;
    let taken = std::io::Error::other;
    let stdin = child.stdin().take().ok_or_else(|| taken("no stdin pipe"))?;
    let stdout = child
        .stdout()
        .take()
        .ok_or_else(|| taken("no stdout pipe"))?;
    if let Some(stderr) = child.stderr().take() {
        tokio::spawn(drain_stderr(stderr, config.name.clone()));
    }
    let pid = child.id();
    let transport = ChildTransport::new(child, stdin, stdout, config.name.clone());
    Ok(Spawned { transport, pid })
}

/// Logs a child's stderr at debug level until it closes: each line capped
/// and escaped (see [`portcullis_catalog::log_line`]), so neither a flood
/// without a newline nor a byte that is not UTF-8 makes the gateway buffer
/// without bound or stop reading (the child would block on a full pipe).
async fn drain_stderr(mut stderr: impl AsyncRead + Unpin, server: String) {
    let mut splitter = LineSplitter::new(DEFAULT_MAX_LINE_BYTES);
    let log = |line: portcullis_catalog::log_line::LogLine| {
        tracing::debug!(server = %server, "stderr: {line}");
    };
    let mut chunk = vec![0; 8 * 1024];
    loop {
        match stderr.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => splitter.feed(&chunk[..n], log),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    if let Some(line) = splitter.finish() {
        log(line);
    }
}
