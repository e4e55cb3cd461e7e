//! The peer: apalis 1.0 (apalis-sqlite, apalis-postgres), the Rust job queue closest to ours, run on
//! the same workload in the same run, so that "ahead of apalis" is a measurement and not a memory.
//!
//! The workload is ours: N no-op jobs pushed in batches of `enqueue_batch` (one transaction per
//! batch, through each crate's own `queries::push_tasks`) while the workers drain them, timed from
//! the first push to the moment the database says every job is `Done`. apalis gets the setup its
//! README recommends for jobs that arrive while workers run, because its default polling parks an
//! idle worker until the next heartbeat (30 s) and would make the comparison meaningless:
//! - SQLite: the update-hook listener of `SqliteStorage::connect_with_callback`, as a stream
//!   strategy over `ready_chunks(batch_size)`, with a 500 ms interval as fallback; default `Config`.
//! - PostgreSQL: LISTEN/NOTIFY (`with_pubsub`) with a 5 s interval as fallback; default `Config`.
//!
//! `peer_workers` workers (4 by default) share one pool; within each, apalis runs fetched jobs
//! concurrently (its default), fetching `batch_size` (10) at a time.
//!
//! Durability must match ours or the comparison is void. `SqliteStorage::setup` runs
//! `PRAGMA synchronous = OFF` on whichever pooled connection it happens to use, leaving that one
//! connection non-durable and the others at SQLite's default. So setup runs on a throwaway
//! one-connection pool, and the pool apalis works with is opened afterwards with synchronous=FULL
//! on every connection, which the run checks and reports as `peer_sqlite_synchronous`. That pool
//! also gets the store's busy timeout (see `connect_with_callback` below). On PostgreSQL both queues
//! share the server's settings (synchronous_commit on) and sqlx's pool defaults.
//!
//! A peer that is slow does not hold the run hostage: after `timeout` its partial throughput is
//! reported with `peer_timed_out: true`.

use super::stats::per_second;
use anyhow::{Context, Result, anyhow};
use apalis::prelude::{BackendExt, BoxDynError, Data, Strategy, TaskBuilder, WorkerBuilder};
use apalis_postgres::{PgTask, PostgresStorage};
use apalis_sqlite::{SqliteStorage, SqliteTask};
use futures_util::{Stream, StreamExt};
use sqlx::SqlitePool;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqliteOperation, SqlitePoolOptions, SqliteSynchronous,
};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The queue (apalis' `job_type`) the benchmark's jobs go to.
const QUEUE: &str = "bench";
/// Time given to the workers to register before the clock starts, as our pool gets.
const SETTLE: Duration = Duration::from_millis(200);
/// The store's busy timeout (`StoreOptions::default()`), given to apalis too.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long stopped workers get to shut down gracefully before they are aborted.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// How the peer was measured and what it managed.
#[derive(Debug, Clone)]
pub struct PeerRun {
    pub name: &'static str,
    pub workers: usize,
    pub batch_size: usize,
    pub mode: &'static str,
    /// `PRAGMA synchronous` of the peer's connections on SQLite, as SQLite names it.
    pub sqlite_synchronous: Option<String>,
    pub tasks: u64,
    /// Jobs `Done` when the clock stopped: all of them, unless the run timed out.
    pub done: u64,
    pub elapsed: Duration,
    pub timed_out: bool,
}

impl PeerRun {
    pub fn tasks_per_s(&self) -> Option<f64> {
        per_second(self.done, self.elapsed)
    }
}

/// What the benchmark asks of the peer.
#[derive(Debug, Clone, Copy)]
pub struct PeerWorkload {
    pub tasks: u64,
    pub enqueue_batch: usize,
    pub workers: usize,
    pub timeout: Duration,
}

/// The no-op job. The counter lets the driver know when to start asking the database, which is
/// the only authority on whether a job is done (apalis acknowledges jobs in batches, later).
async fn noop(_job: u64, handled: Data<Arc<AtomicU64>>) -> Result<(), BoxDynError> {
    handled.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn encode_jobs(first: u64, count: u64) -> Result<Vec<Vec<u8>>> {
    (first..first + count)
        .map(|i| serde_json::to_vec(&i).context("encoding a job"))
        .collect()
}

/// apalis-sqlite on its own file at `path`.
pub async fn sqlite(path: &Path, workload: PeerWorkload) -> Result<PeerRun> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true);
    {
        let setup_pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .context("creating the apalis SQLite file")?;
        SqliteStorage::setup(&setup_pool)
            .await
            .map_err(|e| anyhow!("apalis-sqlite setup: {e}"))?;
        setup_pool.close().await;
    }
    let (pool, listener) = connect_with_callback(options);
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(&pool)
        .await
        .context("reading PRAGMA synchronous")?;
    let handled = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let mut workers = Vec::with_capacity(workload.workers);
    for i in 0..workload.workers {
        let config = apalis_sqlite::Config::default().queue(QUEUE);
        let strategy = Strategy::new()
            .stream(listener.clone().ready_chunks(config.batch_size))
            .interval(Duration::from_millis(500));
        let backend = SqliteStorage::<u64>::new(&pool)
            .with_config(config)
            .poll_with_strategy(strategy);
        let worker = WorkerBuilder::new(format!("bench-peer-{i}"))
            .backend(backend)
            .data(handled.clone())
            .build(noop);
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            worker
                .run_until(async move {
                    stop.cancelled().await;
                    Ok::<(), std::io::Error>(())
                })
                .await
                .map_err(|e| anyhow!("apalis worker: {e}"))
        }));
    }
    let enqueue_pool = pool.clone();
    let count_pool = pool.clone();
    let measured = drive(
        workload,
        &handled,
        &mut workers,
        move |first, count| {
            let pool = enqueue_pool.clone();
            async move {
                let items: Vec<SqliteTask> = encode_jobs(first, count)?
                    .into_iter()
                    .map(|args| TaskBuilder::new(args).build())
                    .collect();
                let mut tx = pool.begin().await?;
                apalis_sqlite::queries::push_tasks(&mut *tx, QUEUE, &items)
                    .await
                    .map_err(|e| anyhow!("apalis-sqlite push: {e}"))?;
                tx.commit().await?;
                Ok(())
            }
        },
        move || {
            let pool = count_pool.clone();
            async move {
                let done: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM Jobs WHERE status = 'Done' AND job_type = ?1",
                )
                .bind(QUEUE)
                .fetch_one(&pool)
                .await?;
                Ok(done as u64)
            }
        },
    )
    .await;
    stop_workers(&stop, workers).await;
    pool.close().await;
    let (done, elapsed, timed_out) = measured?;
    Ok(PeerRun {
        name: "apalis-sqlite 1.0",
        workers: workload.workers,
        batch_size: apalis_sqlite::Config::default().batch_size,
        mode: "update-hook stream + 500 ms interval (README event-driven setup), busy_timeout 30 s",
        sqlite_synchronous: Some(synchronous_name(synchronous)),
        tasks: workload.tasks,
        done,
        elapsed,
        timed_out,
    })
}

/// `SqliteStorage::connect_with_callback`, with two settings of ours: synchronous=FULL stated
/// rather than inherited, and the store's 30 s busy timeout instead of sqlx's 5 s. With 5 s, apalis'
/// workers die with "database is locked" within seconds of this workload (four workers and a
/// producer contending for SQLite's one write lock at FULL), which would measure sqlx's default, not
/// apalis. Everything else is as in apalis-sqlite 1.0: the pool's defaults, an update hook on every
/// connection that signals each insert into `Jobs`, and one receiver shared by all the workers.
fn connect_with_callback(options: SqliteConnectOptions) -> (SqlitePool, InsertSignals) {
    let options = options
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(BUSY_TIMEOUT);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let pool = SqlitePoolOptions::new()
        .after_connect(move |conn, _| {
            let tx = tx.clone();
            Box::pin(async move {
                let mut handle = conn.lock_handle().await?;
                handle.set_update_hook(move |event| {
                    if event.operation == SqliteOperation::Insert && event.table == "Jobs" {
                        let _ = tx.send(());
                    }
                });
                Ok(())
            })
        })
        .connect_lazy_with(options);
    (pool, InsertSignals(Arc::new(Mutex::new(rx))))
}

/// apalis-sqlite's `HookCallbackListener`, rebuilt because its constructor takes an event type only
/// apalis can make: a stream that yields once per inserted job, its receiver shared by the clones.
#[derive(Clone)]
struct InsertSignals(Arc<Mutex<tokio::sync::mpsc::UnboundedReceiver<()>>>);

impl Stream for InsertSignals {
    type Item = ();

    fn poll_next(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Option<()>> {
        match self.0.lock() {
            Ok(mut rx) => rx.poll_recv(cx),
            Err(_) => Poll::Ready(None),
        }
    }
}

/// apalis-postgres in the run's database (its tables live in their own `apalis` schema).
pub async fn postgres(url: &str, workload: PeerWorkload) -> Result<PeerRun> {
    let pool = sqlx::PgPool::connect(url)
        .await
        .context("connecting apalis-postgres")?;
    PostgresStorage::setup(&pool)
        .await
        .map_err(|e| anyhow!("apalis-postgres setup: {e}"))?;
    let handled = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let mut workers = Vec::with_capacity(workload.workers);
    for i in 0..workload.workers {
        let config = apalis_postgres::Config::default().queue(QUEUE);
        let backend = PostgresStorage::<u64>::new(&pool)
            .with_config(config)
            .with_pubsub()
            .poll_with_strategy(Strategy::new().interval(Duration::from_secs(5)));
        let worker = WorkerBuilder::new(format!("bench-peer-{i}"))
            .backend(backend)
            .data(handled.clone())
            .build(noop);
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            worker
                .run_until(async move {
                    stop.cancelled().await;
                    Ok::<(), std::io::Error>(())
                })
                .await
                .map_err(|e| anyhow!("apalis worker: {e}"))
        }));
    }
    let enqueue_pool = pool.clone();
    let count_pool = pool.clone();
    let measured = drive(
        workload,
        &handled,
        &mut workers,
        move |first, count| {
            let pool = enqueue_pool.clone();
            async move {
                let items: Vec<PgTask> = encode_jobs(first, count)?
                    .into_iter()
                    .map(|args| TaskBuilder::new(args).build())
                    .collect();
                let mut tx = pool.begin().await?;
                apalis_postgres::queries::push_tasks(&mut *tx, QUEUE, items)
                    .await
                    .map_err(|e| anyhow!("apalis-postgres push: {e}"))?;
                tx.commit().await?;
                Ok(())
            }
        },
        move || {
            let pool = count_pool.clone();
            async move {
                let done: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM apalis.jobs WHERE status = 'Done' AND job_type = $1",
                )
                .bind(QUEUE)
                .fetch_one(&pool)
                .await?;
                Ok(done as u64)
            }
        },
    )
    .await;
    stop_workers(&stop, workers).await;
    pool.close().await;
    let (done, elapsed, timed_out) = measured?;
    Ok(PeerRun {
        name: "apalis-postgres 1.0",
        workers: workload.workers,
        batch_size: apalis_postgres::Config::default().batch_size,
        mode: "LISTEN/NOTIFY pubsub + 5 s interval (README pubsub setup)",
        sqlite_synchronous: None,
        tasks: workload.tasks,
        done,
        elapsed,
        timed_out,
    })
}

type Worker = JoinHandle<Result<()>>;

/// Pushes the jobs in batches, then waits until the database counts all of them `Done`, the
/// timeout passes, or a worker dies. Returns the jobs done, the time taken and whether it timed out.
async fn drive<E, EF, C, CF>(
    workload: PeerWorkload,
    handled: &AtomicU64,
    workers: &mut Vec<Worker>,
    mut enqueue: E,
    mut count_done: C,
) -> Result<(u64, Duration, bool)>
where
    E: FnMut(u64, u64) -> EF,
    EF: Future<Output = Result<()>>,
    C: FnMut() -> CF,
    CF: Future<Output = Result<u64>>,
{
    tokio::time::sleep(SETTLE).await;
    check_workers(workers).await?;
    let started = Instant::now();
    let deadline = started + workload.timeout;
    let batch = workload.enqueue_batch as u64;
    let mut pushed = 0;
    while pushed < workload.tasks {
        if Instant::now() >= deadline {
            let done = count_done().await?;
            return Ok((done, started.elapsed(), true));
        }
        let count = (workload.tasks - pushed).min(batch);
        enqueue(pushed, count).await?;
        pushed += count;
    }
    // Ask the database often once every job has run (only acknowledgements are missing), and
    // rarely before, so that counting does not take the CPU from the workers being measured.
    let mut last_count = Instant::now();
    loop {
        let all_ran = handled.load(Ordering::Relaxed) >= workload.tasks;
        let now = Instant::now();
        if all_ran
            || now.duration_since(last_count) >= Duration::from_millis(250)
            || now >= deadline
        {
            last_count = now;
            let done = count_done().await?;
            if done >= workload.tasks {
                return Ok((done, started.elapsed(), false));
            }
            if now >= deadline {
                return Ok((done, started.elapsed(), true));
            }
        }
        check_workers(workers).await?;
        tokio::time::sleep(Duration::from_millis(if all_ran { 1 } else { 5 })).await;
    }
}

/// Fails with the worker's own error when one has stopped before being asked to. A finished
/// worker is taken out of the list: its handle cannot be awaited twice.
async fn check_workers(workers: &mut Vec<Worker>) -> Result<()> {
    let Some(index) = workers.iter().position(JoinHandle::is_finished) else {
        return Ok(());
    };
    match workers.swap_remove(index).await {
        Ok(Ok(())) => Err(anyhow!("an apalis worker stopped early")),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(anyhow!("an apalis worker panicked: {e}")),
    }
}

async fn stop_workers(stop: &CancellationToken, workers: Vec<Worker>) {
    stop.cancel();
    for mut worker in workers {
        if tokio::time::timeout(STOP_GRACE, &mut worker).await.is_err() {
            worker.abort();
        }
    }
}

fn synchronous_name(level: i64) -> String {
    match level {
        0 => "OFF".into(),
        1 => "NORMAL".into(),
        2 => "FULL".into(),
        3 => "EXTRA".into(),
        other => format!("unknown ({other})"),
    }
}
