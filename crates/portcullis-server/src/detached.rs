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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::FutureExt;
use tokio::task::JoinHandle;

/// A call that runs where it is awaited until it is let go (see the
/// module docs). `T` is what the call gives back when it ends.
pub(crate) struct Detached<T: Send + 'static> {
    /// Gives `None` if the call panicked.
    call: Option<Pin<Box<dyn Future<Output = Option<T>> + Send>>>,
    /// Cleared before the call is let go.
    attached: Arc<AtomicBool>,
}

/// Whether a call is still run by the request that made it: what it
/// publishes then is read by that request as soon as the call returns, so
/// waking a waiter would only wake the request's own task.
#[derive(Debug, Clone)]
pub(crate) struct Attachment(Arc<AtomicBool>);

impl Attachment {
    /// `true` until the call is let go ([`Detached::detach`], or the
    /// request dropped).
    pub(crate) fn is_attached(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl<T: Send + 'static> Detached<T> {
    /// `call`, not started yet.
    pub(crate) fn new(call: impl Future<Output = T> + Send + 'static) -> Self {
        Self::with_attachment(|_| call)
    }

    /// The call `make` builds, which may ask whether it is still run by
    /// its request; not started yet.
    pub(crate) fn with_attachment<F>(make: impl FnOnce(Attachment) -> F) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        let attached = Arc::new(AtomicBool::new(true));
        let call = make(Attachment(attached.clone()));
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
            attached,
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
        self.attached.store(false, Ordering::Release);
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
        self.attached.store(false, Ordering::Release);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // Spawned for its effects; nobody waits for what it gives.
            runtime.spawn(call.map(drop));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    /// A call knows it is run by its request until it is let go, however
    /// it is let go; what it then sees decides whether it wakes a waiter.
    #[tokio::test]
    async fn a_call_is_attached_until_it_is_let_go() {
        for drop_it in [false, true] {
            let (go, wait) = oneshot::channel::<()>();
            let (seen_tx, seen) = oneshot::channel::<(bool, bool)>();
            let mut call = Detached::with_attachment(|attachment| async move {
                let before = attachment.is_attached();
                let _ = wait.await;
                let _ = seen_tx.send((before, attachment.is_attached()));
            });
            let _ = tokio::time::timeout(std::time::Duration::from_millis(20), call.run()).await;
            if drop_it {
                drop(call);
            } else {
                call.detach().expect("an unfinished call is let go");
            }
            go.send(()).unwrap();
            assert_eq!(seen.await.unwrap(), (true, false), "dropped: {drop_it}");
        }
        let mut here =
            Detached::with_attachment(|attachment| async move { attachment.is_attached() });
        assert_eq!(
            here.run().await,
            Some(true),
            "run to its end by its request"
        );
    }

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
