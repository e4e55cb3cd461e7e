//! `--previous` through the real binary: a tiny queue run on SQLite is set beside the one before it,
//! and an earlier output that is not JSON lines is refused before anything runs.

use serde_json::Value;
use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    match Command::new(env!("CARGO_BIN_EXE_orchestrator-bench"))
        .args(args)
        .output()
    {
        Ok(output) => output,
        Err(e) => panic!("cannot run orchestrator-bench: {e}"),
    }
}

const TINY: [&str; 10] = [
    "queue",
    "--backend",
    "sqlite",
    "--no-peer",
    "--tasks",
    "100",
    "--latency-tasks",
    "5",
    "--latency-interval-ms",
    "0",
];

#[test]
fn a_run_is_set_beside_the_run_before_it() {
    let first = bench(&TINY);
    assert!(first.status.success(), "{first:?}");
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before.json");
    std::fs::write(&before, &first.stdout).unwrap();
    let earlier: Value = serde_json::from_slice(&first.stdout).unwrap();

    let mut args = TINY.to_vec();
    args.extend(["--previous", before.to_str().unwrap()]);
    let second = bench(&args);
    assert!(second.status.success(), "{second:?}");
    let now: Value = serde_json::from_slice(&second.stdout).unwrap();
    for figure in ["tasks_per_s", "raw_batched_per_s", "start_p50_ms", "ratio"] {
        let old = earlier[figure].as_f64().unwrap();
        assert_eq!(now["previous"][figure].as_f64(), Some(old), "{figure}");
        let ratio = now["ratio_to_previous"][figure].as_f64().unwrap();
        let expected = now[figure].as_f64().unwrap() / old;
        assert!(
            (ratio - expected).abs() < 0.001,
            "{figure}: {ratio} against {expected}"
        );
    }
    // Settings are not figures.
    assert!(now["previous"].get("tasks").is_none(), "{now}");
}

#[test]
fn an_earlier_output_that_is_not_json_lines_is_refused_first() {
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before.txt");
    std::fs::write(&before, "{\"bench\": \"queue\"}\nerror: something\n").unwrap();
    let mut args = TINY.to_vec();
    args.extend(["--previous", before.to_str().unwrap()]);
    let out = bench(&args);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--previous") && stderr.contains("line 2"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing ran: {out:?}");
}
