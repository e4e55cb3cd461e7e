//! The worker pool against a real store: tasks run to their end, and a slot that panics does not
//! hold its task forever.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod agent;
mod agent_real;
mod attempts;
mod automations;
mod checkpoint_resume;
mod checkpoints;
mod closure;
mod context;
mod docs;
mod first_request;
mod github;
mod model;
mod pulls;
mod real_servers;
mod repositories;
mod worktree;

use orchestrator_store::{Store, TaskFilter};
use orchestrator_types::{NewTask, TaskState};
use orchestrator_worker::{Metrics, PoolConfig, Rescuer, RescuerConfig, StartHook, WorkerPool};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

async fn wait_all(store: &Store, state: TaskState, n: usize) {
    let start = Instant::now();
    loop {
        let tasks = store.list_tasks(&TaskFilter::default()).await.unwrap();
        if tasks.len() == n && tasks.iter().all(|t| t.state == state) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "tasks never all became {state}: {:?}",
            tasks.iter().map(|t| (t.id, t.state)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_runs_gate_tasks_and_drains_on_shutdown() {
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let tasks: Vec<NewTask> = (0..20)
        .map(|i| {
            let mut t =
                NewTask::new(format!("t{i}")).with_gate(if i % 5 == 0 { "exit 1" } else { "true" });
            t.workspace = Some(ws.path().display().to_string());
            t
        })
        .collect();
    db.store.create_tasks(&tasks).await.unwrap();
    let metrics = Arc::new(Metrics::default());
    let mut config = PoolConfig::new("pool-test");
    config.slots = 3;
    let pool = WorkerPool::new(db.store.clone(), config, metrics.clone()).unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let start = Instant::now();
    loop {
        let done = db.store.count_by_state().await.unwrap();
        let finished: i64 = done
            .iter()
            .filter(|(s, _)| s.is_terminal())
            .map(|(_, n)| n)
            .sum();
        if finished == 20 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "{done:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    running.await.unwrap().unwrap();
    let counts = db.store.count_by_state().await.unwrap();
    let get = |s: TaskState| counts.iter().find(|(x, _)| *x == s).unwrap().1;
    assert_eq!(get(TaskState::Succeeded), 16);
    assert_eq!(get(TaskState::Failed), 4);
    let text = metrics.render(&counts);
    assert!(text.contains("orchestrator_claims_total 20"), "{text}");
    assert!(
        text.contains("orchestrator_gate_duration_seconds_count 20"),
        "{text}"
    );
    let workers = db.store.workers(10).await.unwrap();
    assert_eq!(workers.len(), 1);
    assert!(
        workers[0].stopped_at.is_some(),
        "the worker is marked stopped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_slot_releases_its_task_to_the_rescuer() {
    let db = orchestrator_test_support::sqlite_store().await;
    let id = db
        .store
        .create_task(&NewTask::new("unlucky"))
        .await
        .unwrap();
    let metrics = Arc::new(Metrics::default());
    let mut config = PoolConfig::new("panicky").with_lease(Duration::from_secs(1));
    // The first attempt's slot panics; the second runs normally.
    config.on_start = Some(StartHook(Arc::new(|task| {
        if task.attempt == 1 {
            panic!("injected panic in the slot");
        }
    })));
    let pool = WorkerPool::new(db.store.clone(), config, metrics.clone()).unwrap();
    let rescuer = Rescuer::new(
        db.store.clone(),
        RescuerConfig {
            interval: Duration::from_millis(200),
            backoff: orchestrator_worker::Backoff {
                base: Duration::from_millis(10),
                cap: Duration::from_millis(10),
                jitter: 0.0,
            },
            ..RescuerConfig::default()
        },
        metrics,
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let pool_task = tokio::spawn(pool.run(shutdown.clone()));
    let rescuer_task = tokio::spawn(rescuer.run(shutdown.clone()));
    wait_all(&db.store, TaskState::Succeeded, 1).await;
    shutdown.cancel();
    pool_task.await.unwrap().unwrap();
    rescuer_task.await.unwrap();
    let task = db.store.get_task(id).await.unwrap();
    assert_eq!(task.attempt, 2);
    let kinds: Vec<String> = db
        .store
        .events(id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        ["created", "claimed", "rescued", "claimed", "succeeded"]
    );
}

/// The rescuer's pass writes the titles of the tasks created since the last pass to SQLite's
/// search index (a creation leaves its title out of it since migration 0023), so that searches
/// read few titles not yet indexed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescuer_pass_indexes_the_titles_created_since_the_last() {
    let db = orchestrator_test_support::sqlite_store().await;
    let rescuer = Rescuer::new(
        db.store.clone(),
        RescuerConfig::default(),
        Arc::new(Metrics::default()),
    )
    .unwrap();
    for title in ["rotate the quokka keys", "feed the quokka"] {
        db.store.create_task(&NewTask::new(title)).await.unwrap();
    }
    rescuer
        .run_once(orchestrator_types::now_millis())
        .await
        .unwrap();
    assert_eq!(
        db.store.index_titles().await.unwrap(),
        0,
        "the pass left titles out of the index"
    );
}
