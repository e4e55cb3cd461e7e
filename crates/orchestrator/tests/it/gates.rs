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
    let ws = env.home().display().to_string();
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
    let ws = env.home().display().to_string();
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
