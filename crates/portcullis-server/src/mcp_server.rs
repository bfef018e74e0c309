//! One call from a root, a port, tools and options to a served MCP server.
//!
//! [`create_mcp_server`] checks the arguments in this order (root, port,
//! tool ids, token), applies the exposure gate, and serves the result over
//! HTTP on loopback. [`ServeOptions`] holds the server's own options
//! (camelCase in JSON: `token`, `allowWrite`, `allowTools`, `identity`, …),
//! kept apart from whatever configuration the tools themselves get, so
//! tools never see it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;

use portcullis_catalog::framing::DEFAULT_MAX_OUTPUT_LENGTH;
use serde::{Deserialize, Serialize};

use crate::error::ServerError;
use crate::exposure::{Exposure, Identity};
use crate::http::{DEFAULT_MAX_BODY_BYTES, HttpOptions, HttpServer, serve_http};
use crate::tool_server::{Registration, ToolServer};

/// Server-side security and lifecycle options.
/// `Debug` never shows the token.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServeOptions {
    /// Require `Authorization: Bearer <token>` on `/mcp`. Empty is an error.
    pub token: Option<String>,
    /// Expose tools not declared read-only.
    pub allow_write: bool,
    /// Expose only these tool ids (listing a write tool authorises it).
    pub allow_tools: Option<Vec<String>>,
    /// The identity for authenticated routes.
    pub identity: Option<Identity>,
    /// Extra `Host` values to admit.
    pub allowed_hosts: Vec<String>,
    /// `Origin` values to admit.
    pub allowed_origins: Vec<String>,
    /// Cap, in characters, on a call's output (every content kind).
    pub max_output_length: usize,
    /// Cap, in bytes, on a request body.
    pub max_body_bytes: usize,
    /// Close on SIGINT/SIGTERM and exit 0.
    pub handle_signals: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            token: None,
            allow_write: false,
            allow_tools: None,
            identity: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_output_length: DEFAULT_MAX_OUTPUT_LENGTH,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            handle_signals: false,
        }
    }
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("allow_write", &self.allow_write)
            .field("allow_tools", &self.allow_tools)
            .field("identity", &self.identity)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("max_output_length", &self.max_output_length)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("handle_signals", &self.handle_signals)
            .finish()
    }
}

impl ServeOptions {
    /// The exposure-gate part of the options.
    pub fn exposure(&self) -> Exposure {
        Exposure {
            allow_write: self.allow_write,
            allow_tools: self.allow_tools.clone(),
            identity: self.identity.clone(),
            authenticated_callers: false,
        }
    }
}

/// Builds the tool set from `tools` and serves it on `127.0.0.1:<port>`.
///
/// * `root` — the working directory for this instance; an empty path is
///   `ERR_INVALID_MCP_ROOT`.
/// * `port` — `None` is `ERR_INVALID_MCP_PORT`. `Some(0)` asks the OS for a
///   free port ("missing" is `None`, so 0 can mean ephemeral, which tests
///   need). Read it back from
///   [`HttpServer::local_addr`].
///
/// Resolves once listening. Call [`HttpServer::close`] to stop.
pub async fn create_mcp_server(
    root: &Path,
    port: Option<u16>,
    tools: Vec<Registration>,
    options: ServeOptions,
) -> Result<HttpServer, ServerError> {
    if root.as_os_str().is_empty() {
        return Err(ServerError::InvalidRoot);
    }
    let port = port.ok_or(ServerError::InvalidPort)?;
    let server = ToolServer::builder()
        .register_all(tools)
        .exposure(options.exposure())
        .max_output_length(options.max_output_length)
        .build()?;
    let http = HttpOptions {
        listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        allowed_hosts: options.allowed_hosts,
        allowed_origins: options.allowed_origins,
        token: options.token,
        max_body_bytes: options.max_body_bytes,
        handle_signals: options.handle_signals,
        ..HttpOptions::default()
    };
    serve_http(server, http).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn arguments_are_checked_root_port_then_token() {
        let empty = Path::new("");
        let err = create_mcp_server(empty, None, vec![], ServeOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("ERR_INVALID_MCP_ROOT"));
        let err = create_mcp_server(Path::new("."), None, vec![], ServeOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("ERR_INVALID_MCP_PORT"));
        let options = ServeOptions {
            token: Some(String::new()),
            ..Default::default()
        };
        let err = create_mcp_server(Path::new("."), Some(0), vec![], options)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("ERR_INVALID_MCP_TOKEN"));
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let options = ServeOptions {
            token: Some("hunter2".into()),
            ..Default::default()
        };
        assert!(!format!("{options:?}").contains("hunter2"));
        let http = crate::http::HttpOptions {
            token: Some("hunter2".into()),
            ..Default::default()
        };
        assert!(!format!("{http:?}").contains("hunter2"));
        assert!(format!("{http:?}").contains("<redacted>"));
    }

    #[test]
    fn options_read_the_camel_case_spelling() {
        let options: ServeOptions = serde_json::from_value(serde_json::json!({
            "token": "t", "allowWrite": true, "allowTools": ["get_device"],
            "identity": {"user": {"userId": "mcp-agent"}, "perms": ["read"]},
            "maxOutputLength": 10
        }))
        .unwrap();
        assert!(options.allow_write);
        assert_eq!(options.max_output_length, 10);
        assert_eq!(options.exposure().identity.unwrap().perms, ["read"]);
        assert_eq!(options.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
    }
}
