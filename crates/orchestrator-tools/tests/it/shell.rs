//! exec_shell and its jobs: exit codes, timeouts that kill the whole process group, background jobs
//! with stdin, wait, cancel and a listing.

use serde_json::json;

use crate::{Harness, assert_error, assert_ok};

#[tokio::test]
async fn foreground_output_and_exit_codes() {
    let h = Harness::new();
    h.write("sub/f.txt", "x");
    let r = h
        .call(
            "exec_shell",
            json!({"command": "echo out; echo err >&2; ls", "cwd": "sub"}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(
        text.contains("out")
            && text.contains("err")
            && text.contains("f.txt")
            && text.contains("[exit code 0"),
        "{text}"
    );
    let r = h.call("exec_shell", json!({"command": "exit 3"})).await;
    assert_error(&r, &["exit code 3"]);
    assert_eq!(r.metadata["exit"]["code"], 3);
    assert_error(
        &h.call("exec_shell", json!({"command": "true", "timeout": 601}))
            .await,
        &["maximum of 600", "background=true"],
    );
    assert_error(
        &h.call("exec_shell", json!({"command": "true", "cwd": "../"}))
            .await,
        &["refused"],
    );
}

/// Whether a live (not zombie) process has `marker` in its command line. Pids inside the sandbox
/// are those of its own pid namespace, so the test looks processes up by what they run instead.
pub(crate) fn running_with(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let dir = entry.path();
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        String::from_utf8_lossy(&cmdline).contains(marker) && !stat.contains(") Z ")
    })
}

#[tokio::test]
async fn timeout_kills_the_process_group() {
    let h = Harness::new();
    let marker = format!("300.{}", std::process::id());
    let command = format!("sleep {marker} & echo started; sleep {marker}");
    let r = h
        .call("exec_shell", json!({"command": command, "timeout": 1}))
        .await;
    assert_error(
        &r,
        &[
            "Timed out after 1 s",
            "process group were killed",
            "background=true",
        ],
    );
    assert!(r.joined_text().contains("started"));
    // The background sleep was in the group: it must be gone.
    let mut gone = false;
    for _ in 0..100 {
        if !running_with(&marker) {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(gone, "the background sleep survived the timeout");
}

#[tokio::test]
async fn background_jobs_stdin_wait_cancel_list() {
    let h = Harness::new();
    let r = h
        .call(
            "exec_shell",
            json!({"command": "read line; echo got:$line; echo done", "background": true}),
        )
        .await;
    assert_ok(&r);
    let id = r.metadata["job"]["id"].as_str().unwrap().to_owned();
    let r = h
        .call(
            "exec_shell_interact",
            json!({"job_id": id, "input": "hello\n"}),
        )
        .await;
    assert_ok(&r);
    let r = h
        .call("exec_shell_wait", json!({"job_id": id, "timeout": 30}))
        .await;
    let all = r.joined_text().to_string();
    assert!(r.metadata["job"]["running"] == false, "{all}");
    assert_eq!(r.metadata["job"]["exit_code"], 0);

    let r = h
        .call(
            "exec_shell",
            json!({"command": "echo tick; sleep 300", "background": true}),
        )
        .await;
    let id2 = r.metadata["job"]["id"].as_str().unwrap().to_owned();
    let list = assert_ok(&h.call("exec_shell_wait", json!({})).await);
    assert!(
        list.contains(&id) && list.contains(&id2) && list.contains("running"),
        "{list}"
    );
    let r = h.call("exec_shell_cancel", json!({"job_id": id2})).await;
    let text = assert_ok(&r);
    assert!(text.contains("killed by signal"), "{text}");
    assert_eq!(r.metadata["job"]["running"], false);
    assert_error(
        &h.call("exec_shell_wait", json!({"job_id": "job-99"})).await,
        &["no job", "lists the jobs"],
    );
}

#[tokio::test]
async fn job_output_includes_what_was_printed() {
    let h = Harness::new();
    let r = h
        .call(
            "exec_shell",
            json!({"command": "for i in 1 2 3; do echo n$i; done", "background": true}),
        )
        .await;
    let id = r.metadata["job"]["id"].as_str().unwrap().to_owned();
    let r = h
        .call("exec_shell_wait", json!({"job_id": id, "timeout": 30}))
        .await;
    let text = r.joined_text();
    assert!(text.contains("n1\nn2\nn3"), "{text}");
    let again = h
        .call("exec_shell_wait", json!({"job_id": id, "timeout": 0}))
        .await;
    assert!(
        again.joined_text().contains("(no new output)"),
        "{}",
        again.joined_text()
    );
}

/// A call dropped in the middle (the task was canceled, its lease lost, the worker shut down) ends
/// every process the command started, not only the shell: in the sandbox and without one.
#[tokio::test]
async fn a_dropped_call_kills_the_whole_process_group() {
    for unsandboxed in [false, true] {
        let mut h = Harness::new();
        if unsandboxed {
            let mut policy = orchestrator_tools::Policy::allow_all();
            policy.sandbox = orchestrator_types::SandboxMode::Full;
            h.ctx = h.ctx.clone().with_policy(policy).unwrap();
        }
        let marker = format!("301.{}{}", std::process::id(), u8::from(unsandboxed));
        let command = format!("sleep {marker} & sleep {marker}; wait");
        let call = h.call("exec_shell", json!({"command": command, "timeout": 600}));
        let dropped = tokio::time::timeout(std::time::Duration::from_millis(1500), call).await;
        assert!(dropped.is_err(), "the call was still running when dropped");
        let mut gone = false;
        for _ in 0..100 {
            if !running_with(&marker) {
                gone = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(
            gone,
            "unsandboxed {unsandboxed}: a child of the dropped shell kept running"
        );
    }
}

/// A command that starts a child in the background with its output redirected and ends at once
/// (`sleep 777 >/dev/null 2>&1 &`) used to leave the child running with nothing watching it
/// when no sandbox held it: its pipes closed, so nothing waited for it, and its group left the
/// ledger with the call. A command owns its group, sandboxed or not: what it leaves behind ends
/// with it, in the foreground and as a background job. (Long-lived servers are background jobs,
/// whose own process lives as long as the job.)
#[tokio::test]
async fn a_detached_child_ends_with_its_command_in_every_mode() {
    for unsandboxed in [false, true] {
        let mut h = Harness::new();
        if unsandboxed {
            let mut policy = orchestrator_tools::Policy::allow_all();
            policy.sandbox = orchestrator_types::SandboxMode::Full;
            h.ctx = h.ctx.clone().with_policy(policy).unwrap();
        }
        for background in [false, true] {
            let marker = format!(
                "777.{}{}{}",
                std::process::id(),
                u8::from(unsandboxed),
                u8::from(background)
            );
            let command = format!("sleep {marker} >/dev/null 2>&1 & echo left");
            let r = h
                .call(
                    "exec_shell",
                    json!({"command": command, "background": background}),
                )
                .await;
            assert_ok(&r);
            if background {
                let id = r.metadata["job"]["id"].as_str().unwrap().to_owned();
                let waited = h
                    .call("exec_shell_wait", json!({"job_id": id, "timeout": 30}))
                    .await;
                assert_eq!(waited.metadata["job"]["running"], false);
            }
            let mut gone = false;
            for _ in 0..100 {
                if !running_with(&marker) {
                    gone = true;
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            assert!(
                gone,
                "unsandboxed {unsandboxed}, background {background}: the detached sleep outlived \
                 its command"
            );
        }
    }
}
