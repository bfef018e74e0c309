//! What a handler knows about the call it serves: [`CallContext`].
//!
//! The context is built by the surface that received the call. Over MCP it
//! carries rmcp's request context (the client, the request's `_meta`, the
//! HTTP parts), so progress and the client's own requests go straight back
//! on the call's session; rmcp is the protocol library, not the server, so
//! a handler sees the protocol's types and nothing of the surface. A call
//! made in-process has a [`CallContext::detached`] one.
//!
//! Input asked mid-call from a client that cannot be sent requests (the
//! 2026-07-28 revision's `input_required` round trips) goes through an
//! [`InputChannel`]; the surface that parks the call behind those round
//! trips implements [`InputSink`]. An initialize-era call the surface
//! answers itself (not through rmcp's session) carries a
//! [`ClientRequests`]: requests to its client go on the call's own response
//! stream through it, which the session's peer cannot reach; when it asked
//! for progress, a [`CallProgress`] carries its reports there too.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, ClientResult, InputRequest, ProgressNotificationParam, ProgressToken,
    ServerRequest,
};
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::access::Identity;

/// What a handler knows about the call it serves.
#[derive(Clone)]
pub struct CallContext {
    tool: Arc<str>,
    cancel: CancellationToken,
    progress: Option<(ProgressToken, ProgressRoute)>,
    identity: Option<Arc<Identity>>,
    request: Option<Arc<RequestContext<RoleServer>>>,
    approved: bool,
    input: Option<InputChannel>,
}

/// Where a call's progress reports go.
#[derive(Clone)]
enum ProgressRoute {
    /// Through rmcp, which routes them by token onto the call's stream.
    Peer(Peer<RoleServer>),
    /// Onto the call's stream by the surface that answers it.
    Call(CallProgress),
}

impl CallContext {
    /// A context for a call made in-process, outside any MCP session: never
    /// cancelled unless you cancel [`CallContext::cancellation`], progress
    /// goes nowhere, no identity.
    pub fn detached(tool: impl Into<Arc<str>>) -> Self {
        CallContext {
            tool: tool.into(),
            cancel: CancellationToken::new(),
            progress: None,
            identity: None,
            request: None,
            approved: false,
            input: None,
        }
    }

    /// The context of a call that arrived over MCP as `request`: its
    /// cancellation, its progress token and client, acting as `identity`.
    pub fn for_request(
        tool: Arc<str>,
        request: RequestContext<RoleServer>,
        identity: Option<Arc<Identity>>,
    ) -> Self {
        // The surface's own route when it answers the call itself: the
        // session's peer would put the reports on the standalone stream.
        let progress = request.meta.get_progress_token().map(|token| {
            let route = match request.extensions.get::<CallProgress>() {
                Some(call) => ProgressRoute::Call(call.clone()),
                None => ProgressRoute::Peer(request.peer.clone()),
            };
            (token, route)
        });
        CallContext {
            tool,
            cancel: request.ct.clone(),
            progress,
            identity,
            request: Some(Arc::new(request)),
            approved: false,
            input: None,
        }
    }

    /// Sets the identity the handler sees.
    pub fn with_identity(mut self, identity: Option<Arc<Identity>>) -> Self {
        self.identity = identity;
        self
    }

    /// The tool's name.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// Cancelled when the client cancels the call or goes away (over HTTP:
    /// closes the response stream), or the server shuts down. A handler
    /// doing long work should watch it.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// True once the call has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when the call is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// True when the client asked for progress (sent a progress token).
    pub fn wants_progress(&self) -> bool {
        self.progress.is_some()
    }

    /// Reports progress to the client, if it asked for it; otherwise does
    /// nothing. `progress` should increase with every report.
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some((token, route)) = &self.progress else {
            return;
        };
        let mut param = ProgressNotificationParam::new(token.clone(), progress);
        param.total = total;
        param.message = message.map(str::to_owned);
        // A client that went away cannot be told; the call's cancellation
        // token says so, and the handler decides what to do.
        match route {
            ProgressRoute::Peer(peer) => {
                if let Err(error) = peer.notify_progress(param).await {
                    tracing::debug!(tool = %self.tool, %error, "progress notification not delivered");
                }
            }
            ProgressRoute::Call(call) => {
                if !call.report(param) {
                    tracing::debug!(tool = %self.tool, "progress notification not delivered");
                }
            }
        }
    }

    /// True when the policy answered `ask` and the person at the client
    /// approved this very call. Only the surface that ran that round trip
    /// sets it, once the person said yes ([`CallContext::with_approved`]).
    pub fn approved(&self) -> bool {
        self.approved
    }

    /// Says whether the person at the client approved this call. For the
    /// surface that asked: it clears the flag on every call it receives
    /// and sets it only after a yes, so a context built elsewhere never
    /// arrives approved.
    pub fn with_approved(mut self, approved: bool) -> Self {
        self.approved = approved;
        self
    }

    /// Where to ask the client for input mid-call, when the client takes
    /// it through `input_required` round trips (2026-07-28 clients).
    /// `None` otherwise: an initialize-era client is sent requests through
    /// [`CallContext::client_requests`] or, failing that,
    /// [`CallContext::peer`].
    pub fn input(&self) -> Option<&InputChannel> {
        self.input.as_ref()
    }

    /// The context of a run that may be parked behind its client's input:
    /// its own cancellation (the run outlives the request that started it)
    /// and an input channel. For the surface that parks it.
    pub fn parkable(mut self, cancel: CancellationToken, input: InputChannel) -> Self {
        self.cancel = cancel;
        self.input = Some(input);
        self
    }

    /// The identity configured for the server (sent with app calls), if any.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_deref()
    }

    /// The client, for handlers that need more than progress (logging,
    /// sampling, elicitation). `None` for a detached call. A request to the
    /// client sent here rides the call's stream only when rmcp serves the
    /// call; check [`CallContext::client_requests`] first. Report progress
    /// through [`CallContext::progress`], never here: when the surface
    /// answers the call itself, a report sent through the peer reaches the
    /// session's standalone stream, not the call's.
    pub fn peer(&self) -> Option<&Peer<RoleServer>> {
        self.request.as_ref().map(|r| &r.peer)
    }

    /// Where requests to the client go when the surface answers this
    /// initialize-era call itself, in front of rmcp's session: there the
    /// session's peer cannot put a request on the call's stream. `None`
    /// when rmcp serves the call (send through [`CallContext::peer`]).
    pub fn client_requests(&self) -> Option<&ClientRequests> {
        self.request.as_ref()?.extensions.get::<ClientRequests>()
    }

    /// The raw rmcp request context (request `_meta`, HTTP parts in its
    /// extensions). `None` for a detached call.
    pub fn request(&self) -> Option<&RequestContext<RoleServer>> {
        self.request.as_deref()
    }
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("tool", &self.tool)
            .field("cancelled", &self.cancel.is_cancelled())
            .field("wants_progress", &self.progress.is_some())
            .field("approved", &self.approved)
            .finish_non_exhaustive()
    }
}

/// Where a handler's mid-call questions go: implemented by the surface that
/// serves the call and can carry them to its client (see [`InputChannel`]).
pub trait InputSink: Send + Sync + 'static {
    /// Puts `request` to the client, under `key` among the round's input
    /// requests when the surface can keep it, and resolves with the
    /// client's answer as JSON, or why there is none.
    fn ask(
        &self,
        key: Option<String>,
        request: InputRequest,
    ) -> BoxFuture<'static, Result<Value, ErrorData>>;

    /// Notes that the run needed `missing`, capabilities the client did not
    /// declare (so it was not asked).
    fn undeclared(&self, missing: ClientCapabilities);
}

/// A handler's way to ask the client of its call for input mid-call, when
/// the client takes it through `input_required` round trips. Cheap to
/// clone; usable from any task.
#[derive(Clone)]
pub struct InputChannel {
    sink: Arc<dyn InputSink>,
}

impl fmt::Debug for InputChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputChannel").finish_non_exhaustive()
    }
}

impl InputChannel {
    /// A channel whose questions go to `sink`.
    pub fn new(sink: impl InputSink) -> Self {
        InputChannel {
            sink: Arc::new(sink),
        }
    }

    /// Asks the client `request` and resolves with its answer (the
    /// `CreateMessageResult`, `ElicitResult` or `ListRootsResult` as JSON).
    /// The error says why there is no answer: the call ended, was not
    /// resumed in time, or took too many rounds (a retry that leaves this
    /// question out is asked it again).
    pub fn request(&self, request: InputRequest) -> BoxFuture<'static, Result<Value, ErrorData>> {
        self.request_keyed(None, request)
    }

    /// As [`InputChannel::request`], asked under `key` among the round's
    /// input requests when no other question of the round has it (a proxy
    /// keeps its server's keys). Questions asked before the first is
    /// awaited go out in one round.
    pub fn request_keyed(
        &self,
        key: Option<String>,
        request: InputRequest,
    ) -> BoxFuture<'static, Result<Value, ErrorData>> {
        self.sink.ask(key, request)
    }

    /// Reports that the run needed `missing`, capabilities the client did
    /// not declare (so it was not asked). Should the run fail, the call
    /// answers `-32021` (MissingRequiredClientCapability) naming everything
    /// reported instead of the error result.
    pub fn undeclared(&self, missing: ClientCapabilities) {
        self.sink.undeclared(missing);
    }
}

/// Where a call's requests to its initialize-era client go when the
/// surface that answers the call routes them itself (see
/// [`ClientRequests`]).
pub trait RequestSink: Send + Sync + 'static {
    /// Sends `request` to the client on the call's response stream and
    /// resolves with its answer, as rmcp's
    /// `send_request_with_option(..).await_response()` does: the client's
    /// JSON-RPC error is [`ServiceError::McpError`], `timeout` (if any) ends
    /// the wait with [`ServiceError::Timeout`]. The call ending, being
    /// cancelled or losing its session fails the request; dropping the
    /// future before the answer withdraws it (the client is sent
    /// `notifications/cancelled`).
    fn send(
        &self,
        request: ServerRequest,
        timeout: Option<Duration>,
    ) -> BoxFuture<'static, Result<ClientResult, ServiceError>>;
}

/// A call's way to ask its initialize-era client (sampling, elicitation,
/// roots) when the surface answers the call itself; found through
/// [`CallContext::client_requests`]. Cheap to clone; usable from any task.
#[derive(Clone)]
pub struct ClientRequests {
    sink: Arc<dyn RequestSink>,
}

impl fmt::Debug for ClientRequests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRequests").finish_non_exhaustive()
    }
}

impl ClientRequests {
    /// Requests that go to `sink`.
    pub fn new(sink: impl RequestSink) -> Self {
        ClientRequests {
            sink: Arc::new(sink),
        }
    }

    /// Asks the client `request`; see [`RequestSink::send`].
    pub fn send(
        &self,
        request: ServerRequest,
        timeout: Option<Duration>,
    ) -> BoxFuture<'static, Result<ClientResult, ServiceError>> {
        self.sink.send(request, timeout)
    }
}

/// Where a call's progress reports go when the surface that answers the
/// call routes them itself (see [`CallProgress`]).
pub trait ProgressSink: Send + Sync + 'static {
    /// Puts `report` on the call's response stream, after what was sent
    /// before it and before the response, as rmcp's session would; `false`
    /// when it cannot go out any more (the response is out) or is dropped
    /// (the surface's bound on what a call may hold for its client).
    /// Never blocks.
    fn report(&self, report: ProgressNotificationParam) -> bool;
}

/// A call's way to report progress on its own response stream when the
/// surface answers the call itself, in front of rmcp's session; put in the
/// request's extensions, [`CallContext::progress`] prefers it to the
/// session's peer. Cheap to clone; usable from any task.
#[derive(Clone)]
pub struct CallProgress {
    sink: Arc<dyn ProgressSink>,
}

impl fmt::Debug for CallProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallProgress").finish_non_exhaustive()
    }
}

impl CallProgress {
    /// Reports that go to `sink`.
    pub fn new(sink: impl ProgressSink) -> Self {
        CallProgress {
            sink: Arc::new(sink),
        }
    }

    /// Sends `report`; see [`ProgressSink::report`].
    pub fn report(&self, report: ProgressNotificationParam) -> bool {
        self.sink.report(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_detached_context_reports_no_progress_and_can_be_cancelled() {
        let ctx = CallContext::detached("t");
        assert!(!ctx.wants_progress());
        ctx.progress(1.0, None, None).await;
        assert!(!ctx.is_cancelled());
        ctx.cancellation().cancel();
        ctx.cancelled().await;
        assert!(ctx.is_cancelled());
    }
}
