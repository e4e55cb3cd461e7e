//! Interactive terminals through the registry, on real processes in the sandbox: a Python REPL
//! driven line by line, a prompt that only a terminal gets, an interrupt that reaches the running
//! program, end of input, a bounded buffer, and no process left after a kill or after the context
//! is gone.

use std::time::Duration;

use serde_json::json;

use crate::shell::running_with;
use crate::{Harness, assert_error, assert_ok};

async fn gone(marker: &str) -> bool {
    for _ in 0..100 {
        if !running_with(marker) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn a_python_repl_is_driven_line_by_line_and_interrupted() {
    orchestrator_test_support::require(orchestrator_test_support::Program::Python3);
    let h = Harness::new();
    let r = h
        .call(
            "pty_open",
            json!({"command": "python3 -q", "until": ">>> ", "wait_ms": 20000}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(text.starts_with("Opened terminal session pty-1"), "{text}");
    assert!(
        text.contains(">>> "),
        "the REPL prompts on a terminal: {text}"
    );
    assert_eq!(r.metadata["job"]["running"], true);

    let r = h
        .call(
            "pty_write",
            json!({"session_id": "pty-1", "input": "x = 6 * 7\nprint(x, end='!\\n')\n", "until": "!\n", "wait_ms": 20000}),
        )
        .await;
    let text = assert_ok(&r);
    // The terminal echoes what was typed, and the answer comes as plain text.
    assert!(text.contains("print(x, end='!\\n')"), "{text}");
    assert!(text.contains("42!\n"), "{text}");
    assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");

    // A long call is interrupted like Ctrl-C, and the REPL lives on.
    let r = h
        .call(
            "pty_write",
            json!({"session_id": "pty-1", "input": "import time; time.sleep(300)\n", "wait_ms": 500}),
        )
        .await;
    assert_eq!(r.metadata["job"]["running"], true);
    let r = h
        .call(
            "pty_write",
            json!({"session_id": "pty-1", "interrupt": true, "until": ">>> ", "wait_ms": 20000}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(text.contains("KeyboardInterrupt"), "{text}");

    let list = assert_ok(&h.call("pty_list", json!({})).await);
    assert!(
        list.contains("pty-1") && list.contains("running") && list.contains("python3 -q"),
        "{list}"
    );

    // End of input ends the REPL; the session reports how.
    let r = h
        .call(
            "pty_write",
            json!({"session_id": "pty-1", "input": "\u{4}", "wait_ms": 20000}),
        )
        .await;
    assert_eq!(r.metadata["job"]["running"], false, "{}", r.joined_text());
    // Python ends with SIGINT's status once a KeyboardInterrupt reached its REPL, as it does on
    // a person's terminal: killed by signal 2 as the warm jail reports it, or exit code 130 where
    // a bubblewrap of its own passed it on (it turns a signal into 128 + its number).
    let job = &r.metadata["job"];
    assert!(
        job["signal"] == 2 || job["exit_code"] == 130,
        "{job}: {}",
        r.joined_text()
    );
    assert_error(
        &h.call("pty_write", json!({"session_id": "pty-1", "input": "1\n"}))
            .await,
        &["has ended", "pty_open"],
    );
}

#[tokio::test]
async fn a_prompt_that_needs_a_terminal_is_answered() {
    let h = Harness::new();
    // `read -p` prints its prompt only when its input is a terminal.
    let r = h
        .call(
            "pty_open",
            json!({"command": "test -t 0 && test -t 1 && echo on-a-tty; read -p 'Name? ' n; echo \"hello $n\"", "until": "Name? ", "wait_ms": 20000}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(
        text.contains("on-a-tty") && text.contains("Name? "),
        "{text}"
    );
    let r = h
        .call(
            "pty_write",
            json!({"session_id": "pty-1", "input": "ann\n", "wait_ms": 20000}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(text.contains("hello ann"), "{text}");
    assert_eq!(r.metadata["job"]["running"], false);
}

#[tokio::test]
async fn a_terminals_buffer_is_bounded_and_says_what_it_dropped() {
    orchestrator_test_support::require(orchestrator_test_support::Program::Python3);
    let h = Harness::new();
    // Three megabytes through the terminal; the session keeps its last megabyte.
    let r = h
        .call(
            "pty_open",
            json!({"command": "python3 -c \"import sys; [sys.stdout.write('y' * 99 + '\\n') for _ in range(30000)]; print('the end')\"", "until": "the end", "wait_ms": 30000}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(
        text.contains("bytes dropped"),
        "{}",
        &text[..300.min(text.len())]
    );
    assert!(text.contains("the end"));
    assert!(text.len() < 1024 * 1024 + 4096, "{} bytes", text.len());
}

#[tokio::test]
async fn sessions_die_with_a_kill_and_with_their_context() {
    let marker = format!("302.{}", std::process::id());
    let h = Harness::new();
    let r = h
        .call(
            "pty_open",
            json!({"command": format!("sleep {marker} & sleep {marker}; wait"), "wait_ms": 300}),
        )
        .await;
    assert_ok(&r);
    assert!(running_with(&marker));
    let r = h.call("pty_kill", json!({"session_id": "pty-1"})).await;
    let text = assert_ok(&r);
    assert!(text.contains("killed by signal"), "{text}");
    assert!(
        gone(&marker).await,
        "a process of the killed session survived"
    );

    // A session still running when its context goes is ended with it.
    let marker = format!("303.{}", std::process::id());
    let r = h
        .call(
            "pty_open",
            json!({"command": format!("sleep {marker}"), "wait_ms": 300}),
        )
        .await;
    assert_ok(&r);
    assert!(running_with(&marker));
    drop(h);
    assert!(gone(&marker).await, "a session outlived its context");
}

#[tokio::test]
async fn terminal_calls_that_cannot_work_are_refused() {
    let h = Harness::new();
    assert_error(
        &h.call("pty_poll", json!({"session_id": "pty-9"})).await,
        &["no job \"pty-9\""],
    );
    assert_error(
        &h.call("pty_open", json!({"command": "  "})).await,
        &["command is empty"],
    );
    assert_error(
        &h.call("pty_open", json!({"command": "true", "cwd": "../.."}))
            .await,
        &["inside the workspace"],
    );
    let r = h
        .call(
            "exec_shell",
            json!({"command": "sleep 5", "background": true}),
        )
        .await;
    let job = r.metadata["job"]["id"].as_str().unwrap().to_owned();
    assert_error(
        &h.call("pty_write", json!({"session_id": job, "input": "x"}))
            .await,
        &["not a terminal session", "exec_shell_interact"],
    );
    let r = h
        .call("pty_open", json!({"command": "cat", "wait_ms": 100}))
        .await;
    assert_ok(&r);
    assert_error(
        &h.call("pty_write", json!({"session_id": "pty-2"})).await,
        &["give input"],
    );
    let r = h
        .call("pty_poll", json!({"session_id": "pty-2", "wait_ms": 0}))
        .await;
    assert!(assert_ok(&r).contains("(no new output)"));
}
