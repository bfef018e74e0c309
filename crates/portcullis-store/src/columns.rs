//! How the SQL backends write a row's JSON columns and read them back:
//! leniently, because the listing and baseline columns are caches of data a
//! remote server published and a bad value must cost a `tools/list`, not a
//! startup.

use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::{CachedTools, TransportKind};
use serde::de::DeserializeOwned;

use crate::error::Backend;
use crate::row::PersistedServer;

/// The text of an optional JSON column (`NULL` when absent).
pub(crate) fn encode<T: serde::Serialize>(value: Option<&T>) -> Option<String> {
    // Tools and fingerprints are plain data: serialising them cannot fail.
    value.map(|v| serde_json::to_string(v).unwrap_or_default())
}

/// Parses an optional JSON column; a value that does not parse as `T` is
/// dropped with a warning.
pub(crate) fn decode<T: DeserializeOwned>(
    backend: Backend,
    id: &str,
    column: &str,
    text: Option<&str>,
) -> Option<T> {
    let text = text?;
    match serde_json::from_str(text) {
        Ok(value) => Some(value),
        Err(error) => {
            tracing::warn!(%backend, server = id, column, %error, "dropping a stored value that no longer parses");
            None
        }
    }
}

/// The transport a `type` column names.
pub(crate) fn transport(text: &str) -> Option<TransportKind> {
    match text {
        "stdio" => Some(TransportKind::Stdio),
        "streamable-http" => Some(TransportKind::StreamableHttp),
        "sse" => Some(TransportKind::Sse),
        _ => None,
    }
}

/// The raw columns of one `mcp_servers` row. The JSON columns are
/// borrowed from the database's row: the cached listing is megabytes on a
/// wake, and it is parsed straight from the driver's copy instead of being
/// copied into a `String` first.
pub(crate) struct RawRow<'r> {
    pub id: String,
    pub name: String,
    pub kind: String,
    pub url: String,
    pub tools: Option<&'r str>,
    pub tool_fingerprints: Option<&'r str>,
    pub tool_digests: Option<&'r str>,
}

impl RawRow<'_> {
    /// The row, with unparseable caches dropped; `None` (with a warning) for
    /// a transport this build does not know, which the schema's CHECK
    /// constraint should make impossible.
    pub(crate) fn into_row(self, backend: Backend) -> Option<PersistedServer> {
        let Some(kind) = transport(&self.kind) else {
            tracing::warn!(%backend, server = self.id, kind = self.kind, "skipping a stored server with an unknown transport");
            return None;
        };
        // Schemas kept as the stored text until read (`CachedTools`): a
        // wake shows most of them deferred and reads few.
        let tools = decode::<CachedTools>(backend, &self.id, "tools", self.tools).map(|t| t.0);
        let tool_fingerprints: Option<Fingerprints> = decode(
            backend,
            &self.id,
            "tool_fingerprints",
            self.tool_fingerprints,
        );
        let digests: Option<Vec<String>> =
            decode(backend, &self.id, "tool_digests", self.tool_digests);
        Some(PersistedServer::from_columns(
            self.id,
            self.name,
            kind,
            self.url,
            tools,
            tool_fingerprints,
            digests,
        ))
    }
}
