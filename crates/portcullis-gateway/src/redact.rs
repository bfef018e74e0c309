//! The config's secrets kept out of everything the binary prints and logs.
//!
//! The rule for URLs and invisible characters is the catalogue's
//! ([`portcullis_catalog::redact`]); this module adds what only the binary
//! knows: the values its config holds that must never be printed (every
//! `${VAR}` expansion, header values, the token, URL query values). The
//! config records them as it loads ([`crate::config::Config::redactions`]),
//! its errors are passed through [`replace_known`] before they are shown,
//! and [`remember`] makes them known to the log writer ([`Stderr`]), which
//! redacts every line whoever wrote it (rmcp's own error logs name the
//! upstream URL, query and all).
//!
//! An expansion is shown as the `${VAR}` it came from, so a message still
//! says which variable is wrong; anything else as `***`.
//!
//! Each such value is held as a [`Secret`], whose `Debug` never prints it.

use std::borrow::Cow;
use std::fmt;
use std::io::Write;
use std::sync::{PoisonError, RwLock};

use portcullis_catalog::redact::{MASK, urls_in_text};

/// A value that may be a credential: usable, never printed by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value that may be a credential.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself. Call only where it is sent, never where it is logged.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Values shorter than this are not treated as secrets: replacing `1` or
/// `on` wherever it appears would garble every line, and no credential is
/// that short.
pub const MIN_SECRET_LEN: usize = 4;

/// What every log line is redacted with: the secrets of every config loaded
/// so far (a reload adds; a secret a reload removed may still appear in a
/// late line of an old connection).
static KNOWN: RwLock<Vec<(Secret, String)>> = RwLock::new(Vec::new());

/// One value never to print, and what to print instead.
pub fn redaction(value: &str, shown: impl Into<String>) -> Option<(Secret, String)> {
    (value.chars().count() >= MIN_SECRET_LEN).then(|| (Secret::new(value), shown.into()))
}

/// A value that is not a `${VAR}` expansion: shown as `***`.
pub fn masked(value: &str) -> Option<(Secret, String)> {
    redaction(value, MASK)
}

/// Makes `redactions` known to the log writer (and to [`text`]).
pub fn remember(redactions: &[(Secret, String)]) {
    let mut known = KNOWN.write().unwrap_or_else(PoisonError::into_inner);
    for (value, shown) in redactions {
        if !known.iter().any(|(v, _)| v == value) {
            known.push((value.clone(), shown.clone()));
        }
    }
    // Longest first, so a secret that contains another is replaced whole.
    known.sort_by_key(|(v, _)| std::cmp::Reverse(v.expose().len()));
}

/// `text` with every value in `known` replaced by what stands in for it.
pub fn replace_known<'a>(text: &'a str, known: &[(Secret, String)]) -> Cow<'a, str> {
    let mut sorted: Vec<&(Secret, String)> = known.iter().collect();
    sorted.sort_by_key(|(v, _)| std::cmp::Reverse(v.expose().len()));
    replace_longest_first(text, sorted)
}

/// [`replace_known`] for values already sorted longest first, so a secret
/// that contains another is replaced whole.
fn replace_longest_first<'a, 'k>(
    text: &'a str,
    known: impl IntoIterator<Item = &'k (Secret, String)>,
) -> Cow<'a, str> {
    let mut out = Cow::Borrowed(text);
    for (value, shown) in known {
        if !value.expose().is_empty() && out.contains(value.expose()) {
            out = Cow::Owned(out.replace(value.expose(), shown));
        }
    }
    out
}

/// `text` as it may be printed: the known secrets replaced, every URL's
/// userinfo, query values and fragment masked.
pub fn text(text: &str) -> Cow<'_, str> {
    let known = KNOWN.read().unwrap_or_else(PoisonError::into_inner);
    // [`remember`] keeps them longest first: every log line passes here,
    // and sorting them once per line was a tenth of the line's cost.
    match replace_longest_first(text, known.iter()) {
        Cow::Borrowed(text) => urls_in_text(text),
        Cow::Owned(replaced) => Cow::Owned(urls_in_text(&replaced).into_owned()),
    }
}

/// The log writer: stderr, each line passed through [`text`] first.
pub struct Stderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = RedactingWriter;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter
    }
}

/// One write to stderr, redacted. The formatter hands over each event as
/// one buffer, so a secret is never split between two writes.
pub struct RedactingWriter;

impl Write for RedactingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        redact_line(buf, &mut std::io::stderr())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Writes `buf` (one formatted event) to `out` as [`text`] shows it.
fn redact_line(buf: &[u8], out: &mut impl Write) -> std::io::Result<()> {
    // The formatters write UTF-8; `from_utf8` checks it several times
    // faster than `from_utf8_lossy`, which is kept for anything else.
    match std::str::from_utf8(buf) {
        Ok(line) => out.write_all(text(line).as_bytes()),
        Err(_) => out.write_all(text(&String::from_utf8_lossy(buf)).as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_and_urls_are_replaced_longest_first() {
        let known = vec![
            redaction("SECRETVALUE", "${API_KEY}").expect("long enough"),
            masked("SECRETVALUE-and-more").expect("long enough"),
        ];
        assert_eq!(
            replace_known("a SECRETVALUE-and-more b SECRETVALUE", &known),
            "a *** b ${API_KEY}"
        );
        assert!(masked("on").is_none());
        remember(&known);
        assert_eq!(
            text("GET http://h/mcp?k=v SECRETVALUE"),
            "GET http://h/mcp?k=*** ${API_KEY}"
        );
    }

    #[test]
    fn secrets_remembered_apart_are_still_replaced_longest_first() {
        // The log writer relies on the order `remember` keeps: a longer
        // secret learnt later (a reload) that contains an earlier one must
        // still be replaced whole, not left with its tail showing.
        remember(&[redaction("PART-7f3a", "${PART}").expect("long enough")]);
        remember(&[masked("PART-7f3a-WHOLE-91c2").expect("long enough")]);
        remember(&[redaction("x-PART-7f3a-WHOLE-91c2-y", "${XY}").expect("long enough")]);
        assert_eq!(
            text("a PART-7f3a-WHOLE-91c2 b PART-7f3a c x-PART-7f3a-WHOLE-91c2-y"),
            "a *** b ${PART} c ${XY}"
        );
        let mut line = Vec::new();
        redact_line(
            b"token=PART-7f3a-WHOLE-91c2 at http://u:p@h/?k=v\n",
            &mut line,
        )
        .expect("written");
        assert_eq!(line, b"token=*** at http://***@h/?k=***\n");
        // Bytes that are not UTF-8 are replaced, and the rest still redacted.
        line.clear();
        redact_line(b"\xff PART-7f3a-WHOLE-91c2\n", &mut line).expect("written");
        assert_eq!(line, "\u{fffd} ***\n".as_bytes());
    }
}
