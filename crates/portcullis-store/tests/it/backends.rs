//! The shared suite (`suite/`) run against memory, SQLite and PostgreSQL,
//! plus each SQL backend's migration of older databases: a legacy
//! `mcp_servers` table (both of its shapes) and an older Portcullis schema (version 2).
//!
//! PostgreSQL needs a real server: `eval "$(bash .ci/postgres.sh)"` starts
//! one and exports `PORTCULLIS_TEST_POSTGRES_URL`. Without it the PostgreSQL
//! tests are skipped, except under CI (`CI` set, and not `0`/`false`), where
//! they fail.

mod suite;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use portcullis_catalog::fingerprint::fingerprint_listing;
use portcullis_catalog::{ServerIdentity, Tool, TransportKind};
use portcullis_store::migration::LATEST;
use portcullis_store::{
    AuditDecision, AuditOutcome, AuditRecord, MemoryStore, PersistedServer, PostgresStore,
    SqliteStore, Store, StoreError, StoreSpec, open,
};
use sqlx::postgres::PgPool;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
use suite::{Harness, Raw};

// ---------------------------------------------------------------- harnesses

/// Every table a store writes, for raw dumps.
const TABLES: [&str; 5] = [
    "mcp_servers",
    "mcp_trusted_tools",
    "mcp_effects",
    "portcullis_audit",
    "portcullis_oauth_grants",
];

async fn memory(_name: &str) -> Option<Harness> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    Some(Harness {
        twin: store.clone(),
        store,
        raw: None,
    })
}

/// A fresh directory for one test, under cargo's per-target temp dir.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("portcullis-store-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

struct SqliteRaw(SqlitePool);

#[async_trait::async_trait]
impl Raw for SqliteRaw {
    async fn exec(&self, sql: &str) {
        sqlx::query(sql)
            .execute(&self.0)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn dump(&self) -> String {
        let mut out = String::new();
        for table in TABLES {
            // Every column of every row, concatenated as text.
            let columns: Vec<String> =
                sqlx::query_scalar(&format!("SELECT name FROM pragma_table_info('{table}')"))
                    .fetch_all(&self.0)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            let expr = columns
                .iter()
                .map(|c| format!("coalesce(CAST({c} AS TEXT), '')"))
                .collect::<Vec<_>>()
                .join(" || '|' || ");
            let rows: Vec<String> = sqlx::query_scalar(&format!("SELECT {expr} FROM {table}"))
                .fetch_all(&self.0)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            out.push_str(&rows.join("\n"));
            out.push('\n');
        }
        out
    }

    async fn count_server_updates(&self) {
        self.exec("CREATE TABLE test_server_updates (n INTEGER NOT NULL)")
            .await;
        self.exec("INSERT INTO test_server_updates VALUES (0)")
            .await;
        self.exec(
            "CREATE TRIGGER test_count_server_updates AFTER UPDATE ON mcp_servers \
             BEGIN UPDATE test_server_updates SET n = n + 1; END",
        )
        .await;
    }

    async fn server_updates(&self) -> i64 {
        sqlx::query_scalar("SELECT n FROM test_server_updates")
            .fetch_one(&self.0)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

async fn sqlite(name: &str) -> Option<Harness> {
    let path = scratch(&format!("sqlite-{name}")).join("store.db");
    let store = SqliteStore::open(&path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let twin = SqliteStore::open(&path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let raw = SqliteRaw(store.pool().clone());
    Some(Harness {
        store: Arc::new(store),
        twin: Arc::new(twin),
        raw: Some(Box::new(raw)),
    })
}

/// Whether this is a CI run (`CI` set to anything but empty, `0` or
/// `false`), where a backend that cannot be tested is a failure.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

fn postgres_url() -> Option<String> {
    match std::env::var("PORTCULLIS_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if in_ci() => panic!(
            "PORTCULLIS_TEST_POSTGRES_URL is unset under CI=true: the PostgreSQL backend must be tested in CI. \
             Start a server with: pg_env=\"$(bash .ci/postgres.sh)\" && eval \"$pg_env\""
        ),
        _ => {
            eprintln!("skipped: set PORTCULLIS_TEST_POSTGRES_URL (run .ci/postgres.sh)");
            None
        }
    }
}

/// A connection to the test database outside any store, and a fresh schema
/// named after the test, so tests running in parallel never share tables.
async fn postgres_schema(name: &str) -> Option<(String, PgPool, String)> {
    let url = postgres_url()?;
    let admin = PgPool::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let schema = format!("t_{name}");
    sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(&admin)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    Some((url, admin, schema))
}

struct PostgresRaw {
    pool: PgPool,
    schema: String,
}

#[async_trait::async_trait]
impl Raw for PostgresRaw {
    async fn exec(&self, sql: &str) {
        sqlx::query(sql)
            .execute(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn dump(&self) -> String {
        let mut out = String::new();
        for table in TABLES {
            // A row cast to text renders every column.
            let rows: Vec<String> =
                sqlx::query_scalar(&format!("SELECT t::text FROM {}.{table} t", self.schema))
                    .fetch_all(&self.pool)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            out.push_str(&rows.join("\n"));
            out.push('\n');
        }
        out
    }

    async fn count_server_updates(&self) {
        let schema = &self.schema;
        self.exec(&format!(
            "CREATE TABLE {schema}.test_server_updates (n BIGINT NOT NULL)"
        ))
        .await;
        self.exec(&format!(
            "INSERT INTO {schema}.test_server_updates VALUES (0)"
        ))
        .await;
        self.exec(&format!(
            "CREATE FUNCTION {schema}.test_count_server_updates() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN UPDATE {schema}.test_server_updates SET n = n + 1; RETURN NULL; END $$"
        ))
        .await;
        self.exec(&format!(
            "CREATE TRIGGER test_count_server_updates AFTER UPDATE ON {schema}.mcp_servers \
             FOR EACH ROW EXECUTE FUNCTION {schema}.test_count_server_updates()"
        ))
        .await;
    }

    async fn server_updates(&self) -> i64 {
        sqlx::query_scalar(&format!(
            "SELECT n FROM {}.test_server_updates",
            self.schema
        ))
        .fetch_one(&self.pool)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }
}

async fn postgres(name: &str) -> Option<Harness> {
    let (url, admin, schema) = postgres_schema(name).await?;
    let store = PostgresStore::open_in_schema(&url, Some(&schema))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A second pool on the same tables: a second replica.
    let twin = PostgresStore::open_in_schema(&url, Some(&schema))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let raw = PostgresRaw {
        pool: store.pool().clone(),
        schema,
    };
    drop(admin);
    Some(Harness {
        store: Arc::new(store),
        twin: Arc::new(twin),
        raw: Some(Box::new(raw)),
    })
}

/// One `#[tokio::test]` per suite function and backend.
macro_rules! backend {
    ($backend:ident: $($case:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let name = concat!(stringify!($backend), "_", stringify!($case));
                    if let Some(harness) = super::$backend(name).await {
                        super::suite::$case(harness).await;
                    }
                }
            )*
        }
    };
}

/// The shared cases for each backend, plus its own extra cases.
macro_rules! suite {
    ($backend:ident $(+ $extra:ident)*) => {
        backend!($backend:
            baseline_survives_a_save_with_another_baseline,
            the_cache_keeps_the_digests_of_what_it_holds,
            a_baseline_with_pins_keeps_its_tools_and_pins,
            a_save_without_baseline_never_erases_it,
            trust_reads_carry_the_cache_only_without_a_baseline,
            save_all_saves_each_row_as_save_does_in_one_go,
            concurrent_first_saves_record_one_baseline,
            retrust_then_save_rebaselines,
            retrust_and_remove_of_unknown_ids,
            rows_round_trip_every_transport,
            trusted_definitions_always_match_the_baseline,
            a_save_that_would_change_nothing_writes_nothing,
            batches_that_read_first_survive_a_concurrent_writer,
            secrets_are_never_persisted,
            effect_log_first_write_wins,
            effect_log_prunes_before_a_cutoff,
            audit_trail_keeps_shapes_newest_first_and_prunes,
            concurrent_prunes_delete_each_record_once,
            grants_are_kept_one_per_upstream_as_sealed,
            a_large_read_comes_back_whole_and_in_order,
            $($extra,)*
        );
    };
}

// Memory holds parsed rows, so it has no column to corrupt.
suite!(memory);
suite!(sqlite + corrupt_cache_is_dropped + a_trust_read_of_a_corrupt_baseline_keeps_the_cache);
suite!(postgres + corrupt_cache_is_dropped + a_trust_read_of_a_corrupt_baseline_keeps_the_cache);

// ---------------------------------------------------------------- migration

fn legacy_tools_json() -> &'static str {
    r#"[{"name":"search","description":"Search","inputSchema":{"type":"object"}}]"#
}

fn search() -> Vec<Tool> {
    vec![
        Tool::new("search")
            .with_description("Search")
            .with_input_schema(serde_json::json!({"type": "object"})),
    ]
}

/// Checks a store opened on a legacy database: rows kept, new columns
/// readable, stdio admitted, baselines immutable, reopening harmless.
async fn check_migrated(store: &dyn Store, with_listing: bool) {
    let rows = store.list().await.unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<_> = rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["docs", "legacy"], "the legacy rows were not kept");
    let docs = &rows[0];
    assert_eq!(docs.kind, TransportKind::StreamableHttp);
    assert_eq!(docs.url, "https://mcp.example.com/mcp");
    if with_listing {
        assert_eq!(docs.tools, Some(search()));
        // The legacy digest of the same tool: baselines carry over.
        assert_eq!(docs.tool_fingerprints, Some(fingerprint_listing(&search())));
        let legacy = &rows[1];
        assert_eq!(legacy.tool_fingerprints, None);
        assert_eq!(
            legacy.baseline_or_derived(),
            Some(fingerprint_listing(&search()))
        );
    } else {
        assert!(
            rows.iter()
                .all(|r| r.tools.is_none() && r.tool_fingerprints.is_none())
        );
    }
    // The widened CHECK admits stdio.
    let files = ServerIdentity::stdio("files", "./server", &[]);
    store
        .save(&PersistedServer::new("files", &files).with_tools(search()))
        .await
        .unwrap_or_else(|e| panic!("stdio rejected after migration: {e}"));
    // And the baseline rules hold on migrated rows.
    let proposal = fingerprint_listing(&[Tool::new("other")]);
    let mut docs_again = docs.clone();
    docs_again.tool_fingerprints = Some(proposal.clone());
    let in_force = store
        .save(&docs_again)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    if with_listing {
        assert_eq!(in_force, Some(fingerprint_listing(&search())));
    } else {
        assert_eq!(in_force, Some(proposal));
    }
}

const LEGACY_V1: &str = "CREATE TABLE mcp_servers (id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL CHECK (type IN ('streamable-http','sse')), url TEXT NOT NULL)";
const LEGACY_V2: &str = "CREATE TABLE mcp_servers (id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL CHECK (type IN ('streamable-http','sse')), url TEXT NOT NULL, tools TEXT, tool_fingerprints TEXT)";

async fn legacy_sqlite_database(name: &str, with_listing: bool) -> PathBuf {
    let path = scratch(name).join("legacy.db");
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let pool = SqlitePool::connect_with(options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let fingerprints = serde_json::to_string(&fingerprint_listing(&search())).unwrap_or_default();
    let statements = if with_listing {
        vec![
            LEGACY_V2.to_owned(),
            format!(
                "INSERT INTO mcp_servers VALUES ('docs', 'docs', 'streamable-http', 'https://mcp.example.com/mcp', '{}', '{fingerprints}')",
                legacy_tools_json()
            ),
            format!(
                "INSERT INTO mcp_servers VALUES ('legacy', 'legacy', 'sse', 'http://127.0.0.1:9/sse', '{}', NULL)",
                legacy_tools_json()
            ),
        ]
    } else {
        vec![
            LEGACY_V1.to_owned(),
            "INSERT INTO mcp_servers VALUES ('docs', 'docs', 'streamable-http', 'https://mcp.example.com/mcp')".to_owned(),
            "INSERT INTO mcp_servers VALUES ('legacy', 'legacy', 'sse', 'http://127.0.0.1:9/sse')".to_owned(),
        ]
    };
    for sql in statements {
        sqlx::query(&sql)
            .execute(&pool)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // A legacy table cannot store stdio rows; prove the old CHECK was real.
    let refused = sqlx::query(
        "INSERT INTO mcp_servers (id, name, type, url) VALUES ('x', 'x', 'stdio', 'u')",
    )
    .execute(&pool)
    .await;
    assert!(refused.is_err());
    pool.close().await;
    path
}

async fn sqlite_version(store: &SqliteStore) -> i64 {
    sqlx::query_scalar("SELECT version FROM portcullis_schema")
        .fetch_one(store.pool())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn sqlite_migrates_the_legacy_table_without_listings() {
    let path = legacy_sqlite_database("legacy-v1", false).await;
    let store = SqliteStore::open(&path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sqlite_version(&store).await, LATEST);
    check_migrated(&store, false).await;
    drop(store);
    // Reopening runs nothing and loses nothing.
    let again = SqliteStore::open(&path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.list().await.map(|r| r.len()).ok(), Some(3));
}

#[tokio::test]
async fn sqlite_migrates_the_legacy_table_with_listings() {
    let path = legacy_sqlite_database("legacy-v2", true).await;
    let store = SqliteStore::open(&path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    check_migrated(&store, true).await;
}

#[tokio::test]
async fn sqlite_refuses_a_newer_schema() {
    let path = scratch("sqlite-newer").join("store.db");
    let store = SqliteStore::open(&path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sqlx::query("UPDATE portcullis_schema SET version = 99")
        .execute(store.pool())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    store.pool().close().await;
    let reopened = SqliteStore::open(&path).await;
    assert!(
        matches!(reopened, Err(StoreError::SchemaTooNew { found: 99, .. })),
        "{reopened:?}"
    );
}

#[tokio::test]
async fn sqlite_spec_opens_the_default_file_and_persists() {
    let dir = scratch("sqlite-spec").join("data");
    let spec = StoreSpec::parse("sqlite").unwrap_or_else(|e| panic!("{e}"));
    let store = open(&spec, &dir).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(store.backend().as_str(), "sqlite");
    let server = ServerIdentity::sse("docs", "http://127.0.0.1:9/sse");
    let baseline = fingerprint_listing(&search());
    store
        .save(
            &PersistedServer::new("docs", &server)
                .with_tools(search())
                .with_fingerprints(baseline.clone()),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    drop(store);
    assert!(dir.join("store.db").is_file());
    let reopened = open(&spec, &dir).await.unwrap_or_else(|e| panic!("{e}"));
    let row = reopened.get("docs").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(row.and_then(|r| r.tool_fingerprints), Some(baseline));
    // A relative sqlite: path lands in the data directory too.
    let named = StoreSpec::parse("sqlite:named.db").unwrap_or_else(|e| panic!("{e}"));
    open(&named, &dir).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(dir.join("named.db").is_file());
    let memory = open(&StoreSpec::Memory, &dir)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(memory.backend().as_str(), "memory");
}

#[tokio::test]
async fn postgres_migrates_an_older_table() {
    let Some((url, admin, schema)) = postgres_schema("migration").await else {
        return;
    };
    let fingerprints = serde_json::to_string(&fingerprint_listing(&search())).unwrap_or_default();
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&admin)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The legacy table's first shape, then the listing columns as its later
    // shape added them, with one row from each era; built on one connection so
    // the search path holds.
    let mut conn = admin.acquire().await.unwrap_or_else(|e| panic!("{e}"));
    for sql in [
        format!("SET search_path TO {schema}"),
        LEGACY_V1.to_owned(),
        "INSERT INTO mcp_servers VALUES ('legacy', 'legacy', 'sse', 'http://127.0.0.1:9/sse')"
            .to_owned(),
        "ALTER TABLE mcp_servers ADD COLUMN tools TEXT".to_owned(),
        "ALTER TABLE mcp_servers ADD COLUMN tool_fingerprints TEXT".to_owned(),
        format!(
            "INSERT INTO mcp_servers VALUES ('docs', 'docs', 'streamable-http', 'https://mcp.example.com/mcp', '{}', '{fingerprints}')",
            legacy_tools_json()
        ),
        format!(
            "UPDATE mcp_servers SET tools = '{}' WHERE id = 'legacy'",
            legacy_tools_json()
        ),
    ] {
        sqlx::query(&sql)
            .execute(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    drop(conn);
    let store = PostgresStore::open_in_schema(&url, Some(&schema))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    check_migrated(&store, true).await;
    let version: i64 =
        sqlx::query_scalar(&format!("SELECT version FROM {schema}.portcullis_schema"))
            .fetch_one(&admin)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(version, LATEST);
    // A second replica opening the migrated database changes nothing.
    let replica = PostgresStore::open_in_schema(&url, Some(&schema))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(replica.list().await.map(|r| r.len()).ok(), Some(3));
}

// ------------------------------------- an older Portcullis schema (v2)

/// A database exactly as schema version 2 left it: the version row, the
/// servers table, trusted definitions and an effect log without times.
fn portcullis_v2_statements() -> Vec<String> {
    let fingerprints = serde_json::to_string(&fingerprint_listing(&search())).unwrap_or_default();
    let outcome = serde_json::to_string(&v2_outcome()).unwrap_or_default();
    vec![
        "CREATE TABLE portcullis_schema (id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1), version BIGINT NOT NULL)".to_owned(),
        "INSERT INTO portcullis_schema (id, version) VALUES (1, 2)".to_owned(),
        "CREATE TABLE mcp_servers (id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL CONSTRAINT mcp_servers_type_check CHECK (type IN ('stdio','streamable-http','sse')), url TEXT NOT NULL, tools TEXT, tool_fingerprints TEXT)".to_owned(),
        "CREATE TABLE mcp_trusted_tools (server_id TEXT PRIMARY KEY NOT NULL, tools TEXT NOT NULL)".to_owned(),
        "CREATE TABLE mcp_effects (key TEXT PRIMARY KEY NOT NULL, tool_name TEXT NOT NULL, outcome TEXT NOT NULL)".to_owned(),
        format!(
            "INSERT INTO mcp_servers VALUES ('docs', 'docs', 'streamable-http', 'https://mcp.example.com/mcp', '{}', '{fingerprints}')",
            legacy_tools_json()
        ),
        format!("INSERT INTO mcp_trusted_tools VALUES ('docs', '{}')", legacy_tools_json()),
        format!("INSERT INTO mcp_effects VALUES ('{V2_EFFECT_KEY}', 'docs__search', '{outcome}')"),
    ]
}

const V2_EFFECT_KEY: &str = "0f0e0d0c0b0a09080706050403020100";

fn v2_outcome() -> portcullis_store::Outcome {
    portcullis_store::Outcome::Finished {
        result: portcullis_catalog::ToolResult::text("recorded by v2"),
    }
}

/// Checks a store opened on a version-2 database: rows, trusted
/// definitions and effects kept; old effects stamped with the upgrade's
/// time (so retention counts from the upgrade); the audit trail usable.
async fn check_v2_migrated(store: &dyn Store, opened_after: SystemTime) {
    let docs = store
        .get("docs")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("the v2 row was lost"));
    assert_eq!(docs.tools, Some(search()));
    assert_eq!(docs.tool_fingerprints, Some(fingerprint_listing(&search())));
    assert_eq!(
        store.trusted_tools("docs").await.ok().flatten(),
        Some(search())
    );
    let effect = store
        .effects()
        .recorded(V2_EFFECT_KEY)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("the v2 effect was lost"));
    assert_eq!(effect.outcome, v2_outcome());
    // Stamped at the upgrade (to the millisecond), not at the epoch.
    assert!(
        effect.recorded_at + Duration::from_millis(1) >= opened_after,
        "an old effect was stamped {:?}",
        effect.recorded_at
    );
    assert_eq!(
        store
            .effects()
            .prune_before(opened_after - Duration::from_secs(60))
            .await
            .ok(),
        Some(0)
    );
    // A whole-millisecond time, so the record reads back exactly.
    let at = std::time::UNIX_EPOCH + Duration::from_millis(1_764_500_000_000);
    let record = AuditRecord::new(
        at,
        "docs__search",
        &serde_json::json!({"q": "x"}),
        AuditDecision::Allowed,
        AuditOutcome::Ok,
    );
    store
        .audit()
        .record(&record)
        .await
        .unwrap_or_else(|e| panic!("the audit table is missing: {e}"));
    assert_eq!(store.audit().recent(5).await.ok(), Some(vec![record]));
    // Version 4: the grants table exists after the upgrade.
    let grant = portcullis_store::SealedGrant {
        upstream: "docs".into(),
        issuer: "https://auth.example".into(),
        sealed: vec![1, 2, 3],
        updated_at: at,
    };
    store
        .grants()
        .put(&grant)
        .await
        .unwrap_or_else(|e| panic!("the grants table is missing: {e}"));
    assert_eq!(store.grants().get("docs").await.ok(), Some(Some(grant)));
}

#[tokio::test]
async fn sqlite_migrates_an_older_portcullis_schema() {
    let path = scratch("sqlite-portcullis-v2").join("store.db");
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let pool = SqlitePool::connect_with(options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for sql in portcullis_v2_statements() {
        sqlx::query(&sql)
            .execute(&pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    pool.close().await;
    let opened_after = SystemTime::now();
    let store = SqliteStore::open(&path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sqlite_version(&store).await, LATEST);
    check_v2_migrated(&store, opened_after).await;
    drop(store);
    let again = SqliteStore::open(&path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.audit().recent(5).await.map(|r| r.len()).ok(), Some(1));
}

#[tokio::test]
async fn postgres_migrates_an_older_portcullis_schema() {
    let Some((url, admin, schema)) = postgres_schema("portcullis_v2").await else {
        return;
    };
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&admin)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut conn = admin.acquire().await.unwrap_or_else(|e| panic!("{e}"));
    let set_path = format!("SET search_path TO {schema}");
    for sql in std::iter::once(set_path).chain(portcullis_v2_statements()) {
        sqlx::query(&sql)
            .execute(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    drop(conn);
    let opened_after = SystemTime::now();
    let store = PostgresStore::open_in_schema(&url, Some(&schema))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    check_v2_migrated(&store, opened_after).await;
    let version: i64 =
        sqlx::query_scalar(&format!("SELECT version FROM {schema}.portcullis_schema"))
            .fetch_one(&admin)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(version, LATEST);
    let replica = PostgresStore::open_in_schema(&url, Some(&schema))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        replica.audit().recent(5).await.map(|r| r.len()).ok(),
        Some(1)
    );
}

#[tokio::test]
async fn postgres_spec_opens() {
    let Some(url) = postgres_url() else { return };
    let spec = StoreSpec::parse(&url).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !spec.to_string().contains(":portcullis@"),
        "the password was shown"
    );
    let store = open(&spec, &scratch("postgres-spec"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(store.backend().as_str(), "postgres");
    store.list().await.unwrap_or_else(|e| panic!("{e}"));
}

// ------------------------------------------------------- replicas starting

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_concurrent_opens_migrate_once() {
    let path = legacy_sqlite_database("sqlite-concurrent-open", true).await;
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move { SqliteStore::open(&path).await })
        })
        .collect();
    for open in opens {
        let store = open
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("a concurrent open failed: {e}"));
        assert_eq!(store.list().await.map(|r| r.len()).ok(), Some(2));
        assert_eq!(sqlite_version(&store).await, LATEST);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_opens_migrate_once() {
    let Some((url, _admin, schema)) = postgres_schema("concurrent_open").await else {
        return;
    };
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let (url, schema) = (url.clone(), schema.clone());
            tokio::spawn(async move { PostgresStore::open_in_schema(&url, Some(&schema)).await })
        })
        .collect();
    for open in opens {
        let store = open
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("a concurrent open failed: {e}"));
        assert_eq!(store.list().await.map(|r| r.len()).ok(), Some(0));
    }
}
