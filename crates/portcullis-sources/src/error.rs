//! Load-time errors: what makes a source unusable before it serves anything.
//!
//! Every message starts with its public `ERR_…` code and names the plugin
//! directory (or document) and, where there is one, the tool, so the binary
//! can print it as is and an operator knows which line of which file to fix.

use std::fmt;

use portcullis_catalog::error_mapping::codes;
use thiserror::Error;

/// Why a source could not be loaded.
///
/// ```
/// use portcullis_sources::SourceError;
///
/// let e = SourceError::ManifestMissing { dir: "./plugins/site".into() };
/// assert_eq!(e.to_string(), "ERR_PLUGIN_MANIFEST_MISSING: ./plugins/site");
/// assert_eq!(e.code(), "ERR_PLUGIN_MANIFEST_MISSING");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The directory has no manifest.
    #[error("ERR_PLUGIN_MANIFEST_MISSING: {dir}")]
    ManifestMissing {
        /// The plugin directory (or document path).
        dir: String,
    },
    /// The manifest (or document) is malformed; `reason` names the field.
    #[error("ERR_PLUGIN_MANIFEST_INVALID: {dir}: {reason}")]
    ManifestInvalid {
        /// The plugin directory (or document path).
        dir: String,
        /// What is wrong, e.g. `missing required field "name"`.
        reason: String,
    },
    /// A tool's handler cannot be resolved inside the plugin directory.
    #[error("ERR_PLUGIN_HANDLER_NOT_FOUND: {dir}: tool \"{tool}\" handler \"{handler}\"{}", Reason(.reason))]
    HandlerNotFound {
        /// The plugin directory.
        dir: String,
        /// The tool id.
        tool: String,
        /// The handler as written in the manifest.
        handler: String,
        /// Why, when more than "it does not exist" (e.g. a path escape).
        reason: Option<String>,
    },
    /// A tool's handler exists but cannot be run.
    #[error(
        "ERR_PLUGIN_HANDLER_NOT_FUNCTION: {dir}: tool \"{tool}\" handler \"{handler}\": {reason}"
    )]
    HandlerNotFunction {
        /// The plugin directory.
        dir: String,
        /// The tool id.
        tool: String,
        /// The handler as written in the manifest.
        handler: String,
        /// Why it cannot run (not executable, not a file).
        reason: String,
    },
    /// Two tools of one plugin share an id.
    #[error("ERR_PLUGIN_TOOL_DUPLICATE_ID: {dir}: duplicate tool id \"{id}\"")]
    DuplicateToolId {
        /// The plugin directory.
        dir: String,
        /// The clashing id.
        id: String,
    },
    /// Two routes of one route table share an id.
    #[error("ERR_PLUGIN_ROUTE_DUPLICATE_ID: {dir}: duplicate route id \"{id}\"")]
    DuplicateRouteId {
        /// The application directory or route table.
        dir: String,
        /// The clashing id.
        id: String,
    },
    /// An application entry is unusable (bad base URL, unreadable key).
    #[error("ERR_INVALID_MCP_APP: {app}: {reason}")]
    InvalidApp {
        /// The application's name.
        app: String,
        /// What is wrong.
        reason: String,
    },
}

// Formats the optional reason of `HandlerNotFound` as `: reason`.
struct Reason<'a>(&'a Option<String>);

impl fmt::Display for Reason<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(reason) => write!(f, ": {reason}"),
            None => Ok(()),
        }
    }
}

impl SourceError {
    /// The `ERR_…` code this error carries.
    pub fn code(&self) -> &'static str {
        match self {
            SourceError::ManifestMissing { .. } => codes::ERR_PLUGIN_MANIFEST_MISSING,
            SourceError::ManifestInvalid { .. } => codes::ERR_PLUGIN_MANIFEST_INVALID,
            SourceError::HandlerNotFound { .. } => codes::ERR_PLUGIN_HANDLER_NOT_FOUND,
            SourceError::HandlerNotFunction { .. } => codes::ERR_PLUGIN_HANDLER_NOT_FUNCTION,
            SourceError::DuplicateToolId { .. } => codes::ERR_PLUGIN_TOOL_DUPLICATE_ID,
            SourceError::DuplicateRouteId { .. } => codes::ERR_PLUGIN_ROUTE_DUPLICATE_ID,
            SourceError::InvalidApp { .. } => codes::ERR_INVALID_MCP_APP,
        }
    }

    pub(crate) fn invalid(dir: &str, reason: impl Into<String>) -> Self {
        SourceError::ManifestInvalid {
            dir: dir.to_owned(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_starts_with_its_code() {
        let errors = [
            SourceError::ManifestMissing { dir: "d".into() },
            SourceError::invalid("d", "x"),
            SourceError::HandlerNotFound {
                dir: "d".into(),
                tool: "t".into(),
                handler: "./h".into(),
                reason: None,
            },
            SourceError::HandlerNotFunction {
                dir: "d".into(),
                tool: "t".into(),
                handler: "./h".into(),
                reason: "r".into(),
            },
            SourceError::DuplicateToolId {
                dir: "d".into(),
                id: "x".into(),
            },
            SourceError::DuplicateRouteId {
                dir: "d".into(),
                id: "x".into(),
            },
            SourceError::InvalidApp {
                app: "a".into(),
                reason: "r".into(),
            },
        ];
        for error in errors {
            assert!(error.to_string().starts_with(error.code()), "{error}");
        }
    }

    #[test]
    fn a_handler_reason_is_appended_only_when_present() {
        let plain = SourceError::HandlerNotFound {
            dir: "./p".into(),
            tool: "x".into(),
            handler: "./h".into(),
            reason: None,
        };
        assert_eq!(
            plain.to_string(),
            "ERR_PLUGIN_HANDLER_NOT_FOUND: ./p: tool \"x\" handler \"./h\""
        );
        let escaped = SourceError::HandlerNotFound {
            dir: "./p".into(),
            tool: "x".into(),
            handler: "../h".into(),
            reason: Some("path-escapes-plugin-root".into()),
        };
        assert!(
            escaped
                .to_string()
                .ends_with("\"../h\": path-escapes-plugin-root")
        );
    }
}
