//! The crate's integration tests, as one binary.

mod module_cycles;
