//! Tasks that later deliveries join instead of making their own, and how many were made: one
//! review with twelve inline comments is thirteen deliveries and one round on the pull request,
//! and a pull request's rounds are counted so that a rule can stop making them.
//!
//! A task names a key (`NewTask::join`); `task_joins` holds the last task made under each key and
//! how many were made since a person last asked again. A key `JOIN|KIND` joins under `JOIN` and
//! counts under itself, so tasks of several kinds (review rounds, check rounds) share one waiting
//! task and are counted apart. The delivery's completion joins or inserts in its own transaction.

use crate::exec::Tx;
use crate::{Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{NewTask, TaskId, now_millis};
use sea_query::{Expr, ExprTrait, Func, Iden, OnConflict, Query};

impl Store {
    /// The task that takes deliveries under `key` now (the last made under its join key, while
    /// it has not started), and how many tasks were made under `key` since
    /// [`Store::reset_rounds`]. A key `JOIN|KIND` joins under `JOIN` and counts under itself, so
    /// tasks of several kinds share one waiting task and are counted apart.
    pub fn join_state<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(Option<TaskId>, i64)>> {
        Box::pin(self.join_state_unboxed(key))
    }

    async fn join_state_unboxed(&self, key: &str) -> Result<(Option<TaskId>, i64)> {
        let mut tx = self.pool.begin().await?;
        let waiting = joinable(&mut tx, join_part(key)).await?;
        let count = Query::select()
            .column(TaskJoins::Rounds)
            .from(TaskJoins::Table)
            .and_where(Expr::col(TaskJoins::JoinKey).eq(key))
            .to_owned();
        let rounds: Option<(i64,)> = tx.fetch_optional(&count).await?;
        tx.commit().await?;
        Ok((waiting, rounds.map_or(0, |(n,)| n)))
    }

    /// Starts the counts of tasks made under each of `keys` again (a person asked for more).
    pub fn reset_rounds<'a>(&'a self, keys: &'a [&'a str]) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.reset_rounds_unboxed(keys))
    }

    async fn reset_rounds_unboxed(&self, keys: &[&str]) -> Result<()> {
        let stmt = Query::update()
            .table(TaskJoins::Table)
            .value(TaskJoins::Rounds, 0)
            .value(TaskJoins::UpdatedAt, now_millis())
            .and_where(Expr::col(TaskJoins::JoinKey).is_in(keys.iter().copied()))
            .to_owned();
        self.pool.execute(&stmt).await?;
        Ok(())
    }
}

#[derive(Iden, Clone, Copy)]
enum TaskJoins {
    Table,
    JoinKey,
    TaskId,
    Rounds,
    UpdatedAt,
}

/// The task that takes deliveries under the join key `key` now: the last made under it, while it
/// has not started.
async fn joinable(tx: &mut Tx, key: &str) -> Result<Option<TaskId>> {
    let last = Query::select()
        .column(TaskJoins::TaskId)
        .from(TaskJoins::Table)
        .and_where(Expr::col(TaskJoins::JoinKey).eq(key))
        .to_owned();
    let Some((task,)): Option<(i64,)> = tx.fetch_optional(&last).await? else {
        return Ok(None);
    };
    let waiting = Query::select()
        .column(crate::tasks::Tasks::Id)
        .from(crate::tasks::Tasks::Table)
        .and_where(Expr::col(crate::tasks::Tasks::Id).eq(task))
        .and_where(crate::tasks::state_is(
            orchestrator_types::TaskState::Queued,
        ))
        .and_where(Expr::col(crate::tasks::Tasks::Attempt).eq(0))
        .to_owned();
    let found: Option<(i64,)> = tx.fetch_optional(&waiting).await?;
    Ok(found.map(|(id,)| TaskId(id)))
}

/// The task `task` joins (its key's task that has not started), or `task` made now and recorded
/// as its key's task; `None` when its key already made `join_limit` tasks. On PostgreSQL the key
/// is locked first, so that two deliveries committing at once cannot both make a task or both
/// pass the limit (SQLite's write transactions are one at a time already).
pub(crate) async fn join_or_insert(
    tx: &mut Tx,
    task: &NewTask,
    now: i64,
    placement: Option<&orchestrator_types::Placement>,
) -> Result<Option<TaskId>> {
    let Some(key) = task.join.as_deref() else {
        return crate::tasks::insert_task(tx, task, now, placement)
            .await
            .map(Some);
    };
    if let Tx::Postgres(_) = tx {
        let lock = Query::select()
            .expr(
                Func::cust("pg_advisory_xact_lock").arg(Func::cust("hashtextextended").args([
                    Expr::val(format!("task_joins:{}", join_part(key))),
                    Expr::val(0),
                ])),
            )
            .to_owned();
        tx.execute(&lock).await?;
    }
    if let Some(id) = joinable(tx, join_part(key)).await? {
        return Ok(Some(id));
    }
    if let Some(limit) = task.join_limit {
        let made = Query::select()
            .column(TaskJoins::Rounds)
            .from(TaskJoins::Table)
            .and_where(Expr::col(TaskJoins::JoinKey).eq(key))
            .to_owned();
        let made: Option<(i64,)> = tx.fetch_optional(&made).await?;
        if made.is_some_and(|(n,)| n >= i64::from(limit)) {
            return Ok(None);
        }
    }
    let id = crate::tasks::insert_task(tx, task, now, placement).await?;
    record_join(tx, join_part(key), id, now).await?;
    if join_part(key) != key {
        record_join(tx, key, id, now).await?;
    }
    Ok(Some(id))
}

/// The join key of `key` (`JOIN|KIND` joins under `JOIN`).
fn join_part(key: &str) -> &str {
    key.split_once('|').map_or(key, |(join, _)| join)
}

/// Records `id` as the last task made under `key`, one more in its count.
async fn record_join(tx: &mut Tx, key: &str, id: TaskId, now: i64) -> Result<()> {
    let record = Query::insert()
        .into_table(TaskJoins::Table)
        .columns([
            TaskJoins::JoinKey,
            TaskJoins::TaskId,
            TaskJoins::Rounds,
            TaskJoins::UpdatedAt,
        ])
        .values_panic([key.into(), id.0.into(), 1.into(), now.into()])
        .on_conflict(
            OnConflict::column(TaskJoins::JoinKey)
                .update_columns([TaskJoins::TaskId, TaskJoins::UpdatedAt])
                .value(
                    TaskJoins::Rounds,
                    Expr::col((TaskJoins::Table, TaskJoins::Rounds)).add(1),
                )
                .to_owned(),
        )
        .to_owned();
    tx.execute(&record).await?;
    Ok(())
}
