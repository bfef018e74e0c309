//! # portcullis-server
//!
//! The *serve* half of [Portcullis](https://github.com/portcullis-mcp/portcullis):
//! a set of tools served as an MCP server over Streamable HTTP (loopback
//! only, Host/Origin/token guards) and over stdio, with the exposure gate,
//! argument validation, output framing and error mapping applied at the edge.
//!
//! The pieces, in the order a call meets them:
//!
//! | module | job |
//! |---|---|
//! | `connections` (private) | the accept loop: `TCP_NODELAY`, the connection cap, header-read and idle timeouts; a connection's wake-ups of itself made second polls (`repoll`) |
//! | `front` (private) | the one service a request meets: the guard, then for `/mcp` the malformed-body answers (`malformed`) and the MCP service, or an extra route |
//! | [`guard`] | Host → Origin → path → bearer token → body size, before any MCP parsing |
//! | [`oauth`] | the opt-in resource-server mode: access tokens of one issuer checked against its keys, the protected-resource metadata, the [`oauth::Caller`] a token names |
//! | [`http`] / [`stdio`] | the surfaces: rmcp's Streamable HTTP service (stateless by default; both protocol eras) and stdin/stdout |
//! | `sessions` (private) | legacy sessions: rmcp's in-memory manager with a cap, the idlest closed first |
//! | `json_answer` (private) | a session request whose only event is its response answered plain JSON instead of rmcp's SSE stream; anything that needs the stream keeps it |
//! | `direct_call` (private) | a plain stateless 2026-07-28 `tools/call` answered in the HTTP handler's task, skipping rmcp's per-request service; everything else goes to rmcp |
//! | [`exposure`] | which tools exist at all: read-only by default, `allow_write`, `allow_tools`, identity and permissions |
//! | [`tool_server`] | the rmcp `ServerHandler`: lookup, the catalogue's gate (backstop, validation, policy), the handler, error mapping, framing, a `CallReport` per call; a live server's tool set replaced in place on reload |
//! | [`approval`] | a policy's `ask`: the person at the client approves first (elicitation, or the 2026-07-28 `input_required` round trip) |
//! | [`input`] | a handler asks the client for input mid-call: parked behind an `input_required` round trip for 2026-07-28 clients |
//! | [`handler`] | what a tool is: an async function of its arguments and a [`CallContext`] (the contract, with [`Registration`], [`Access`] and [`Identity`], lives in `portcullis-handler` and is re-exported here) |
//! | [`passthrough`] | resources, prompts, completions, logging and subscriptions through a provider beside the tools |
//! | [`shutdown`] | SIGINT/SIGTERM taken over the moment a [`ShutdownSignal`] is made, awaited later |
//! | [`mcp_server`] | one call from a root, a port, tools and options to a served MCP server, arguments checked first |
//!
//! The rules themselves (framing, `ERR_…` codes, validation) live in
//! `portcullis-catalog`; this crate only applies them.
//!
//! ## Serving your own tools
//!
//! ```
//! use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
//! use portcullis_server::{serve_http, HttpOptions, ToolServer};
//! use rmcp::{model::CallToolRequestParams, ServiceExt};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Add { a: i64, b: i64 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tools = ToolServer::builder()
//!     .typed_tool(
//!         Tool::new("add").with_description("Adds two numbers")
//!             .with_annotations(ToolAnnotations::read_only(true)),
//!         |args: Add, _ctx| async move { Ok(ToolResult::text((args.a + args.b).to_string())) },
//!     )
//!     .build()?;
//! // 127.0.0.1 on a free port; `serve_http` resolves once listening.
//! let server = serve_http(tools, HttpOptions::default()).await?;
//!
//! // Any MCP client can now call it; here rmcp's own.
//! let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(server.url());
//! let client = ().serve(transport).await?;
//! let args = serde_json::json!({"a": 2, "b": 40}).as_object().cloned().unwrap();
//! let result = client.call_tool(CallToolRequestParams::new("add").with_arguments(args)).await?;
//! let text = result.content[0].as_text().unwrap().text.clone();
//! // Output reaches the model framed as untrusted data.
//! assert!(text.starts_with("<untrusted-tool-output tool=\"add\">\n42\n"));
//!
//! client.cancel().await?;
//! server.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! A tool not declared read-only is withheld unless the [`Exposure`] allows
//! it; see [`exposure`]. For stdio, hand the same [`ToolServer`] to
//! [`serve_stdio`] and send logs to stderr.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod answer;
pub mod approval;
mod call_progress;
mod connections;
mod cut_off;
mod detached;
mod direct_call;
pub mod error;
pub mod exposure;
mod front;
pub mod guard;
pub mod handler;
pub mod http;
pub mod input;
mod json_answer;
mod malformed;
pub mod mcp_server;
mod media_type;
pub mod oauth;
pub mod passthrough;
mod repoll;
mod session_ask;
mod session_call;
mod sessions;
pub mod shutdown;
mod sse;
pub mod stdio;
mod throttle;
mod tool_call;
pub mod tool_server;
mod wire_tool;

pub use approval::DEFAULT_APPROVAL_TIMEOUT;
pub use error::ServerError;
pub use exposure::{Access, Exposure, Identity, Withheld};
pub use handler::{CallContext, ToolError, ToolHandler, typed};
pub use http::{HttpOptions, HttpServer, bind, serve_http, serve_http_on};
pub use input::InputChannel;
pub use mcp_server::{ServeOptions, create_mcp_server};
pub use passthrough::{PassthroughCapabilities, PassthroughProvider};
pub use shutdown::ShutdownSignal;
pub use stdio::{serve_io, serve_io_until, serve_stdio, serve_stdio_until};
pub use tool_server::{
    CallError, CallObserver, ObservedCall, Registration, ToolServer, ToolServerBuilder, schema_of,
};
