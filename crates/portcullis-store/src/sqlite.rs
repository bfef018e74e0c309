//! The SQLite backend: one file beside the gateway, the default.
//!
//! The `mcp_servers` table keeps the seed's name and columns, so a database
//! the seed wrote (either of its two shapes) opens here and keeps its rows;
//! see [`crate::migration`] for the versions.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use portcullis_catalog::Tool;
use portcullis_catalog::fingerprint::Fingerprints;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{Row, Sqlite, Transaction};

use crate::columns::{RawRow, decode, encode};
use crate::effects::{
    EffectLog, Outcome, Recorded, decode_outcome, encode_outcome, ensure_recordable,
};
use crate::error::{Backend, StoreError};
use crate::migration::{LATEST, SERVERS_TABLE};
use crate::row::PersistedServer;
use crate::store::{Store, defines};

const B: Backend = Backend::Sqlite;

/// A store in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` and migrates it to
    /// the current schema.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            // Writers queue instead of failing while another replica or pool
            // holds the write lock.
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(StoreError::database(B, format!("open {}", path.display())))?;
        let store = SqliteStore { pool };
        store.migrate().await?;
        Ok(store)
    }

    /// The connection pool, for tests and tools that inspect the file.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let err = || StoreError::database(B, "migrate");
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS portcullis_schema (id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1), version INTEGER NOT NULL)",
        )
        .execute(&self.pool)
        .await
        .map_err(err())?;
        sqlx::query("INSERT OR IGNORE INTO portcullis_schema (id, version) VALUES (1, 0)")
            .execute(&self.pool)
            .await
            .map_err(err())?;
        let mut tx = self.pool.begin().await.map_err(err())?;
        // Write first, so this transaction holds the write lock before it
        // reads the version: two processes opening one file at once then
        // migrate one after the other instead of deadlocking.
        sqlx::query("UPDATE portcullis_schema SET version = version WHERE id = 1")
            .execute(&mut *tx)
            .await
            .map_err(err())?;
        let version: i64 = sqlx::query_scalar("SELECT version FROM portcullis_schema WHERE id = 1")
            .fetch_one(&mut *tx)
            .await
            .map_err(err())?;
        if version > LATEST {
            return Err(StoreError::SchemaTooNew {
                backend: B,
                found: version,
                known: LATEST,
            });
        }
        if version < 1 {
            adopt_servers_table(&mut tx).await.map_err(err())?;
        }
        if version < 2 {
            for ddl in crate::migration::V2_TABLES {
                sqlx::query(ddl).execute(&mut *tx).await.map_err(err())?;
            }
        }
        sqlx::query("UPDATE portcullis_schema SET version = ? WHERE id = 1")
            .bind(LATEST)
            .execute(&mut *tx)
            .await
            .map_err(err())?;
        tx.commit().await.map_err(err())
    }
}

/// Version 1: the seed's `mcp_servers`, with both JSON columns and a CHECK
/// that admits `stdio`. A seed-era table gets the missing columns (rows keep
/// NULLs, as the seed's own migration did) and is then rebuilt, because
/// SQLite cannot alter a CHECK constraint in place.
async fn adopt_servers_table(tx: &mut Transaction<'_, Sqlite>) -> Result<(), sqlx::Error> {
    let exists: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'mcp_servers'",
    )
    .fetch_one(&mut **tx)
    .await?;
    if exists == 0 {
        sqlx::query(&crate::migration::servers_ddl(SERVERS_TABLE))
            .execute(&mut **tx)
            .await?;
        return Ok(());
    }
    let columns: Vec<String> =
        sqlx::query_scalar("SELECT name FROM pragma_table_info('mcp_servers')")
            .fetch_all(&mut **tx)
            .await?;
    for column in ["tools", "tool_fingerprints"] {
        if !columns.iter().any(|c| c == column) {
            sqlx::query(&format!("ALTER TABLE mcp_servers ADD COLUMN {column} TEXT"))
                .execute(&mut **tx)
                .await?;
        }
    }
    let rebuilt = "mcp_servers_migrating";
    for statement in [
        format!("DROP TABLE IF EXISTS {rebuilt}"),
        crate::migration::servers_ddl(rebuilt),
        format!(
            "INSERT INTO {rebuilt} (id, name, type, url, tools, tool_fingerprints) SELECT id, name, type, url, tools, tool_fingerprints FROM mcp_servers"
        ),
        "DROP TABLE mcp_servers".to_owned(),
        format!("ALTER TABLE {rebuilt} RENAME TO mcp_servers"),
    ] {
        sqlx::query(&statement).execute(&mut **tx).await?;
    }
    Ok(())
}

/// The columns of one `mcp_servers` row. The JSON columns are read
/// leniently: a value of the wrong SQL type reads as absent, like one that
/// does not parse.
fn raw_row(row: &sqlx::sqlite::SqliteRow) -> Result<RawRow, sqlx::Error> {
    Ok(RawRow {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        kind: row.try_get("type")?,
        url: row.try_get("url")?,
        tools: row.try_get("tools").ok().flatten(),
        tool_fingerprints: row.try_get("tool_fingerprints").ok().flatten(),
    })
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> Backend {
        B
    }

    async fn list(&self) -> Result<Vec<PersistedServer>, StoreError> {
        let op = || StoreError::database(B, "list mcp servers");
        let rows = sqlx::query(
            "SELECT id, name, type, url, tools, tool_fingerprints FROM mcp_servers ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(op())?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.extend(raw_row(row).map_err(op())?.into_row(B));
        }
        Ok(out)
    }

    async fn get(&self, id: &str) -> Result<Option<PersistedServer>, StoreError> {
        let op = || StoreError::database(B, format!("read mcp server {id:?}"));
        let row = sqlx::query(
            "SELECT id, name, type, url, tools, tool_fingerprints FROM mcp_servers WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(op())?;
        match row {
            Some(row) => Ok(raw_row(&row).map_err(op())?.into_row(B)),
            None => Ok(None),
        }
    }

    async fn save(&self, row: &PersistedServer) -> Result<Option<Fingerprints>, StoreError> {
        if let Some(reason) = row.refusal() {
            return Err(StoreError::InvalidRow {
                backend: B,
                id: row.id.clone(),
                reason,
            });
        }
        let op = || StoreError::database(B, format!("save mcp server {:?}", row.id));
        // One statement, so the database decides the race: COALESCE keeps
        // whichever baseline reached the row first.
        let stored: Option<String> = sqlx::query_scalar(
            "INSERT INTO mcp_servers (id, name, type, url, tools, tool_fingerprints) VALUES (?, ?, ?, ?, ?, ?) \
             ON CONFLICT(id) DO UPDATE SET name = excluded.name, type = excluded.type, url = excluded.url, \
             tools = excluded.tools, tool_fingerprints = COALESCE(mcp_servers.tool_fingerprints, excluded.tool_fingerprints) \
             RETURNING tool_fingerprints",
        )
        .bind(&row.id)
        .bind(&row.name)
        .bind(row.kind.as_str())
        .bind(&row.url)
        .bind(encode(row.tools.as_ref()))
        .bind(encode(row.tool_fingerprints.as_ref()))
        .fetch_one(&self.pool)
        .await
        .map_err(op())?;
        let mut baseline: Option<Fingerprints> =
            decode(B, &row.id, "tool_fingerprints", stored.as_deref());
        if let (None, Some(garbage), Some(proposal)) = (&baseline, &stored, &row.tool_fingerprints)
        {
            // The recorded baseline no longer parses, so `list` shows none;
            // treat it as none here too: the first proposal replaces it
            // (compare-and-swap, so racers still agree) and the definitions
            // kept for it go with it.
            let swapped = sqlx::query("UPDATE mcp_servers SET tool_fingerprints = ? WHERE id = ? AND tool_fingerprints = ?")
                .bind(encode(Some(proposal)))
                .bind(&row.id)
                .bind(garbage)
                .execute(&self.pool)
                .await
                .map_err(op())?
                .rows_affected();
            if swapped > 0 {
                sqlx::query("DELETE FROM mcp_trusted_tools WHERE server_id = ?")
                    .bind(&row.id)
                    .execute(&self.pool)
                    .await
                    .map_err(op())?;
            }
            let now: Option<Option<String>> =
                sqlx::query_scalar("SELECT tool_fingerprints FROM mcp_servers WHERE id = ?")
                    .bind(&row.id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(op())?;
            baseline = decode(B, &row.id, "tool_fingerprints", now.flatten().as_deref());
        }
        if defines(row.tools.as_deref(), baseline.as_ref()) {
            sqlx::query(
                "INSERT INTO mcp_trusted_tools (server_id, tools) VALUES (?, ?) ON CONFLICT(server_id) DO NOTHING",
            )
            .bind(&row.id)
            .bind(encode(row.tools.as_ref()))
            .execute(&self.pool)
            .await
            .map_err(op())?;
        }
        Ok(baseline)
    }

    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let op = || StoreError::database(B, format!("remove mcp server {id:?}"));
        let mut tx = self.pool.begin().await.map_err(op())?;
        let removed = sqlx::query("DELETE FROM mcp_servers WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(op())?
            .rows_affected();
        sqlx::query("DELETE FROM mcp_trusted_tools WHERE server_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(op())?;
        tx.commit().await.map_err(op())?;
        Ok(removed > 0)
    }

    async fn trusted_tools(&self, id: &str) -> Result<Option<Vec<Tool>>, StoreError> {
        let text: Option<String> =
            sqlx::query_scalar("SELECT tools FROM mcp_trusted_tools WHERE server_id = ?")
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(StoreError::database(
                    B,
                    format!("read trusted tools of {id:?}"),
                ))?;
        Ok(decode(B, id, "trusted tools", text.as_deref()))
    }

    fn effects(&self) -> &dyn EffectLog {
        self
    }
}

#[async_trait]
impl EffectLog for SqliteStore {
    async fn recorded(&self, key: &str) -> Result<Option<Recorded>, StoreError> {
        let row = sqlx::query("SELECT tool_name, outcome FROM mcp_effects WHERE key = ?")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::database(B, "read effect"))?;
        let Some(row) = row else { return Ok(None) };
        let tool_name: String = row
            .try_get("tool_name")
            .map_err(StoreError::database(B, "read effect"))?;
        let outcome: String = row
            .try_get("outcome")
            .map_err(StoreError::database(B, "read effect"))?;
        decode_outcome(B, key, tool_name, &outcome).map(Some)
    }

    async fn record(
        &self,
        key: &str,
        tool_name: &str,
        outcome: &Outcome,
    ) -> Result<Recorded, StoreError> {
        ensure_recordable(B, tool_name)?;
        sqlx::query(
            "INSERT INTO mcp_effects (key, tool_name, outcome) VALUES (?, ?, ?) ON CONFLICT(key) DO NOTHING",
        )
        .bind(key)
        .bind(tool_name)
        .bind(encode_outcome(outcome))
        .execute(&self.pool)
        .await
        .map_err(StoreError::database(B, format!("record effect of {tool_name:?}")))?;
        self.recorded(key)
            .await?
            .ok_or_else(|| StoreError::CorruptEffect {
                backend: B,
                key: key.to_owned(),
                reason: "the record vanished right after it was written".into(),
            })
    }
}
