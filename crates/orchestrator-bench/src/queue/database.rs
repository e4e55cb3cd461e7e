//! The databases a benchmark run measures on, made fresh for every run and removed after it.
//!
//! Fresh, because a queue's speed depends on what is already in it: a tasks table left over from the
//! last run would make the second run slower than the first for reasons that have nothing to do with
//! the code. SQLite gets a new directory under the system's temp dir; PostgreSQL gets a new database
//! (`orch_bench_<random>`) on the server named by the URL, dropped at the end of the run.

use anyhow::{Context, Result, bail};
use orchestrator_store::Backend;
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;
use tempfile::TempDir;

/// Where the benchmark expects a PostgreSQL server when no URL is given.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// Environment variables naming the PostgreSQL server, first match wins.
pub const POSTGRES_URL_VARS: [&str; 2] = [
    "ORCHESTRATOR_BENCH_DATABASE_URL",
    "ORCHESTRATOR_TEST_DATABASE_URL",
];
/// How long to wait for the PostgreSQL server before reporting it unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One run's database.
#[derive(Debug)]
pub enum BenchDatabase {
    Sqlite {
        /// Holds the directory while the run needs it; `None` when the caller owns the directory.
        _dir: Option<TempDir>,
        dir: PathBuf,
    },
    Postgres {
        /// The server's URL as given: the new database is created and dropped through it.
        server_url: String,
        name: String,
        url: String,
    },
}

impl BenchDatabase {
    /// A new SQLite directory under the system's temp dir, removed when this value is dropped.
    pub fn sqlite() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("orch-bench-")
            .tempdir()
            .context("cannot create a temporary directory for the SQLite files")?;
        Ok(BenchDatabase::Sqlite {
            dir: dir.path().to_owned(),
            _dir: Some(dir),
        })
    }

    /// SQLite files in `dir`, which the caller keeps (tests read the files afterwards).
    pub fn sqlite_in(dir: &Path) -> Self {
        BenchDatabase::Sqlite {
            _dir: None,
            dir: dir.to_owned(),
        }
    }

    /// Creates a fresh database on the PostgreSQL server at `server_url`.
    pub async fn postgres(server_url: &str) -> Result<Self> {
        let name = format!("orch_bench_{:016x}", rand::random::<u64>());
        let mut admin = admin_connection(server_url).await?;
        // The name is ours, made of hex digits: nothing to quote or escape.
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .with_context(|| format!("cannot create database {name}"))?;
        let _ = admin.close().await;
        Ok(BenchDatabase::Postgres {
            server_url: server_url.to_owned(),
            url: with_database(server_url, &name)?,
            name,
        })
    }

    pub fn backend(&self) -> Backend {
        match self {
            BenchDatabase::Sqlite { .. } => Backend::Sqlite,
            BenchDatabase::Postgres { .. } => Backend::Postgres,
        }
    }

    /// The URL orchestrator's store opens, which the raw baseline shares.
    pub fn store_url(&self) -> String {
        match self {
            BenchDatabase::Sqlite { dir, .. } => dir.join("orchestrator.db").display().to_string(),
            BenchDatabase::Postgres { url, .. } => url.clone(),
        }
    }

    /// The SQLite file of the store, for the raw baseline's own connection to it.
    pub fn sqlite_store_path(&self) -> Option<PathBuf> {
        match self {
            BenchDatabase::Sqlite { dir, .. } => Some(dir.join("orchestrator.db")),
            BenchDatabase::Postgres { .. } => None,
        }
    }

    /// apalis on SQLite gets a file of its own: its tables and its WAL must not slow down ours, nor
    /// ours its.
    pub fn sqlite_peer_path(&self) -> Option<PathBuf> {
        match self {
            BenchDatabase::Sqlite { dir, .. } => Some(dir.join("apalis.db")),
            BenchDatabase::Postgres { .. } => None,
        }
    }

    /// Leaves the run's files or database in place for inspection and says where they are.
    pub fn keep(self) -> String {
        match self {
            BenchDatabase::Sqlite { _dir, dir } => {
                if let Some(temp) = _dir {
                    let _ = temp.keep();
                }
                dir.display().to_string()
            }
            BenchDatabase::Postgres { url, .. } => redact(&url),
        }
    }

    /// Removes what the run created. Every pool on the database must be closed first; a connection
    /// left behind (a LISTEN connection reconnecting, say) is cut by `WITH (FORCE)`.
    pub async fn remove(self) -> Result<()> {
        match self {
            BenchDatabase::Sqlite { .. } => Ok(()),
            BenchDatabase::Postgres {
                server_url, name, ..
            } => {
                let mut admin = admin_connection(&server_url).await?;
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut admin)
                .await
                .with_context(|| format!("cannot drop database {name}"))?;
                let _ = admin.close().await;
                Ok(())
            }
        }
    }
}

async fn admin_connection(server_url: &str) -> Result<sqlx::PgConnection> {
    let options = PgConnectOptions::from_str(server_url)
        .with_context(|| format!("bad PostgreSQL URL {}", redact(server_url)))?;
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(e)) => Err(e).with_context(|| format!("cannot connect to {}", redact(server_url))),
        Err(_) => bail!(
            "no answer from {} within {:?}",
            redact(server_url),
            CONNECT_TIMEOUT
        ),
    }
}

/// `url` with its database (the path) replaced by `name`, keeping user, host, port and parameters.
pub fn with_database(url: &str, name: &str) -> Result<String> {
    let Some(scheme_end) = url.find("://") else {
        bail!("{} is not a postgres:// URL", redact(url));
    };
    let authority_start = scheme_end + 3;
    let rest = &url[authority_start..];
    let authority_len = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(authority_len);
    let query = after.find('?').map(|q| &after[q..]).unwrap_or("");
    Ok(format!(
        "{}{authority}/{name}{query}",
        &url[..authority_start]
    ))
}

/// Hides a URL's password before it goes into an error or a JSON line.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme_end + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_is_replaced_and_the_rest_kept() {
        let cases = [
            ("postgres://u@h:5432/test", "postgres://u@h:5432/x"),
            (
                "postgres://u:p@h/test?sslmode=disable",
                "postgres://u:p@h/x?sslmode=disable",
            ),
            ("postgresql://h", "postgresql://h/x"),
            (
                "postgres://h?application_name=a",
                "postgres://h/x?application_name=a",
            ),
        ];
        for (url, want) in cases {
            assert_eq!(with_database(url, "x").unwrap(), want, "{url}");
        }
        assert!(with_database("not a url", "x").is_err());
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    }
}
