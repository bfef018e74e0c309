//! A private key file: 32 secret bytes as one line of base64, created once
//! (mode 0600, in a 0700 directory) and reused across restarts. The
//! gateway's signing key and the key that seals OAuth grants are such
//! files.
//!
//! A file others can read is refused rather than used: a key that leaked
//! once is not a key. A new file is written under a temporary name and
//! hard-linked into place, so two processes starting together agree on one
//! key and nobody reads a half-written one.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use thiserror::Error;

use crate::files::read_regular_to_string;

/// Why a key could not be loaded, created or written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Filesystem trouble.
    #[error("key file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file does not hold a key.
    #[error("key file {path}: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The private key is readable by others.
    #[error("key file {path} is accessible by group or others (mode {mode:o}); chmod 600 it")]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The OS random source failed.
    #[error("no randomness for a new key: {0}")]
    Random(String),
}

/// Far more than a key file holds; anything bigger is not one.
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// The 32 bytes in `<dir>/<name>`, creating the directory (0700) and a
/// random key (0600) on first use. A key file others can read is refused.
pub fn load_or_create(dir: &Path, name: &str) -> Result<[u8; 32], KeyError> {
    let path = dir.join(name);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| KeyError::Io { path, source }
    };
    match read(&path) {
        Ok(text) => return parse_private(&path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&path)(e)),
    }
    create_private_dir(dir).map_err(io(dir))?;
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| KeyError::Random(e.to_string()))?;
    let encoded = format!("{}\n", STANDARD.encode(key));
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = write_private(&tmp, encoded.as_bytes());
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, &path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        // Another process won the race: its key is the key.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let text = read(&path).map_err(io(&path))?;
            parse_private(&path, &text)
        }
        Err(e) => Err(io(&path)(e)),
    }
}

/// A key file's text: a regular file only (a FIFO would block the read),
/// and small.
pub(crate) fn read(path: &Path) -> std::io::Result<String> {
    read_regular_to_string(path, MAX_KEY_FILE_BYTES).map_err(Into::into)
}

fn parse_private(path: &Path, text: &str) -> Result<[u8; 32], KeyError> {
    check_private_mode(path)?;
    let malformed = |reason: String| KeyError::Malformed {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|e| malformed(format!("not base64: {e}")))?;
    bytes
        .try_into()
        .map_err(|_| malformed("not a 32-byte key".into()))
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(unix)]
fn check_private_mode(path: &Path) -> Result<(), KeyError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::TooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private_mode(_path: &Path) -> Result<(), KeyError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_created_once_private_and_refused_once_readable() {
        let dir = tempfile::TempDir::new().unwrap();
        let data = dir.path().join("data");
        let first = load_or_create(&data, "k.key").unwrap();
        assert_eq!(load_or_create(&data, "k.key").unwrap(), first);
        // Another name is another key.
        assert_ne!(load_or_create(&data, "other.key").unwrap(), first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&data), 0o700);
            assert_eq!(mode(&data.join("k.key")), 0o600);
            std::fs::set_permissions(data.join("k.key"), std::fs::Permissions::from_mode(0o640))
                .unwrap();
            assert!(matches!(
                load_or_create(&data, "k.key"),
                Err(KeyError::TooOpen { mode: 0o640, .. })
            ));
        }
        std::fs::write(data.join("short.key"), "AAAA\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                data.join("short.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
        }
        assert!(matches!(
            load_or_create(&data, "short.key"),
            Err(KeyError::Malformed { .. })
        ));
    }
}
