//! The PostgreSQL backend: several gateway replicas sharing one database.
//!
//! Same tables and semantics as SQLite. Races between replicas are settled by
//! the database: a save is one `INSERT … ON CONFLICT DO UPDATE` whose
//! `COALESCE` keeps the first baseline, and migrations run under a
//! transaction-scoped advisory lock.

use std::str::FromStr;

use async_trait::async_trait;
use portcullis_catalog::Tool;
use portcullis_catalog::fingerprint::Fingerprints;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Row, Transaction};

use crate::columns::{RawRow, decode, encode};
use crate::effects::{
    EffectLog, Outcome, Recorded, decode_outcome, encode_outcome, ensure_recordable,
};
use crate::error::{Backend, StoreError};
use crate::migration::{LATEST, SERVERS_TABLE};
use crate::row::PersistedServer;
use crate::store::{Store, defines};

const B: Backend = Backend::Postgres;

/// Serialises migrations across replicas (an arbitrary constant: "PCLS").
const MIGRATION_LOCK: i64 = 0x5043_4c53;

/// A store in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`) and
    /// migrates the database to the current schema, in the default schema.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_in_schema(url, None).await
    }

    /// Like [`PostgresStore::open`], with the tables in `schema` (created if
    /// missing): several deployments, or tests, can share one database.
    /// `schema` must be a plain lowercase identifier (`[a-z_][a-z0-9_]*`).
    pub async fn open_in_schema(url: &str, schema: Option<&str>) -> Result<Self, StoreError> {
        let mut options = PgConnectOptions::from_str(url)
            .map_err(StoreError::database(B, "parse the connection url"))?;
        if let Some(schema) = schema {
            if !is_identifier(schema) {
                return Err(StoreError::Spec {
                    spec: schema.to_owned(),
                    reason: "a schema must match [a-z_][a-z0-9_]*".into(),
                });
            }
            options = options.options([("search_path", schema)]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(StoreError::database(B, "open"))?;
        let store = PostgresStore { pool };
        store.migrate(schema).await?;
        Ok(store)
    }

    /// The connection pool, for tests and tools that inspect the database.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn migrate(&self, schema: Option<&str>) -> Result<(), StoreError> {
        let err = || StoreError::database(B, "migrate");
        let mut tx = self.pool.begin().await.map_err(err())?;
        // Replicas starting together migrate one after the other; the lock is
        // released with the transaction.
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(err())?;
        if let Some(schema) = schema {
            // Checked by `is_identifier`: safe to splice.
            sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .execute(&mut *tx)
                .await
                .map_err(err())?;
        }
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS portcullis_schema (id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1), version BIGINT NOT NULL)",
        )
        .execute(&mut *tx)
        .await
        .map_err(err())?;
        sqlx::query(
            "INSERT INTO portcullis_schema (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
        )
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
        sqlx::query("UPDATE portcullis_schema SET version = $1 WHERE id = 1")
            .bind(LATEST)
            .execute(&mut *tx)
            .await
            .map_err(err())?;
        tx.commit().await.map_err(err())
    }
}

fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && name.len() <= 63
}

/// Version 1: the seed's `mcp_servers` with both JSON columns and a CHECK
/// that admits `stdio`. An older table gets the missing columns (rows keep
/// NULLs) and its CHECK constraints replaced.
async fn adopt_servers_table(tx: &mut Transaction<'_, Postgres>) -> Result<(), sqlx::Error> {
    // `to_regclass` resolves through the search path, like every query here.
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('mcp_servers') IS NOT NULL")
        .fetch_one(&mut **tx)
        .await?;
    if !exists {
        sqlx::query(&crate::migration::servers_ddl(SERVERS_TABLE))
            .execute(&mut **tx)
            .await?;
        return Ok(());
    }
    for column in ["tools", "tool_fingerprints"] {
        sqlx::query(&format!(
            "ALTER TABLE mcp_servers ADD COLUMN IF NOT EXISTS {column} TEXT"
        ))
        .execute(&mut **tx)
        .await?;
    }
    let checks: Vec<String> = sqlx::query_scalar(
        "SELECT conname::text FROM pg_constraint WHERE conrelid = to_regclass('mcp_servers') AND contype = 'c'",
    )
    .fetch_all(&mut **tx)
    .await?;
    for name in checks {
        let quoted = name.replace('"', "\"\"");
        sqlx::query(&format!(
            "ALTER TABLE mcp_servers DROP CONSTRAINT \"{quoted}\""
        ))
        .execute(&mut **tx)
        .await?;
    }
    sqlx::query(
        "ALTER TABLE mcp_servers ADD CONSTRAINT mcp_servers_type_check CHECK (type IN ('stdio','streamable-http','sse'))",
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The columns of one `mcp_servers` row. The JSON columns are read
/// leniently: a value of the wrong SQL type reads as absent, like one that
/// does not parse.
fn raw_row(row: &sqlx::postgres::PgRow) -> Result<RawRow, sqlx::Error> {
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
impl Store for PostgresStore {
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
            "SELECT id, name, type, url, tools, tool_fingerprints FROM mcp_servers WHERE id = $1",
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
            "INSERT INTO mcp_servers (id, name, type, url, tools, tool_fingerprints) VALUES ($1, $2, $3, $4, $5, $6) \
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
            let swapped = sqlx::query("UPDATE mcp_servers SET tool_fingerprints = $1 WHERE id = $2 AND tool_fingerprints = $3")
                .bind(encode(Some(proposal)))
                .bind(&row.id)
                .bind(garbage)
                .execute(&self.pool)
                .await
                .map_err(op())?
                .rows_affected();
            if swapped > 0 {
                sqlx::query("DELETE FROM mcp_trusted_tools WHERE server_id = $1")
                    .bind(&row.id)
                    .execute(&self.pool)
                    .await
                    .map_err(op())?;
            }
            let now: Option<Option<String>> =
                sqlx::query_scalar("SELECT tool_fingerprints FROM mcp_servers WHERE id = $1")
                    .bind(&row.id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(op())?;
            baseline = decode(B, &row.id, "tool_fingerprints", now.flatten().as_deref());
        }
        if defines(row.tools.as_deref(), baseline.as_ref()) {
            sqlx::query(
                "INSERT INTO mcp_trusted_tools (server_id, tools) VALUES ($1, $2) ON CONFLICT(server_id) DO NOTHING",
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
        let removed = sqlx::query("DELETE FROM mcp_servers WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(op())?
            .rows_affected();
        sqlx::query("DELETE FROM mcp_trusted_tools WHERE server_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(op())?;
        tx.commit().await.map_err(op())?;
        Ok(removed > 0)
    }

    async fn trusted_tools(&self, id: &str) -> Result<Option<Vec<Tool>>, StoreError> {
        let text: Option<String> =
            sqlx::query_scalar("SELECT tools FROM mcp_trusted_tools WHERE server_id = $1")
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
impl EffectLog for PostgresStore {
    async fn recorded(&self, key: &str) -> Result<Option<Recorded>, StoreError> {
        let row = sqlx::query("SELECT tool_name, outcome FROM mcp_effects WHERE key = $1")
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
            "INSERT INTO mcp_effects (key, tool_name, outcome) VALUES ($1, $2, $3) ON CONFLICT(key) DO NOTHING",
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
