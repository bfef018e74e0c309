//! Per-item work spread over a few threads, for the parts of a wake that
//! are the same work for each server (the projection's share of one
//! server, decoding one stored listing). Plain computation on scoped
//! threads: no I/O, no runtime.

use std::sync::{Mutex, PoisonError};

/// `items` mapped by `f`, in order, split into up to `workers` runs of
/// about equal `weight`, each run on its own thread (the first on the
/// calling one). A thread that cannot be started leaves its run to the
/// calling thread; a panic in one is resumed here.
pub fn map_split<T, R>(
    items: Vec<T>,
    workers: usize,
    weight: impl Fn(&T) -> usize,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R>
where
    T: Send,
    R: Send,
{
    let workers = workers.clamp(1, items.len().max(1));
    if workers == 1 {
        return items.into_iter().map(f).collect();
    }
    // Contiguous runs, cut where the running weight passes each share.
    let total: usize = items.iter().map(&weight).sum();
    let mut runs: Vec<Vec<T>> = (0..workers).map(|_| Vec::new()).collect();
    let mut sum = 0usize;
    for item in items {
        let run = (sum * workers / total.max(1)).min(workers - 1);
        sum += weight(&item);
        runs[run].push(item);
    }
    // Each run waits in a slot its thread takes it from, so a thread that
    // cannot be started leaves it there for the calling thread.
    let slots: Vec<Mutex<Option<Vec<T>>>> = runs.into_iter().map(|r| Mutex::new(Some(r))).collect();
    fn take<T>(slot: &Mutex<Option<Vec<T>>>) -> Vec<T> {
        slot.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_default()
    }
    let f = &f;
    std::thread::scope(|scope| {
        let started: Vec<_> = slots[1..]
            .iter()
            .map(|slot| {
                std::thread::Builder::new()
                    .name("portcullis-split".into())
                    .spawn_scoped(scope, move || {
                        take(slot).into_iter().map(f).collect::<Vec<R>>()
                    })
                    .ok()
            })
            .collect();
        let mut out: Vec<R> = take(&slots[0]).into_iter().map(f).collect();
        for (handle, slot) in started.into_iter().zip(&slots[1..]) {
            match handle.map(|h| h.join()) {
                Some(Ok(mapped)) => out.extend(mapped),
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                None => out.extend(take(slot).into_iter().map(f)),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::map_split;

    #[test]
    fn the_order_and_every_item_are_kept_however_the_work_is_split() {
        let items: Vec<usize> = (0..100).collect();
        let serial: Vec<usize> = items.iter().map(|i| i * 3).collect();
        for workers in [0, 1, 2, 3, 7, 100, 1000] {
            assert_eq!(
                map_split(items.clone(), workers, |&i| i % 7, |i| i * 3),
                serial
            );
            assert_eq!(map_split(items.clone(), workers, |_| 0, |i| i * 3), serial);
        }
        assert_eq!(
            map_split(Vec::<usize>::new(), 4, |_| 1, |i| i),
            Vec::<usize>::new()
        );
    }

    #[test]
    #[should_panic(expected = "item 42")]
    fn a_panic_on_another_thread_reaches_the_caller() {
        map_split(
            (0..100).collect::<Vec<usize>>(),
            4,
            |_| 1,
            |i| {
                assert!(i != 42, "item {i}");
                i
            },
        );
    }
}
