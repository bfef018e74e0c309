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
use std::fmt::{self, Write as _};
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

/// The JSON log's writer around `M` (stderr when serving): each line
/// redacted as [`Stderr`] does, then written as [`json_visible`] shows it.
/// Redacted first: a URL ends at a backslash, so escaping first could cut
/// a URL's credentials off the part that is masked.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines<M>(pub M);

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for JsonLines<M>
{
    type Writer = JsonLine<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        JsonLine(self.0.make_writer())
    }
}

/// One JSON log line's write: redacted, its invisible characters escaped.
#[derive(Debug)]
pub struct JsonLine<W>(W);

impl<W: Write> Write for JsonLine<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let redacted = match std::str::from_utf8(buf) {
            Ok(line) => text(line),
            Err(_) => Cow::Owned(text(&String::from_utf8_lossy(buf)).into_owned()),
        };
        self.0.write_all(json_visible(&redacted).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// A JSON text with every invisible character that is not ASCII (C1
/// controls, bidirectional and zero-width characters, the line separators,
/// the byte-order mark: [`portcullis_catalog::redact::is_invisible`]) and
/// DEL written as a `\uXXXX` escape: still the same JSON, parsed, but a
/// terminal showing the line cannot be made to reorder or hide part of it.
/// ASCII controls are left to the JSON writer, which escapes them in
/// strings (the line's own end stays). Outside strings JSON is ASCII, so
/// every such character is inside one, where the escape is valid. Only a
/// line with a byte past `~` is looked at twice.
pub fn json_visible(line: &str) -> Cow<'_, str> {
    if line.bytes().all(|b| b < 0x7f) {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len() + 12);
    let mut shown_from = 0;
    for (at, c) in line.char_indices() {
        if c < '\u{7f}' || !portcullis_catalog::redact::is_invisible(c) {
            continue;
        }
        out.push_str(&line[shown_from..at]);
        // Every invisible character is in the Basic Multilingual Plane:
        // one escape, no surrogate pair.
        let _ = write!(out, "\\u{:04x}", u32::from(c));
        shown_from = at + c.len_utf8();
    }
    if shown_from == 0 {
        return Cow::Borrowed(line);
    }
    out.push_str(&line[shown_from..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_catalog::redact::is_invisible;

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

    #[test]
    fn json_lines_escape_invisible_characters_after_redacting() {
        let record = serde_json::json!({
            "tool": "a\u{202e}b\u{2066}c\u{200b}d\u{feff}e\u{85}f\u{7f}g é 日本",
            "message": "line\nend \\ \"q\"",
        });
        let raw = format!("{record}\n");
        let shown = json_visible(&raw);
        assert!(
            !shown.chars().any(|c| c > '~' && is_invisible(c)),
            "{shown}"
        );
        assert!(
            shown.contains(r"a\u202eb\u2066c\u200bd\ufeffe\u0085f\u007fg é 日本"),
            "{shown}"
        );
        assert!(shown.ends_with('\n'), "the line's own end stays");
        // The same record, parsed.
        let parsed: serde_json::Value = serde_json::from_str(&shown).expect("still JSON");
        assert_eq!(parsed, record);
        assert!(matches!(json_visible("{\"a\":\"é\"}\n"), Cow::Borrowed(_)));

        // Redacted before it is escaped: a zero-width character inside a
        // URL's credentials does not cut them off the part masked.
        let mut written = Vec::new();
        JsonLine(&mut written)
            .write_all("{\"error\":\"GET http://user\u{200b}:pw-91c2@h/mcp\"}\n".as_bytes())
            .expect("written");
        let written = String::from_utf8(written).expect("UTF-8");
        assert!(!written.contains("pw-91c2"), "{written}");
        assert_eq!(written, "{\"error\":\"GET http://***@h/mcp\"}\n");
    }
}
