//! Where a stdio server's program is, found before it is spawned on the
//! `PATH` the child will have.
//!
//! A child gets an environment of its own (see the parent module), so for a
//! command given by name (`npx`, `uvx`, `sh`) the standard library cannot
//! hand the search to `posix_spawn`, which would search the gateway's
//! `PATH`: it forks the whole gateway and searches in the child. A fork
//! copies the gateway's page tables, and the gateway then takes a fault on
//! every page it writes afterwards; with thousands of tools and dozens of
//! servers that is a visible part of a start. Found here, the child is
//! spawned from its full path without a fork.
//!
//! The search is `execvp`'s: each entry of `PATH` in order, the first
//! executable regular file. Whatever this cannot decide the same way is
//! left to `execvp` in the forked child, as before: a relative or empty
//! entry (relative to the child's directory, not ours), or a name found
//! nowhere (the spawn then fails as it always did).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The search path of a child whose environment has no `PATH` (glibc's
/// `execvp` default).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// The full path of `program` on `path` (the child's `PATH`), or `None`
/// when it is a path already or the search is left to `execvp`.
pub(crate) fn locate(program: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    if program.is_empty() || program.contains('/') {
        return None;
    }
    let path = path.unwrap_or(OsStr::new(DEFAULT_PATH));
    for dir in std::env::split_paths(path) {
        if !dir.is_absolute() {
            return None;
        }
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Some(candidate);
        }
    }
    None
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(_path: &Path) -> bool {
    false
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tempdir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"))
    }

    fn file(dir: &Path, name: &str, mode: u32) {
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn the_first_executable_on_the_childs_path_as_execvp_finds_it() {
        let (a_dir, b_dir) = (tempdir(), tempdir());
        let (a, b) = (a_dir.path().to_path_buf(), b_dir.path().to_path_buf());
        file(&a, "tool", 0o644);
        file(&b, "tool", 0o755);
        std::fs::create_dir(a.join("dir")).unwrap_or_else(|e| panic!("{e}"));
        let path = std::env::join_paths([&a, &b]).unwrap_or_else(|e| panic!("{e}"));
        // Not executable in the first directory: the second one's.
        assert_eq!(locate("tool", Some(&path)), Some(b.join("tool")));
        // A directory is not a program.
        assert_eq!(locate("dir", Some(&path)), None);
        assert_eq!(locate("missing", Some(&path)), None);
        // A path is spawned as given.
        assert_eq!(locate("./tool", Some(&path)), None);
        assert_eq!(locate(&b.join("tool").to_string_lossy(), Some(&path)), None);
        // A relative or empty entry before it: left to execvp in the child.
        for relative in ["bin", ""] {
            let path =
                std::env::join_paths([Path::new(relative), &b]).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(locate("tool", Some(&path)), None, "{relative:?}");
        }
        // After it: found first.
        let path = std::env::join_paths([&b, Path::new("bin")]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(locate("tool", Some(&path)), Some(b.join("tool")));
    }

    #[test]
    fn without_a_path_the_default_one_is_searched() {
        assert_eq!(locate("sh", None), Some(PathBuf::from("/bin/sh")));
    }
}
