//! Progress while the upstreams connect: on a terminal, one line on stderr
//! (`connecting upstreams 7/20 (files, github, jira …)`, the servers named
//! being those still connecting), rewritten as each server finishes and
//! erased when the last one has. Nothing at all when stderr is not a
//! terminal (a pipe, a file, a supervisor) or logs are JSON: those readers
//! want lines they can parse, not carriage returns.
//!
//! Whether to show is decided once at start-up ([`enable`]); the connector
//! reports each server's end through `ConnectOptions::on_connect`
//! ([`progress`] builds that callback).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use portcullis_upstream::options::{ConnectCallback, ConnectEvent};

/// At most this many waiting servers are named; more are an ellipsis.
const NAMED: usize = 3;
/// A longer server name is cut to this many characters.
const NAME_CHARS: usize = 24;

/// Set by [`enable`]: whether progress is drawn at all.
static SHOW: AtomicBool = AtomicBool::new(false);

/// Whether a progress line belongs on this stderr: only a terminal, and only
/// with text logs.
pub fn should_show(stderr_is_terminal: bool, json_logs: bool) -> bool {
    stderr_is_terminal && !json_logs
}

/// Decides, once at start-up, whether connecting draws progress.
pub fn enable(json_logs: bool) {
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    SHOW.store(should_show(terminal, json_logs), Ordering::Relaxed);
}

/// The callback for `ConnectOptions::on_connect` when progress is shown
/// (drawing the first line, for `servers`, at once), else `None`.
pub fn progress(servers: &[String]) -> Option<ConnectCallback> {
    if !SHOW.load(Ordering::Relaxed) || servers.is_empty() {
        return None;
    }
    let mut waiting = servers.to_vec();
    waiting.sort();
    draw(Some(&line(0, servers.len(), 0, &waiting)));
    Some(Arc::new(|event: &ConnectEvent| {
        let finished = event.done >= event.total;
        let text = line(event.done, event.total, event.failed, &event.waiting);
        draw((!finished).then_some(text.as_str()));
    }))
}

/// Erases the progress line, if one is drawn: connecting ended before every
/// server had finished (the rest join in the background).
pub fn erase() {
    if SHOW.load(Ordering::Relaxed) {
        draw(None);
    }
}

/// The progress line: done of total, failures if any, and the first few
/// servers still connecting.
pub fn line(done: usize, total: usize, failed: usize, waiting: &[String]) -> String {
    let mut text = format!("connecting upstreams {done}/{total}");
    if failed > 0 {
        text.push_str(&format!(", {failed} failed"));
    }
    if !waiting.is_empty() {
        let named: Vec<String> = waiting.iter().take(NAMED).map(|n| cut(n)).collect();
        let more = if waiting.len() > NAMED { " …" } else { "" };
        text.push_str(&format!(" ({}{more})", named.join(", ")));
    }
    text
}

/// `name`, cut to [`NAME_CHARS`] characters (never inside a character).
fn cut(name: &str) -> String {
    if name.chars().count() <= NAME_CHARS {
        return name.to_owned();
    }
    let mut short: String = name.chars().take(NAME_CHARS - 1).collect();
    short.push('…');
    short
}

/// Replaces the current stderr line with `text`, or erases it (`None`).
fn draw(text: Option<&str>) {
    let mut stderr = std::io::stderr().lock();
    // Carriage return and "erase line": the cursor stays on this line, so
    // the next draw (or the first log line) replaces it.
    let _ = write!(stderr, "\r\x1b[2K{}", text.unwrap_or_default());
    let _ = stderr.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn shown_only_on_a_terminal_with_text_logs() {
        assert!(should_show(true, false));
        assert!(!should_show(false, false), "a pipe stays quiet");
        assert!(!should_show(true, true), "JSON logs stay parseable");
        assert!(!should_show(false, true));
    }

    #[test]
    fn the_line_counts_and_names_the_servers_still_connecting() {
        assert_eq!(
            line(0, 2, 0, &names(&["files", "github"])),
            "connecting upstreams 0/2 (files, github)"
        );
        assert_eq!(
            line(7, 20, 0, &names(&["files", "github", "jira", "linear"])),
            "connecting upstreams 7/20 (files, github, jira …)"
        );
        assert_eq!(
            line(3, 4, 1, &names(&["slow"])),
            "connecting upstreams 3/4, 1 failed (slow)"
        );
        assert_eq!(line(4, 4, 0, &[]), "connecting upstreams 4/4");
    }

    #[test]
    fn long_names_are_cut_on_a_character() {
        let long = "ä".repeat(40);
        let text = line(0, 1, 0, &[long]);
        let named = text
            .trim_start_matches("connecting upstreams 0/1 (")
            .trim_end_matches(')');
        assert_eq!(named.chars().count(), NAME_CHARS, "{text}");
        assert!(named.ends_with('…'), "{text}");
    }

    #[test]
    fn nothing_is_drawn_when_disabled() {
        SHOW.store(false, Ordering::Relaxed);
        assert!(progress(&names(&["a", "b"])).is_none());
        assert!(progress(&[]).is_none());
    }
}
