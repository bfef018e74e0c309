//! A cap on how many lines one kind of warning writes, so a flood of
//! refused requests or connections cannot become a flood of log lines.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most `per_window` lines every `window`; what was held back is counted
/// and reported on the next line written.
#[derive(Debug)]
pub(crate) struct LogThrottle {
    per_window: u32,
    window: Duration,
    state: Mutex<Option<Window>>,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    logged: u32,
    suppressed: u64,
}

impl LogThrottle {
    /// Ten lines every ten seconds: enough to see what is refused, too few
    /// to fill a disk.
    pub(crate) const fn new() -> Self {
        LogThrottle {
            per_window: 10,
            window: Duration::from_secs(10),
            state: Mutex::new(None),
        }
    }

    /// `Some(n)`: write this line, and say that `n` lines before it were
    /// held back; `None`: stay quiet (counted for the next line).
    pub(crate) fn admit(&self) -> Option<u64> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let window = state.get_or_insert(Window {
            started: now,
            logged: 0,
            suppressed: 0,
        });
        if now.duration_since(window.started) >= self.window {
            window.started = now;
            window.logged = 0;
        }
        if window.logged < self.per_window {
            window.logged += 1;
            Some(std::mem::take(&mut window.suppressed))
        } else {
            window.suppressed += 1;
            None
        }
    }
}

impl Default for LogThrottle {
    fn default() -> Self {
        LogThrottle::new()
    }
}

/// `bytes` as printable ASCII for a log line: quotes, backslashes, control
/// characters and every non-ASCII byte as `\xNN` (so no terminal escape or
/// bidirectional override in a client's header is ever obeyed), cut at 200
/// bytes.
pub(crate) fn escape(bytes: &[u8]) -> String {
    const LIMIT: usize = 200;
    let mut out = String::with_capacity(bytes.len().min(LIMIT) + 2);
    out.push('"');
    for &byte in bytes.iter().take(LIMIT) {
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(byte)),
            _ => out.push_str(&format!("\\x{byte:02x}")),
        }
    }
    out.push('"');
    if bytes.len() > LIMIT {
        out.push_str(&format!("… ({} bytes)", bytes.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_only_printable_ascii() {
        assert_eq!(escape(b"http://a.example"), "\"http://a.example\"");
        assert_eq!(
            escape("x\u{202e}\"\\\x1b".as_bytes()),
            "\"x\\xe2\\x80\\xae\\\"\\\\\\x1b\""
        );
        let long = escape(&[b'a'; 300]);
        assert!(long.ends_with("… (300 bytes)"), "{long}");
    }

    #[test]
    fn a_flood_is_cut_to_the_window_and_counted() {
        let throttle = LogThrottle::new();
        for _ in 0..10 {
            assert_eq!(throttle.admit(), Some(0));
        }
        assert_eq!(throttle.admit(), None);
        assert_eq!(throttle.admit(), None);
    }
}
