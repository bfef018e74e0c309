//! What may be shown of text that came from a config or from outside: URL
//! credentials masked, and characters a terminal or a reader would not show
//! as themselves made visible.
//!
//! Every place that prints or logs a URL, a config value or a server's
//! words goes through these functions (the binary's log formatter, its
//! config errors, the upstream connector's errors, the approval question),
//! so one rule decides what a secret looks like when it is left out.
//!
//! ```
//! use portcullis_catalog::redact;
//!
//! assert_eq!(
//!     redact::url("https://me:hunter2@api.example.com/mcp?api_key=k1&team=core#frag"),
//!     "https://***@api.example.com/mcp?api_key=***&team=***#***"
//! );
//! assert_eq!(
//!     redact::urls_in_text("GET http://127.0.0.1:1/mcp?token=abc failed"),
//!     "GET http://127.0.0.1:1/mcp?token=*** failed"
//! );
//! assert_eq!(redact::visible("a\nb\u{1b}[31m\u{202e}"), "a\\nb\\u{1b}[31m\\u{202e}");
//! ```

use std::borrow::Cow;
use std::fmt;

/// What stands in for a value left out.
pub const MASK: &str = "***";

/// `raw` with its userinfo, every query value and its fragment replaced by
/// [`MASK`]; query keys, scheme, host and path are kept so the URL is still
/// recognisable. Anything without `scheme://` is returned as it is.
///
/// Query values are masked whatever their key: an `api_key` is obvious, but
/// `?key=`, `?sig=` or `?code=` are credentials too, and a list of names to
/// mask would always miss one.
pub fn url(raw: &str) -> String {
    let Some(scheme_end) = raw.find("://").map(|at| at + 3) else {
        return raw.to_owned();
    };
    let mut out = String::with_capacity(raw.len());
    out.push_str(&raw[..scheme_end]);
    let rest = &raw[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(MASK);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let rest = &rest[authority_end..];
    let (before_fragment, fragment) = match rest.find('#') {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    match before_fragment.find('?') {
        Some(at) => {
            out.push_str(&before_fragment[..=at]);
            out.push_str(&query(&before_fragment[at + 1..]));
        }
        None => out.push_str(before_fragment),
    }
    if let Some(fragment) = fragment {
        out.push('#');
        if !fragment.is_empty() {
            out.push_str(MASK);
        }
    }
    out
}

/// A query with each value masked (`k=v` → `k=***`, a bare `v` → `***`).
fn query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) => format!("{key}={MASK}"),
            None if pair.is_empty() => String::new(),
            None => MASK.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// `text` with every URL in it (a `scheme://` run up to whitespace, a
/// quote, a backslash or a closing bracket) passed through [`url`]. For
/// messages that embed URLs among other words: errors of HTTP clients, log
/// lines of libraries.
pub fn urls_in_text(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let ends = |c: char| c.is_whitespace() || "\"'`<>\\)]}|".contains(c);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        // Back to the start of the scheme (letters, digits, `+-.`).
        let start = rest[..at]
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_alphanumeric() || "+-.".contains(*c))
            .last()
            .map_or(at, |(i, _)| i);
        let end = rest[at + 3..].find(ends).map_or(rest.len(), |e| at + 3 + e);
        out.push_str(&rest[..start]);
        if start == at {
            // No scheme: not a URL, keep the separator and go on.
            out.push_str(&rest[at..at + 3]);
            rest = &rest[at + 3..];
            continue;
        }
        out.push_str(&url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Whether `c` is a character a reader would not see as itself: C0 and C1
/// controls, DEL, and the format characters that reorder or hide text
/// (bidirectional overrides, isolates and marks, zero-width characters, the
/// Unicode line and paragraph separators, the byte-order mark).
pub fn is_invisible(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// `text` with every [`is_invisible`] character written out: `\n`, `\r`,
/// `\t`, and `\u{…}` (hexadecimal) for the rest. Line breaks, terminal
/// escape sequences and reordering marks cannot forge or hide anything once
/// shown this way. A backslash already in the text is left as it is: a
/// literal `\n` then reads like an escaped line break, which forges
/// nothing, and text that is already escaped (a `Debug` string) is not
/// escaped twice.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_invisible) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_invisible(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Writes `text` to `out` as [`visible`] shows it, without building a
/// string first: for formatters that stream a value into a line (the
/// binary's log fields). Runs of characters shown as they are go out in
/// one write each. (Kept apart from [`visible`], which the tests hold it
/// to, character by character.)
pub fn write_visible<W: fmt::Write + ?Sized>(out: &mut W, text: &str) -> fmt::Result {
    // Printable ASCII, the common case, is checked a byte at a time.
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return out.write_str(text);
    }
    let mut shown_from = 0;
    for (at, c) in text.char_indices() {
        if !is_invisible(c) {
            continue;
        }
        out.write_str(&text[shown_from..at])?;
        match c {
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c => write!(out, "\\u{{{:x}}}", c as u32)?,
        }
        shown_from = at + c.len_utf8();
    }
    out.write_str(&text[shown_from..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_userinfo_query_values_and_fragments() {
        assert_eq!(url("http://127.0.0.1:1/mcp"), "http://127.0.0.1:1/mcp");
        assert_eq!(
            url("http://u:p@127.0.0.1:1/mcp?api_key=SECRET&x&=y"),
            "http://***@127.0.0.1:1/mcp?api_key=***&***&=***"
        );
        assert_eq!(url("https://h/?"), "https://h/?");
        assert_eq!(url("https://h#"), "https://h#");
        assert_eq!(url("postgres://app:pw@db/x"), "postgres://***@db/x");
        assert_eq!(url("not a url ?a=b"), "not a url ?a=b");
        // An `@` in the path is not userinfo.
        assert_eq!(url("https://h/a@b"), "https://h/a@b");
    }

    #[test]
    fn urls_inside_text_are_found_and_masked() {
        let text = r#"Http(reqwest::Error { url: "http://127.0.0.1:1/mcp?api_key=SECRETVALUE", source: x }) and (https://a:b@h/p?q=1)"#;
        let out = urls_in_text(text);
        assert!(!out.contains("SECRETVALUE"), "{out}");
        assert!(!out.contains("a:b"), "{out}");
        assert!(out.contains("url: \"http://127.0.0.1:1/mcp?api_key=***\""));
        assert!(out.contains("(https://***@h/p?q=***)"), "{out}");
        assert_eq!(urls_in_text("no urls :// here"), "no urls :// here");
        assert!(matches!(urls_in_text("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn invisible_characters_are_written_out() {
        let forged =
            "boom\n2026-01-01T00:00:00Z ERROR forged\r\u{1b}[31m\u{85}\u{202e}\u{2066}\u{200b}";
        let shown = visible(forged);
        assert_eq!(
            shown,
            "boom\\n2026-01-01T00:00:00Z ERROR forged\\r\\u{1b}[31m\\u{85}\\u{202e}\\u{2066}\\u{200b}"
        );
        assert!(!shown.chars().any(is_invisible));
        assert_eq!(visible("C:\\new"), "C:\\new");
        assert!(matches!(visible("plain é 日本"), Cow::Borrowed(_)));
    }

    #[test]
    fn written_out_as_a_stream_as_visible_shows_it() {
        let samples = [
            "",
            "plain",
            "\n",
            "boom\n2026 ERROR forged\r\u{1b}[31m\u{85}\u{202e}\u{2066}\u{200b}é\t",
            "\u{7f}\u{9f}\u{a0}\u{61c}\u{2028}\u{feff}日本 end",
            "C:\\new \"quoted\"",
        ];
        for sample in samples {
            let mut streamed = String::new();
            write_visible(&mut streamed, sample).expect("a String takes every write");
            assert_eq!(streamed, visible(sample), "{sample:?}");
        }
        // Every character up to U+3000, one at a time and in one run.
        let all: String = ('\0'..'\u{3000}').collect();
        let mut streamed = String::new();
        for c in all.chars() {
            write_visible(&mut streamed, c.encode_utf8(&mut [0; 4])).expect("written");
        }
        assert_eq!(streamed, visible(&all));
        assert!(!streamed.chars().any(is_invisible));
    }
}
