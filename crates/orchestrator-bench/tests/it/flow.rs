//! The flow benchmark at a tiny size on SQLite: every task succeeds within the server's slots,
//! the repositories take turns, and the JSON line carries the figures the issue names, the turn
//! overhead idle and under load among them.

use orchestrator_bench::flow::{self, FlowConfig};
use orchestrator_store::Backend;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_sqlite_run_prints_every_figure_and_fails_no_task() {
    let config = FlowConfig {
        tasks: 40,
        slots: 2,
        latency_ms: 20,
        turns: 2,
        workers: 8,
        daemons: vec![1],
        backends: vec![Backend::Sqlite],
        postgres_url: String::new(),
        per_repository: None,
    };
    let mut lines = Vec::new();
    flow::run(&config, |line| {
        lines.push(line.to_owned());
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let figures: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(figures["failed"], 0, "{figures}");
    assert_eq!(figures["refused"], 0, "{figures}");
    let most = figures["most_in_flight"].as_u64().unwrap();
    assert!((1..=2).contains(&most), "{figures}");
    // 28 tasks of one repository and 4 of each other: in the queue's order the large one would
    // finish 0.7 of the tasks while all had work (a spread of 0.45); taking turns, about 0.25.
    let spread = figures["share_spread"].as_f64().unwrap();
    assert!(
        spread < 0.2,
        "the repositories did not take turns: {figures}"
    );
    for phase in ["idle", "load"] {
        for q in ["p50", "p99"] {
            let ms = figures["turn_overhead_ms"][phase][q].as_f64().unwrap();
            assert!(ms > 0.0, "{phase} {q}: {figures}");
        }
    }
    assert!(figures["peak_rss_mib"].as_f64().unwrap() > 0.0);
}
