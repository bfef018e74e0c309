//! Everything an upstream serves besides tools, per server: resources,
//! resource templates, prompts, completions, the log level and resource
//! subscriptions, and the notifications that come with them (log messages,
//! `resources/updated`, list changes).
//!
//! [`Toolset::passthrough`](crate::Toolset::passthrough) hands out a
//! [`Passthrough`] over the toolset's connections. Requests travel as tool
//! calls do: over the same connection, within the server's timeout (the
//! server is told to cancel when it elapses), with failures typed as
//! [`PassthroughError`]. Listings follow `nextCursor` to the end. Nothing
//! here renames or filters: naming, pinning and routing are the catalogue's
//! ([`portcullis_catalog::passthrough`]); this module only carries requests.
//!
//! Both protocol eras are served. A 2025-era server gets `logging/setLevel`
//! and `resources/subscribe` as such; a 2026-07-28 server has neither, so a
//! level is not forwarded ([`PassthroughError::Unsupported`]) and a
//! subscription becomes a `subscriptions/listen` for that URI. List changes
//! of a 2026 server arrive on a listen opened by [`Passthrough::notices`].

// Logging and resources/subscribe are deprecated by SEP-2577 (2026-07-28)
// but every 2025-era server and client still uses them: they are proxied.
#![allow(deprecated)]

use std::collections::BTreeSet;
use std::sync::Arc;

use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult, GetPromptRequest,
    GetPromptRequestParams, GetPromptResponse, InputRequiredResult, ListPromptsRequest,
    ListResourceTemplatesRequest, ListResourcesRequest, LoggingLevel, PaginatedRequestParams,
    Prompt, ProtocolVersion, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResponse,
    Resource, ResourceTemplate, ResultType, ServerCapabilities, ServerNotification, ServerResult,
    SetLevelRequest, SetLevelRequestParams, SubscribeRequest, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequest, UnsubscribeRequestParams,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::Value;
use thiserror::Error;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::connection::Connection;
use crate::notifications::LogSink;
pub(crate) use crate::notifications::Notices;
pub use crate::notifications::{Notice, ServerNotice};
use crate::toolset::Toolset;

/// Pages followed before giving up on a server that keeps handing out
/// cursors.
const MAX_PAGES: usize = 1000;

/// JSON-RPC "method not found".
const METHOD_NOT_FOUND: i32 = -32601;

/// Why a request to an upstream produced no answer.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum PassthroughError {
    /// No connected server has this name.
    #[error("MCP server \"{server}\" is not connected.")]
    UnknownServer {
        /// The name asked for.
        server: String,
    },
    /// The server is closed, failed authorization, or its connection ended.
    #[error("MCP server \"{server}\" is unavailable.")]
    Unavailable {
        /// The server's effective name.
        server: String,
    },
    /// The server does not serve this method (not advertised, or not in the
    /// protocol revision it speaks).
    #[error("MCP server \"{server}\" does not support {method}.")]
    Unsupported {
        /// The server's effective name.
        server: String,
        /// The MCP method.
        method: &'static str,
    },
    /// No answer within the server's timeout; the server was told to cancel.
    #[error("MCP server \"{server}\" did not answer {method} within {timeout_ms} ms.")]
    Timeout {
        /// The server's effective name.
        server: String,
        /// The MCP method.
        method: &'static str,
        /// The timeout that elapsed.
        timeout_ms: u128,
    },
    /// The server answered with a JSON-RPC error, kept whole so a gateway
    /// can hand it on (a resource-not-found keeps its code and `data.uri`).
    #[error("MCP server \"{server}\" refused {method}: {message}")]
    Protocol {
        /// The server's effective name.
        server: String,
        /// The MCP method.
        method: &'static str,
        /// The JSON-RPC error code.
        code: i32,
        /// The server's message.
        message: String,
        /// The error's `data`, if any (boxed: errors stay small).
        data: Option<Box<Value>>,
    },
    /// The connection failed during the request, or the answer was not the
    /// kind of result asked for.
    #[error("MCP server \"{server}\" failed during {method}: {reason}")]
    Transport {
        /// The server's effective name.
        server: String,
        /// The MCP method.
        method: &'static str,
        /// What broke.
        reason: String,
    },
}

/// Requests other than tools, to the toolset's servers by effective name.
/// Cheap to clone.
#[derive(Clone)]
pub struct Passthrough {
    toolset: Toolset,
}

impl std::fmt::Debug for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passthrough")
            .field("servers", &self.servers())
            .finish()
    }
}

impl Passthrough {
    pub(crate) fn new(toolset: Toolset) -> Self {
        Passthrough { toolset }
    }

    /// Every connected server, by effective name, sorted.
    pub fn servers(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .toolset
            .inner
            .snapshot()
            .connections
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// What `server` declared it can do (`None` if it is not connected).
    pub fn capabilities(&self, server: &str) -> Option<ServerCapabilities> {
        let connection = self
            .toolset
            .inner
            .snapshot()
            .connections
            .get(server)?
            .clone();
        connection
            .peer()
            .peer_info()
            .map(|i| i.capabilities.clone())
    }

    /// Whether `server` speaks a handshake-era revision (2025-11-25 or
    /// older), with `logging/setLevel` and `resources/subscribe`.
    pub fn has_initialize(&self, server: &str) -> bool {
        self.protocol_version(server)
            .is_none_or(|v| v.has_initialize())
    }

    fn protocol_version(&self, server: &str) -> Option<ProtocolVersion> {
        let connection = self
            .toolset
            .inner
            .snapshot()
            .connections
            .get(server)?
            .clone();
        connection
            .peer()
            .peer_info()
            .map(|i| i.protocol_version.clone())
    }

    fn connection(&self, server: &str) -> Result<Arc<Connection>, PassthroughError> {
        let connection = self
            .toolset
            .inner
            .snapshot()
            .connections
            .get(server)
            .cloned()
            .ok_or_else(|| PassthroughError::UnknownServer {
                server: server.to_owned(),
            })?;
        let closed = self
            .toolset
            .inner
            .closed
            .load(std::sync::atomic::Ordering::Acquire);
        if closed || !connection.is_available() {
            return Err(PassthroughError::Unavailable {
                server: server.to_owned(),
            });
        }
        Ok(connection)
    }

    /// `resources/list`, every page.
    pub async fn list_resources(&self, server: &str) -> Result<Vec<Resource>, PassthroughError> {
        self.list_all(
            server,
            "resources/list",
            |params| ClientRequest::ListResourcesRequest(ListResourcesRequest::with_param(params)),
            |result| match result {
                ServerResult::ListResourcesResult(page) => Some((page.resources, page.next_cursor)),
                _ => None,
            },
        )
        .await
    }

    /// `resources/templates/list`, every page.
    pub async fn list_resource_templates(
        &self,
        server: &str,
    ) -> Result<Vec<ResourceTemplate>, PassthroughError> {
        self.list_all(
            server,
            "resources/templates/list",
            |params| {
                ClientRequest::ListResourceTemplatesRequest(
                    ListResourceTemplatesRequest::with_param(params),
                )
            },
            |result| match result {
                ServerResult::ListResourceTemplatesResult(page) => {
                    Some((page.resource_templates, page.next_cursor))
                }
                _ => None,
            },
        )
        .await
    }

    /// `prompts/list`, every page.
    pub async fn list_prompts(&self, server: &str) -> Result<Vec<Prompt>, PassthroughError> {
        self.list_all(
            server,
            "prompts/list",
            |params| ClientRequest::ListPromptsRequest(ListPromptsRequest::with_param(params)),
            |result| match result {
                ServerResult::ListPromptsResult(page) => Some((page.prompts, page.next_cursor)),
                _ => None,
            },
        )
        .await
    }

    /// Follows `nextCursor` to the end, refusing a cursor seen before (and
    /// giving up after [`MAX_PAGES`]). `request` builds one page's request;
    /// `page` takes a page's items and next cursor out of its result, `None`
    /// for another kind of result.
    async fn list_all<T>(
        &self,
        server: &str,
        method: &'static str,
        request: impl Fn(PaginatedRequestParams) -> ClientRequest,
        page: impl Fn(ServerResult) -> Option<(Vec<T>, Option<String>)>,
    ) -> Result<Vec<T>, PassthroughError> {
        let connection = self.connection(server)?;
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen = BTreeSet::new();
        for _ in 0..MAX_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor.take());
            let (listed, next) = ask(&connection, server, method, request(params), &page).await?;
            items.extend(listed);
            match next {
                Some(next) if !next.is_empty() && seen.insert(next.clone()) => cursor = Some(next),
                _ => break,
            }
        }
        Ok(items)
    }

    /// `resources/read` with the server's own URI in `params`. A 2026
    /// server may answer `input_required`; that is handed back as it is.
    /// An initialize-era server's result has no `resultType`: it is marked
    /// `complete` (what an absent one means), which a 2026-07-28 client
    /// requires and rmcp strips for older clients; so for `prompts/get`
    /// and `completion/complete`.
    pub async fn read_resource(
        &self,
        server: &str,
        params: ReadResourceRequestParams,
    ) -> Result<ReadResourceResponse, PassthroughError> {
        let request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params));
        self.request(server, "resources/read", request, |result| match result {
            ServerResult::ReadResourceResult(mut result) => {
                result.result_type.get_or_insert(ResultType::COMPLETE);
                Some(result.into())
            }
            other => input_required(other),
        })
        .await
    }

    /// `prompts/get` with the server's own prompt name in `params`. A 2026
    /// server may answer `input_required`; that is handed back as it is.
    pub async fn get_prompt(
        &self,
        server: &str,
        params: GetPromptRequestParams,
    ) -> Result<GetPromptResponse, PassthroughError> {
        let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
        self.request(server, "prompts/get", request, |result| match result {
            ServerResult::GetPromptResult(mut result) => {
                result.result_type.get_or_insert(ResultType::COMPLETE);
                Some(result.into())
            }
            other => input_required(other),
        })
        .await
    }

    /// `completion/complete` with the server's own prompt name or URI in
    /// the reference.
    pub async fn complete(
        &self,
        server: &str,
        params: CompleteRequestParams,
    ) -> Result<CompleteResult, PassthroughError> {
        let request = ClientRequest::CompleteRequest(CompleteRequest::new(params));
        self.request(
            server,
            "completion/complete",
            request,
            |result| match result {
                ServerResult::CompleteResult(mut result) => {
                    result.result_type.get_or_insert(ResultType::COMPLETE);
                    Some(result)
                }
                _ => None,
            },
        )
        .await
    }

    /// One request to `server`, its answer taken out of the result by
    /// `answer` (see [`ask`]).
    async fn request<R>(
        &self,
        server: &str,
        method: &'static str,
        request: ClientRequest,
        answer: impl FnOnce(ServerResult) -> Option<R>,
    ) -> Result<R, PassthroughError> {
        let connection = self.connection(server)?;
        ask(&connection, server, method, request, answer).await
    }

    /// `logging/setLevel`. A 2026-07-28 server has no such method (the
    /// level travels with each request there): `Unsupported`.
    pub async fn set_level(
        &self,
        server: &str,
        level: LoggingLevel,
    ) -> Result<(), PassthroughError> {
        const METHOD: &str = "logging/setLevel";
        let connection = self.connection(server)?;
        if !self.has_initialize(server) {
            return Err(unsupported(server, METHOD));
        }
        let request =
            ClientRequest::SetLevelRequest(SetLevelRequest::new(SetLevelRequestParams::new(level)));
        ask(&connection, server, METHOD, request, empty).await
    }

    /// Subscribes to updates of `uri` (the server's own). Handshake-era
    /// servers get `resources/subscribe`; a 2026-07-28 server gets a
    /// `subscriptions/listen` for that URI, kept open until
    /// [`Passthrough::unsubscribe`] or the connection ends. Updates arrive
    /// as [`Notice::ResourceUpdated`].
    pub async fn subscribe(&self, server: &str, uri: &str) -> Result<(), PassthroughError> {
        const METHOD: &str = "resources/subscribe";
        let connection = self.connection(server)?;
        if self.has_initialize(server) {
            let request = ClientRequest::SubscribeRequest(SubscribeRequest::new(
                SubscribeRequestParams::new(uri),
            ));
            match ask(&connection, server, METHOD, request, empty).await {
                Ok(()) => {
                    connection
                        .notices()
                        .state()
                        .subscribed
                        .insert(uri.to_owned());
                    return Ok(());
                }
                // A session an Auto client opened with `server/discover` may
                // be held to the 2026 lifecycle by the server even after the
                // fallback to `initialize` (rmcp servers are), where
                // `resources/subscribe` is gone: listen instead.
                Err(PassthroughError::Protocol { code, .. }) if code == METHOD_NOT_FOUND => {}
                Err(other) => return Err(other),
            }
        }
        {
            let mut state = connection.notices().state();
            if state.uris.contains_key(uri) {
                state.subscribed.insert(uri.to_owned());
                return Ok(());
            }
        }
        let filter = SubscriptionFilter::builder()
            .resource_subscription(uri)
            .build();
        let mut subscription = tokio::time::timeout(
            connection.request_timeout(),
            connection.peer().listen(filter),
        )
        .await
        .map_err(|_| PassthroughError::Timeout {
            server: server.to_owned(),
            method: METHOD,
            timeout_ms: connection.request_timeout().as_millis(),
        })?
        .map_err(|e| service_error(&connection, server, METHOD, e))?;
        let stop = connection.listen_token();
        {
            let mut state = connection.notices().state();
            state.uris.insert(uri.to_owned(), stop.clone());
            state.subscribed.insert(uri.to_owned());
        }
        let notices = connection.notices().clone();
        let owned = uri.to_owned();
        connection.track_listen(async move {
            if relay_until_stopped(&mut subscription, &stop, &notices).await {
                return;
            }
            notices.state().uris.remove(&owned);
        });
        Ok(())
    }

    /// Ends a subscription to `uri` (the server's own).
    pub async fn unsubscribe(&self, server: &str, uri: &str) -> Result<(), PassthroughError> {
        const METHOD: &str = "resources/unsubscribe";
        let connection = self.connection(server)?;
        connection.notices().state().subscribed.remove(uri);
        // A subscription that became a listen ends with it.
        if let Some(stop) = connection.notices().state().uris.remove(uri) {
            stop.cancel();
            return Ok(());
        }
        if self.has_initialize(server) {
            let request = ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(
                UnsubscribeRequestParams::new(uri),
            ));
            return ask(&connection, server, METHOD, request, empty).await;
        }
        Ok(())
    }

    /// Hands every connected server's log messages to `sink` from now on,
    /// each delivered in the transport before the server's next message is
    /// read (so before a result the server sent after it) instead of being
    /// published as [`Notice::Log`]. See [`crate::notifications`].
    pub fn route_logs(&self, sink: Arc<dyn LogSink>) {
        self.toolset.inner.listeners().logs = Some(sink.clone());
        for (server, connection) in self.toolset.inner.snapshot().connections.iter() {
            connection.notices().logs().set(server, sink.clone());
        }
    }

    /// Every notice of every connected server, tagged with the server's
    /// name, until the receiver is dropped. For a 2026-07-28 server that
    /// announces list changes, a `subscriptions/listen` for prompt and
    /// resource list changes is opened (once per connection).
    pub fn notices(&self) -> mpsc::UnboundedReceiver<ServerNotice> {
        let (sender, receiver) = mpsc::unbounded_channel();
        {
            // Kept so a server that joins later is heard too ([`adopt`]).
            let mut listeners = self.toolset.inner.listeners();
            listeners.notices.retain(|s| !s.is_closed());
            listeners.notices.push(sender.clone());
        }
        let connections = self.toolset.inner.snapshot().connections.clone();
        for (server, connection) in connections {
            listen_for_lists(&connection);
            forward(server, &connection, sender.clone());
        }
        receiver
    }
}

impl Toolset {
    /// Everything the servers serve besides tools (resources, prompts,
    /// completions, logging, subscriptions), over the same connections.
    pub fn passthrough(&self) -> Passthrough {
        Passthrough::new(self.clone())
    }
}

/// Wires a server that joined the toolset after the start (see
/// `crate::supervisor::join_later`) to the log sink and every notices
/// receiver still open, as [`Passthrough::route_logs`] and
/// [`Passthrough::notices`] wired those present then.
pub(crate) fn adopt(toolset: &Toolset, connection: &Arc<Connection>) {
    let server = toolset
        .inner
        .snapshot()
        .connections
        .iter()
        .find(|(_, c)| Arc::ptr_eq(c, connection))
        .map(|(name, _)| name.clone());
    let Some(server) = server else { return };
    let (logs, senders) = {
        let mut listeners = toolset.inner.listeners();
        listeners.notices.retain(|s| !s.is_closed());
        (listeners.logs.clone(), listeners.notices.clone())
    };
    if let Some(sink) = logs {
        connection.notices().logs().set(&server, sink);
    }
    if !senders.is_empty() {
        listen_for_lists(connection);
    }
    for sender in senders {
        forward(server.clone(), connection, sender);
    }
}

/// Passes `connection`'s notices on to `sender`, tagged with `server`,
/// until either end closes.
fn forward(
    server: String,
    connection: &Arc<Connection>,
    sender: mpsc::UnboundedSender<ServerNotice>,
) {
    let mut notices = connection.notices().subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = sender.closed() => return,
                next = notices.recv() => match next {
                    Ok(notice) => {
                        let tagged = ServerNotice { server: server.clone(), notice };
                        if sender.send(tagged).is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(server, missed, "a slow reader missed upstream notices");
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
}

/// Opens, once per connection, a 2026-07-28 listen for the list changes
/// the server announces (handshake-era servers push them unasked).
fn listen_for_lists(connection: &Arc<Connection>) {
    let peer = connection.peer().clone();
    let Some(info) = peer.peer_info() else { return };
    if info.protocol_version.has_initialize() {
        return;
    }
    let prompts = info
        .capabilities
        .prompts
        .as_ref()
        .and_then(|p| p.list_changed)
        .unwrap_or(false);
    let resources = info
        .capabilities
        .resources
        .as_ref()
        .and_then(|r| r.list_changed)
        .unwrap_or(false);
    if !prompts && !resources {
        return;
    }
    let notices = connection.notices().clone();
    {
        let mut state = notices.state();
        if state.lists {
            return;
        }
        state.lists = true;
        state.lists_wanted = true;
    }
    let mut builder = SubscriptionFilter::builder();
    if prompts {
        builder = builder.prompts_list_changed();
    }
    if resources {
        builder = builder.resources_list_changed();
    }
    let filter = builder.build();
    let stop = connection.listen_token();
    connection.track_listen(async move {
        if let Ok(mut subscription) = peer.listen(filter).await {
            relay_until_stopped(&mut subscription, &stop, &notices).await;
        }
        notices.state().lists = false;
    });
}

/// Re-establishes on `connection` — which a reconnect just swapped in for
/// a closed one, sharing its notices — what was open on the closed one: the
/// list-changes listen and every subscribed URI (`crate::supervisor`). The
/// closed connection's listens have ended by now. A subscription the new
/// server refuses is logged, not retried.
pub(crate) async fn resume(toolset: &Toolset, connection: &Arc<Connection>) {
    let (lists, uris) = {
        let mut state = connection.notices().state();
        state.uris.clear();
        let uris: Vec<String> = state.subscribed.iter().cloned().collect();
        (state.lists_wanted, uris)
    };
    if lists {
        listen_for_lists(connection);
    }
    if uris.is_empty() {
        return;
    }
    let server = toolset
        .inner
        .snapshot()
        .connections
        .iter()
        .find(|(_, c)| Arc::ptr_eq(c, connection))
        .map(|(name, _)| name.clone());
    let Some(server) = server else { return };
    let passthrough = Passthrough::new(toolset.clone());
    for uri in uris {
        if let Err(e) = passthrough.subscribe(&server, &uri).await {
            tracing::warn!(server = %server, uri = %uri, "the subscription could not be renewed after a reconnect: {e}");
        }
    }
}

/// Relays what `subscription` delivers until it ends or `stop` is
/// cancelled (then the subscription is cancelled too). True when stopped.
async fn relay_until_stopped(
    subscription: &mut rmcp::service::Subscription,
    stop: &CancellationToken,
    notices: &Notices,
) -> bool {
    loop {
        tokio::select! {
            _ = stop.cancelled() => {
                let _ = subscription.cancel().await;
                return true;
            }
            next = subscription.next() => match next {
                Ok(Some(notification)) => relay_listened(notices, notification).await,
                _ => return false,
            },
        }
    }
}

/// Publishes what a 2026 listen delivered (a log message goes where the
/// transport's would).
async fn relay_listened(notices: &Notices, notification: ServerNotification) {
    match notification {
        ServerNotification::ResourceUpdatedNotification(n) => {
            notices.publish(Notice::ResourceUpdated(n.params.uri));
        }
        ServerNotification::ResourceListChangedNotification(_) => {
            notices.publish(Notice::ResourcesChanged);
        }
        ServerNotification::PromptListChangedNotification(_) => {
            notices.publish(Notice::PromptsChanged);
        }
        ServerNotification::LoggingMessageNotification(n) => {
            crate::notifications::deliver_log(notices, n.params).await;
        }
        _ => {}
    }
}

/// Sends one request within the connection's timeout.
async fn send(
    connection: &Connection,
    server: &str,
    method: &'static str,
    request: ClientRequest,
) -> Result<ServerResult, PassthroughError> {
    let options = PeerRequestOptions::with_timeout(connection.request_timeout());
    let handle = connection
        .peer()
        .send_request_with_option(request, options)
        .await
        .map_err(|e| service_error(connection, server, method, e))?;
    handle
        .await_response()
        .await
        .map_err(|e| service_error(connection, server, method, e))
}

fn service_error(
    connection: &Connection,
    server: &str,
    method: &'static str,
    error: ServiceError,
) -> PassthroughError {
    match error {
        ServiceError::Timeout { timeout } => PassthroughError::Timeout {
            server: server.to_owned(),
            method,
            timeout_ms: timeout.as_millis(),
        },
        ServiceError::McpError(data) => PassthroughError::Protocol {
            server: server.to_owned(),
            method,
            code: data.code.0,
            message: data.message.to_string(),
            data: data.data.map(Box::new),
        },
        other => {
            if !connection.is_available() {
                return PassthroughError::Unavailable {
                    server: server.to_owned(),
                };
            }
            PassthroughError::Transport {
                server: server.to_owned(),
                method,
                reason: other.to_string(),
            }
        }
    }
}

/// Sends one request and takes the answer out of its result with `answer`
/// (`None`: another kind of result, a transport failure).
async fn ask<R>(
    connection: &Connection,
    server: &str,
    method: &'static str,
    request: ClientRequest,
    answer: impl FnOnce(ServerResult) -> Option<R>,
) -> Result<R, PassthroughError> {
    let result = send(connection, server, method, request).await?;
    answer(result).ok_or_else(|| mismatch(server, method))
}

/// A 2026 server's `input_required` answer to `resources/read` or
/// `prompts/get`, handed back as it is.
fn input_required<R: From<InputRequiredResult>>(result: ServerResult) -> Option<R> {
    match result {
        ServerResult::InputRequiredResult(result) => Some(result.into()),
        _ => None,
    }
}

/// The answer of a request whose result is empty.
fn empty(result: ServerResult) -> Option<()> {
    matches!(result, ServerResult::EmptyResult(_)).then_some(())
}

fn mismatch(server: &str, method: &'static str) -> PassthroughError {
    PassthroughError::Transport {
        server: server.to_owned(),
        method,
        reason: "the server answered with another kind of result".to_owned(),
    }
}

fn unsupported(server: &str, method: &'static str) -> PassthroughError {
    PassthroughError::Unsupported {
        server: server.to_owned(),
        method,
    }
}
