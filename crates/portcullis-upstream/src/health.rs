//! What a connection knows about its server's state: available or not,
//! reachable or not, and the first failure worth telling a person about.
//!
//! The transports record here what they saw (a refused host, a 401) because
//! rmcp wraps transport errors in its own; the connection reads the person-ready
//! message back from here instead of parsing rmcp's text.
//!
//! *Available* and *reachable* are two things. A connection that ended (a
//! stdio child that exited, a transport rmcp closed, credentials refused,
//! the toolset closed) is unavailable for good: calls are refused without
//! being sent (the server itself may come back on a new connection, see
//! below). A remote server (Streamable HTTP, SSE) can also be
//! *unreachable* for a while — its process stopped, the network in between
//! down — while the connection object lives on; rmcp's Streamable HTTP
//! client keeps its worker through failed POSTs (and re-initialises an
//! expired session), so the server can come back. A call that fails at the
//! transport marks it unreachable; a call answered, or any reply to a
//! `ping` (an error reply included), marks it reachable again; and
//! [`Toolset::check_remotes`] pings every remote server so an idle one is
//! seen going down and coming back. [`Toolset::is_up`] joins the two for
//! health reports; calls are still sent to an unreachable server (that is
//! how a recovery is seen between checks).
//!
//! A connection that closed is not the end of its server: its supervisor
//! (`crate::supervisor`) opens a new one with backoff and swaps it in, and
//! meanwhile the closed one says it is *reconnecting*
//! ([`ServerHealth::reconnecting`]), so a call is refused at once with
//! "down and being reconnected" rather than plain "unavailable".

use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// Shared by a connection and its transport.
#[derive(Debug)]
pub(crate) struct ServerHealth {
    server: String,
    available: AtomicBool,
    /// False from a transport failure until the server answers again.
    reachable: AtomicBool,
    /// 401 or 403 once the server rejected our credentials; 0 otherwise.
    rejected: AtomicU16,
    /// 401 or 403 of the last request refused a renewable credential (the
    /// server stays available); 0 otherwise. Taken by the call it failed.
    rejected_once: AtomicU16,
    failure: Mutex<Option<String>>,
    /// A supervisor reopens this connection when it closes
    /// (`crate::supervisor`); cleared when the toolset or a reload closes
    /// it on purpose.
    supervised: AtomicBool,
    /// The supervisor's current attempt to reopen it and when that attempt
    /// starts (`None` before the first one is scheduled).
    retry: Mutex<Option<Retry>>,
}

/// Where a supervisor's reconnecting stands, for the refusal a call gets
/// meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retry {
    /// The attempt about to be made (1 for the first).
    pub(crate) attempt: u32,
    /// When it starts.
    pub(crate) at: Instant,
}

impl ServerHealth {
    pub(crate) fn new(server: impl Into<String>) -> Self {
        ServerHealth {
            server: server.into(),
            available: AtomicBool::new(true),
            reachable: AtomicBool::new(true),
            rejected: AtomicU16::new(0),
            rejected_once: AtomicU16::new(0),
            failure: Mutex::new(None),
            supervised: AtomicBool::new(false),
            retry: Mutex::new(None),
        }
    }

    /// The server's name as configured.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    pub(crate) fn is_available(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    /// Marks the server unavailable for the rest of the toolset's life.
    pub(crate) fn mark_unavailable(&self) {
        self.available.store(false, Ordering::Release);
    }

    /// Says whether a supervisor reopens this connection when it closes.
    pub(crate) fn set_supervised(&self, supervised: bool) {
        self.supervised.store(supervised, Ordering::Release);
    }

    /// Records the supervisor's next attempt.
    pub(crate) fn set_retry(&self, retry: Retry) {
        *self.retry.lock().unwrap_or_else(PoisonError::into_inner) = Some(retry);
    }

    /// `Some` while the connection is closed and its supervisor is
    /// reopening it: the next attempt, if one is scheduled yet.
    pub(crate) fn reconnecting(&self) -> Option<Option<Retry>> {
        // Refused credentials are not reopened (see `crate::supervisor`).
        if self.is_available()
            || !self.supervised.load(Ordering::Acquire)
            || self.rejected().is_some()
        {
            return None;
        }
        Some(*self.retry.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether the server answered the last request sent to it (see the
    /// module doc).
    pub(crate) fn is_reachable(&self) -> bool {
        self.reachable.load(Ordering::Acquire)
    }

    /// Records whether the server answered; a change is logged once.
    pub(crate) fn set_reachable(&self, reachable: bool) {
        // Read first: the common case (no change) writes nothing, so calls
        // in flight on many cores do not contend for the cache line.
        if self.reachable.load(Ordering::Relaxed) == reachable {
            return;
        }
        if self.reachable.swap(reachable, Ordering::AcqRel) != reachable {
            if reachable {
                tracing::info!(server = %self.server, "upstream reachable again");
            } else {
                tracing::warn!(server = %self.server, "upstream unreachable");
            }
        }
    }

    /// Records a 401/403: the server is unavailable from now on.
    pub(crate) fn reject(&self, status: u16) {
        self.rejected.store(status, Ordering::Release);
        self.record_failure(rejection_message(&self.server, status));
        self.mark_unavailable();
    }

    /// Records a 401/403 to a renewable credential: the request failed,
    /// the server stays available (see `AuthResolver::renewable`).
    pub(crate) fn reject_once(&self, status: u16) {
        self.rejected_once.store(status, Ordering::Release);
    }

    /// The status of a renewable credential's refusal, taken (see
    /// [`ServerHealth::reject_once`]).
    pub(crate) fn take_rejected_once(&self) -> Option<u16> {
        match self.rejected_once.swap(0, Ordering::AcqRel) {
            0 => None,
            status => Some(status),
        }
    }

    /// The HTTP status that rejected us, if any.
    pub(crate) fn rejected(&self) -> Option<u16> {
        match self.rejected.load(Ordering::Acquire) {
            0 => None,
            status => Some(status),
        }
    }

    /// Keeps the first failure message (later ones are usually consequences).
    pub(crate) fn record_failure(&self, message: String) {
        let mut slot = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(message);
        }
    }

    /// Takes the recorded failure, leaving none.
    pub(crate) fn take_failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// The sentence for a 401 or 403.
pub(crate) fn rejection_message(server: &str, status: u16) -> String {
    if status == 403 {
        format!("MCP server \"{server}\" denied access (HTTP 403).")
    } else {
        format!("MCP server \"{server}\" rejected authorization (HTTP {status}).")
    }
}

/// The longest a health check waits for a server's `ping` answer (shorter
/// when the server's own timeout is).
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reachability_is_apart_from_availability() {
        let health = ServerHealth::new("docs");
        assert!(health.is_available() && health.is_reachable());
        // A remote server that stopped answering is down but may come back.
        health.set_reachable(false);
        assert!(!health.is_reachable());
        assert!(health.is_available(), "calls are still sent to it");
        health.set_reachable(true);
        assert!(health.is_reachable());
        // A closed connection stays unavailable whatever answers later.
        health.mark_unavailable();
        health.set_reachable(true);
        assert!(!health.is_available());
    }

    #[test]
    fn rejected_credentials_make_the_server_unavailable() {
        let health = ServerHealth::new("docs");
        health.reject(403);
        assert_eq!(health.rejected(), Some(403));
        assert!(!health.is_available());
        assert_eq!(
            health.take_failure().as_deref(),
            Some("MCP server \"docs\" denied access (HTTP 403).")
        );
    }
}
