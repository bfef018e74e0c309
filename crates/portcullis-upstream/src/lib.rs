//! # portcullis-upstream
//!
//! The MCP client side of [Portcullis](https://github.com/portcullis-mcp/portcullis):
//! connect an agent to MCP servers and project their tools into one tool map,
//! guarded.
//!
//! [`connect`] opens every server concurrently over its transport — stdio
//! child processes (cargo feature `stdio`, on by default), Streamable HTTP
//! (the stateless 2026-07-28 revision via `server/discover`, falling back to
//! the `initialize` handshake of 2025-11-25 and older), or the legacy
//! 2024-11-05 HTTP+SSE transport — lists their tools (following
//! `nextCursor`), and hands the listings to
//! [`portcullis_catalog::Catalogue::project`] for names, collisions, filters,
//! drift quarantine and disclosure tiers. A server that fails becomes a
//! diagnostic; its siblings connect anyway.
//!
//! On the way out, remote requests pass the SSRF guard ([`AllowedHosts`],
//! plus a refusal of link-local and cloud-metadata addresses), redirects are
//! followed by hand (at most 5, re-checked per hop, credentials withheld
//! across origins), and `auth` credentials are resolved per session before
//! the handshake and again per call. On the way in, [`Toolset::call`] runs the
//! policy gate before anything reaches a server, refuses quarantined tools,
//! validates arguments against the schema, then calls with a timeout,
//! cancellation and progress; a result that breaks the tool's declared
//! `outputSchema` is rejected. Each connection keeps track of what its server
//! currently publishes (`notifications/tools/list_changed`, or a 2026
//! `subscriptions/listen`), so a tool withdrawn after the catalogue was built
//! is refused with "no longer published" instead of reaching the server.
//! Server `instructions` are discarded.
//!
//! A connection that closes on its own — a stdio child that exits or
//! crashes, a legacy SSE stream that ends — is reopened in the background
//! with exponential backoff ([`ConnectOptions::reconnect`], [`Backoff`]):
//! the new connection is listed and held to the same trust baseline as a
//! reconcile would hold it (a server that comes back rewritten is
//! quarantined; the baseline never moves), and swapped into the tool map.
//! A call in flight when the connection closed fails at once with
//! [`CallError::ConnectionLost`] and is never sent again; a call made while
//! the server is down is refused at once with [`CallError::Reconnecting`].
//! A server that failed to connect at all is retried the same way and
//! joins the tool map when it comes up ([`Toolset::watch_catalogue`]
//! announces it). With [`ConnectOptions::start_deadline`], [`connect`]
//! returns at the deadline with the servers ready by then; each one still
//! connecting joins the same way when ready ([`Toolset::starting`] names
//! them meanwhile), held to its baseline before any of its tools is in the
//! map.
//!
//! With a store ([`ConnectOptions::with_store`], any
//! [`portcullis_store::Store`] backend), [`connect`] is a cold start that
//! remembers: each server's fresh listing is saved as its catalogue cache,
//! its fingerprints are recorded as its trust baseline the first time it is
//! seen (stdio servers too, keyed by a hash of their command line), and the
//! baseline the store keeps — never the listing — is what every projection
//! is guarded by, so a rug pull between runs ends in quarantine (changed),
//! withholding (added) or a diagnostic (removed); a cold start saves each
//! listing as its server joins ([`portcullis_store::Store::save`], which
//! writes nothing for a row stored already as given).
//! [`rebuild_from_store`] is a wake: the tool map is projected from the
//! cached listings without contacting any server (one read of the store),
//! and in the background each server is connected and listed, the drift
//! guard re-run and the map corrected in place ([`Toolset::reconciled`]
//! resolves when every server was tried). A call to a server not yet
//! connected waits until its live listing was compared with the baseline,
//! then routes on the corrected map: no call reaches a server whose listing
//! was not checked. The tool map is an
//! immutable snapshot: [`Toolset::catalogue`] returns the one in force, a
//! call keeps the one it started with, and [`Toolset::watch_catalogue`]
//! announces each correction. Without a store, baselines can be handed in
//! through [`ConnectOptions::baselines`].
//!
//! | module | concern |
//! |---|---|
//! | [`config`] | [`McpServerConfig`]; Claude Desktop / Cursor / VS Code JSON; remote URL rules |
//! | [`plugins`] | Agent Plugins directories (`plugin.json` + `mcp.json`) into server configs; launch-time containment |
//! | [`hosts`] | the SSRF guard |
//! | [`credentials`] | per-session bearer tokens |
//! | [`oauth`] | OAuth 2.1 for servers that need it: discovery, registration, code + PKCE, refresh, step-up |
//! | [`options`] | [`ConnectOptions`] |
//! | [`toolset`] | [`connect`], [`Toolset`], [`CallContext`] |
//! | [`wake`] | [`rebuild_from_store`]; the background connect behind [`Toolset::reconciled`] |
//! | [`reconfigure`] | [`Toolset::reconfigure`]: a reload keeps unchanged connections |
//! | [`passthrough`] | resources, templates, prompts, completions, log level, subscriptions and their notifications, per server |
//! | [`progress`] | progress notifications routed to the caller |
//! | [`notifications`] | log messages delivered in the transport, in the server's order ([`LogSink`]) |
//! | [`relay`] | a server's sampling, elicitation and roots requests relayed to the calling client |
//! | `stdio` (feature `stdio`) | stdio child processes: a minimal environment, their own process group, killed with the toolset |
//! | [`error`] | [`WiringError`], [`CallError`] |
//!
//! Behind them, private: `connection` (one server's connection: transport,
//! handshake, listing, the call over it; `connection/direct.rs`, a
//! 2026-07-28 HTTP server's `tools/call` without rmcp's client service),
//! `http` (guarded HTTP: host check, redirects by hand, 401/403), `sse`
//! (legacy HTTP+SSE), `health` (available, reachable, reconnecting),
//! `supervisor` (reopening closed connections), `state` (the
//! swappable snapshot), `trust` and `reconcile` (baselines through the
//! store, the background reconcile), `effects` (idempotent replay),
//! `output` (output-schema checks) and `report` (where diagnostics go).
//!
//! ```no_run
//! use portcullis_upstream::{connect, AllowedHosts, CallContext, ConnectOptions, McpServerConfig};
//! use serde_json::json;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let servers = vec![
//!     McpServerConfig::streamable_http("docs", "https://mcp.example.com/mcp"),
//!     McpServerConfig::stdio("files", "npx", ["-y", "@modelcontextprotocol/server-filesystem", "."]),
//! ];
//! let options = ConnectOptions::default()
//!     .with_allowed_hosts(AllowedHosts::list(["mcp.example.com"]));
//! let toolset = connect(servers, options).await?;
//! for diagnostic in toolset.diagnostics() {
//!     eprintln!("{diagnostic}");
//! }
//! for tool in toolset.tools() {
//!     println!("{}: {}", tool.name, tool.description.unwrap_or_default());
//! }
//! let result = toolset
//!     .call("docs__search", Some(json!({"query": "rate limits"})), &CallContext::default())
//!     .await?;
//! println!("{result:?}");
//! toolset.close().await;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod answers;
mod call_context;
mod cold_start;
pub mod config;
mod connection;
pub mod credentials;
mod effects;
pub mod error;
mod health;
pub mod hosts;
mod http;
mod lane;
pub mod notifications;
pub mod oauth;
mod open;
pub mod options;
mod output;
pub mod passthrough;
pub mod plugins;
pub mod progress;
mod reconcile;
pub mod reconfigure;
pub mod relay;
mod relist;
mod report;
mod sse;
mod state;
#[cfg(feature = "stdio")]
pub mod stdio;
#[cfg(any(test, feature = "strategies"))]
pub mod strategies;
mod supervisor;
mod tls;
pub mod toolset;
mod trust;
pub mod wake;

pub use call_context::CallContext;
pub use cold_start::connect;
pub use config::{
    CwdRoot, McpServerConfig, ParsedServers, PluginLaunch, RemoteConfig, StdioConfig,
    parse_mcp_servers_json,
};
pub use error::{CallError, WiringError};
pub use hosts::AllowedHosts;
pub use http::MAX_REDIRECTS;
pub use notifications::LogSink;
pub use options::{Backoff, ConnectOptions, DEFAULT_TIMEOUT};
pub use passthrough::{Notice, Passthrough, PassthroughError, ServerNotice};
pub use plugins::{PluginLoad, PluginManifest, load_agent_plugin};
pub use progress::Progress;
pub use reconfigure::Reconfigured;
pub use relay::ClientRelay;
pub use report::DiagnosticCallback;
pub use toolset::{CallAnswer, Toolset};
pub use wake::rebuild_from_store;
