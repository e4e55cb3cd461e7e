//! The raw baseline: the least SQL a durable queue needs, hand-written, batched, on the same database
//! as the store and in the same run.
//!
//! Per batch of `batch` jobs (100 by default), three transactions, each committed (fsynced) on its
//! own as a queue's producer, claimer and completer would: insert the batch; claim it with the same
//! `UPDATE ... WHERE id IN (SELECT ... ORDER BY priority, id LIMIT n [FOR UPDATE SKIP LOCKED])
//! RETURNING` shape the store uses; mark it done. The table, `bench_raw_jobs`, has the columns and
//! the claim index of `tasks`, and its payload is the same serialized task spec, so the baseline
//! writes rows as wide as ours. What it leaves out is everything orchestrator adds on purpose: the
//! event rows, the lease epochs checked on completion, the worker pool's concurrency. The ratio of
//! the two figures is therefore the price of those features plus any waste; DESIGN.md's target is
//! that it stays at least 0.5.
//!
//! The SQL is hand-written here, outside the store crate, deliberately: a baseline written with the
//! store's own query builder would inherit whatever the store gets wrong.

use anyhow::{Context, Result, ensure};
use orchestrator_types::{NewTask, now_millis};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, PgPool, SqlitePool};
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// What one raw run did.
#[derive(Debug, Clone, Copy)]
pub struct RawRun {
    pub jobs: u64,
    /// From the first insert to the last completion's commit.
    pub elapsed: Duration,
}

const QUEUE: &str = "default";
const OWNER: &str = "bench-raw";
const LEASE_MS: i64 = 30_000;

const SQLITE_SCHEMA: &str = "
CREATE TABLE bench_raw_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    run_after INTEGER NOT NULL,
    epoch INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_expires_at INTEGER,
    last_error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER
);
CREATE INDEX bench_raw_jobs_claimable ON bench_raw_jobs (queue, priority DESC, id) WHERE state = 'queued';
";

const POSTGRES_SCHEMA: &str = "
CREATE TABLE bench_raw_jobs (
    id BIGSERIAL PRIMARY KEY,
    title TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority BIGINT NOT NULL,
    attempt BIGINT NOT NULL DEFAULT 0,
    max_attempts BIGINT NOT NULL,
    run_after BIGINT NOT NULL,
    epoch BIGINT NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_expires_at BIGINT,
    last_error TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    started_at BIGINT,
    finished_at BIGINT
);
CREATE INDEX bench_raw_jobs_claimable ON bench_raw_jobs (queue, priority DESC, id) WHERE state = 'queued';
";

/// The jobs of one batch: titles and payloads built before the clock starts, as the store's tasks
/// are.
fn batch_rows(first: u64, count: u64) -> Result<Vec<(String, String)>> {
    (first..first + count)
        .map(|i| {
            let task = NewTask::new(format!("raw {i}"));
            let payload = serde_json::to_string(&task).context("serializing a payload")?;
            Ok((task.title, payload))
        })
        .collect()
}

fn insert_sql(rows: usize, placeholder: impl Fn(usize) -> String) -> String {
    let mut sql = String::from(
        "INSERT INTO bench_raw_jobs (title, payload, state, queue, priority, max_attempts, \
         run_after, created_at, updated_at) VALUES ",
    );
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        // Title and payload are bound per row; the rest are the same for the batch.
        sql.push_str(&format!(
            "({}, {}, 'queued', {}, 0, 3, {}, {}, {})",
            placeholder(row * 2 + 1),
            placeholder(row * 2 + 2),
            placeholder(rows * 2 + 1),
            placeholder(rows * 2 + 2),
            placeholder(rows * 2 + 2),
            placeholder(rows * 2 + 2),
        ));
    }
    sql
}

/// Runs the baseline on the store's SQLite file, with the store's settings: WAL, synchronous=FULL,
/// and `BEGIN IMMEDIATE` for every write transaction.
pub async fn sqlite(path: &Path, jobs: u64, batch: usize) -> Result<RawRun> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(30));
    // One connection: the baseline is one client doing one step after another.
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .context("opening the SQLite file for the raw baseline")?;
    let result = sqlite_on(&pool, jobs, batch).await;
    pool.close().await;
    result
}

async fn sqlite_on(pool: &SqlitePool, jobs: u64, batch: usize) -> Result<RawRun> {
    sqlx::raw_sql(SQLITE_SCHEMA)
        .execute(pool)
        .await
        .context("creating bench_raw_jobs")?;
    let claim = "UPDATE bench_raw_jobs SET state = 'running', lease_owner = ?1, \
                 lease_expires_at = ?2, epoch = epoch + 1, attempt = attempt + 1, \
                 started_at = ?3, updated_at = ?3 \
                 WHERE id IN (SELECT id FROM bench_raw_jobs WHERE state = 'queued' AND queue = ?4 \
                 AND run_after <= ?3 ORDER BY priority DESC, id LIMIT ?5) RETURNING id";
    let started = Instant::now();
    let mut done = 0u64;
    while done < jobs {
        let count = (jobs - done).min(batch as u64);
        let rows = batch_rows(done, count)?;
        let now = now_millis();

        let insert = insert_sql(rows.len(), |n| format!("?{n}"));
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        let mut query = sqlx::query(AssertSqlSafe(insert));
        for (title, payload) in &rows {
            query = query.bind(title).bind(payload);
        }
        query.bind(QUEUE).bind(now).execute(&mut *tx).await?;
        tx.commit().await?;

        let now = now_millis();
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        let ids: Vec<i64> = sqlx::query_scalar(claim)
            .bind(OWNER)
            .bind(now + LEASE_MS)
            .bind(now)
            .bind(QUEUE)
            .bind(count as i64)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        ensure!(
            ids.len() as u64 == count,
            "raw claim took {} of {count} jobs",
            ids.len()
        );

        let now = now_millis();
        let placeholders: Vec<String> = (0..ids.len()).map(|i| format!("?{}", i + 2)).collect();
        let complete = format!(
            "UPDATE bench_raw_jobs SET state = 'done', lease_owner = NULL, lease_expires_at = NULL, \
             finished_at = ?1, updated_at = ?1 WHERE id IN ({})",
            placeholders.join(", ")
        );
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        let mut query = sqlx::query(AssertSqlSafe(complete)).bind(now);
        for id in &ids {
            query = query.bind(id);
        }
        let completed = query.execute(&mut *tx).await?.rows_affected();
        tx.commit().await?;
        ensure!(
            completed == count,
            "raw completion marked {completed} of {count} jobs"
        );
        done += count;
    }
    let elapsed = started.elapsed();
    let finished: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM bench_raw_jobs WHERE state = 'done'")
            .fetch_one(pool)
            .await?;
    ensure!(
        finished as u64 == jobs,
        "{finished} of {jobs} raw jobs are done"
    );
    Ok(RawRun { jobs, elapsed })
}

/// Runs the baseline on PostgreSQL, in the run's database, with `SKIP LOCKED` in the claim as the
/// store has.
pub async fn postgres(url: &str, jobs: u64, batch: usize) -> Result<RawRun> {
    let options = PgConnectOptions::from_str(url).context("parsing the PostgreSQL URL")?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .context("connecting for the raw baseline")?;
    let result = postgres_on(&pool, jobs, batch).await;
    pool.close().await;
    result
}

async fn postgres_on(pool: &PgPool, jobs: u64, batch: usize) -> Result<RawRun> {
    sqlx::raw_sql(POSTGRES_SCHEMA)
        .execute(pool)
        .await
        .context("creating bench_raw_jobs")?;
    let claim = "UPDATE bench_raw_jobs SET state = 'running', lease_owner = $1, \
                 lease_expires_at = $2, epoch = epoch + 1, attempt = attempt + 1, \
                 started_at = $3, updated_at = $3 \
                 WHERE id IN (SELECT id FROM bench_raw_jobs WHERE state = 'queued' AND queue = $4 \
                 AND run_after <= $3 ORDER BY priority DESC, id LIMIT $5 FOR UPDATE SKIP LOCKED) \
                 RETURNING id";
    let complete = "UPDATE bench_raw_jobs SET state = 'done', lease_owner = NULL, \
                    lease_expires_at = NULL, finished_at = $1, updated_at = $1 \
                    WHERE id = ANY($2)";
    let started = Instant::now();
    let mut done = 0u64;
    while done < jobs {
        let count = (jobs - done).min(batch as u64);
        let rows = batch_rows(done, count)?;
        let now = now_millis();

        let insert = insert_sql(rows.len(), |n| format!("${n}"));
        let mut tx = pool.begin().await?;
        let mut query = sqlx::query(AssertSqlSafe(insert));
        for (title, payload) in &rows {
            query = query.bind(title).bind(payload);
        }
        query.bind(QUEUE).bind(now).execute(&mut *tx).await?;
        tx.commit().await?;

        let now = now_millis();
        let mut tx = pool.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(claim)
            .bind(OWNER)
            .bind(now + LEASE_MS)
            .bind(now)
            .bind(QUEUE)
            .bind(count as i64)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        ensure!(
            ids.len() as u64 == count,
            "raw claim took {} of {count} jobs",
            ids.len()
        );

        let now = now_millis();
        let mut tx = pool.begin().await?;
        let completed = sqlx::query(complete)
            .bind(now)
            .bind(&ids)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        ensure!(
            completed == count,
            "raw completion marked {completed} of {count} jobs"
        );
        done += count;
    }
    let elapsed = started.elapsed();
    let finished: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM bench_raw_jobs WHERE state = 'done'")
            .fetch_one(pool)
            .await?;
    ensure!(
        finished as u64 == jobs,
        "{finished} of {jobs} raw jobs are done"
    );
    Ok(RawRun { jobs, elapsed })
}

#[cfg(test)]
mod tests {
    #[test]
    fn insert_binds_two_values_per_row_and_two_shared() {
        let sql = super::insert_sql(2, |n| format!("?{n}"));
        assert!(
            sql.ends_with(
                "(?1, ?2, 'queued', ?5, 0, 3, ?6, ?6, ?6), (?3, ?4, 'queued', ?5, 0, 3, ?6, ?6, ?6)"
            ),
            "{sql}"
        );
    }
}
