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
use tokio::task::JoinHandle;

/// A call that runs where it is awaited until it is let go (see the
/// module docs). `T` is what the call gives back when it ends.
pub(crate) struct Detached<T: Send + 'static> {
    /// Gives `None` if the call panicked.
    call: Option<Pin<Box<dyn Future<Output = Option<T>> + Send>>>,
}

impl<T: Send + 'static> Detached<T> {
    /// `call`, not started yet.
    pub(crate) fn new(call: impl Future<Output = T> + Send + 'static) -> Self {
        // A call that panics ends there, as a task of its own would, not
        // the connection's task that runs it.
        let call = AssertUnwindSafe(call)
            .catch_unwind()
            .map(|ended| match ended {
                Ok(output) => Some(output),
                Err(_) => {
                    tracing::error!("a tool call panicked");
                    None
                }
            });
        Detached {
            call: Some(Box::pin(call)),
        }
    }

    /// Runs the call here until it ends, and gives back what it gave
    /// (`None` if it panicked, or if it had already ended or been let
    /// go). Dropping this future leaves the call where it got to; it goes
    /// on when run again or let go.
    pub(crate) async fn run(&mut self) -> Option<T> {
        let call = self.call.as_mut()?;
        let output = call.await;
        self.call = None;
        output
    }

    /// Hands what is left of the call, if anything, to a task of its own,
    /// whose handle gives back what the call gives.
    pub(crate) fn detach(&mut self) -> Option<JoinHandle<Option<T>>> {
        let call = self.call.take()?;
        // Without a runtime (it is shutting down) the call is dropped, as
        // its task would be.
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        Some(runtime.spawn(call))
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // Spawned for its effects; nobody waits for what it gives.
            runtime.spawn(call.map(drop));
        }
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
    async fn a_call_gives_back_its_output_run_here_or_let_go() {
        let mut here = Detached::new(async { 7 });
        assert_eq!(here.run().await, Some(7));
        assert!(
            here.detach().is_none(),
            "an ended call has nothing to let go"
        );

        let (go, wait) = oneshot::channel::<u8>();
        let mut there = Detached::new(async move { wait.await.unwrap_or(0) });
        let _ = tokio::time::timeout(std::time::Duration::from_millis(20), there.run()).await;
        let task = there.detach().expect("an unfinished call is let go");
        go.send(9).unwrap();
        assert_eq!(task.await.unwrap(), Some(9));
    }

    #[tokio::test]
    async fn a_call_that_panics_ends_alone() {
        let mut call = Detached::new(async { panic!("boom") });
        assert!(call.run().await.is_none());
        assert!(call.call.is_none());
    }
}
