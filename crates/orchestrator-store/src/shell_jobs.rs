//! The `shell_jobs` table: background commands an agent started with `task_shell_start`.
//!
//! A job is a row before its process starts and gets its end (exit code, log artifact) when it
//! finishes. A row still `running` whose worker is gone is read as `stale`: its outcome is unknown,
//! and the agent is told so instead of the job silently vanishing.

use crate::artifacts::{ArtifactInsert, compress, insert_artifact};
use crate::leases::Lease;
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{ArtifactId, Captured, TaskId, now_millis};
use sea_query::{Expr, ExprTrait, Iden, Order, Query};
use serde::Serialize;

#[derive(Iden, Clone, Copy)]
enum ShellJobs {
    Table,
    Id,
    TaskId,
    Command,
    Cwd,
    Status,
    ExitCode,
    WorkerId,
    Epoch,
    LogArtifactId,
    Summary,
    StartedAt,
    FinishedAt,
}

/// Job states.
pub mod job_status {
    pub const RUNNING: &str = "running";
    pub const EXITED: &str = "exited";
    pub const KILLED: &str = "killed";
    pub const TIMED_OUT: &str = "timed_out";
    /// The worker that ran it stopped before it finished; the outcome is unknown.
    pub const STALE: &str = "stale";
}

/// A shell job as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShellJob {
    pub id: i64,
    pub task_id: i64,
    pub command: String,
    pub cwd: String,
    pub status: String,
    pub exit_code: Option<i64>,
    pub worker_id: String,
    pub epoch: i64,
    pub log_artifact_id: Option<i64>,
    pub summary: Option<String>,
    pub started_at: i64,
    pub finished_at: Option<i64>,
}

from_row!(ShellJob {
    id,
    task_id,
    command,
    cwd,
    status,
    exit_code,
    worker_id,
    epoch,
    log_artifact_id,
    summary,
    started_at,
    finished_at
});

const COLUMNS: [ShellJobs; 12] = [
    ShellJobs::Id,
    ShellJobs::TaskId,
    ShellJobs::Command,
    ShellJobs::Cwd,
    ShellJobs::Status,
    ShellJobs::ExitCode,
    ShellJobs::WorkerId,
    ShellJobs::Epoch,
    ShellJobs::LogArtifactId,
    ShellJobs::Summary,
    ShellJobs::StartedAt,
    ShellJobs::FinishedAt,
];

/// Marks the running jobs of `tasks` stale, in the transaction that takes the tasks from a
/// worker that stopped (see `live_logs::end_abandoned`).
pub(crate) async fn stale_of(tx: &mut crate::exec::Tx, tasks: &[i64], now: i64) -> Result<()> {
    let stmt = Query::update()
        .table(ShellJobs::Table)
        .value(ShellJobs::Status, job_status::STALE)
        .value(ShellJobs::FinishedAt, now)
        .and_where(Expr::col(ShellJobs::TaskId).is_in(tasks.iter().copied()))
        .and_where(Expr::col(ShellJobs::Status).eq(job_status::RUNNING))
        .to_owned();
    tx.execute(&stmt).await?;
    Ok(())
}

impl Store {
    /// Records a job about to start for the attempt of `lease`.
    pub fn shell_job_started<'a>(
        &'a self,
        lease: &'a Lease,
        worker_id: &'a str,
        command: &'a str,
        cwd: &'a str,
    ) -> BoxFuture<'a, Result<i64>> {
        Box::pin(self.shell_job_started_unboxed(lease, worker_id, command, cwd))
    }

    async fn shell_job_started_unboxed(
        &self,
        lease: &Lease,
        worker_id: &str,
        command: &str,
        cwd: &str,
    ) -> Result<i64> {
        let stmt = Query::insert()
            .into_table(ShellJobs::Table)
            .columns([
                ShellJobs::TaskId,
                ShellJobs::Command,
                ShellJobs::Cwd,
                ShellJobs::Status,
                ShellJobs::WorkerId,
                ShellJobs::Epoch,
                ShellJobs::StartedAt,
            ])
            .values([
                lease.task_id.0.into(),
                command.into(),
                cwd.into(),
                job_status::RUNNING.into(),
                worker_id.into(),
                lease.epoch.into(),
                now_millis().into(),
            ])?
            .returning_col(ShellJobs::Id)
            .to_owned();
        let mut tx = self.pool.begin().await?;
        // A worker that lost its lease may not start work in the task's name.
        crate::leases::check_lease(&mut tx, lease, now_millis()).await?;
        let (id,): (i64,) = tx
            .fetch_optional(&stmt)
            .await?
            .ok_or_else(|| Error::Migration("shell job insert returned no id".into()))?;
        tx.commit().await?;
        Ok(id)
    }

    /// Records a job's end with its output as an artifact.
    pub fn shell_job_finished<'a>(
        &'a self,
        id: i64,
        task: TaskId,
        status: &'a str,
        exit_code: Option<i64>,
        summary: &'a str,
        log: &'a Captured,
    ) -> BoxFuture<'a, Result<ArtifactId>> {
        Box::pin(self.shell_job_finished_unboxed(id, task, status, exit_code, summary, log))
    }

    async fn shell_job_finished_unboxed(
        &self,
        id: i64,
        task: TaskId,
        status: &str,
        exit_code: Option<i64>,
        summary: &str,
        log: &Captured,
    ) -> Result<ArtifactId> {
        let compressed = compress(log)?;
        let mut tx = self.pool.begin().await?;
        self.check_fence(&mut tx, now_millis()).await?;
        let artifact = insert_artifact(
            &mut tx,
            &ArtifactInsert {
                task_id: Some(task),
                kind: "shell_job_log",
                media_type: "text/plain",
                summary,
                captured: log,
            },
            compressed,
        )
        .await?;
        let stmt = Query::update()
            .table(ShellJobs::Table)
            .value(ShellJobs::Status, status)
            .value(ShellJobs::ExitCode, exit_code)
            .value(ShellJobs::LogArtifactId, artifact.0)
            .value(ShellJobs::Summary, summary)
            .value(ShellJobs::FinishedAt, now_millis())
            .and_where(Expr::col(ShellJobs::Id).eq(id))
            .to_owned();
        tx.execute(&stmt).await?;
        // The final log replaces the live one.
        crate::live_logs::delete_live_log(&mut tx, task, crate::live_source::SHELL_JOB, id).await?;
        tx.commit().await?;
        Ok(artifact)
    }

    /// Marks a running job stale (its worker is gone).
    pub fn shell_job_stale<'a>(&'a self, id: i64) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.shell_job_stale_unboxed(id))
    }

    async fn shell_job_stale_unboxed(&self, id: i64) -> Result<()> {
        let stmt = Query::update()
            .table(ShellJobs::Table)
            .value(ShellJobs::Status, job_status::STALE)
            .value(ShellJobs::FinishedAt, now_millis())
            .and_where(Expr::col(ShellJobs::Id).eq(id))
            .and_where(Expr::col(ShellJobs::Status).eq(job_status::RUNNING))
            .to_owned();
        let mut tx = self.pool.begin().await?;
        tx.execute(&stmt).await?;
        tx.commit().await?;
        Ok(())
    }

    pub fn shell_job<'a>(&'a self, id: i64) -> BoxFuture<'a, Result<Option<ShellJob>>> {
        Box::pin(self.shell_job_unboxed(id))
    }

    async fn shell_job_unboxed(&self, id: i64) -> Result<Option<ShellJob>> {
        let stmt = Query::select()
            .columns(COLUMNS)
            .from(ShellJobs::Table)
            .and_where(Expr::col(ShellJobs::Id).eq(id))
            .to_owned();
        self.pool.fetch_optional(&stmt).await
    }

    pub fn shell_jobs<'a>(&'a self, task: TaskId) -> BoxFuture<'a, Result<Vec<ShellJob>>> {
        Box::pin(self.shell_jobs_unboxed(task))
    }

    async fn shell_jobs_unboxed(&self, task: TaskId) -> Result<Vec<ShellJob>> {
        let stmt = Query::select()
            .columns(COLUMNS)
            .from(ShellJobs::Table)
            .and_where(Expr::col(ShellJobs::TaskId).eq(task.0))
            .order_by(ShellJobs::Id, Order::Asc)
            .to_owned();
        self.pool.fetch_all(&stmt).await
    }
}
