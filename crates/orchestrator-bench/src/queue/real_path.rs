//! Orchestrator's real path: no-op tasks created with `Store::create_tasks`, claimed, run and
//! completed by a `WorkerPool`, exactly as `serve` runs them, with nothing stubbed.
//!
//! A task with no gates and no prompt is a no-op: its attempt succeeds as soon as it starts, so what
//! is left to measure is the queue itself, which is the point. Two shapes are timed:
//! - concurrent (the headline `tasks_per_s`): the pool is running and idle, then N tasks are created
//!   in batches while it drains them; the clock runs from the first create to the moment the last
//!   completion is committed. This is a queue's real life, producers and workers at once.
//! - split: N tasks are created with no pool running (`enqueue_per_s`), then a pool is started and
//!   timed until it has drained them (`drain_per_s`). The two halves say which side is slow when the
//!   headline disappoints.
//!
//! Completions are counted with the pool's own `Metrics::succeeded`, which the completer bumps after
//! the completion's transaction commits: an atomic load every millisecond, not a query that would
//! compete with the pool for the database. After each phase the store is asked whether every task
//! really succeeded.

use super::QueueConfig;
use anyhow::{Context, Result, bail, ensure};
use orchestrator_store::Store;
use orchestrator_types::{NewTask, TaskState};
use orchestrator_worker::{Metrics, PoolConfig, StartHook, WorkerPool, new_worker_id};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Longest a phase may take before the benchmark calls the pool stuck.
pub(crate) const PHASE_TIMEOUT: Duration = Duration::from_secs(300);
/// Time given to a freshly started pool to register and go idle before the clock starts, so that
/// start-up (and on PostgreSQL, opening the LISTEN connection) is not timed as queue work.
pub(crate) const SETTLE: Duration = Duration::from_millis(200);
/// How often the waiting side looks at the completion counter.
const POLL: Duration = Duration::from_millis(1);

/// The concurrent phase's figures.
#[derive(Debug, Clone, Copy)]
pub struct Concurrent {
    pub tasks: u64,
    /// From the first create to the last committed completion.
    pub elapsed: Duration,
    /// From the first create to the return of the last one.
    pub enqueue: Duration,
    /// CPU time this process spent in that span (all its threads, user and system): steadier than
    /// the rate on a shared machine, though it leaves out a PostgreSQL server's own processes.
    pub cpu: Option<Duration>,
}

/// The CPU time this process has used so far, all threads, user and system (`/proc/self/stat`).
/// `None` where there is no such file.
pub(crate) fn process_cpu() -> Option<Duration> {
    cpu_of_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// The user and system time of a `/proc/<pid>/stat` line. The command name, in parentheses, may
/// hold spaces and parentheses itself, so the fields are counted from the last `)`: `utime` and
/// `stime` are the 12th and 13th after it, in clock ticks of 1/100 s (Linux's USER_HZ).
fn cpu_of_stat(stat: &str) -> Option<Duration> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((user + system) * 10))
}

/// The split phase's figures.
#[derive(Debug, Clone, Copy)]
pub struct Split {
    pub tasks: u64,
    /// Creating every task with no pool running.
    pub enqueue: Duration,
    /// From the pool's start to the last committed completion.
    pub drain: Duration,
}

/// A worker pool running in the background, with its counters and its stop switch.
pub(crate) struct RunningPool {
    shutdown: CancellationToken,
    join: JoinHandle<orchestrator_worker::Result<()>>,
    pub(crate) metrics: Arc<Metrics>,
}

impl RunningPool {
    pub(crate) fn start(
        store: &Store,
        config: &QueueConfig,
        on_start: Option<StartHook>,
    ) -> Result<Self> {
        let mut pool_config = PoolConfig::new(new_worker_id());
        pool_config.slots = config.slots;
        pool_config.claim_batch = config.claim_batch;
        pool_config.on_start = on_start;
        let metrics = Arc::new(Metrics::default());
        let pool = WorkerPool::new(store.clone(), pool_config, metrics.clone())
            .context("configuring the worker pool")?;
        let shutdown = CancellationToken::new();
        let join = tokio::spawn(pool.run(shutdown.clone()));
        Ok(RunningPool {
            shutdown,
            join,
            metrics,
        })
    }

    /// Waits until the pool has committed `target` successes, failing fast on anything else: a
    /// failed or requeued attempt, a stale completion, a pool that stopped, or `deadline`.
    pub(crate) async fn wait_succeeded(&self, target: u64, deadline: Instant) -> Result<()> {
        loop {
            let m = &self.metrics;
            if m.succeeded.load(Ordering::Relaxed) >= target {
                return Ok(());
            }
            let failed = m.failed.load(Ordering::Relaxed);
            let requeued = m.requeued.load(Ordering::Relaxed);
            let stale = m.stale_completions.load(Ordering::Relaxed);
            let canceled = m.canceled.load(Ordering::Relaxed);
            ensure!(
                failed + requeued + stale + canceled == 0,
                "no-op tasks did not all succeed: {failed} failed, {requeued} requeued, \
                 {canceled} canceled, {stale} stale completions"
            );
            ensure!(
                !self.join.is_finished(),
                "the worker pool stopped before the tasks were done"
            );
            if Instant::now() >= deadline {
                bail!(
                    "only {} of {target} tasks succeeded within {PHASE_TIMEOUT:?}",
                    m.succeeded.load(Ordering::Relaxed)
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops the pool gracefully and reports whether it ran without error.
    pub(crate) async fn stop(self) -> Result<()> {
        self.shutdown.cancel();
        self.join
            .await
            .context("the worker pool panicked")?
            .context("the worker pool failed")
    }
}

/// `count` no-op tasks titled `{prefix} {i}`, built before any clock starts.
pub(crate) fn noop_tasks(prefix: &str, count: u64) -> Vec<NewTask> {
    (0..count)
        .map(|i| NewTask::new(format!("{prefix} {i}")))
        .collect()
}

/// Fails unless every task in the store has succeeded.
pub(crate) async fn ensure_all_succeeded(store: &Store) -> Result<u64> {
    let counts = store.count_by_state().await?;
    let mut succeeded = 0;
    for (state, n) in counts {
        if state == TaskState::Succeeded {
            succeeded = n as u64;
        } else {
            ensure!(
                n == 0,
                "{n} tasks are {state}, expected every task succeeded"
            );
        }
    }
    Ok(succeeded)
}

async fn enqueue(store: &Store, tasks: &[NewTask], batch: usize) -> Result<()> {
    for chunk in tasks.chunks(batch) {
        store.create_tasks(chunk).await.context("creating tasks")?;
    }
    Ok(())
}

/// The headline: tasks created while a running pool drains them.
pub async fn concurrent(store: &Store, config: &QueueConfig) -> Result<Concurrent> {
    let tasks = noop_tasks("concurrent", config.tasks);
    let pool = RunningPool::start(store, config, None)?;
    tokio::time::sleep(SETTLE).await;
    let measured = async {
        let cpu_before = process_cpu();
        let started = Instant::now();
        enqueue(store, &tasks, config.enqueue_batch).await?;
        let enqueued = started.elapsed();
        pool.wait_succeeded(config.tasks, started + PHASE_TIMEOUT)
            .await?;
        let elapsed = started.elapsed();
        let cpu = process_cpu()
            .zip(cpu_before)
            .map(|(after, before)| after.saturating_sub(before));
        Ok::<_, anyhow::Error>(Concurrent {
            tasks: config.tasks,
            elapsed,
            enqueue: enqueued,
            cpu,
        })
    }
    .await;
    let stopped = pool.stop().await;
    let measured = measured?;
    stopped?;
    ensure_all_succeeded(store).await?;
    Ok(measured)
}

/// Enqueue with no pool, then drain with one, each timed on its own.
pub async fn split(store: &Store, config: &QueueConfig) -> Result<Split> {
    let tasks = noop_tasks("split", config.tasks);
    let started = Instant::now();
    enqueue(store, &tasks, config.enqueue_batch).await?;
    let enqueued = started.elapsed();

    let drain_started = Instant::now();
    let pool = RunningPool::start(store, config, None)?;
    let drained = pool
        .wait_succeeded(config.tasks, drain_started + PHASE_TIMEOUT)
        .await
        .map(|()| drain_started.elapsed());
    let stopped = pool.stop().await;
    let drain = drained?;
    stopped?;
    ensure_all_succeeded(store).await?;
    Ok(Split {
        tasks: config.tasks,
        enqueue: enqueued,
        drain,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_the_command_name_whatever_it_holds() {
        // A name with spaces and parentheses; utime 250 and stime 37 ticks.
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 800 0 0 0 250 37 0 0 20 0 9 0 100 \
                    0 0";
        assert_eq!(cpu_of_stat(stat), Some(Duration::from_millis(2870)));
        assert_eq!(cpu_of_stat("4242 (cut) S 1 2"), None);
        assert_eq!(cpu_of_stat("no parenthesis"), None);
    }

    #[test]
    fn the_cpu_time_of_this_process_grows_as_it_works() {
        let before = process_cpu().expect("/proc/self/stat on Linux");
        // Work until the next clock tick is counted: on a loaded machine that may take a while
        // of wall time, which is why the bound is generous.
        let start = Instant::now();
        let mut x = 0u64;
        let mut after = before;
        while after == before && start.elapsed() < Duration::from_secs(30) {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            after = process_cpu().unwrap();
        }
        assert!(after > before, "{before:?} then {after:?}");
    }
}
