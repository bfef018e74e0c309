//! The schema's versions. Both SQL backends keep the version in a one-row
//! `portcullis_schema` table and, on open, apply every step above it inside
//! one transaction (serialised against other openers), so a database written
//! by an older version opens and keeps its rows.
//!
//! | version | what it holds |
//! |---|---|
//! | 0 | nothing, or a legacy table (written before these versions existed): `mcp_servers (id, name, type, url)` with `type IN ('streamable-http','sse')`, possibly with `tools` and `tool_fingerprints` |
//! | 1 | `mcp_servers` with both JSON columns and `type IN ('stdio','streamable-http','sse')` |
//! | 2 | `mcp_trusted_tools` (the definitions a baseline was recorded from) and `mcp_effects` (the effect log) |
//! | 3 | `mcp_effects.recorded_at` (for retention; rows already there are stamped with the time of the upgrade, so they get a full retention period) and `portcullis_audit` (the audit trail) |
//! | 4 | `portcullis_oauth_grants` (upstreams' OAuth grants, sealed by the gateway: base64 text the store cannot open) |
//! | 5 | `mcp_servers.tool_digests`: each cached tool's fingerprint, written by the store beside the cache so a wake need not hash it again (`NULL` in rows saved before: those are hashed on wake until the next save) |
//!
//! Step 1 differs per backend (adopting a legacy table); every later step
//! is plain SQL that SQLite and PostgreSQL both accept, and is applied by
//! code both backends share. JSON columns are `TEXT` in both, so a value
//! that no longer parses is a cache miss, not a database error; times are
//! milliseconds since the Unix epoch in a `BIGINT`.

/// The newest schema version this build writes.
pub const LATEST: i64 = 5;

/// The servers table (the legacy table's name, kept so databases that
/// already hold one open here).
pub(crate) const SERVERS_TABLE: &str = "mcp_servers";

/// `CREATE TABLE` for a servers table named `table`, at version 1.
pub(crate) fn servers_ddl(table: &str) -> String {
    format!(
        "CREATE TABLE {table} (\
         id TEXT PRIMARY KEY NOT NULL, \
         name TEXT NOT NULL, \
         type TEXT NOT NULL CONSTRAINT mcp_servers_type_check CHECK (type IN ('stdio','streamable-http','sse')), \
         url TEXT NOT NULL, \
         tools TEXT, \
         tool_fingerprints TEXT)"
    )
}

/// Version 2's tables.
pub(crate) const V2_TABLES: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS mcp_trusted_tools (server_id TEXT PRIMARY KEY NOT NULL, tools TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS mcp_effects (key TEXT PRIMARY KEY NOT NULL, tool_name TEXT NOT NULL, outcome TEXT NOT NULL)",
];

/// Version 3's DDL; `auto_id` is the dialect's auto-numbered primary key
/// column type. Existing effects are then stamped with the upgrade's time.
pub(crate) fn v3_statements(auto_id: &str) -> [String; 4] {
    [
        "ALTER TABLE mcp_effects ADD COLUMN recorded_at BIGINT NOT NULL DEFAULT 0".to_owned(),
        "CREATE INDEX IF NOT EXISTS mcp_effects_recorded_at ON mcp_effects (recorded_at)"
            .to_owned(),
        format!(
            "CREATE TABLE IF NOT EXISTS portcullis_audit (\
             id {auto_id}, \
             at BIGINT NOT NULL, \
             identity TEXT, \
             tool TEXT NOT NULL, \
             decision TEXT NOT NULL, \
             duration_ms BIGINT NOT NULL, \
             outcome TEXT NOT NULL, \
             error_code TEXT, \
             argument_shape TEXT NOT NULL)"
        ),
        "CREATE INDEX IF NOT EXISTS portcullis_audit_at ON portcullis_audit (at, id)".to_owned(),
    ]
}

/// Version 4's table: one sealed grant per upstream.
pub(crate) const V4_TABLES: [&str; 1] = ["CREATE TABLE IF NOT EXISTS portcullis_oauth_grants (\
     upstream TEXT PRIMARY KEY NOT NULL, \
     issuer TEXT NOT NULL, \
     sealed TEXT NOT NULL, \
     updated_at BIGINT NOT NULL)"];

/// Version 5's column: the digests of the cached listing.
pub(crate) const V5_COLUMNS: [&str; 1] = ["ALTER TABLE mcp_servers ADD COLUMN tool_digests TEXT"];
