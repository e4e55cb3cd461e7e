//! `orchestrator-bench queue`: the task queue's throughput, latency and cost, against the raw SQL
//! under it and against apalis, on SQLite and on PostgreSQL, one JSON line per backend.
//!
//! One run of one backend, in order, each phase on the same fresh database (database.rs):
//! 1. raw.rs: the raw batched SQL baseline (`raw_batched_per_s`);
//! 2. real_path.rs: orchestrator's own path, concurrent (`tasks_per_s`) and split into enqueue and
//!    drain (`enqueue_per_s`, `drain_per_s`);
//! 3. latency.rs: enqueue-to-start on an idle pool (`start_p50_ms`, `start_p99_ms`);
//! 4. peer.rs: apalis on the same workload (`peer_tasks_per_s`).
//!
//! The baseline runs first on an empty database, as the real path does on its (separate) table, so
//! that neither is measured on a database the other has already filled. With `runs` > 1 every run
//! gets a new database and report.rs takes medians, ratios included (each ratio is computed within
//! its run first: a ratio of medians would mix figures from different moments of a noisy machine).

mod database;
mod latency;
mod peer;
mod raw;
mod real_path;
mod report;
mod stats;

pub use database::{BenchDatabase, DEFAULT_POSTGRES_URL, POSTGRES_URL_VARS};
pub use latency::Latency;
pub use peer::{PeerRun, PeerWorkload};
pub use raw::RawRun;
pub use real_path::{Concurrent, Split};
pub use report::{Line, error_line, line};

use anyhow::{Context, Result, ensure};
use orchestrator_store::{Backend, Store, StoreOptions};
use std::time::Duration;

pub const DEFAULT_TASKS: u64 = 20_000;
/// Many slots, so that a no-op task never waits for one and the queue is what is measured.
pub const DEFAULT_SLOTS: usize = 256;
pub const DEFAULT_CLAIM_BATCH: usize = orchestrator_worker::pool::DEFAULT_CLAIM_BATCH;
/// Tasks per `create_tasks` call, and jobs per push for the peer.
pub const DEFAULT_ENQUEUE_BATCH: usize = 500;
/// Jobs per transaction of the raw baseline, as DESIGN.md's "100 per transaction" column.
pub const DEFAULT_RAW_BATCH: usize = 100;
pub const DEFAULT_LATENCY_TASKS: usize = 1_000;
/// Pause between latency samples, after the previous task completed.
pub const DEFAULT_LATENCY_INTERVAL: Duration = Duration::from_millis(2);
pub const DEFAULT_PEER_WORKERS: usize = 4;
/// apalis-sqlite manages a few hundred jobs a second on this workload, so it would need about a
/// minute for the default 20 000: past this cap its partial rate is reported (`peer_timed_out`),
/// which keeps a default run of both backends near a minute and a half.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(30);

/// The benchmark's settings, validated.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    pub tasks: u64,
    pub slots: usize,
    pub claim_batch: usize,
    pub enqueue_batch: usize,
    pub raw_batch: usize,
    pub latency_tasks: usize,
    pub latency_interval: Duration,
    pub runs: usize,
    pub backends: Vec<Backend>,
    /// The PostgreSQL server on which each run creates (and drops) its database.
    pub postgres_url: String,
    /// `None` skips the peer.
    pub peer: Option<PeerSettings>,
    /// Leave each run's database behind (and say where) instead of removing it.
    pub keep_databases: bool,
    /// Connections in the store's pool; `None` keeps the store's default.
    pub store_connections: Option<u32>,
}

#[derive(Debug, Clone, Copy)]
pub struct PeerSettings {
    pub workers: usize,
    pub timeout: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            tasks: DEFAULT_TASKS,
            slots: DEFAULT_SLOTS,
            claim_batch: DEFAULT_CLAIM_BATCH,
            enqueue_batch: DEFAULT_ENQUEUE_BATCH,
            raw_batch: DEFAULT_RAW_BATCH,
            latency_tasks: DEFAULT_LATENCY_TASKS,
            latency_interval: DEFAULT_LATENCY_INTERVAL,
            runs: 1,
            backends: vec![Backend::Sqlite, Backend::Postgres],
            postgres_url: DEFAULT_POSTGRES_URL.to_owned(),
            peer: Some(PeerSettings {
                workers: DEFAULT_PEER_WORKERS,
                timeout: DEFAULT_PEER_TIMEOUT,
            }),
            keep_databases: false,
            store_connections: None,
        }
    }
}

impl QueueConfig {
    pub fn validate(&self) -> Result<()> {
        ensure!(self.tasks > 0, "--tasks must be at least 1");
        ensure!(self.slots > 0, "--slots must be at least 1");
        ensure!(self.claim_batch > 0, "--claim-batch must be at least 1");
        ensure!(self.enqueue_batch > 0, "--enqueue-batch must be at least 1");
        ensure!(
            (1..=1000).contains(&self.raw_batch),
            "--raw-batch must be between 1 and 1000 (SQLite's limit on bound parameters)"
        );
        ensure!(self.latency_tasks > 0, "--latency-tasks must be at least 1");
        ensure!(self.runs > 0, "--runs must be at least 1");
        ensure!(!self.backends.is_empty(), "no backend to measure");
        ensure!(
            self.store_connections != Some(0),
            "--store-connections must be at least 1"
        );
        if let Some(peer) = &self.peer {
            ensure!(peer.workers > 0, "--peer-workers must be at least 1");
            ensure!(!peer.timeout.is_zero(), "--peer-timeout-s must be positive");
        }
        Ok(())
    }

    /// The store's options: its defaults (synchronous=FULL on SQLite), with the pool size if given.
    pub fn store_options(&self) -> StoreOptions {
        let mut options = StoreOptions::default();
        if let Some(connections) = self.store_connections {
            options.max_connections = connections;
        }
        options
    }

    fn peer_workload(&self, peer: PeerSettings) -> PeerWorkload {
        PeerWorkload {
            tasks: self.tasks,
            enqueue_batch: self.enqueue_batch,
            workers: peer.workers,
            timeout: peer.timeout,
        }
    }
}

/// Everything one run measured on one backend.
#[derive(Debug, Clone)]
pub struct RunFigures {
    pub raw: RawRun,
    pub concurrent: Concurrent,
    pub split: Split,
    pub latency: Latency,
    /// `None` when the peer was skipped; `Some(Err)` carries why its measurement failed.
    pub peer: Option<std::result::Result<PeerRun, String>>,
}

/// How a whole benchmark went, for the exit code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub measured: usize,
    /// Backends whose database could not be reached (PostgreSQL not running): reported, not fatal.
    pub unreachable: usize,
    pub failed: usize,
}

impl Summary {
    /// Counts how one backend's measurement went and returns its JSON line: `measured`'s when
    /// nothing failed, else `failed`'s with the error on one line (said on stderr too). A failure
    /// is `(unreachable, error)`: an unreachable database is reported, not fatal.
    pub fn line_for(
        &mut self,
        backend: Backend,
        failure: Option<(bool, anyhow::Error)>,
        measured: impl FnOnce() -> String,
        failed: impl FnOnce(&str) -> String,
    ) -> String {
        let Some((unreachable, e)) = failure else {
            self.measured += 1;
            return measured();
        };
        if unreachable {
            self.unreachable += 1;
        } else {
            self.failed += 1;
        }
        let message = describe(&e);
        eprintln!("{}: {message}", backend.as_str());
        failed(&message)
    }
}

/// Runs the benchmark on every configured backend, handing each JSON line to `emit` as soon as
/// its backend is done.
pub async fn run(
    config: &QueueConfig,
    mut emit: impl FnMut(&str) -> Result<()>,
) -> Result<Summary> {
    config.validate()?;
    let mut summary = Summary::default();
    for &backend in &config.backends {
        let mut runs = Vec::with_capacity(config.runs);
        let mut failure = None;
        for run in 0..config.runs {
            progress(backend, run, config, "creating a fresh database");
            let db = match provision(backend, config).await {
                Ok(db) => db,
                Err(e) => {
                    failure = Some((true, e));
                    break;
                }
            };
            let measured =
                measure_run(&db, config, &|what| progress(backend, run, config, what)).await;
            if config.keep_databases {
                progress(
                    backend,
                    run,
                    config,
                    &format!("kept the database: {}", db.keep()),
                );
            } else if let Err(e) = db.remove().await {
                eprintln!("warning: {e:#}");
            }
            match measured {
                Ok(figures) => runs.push(figures),
                Err(e) => {
                    failure = Some((false, e));
                    break;
                }
            }
        }
        let text = summary.line_for(
            backend,
            failure,
            || line(backend, config, &runs).to_json(),
            |message| error_line(backend, config, message).to_json(),
        );
        emit(&text)?;
    }
    Ok(summary)
}

async fn provision(backend: Backend, config: &QueueConfig) -> Result<BenchDatabase> {
    match backend {
        Backend::Sqlite => BenchDatabase::sqlite(),
        Backend::Postgres => BenchDatabase::postgres(&config.postgres_url).await,
    }
}

fn progress(backend: Backend, run: usize, config: &QueueConfig, what: &str) {
    eprintln!(
        "[{} run {}/{}] {what}",
        backend.as_str(),
        run + 1,
        config.runs
    );
}

/// One run on `db`: every phase, in the order the module comment gives. The peer's failure is part
/// of the figures (`peer_error`), not an error: the rest of the run still stands.
pub async fn measure_run(
    db: &BenchDatabase,
    config: &QueueConfig,
    progress: &dyn Fn(&str),
) -> Result<RunFigures> {
    progress(&format!(
        "raw batched SQL: {} jobs, {} per transaction",
        config.tasks, config.raw_batch
    ));
    let raw = match db {
        BenchDatabase::Sqlite { .. } => {
            let path = db
                .sqlite_store_path()
                .context("the SQLite database has no file")?;
            raw::sqlite(&path, config.tasks, config.raw_batch).await?
        }
        BenchDatabase::Postgres { url, .. } => {
            raw::postgres(url, config.tasks, config.raw_batch).await?
        }
    };
    progress(&rate_text("raw batched", raw.jobs, raw.elapsed));

    let store = Store::open(&db.store_url(), &config.store_options())
        .await
        .context("opening the store")?;
    let ours = measure_ours(&store, config, progress).await;
    store.close().await;
    let (concurrent, split, latency) = ours?;

    let peer = match config.peer {
        None => None,
        Some(settings) => {
            let workload = config.peer_workload(settings);
            progress(&format!(
                "apalis: {} jobs, {} workers, timeout {:?}",
                workload.tasks, workload.workers, workload.timeout
            ));
            let measured = match db {
                BenchDatabase::Sqlite { .. } => match db.sqlite_peer_path() {
                    Some(path) => peer::sqlite(&path, workload).await,
                    None => Err(anyhow::anyhow!("the SQLite database has no peer file")),
                },
                BenchDatabase::Postgres { url, .. } => peer::postgres(url, workload).await,
            };
            match &measured {
                Ok(run) => progress(&format!(
                    "{}{}",
                    rate_text("apalis", run.done, run.elapsed),
                    if run.timed_out { " (timed out)" } else { "" }
                )),
                Err(e) => progress(&format!("apalis failed: {}", describe(e))),
            }
            Some(measured.map_err(|e| describe(&e)))
        }
    };
    Ok(RunFigures {
        raw,
        concurrent,
        split,
        latency,
        peer,
    })
}

async fn measure_ours(
    store: &Store,
    config: &QueueConfig,
    progress: &dyn Fn(&str),
) -> Result<(Concurrent, Split, Latency)> {
    progress(&format!(
        "real path, concurrent: {} tasks, {} slots",
        config.tasks, config.slots
    ));
    let concurrent = real_path::concurrent(store, config).await?;
    progress(&rate_text(
        "real path",
        concurrent.tasks,
        concurrent.elapsed,
    ));
    if let Some(cpu) = concurrent.cpu {
        progress(&format!(
            "real path CPU: {:.3} s, {:.1} µs per task (this process, all threads)",
            cpu.as_secs_f64(),
            cpu_us_per_task(cpu, concurrent.tasks)
        ));
    }
    progress("real path, split: enqueue, then drain");
    let split = real_path::split(store, config).await?;
    progress(&format!(
        "{}; {}",
        rate_text("enqueue", split.tasks, split.enqueue),
        rate_text("drain", split.tasks, split.drain)
    ));
    progress(&format!(
        "enqueue-to-start: {} tasks, one at a time",
        config.latency_tasks
    ));
    let latency = latency::measure(store, config).await?;
    progress(&format!(
        "start p50 {:.3} ms, p99 {:.3} ms",
        latency.p50_ms().unwrap_or(f64::NAN),
        latency.p99_ms().unwrap_or(f64::NAN)
    ));
    Ok((concurrent, split, latency))
}

/// CPU microseconds per task.
pub fn cpu_us_per_task(cpu: Duration, tasks: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / tasks.max(1) as f64
}

/// An error and its causes on one line, without the repetition of sqlx errors, whose message
/// already ends with their source's.
pub fn describe(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if !text.ends_with(&message) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&message);
        }
    }
    text
}

fn rate_text(what: &str, items: u64, elapsed: Duration) -> String {
    format!(
        "{what}: {items} in {:.3} s = {:.0}/s",
        elapsed.as_secs_f64(),
        stats::per_second(items, elapsed).unwrap_or(f64::NAN)
    )
}
