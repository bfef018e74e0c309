//! Legacy (initialize-era) sessions, bounded: rmcp's in-memory session
//! manager with a cap on how many live at once.
//!
//! Each session is a task, channels and a handler clone (tens of KiB), and
//! `initialize` is unauthenticated whenever no token is set, so without a
//! cap a client could grow the server's memory without end. At the cap, a
//! new session closes the one idle longest (no stream open on it, least
//! recently used); a client whose session was closed gets `404` on its
//! next request and initializes again, as the protocol asks. When every
//! session has a stream open (each one holds a connection, a call in
//! flight or a listening client), the new one is refused with an error
//! naming the limit. Sessions idle longer than the idle timeout end on
//! their own (rmcp's `keep_alive`).
//!
//! An initialize-era session is also *adopted* when the client says
//! `initialized`: its peer is kept here so that its plain `tools/call`s
//! can be answered in front of rmcp (`crate::session_call`); a call that
//! arrives while that `initialized` is still on its way to the handler
//! waits for the adoption (briefly) rather than go to rmcp. This table
//! then also holds those calls: each counts as an open stream, can be
//! cancelled by the client's `notifications/cancelled`, and is cancelled
//! when its session closes; a call whose answer became a stream (it
//! outlived a keep-alive interval, or asked its client something) leaves
//! its events *parked* under a stream number, for a client resuming the
//! stream, until a while after its answer (even once written out: the
//! connection may have died unnoticed), as rmcp keeps a finished stream's.
//! The requests such calls send their client (sampling, elicitation,
//! roots) wait here, by an id of the session's, for the client's answer.
//!
//! When the server stops, a session's standalone stream (a `GET` without
//! `Last-Event-ID`, or one resuming that stream) ends at once: it carries
//! no call, so it must not hold the drain.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::Stream;
use rmcp::model::{
    ClientJsonRpcMessage, ClientResult, ProtocolVersion, RequestId, ServerJsonRpcMessage,
};
use rmcp::service::ServiceError;
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};
use rmcp::{Peer, RoleServer};

use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::throttle::LogThrottle;

/// Answers of long direct calls parked at once per session. At the limit,
/// a new one takes the place of the oldest already written out; failing
/// that, it is streamed but cannot be resumed.
const MAX_PARKED: usize = 16;

/// How long a parked answer is kept once it is ready, written out or not
/// (rmcp keeps a finished stream's events as long): a write to a
/// connection the client lost unnoticed succeeds all the same, so only a
/// resumption within this time can tell the client its answer.
const PARKED_TTL: Duration = Duration::from_secs(60);

/// How long a call waits for its session's adoption to be decided when the
/// session's `initialized` is still on its way through rmcp (a few task
/// hops; the client may send its first call the moment it has the `202`).
/// Past it, the call goes to rmcp, which serves it all the same.
const ADOPTION_WAIT: Duration = Duration::from_secs(1);

/// The request-wise channel number a touch closes: rmcp numbers a
/// session's HTTP requests from 0, so this one is never open.
const TOUCH_CHANNEL: u64 = u64::MAX;

/// Why a session could not be made or used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionsError {
    /// At the cap with every session in use.
    #[error(
        "the server holds its maximum of {max} sessions and each has a stream open; try again later, or raise max_sessions"
    )]
    Full {
        /// The cap.
        max: usize,
    },
    /// rmcp's manager refused.
    #[error(transparent)]
    Session(#[from] LocalSessionManagerError),
}

/// rmcp's [`LocalSessionManager`] with at most `max` sessions.
#[derive(Debug)]
pub(crate) struct BoundedSessions {
    inner: LocalSessionManager,
    /// Cancelled when the server stops: standalone streams end then.
    stopping: CancellationToken,
    max: Option<usize>,
    idle: Option<Duration>,
    /// Whether sessions whose client can be asked things are adopted too
    /// (`HttpOptions::client_requests_in_context`).
    adopts_askers: bool,
    table: Arc<Mutex<Table>>,
    warnings: LogThrottle,
}

/// The live sessions, and how many are being made (counted against the
/// cap, so concurrent `initialize`s cannot overshoot it).
#[derive(Debug, Default)]
struct Table {
    sessions: HashMap<SessionId, Usage>,
    being_made: usize,
}

#[derive(Debug)]
struct Usage {
    last_used: Instant,
    open_streams: usize,
    adopted: Option<Adopted>,
    /// Set while an `initialized` is on its way to the handler: `true`
    /// once the adoption it carries is decided.
    adopting: Option<watch::Receiver<bool>>,
}

/// Carried with a session's `initialized` to the handler: says when the
/// adoption is decided ([`Deciding::decided`]), or, dropped with the
/// notification, that it never will be.
#[derive(Debug)]
pub(crate) struct Deciding(watch::Sender<bool>);

impl Deciding {
    /// The session is adopted, or will not be.
    pub(crate) fn decided(&self) {
        self.0.send_replace(true);
    }
}

impl Drop for Deciding {
    fn drop(&mut self) {
        self.decided();
    }
}

/// What a direct call has to say to its client, serialised: the requests
/// (and withdrawals) and progress reports it sent during the call, in
/// order, then its response.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    /// Server messages sent before the response.
    pub(crate) events: Vec<Bytes>,
    /// The response, `None` until it is made; nothing follows it.
    pub(crate) answer: Option<Bytes>,
    /// Bytes of the progress reports among `events` (bounded by
    /// `crate::call_progress`).
    pub(crate) progress_bytes: usize,
}

/// A direct call's [`Outbox`] as it fills.
pub(crate) type Reply = watch::Receiver<Outbox>;

/// The client's answer to a request a direct call sent it.
pub(crate) type ClientAnswer = Result<ClientResult, ServiceError>;

/// Ids of the requests direct calls send their clients start with this:
/// rmcp numbers its own from 0 (and reads a numeric string as that
/// number), so such an id is never one of rmcp's on the same session.
pub(crate) const ASK_ID_PREFIX: &str = "portcullis-";

/// A request a direct call sent its client, waiting for the answer.
struct Asked {
    /// The client's id of the call that sent it.
    call: RequestId,
    answer: oneshot::Sender<ClientAnswer>,
}

/// What the direct path holds of an adopted session.
struct Adopted {
    peer: Peer<RoleServer>,
    /// The version `initialize` settled on.
    version: ProtocolVersion,
    /// Direct calls in flight, by the client's request id.
    calls: HashMap<RequestId, CancellationToken>,
    /// Answers of long direct calls, by stream number.
    parked: HashMap<u64, Parked>,
    next_stream: u64,
    /// The client declared sampling, elicitation or roots: its calls may
    /// send it requests.
    asks: bool,
    /// Requests sent by direct calls, by their id.
    asked: HashMap<RequestId, Asked>,
    next_ask: u64,
    /// When rmcp's session worker last heard of this session's direct
    /// calls (its idle timer sees only what passes through it).
    touched: Instant,
}

impl std::fmt::Debug for Adopted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adopted")
            .field("version", &self.version)
            .field("calls", &self.calls.len())
            .field("parked", &self.parked.len())
            .field("asked", &self.asked.len())
            .finish_non_exhaustive()
    }
}

/// A long direct call's answer, kept for a client that resumes its stream.
struct Parked {
    reply: Reply,
    /// The client's id of the call.
    call: RequestId,
    /// When the answer was first seen ready.
    ready: Option<Instant>,
    /// The answer was written out on a stream (which may not have reached
    /// the client): the first to make room for a new one.
    sent: bool,
}

impl Adopted {
    /// Forgets answers ready for longer than [`PARKED_TTL`].
    fn evict_parked(&mut self, now: Instant) {
        self.parked.retain(|_, parked| {
            if parked.ready.is_none() && parked.reply.borrow().answer.is_some() {
                parked.ready = Some(now);
            }
            parked
                .ready
                .is_none_or(|ready| now.duration_since(ready) < PARKED_TTL)
        });
    }

    fn cancel_all(&self) {
        for call in self.calls.values() {
            call.cancel();
        }
    }
}

/// A direct call admitted on a session (see [`BoundedSessions::begin_call`]).
pub(crate) struct SessionCall {
    /// The session's peer, for the call's context.
    pub(crate) peer: Peer<RoleServer>,
    /// Cancelled by the client's `notifications/cancelled` or the
    /// session's end.
    pub(crate) cancel: CancellationToken,
    /// Whether rmcp's worker should hear of the session now.
    pub(crate) touch: bool,
    /// The client declared a capability a request to it needs: the call
    /// gets a way to ask it (`crate::session_call`).
    pub(crate) asks: bool,
    /// Ends the call's accounting when dropped.
    pub(crate) open: OpenCall,
}

/// A direct call counted as an open stream of its session until dropped.
pub(crate) struct OpenCall {
    id: SessionId,
    request: RequestId,
    table: Arc<Mutex<Table>>,
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(usage) = table.sessions.get_mut(&self.id) {
            usage.open_streams = usage.open_streams.saturating_sub(1);
            usage.last_used = Instant::now();
            if let Some(adopted) = &mut usage.adopted {
                adopted.calls.remove(&self.request);
                // Requests the call left unanswered fail (their senders
                // are dropped): nobody can read an answer to them now.
                if !adopted.asked.is_empty() {
                    adopted.asked.retain(|_, asked| asked.call != self.request);
                }
            }
        }
    }
}

type SseStream = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

impl BoundedSessions {
    /// At most `max` sessions (`None`: no cap), each closed after `idle`
    /// without a message (`None`: never); their standalone streams end
    /// when `stopping` is cancelled.
    pub(crate) fn new(
        max: Option<usize>,
        idle: Option<Duration>,
        adopts_askers: bool,
        stopping: CancellationToken,
    ) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = idle;
        BoundedSessions {
            inner,
            stopping,
            max,
            idle,
            adopts_askers,
            table: Arc::default(),
            warnings: LogThrottle::new(),
        }
    }

    /// Sessions alive now.
    pub(crate) fn count(&self) -> usize {
        self.lock().sessions.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(&self, id: &SessionId) {
        if let Some(usage) = self.lock().sessions.get_mut(id) {
            usage.last_used = Instant::now();
        }
    }

    /// A standalone stream of `id`, which ends when the server stops: it
    /// carries no call, so nothing it could still bring is worth holding
    /// the drain for (a call's stream is drained, as its request is).
    fn standalone(
        &self,
        id: &SessionId,
        stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    ) -> Counted {
        let stopping = self.stopping.clone();
        let stream = futures::StreamExt::take_until(
            stream,
            Box::pin(async move { stopping.cancelled().await }),
        );
        self.counted(id, stream)
    }

    /// Counts a stream open on `id` until the stream is dropped.
    fn counted(
        &self,
        id: &SessionId,
        stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    ) -> Counted {
        if let Some(usage) = self.lock().sessions.get_mut(id) {
            usage.last_used = Instant::now();
            usage.open_streams += 1;
        }
        Counted {
            inner: Box::pin(stream),
            id: id.clone(),
            table: self.table.clone(),
        }
    }

    /// Reserves room for one more session: `Ok(Some(id))` is the session
    /// to close for it (already forgotten here). The reservation is
    /// released by [`BoundedSessions::made`].
    fn make_room(&self) -> Result<Option<SessionId>, SessionsError> {
        let mut table = self.lock();
        // Sessions whose service ended on its own (rmcp's idle timeout)
        // are gone; an adopted one says so through its peer.
        table.sessions.retain(|_, usage| {
            usage
                .adopted
                .as_ref()
                .is_none_or(|adopted| !adopted.peer.is_transport_closed())
        });
        let Some(max) = self.max else {
            table.being_made += 1;
            return Ok(None);
        };
        if table.sessions.len() + table.being_made < max {
            table.being_made += 1;
            return Ok(None);
        }
        let idlest = table
            .sessions
            .iter()
            .filter(|(_, u)| u.open_streams == 0)
            .min_by_key(|(_, u)| u.last_used)
            .map(|(id, _)| id.clone());
        match idlest {
            Some(id) => {
                if let Some(Usage {
                    adopted: Some(adopted),
                    ..
                }) = table.sessions.remove(&id)
                {
                    adopted.cancel_all();
                }
                table.being_made += 1;
                Ok(Some(id))
            }
            None => Err(SessionsError::Full { max }),
        }
    }

    /// Ends a reservation: `id` is the session made, if it was.
    fn made(&self, id: Option<&SessionId>) {
        let mut table = self.lock();
        table.being_made = table.being_made.saturating_sub(1);
        if let Some(id) = id {
            table.sessions.insert(
                id.clone(),
                Usage {
                    last_used: Instant::now(),
                    open_streams: 0,
                    adopted: None,
                    adopting: None,
                },
            );
        }
    }
}

/// The direct path's side of the table (see the module docs).
impl BoundedSessions {
    /// Keeps `peer` for session `id` when its client negotiated an
    /// initialize-era version. A session is adopted once: a client saying
    /// `initialized` again must not drop the calls in flight (and their
    /// cancellation), their requests or the parked answers.
    pub(crate) fn adopt(&self, id: &SessionId, peer: Peer<RoleServer>) {
        let Some(info) = peer.peer_info() else { return };
        if !info.protocol_version.has_initialize() {
            return;
        }
        let capabilities = &info.capabilities;
        let asks = capabilities.sampling.is_some()
            || capabilities.elicitation.is_some()
            || capabilities.roots.is_some();
        if asks && !self.adopts_askers {
            return;
        }
        if let Some(usage) = self.lock().sessions.get_mut(id)
            && usage.adopted.is_none()
        {
            usage.adopted = Some(Adopted {
                peer,
                version: info.protocol_version.clone(),
                calls: HashMap::new(),
                parked: HashMap::new(),
                next_stream: 0,
                asks,
                asked: HashMap::new(),
                next_ask: 0,
                touched: Instant::now(),
            });
        }
    }

    /// Notes that an `initialized` of session `id`, not yet adopted, is on
    /// its way to the handler: what the handler tells when it has decided
    /// (`None` for a session unknown or adopted already).
    pub(crate) fn adopting(&self, id: &SessionId) -> Option<Deciding> {
        let mut table = self.lock();
        let usage = table.sessions.get_mut(id)?;
        if usage.adopted.is_some() {
            return None;
        }
        let (deciding, decided) = watch::channel(false);
        usage.adopting = Some(decided);
        Some(Deciding(deciding))
    }

    /// Waits (at most [`ADOPTION_WAIT`]) until the adoption of session `id`
    /// an `initialized` on its way carries is decided: whether there was
    /// one (a call [`BoundedSessions::begin_call`] refused may then be
    /// admitted). So a client's first call, sent as soon as its
    /// `initialized` is answered, does not race the handler to rmcp.
    pub(crate) async fn adoption_decided(&self, id: &SessionId) -> bool {
        let adopting = self
            .lock()
            .sessions
            .get(id)
            .and_then(|usage| usage.adopting.clone());
        let Some(mut decided) = adopting else {
            return false;
        };
        let _ = tokio::time::timeout(ADOPTION_WAIT, decided.wait_for(|done| *done)).await;
        // Decided (or waited for once, in vain): later calls do not wait.
        if let Some(usage) = self.lock().sessions.get_mut(id)
            && usage
                .adopting
                .as_ref()
                .is_some_and(|adopting| adopting.same_channel(&decided))
        {
            usage.adopting = None;
        }
        true
    }

    /// Admits the direct call `request` on session `id`, whose request
    /// named `version` (`None`: no `MCP-Protocol-Version` header). `None`
    /// when the session is not adopted, its service has ended, the version
    /// is not the session's, or a call with that id is in flight: rmcp
    /// serves the request then.
    pub(crate) fn begin_call(
        &self,
        id: &SessionId,
        version: Option<&str>,
        request: &RequestId,
    ) -> Option<SessionCall> {
        let mut table = self.lock();
        let usage = table.sessions.get_mut(id)?;
        let adopted = usage.adopted.as_mut()?;
        if adopted.peer.is_transport_closed()
            || version.is_some_and(|v| v != adopted.version.as_str())
            || adopted.calls.contains_key(request)
        {
            return None;
        }
        let now = Instant::now();
        let cancel = CancellationToken::new();
        adopted.calls.insert(request.clone(), cancel.clone());
        let touch = self.touch_due(adopted, now);
        let peer = adopted.peer.clone();
        let asks = adopted.asks;
        usage.open_streams += 1;
        usage.last_used = now;
        Some(SessionCall {
            peer,
            cancel,
            touch,
            asks,
            open: OpenCall {
                id: id.clone(),
                request: request.clone(),
                table: self.table.clone(),
            },
        })
    }

    /// Whether rmcp's worker should hear of `adopted` now (at most every
    /// quarter of the idle timeout); noted as told if so.
    fn touch_due(&self, adopted: &mut Adopted, now: Instant) -> bool {
        let due = self
            .idle
            .is_some_and(|idle| now.duration_since(adopted.touched) >= idle / 4);
        if due {
            adopted.touched = now;
        }
        due
    }

    /// Registers a request the direct call `call` of session `id` sends
    /// its client: the request's id and where its answer will come.
    /// `None` when the call is no longer in flight or the session gone.
    pub(crate) fn ask(
        &self,
        id: &SessionId,
        call: &RequestId,
    ) -> Option<(RequestId, oneshot::Receiver<ClientAnswer>)> {
        let mut table = self.lock();
        let adopted = table.sessions.get_mut(id)?.adopted.as_mut()?;
        if !adopted.calls.contains_key(call) {
            return None;
        }
        adopted.next_ask += 1;
        let request = RequestId::String(format!("{ASK_ID_PREFIX}{}", adopted.next_ask).into());
        let (answer, answered) = oneshot::channel();
        adopted.asked.insert(
            request.clone(),
            Asked {
                call: call.clone(),
                answer,
            },
        );
        Some((request, answered))
    }

    /// Hands the client's `answer` to the request `request` a direct call
    /// of session `id` is waiting on. Only that session's requests are
    /// looked at: `None` (nothing done) for any other id, which is then
    /// rmcp's. The `bool` is whether rmcp's worker should hear of the
    /// session now (its idle timer never sees these answers).
    pub(crate) fn answer(
        &self,
        id: &SessionId,
        request: &RequestId,
        answer: ClientAnswer,
    ) -> Option<bool> {
        let mut table = self.lock();
        let usage = table.sessions.get_mut(id)?;
        let adopted = usage.adopted.as_mut()?;
        let asked = adopted.asked.remove(request)?;
        let now = Instant::now();
        let touch = self.touch_due(adopted, now);
        usage.last_used = now;
        // A request whose asker stopped waiting is answered all the same.
        let _ = asked.answer.send(answer);
        Some(touch)
    }

    /// Whether `version` is the version session `id` settled on (`false`
    /// for a session not adopted).
    pub(crate) fn speaks(&self, id: &SessionId, version: &str) -> bool {
        let table = self.lock();
        table
            .sessions
            .get(id)
            .and_then(|usage| usage.adopted.as_ref())
            .is_some_and(|adopted| adopted.version.as_str() == version)
    }

    /// Forgets the request `request` of session `id`: whether it was still
    /// waiting (and so should be withdrawn from the client).
    pub(crate) fn withdraw(&self, id: &SessionId, request: &RequestId) -> bool {
        let mut table = self.lock();
        table
            .sessions
            .get_mut(id)
            .and_then(|usage| usage.adopted.as_mut())
            .and_then(|adopted| adopted.asked.remove(request))
            .is_some()
    }

    /// Cancels the direct call `request` of session `id`, if one is in
    /// flight.
    pub(crate) fn cancel_call(&self, id: &SessionId, request: &RequestId) {
        let table = self.lock();
        let call = table
            .sessions
            .get(id)
            .and_then(|usage| usage.adopted.as_ref())
            .and_then(|adopted| adopted.calls.get(request));
        if let Some(call) = call {
            call.cancel();
        }
    }

    /// Parks the answer of a long direct call of session `id`: its stream
    /// number, or `None` when the session is gone or holds
    /// [`MAX_PARKED`] already.
    pub(crate) fn park(&self, id: &SessionId, answer: Reply, call: &RequestId) -> Option<u64> {
        let mut table = self.lock();
        let adopted = table.sessions.get_mut(id)?.adopted.as_mut()?;
        adopted.evict_parked(Instant::now());
        if adopted.parked.len() >= MAX_PARKED {
            let oldest_sent = adopted
                .parked
                .iter()
                .filter(|(_, parked)| parked.sent)
                .map(|(stream, _)| *stream)
                .min()?;
            adopted.parked.remove(&oldest_sent);
        }
        let stream = adopted.next_stream;
        adopted.next_stream += 1;
        adopted.parked.insert(
            stream,
            Parked {
                reply: answer,
                call: call.clone(),
                ready: None,
                sent: false,
            },
        );
        Some(stream)
    }

    /// The parked answer of `stream` on session `id`, and the id of its
    /// call, if it is still held and `version` (the request's
    /// `MCP-Protocol-Version`, if any) is the session's.
    pub(crate) fn parked(
        &self,
        id: &SessionId,
        stream: u64,
        version: Option<&str>,
    ) -> Option<(Reply, RequestId)> {
        let mut table = self.lock();
        let adopted = table.sessions.get_mut(id)?.adopted.as_mut()?;
        if version.is_some_and(|v| v != adopted.version.as_str()) {
            return None;
        }
        adopted.evict_parked(Instant::now());
        adopted
            .parked
            .get(&stream)
            .map(|parked| (parked.reply.clone(), parked.call.clone()))
    }

    /// Notes the parked answer of `stream` written out. It stays parked
    /// (until [`PARKED_TTL`], or another needs its place): the connection
    /// it went on may have died without the server noticing.
    pub(crate) fn sent(&self, id: &SessionId, stream: u64) {
        let mut table = self.lock();
        if let Some(parked) = table
            .sessions
            .get_mut(id)
            .and_then(|usage| usage.adopted.as_mut())
            .and_then(|adopted| adopted.parked.get_mut(&stream))
        {
            parked.sent = true;
        }
    }

    /// Whether rmcp still holds session `id`.
    pub(crate) async fn holds(&self, id: &SessionId) -> bool {
        self.inner.has_session(id).await.unwrap_or(false)
    }

    /// Lets rmcp's worker for session `id` know the session is in use, so
    /// that its idle timer does not close a session busy with direct
    /// calls it never sees.
    pub(crate) async fn tell_worker(&self, id: &SessionId) {
        let handle = self.inner.sessions.read().await.get(id).cloned();
        if let Some(handle) = handle {
            // Closing a channel that was never opened: a no-op the worker
            // counts as activity.
            let _ = handle.close_request_wise_channel(TOUCH_CHANNEL).await;
        }
    }
}

impl SessionManager for BoundedSessions {
    type Error = SessionsError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        match self.make_room() {
            Ok(None) => {}
            Ok(Some(idlest)) => {
                if let Some(held_back) = self.warnings.admit() {
                    tracing::warn!(
                        max_sessions = self.max.unwrap_or_default(),
                        held_back,
                        "at the session limit (max_sessions): closed the session idle longest to open a new one"
                    );
                }
                if let Err(error) = self.inner.close_session(&idlest).await {
                    tracing::debug!(%error, "closing the idlest session failed");
                }
            }
            Err(full) => {
                if let Some(held_back) = self.warnings.admit() {
                    tracing::warn!(held_back, "refused a new session: {full}");
                }
                return Err(full);
            }
        }
        match self.inner.create_session().await {
            Ok((id, transport)) => {
                self.made(Some(&id));
                Ok((id, transport))
            }
            Err(error) => {
                self.made(None);
                Err(error.into())
            }
        }
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.touch(id);
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        if let Some(Usage {
            adopted: Some(adopted),
            ..
        }) = self.lock().sessions.remove(id)
        {
            adopted.cancel_all();
        }
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_stream(id, message).await?;
        Ok(self.counted(id, stream))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_standalone_stream(id).await?;
        Ok(self.standalone(id, stream))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // rmcp's ids of a request's stream are `<index>/<request>`; a bare
        // index resumes the standalone stream.
        let standalone = !last_event_id.contains('/');
        let stream = self.inner.resume(id, last_event_id).await?;
        Ok(if standalone {
            self.standalone(id, stream)
        } else {
            self.counted(id, stream)
        })
    }
}

/// A session's stream, counted as open until dropped.
struct Counted {
    inner: SseStream,
    id: SessionId,
    table: Arc<Mutex<Table>>,
}

impl Stream for Counted {
    type Item = ServerSseMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        self.get_mut().inner.as_mut().poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(usage) = table.sessions.get_mut(&self.id) {
            usage.open_streams = usage.open_streams.saturating_sub(1);
            usage.last_used = Instant::now();
        }
    }
}
