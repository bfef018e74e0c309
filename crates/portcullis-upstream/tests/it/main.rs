//! The crate's integration tests as one binary, so the suite links once
//! instead of once per file: each module was a `tests/*.rs` file of its own.
//! `common` and `drift_support` are the helpers they share; the fixture
//! servers they spawn stay binaries of their own (`tests/fixtures/`).

mod common;
// Only the stdio tests start the drift fixture.
#[cfg(feature = "stdio")]
mod drift_support;

mod connect_progress;
mod direct_call;
mod effects;
mod integration;
mod interop;
mod listing;
mod oauth_hostile;
mod passthrough;
mod plugins;
mod reconfigure;
mod reconnect;
mod rug_pull;
mod wake;
