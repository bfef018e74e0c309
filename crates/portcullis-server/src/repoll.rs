//! A connection's wake-ups of its own task while it is being polled,
//! turned into an immediate second poll.
//!
//! tokio treats a task that is woken while it runs as yielding: after the
//! poll it goes to the back of a run queue and another worker is woken to
//! share the work (a `futex` call, and a worker that wakes to find nothing
//! to do). A served request wakes its own connection's task this way:
//! hyper's request body channel signals the connection when the service
//! reads the body, from inside the same poll. [`Repoll`] gives the future
//! it polls a waker of its own: a wake-up that arrives while that future is
//! being polled (from any thread) only marks it to be polled again, which
//! [`Repoll::poll`] does at once; one that arrives between polls wakes the
//! task as usual. A future that keeps waking itself still yields after
//! [`MAX_REPOLLS`] polls, and at once when the task's cooperative budget is
//! spent (then the wake-up is the runtime's request to yield).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Polls in a row for a future that keeps waking itself, before it is
/// left to the runtime's queue like any other task that yields.
const MAX_REPOLLS: usize = 4;

/// The future is being polled.
const POLLING: u8 = 1;
/// It was woken while being polled.
const WOKEN: u8 = 2;

/// Polls one future of a task (see the module docs).
pub(crate) struct Repoll {
    shared: Arc<Shared>,
    /// The waker the polled future sees: `shared`'s.
    waker: Waker,
}

struct Shared {
    state: AtomicU8,
    /// The task's own waker, for a wake-up between polls.
    task: AtomicWaker,
}

impl Repoll {
    /// A poller for one future (one per connection).
    pub(crate) fn new() -> Self {
        let shared = Arc::new(Shared {
            state: AtomicU8::new(0),
            task: AtomicWaker::new(),
        });
        Repoll {
            waker: Waker::from(shared.clone()),
            shared,
        }
    }

    /// Polls with `poll`, again at once if it woke the task during the
    /// poll (see the module docs).
    pub(crate) fn poll<T>(
        &self,
        cx: &mut Context<'_>,
        mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        self.shared.task.register(cx.waker());
        let mut inner = Context::from_waker(&self.waker);
        for _ in 0..MAX_REPOLLS {
            self.shared.state.store(POLLING, Ordering::SeqCst);
            let polled = poll(&mut inner);
            let woken = self.shared.state.swap(0, Ordering::SeqCst) & WOKEN != 0;
            if polled.is_ready() || !woken {
                return polled;
            }
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        // Woken during its last poll: the task runs again, after the others
        // queued.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // During a poll the poller sees the mark when the poll returns; the
        // mark and the poll's end are ordered on `state`, so a wake-up is
        // either marked before the poller looks or wakes the task after.
        let marked = self
            .state
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |state| {
                (state & POLLING != 0).then_some(state | WOKEN)
            })
            .is_ok();
        if !marked {
            self.task.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Counts the wake-ups the task itself receives.
    #[derive(Default)]
    struct Task {
        woken: AtomicUsize,
    }

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.woken.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A task, its waker, and a poller for one of its futures.
    fn setup() -> (Arc<Task>, Waker, Repoll) {
        let task = Arc::new(Task::default());
        (task.clone(), Waker::from(task), Repoll::new())
    }

    #[test]
    fn a_wake_during_the_poll_is_a_second_poll_and_one_after_it_wakes_the_task() {
        let (task, waker, repoll) = setup();
        let mut cx = Context::from_waker(&waker);
        let mut kept: Option<Waker> = None;
        let mut polls = 0;
        // Woken by itself in its first poll, pending in its second.
        let polled: Poll<()> = repoll.poll(&mut cx, |cx| {
            polls += 1;
            if polls == 1 {
                cx.waker().wake_by_ref();
            }
            kept = Some(cx.waker().clone());
            Poll::Pending
        });
        assert!(polled.is_pending());
        assert_eq!(polls, 2);
        assert_eq!(task.woken.load(Ordering::SeqCst), 0);
        // Woken later (a socket ready, say): the task is.
        kept.take().unwrap().wake();
        assert_eq!(task.woken.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_still_yields() {
        let (task, waker, repoll) = setup();
        let mut cx = Context::from_waker(&waker);
        let mut polls = 0;
        let polled: Poll<()> = repoll.poll(&mut cx, |cx| {
            polls += 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        });
        assert!(polled.is_pending());
        assert_eq!(polls, MAX_REPOLLS);
        assert_eq!(task.woken.load(Ordering::SeqCst), 1, "the wake-up was lost");
    }

    #[test]
    fn a_wake_from_another_thread_during_the_poll_is_not_lost() {
        let (task, waker, repoll) = setup();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..200 {
            task.woken.store(0, Ordering::SeqCst);
            let mut polls = 0;
            let mut other = None;
            let polled: Poll<()> = repoll.poll(&mut cx, |cx| {
                polls += 1;
                if polls == 1 {
                    let waker = cx.waker().clone();
                    other = Some(std::thread::spawn(move || waker.wake()));
                }
                Poll::Pending
            });
            assert!(polled.is_pending());
            other.take().unwrap().join().unwrap();
            // Marked during a poll (polled again), or else the task woken.
            let woken = task.woken.load(Ordering::SeqCst);
            assert!(
                polls > 1 || woken == 1,
                "lost: {polls} polls, {woken} wake-ups"
            );
        }
    }
}
