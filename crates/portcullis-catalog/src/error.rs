//! The catalogue's error type: wiring mistakes a caller must fix.
//!
//! Input from servers never produces these: a hostile listing yields
//! diagnostics and quarantined tools, not errors.

use thiserror::Error;

/// A mistake in how the catalogue was configured.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// A tools filter set both `allow` and `block`.
    #[error(
        "MCP tools filter: set either \"allow\" or \"block\", not both (allow shows only the listed tools; block hides the listed tools)"
    )]
    FilterConflict,
    /// An input schema that cannot be compiled into a validator.
    #[error("tool {tool:?} has an input schema that cannot be used: {reason}")]
    InvalidSchema {
        /// The tool whose schema failed.
        tool: String,
        /// Why, in the validator's words.
        reason: String,
    },
}
