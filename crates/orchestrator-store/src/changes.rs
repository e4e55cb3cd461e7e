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
//!   This is the horizon that transactional outboxes read up to. Its price is latency, never a
//!   miss: a stream tells nothing newer than the oldest transaction still open on the server
//!   (of any database there), so a transaction held open for a minute holds the lists back a
//!   minute, and they catch up when it ends.
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

#[derive(sqlx::FromRow)]
struct ChangedTask {
    #[sqlx(flatten)]
    row: TaskRow,
    change_id: i64,
}

#[derive(sqlx::FromRow)]
struct ChangedApproval {
    #[sqlx(flatten)]
    row: ApprovalRow,
    change_id: i64,
}

impl Store {
    /// Where "now" is in the order of changes: every change that commits from now on is after it.
    /// (On PostgreSQL a few that committed just before may be after it too.)
    pub async fn change_horizon(&self) -> Result<ChangeCursor> {
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
    pub async fn tasks_changed_after(
        &self,
        after: ChangeCursor,
        limit: u64,
    ) -> Result<Vec<(ChangeCursor, Task)>> {
        let mut stmt = select_tasks();
        stmt.column(Tasks::ChangeId);
        self.after(&mut stmt, Tasks::ChangeId, Tasks::Id, after, limit);
        let rows: Vec<ChangedTask> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter()
            .map(|r| {
                let task = Task::try_from(r.row)?;
                let at = ChangeCursor {
                    change: r.change_id,
                    id: task.id.0,
                };
                Ok((at, task))
            })
            .collect()
    }

    /// Approvals asked or decided (or expired, or closed) after `after`, as
    /// [`Store::tasks_changed_after`] finds tasks.
    pub async fn approvals_changed_after(
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
        rows.into_iter()
            .map(|r| {
                let approval = Approval::try_from(r.row)?;
                let at = ChangeCursor {
                    change: r.change_id,
                    id: approval.id,
                };
                Ok((at, approval))
            })
            .collect()
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
