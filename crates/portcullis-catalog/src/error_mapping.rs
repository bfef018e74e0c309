//! Error mapping at the edge: only contract codes reach the model.
//!
//! A message that starts with `ERR_` is part of the public contract and is
//! passed to the caller as a tool error. Anything else may carry internals
//! (paths, SQL, stack traces), so the model gets `ERR_TOOL_FAILED` and the
//! original is handed back to the surface to log.

use crate::result::ToolResult;

/// Every `ERR_…` code Portcullis itself produces. Part of the public
/// contract: documented, tested, never renamed.
pub mod codes {
    /// A tool failed with a message that is not a contract code.
    pub const ERR_TOOL_FAILED: &str = "ERR_TOOL_FAILED";
    /// Call arguments do not match the tool's input schema.
    pub const ERR_INVALID_ARGUMENTS: &str = "ERR_INVALID_ARGUMENTS";
    /// The server was started without a root directory.
    pub const ERR_INVALID_MCP_ROOT: &str = "ERR_INVALID_MCP_ROOT";
    /// The server was started without a port.
    pub const ERR_INVALID_MCP_PORT: &str = "ERR_INVALID_MCP_PORT";
    /// An application entry is malformed.
    pub const ERR_INVALID_MCP_APP: &str = "ERR_INVALID_MCP_APP";
    /// A configured bearer token is empty.
    pub const ERR_INVALID_MCP_TOKEN: &str = "ERR_INVALID_MCP_TOKEN";
    /// An `auth: true` route ran with no identity configured.
    pub const ERR_MCP_AUTH_REQUIRED: &str = "ERR_MCP_AUTH_REQUIRED";
    /// An `auth: true` route ran with an identity lacking a permission.
    pub const ERR_MCP_PERM_DENIED: &str = "ERR_MCP_PERM_DENIED";
    /// A plugin directory has no manifest.
    pub const ERR_PLUGIN_MANIFEST_MISSING: &str = "ERR_PLUGIN_MANIFEST_MISSING";
    /// A plugin manifest is malformed.
    pub const ERR_PLUGIN_MANIFEST_INVALID: &str = "ERR_PLUGIN_MANIFEST_INVALID";
    /// A plugin tool's handler cannot be found.
    pub const ERR_PLUGIN_HANDLER_NOT_FOUND: &str = "ERR_PLUGIN_HANDLER_NOT_FOUND";
    /// A plugin tool's handler is not executable.
    pub const ERR_PLUGIN_HANDLER_NOT_FUNCTION: &str = "ERR_PLUGIN_HANDLER_NOT_FUNCTION";
    /// Two tools share an id.
    pub const ERR_PLUGIN_TOOL_DUPLICATE_ID: &str = "ERR_PLUGIN_TOOL_DUPLICATE_ID";
    /// Two routes of one route table share an id.
    pub const ERR_PLUGIN_ROUTE_DUPLICATE_ID: &str = "ERR_PLUGIN_ROUTE_DUPLICATE_ID";
    /// An application a route forwards to is not reachable.
    pub const ERR_APP_RUNTIME_UNAVAILABLE: &str = "ERR_APP_RUNTIME_UNAVAILABLE";
}

/// True when `message` is a contract code the caller may see.
pub fn is_contract_error(message: &str) -> bool {
    message.starts_with("ERR_")
}

/// A tool failure, mapped for the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedError {
    /// What the caller receives (`isError: true`).
    pub result: ToolResult,
    /// The original message when it was withheld from the caller; the surface
    /// logs it.
    pub withheld: Option<String>,
}

/// Maps a failure message to the result the caller sees.
///
/// ```
/// use portcullis_catalog::error_mapping::map_error;
///
/// let passed = map_error("ERR_DEVICE_OFFLINE: miner-3");
/// assert_eq!(passed.result.text_blocks().next(), Some("ERR_DEVICE_OFFLINE: miner-3"));
/// assert!(passed.withheld.is_none());
///
/// let hidden = map_error("connection refused at /srv/secret.sock");
/// assert_eq!(hidden.result.text_blocks().next(), Some("ERR_TOOL_FAILED"));
/// assert_eq!(hidden.withheld.as_deref(), Some("connection refused at /srv/secret.sock"));
/// ```
pub fn map_error(message: &str) -> MappedError {
    if is_contract_error(message) {
        MappedError {
            result: ToolResult::error_text(message),
            withheld: None,
        }
    } else {
        MappedError {
            result: ToolResult::error_text(codes::ERR_TOOL_FAILED),
            withheld: Some(message.to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_leading_err_prefix_passes() {
        assert!(map_error("ERR_BOOM").withheld.is_none());
        assert!(map_error(" ERR_BOOM").withheld.is_some());
        assert!(map_error("err_boom").withheld.is_some());
        assert!(map_error("Error: ERR_BOOM").withheld.is_some());
        assert!(map_error("").withheld.is_some());
        assert!(map_error("ERR_BOOM").result.is_error);
        assert!(map_error("x").result.is_error);
    }
}
