//! The scheduler benchmark: figures, not a test. Prints one JSON object per line:
//!
//! - `lateness`: 10,000 active per-minute automations spread over the seconds of the minute, fired
//!   by the real scheduler loop on the system clock. Lateness is the time from each slot to the
//!   moment its task is first visible to another reader of the store (a watcher woken by the
//!   store's commit notification reads new tasks, and stamps each with when its read began), so a
//!   slow pass or a slow commit shows; the task's `created_at` is the pass's start and would hide
//!   both. The slots overdue after creating the automations are caught up by one pass before
//!   timing starts, and the first seconds of the loop are not measured either. Three runs, one line
//!   each with p50, p99 and max, then a `lateness_summary` line with the median of each figure
//!   over the runs and the worst max.
//! - `burst`: 100,000 automations whose slots are due at the same instant; the time one
//!   `run_once` takes to record them all with their tasks.
//! - `idle_cpu`: the scheduler loop with 100,000 automations and nothing due; the process's CPU
//!   time over wall time.
//!
//! Run: `cargo run --release -p orchestrator-scheduler --example scheduler_bench [SECONDS]
//! [lateness]` (SECONDS, default 20, is how long each lateness run and the idle phase last;
//! `lateness` runs only that part). SQLite in a
//! temporary directory with synchronous=NORMAL, so that setting up 110,000 automations takes
//! seconds; set ORCHESTRATOR_BENCH_DATABASE_URL=postgres://... to run on PostgreSQL instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use orchestrator_scheduler::{ManualClock, Scheduler, SchedulerConfig, SystemClock, next_fire};
use orchestrator_store::{SOURCE_CLI, SqliteSync, Store, StoreOptions, TaskPage};
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

/// Lateness runs, whose figures are printed each and then as medians.
const RUNS: usize = 3;
/// The first seconds of each run's loop are not measured: its first pass still fires the slots
/// that came due between the catch-up (or the previous run) and its start.
const WARM_UP_MS: i64 = 2_000;

struct Lateness {
    slots: usize,
    p50: i64,
    p99: i64,
    max: i64,
}

/// Runs the real scheduler loop for `seconds` and measures, for each slot that came due in the
/// run (after the warm-up), how late its task became visible.
async fn lateness_run(store: &Store, seconds: u64) -> Lateness {
    let scheduler = Scheduler::new(
        store.clone(),
        SchedulerConfig::new("bench"),
        Arc::new(SystemClock),
    )
    .unwrap();
    let stop_watch = CancellationToken::new();
    let watcher = tokio::spawn(watch_new_tasks(store.clone(), stop_watch.clone()));
    let stop = CancellationToken::new();
    let from = now_millis() + WARM_UP_MS;
    let running = tokio::spawn(scheduler.run(stop.clone()));
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.cancel();
    running.await.unwrap();
    // Slots due in the last second may not have fired before the loop stopped.
    let until = now_millis() - 1_000;
    stop_watch.cancel();
    let seen = watcher.await.unwrap();
    let mut late: Vec<i64> = seen
        .iter()
        .filter(|(slot_at, _)| (from..until).contains(slot_at))
        .map(|(slot_at, seen_at)| seen_at - slot_at)
        .collect();
    late.sort_unstable();
    Lateness {
        slots: late.len(),
        p50: percentile(&late, 0.50),
        p99: percentile(&late, 0.99),
        max: late.last().copied().unwrap_or(0),
    }
}

/// Reads the tasks created after it started, each time the store says work may have arrived
/// (after each commit on SQLite, on NOTIFY on PostgreSQL; a short poll covers a lost one), and
/// returns each task's slot with when the read that first found it began: its task was committed
/// by then. Once `stop` is cancelled it reads one last time and returns.
async fn watch_new_tasks(store: Store, stop: CancellationToken) -> Vec<(i64, i64)> {
    const PAGE: u64 = 1_000;
    let mut wakeup = store.wakeup().await;
    let newest = |page: &[orchestrator_store::Task]| page.first().map(|t| t.id.0).unwrap_or(0);
    let first = store
        .task_page(&TaskPage {
            limit: 1,
            ..TaskPage::default()
        })
        .await
        .unwrap();
    let mut last = newest(&first);
    let mut seen = Vec::new();
    loop {
        let done = stop.is_cancelled();
        wakeup.mark_seen();
        let at = now_millis();
        let mut before = None;
        let mut top = last;
        'pages: loop {
            let page = store
                .task_page(&TaskPage {
                    before,
                    limit: PAGE,
                    ..TaskPage::default()
                })
                .await
                .unwrap();
            top = top.max(newest(&page));
            for task in &page {
                if task.id.0 <= last {
                    break 'pages;
                }
                if let Some(slot_at) = task.slot_at {
                    seen.push((slot_at, at));
                }
            }
            if (page.len() as u64) < PAGE {
                break;
            }
            before = page.last().map(|t| t.id);
        }
        last = top;
        if done {
            return seen;
        }
        tokio::select! {
            () = stop.cancelled() => {}
            () = wakeup.wait(Duration::from_millis(100)) => {}
        }
    }
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
    // Creating them takes a while, and the slots that came due meanwhile are late by
    // construction: one pass catches them up before anything is timed.
    let catch_up = Scheduler::new(
        store.clone(),
        SchedulerConfig::new("bench"),
        Arc::new(SystemClock),
    )
    .unwrap()
    .run_once(now_millis())
    .await
    .unwrap();
    let mut runs = Vec::new();
    for run in 1..=RUNS {
        let figures = lateness_run(&store, seconds).await;
        println!(
            "{}",
            json!({
                "bench": "lateness",
                "backend": store.backend().as_str(),
                "run": run,
                "automations": 10_000,
                "seconds": seconds,
                "caught_up_before_timing": catch_up.fired,
                "slots": figures.slots,
                "p50_ms": figures.p50,
                "p99_ms": figures.p99,
                "max_ms": figures.max,
            })
        );
        runs.push(figures);
    }
    let median = |f: fn(&Lateness) -> i64| {
        let mut v: Vec<i64> = runs.iter().map(f).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    println!(
        "{}",
        json!({
            "bench": "lateness_summary",
            "backend": store.backend().as_str(),
            "runs": RUNS,
            "median_p50_ms": median(|r| r.p50),
            "median_p99_ms": median(|r| r.p99),
            "median_max_ms": median(|r| r.max),
            "worst_max_ms": runs.iter().map(|r| r.max).max().unwrap_or(0),
        })
    );
    store.close().await;
    if std::env::args().nth(2).as_deref() == Some("lateness") {
        return;
    }

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
