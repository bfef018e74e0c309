//! Typed errors: wiring mistakes (refused before anything connects) and call
//! failures (one call fails; the toolset lives on).
//!
//! Call failures carry fixed sentences, because the model reads them: each says what happened and what to do next.

use thiserror::Error;

/// A mistake in how `connect` was called. Returned before any server is
/// contacted; nothing a server does can produce one.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum WiringError {
    /// `auth` fixes a credential onto each connection, so the toolset belongs
    /// to one session and must say which.
    #[error(
        "MCP options: `auth` needs a `session`: a toolset built with auth belongs to one session (build one per session and close it when the session ends)"
    )]
    AuthWithoutSession,
    /// A resolver `allowed_hosts` is asked per session.
    #[error("MCP options: a resolver `allowed_hosts` needs a `session` to resolve against")]
    HostResolverWithoutSession,
    /// [`crate::rebuild_from_store`] was called without a store.
    #[error(
        "MCP options: rebuild_from_store needs a `store` (ConnectOptions::with_store) to wake from"
    )]
    StoreRequired,
    /// The store could not be read on wake.
    #[error("MCP store: the stored servers could not be read on wake: {reason}")]
    StoreUnreadable {
        /// The store's own words.
        reason: String,
    },
    /// A visibility filter sets both `allow` and `block`.
    #[error(transparent)]
    Filter(#[from] portcullis_catalog::CatalogError),
}

/// The sentence for [`CallError::Reconnecting`].
fn reconnecting_message(server: &str, attempt: u32, retry_in_ms: u128) -> String {
    let next = match (attempt, retry_in_ms) {
        (0, _) => String::new(),
        (n, 0) => format!(" (attempt {n} is under way)"),
        (n, ms) => format!(" (attempt {n} in {ms} ms)"),
    };
    format!(
        "MCP server \"{server}\" is down and being reconnected{next}; the call was not sent. Try again shortly."
    )
}

/// Why one call produced no tool result.
///
/// Refusals the model can act on (a denied policy, invalid arguments, a
/// quarantined tool) are *results*, not errors: see `Toolset::call`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CallError {
    /// The toolset uses per-session credentials and the call carried no
    /// session.
    #[error("MCP tool \"{tool}\" requires a session context.")]
    SessionRequired {
        /// The qualified name called.
        tool: String,
    },
    /// The server is closed, failed authorization, or its connection ended.
    #[error("MCP server \"{server}\" is unavailable.")]
    Unavailable {
        /// The server's effective name.
        server: String,
    },
    /// The server's connection closed and is being reopened in the
    /// background (`ConnectOptions::reconnect`): the call was not sent.
    #[error("{}", reconnecting_message(server, *attempt, *retry_in_ms))]
    Reconnecting {
        /// The server's effective name.
        server: String,
        /// The attempt to reopen it that comes next (0: not scheduled yet).
        attempt: u32,
        /// Milliseconds until that attempt starts (0: now, or unknown).
        retry_in_ms: u128,
    },
    /// The server's connection closed while the call was in flight (a
    /// stdio child that exited, a stream that ended). The call is never
    /// sent again by the toolset: it may or may not have taken effect.
    #[error(
        "MCP server \"{server}\" closed its connection during the call to \"{tool}\"; the call was not retried and may or may not have taken effect, so check before calling it again."
    )]
    ConnectionLost {
        /// The qualified name called.
        tool: String,
        /// The server's effective name.
        server: String,
    },
    /// The server no longer lists the tool this name was projected from.
    #[error(
        "MCP tool \"{tool}\" is no longer published by server \"{server}\". Its catalogue changed since this tool list was built; use another tool."
    )]
    NoLongerPublished {
        /// The qualified name called.
        tool: String,
        /// The server's effective name.
        server: String,
    },
    /// No tool of that name in this catalogue.
    #[error("Unknown MCP tool \"{tool}\". Use a qualified name like server__tool.")]
    UnknownTool {
        /// The name called.
        tool: String,
    },
    /// The policy answered `ask` and the call context carried no approval.
    #[error("MCP tool \"{tool}\" needs approval first: {title}")]
    ApprovalRequired {
        /// The qualified name called.
        tool: String,
        /// What to show the person asked.
        title: String,
    },
    /// The per-call credential could not be resolved.
    #[error("Resolving credentials for MCP server \"{server}\" failed: {reason}")]
    Credentials {
        /// The server's effective name.
        server: String,
        /// The resolver's own words (never a token).
        reason: String,
    },
    /// The server answered 401; it stays unavailable for this toolset.
    #[error("MCP server \"{server}\" rejected authorization (HTTP 401).")]
    Unauthorized {
        /// The server's effective name.
        server: String,
    },
    /// The server answered 403; it stays unavailable for this toolset.
    #[error("MCP server \"{server}\" denied access (HTTP 403).")]
    Forbidden {
        /// The server's effective name.
        server: String,
    },
    /// No answer within the per-connection timeout; the server was told to
    /// cancel.
    #[error("MCP tool \"{tool}\" timed out after {timeout_ms} ms.")]
    Timeout {
        /// The qualified name called.
        tool: String,
        /// The timeout that elapsed.
        timeout_ms: u128,
    },
    /// The caller cancelled; the server was told to cancel.
    #[error("MCP tool \"{tool}\" was cancelled.")]
    Cancelled {
        /// The qualified name called.
        tool: String,
    },
    /// The server answered with a JSON-RPC error (not a tool error result).
    #[error("MCP server \"{server}\" refused the call: {message}")]
    Protocol {
        /// The server's effective name.
        server: String,
        /// The server's error message.
        message: String,
    },
    /// The server declared an output schema and its result does not match
    /// it (or carries no structured content at all).
    #[error(
        "MCP tool \"{tool}\" returned a result that does not match its output schema: {problem}"
    )]
    OutputSchema {
        /// The qualified name called.
        tool: String,
        /// What is wrong (paths and rules, never the values).
        problem: String,
    },
    /// The connection failed during the call (the server crashed, the stream
    /// broke, a redirect was refused). The server is marked unavailable when
    /// its connection is gone.
    #[error("MCP server \"{server}\" failed during the call: {reason}")]
    Transport {
        /// The server's effective name.
        server: String,
        /// What broke.
        reason: String,
    },
    /// The effect log holds a failure recorded for this call's idempotency
    /// key (see `crate::effects`); the server was not called again.
    #[error("{message}")]
    Replayed {
        /// The qualified name called.
        tool: String,
        /// The recorded failure's message, verbatim.
        message: String,
    },
}
