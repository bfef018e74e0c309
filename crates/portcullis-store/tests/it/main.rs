//! The crate's integration tests as one binary, so the suite links once
//! instead of once per file: each module was a `tests/*.rs` file of its own.

mod backends;
