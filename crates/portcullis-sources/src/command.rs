//! Running a native tool's handler command.
//!
//! One call is one process: the handler gets a JSON request on stdin,
//!
//! ```json
//! {"arguments": {...}, "context": {"config": {...}}}
//! ```
//!
//! and answers on stdout with an MCP `CallToolResult` (`{"content": [...]}`)
//! or, failing that, plain text, which becomes one text item. Its stderr goes
//! to the log line by line, each line capped at 8 KiB and escaped. It runs in the plugin directory with a cleared
//! environment (only `PATH`, `HOME`, `TMPDIR`, `LANG`, `LC_ALL` pass, plus
//! `PLUGIN_ROOT`), so the gateway's own secrets never reach plugin code.
//!
//! Failures: a non-zero exit, a timeout, output that is not UTF-8 or over the
//! cap, or a `{"content": …}` object that is not a valid result. When the
//! handler printed a line starting with `ERR_` (stdout or stderr) that line
//! is the error message and reaches the model; otherwise the message is for
//! the log and the model sees `ERR_TOOL_FAILED`. The handler runs as the
//! leader of its own process group: a timeout or a cancelled call kills the
//! whole group, so nothing it started outlives the call that way. (A
//! handler that exits normally and leaves a daemon behind is not chased.)

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use portcullis_catalog::ToolResult;
use portcullis_catalog::log_line::{DEFAULT_MAX_LINE_BYTES, LineSplitter, LogLine};
use portcullis_handler::{CallContext, ToolError, ToolFuture, ToolHandler};
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// Default bound on one call: 60 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Default cap on a handler's stdout.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 16 * 1024 * 1024;

/// Ambient variables a handler inherits; everything else is cleared.
const PASSED_ENV: [&str; 5] = ["PATH", "HOME", "TMPDIR", "LANG", "LC_ALL"];

/// How much of stderr is kept to look for an `ERR_` line (all of it is
/// logged, line by line).
const STDERR_SCAN_BYTES: usize = 64 * 1024;

/// Limits for one call.
#[derive(Debug, Clone, Copy)]
pub struct CommandOptions {
    /// Kill the handler after this long.
    pub timeout: Duration,
    /// Refuse stdout beyond this many bytes.
    pub max_output_bytes: usize,
}

/// A [`ToolHandler`] that runs a command per call.
#[derive(Debug, Clone)]
pub struct CommandHandler {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    command: PathBuf,
    dir: PathBuf,
    config: Arc<Value>,
    options: CommandOptions,
}

impl CommandHandler {
    /// A handler running `command` in `dir`, with `config` as the context.
    pub fn new(
        command: PathBuf,
        dir: PathBuf,
        config: Arc<Value>,
        options: CommandOptions,
    ) -> Self {
        CommandHandler {
            inner: Arc::new(Inner {
                command,
                dir,
                config,
                options,
            }),
        }
    }
}

impl ToolHandler for CommandHandler {
    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let inner = self.inner.clone();
        Box::pin(async move { inner.run(args, ctx).await })
    }
}

impl Inner {
    async fn run(&self, args: Value, ctx: CallContext) -> Result<ToolResult, ToolError> {
        let tool = ctx.tool().to_owned();
        let request = json!({"arguments": args, "context": {"config": &*self.config}});
        let request = serde_json::to_vec(&request)?;

        let mut command = Command::new(&self.command);
        command
            .current_dir(&self.dir)
            .env_clear()
            .env("PLUGIN_ROOT", &self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for name in PASSED_ENV {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        // Its own process group, so a timeout or a cancellation kills what
        // the handler started too (a shell script's `sleep`, say), not only
        // the handler itself.
        let mut wrapped = CommandWrap::from(command);
        wrapped.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
        let mut child = wrapped.spawn().map_err(|e| {
            ToolError::msg(format!(
                "cannot start handler {}: {e}",
                self.command.display()
            ))
        })?;

        let (Some(mut stdin), Some(stdout), Some(stderr)) = (
            child.stdin().take(),
            child.stdout().take(),
            child.stderr().take(),
        ) else {
            return Err(ToolError::msg("handler pipes unavailable"));
        };
        // Written concurrently with reading stdout, so a handler that answers
        // before reading everything cannot deadlock against a full pipe. A
        // handler that ignores stdin closes it early: not an error.
        let writer = async move {
            let _ = stdin.write_all(&request).await;
            let _ = stdin.shutdown().await;
        };
        let limit = self.options.max_output_bytes;
        let cancel = ctx.cancellation().clone();
        // Fired when stdout passes the cap: stop at once rather than let a
        // flooding handler run (blocked on a full pipe) until the timeout.
        let overflow = CancellationToken::new();
        let outcome = {
            let reading = async {
                let out = read_capped(stdout, limit).await;
                if out.is_err() {
                    overflow.cancel();
                }
                out
            };
            let work = async {
                let ((), out, err, status) =
                    tokio::join!(writer, reading, log_stderr(stderr, &tool), child.wait());
                (out, err, status)
            };
            tokio::select! {
                done = tokio::time::timeout(self.options.timeout, work) => match done {
                    Ok(done) => Outcome::Finished(done),
                    Err(_) => Outcome::TimedOut,
                },
                _ = cancel.cancelled() => Outcome::Cancelled,
                _ = overflow.cancelled() => Outcome::Overflowed,
            }
        };
        let (out, err_scan, status) = match outcome {
            Outcome::Finished(done) => done,
            Outcome::TimedOut => {
                let _ = child.start_kill();
                return Err(ToolError::msg(format!(
                    "handler timed out after {} ms",
                    self.options.timeout.as_millis()
                )));
            }
            Outcome::Cancelled => {
                let _ = child.start_kill();
                return Err(ToolError::msg("cancelled by the client"));
            }
            Outcome::Overflowed => {
                let _ = child.start_kill();
                return Err(ToolError::msg(format!(
                    "handler output exceeds {limit} bytes"
                )));
            }
        };

        let status = status.map_err(|e| ToolError::msg(format!("handler wait failed: {e}")))?;
        let out = out.map_err(ToolError::msg)?;
        if !status.success() {
            let coded = first_err_line(&out).or_else(|| first_err_line(&err_scan));
            return Err(ToolError::msg(
                coded.unwrap_or_else(|| format!("handler exited with {status}")),
            ));
        }
        parse_output(out)
    }
}

type Finished = (
    Result<Vec<u8>, String>,
    Vec<u8>,
    std::io::Result<std::process::ExitStatus>,
);

/// How a run ended.
enum Outcome {
    Finished(Finished),
    TimedOut,
    Cancelled,
    Overflowed,
}

/// Reads at most `limit` bytes; more is an error (the rest is not read, and
/// the process is killed when the call ends).
async fn read_capped(stream: impl AsyncRead + Unpin, limit: usize) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    stream
        .take(cap)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| format!("cannot read handler output: {e}"))?;
    if bytes.len() > limit {
        return Err(format!("handler output exceeds {limit} bytes"));
    }
    Ok(bytes)
}

/// Logs stderr line by line, each line capped and escaped (see
/// [`portcullis_catalog::log_line`]); keeps the first bytes to look for
/// `ERR_`. Drains to the end whatever arrives, so the handler never blocks
/// on a full pipe, and holds at most one capped line.
async fn log_stderr(mut stream: impl AsyncRead + Unpin, tool: &str) -> Vec<u8> {
    let mut splitter = LineSplitter::new(DEFAULT_MAX_LINE_BYTES);
    let mut kept = Vec::new();
    let mut log = |line: LogLine| {
        tracing::info!(tool, stderr = %line, "plugin handler");
        if kept.len() < STDERR_SCAN_BYTES {
            kept.extend_from_slice(line.text.as_bytes());
            kept.push(b'\n');
        }
    };
    let mut chunk = vec![0; 8 * 1024];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => splitter.feed(&chunk[..n], &mut log),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    if let Some(line) = splitter.finish() {
        log(line);
    }
    kept
}

fn first_err_line(bytes: &[u8]) -> Option<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("ERR_"))
        .map(str::to_owned)
}

/// A `CallToolResult` object, or plain text.
fn parse_output(out: Vec<u8>) -> Result<ToolResult, ToolError> {
    let text = String::from_utf8(out).map_err(|_| ToolError::msg("handler output is not UTF-8"))?;
    if let Ok(Value::Object(object)) = serde_json::from_str::<Value>(&text)
        && object.contains_key("content")
    {
        // It claims to be a result: it must be a valid one.
        return serde_json::from_value(Value::Object(object))
            .map_err(|e| ToolError::msg(format!("handler answered a malformed result: {e}")));
    }
    Ok(ToolResult::text(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_a_result_or_text() {
        let result =
            parse_output(br#"{"content":[{"type":"text","text":"hi"}]}"#.to_vec()).unwrap();
        assert_eq!(result.text_blocks().next(), Some("hi"));
        let text = parse_output(b"plain words\n".to_vec()).unwrap();
        assert_eq!(text.text_blocks().next(), Some("plain words\n"));
        let other_json = parse_output(br#"{"status":"ok"}"#.to_vec()).unwrap();
        assert_eq!(other_json.text_blocks().next(), Some(r#"{"status":"ok"}"#));
        assert!(parse_output(br#"{"content":"nope"}"#.to_vec()).is_err());
        assert!(parse_output(vec![0xff, 0xfe]).is_err());
    }

    #[test]
    fn an_err_line_is_found_anywhere() {
        assert_eq!(
            first_err_line(b"noise\n  ERR_DEVICE_OFFLINE: m3\nmore"),
            Some("ERR_DEVICE_OFFLINE: m3".into())
        );
        assert_eq!(first_err_line(b"error: ERR_X"), None);
    }
}
