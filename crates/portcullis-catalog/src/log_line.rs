//! A child process's stderr made safe for the log: split into lines, each
//! line capped, control characters escaped.
//!
//! Native plugin handlers and stdio upstreams are third-party programs, and
//! their stderr goes to the gateway's log. Read naively (a line at a time,
//! as text) a child could make the gateway buffer without bound (gigabytes
//! without a newline), write one enormous log line, stop the reader with a
//! single byte that is not UTF-8 (the child then blocks on a full pipe and
//! its calls time out), or forge log lines with an embedded `\r` or ANSI
//! escape. [`LineSplitter`] is the sans-I/O core both readers share (the
//! sources and upstream crates do not depend on each other, and this one
//! has no I/O): it is fed bytes as they arrive, holds at most `max_bytes`
//! of a line, counts what it drops, and never fails.
//!
//! ```
//! use portcullis_catalog::log_line::LineSplitter;
//!
//! let mut splitter = LineSplitter::new(8);
//! let mut lines = Vec::new();
//! splitter.feed(b"short\nmuch too long a line\n\x1b[31mred", |line| lines.push(line.to_string()));
//! lines.extend(splitter.finish().map(|line| line.to_string()));
//! assert_eq!(lines, ["short", "much too … [12 bytes cut]", "\\u{1b}[31mred"]);
//! ```

use std::fmt;

/// The default cap on one logged line of a child's stderr, in bytes.
pub const DEFAULT_MAX_LINE_BYTES: usize = 8 * 1024;

/// One line of a child's output, ready for the log: its text with control
/// characters escaped, and how many bytes were cut from its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The kept text (lossy UTF-8, control characters escaped).
    pub text: String,
    /// Bytes of the line that were dropped past the cap.
    pub cut_bytes: u64,
}

impl fmt::Display for LogLine {
    /// The text, with a marker naming how much was cut, if anything was.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        if self.cut_bytes > 0 {
            write!(f, " … [{} bytes cut]", self.cut_bytes)?;
        }
        Ok(())
    }
}

/// Splits a byte stream into capped [`LogLine`]s; memory is bounded by the
/// cap, whatever the stream holds.
#[derive(Debug)]
pub struct LineSplitter {
    max_bytes: usize,
    line: Vec<u8>,
    cut: u64,
    /// Whether anything of the current line has arrived (an empty line
    /// between two newlines is still a line).
    started: bool,
}

impl LineSplitter {
    /// A splitter keeping at most `max_bytes` of each line (at least 1).
    pub fn new(max_bytes: usize) -> Self {
        let max_bytes = max_bytes.max(1);
        LineSplitter {
            max_bytes,
            line: Vec::with_capacity(max_bytes.min(DEFAULT_MAX_LINE_BYTES)),
            cut: 0,
            started: false,
        }
    }

    /// Feeds `bytes`; `emit` is called for each line they complete (a
    /// trailing `\r` of a `\r\n` ending is dropped).
    pub fn feed(&mut self, mut bytes: &[u8], mut emit: impl FnMut(LogLine)) {
        while !bytes.is_empty() {
            self.started = true;
            let (part, rest, ended) = match bytes.iter().position(|&b| b == b'\n') {
                Some(at) => (&bytes[..at], &bytes[at + 1..], true),
                None => (bytes, &[][..], false),
            };
            let room = self.max_bytes - self.line.len();
            if part.len() <= room {
                self.line.extend_from_slice(part);
            } else {
                self.line.extend_from_slice(&part[..room]);
                self.cut = self.cut.saturating_add((part.len() - room) as u64);
            }
            if ended {
                emit(self.take());
            }
            bytes = rest;
        }
    }

    /// The last line if the stream ended without a newline.
    pub fn finish(&mut self) -> Option<LogLine> {
        self.started.then(|| self.take())
    }

    fn take(&mut self) -> LogLine {
        if self.cut == 0 && self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        let mut cut = self.cut;
        // A cut through a multi-byte character drops its head too, rather
        // than logging a replacement character for it.
        if cut > 0
            && let Err(error) = std::str::from_utf8(&self.line)
            && error.error_len().is_none()
        {
            let valid = error.valid_up_to();
            cut = cut.saturating_add((self.line.len() - valid) as u64);
            self.line.truncate(valid);
        }
        let line = LogLine {
            text: escape_for_log(&String::from_utf8_lossy(&self.line)),
            cut_bytes: cut,
        };
        self.line.clear();
        self.cut = 0;
        self.started = false;
        line
    }
}

/// `text` with every control character (C0, DEL, C1) and every bidi
/// override escaped as `\u{…}` (`\t`, `\r`, `\n` by name), so untrusted
/// text cannot end a log line, move the cursor, colour the terminal or
/// reorder what a reader sees.
pub fn escape_for_log(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            c if c.is_control()
                || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}') =>
            {
                out.extend(c.escape_unicode());
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(max: usize, chunks: &[&[u8]]) -> Vec<LogLine> {
        let mut splitter = LineSplitter::new(max);
        let mut lines = Vec::new();
        for chunk in chunks {
            splitter.feed(chunk, |line| lines.push(line));
        }
        lines.extend(splitter.finish());
        lines
    }

    fn line(text: &str, cut_bytes: u64) -> LogLine {
        LogLine {
            text: text.into(),
            cut_bytes,
        }
    }

    #[test]
    fn lines_span_chunks_and_empty_lines_count() {
        assert_eq!(
            split(64, &[b"ab", b"c\n\nd", b"e\r\n"]),
            [line("abc", 0), line("", 0), line("de", 0)]
        );
        assert_eq!(split(64, &[]), []);
        assert_eq!(split(64, &[b"tail"]), [line("tail", 0)]);
    }

    #[test]
    fn a_long_line_is_capped_and_the_next_line_is_whole() {
        let long = vec![b'x'; 10_000];
        let lines = split(100, &[&long, &long, b"\nnext\n"]);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].text, "x".repeat(100));
        assert_eq!(lines[0].cut_bytes, 19_900);
        assert!(lines[0].to_string().ends_with(" … [19900 bytes cut]"));
        assert_eq!(lines[1], line("next", 0));
    }

    #[test]
    fn memory_is_bounded_by_the_cap() {
        let mut splitter = LineSplitter::new(100);
        let flood = vec![b'y'; 64 * 1024];
        for _ in 0..64 {
            splitter.feed(&flood, |_| panic!("no line ended"));
        }
        assert_eq!(splitter.line.capacity(), 100);
        assert_eq!(splitter.finish().unwrap().cut_bytes, 64 * 64 * 1024 - 100);
    }

    #[test]
    fn invalid_utf8_and_controls_neither_stop_nor_forge() {
        let lines = split(64, &[b"a\xffb\n", b"x\rFAKE INFO\x1b[2K\x07\xc2\x85\n"]);
        assert_eq!(lines[0], line("a\u{fffd}b", 0));
        assert_eq!(lines[1].text, "x\\rFAKE INFO\\u{1b}[2K\\u{7}\\u{85}");
        assert_eq!(escape_for_log("a\u{202E}b\tc"), "a\\u{202e}b\\tc");
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        // "é" is two bytes; the cap falls between them.
        let lines = split(3, &["abé".as_bytes(), b"zz\n"]);
        assert_eq!(lines, [line("ab", 4)]);
    }
}
