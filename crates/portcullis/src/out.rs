//! Printing without panicking: `outln!`/`out!` for stdout, `errln!` for
//! stderr, in place of `println!`/`print!`/`eprintln!`.
//!
//! The standard macros panic when a write fails, and the usual failure is
//! a reader that went away: `portcullis tools --json | head -1` closes the
//! pipe after one line, and the next `println!` printed a panic message
//! and exited 101. (Rust ignores `SIGPIPE`, so the write fails with
//! `EPIPE` instead of ending the process; leaving it ignored matters,
//! since a `SIGPIPE` from a stdio upstream's closed pipe must never kill
//! the gateway.) Here a closed stdout silently stops further output and
//! the command runs on, ending with its own exit code; any other write
//! failure (a full disk) also stops output, and `main` reports it and
//! exits 2. A failed write to stderr is dropped: there is nowhere left to
//! say so.

use std::fmt;
use std::io::{self, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout failed: nothing more is written there.
static STDOUT_DONE: AtomicBool = AtomicBool::new(false);

/// The first stdout failure that was not a closed pipe.
static STDOUT_FAILURE: Mutex<Option<String>> = Mutex::new(None);

/// Writes `args` to stdout, flushed (see the module docs).
pub fn stdout(args: fmt::Arguments<'_>) {
    stdout_with(|out| out.write_fmt(args));
}

/// Writes `bytes` to stdout, flushed (see the module docs).
pub fn stdout_bytes(bytes: &[u8]) {
    stdout_with(|out| out.write_all(bytes));
}

fn stdout_with(write: impl FnOnce(&mut io::StdoutLock<'static>) -> io::Result<()>) {
    if STDOUT_DONE.load(Ordering::Relaxed) {
        return;
    }
    let mut out = io::stdout().lock();
    if let Err(error) = write(&mut out).and_then(|()| out.flush()) {
        stopped(&error);
    }
}

/// Stops stdout after `error`, remembering it unless it is a closed pipe.
fn stopped(error: &io::Error) {
    STDOUT_DONE.store(true, Ordering::Relaxed);
    if error.kind() != io::ErrorKind::BrokenPipe {
        let mut failure = STDOUT_FAILURE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        failure.get_or_insert_with(|| error.to_string());
    }
}

/// Writes `args` to stderr; a failure is dropped.
pub fn stderr(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// Why stdout failed, unless it merely closed (or never failed).
pub fn failure() -> Option<String> {
    STDOUT_FAILURE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// `println!` that never panics (see [`crate::out`]).
macro_rules! outln {
    () => {
        $crate::out::stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that never panics (see [`crate::out`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::stdout(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics (see [`crate::out`]).
macro_rules! errln {
    () => {
        $crate::out::stderr(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}
