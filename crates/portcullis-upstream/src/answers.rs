//! Reading what a server sends by the request it answers, for the
//! transports that carry JSON-RPC messages one at a time (stdio lines,
//! legacy SSE events).
//!
//! rmcp reads every message into `ServerJsonRpcMessage`, whose result is
//! an untagged enum tried variant by variant (a `serde_json` error built and
//! dropped for each miss). The [`Reader`] remembers the method of each
//! request sent, by id, and first reads only a message's envelope
//! (`jsonrpc`, `id`, `method`, `result`, `error`, left unparsed): an answer
//! to `tools/call` is then read straight into [`CallToolResult`], other
//! answers into [`ServerResult`], and notifications and the server's own
//! requests through rmcp's types as before.
//!
//! An answer that carries the id of a request still waiting but cannot be
//! read (nested past `serde_json`'s recursion limit, a result no result
//! type reads, a broken envelope) becomes a JSON-RPC error for that id, so
//! its call fails at once instead of waiting out its timeout; the server's
//! text is never repeated in it. A message that cannot be read at all is
//! logged, capped and escaped, and skipped.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};

use portcullis_catalog::log_line::{DEFAULT_MAX_LINE_BYTES, LineSplitter};
use portcullis_catalog::message_line::describe_unreadable;
use rmcp::model::{
    CallToolResult, ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorData,
    JsonRpcMessage, RequestId, ServerJsonRpcMessage, ServerResult,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::oneshot;

/// Requests remembered while they wait for their answer. rmcp's ids count
/// up, so past this many the oldest is forgotten: its answer is then read
/// the generic way, which is slower but still right.
const MAX_PENDING: usize = 4096;

/// How much of an unreadable line the log shows.
const LOGGED_BYTES: usize = 512;

/// The message of the error that stands in for an answer that could not
/// be read. Never the server's own text.
pub(crate) const UNREADABLE_ANSWER: &str =
    "the server's answer could not be read (it is not a valid MCP message)";

/// What a request waiting for its answer asked, as far as reading the
/// answer goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    /// `tools/call`: answered by a [`CallToolResult`] (or, rarely, another
    /// result: `input_required`, an empty result).
    CallTool,
    /// Anything else: read as rmcp reads it.
    Other,
}

/// A line's envelope, its parts left as they are (validated JSON, not
/// parsed). Reading this costs one scan of the line and no allocation.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// What one line from the server comes to.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A message for rmcp's service.
    Message(ServerJsonRpcMessage),
    /// A request of the server's that could not be read: the error to
    /// answer it with.
    Refuse(ClientJsonRpcMessage),
    /// Nothing (logged).
    Skip,
}

/// The reading half's memory: which requests wait for an answer, and what
/// they asked. Sans I/O, so it is tested line by line.
#[derive(Debug)]
pub(crate) struct Reader {
    /// The server's name, for the log.
    pub(crate) server: String,
    pending: BTreeMap<i64, Asked>,
    /// The answers direct calls wait for ([`expect`]).
    pub(crate) awaited: Arc<std::sync::Mutex<Awaited>>,
    /// Set once rmcp sent `initialize`: the server was opened with the
    /// handshake, not `server/discover`.
    pub(crate) handshook: Arc<AtomicBool>,
}

impl Reader {
    /// A reader for `server`, waiting for nothing yet.
    pub(crate) fn new(server: String) -> Self {
        Reader {
            server,
            pending: BTreeMap::new(),
            awaited: Arc::default(),
            handshook: Arc::default(),
        }
    }

    /// Notes an outgoing message: a request now waits for its answer; a
    /// cancelled one (the caller cancelled, or rmcp timed it out) no
    /// longer does.
    pub(crate) fn sent(&mut self, message: &ClientJsonRpcMessage) {
        match message {
            JsonRpcMessage::Request(request) => {
                // rmcp numbers its requests; a string id is simply not
                // remembered (its answer is read the generic way).
                if matches!(request.request, ClientRequest::InitializeRequest(_)) {
                    self.handshook.store(true, Ordering::Release);
                }
                if let RequestId::Number(id) = request.id {
                    let asked = match request.request {
                        ClientRequest::CallToolRequest(_) => Asked::CallTool,
                        _ => Asked::Other,
                    };
                    self.pending.insert(id, asked);
                    if self.pending.len() > MAX_PENDING {
                        self.pending.pop_first();
                    }
                }
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(RequestId::Number(id)) = cancelled.params.request_id
                {
                    self.pending.remove(&id);
                }
            }
            _ => {}
        }
    }

    /// Reads one message: a line (its newline already taken off), an
    /// event's data.
    pub(crate) fn read(&mut self, line: &[u8]) -> Incoming {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // RFC 8259 lets a reader ignore a leading byte order mark.
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Incoming::Skip;
        }
        let Ok(envelope) = serde_json::from_slice::<Envelope>(line) else {
            // Not JSON, or an envelope serde will not take apart (a
            // duplicate key): rmcp's reading decides.
            return self.generic(line, None);
        };
        // An answer has no method; one to a request still waiting is read
        // by what that request asked.
        let answered = match (envelope.method, envelope.id) {
            (None, Some(id)) => serde_json::from_str::<i64>(id.get()).ok(),
            _ => None,
        };
        let waiting = answered.and_then(|id| self.pending.remove(&id).map(|asked| (id, asked)));
        let Some((id, asked)) = waiting else {
            if answered.is_some_and(|id| self.deliver(id, &envelope, line)) {
                return Incoming::Skip;
            }
            let request_id = envelope
                .method
                .and(envelope.id)
                .and_then(|id| serde_json::from_str::<RequestId>(id.get()).ok());
            return self.generic(line, request_id);
        };
        Incoming::Message(self.answer(id, asked, &envelope, line))
    }

    /// The answer to request `id`, read by what it asked.
    fn answer(
        &self,
        id: i64,
        asked: Asked,
        envelope: &Envelope<'_>,
        line: &[u8],
    ) -> ServerJsonRpcMessage {
        let plain_result = envelope.error.is_none()
            && envelope.jsonrpc.is_some_and(|v| v.get() == "\"2.0\"")
            && envelope.result.is_some();
        if let (true, Some(result)) = (plain_result, envelope.result) {
            return match read_result(asked, result.get()) {
                Ok(result) => ServerJsonRpcMessage::response(result, RequestId::Number(id)),
                Err(error) => self.unreadable_answer(id, &error),
            };
        }
        // An error answer, or an envelope out of the ordinary: rmcp's
        // reading, and the call fails at once if that cannot read it.
        match serde_json::from_slice::<ServerJsonRpcMessage>(line) {
            Ok(message) => message,
            Err(error) => self.unreadable_answer(id, &error),
        }
    }

    /// Hands the answer to request `id` to the direct call waiting for it,
    /// if one is (`true`). An answer no call waits for (not a direct call's,
    /// or one cancelled or timed out) goes the generic way: rmcp drops an
    /// answer to a request it does not know.
    fn deliver(&self, id: i64, envelope: &Envelope<'_>, line: &[u8]) -> bool {
        let Ok(key) = u64::try_from(id) else {
            return false;
        };
        let Some(waiter) = lock(&self.awaited).open.remove(&key) else {
            return false;
        };
        let _ = waiter.send(self.answer(id, Asked::CallTool, envelope, line));
        true
    }

    /// rmcp's reading of a whole line: notifications, the server's
    /// requests, answers nobody waits for. `request` is the id of a line
    /// that looks like a request of the server's, answered with an error
    /// if it cannot be read.
    fn generic(&self, line: &[u8], request: Option<RequestId>) -> Incoming {
        match serde_json::from_slice::<ServerJsonRpcMessage>(line) {
            Ok(message) => Incoming::Message(message),
            Err(error) => {
                tracing::debug!(
                    server = %self.server,
                    "skipped a line that is not an MCP message ({}): {}",
                    describe_unreadable(&error),
                    logged(line),
                );
                match request {
                    Some(id) => Incoming::Refuse(ClientJsonRpcMessage::error(
                        ErrorData::invalid_request("the request could not be read", None),
                        Some(id),
                    )),
                    None => Incoming::Skip,
                }
            }
        }
    }

    /// The error that fails request `id` at once, its answer unreadable.
    fn unreadable_answer(&self, id: i64, error: &serde_json::Error) -> ServerJsonRpcMessage {
        tracing::warn!(
            server = %self.server,
            "the answer to request {id} could not be read ({}); the request fails",
            describe_unreadable(error),
        );
        ServerJsonRpcMessage::error(
            ErrorData::internal_error(UNREADABLE_ANSWER, None),
            Some(RequestId::Number(id)),
        )
    }
}

impl Drop for Reader {
    /// The transport is gone: every direct call still waiting hears that
    /// at once (its answer can no longer come), and none waits from now on.
    fn drop(&mut self) {
        let mut awaited = lock(&self.awaited);
        awaited.closed = true;
        awaited.open.clear();
    }
}

/// The answers direct calls wait for, by request id.
#[derive(Debug, Default)]
pub(crate) struct Awaited {
    pub(crate) open: HashMap<u64, oneshot::Sender<ServerJsonRpcMessage>>,
    /// The transport is gone: no answer will come.
    pub(crate) closed: bool,
}

pub(crate) fn lock(awaited: &std::sync::Mutex<Awaited>) -> std::sync::MutexGuard<'_, Awaited> {
    awaited.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts waiting for the answer to request `id` of a direct call (before
/// the request is sent, so the answer cannot come first); `None` when the
/// transport is gone.
pub(crate) fn expect(awaited: &Arc<std::sync::Mutex<Awaited>>, id: u64) -> Option<AwaitedAnswer> {
    let (sender, answer) = oneshot::channel();
    let mut open = lock(awaited);
    if open.closed {
        return None;
    }
    open.open.insert(id, sender);
    Some(AwaitedAnswer {
        answer,
        id,
        awaited: awaited.clone(),
    })
}

/// A direct call's wait for its answer; dropping it stops waiting (a late
/// answer is then dropped by the reader).
pub(crate) struct AwaitedAnswer {
    answer: oneshot::Receiver<ServerJsonRpcMessage>,
    id: u64,
    awaited: Arc<std::sync::Mutex<Awaited>>,
}

impl AwaitedAnswer {
    /// The answer (a response or an error); `None` when the transport
    /// ended first.
    pub(crate) async fn answer(&mut self) -> Option<ServerJsonRpcMessage> {
        (&mut self.answer).await.ok()
    }

    /// The answer, if it has come already.
    pub(crate) fn arrived(&mut self) -> Option<ServerJsonRpcMessage> {
        self.answer.try_recv().ok()
    }
}

impl Drop for AwaitedAnswer {
    fn drop(&mut self) {
        lock(&self.awaited).open.remove(&self.id);
    }
}

/// Reads a result by what its request asked.
fn read_result(asked: Asked, result: &str) -> Result<ServerResult, serde_json::Error> {
    match asked {
        Asked::CallTool => match serde_json::from_str::<CallToolResult>(result) {
            Ok(result) => Ok(ServerResult::CallToolResult(result)),
            // Not a finished tool result: `input_required`, an empty
            // result. A result no known type reads is unreadable here
            // (rmcp would call it a custom result).
            Err(error) => match serde_json::from_str::<ServerResult>(result)? {
                ServerResult::CustomResult(_) => Err(error),
                other => Ok(other),
            },
        },
        Asked::Other => serde_json::from_str::<ServerResult>(result),
    }
}

/// The head of `line`, capped and escaped for the log.
fn logged(line: &[u8]) -> String {
    let mut splitter = LineSplitter::new(LOGGED_BYTES.min(DEFAULT_MAX_LINE_BYTES));
    let mut out = String::new();
    splitter.feed(line, |l| out = l.to_string());
    if let Some(l) = splitter.finish() {
        out = l.to_string();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
        ListToolsRequest,
    };
    use serde_json::json;

    fn reader_waiting_for(calls: &[i64], others: &[i64]) -> Reader {
        let mut reader = Reader::new("kid".into());
        for &id in calls {
            reader.sent(&ClientJsonRpcMessage::request(
                ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                    "echo",
                ))),
                RequestId::Number(id),
            ));
        }
        for &id in others {
            reader.sent(&ClientJsonRpcMessage::request(
                ClientRequest::ListToolsRequest(ListToolsRequest::default()),
                RequestId::Number(id),
            ));
        }
        reader
    }

    fn message(incoming: Incoming) -> ServerJsonRpcMessage {
        match incoming {
            Incoming::Message(message) => message,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    fn unreadable(incoming: Incoming, want: i64) {
        match message(incoming) {
            JsonRpcMessage::Error(error) => {
                assert_eq!(error.id, Some(RequestId::Number(want)));
                assert_eq!(error.error.code, rmcp::model::ErrorCode::INTERNAL_ERROR);
                assert_eq!(error.error.message, UNREADABLE_ANSWER);
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    /// Every line reads as rmcp's codec reads it, whatever was asked.
    #[test]
    fn answers_read_as_rmcp_reads_them() {
        let lines = [
            json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "hi"}]}}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": true, "_meta": {"k": 1}}}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"structuredContent": {"n": 1}, "resultType": "complete"}}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required", "requestState": "abc"}}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad"}}),
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": 1, "progress": 0.5}}),
            json!({"jsonrpc": "2.0", "id": "s1", "method": "elicitation/create",
                   "params": {"mode": "form", "message": "?", "requestedSchema": {"type": "object", "properties": {}}}}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"content": []}}),
        ];
        for line in lines {
            let text = line.to_string();
            let rmcp = serde_json::from_str::<ServerJsonRpcMessage>(&text).unwrap();
            for mut reader in [reader_waiting_for(&[1], &[]), reader_waiting_for(&[], &[1])] {
                let ours = message(reader.read(text.as_bytes()));
                assert_eq!(
                    serde_json::to_value(&ours).unwrap(),
                    serde_json::to_value(&rmcp).unwrap(),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn a_tool_result_is_read_as_one() {
        let mut reader = reader_waiting_for(&[3], &[]);
        let line = json!({"jsonrpc": "2.0", "id": 3, "result": {"content": [], "tools": []}});
        match message(reader.read(line.to_string().as_bytes())) {
            JsonRpcMessage::Response(response) => {
                assert!(matches!(response.result, ServerResult::CallToolResult(_)));
            }
            other => panic!("{other:?}"),
        }
        // Answered: no longer waiting.
        assert!(reader.pending.is_empty());
    }

    #[test]
    fn an_answer_nested_too_deep_fails_its_request() {
        for asked in [reader_waiting_for(&[5], &[]), reader_waiting_for(&[], &[5])] {
            let mut reader = asked;
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":5,"result":{{"content":[],"structuredContent":{}}}}}"#,
                nested(200)
            );
            // rmcp cannot read it either: it would drop the line.
            assert!(serde_json::from_str::<ServerJsonRpcMessage>(&line).is_err());
            unreadable(reader.read(line.as_bytes()), 5);
        }
    }

    #[test]
    fn an_answer_of_the_wrong_shape_fails_its_request() {
        let shapes = [
            json!({"jsonrpc": "2.0", "id": 5, "result": {"content": "not a list"}}),
            json!({"jsonrpc": "2.0", "id": 5, "result": {"content": []}, "error": {"code": 1, "message": "x"}}),
            json!({"jsonrpc": "2.0", "id": 5, "error": "not an object"}),
            json!({"jsonrpc": "1.0", "id": 5, "result": {"content": []}}),
            json!({"id": 5, "result": {"content": []}}),
        ];
        for shape in shapes {
            let mut reader = reader_waiting_for(&[5], &[]);
            unreadable(reader.read(shape.to_string().as_bytes()), 5);
        }
    }

    #[test]
    fn lines_nobody_waits_for_are_read_or_skipped() {
        let mut reader = reader_waiting_for(&[1], &[]);
        for line in [
            &b"this is not JSON"[..],
            b"{\"half\": ",
            b"\x01\x02",
            b"",
            b"  \r",
            b"[1, 2]",
        ] {
            assert!(matches!(reader.read(line), Incoming::Skip), "{line:?}");
        }
        // An unreadable answer for an id nobody waits for is only logged.
        let stray = format!(r#"{{"jsonrpc":"2.0","id":9,"result":{}}}"#, nested(200));
        assert!(matches!(reader.read(stray.as_bytes()), Incoming::Skip));
        // Still waiting for 1.
        assert_eq!(reader.pending.len(), 1);
        // A byte order mark and a carriage return are allowed.
        let line = b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\r";
        assert!(matches!(
            message(reader.read(line)),
            JsonRpcMessage::Response(_)
        ));
    }

    #[test]
    fn an_unreadable_request_of_the_servers_is_refused_by_its_id() {
        let mut reader = reader_waiting_for(&[], &[]);
        let line = json!({"jsonrpc": "2.0", "id": "s9", "method": "sampling/createMessage", "params": "nope"});
        match reader.read(line.to_string().as_bytes()) {
            Incoming::Refuse(JsonRpcMessage::Error(error)) => {
                assert_eq!(error.id, Some(RequestId::String("s9".into())));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_cancelled_request_is_forgotten_and_the_oldest_past_the_cap() {
        let mut reader = reader_waiting_for(&[1, 2], &[]);
        reader.sent(&ClientJsonRpcMessage::notification(
            ClientNotification::CancelledNotification(CancelledNotification::new(
                CancelledNotificationParam::new(Some(RequestId::Number(1)), None),
            )),
        ));
        assert_eq!(reader.pending.keys().copied().collect::<Vec<_>>(), [2]);
        let ids: Vec<i64> = (10..10 + MAX_PENDING as i64 + 5).collect();
        let reader = reader_waiting_for(&ids, &[]);
        assert_eq!(reader.pending.len(), MAX_PENDING);
        assert!(!reader.pending.contains_key(&10));
    }

    #[test]
    fn the_log_gets_a_capped_escaped_head() {
        let line = format!("\u{1b}[2J{}", "x".repeat(5000));
        let logged = logged(line.as_bytes());
        assert!(logged.starts_with("\\u{1b}[2J"), "{logged}");
        assert!(logged.len() < 700, "{}", logged.len());
    }
}
