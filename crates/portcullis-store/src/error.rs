//! Store errors: each says which backend and which operation failed.

use std::fmt;

/// The storage backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// In-process maps (tests, single runs without persistence).
    Memory,
    /// One SQLite file.
    Sqlite,
    /// A PostgreSQL database shared by several replicas.
    Postgres,
}

impl Backend {
    /// The backend's name as a store spec spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database refused or could not be reached.
    #[error("{backend} store: {operation} failed: {source}")]
    Database {
        /// Which backend.
        backend: Backend,
        /// What was being done (`"open"`, `"save mcp server \"docs\""`, …).
        operation: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A row that must not be written (an unhashed command line, a URL with a
    /// password, an empty id).
    #[error("{backend} store: refusing to save server \"{id}\": {reason}")]
    InvalidRow {
        /// Which backend.
        backend: Backend,
        /// The row's id.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `mcp__describe_tool` (or another non-replayable tool) offered to the
    /// effect log.
    #[error("{backend} store: the effect log never records \"{tool}\": it is not replayed")]
    NotRecordable {
        /// Which backend.
        backend: Backend,
        /// The tool's name.
        tool: String,
    },
    /// A recorded effect that no longer parses.
    #[error("{backend} store: the effect recorded under key {key} no longer parses: {reason}")]
    CorruptEffect {
        /// Which backend.
        backend: Backend,
        /// The idempotency key.
        key: String,
        /// The parse error.
        reason: String,
    },
    /// The database was written by a newer Portcullis.
    #[error(
        "{backend} store: schema version {found} is newer than this build understands ({known}); upgrade Portcullis"
    )]
    SchemaTooNew {
        /// Which backend.
        backend: Backend,
        /// The version found in the database.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// A store spec that does not parse or names a backend not compiled in.
    #[error("store spec {spec:?}: {reason}")]
    Spec {
        /// The spec, with any password masked.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The data directory could not be created.
    #[error("{backend} store: cannot create {path}: {source}")]
    Io {
        /// Which backend.
        backend: Backend,
        /// The path.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// A [`StoreError::Database`] for `backend` doing `operation`.
    pub(crate) fn database(
        backend: Backend,
        operation: impl Into<String>,
    ) -> impl FnOnce(sqlx::Error) -> StoreError {
        let operation = operation.into();
        move |source| StoreError::Database {
            backend,
            operation,
            source,
        }
    }
}
