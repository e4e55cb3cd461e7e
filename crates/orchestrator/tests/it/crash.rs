//! Crash safety: `serve` killed with SIGKILL in the middle of work loses nothing and runs nothing to
//! success twice, on SQLite and on PostgreSQL.

use crate::support::{Env, Serve};
use nix::sys::signal::Signal;
use std::collections::HashSet;
use std::time::{Duration, Instant};

fn crash_and_recover(env: &Env) {
    const TASKS: usize = 40;
    let ids: Vec<i64> = (0..TASKS)
        .map(|i| env.create(&format!("t{i}"), &["sleep 0.3; echo ok"], env.home()))
        .collect();
    let lease = ["--workers", "4", "--lease-seconds", "2"];

    // Kill the daemon twice while gates are in flight.
    for round in 0..2 {
        let serve: Serve = env.serve(&lease);
        let start = Instant::now();
        loop {
            let running = env
                .tasks()
                .iter()
                .filter(|t| t["state"] == "running")
                .count();
            let done = env
                .tasks()
                .iter()
                .filter(|t| t["state"] == "succeeded")
                .count();
            if running > 0 && done > round * 4 {
                break;
            }
            assert!(start.elapsed() < crate::support::PATIENCE, "no progress");
            std::thread::sleep(Duration::from_millis(50));
        }
        serve.signal(Signal::SIGKILL);
        drop(serve);
    }

    let _serve = env.serve(&lease);
    for id in &ids {
        env.wait_task(*id, "succeeded", |t| {
            t["state"]
                .as_str()
                .is_some_and(|s| s == "succeeded" || s == "failed")
        });
    }
    let mut reclaimed = 0;
    for id in &ids {
        let task = env.task(*id);
        assert_eq!(task["state"], "succeeded", "{task}");
        let events = env.events(*id);
        let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert_eq!(
            seqs,
            (1..=events.len() as i64).collect::<Vec<_>>(),
            "task {id}: gap or repeat"
        );
        let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds.iter().filter(|k| **k == "succeeded").count(),
            1,
            "{kinds:?}"
        );
        assert_eq!(
            kinds.iter().filter(|k| **k == "created").count(),
            1,
            "{kinds:?}"
        );
        assert!(!kinds.contains(&"failed"), "{kinds:?}");
        let claims = kinds.iter().filter(|k| **k == "claimed").count();
        if claims > 1 {
            reclaimed += 1;
            assert!(
                kinds.contains(&"rescued"),
                "re-run without a rescue: {kinds:?}"
            );
        }
        // Every recorded gate run belongs to a distinct attempt.
        let runs = task["gate_runs"].as_array().unwrap();
        let attempts: HashSet<i64> = runs
            .iter()
            .map(|r| r["attempt"].as_i64().unwrap())
            .collect();
        assert_eq!(attempts.len(), runs.len(), "{task}");
    }
    assert!(
        reclaimed > 0,
        "the kill interrupted no task; the test proved nothing"
    );
}

#[test]
fn sigkill_loses_nothing_on_sqlite() {
    crash_and_recover(&Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_nothing_on_postgres() {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || crash_and_recover(&env))
        .await
        .unwrap();
}
