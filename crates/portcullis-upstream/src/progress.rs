//! Progress: the client handler that routes a server's
//! `notifications/progress` to the caller waiting on that request (and
//! passes on `notifications/tools/list_changed`).
//!
//! rmcp stamps every outgoing request with its own progress token, so the
//! route is keyed by the token the request handle reports, registered right
//! after the request is sent and removed when the call ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProgressToken,
    ProtocolVersion,
};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::{Notify, mpsc};

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

type Routes = Arc<Mutex<HashMap<ProgressToken, mpsc::UnboundedSender<Progress>>>>;

/// The client side of every upstream connection.
#[derive(Clone, Default)]
pub(crate) struct UpstreamHandler {
    routes: Routes,
    /// Signalled when a handshake-era server says its tool list changed.
    pub(crate) tools_changed: Arc<Notify>,
}

impl UpstreamHandler {
    /// Sends `token`'s progress to `sink` until the returned guard drops.
    pub(crate) fn route(
        &self,
        token: ProgressToken,
        sink: mpsc::UnboundedSender<Progress>,
    ) -> RouteGuard {
        self.routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.clone(), sink);
        RouteGuard {
            routes: self.routes.clone(),
            token,
        }
    }
}

/// Removes a progress route when the call ends, however it ends.
pub(crate) struct RouteGuard {
    routes: Routes,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.token);
    }
}

impl ClientHandler for UpstreamHandler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let sink = self
            .routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&params.progress_token)
            .cloned();
        if let Some(sink) = sink {
            // A caller that stopped listening is not an error.
            let _ = sink.send(Progress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // A permit is kept if the watcher is busy re-listing, so a change
        // during a re-list is not lost.
        self.tools_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        // Servers that still `initialize` get the newest handshake-era
        // version; 2026 servers are reached through `server/discover`.
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("portcullis", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}
