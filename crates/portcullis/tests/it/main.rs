//! The binary's end-to-end tests as one test binary, so the suite links once
//! instead of once per file: each module was a `tests/*.rs` file of its own,
//! and `common` is the scaffolding they share. They run in one process now,
//! in parallel: nothing here may rely on being alone in it (process-wide
//! state, the test process's own children or descriptors).

mod common;

mod approval;
mod cli;
mod drift;
mod gateway;
mod hostile;
mod interop;
mod lifecycle;
mod log_order;
mod oauth_login;
mod oauth_peer;
mod ops;
mod progress;
mod proxy;
mod reconnect;
mod relay;
mod reload_notices;
mod retention;
mod rug_pull;
mod sources;
mod stdio_fidelity;
mod transports;
