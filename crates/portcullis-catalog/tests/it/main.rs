//! The crate's integration tests as one binary, so the suite links once
//! instead of once per file: each module was a `tests/*.rs` file of its own.
//! Proptest keeps its seeds in `tests/proptest-regressions/MODULE.txt` (the
//! directory beside the one holding this `main.rs`).

mod hostile;
mod projection;
mod properties;
