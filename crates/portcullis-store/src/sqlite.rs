//! The SQLite backend: one file beside the gateway, the default.
//!
//! The `mcp_servers` table keeps the legacy name and columns, so a database
//! holding a legacy table (either of its two shapes) opens here and keeps
//! its rows;
//! see [`crate::migration`] for the versions.

use std::path::Path;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{Sqlite, Transaction};

use crate::error::{Backend, StoreError};
use crate::migration::{LATEST, SERVERS_TABLE};
use crate::sql::{Sql, sql_store};

const B: Backend = Backend::Sqlite;

/// A store in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    sql: Sql<Sqlite>,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` and migrates it to
    /// the current schema. The file is readable by this user only (`0600`
    /// on Unix; an existing file more open than that is tightened, and
    /// SQLite gives its journal files the same mode).
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        private_file(path).map_err(|source| StoreError::Io {
            backend: B,
            path: path.display().to_string(),
            source,
        })?;
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
        migrate(&pool).await?;
        Ok(SqliteStore {
            sql: Sql::new(pool),
        })
    }

    /// The connection pool, for tests and tools that inspect the file.
    pub fn pool(&self) -> &SqlitePool {
        self.sql.pool()
    }
}

/// Creates `path` empty with mode `0600` if it is missing (SQLite itself
/// would create it world-readable under the usual umask), or takes the
/// group and other bits off an existing one. A file this user cannot
/// chmod (another owner's) is left as it is, with a warning.
#[cfg(unix)]
fn private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & 0o077 != 0
        && let Err(error) =
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700))
    {
        tracing::warn!(path = %path.display(), %error, "the SQLite store is readable by other users and could not be made private");
    }
    Ok(())
}

#[cfg(not(unix))]
fn private_file(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Brings the file to [`LATEST`]: version 1 here, later steps shared.
async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    let err = || StoreError::database(B, "migrate");
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS portcullis_schema (id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1), version INTEGER NOT NULL)",
    )
    .execute(pool)
    .await
    .map_err(err())?;
    sqlx::query("INSERT OR IGNORE INTO portcullis_schema (id, version) VALUES (1, 0)")
        .execute(pool)
        .await
        .map_err(err())?;
    let mut tx = pool.begin().await.map_err(err())?;
    // Write first, so this transaction holds the write lock before it
    // reads the version: two processes opening one file at once then
    // migrate one after the other instead of deadlocking.
    sqlx::query("UPDATE portcullis_schema SET version = version WHERE id = 1")
        .execute(&mut *tx)
        .await
        .map_err(err())?;
    let version = Sql::<Sqlite>::schema_version(&mut tx)
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
    Sql::<Sqlite>::upgrade_from(&mut tx, version)
        .await
        .map_err(err())?;
    tx.commit().await.map_err(err())
}

/// Version 1: `mcp_servers`, with both JSON columns and a CHECK that admits
/// `stdio`. A legacy table gets the missing columns (rows keep NULLs, as a
/// legacy table's own upgrade left them) and is then rebuilt, because
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

sql_store!(SqliteStore, Sqlite);
