//! The order in which changes to tasks and approvals commit: what the live lists follow, so that
//! a reader that walks it can miss no committed change.
//!
//! An update time cannot be that order. A writer whose clock is ahead stamps a time that every
//! other writer's later changes fall behind, and a transaction that stamps its time and commits
//! seconds later lands behind what a reader already walked past. So each row of `tasks` and
//! `approvals` carries `change_id`, its last change's place in an order that the database, not a
//! clock, gives (migration 0008 keeps it):
//!
//! - On SQLite one writer holds the database at a time, so a number one above the largest given
//!   (across both tables), taken by a trigger inside the writing transaction, grows in commit
//!   order: a reader at a position sees every later commit after it.
//! - On PostgreSQL transactions commit concurrently and no number drawn inside one (a sequence, a
//!   BIGSERIAL) is in commit order: a transaction that drew 10 may commit after one that drew 11,
//!   and a reader that went past 11 would never see 10. So a row carries the id of the transaction
//!   that last changed it (`pg_current_xact_id()`, set by a column default and a trigger), and a
//!   reader reads only the rows whose transaction is below the horizon of its own snapshot
//!   (`pg_snapshot_xmin(pg_current_snapshot())`, taken by the same statement): every transaction
//!   below it has ended, its rows visible to that snapshot, and no transaction that can still
//!   commit has an id below it. The rows below a horizon are thus final, except that a later
//!   change moves a row above it (where the reader finds it again, as it is then). Walking them
//!   in `(change_id, id)` order with a cursor, page by page, passes each committed change once.
//!   This is the horizon that transactional outboxes read up to. Its price would be latency: the
//!   horizon is the oldest transaction still open on the server (of any database there), so one
//!   held open for a minute (or a prepared transaction forgotten for good) holds it back. So a
//!   reader also reads *ahead* of it ([`Store::tasks_changed_ahead`]): the rows whose transaction
//!   committed although an older one is still open. Those are not in commit order, so a reader
//!   keeps, instead of a position, the transactions that had not ended when it last looked
//!   ([`AheadMark`]: the snapshot's `xmax` and its list of running ids), and next time reads only
//!   rows of those or of later transactions. A row read ahead is read again once the horizon
//!   passes it; readers tell it once (they remember what they told ahead). Who holds the horizon
//!   back is [`Store::oldest_open_transaction`], which the live lists log and `doctor` shows.
//!
//! What a change costs the writer: no extra row, statement, round trip or sync. The claim and the
//! completion, the queue's hot path, set the number in their own UPDATE (`Tx::change_mark`), once
//! per statement, and on SQLite a batch of new tasks carries it from its insert (read once in the
//! batch's transaction, migration 0021); every other write leaves it to a row trigger, which migration 0010 runs only
//! when the statement did not set the number itself. On PostgreSQL the trigger is a PL/pgSQL call
//! per row, about 10 µs of server time (PostgreSQL 15, single-row updates: 21 µs against 11 µs
//! without it); on SQLite it is a second update of the same row that finds the largest number
//! through the `(change_id, id)` index, about 2 µs. Either way each changed row adds one entry to
//! that index, which replaces the update time's index the old look-back read. On SQLite the rows
//! of one claim, completion or batch of new tasks share a number; readers walk `(change_id, id)`, so they are told in
//! id order, and a reader sees all of them or none, since they commit together. A heartbeat,
//! which moves only a lease's expiry, is not a change.

use crate::approvals::{Approval, ApprovalRow, Approvals};
use crate::tasks::{Task, TaskRow, Tasks, select_tasks};
use crate::{Backend, Result, Store};
use orchestrator_types::BoxFuture;
use sea_query::{Expr, ExprTrait, IntoIden, Order, Query, SelectStatement};

/// A place in the order of changes: after the change `change`, the row `id`. Positions compare
/// as the pair, which is the order the reader walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChangeCursor {
    /// The change: a transaction id on PostgreSQL, a number on SQLite.
    pub change: i64,
    /// The row within that change.
    pub id: i64,
}

impl ChangeCursor {
    /// Just before the change `change`, so all of it is read again: where a client that last got
    /// `change` resumes (the rest of it may come twice).
    pub fn before(change: i64) -> ChangeCursor {
        ChangeCursor { change, id: 0 }
    }
}

/// Where a reader ahead of the horizon left off (PostgreSQL): the transactions that had not ended
/// when it last looked. Empty at first: the first look reads every committed row at or above the
/// horizon.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AheadMark {
    seen: Option<(i64, Vec<i64>)>,
}

/// The oldest transaction open on the database server that holds the order of changes back.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OpenTransaction {
    /// The server process that holds it; `None` for a prepared transaction, which no process holds.
    pub pid: Option<i32>,
    /// How long it has been open, in milliseconds.
    pub age_ms: i64,
    /// `idle in transaction`, `active`, ... or `prepared`.
    pub state: String,
    pub database: Option<String>,
    /// A prepared transaction's name (`PREPARE TRANSACTION 'name'`).
    pub prepared: Option<String>,
}

impl std::fmt::Display for OpenTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.prepared, self.pid) {
            (Some(gid), _) => write!(f, "the prepared transaction {gid:?}")?,
            (None, Some(pid)) => write!(f, "the transaction of server process {pid}")?,
            (None, None) => write!(f, "a transaction")?,
        }
        write!(
            f,
            " ({}, open for {} s",
            self.state,
            Ord::max(self.age_ms, 0) / 1000
        )?;
        if let Some(db) = &self.database {
            write!(f, ", database {db}")?;
        }
        write!(f, ")")
    }
}

struct ChangedTask {
    row: TaskRow,
    change_id: i64,
}

from_row!(ChangedTask { change_id } flatten { row });

struct ChangedApproval {
    row: ApprovalRow,
    change_id: i64,
}

from_row!(ChangedApproval { change_id } flatten { row });

impl ChangedTask {
    /// The task and its place in the order of changes.
    fn positioned(self) -> Result<(ChangeCursor, Task)> {
        let task = Task::try_from(self.row)?;
        let at = ChangeCursor {
            change: self.change_id,
            id: task.id.0,
        };
        Ok((at, task))
    }
}

impl ChangedApproval {
    /// The approval and its place in the order of changes.
    fn positioned(self) -> Result<(ChangeCursor, Approval)> {
        let approval = Approval::try_from(self.row)?;
        let at = ChangeCursor {
            change: self.change_id,
            id: approval.id,
        };
        Ok((at, approval))
    }
}

impl Store {
    /// Where "now" is in the order of changes: every change that commits from now on is after it.
    /// (On PostgreSQL a few that committed just before may be after it too.)
    pub fn change_horizon<'a>(&'a self) -> BoxFuture<'a, Result<ChangeCursor>> {
        Box::pin(self.change_horizon_unboxed())
    }

    async fn change_horizon_unboxed(&self) -> Result<ChangeCursor> {
        let (stmt, id) = match self.backend() {
            Backend::Sqlite => (
                "max(IFNULL((SELECT MAX(change_id) FROM tasks), 0), \
                 IFNULL((SELECT MAX(change_id) FROM approvals), 0))",
                i64::MAX,
            ),
            Backend::Postgres => ("pg_snapshot_xmin(pg_current_snapshot())::text::bigint", 0),
        };
        let probe = Query::select().expr(Expr::cust(stmt)).to_owned();
        let (change,): (i64,) = self.pool.fetch_optional(&probe).await?.unwrap_or((0,));
        Ok(ChangeCursor { change, id })
    }

    /// Tasks whose last change is after `after` and has committed, in the order of changes, at
    /// most `limit`, each with its position: what the live lists follow, a page at a time. A task
    /// changed again since is found once, as it is now, at its latest change.
    pub fn tasks_changed_after<'a>(
        &'a self,
        after: ChangeCursor,
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<(ChangeCursor, Task)>>> {
        Box::pin(self.tasks_changed_after_unboxed(after, limit))
    }

    async fn tasks_changed_after_unboxed(
        &self,
        after: ChangeCursor,
        limit: u64,
    ) -> Result<Vec<(ChangeCursor, Task)>> {
        let mut stmt = select_tasks();
        stmt.column(Tasks::ChangeId);
        self.after(&mut stmt, Tasks::ChangeId, Tasks::Id, after, limit);
        let rows: Vec<ChangedTask> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter().map(ChangedTask::positioned).collect()
    }

    /// Approvals asked or decided (or expired, or closed) after `after`, as
    /// [`Store::tasks_changed_after`] finds tasks.
    pub fn approvals_changed_after<'a>(
        &'a self,
        after: ChangeCursor,
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<(ChangeCursor, Approval)>>> {
        Box::pin(self.approvals_changed_after_unboxed(after, limit))
    }

    async fn approvals_changed_after_unboxed(
        &self,
        after: ChangeCursor,
        limit: u64,
    ) -> Result<Vec<(ChangeCursor, Approval)>> {
        let mut stmt = Query::select()
            .columns(crate::approvals::COLUMNS)
            .column(Approvals::ChangeId)
            .from(Approvals::Table)
            .to_owned();
        self.after(&mut stmt, Approvals::ChangeId, Approvals::Id, after, limit);
        let rows: Vec<ChangedApproval> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter().map(ChangedApproval::positioned).collect()
    }

    /// Tasks whose change committed at or above the horizon, which [`Store::tasks_changed_after`]
    /// does not tell yet: those of transactions that had not ended when `mark` was taken, or
    /// began after, as they are now. Moves `mark` to now. Always empty on SQLite, whose order
    /// has no horizon. A task may come again (the next look may read what committed while this
    /// one read), and once more from `tasks_changed_after` when the horizon passes it.
    pub fn tasks_changed_ahead<'a>(
        &'a self,
        mark: &'a mut AheadMark,
    ) -> BoxFuture<'a, Result<Vec<(ChangeCursor, Task)>>> {
        Box::pin(self.tasks_changed_ahead_unboxed(mark))
    }

    async fn tasks_changed_ahead_unboxed(
        &self,
        mark: &mut AheadMark,
    ) -> Result<Vec<(ChangeCursor, Task)>> {
        let mut stmt = select_tasks();
        stmt.column(Tasks::ChangeId);
        let Some(next) = self
            .ahead(&mut stmt, Tasks::ChangeId, Tasks::Id, mark)
            .await?
        else {
            return Ok(Vec::new());
        };
        let rows: Vec<ChangedTask> = self.pool.fetch_all(&stmt).await?;
        *mark = next;
        rows.into_iter().map(ChangedTask::positioned).collect()
    }

    /// Approvals changed ahead of the horizon, as [`Store::tasks_changed_ahead`] finds tasks.
    pub fn approvals_changed_ahead<'a>(
        &'a self,
        mark: &'a mut AheadMark,
    ) -> BoxFuture<'a, Result<Vec<(ChangeCursor, Approval)>>> {
        Box::pin(self.approvals_changed_ahead_unboxed(mark))
    }

    async fn approvals_changed_ahead_unboxed(
        &self,
        mark: &mut AheadMark,
    ) -> Result<Vec<(ChangeCursor, Approval)>> {
        let mut stmt = Query::select()
            .columns(crate::approvals::COLUMNS)
            .column(Approvals::ChangeId)
            .from(Approvals::Table)
            .to_owned();
        let Some(next) = self
            .ahead(&mut stmt, Approvals::ChangeId, Approvals::Id, mark)
            .await?
        else {
            return Ok(Vec::new());
        };
        let rows: Vec<ChangedApproval> = self.pool.fetch_all(&stmt).await?;
        *mark = next;
        rows.into_iter().map(ChangedApproval::positioned).collect()
    }

    /// Narrows `stmt` to rows changed at or above the horizon by transactions `mark` did not see
    /// end, and returns the mark to keep once they are read; `None` on SQLite.
    async fn ahead(
        &self,
        stmt: &mut SelectStatement,
        change: impl IntoIden + Copy + 'static,
        id: impl IntoIden + Copy + 'static,
        mark: &AheadMark,
    ) -> Result<Option<AheadMark>> {
        let Some(pool) = self.pool.postgres() else {
            return Ok(None);
        };
        // Taken before the rows are read: whatever had not ended by now is read next time, and
        // what ends between the two statements may be read twice, never missed.
        let (xmax, running): (i64, String) = sqlx::query_as(
            "SELECT pg_snapshot_xmax(s)::text::bigint, \
                    COALESCE((SELECT string_agg(x::text, ',') FROM pg_snapshot_xip(s) x), '') \
             FROM pg_current_snapshot() s",
        )
        .fetch_one(pool)
        .await?;
        let running: Vec<i64> = running.split(',').filter_map(|x| x.parse().ok()).collect();
        stmt.and_where(Expr::col(change).gte(Expr::cust(
            "pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
        )));
        if let Some((seen_xmax, seen_running)) = &mark.seen {
            stmt.cond_where(
                sea_query::Cond::any()
                    .add(Expr::col(change).gte(*seen_xmax))
                    .add(Expr::col(change).is_in(seen_running.iter().copied())),
            );
        }
        stmt.order_by(change, Order::Asc).order_by(id, Order::Asc);
        Ok(Some(AheadMark {
            seen: Some((xmax, running)),
        }))
    }

    /// The oldest transaction open on the PostgreSQL server that holds the order of changes back
    /// (one that has written, or a prepared one), other than this process's own statement; `None`
    /// when there is none, and on SQLite.
    pub fn oldest_open_transaction<'a>(&'a self) -> BoxFuture<'a, Result<Option<OpenTransaction>>> {
        Box::pin(self.oldest_open_transaction_unboxed())
    }

    async fn oldest_open_transaction_unboxed(&self) -> Result<Option<OpenTransaction>> {
        Ok(self.open_transactions(1).await?.into_iter().next())
    }

    /// The transactions open on the PostgreSQL server that hold the order of changes back, oldest
    /// first, at most `limit`; empty on SQLite.
    pub fn open_transactions<'a>(
        &'a self,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<OpenTransaction>>> {
        Box::pin(self.open_transactions_unboxed(limit))
    }

    async fn open_transactions_unboxed(&self, limit: i64) -> Result<Vec<OpenTransaction>> {
        let Some(pool) = self.pool.postgres() else {
            return Ok(Vec::new());
        };
        /// pid, age in ms, state, database, prepared name.
        type Row = (Option<i32>, i64, String, Option<String>, Option<String>);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT * FROM ( \
                   SELECT pid, (extract(epoch FROM now() - xact_start) * 1000)::bigint AS age, \
                          COALESCE(state, 'unknown') AS state, datname::text AS db, \
                          NULL::text AS gid \
                   FROM pg_stat_activity \
                   WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() \
                   UNION ALL \
                   SELECT NULL, (extract(epoch FROM now() - prepared) * 1000)::bigint, \
                          'prepared', database::text, gid \
                   FROM pg_prepared_xacts \
                 ) t ORDER BY age DESC NULLS LAST LIMIT $1",
        )
        .bind(limit)
        .fetch_all(pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(pid, age_ms, state, database, prepared)| OpenTransaction {
                pid,
                age_ms,
                state,
                database,
                prepared,
            })
            .collect())
    }

    /// Narrows `stmt` to the committed changes after `after`, in order, at most `limit`.
    fn after(
        &self,
        stmt: &mut SelectStatement,
        change: impl IntoIden + Copy + 'static,
        id: impl IntoIden + Copy + 'static,
        after: ChangeCursor,
        limit: u64,
    ) {
        stmt.and_where(
            Expr::tuple([Expr::col(change), Expr::col(id)])
                .gt(Expr::tuple([Expr::val(after.change), Expr::val(after.id)])),
        );
        if self.backend() == Backend::Postgres {
            // The horizon of this statement's own snapshot: a later one could name transactions
            // that committed after this snapshot was taken, whose rows it does not see.
            stmt.and_where(Expr::col(change).lt(Expr::cust(
                "pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
            )));
        }
        stmt.order_by(change, Order::Asc)
            .order_by(id, Order::Asc)
            .limit(Ord::max(limit, 1));
    }
}
