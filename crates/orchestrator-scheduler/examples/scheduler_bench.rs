//! The scheduler benchmark: figures, not a test. Prints one JSON object per line:
//!
//! - `lateness`: 10,000 active per-minute automations spread over the seconds of the minute, fired
//!   by the real scheduler loop on the system clock; p50 and p99 of the time from each slot to the
//!   insertion of its task (the task's `created_at`).
//! - `burst`: 100,000 automations whose slots are due at the same instant; the time one
//!   `run_once` takes to record them all with their tasks.
//! - `idle_cpu`: the scheduler loop with 100,000 automations and nothing due; the process's CPU
//!   time over wall time.
//!
//! Run: `cargo run --release -p orchestrator-scheduler --example scheduler_bench [SECONDS]`
//! (SECONDS, default 20, is how long the lateness and idle phases run). SQLite in a temporary
//! directory with synchronous=NORMAL, so that setting up 110,000 automations takes seconds; set
//! ORCHESTRATOR_BENCH_DATABASE_URL=postgres://... to run on PostgreSQL instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use orchestrator_scheduler::{ManualClock, Scheduler, SchedulerConfig, SystemClock, next_fire};
use orchestrator_store::{SOURCE_CLI, SqliteSync, Store, StoreOptions, TaskFilter};
use orchestrator_types::{AutomationSpec, GateSpec, Overlap, now_millis};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

async fn open(dir: &std::path::Path, name: &str) -> Store {
    let options = StoreOptions {
        sqlite_sync: SqliteSync::Normal,
        ..StoreOptions::default()
    };
    match std::env::var("ORCHESTRATOR_BENCH_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Store::open(&url, &options).await.unwrap(),
        _ => Store::open_sqlite(&dir.join(name), &options).await.unwrap(),
    }
}

fn spec(name: String, schedule: String) -> AutomationSpec {
    let mut spec = AutomationSpec::new(name, schedule);
    spec.workspaces.push("/tmp".into());
    spec.template.gates.push(GateSpec::from_command("true"));
    spec.overlap = Overlap::Allow;
    spec
}

async fn create_many(store: &Store, n: usize, schedule: impl Fn(usize) -> String, now: i64) {
    let mut pending = Vec::new();
    for i in 0..n {
        let store = store.clone();
        let spec = spec(format!("a{i:06}"), schedule(i));
        pending.push(tokio::spawn(async move {
            let next = next_fire(&spec, now).unwrap();
            store
                .create_automation(&spec, SOURCE_CLI, None, next)
                .await
                .unwrap();
        }));
        if pending.len() >= 64 {
            for p in pending.drain(..) {
                p.await.unwrap();
            }
        }
    }
    for p in pending {
        p.await.unwrap();
    }
}

fn cpu_seconds() -> f64 {
    // utime + stime of this process, in clock ticks (100 per second on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();

    // Lateness: 10,000 per-minute automations, each on its own second of the minute.
    let store = open(dir.path(), "lateness.db").await;
    let now = now_millis();
    create_many(&store, 10_000, |i| format!("{} * * * * *", i % 60), now).await;
    let scheduler = Scheduler::new(
        store.clone(),
        SchedulerConfig::new("bench"),
        Arc::new(SystemClock),
    )
    .unwrap();
    let stop = CancellationToken::new();
    // Creating 10,000 automations takes a while; the slots that came due meanwhile are caught up
    // late by construction, so only slots after the scheduler started are measured.
    let started = now_millis();
    let running = tokio::spawn(scheduler.run(stop.clone()));
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.cancel();
    running.await.unwrap();
    let tasks = store
        .list_tasks(&TaskFilter {
            limit: Some(1_000_000),
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    let mut late: Vec<i64> = tasks
        .iter()
        .filter_map(|t| {
            t.slot_at
                .filter(|s| *s >= started)
                .map(|s| t.created_at - s)
        })
        .collect();
    late.sort_unstable();
    println!(
        "{}",
        json!({
            "bench": "lateness",
            "backend": store.backend().as_str(),
            "automations": 10_000,
            "seconds": seconds,
            "slots": late.len(),
            "p50_ms": percentile(&late, 0.50),
            "p99_ms": percentile(&late, 0.99),
            "max_ms": late.last().copied().unwrap_or(0),
        })
    );
    store.close().await;

    // Burst: 100,000 slots due at the same instant (every automation at 03:00 on January 1st).
    let store = open(dir.path(), "burst.db").await;
    let now = now_millis();
    let setup = Instant::now();
    create_many(&store, 100_000, |_| "0 3 1 1 *".to_owned(), now).await;
    let setup = setup.elapsed();
    let due = store
        .automation("a000000")
        .await
        .unwrap()
        .next_fire_at
        .unwrap();
    let clock = Arc::new(ManualClock::new(due));
    let scheduler = Scheduler::new(store.clone(), SchedulerConfig::new("bench"), clock).unwrap();
    let start = Instant::now();
    let counts = scheduler.run_once(due).await.unwrap();
    let took = start.elapsed();
    println!(
        "{}",
        json!({
            "bench": "burst",
            "backend": store.backend().as_str(),
            "automations": 100_000,
            "fired": counts.fired,
            "tasks": counts.tasks,
            "seconds": took.as_secs_f64(),
            "slots_per_second": counts.fired as f64 / took.as_secs_f64(),
            "setup_seconds": setup.as_secs_f64(),
        })
    );

    // Idle: the same 100,000 automations, next due in a year, under the real loop.
    let scheduler = Scheduler::new(
        store.clone(),
        SchedulerConfig::new("bench"),
        Arc::new(SystemClock),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let cpu_before = cpu_seconds();
    let wall = Instant::now();
    let running = tokio::spawn(scheduler.run(stop.clone()));
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.cancel();
    running.await.unwrap();
    let cpu = cpu_seconds() - cpu_before;
    println!(
        "{}",
        json!({
            "bench": "idle_cpu",
            "backend": store.backend().as_str(),
            "automations": 100_000,
            "seconds": wall.elapsed().as_secs_f64(),
            "cpu_percent_of_a_core": 100.0 * cpu / wall.elapsed().as_secs_f64(),
        })
    );
    store.close().await;
}
