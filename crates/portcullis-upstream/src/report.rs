//! Where diagnostics go: a shared list every part of a toolset appends to,
//! plus the caller's optional callback.
//!
//! Diagnostics arrive from concurrent connects and, later, from calls (a
//! redirect that withheld headers happens on whichever request met it), so
//! the sink is shared and append-only.

use std::sync::{Arc, Mutex, PoisonError};

use portcullis_catalog::Diagnostic;

/// A callback that sees each diagnostic as it is reported.
pub type DiagnosticCallback = Arc<dyn Fn(&Diagnostic) + Send + Sync>;

/// A shared, append-only list of diagnostics.
#[derive(Clone, Default)]
pub(crate) struct DiagnosticSink {
    list: Arc<Mutex<Vec<Diagnostic>>>,
    callback: Option<DiagnosticCallback>,
}

impl DiagnosticSink {
    pub(crate) fn new(callback: Option<DiagnosticCallback>) -> Self {
        DiagnosticSink {
            list: Arc::default(),
            callback,
        }
    }

    /// Records `diagnostic` and hands it to the callback.
    pub(crate) fn report(&self, diagnostic: Diagnostic) {
        tracing::debug!(rule = %diagnostic.rule, origin = %diagnostic.origin, "{}", diagnostic.message);
        if let Some(callback) = &self.callback {
            callback(&diagnostic);
        }
        // A poisoned lock only means another reporter panicked mid-push; the
        // list itself is still a valid Vec.
        self.list
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(diagnostic);
    }

    /// Everything reported so far, in order.
    pub(crate) fn snapshot(&self) -> Vec<Diagnostic> {
        self.list
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl std::fmt::Debug for DiagnosticSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiagnosticSink")
            .field("count", &self.snapshot().len())
            .finish()
    }
}
