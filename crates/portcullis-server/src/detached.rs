//! A call run by the request that made it, and handed to a task of its own
//! only if it is let go unfinished.
//!
//! A session call outlives its request: on rmcp's path every request runs
//! on a task of its own, so a call goes on when its client's connection
//! drops or its answer turns into a stream the client may resume. Spawning
//! every call costs a task and a hand-off from that task back to the
//! connection's for every answer, though nearly every call is answered
//! while its request still waits. So the request runs the call itself
//! ([`Detached::run`]); whatever is left of it when the request stops
//! waiting ([`Detached::detach`]) or is dropped goes on to its end on a
//! task of its own.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use futures::FutureExt;

/// A call that runs where it is awaited until it is let go (see the
/// module docs).
pub(crate) struct Detached {
    call: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl Detached {
    /// `call`, not started yet.
    pub(crate) fn new(call: impl Future<Output = ()> + Send + 'static) -> Self {
        // A call that panics ends there, as a task of its own would, not
        // the connection's task that runs it.
        let call = AssertUnwindSafe(call).catch_unwind().map(|ended| {
            if ended.is_err() {
                tracing::error!("a tool call panicked");
            }
        });
        Detached {
            call: Some(Box::pin(call)),
        }
    }

    /// Runs the call here until it ends. Dropping this future leaves the
    /// call where it got to; it goes on when run again or let go.
    pub(crate) async fn run(&mut self) {
        if let Some(call) = self.call.as_mut() {
            call.await;
            self.call = None;
        }
    }

    /// Hands what is left of the call, if anything, to a task of its own.
    pub(crate) fn detach(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        // Without a runtime (it is shutting down) the call is dropped, as
        // its task would be.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(call);
        }
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        self.detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn a_call_let_go_unfinished_runs_to_its_end_on_its_own() {
        let (go, wait) = oneshot::channel::<()>();
        let ended = Arc::new(AtomicBool::new(false));
        let seen = ended.clone();
        let mut call = Detached::new(async move {
            let _ = wait.await;
            seen.store(true, Ordering::SeqCst);
        });
        // Run a little here, then dropped mid-await (the request went away).
        let _ = tokio::time::timeout(std::time::Duration::from_millis(20), call.run()).await;
        drop(call);
        go.send(()).unwrap();
        for _ in 0..100 {
            if ended.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the call was dropped with its request");
    }

    #[tokio::test]
    async fn a_call_that_panics_ends_alone() {
        let mut call = Detached::new(async { panic!("boom") });
        call.run().await;
        assert!(call.call.is_none());
    }
}
