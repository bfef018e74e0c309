//! # portcullis-sources
//!
//! Where [Portcullis](https://github.com/portcullis-mcp/portcullis) tools
//! come from, besides upstream MCP servers: native tool plugins, application route
//! tables, and OpenAPI documents.
//!
//! | module | source |
//! |---|---|
//! | [`native`] + [`command`] | `mcp-plugin.json` plugins whose handlers are commands in the plugin directory |
//! | [`routes`] | an application's route table (`mdk-plugin.json`): one tool per route |
//! | [`openapi`] | an OpenAPI 3.0/3.1 document (JSON or YAML): one tool per operation |
//! | [`route`] + [`forward`] | how a route becomes a tool, and how its call is forwarded to the application over HTTP |
//! | [`signing`] | the gateway's Ed25519 key, request signatures (RFC 9421 HTTP Message Signatures), and [`Verifier`] for applications (signature, authority, freshness, replays) |
//! | [`source`] | the [`ToolSource`] trait all of them implement |
//! | [`files`] | every file the gateway reads opened as a regular file only (a FIFO or device would hang it) |
//! | [`schema`] | the JSON Schema subset a route's parameters and body may use, normalised to a plain, bounded schema |
//!
//! Private: `containment` (a path a manifest names stays inside its
//! directory, lexically and after resolving symlinks).
//!
//! Every source produces `portcullis-server` [`Registration`]s
//! (definition, handler, source name, access), so the server's exposure gate,
//! validation, framing and error mapping apply to them unchanged, and tool
//! ids are checked for uniqueness across all sources when the server is built.
//!
//! ```no_run
//! use std::sync::Arc;
//! use portcullis_server::{serve_http, Exposure, HttpOptions, ToolServer};
//! use portcullis_sources::{App, AppOptions, AppSource, GatewayKey, NativePlugin, OpenApiDocument, RouteTable, ToolSource};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // One key pair for the gateway, kept under its data directory.
//! let key = Arc::new(GatewayKey::load_or_create(".portcullis")?);
//! key.write_public_key(".portcullis/gateway.pub")?;
//!
//! let plugin = NativePlugin::load("./tools/site")?;
//! let app = App::new(AppOptions::new("site", "http://127.0.0.1:9000").with_key(key.clone()))?;
//! let routes = AppSource::from_route_table(RouteTable::load("./apps/site")?, app.clone());
//! let billing = App::new(AppOptions::new("billing", "http://127.0.0.1:9100").with_key(key))?;
//! let api = AppSource::from_openapi(OpenApiDocument::load("./apps/billing/openapi.yaml")?, billing);
//! for diagnostic in api.diagnostics() {
//!     eprintln!("{diagnostic}");
//! }
//!
//! let tools = ToolServer::builder()
//!     .exposure(Exposure::default()) // read-only tools only
//!     .register_all(plugin.registrations())
//!     .register_all(routes.registrations())
//!     .register_all(api.registrations())
//!     .build()?; // ERR_PLUGIN_TOOL_DUPLICATE_ID if two sources share an id
//! let server = serve_http(tools, HttpOptions::default()).await?;
//! println!("serving on {}", server.url());
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod command;
mod containment;
pub mod error;
pub mod files;
pub mod forward;
pub mod key_file;
pub mod native;
pub mod openapi;
pub mod route;
pub mod routes;
pub mod schema;
pub mod signing;
pub mod source;

pub use containment::PATH_ESCAPES_PLUGIN_ROOT;
pub use error::SourceError;
pub use forward::{App, AppOptions};
pub use native::{NativeOptions, NativePlugin, NativeTool};
pub use openapi::OpenApiDocument;
pub use portcullis_server::Registration;
pub use route::HttpRoute;
pub use routes::RouteTable;
pub use signing::{GatewayKey, PublicKey, Verifier};
pub use source::{AppSource, InProcessSource, ToolSource};
