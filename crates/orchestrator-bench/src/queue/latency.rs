//! Enqueue-to-start latency: how long a task waits between `create_task` being called and its
//! attempt starting in a worker slot, when the pool has nothing else to do.
//!
//! Tasks are created one at a time. Each one's clock starts just before `create_task` and stops in
//! the pool's `StartHook`, which the slot calls as the attempt begins, so the figure covers the
//! create's commit, the wake-up, the claim's transaction and the hand-off to a slot, and nothing of
//! the benchmark's own bookkeeping. The next task is created only after the previous one has
//! completed and `interval` has passed, so every task finds the pool idle: this is the latency a
//! user sees on a quiet system, which is what DESIGN.md's target is about. (Under load a task waits
//! for a free slot, and that is a capacity question, answered by the throughput figures.)
//!
//! The hook cannot know a task's id before `create_task` returns (the slot may well start first), so
//! a task carries its sample's index in its title.

use super::QueueConfig;
use super::real_path::{PHASE_TIMEOUT, RunningPool, SETTLE, ensure_all_succeeded};
use super::stats::{millis, percentile};
use anyhow::{Context, Result, ensure};
use orchestrator_store::Store;
use orchestrator_types::NewTask;
use orchestrator_worker::StartHook;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

const TITLE_PREFIX: &str = "latency ";

/// Enqueue-to-start samples, in milliseconds, sorted; and the part of each that `create_task`
/// itself took (its commit), also sorted, which tells the create's share from the claim's.
#[derive(Debug, Clone)]
pub struct Latency {
    pub samples_ms: Vec<f64>,
    pub create_ms: Vec<f64>,
}

impl Latency {
    pub fn p50_ms(&self) -> Option<f64> {
        percentile(&self.samples_ms, 50.0)
    }

    pub fn p99_ms(&self) -> Option<f64> {
        percentile(&self.samples_ms, 99.0)
    }

    pub fn max_ms(&self) -> Option<f64> {
        self.samples_ms.last().copied()
    }

    pub fn create_p50_ms(&self) -> Option<f64> {
        percentile(&self.create_ms, 50.0)
    }
}

pub async fn measure(store: &Store, config: &QueueConfig) -> Result<Latency> {
    let count = config.latency_tasks;
    let started_at: Arc<Vec<OnceLock<Instant>>> =
        Arc::new((0..count).map(|_| OnceLock::new()).collect());
    let hook = {
        let started_at = started_at.clone();
        StartHook(Arc::new(move |task| {
            let index = task
                .title
                .strip_prefix(TITLE_PREFIX)
                .and_then(|i| i.parse::<usize>().ok());
            if let Some(slot) = index.and_then(|i| started_at.get(i)) {
                let _ = slot.set(Instant::now());
            }
        }))
    };
    let pool = RunningPool::start(store, config, Some(hook))?;
    tokio::time::sleep(SETTLE).await;
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let sampled = async {
        let mut created_at = Vec::with_capacity(count);
        for i in 0..count {
            let task = NewTask::new(format!("{TITLE_PREFIX}{i}"));
            let before = Instant::now();
            store.create_task(&task).await.context("creating a task")?;
            created_at.push((before, before.elapsed()));
            pool.wait_succeeded(i as u64 + 1, deadline).await?;
            tokio::time::sleep(config.latency_interval).await;
        }
        Ok::<_, anyhow::Error>(created_at)
    }
    .await;
    let stopped = pool.stop().await;
    let created_at = sampled?;
    stopped?;
    ensure_all_succeeded(store).await?;

    let mut samples_ms = Vec::with_capacity(count);
    let mut create_ms: Vec<f64> = created_at.iter().map(|(_, took)| millis(*took)).collect();
    for (i, (before, _)) in created_at.iter().enumerate() {
        let started = started_at
            .get(i)
            .and_then(|slot| slot.get())
            .with_context(|| {
                format!("task {TITLE_PREFIX}{i} succeeded but its start was not seen")
            })?;
        samples_ms.push(millis(started.saturating_duration_since(*before)));
    }
    ensure!(samples_ms.len() == count, "missing latency samples");
    samples_ms.sort_by(f64::total_cmp);
    create_ms.sort_by(f64::total_cmp);
    Ok(Latency {
        samples_ms,
        create_ms,
    })
}
