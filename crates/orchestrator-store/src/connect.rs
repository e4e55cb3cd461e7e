//! Opening a store: choosing the backend from the URL, the SQLite durability settings, migrations,
//! and the PostgreSQL listener that turns NOTIFY into wake-ups.

use crate::exec::{Pool, WriterQueue};
use crate::lease_line::LeaseLine;
use crate::wake::{self, WakeSender, Wakeup};
use crate::{Error, Result};
use orchestrator_types::BoxFuture;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Which database a store speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// SQLite's `synchronous` setting. `Full` (the default) makes every commit survive power loss;
/// `Normal` may lose the last commits on power loss (never on a process crash) and is faster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SqliteSync {
    #[default]
    Full,
    Normal,
}

/// How to open a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub sqlite_sync: SqliteSync,
    /// How long SQLite waits for another writer before giving up.
    pub busy_timeout: Duration,
    /// Connections in the pool.
    pub max_connections: u32,
    /// How long to wait for a connection before reporting the database unreachable.
    pub connect_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            sqlite_sync: SqliteSync::Full,
            busy_timeout: Duration::from_secs(30),
            max_connections: 8,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// The one connection claims are written on, on SQLite with `synchronous=FULL`: the same file
/// and settings, but `synchronous=NORMAL`, so a claim's commit does not wait for the disk (an
/// fsync: about 0.2 ms of the time from a task's creation to its start, in the queue bench).
/// An agent's reply is written here too (`Store::append_reply`), for the same reason.
///
/// Why that loses nothing: in WAL mode a commit without a sync is still written to the log in
/// order, and the next commit with one (the attempt's first record, its completion, any other
/// write of the store) syncs the log up to and including it. A power loss can therefore only take
/// the last claims together with everything after them, never a claim while keeping what an
/// attempt wrote under it. A task whose claim was taken that way is simply queued again, as if it
/// had not been claimed yet: an attempt records what it is about to do (a gate's start, a tool call
/// that may change something) before doing it, in a commit that syncs its claim too. A process
/// crash loses nothing at all: the file's writes are the kernel's by then. Opened on first use.
/// PostgreSQL's claim and reply stay synced: there a crash of the server alone loses an unsynced
/// commit while the worker that made it runs on (see `leases/claim.rs`, `claim_with_events`).
fn claim_pool(connect: &SqliteConnectOptions, options: &StoreOptions) -> sqlx::SqlitePool {
    SqlitePoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .acquire_timeout(options.connect_timeout.max(options.busy_timeout))
        .connect_lazy_with(connect.clone().synchronous(SqliteSynchronous::Normal))
}

/// The store: a pool on one backend and the wake-up channel for idle workers. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub(crate) pool: Pool,
    /// Where claims and agents' replies are written: on SQLite with `synchronous=FULL`, a
    /// connection of its own with `synchronous=NORMAL` (see [`claim_pool`]); otherwise `pool`
    /// itself.
    pub(crate) claims: Pool,
    /// The lease heartbeat's own connection, ahead of the pool's work (see lease_line.rs).
    pub(crate) lease_line: Arc<LeaseLine>,
    pub(crate) wake: WakeSender,
    wakeup: Wakeup,
    listener: Arc<tokio::sync::OnceCell<()>>,
    /// The lease every write of this handle checks in its own transaction: see [`Store::fenced`].
    fence: Option<crate::Lease>,
    /// Where this process's machine stands among others; tasks it creates on a workspace path
    /// require it (see `orchestrator_types::placement`). None: tasks run anywhere.
    placement: Option<Arc<orchestrator_types::Placement>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend())
            .finish()
    }
}

impl Store {
    /// Opens the store named by `url` and applies migrations. `postgres://` and `postgresql://` URLs
    /// open PostgreSQL; `sqlite://PATH`, `sqlite:PATH` or a bare file path open SQLite, creating
    /// the file if it is missing.
    pub fn open<'a>(url: &'a str, options: &'a StoreOptions) -> BoxFuture<'a, Result<Store>> {
        Box::pin(Self::open_unboxed(url, options))
    }

    async fn open_unboxed(url: &str, options: &StoreOptions) -> Result<Store> {
        let trimmed = url.trim();
        if trimmed.is_empty() {
            return Err(Error::BadUrl {
                url: url.to_owned(),
                message: "the URL is empty".into(),
            });
        }
        if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
            return Self::open_postgres(trimmed, options).await;
        }
        if let Some(path) = trimmed
            .strip_prefix("sqlite://")
            .or_else(|| trimmed.strip_prefix("sqlite:"))
        {
            return Self::open_sqlite(Path::new(path), options).await;
        }
        if trimmed.contains("://") {
            return Err(Error::BadUrl {
                url: redact(url),
                message:
                    "unsupported scheme; use postgres://USER@HOST/DB, sqlite://PATH or a file path"
                        .into(),
            });
        }
        Self::open_sqlite(Path::new(trimmed), options).await
    }

    /// Opens (creating if needed) an SQLite file with WAL, foreign keys, a busy timeout and the
    /// chosen `synchronous` level, and applies migrations.
    pub fn open_sqlite<'a>(
        path: &'a Path,
        options: &'a StoreOptions,
    ) -> BoxFuture<'a, Result<Store>> {
        Box::pin(Self::open_sqlite_unboxed(path, options))
    }

    async fn open_sqlite_unboxed(path: &Path, options: &StoreOptions) -> Result<Store> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
            && !parent.is_dir()
        {
            return Err(Error::BadUrl {
                url: path.display().to_string(),
                message: format!("directory {} does not exist", parent.display()),
            });
        }
        create_private(path)?;
        let connect = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match options.sqlite_sync {
                SqliteSync::Full => SqliteSynchronous::Full,
                SqliteSync::Normal => SqliteSynchronous::Normal,
            })
            .foreign_keys(true)
            // Statement journals (an UPDATE that fires triggers keeps one, spilled to a file past
            // 64 KiB, as a batch of a few hundred rows is) and the sorts of reads, in memory
            // rather than in temporary files.
            .pragma("temp_store", "memory")
            .busy_timeout(options.busy_timeout);
        // Opening sets WAL mode, and SQLite may answer that with "database is locked" at once,
        // without its busy handler, while another process (a busy `serve`) checkpoints: a CLI
        // command opening the store then retries for as long as the busy timeout allows.
        let deadline = std::time::Instant::now() + options.busy_timeout;
        let pool = loop {
            let opened = SqlitePoolOptions::new()
                .max_connections(options.max_connections)
                // A local file does not drop connections; the ping before every use only adds a
                // round trip to the connection thread on the hot path.
                .test_before_acquire(false)
                .acquire_timeout(options.connect_timeout.max(options.busy_timeout))
                .connect_with(connect.clone())
                .await;
            match opened {
                Ok(pool) => break pool,
                Err(e) if is_locked(&e) && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => {
                    return Err(Error::BadUrl {
                        url: path.display().to_string(),
                        message: format!("cannot open the SQLite file: {e}"),
                    });
                }
            }
        };
        let writer = Arc::new(WriterQueue::default());
        let claims = match options.sqlite_sync {
            SqliteSync::Full => Pool::Sqlite(claim_pool(&connect, options), writer.clone()),
            SqliteSync::Normal => Pool::Sqlite(pool.clone(), writer.clone()),
        };
        let line = LeaseLine::sqlite(connect, writer.clone(), options.connect_timeout);
        Self::finish(Pool::Sqlite(pool, writer), claims, line).await
    }

    async fn open_postgres(url: &str, options: &StoreOptions) -> Result<Store> {
        let connect = PgConnectOptions::from_str(url).map_err(|e| Error::BadUrl {
            url: redact(url),
            message: e.to_string(),
        })?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.connect_timeout)
            .connect_with(connect.clone())
            .await
            .map_err(|e| connect_error(url, &connect, &e))?;
        let line = LeaseLine::postgres(connect, options.connect_timeout);
        let pool = Pool::Postgres(pool);
        Self::finish(pool.clone(), pool, line).await
    }

    async fn finish(pool: Pool, claims: Pool, lease_line: LeaseLine) -> Result<Store> {
        crate::migrate::migrate(&pool).await?;
        let (wake, wakeup) = wake::channel();
        Ok(Store {
            pool,
            claims,
            lease_line: Arc::new(lease_line),
            wake,
            wakeup,
            listener: Arc::new(tokio::sync::OnceCell::new()),
            fence: None,
            placement: None,
        })
    }

    /// A handle on the same store whose writes on a task's behalf (artifacts, PR attempts, input
    /// to another task, a shell job's end, automations) first check, in their own transaction, that
    /// `lease` is still held: a worker that lost its task (rescued, canceled, handed to another)
    /// can no longer write for it, whatever tool was still running. Reads are not fenced. The
    /// agent's tools get this handle.
    pub fn fenced(&self, lease: &crate::Lease) -> Store {
        Store {
            fence: Some(lease.clone()),
            ..self.clone()
        }
    }

    /// This handle, creating tasks placed by `placement`: a task on a workspace path then
    /// requires this machine's host (or the shared directory that holds the path).
    pub fn with_placement(self, placement: orchestrator_types::Placement) -> Store {
        Store {
            placement: Some(Arc::new(placement)),
            ..self
        }
    }

    /// The placement tasks created through this handle get, if one was given.
    pub fn placement(&self) -> Option<&orchestrator_types::Placement> {
        self.placement.as_deref()
    }

    /// One write statement of this handle: on its own in the writer queue, or, on a fenced
    /// handle, in a transaction that first checks the lease.
    pub(crate) async fn write_one<S: sea_query_sqlx::SqlxBinder>(&self, stmt: &S) -> Result<u64> {
        let Some(lease) = &self.fence else {
            return self.pool.write(stmt).await;
        };
        let mut tx = self.pool.begin().await?;
        crate::leases::check_lease(&mut tx, lease, orchestrator_types::now_millis()).await?;
        let written = tx.execute(stmt).await?;
        tx.commit().await?;
        Ok(written)
    }

    /// [`Store::write_one`] for a write that returns a row.
    pub(crate) async fn write_one_returning<T, S>(&self, stmt: &S) -> Result<Option<T>>
    where
        T: crate::exec::AnyRow,
        S: sea_query_sqlx::SqlxBinder,
    {
        let Some(lease) = &self.fence else {
            return self.pool.write_returning(stmt).await;
        };
        let mut tx = self.pool.begin().await?;
        crate::leases::check_lease(&mut tx, lease, orchestrator_types::now_millis()).await?;
        let row = tx.fetch_optional(stmt).await?;
        tx.commit().await?;
        Ok(row)
    }

    /// Checks the handle's lease, if it has one, inside the write's transaction (see
    /// [`Store::fenced`]).
    pub(crate) async fn check_fence(&self, tx: &mut crate::exec::Tx, now: i64) -> Result<()> {
        match &self.fence {
            Some(lease) => crate::leases::check_lease(tx, lease, now).await,
            None => Ok(()),
        }
    }

    pub fn backend(&self) -> Backend {
        match self.pool {
            Pool::Sqlite(..) => Backend::Sqlite,
            Pool::Postgres(_) => Backend::Postgres,
        }
    }

    /// A handle that wakes when work may have arrived. On PostgreSQL the first call starts a
    /// LISTEN connection in the background, which reconnects by itself; callers still poll at an
    /// interval because a notification sent while it reconnects is lost.
    pub fn wakeup<'a>(&'a self) -> BoxFuture<'a, Wakeup> {
        Box::pin(self.wakeup_unboxed())
    }

    async fn wakeup_unboxed(&self) -> Wakeup {
        if let Pool::Postgres(pool) = &self.pool {
            let pool = pool.clone();
            let wake = self.wake.clone();
            self.listener
                .get_or_init(|| async move {
                    tokio::spawn(listen(pool, wake));
                })
                .await;
        }
        self.wakeup.clone()
    }

    /// Wakes this process's idle workers, as a commit of new work does.
    pub fn wake_local(&self) {
        self.wake.wake();
    }

    /// Refreshes the planner's statistics (`ANALYZE`), as PostgreSQL's autovacuum does by itself
    /// in time: after a bulk import, so the first queries plan as the later ones will.
    pub fn analyze<'a>(&'a self) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.analyze_unboxed())
    }

    async fn analyze_unboxed(&self) -> Result<()> {
        match &self.pool {
            Pool::Sqlite(pool, _) => {
                sqlx::raw_sql("ANALYZE").execute(pool).await?;
            }
            Pool::Postgres(pool) => {
                sqlx::raw_sql("ANALYZE").execute(pool).await?;
            }
        }
        Ok(())
    }

    /// Closes the pool, waiting for connections to be returned, and the heartbeat's connection.
    pub fn close<'a>(&'a self) -> BoxFuture<'a, ()> {
        Box::pin(self.close_unboxed())
    }

    async fn close_unboxed(&self) {
        self.lease_line.close().await;
        // The claims' pool is the store's own pool on PostgreSQL (closing it twice is nothing),
        // and a connection of its own on SQLite, whose close ends its use of the WAL too.
        for pool in [&self.claims, &self.pool] {
            match pool {
                Pool::Sqlite(pool, _) => pool.close().await,
                Pool::Postgres(pool) => pool.close().await,
            }
        }
    }
}

async fn listen(pool: sqlx::PgPool, wake: WakeSender) {
    loop {
        match PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                if let Err(e) = listener.listen("orchestrator_tasks").await {
                    tracing::warn!(error = %e, "LISTEN failed; polling until it works");
                } else {
                    // Anything sent while we were not listening is unknown: look once.
                    wake.wake();
                    loop {
                        match listener.recv().await {
                            Ok(_) => wake.wake(),
                            Err(e) => {
                                tracing::warn!(error = %e, "LISTEN connection lost; reconnecting");
                                break;
                            }
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot open a LISTEN connection; retrying"),
        }
        if pool.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Hides the password of a URL so it can be shown in errors and logs: the one in `user:pass@` and
/// any `password=` query parameter (which libpq-style URLs accept too).
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let base = match (base.find("://"), base.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &base[scheme_end + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &base[..scheme_end + 3],
                    &userinfo[..colon],
                    &base[at..]
                ),
                None => base.to_owned(),
            }
        }
        _ => base.to_owned(),
    };
    match query {
        None => base,
        Some(query) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{base}?{}", query.join("&"))
        }
    }
}

/// Creates a missing SQLite file readable and writable by its owner only (0600), before SQLite
/// creates it with the umask's mode: the store holds approvals, policies and conversations, which
/// no other local user may read or rewrite. SQLite gives its `-wal` and `-shm` files the database
/// file's mode, so they follow. An existing file keeps its mode: the home directory it lives in by
/// default is private (0700), and a store elsewhere may be shared on purpose.
fn create_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if path.as_os_str() == ":memory:" {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::BadUrl {
            url: path.display().to_string(),
            message: format!("cannot create the SQLite file: {e}"),
        }),
    }
}

/// A failed first connection to PostgreSQL, said as what to do about it: an address where nothing
/// answers is not a bad URL, and a missing role or database is named with the command that makes
/// it (the server's own message, without the line of its C source that sqlx appends).
fn connect_error(url: &str, options: &PgConnectOptions, error: &sqlx::Error) -> Error {
    let url = redact(url);
    let host = format!("{}:{}", options.get_host(), options.get_port());
    let user = options.get_username();
    let database = options.get_database().unwrap_or(user);
    match error {
        sqlx::Error::Database(db) => {
            let said = db.message();
            let hint = match db.code().as_deref() {
                Some("3D000") => format!(
                    "; create it: `createdb -h {} -p {} -U postgres -O {user} {database}` (or CREATE DATABASE {database} OWNER {user})",
                    options.get_host(),
                    options.get_port()
                ),
                Some("28000") if said.contains("role") => format!(
                    "; create the role: `createuser -h {} -p {} -U postgres --createdb {user}` (or CREATE ROLE {user} LOGIN CREATEDB)",
                    options.get_host(),
                    options.get_port()
                ),
                Some("28P01") => {
                    "; check the password in the URL (or the server's pg_hba.conf)".to_owned()
                }
                Some("28000") => {
                    "; the server's pg_hba.conf has no entry that lets this role connect from here"
                        .to_owned()
                }
                _ => String::new(),
            };
            Error::ConnectRefused {
                url,
                message: format!("{said}{hint}"),
            }
        }
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) => {
            Error::Unreachable {
                url,
                message: format!(
                    "{error}; is PostgreSQL running and listening on {host}? (`pg_isready -h {} -p {}` checks)",
                    options.get_host(),
                    options.get_port()
                ),
            }
        }
        other => Error::BadUrl {
            url,
            message: format!("cannot connect: {other}"),
        },
    }
}

pub(crate) fn redact(url: &str) -> String {
    redact_url(url)
}

/// Whether SQLite refused for a lock another connection holds (SQLITE_BUSY, code 5).
fn is_locked(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => {
            // The primary code is the low byte: 261, 517 and 773 are kinds of SQLITE_BUSY too.
            db.code()
                .and_then(|c| c.parse::<i32>().ok())
                .is_some_and(|c| c & 0xff == 5)
                || db.message().contains("database is locked")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{SqliteSync, Store, StoreOptions};
    use crate::exec::Pool;
    use orchestrator_types::{NewTask, TaskState};

    async fn synchronous(pool: &Pool) -> i64 {
        let Pool::Sqlite(pool, _) = pool else {
            panic!("not SQLite")
        };
        sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(pool)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn on_sqlite_claims_commit_without_a_sync_and_everything_else_with_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_sqlite(&dir.path().join("s.db"), &StoreOptions::default())
            .await
            .unwrap();
        let id = store.create_task(&NewTask::new("t")).await.unwrap();
        let claimed = store
            .claim("w", &["default".to_owned()], 4, 60_000)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        // What the claim's connection wrote is what every other connection reads.
        assert_eq!(store.get_task(id).await.unwrap().state, TaskState::Running);
        // NORMAL is 1, FULL is 2.
        assert_eq!(synchronous(&store.claims).await, 1);
        assert_eq!(synchronous(&store.pool).await, 2);
        // Closing the store closes the claims' connection too.
        store.close().await;
        for pool in [&store.claims, &store.pool] {
            let Pool::Sqlite(pool, _) = pool else {
                panic!("not SQLite")
            };
            assert!(pool.is_closed());
        }

        // A store opened with NORMAL throughout needs no connection of its own for claims.
        let normal = StoreOptions {
            sqlite_sync: SqliteSync::Normal,
            ..StoreOptions::default()
        };
        let store = Store::open_sqlite(&dir.path().join("n.db"), &normal)
            .await
            .unwrap();
        assert_eq!(synchronous(&store.claims).await, 1);
        assert_eq!(synchronous(&store.pool).await, 1);
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            super::redact("postgres://bob:secret@db/x"),
            "postgres://bob:***@db/x"
        );
        assert_eq!(super::redact("postgres://bob@db/x"), "postgres://bob@db/x");
        assert_eq!(super::redact("/tmp/x.db"), "/tmp/x.db");
        assert_eq!(
            super::redact_url("postgres://bob@db/x?sslmode=disable&password=secret"),
            "postgres://bob@db/x?sslmode=disable&password=***"
        );
    }

    /// A task created by another process of a shared PostgreSQL store wakes this one's idle
    /// claimers (the creation's NOTIFY, sent by its one statement), not only its poll.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_created_elsewhere_wakes_the_claimers_on_postgresql() {
        use std::time::Duration;
        if orchestrator_test_support::postgres_skipped() {
            return;
        }
        let url = orchestrator_test_support::fresh_postgres_url().await;
        let here = Store::open(&url, &StoreOptions::default()).await.unwrap();
        let elsewhere = Store::open(&url, &StoreOptions::default()).await.unwrap();
        let mut wakeup = here.wakeup().await;
        // The listener wakes once when its LISTEN is in place; from then on every NOTIFY counts.
        let listening = tokio::time::timeout(
            Duration::from_secs(60),
            wakeup.wait(Duration::from_secs(3600)),
        )
        .await;
        assert!(listening.is_ok(), "the LISTEN connection never came up");
        wakeup.mark_seen();
        elsewhere
            .create_task(&NewTask::new("anywhere"))
            .await
            .unwrap();
        let woken = tokio::time::timeout(
            Duration::from_secs(60),
            wakeup.wait(Duration::from_secs(3600)),
        )
        .await;
        assert!(
            woken.is_ok(),
            "the creation's NOTIFY never reached the other store"
        );
        here.close().await;
        elsewhere.close().await;
    }
}
