//! Qualified names: `server__tool`, always legal for model providers.
//!
//! Providers require tool names to match `^[a-zA-Z0-9_-]{1,64}$` and reject
//! the whole request otherwise, while MCP barely constrains what a server
//! publishes. A legal name passes verbatim (so policy rules keep matching what
//! the operator wrote). Any other name has each illegal UTF-16 code unit
//! replaced by `_`, is clamped, and gets `_` + a base-36 FNV-1a-32 hash of the
//! *original* appended, so two different originals cannot collide and the
//! result matches other MCP connectors using this rule byte for byte.

use std::borrow::Cow;

/// Separator between server and tool in a qualified name.
pub const QUALIFIED_SEPARATOR: &str = "__";

/// Longest name a model provider accepts.
pub const MAX_NAME_LEN: usize = 64;

const FNV_OFFSET: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

/// FNV-1a, 32 bits, over the UTF-16 code units of `text` (the way a
/// JavaScript implementation hashes its strings, so names agree with one).
///
/// ```
/// assert_eq!(portcullis_catalog::naming::fnv1a32(""), 0x811c9dc5);
/// ```
pub fn fnv1a32(text: &str) -> u32 {
    text.encode_utf16().fold(FNV_OFFSET, |hash, unit| {
        (hash ^ u32::from(unit)).wrapping_mul(FNV_PRIME)
    })
}

/// `n` in base 36, lowercase, unpadded (JavaScript's `n.toString(36)`).
pub fn base36(mut n: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n == 0 {
        return "0".to_owned();
    }
    let mut out = Vec::with_capacity(7);
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    out.into_iter().map(char::from).collect()
}

/// The short deterministic hash used in name suffixes: base-36 FNV-1a-32.
///
/// ```
/// assert_eq!(portcullis_catalog::naming::short_hash(""), "ztntfp");
/// ```
pub fn short_hash(text: &str) -> String {
    base36(fnv1a32(text))
}

/// True when `name` matches `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_legal_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_LEN && name.bytes().all(is_legal_byte)
}

fn is_legal_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// `raw` itself when legal, else its sanitised form with a hash suffix.
///
/// ```
/// use portcullis_catalog::naming::legal_name;
///
/// assert_eq!(legal_name("srv__search"), "srv__search");
/// assert_eq!(legal_name("srv__search.docs"), "srv__search_docs_100hb2x");
/// ```
pub fn legal_name(raw: &str) -> Cow<'_, str> {
    if is_legal_name(raw) {
        return Cow::Borrowed(raw);
    }
    let suffix = format!("_{}", short_hash(raw));
    let keep = MAX_NAME_LEN - suffix.len();
    let mut out = String::with_capacity(MAX_NAME_LEN);
    for ch in raw.chars() {
        if out.len() >= keep {
            break;
        }
        if ch.is_ascii() && is_legal_byte(ch as u8) {
            out.push(ch);
        } else {
            // One `_` per UTF-16 code unit: a non-BMP character becomes `__`.
            for _ in 0..ch.len_utf16() {
                out.push('_');
            }
        }
    }
    out.truncate(keep);
    out.push_str(&suffix);
    Cow::Owned(out)
}

/// The qualified name of `tool` on `server`: `server__tool`, made legal.
///
/// ```
/// use portcullis_catalog::naming::qualified_name;
///
/// assert_eq!(qualified_name("payments", "create_invoice"), "payments__create_invoice");
/// assert_eq!(qualified_name("srv", "a.b.c"), "srv__a_b_c_1j0a3e0");
/// ```
pub fn qualified_name(server: &str, tool: &str) -> String {
    let mut joined = String::with_capacity(server.len() + QUALIFIED_SEPARATOR.len() + tool.len());
    joined.push_str(server);
    joined.push_str(QUALIFIED_SEPARATOR);
    joined.push_str(tool);
    // A legal name is the joined string itself: allocated once, not copied.
    match legal_name(&joined) {
        Cow::Borrowed(_) => joined,
        Cow::Owned(legal) => legal,
    }
}

/// Whether tool names carry their server's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Prefix {
    /// Prefix only when more than one source contributes tools.
    #[default]
    Auto,
    /// Always `server__tool`.
    Always,
    /// Never: the tool's own name, made legal.
    Never,
}

impl Prefix {
    /// Whether names are prefixed when `source_count` sources contribute.
    pub fn applies(self, source_count: usize) -> bool {
        match self {
            Prefix::Auto => source_count > 1,
            Prefix::Always => true,
            Prefix::Never => false,
        }
    }

    /// This mode for a toolset of `configured` sources: `Auto` becomes
    /// `Always` or `Never` by the number configured, so a name never depends
    /// on which of them happen to be connected (a source that is down keeps
    /// its siblings' names, and nothing renames when it joins). Name-based
    /// policy, approval and exposure lists keep matching.
    ///
    /// ```
    /// use portcullis_catalog::naming::Prefix;
    /// assert_eq!(Prefix::Auto.for_sources(2), Prefix::Always);
    /// assert_eq!(Prefix::Auto.for_sources(1), Prefix::Never);
    /// assert_eq!(Prefix::Never.for_sources(5), Prefix::Never);
    /// ```
    pub fn for_sources(self, configured: usize) -> Prefix {
        match self {
            Prefix::Auto if configured > 1 => Prefix::Always,
            Prefix::Auto => Prefix::Never,
            fixed => fixed,
        }
    }

    /// The projected name of `tool` on `server` under this mode.
    pub fn project(self, source_count: usize, server: &str, tool: &str) -> String {
        if self.applies(source_count) {
            qualified_name(server, tool)
        } else {
            legal_name(tool).into_owned()
        }
    }
}

impl std::str::FromStr for Prefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Prefix::Auto),
            "always" => Ok(Prefix::Always),
            "never" => Ok(Prefix::Never),
            other => Err(format!(
                "prefix must be \"auto\", \"always\" or \"never\", not {other:?}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Fixed vectors: a change here renames tools operators already use.
    #[test]
    fn qualified_name_test_vectors() {
        assert_eq!(
            qualified_name("srv", "search.docs"),
            "srv__search_docs_100hb2x"
        );
        assert_eq!(
            qualified_name("srv", "busca_café"),
            "srv__busca_caf__jv1652"
        );
        assert_eq!(qualified_name("srv", "a.b.c"), "srv__a_b_c_1j0a3e0");
        assert_eq!(qualified_name("srv", "a😀"), "srv__a___1vnap92");
        let long = format!("find_{}", "x".repeat(90));
        let projected = qualified_name("srv", &long);
        assert_eq!(projected.len(), 64);
        assert!(projected.ends_with("_1q1ii5g"), "{projected}");
        assert!(projected.starts_with("srv__find_xxx"));
        assert_eq!(short_hash(""), "ztntfp");
    }

    #[test]
    fn legal_names_pass_verbatim() {
        assert_eq!(qualified_name("my_server", "do_it"), "my_server__do_it");
        assert_eq!(
            qualified_name("bank", "list_transactions"),
            "bank__list_transactions"
        );
        assert_eq!(qualified_name("srv", "constructor"), "srv__constructor");
        // Exactly 64 legal characters stays verbatim; 65 does not.
        let tool = "t".repeat(64 - 5);
        assert_eq!(qualified_name("srv", &tool), format!("srv__{tool}"));
        let tool = "t".repeat(65 - 5);
        let q = qualified_name("srv", &tool);
        assert_eq!(q.len(), 64);
        assert_ne!(q, format!("srv__{tool}"));
    }

    #[test]
    fn hostile_names_become_legal_and_distinct() {
        let hostile = [
            String::new(),
            "x".repeat(10_000),
            "😀😀😀".to_owned(),
            "...".to_owned(),
            "..,".to_owned(),
            " ".to_owned(),
            "名前".to_owned(),
            "\u{0}".to_owned(),
            "a/b".to_owned(),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for tool in &hostile {
            let q = qualified_name("srv", tool);
            assert!(is_legal_name(&q), "{q:?} from {tool:?}");
            assert!(seen.insert(q.clone()), "{q} repeated");
        }
        assert_eq!(legal_name(""), "_ztntfp");
    }

    #[test]
    fn base36_matches_javascript() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
        assert_eq!(base36(u32::MAX), "1z141z3");
    }

    #[test]
    fn prefix_modes() {
        assert_eq!(Prefix::Auto.project(1, "docs", "search"), "search");
        assert_eq!(Prefix::Auto.project(2, "docs", "search"), "docs__search");
        assert_eq!(Prefix::Always.project(1, "docs", "search"), "docs__search");
        assert_eq!(
            Prefix::Never.project(3, "docs", "search.v2"),
            legal_name("search.v2")
        );
        assert_eq!("always".parse::<Prefix>(), Ok(Prefix::Always));
        assert!("sometimes".parse::<Prefix>().is_err());
    }
}
