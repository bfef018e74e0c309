//! A line diff for people: what `drift` and `retrust` show an operator
//! between a tool's trusted definition and its current one.
//!
//! The texts are small (a description, a pretty-printed schema), so a plain
//! longest-common-subsequence table is enough and keeps the binary free of a
//! diff dependency. Common leading and trailing lines are trimmed before the
//! table is built, and a change too large for the table (more than
//! [`MAX_CELLS`] cells) degrades to "every old line removed, every new line
//! added", which is still a correct diff, just not a minimal one.
//!
//! Rendering follows the unified-diff habit operators know: `-` for a line
//! only in the trusted text, `+` for a line only in the current one, two
//! spaces for context; long unchanged runs are folded into one
//! `… N unchanged lines` line. Colour is the caller's choice ([`Style`]).
//!
//! The texts come from upstream servers, which are not trusted: a
//! description carrying terminal escapes could erase or recolour the very
//! line that shows it, and bidirectional overrides could reorder what is
//! read. Rendered lines are made inert first ([`inert`]).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Above this many table cells (old lines × new lines, after trimming the
/// common ends), the diff is not minimised: a 4 000 × 4 000-line schema
/// rewrite would otherwise allocate 16 M cells.
pub const MAX_CELLS: usize = 4_000_000;

/// Lines of unchanged context kept around each change.
pub const CONTEXT: usize = 3;

/// One line of a diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// In both texts.
    Same(&'a str),
    /// Only in the old (trusted) text.
    Removed(&'a str),
    /// Only in the new (current) text.
    Added(&'a str),
}

/// How rendered lines are decorated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Plain text: pipes, files, tests.
    Plain,
    /// ANSI colours: removed lines red, added lines green, folds dim.
    Color,
}

impl Style {
    /// Colour when `terminal` is true and the user has not asked for none
    /// (the `NO_COLOR` convention: any non-empty value turns colour off).
    pub fn for_terminal(terminal: bool) -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        if terminal && !no_color {
            Style::Color
        } else {
            Style::Plain
        }
    }

    /// `text` wrapped in the ANSI code `code` when colouring.
    pub fn paint(self, code: &str, text: &str) -> String {
        match self {
            Style::Plain => text.to_owned(),
            Style::Color => format!("\x1b[{code}m{text}\x1b[0m"),
        }
    }
}

/// The line diff of `old` and `new`: every line of both, in order, each
/// marked as kept, removed or added (`a b c` against `a x c` gives
/// `a`, `-b`, `+x`, `c`).
pub fn diff_lines<'a>(old: &'a str, new: &'a str) -> Vec<Line<'a>> {
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (old_mid, new_mid) = (
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
    );
    let mut out: Vec<Line<'a>> = Vec::with_capacity(old.len() + new.len());
    out.extend(old[..prefix].iter().map(|l| Line::Same(l)));
    if old_mid.len().saturating_mul(new_mid.len()) > MAX_CELLS {
        out.extend(old_mid.iter().map(|l| Line::Removed(l)));
        out.extend(new_mid.iter().map(|l| Line::Added(l)));
    } else {
        lcs_diff(old_mid, new_mid, &mut out);
    }
    out.extend(old[old.len() - suffix..].iter().map(|l| Line::Same(l)));
    out
}

/// The minimal diff of two line slices by a longest-common-subsequence
/// table, appended to `out`. Removals come before additions within a
/// change, as unified diffs print them.
fn lcs_diff<'a>(old: &[&'a str], new: &[&'a str], out: &mut Vec<Line<'a>>) {
    let (n, m) = (old.len(), new.len());
    // table[i][j]: the LCS length of old[i..] and new[j..], row-major.
    let width = m + 1;
    let mut table = vec![0u32; (n + 1) * width];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            table[i * width + j] = if old[i] == new[j] {
                table[(i + 1) * width + j + 1] + 1
            } else {
                table[(i + 1) * width + j].max(table[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if old[i] == new[j] {
            out.push(Line::Same(old[i]));
            i += 1;
            j += 1;
        } else if table[(i + 1) * width + j] >= table[i * width + j + 1] {
            out.push(Line::Removed(old[i]));
            i += 1;
        } else {
            out.push(Line::Added(new[j]));
            j += 1;
        }
    }
    out.extend(old[i..].iter().map(|l| Line::Removed(l)));
    out.extend(new[j..].iter().map(|l| Line::Added(l)));
}

/// `text` with every control character but tab, and every bidirectional
/// formatting character, written as a visible `\u{…}` escape, so that what
/// a terminal shows is what the text says.
pub fn inert(text: &str) -> Cow<'_, str> {
    let hostile = |c: char| {
        (c.is_control() && c != '\t')
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(hostile) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hostile(c) {
            let _ = write!(out, "{}", c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Renders a diff, each line prefixed by `indent`: `-`/`+`/two spaces, and
/// unchanged runs longer than twice [`CONTEXT`] folded into one line.
pub fn render(lines: &[Line<'_>], indent: &str, style: Style) -> String {
    let mut out = String::new();
    // Which unchanged lines are near enough a change to be shown.
    let changed: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| !matches!(l, Line::Same(_)))
        .map(|(i, _)| i)
        .collect();
    let near = |i: usize| {
        // `changed` is sorted: find the closest change on either side.
        let at = changed.partition_point(|&c| c < i);
        let after = changed.get(at).is_some_and(|&c| c - i <= CONTEXT);
        let before = at > 0 && i - changed[at - 1] <= CONTEXT;
        after || before
    };
    let mut folded = 0usize;
    let flush = |out: &mut String, folded: &mut usize| {
        if *folded > 0 {
            let noun = if *folded == 1 { "line" } else { "lines" };
            let text = format!("  … {folded} unchanged {noun}");
            let _ = writeln!(out, "{indent}{}", style.paint("2", &text));
            *folded = 0;
        }
    };
    for (i, line) in lines.iter().enumerate() {
        match line {
            Line::Same(_) if !near(i) => {
                folded += 1;
                continue;
            }
            _ => flush(&mut out, &mut folded),
        }
        match line {
            Line::Same(text) => {
                let _ = writeln!(out, "{indent}  {}", inert(text));
            }
            Line::Removed(text) => {
                let shown = format!("- {}", inert(text));
                let _ = writeln!(out, "{indent}{}", style.paint("31", &shown));
            }
            Line::Added(text) => {
                let shown = format!("+ {}", inert(text));
                let _ = writeln!(out, "{indent}{}", style.paint("32", &shown));
            }
        }
    }
    flush(&mut out, &mut folded);
    out
}

#[cfg(test)]
mod tests {
    use super::Line::{Added, Removed, Same};
    use super::*;

    #[test]
    fn equal_texts_are_all_context() {
        assert_eq!(diff_lines("a\nb", "a\nb"), [Same("a"), Same("b")]);
    }

    #[test]
    fn a_changed_line_is_removed_then_added() {
        assert_eq!(
            diff_lines("a\nb\nc", "a\nx\nc"),
            [Same("a"), Removed("b"), Added("x"), Same("c")]
        );
    }

    #[test]
    fn insertions_and_deletions_keep_the_common_subsequence() {
        // The LCS of the two is a, c, e: b is dropped, d and f are added.
        assert_eq!(
            diff_lines("a\nb\nc\ne", "a\nc\nd\ne\nf"),
            [
                Same("a"),
                Removed("b"),
                Same("c"),
                Added("d"),
                Same("e"),
                Added("f")
            ]
        );
        assert_eq!(diff_lines("", "x"), [Added("x")]);
        assert_eq!(diff_lines("x", ""), [Removed("x")]);
    }

    #[test]
    fn every_line_of_both_texts_survives_in_order() {
        let old = "p\nq\nr\ns\nt\nq\nr";
        let new = "q\nr\np\nt\nr\nq\nu";
        let lines = diff_lines(old, new);
        let olds: Vec<&str> = lines
            .iter()
            .filter_map(|l| match l {
                Same(t) | Removed(t) => Some(*t),
                Added(_) => None,
            })
            .collect();
        let news: Vec<&str> = lines
            .iter()
            .filter_map(|l| match l {
                Same(t) | Added(t) => Some(*t),
                Removed(_) => None,
            })
            .collect();
        assert_eq!(olds, old.lines().collect::<Vec<_>>());
        assert_eq!(news, new.lines().collect::<Vec<_>>());
        // The LCS of these two has length 4 (q r t r, or q r r q…).
        assert_eq!(lines.iter().filter(|l| matches!(l, Same(_))).count(), 4);
    }

    #[test]
    fn terminal_escapes_and_bidi_overrides_are_shown_not_obeyed() {
        assert_eq!(inert("plain\ttext"), "plain\ttext");
        assert_eq!(inert("a\x1b[2Kb\rc"), "a\\u{1b}[2Kb\\u{d}c");
        assert_eq!(inert("x\u{202e}y"), "x\\u{202e}y");
        let shown = render(&diff_lines("ok", "evil\x1b[1A"), "", Style::Plain);
        assert!(!shown.contains('\x1b'), "{shown:?}");
    }

    #[test]
    fn a_huge_rewrite_degrades_to_remove_all_add_all() {
        let old: String = (0..2_100).map(|i| format!("o{i}\n")).collect();
        let new: String = (0..2_100).map(|i| format!("n{i}\n")).collect();
        let lines = diff_lines(&old, &new);
        assert_eq!(lines.len(), 4_200);
        assert!(matches!(lines[0], Removed("o0")));
        assert!(matches!(lines[2_100], Added("n0")));
    }

    #[test]
    fn rendering_marks_lines_and_folds_long_unchanged_runs() {
        let old: String = (0..20).map(|i| format!("l{i}\n")).collect();
        let new = old.replace("l10\n", "L10\n");
        let shown = render(&diff_lines(&old, &new), "  ", Style::Plain);
        assert_eq!(
            shown,
            "    … 7 unchanged lines\n    l7\n    l8\n    l9\n  - l10\n  + L10\n    l11\n    l12\n    l13\n    … 6 unchanged lines\n"
        );
        let coloured = render(&diff_lines("a", "b"), "", Style::Color);
        assert_eq!(coloured, "\x1b[31m- a\x1b[0m\n\x1b[32m+ b\x1b[0m\n");
    }
}
