//! The API benchmark: figures, not a test. With 100,000 tasks in the store (1% canceled, one
//! automation's 1,000), serves `/api/v1` on a loopback port and prints one JSON object per line:
//!
//! - `list`: p50 and p99 of `GET /api/v1/tasks` per query shape (the first page, a page deep in the
//!   keyset, a state filter, an automation filter, a title search), with 1 and with 8 clients at
//!   once;
//! - `sse`: the process's CPU use over 3 s with no stream open and with 100 event streams open on
//!   one running task (told by the daemon's one watcher when the task changes, and looking in the
//!   store every 2 s besides), and the list's first page while they are open;
//! - `sse_lists`: the same with 100 streams of the tasks list's changes open while a task changes
//!   ten times a second.
//!
//! Target (DESIGN.md): p99 of the list under 50 ms on both backends.
//!
//! Run: `cargo run --release -p orchestrator-web --example api_bench [sqlite|postgres|both]`
//! (default both). PostgreSQL is the test server (`ORCHESTRATOR_TEST_DATABASE_URL`, a fresh
//! database).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use orchestrator_store::{SOURCE_CLI, Store};
use orchestrator_types::{AutomationSpec, GateSpec, NewTask, TaskId, now_millis};
use orchestrator_web::Web;
use serde_json::json;

const TASKS: usize = 100_000;
const REQUESTS: usize = 400;
const TOKEN: &str = "bench";

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

async fn fill(store: &Store, ws: &str) -> (i64, TaskId) {
    let started = Instant::now();
    let words = [
        "parser",
        "lexer",
        "deploy",
        "nightly",
        "flaky test",
        "docs",
        "refactor",
    ];
    let mut batch = Vec::with_capacity(1000);
    let mut ids = Vec::with_capacity(TASKS);
    for i in 0..TASKS - 1000 {
        let mut task = NewTask::new(format!("{} #{i}", words[i % words.len()])).with_gate("true");
        // One in a thousand works on another checkout: a rare repository.
        task.workspace = Some(if i % 1000 == 7 {
            format!("{ws}/rare")
        } else {
            ws.to_owned()
        });
        batch.push(task);
        if batch.len() == 1000 {
            ids.extend(store.create_tasks(&batch).await.unwrap());
            batch.clear();
        }
    }
    for id in ids.iter().step_by(100) {
        store.cancel_task(*id).await.unwrap();
    }
    // One automation's thousand tasks, through its manual slots.
    let mut spec = AutomationSpec::new("bench", "0 3 * * *");
    spec.workspaces = vec![ws.to_owned()];
    spec.template.gates = vec![GateSpec::from_command("true")];
    let automation = orchestrator_scheduler::manage::create(store, &spec, SOURCE_CLI, now_millis())
        .await
        .unwrap();
    for n in 0..1000 {
        orchestrator_scheduler::run_now(store, &automation, true, "bench", now_millis() + n)
            .await
            .unwrap();
    }
    // A daemon's rescuer writes the titles of new tasks to SQLite's search index within a pass
    // (5 s); a store that grew over time has them there.
    store.index_titles().await.unwrap();
    // The statistics a PostgreSQL store that grew over time has: autovacuum gathers them. (A
    // SQLite store has none unless someone runs ANALYZE, and the store never does.)
    if store.backend() == orchestrator_store::Backend::Postgres {
        store.analyze().await.unwrap();
    }
    eprintln!(
        "filled {TASKS} tasks in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // One in a hundred was canceled (every hundredth from the first); the one after the middle
    // is still queued, for the streams to watch.
    (automation.id, ids[ids.len() / 2 + 1])
}

async fn measure(client: &reqwest::Client, url: &str, clients: usize) -> (f64, f64) {
    let per_client = REQUESTS / clients;
    let mut handles = Vec::new();
    for _ in 0..clients {
        let client = client.clone();
        let url = url.to_owned();
        handles.push(tokio::spawn(async move {
            let mut times = Vec::with_capacity(per_client);
            for _ in 0..per_client {
                let started = Instant::now();
                let response = client.get(&url).bearer_auth(TOKEN).send().await.unwrap();
                assert_eq!(response.status(), 200, "{url}");
                response.bytes().await.unwrap();
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
            times
        }));
    }
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await.unwrap());
    }
    all.sort_by(f64::total_cmp);
    (percentile(&all, 0.5), percentile(&all, 0.99))
}

async fn bench(backend: &str, store: Store) {
    let ws = tempfile::tempdir().unwrap();
    let (_automation, middle) = fill(&store, &ws.path().display().to_string()).await;
    let app = orchestrator_web::router(Web::new(store.clone(), Arc::from(TOKEN), false));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    let shapes = [
        ("first_page", "/api/v1/tasks?limit=50".to_owned()),
        (
            "deep_page",
            format!("/api/v1/tasks?limit=50&before={}", middle.0),
        ),
        (
            "state_canceled",
            "/api/v1/tasks?limit=50&state=canceled".to_owned(),
        ),
        (
            "automation",
            "/api/v1/tasks?limit=50&automation=bench".to_owned(),
        ),
        ("title_search", "/api/v1/tasks?limit=50&q=flaky".to_owned()),
        (
            "repository_rare",
            format!(
                "/api/v1/tasks?limit=50&repository={}/rare",
                ws.path().display()
            ),
        ),
        (
            "verdict_none_match",
            "/api/v1/tasks?limit=50&verdict=timed_out".to_owned(),
        ),
        (
            "title_search_rare",
            "/api/v1/tasks?limit=50&q=%2399999".to_owned(),
        ),
    ];
    for (shape, path) in &shapes {
        for clients in [1, 8] {
            let (p50, p99) = measure(&client, &format!("{base}{path}"), clients).await;
            println!(
                "{}",
                json!({"bench": "list", "backend": backend, "shape": shape, "clients": clients,
                       "tasks": TASKS, "p50_ms": (p50 * 100.0).round() / 100.0, "p99_ms": (p99 * 100.0).round() / 100.0,
                       "target_p99_ms": 50, "met": p99 < 50.0})
            );
        }
    }
    // 100 open streams on one running task.
    let (task, _lease) = store
        .claim_task("bench", middle, 600_000)
        .await
        .unwrap()
        .unwrap();
    let idle = cpu_percent(Duration::from_secs(3)).await;
    let mut streams = Vec::new();
    for _ in 0..100 {
        let response = client
            .get(format!("{base}/api/v1/tasks/{}/events/stream", task.id.0))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        streams.push(response);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let streaming = cpu_percent(Duration::from_secs(3)).await;
    let (p50, p99) = measure(&client, &format!("{base}/api/v1/tasks?limit=50"), 1).await;
    println!(
        "{}",
        json!({"bench": "sse", "backend": backend, "open_streams": streams.len(),
               "cpu_percent_without_streams": idle, "cpu_percent_with_streams": streaming,
               "list_p50_ms": (p50 * 100.0).round() / 100.0, "list_p99_ms": (p99 * 100.0).round() / 100.0})
    );
    drop(streams);

    // 100 streams of the list's changes while a task changes ten times a second: one watcher
    // reads the store for all of them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = cpu_percent(Duration::from_secs(3)).await;
    let mut lists = Vec::new();
    for _ in 0..100 {
        let response = client
            .get(format!("{base}/api/v1/tasks/stream"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        lists.push(tokio::spawn(async move {
            let mut response = response;
            let mut bytes = 0;
            while let Ok(Some(chunk)) = response.chunk().await {
                bytes += chunk.len();
            }
            bytes
        }));
    }
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut changes = 0u64;
            loop {
                store.post_input(task.id, "more").await.unwrap();
                changes += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                if changes > 10_000 {
                    break;
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let streaming = cpu_percent(Duration::from_secs(3)).await;
    let (p50, p99) = measure(&client, &format!("{base}/api/v1/tasks?limit=50"), 1).await;
    println!(
        "{}",
        json!({"bench": "sse_lists", "backend": backend, "open_streams": lists.len(),
               "changes_per_second": 10,
               "cpu_percent_without_streams": idle, "cpu_percent_with_streams": streaming,
               "list_p50_ms": (p50 * 100.0).round() / 100.0, "list_p99_ms": (p99 * 100.0).round() / 100.0})
    );
    writer.abort();
    for list in lists {
        list.abort();
    }
}

/// This process's CPU time (user and system), from /proc/self/stat, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// CPU use of this process over `span`, in percent of one core.
async fn cpu_percent(span: Duration) -> f64 {
    let before = cpu_seconds();
    tokio::time::sleep(span).await;
    ((cpu_seconds() - before) / span.as_secs_f64() * 1000.0).round() / 10.0
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "both".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        if which == "sqlite" || which == "both" {
            let db = orchestrator_test_support::sqlite_store().await;
            bench("sqlite", db.store.clone()).await;
        }
        if which == "postgres" || which == "both" {
            match orchestrator_test_support::postgres_store().await {
                Some(db) => bench("postgres", db.store.clone()).await,
                None => eprintln!("PostgreSQL skipped"),
            }
        }
    });
}
