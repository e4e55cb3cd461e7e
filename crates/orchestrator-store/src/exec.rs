//! One place where a sea-query statement meets a backend. Every query of the store goes through
//! [`Pool`] or [`Tx`], which build the statement for the right dialect and run it with sqlx.

use crate::Result;
use sea_query::{PostgresQueryBuilder, SqliteQueryBuilder};
use sea_query_sqlx::SqlxBinder;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{AssertSqlSafe, FromRow, PgPool, Postgres, Sqlite, SqlitePool};
use std::sync::Arc;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// A row type that decodes from either backend.
pub(crate) trait AnyRow:
    for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}
impl<T> AnyRow for T where
    T: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}

/// A pool on one backend. On SQLite it carries the process's writer lock: SQLite admits one writer
/// at a time, and when two of our own connections race for it the loser sleeps in SQLite's busy
/// handler for milliseconds while the winner needs a fraction of one. Queueing our writers here, in
/// tokio, leaves the busy handler to arbitrate only between processes.
#[derive(Clone)]
pub(crate) enum Pool {
    Sqlite(SqlitePool, Arc<Mutex<()>>),
    Postgres(PgPool),
}

pub(crate) enum Tx {
    Sqlite(sqlx::Transaction<'static, Sqlite>, OwnedMutexGuard<()>),
    Postgres(sqlx::Transaction<'static, Postgres>),
}

/// Runs `$body` with `$sql`/`$values` built for whichever backend `$conn` is, binding the
/// connection as `$c`. Keeps the two arms of every method identical by construction.
macro_rules! dispatch {
    ($self:expr, $stmt:expr, |$c:ident, $sql:ident, $values:ident| $body:expr) => {
        match $self {
            Self::Sqlite($c, ..) => {
                let ($sql, mut $values) = $stmt.build_sqlx(SqliteQueryBuilder);
                clean_text(&mut $values);
                $body
            }
            Self::Postgres($c) => {
                let ($sql, mut $values) = $stmt.build_sqlx(PostgresQueryBuilder);
                clean_text(&mut $values);
                $body
            }
        }
    };
}

/// PostgreSQL refuses a NUL byte in text, and text from processes, tools and models may hold one
/// (`git ls-files -z`, `find -print0`): a summary with one would fail its write, and the attempt
/// would be abandoned and rescued again and again. Every text bound to a statement passes here, on
/// both backends so they store the same thing: a NUL becomes U+FFFD, visibly replaced. JSON columns
/// are not affected, since serde_json writes a NUL as the escape `\u0000`.
fn clean_text(values: &mut sea_query_sqlx::SqlxValues) {
    for value in &mut (values.0).0 {
        if let sea_query::Value::String(Some(text)) = value
            && text.contains('\0')
        {
            *text = text.replace('\0', "\u{FFFD}");
        }
    }
}

impl Pool {
    pub(crate) async fn execute<S: SqlxBinder>(&self, stmt: &S) -> Result<u64> {
        dispatch!(self, stmt, |pool, sql, values| Ok(sqlx::query_with(
            AssertSqlSafe(sql),
            values
        )
        .execute(pool)
        .await?
        .rows_affected()))
    }

    pub(crate) async fn fetch_all<T: AnyRow, S: SqlxBinder>(&self, stmt: &S) -> Result<Vec<T>> {
        dispatch!(self, stmt, |pool, sql, values| Ok(sqlx::query_as_with::<
            _,
            T,
            _,
        >(
            AssertSqlSafe(sql),
            values
        )
        .fetch_all(pool)
        .await?))
    }

    pub(crate) async fn fetch_optional<T: AnyRow, S: SqlxBinder>(
        &self,
        stmt: &S,
    ) -> Result<Option<T>> {
        dispatch!(self, stmt, |pool, sql, values| Ok(sqlx::query_as_with::<
            _,
            T,
            _,
        >(
            AssertSqlSafe(sql),
            values
        )
        .fetch_optional(pool)
        .await?))
    }

    /// Starts a write transaction. On SQLite it takes the write lock at once (`BEGIN IMMEDIATE`):
    /// a deferred transaction that reads and then writes can fail with SQLITE_BUSY_SNAPSHOT when
    /// another process wrote in between, and no busy timeout can save it.
    pub(crate) async fn begin(&self) -> Result<Tx> {
        Ok(match self {
            Pool::Sqlite(pool, writer) => {
                let turn = writer.clone().lock_owned().await;
                Tx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?, turn)
            }
            Pool::Postgres(pool) => Tx::Postgres(pool.begin().await?),
        })
    }
}

impl Pool {
    /// Runs the writes `build(now)` makes and returns the rows they all return, with `now` read
    /// only once a connection is ours, so time spent waiting for one (behind other writers, or on
    /// a slow network) is not taken from what the writes grant (a lease's length). On SQLite they
    /// run in one transaction, in the writer queue. On PostgreSQL each is a statement of its own:
    /// a transaction would cost two more round trips and keep the writes from other sessions until
    /// its commit; callers use this only for writes that stand alone, row by row.
    pub(crate) async fn write_each_at<T: AnyRow, S: SqlxBinder>(
        &self,
        build: impl FnOnce(i64) -> Vec<S>,
    ) -> Result<Vec<T>> {
        let mut rows = Vec::new();
        match self {
            Pool::Sqlite(..) => {
                let mut tx = self.begin().await?;
                for stmt in build(orchestrator_types::now_millis()) {
                    rows.extend(tx.fetch_all::<T, S>(&stmt).await?);
                }
                tx.commit().await?;
            }
            Pool::Postgres(pool) => {
                let mut conn = pool.acquire().await?;
                for stmt in build(orchestrator_types::now_millis()) {
                    let (sql, mut values) = stmt.build_sqlx(PostgresQueryBuilder);
                    clean_text(&mut values);
                    rows.extend(
                        sqlx::query_as_with::<_, T, _>(AssertSqlSafe(sql), values)
                            .fetch_all(&mut *conn)
                            .await?,
                    );
                }
            }
        }
        Ok(rows)
    }
}

impl Tx {
    pub(crate) async fn execute<S: SqlxBinder>(&mut self, stmt: &S) -> Result<u64> {
        dispatch!(self, stmt, |tx, sql, values| Ok(sqlx::query_with(
            AssertSqlSafe(sql),
            values
        )
        .execute(&mut **tx)
        .await?
        .rows_affected()))
    }

    pub(crate) async fn fetch_all<T: AnyRow, S: SqlxBinder>(&mut self, stmt: &S) -> Result<Vec<T>> {
        dispatch!(self, stmt, |tx, sql, values| Ok(sqlx::query_as_with::<
            _,
            T,
            _,
        >(
            AssertSqlSafe(sql),
            values
        )
        .fetch_all(&mut **tx)
        .await?))
    }

    pub(crate) async fn fetch_optional<T: AnyRow, S: SqlxBinder>(
        &mut self,
        stmt: &S,
    ) -> Result<Option<T>> {
        dispatch!(self, stmt, |tx, sql, values| Ok(sqlx::query_as_with::<
            _,
            T,
            _,
        >(
            AssertSqlSafe(sql),
            values
        )
        .fetch_optional(&mut **tx)
        .await?))
    }

    /// Asks PostgreSQL listeners to look for work once this transaction commits. A no-op on SQLite,
    /// where the in-process notifier is used after commit instead.
    pub(crate) async fn notify_task_available(&mut self) -> Result<()> {
        if let Tx::Postgres(tx) = self {
            sqlx::query("SELECT pg_notify('orchestrator_tasks', '')")
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    pub(crate) async fn commit(self) -> Result<()> {
        match self {
            Tx::Sqlite(tx, _turn) => tx.commit().await?,
            Tx::Postgres(tx) => tx.commit().await?,
        }
        Ok(())
    }
}
