//! How a text reads to a model looking for the frame's closing tag, and
//! the two repairs that keep tool output inside its frame.
//!
//! A model is a forgiving reader: `</untrusted-tool-output>` written with a
//! fullwidth solidus, a zero-width space inside the name, a Cyrillic `о`,
//! an en dash for a hyphen or a vertical tab after the `<` still reads as
//! the end of the frame. So the text is matched on a folded copy, never
//! changed by the folding itself:
//!
//! - format characters (zero-width spaces and joiners, bidi controls, soft
//!   hyphens, tag characters), combining marks, unassigned and private-use
//!   code points and the other default-ignorable fillers are skipped;
//! - whitespace, control characters and U+FFFD are separators;
//! - everything else is taken apart by compatibility decomposition (NFKD:
//!   fullwidth and small forms, mathematical and enclosed letters,
//!   superscripts), then dashes and hyphens read as `-`, angle-bracket and
//!   solidus lookalikes as `<`, `>` and `/`, common Cyrillic, Greek and
//!   small-capital lookalikes of the tag's letters as those letters, and
//!   ASCII letters in lower case.
//!
//! A closing tag is then `<`, separators, `/`, and the letters of
//! `untrustedtooloutput` in order, with separators, hyphens and underscores
//! allowed anywhere between them. Each one found is escaped by a `\` before
//! its solidus, which a folded reading never skips.

use std::borrow::Cow;

use unicode_general_category::{GeneralCategory, get_general_category};
use unicode_normalization::char::{decompose_compatible, is_combining_mark, is_public_assigned};

/// The tag's letters as a closing tag is matched: hyphens are fillers.
const TAG_LETTERS: &str = "untrustedtooloutput";

/// One character of the folded reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Folded {
    /// Whitespace, a control character or U+FFFD.
    Separator,
    /// A character as it reads (ASCII letters in lower case).
    Char(char),
}

/// Calls `emit` with the folded reading of `c` (nothing when `c` is
/// skipped, more than one for a decomposition like `㎏`).
pub(crate) fn fold(c: char, emit: &mut impl FnMut(Folded)) {
    if c.is_ascii() {
        emit(fold_ascii(c));
        return;
    }
    if skipped(c) {
        return;
    }
    if c.is_whitespace() || c.is_control() || c == char::REPLACEMENT_CHARACTER {
        emit(Folded::Separator);
        return;
    }
    decompose_compatible(c, |part| {
        if part.is_ascii() {
            emit(fold_ascii(part));
        } else if part.is_whitespace() || part.is_control() {
            emit(Folded::Separator);
        } else if !skipped(part) {
            emit(Folded::Char(lookalike(part).unwrap_or(part)));
        }
    });
}

fn fold_ascii(c: char) -> Folded {
    if c.is_ascii_whitespace() || c.is_ascii_control() {
        Folded::Separator
    } else {
        Folded::Char(c.to_ascii_lowercase())
    }
}

/// Characters a reader does not see as characters of their own.
fn skipped(c: char) -> bool {
    if is_combining_mark(c) || !is_public_assigned(c) {
        return true;
    }
    // Hangul fillers and the Mongolian free variation selectors are
    // default-ignorable without being format characters.
    matches!(c, '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}')
        || get_general_category(c) == GeneralCategory::Format
}

/// The ASCII character `c` passes for, among the ones a closing tag is
/// made of (after compatibility decomposition).
fn lookalike(c: char) -> Option<char> {
    Some(match c {
        // Dashes and hyphens (the Unicode Dash property, and a few that
        // merely look like one).
        '\u{058A}'
        | '\u{05BE}'
        | '\u{1400}'
        | '\u{1806}'
        | '\u{2010}'..='\u{2015}'
        | '\u{2043}'
        | '\u{2053}'
        | '\u{207B}'
        | '\u{208B}'
        | '\u{2212}'
        | '\u{2796}'
        | '\u{23AF}'
        | '\u{2500}'
        | '\u{2501}'
        | '\u{2E17}'
        | '\u{2E1A}'
        | '\u{2E3A}'
        | '\u{2E3B}'
        | '\u{2E40}'
        | '\u{2E5D}'
        | '\u{301C}'
        | '\u{3030}'
        | '\u{30A0}'
        | '\u{30FC}'
        | '\u{FE31}'
        | '\u{FE32}'
        | '\u{02D7}'
        | '\u{10EAD}' => '-',
        // Less-than lookalikes.
        '\u{02C2}' | '\u{1438}' | '\u{2039}' | '\u{2329}' | '\u{276C}' | '\u{276E}'
        | '\u{27E8}' | '\u{2AA1}' | '\u{3008}' | '\u{300A}' | '\u{FE3F}' => '<',
        // Greater-than lookalikes.
        '\u{02C3}' | '\u{1433}' | '\u{203A}' | '\u{232A}' | '\u{276D}' | '\u{276F}'
        | '\u{27E9}' | '\u{2AA2}' | '\u{3009}' | '\u{300B}' | '\u{FE40}' => '>',
        // Solidus lookalikes.
        '\u{2044}' | '\u{2215}' | '\u{2571}' | '\u{27CB}' | '\u{29F8}' | '\u{1735}'
        | '\u{2CC6}' | '\u{3033}' | '\u{30CE}' | '\u{4E3F}' | '\u{2F03}' | '\u{1D10D}' => '/',
        // Letters of the tag name, from Cyrillic, Greek, Armenian and small
        // capitals.
        '\u{03C5}' | '\u{057D}' | '\u{1D1C}' | '\u{028B}' => 'u',
        '\u{0578}' | '\u{0274}' | '\u{039D}' => 'n',
        '\u{0442}' | '\u{0422}' | '\u{03C4}' | '\u{03A4}' | '\u{1D1B}' => 't',
        '\u{0433}' | '\u{0280}' | '\u{1D26}' | '\u{027E}' => 'r',
        '\u{0455}' | '\u{0405}' | '\u{A731}' => 's',
        '\u{0435}' | '\u{0415}' | '\u{0395}' | '\u{1D07}' | '\u{04BD}' | '\u{212E}' => 'e',
        '\u{0501}' | '\u{1D05}' => 'd',
        '\u{043E}' | '\u{041E}' | '\u{03BF}' | '\u{039F}' | '\u{0585}' | '\u{1D0F}'
        | '\u{2134}' => 'o',
        '\u{04CF}' | '\u{0399}' | '\u{0406}' | '\u{029F}' | '\u{01C0}' | '\u{2113}' => 'l',
        '\u{0440}' | '\u{0420}' | '\u{03C1}' | '\u{03A1}' | '\u{1D18}' => 'p',
        _ => return None,
    })
}

/// The folded reading of `text`: skipped characters dropped, separators as
/// one space each. What closing tags are matched on; public so tests can
/// look for one with a matcher of their own.
pub fn fold_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        fold(c, &mut |f| {
            out.push(match f {
                Folded::Separator => ' ',
                Folded::Char(c) => c,
            });
        });
    }
    out
}

/// Whether `c` can start a closing tag (some part of it folds to `<`).
fn opens(c: char) -> bool {
    if c.is_ascii() {
        return c == '<';
    }
    let mut found = false;
    fold(c, &mut |f| found |= f == Folded::Char('<'));
    found
}

/// Escapes every closing tag of the frame in `text`, lookalikes included
/// (see the module docs): a `\` goes before the character its solidus is
/// read from.
pub(crate) fn escape_closing_tags(text: &str) -> Cow<'_, str> {
    let mut edits: Vec<Edit> = Vec::new();
    let ascii = text.is_ascii();
    let mut from = 0;
    while from < text.len() {
        // ASCII text can only open at a `<`: find it without folding.
        let next = if ascii {
            text.as_bytes()[from..]
                .iter()
                .position(|&b| b == b'<')
                .map(|p| (from + p, '<'))
        } else {
            text[from..]
                .char_indices()
                .find(|&(_, c)| opens(c))
                .map(|(p, c)| (from + p, c))
        };
        let Some((at, c)) = next else { break };
        if let Some(edit) = closing_tag_at(text, at) {
            edits.push(edit);
        }
        from = at + c.len_utf8();
    }
    if edits.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + edits.len() * 3);
    let mut copied = 0;
    for edit in edits {
        match edit {
            Edit::Backslash(at) if at >= copied => {
                out.push_str(&text[copied..at]);
                out.push('\\');
                copied = at;
            }
            Edit::Replace(at, len) if at >= copied => {
                out.push_str(&text[copied..at]);
                out.push(char::REPLACEMENT_CHARACTER);
                copied = at + len;
            }
            // Already past it: an earlier edit covered this character.
            _ => {}
        }
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// One repair of a closing tag.
#[derive(Debug, Clone, Copy)]
enum Edit {
    /// A `\` inserted at this byte offset (before the solidus).
    Backslash(usize),
    /// The character at this offset (of this length) read as both `<` and
    /// `/`: replaced by U+FFFD, since no backslash fits inside it.
    Replace(usize, usize),
}

/// Whether a closing tag starts with the `<` read from the character at
/// byte `at`, and if so how to break it.
fn closing_tag_at(text: &str, at: usize) -> Option<Edit> {
    let mut items = FoldedFrom::new(text, at);
    // Up to and including the first `<` read from the opening character.
    loop {
        let (offset, folded) = items.next()?;
        if offset != at {
            return None;
        }
        if folded == Folded::Char('<') {
            break;
        }
    }
    let (slash, len) = loop {
        match items.next()? {
            (_, Folded::Separator) => {}
            (offset, Folded::Char('/')) => break (offset, items.len_at(offset)),
            _ => return None,
        }
    };
    let mut letters = TAG_LETTERS.chars().peekable();
    while let Some(&want) = letters.peek() {
        match items.next()? {
            (_, Folded::Char(c)) if c == want => {
                letters.next();
            }
            (_, Folded::Separator | Folded::Char('-' | '_')) => {}
            _ => return None,
        }
    }
    Some(if slash == at {
        Edit::Replace(at, len)
    } else {
        Edit::Backslash(slash)
    })
}

/// The folded reading of `text` from byte `at` on, each item with the byte
/// offset of the character it was read from.
struct FoldedFrom<'a> {
    text: &'a str,
    base: usize,
    chars: std::str::CharIndices<'a>,
    pending: std::collections::VecDeque<(usize, Folded)>,
}

impl<'a> FoldedFrom<'a> {
    fn new(text: &'a str, at: usize) -> Self {
        FoldedFrom {
            text,
            base: at,
            chars: text[at..].char_indices(),
            pending: std::collections::VecDeque::new(),
        }
    }

    /// The length in bytes of the character at `offset`.
    fn len_at(&self, offset: usize) -> usize {
        self.text[offset..].chars().next().map_or(0, char::len_utf8)
    }
}

impl Iterator for FoldedFrom<'_> {
    type Item = (usize, Folded);

    fn next(&mut self) -> Option<Self::Item> {
        while self.pending.is_empty() {
            let (offset, c) = self.chars.next()?;
            let offset = self.base + offset;
            let pending = &mut self.pending;
            fold(c, &mut |f| pending.push_back((offset, f)));
        }
        self.pending.pop_front()
    }
}
