//! What a connection knows about its server's state: available or not, and
//! the first failure worth telling a person about.
//!
//! The transports record here what they saw (a refused host, a 401) because
//! rmcp wraps transport errors in its own; the connection reads the seed's
//! message back from here instead of parsing rmcp's text.

use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};

/// Shared by a connection and its transport.
#[derive(Debug)]
pub(crate) struct ServerHealth {
    server: String,
    available: AtomicBool,
    /// 401 or 403 once the server rejected our credentials; 0 otherwise.
    rejected: AtomicU16,
    failure: Mutex<Option<String>>,
}

impl ServerHealth {
    pub(crate) fn new(server: impl Into<String>) -> Self {
        ServerHealth {
            server: server.into(),
            available: AtomicBool::new(true),
            rejected: AtomicU16::new(0),
            failure: Mutex::new(None),
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

    /// Records a 401/403: the server is unavailable from now on.
    pub(crate) fn reject(&self, status: u16) {
        self.rejected.store(status, Ordering::Release);
        self.record_failure(rejection_message(&self.server, status));
        self.mark_unavailable();
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

/// The seed's sentence for a 401 or 403.
pub(crate) fn rejection_message(server: &str, status: u16) -> String {
    if status == 403 {
        format!("MCP server \"{server}\" denied access (HTTP 403).")
    } else {
        format!("MCP server \"{server}\" rejected authorization (HTTP {status}).")
    }
}
