//! Helpers shared by the test suites: a fresh store on SQLite or PostgreSQL, temporary git
//! repositories, a scripted model server (`model_server`) and a fake GitHub REST API
//! (`github_server`), and for the store's fault tests a PostgreSQL cluster a test may stop and restart
//! (`PrivateCluster`) and a TCP proxy that adds latency (`LatencyProxy`), and `programs`, which
//! fails a test whose program is missing with the command that installs it; `GitDaemon` serves
//! repositories over git:// on 127.0.0.1.
//!
//! PostgreSQL tests use `ORCHESTRATOR_TEST_DATABASE_URL`, or the local default
//! `postgres://postgres@127.0.0.1:5432/test`. Each test gets its own new database on that server, so
//! tests run in parallel without seeing each other's rows. When the variable is unset and nothing
//! answers on the default address, a private throwaway cluster is made from the installed server's
//! binaries for the test process (`private_postgres`); when PostgreSQL is not installed either, the
//! tests fail with instructions. `ORCHESTRATOR_TEST_SKIP_POSTGRES=1` is the explicit, visible way to
//! run only SQLite.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod git_daemon;
pub mod github_server;
mod http_server;
mod latency_proxy;
pub mod model_server;
mod private_postgres;
pub mod programs;

pub use git_daemon::GitDaemon;
pub use latency_proxy::LatencyProxy;
pub use private_postgres::PrivateCluster;
pub use programs::{Program, require};

use orchestrator_store::{Store, StoreOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const DEFAULT_TEST_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A store for one test, with whatever keeps it alive.
pub struct TestStore {
    pub store: Store,
    /// The URL `orchestrator --database-url` takes to reach the same store.
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestStore {
    /// Runs `sql` (one or more statements) on this store's database through a connection of its
    /// own, around the store: how a fault test plants a trigger that makes one write fail, or
    /// corrupts a row the store would never write. The caller writes the backend's own dialect.
    pub async fn raw_sql(&self, sql: &str) {
        use sqlx::Connection;
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self.store.backend() {
            orchestrator_store::Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", self.url))
                    .await
                    .unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
            orchestrator_store::Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&self.url).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
        }
    }
}

/// A fresh SQLite store in a temporary directory.
pub async fn sqlite_store() -> TestStore {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orchestrator.db");
    let store = Store::open_sqlite(&path, &StoreOptions::default())
        .await
        .unwrap();
    TestStore {
        store,
        url: path.display().to_string(),
        _dir: Some(dir),
    }
}

/// Whether the PostgreSQL half was explicitly switched off.
pub fn postgres_skipped() -> bool {
    std::env::var("ORCHESTRATOR_TEST_SKIP_POSTGRES").is_ok_and(|v| v == "1")
}

/// The server URL tests create their databases on: the variable's, else the default when a server
/// answers there, else a private cluster started for this process.
pub fn postgres_server_url() -> String {
    if let Some(url) = std::env::var("ORCHESTRATOR_TEST_DATABASE_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        return url;
    }
    if private_postgres::answers("127.0.0.1", 5432) {
        return DEFAULT_TEST_DATABASE_URL.to_owned();
    }
    private_postgres::server_url().unwrap_or_else(|_| DEFAULT_TEST_DATABASE_URL.to_owned())
}

/// Creates a new, empty database on the test server and returns its URL.
pub async fn fresh_postgres_url() -> String {
    use sqlx::Connection;
    let server = postgres_server_url();
    let mut conn = sqlx::PgConnection::connect(&server)
        .await
        .unwrap_or_else(|e| {
            let configured =
                std::env::var("ORCHESTRATOR_TEST_DATABASE_URL").is_ok_and(|v| !v.trim().is_empty());
            let private = if configured {
                String::new()
            } else {
                private_postgres::server_url()
                    .err()
                    .map(|reason| format!(" No private cluster either: {reason}."))
                    .unwrap_or_default()
            };
            panic!(
                "PostgreSQL tests need a server at {server} ({e}).{private} Start one and set \
             ORCHESTRATOR_TEST_DATABASE_URL, or set ORCHESTRATOR_TEST_SKIP_POSTGRES=1 to run only \
             the SQLite half."
            )
        });
    let name = format!("{}_{:016x}", database_prefix(), rand::random::<u64>());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.ok();
    replace_database(&server, &name)
}

/// How this run's databases begin: `ORCHESTRATOR_TEST_DATABASE_PREFIX` (lower-case letters,
/// digits and `_`, at most 40), which `scripts/test` sets to its run's own name so that it drops
/// only the databases of its run, never those of another run on the same server; else
/// `orch_test`.
fn database_prefix() -> String {
    std::env::var("ORCHESTRATOR_TEST_DATABASE_PREFIX")
        .ok()
        .filter(|p| {
            !p.is_empty()
                && p.len() <= 40
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
        .unwrap_or_else(|| "orch_test".to_owned())
}

fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{name}?{query}"),
        None => format!("{base}/{name}"),
    }
}

/// A fresh PostgreSQL store, or `None` only when the PostgreSQL half was explicitly skipped.
pub async fn postgres_store() -> Option<TestStore> {
    if postgres_skipped() {
        eprintln!("ORCHESTRATOR_TEST_SKIP_POSTGRES=1: PostgreSQL half not run");
        return None;
    }
    let url = fresh_postgres_url().await;
    let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
    Some(TestStore {
        store,
        url,
        _dir: None,
    })
}

/// Runs git in `dir`, panicking with its output on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    require(Program::Git);
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A temporary git repository with one commit holding `files`.
pub fn git_repo(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    git(&path, &["init", "-q", "-b", "main"]);
    git(&path, &["config", "user.name", "Test"]);
    git(&path, &["config", "user.email", "test@example.com"]);
    for (name, content) in files {
        let file = path.join(name);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(file, content).unwrap();
    }
    git(&path, &["add", "-A"]);
    git(&path, &["commit", "-q", "-m", "initial", "--allow-empty"]);
    (dir, path)
}

#[cfg(test)]
mod tests {
    #[test]
    fn database_name_is_replaced() {
        assert_eq!(
            super::replace_database("postgres://u@h:5432/test?sslmode=disable", "x"),
            "postgres://u@h:5432/x?sslmode=disable"
        );
        assert_eq!(
            super::replace_database("postgres://u@h", "x"),
            "postgres://u@h/x"
        );
    }
}
