//! Opening the files the gateway reads (manifests, route tables, OpenAPI
//! documents, key files, its config) as regular files only.
//!
//! A FIFO named like a manifest would block `open` (no writer yet) and then
//! `read` forever, hanging `check`, `tools` and `serve` — on a thread that
//! also has to see SIGTERM. A character device (`/dev/zero`) never ends. So
//! a file is opened without blocking (`O_NONBLOCK`, which regular files
//! ignore) and refused unless what was opened — after following links — is
//! a regular file. Checking the opened descriptor, not the path beforehand,
//! leaves no window to swap the file between the check and the read.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;

use thiserror::Error;

/// Why a file was not read (or written). The messages name no path: the
/// caller puts the file's name in front.
#[derive(Debug, Error)]
pub enum FileError {
    /// Opening or reading failed.
    #[error("cannot be read: {0}")]
    Io(#[from] io::Error),
    /// A FIFO, device, socket or directory.
    #[error("is not a regular file ({0})")]
    NotRegular(&'static str),
    /// More than the cap.
    #[error("is larger than {0} bytes")]
    TooLarge(u64),
    /// Text expected, other bytes found.
    #[error("is not UTF-8")]
    NotUtf8,
}

impl FileError {
    /// Whether the file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, FileError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

impl From<FileError> for io::Error {
    fn from(error: FileError) -> Self {
        match error {
            FileError::Io(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidInput, other.to_string()),
        }
    }
}

/// Opens `path` for reading; an error unless it is a regular file.
pub fn open_regular(path: &Path) -> Result<File, FileError> {
    let mut options = OpenOptions::new();
    options.read(true);
    non_blocking(&mut options);
    let file = open(&options, path)?;
    ensure_regular(&file)?;
    Ok(file)
}

/// Reads `path` whole, up to `limit` bytes; an error when it is not a
/// regular file or holds more (read one byte past the cap, so the size the
/// metadata claims is never trusted).
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(FileError::TooLarge(limit));
    }
    Ok(bytes)
}

/// Reads `path` as UTF-8 text, as [`read_regular`].
pub fn read_regular_to_string(path: &Path, limit: u64) -> Result<String, FileError> {
    String::from_utf8(read_regular(path, limit)?).map_err(|_| FileError::NotUtf8)
}

/// Creates or replaces `path`'s contents with `bytes`; an error, without
/// blocking or writing, when `path` exists and is not a regular file.
pub fn write_regular(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let mut options = OpenOptions::new();
    // Not `truncate` here: a FIFO or device must be refused untouched.
    options.write(true).create(true);
    non_blocking(&mut options);
    let mut file = open(&options, path)?;
    ensure_regular(&file)?;
    file.set_len(0)?;
    file.write_all(bytes)?;
    file.flush()?;
    Ok(())
}

/// Opens `path`; a failure on something that is not a regular file (a
/// FIFO without a reader refuses a non-blocking writer, a socket any open)
/// is reported as that, not as the system's puzzling error.
fn open(options: &OpenOptions, path: &Path) -> Result<File, FileError> {
    options
        .open(path)
        .map_err(|e| match std::fs::metadata(path) {
            Ok(metadata) if !metadata.is_file() => {
                FileError::NotRegular(describe(metadata.file_type()))
            }
            _ => FileError::Io(e),
        })
}

fn ensure_regular(file: &File) -> Result<(), FileError> {
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        Ok(())
    } else {
        Err(FileError::NotRegular(describe(kind)))
    }
}

/// What a non-regular file is, for the error.
fn describe(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    "a special file"
}

#[cfg(unix)]
fn non_blocking(options: &mut OpenOptions) {
    use std::os::unix::fs::OpenOptionsExt;
    options.custom_flags(libc::O_NONBLOCK);
}

#[cfg(not(unix))]
fn non_blocking(_options: &mut OpenOptions) {}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn fifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn only_regular_files_are_read_or_written() {
        let dir = tempfile::tempdir().unwrap();
        let regular = dir.path().join("a.json");
        std::fs::write(&regular, "{}").unwrap();
        assert_eq!(read_regular_to_string(&regular, 10).unwrap(), "{}");
        assert_eq!(
            read_regular(&regular, 1).unwrap_err().to_string(),
            "is larger than 1 bytes"
        );

        let pipe = dir.path().join("pipe.json");
        fifo(&pipe);
        assert_eq!(
            read_regular(&pipe, 10).unwrap_err().to_string(),
            "is not a regular file (a FIFO)"
        );
        // No reader: the open itself fails rather than waiting for one.
        assert_eq!(
            write_regular(&pipe, b"x").unwrap_err().to_string(),
            "is not a regular file (a FIFO)"
        );
        assert_eq!(
            read_regular(Path::new("/dev/zero"), 10)
                .unwrap_err()
                .to_string(),
            "is not a regular file (a character device)"
        );
        assert_eq!(
            read_regular(dir.path(), 10).unwrap_err().to_string(),
            "is not a regular file (a directory)"
        );
        // A link to a FIFO is a FIFO.
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&pipe, &link).unwrap();
        assert!(read_regular(&link, 10).is_err());

        let out = dir.path().join("out.pub");
        write_regular(&out, b"longer first").unwrap();
        write_regular(&out, b"short").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"short");
    }
}
