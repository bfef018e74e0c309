//! Choosing a backend from the config's `store` key and opening it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Backend, StoreError};
use crate::memory::MemoryStore;
use crate::store::Store;

/// The file name of the default SQLite store inside the data directory.
pub const DEFAULT_SQLITE_FILE: &str = "store.db";

/// Which store to open, as the config's `store` key spells it:
///
/// | spec | store |
/// |---|---|
/// | `"sqlite"` | `<data_dir>/store.db` (the default) |
/// | `"sqlite:FILE"` or `"sqlite://FILE"` | that file; a relative path is relative to the data directory |
/// | `"memory"` | in process memory, gone at exit |
/// | `"postgres://…"` or `"postgresql://…"` | a PostgreSQL database shared by replicas |
///
/// `Debug` and `Display` mask a PostgreSQL password.
///
/// ```
/// use portcullis_store::StoreSpec;
///
/// assert_eq!(StoreSpec::parse("sqlite").unwrap(), StoreSpec::Sqlite(None));
/// let pg = StoreSpec::parse("postgres://gw:s3cret@db:5432/portcullis").unwrap();
/// assert_eq!(pg.to_string(), "postgres://gw:***@db:5432/portcullis");
/// assert!(StoreSpec::parse("mysql://db").is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// In process memory.
    Memory,
    /// A SQLite file; `None` for the default file in the data directory.
    Sqlite(Option<PathBuf>),
    /// A PostgreSQL connection URL.
    Postgres(String),
}

impl StoreSpec {
    /// Parses a spec.
    pub fn parse(spec: &str) -> Result<Self, StoreError> {
        let spec = spec.trim();
        if spec == "memory" {
            return Ok(StoreSpec::Memory);
        }
        if spec == "sqlite" {
            return Ok(StoreSpec::Sqlite(None));
        }
        if let Some(path) = spec.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err(StoreError::Spec {
                    spec: spec.to_owned(),
                    reason: "sqlite: needs a file name".into(),
                });
            }
            return Ok(StoreSpec::Sqlite(Some(PathBuf::from(path))));
        }
        if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
            return Ok(StoreSpec::Postgres(spec.to_owned()));
        }
        Err(StoreError::Spec {
            spec: mask_password(spec),
            reason: "expected \"sqlite\", \"sqlite:FILE\", \"memory\" or a postgres:// URL".into(),
        })
    }

    /// The backend this spec opens.
    pub fn backend(&self) -> Backend {
        match self {
            StoreSpec::Memory => Backend::Memory,
            StoreSpec::Sqlite(_) => Backend::Sqlite,
            StoreSpec::Postgres(_) => Backend::Postgres,
        }
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Sqlite(None) => f.write_str("sqlite"),
            StoreSpec::Sqlite(Some(path)) => write!(f, "sqlite:{}", path.display()),
            StoreSpec::Postgres(url) => f.write_str(&mask_password(url)),
        }
    }
}

impl fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreSpec({self})")
    }
}

/// `scheme://user:***@host…`: the URL with any password replaced.
fn mask_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|at| at + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |at| scheme_end + at);
    let authority = &url[scheme_end..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let Some(colon) = userinfo.find(':') else {
        return url.to_owned();
    };
    format!(
        "{}{}:***{}",
        &url[..scheme_end],
        &userinfo[..colon],
        &url[scheme_end + at..]
    )
}

/// Creates `dir` and its missing parents readable by this user only
/// (`0700` on Unix): the store holds tool results and the audit trail, and
/// the gateway's signing key lives beside it. An existing directory keeps
/// its mode (it may be shared on purpose; the files in it are private).
#[cfg(all(unix, feature = "sqlite"))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(all(not(unix), feature = "sqlite"))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// Opens the store `spec` names. `data_dir` (created if missing, private to
/// this user) holds the default SQLite file and anchors a relative
/// `sqlite:` path.
pub async fn open(spec: &StoreSpec, data_dir: &Path) -> Result<Arc<dyn Store>, StoreError> {
    match spec {
        StoreSpec::Memory => Ok(Arc::new(MemoryStore::new())),
        #[cfg(feature = "sqlite")]
        StoreSpec::Sqlite(file) => {
            let path = data_dir.join(file.as_deref().unwrap_or(Path::new(DEFAULT_SQLITE_FILE)));
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                create_private_dir(dir).map_err(|source| StoreError::Io {
                    backend: Backend::Sqlite,
                    path: dir.display().to_string(),
                    source,
                })?;
            }
            Ok(Arc::new(crate::sqlite::SqliteStore::open(&path).await?))
        }
        #[cfg(feature = "postgres")]
        StoreSpec::Postgres(url) => Ok(Arc::new(crate::postgres::PostgresStore::open(url).await?)),
        #[allow(unreachable_patterns)]
        other => {
            let _ = data_dir;
            Err(StoreError::Spec {
                spec: other.to_string(),
                reason: format!(
                    "this build has no {} backend (cargo feature \"{}\")",
                    other.backend(),
                    other.backend()
                ),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let parse = |s| StoreSpec::parse(s).ok();
        assert_eq!(parse("memory"), Some(StoreSpec::Memory));
        assert_eq!(parse(" sqlite "), Some(StoreSpec::Sqlite(None)));
        assert_eq!(
            parse("sqlite:/var/lib/p.db"),
            Some(StoreSpec::Sqlite(Some("/var/lib/p.db".into())))
        );
        assert_eq!(
            parse("sqlite://rel.db"),
            Some(StoreSpec::Sqlite(Some("rel.db".into())))
        );
        assert_eq!(parse("sqlite:"), None);
        assert_eq!(
            parse("postgresql://h/db"),
            Some(StoreSpec::Postgres("postgresql://h/db".into()))
        );
        assert_eq!(parse("redis://h"), None);
    }

    #[test]
    fn never_prints_a_password() {
        for url in [
            "postgres://u:pw@h/db",
            "postgres://u:pw@h:5432/db?sslmode=disable",
            "postgres://u:p@w@h/db",
        ] {
            let spec = StoreSpec::parse(url).unwrap_or(StoreSpec::Memory);
            for shown in [spec.to_string(), format!("{spec:?}")] {
                assert!(!shown.contains(":pw@") && !shown.contains("p@w"), "{shown}");
                assert!(shown.contains("u:***@h"), "{shown}");
            }
        }
        assert_eq!(mask_password("postgres://h/db"), "postgres://h/db");
        assert_eq!(mask_password("postgres://u@h/db"), "postgres://u@h/db");
    }
}
