//! The crate's integration tests, as one binary.

mod health;
mod module_cycles;
