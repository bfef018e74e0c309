//! The `portcullis serve` process the load and soak examples drive: where
//! the binary is, and one started on a free loopback port with its stderr
//! kept drained.

// Each example uses the part it needs (the soak finds the binary only).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tokio::io::AsyncBufReadExt;

/// The gateway binary: `PORTCULLIS_BIN`, else `portcullis` beside the
/// examples directory this example was built into.
pub fn binary() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("PORTCULLIS_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    exe.parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("portcullis"))
        .ok_or_else(|| "cannot find the portcullis binary; set PORTCULLIS_BIN".to_owned())
}

/// A running `portcullis serve`.
pub struct Served {
    /// The process (killed when dropped).
    pub child: tokio::process::Child,
    /// Its pid, for `/proc`.
    pub pid: u32,
    /// Its MCP endpoint, as its listening line gives it.
    pub url: String,
}

/// Starts `command` (a `Command` for the gateway binary, with any
/// environment already set) as `serve --listen 127.0.0.1:0 --config
/// CONFIG`, waits for its listening line and keeps its stderr drained (one
/// log line a call).
pub async fn serve(
    mut command: tokio::process::Command,
    bin: &Path,
    config: &Path,
) -> Result<Served, String> {
    let mut child = command
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let pid = child.id().ok_or("no gateway pid".to_owned())?;
    let mut stderr =
        tokio::io::BufReader::new(child.stderr.take().ok_or("no stderr".to_owned())?).lines();
    let url = loop {
        let line = stderr
            .next_line()
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the gateway exited before listening".to_owned())?;
        if let Some(rest) = line.strip_prefix("portcullis: listening on ") {
            break rest.split(';').next().unwrap_or_default().to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    Ok(Served { child, pid, url })
}
