//! Concurrency keys: at most `max_running` tasks of one key (a repository, an automation, a
//! trigger rule, one issue) run at once, whichever daemons run them.
//!
//! An attempt of a task with a key takes a turn ([`Store::take_flow_turn`]) before it does
//! anything else; without one it hands the task back to the queue, saying which tasks hold the
//! key. A turn is a row of `flow_slots` naming the task and the epoch of its attempt, and it counts
//! while that task is running at that epoch: a turn ends with its attempt (finished, handed back,
//! waiting on a person, rescued after its daemon died) without a write of its own.
//!
//! The decision is made in one transaction that holds the key (an advisory lock on PostgreSQL,
//! taken before the count is read; SQLite's write transactions are one at a time), so two daemons
//! cannot both take the last turn.

use crate::exec::Tx;
use crate::tasks::Tasks;
use crate::{Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{TaskId, TaskState, now_millis};
use sea_query::{Expr, ExprTrait, Func, Iden, OnConflict, Order, Query};

#[derive(Iden, Clone, Copy)]
enum FlowSlots {
    Table,
    FlowKey,
    TaskId,
    Epoch,
    TakenAt,
}

/// The answer to [`Store::take_flow_turn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowTurn {
    /// The attempt may run.
    Granted,
    /// The key's turns are all taken, by these running tasks.
    Busy { running: Vec<TaskId> },
}

/// What a queued task with a key waits for: the key, its limit and the tasks that hold it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FlowWait {
    pub key: String,
    pub max_running: u32,
    pub running: Vec<TaskId>,
}

impl FlowWait {
    /// "waiting for its turn: at most 1 task of issue acme/widgets#7 runs at a time (task 12 runs)"
    pub fn describe(&self) -> String {
        let tasks: Vec<String> = self.running.iter().map(|t| t.0.to_string()).collect();
        format!(
            "waiting for its turn: at most {} task{} of {} run{} at a time ({} {} running)",
            self.max_running,
            if self.max_running == 1 { "" } else { "s" },
            self.key,
            if self.max_running == 1 { "s" } else { "" },
            if tasks.len() == 1 { "task" } else { "tasks" },
            tasks.join(", "),
        )
    }
}

/// The tasks holding a turn of `key` now, other than `except`.
async fn holders(tx: &mut Tx, key: &str, except: TaskId) -> Result<Vec<TaskId>> {
    let rows: Vec<(i64,)> = tx.fetch_all(&holders_of(key, except)).await?;
    Ok(rows.into_iter().map(|(id,)| TaskId(id)).collect())
}

fn holders_of(key: &str, except: TaskId) -> sea_query::SelectStatement {
    Query::select()
        .column((FlowSlots::Table, FlowSlots::TaskId))
        .from(FlowSlots::Table)
        .inner_join(Tasks::Table, turn_of_its_attempt())
        .and_where(Expr::col((FlowSlots::Table, FlowSlots::FlowKey)).eq(key))
        .and_where(Expr::col((FlowSlots::Table, FlowSlots::TaskId)).ne(except.0))
        .and_where(crate::tasks::state_is(TaskState::Running))
        .order_by((FlowSlots::Table, FlowSlots::TaskId), Order::Asc)
        .to_owned()
}

/// A turn row's task at the epoch the turn was taken: the attempt that holds it.
fn turn_of_its_attempt() -> Expr {
    Expr::col((Tasks::Table, Tasks::Id))
        .equals((FlowSlots::Table, FlowSlots::TaskId))
        .and(Expr::col((Tasks::Table, Tasks::Epoch)).equals((FlowSlots::Table, FlowSlots::Epoch)))
}

/// Holds `key` until the transaction ends (PostgreSQL).
async fn lock_key(tx: &mut Tx, key: &str) -> Result<()> {
    if let Tx::Postgres(_) = tx {
        let lock = Query::select()
            .expr(
                Func::cust("pg_advisory_xact_lock").arg(
                    Func::cust("hashtextextended")
                        .args([Expr::val(format!("flow_slots:{key}")), Expr::val(0)]),
                ),
            )
            .to_owned();
        tx.execute(&lock).await?;
    }
    Ok(())
}

impl Store {
    /// Takes a turn of `key` for the attempt of `task` at `epoch`, if fewer than `max_running`
    /// other tasks hold one.
    pub fn take_flow_turn<'a>(
        &'a self,
        key: &'a str,
        max_running: u32,
        task: TaskId,
        epoch: i64,
    ) -> BoxFuture<'a, Result<FlowTurn>> {
        Box::pin(self.take_flow_turn_unboxed(key, max_running, task, epoch))
    }

    async fn take_flow_turn_unboxed(
        &self,
        key: &str,
        max_running: u32,
        task: TaskId,
        epoch: i64,
    ) -> Result<FlowTurn> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        lock_key(&mut tx, key).await?;
        let running = holders(&mut tx, key, task).await?;
        if running.len() >= max_running as usize {
            tx.commit().await?;
            return Ok(FlowTurn::Busy { running });
        }
        // The key's rows whose attempts ended hold nothing: dropped here, where the key is held.
        let ended = Query::delete()
            .from_table(FlowSlots::Table)
            .and_where(Expr::col(FlowSlots::FlowKey).eq(key))
            .and_where(
                Expr::col(FlowSlots::TaskId).is_not_in(running.iter().map(|t| t.0).chain([task.0])),
            )
            .to_owned();
        tx.execute(&ended).await?;
        let take = Query::insert()
            .into_table(FlowSlots::Table)
            .columns([
                FlowSlots::FlowKey,
                FlowSlots::TaskId,
                FlowSlots::Epoch,
                FlowSlots::TakenAt,
            ])
            .values_panic([key.into(), task.0.into(), epoch.into(), now.into()])
            .on_conflict(
                OnConflict::columns([FlowSlots::FlowKey, FlowSlots::TaskId])
                    .update_columns([FlowSlots::Epoch, FlowSlots::TakenAt])
                    .to_owned(),
            )
            .to_owned();
        tx.execute(&take).await?;
        tx.commit().await?;
        Ok(FlowTurn::Granted)
    }

    /// What a queued task with a key waits for, when its key's turns are all taken.
    pub fn flow_wait_of<'a>(
        &'a self,
        task: TaskId,
        key: &'a str,
        max_running: u32,
    ) -> BoxFuture<'a, Result<Option<FlowWait>>> {
        Box::pin(self.flow_wait_of_unboxed(task, key, max_running))
    }

    async fn flow_wait_of_unboxed(
        &self,
        task: TaskId,
        key: &str,
        max_running: u32,
    ) -> Result<Option<FlowWait>> {
        let rows: Vec<(i64,)> = self.pool.fetch_all(&holders_of(key, task)).await?;
        let running: Vec<TaskId> = rows.into_iter().map(|(id,)| TaskId(id)).collect();
        Ok((running.len() >= max_running as usize).then(|| FlowWait {
            key: key.to_owned(),
            max_running,
            running,
        }))
    }

    /// Each concurrency key with tasks running in its turns now, and how many, by key.
    pub fn flow_keys<'a>(&'a self) -> BoxFuture<'a, Result<Vec<(String, i64)>>> {
        Box::pin(self.flow_keys_unboxed())
    }

    async fn flow_keys_unboxed(&self) -> Result<Vec<(String, i64)>> {
        let stmt = Query::select()
            .column((FlowSlots::Table, FlowSlots::FlowKey))
            .expr(Func::count(Expr::col((
                FlowSlots::Table,
                FlowSlots::TaskId,
            ))))
            .from(FlowSlots::Table)
            .inner_join(
                Tasks::Table,
                Expr::col((Tasks::Table, Tasks::Id))
                    .equals((FlowSlots::Table, FlowSlots::TaskId))
                    .and(
                        Expr::col((Tasks::Table, Tasks::Epoch))
                            .equals((FlowSlots::Table, FlowSlots::Epoch)),
                    ),
            )
            .and_where(crate::tasks::state_is(TaskState::Running))
            .group_by_col((FlowSlots::Table, FlowSlots::FlowKey))
            .order_by((FlowSlots::Table, FlowSlots::FlowKey), Order::Asc)
            .to_owned();
        self.pool.fetch_all(&stmt).await
    }
}
