//! One read's rows decoded as they arrive: [`Decoding`].
//!
//! Decoding the cached listings is most of a large read, and each row
//! decodes alone, so a read hands each row to [`Decoding::take`] as the
//! database gives it over: decoded on the reading task, and past
//! [`PARALLEL_DECODE_BYTES`] of text also on one blocking thread, whichever
//! side has been given less text. [`Decoding::finish`] gives them back in
//! the order read.

use std::sync::mpsc::Sender;

use tokio::task::JoinHandle;

use crate::row::PersistedServer;

/// The cached listings' text in one read past which rows are also decoded
/// on another thread: well above a handful of small servers, for which a
/// thread would cost more than it saves.
pub(crate) const PARALLEL_DECODE_BYTES: usize = 512 * 1024;

/// A decoded row, with its place in the read.
type Placed = (usize, PersistedServer);

/// How a row is decoded: `None` for a row skipped (logged by the decoder),
/// an error for one that cannot be read at all.
pub(crate) type DecodeRow<R> = fn(&R) -> Result<Option<PersistedServer>, sqlx::Error>;

/// The blocking thread decoding part of a read: its queue of rows and its
/// result.
struct Helper<R> {
    queue: Sender<(usize, R)>,
    decoded: JoinHandle<Result<Vec<Placed>, sqlx::Error>>,
}

impl<R: Send + 'static> Helper<R> {
    /// A thread decoding the rows queued to it until the queue closes, or
    /// until a row it cannot read (its error is then its result).
    fn start(decode: DecodeRow<R>) -> Self {
        let (queue, rows) = std::sync::mpsc::channel::<(usize, R)>();
        let decoded = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for (at, row) in rows {
                out.extend(decode(&row)?.map(|server| (at, server)));
            }
            Ok(out)
        });
        Helper { queue, decoded }
    }
}

/// The rows of one read being decoded as they arrive: on the reading task,
/// and once [`PARALLEL_DECODE_BYTES`] of text have arrived, also on one
/// blocking thread, each row going to whichever side has been given less
/// text. The rows come back in the order they were read.
pub(crate) struct Decoding<R> {
    /// A row's listing text length, which the two sides are balanced by.
    len: fn(&R) -> usize,
    decode: DecodeRow<R>,
    here: Vec<Placed>,
    /// Started with the first row it is given.
    there: Option<Helper<R>>,
    bytes_here: usize,
    bytes_there: usize,
    next: usize,
    /// The thread stopped on a row it could not read.
    halted: bool,
}

impl<R: Send + 'static> Decoding<R> {
    /// A read whose rows are measured by `len` and decoded by `decode`.
    pub(crate) fn new(len: fn(&R) -> usize, decode: DecodeRow<R>) -> Self {
        Decoding {
            len,
            decode,
            here: Vec::new(),
            there: None,
            bytes_here: 0,
            bytes_there: 0,
            next: 0,
            halted: false,
        }
    }

    /// Decodes `row` here, or hands it to the blocking thread once the text
    /// taken passes the threshold and the thread has been given less than
    /// this side. `Ok(false)` when the thread has stopped on a row it could
    /// not read: take no more rows, [`Decoding::finish`] reports its error.
    pub(crate) fn take(&mut self, row: R) -> Result<bool, sqlx::Error> {
        let at = self.next;
        self.next += 1;
        let size = (self.len)(&row);
        let past = self.bytes_here + self.bytes_there + size >= PARALLEL_DECODE_BYTES;
        if past && self.bytes_there < self.bytes_here {
            let decode = self.decode;
            let helper = self.there.get_or_insert_with(|| Helper::start(decode));
            if helper.queue.send((at, row)).is_err() {
                self.halted = true;
                return Ok(false);
            }
            self.bytes_there += size;
            return Ok(true);
        }
        self.bytes_here += size;
        self.here
            .extend((self.decode)(&row)?.map(|server| (at, server)));
        Ok(true)
    }

    /// Every row taken, decoded, in the order read.
    pub(crate) async fn finish(mut self) -> Result<Vec<PersistedServer>, sqlx::Error> {
        if let Some(Helper { queue, decoded }) = self.there.take() {
            drop(queue);
            match decoded.await {
                // A thread that halted ended on an error; were it ever to
                // end well, the row it refused would be missing: an error
                // too, never a short read.
                Ok(Ok(_)) if self.halted => return Err(sqlx::Error::WorkerCrashed),
                Ok(there) => self.here.extend(there?),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // The runtime is shutting down.
                Err(_) => return Err(sqlx::Error::WorkerCrashed),
            }
        }
        self.here.sort_unstable_by_key(|(at, _)| *at);
        Ok(self.here.into_iter().map(|(_, server)| server).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::{Decoding, PARALLEL_DECODE_BYTES};
    use crate::row::PersistedServer;
    use portcullis_catalog::ServerIdentity;

    /// A row for `Decoding`: its server's name and its text's length. A
    /// name of `None` is a row whose columns cannot be read, `""` one that
    /// is skipped, `"!"` one that must never be decoded.
    struct FakeRow {
        name: Option<String>,
        len: usize,
    }

    fn fake(name: &str, len: usize) -> FakeRow {
        FakeRow {
            name: Some(name.to_owned()),
            len,
        }
    }

    fn len(row: &FakeRow) -> usize {
        row.len
    }

    fn decode(row: &FakeRow) -> Result<Option<PersistedServer>, sqlx::Error> {
        match row.name.as_deref() {
            None => Err(sqlx::Error::RowNotFound),
            Some("") => Ok(None),
            Some("!") => panic!("a row taken after the thread stopped was decoded"),
            Some(name) => Ok(Some(PersistedServer::new(
                name,
                &ServerIdentity::stdio(name, "echo", &[]),
            ))),
        }
    }

    /// The names read back, whether a thread was started, and the text it
    /// was given.
    async fn decode_all(rows: Vec<FakeRow>) -> (Result<Vec<String>, sqlx::Error>, bool, usize) {
        let mut decoding = Decoding::new(len, decode);
        for row in rows {
            if let Err(e) = decoding.take(row) {
                return (Err(e), decoding.there.is_some(), decoding.bytes_there);
            }
        }
        let (started, there) = (decoding.there.is_some(), decoding.bytes_there);
        let names = decoding
            .finish()
            .await
            .map(|servers| servers.into_iter().map(|s| s.id).collect());
        (names, started, there)
    }

    #[tokio::test]
    async fn a_large_read_is_decoded_on_two_threads_and_comes_back_in_order() {
        let big = PARALLEL_DECODE_BYTES;
        // Mixed sizes crossing the threshold early, and a skipped row.
        let mut rows: Vec<FakeRow> = (0..60)
            .map(|i| {
                fake(
                    &format!("s{i:02}"),
                    if i % 7 == 0 { big / 3 } else { big / 20 },
                )
            })
            .collect();
        rows[30].name = Some(String::new());
        let expected: Vec<String> = (0..60)
            .filter(|&i| i != 30)
            .map(|i| format!("s{i:02}"))
            .collect();
        let (names, started, there) = decode_all(rows).await;
        assert_eq!(names.unwrap_or_else(|e| panic!("{e}")), expected);
        assert!(started);
        // The thread took its share of the text: about half of it.
        let total = 9 * (big / 3) + 51 * (big / 20);
        assert!(
            there > total / 3 && there < total * 2 / 3,
            "{there} of {total}"
        );
    }

    #[tokio::test]
    async fn a_small_read_or_one_large_row_is_decoded_where_it_is_read() {
        let rows = (0..40).map(|i| fake(&format!("s{i:02}"), 1000)).collect();
        let (names, started, _) = decode_all(rows).await;
        assert_eq!(names.map(|n| n.len()).ok(), Some(40));
        assert!(!started);
        // One row past the threshold alone: nothing to share.
        let (names, started, _) = decode_all(vec![fake("only", PARALLEL_DECODE_BYTES * 2)]).await;
        assert_eq!(names.ok(), Some(vec!["only".to_owned()]));
        assert!(!started);
        // A second row then goes to the thread, and both come back in order.
        let rows = vec![fake("a", PARALLEL_DECODE_BYTES * 2), fake("b", 10)];
        let (names, started, there) = decode_all(rows).await;
        assert_eq!(names.ok(), Some(vec!["a".to_owned(), "b".to_owned()]));
        assert!(started);
        assert_eq!(there, 10);
    }

    #[tokio::test]
    async fn a_row_that_cannot_be_read_fails_the_read_on_either_thread() {
        let big = PARALLEL_DECODE_BYTES;
        for bad in 0..6 {
            let mut rows: Vec<FakeRow> = (0..6).map(|i| fake(&format!("s{i}"), big)).collect();
            rows[bad].name = None;
            let (names, _, _) = decode_all(rows).await;
            assert!(
                matches!(names, Err(sqlx::Error::RowNotFound)),
                "row {bad}: {names:?}"
            );
        }
    }

    #[tokio::test]
    async fn once_the_thread_stops_on_a_bad_row_no_more_rows_are_taken() {
        let big = PARALLEL_DECODE_BYTES;
        let mut decoding = Decoding::new(len, decode);
        assert!(matches!(decoding.take(fake("a", big)), Ok(true)));
        let bad = FakeRow {
            name: None,
            len: 10,
        };
        assert!(matches!(decoding.take(bad), Ok(true)));
        // Wait for the thread to stop on it.
        while decoding
            .there
            .as_ref()
            .is_some_and(|helper| !helper.decoded.is_finished())
        {
            tokio::task::yield_now().await;
        }
        // The next row for the thread is refused, not decoded here.
        assert!(matches!(decoding.take(fake("!", 10)), Ok(false)));
        let names = decoding.finish().await.map(|servers| servers.len());
        assert!(matches!(names, Err(sqlx::Error::RowNotFound)), "{names:?}");
    }
}
