//! The stdio transport: JSON-RPC lines over a child's stdin and stdout,
//! each answer read by the request it answers (`crate::answers`, instead
//! of rmcp's codec). A line longer than [`MAX_LINE_BYTES`] is dropped as
//! it arrives, never buffered whole.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use portcullis_catalog::message_line::{LineEnd, MAX_MESSAGE_LINE_BYTES, MessageLine};
use process_wrap::tokio::ChildWrapper;
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::Mutex;

use crate::answers::{Awaited, AwaitedAnswer, Incoming, Reader};

/// The longest line (one JSON-RPC message, its newline included) read from
/// a child: a longer one is dropped as it arrives, so a server that never
/// ends its line cannot make the gateway buffer without bound. The same
/// 16 MiB as rmcp's codec, which this transport replaces.
pub(crate) const MAX_LINE_BYTES: usize = MAX_MESSAGE_LINE_BYTES;

/// Read buffer: one pipe's worth, so a large answer takes few reads.
const READ_BUFFER: usize = 64 * 1024;

/// How long a closed child is given to exit, before `SIGTERM` and again
/// before it is killed (the MCP stdio shutdown sequence, as rmcp runs it).
const EXIT_WAIT: Duration = Duration::from_secs(3);

/// A child's pipes as the direct call path uses them: a request is
/// written straight to stdin by its call, and its answer handed to that
/// call by the transport's reader, never reaching rmcp (the direct path's
/// ids are from a range rmcp's never reach). Everything else on the pipes
/// stays rmcp's.
#[derive(Clone)]
pub(crate) struct ChildLines {
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    awaited: Arc<std::sync::Mutex<Awaited>>,
    handshook: Arc<AtomicBool>,
}

impl ChildLines {
    /// Whether rmcp opened the server with the `initialize` handshake.
    pub(crate) fn handshook(&self) -> bool {
        self.handshook.load(Ordering::Acquire)
    }

    /// Starts waiting for the answer to request `id` (before it is
    /// written, so the answer cannot come first); `None` when the
    /// transport is gone.
    pub(crate) fn expect(&self, id: u64) -> Option<AwaitedAnswer> {
        crate::answers::expect(&self.awaited, id)
    }

    /// Writes `message` as a line to the child's stdin. The line is
    /// written whole even if the caller stops waiting: a write that cannot
    /// finish at once finishes on a task of its own, since half a line
    /// would garble every message after it.
    pub(crate) async fn send(&self, message: ClientJsonRpcMessage) -> std::io::Result<()> {
        self.send_line(super::request_line::encode(message)?).await
    }

    /// Writes `line` (one message and its newline) as [`ChildLines::send`]
    /// writes one.
    pub(crate) async fn send_line(&self, bytes: Vec<u8>) -> std::io::Result<()> {
        let mut write: Pin<Box<_>> = Box::pin(write_bytes(self.stdin.clone(), bytes));
        match std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await {
            Poll::Ready(written) => written,
            Poll::Pending => tokio::spawn(write)
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e))),
        }
    }
}

/// Writes a whole line to the child's stdin.
async fn write_bytes(stdin: Arc<Mutex<Option<ChildStdin>>>, bytes: Vec<u8>) -> std::io::Result<()> {
    let mut stdin = stdin.lock().await;
    let Some(pipe) = stdin.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the server's stdin is closed",
        ));
    };
    pipe.write_all(&bytes).await?;
    pipe.flush().await
}

/// The child process, killed (its whole process group) when dropped unless
/// it was shut down first.
struct ChildGuard(Option<Box<dyn ChildWrapper>>);

impl ChildGuard {
    /// The MCP stdio shutdown (stdin is closed already): wait for the child
    /// to exit, then `SIGTERM` and wait again, then kill it.
    async fn shut_down(&mut self) -> std::io::Result<()> {
        let Some(child) = self.0.as_mut() else {
            return Ok(());
        };
        if exited_within(child, EXIT_WAIT).await? {
            self.0 = None;
            return Ok(());
        }
        #[cfg(unix)]
        if child.signal(libc::SIGTERM).is_ok() && exited_within(child, EXIT_WAIT).await? {
            self.0 = None;
            return Ok(());
        }
        Box::into_pin(child.kill()).await?;
        self.0 = None;
        Ok(())
    }
}

async fn exited_within(child: &mut Box<dyn ChildWrapper>, wait: Duration) -> std::io::Result<bool> {
    match tokio::time::timeout(wait, child.wait()).await {
        Ok(status) => status.map(|_| true),
        Err(_) => Ok(false),
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let Some(mut child) = self.0.take() else {
            return;
        };
        // `kill` waits for the child too, so no zombie is left behind.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(error) = Box::into_pin(child.kill()).await {
                        tracing::warn!("a stdio server could not be killed: {error}");
                    }
                });
            }
            Err(_) => {
                let _ = child.start_kill();
            }
        }
    }
}

/// The outcome of reading toward the next line.
enum LineRead {
    /// A whole line (its newline included) is in the line buffer.
    Line,
    /// A line past [`MAX_LINE_BYTES`] was dropped.
    Oversized,
    /// The child closed its stdout (or reading it failed).
    Closed,
}

/// The transport over a spawned child's pipes (see the module doc).
pub(crate) struct ChildTransport {
    child: ChildGuard,
    stdout: BufReader<ChildStdout>,
    /// The line read so far. Kept here, not in `receive`: rmcp polls
    /// `receive` in a `select!` and drops it whenever another branch is
    /// ready, and a partial line must survive that.
    line: MessageLine,
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    reader: Reader,
}

impl ChildTransport {
    /// A transport over `child`'s pipes; `server` names it in the log.
    pub(crate) fn new(
        child: Box<dyn ChildWrapper>,
        stdin: ChildStdin,
        stdout: ChildStdout,
        server: String,
    ) -> Self {
        ChildTransport {
            child: ChildGuard(Some(child)),
            stdout: BufReader::with_capacity(READ_BUFFER, stdout),
            line: MessageLine::new(MAX_LINE_BYTES),
            stdin: Arc::new(Mutex::new(Some(stdin))),
            reader: Reader::new(server),
        }
    }

    /// The pipes as the direct call path uses them ([`ChildLines`]).
    pub(crate) fn lines(&self) -> ChildLines {
        ChildLines {
            stdin: self.stdin.clone(),
            awaited: self.reader.awaited.clone(),
            handshook: self.reader.handshook.clone(),
        }
    }

    /// Reads up to the next newline without ever holding more than
    /// [`MAX_LINE_BYTES`] of a line. Cancellation-safe: bytes are moved
    /// from the reader's buffer into `line` and consumed with no await in
    /// between.
    async fn read_line(&mut self) -> LineRead {
        loop {
            let chunk = match self.stdout.fill_buf().await {
                Ok(chunk) => chunk,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    tracing::debug!(server = %self.reader.server, "reading stdout failed: {error}");
                    return LineRead::Closed;
                }
            };
            if chunk.is_empty() {
                // A last line without its newline is incomplete: dropped.
                return LineRead::Closed;
            }
            let (used, end) = self.line.take(chunk);
            let outcome = end.map(|end| match end {
                LineEnd::Complete => LineRead::Line,
                LineEnd::Oversized => LineRead::Oversized,
            });
            self.stdout.consume(used);
            if let Some(outcome) = outcome {
                return outcome;
            }
        }
    }
}

/// Writes one message as a line to the child's stdin.
async fn write_line(
    stdin: &Arc<Mutex<Option<ChildStdin>>>,
    message: ClientJsonRpcMessage,
) -> std::io::Result<()> {
    let bytes = super::request_line::encode(message)?;
    write_bytes(stdin.clone(), bytes).await
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Noted before the line is written, so its answer cannot arrive
        // first.
        self.reader.sent(&item);
        let stdin = self.stdin.clone();
        async move { write_line(&stdin, item).await }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            match self.read_line().await {
                LineRead::Line => {}
                LineRead::Oversized => {
                    tracing::warn!(
                        server = %self.reader.server,
                        "dropped a line longer than {MAX_LINE_BYTES} bytes"
                    );
                    continue;
                }
                LineRead::Closed => return None,
            }
            let incoming = self.reader.read(self.line.line());
            self.line.reset();
            match incoming {
                Incoming::Message(message) => return Some(message),
                Incoming::Refuse(answer) => {
                    // Written on its own task: `receive` may be dropped at
                    // any await, and a half-written line would garble the
                    // stream.
                    let stdin = self.stdin.clone();
                    tokio::spawn(async move {
                        let _ = write_line(&stdin, answer).await;
                    });
                }
                Incoming::Skip => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Closing stdin is the first step of the MCP stdio shutdown.
        drop(self.stdin.lock().await.take());
        self.child.shut_down().await
    }
}
