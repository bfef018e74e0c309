//! Per-item work spread over a few threads, the results kept in order.
//!
//! The catalogue's large projections (thousands of tools, a wake or a cold
//! start of many servers) do most of their work one listing at a time,
//! each listing alone: that work runs on scoped threads, each taking a
//! contiguous run of listings of about equal weight, and the results come
//! back in the order the items went in. Nothing here does I/O or needs a
//! runtime; the caller says how many threads it may use
//! ([`crate::ProjectionOptions::threads`]).
//!
//! Every run gets a thread of its own while the calling thread waits,
//! rather than the caller taking the first run: the work is mostly
//! allocation, and in a profile of a wake's projection on the process's
//! main thread (glibc's allocator) the caller's run took about twice as
//! long as the same share on a fresh thread, so the projection waited on
//! it (`docs/performance-history.md`, "A projection's listings on threads").

use std::sync::{Mutex, PoisonError};
use std::thread::{self, ScopedJoinHandle};

/// Below this much total weight (tools, for a projection) the items are
/// mapped on the calling thread: starting a thread costs tens of
/// microseconds, a small projection less than that per spare thread.
pub(crate) const SPREAD_FROM_WEIGHT: usize = 1_000;

/// `items` mapped through `work`, in order: on the calling thread while
/// their total `weight` is below [`SPREAD_FROM_WEIGHT`] (or `threads` is 0
/// or 1, or they make one run), else on up to `threads` scoped threads,
/// one run each. A run whose thread cannot be started (the system refuses
/// one) is mapped on the calling thread instead. A panic in any run is
/// resumed on the caller.
pub(crate) fn spread<T, U, W, F>(threads: usize, items: Vec<T>, weight: W, work: F) -> Vec<U>
where
    T: Send,
    U: Send,
    W: Fn(&T) -> usize,
    F: Fn(T) -> U + Sync,
{
    let total: usize = items.iter().map(&weight).sum();
    let threads = threads.min(items.len());
    if threads <= 1 || total < SPREAD_FROM_WEIGHT {
        return items.into_iter().map(work).collect();
    }
    let mut runs = split_by_weight(items, &weight, total, threads);
    if runs.len() == 1 {
        return runs
            .pop()
            .unwrap_or_default()
            .into_iter()
            .map(work)
            .collect();
    }
    // Each run waits in a slot its thread empties; a thread that never
    // starts leaves its run there for the caller.
    let slots: Vec<Mutex<Option<Vec<T>>>> = runs.into_iter().map(|r| Mutex::new(Some(r))).collect();
    let take = |slot: &Mutex<Option<Vec<T>>>| {
        slot.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_default()
    };
    thread::scope(|scope| {
        let (work, take) = (&work, &take);
        let started: Vec<_> = slots
            .iter()
            .map(|slot| {
                thread::Builder::new()
                    .name("portcullis-projection".to_owned())
                    .spawn_scoped(scope, move || {
                        take(slot).into_iter().map(work).collect::<Vec<U>>()
                    })
                    .ok()
            })
            .collect();
        let mut out: Vec<U> = Vec::new();
        for (slot, started) in slots.iter().zip(started) {
            match started.map(ScopedJoinHandle::join) {
                Some(Ok(results)) => out.extend(results),
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                None => out.extend(take(slot).into_iter().map(work)),
            }
        }
        out
    })
}

/// `items` cut into at most `runs` contiguous runs of about `total / runs`
/// weight each, in order; none empty.
fn split_by_weight<T>(
    items: Vec<T>,
    weight: &impl Fn(&T) -> usize,
    total: usize,
    runs: usize,
) -> Vec<Vec<T>> {
    let share = total.div_ceil(runs.max(1));
    let mut out: Vec<Vec<T>> = Vec::with_capacity(runs);
    let mut current = Vec::new();
    let mut carried = 0;
    for item in items {
        carried += weight(&item);
        current.push(item);
        if carried >= share && out.len() + 1 < runs {
            out.push(std::mem::take(&mut current));
            carried = 0;
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_whatever_the_thread_count() {
        let items: Vec<usize> = (0..40).collect();
        let serial: Vec<usize> = items.iter().map(|i| i * 3).collect();
        for threads in [0, 1, 2, 3, 8, 64] {
            let spread_out = spread(threads, items.clone(), |_| 100, |i| i * 3);
            assert_eq!(spread_out, serial, "{threads} threads");
        }
    }

    #[test]
    fn runs_are_contiguous_of_about_equal_weight_and_never_empty() {
        let items: Vec<usize> = vec![5, 1, 1, 1, 1, 1, 5, 5];
        let runs = split_by_weight(items.clone(), &|w: &usize| *w, 20, 2);
        assert_eq!(runs, vec![vec![5, 1, 1, 1, 1, 1], vec![5, 5]]);
        let runs = split_by_weight(items.clone(), &|w: &usize| *w, 20, 8);
        assert!(runs.iter().all(|r| !r.is_empty()));
        assert_eq!(runs.concat(), items);
        // One heavy item first: the rest still make a run of their own.
        let runs = split_by_weight(vec![100, 1, 1], &|w: &usize| *w, 102, 2);
        assert_eq!(runs, vec![vec![100], vec![1, 1]]);
    }

    #[test]
    fn work_runs_on_other_threads_only_past_the_weight() {
        let caller = thread::current().id();
        let on = |n: usize, weight: usize| {
            spread(
                2,
                (0..n).collect::<Vec<_>>(),
                |_| weight,
                |_| thread::current().id(),
            )
        };
        assert!(on(4, 10).iter().all(|id| *id == caller));
        let ids = on(4, SPREAD_FROM_WEIGHT);
        assert!(ids.iter().all(|id| *id != caller), "{ids:?}");
        assert_eq!(ids[0], ids[1], "a run stays on its thread");
        assert!(ids[1] != ids[2], "two runs, two threads");
    }

    #[test]
    #[should_panic(expected = "run panicked")]
    fn a_panic_in_another_run_reaches_the_caller() {
        spread(
            2,
            vec![0, 1],
            |_| SPREAD_FROM_WEIGHT,
            |i| {
                if i == 1 {
                    panic!("run panicked");
                }
                i
            },
        );
    }
}
