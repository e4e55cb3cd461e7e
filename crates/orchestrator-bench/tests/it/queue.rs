//! The queue benchmark at a tiny size on SQLite: the raw baseline and the real path run, every task
//! succeeds, and the JSON line carries every field the issue names.

use orchestrator_bench::queue::{self, BenchDatabase, QueueConfig};
use orchestrator_store::{Backend, Store, StoreOptions};
use orchestrator_types::TaskState;
use std::time::Duration;

const TASKS: u64 = 200;
const LATENCY_TASKS: usize = 10;

fn tiny() -> QueueConfig {
    QueueConfig {
        tasks: TASKS,
        slots: 16,
        enqueue_batch: 50,
        raw_batch: 100,
        latency_tasks: LATENCY_TASKS,
        latency_interval: Duration::ZERO,
        backends: vec![Backend::Sqlite],
        // The peer takes seconds even at this size; its plumbing is exercised by the benchmark.
        peer: None,
        ..QueueConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_sqlite_run_measures_every_phase_and_every_task_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let db = BenchDatabase::sqlite_in(dir.path());
    let config = tiny();
    config.validate().unwrap();

    let figures = queue::measure_run(&db, &config, &|_| {}).await.unwrap();
    assert_eq!(figures.raw.jobs, TASKS);
    assert_eq!(figures.concurrent.tasks, TASKS);
    assert_eq!(figures.split.tasks, TASKS);
    assert_eq!(figures.latency.samples_ms.len(), LATENCY_TASKS);
    assert!(figures.peer.is_none());

    // Every task the real path created succeeded: the concurrent and split phases, and the
    // latency samples.
    let store = Store::open(&db.store_url(), &StoreOptions::default())
        .await
        .unwrap();
    let counts = store.count_by_state().await.unwrap();
    for (state, n) in counts {
        let want = if state == TaskState::Succeeded {
            2 * TASKS as i64 + LATENCY_TASKS as i64
        } else {
            0
        };
        assert_eq!(n, want, "tasks {state}");
    }
    store.close().await;

    // Every raw job was claimed and completed, in its own table of the same file.
    let raw = sqlx::SqlitePool::connect(&format!(
        "sqlite://{}",
        db.sqlite_store_path().unwrap().display()
    ))
    .await
    .unwrap();
    let done: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM bench_raw_jobs WHERE state = 'done'")
        .fetch_one(&raw)
        .await
        .unwrap();
    assert_eq!(done, TASKS as i64);
    raw.close().await;

    let line = queue::line(Backend::Sqlite, &config, std::slice::from_ref(&figures)).to_json();
    assert!(!line.contains('\n'), "one object per line: {line}");
    let json: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(json["backend"], "sqlite");
    assert_eq!(json["tasks"], TASKS);
    assert_eq!(json["median_of"], 1);
    for field in [
        "tasks_per_s",
        "raw_batched_per_s",
        "ratio",
        "start_p50_ms",
        "start_p99_ms",
        "enqueue_per_s",
        "drain_per_s",
    ] {
        assert!(
            json[field].as_f64().is_some_and(|v| v > 0.0),
            "{field} in {line}"
        );
    }
    // Counted in clock ticks of 10 ms, a tiny run's CPU may round to nothing, but it is read.
    assert!(
        json["cpu_us_per_task"].as_f64().is_some_and(|v| v >= 0.0),
        "cpu_us_per_task in {line}"
    );
    assert!(json.get("peer").is_none(), "the peer was skipped: {line}");
    assert!(json["targets_met"].is_object(), "{line}");
}

#[test]
fn an_unreachable_backend_gets_a_line_with_its_error() {
    let config = QueueConfig {
        backends: vec![Backend::Postgres],
        ..QueueConfig::default()
    };
    let line = queue::error_line(Backend::Postgres, &config, "no answer").to_json();
    let json: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(json["backend"], "postgres");
    assert_eq!(json["error"], "no answer");
}
