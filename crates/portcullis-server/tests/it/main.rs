//! The crate's integration tests as one binary, so the suite links once
//! instead of once per file: each module was a `tests/*.rs` file of its own.

mod approval;
mod direct_call;
mod drain;
mod fixture_process;
mod http_surface;
mod input;
mod session_call;
mod stdio_surface;
