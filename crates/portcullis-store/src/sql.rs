//! What the SQLite and PostgreSQL backends share: every query of the
//! `Store`, `EffectLog`, `AuditLog` and `GrantLog` traits and the migration steps after
//! the first, written once, generic over the sqlx database.
//!
//! The two dialects differ here only in what [`Dialect`] says: placeholder
//! syntax (queries are written with `?` and rendered as `$1, $2, …` for
//! PostgreSQL), the auto-numbered key column, and how to read a statement's
//! affected-row count. Opening and the first migration step (adopting a
//! legacy table, locking out concurrent migrators) stay in each backend's
//! module because they genuinely differ.
//!
//! Correctness under concurrency comes from single statements, as before:
//! a save that writes is one upsert whose `COALESCE` keeps the first
//! baseline (a save that would change nothing is one read, and writes
//! nothing), an effect is one `INSERT … ON CONFLICT DO NOTHING`.

use std::borrow::Cow;
use std::time::SystemTime;

use futures::TryStreamExt;
use portcullis_catalog::Tool;
use portcullis_catalog::fingerprint::Fingerprints;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

use crate::audit::{ArgumentShape, AuditDecision, AuditOutcome, AuditRecord};
use crate::columns::{RawRow, decode, encode};
use crate::decoding::Decoding;
use crate::effects::{Outcome, Recorded, decode_outcome, encode_outcome, ensure_recordable};
use crate::error::{Backend, StoreError};
use crate::grants::SealedGrant;
use crate::migration::{LATEST, V2_TABLES, V4_TABLES, V5_COLUMNS, v3_statements};
use crate::row::PersistedServer;
use crate::store::defines;
use crate::time::{from_millis, to_millis};

/// What a SQL database needs to say for the shared queries to run on it.
pub(crate) trait Dialect: Database {
    /// Which backend this is.
    const BACKEND: Backend;
    /// The column definition of an auto-numbered primary key.
    const AUTO_ID: &'static str;
    /// `sql`, written with `?` placeholders, in this database's syntax.
    fn render(sql: &str) -> Cow<'_, str>;
    /// How many rows a statement changed.
    fn rows_affected(result: &Self::QueryResult) -> u64;
    /// The statement that opens a transaction which will write, where the
    /// database's own `BEGIN` would not take the write lock up front.
    const BEGIN_WRITE: Option<&'static str>;
    /// Put after a text comparison so that it compares bytes, whatever
    /// collation the column was created with.
    const BYTEWISE: &'static str;
}

#[cfg(feature = "sqlite")]
impl Dialect for sqlx::Sqlite {
    const BACKEND: Backend = Backend::Sqlite;
    const AUTO_ID: &'static str = "INTEGER PRIMARY KEY AUTOINCREMENT";
    // A deferred transaction that reads first (an unchanged save's check)
    // and writes later must upgrade its lock, and SQLite answers that
    // upgrade under contention with an immediate SQLITE_BUSY instead of
    // waiting: take the write lock at BEGIN, where the busy timeout waits.
    const BEGIN_WRITE: Option<&'static str> = Some("BEGIN IMMEDIATE");
    // Text compares with BINARY unless told otherwise, and our tables
    // never tell it otherwise.
    const BYTEWISE: &'static str = "";

    fn render(sql: &str) -> Cow<'_, str> {
        Cow::Borrowed(sql)
    }

    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
}

#[cfg(feature = "postgres")]
impl Dialect for sqlx::Postgres {
    const BACKEND: Backend = Backend::Postgres;
    const AUTO_ID: &'static str = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY";
    const BEGIN_WRITE: Option<&'static str> = None;
    // An adopted legacy table keeps its columns' collations, which may not
    // be deterministic; "C" compares bytes.
    const BYTEWISE: &'static str = " COLLATE \"C\"";

    fn render(sql: &str) -> Cow<'_, str> {
        Cow::Owned(numbered_placeholders(sql))
    }

    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
}

/// `?, ?` → `$1, $2`. Our queries hold no `?` inside literals or
/// identifiers, so every `?` is a placeholder.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// The columns a server row is selected with, in `RawRow` order.
const SERVER_COLUMNS: &str = "id, name, type, url, tools, tool_fingerprints, tool_digests";
/// [`SERVER_COLUMNS`] with the cache and its digests read only when no
/// baseline is recorded.
const TRUST_COLUMNS: &str = "id, name, type, url, \
     CASE WHEN tool_fingerprints IS NULL THEN tools END, tool_fingerprints, \
     CASE WHEN tool_fingerprints IS NULL THEN tool_digests END";

/// The columns an audit record is selected with.
const AUDIT_COLUMNS: &str =
    "at, identity, tool, decision, duration_ms, outcome, error_code, argument_shape";

/// A pool and the shared queries over it.
pub(crate) struct Sql<DB: Database> {
    pool: Pool<DB>,
}

impl<DB: Database> Clone for Sql<DB> {
    fn clone(&self) -> Self {
        Sql {
            pool: self.pool.clone(),
        }
    }
}

impl<DB: Database> std::fmt::Debug for Sql<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.pool.fmt(f)
    }
}

impl<DB> Sql<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> String: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB>,
    String: Type<DB> + for<'r> Decode<'r, DB>,
    for<'r> &'r str: Type<DB> + Decode<'r, DB>,
    i64: Type<DB> + for<'r> Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    /// Wraps an open, migrated pool.
    pub(crate) fn new(pool: Pool<DB>) -> Self {
        Sql { pool }
    }

    /// The pool.
    pub(crate) fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    // ------------------------------------------------------------ migration

    /// The schema version recorded in `portcullis_schema`.
    pub(crate) async fn schema_version(conn: &mut DB::Connection) -> Result<i64, sqlx::Error> {
        sqlx::query("SELECT version FROM portcullis_schema WHERE id = 1")
            .fetch_one(&mut *conn)
            .await?
            .try_get(0)
    }

    /// Applies every step after the first that `from` lacks, then records
    /// [`LATEST`]. Runs inside the opener's migration transaction.
    pub(crate) async fn upgrade_from(
        conn: &mut DB::Connection,
        from: i64,
    ) -> Result<(), sqlx::Error> {
        if from < 2 {
            for ddl in V2_TABLES {
                sqlx::query(ddl).execute(&mut *conn).await?;
            }
        }
        if from < 3 {
            for ddl in v3_statements(DB::AUTO_ID) {
                sqlx::query(&ddl).execute(&mut *conn).await?;
            }
            sqlx::query(&DB::render("UPDATE mcp_effects SET recorded_at = ?"))
                .bind(to_millis(SystemTime::now()))
                .execute(&mut *conn)
                .await?;
        }
        if from < 4 {
            for ddl in V4_TABLES {
                sqlx::query(ddl).execute(&mut *conn).await?;
            }
        }
        if from < 5 {
            for ddl in V5_COLUMNS {
                sqlx::query(ddl).execute(&mut *conn).await?;
            }
        }
        sqlx::query(&DB::render(
            "UPDATE portcullis_schema SET version = ? WHERE id = 1",
        ))
        .bind(LATEST)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    // ---------------------------------------------------------------- store

    /// The columns of one `mcp_servers` row. The JSON columns are read
    /// leniently: a value of the wrong SQL type reads as absent, like one
    /// that does not parse.
    fn raw_row(row: &DB::Row) -> Result<RawRow<'_>, sqlx::Error> {
        Ok(RawRow {
            id: row.try_get(0)?,
            name: row.try_get(1)?,
            kind: row.try_get(2)?,
            url: row.try_get(3)?,
            tools: row.try_get::<Option<&str>, _>(4).ok().flatten(),
            tool_fingerprints: row.try_get::<Option<&str>, _>(5).ok().flatten(),
            tool_digests: row.try_get::<Option<&str>, _>(6).ok().flatten(),
        })
    }

    pub(crate) async fn list(&self) -> Result<Vec<PersistedServer>, StoreError> {
        let op = || StoreError::database(DB::BACKEND, "list mcp servers");
        let sql = format!("SELECT {SERVER_COLUMNS} FROM mcp_servers ORDER BY id");
        // Each row is decoded as the database hands it over
        // (`crate::decoding`): SQLite's worker fetches up to 50 rows ahead
        // meanwhile, PostgreSQL's stream reads what the socket buffered.
        // Past 50 rows SQLite's statement, and with it its read lock, stays
        // open while the rows before them decode.
        let mut rows = sqlx::query(&sql).fetch(&self.pool);
        let mut decoding = Decoding::new(Self::listing_len, Self::decode_row);
        while let Some(row) = rows.try_next().await.map_err(op())? {
            let more = decoding.take(row).map_err(op())?;
            if !more {
                break;
            }
        }
        drop(rows);
        decoding.finish().await.map_err(op())
    }

    /// The length of a `mcp_servers` row's cached listing text.
    fn listing_len(row: &DB::Row) -> usize {
        row.try_get::<Option<&str>, _>(4)
            .ok()
            .flatten()
            .map_or(0, str::len)
    }

    /// One row of `mcp_servers` as a stored server; `None` for a row that
    /// cannot be read (skipped and logged by [`RawRow::into_row`]).
    fn decode_row(row: &DB::Row) -> Result<Option<PersistedServer>, sqlx::Error> {
        Ok(Self::raw_row(row)?.into_row(DB::BACKEND))
    }

    pub(crate) async fn get(&self, id: &str) -> Result<Option<PersistedServer>, StoreError> {
        self.get_columns(id, SERVER_COLUMNS).await
    }

    /// [`crate::Store::get_for_trust`]: the cache is read only for a row
    /// without a baseline, in the same statement. A baseline that is stored
    /// but no longer parses reads as none, like an absent one, so such a
    /// row is read again whole: its baseline is then derived from its cache,
    /// as [`Sql::get`] would have it, never proposed afresh from what the
    /// server lists now.
    pub(crate) async fn get_for_trust(
        &self,
        id: &str,
    ) -> Result<Option<PersistedServer>, StoreError> {
        match self.get_columns(id, TRUST_COLUMNS).await? {
            Some(row) if row.tool_fingerprints.is_none() && row.tools.is_none() => {
                self.get(id).await
            }
            row => Ok(row),
        }
    }

    /// The row with this id, read as `columns` (the seven of
    /// [`SERVER_COLUMNS`], in their order).
    async fn get_columns(
        &self,
        id: &str,
        columns: &str,
    ) -> Result<Option<PersistedServer>, StoreError> {
        let op = || StoreError::database(DB::BACKEND, format!("read mcp server {id:?}"));
        let sql =
            DB::render(&format!("SELECT {columns} FROM mcp_servers WHERE id = ?")).into_owned();
        let row = sqlx::query(&sql)
            .bind(id.to_owned())
            .fetch_optional(&self.pool)
            .await
            .map_err(op())?;
        match row {
            Some(row) => Ok(Self::raw_row(&row).map_err(op())?.into_row(DB::BACKEND)),
            None => Ok(None),
        }
    }

    pub(crate) async fn save(
        &self,
        row: &PersistedServer,
    ) -> Result<Option<Fingerprints>, StoreError> {
        let op = || StoreError::database(DB::BACKEND, format!("save mcp server {:?}", row.id));
        let mut conn = self.pool.acquire().await.map_err(op())?;
        Self::save_on(&mut conn, row).await
    }

    /// Saves every row in one transaction (one commit, so one sync to disk
    /// for a cold start's whole catalogue): each row exactly as
    /// [`Sql::save`] saves it, the baselines in force in row order. Nothing
    /// is saved when one row fails.
    pub(crate) async fn save_all(
        &self,
        rows: &[PersistedServer],
    ) -> Result<Vec<Option<Fingerprints>>, StoreError> {
        let op = || StoreError::database(DB::BACKEND, "save mcp servers");
        let mut tx = match DB::BEGIN_WRITE {
            Some(begin) => self.pool.begin_with(begin).await,
            None => self.pool.begin().await,
        }
        .map_err(op())?;
        let mut in_force = Vec::with_capacity(rows.len());
        for row in rows {
            in_force.push(Self::save_on(&mut tx, row).await?);
        }
        tx.commit().await.map_err(op())?;
        Ok(in_force)
    }

    /// One save on `conn` (a pooled connection, or a transaction's).
    async fn save_on(
        conn: &mut DB::Connection,
        row: &PersistedServer,
    ) -> Result<Option<Fingerprints>, StoreError> {
        let b = DB::BACKEND;
        if let Some(reason) = row.refusal() {
            return Err(StoreError::InvalidRow {
                backend: b,
                id: row.id.clone(),
                reason,
            });
        }
        let op = || StoreError::database(b, format!("save mcp server {:?}", row.id));
        let tools_text = encode(row.tools.as_ref());
        if let Some(text) = tools_text.as_deref()
            && let Some(baseline) = Self::unchanged(conn, row, text).await?
        {
            return Ok(Some(baseline));
        }
        // The digests of the cache are computed here from the very tools
        // written beside them, in the same statement, never taken from the
        // caller: a wake trusts them as it trusts the baseline next to them.
        let digests = row.tools.as_deref().map(PersistedServer::digests_of);
        let digests_text = encode(digests.as_ref());
        // One statement, so the database decides the race: COALESCE keeps
        // whichever baseline reached the row first.
        let upsert = DB::render(
            "INSERT INTO mcp_servers (id, name, type, url, tools, tool_fingerprints, tool_digests) VALUES (?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT(id) DO UPDATE SET name = excluded.name, type = excluded.type, url = excluded.url, \
             tools = excluded.tools, tool_fingerprints = COALESCE(mcp_servers.tool_fingerprints, excluded.tool_fingerprints), \
             tool_digests = excluded.tool_digests \
             RETURNING tool_fingerprints",
        );
        let stored: Option<String> = sqlx::query(&upsert)
            .bind(row.id.clone())
            .bind(row.name.clone())
            .bind(row.kind.as_str().to_owned())
            .bind(row.url.clone())
            .bind(tools_text)
            .bind(encode(row.tool_fingerprints.as_ref()))
            .bind(digests_text)
            .fetch_one(&mut *conn)
            .await
            .and_then(|r| r.try_get(0))
            .map_err(op())?;
        let mut baseline: Option<Fingerprints> =
            decode(b, &row.id, "tool_fingerprints", stored.as_deref());
        if let (None, Some(garbage), Some(proposal)) = (&baseline, &stored, &row.tool_fingerprints)
        {
            // The recorded baseline no longer parses, so `list` shows none;
            // treat it as none here too: the first proposal replaces it
            // (compare-and-swap, so racers still agree) and the definitions
            // kept for it go with it.
            let swap = DB::render(
                "UPDATE mcp_servers SET tool_fingerprints = ? WHERE id = ? AND tool_fingerprints = ?",
            );
            let swapped = sqlx::query(&swap)
                .bind(encode(Some(proposal)))
                .bind(row.id.clone())
                .bind(garbage.clone())
                .execute(&mut *conn)
                .await
                .map_err(op())?;
            if DB::rows_affected(&swapped) > 0 {
                sqlx::query(&DB::render(
                    "DELETE FROM mcp_trusted_tools WHERE server_id = ?",
                ))
                .bind(row.id.clone())
                .execute(&mut *conn)
                .await
                .map_err(op())?;
            }
            let now: Option<String> = sqlx::query(&DB::render(
                "SELECT tool_fingerprints FROM mcp_servers WHERE id = ?",
            ))
            .bind(row.id.clone())
            .fetch_optional(&mut *conn)
            .await
            .and_then(|r| r.map(|r| r.try_get::<Option<String>, _>(0)).transpose())
            .map_err(op())?
            .flatten();
            baseline = decode(b, &row.id, "tool_fingerprints", now.as_deref());
        }
        if defines(
            row.tools.as_deref().zip(digests.as_deref()),
            baseline.as_ref(),
        ) {
            sqlx::query(&DB::render(
                "INSERT INTO mcp_trusted_tools (server_id, tools) VALUES (?, ?) ON CONFLICT(server_id) DO NOTHING",
            ))
            .bind(row.id.clone())
            .bind(encode(row.tools.as_ref()))
            .execute(&mut *conn)
            .await
            .map_err(op())?;
        }
        Ok(baseline)
    }

    /// The baseline in force when `row` is stored already as a save would
    /// leave it: the same name, transport and endpoint, the same cache text
    /// byte for byte (`tools`, as the save would write it) with digests
    /// beside it, a baseline recorded (so a proposal would be ignored) and
    /// definitions kept for it. Then the save writes nothing, and computes
    /// no digests: those stored were computed from this very text by an
    /// earlier save, and only a change to [`portcullis_catalog::fingerprint`]
    /// could make them differ now (such a change must clear the stored
    /// digests in a migration, as it must re-derive the baselines).
    ///
    /// A cold start saves every server it connects and a restart mostly
    /// finds them as it left them: this spares each one the rewrite of its
    /// cached listing (hundreds of KiB a server at a hundred described
    /// tools), compared where it lies instead. `None`: the save goes on as
    /// usual (where no definitions are kept yet, it decides whether this
    /// cache becomes them).
    async fn unchanged(
        conn: &mut DB::Connection,
        row: &PersistedServer,
        tools: &str,
    ) -> Result<Option<Fingerprints>, StoreError> {
        let op = || StoreError::database(DB::BACKEND, format!("save mcp server {:?}", row.id));
        let stored: Option<Option<String>> = sqlx::query_scalar(&DB::render(&format!(
            "SELECT tool_fingerprints FROM mcp_servers \
             WHERE id = ? AND name = ? AND type = ? AND url = ? AND tools = ?{} \
             AND tool_digests IS NOT NULL AND tool_fingerprints IS NOT NULL \
             AND EXISTS (SELECT 1 FROM mcp_trusted_tools WHERE server_id = ?)",
            DB::BYTEWISE
        )))
        .bind(row.id.clone())
        .bind(row.name.clone())
        .bind(row.kind.as_str().to_owned())
        .bind(row.url.clone())
        .bind(tools.to_owned())
        .bind(row.id.clone())
        .fetch_optional(&mut *conn)
        .await
        .map_err(op())?;
        // A baseline that does not parse is not one: the usual path replaces
        // it (and says so), so it is left to that path.
        Ok(stored
            .flatten()
            .and_then(|text| serde_json::from_str::<Fingerprints>(&text).ok()))
    }

    pub(crate) async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let op = || StoreError::database(DB::BACKEND, format!("remove mcp server {id:?}"));
        let mut tx = self.pool.begin().await.map_err(op())?;
        let removed = sqlx::query(&DB::render("DELETE FROM mcp_servers WHERE id = ?"))
            .bind(id.to_owned())
            .execute(&mut *tx)
            .await
            .map_err(op())?;
        sqlx::query(&DB::render(
            "DELETE FROM mcp_trusted_tools WHERE server_id = ?",
        ))
        .bind(id.to_owned())
        .execute(&mut *tx)
        .await
        .map_err(op())?;
        tx.commit().await.map_err(op())?;
        Ok(DB::rows_affected(&removed) > 0)
    }

    pub(crate) async fn trusted_tools(&self, id: &str) -> Result<Option<Vec<Tool>>, StoreError> {
        let text: Option<String> = sqlx::query(&DB::render(
            "SELECT tools FROM mcp_trusted_tools WHERE server_id = ?",
        ))
        .bind(id.to_owned())
        .fetch_optional(&self.pool)
        .await
        .and_then(|r| r.map(|r| r.try_get(0)).transpose())
        .map_err(StoreError::database(
            DB::BACKEND,
            format!("read trusted tools of {id:?}"),
        ))?;
        Ok(decode(DB::BACKEND, id, "trusted tools", text.as_deref()))
    }

    // ---------------------------------------------------------- effect log

    pub(crate) async fn recorded(&self, key: &str) -> Result<Option<Recorded>, StoreError> {
        let op = || StoreError::database(DB::BACKEND, "read effect");
        let row = sqlx::query(&DB::render(
            "SELECT tool_name, outcome, recorded_at FROM mcp_effects WHERE key = ?",
        ))
        .bind(key.to_owned())
        .fetch_optional(&self.pool)
        .await
        .map_err(op())?;
        let Some(row) = row else { return Ok(None) };
        let tool_name: String = row.try_get(0).map_err(op())?;
        let outcome: String = row.try_get(1).map_err(op())?;
        let at: i64 = row.try_get(2).map_err(op())?;
        decode_outcome(DB::BACKEND, key, tool_name, &outcome, from_millis(at)).map(Some)
    }

    pub(crate) async fn record_effect(
        &self,
        key: &str,
        tool_name: &str,
        outcome: &Outcome,
        at: SystemTime,
    ) -> Result<Recorded, StoreError> {
        ensure_recordable(DB::BACKEND, tool_name)?;
        sqlx::query(&DB::render(
            "INSERT INTO mcp_effects (key, tool_name, outcome, recorded_at) VALUES (?, ?, ?, ?) ON CONFLICT(key) DO NOTHING",
        ))
        .bind(key.to_owned())
        .bind(tool_name.to_owned())
        .bind(encode_outcome(outcome))
        .bind(to_millis(at))
        .execute(&self.pool)
        .await
        .map_err(StoreError::database(
            DB::BACKEND,
            format!("record effect of {tool_name:?}"),
        ))?;
        self.recorded(key)
            .await?
            .ok_or_else(|| StoreError::CorruptEffect {
                backend: DB::BACKEND,
                key: key.to_owned(),
                reason: "the record vanished right after it was written".into(),
            })
    }

    pub(crate) async fn prune_effects(&self, cutoff: SystemTime) -> Result<u64, StoreError> {
        let done = sqlx::query(&DB::render("DELETE FROM mcp_effects WHERE recorded_at < ?"))
            .bind(to_millis(cutoff))
            .execute(&self.pool)
            .await
            .map_err(StoreError::database(DB::BACKEND, "prune effects"))?;
        Ok(DB::rows_affected(&done))
    }

    // --------------------------------------------------------- audit trail

    pub(crate) async fn record_audit(&self, record: &AuditRecord) -> Result<(), StoreError> {
        sqlx::query(&DB::render(
            "INSERT INTO portcullis_audit (at, identity, tool, decision, duration_ms, outcome, error_code, argument_shape) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        ))
        .bind(to_millis(record.time))
        .bind(record.identity.clone())
        .bind(record.tool.clone())
        .bind(record.decision.as_str().to_owned())
        .bind(i64::try_from(record.duration_ms).unwrap_or(i64::MAX))
        .bind(record.outcome.kind().to_owned())
        .bind(record.outcome.code().map(str::to_owned))
        .bind(record.argument_shape.to_stored())
        .execute(&self.pool)
        .await
        .map_err(StoreError::database(
            DB::BACKEND,
            format!("audit a call of {:?}", record.tool),
        ))?;
        Ok(())
    }

    pub(crate) async fn recent_audit(&self, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        let op = || StoreError::database(DB::BACKEND, "read the audit trail");
        let sql = DB::render(&format!(
            "SELECT {AUDIT_COLUMNS} FROM portcullis_audit ORDER BY at DESC, id DESC LIMIT ?"
        ))
        .into_owned();
        let rows = sqlx::query(&sql)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(op())?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let decision: String = row.try_get(3).map_err(op())?;
            let kind: String = row.try_get(5).map_err(op())?;
            let code: Option<String> = row.try_get(6).map_err(op())?;
            let (Some(decision), Some(outcome)) = (
                AuditDecision::parse(&decision),
                AuditOutcome::from_parts(&kind, code),
            ) else {
                tracing::warn!(backend = %DB::BACKEND, decision, outcome = kind, "skipping an audit record this build cannot read");
                continue;
            };
            let at: i64 = row.try_get(0).map_err(op())?;
            let duration: i64 = row.try_get(4).map_err(op())?;
            let shape: String = row.try_get(7).map_err(op())?;
            out.push(AuditRecord {
                time: from_millis(at),
                identity: row.try_get(1).map_err(op())?,
                tool: row.try_get(2).map_err(op())?,
                decision,
                duration_ms: u64::try_from(duration).unwrap_or(0),
                outcome,
                argument_shape: ArgumentShape::from_stored(&shape),
            });
        }
        Ok(out)
    }

    pub(crate) async fn prune_audit(&self, cutoff: SystemTime) -> Result<u64, StoreError> {
        let done = sqlx::query(&DB::render("DELETE FROM portcullis_audit WHERE at < ?"))
            .bind(to_millis(cutoff))
            .execute(&self.pool)
            .await
            .map_err(StoreError::database(DB::BACKEND, "prune the audit trail"))?;
        Ok(DB::rows_affected(&done))
    }
}

impl<DB> Sql<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> String: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB>,
    String: Type<DB> + for<'r> Decode<'r, DB>,
    i64: Type<DB> + for<'r> Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    // -------------------------------------------------------------- grants

    fn grant_row(row: &DB::Row) -> Result<SealedGrant, StoreError> {
        use base64::Engine as _;
        let op = || StoreError::database(DB::BACKEND, "read an OAuth grant");
        let upstream: String = row.try_get(0).map_err(op())?;
        let sealed: String = row.try_get(2).map_err(op())?;
        let at: i64 = row.try_get(3).map_err(op())?;
        // Unreadable base64 reads as an empty seal: its keeper fails to
        // open it and asks for a new login, as for any damaged grant.
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(sealed.as_bytes())
            .unwrap_or_default();
        Ok(SealedGrant {
            issuer: row.try_get(1).map_err(op())?,
            upstream,
            sealed,
            updated_at: from_millis(at),
        })
    }

    pub(crate) async fn put_grant(&self, grant: &SealedGrant) -> Result<(), StoreError> {
        use base64::Engine as _;
        sqlx::query(&DB::render(
            "INSERT INTO portcullis_oauth_grants (upstream, issuer, sealed, updated_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT(upstream) DO UPDATE SET issuer = excluded.issuer, sealed = excluded.sealed, updated_at = excluded.updated_at",
        ))
        .bind(grant.upstream.clone())
        .bind(grant.issuer.clone())
        .bind(base64::engine::general_purpose::STANDARD.encode(&grant.sealed))
        .bind(to_millis(grant.updated_at))
        .execute(&self.pool)
        .await
        .map_err(StoreError::database(
            DB::BACKEND,
            format!("store the OAuth grant of {:?}", grant.upstream),
        ))?;
        Ok(())
    }

    pub(crate) async fn get_grant(
        &self,
        upstream: &str,
    ) -> Result<Option<SealedGrant>, StoreError> {
        let row = sqlx::query(&DB::render(
            "SELECT upstream, issuer, sealed, updated_at FROM portcullis_oauth_grants WHERE upstream = ?",
        ))
        .bind(upstream.to_owned())
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::database(
            DB::BACKEND,
            format!("read the OAuth grant of {upstream:?}"),
        ))?;
        row.as_ref().map(Self::grant_row).transpose()
    }

    pub(crate) async fn remove_grant(&self, upstream: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(&DB::render(
            "DELETE FROM portcullis_oauth_grants WHERE upstream = ?",
        ))
        .bind(upstream.to_owned())
        .execute(&self.pool)
        .await
        .map_err(StoreError::database(
            DB::BACKEND,
            format!("forget the OAuth grant of {upstream:?}"),
        ))?;
        Ok(DB::rows_affected(&done) > 0)
    }

    pub(crate) async fn list_grants(&self) -> Result<Vec<SealedGrant>, StoreError> {
        let rows = sqlx::query(
            "SELECT upstream, issuer, sealed, updated_at FROM portcullis_oauth_grants ORDER BY upstream",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::database(DB::BACKEND, "list OAuth grants"))?;
        rows.iter().map(Self::grant_row).collect()
    }
}

/// Implements `Store`, `EffectLog` and `AuditLog` for a backend type whose
/// field `sql` is a [`Sql`] over database `$db`: the one place the trait methods meet the shared
/// queries. (A generic trait impl would do, but concrete ones let the
/// compiler check the futures are `Send` on concrete types.)
macro_rules! sql_store {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::Store for $store {
            fn backend(&self) -> $crate::error::Backend {
                <$db as $crate::sql::Dialect>::BACKEND
            }

            async fn list(
                &self,
            ) -> Result<Vec<$crate::row::PersistedServer>, $crate::error::StoreError> {
                self.sql.list().await
            }

            async fn get(
                &self,
                id: &str,
            ) -> Result<Option<$crate::row::PersistedServer>, $crate::error::StoreError> {
                self.sql.get(id).await
            }

            async fn get_for_trust(
                &self,
                id: &str,
            ) -> Result<Option<$crate::row::PersistedServer>, $crate::error::StoreError> {
                self.sql.get_for_trust(id).await
            }

            async fn save(
                &self,
                row: &$crate::row::PersistedServer,
            ) -> Result<
                Option<portcullis_catalog::fingerprint::Fingerprints>,
                $crate::error::StoreError,
            > {
                self.sql.save(row).await
            }

            async fn save_all(
                &self,
                rows: &[$crate::row::PersistedServer],
            ) -> Result<
                Vec<Option<portcullis_catalog::fingerprint::Fingerprints>>,
                $crate::error::StoreError,
            > {
                self.sql.save_all(rows).await
            }

            async fn remove(&self, id: &str) -> Result<bool, $crate::error::StoreError> {
                self.sql.remove(id).await
            }

            async fn trusted_tools(
                &self,
                id: &str,
            ) -> Result<Option<Vec<portcullis_catalog::Tool>>, $crate::error::StoreError> {
                self.sql.trusted_tools(id).await
            }

            fn effects(&self) -> &dyn $crate::effects::EffectLog {
                self
            }

            fn audit(&self) -> &dyn $crate::audit::AuditLog {
                self
            }

            fn grants(&self) -> &dyn $crate::grants::GrantLog {
                self
            }
        }

        #[async_trait::async_trait]
        impl $crate::grants::GrantLog for $store {
            async fn put(
                &self,
                grant: &$crate::grants::SealedGrant,
            ) -> Result<(), $crate::error::StoreError> {
                self.sql.put_grant(grant).await
            }

            async fn get(
                &self,
                upstream: &str,
            ) -> Result<Option<$crate::grants::SealedGrant>, $crate::error::StoreError> {
                self.sql.get_grant(upstream).await
            }

            async fn remove(&self, upstream: &str) -> Result<bool, $crate::error::StoreError> {
                self.sql.remove_grant(upstream).await
            }

            async fn list(
                &self,
            ) -> Result<Vec<$crate::grants::SealedGrant>, $crate::error::StoreError> {
                self.sql.list_grants().await
            }
        }

        #[async_trait::async_trait]
        impl $crate::effects::EffectLog for $store {
            async fn recorded(
                &self,
                key: &str,
            ) -> Result<Option<$crate::effects::Recorded>, $crate::error::StoreError> {
                self.sql.recorded(key).await
            }

            async fn record_at(
                &self,
                key: &str,
                tool_name: &str,
                outcome: &$crate::effects::Outcome,
                at: std::time::SystemTime,
            ) -> Result<$crate::effects::Recorded, $crate::error::StoreError> {
                self.sql.record_effect(key, tool_name, outcome, at).await
            }

            async fn prune_before(
                &self,
                cutoff: std::time::SystemTime,
            ) -> Result<u64, $crate::error::StoreError> {
                self.sql.prune_effects(cutoff).await
            }
        }

        #[async_trait::async_trait]
        impl $crate::audit::AuditLog for $store {
            async fn record(
                &self,
                record: &$crate::audit::AuditRecord,
            ) -> Result<(), $crate::error::StoreError> {
                self.sql.record_audit(record).await
            }

            async fn recent(
                &self,
                limit: usize,
            ) -> Result<Vec<$crate::audit::AuditRecord>, $crate::error::StoreError> {
                self.sql.recent_audit(limit).await
            }

            async fn prune_before(
                &self,
                cutoff: std::time::SystemTime,
            ) -> Result<u64, $crate::error::StoreError> {
                self.sql.prune_audit(cutoff).await
            }
        }
    };
}

pub(crate) use sql_store;

#[cfg(test)]
mod tests {
    use super::numbered_placeholders;

    #[test]
    fn placeholders_are_numbered_in_order() {
        assert_eq!(
            numbered_placeholders("UPDATE t SET a = ? WHERE b = ? AND c = ?"),
            "UPDATE t SET a = $1 WHERE b = $2 AND c = $3"
        );
        assert_eq!(numbered_placeholders("SELECT 1"), "SELECT 1");
    }

    /// The text length the read balances by is the cached listing's, read
    /// from a real SQLite row.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_stored_rows_listing_length_is_its_cached_text() {
        use crate::row::PersistedServer;
        use crate::store::Store;
        use portcullis_catalog::{ServerIdentity, Tool};
        use sqlx::Sqlite;

        let dir = std::env::temp_dir().join(format!("portcullis-sql-len-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let store = crate::SqliteStore::open(&dir.join("len.sqlite"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let tools = vec![Tool::new("echo").with_description("Echo.")];
        let identity = ServerIdentity::stdio("s", "echo", &[]);
        let row = PersistedServer::new("s", &identity).with_tools(tools);
        store.save(&row).await.unwrap_or_else(|e| panic!("{e}"));
        let sql = format!("SELECT {} FROM mcp_servers", super::SERVER_COLUMNS);
        let stored = sqlx::query(&sql)
            .fetch_one(store.pool())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let text: Option<String> = sqlx::Row::try_get(&stored, "tools").ok();
        let expected = text.map_or(0, |t| t.len());
        assert!(expected > 0);
        assert_eq!(super::Sql::<Sqlite>::listing_len(&stored), expected);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
