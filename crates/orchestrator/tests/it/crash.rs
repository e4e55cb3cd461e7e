//! Crash safety: `serve` killed with SIGKILL in the middle of work loses nothing and runs nothing to
//! success twice, on SQLite and on PostgreSQL.

use crate::support::{Env, Serve, assert_no_process_with, processes_with, unique_sleep, wait_for};
use nix::sys::signal::Signal;
use std::collections::HashSet;
use std::time::{Duration, Instant};

fn crash_and_recover(env: &Env) {
    const TASKS: usize = 40;
    let ids: Vec<i64> = (0..TASKS)
        .map(|i| env.create(&format!("t{i}"), &["sleep 0.3; echo ok"], &env.workspace()))
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

/// A gate of a daemon killed with SIGKILL runs on when it is unconfined (`person_gates = "full"`:
/// nothing ties an unconfined process group to its daemon) until the next daemon on the same home
/// starts: that one ends it before it runs anything, so the gate never runs twice at once in one
/// workspace. (A sandboxed gate, the default, dies with its daemon: bubblewrap's
/// `--die-with-parent`.)
#[test]
fn the_next_serve_ends_the_gates_a_killed_one_left_running() {
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        "[sandbox]\nperson_gates = \"full\"\n",
    )
    .unwrap();
    let sleep = unique_sleep();
    let id = env.create("long", &[&format!("sleep {sleep}")], &env.workspace());
    let first = env.serve(&["--lease-seconds", "2"]);
    wait_for(|| processes_with(&sleep).len() >= 2);
    first.signal(Signal::SIGKILL);
    drop(first);
    std::thread::sleep(Duration::from_millis(300));
    let orphans: Vec<String> = processes_with(&sleep)
        .iter()
        .filter_map(|p| p.split(':').next().map(str::to_owned))
        .collect();
    assert!(
        !orphans.is_empty(),
        "the gate died with its daemon; this test shows nothing"
    );

    let second = env.serve(&["--lease-seconds", "2"]);
    assert!(
        second.log().contains("ended 1 process group"),
        "{}",
        second.log()
    );
    // The rescued attempt starts the gate again; before that, the old one was gone.
    let rerun = std::time::Instant::now();
    loop {
        let events = env.events(id);
        if events.iter().filter(|e| e["kind"] == "claimed").count() >= 2 {
            break;
        }
        assert!(rerun.elapsed() < crate::support::PATIENCE, "never rescued");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The old gate's processes are gone (the rerun has new ones), and the cancel ends the rerun.
    wait_for(|| {
        // Gone, or a zombie waiting for an init that may never reap it.
        orphans.iter().all(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |stat| stat.contains(") Z "))
        })
    });
    env.run(&["task", "cancel", &id.to_string()]);
    env.wait_task(id, "canceled", |t| t["state"] == "canceled");
    assert_no_process_with(&sleep);
    drop(second);
}
