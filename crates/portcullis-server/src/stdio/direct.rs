//! A plain `tools/call` on a stdio session answered in front of rmcp's
//! service loop.
//!
//! Through rmcp, each request the transport reads goes to the service
//! loop, which spawns a task for it; the task's answer comes back to the
//! loop through a channel, and the loop spawns another task to write it.
//! For a desktop client's commonest request, `tools/call`, that hand-off
//! costs about as much as the gateway's own work on the call. Here the
//! transport starts such a call itself, as it reads the line: the
//! handler's `call_tool`, wrapped as rmcp wraps it for an initialize-era
//! session (`crate::tool_call`), runs on one task, and that task writes
//! the answer.
//!
//! Only the plain case is taken; anything else goes to rmcp as before:
//! - the session began with `initialize` at an initialize-era version:
//!   rmcp's peer for it is handed over as soon as rmcp has answered
//!   `initialize` ([`Adoption::adopt`]), and the transport reads no line
//!   past `initialize` before that is decided;
//! - the call's `_meta` carries no protocol keys (a progress token is no
//!   such key);
//! - no request with the same id is in flight, on either path (the
//!   transport's record). A client that reuses an id in flight gets one
//!   answer for it, as from rmcp alone: the new request goes to rmcp, and
//!   a direct call with that id is no longer answered.
//!
//! What rmcp gives a call, this path gives too: the session's peer (so
//! progress reports, an approval's question to the client and its answer
//! travel on the pipe as before, through rmcp), the call's `_meta`, and a
//! cancellation token, cancelled by the client's `notifications/cancelled`
//! (the call's answer is then dropped, as rmcp drops it) and when the
//! transport goes. When the client closes its end of the pipe, the
//! transport ends once every direct call has been answered (written), or
//! [`EOF_GRACE`] after the close, whichever comes first; rmcp then waits
//! for its own calls as it always does, and the calls left are cancelled
//! when the transport goes. A call that panics is answered with an
//! internal error (on rmcp's path its client would wait forever).

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use rmcp::model::{
    CallToolRequestParams, ErrorData, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer, ServerHandler};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::tool_call::{Era, PlainCall, call_tool};

/// How long the calls in flight may still answer once the client has
/// closed its end of the pipe: what rmcp's service loop gives its own.
pub(crate) const EOF_GRACE: Duration = Duration::from_secs(5);

/// `_meta` keys of the protocol itself (a 2026-07-28 request's envelope,
/// its log level): a call carrying one is rmcp's to judge.
const PROTOCOL_META_PREFIX: &str = "io.modelcontextprotocol/";

type Answer = Pin<Box<dyn Future<Output = Result<ServerResult, ErrorData>> + Send>>;

/// The handler's `call_tool` as rmcp runs it for an initialize-era
/// session, behind a pointer, so the transport needs no handler type.
type CallTool =
    Arc<dyn Fn(CallToolRequestParams, RequestContext<RoleServer>) -> Answer + Send + Sync>;

/// How long the transport waits, after handing rmcp `initialize`, for the
/// session's adoption to be decided. rmcp decides it as soon as it has
/// answered; the bound only keeps an unforeseen order of events from
/// stalling the session.
pub(crate) const ADOPTION_WAIT: Duration = Duration::from_secs(2);

/// The direct path of one stdio session (see the module docs).
pub(crate) struct DirectCalls {
    call: CallTool,
    adoption: Arc<Adopted>,
    calls: Arc<Calls>,
    /// Cancelled when the transport goes: every call's token is its child.
    ended: CancellationToken,
}

/// Hands rmcp's peer of a session over to its [`DirectCalls`]; dropped
/// without adopting, it decides that the session is not adopted.
pub(crate) struct Adoption(Arc<Adopted>);

/// Whether the session is adopted: unset until decided.
#[derive(Default)]
struct Adopted {
    peer: OnceLock<Option<Peer<RoleServer>>>,
    decided: Notify,
}

impl Adopted {
    fn decide(&self, peer: Option<Peer<RoleServer>>) {
        let _ = self.peer.set(peer);
        self.decided.notify_waiters();
    }
}

impl Adoption {
    /// Offers the session's peer once rmcp has answered `initialize`:
    /// taken if the client negotiated an initialize-era version.
    pub(crate) fn adopt(self, peer: &Peer<RoleServer>) {
        let initialize_era = peer
            .peer_info()
            .is_some_and(|info| info.protocol_version.has_initialize());
        self.0.decide(initialize_era.then(|| peer.clone()));
    }
}

impl Drop for Adoption {
    fn drop(&mut self) {
        if self.0.peer.get().is_none() {
            self.0.decide(None);
        }
    }
}

/// The calls in flight on the direct path.
#[derive(Default)]
struct Calls {
    open: Mutex<Open>,
    /// Told when the last call still to be answered is.
    emptied: Notify,
}

#[derive(Default)]
struct Open {
    /// Each call's token, and the number telling it from a later call that
    /// reuses its id.
    calls: HashMap<RequestId, (u64, CancellationToken)>,
    next: u64,
    /// Calls started whose task has not ended yet (answer written or
    /// dropped).
    unanswered: usize,
}

impl Calls {
    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The call `id` numbered `number` ended: `true` if it is still to be
    /// answered (the client did not cancel it).
    fn finish(&self, id: &RequestId, number: u64) -> bool {
        let mut open = self.lock();
        let ours = open.calls.get(id).is_some_and(|(n, _)| *n == number);
        if ours && let Some((_, token)) = open.calls.remove(id) {
            // As rmcp does once a request is answered: whatever the call
            // left running under its token stops.
            token.cancel();
        }
        ours
    }
}

/// A call taken by the direct path: its id, the future that runs it and
/// gives the answer's line (without its newline), or `None` when it is not
/// to be answered (the client cancelled it, or sent another request with
/// its id), and what to drop once that line is written (or dropped).
pub(crate) struct Started {
    pub(crate) id: RequestId,
    pub(crate) answer: Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send>>,
    pub(crate) done: Unanswered,
}

/// One call not answered yet; dropped once its answer is written or
/// dropped, which is what the end of the client's pipe waits for.
pub(crate) struct Unanswered(Arc<Calls>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        let mut open = self.0.lock();
        open.unanswered = open.unanswered.saturating_sub(1);
        if open.unanswered == 0 {
            self.0.emptied.notify_waiters();
        }
    }
}

impl DirectCalls {
    /// The direct path to `handler`, and the handle that adopts the
    /// session's peer.
    pub(crate) fn new<H>(handler: Arc<H>) -> (Self, Adoption)
    where
        H: ServerHandler + Send + Sync + 'static,
    {
        let call: CallTool = Arc::new(move |params, context| {
            let handler = handler.clone();
            Box::pin(async move { call_tool(&*handler, params, context, Era::Session).await })
        });
        let adoption = Arc::new(Adopted::default());
        let direct = DirectCalls {
            call,
            adoption: adoption.clone(),
            calls: Arc::default(),
            ended: CancellationToken::new(),
        };
        (direct, Adoption(adoption))
    }

    /// Waits until the session's adoption is decided, at most until
    /// `deadline`.
    pub(crate) async fn decided(&self, deadline: Instant) {
        loop {
            let decided = self.adoption.decided.notified();
            tokio::pin!(decided);
            // Registered before the check, so a decision in between wakes it.
            decided.as_mut().enable();
            if self.adoption.peer.get().is_some() {
                return;
            }
            if tokio::time::timeout_at(deadline, decided).await.is_err() {
                return;
            }
        }
    }

    /// The session's peer if this path may take `call` (see the module
    /// docs; whether its id is in flight is the transport's to say);
    /// `None` leaves the call to rmcp.
    pub(crate) fn takes(&self, call: &PlainCall) -> Option<Peer<RoleServer>> {
        let peer = self.adoption.peer.get()?.as_ref()?;
        let protocol_keys = call
            .params
            .meta
            .as_ref()
            .is_some_and(|meta| meta.keys().any(|key| key.starts_with(PROTOCOL_META_PREFIX)));
        (!protocol_keys).then(|| peer.clone())
    }

    /// The client sent another request with id `id` while a call of this
    /// path with that id is in flight: that call is no longer answered
    /// (rmcp answers the new request).
    pub(crate) fn supersede(&self, id: &RequestId) {
        self.calls.lock().calls.remove(id);
    }

    /// Starts `call`, which this path [takes](Self::takes) for `peer`.
    pub(crate) fn start(&self, call: PlainCall, peer: Peer<RoleServer>) -> Started {
        let token = self.ended.child_token();
        let number = {
            let mut open = self.calls.lock();
            let number = open.next;
            open.next += 1;
            open.unanswered += 1;
            // Replaces nothing: the call's id was not in flight.
            open.calls.insert(call.id.clone(), (number, token.clone()));
            number
        };
        let PlainCall { id, mut params, .. } = call;
        // As rmcp's service loop does: the `_meta` goes into the context.
        let mut context = RequestContext::new(id.clone(), peer);
        context.ct = token.child_token();
        context.meta = params.meta.take().unwrap_or_default();
        let running = (self.call)(params, context);
        let calls = self.calls.clone();
        let answered = id.clone();
        let answer = Box::pin(async move {
            let outcome = AssertUnwindSafe(running).catch_unwind().await;
            if !calls.finish(&answered, number) {
                tracing::debug!(id = %answered, "the call is not answered: cancelled or superseded");
                return None;
            }
            let message = match outcome {
                Ok(Ok(result)) => ServerJsonRpcMessage::response(result, answered),
                Ok(Err(error)) => ServerJsonRpcMessage::error(error, Some(answered)),
                Err(_) => {
                    tracing::error!(id = %answered, "a tool call panicked");
                    let error = ErrorData::internal_error("the tool call failed", None);
                    ServerJsonRpcMessage::error(error, Some(answered))
                }
            };
            Some(serialised(&message))
        });
        Started {
            id,
            answer,
            done: Unanswered(self.calls.clone()),
        }
    }

    /// The client cancelled request `id`: a call of this path with that id
    /// stops, and is not answered.
    pub(crate) fn cancel(&self, id: &RequestId) {
        if let Some((_, token)) = self.calls.lock().calls.remove(id) {
            token.cancel();
        }
    }

    /// Waits until every call of this path is answered (its answer written
    /// or dropped), at most until `deadline`.
    pub(crate) async fn settled(&self, deadline: Instant) {
        loop {
            let emptied = self.calls.emptied.notified();
            tokio::pin!(emptied);
            // Registered before the check, so an end in between wakes it.
            emptied.as_mut().enable();
            if self.calls.lock().unanswered == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, emptied).await.is_err() {
                tracing::warn!(
                    "the client closed stdin; tool calls still running {} s later are not \
                     answered",
                    EOF_GRACE.as_secs()
                );
                return;
            }
        }
    }
}

impl Drop for DirectCalls {
    fn drop(&mut self) {
        self.ended.cancel();
    }
}

/// `message` as one line's bytes (no newline).
fn serialised(message: &ServerJsonRpcMessage) -> Vec<u8> {
    serde_json::to_vec(message).unwrap_or_else(|error| {
        tracing::error!(%error, "response not serialised");
        let id = match message {
            ServerJsonRpcMessage::Response(response) => Some(response.id.clone()),
            ServerJsonRpcMessage::Error(error) => error.id.clone(),
            _ => None,
        };
        let error = ErrorData::internal_error("the response could not be written", None);
        serde_json::to_vec(&ServerJsonRpcMessage::error(error, id)).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::super::transport::{Drain, StdioTransport};
    use super::*;
    use rmcp::model::{
        CallToolResponse, CallToolResult, ClientCapabilities, ClientJsonRpcMessage, ContentBlock,
        Implementation, InitializeRequestParams, JsonRpcMessage, ProtocolVersion,
    };
    use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
    use rmcp::transport::Transport;
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
    use tokio::sync::mpsc;

    /// Tools that say what their call saw: `echo` answers with its
    /// progress token, `wait` runs until its token is cancelled (and says
    /// so), `boom` panics.
    #[derive(Clone)]
    struct Tools {
        stopped: mpsc::UnboundedSender<RequestId>,
    }

    impl ServerHandler for Tools {
        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            match request.name.as_ref() {
                "echo" => {
                    let token = context.meta.get_progress_token().map(|t| format!("{t:?}"));
                    let text = token.unwrap_or_else(|| "no token".into());
                    Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
                }
                "wait" => {
                    context.ct.cancelled().await;
                    let _ = self.stopped.send(context.id.clone());
                    Ok(CallToolResult::success(vec![ContentBlock::text("stopped")]).into())
                }
                "boom" => panic!("a tool that panics"),
                _ => Err(ErrorData::invalid_params("no such tool", None)),
            }
        }
    }

    /// A transport that is already closed: its service ends at once,
    /// leaving a peer with the client's handshake recorded.
    struct Closed;

    impl Transport<RoleServer> for Closed {
        type Error = std::io::Error;

        fn send(
            &mut self,
            _item: TxJsonRpcMessage<RoleServer>,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            std::future::ready(Err(std::io::ErrorKind::NotConnected.into()))
        }

        fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> {
            std::future::ready(None)
        }

        async fn close(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    /// A peer of a session that began with `initialize` at `version`.
    fn peer(tools: &Tools, version: ProtocolVersion) -> Peer<RoleServer> {
        let info =
            InitializeRequestParams::new(ClientCapabilities::default(), Implementation::default())
                .with_protocol_version(version);
        let running = rmcp::service::serve_directly(tools.clone(), Closed, Some(info));
        running.peer().clone()
    }

    struct Pipe {
        transport: StdioTransport<DuplexStream, DuplexStream>,
        to_server: DuplexStream,
        from_server: Lines<BufReader<DuplexStream>>,
        stopped: mpsc::UnboundedReceiver<RequestId>,
    }

    /// A transport with a direct path, its session adopted at `version`
    /// (`None`: not adopted).
    fn pipe(version: Option<ProtocolVersion>) -> Pipe {
        pipe_draining(version, None)
    }

    /// [`pipe`], draining as `drain` says.
    fn pipe_draining(version: Option<ProtocolVersion>, drain: Option<Drain>) -> Pipe {
        let (stopped_tx, stopped) = mpsc::unbounded_channel();
        let tools = Tools {
            stopped: stopped_tx,
        };
        let (direct, adoption) = DirectCalls::new(Arc::new(tools.clone()));
        if let Some(version) = version {
            adoption.adopt(&peer(&tools, version));
        }
        let (server_in, to_server) = tokio::io::duplex(64 * 1024);
        let (from_server, server_out) = tokio::io::duplex(64 * 1024);
        Pipe {
            transport: match drain {
                Some(drain) => StdioTransport::new(server_in, server_out)
                    .with_drain(drain)
                    .with_direct(direct),
                None => StdioTransport::new(server_in, server_out).with_direct(direct),
            },
            to_server,
            from_server: BufReader::new(from_server).lines(),
            stopped,
        }
    }

    impl Pipe {
        async fn send(&mut self, message: Value) {
            let line = format!("{message}\n");
            self.to_server.write_all(line.as_bytes()).await.unwrap();
        }

        /// The next line on the pipe to the client, the transport read
        /// meanwhile (as rmcp's service would); nothing may be handed to
        /// rmcp before it.
        async fn answer(&mut self) -> Value {
            let line = tokio::time::timeout(Duration::from_secs(10), async {
                tokio::select! {
                    line = self.from_server.next_line() => line,
                    // The transport ending (a drain's) is no message.
                    Some(message) = self.transport.receive() => {
                        panic!("handed to rmcp: {message:?}")
                    }
                }
            });
            let line = line
                .await
                .expect("an answer within 10 s")
                .unwrap()
                .expect("the pipe is open");
            serde_json::from_str(&line).unwrap()
        }

        /// The next message the transport hands rmcp's service.
        async fn for_rmcp(&mut self) -> ClientJsonRpcMessage {
            tokio::time::timeout(Duration::from_secs(10), self.transport.receive())
                .await
                .expect("a message within 10 s")
                .expect("the transport is open")
        }
    }

    fn call(id: u32, name: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": {}}})
    }

    fn ping(id: u32) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
    }

    fn request_id(message: &ClientJsonRpcMessage) -> Value {
        match message {
            JsonRpcMessage::Request(request) => serde_json::to_value(&request.id).unwrap(),
            other => panic!("not a request: {other:?}"),
        }
    }

    /// On an adopted session a plain call never reaches rmcp's service:
    /// the transport hands on the ping sent after it, and the call's
    /// answer is on the pipe, shaped as rmcp shapes a session's, with
    /// the progress token of its `_meta` seen by the tool.
    #[tokio::test]
    async fn an_adopted_sessions_plain_call_is_answered_without_rmcp() {
        let mut pipe = pipe(Some(ProtocolVersion::V_2025_11_25));
        let mut with_token = call(1, "echo");
        with_token["params"]["_meta"] = json!({"progressToken": "p-1"});
        pipe.send(with_token).await;
        pipe.send(ping(2)).await;
        assert_eq!(request_id(&pipe.for_rmcp().await), json!(2));
        let answer = pipe.answer().await;
        assert_eq!(answer["id"], 1, "{answer}");
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        let text = answer["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("p-1"), "{answer}");
        assert!(answer["result"].get("resultType").is_none(), "{answer}");

        pipe.send(call(3, "nothing")).await;
        let answer = pipe.answer().await;
        assert_eq!(answer["id"], 3, "{answer}");
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
    }

    /// Calls the direct path does not take go to rmcp as they came: before
    /// the session is adopted, on a session that negotiated 2026-07-28,
    /// with a protocol key in `_meta`, and with an id already in flight.
    #[tokio::test]
    async fn other_calls_go_to_rmcp() {
        for version in [None, Some(ProtocolVersion::V_2026_07_28)] {
            let mut pipe = pipe(version.clone());
            pipe.send(call(1, "echo")).await;
            assert_eq!(request_id(&pipe.for_rmcp().await), json!(1), "{version:?}");
        }

        let mut pipe = pipe(Some(ProtocolVersion::V_2025_11_25));
        let mut enveloped = call(1, "echo");
        enveloped["params"]["_meta"] =
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
        pipe.send(enveloped).await;
        assert_eq!(request_id(&pipe.for_rmcp().await), json!(1));

        pipe.send(call(5, "wait")).await;
        pipe.send(call(5, "echo")).await;
        let second = pipe.for_rmcp().await;
        assert_eq!(request_id(&second), json!(5));
        let JsonRpcMessage::Request(request) = second else {
            unreachable!()
        };
        assert!(
            serde_json::to_string(&request.request)
                .unwrap()
                .contains("echo"),
            "the second call of id 5 goes to rmcp"
        );
    }

    /// A call the client cancels has its token cancelled and is not
    /// answered (as rmcp drops the answer of a cancelled request); its id
    /// is free for the next call.
    #[tokio::test]
    async fn a_cancelled_call_stops_and_is_not_answered() {
        let mut pipe = pipe(Some(ProtocolVersion::V_2025_11_25));
        pipe.send(call(7, "wait")).await;
        pipe.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 7, "reason": "enough"}}),
        )
        .await;
        // The notice still goes on to rmcp.
        assert!(matches!(
            pipe.for_rmcp().await,
            JsonRpcMessage::Notification(_)
        ));
        let stopped = tokio::time::timeout(Duration::from_secs(10), pipe.stopped.recv()).await;
        assert_eq!(stopped.unwrap(), Some(RequestId::Number(7)));
        pipe.send(call(7, "echo")).await;
        pipe.send(ping(8)).await;
        assert_eq!(request_id(&pipe.for_rmcp().await), json!(8));
        let answer = pipe.answer().await;
        assert_eq!(answer["id"], 7, "{answer}");
        assert_eq!(
            answer["result"]["content"][0]["text"], "no token",
            "the first answer on the pipe is the second call's: {answer}"
        );
    }

    /// A call that panics is answered with an internal error; the session
    /// goes on.
    #[tokio::test]
    async fn a_call_that_panics_is_answered_with_an_internal_error() {
        let mut pipe = pipe(Some(ProtocolVersion::V_2025_11_25));
        pipe.send(call(1, "boom")).await;
        pipe.send(ping(2)).await;
        assert_eq!(request_id(&pipe.for_rmcp().await), json!(2));
        let answer = pipe.answer().await;
        assert_eq!(answer["id"], 1, "{answer}");
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
        pipe.send(call(3, "echo")).await;
        assert_eq!(pipe.answer().await["id"], 3);
    }

    /// When the client closes its end, the transport ends only once the
    /// calls in flight are answered; when the transport goes, calls still
    /// running are cancelled.
    #[tokio::test]
    async fn calls_in_flight_are_answered_after_the_client_closes_and_stopped_with_the_transport() {
        let mut pipe = pipe(Some(ProtocolVersion::V_2025_11_25));
        pipe.send(call(1, "echo")).await;
        pipe.send(call(2, "wait")).await;
        pipe.to_server.shutdown().await.unwrap();
        let Pipe {
            mut transport,
            mut from_server,
            mut stopped,
            ..
        } = pipe;
        // `wait` runs until cancelled: the transport waits for it.
        let ended = tokio::time::timeout(Duration::from_millis(300), transport.receive()).await;
        assert!(ended.is_err(), "ended with a call in flight: {ended:?}");
        let line = from_server.next_line().await.unwrap().unwrap();
        assert!(line.contains("\"id\":1"), "{line}");
        drop(transport);
        let stopped = tokio::time::timeout(Duration::from_secs(10), stopped.recv()).await;
        assert_eq!(stopped.unwrap(), Some(RequestId::Number(2)));
    }

    /// A client that sends another request with the id of a direct call
    /// in flight gets one answer for that id, as from rmcp alone: the new
    /// request goes to rmcp, and the direct call, when it ends, is not
    /// answered.
    #[tokio::test]
    async fn a_direct_calls_id_reused_in_flight_is_answered_once() {
        let mut pipe = pipe(Some(ProtocolVersion::V_2025_11_25));
        pipe.send(call(5, "wait")).await;
        pipe.send(ping(5)).await;
        assert_eq!(request_id(&pipe.for_rmcp().await), json!(5));
        let Pipe {
            transport,
            mut from_server,
            mut stopped,
            ..
        } = pipe;
        // The transport goes: `wait` ends, and its answer is dropped.
        drop(transport);
        let stopped = tokio::time::timeout(Duration::from_secs(10), stopped.recv()).await;
        assert_eq!(stopped.unwrap(), Some(RequestId::Number(5)));
        let next = tokio::time::timeout(Duration::from_secs(10), from_server.next_line()).await;
        assert_eq!(
            next.unwrap().unwrap(),
            None,
            "the superseded call was answered"
        );
    }

    /// Stopped with a direct call that outlives the grace: the call is
    /// answered with the shutdown's error once, the transport ends, and
    /// the answer the call gives later is dropped.
    #[tokio::test]
    async fn a_direct_call_cut_off_by_the_drain_is_answered_once() {
        let stop = CancellationToken::new();
        let gave_up = CancellationToken::new();
        let drain = Drain {
            stop: stop.clone(),
            grace: Duration::from_millis(200),
            gave_up: gave_up.clone(),
        };
        let mut pipe = pipe_draining(Some(ProtocolVersion::V_2025_11_25), Some(drain));
        pipe.send(call(1, "wait")).await;
        pipe.send(ping(2)).await;
        assert_eq!(request_id(&pipe.for_rmcp().await), json!(2));
        stop.cancel();
        // Until the grace runs out the transport waits for the two
        // requests in flight (the ping is rmcp's, which this test never
        // answers); then it answers both with the shutdown's error.
        let mut cut = Vec::new();
        for _ in 0..2 {
            let answer = pipe.answer().await;
            assert_eq!(answer["error"]["code"], -32000, "{answer}");
            cut.push(answer["id"].as_u64().unwrap());
        }
        cut.sort_unstable();
        assert_eq!(cut, [1, 2]);
        let Pipe {
            mut transport,
            mut from_server,
            mut stopped,
            ..
        } = pipe;
        let ended = tokio::time::timeout(Duration::from_secs(10), transport.receive()).await;
        assert!(ended.unwrap().is_none(), "the transport ends");
        assert!(gave_up.is_cancelled());
        drop(transport);
        let stopped = tokio::time::timeout(Duration::from_secs(10), stopped.recv()).await;
        assert_eq!(stopped.unwrap(), Some(RequestId::Number(1)));
        let next = tokio::time::timeout(Duration::from_secs(10), from_server.next_line()).await;
        assert_eq!(next.unwrap().unwrap(), None, "a second answer for id 1");
    }

    /// Past `initialize`, the transport reads no line until the adoption
    /// is decided: a call sent right behind `initialize` takes the direct
    /// path once the session is adopted.
    #[tokio::test]
    async fn no_line_past_initialize_is_read_before_the_adoption_is_decided() {
        let (stopped_tx, _stopped) = mpsc::unbounded_channel();
        let tools = Tools {
            stopped: stopped_tx,
        };
        let (direct, adoption) = DirectCalls::new(Arc::new(tools.clone()));
        let (server_in, mut to_server) = tokio::io::duplex(64 * 1024);
        let (from_server, server_out) = tokio::io::duplex(64 * 1024);
        let mut transport = StdioTransport::new(server_in, server_out).with_direct(direct);
        let mut from_server = BufReader::new(from_server).lines();
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}});
        for line in [initialize, call(1, "echo"), ping(2)] {
            to_server
                .write_all(format!("{line}\n").as_bytes())
                .await
                .unwrap();
        }
        let first = tokio::time::timeout(Duration::from_secs(10), transport.receive()).await;
        assert_eq!(request_id(&first.unwrap().unwrap()), json!(0));
        // Undecided: the call behind `initialize` waits.
        let early = tokio::time::timeout(Duration::from_millis(200), transport.receive()).await;
        assert!(
            early.is_err(),
            "a line was read before the adoption: {early:?}"
        );
        adoption.adopt(&peer(&tools, ProtocolVersion::V_2025_11_25));
        let next = tokio::time::timeout(Duration::from_secs(10), transport.receive()).await;
        assert_eq!(
            request_id(&next.unwrap().unwrap()),
            json!(2),
            "the call went to rmcp"
        );
        let answer = tokio::time::timeout(Duration::from_secs(10), from_server.next_line()).await;
        let answer: Value = serde_json::from_str(&answer.unwrap().unwrap().unwrap()).unwrap();
        assert_eq!(answer["id"], 1, "{answer}");
    }
}
