//! Where a verifier remembers the nonces it has accepted.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use thiserror::Error;

/// How many nonces a [`MemoryNonceStore`] holds by default: some 160
/// requests a second sustained over the default window (a nonce is
/// remembered for at most twice `max_skew`), in roughly 20 MB.
pub const DEFAULT_NONCE_CAPACITY: usize = 100_000;

/// Why a nonce could not be recorded; the request is refused either way.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NonceStoreError {
    /// A bounded store holds this many nonces, none of them forgettable yet.
    #[error("the nonce store is full ({0} nonces inside their window)")]
    Full(usize),
    /// A shared store could not be reached or answered an error.
    #[error("the nonce store is unavailable: {0}")]
    Unavailable(String),
}

/// The nonces a [`crate::signing::Verifier`] has accepted.
///
/// A request is accepted once: `claim` must record the nonce and answer
/// whether it is new in one atomic step, so that of two requests with one
/// nonce arriving together exactly one wins. Several replicas of one
/// application must share one store (a table with the nonce as its primary
/// key, say, whose rows expire at `until`), since a replay sent to the
/// replica that did not see the original is otherwise accepted there.
///
/// `claim` is called on the verifying thread; a store that waits on the
/// network should keep that wait short.
pub trait NonceStore: Send + Sync {
    /// Records `nonce` until `until` (Unix seconds, inclusive). `Ok(true)`
    /// the first time, `Ok(false)` when it is already recorded. Entries whose
    /// `until` is before `now` may be forgotten: the verifier refuses their
    /// requests as stale by then.
    fn claim(&self, nonce: &str, until: u64, now: u64) -> Result<bool, NonceStoreError>;
}

/// A bounded, in-process [`NonceStore`]: right for one application
/// process; see [`NonceStore`] for several.
///
/// When it holds `capacity` nonces still inside their window, new requests
/// are refused ([`NonceStoreError::Full`]) until some expire: forgetting a
/// live nonce early would let its request be replayed.
#[derive(Debug)]
pub struct MemoryNonceStore {
    capacity: usize,
    inner: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// Nonce → the time it may be forgotten.
    until: HashMap<String, u64>,
    /// The same entries ordered by that time, to forget them cheaply.
    by_expiry: BTreeSet<(u64, String)>,
}

impl Default for MemoryNonceStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryNonceStore {
    /// A store of [`DEFAULT_NONCE_CAPACITY`] nonces.
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_NONCE_CAPACITY)
    }

    /// A store of at most `capacity` nonces.
    pub fn with_capacity(capacity: usize) -> Self {
        MemoryNonceStore {
            capacity,
            inner: Mutex::new(Seen::default()),
        }
    }

    /// How many nonces it holds now (some may be past their time).
    pub fn len(&self) -> usize {
        self.lock().until.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        // A panic elsewhere cannot leave the two maps disagreeing (every
        // change below is made to both before anything can panic), so a
        // poisoned lock is still a good store.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl NonceStore for MemoryNonceStore {
    fn claim(&self, nonce: &str, until: u64, now: u64) -> Result<bool, NonceStoreError> {
        let mut seen = self.lock();
        while let Some((expiry, _)) = seen.by_expiry.first() {
            if *expiry >= now {
                break;
            }
            if let Some((_, old)) = seen.by_expiry.pop_first() {
                seen.until.remove(&old);
            }
        }
        if seen.until.contains_key(nonce) {
            return Ok(false);
        }
        if seen.until.len() >= self.capacity {
            return Err(NonceStoreError::Full(self.capacity));
        }
        seen.until.insert(nonce.to_owned(), until);
        seen.by_expiry.insert((until, nonce.to_owned()));
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_is_claimed_once_until_its_time() {
        let store = MemoryNonceStore::with_capacity(10);
        assert_eq!(store.claim("a", 100, 50), Ok(true));
        assert_eq!(store.claim("a", 100, 60), Ok(false));
        // Still remembered at its last second…
        assert_eq!(store.claim("a", 200, 100), Ok(false));
        // …and forgotten after it.
        assert_eq!(store.claim("b", 300, 101), Ok(true));
        assert_eq!(store.len(), 1);
        assert_eq!(store.claim("a", 300, 101), Ok(true));
    }

    #[test]
    fn a_full_store_refuses_rather_than_forgets() {
        let store = MemoryNonceStore::with_capacity(2);
        assert_eq!(store.claim("a", 100, 0), Ok(true));
        assert_eq!(store.claim("b", 200, 0), Ok(true));
        assert_eq!(store.claim("c", 200, 50), Err(NonceStoreError::Full(2)));
        // A known nonce is still a replay, full or not.
        assert_eq!(store.claim("a", 100, 50), Ok(false));
        // Once "a" is past its time there is room again.
        assert_eq!(store.claim("c", 300, 101), Ok(true));
        assert_eq!(store.claim("a", 300, 101), Err(NonceStoreError::Full(2)));
    }
}
