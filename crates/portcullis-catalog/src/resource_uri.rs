//! Resource URIs qualified per upstream, reversibly.
//!
//! Tools get `server__tool` names; resources are addressed by URI, and two
//! servers may well publish the same one (`file:///README.md`). When names
//! are prefixed (the same [`Prefix`](crate::naming::Prefix) rule as tools:
//! `auto` prefixes only with more than one source), every URI a client sees
//! is wrapped as
//!
//! ```text
//! portcullis://<server>/<the upstream's URI, verbatim>
//! ```
//!
//! and unwrapped on the way back by splitting at the first `/` after the
//! server name. The upstream URI is kept verbatim, not percent-encoded, for
//! two reasons: unwrapping is then a plain string split that can never
//! decode something the upstream did not write, and a resource *template*
//! wrapped the same way still expands correctly — a client fills
//! `portcullis://docs/test://item/{id}` into `portcullis://docs/test://item/7`,
//! which unwraps to exactly what the upstream's own template would have
//! produced. The result is a valid URI (the upstream URI becomes path,
//! query and fragment; `:` and `//` are legal in a path), and server names
//! are legal tool-name characters (`[A-Za-z0-9_-]`), so the split is
//! unambiguous.
//!
//! When names are not prefixed, URIs pass unchanged and are routed back by
//! what each upstream listed (see [`crate::passthrough`]).

/// The scheme of a wrapped URI, with its `://`.
pub const WRAPPED_PREFIX: &str = "portcullis://";

/// `uri` of `server`, as a client sees it when URIs are qualified.
///
/// ```
/// use portcullis_catalog::resource_uri::wrap_uri;
///
/// assert_eq!(wrap_uri("docs", "test://static-text"), "portcullis://docs/test://static-text");
/// ```
pub fn wrap_uri(server: &str, uri: &str) -> String {
    format!("{WRAPPED_PREFIX}{server}/{uri}")
}

/// The server and upstream URI a wrapped URI stands for; `None` when `uri`
/// is not a wrapped URI (another scheme, or no server part).
///
/// ```
/// use portcullis_catalog::resource_uri::{unwrap_uri, wrap_uri};
///
/// let wrapped = wrap_uri("a", "file:///tmp/x?y#z");
/// assert_eq!(unwrap_uri(&wrapped), Some(("a", "file:///tmp/x?y#z")));
/// assert_eq!(unwrap_uri("file:///tmp/x"), None);
/// assert_eq!(unwrap_uri("portcullis:///x"), None);
/// ```
pub fn unwrap_uri(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix(WRAPPED_PREFIX)?;
    let (server, original) = rest.split_once('/')?;
    (!server.is_empty()).then_some((server, original))
}

/// The literal text of a URI template before its first expression: every
/// URI the template can produce starts with it (`test://item/{id}` →
/// `test://item/`).
///
/// ```
/// use portcullis_catalog::resource_uri::template_prefix;
///
/// assert_eq!(template_prefix("test://template/{id}/data"), "test://template/");
/// assert_eq!(template_prefix("plain://x"), "plain://x");
/// ```
pub fn template_prefix(template: &str) -> &str {
    match template.find('{') {
        Some(at) => &template[..at],
        None => template,
    }
}

/// Whether `uri` can be an expansion of `template`: its literal parts
/// appear in order, the first at the start and the last at the end. A
/// cheap, conservative match for routing (it does not check what the
/// expressions expanded to).
///
/// ```
/// use portcullis_catalog::resource_uri::matches_template;
///
/// assert!(matches_template("test://template/{id}/data", "test://template/123/data"));
/// assert!(!matches_template("test://template/{id}/data", "test://template/123/meta"));
/// assert!(!matches_template("test://other/{id}", "test://template/1"));
/// ```
pub fn matches_template(template: &str, uri: &str) -> bool {
    if !template.contains('{') {
        return template == uri;
    }
    let literals = literal_parts(template);
    let Some((first, rest)) = literals.split_first() else {
        return true;
    };
    let Some(mut remaining) = uri.strip_prefix(first) else {
        return false;
    };
    let ends_in_literal = !template.ends_with('}');
    for (i, literal) in rest.iter().enumerate() {
        if i + 1 == rest.len() && ends_in_literal {
            return remaining.ends_with(literal);
        }
        match remaining.find(literal) {
            Some(at) => remaining = &remaining[at + literal.len()..],
            None => return false,
        }
    }
    true
}

/// The literal pieces of a template, in order (empty pieces dropped, except
/// that the first piece is kept even when empty so it anchors the start).
fn literal_parts(template: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = template;
    loop {
        match rest.find('{') {
            Some(open) => {
                let literal = &rest[..open];
                if parts.is_empty() || !literal.is_empty() {
                    parts.push(literal);
                }
                match rest[open..].find('}') {
                    Some(close) => rest = &rest[open + close + 1..],
                    // An unclosed expression: nothing after it is literal.
                    None => return parts,
                }
            }
            None => {
                if parts.is_empty() || !rest.is_empty() {
                    parts.push(rest);
                }
                return parts;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_round_trips_every_shape_of_uri() {
        for uri in [
            "test://static-text",
            "file:///srv/u/a b.txt",
            "https://example.com/x?q=1&r=2#frag",
            "portcullis://other/nested",
            "urn:isbn:0451450523",
            "",
        ] {
            for server in ["a", "docs_2", "x-y"] {
                let wrapped = wrap_uri(server, uri);
                assert_eq!(unwrap_uri(&wrapped), Some((server, uri)), "{wrapped}");
            }
        }
    }

    #[test]
    fn a_wrapped_template_expands_to_a_wrapped_expansion() {
        let template = wrap_uri("docs", "test://template/{id}/data");
        let expanded = template.replace("{id}", "123");
        assert_eq!(
            unwrap_uri(&expanded),
            Some(("docs", "test://template/123/data"))
        );
    }

    #[test]
    fn template_matching() {
        assert!(matches_template("a://{x}", "a://anything/at/all"));
        assert!(matches_template("a://{x}/b/{y}", "a://1/b/2"));
        assert!(!matches_template("a://{x}/b/{y}", "a://1/c/2"));
        assert!(matches_template("{x}", "whatever"));
        assert!(matches_template("a://fixed", "a://fixed"));
        assert!(!matches_template("a://fixed", "a://fixed/more"));
        assert!(!matches_template("a://{x}.json", "a://1.txt"));
        assert!(matches_template("a://{x}.json", "a://1.json"));
    }
}
