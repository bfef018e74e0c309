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

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};

use crate::throttle::LogThrottle;

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
    max: Option<usize>,
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
}

type SseStream = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

impl BoundedSessions {
    /// At most `max` sessions (`None`: no cap), each closed after `idle`
    /// without a message (`None`: never).
    pub(crate) fn new(max: Option<usize>, idle: Option<Duration>) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = idle;
        BoundedSessions {
            inner,
            max,
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
                table.sessions.remove(&id);
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
                },
            );
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
        self.lock().sessions.remove(id);
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
        Ok(self.counted(id, stream))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.resume(id, last_event_id).await?;
        Ok(self.counted(id, stream))
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
