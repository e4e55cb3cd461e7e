//! The injected fault that proves the checker can fail: one succeeded task is put back in the
//! queue by SQL, behind the store's back, as a store that lost a commit or a bad restore would.
//! The daemons then really run it a second time, and the check must count it.
//!
//! This is the one place where the benchmark writes orchestrator's own tables, and it is there to
//! break them on purpose.

use anyhow::{Context, Result, bail};
use orchestrator_store::{Store, TaskFilter};
use orchestrator_types::TaskState;
use sqlx::{AssertSqlSafe, Connection};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the requeued task may take to run again.
const PATIENCE: Duration = Duration::from_secs(120);

const REQUEUE: &str = "UPDATE tasks SET state = 'queued', lease_owner = NULL, \
                       lease_expires_at = NULL, finished_at = NULL, run_after = 0 WHERE id = ";

/// Requeues the oldest succeeded task and waits until it succeeded a second time.
pub fn requeue_a_succeeded_task(
    runtime: &tokio::runtime::Runtime,
    store: &Store,
    home: &Path,
    database_url: Option<&str>,
) -> Result<()> {
    runtime.block_on(async {
        let tasks = store
            .list_tasks(&TaskFilter {
                state: Some(TaskState::Succeeded),
                limit: Some(u64::MAX / 2),
                ..TaskFilter::default()
            })
            .await?;
        let Some(task) = tasks.iter().min_by_key(|t| t.id) else {
            bail!("no task succeeded, so none can be run twice");
        };
        let sql = format!("{REQUEUE}{}", task.id);
        match database_url {
            Some(url) => {
                let mut db = sqlx::PgConnection::connect(url).await?;
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut db).await?;
                let _ = db.close().await;
            }
            None => {
                let path = home.join("orchestrator.db");
                let url = format!("sqlite://{}", path.display());
                let mut db = sqlx::SqliteConnection::connect(&url).await?;
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut db).await?;
                let _ = db.close().await;
            }
        }
        let start = Instant::now();
        loop {
            let events = store.events(task.id, 0, u64::MAX / 2).await?;
            if events.iter().filter(|e| e.kind == "succeeded").count() >= 2 {
                return Ok(());
            }
            if start.elapsed() > PATIENCE {
                return Err(anyhow::anyhow!(
                    "task {} was requeued but did not run again within {PATIENCE:?}",
                    task.id
                ))
                .context("the injected double execution did not happen");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}
