//! One JSON-RPC message a line, as the stdio transports read it: the
//! sans-I/O core the gateway's stdio surface and its stdio upstreams share
//! (the server and upstream crates do not depend on each other, and this
//! one has no I/O).
//!
//! A peer on the other end of a pipe is not trusted to end its lines: a
//! [`MessageLine`] is fed the reader's buffer chunk by chunk, never holds
//! more than its limit of one line, reports a line past the limit once and
//! skips the rest of it up to its newline, and lets a buffer that a large
//! message grew go again afterwards.
//!
//! ```
//! use portcullis_catalog::message_line::{LineEnd, MessageLine};
//!
//! let mut line = MessageLine::new(8);
//! assert_eq!(line.take(b"{\"a\":1}\nrest"), (8, Some(LineEnd::Complete)));
//! assert_eq!(line.line(), b"{\"a\":1}");
//! line.reset();
//! assert_eq!(line.take(b"much too long"), (13, Some(LineEnd::Oversized)));
//! assert_eq!(line.take(b" still\n"), (7, None));
//! ```

/// The longest line a stdio transport holds: longer ones are refused.
pub const MAX_MESSAGE_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Where a message failed to read, for the log, without any of its text
/// (serde's own messages can quote it).
///
/// ```
/// use portcullis_catalog::message_line::describe_unreadable;
///
/// let error = serde_json::from_str::<serde_json::Value>("{\"secret\": ").unwrap_err();
/// assert_eq!(describe_unreadable(&error), "cut short, at line 1 column 11");
/// ```
pub fn describe_unreadable(error: &serde_json::Error) -> String {
    let what = match error.classify() {
        serde_json::error::Category::Io => "unreadable",
        serde_json::error::Category::Syntax => "not JSON, or nested too deep",
        serde_json::error::Category::Data => "not of the expected shape",
        serde_json::error::Category::Eof => "cut short",
    };
    match error.line() {
        // serde names no position for a shape it could not take.
        0 => what.to_owned(),
        line => format!("{what}, at line {line} column {}", error.column()),
    }
}

/// A buffer grown past this by a large message is let go after it. A
/// gateway holds one line per stdio upstream, and a listing of a hundred
/// tools grows it to a few hundred KiB: kept, that was ~13 MB idle at 50
/// servers. Calls' messages are mostly far smaller, so the hot path keeps
/// its buffer.
const KEEP_CAPACITY: usize = 64 * 1024;

/// How a chunk ended the line being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnd {
    /// A whole line is held ([`MessageLine::line`]).
    Complete,
    /// The line crossed the limit: dropped, and its rest skipped as it
    /// arrives. Reported once per line.
    Oversized,
}

/// The line being read (see the module docs).
#[derive(Debug)]
pub struct MessageLine {
    bytes: Vec<u8>,
    /// Skipping the rest of an oversized line, until its newline.
    discarding: bool,
    max_bytes: usize,
}

impl MessageLine {
    /// A reader of lines of at most `max_bytes` (newline included).
    pub fn new(max_bytes: usize) -> Self {
        MessageLine {
            bytes: Vec::new(),
            discarding: false,
            max_bytes,
        }
    }

    /// Takes what belongs to the current line from the start of `chunk`:
    /// returns how many bytes were used (the caller consumes them from its
    /// reader) and whether the line ended. Never awaits, so a transport
    /// whose read is cancelled between chunks loses nothing.
    pub fn take(&mut self, chunk: &[u8]) -> (usize, Option<LineEnd>) {
        let newline = chunk.iter().position(|&b| b == b'\n');
        let used = newline.map_or(chunk.len(), |at| at + 1);
        let end = if self.discarding {
            self.discarding = newline.is_none();
            None
        } else if self.bytes.len().saturating_add(used) > self.max_bytes {
            self.bytes = Vec::new();
            self.discarding = newline.is_none();
            Some(LineEnd::Oversized)
        } else {
            self.bytes.extend_from_slice(&chunk[..used]);
            newline.map(|_| LineEnd::Complete)
        };
        (used, end)
    }

    /// The complete line, without its newline.
    pub fn line(&self) -> &[u8] {
        self.bytes.strip_suffix(b"\n").unwrap_or(&self.bytes)
    }

    /// Starts the next line; a buffer a large message grew is let go.
    pub fn reset(&mut self) {
        self.bytes.clear();
        if self.bytes.capacity() > KEEP_CAPACITY {
            self.bytes = Vec::new();
        }
    }

    /// The bytes the buffer holds room for.
    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_split_across_chunks_is_held_whole_and_an_oversized_one_never() {
        let mut line = MessageLine::new(10);
        assert_eq!(line.take(b"abc"), (3, None));
        assert_eq!(line.take(b"de\nfg"), (3, Some(LineEnd::Complete)));
        assert_eq!(line.line(), b"abcde");
        line.reset();
        assert_eq!(line.take(b"0123456789A"), (11, Some(LineEnd::Oversized)));
        assert_eq!(line.capacity(), 0);
        assert_eq!(line.take(b"more"), (4, None));
        assert_eq!(line.take(b"end\nnext\n"), (4, None));
        assert_eq!(line.take(b"next\n"), (5, Some(LineEnd::Complete)));
        assert_eq!(line.line(), b"next");
    }

    #[test]
    fn a_buffer_a_large_message_grew_is_let_go_and_a_small_one_kept() {
        let mut line = MessageLine::new(MAX_MESSAGE_LINE_BYTES);
        // About what a server's listing of a hundred described tools takes.
        let large = vec![b'x'; 150 * 1024];
        assert_eq!(line.take(&large), (large.len(), None));
        assert_eq!(line.take(b"\n"), (1, Some(LineEnd::Complete)));
        assert!(line.capacity() >= large.len());
        line.reset();
        assert_eq!(line.capacity(), 0, "a listing's buffer is not held idle");
        assert_eq!(line.take(b"{\"id\":1}\n"), (9, Some(LineEnd::Complete)));
        let small = line.capacity();
        line.reset();
        assert_eq!(line.capacity(), small, "a call's buffer is reused");
        assert!(small > 0);
    }
}
