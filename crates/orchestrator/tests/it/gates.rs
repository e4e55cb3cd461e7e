//! Gates through the whole binary: a gigabyte of output in bounded memory, and timeouts that leave
//! no process behind.

use crate::support::{Env, assert_no_process_with, unique_sleep};
use std::time::Duration;

/// Highest resident set the process reached, from /proc (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
}

#[test]
fn a_gigabyte_of_output_stays_under_64_mib_and_keeps_head_and_tail() {
    let env = Env::sqlite();
    let ws = env.workspace().display().to_string();
    // 1 GiB of 100-byte lines, numbered at the start and the end so head and tail are recognisable.
    let gate = "echo FIRST-LINE; yes 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789 | head -c 1073741824; echo; echo LAST-LINE";
    let mut child = env
        .cmd(&["run", "--gate", gate, "--workspace", &ws])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut peak = 0;
    let status = loop {
        if let Some(kib) = peak_rss_kib(pid) {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    assert!(peak > 0, "could not read the process's memory");
    assert!(
        peak < 64 * 1024,
        "peak resident set {peak} KiB is over 64 MiB"
    );

    let id = env.tasks()[0]["id"].as_i64().unwrap();
    let log = env.task(id)["gates"][0]["log_artifact"]
        .as_i64()
        .unwrap()
        .to_string();
    let shown = env.json(&["artifact", "show", &log, "--json"]);
    let meta = &shown["meta"];
    let total = 1_073_741_824 + "FIRST-LINE\n\nLAST-LINE\n".len() as i64;
    assert_eq!(meta["original_bytes"], total);
    assert!(meta["cut_bytes"].as_i64().unwrap() > 1_000_000_000);
    let head = env.run(&["artifact", "show", &log, "--head", "1"]);
    assert_eq!(String::from_utf8_lossy(&head.stdout), "FIRST-LINE\n");
    let tail = env.run(&["artifact", "show", &log, "--tail", "1"]);
    assert_eq!(String::from_utf8_lossy(&tail.stdout), "LAST-LINE\n");
    let text = shown["text"].as_str().unwrap();
    assert!(text.contains("bytes cut by orchestrator"), "no marker");
}

#[test]
fn a_timed_out_gate_leaves_no_process_behind() {
    let env = Env::sqlite();
    let ws = env.workspace().display().to_string();
    let marker = unique_sleep();
    // A background grandchild and a foreground child, both in the gate's process group.
    let gate = format!("sleep {marker} & sleep {marker}; echo never");
    let out = env.run(&[
        "run",
        "--gate",
        &gate,
        "--gate-timeout",
        "1",
        "--workspace",
        &ws,
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = env.tasks()[0]["id"].as_i64().unwrap();
    let task = env.task(id);
    assert_eq!(task["state"], "failed");
    assert_eq!(task["gates"][0]["verdict"], "timed_out");
    assert_eq!(task["gates"][0]["failure_kind"], "timeout");
    assert_no_process_with(&format!("sleep {marker}"));
}

#[test]
fn a_task_created_with_clone_from_runs_in_its_own_clone() {
    let (_dir, source) = orchestrator_test_support::git_repo(&[("a.txt", "a\n")]);
    let place = tempfile::tempdir().unwrap();
    let clone = place.path().join("clones/app-7");
    let env = Env::sqlite();
    let (src, ws) = (source.display().to_string(), clone.display().to_string());
    // The gate passes only in the clone, and leaves a mark there.
    let gate = format!("test -f a.txt && test \"$(pwd)\" = '{ws}' && touch gated.flag");
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "in a clone",
        "--gate",
        &gate,
        "--clone-from",
        &src,
        "--workspace",
        &ws,
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    assert_eq!(
        created["worktree_of"],
        std::fs::canonicalize(&source)
            .unwrap()
            .display()
            .to_string()
    );
    let _serve = env.serve(&[]);
    let task = env.wait_task(id, "finished", |t| {
        t["state"] == "succeeded" || t["state"] == "failed"
    });
    assert_eq!(task["state"], "succeeded", "{task}");
    assert!(
        !source.join("gated.flag").exists(),
        "the gate ran in the clone, not in the checkout"
    );
    // The clone this daemon made goes as its task succeeds; the checkout stays.
    crate::support::wait_for(|| !clone.exists());
    assert!(source.join("a.txt").exists());
    let out = env.run(&["task", "events", &id.to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("workspace_prepared") && text.contains("cloned"),
        "{text}"
    );
    let read =
        String::from_utf8_lossy(&env.run(&["task", "read", &id.to_string()]).stdout).into_owned();
    assert!(read.contains("clone of"), "{read}");

    // Refused before anything is stored: not a checkout, a workspace holding other files, and
    // --clone-from without a workspace to clone into.
    let plain = tempfile::tempdir().unwrap();
    let refused = |args: &[&str]| {
        let mut all = vec!["task", "create", "--title", "x", "--gate", "true"];
        all.extend(args);
        let out = env.run(&all);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, text) = refused(&[
        "--clone-from",
        plain.path().to_str().unwrap(),
        "--workspace",
        place.path().join("other").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(6), "{text}");
    assert!(text.contains("is not a git checkout"), "{text}");
    std::fs::write(place.path().join("notes.txt"), "mine\n").unwrap();
    let (code, text) = refused(&[
        "--clone-from",
        &src,
        "--workspace",
        place.path().to_str().unwrap(),
    ]);
    assert_eq!(code, Some(6), "{text}");
    assert!(text.contains("not empty"), "{text}");
    let (code, text) = refused(&["--clone-from", &src]);
    assert_eq!(code, Some(2), "{text}");
    assert_eq!(env.tasks().len(), 1, "nothing else was stored");
}

/// The gate-output benchmark at a tiny size: alone and followed, it runs end to end, and the
/// follower got the gate's output (head, marker and tail).
#[test]
fn the_gate_output_benchmark_runs_with_and_without_a_follower() {
    use orchestrator_bench::gate_output::{GateOutputConfig, run};
    let config = GateOutputConfig {
        bin: crate::support::BIN.into(),
        bytes: 4 * 1024 * 1024,
        runs: 1,
    };
    let lines = std::sync::Mutex::new(Vec::new());
    run(&config, |line| {
        lines
            .lock()
            .unwrap()
            .push(serde_json::from_str::<serde_json::Value>(line)?);
        Ok(())
    })
    .unwrap();
    let lines = lines.into_inner().unwrap();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["follower"], "none");
    assert!(
        lines[0]["gate_ms_median"].as_i64().unwrap() > 0,
        "{lines:?}"
    );
    assert_eq!(lines[1]["follower"], "task logs --follow");
    let followed = lines[1]["follower_bytes"][0].as_u64().unwrap();
    assert!(
        followed > 1024 * 1024,
        "the follower printed {followed} bytes"
    );
    assert!(lines[2]["followed_to_alone"].as_f64().unwrap() > 0.0);
}
