//! The server's error type: configuration and wiring mistakes, found before
//! anything listens.
//!
//! Each variant carries a public `ERR_…` code (see [`ServerError::code`]),
//! and its `Display` starts with that code, so the binary can print it as is
//! and a test can match on it.

use std::net::SocketAddr;

use portcullis_catalog::CatalogError;
use portcullis_catalog::error_mapping::codes;
use thiserror::Error;

/// Why a server could not be built or started.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ServerError {
    /// No working directory was given (`root` is empty).
    #[error("ERR_INVALID_MCP_ROOT: a working directory (root) is required")]
    InvalidRoot,
    /// No port was given (`port` is `None`).
    #[error("ERR_INVALID_MCP_PORT: a port is required")]
    InvalidPort,
    /// A bearer token was configured but is empty.
    #[error("ERR_INVALID_MCP_TOKEN: the bearer token must not be empty")]
    InvalidToken,
    /// Two tools share an id, across or within sources.
    #[error("ERR_PLUGIN_TOOL_DUPLICATE_ID: {first} and {second}: duplicate tool id \"{id}\"")]
    DuplicateToolId {
        /// The source that registered the id first.
        first: String,
        /// The source that registered it again.
        second: String,
        /// The clashing id.
        id: String,
    },
    /// A tool's input schema cannot be compiled into a validator.
    #[error("ERR_PLUGIN_MANIFEST_INVALID: {0}")]
    InvalidSchema(#[from] CatalogError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Both a static bearer token and OAuth were configured: a request
    /// would have to carry two credentials in one header.
    #[error("a static bearer token and OAuth cannot both guard the HTTP surface; choose one")]
    TokenAndOAuth,
    /// The OAuth resource-server options cannot work.
    #[error(transparent)]
    OAuth(#[from] crate::oauth::OAuthConfigError),
    /// An extra route cannot be served at its path: one that does not
    /// start with `/`, holds a capture (`{…}`: the guard admits exact
    /// paths), is `/mcp` itself, or is given twice.
    #[error("cannot serve an extra route at {path:?}: {reason}")]
    ExtraRoute {
        /// The path given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Serving over stdio failed to start.
    #[error("cannot serve over stdio: {0}")]
    Stdio(String),
}

impl ServerError {
    /// The `ERR_…` code of this error, or `None` for I/O failures that have
    /// no contract code.
    ///
    /// ```
    /// use portcullis_server::ServerError;
    ///
    /// assert_eq!(ServerError::InvalidToken.code(), Some("ERR_INVALID_MCP_TOKEN"));
    /// ```
    pub fn code(&self) -> Option<&'static str> {
        match self {
            ServerError::InvalidRoot => Some(codes::ERR_INVALID_MCP_ROOT),
            ServerError::InvalidPort => Some(codes::ERR_INVALID_MCP_PORT),
            ServerError::InvalidToken => Some(codes::ERR_INVALID_MCP_TOKEN),
            ServerError::DuplicateToolId { .. } => Some(codes::ERR_PLUGIN_TOOL_DUPLICATE_ID),
            ServerError::InvalidSchema(_) => Some(codes::ERR_PLUGIN_MANIFEST_INVALID),
            ServerError::Bind { .. }
            | ServerError::Stdio(_)
            | ServerError::TokenAndOAuth
            | ServerError::ExtraRoute { .. }
            | ServerError::OAuth(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_starts_with_its_code() {
        let errors = [
            ServerError::InvalidRoot,
            ServerError::InvalidPort,
            ServerError::InvalidToken,
            ServerError::DuplicateToolId {
                first: "a".into(),
                second: "b".into(),
                id: "x".into(),
            },
        ];
        for error in errors {
            let code = error.code().unwrap();
            assert!(error.to_string().starts_with(code), "{error}");
        }
    }

    #[test]
    fn duplicate_id_names_both_sources() {
        let error = ServerError::DuplicateToolId {
            first: "./plugins/a".into(),
            second: "./apps/site".into(),
            id: "devices_get".into(),
        };
        assert_eq!(
            error.to_string(),
            "ERR_PLUGIN_TOOL_DUPLICATE_ID: ./plugins/a and ./apps/site: duplicate tool id \"devices_get\""
        );
    }
}
