//! Progress: the client handler that routes a server's
//! `notifications/progress` to the caller waiting on that request (and
//! passes on `notifications/tools/list_changed` and the server's requests
//! to the calling client, see [`crate::relay`]).
//!
//! rmcp stamps every outgoing request with its own progress token, so the
//! route is keyed by the token the request handle reports, registered right
//! after the request is sent and removed when the call ends. A fast server
//! can report progress before that registration (the request leaves from
//! rmcp's own task), so reports for a token nobody routes yet are held, a
//! few and only for the most recent tokens, and handed to the route first
//! when it is registered.
//!
//! Routing happens in the transport (`Tapped`), not in the handler's
//! `on_progress`: rmcp runs notification handlers in spawned tasks but
//! resolves a response in its receive loop, so a progress notification the
//! server sent just before its result could reach `on_progress` after the
//! call had returned and its route was gone. Reading the message as the
//! transport hands it over keeps the server's order: every progress report
//! sent before the result is in the caller's channel before the result is.

// Sampling and roots are deprecated by SEP-2577, but 2025-era servers use
// them and a faithful proxy relays them.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientResult, CreateMessageRequest,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ElicitationCapability, FormElicitationCapability, Implementation, JsonRpcMessage,
    JsonRpcNotification, ListRootsRequest, ListRootsResult, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, RootsCapabilities, SamplingCapability, ServerNotification,
    ServerRequest, UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{ClientHandler, ErrorData, RoleClient};
use tokio::sync::{Notify, mpsc};

use crate::relay::Relays;

/// One progress notification, as the caller receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Progress so far.
    pub progress: f64,
    /// The total, when the server knows it.
    pub total: Option<f64>,
    /// The server's message, if any.
    pub message: Option<String>,
}

type Routes = Arc<Mutex<RouteTable>>;

/// How many reports for not-yet-routed tokens are held at most (a server
/// may report progress on calls whose caller never asked for it: rmcp
/// stamps every request with a token).
const EARLY_REPORTS: usize = 256;

/// The callers waiting for progress, and the reports that came before
/// their route.
#[derive(Default)]
struct RouteTable {
    live: HashMap<ProgressToken, mpsc::UnboundedSender<Progress>>,
    /// Oldest first; bounded by [`EARLY_REPORTS`].
    early: std::collections::VecDeque<(ProgressToken, Progress)>,
}

/// The client side of every upstream connection.
#[derive(Clone, Default)]
pub(crate) struct UpstreamHandler {
    routes: Routes,
    /// The calls in flight and the clients that made them.
    pub(crate) relays: Relays,
    /// Signalled when a handshake-era server says its tool list changed.
    pub(crate) tools_changed: Arc<Notify>,
    /// Log messages, resource updates and list changes, for
    /// [`crate::passthrough`].
    pub(crate) notices: crate::notifications::Notices,
}

impl UpstreamHandler {
    /// Sends `token`'s progress to `sink` until the returned guard drops.
    pub(crate) fn route(
        &self,
        token: ProgressToken,
        sink: mpsc::UnboundedSender<Progress>,
    ) -> RouteGuard {
        let mut table = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        // Under the lock the transport also takes, so the held reports go
        // first and a report arriving now comes after them.
        let early = std::mem::take(&mut table.early);
        for (held, progress) in early {
            if held == token {
                let _ = sink.send(progress);
            } else {
                table.early.push_back((held, progress));
            }
        }
        table.live.insert(token.clone(), sink);
        drop(table);
        RouteGuard {
            routes: self.routes.clone(),
            token,
        }
    }

    /// Wraps a transport so progress and log messages are routed as they
    /// arrive.
    pub(crate) fn tap<T: Transport<RoleClient>>(&self, transport: T) -> Tapped<T> {
        Tapped {
            inner: transport,
            routes: self.routes.clone(),
            notices: self.notices.clone(),
        }
    }
}

/// The error for a client that answered with the wrong kind of result.
fn mismatch(method: &str) -> ErrorData {
    ErrorData::internal_error(
        format!("the calling client answered {method} with another kind of result"),
        None,
    )
}

/// Sends one progress notification to its route, or holds it for a route
/// not registered yet.
fn deliver(routes: &Routes, params: &ProgressNotificationParam) {
    let progress = Progress {
        progress: params.progress,
        total: params.total,
        message: params.message.clone(),
    };
    let mut table = routes.lock().unwrap_or_else(PoisonError::into_inner);
    match table.live.get(&params.progress_token) {
        // A caller that stopped listening is not an error.
        Some(sink) => {
            let _ = sink.send(progress);
        }
        None => {
            if table.early.len() == EARLY_REPORTS {
                table.early.pop_front();
            }
            table
                .early
                .push_back((params.progress_token.clone(), progress));
        }
    }
}

/// A transport that routes `notifications/progress` as it receives them
/// (and delivers log messages, [`crate::notifications`]), then hands every
/// message on to rmcp unchanged.
pub(crate) struct Tapped<T> {
    inner: T,
    routes: Routes,
    notices: crate::notifications::Notices,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Tapped<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(JsonRpcNotification {
            notification: ServerNotification::ProgressNotification(progress),
            ..
        }) = &message
        {
            deliver(&self.routes, &progress.params);
        }
        crate::notifications::deliver(&self.notices, &message).await;
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Removes a progress route when the call ends, however it ends.
pub(crate) struct RouteGuard {
    routes: Routes,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let mut table = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        table.live.remove(&self.token);
        // Reports after the call ended are nobody's.
        table.early.retain(|(held, _)| *held != self.token);
    }
}

impl ClientHandler for UpstreamHandler {
    async fn on_progress(
        &self,
        _params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // Already routed by the transport (see the module doc).
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match self.relays.forward(request, &context).await? {
            ClientResult::CreateMessageResult(result) => Ok(*result),
            _ => Err(mismatch("sampling/createMessage")),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match self.relays.forward(request, &context).await? {
            ClientResult::ElicitResult(result) => Ok(result),
            _ => Err(mismatch("elicitation/create")),
        }
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        match self.relays.forward(request, &context).await? {
            ClientResult::ListRootsResult(result) => Ok(result),
            _ => Err(mismatch("roots/list")),
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // A permit is kept if the watcher is busy re-listing, so a change
        // during a re-list is not lost.
        self.tools_changed.notify_one();
    }

    async fn on_logging_message(
        &self,
        _params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // Already delivered by the transport (see `crate::notifications`).
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.notices
            .publish(crate::notifications::Notice::ResourceUpdated(params.uri));
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notices
            .publish(crate::notifications::Notice::ResourcesChanged);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notices
            .publish(crate::notifications::Notice::PromptsChanged);
    }

    fn get_info(&self) -> ClientConfig {
        // Servers that still `initialize` get the newest handshake-era
        // version; 2026 servers are reached through `server/discover`.
        ClientConfig::new(
            relayable(),
            Implementation::new("portcullis", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

/// The client capabilities declared to servers: what the gateway can relay
/// to a calling client. Whether a given call's client can answer is checked
/// per request; a server asking a client that cannot gets an error naming
/// the missing capability. `roots.listChanged` is not declared: root
/// changes of many clients cannot be told apart upstream.
fn relayable() -> ClientCapabilities {
    let mut capabilities = ClientCapabilities::default();
    capabilities.sampling = Some(SamplingCapability::default());
    let mut elicitation = ElicitationCapability::default();
    elicitation.form = Some(FormElicitationCapability::default());
    elicitation.url = Some(UrlElicitationCapability::default());
    capabilities.elicitation = Some(elicitation);
    capabilities.roots = Some(RootsCapabilities::default());
    capabilities
}

impl UpstreamHandler {
    /// A notification that arrived on the direct call path
    /// (`connection::direct`, which bypasses rmcp's service): progress and
    /// log messages delivered as [`Tapped`] delivers them (in order, before
    /// the answer that follows them), the rest as rmcp's service would hand
    /// them to this handler.
    pub(crate) async fn observe(&self, notification: ServerNotification) {
        use crate::notifications::Notice;
        match notification {
            ServerNotification::ProgressNotification(n) => deliver(&self.routes, &n.params),
            ServerNotification::LoggingMessageNotification(n) => {
                crate::notifications::deliver_log(&self.notices, n.params).await;
            }
            ServerNotification::ResourceUpdatedNotification(n) => {
                self.notices.publish(Notice::ResourceUpdated(n.params.uri));
            }
            ServerNotification::ResourceListChangedNotification(_) => {
                self.notices.publish(Notice::ResourcesChanged);
            }
            ServerNotification::PromptListChangedNotification(_) => {
                self.notices.publish(Notice::PromptsChanged);
            }
            ServerNotification::ToolListChangedNotification(_) => self.tools_changed.notify_one(),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(token: &str, progress: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(
            ProgressToken(rmcp::model::NumberOrString::String(token.into())),
            progress,
        )
    }

    fn token(name: &str) -> ProgressToken {
        ProgressToken(rmcp::model::NumberOrString::String(name.into()))
    }

    #[test]
    fn reports_before_the_route_reach_it_first_and_in_order() {
        let handler = UpstreamHandler::default();
        // The server was quicker than the caller: two reports, one of them
        // for another call, before the route exists.
        deliver(&handler.routes, &report("a", 1.0));
        deliver(&handler.routes, &report("b", 9.0));
        deliver(&handler.routes, &report("a", 2.0));
        let (sink, mut seen) = mpsc::unbounded_channel();
        let guard = handler.route(token("a"), sink);
        deliver(&handler.routes, &report("a", 3.0));
        let mut steps = Vec::new();
        while let Ok(progress) = seen.try_recv() {
            steps.push(progress.progress);
        }
        assert_eq!(steps, [1.0, 2.0, 3.0]);
        // The other call's report is still held for its own route.
        let (other, mut other_seen) = mpsc::unbounded_channel();
        let _other = handler.route(token("b"), other);
        assert_eq!(other_seen.try_recv().map(|p| p.progress), Ok(9.0));
        // Once the call ends, its late reports are not kept.
        drop(guard);
        deliver(&handler.routes, &report("a", 4.0));
        drop(_other);
        let table = handler.routes.lock().unwrap();
        assert!(table.live.is_empty());
        assert_eq!(table.early.len(), 1, "the late report waits to be evicted");
    }

    #[test]
    fn held_reports_are_bounded() {
        let handler = UpstreamHandler::default();
        for n in 0..(EARLY_REPORTS + 10) {
            deliver(&handler.routes, &report(&format!("t{n}"), 1.0));
        }
        let table = handler.routes.lock().unwrap();
        assert_eq!(table.early.len(), EARLY_REPORTS);
        assert_eq!(
            table.early.front().map(|(t, _)| t.clone()),
            Some(token("t10"))
        );
    }
}
