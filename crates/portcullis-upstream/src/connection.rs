//! One upstream connection: how it is opened (transport, handshake,
//! listing) and how a call travels over it (timeout, cancellation,
//! progress, credentials).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use portcullis_catalog::redact::urls_in_text;
use portcullis_catalog::{Tool, ToolResult};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, JsonObject, PaginatedRequestParams, ProgressToken, ProtocolVersion,
    ServerResult, SubscriptionFilter,
};
use rmcp::service::{ClientInitializeError, PeerRequestOptions, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::{ClientCacheConfig, ClientLifecycleMode, ClientServiceExt, Peer, RoleClient};
use tokio::sync::Mutex;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use crate::call_context::CallContext;
use crate::config::{McpServerConfig, RemoteConfig, check_remote_url};
use crate::error::CallError;
use crate::health::ServerHealth;
use crate::hosts::{GuardedResolver, HostGuard, Reach};
use crate::http::{CallCredential, GuardedHttp, GuardedHttpParts, HttpFailure};
use crate::progress::UpstreamHandler;
use crate::relay::{ClientRelay, answer_inputs, answerable, for_one_call, note_refusal};
use crate::report::DiagnosticSink;
use crate::sse::LegacySseTransport;

mod direct;
mod wire_tool;

type Client = RunningService<RoleClient, UpstreamHandler>;

/// Pages of `tools/list` followed before giving up on a server that keeps
/// handing out cursors.
const MAX_LIST_PAGES: usize = 1000;

/// Rounds of `input_required` one call may take (a 2026 server asking the
/// client for input again and again) before it is given up.
const MAX_INPUT_ROUNDS: usize = 16;

/// How long `close()` waits for one connection to shut down cleanly before
/// it is dropped (which still kills a child process).
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Probe with `server/discover`, fall back to `initialize` (2026 rules).
fn auto_lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// Everything needed to open one connection.
pub(crate) struct ConnectPlan {
    pub(crate) config: McpServerConfig,
    /// The caller's own HTTP client (`ConnectOptions::http`), if any;
    /// otherwise a remote server gets a guarded client of its own.
    pub(crate) http: Option<reqwest::Client>,
    /// The effective allow-list (`None` = any host).
    pub(crate) allowed: Option<Vec<String>>,
    /// The token `auth` resolved for the handshake.
    pub(crate) bearer: Option<String>,
    /// The `auth` resolver itself, told of the server's challenges.
    pub(crate) auth: Option<crate::credentials::Auth>,
    pub(crate) diagnostics: DiagnosticSink,
    pub(crate) timeout: Duration,
    /// The notices of the connection this one replaces (a reconnect), so
    /// whoever listens to the server's notices, and where its log messages
    /// go, carry over to the new connection.
    pub(crate) notices: Option<crate::notifications::Notices>,
}

/// A live connection to one server.
pub(crate) struct Connection {
    health: Arc<ServerHealth>,
    peer: Peer<RoleClient>,
    handler: UpstreamHandler,
    client: Mutex<Option<Client>>,
    /// What the server publishes now: a call for anything else is "no longer
    /// published". Kept current by the listing watcher.
    published: Arc<RwLock<BTreeSet<String>>>,
    /// Stops the listing watcher.
    stop: CancellationToken,
    /// The subscription task (2026 servers), awaited on close so the
    /// server hears the subscription end before the connection does.
    subscription: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The passthrough's listens (prompt/resource lists, subscribed URIs),
    /// awaited on close like `subscription`: an rmcp server holds its exit
    /// up to 5 s for a listen still open when its stdin closes.
    listens: TaskTracker,
    timeout: Duration,
    pid: Option<u32>,
    /// The direct call path of a Streamable HTTP server ([`direct`]);
    /// `None` for every other server.
    direct: Option<Arc<direct::Direct>>,
    /// The direct call path of a stdio server.
    #[cfg(feature = "stdio")]
    stdio_direct: Option<direct::StdioDirect>,
    /// The direct call path of a legacy HTTP+SSE server.
    sse_direct: Option<direct::SseDirect>,
    /// Fires when rmcp's service loop lets go of the transport: the
    /// connection ended, whoever ended it.
    ended: CancellationToken,
    /// Set by [`Connection::close`]: an end we asked for, which no
    /// supervisor undoes.
    closing: AtomicBool,
}

/// A transport that fires a token when it is dropped. rmcp's service loop
/// owns the transport and drops it when the connection ends (the server's
/// stream ended, a stdio child exited, or we closed it), so the token is
/// how a supervisor hears of the end without polling.
struct Watched<T> {
    inner: T,
    _ended: DropGuard,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Watched<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(
        &mut self,
    ) -> impl Future<Output = Option<rmcp::service::RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// `transport`, firing `ended` when dropped.
fn watched<T: Transport<RoleClient>>(transport: T, ended: &CancellationToken) -> Watched<T> {
    Watched {
        inner: transport,
        _ended: ended.clone().drop_guard(),
    }
}

/// How long a new session waits for its standalone event stream to be
/// answered before the connection is handed out.
const STANDALONE_WAIT: Duration = Duration::from_secs(2);

/// A connection and its first listing.
pub(crate) struct Connected {
    pub(crate) connection: Connection,
    pub(crate) tools: Vec<Tool>,
}

/// Opens a connection and lists its tools, within the plan's timeout. The
/// error is the diagnostic message.
pub(crate) async fn connect(plan: ConnectPlan) -> Result<Connected, String> {
    let name = plan.config.name().to_owned();
    let health = Arc::new(ServerHealth::new(name.clone()));
    let timeout = plan.timeout;
    let attempt = tokio::time::timeout(timeout, open(plan, health.clone())).await;
    match attempt {
        Ok(Ok(connected)) => Ok(connected),
        Ok(Err(message)) => Err(health.take_failure().unwrap_or(message)),
        Err(_) => Err(health.take_failure().unwrap_or_else(|| {
            format!(
                "MCP server \"{name}\" did not complete connecting within {} ms.",
                timeout.as_millis()
            )
        })),
    }
}

async fn open(plan: ConnectPlan, health: Arc<ServerHealth>) -> Result<Connected, String> {
    let name = plan.config.name().to_owned();
    let mut handler = UpstreamHandler::default();
    if let Some(notices) = plan.notices.clone() {
        handler.notices = notices;
    }
    let started = tokio::time::Instant::now();
    let mut direct = None;
    #[cfg(feature = "stdio")]
    let mut lines = None;
    let mut standalone = None;
    let mut sse_messages = None;
    let ended = CancellationToken::new();
    let (client, pid, ended) = match &plan.config {
        McpServerConfig::StreamableHttp(remote) => {
            let (http, url) = guarded(&plan, remote, &health).await?;
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let transport = StreamableHttpClientTransport::with_client(http.clone(), config);
            let client = handler
                .clone()
                .serve_with_lifecycle(watched(handler.tap(transport), &ended), auto_lifecycle())
                .await
                .map_err(|e| init_failure(&name, &e))?;
            standalone = Some(http.clone());
            if let Some(server) = client.peer().peer_info() {
                let info = rmcp::ClientHandler::get_info(&handler);
                let lifecycle = if http.handshook() {
                    direct::Lifecycle::Handshake
                } else {
                    direct::Lifecycle::Discover
                };
                direct = direct::Direct::new(
                    http,
                    url,
                    &server.protocol_version,
                    lifecycle,
                    info.client_info,
                    info.capabilities,
                )
                .map(Arc::new);
            }
            (client, None, ended)
        }
        McpServerConfig::Sse(remote) => {
            let (http, url) = guarded(&plan, remote, &health).await?;
            let transport = LegacySseTransport::connect(http, url).await.map_err(|e| {
                let e = urls_in_text(&e.to_string()).into_owned();
                format!("MCP server \"{name}\" could not be connected: {e}")
            })?;
            sse_messages = Some(transport.messages());
            // 2024-11-05 servers only know the handshake.
            let client = handler
                .clone()
                .serve_with_lifecycle(
                    watched(handler.tap(transport), &ended),
                    ClientLifecycleMode::Initialize,
                )
                .await
                .map_err(|e| init_failure(&name, &e))?;
            (client, None, ended)
        }
        McpServerConfig::Stdio(stdio) => {
            drop(ended);
            let opened = open_stdio(stdio, &handler).await?;
            #[cfg(feature = "stdio")]
            {
                lines = Some(opened.3);
            }
            (opened.0, opened.1, opened.2)
        }
    };
    let peer = client.peer().clone();
    #[cfg(feature = "stdio")]
    let stdio_direct = lines.zip(peer.peer_info()).map(|(lines, server)| {
        let info = rmcp::ClientHandler::get_info(&handler);
        direct::StdioDirect::new(
            lines,
            &server.protocol_version,
            info.client_info,
            info.capabilities,
        )
    });
    let sse_direct = sse_messages
        .zip(peer.peer_info())
        .map(|(messages, server)| {
            let info = rmcp::ClientHandler::get_info(&handler);
            direct::SseDirect::new(
                messages,
                &server.protocol_version,
                info.client_info,
                info.capabilities,
            )
        });
    // rmcp's response cache would hand back a stale listing when the server
    // fails; a gateway must see the failure.
    peer.set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let listed = list_all(&peer).await.map_err(|e| {
        let e = urls_in_text(&e.to_string()).into_owned();
        format!("MCP server \"{name}\" could not list its tools: {e}")
    })?;
    if let Some(direct) = &direct {
        direct.saw_schemas(listed.iter().map(|t| &t.input_schema));
    }
    if let Some(http) = standalone {
        // Usually answered while the tools were listed; bounded, so a
        // server that never answers its GET only delays the start.
        // Half of what is left of the connect timeout at most, so waiting
        // never turns a slow GET into a failed connect.
        let left = plan.timeout.saturating_sub(started.elapsed());
        http.standalone_settled(STANDALONE_WAIT.min(left / 2)).await;
    }
    let tools: Vec<Tool> = listed.into_iter().map(wire_tool::from_wire_tool).collect();
    let published = Arc::new(RwLock::new(tools.iter().map(|t| t.name.clone()).collect()));
    let stop = CancellationToken::new();
    let subscription = watch_listing(&peer, &handler, &published, &stop, direct.clone());
    Ok(Connected {
        connection: Connection {
            health,
            peer,
            handler,
            client: Mutex::new(Some(client)),
            published,
            stop,
            subscription: Mutex::new(subscription),
            listens: TaskTracker::new(),
            timeout: plan.timeout,
            pid,
            direct,
            #[cfg(feature = "stdio")]
            stdio_direct,
            sse_direct,
            ended,
            closing: AtomicBool::new(false),
        },
        tools,
    })
}

/// The guarded HTTP client for a remote server, after the URL and host
/// checks (which make zero requests when they refuse).
async fn guarded(
    plan: &ConnectPlan,
    remote: &RemoteConfig,
    health: &Arc<ServerHealth>,
) -> Result<(GuardedHttp, url::Url), String> {
    let name = &remote.name;
    let url = check_remote_url(&remote.url)
        .map_err(|reason| format!("MCP server \"{name}\" has an unusable url: {reason}."))?;
    let guard = HostGuard::new(plan.allowed.clone(), Reach::of(&url).await);
    guard.check(&url).await.map_err(|r| r.message(name))?;
    // A client of the caller's own is used as it is (the guard still checks
    // every URL before it is requested); otherwise the server gets a client
    // whose resolver dials only the addresses its guard admits.
    // A client of the caller's own has no call lane: how it connects is
    // the caller's.
    let (client, lane) = match &plan.http {
        Some(client) => (client.clone(), None),
        None => crate::lane::guarded_client_and_lane(GuardedResolver {
            guard: guard.clone(),
            server: name.clone(),
        })
        .map_err(|e| {
            format!("MCP server \"{name}\" could not be connected: its HTTP client could not be built: {e}.")
        })?,
    };
    let http = GuardedHttp::new(
        client,
        GuardedHttpParts {
            server: name.clone(),
            guard,
            headers: remote.headers.clone(),
            bearer: plan.bearer.clone(),
            auth: plan.auth.clone(),
            health: health.clone(),
            diagnostics: plan.diagnostics.clone(),
            lane,
        },
    )
    .map_err(|e| e.to_string())?;
    Ok((http, url))
}

/// A stdio server's client, pid, end signal and pipes.
#[cfg(feature = "stdio")]
type OpenedStdio = (
    Client,
    Option<u32>,
    CancellationToken,
    crate::stdio::ChildLines,
);

#[cfg(feature = "stdio")]
async fn open_stdio(
    stdio: &crate::config::StdioConfig,
    handler: &UpstreamHandler,
) -> Result<OpenedStdio, String> {
    let name = &stdio.name;
    let spawn = || {
        crate::stdio::spawn(stdio).map_err(|e| {
            format!(
                "MCP server \"{name}\" could not be started ({}): {e}",
                stdio.command
            )
        })
    };
    let first = spawn()?;
    // One token per child: the first one's end must not read as the
    // second's.
    let ended = CancellationToken::new();
    let lines = first.transport.lines();
    match handler
        .clone()
        .serve_with_lifecycle(
            watched(handler.tap(first.transport), &ended),
            auto_lifecycle(),
        )
        .await
    {
        Ok(client) => Ok((client, first.pid, ended, lines)),
        // A legacy stdio server may exit on the unknown `server/discover`
        // probe; the 2026 rules say to restart it and use `initialize`.
        Err(_) => {
            let second = spawn()?;
            let ended = CancellationToken::new();
            let lines = second.transport.lines();
            let client = handler
                .clone()
                .serve_with_lifecycle(
                    watched(handler.tap(second.transport), &ended),
                    ClientLifecycleMode::Initialize,
                )
                .await
                .map_err(|e| init_failure(name, &e))?;
            Ok((client, second.pid, ended, lines))
        }
    }
}

#[cfg(not(feature = "stdio"))]
async fn open_stdio(
    stdio: &crate::config::StdioConfig,
    _handler: &UpstreamHandler,
) -> Result<(Client, Option<u32>, CancellationToken, ()), String> {
    // `connect` reports `unsupported-transport` before getting here.
    Err(crate::config::unsupported_stdio_message(&stdio.name))
}

fn init_failure(name: &str, error: &ClientInitializeError) -> String {
    let detail = match error {
        ClientInitializeError::TransportError { error, .. } => root_cause(error.error.as_ref()),
        other => other.to_string(),
    };
    // An HTTP client's error may name the URL, whose query can be a
    // credential.
    let detail = urls_in_text(&detail);
    format!("MCP server \"{name}\" could not be connected: {detail}")
}

/// A server's tool result as the catalogue's [`ToolResult`], each content
/// block turned into JSON once. The same value a serialisation of the whole
/// result read back would give (an explicit `null` structured content is
/// absent, a missing `isError` false), without building the whole result as
/// JSON and taking it apart again on every call.
fn tool_result(result: CallToolResult) -> Result<ToolResult, serde_json::Error> {
    let content = result
        .content
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ToolResult {
        content,
        structured_content: result.structured_content.filter(|value| !value.is_null()),
        is_error: result.is_error.unwrap_or(false),
        meta: result.meta.map(|meta| meta.0),
    })
}

/// The innermost cause of a transport error: rmcp's wrappers name Rust
/// types, which tell a person nothing ("Connection refused" does).
pub(crate) fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    loop {
        // rmcp's `Client(E)` variant does not expose `E` as its source.
        if let Some(StreamableHttpError::Client(inner)) =
            cause.downcast_ref::<StreamableHttpError<HttpFailure>>()
        {
            cause = inner;
            continue;
        }
        match cause.source() {
            Some(next) => cause = next,
            None => return cause.to_string(),
        }
    }
}

/// Keeps `published` current: a server that announces a changed tool list
/// is re-listed, so a call for a tool it withdrew gets "no longer
/// published" instead of reaching it. Handshake-era servers push the
/// announcement unasked; 2026-07-28 servers only on a subscription, which is
/// opened here when the server advertises `tools.listChanged`. The
/// catalogue itself is not rebuilt: a model keeps the tool list it was given
/// until the next build, and the call path refuses what disappeared.
fn watch_listing(
    peer: &Peer<RoleClient>,
    handler: &UpstreamHandler,
    published: &Arc<RwLock<BTreeSet<String>>>,
    stop: &CancellationToken,
    direct: Option<Arc<direct::Direct>>,
) -> Option<tokio::task::JoinHandle<()>> {
    let info = peer.peer_info()?;
    let announces = info
        .capabilities
        .tools
        .as_ref()
        .and_then(|t| t.list_changed)
        .unwrap_or(false);
    if !announces {
        return None;
    }
    let changed = handler.tools_changed.clone();
    let mut subscription_task = None;
    if !info.protocol_version.has_initialize() {
        let (peer, stop, changed) = (peer.clone(), stop.clone(), changed.clone());
        subscription_task = Some(tokio::spawn(async move {
            let filter = SubscriptionFilter::builder().tools_list_changed().build();
            let Ok(mut subscription) = peer.listen(filter).await else {
                return;
            };
            loop {
                tokio::select! {
                    _ = stop.cancelled() => {
                        let _ = subscription.cancel().await;
                        return;
                    }
                    next = subscription.next() => match next {
                        Ok(Some(_)) => changed.notify_one(),
                        _ => return,
                    },
                }
            }
        }));
    }
    let (peer, stop, published) = (peer.clone(), stop.clone(), published.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = changed.notified() => {}
            }
            match list_all(&peer).await {
                Ok(tools) => {
                    if let Some(direct) = &direct {
                        direct.saw_schemas(tools.iter().map(|t| &t.input_schema));
                    }
                    let names = tools.iter().map(|t| t.name.to_string()).collect();
                    *published.write().unwrap_or_else(PoisonError::into_inner) = names;
                }
                Err(_) if peer.is_transport_closed() => return,
                // A failed re-list keeps the last known listing.
                Err(_) => {}
            }
        }
    });
    subscription_task
}

/// `tools/list`, following `nextCursor` to the end.
async fn list_all(peer: &Peer<RoleClient>) -> Result<Vec<rmcp::model::Tool>, ServiceError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = BTreeSet::new();
    for _ in 0..MAX_LIST_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let page = peer.list_tools(Some(params)).await?;
        tools.extend(page.tools);
        match page.next_cursor {
            // A cursor seen before would loop forever.
            Some(next) if !next.is_empty() && seen.insert(next.clone()) => cursor = Some(next),
            _ => break,
        }
    }
    Ok(tools)
}

impl Connection {
    /// The server's configured name.
    pub(crate) fn server(&self) -> &str {
        self.health.server()
    }

    /// The child's process id, for a stdio server.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The rmcp peer, for the requests [`crate::passthrough`] carries.
    pub(crate) fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// The per-request timeout (the config's `timeout_ms`).
    pub(crate) fn request_timeout(&self) -> Duration {
        self.timeout
    }

    /// What is known about the server's state.
    pub(crate) fn health(&self) -> &ServerHealth {
        &self.health
    }

    /// Where the client handler publishes the server's notices.
    pub(crate) fn notices(&self) -> &crate::notifications::Notices {
        &self.handler.notices
    }

    /// A token that fires when this connection closes, for a listen's task
    /// (a child token: cancelling it ends that listen only).
    pub(crate) fn listen_token(&self) -> CancellationToken {
        self.stop.child_token()
    }

    /// Runs a listen's task; [`Connection::close`] waits for it (bounded),
    /// so the server hears the listen cancelled before the pipe closes.
    pub(crate) fn track_listen(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.listens.spawn(task);
    }

    /// Fires when the connection has ended (see [`Watched`]).
    pub(crate) fn ended(&self) -> CancellationToken {
        self.ended.clone()
    }

    /// Whether [`Connection::close`] was called: the end was asked for.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Whether calls may be sent.
    pub(crate) fn is_available(&self) -> bool {
        if self.peer.is_transport_closed() {
            self.health.mark_unavailable();
        }
        self.health.is_available()
    }

    /// Whether the server currently publishes `remote_name`.
    pub(crate) fn publishes(&self, remote_name: &str) -> bool {
        self.published
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(remote_name)
    }

    /// Replaces what the server is known to publish (after a reconcile's
    /// fresh listing).
    pub(crate) fn set_published(&self, names: BTreeSet<String>) {
        *self
            .published
            .write()
            .unwrap_or_else(PoisonError::into_inner) = names;
    }

    /// Sends one `tools/call`. `tool` is the qualified name (for messages).
    ///
    /// A 2026 server that answers `input_required` has its input requests
    /// put to the calling client ([`crate::relay::answer_inputs`]) and the
    /// call retried with the answers and the server's request state, up to
    /// [`MAX_INPUT_ROUNDS`] times.
    pub(crate) async fn call(
        &self,
        tool: &str,
        server: &str,
        remote_name: &str,
        arguments: JsonObject,
        context: &CallContext,
        token: Option<String>,
    ) -> Result<ToolResult, CallError> {
        let mut params = CallToolRequestParams::new(remote_name.to_owned());
        params.arguments = Some(arguments);
        if self
            .peer
            .peer_info()
            .is_some_and(|info| !info.protocol_version.has_initialize())
        {
            // A 2026 server hears what this call's client can answer.
            let mut meta = rmcp::model::RequestMetaObject::default();
            meta.set_client_capabilities(answerable(context.relay.as_ref()));
            params.meta = Some(meta);
        }
        // Counted across every round of this call.
        let relay = for_one_call(context.relay.as_ref());
        for _ in 0..=MAX_INPUT_ROUNDS {
            // A round is given the timeout once, however it is sent: a
            // server that loses the session late in a direct call leaves
            // rmcp's resend only what is left of it.
            let deadline = tokio::time::Instant::now() + self.timeout;
            let answered =
                if let Some(direct) = self.direct.as_ref().filter(|d| d.serves(remote_name)) {
                    // Boxed: an HTTP round's state is kilobytes, and every
                    // stdio call's future would otherwise be as large.
                    Box::pin(self.call_direct(
                        direct.as_ref(),
                        tool,
                        server,
                        &mut params,
                        context,
                        relay.as_ref(),
                        token.as_deref(),
                    ))
                    .await?
                } else if let Some(direct) = &self.sse_direct {
                    // Boxed for the reason an HTTP round is.
                    Box::pin(self.call_direct(
                        direct,
                        tool,
                        server,
                        &mut params,
                        context,
                        relay.as_ref(),
                        token.as_deref(),
                    ))
                    .await?
                } else {
                    self.call_stdio_direct(tool, server, &mut params, context, relay.as_ref())
                        .await?
                };
            let answered = match answered {
                Some(direct::Answer::Result(result)) => return Ok(result),
                Some(direct::Answer::Other(answer)) => Some(*answer),
                // The session expired unseen: rmcp opens a new one.
                Some(direct::Answer::Unserved) | None => None,
            };
            let answer = match answered {
                Some(answer) => answer,
                // Boxed, like the input rounds below: the direct path is the
                // common one, and rmcp's path and the rounds would otherwise
                // make every call's future as large as theirs (it is moved
                // into boxes and tasks whole).
                None => {
                    Box::pin(self.call_once(
                        tool,
                        server,
                        params.clone(),
                        context,
                        relay.as_ref(),
                        token.clone(),
                        deadline,
                    ))
                    .await?
                }
            };
            let required = match answer {
                ServerResult::CallToolResult(result) => {
                    return tool_result(result).map_err(|e| CallError::Transport {
                        server: server.to_owned(),
                        reason: format!("unreadable tool result: {e}"),
                    });
                }
                // A result with no content at all arrives as an empty result.
                ServerResult::EmptyResult(_) => return Ok(ToolResult::default()),
                ServerResult::InputRequiredResult(required) => required,
                _ => {
                    return Err(CallError::Transport {
                        server: server.to_owned(),
                        reason: "the server answered tools/call with another kind of result"
                            .to_owned(),
                    });
                }
            };
            let requests = required.input_requests.unwrap_or_default();
            let answers = tokio::select! {
                answers = Box::pin(answer_inputs(relay.as_ref(), requests, &context.cancel)) => answers,
                _ = context.cancel.cancelled() => {
                    return Err(CallError::Cancelled { tool: tool.to_owned() });
                }
            };
            params.input_responses = Some(answers.map_err(|e| CallError::Protocol {
                server: server.to_owned(),
                message: format!("it needs input the caller could not give: {}", e.message),
            })?);
            params.request_state = required.request_state;
        }
        Err(CallError::Transport {
            server: server.to_owned(),
            reason: format!("the server still asked for input after {MAX_INPUT_ROUNDS} rounds"),
        })
    }

    /// One round of `tools/call`: sent with the call's credential, relay
    /// slot (for `relay`, the call's client) and progress route, cancelled
    /// when the caller cancels; it times out at `deadline`.
    #[allow(clippy::too_many_arguments)]
    async fn call_once(
        &self,
        tool: &str,
        server: &str,
        params: CallToolRequestParams,
        context: &CallContext,
        relay: Option<&Arc<dyn ClientRelay>>,
        token: Option<String>,
        deadline: tokio::time::Instant,
    ) -> Result<ServerResult, CallError> {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(CallError::Timeout {
                tool: tool.to_owned(),
                timeout_ms: self.timeout.as_millis(),
            });
        }
        let mut options = PeerRequestOptions::with_timeout(left);
        // rmcp stamps its own `_meta` and then this over it.
        options.meta = params.meta.clone();
        let mut request = CallToolRequest::new(params);
        if let Some(token) = token {
            request.extensions.insert(CallCredential(token));
        }
        // Opened before the request is sent, so a server that asks the
        // client something at once finds the call (see `relay`).
        let slot = self.handler.relays.open(relay.cloned());
        let handle = self
            .peer
            .send_request_with_option(ClientRequest::CallToolRequest(request), options)
            .await
            .map_err(|e| self.service_error(tool, server, e))?;
        let id = handle.id.clone();
        slot.bind(id.clone());
        let _route = context.progress.as_ref().map(|sink| {
            self.handler
                .route(handle.progress_token.clone(), sink.clone())
        });
        let answer = tokio::select! {
            answer = handle.await_response() => answer,
            _ = context.cancel.cancelled() => {
                // The server hears `notifications/cancelled` (stdio, legacy
                // HTTP, SSE); on 2026 HTTP rmcp closes the request's stream,
                // which is that revision's cancellation signal.
                let reason = Some("cancelled by the caller".to_owned());
                let _ = self.peer.notify_cancelled(CancelledNotificationParam::new(Some(id), reason)).await;
                return Err(CallError::Cancelled { tool: tool.to_owned() });
            }
        };
        note_refusal(relay, &answer);
        // The caller hears the round's timeout, not what was left of it.
        let answer = answer.map_err(|e| match e {
            ServiceError::Timeout { .. } => ServiceError::Timeout {
                timeout: self.timeout,
            },
            other => other,
        });
        answer.map_err(|e| self.service_error(tool, server, e))
    }

    /// One round of `tools/call` on the direct path: the same timeout,
    /// cancellation and error mapping as [`Connection::call_once`]. A
    /// 2026 server hears the cancellation as its request's closed stream;
    /// an initialize-era one as `notifications/cancelled`, on timeouts
    /// too. Server requests that arrive unrelated to any call see this one
    /// in flight (its relay slot), as rmcp's path does.
    #[allow(clippy::too_many_arguments)]
    async fn call_direct(
        &self,
        direct: &impl direct::DirectRoute,
        tool: &str,
        server: &str,
        params: &mut CallToolRequestParams,
        context: &CallContext,
        relay: Option<&Arc<dyn ClientRelay>>,
        token: Option<&str>,
    ) -> Result<Option<direct::Answer>, CallError> {
        let id = direct.next_id();
        let _slot = direct.relays_through_handler().then(|| {
            let slot = self.handler.relays.open(relay.cloned());
            slot.bind(rmcp::model::RequestId::Number(id as i64));
            slot
        });
        // The call's progress token is its id: rmcp numbers its own from 0.
        let progress = context
            .progress
            .as_ref()
            .map(|_| ProgressToken(rmcp::model::NumberOrString::Number(id as i64)));
        let _route = progress
            .clone()
            .zip(context.progress.clone())
            .map(|(token, sink)| self.handler.route(token, sink));
        let round = direct::Round {
            id,
            token,
            handler: &self.handler,
            relay,
            progress,
        };
        let round = tokio::time::timeout(self.timeout, direct.call(params, round));
        let answer = tokio::select! {
            answer = round => answer.unwrap_or_else(|_| {
                direct.cancel(id, "timed out", token);
                Err(ServiceError::Timeout { timeout: self.timeout })
            }),
            _ = context.cancel.cancelled() => {
                direct.cancel(id, "cancelled by the caller", token);
                return Err(CallError::Cancelled { tool: tool.to_owned() });
            }
        };
        note_refusal(context.relay.as_ref(), &answer);
        answer
            .map(Some)
            .map_err(|e| self.service_error(tool, server, e))
    }

    /// One round on a stdio server's direct path, if it has one; `None`
    /// sends the round through rmcp.
    #[cfg(feature = "stdio")]
    async fn call_stdio_direct(
        &self,
        tool: &str,
        server: &str,
        params: &mut CallToolRequestParams,
        context: &CallContext,
        relay: Option<&Arc<dyn ClientRelay>>,
    ) -> Result<Option<direct::Answer>, CallError> {
        match &self.stdio_direct {
            Some(direct) => {
                self.call_direct(direct, tool, server, params, context, relay, None)
                    .await
            }
            None => Ok(None),
        }
    }

    #[cfg(not(feature = "stdio"))]
    async fn call_stdio_direct(
        &self,
        _tool: &str,
        _server: &str,
        _params: &mut CallToolRequestParams,
        _context: &CallContext,
        _relay: Option<&Arc<dyn ClientRelay>>,
    ) -> Result<Option<direct::Answer>, CallError> {
        Ok(None)
    }

    fn service_error(&self, tool: &str, server: &str, error: ServiceError) -> CallError {
        if let Some(status) = self
            .health
            .rejected()
            .or_else(|| self.health.take_rejected_once())
        {
            return match status {
                403 => CallError::Forbidden {
                    server: server.to_owned(),
                },
                _ => CallError::Unauthorized {
                    server: server.to_owned(),
                },
            };
        }
        match error {
            ServiceError::Timeout { timeout } => CallError::Timeout {
                tool: tool.to_owned(),
                timeout_ms: timeout.as_millis(),
            },
            ServiceError::McpError(data) => CallError::Protocol {
                server: server.to_owned(),
                message: data.message.to_string(),
            },
            ServiceError::Cancelled { .. } => CallError::Cancelled {
                tool: tool.to_owned(),
            },
            // rmcp drops every pending request when its service loop ends:
            // the connection is gone under the call, which is never sent
            // again (its effect is unknown).
            ServiceError::TransportClosed => {
                self.health.mark_unavailable();
                self.health.set_reachable(false);
                let _ = self.health.take_failure();
                CallError::ConnectionLost {
                    tool: tool.to_owned(),
                    server: server.to_owned(),
                }
            }
            other => {
                if self.peer.is_transport_closed() {
                    self.health.mark_unavailable();
                }
                // The server did not answer: down until it does again.
                self.health.set_reachable(false);
                let reason = self.health.take_failure().unwrap_or_else(|| match &other {
                    ServiceError::TransportSend(error) => root_cause(error.error.as_ref()),
                    other => other.to_string(),
                });
                CallError::Transport {
                    server: server.to_owned(),
                    reason: urls_in_text(&reason).into_owned(),
                }
            }
        }
    }

    /// Ends the connection (and the child process) for good: no supervisor
    /// reopens it. Idempotent.
    pub(crate) async fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.health.set_supervised(false);
        self.shut().await;
    }

    /// Ends the connection's tasks and the rmcp service, without saying
    /// the end was asked for: a supervisor tidies up a connection that
    /// ended on its own with this and reopens the server. Idempotent.
    pub(crate) async fn shut(&self) {
        self.health.mark_unavailable();
        self.stop.cancel();
        let subscription = self.subscription.lock().await.take();
        if let Some(task) = subscription {
            let _ = tokio::time::timeout(CLOSE_GRACE, task).await;
        }
        self.listens.close();
        let _ = tokio::time::timeout(CLOSE_GRACE, self.listens.wait()).await;
        let client = self.client.lock().await.take();
        if let Some(mut client) = client {
            let _ = client.close_with_timeout(CLOSE_GRACE).await;
        }
    }
}

impl Connection {
    /// Sends an MCP `ping` and records whether the server answered within
    /// `limit`. Any answer counts, an error included (a server that says
    /// it does not know `ping` is still there).
    pub(crate) async fn ping(&self, limit: Duration) -> bool {
        if !self.is_available() {
            return false;
        }
        let options = PeerRequestOptions::with_timeout(limit.min(self.request_timeout()));
        let ping = rmcp::model::ClientRequest::PingRequest(rmcp::model::PingRequest {
            method: Default::default(),
            extensions: Default::default(),
        });
        let answered = match self.peer().send_request_with_option(ping, options).await {
            Ok(handle) => match handle.await_response().await {
                Ok(_) | Err(ServiceError::McpError(_)) => true,
                Err(_) => false,
            },
            Err(ServiceError::McpError(_)) => true,
            Err(_) => false,
        };
        // The failure text the transport recorded belongs to no call.
        if !answered {
            let _ = self.health().take_failure();
        }
        self.health().set_reachable(answered);
        answered && self.is_available()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The one-step conversion gives exactly what the whole result written
    /// as JSON and read back gave (the path it replaced).
    #[test]
    fn tool_results_convert_as_their_json_would() {
        let answers = [
            json!({"content": [{"type": "text", "text": "hi"}]}),
            json!({"content": [{"type": "text", "text": "x", "annotations": {"priority": 0.5}}],
                   "isError": true}),
            json!({"content": [], "isError": false, "structuredContent": null}),
            json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}],
                   "structuredContent": {"n": 1, "list": [1, "two", null]},
                   "_meta": {"k": "v"}}),
            json!({"content": [{"type": "resource",
                                "resource": {"uri": "file:///a", "text": "t"}}],
                   "resultType": "complete"}),
            json!({"structuredContent": [1, 2]}),
        ];
        for answer in answers {
            let result: CallToolResult = serde_json::from_value(answer.clone()).unwrap();
            let through_json = serde_json::to_value(&result)
                .and_then(serde_json::from_value::<ToolResult>)
                .unwrap();
            assert_eq!(tool_result(result).unwrap(), through_json, "{answer}");
        }
    }
}
