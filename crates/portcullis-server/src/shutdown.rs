//! SIGINT and SIGTERM as one awaitable, registered the moment it is made.
//!
//! Registering inside a spawned task (or on a future's first poll) leaves a
//! window after the server has announced itself in which a signal still has
//! the default disposition and kills the process outright: no drain, no
//! exit code 0, and children and queued audit records lost. Make a
//! [`ShutdownSignal`] before announcing anything, await it later.
//!
//! Also what a call still running when the drain's grace runs out is
//! answered ([`cut_off`]): a JSON-RPC error with its id, so its client
//! learns why instead of seeing its stream end or its connection close.

use bytes::Bytes;
use rmcp::model::{ErrorCode, ErrorData, RequestId, ServerJsonRpcMessage};

/// The JSON-RPC error code of a call cut off by the shutdown: the server's
/// "unavailable" code, the one the connection limit's refusal carries too.
pub const SHUTTING_DOWN_CODE: i32 = -32000;

/// The message of that error (a client may show it to a person).
pub const SHUTTING_DOWN_MESSAGE: &str =
    "Service Unavailable: the server is shutting down; the call was cancelled before it finished";

/// The serialised JSON-RPC error answering call `id` cut off by the
/// shutdown.
pub(crate) fn cut_off(id: &RequestId) -> Bytes {
    let error = ErrorData::new(ErrorCode(SHUTTING_DOWN_CODE), SHUTTING_DOWN_MESSAGE, None);
    let message = ServerJsonRpcMessage::error(error, Some(id.clone()));
    // A fixed message of a string or number id: it always serialises.
    serde_json::to_vec(&message)
        .map(Bytes::from)
        .unwrap_or_default()
}

/// SIGINT or SIGTERM (Ctrl-C where there are no Unix signals).
pub struct ShutdownSignal {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl ShutdownSignal {
    /// Takes over SIGINT and SIGTERM now. Needs a Tokio runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let signal = portcullis_server::ShutdownSignal::register();
    /// // … announce the server, then, in a task: signal.received().await;
    /// # drop(signal);
    /// # }
    /// ```
    pub fn register() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let streams = match (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) {
                (Ok(int), Ok(term)) => Some((int, term)),
                _ => None,
            };
            ShutdownSignal { streams }
        }
        #[cfg(not(unix))]
        {
            ShutdownSignal {}
        }
    }

    /// Resolves when a signal arrives (never, if none can be listened to).
    pub async fn received(self) {
        #[cfg(unix)]
        if let Some((mut int, mut term)) = self.streams {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
