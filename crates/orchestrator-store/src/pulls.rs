//! The tasks that worked on one pull request, listed together: the task that opened it and each
//! round made to work on it since (a review, a failing check, a person's `task create --pull`).
//!
//! A task that names a pull request is recorded with it, in the transaction that makes the task; the
//! task that opened the pull request is recorded when a round first finds it (the pull request's
//! body names the attempt that opened it). Rows are keyed `owner/name#number`, the repository in
//! lower case, as GitHub compares names.

use crate::exec::Tx;
use crate::tasks::{TaskRow, Tasks, select_tasks};
use crate::{Result, Store, Task};
use orchestrator_types::BoxFuture;
use orchestrator_types::{PullTarget, TaskId, now_millis};
use sea_query::{Expr, ExprTrait, Iden, OnConflict, Order, Query};

/// What a task did on the pull request.
pub mod pull_role {
    /// It opened the pull request.
    pub const OPENED: &str = "opened";
    /// It was made to work on the pull request (a round).
    pub const ROUND: &str = "round";
}

#[derive(Iden, Clone, Copy)]
enum PullTasks {
    Table,
    Pull,
    TaskId,
    Role,
    RecordedAt,
}

/// The key a pull request's tasks are recorded under.
pub fn pull_key(repo: &str, number: u64) -> String {
    format!("{}#{number}", repo.to_ascii_lowercase())
}

/// One task on a pull request, with what it did there.
#[derive(Debug, Clone)]
pub struct PullTask {
    pub role: String,
    pub task: Task,
}

/// One pull request's tasks, oldest first.
#[derive(Debug, Clone)]
pub struct PullChain {
    /// `owner/name#number`, the repository in lower case.
    pub pull: String,
    pub tasks: Vec<PullTask>,
}

impl PullChain {
    /// Each task with what it was on the pull request, in words: "opened it", "round 1", ...
    pub fn steps(&self) -> Vec<(String, &PullTask)> {
        let mut round = 0;
        self.tasks
            .iter()
            .map(|t| {
                let what = if t.role == pull_role::OPENED {
                    "opened it".to_owned()
                } else {
                    round += 1;
                    format!("round {round}")
                };
                (what, t)
            })
            .collect()
    }
}

/// Records each task that names a pull request as one of its rounds.
pub(crate) async fn record_rounds(
    tx: &mut Tx,
    made: &[(TaskId, &PullTarget)],
    now: i64,
) -> Result<()> {
    for (task, pull) in made {
        record(
            tx,
            &pull_key(&pull.repo, pull.number),
            *task,
            pull_role::ROUND,
            now,
        )
        .await?;
    }
    Ok(())
}

async fn record(tx: &mut Tx, pull: &str, task: TaskId, role: &str, now: i64) -> Result<()> {
    let stmt = Query::insert()
        .into_table(PullTasks::Table)
        .columns([
            PullTasks::Pull,
            PullTasks::TaskId,
            PullTasks::Role,
            PullTasks::RecordedAt,
        ])
        .values_panic([pull.into(), task.0.into(), role.into(), now.into()])
        .on_conflict(
            OnConflict::columns([PullTasks::Pull, PullTasks::TaskId])
                .do_nothing()
                .to_owned(),
        )
        .to_owned();
    tx.execute(&stmt).await?;
    Ok(())
}

impl Store {
    /// Records `task` as the one that opened the pull request `repo#number` (once; again is a
    /// no-op).
    pub fn record_pull_opener<'a>(
        &'a self,
        repo: &'a str,
        number: u64,
        task: TaskId,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.record_pull_opener_unboxed(repo, number, task))
    }

    async fn record_pull_opener_unboxed(
        &self,
        repo: &str,
        number: u64,
        task: TaskId,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        record(
            &mut tx,
            &pull_key(repo, number),
            task,
            pull_role::OPENED,
            now_millis(),
        )
        .await?;
        tx.commit().await
    }

    /// The tasks recorded on the pull request `repo#number`, oldest first.
    pub fn pull_tasks<'a>(
        &'a self,
        repo: &'a str,
        number: u64,
    ) -> BoxFuture<'a, Result<Vec<PullTask>>> {
        Box::pin(self.pull_tasks_unboxed(repo, number))
    }

    async fn pull_tasks_unboxed(&self, repo: &str, number: u64) -> Result<Vec<PullTask>> {
        self.tasks_under(&pull_key(repo, number)).await
    }

    /// Each pull request `task` is recorded on, with all the tasks recorded on it: the task's
    /// chain of rounds.
    pub fn pull_chains<'a>(&'a self, task: TaskId) -> BoxFuture<'a, Result<Vec<PullChain>>> {
        Box::pin(self.pull_chains_unboxed(task))
    }

    async fn pull_chains_unboxed(&self, task: TaskId) -> Result<Vec<PullChain>> {
        let mut chains = Vec::new();
        for pull in self.pulls_of_task(task).await? {
            let tasks = self.tasks_under(&pull).await?;
            chains.push(PullChain { pull, tasks });
        }
        Ok(chains)
    }

    async fn tasks_under(&self, key: &str) -> Result<Vec<PullTask>> {
        let roles = Query::select()
            .columns([PullTasks::TaskId, PullTasks::Role])
            .from(PullTasks::Table)
            .and_where(Expr::col(PullTasks::Pull).eq(key))
            .order_by(PullTasks::TaskId, Order::Asc)
            .limit(1000)
            .to_owned();
        let roles: Vec<(i64, String)> = self.pool.fetch_all(&roles).await?;
        if roles.is_empty() {
            return Ok(Vec::new());
        }
        let tasks = select_tasks()
            .and_where(Expr::col(Tasks::Id).is_in(roles.iter().map(|(id, _)| *id)))
            .order_by(Tasks::Id, Order::Asc)
            .to_owned();
        let rows: Vec<TaskRow> = self.pool.fetch_all(&tasks).await?;
        let mut found = Vec::with_capacity(rows.len());
        for row in rows {
            let task = Task::try_from(row)?;
            let role = roles
                .iter()
                .find(|(id, _)| *id == task.id.0)
                .map_or_else(String::new, |(_, role)| role.clone());
            found.push(PullTask { role, task });
        }
        Ok(found)
    }

    /// The pull requests `task` is recorded on (`owner/name#number`, the repository in lower
    /// case).
    pub fn pulls_of_task<'a>(&'a self, task: TaskId) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(self.pulls_of_task_unboxed(task))
    }

    async fn pulls_of_task_unboxed(&self, task: TaskId) -> Result<Vec<String>> {
        let stmt = Query::select()
            .column(PullTasks::Pull)
            .from(PullTasks::Table)
            .and_where(Expr::col(PullTasks::TaskId).eq(task.0))
            .order_by(PullTasks::Pull, Order::Asc)
            .to_owned();
        let rows: Vec<(String,)> = self.pool.fetch_all(&stmt).await?;
        Ok(rows.into_iter().map(|(pull,)| pull).collect())
    }
}
