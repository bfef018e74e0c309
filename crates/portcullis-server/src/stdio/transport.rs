//! The stdio surface's transport: one JSON-RPC message a line on the
//! client's pipe, and every line that is not one answered.
//!
//! rmcp's own transport drops a line that is not JSON without a word (the
//! client waiting on that request's id hangs), and answers JSON that is no
//! message with `-32600` and no id, even when the line has a readable one.
//! Here each such line gets the JSON-RPC error the HTTP surface gives the
//! same body (`crate::malformed`): `-32700` when it is not JSON, `-32600`
//! when it is JSON but no message (a batch among them), `-32602` for
//! `params` that are not an object; with the line's `id` when it has a
//! usable one, else `null`. Neither the answer nor the warning logged
//! repeats the line (its head, capped and escaped, is logged at debug). A
//! peer that echoes the answer back does not start an error storm: an
//! error is a readable message, which rmcp's service drops unanswered.
//!
//! A line that is an answer (no `method`, a `result` or an `error`) to one
//! of the server's requests (an approval's elicitation) and cannot be read
//! is answered with id `null` (the id is the server's, not one the client
//! waits on), and its request fails at once instead of waiting out its
//! timeout.
//!
//! Blank lines are skipped. A line longer than [`MAX_LINE_BYTES`] is
//! answered `-32700` once, when it crosses the limit, and the rest of it
//! is skipped as it arrives, never held. Every line that is a message is
//! read exactly as rmcp reads it (its compatibility rules included), and
//! messages are written as rmcp writes them: one serialised message and a
//! newline.
//!
//! With a [`Drain`] (the server stops on a signal), the transport drains
//! as the HTTP surface does: once `stop` is cancelled no request reaches
//! rmcp any more (each is answered at once with the shutdown's JSON-RPC
//! error, `crate::shutdown::cut_off`; answers and notifications still
//! pass), the requests in flight are waited for up to the grace, and
//! then those still unanswered get that error too (an answer rmcp writes
//! for one later is dropped: one answer an id) and the transport ends.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use portcullis_catalog::log_line::LineSplitter;
use portcullis_catalog::message_line::{
    LineEnd, MAX_MESSAGE_LINE_BYTES, MessageLine, describe_unreadable,
};
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequest, ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorCode, ErrorData,
    JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::JsonRpcMessageCodec;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;

use super::direct::{ADOPTION_WAIT, DirectCalls, EOF_GRACE};
use crate::malformed::{error_body, unreadable};
use crate::tool_call::PlainCall;

/// The longest line (one JSON-RPC message, its newline included) read from
/// the client: the same 16 MiB as rmcp's transport, which this replaces.
pub(crate) const MAX_LINE_BYTES: usize = MAX_MESSAGE_LINE_BYTES;

/// How much of an unreadable line the log shows.
const LOGGED_BYTES: usize = 256;

/// What one line from the client comes to.
#[derive(Debug)]
enum Incoming {
    /// A `tools/call`, read as exactly that: for the direct path
    /// (`super::direct`) or, made into rmcp's message, for rmcp's service.
    Call(PlainCall),
    /// A message for rmcp's service.
    Message(ClientJsonRpcMessage),
    /// No message: the error to answer the client with (one JSON-RPC
    /// error), and, for an unreadable answer to a request of the server's,
    /// the error that fails that request.
    Refuse(Value, Option<ClientJsonRpcMessage>),
    /// Nothing: a blank line, or a notification rmcp ignores.
    Skip,
}

/// Reads one line (its newline taken off).
fn read(line: &[u8]) -> Incoming {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Incoming::Skip;
    }
    // rmcp's reading: a byte order mark ignored, then the message.
    let json = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if let Some(call) = PlainCall::read(json) {
        return Incoming::Call(call);
    }
    match serde_json::from_slice::<ClientJsonRpcMessage>(json) {
        Ok(message) => Incoming::Message(message),
        Err(_) if ignored_by_rmcp(line) => Incoming::Skip,
        Err(error) => refuse(json, &error),
    }
}

/// A `tools/call` read straight into its params, as the message rmcp's
/// reading makes of the same line (its `_meta` moved to the request's
/// extensions). Nearly every line is one, and rmcp's reading tries each
/// kind of message in turn (a `serde_json` error built for each miss)
/// through buffered, flattened maps: a quarter of a proxied call's
/// instructions. Any other line, or a call this does not read, is read as
/// rmcp reads it.
fn call_message(call: PlainCall) -> ClientJsonRpcMessage {
    let PlainCall { id, mut params, .. } = call;
    let meta = params.meta.take();
    let mut request = CallToolRequest::new(params);
    if let Some(meta) = meta {
        request.extensions.insert(meta);
    }
    ClientJsonRpcMessage::request(ClientRequest::CallToolRequest(request), id)
}

/// Whether rmcp skips this unreadable line rather than refusing it (a
/// notification that is not MCP's, such as another protocol's). Asked of
/// rmcp's own codec, so the rule stays rmcp's.
fn ignored_by_rmcp(line: &[u8]) -> bool {
    let mut frame = BytesMut::with_capacity(line.len() + 1);
    frame.extend_from_slice(line);
    frame.extend_from_slice(b"\n");
    matches!(
        JsonRpcMessageCodec::<ClientJsonRpcMessage>::default().decode(&mut frame),
        Ok(None)
    )
}

/// The answer to a line that is no message (see the module docs).
fn refuse(line: &[u8], error: &serde_json::Error) -> Incoming {
    let (code, message, mut id) = unreadable(line, "line");
    let failed = answered_request(line).map(|request| {
        id = Value::Null;
        ClientJsonRpcMessage::error(
            ErrorData::invalid_request("the client's answer could not be read", None),
            Some(request),
        )
    });
    // The warning names no text of the line: a cut-off `tools/call` would
    // put argument values in the log. Its head, capped and escaped, is
    // there at debug level for whoever asks.
    tracing::warn!(
        "answered a line on stdin that is not a JSON-RPC message with {} ({}; {} bytes)",
        code.0,
        describe_unreadable(error),
        line.len(),
    );
    tracing::debug!("the unreadable line began: {}", logged(line));
    Incoming::Refuse(error_body(id, code, &message), failed)
}

/// The id of a line shaped as an answer (no `method`; a `result` or an
/// `error`), when it is one rmcp could name.
fn answered_request(line: &[u8]) -> Option<RequestId> {
    let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(line) else {
        return None;
    };
    if message.contains_key("method")
        || !(message.contains_key("result") || message.contains_key("error"))
    {
        return None;
    }
    serde_json::from_value(message.get("id")?.clone()).ok()
}

/// The head of `line`, capped and escaped for the log.
fn logged(line: &[u8]) -> String {
    let mut splitter = LineSplitter::new(LOGGED_BYTES);
    let mut out = String::new();
    splitter.feed(&line[..line.len().min(4 * LOGGED_BYTES)], |l| {
        out = l.to_string();
    });
    if let Some(l) = splitter.finish() {
        out = l.to_string();
    }
    if line.len() > 4 * LOGGED_BYTES {
        out.push_str(&format!(" … [{} bytes in all]", line.len()));
    }
    out
}

/// The outcome of reading toward the next line.
enum LineRead {
    /// A whole line (its newline included) is in the line buffer.
    Line,
    /// A line past [`MAX_LINE_BYTES`] crossed the limit and is being
    /// skipped.
    Oversized,
    /// The client closed the pipe (or reading it failed).
    Closed,
    /// Nothing read: the drain moved on; read again.
    Skipped,
}

/// How a transport drains when its server stops (see the module docs).
pub(crate) struct Drain {
    /// Cancelled when the server stops.
    pub(crate) stop: CancellationToken,
    /// How long the requests in flight then have to be answered.
    pub(crate) grace: Duration,
    /// Cancelled by the transport once the grace ran out and the requests
    /// still in flight were cut off: nothing is left to wait for.
    pub(crate) gave_up: CancellationToken,
}

/// The client's requests in flight, answered by rmcp or by the direct
/// path.
#[derive(Debug, Default)]
struct InFlight {
    /// Not answered yet.
    open: HashSet<RequestId>,
    /// Answered with the shutdown's error: the answer given later is
    /// dropped.
    cut: HashSet<RequestId>,
}

/// The record of the client's requests in flight, shared with whatever
/// writes their answers (rmcp's sends, the direct calls' tasks): one
/// answer an id, and what the drain waits for.
#[derive(Clone, Default)]
struct Book {
    in_flight: Arc<std::sync::Mutex<InFlight>>,
    /// Told when the last open request is answered.
    settled: Arc<Notify>,
}

impl Book {
    fn lock(&self) -> std::sync::MutexGuard<'_, InFlight> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Request `id` is now in flight: `false` if one with that id
    /// already was.
    fn opened(&self, id: &RequestId) -> bool {
        self.lock().open.insert(id.clone())
    }

    /// Request `id` is being answered: `false` if the drain cut it off
    /// already (its answer was given, this one is dropped).
    fn answered(&self, id: &RequestId) -> bool {
        let mut in_flight = self.lock();
        if in_flight.cut.remove(id) {
            return false;
        }
        if in_flight.open.remove(id) && in_flight.open.is_empty() {
            self.settled.notify_one();
        }
        true
    }

    /// The client cancelled request `id`: it needs no answer.
    fn cancelled(&self, id: &RequestId) {
        let mut in_flight = self.lock();
        if in_flight.open.remove(id) && in_flight.open.is_empty() {
            self.settled.notify_one();
        }
    }
}

/// Where a draining transport is.
struct Draining {
    drain: Drain,
    /// When the grace runs out; `None` until `stop` is seen.
    deadline: Option<Instant>,
    /// The client closed its pipe during the drain.
    eof: bool,
    /// The grace ran out: the transport is at its end.
    ended: bool,
}

/// The stdio transport (see the module docs), over any byte pipe.
pub(crate) struct StdioTransport<R, W> {
    read: BufReader<R>,
    /// The line read so far. Kept here, not in `receive`: rmcp polls
    /// `receive` in a `select!` and drops it whenever another branch is
    /// ready, and a partial line must survive that.
    line: MessageLine,
    write: Arc<Mutex<Option<W>>>,
    /// The answer to an unreadable line, being written on a task of its
    /// own (a half-written line, were `receive` dropped, would garble the
    /// stream): awaited before the next line is read, so answers keep the
    /// order of the lines.
    answering: Option<JoinHandle<bool>>,
    /// The error that fails a request of the server's whose answer could
    /// not be read, handed on once the client's answer is written (so the
    /// client hears of its line before the call's outcome).
    failing: Option<ClientJsonRpcMessage>,
    /// The client's requests in flight.
    book: Book,
    /// Set when the server may stop while the client is connected.
    draining: Option<Draining>,
    /// Plain calls answered in front of rmcp's service, when the server
    /// gives a path for them.
    direct: Option<DirectCalls>,
    /// Set once `initialize` went to rmcp: no further line is read until
    /// the session's adoption is decided, or this passes.
    adopting_until: Option<Instant>,
    /// When the client's closing of the pipe stops waiting for the direct
    /// calls' answers (set at the close).
    eof_until: Option<Instant>,
}

impl<R, W> StdioTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// A transport reading `read` and writing `write`.
    pub(crate) fn new(read: R, write: W) -> Self {
        StdioTransport {
            read: BufReader::new(read),
            line: MessageLine::new(MAX_LINE_BYTES),
            write: Arc::new(Mutex::new(Some(write))),
            answering: None,
            failing: None,
            book: Book::default(),
            draining: None,
            direct: None,
            adopting_until: None,
            eof_until: None,
        }
    }

    /// This transport, answering plain calls on `direct`.
    pub(crate) fn with_direct(mut self, direct: DirectCalls) -> Self {
        self.direct = Some(direct);
        self
    }

    /// This transport, draining as `drain` says when its server stops.
    pub(crate) fn with_drain(mut self, drain: Drain) -> Self {
        self.draining = Some(Draining {
            drain,
            deadline: None,
            eof: false,
            ended: false,
        });
        self
    }

    /// Notes a message on its way to rmcp: a request is in flight until
    /// answered (and `initialize` starts the adoption's wait); one the
    /// client cancels needs no answer (nor does a direct call it cancels).
    /// A request reusing the id of one in flight is answered by rmcp
    /// alone: a direct call with that id is no longer answered.
    fn note(&mut self, message: &ClientJsonRpcMessage) {
        match message {
            JsonRpcMessage::Request(request) => {
                if !self.book.opened(&request.id)
                    && let Some(direct) = &self.direct
                {
                    direct.supersede(&request.id);
                }
                if self.direct.is_some()
                    && matches!(request.request, ClientRequest::InitializeRequest(_))
                {
                    self.adopting_until = Some(Instant::now() + ADOPTION_WAIT);
                }
            }
            JsonRpcMessage::Notification(notice) => {
                if let ClientNotification::CancelledNotification(cancelled) = &notice.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    if let Some(direct) = &self.direct {
                        direct.cancel(id);
                    }
                    self.book.cancelled(id);
                }
            }
            _ => {}
        }
    }

    /// Reads the next line, or, draining, what the drain comes to:
    /// `None` once the transport is to end.
    async fn next_line(&mut self) -> Option<LineRead> {
        let Some(draining) = self.draining.as_mut() else {
            return Some(self.read_line().await);
        };
        if draining.ended {
            draining.drain.gave_up.cancel();
            return None;
        }
        let Some(deadline) = draining.deadline else {
            let stop = draining.drain.stop.clone();
            return tokio::select! {
                read = self.read_line() => Some(read),
                () = stop.cancelled() => {
                    if let Some(draining) = self.draining.as_mut() {
                        draining.deadline = Some(Instant::now() + draining.drain.grace);
                    }
                    // Read again: the drain begins.
                    Some(LineRead::Skipped)
                }
            };
        };
        if self.book.lock().open.is_empty() {
            return None;
        }
        let settled = self.book.settled.clone();
        let eof = draining.eof;
        tokio::select! {
            read = self.read_line(), if !eof => Some(read),
            () = settled.notified() => Some(LineRead::Skipped),
            () = tokio::time::sleep_until(deadline) => {
                self.cut_off();
                Some(LineRead::Skipped)
            }
        }
    }

    /// The grace ran out: every request still in flight is answered with
    /// the shutdown's error, and the transport ends once that is written.
    fn cut_off(&mut self) {
        let Some(draining) = self.draining.as_mut() else {
            return;
        };
        draining.ended = true;
        let mut lines = Vec::new();
        let mut in_flight = self.book.lock();
        let open: Vec<RequestId> = in_flight.open.drain().collect();
        for id in open {
            lines.extend_from_slice(&crate::shutdown::cut_off(&id));
            lines.push(b'\n');
            in_flight.cut.insert(id);
        }
        drop(in_flight);
        if !lines.is_empty() {
            tracing::warn!("requests still in flight at the end of the grace were cancelled");
            self.write_answer(lines);
        }
    }

    /// Reads up to the next newline without ever holding more than
    /// [`MAX_LINE_BYTES`] of a line. Cancellation-safe: bytes are moved
    /// from the reader's buffer into `line` and consumed with no await in
    /// between.
    async fn read_line(&mut self) -> LineRead {
        loop {
            let chunk = match self.read.fill_buf().await {
                Ok(chunk) => chunk,
                Err(error) => {
                    tracing::error!("Error reading from stream: {error}");
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
            self.read.consume(used);
            if let Some(outcome) = outcome {
                return outcome;
            }
        }
    }

    /// Refuses request `id` at once: the server is stopping, and takes no
    /// new work.
    fn refuse_stopping(&mut self, id: &RequestId) {
        let mut line = crate::shutdown::cut_off(id).to_vec();
        line.push(b'\n');
        self.write_answer(line);
    }

    /// Runs a direct call on a task of its own, which writes its answer.
    /// Its id is in the book already.
    fn answer_direct(&mut self, started: super::direct::Started) {
        let super::direct::Started { id, answer, done } = started;
        let book = self.book.clone();
        let write = self.write.clone();
        tokio::spawn(async move {
            let Some(mut line) = answer.await else {
                return;
            };
            if !book.answered(&id) {
                return;
            }
            line.push(b'\n');
            if let Err(error) = write_line(&write, &line).await {
                tracing::debug!(%error, "a call's answer was not written: the client is gone");
            }
            // Only now: the end of the client's pipe waits for this.
            drop(done);
        });
    }

    /// Writes `answer` as one line, on a task of its own.
    fn answer(&mut self, answer: &Value) {
        let mut bytes = answer.to_string().into_bytes();
        bytes.push(b'\n');
        self.write_answer(bytes);
    }

    /// Writes `bytes` (whole lines), on a task of its own.
    fn write_answer(&mut self, bytes: Vec<u8>) {
        let write = self.write.clone();
        self.answering = Some(tokio::spawn(async move {
            write_line(&write, &bytes).await.is_ok()
        }));
    }
}

/// Writes one line (its newline included) whole.
async fn write_line<W: AsyncWrite + Unpin>(
    write: &Mutex<Option<W>>,
    line: &[u8],
) -> std::io::Result<()> {
    let mut write = write.lock().await;
    let Some(pipe) = write.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "Transport is closed",
        ));
    };
    pipe.write_all(line).await?;
    pipe.flush().await
}

impl<R, W> Transport<RoleServer> for StdioTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // An answer to a request cut off by the drain was given already.
        let id = match &item {
            JsonRpcMessage::Response(response) => Some(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        if let Some(id) = id
            && !self.book.answered(id)
        {
            return futures::future::Either::Left(std::future::ready(Ok(())));
        }
        let write = self.write.clone();
        futures::future::Either::Right(async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            write_line(&write, &line).await
        })
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        // Past `initialize`, a call is read only once rmcp's answer has
        // decided whether it may take the direct path. One deadline,
        // however often rmcp's loop drops this and asks again.
        if let Some(until) = self.adopting_until {
            if let Some(direct) = &self.direct {
                direct.decided(until).await;
            }
            self.adopting_until = None;
        }
        loop {
            if let Some(answering) = self.answering.as_mut() {
                // A client that can no longer be answered is gone.
                let written = answering.await.unwrap_or(false);
                self.answering = None;
                if !written {
                    return None;
                }
            }
            if let Some(failing) = self.failing.take() {
                return Some(failing);
            }
            match self.next_line().await? {
                LineRead::Line => {}
                LineRead::Skipped => continue,
                LineRead::Oversized => {
                    tracing::warn!(
                        "answered a line on stdin longer than {MAX_LINE_BYTES} bytes with -32700; \
                         its rest is skipped"
                    );
                    self.answer(&error_body(
                        Value::Null,
                        ErrorCode::PARSE_ERROR,
                        &format!("Parse error: the line is longer than {MAX_LINE_BYTES} bytes"),
                    ));
                    continue;
                }
                LineRead::Closed => match self.draining.as_mut() {
                    // Draining: the answers in flight are still written.
                    Some(draining) if draining.deadline.is_some() => {
                        draining.eof = true;
                        continue;
                    }
                    _ => {
                        // The direct calls' answers are written before the
                        // transport ends (rmcp then waits for its own, and
                        // closes it). One deadline, however often rmcp's
                        // loop drops this and asks again.
                        if let Some(direct) = &self.direct {
                            let until = *self
                                .eof_until
                                .get_or_insert_with(|| Instant::now() + EOF_GRACE);
                            direct.settled(until).await;
                        }
                        return None;
                    }
                },
            }
            let incoming = read(self.line.line());
            self.line.reset();
            let stopping = self.draining.as_ref().is_some_and(|d| d.deadline.is_some());
            match incoming {
                Incoming::Call(call) if stopping => self.refuse_stopping(&call.id),
                Incoming::Message(JsonRpcMessage::Request(request)) if stopping => {
                    self.refuse_stopping(&request.id);
                }
                Incoming::Call(call) => {
                    // An id in flight goes to rmcp (`note`).
                    if let Some(direct) = &self.direct
                        && let Some(peer) = direct.takes(&call)
                        && self.book.opened(&call.id)
                    {
                        let started = direct.start(call, peer);
                        self.answer_direct(started);
                        continue;
                    }
                    let message = call_message(call);
                    self.note(&message);
                    return Some(message);
                }
                Incoming::Message(message) => {
                    self.note(&message);
                    return Some(message);
                }
                Incoming::Refuse(answer, failed) => {
                    self.answer(&answer);
                    self.failing = failed;
                }
                Incoming::Skip => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.write.lock().await.take());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::JsonRpcMessage;
    use serde_json::json;
    use tokio::io::AsyncReadExt;

    fn refusal(line: &[u8]) -> (Value, Option<ClientJsonRpcMessage>) {
        match read(line) {
            Incoming::Refuse(answer, failed) => (answer, failed),
            other => panic!("{line:?}: expected a refusal, got {other:?}"),
        }
    }

    /// A `tools/call` read by its own reading is the message rmcp's
    /// reading makes of the same line: the same request, id and `_meta`
    /// (moved to the request's extensions, where rmcp puts it and the
    /// handler reads it).
    #[test]
    fn a_call_is_read_as_rmcp_reads_it() {
        use rmcp::model::GetExtensions;
        let lines = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": "hi"}}}),
            json!({"jsonrpc": "2.0", "id": "call-7", "method": "tools/call",
                "params": {"name": "echo"}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": "m\u{e9}\"\n"},
                    "_meta": {"progressToken": 7}}}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "echo", "arguments": {},
                    "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
                        "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"}}}}),
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "extra": true,
                "params": {"name": "echo", "arguments": {"n": [1, 2.5, null]}}}),
        ];
        for line in lines {
            let line = line.to_string();
            assert!(PlainCall::read(line.as_bytes()).is_some(), "{line}");
            let Incoming::Call(call) = read(line.as_bytes()) else {
                panic!("{line}: not read as a call");
            };
            let ours = call_message(call);
            let rmcps: ClientJsonRpcMessage = serde_json::from_str(&line).unwrap();
            assert_eq!(
                serde_json::to_value(&ours).unwrap(),
                serde_json::to_value(&rmcps).unwrap(),
                "{line}"
            );
            let meta = |m: &ClientJsonRpcMessage| match m {
                JsonRpcMessage::Request(r) => r
                    .request
                    .extensions()
                    .get::<rmcp::model::RequestMetaObject>()
                    .cloned(),
                _ => panic!("not a request"),
            };
            assert_eq!(meta(&ours), meta(&rmcps), "{line}");
        }
    }

    /// A `tools/call` that also carries a `result` or an `error` (even
    /// `null`) is neither a request nor an answer: rmcp refuses it, and so
    /// does the call's own reading (it does not run the tool).
    #[test]
    fn a_call_that_is_also_an_answer_is_refused_as_rmcp_refuses_it() {
        for extra in [
            json!({"result": null}),
            json!({"result": {}}),
            json!({"error": {}}),
        ] {
            let mut line = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "echo", "arguments": {}}});
            for (key, value) in extra.as_object().unwrap() {
                line[key] = value.clone();
            }
            let line = line.to_string();
            assert!(
                serde_json::from_str::<ClientJsonRpcMessage>(&line).is_err(),
                "{line}"
            );
            assert!(PlainCall::read(line.as_bytes()).is_none(), "{line}");
            let (answer, _) = refusal(line.as_bytes());
            assert_eq!(answer["error"]["code"], -32600, "{line}: {answer}");
        }
    }

    /// Each unreadable line gets the code and id the HTTP surface gives
    /// the same body, and its text never comes back.
    #[test]
    fn unreadable_lines_get_the_http_surfaces_error() {
        for (line, code, id) in [
            (&b"this is not json"[..], -32700, Value::Null),
            (
                br#"{"jsonrpc":"2.0","id":2,"method":"tools/list""#,
                -32700,
                Value::Null,
            ),
            (b"\xff\xfe", -32700, Value::Null),
            (br#"{"jsonrpc":"2.0","id":7,"method":42}"#, -32600, json!(7)),
            (
                br#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#,
                -32600,
                json!("a"),
            ),
            (
                br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                -32600,
                Value::Null,
            ),
            (b"42", -32600, Value::Null),
            (
                br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":"x"}"#,
                -32602,
                json!(5),
            ),
        ] {
            let (answer, failed) = refusal(line);
            assert_eq!(answer["error"]["code"], code, "{line:?}: {answer}");
            assert_eq!(answer.get("id"), Some(&id), "{line:?}: {answer}");
            assert_eq!(answer["jsonrpc"], "2.0");
            assert!(failed.is_none());
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            assert!(
                !message.contains("not json") && !message.contains("ping"),
                "{message}"
            );
        }
    }

    #[test]
    fn blank_lines_and_notifications_rmcp_ignores_are_skipped() {
        for line in [
            &b""[..],
            b"\r",
            b"  \t ",
            br#"{"jsonrpc":"2.0","method":"notifications/unknown","params":"x"}"#,
            br#"{"jsonrpc":"2.0","method":"$/lsp","params":7}"#,
        ] {
            assert!(matches!(read(line), Incoming::Skip), "{line:?}");
        }
    }

    #[test]
    fn messages_read_as_rmcp_reads_them() {
        for line in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": "x", "method": "tools/list", "params": {}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}),
            json!({"jsonrpc": "2.0", "id": 4, "result": {"action": "decline"}}),
        ] {
            let text = line.to_string();
            let rmcp = serde_json::from_str::<ClientJsonRpcMessage>(&text).unwrap();
            for bytes in [
                text.clone().into_bytes(),
                format!("\u{feff}{text}\r").into_bytes(),
            ] {
                match read(&bytes) {
                    Incoming::Message(ours) => assert_eq!(
                        serde_json::to_value(&ours).unwrap(),
                        serde_json::to_value(&rmcp).unwrap()
                    ),
                    other => panic!("{text}: {other:?}"),
                }
            }
        }
    }

    /// An unreadable answer to a request of the server's: the client hears
    /// of it with id null (the id is the server's), and the request fails.
    #[test]
    fn an_unreadable_answer_fails_the_servers_request() {
        let (answer, failed) =
            refusal(br#"{"jsonrpc":"2.0","id":3,"result":{"action":"accept"},"error":7}"#);
        assert_eq!(answer["id"], Value::Null, "{answer}");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        match failed {
            Some(JsonRpcMessage::Error(error)) => {
                assert_eq!(error.id, Some(RequestId::Number(3)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_log_gets_a_capped_escaped_head() {
        let line = format!("\u{1b}[2J{}", "x".repeat(50_000));
        let logged = logged(line.as_bytes());
        assert!(logged.starts_with("\\u{1b}[2J"), "{logged}");
        assert!(logged.len() < 400, "{}", logged.len());
        assert!(logged.ends_with("[50004 bytes in all]"), "{logged}");
    }

    /// Over a real pipe: an over-long line is answered once and skipped,
    /// and the next line is read.
    #[tokio::test]
    async fn an_over_long_line_is_answered_once_and_skipped() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (server_read, server_write) = tokio::io::split(server);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let mut transport = StdioTransport::new(server_read, server_write);
        let writer = tokio::spawn(async move {
            let chunk = vec![b'a'; 1024 * 1024];
            for _ in 0..(MAX_LINE_BYTES / chunk.len() + 3) {
                client_write.write_all(&chunk).await.unwrap();
            }
            client_write
                .write_all(b"\nnot json\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
                .await
                .unwrap();
            client_write
        });
        let reader = tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut byte = [0u8; 1];
            let mut lines = 0;
            while lines < 2 {
                client_read.read_exact(&mut byte).await.unwrap();
                seen.push(byte[0]);
                lines += usize::from(byte[0] == b'\n');
            }
            String::from_utf8(seen).unwrap()
        });
        let message = transport.receive().await.expect("the ping");
        assert!(matches!(message, JsonRpcMessage::Request(_)), "{message:?}");
        assert!(transport.line.capacity() <= MAX_LINE_BYTES);
        let answers = reader.await.unwrap();
        let answers: Vec<Value> = answers
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(answers.len(), 2);
        assert!(
            answers[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("longer than"),
            "{answers:?}"
        );
        assert_eq!(answers[1]["error"]["code"], -32700, "{answers:?}");
        drop(writer.await.unwrap());
        assert!(transport.receive().await.is_none());
    }
}
