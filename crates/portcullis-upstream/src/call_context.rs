//! What one call carries besides its name and arguments: the caller's
//! session, cancellation, progress sink, relay and idempotency key.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::progress::Progress;
use crate::relay::ClientRelay;

/// What one call carries besides its name and arguments.
#[derive(Clone, Default)]
pub struct CallContext {
    /// The caller's session; required when the toolset has `auth`.
    pub session: Option<String>,
    /// Cancels the call; the server is told.
    pub cancel: CancellationToken,
    /// Receives the server's progress notifications for this call.
    pub progress: Option<mpsc::UnboundedSender<Progress>>,
    /// A person approved this call (the policy answered `ask` earlier).
    pub approved: bool,
    /// The client that made the call, to answer the server's sampling,
    /// elicitation and roots requests (see [`crate::relay`]). Without one,
    /// such requests are refused with an error.
    pub relay: Option<Arc<dyn ClientRelay>>,
    /// The caller's idempotency key: with a store, a call repeated under
    /// the same key (and arguments) replays the recorded outcome instead of
    /// reaching the server again (see `crate::effects`).
    pub idempotency_key: Option<String>,
}

impl CallContext {
    /// A context for `session`.
    pub fn for_session(session: impl Into<String>) -> Self {
        CallContext {
            session: Some(session.into()),
            ..Default::default()
        }
    }

    /// Sets the cancellation token.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Sets the progress sink.
    pub fn with_progress(mut self, progress: mpsc::UnboundedSender<Progress>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Sets the client that answers the server's requests during the call.
    pub fn with_relay(mut self, relay: Arc<dyn ClientRelay>) -> Self {
        self.relay = Some(relay);
        self
    }

    /// Marks the call as approved by a person.
    pub fn approved(mut self) -> Self {
        self.approved = true;
        self
    }

    /// Sets the idempotency key.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

impl std::fmt::Debug for CallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("session", &self.session)
            .field("cancelled", &self.cancel.is_cancelled())
            .field("progress", &self.progress.is_some())
            .field("approved", &self.approved)
            .field("relay", &self.relay.is_some())
            .field("idempotency_key", &self.idempotency_key.is_some())
            .finish()
    }
}
