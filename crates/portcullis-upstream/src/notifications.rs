//! Log messages (`notifications/message`) delivered in the transport, in
//! the order the server sent them.
//!
//! rmcp runs notification handlers on tasks of their own but resolves a
//! response in its receive loop, so a log message a server sent just
//! before a tool's result could be handed on after the call had returned.
//! Progress had the same race and is routed in the transport
//! ([`crate::progress`]); log messages are too: the transport hands each
//! one to the connection's [`LogSink`] and waits until the sink has passed
//! it on before it reads the next message, so every log message sent
//! before a result has been delivered before that result resolves the
//! call.
//!
//! A log message is not tied to one call. rmcp 3.11 does not say which
//! stream a notification arrived on (it marks only server *requests* with
//! their stream), and a server's log is a session-level message in MCP: a
//! sink hands it to every interested client, as before. Without a sink
//! (a toolset no gateway serves) log messages are published as
//! [`Notice::Log`] with the other notices.

// Logging is deprecated by SEP-2577 (2026-07-28), but every 2025-era server
// and client still uses it: it is proxied.
#![allow(deprecated)]

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use futures::future::BoxFuture;
use rmcp::model::{JsonRpcMessage, JsonRpcNotification, LoggingMessageNotificationParam};
use rmcp::model::{ServerJsonRpcMessage, ServerNotification};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

/// How many notices a connection holds for slow receivers.
const NOTICE_CAPACITY: usize = 256;

/// Something a server said without being asked.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Notice {
    /// `notifications/message`.
    Log(LoggingMessageNotificationParam),
    /// `notifications/resources/updated` for this URI (the server's own).
    ResourceUpdated(String),
    /// `notifications/resources/list_changed`.
    ResourcesChanged,
    /// `notifications/prompts/list_changed`.
    PromptsChanged,
}

/// A [`Notice`] and the server (effective name) it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerNotice {
    /// The server's effective name.
    pub server: String,
    /// What it said.
    pub notice: Notice,
}

/// The per-connection end of notices: the client handler publishes on it,
/// it keeps the 2026 listens the passthrough opened, and the sink log
/// messages go to.
#[derive(Clone)]
pub(crate) struct Notices {
    sender: broadcast::Sender<Notice>,
    state: Arc<Mutex<ListenState>>,
    logs: LogRoute,
}

#[derive(Default)]
pub(crate) struct ListenState {
    /// A `subscriptions/listen` for list changes is open (2026 servers).
    pub(crate) lists: bool,
    /// One listen per subscribed URI (2026 servers), by URI.
    pub(crate) uris: HashMap<String, CancellationToken>,
    /// A list-changes listen was asked for, so a reconnect opens it again.
    pub(crate) lists_wanted: bool,
    /// The URIs subscribed to and not unsubscribed (either era), so a
    /// reconnect subscribes them again.
    pub(crate) subscribed: BTreeSet<String>,
}

impl Default for Notices {
    fn default() -> Self {
        Notices {
            sender: broadcast::channel(NOTICE_CAPACITY).0,
            state: Arc::default(),
            logs: LogRoute::default(),
        }
    }
}

impl Notices {
    /// Publishes a notice; nobody listening is not an error.
    pub(crate) fn publish(&self, notice: Notice) {
        let _ = self.sender.send(notice);
    }

    /// A receiver of every notice published from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.sender.subscribe()
    }

    /// Where this connection's log messages go.
    pub(crate) fn logs(&self) -> &LogRoute {
        &self.logs
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, ListenState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Who listens to the toolset's servers through the passthrough: the log
/// sink (`Passthrough::route_logs`) and the receivers of
/// `Passthrough::notices`, so a server that joins the toolset later
/// (`crate::passthrough`) is wired like those connected at the start.
#[derive(Default)]
pub(crate) struct Listeners {
    pub(crate) logs: Option<Arc<dyn LogSink>>,
    pub(crate) notices: Vec<mpsc::UnboundedSender<ServerNotice>>,
}

/// Where an upstream's log messages go as they arrive: the gateway hands
/// them to its downstream sessions.
pub trait LogSink: Send + Sync + 'static {
    /// Passes on one log message of `server` (its effective name). The
    /// connection reads nothing more from the server until this resolves,
    /// so it should only hand the message over, not wait on a slow reader
    /// for long.
    fn log(&self, server: &str, message: LoggingMessageNotificationParam) -> BoxFuture<'_, ()>;
}

/// A sink and the effective name of the server whose messages it gets.
type Named = (String, Arc<dyn LogSink>);

/// The sink of one connection, shared by its transport and
/// [`Passthrough::route_logs`](crate::Passthrough::route_logs).
#[derive(Clone, Default)]
pub(crate) struct LogRoute {
    sink: Arc<RwLock<Option<Named>>>,
}

impl LogRoute {
    /// From now on, hands the connection's log messages to `sink` as
    /// `server`'s.
    pub(crate) fn set(&self, server: &str, sink: Arc<dyn LogSink>) {
        *self.sink.write().unwrap_or_else(PoisonError::into_inner) =
            Some((server.to_owned(), sink));
    }

    fn current(&self) -> Option<Named> {
        self.sink
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Delivers `message` if it is a log message: to the connection's sink
/// (waiting until it is handed over), or else among the notices.
pub(crate) async fn deliver(notices: &Notices, message: &ServerJsonRpcMessage) {
    let JsonRpcMessage::Notification(JsonRpcNotification {
        notification: ServerNotification::LoggingMessageNotification(log),
        ..
    }) = message
    else {
        return;
    };
    deliver_log(notices, log.params.clone()).await;
}

/// Hands one log message to the connection's sink, or publishes it.
pub(crate) async fn deliver_log(notices: &Notices, params: LoggingMessageNotificationParam) {
    match notices.logs().current() {
        Some((server, sink)) => sink.log(&server, params).await,
        None => notices.publish(Notice::Log(params)),
    }
}
