//! Containment: a path named by a manifest must stay inside its directory.
//!
//! Checked twice: lexically (so `../x` is refused
//! before the filesystem is touched) and after resolving symlinks (so a link
//! inside the directory pointing outside it is refused too). A symlink that
//! stays inside is fine.

use std::io;
use std::path::{Component, Path, PathBuf};

/// The diagnostic rule name a containment failure carries in its message.
pub const PATH_ESCAPES_PLUGIN_ROOT: &str = "path-escapes-plugin-root";

/// Why a path was refused.
#[derive(Debug)]
pub(crate) enum Escape {
    /// Absolute, or `..` climbs out of the root.
    Lexical,
    /// Inside lexically, but resolves (through a symlink) outside.
    Symlink,
    /// The path does not exist (or cannot be resolved).
    Missing(io::Error),
}

/// Joins `relative` to `root` and normalises `.` and `..` without touching
/// the filesystem; `None` when the result is not under `root`.
pub(crate) fn lexical_join(root: &Path, relative: &str) -> Option<PathBuf> {
    let relative = Path::new(relative);
    let mut parts: Vec<Component<'_>> = Vec::new();
    for component in relative.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                // Popping past the root is an escape, not a no-op.
                parts.pop()?;
            }
            Component::Normal(_) => parts.push(component),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    let mut joined = root.to_path_buf();
    for part in parts {
        joined.push(part);
    }
    Some(joined)
}

/// Resolves `relative` inside `root`, checking containment lexically and
/// after following symlinks. Answers the resolved (canonical) path.
pub(crate) fn resolve_inside(root: &Path, relative: &str) -> Result<PathBuf, Escape> {
    let joined = lexical_join(root, relative).ok_or(Escape::Lexical)?;
    let real_root = root.canonicalize().map_err(Escape::Missing)?;
    let real = joined.canonicalize().map_err(Escape::Missing)?;
    if real.starts_with(&real_root) {
        Ok(real)
    } else {
        Err(Escape::Symlink)
    }
}

impl Escape {
    /// A reason for an error message; names the rule for escapes.
    pub(crate) fn reason(&self) -> Option<String> {
        match self {
            Escape::Lexical => Some(format!(
                "{PATH_ESCAPES_PLUGIN_ROOT}: the path leaves the plugin directory"
            )),
            Escape::Symlink => Some(format!(
                "{PATH_ESCAPES_PLUGIN_ROOT}: the path resolves outside the plugin directory through a symlink"
            )),
            Escape::Missing(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_normalisation_pops_and_refuses_climbing_out() {
        let root = Path::new("/p");
        assert_eq!(lexical_join(root, "./a/../b"), Some(PathBuf::from("/p/b")));
        assert_eq!(lexical_join(root, "a/./b"), Some(PathBuf::from("/p/a/b")));
        assert_eq!(lexical_join(root, "../x"), None);
        assert_eq!(lexical_join(root, "a/../../x"), None);
        assert_eq!(lexical_join(root, "/etc/passwd"), None);
    }
}
