//! An MCP client over a child process's stdin/stdout, as desktop clients
//! (Claude Desktop, Cursor's and VS Code's stdio servers) talk to the
//! servers they launch: one newline-delimited JSON-RPC pipe, `initialize`
//! at 2025-11-25, then requests from any number of concurrent callers
//! multiplexed over it by id. Written by hand, like the HTTP clients of
//! the load matrix, so every byte on the pipe is known.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::process::{ChildStdin, Command};
use tokio::sync::oneshot;

/// Answers awaited, by request id.
type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// A client of one stdio MCP server this process started.
pub struct StdioClient {
    stdin: Arc<tokio::sync::Mutex<ChildStdin>>,
    waiting: Waiting,
    next_id: AtomicU64,
}

impl StdioClient {
    /// Starts `command` with piped stdin and stdout (its stderr read and
    /// dropped, as a desktop client keeps it for its log), makes the
    /// `initialize` handshake at `version` with `capabilities`, and sends
    /// `notifications/initialized`. Returns the process (killed when
    /// dropped) beside its client.
    pub async fn start(
        mut command: Command,
        version: &str,
        capabilities: Value,
    ) -> Result<(tokio::process::Child, StdioClient), String> {
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start the stdio server: {e}"))?;
        let stdin = Arc::new(tokio::sync::Mutex::new(
            child.stdin.take().ok_or("no stdin")?,
        ));
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(_)) = lines.next_line().await {}
        });
        let waiting: Waiting = Arc::default();
        tokio::spawn(read_answers(stdout, waiting.clone(), stdin.clone()));
        let client = StdioClient {
            stdin,
            waiting,
            next_id: AtomicU64::new(0),
        };
        let answer = client
            .request(
                "initialize",
                json!({"protocolVersion": version, "capabilities": capabilities,
                       "clientInfo": {"name": "load-matrix", "version": "1"}}),
            )
            .await?;
        if answer["result"]["protocolVersion"].as_str() != Some(version) {
            return Err(format!("initialize answered {answer}"));
        }
        client
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok((child, client))
    }

    /// Sends one request and waits for the message answering it.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answered, answer) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, answered);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        answer
            .await
            .map_err(|_| format!("the server closed its stdout before answering {method} {id}"))
    }

    async fn send(&self, message: &Value) -> Result<(), String> {
        write_line(&self.stdin, message).await
    }
}

/// One message and its newline, written whole (callers share the pipe).
async fn write_line(stdin: &tokio::sync::Mutex<ChildStdin>, message: &Value) -> Result<(), String> {
    let mut line = message.to_string().into_bytes();
    line.push(b'\n');
    stdin
        .lock()
        .await
        .write_all(&line)
        .await
        .map_err(|e| format!("cannot write to the stdio server: {e}"))
}

/// Hands each answer to the request waiting for it. A request from the
/// server (it has a method and an id) is refused, as a client declaring
/// no capabilities would; notifications are dropped.
async fn read_answers(
    stdout: tokio::process::ChildStdout,
    waiting: Waiting,
    stdin: Arc<tokio::sync::Mutex<ChildStdin>>,
) {
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if message.get("method").is_some() {
            if let Some(id) = message.get("id") {
                let refusal = json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": "the load client answers no requests"}});
                let _ = write_line(&stdin, &refusal).await;
            }
            continue;
        }
        let Some(id) = message.get("id").and_then(Value::as_u64) else {
            continue;
        };
        let answered = waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        if let Some(answered) = answered {
            let _ = answered.send(message);
        }
    }
    // The pipe closed: every request still waiting hears it.
    waiting
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
}
