//! The PostgreSQL backend: several gateway replicas sharing one database.
//!
//! Same tables and semantics as SQLite. Races between replicas are settled by
//! the database: a save is one `INSERT … ON CONFLICT DO UPDATE` whose
//! `COALESCE` keeps the first baseline, and migrations run under a
//! transaction-scoped advisory lock.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};

use crate::error::{Backend, StoreError};
use crate::migration::{LATEST, SERVERS_TABLE};
use crate::sql::{Sql, sql_store};

const B: Backend = Backend::Postgres;

/// Serialises migrations across replicas (an arbitrary constant: "PCLS").
const MIGRATION_LOCK: i64 = 0x5043_4c53;

/// A store in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    sql: Sql<Postgres>,
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
        migrate(&pool, schema).await?;
        Ok(PostgresStore {
            sql: Sql::new(pool),
        })
    }

    /// The connection pool, for tests and tools that inspect the database.
    pub fn pool(&self) -> &PgPool {
        self.sql.pool()
    }
}

/// Brings the database to [`LATEST`]: version 1 here, later steps shared.
async fn migrate(pool: &PgPool, schema: Option<&str>) -> Result<(), StoreError> {
    let err = || StoreError::database(B, "migrate");
    let mut tx = pool.begin().await.map_err(err())?;
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
    let version = Sql::<Postgres>::schema_version(&mut tx)
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
    Sql::<Postgres>::upgrade_from(&mut tx, version)
        .await
        .map_err(err())?;
    tx.commit().await.map_err(err())
}

fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && name.len() <= 63
}

/// Version 1: `mcp_servers` with both JSON columns and a CHECK
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

sql_store!(PostgresStore, Postgres);
