//! One place where a sea-query statement meets a backend. Every query of the store goes through
//! [`Pool`] or [`Tx`], which build the statement for the right dialect and run it with sqlx.

use crate::Result;
use crate::sqlite_sql::SqliteSql;
use sea_query::PostgresQueryBuilder;
use sea_query_sqlx::SqlxBinder;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{AssertSqlSafe, FromRow, PgPool, Postgres, Sqlite, SqlitePool};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::oneshot;

/// A row type that decodes from either backend.
pub(crate) trait AnyRow:
    for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}
impl<T> AnyRow for T where
    T: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}

/// A pool on one backend. On SQLite it carries the process's writer queue: SQLite admits one
/// writer at a time, and when two of our own connections race for it the loser sleeps in SQLite's
/// busy handler for milliseconds while the winner needs a fraction of one. Queueing our writers
/// here, in tokio, leaves the busy handler to arbitrate only between processes.
#[derive(Clone)]
pub(crate) enum Pool {
    Sqlite(SqlitePool, Arc<WriterQueue>),
    Postgres(PgPool),
}

pub(crate) enum Tx {
    Sqlite(sqlx::Transaction<'static, Sqlite>, WriterTurn),
    Postgres(sqlx::Transaction<'static, Postgres>),
}

/// Which line of the writer queue a write waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Every write but one: in the order they asked.
    Ordinary,
    /// A lease heartbeat: before every ordinary write still waiting. A lease lapses when its
    /// extension waits longer than the lease, and behind a queue of ordinary writes (a burst of
    /// completions, a gate's live log, a large artifact) it would wait for all of them; here it
    /// waits for the write that holds the turn at most.
    Lease,
}

/// The writer queue of an SQLite store in this process: one write transaction at a time, handed
/// on first to the waiting lease heartbeats, then to the other writes in the order they asked.
#[derive(Default)]
pub(crate) struct WriterQueue {
    state: std::sync::Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    held: bool,
    lease: VecDeque<oneshot::Sender<WriterTurn>>,
    ordinary: VecDeque<oneshot::Sender<WriterTurn>>,
}

/// A turn to write, held until dropped; dropping it hands the turn to the next in line.
pub(crate) struct WriterTurn {
    queue: Option<Arc<WriterQueue>>,
}

impl WriterQueue {
    fn state(&self) -> std::sync::MutexGuard<'_, QueueState> {
        // A poisoned lock only means a holder panicked between two lines of bookkeeping that
        // cannot panic; the queue is still whole.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for this process's turn to write, in `lane`.
    pub(crate) async fn turn(self: &Arc<Self>, lane: Lane) -> WriterTurn {
        loop {
            let waiting = {
                let mut state = self.state();
                if !state.held {
                    state.held = true;
                    return WriterTurn {
                        queue: Some(self.clone()),
                    };
                }
                let (sender, waiting) = oneshot::channel();
                match lane {
                    Lane::Lease => state.lease.push_back(sender),
                    Lane::Ordinary => state.ordinary.push_back(sender),
                }
                waiting
            };
            // A sender is only dropped unsent by a queue that found its waiter gone, which is
            // not this one; ask again rather than trust that.
            if let Ok(turn) = waiting.await {
                return turn;
            }
        }
    }

    /// Writes waiting for a turn (not the one that holds it).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        let state = self.state();
        state.lease.len() + state.ordinary.len()
    }
}

impl Drop for WriterTurn {
    fn drop(&mut self) {
        let Some(queue) = self.queue.take() else {
            return;
        };
        let mut state = queue.state();
        loop {
            let next = match state.lease.pop_front() {
                Some(next) => next,
                None => match state.ordinary.pop_front() {
                    Some(next) => next,
                    None => {
                        state.held = false;
                        return;
                    }
                },
            };
            let turn = WriterTurn {
                queue: Some(queue.clone()),
            };
            match next.send(turn) {
                Ok(()) => return,
                // Its waiter gave up (its future was dropped): the turn goes to the next one, and
                // this copy must not hand it on a second time.
                Err(mut unsent) => unsent.queue = None,
            }
        }
    }
}

/// Runs `$body` with `$sql`/`$values` built for whichever backend `$conn` is, binding the
/// connection as `$c`. Keeps the two arms of every method identical by construction.
macro_rules! dispatch {
    ($self:expr, $stmt:expr, |$c:ident, $sql:ident, $values:ident| $body:expr) => {
        match $self {
            Self::Sqlite($c, ..) => {
                let ($sql, mut $values) = $stmt.build_sqlx(SqliteSql);
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
pub(crate) fn clean_text(values: &mut sea_query_sqlx::SqlxValues) {
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
                let turn = writer.turn(Lane::Ordinary).await;
                Tx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?, turn)
            }
            Pool::Postgres(pool) => Tx::Postgres(pool.begin().await?),
        })
    }
}

impl Pool {
    /// Runs one write statement on its own (autocommit), in the writer queue on SQLite: a write
    /// that bypassed the queue would race the queue's transactions for SQLite's lock in the busy
    /// handler, sleeping there for milliseconds at a time, and be refused with SQLITE_BUSY when a
    /// long transaction outlasts the busy timeout. For writes that are not in a transaction.
    pub(crate) async fn write<S: SqlxBinder>(&self, stmt: &S) -> Result<u64> {
        let _turn = self.turn().await;
        self.execute(stmt).await
    }

    /// [`Pool::write`] for a write that returns a row (`INSERT ... RETURNING`).
    pub(crate) async fn write_returning<T: AnyRow, S: SqlxBinder>(
        &self,
        stmt: &S,
    ) -> Result<Option<T>> {
        let _turn = self.turn().await;
        self.fetch_optional(stmt).await
    }

    /// [`Pool::write`] of the statement `build(now)` returning rows, with `now` read once the turn
    /// to write is ours, so that a wait in the writer queue is not taken from what it grants (nor
    /// does a time go in after a later one).
    pub(crate) async fn write_fetch_all_at<T: AnyRow, S: SqlxBinder>(
        &self,
        build: impl FnOnce(i64) -> S,
    ) -> Result<Vec<T>> {
        let _turn = self.turn().await;
        let stmt = build(orchestrator_types::now_millis());
        self.fetch_all(&stmt).await
    }

    /// The PostgreSQL pool, for the statements only PostgreSQL has (its snapshots, its activity).
    pub(crate) fn postgres(&self) -> Option<&PgPool> {
        match self {
            Pool::Postgres(pool) => Some(pool),
            Pool::Sqlite(..) => None,
        }
    }

    /// This process's turn to write, on SQLite; nothing to wait for on PostgreSQL, whose row locks
    /// put writers in line.
    async fn turn(&self) -> Option<WriterTurn> {
        match self {
            Pool::Sqlite(_, writer) => Some(writer.turn(Lane::Ordinary).await),
            Pool::Postgres(_) => None,
        }
    }
}

/// [`Tx::change_mark`] on SQLite, also right for a statement that is a transaction of its own.
pub(crate) fn sqlite_change_mark() -> sea_query::Expr {
    sea_query::Expr::cust(
        "1 + max(IFNULL((SELECT MAX(change_id) FROM tasks), 0), \
         IFNULL((SELECT MAX(change_id) FROM approvals), 0))",
    )
}

/// The notice to the claimers waiting on PostgreSQL (`LISTEN orchestrator_tasks`) that a task may
/// be ready; sent when its transaction commits.
pub(crate) const NOTIFY_TASKS: &str = "pg_notify('orchestrator_tasks', '')";

/// [`Tx::change_mark`] on PostgreSQL: the transaction's id, also right for a statement that is a
/// transaction of its own.
pub(crate) fn postgres_change_mark() -> sea_query::Expr {
    sea_query::Expr::cust("pg_current_xact_id()::text::bigint")
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
            sqlx::query(AssertSqlSafe(format!("SELECT {NOTIFY_TASKS}")))
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// The database this transaction is on.
    pub(crate) fn backend(&self) -> crate::Backend {
        match self {
            Tx::Sqlite(..) => crate::Backend::Sqlite,
            Tx::Postgres(_) => crate::Backend::Postgres,
        }
    }

    /// The `change_id` of a task row this transaction changes (see changes.rs), for an UPDATE to
    /// set itself: the row trigger that would set it otherwise costs a second UPDATE of each row
    /// on SQLite and a PL/pgSQL call per row on PostgreSQL (migration 0010 skips it when the
    /// statement moved the number). On SQLite the subqueries are uncorrelated, so SQLite reads
    /// them once per statement: every row of a batch gets the same number, one above the largest.
    pub(crate) fn change_mark(&self) -> sea_query::Expr {
        match self {
            Tx::Sqlite(..) => sqlite_change_mark(),
            Tx::Postgres(_) => postgres_change_mark(),
        }
    }

    pub(crate) async fn commit(self) -> Result<()> {
        match self {
            Tx::Sqlite(tx, _turn) => tx.commit().await?,
            Tx::Postgres(tx) => tx.commit().await?,
        }
        Ok(())
    }

    /// Ends the transaction without writing, before returning. A transaction merely dropped is
    /// rolled back later, when the driver next uses its connection: until then it keeps its locks
    /// (a task row a claim's `SKIP LOCKED` then passes over; on SQLite, the write lock).
    pub(crate) async fn rollback(self) -> Result<()> {
        match self {
            Tx::Sqlite(tx, _turn) => tx.rollback().await?,
            Tx::Postgres(tx) => tx.rollback().await?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{NextFire, SOURCE_CLI, Store, StoreOptions};
    use orchestrator_types::{AutomationSpec, AutomationStatus, GateSpec};
    use std::time::Duration;

    /// Runs `write` while a transaction of the writer queue holds SQLite's write lock for longer
    /// than the busy timeout: a write that waits its turn in the queue succeeds once the holder
    /// commits; one that went to the pool directly would be refused with SQLITE_BUSY.
    async fn behind_a_long_write<T>(
        store: &Store,
        what: &str,
        write: impl std::future::Future<Output = crate::Result<T>>,
    ) -> T {
        let holding = store.pool.begin().await.unwrap();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            holding.commit().await.unwrap();
        });
        let result = write.await;
        release.await.unwrap();
        result.unwrap_or_else(|e| panic!("{what} did not wait in the writer queue: {e}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_outside_transactions_wait_in_the_writer_queue() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            busy_timeout: Duration::from_millis(50),
            ..StoreOptions::default()
        };
        let store = Store::open_sqlite(&dir.path().join("o.db"), &options)
            .await
            .unwrap();
        let mut spec = AutomationSpec::new("nightly", "0 3 * * *");
        spec.workspaces.push("/tmp".into());
        spec.template.gates.push(GateSpec::from_command("true"));
        let next = NextFire::default();
        let s = &store;
        behind_a_long_write(s, "register_worker", s.register_worker("w", "h", 1, 2, &[])).await;
        behind_a_long_write(s, "worker_heartbeat", s.worker_heartbeat("w")).await;
        behind_a_long_write(s, "worker_stopped", s.worker_stopped("w")).await;
        let created = behind_a_long_write(
            s,
            "create_automation",
            s.create_automation(&spec, SOURCE_CLI, None, next),
        )
        .await;
        behind_a_long_write(
            s,
            "update_automation",
            s.update_automation("nightly", &spec, None, next),
        )
        .await;
        behind_a_long_write(
            s,
            "set_automation_status",
            s.set_automation_status("nightly", AutomationStatus::Paused, next, None),
        )
        .await;
        behind_a_long_write(
            s,
            "park_automation",
            s.park_automation(created.id, "parked"),
        )
        .await;
        behind_a_long_write(s, "delete_automation", s.delete_automation("nightly")).await;
    }
}
