//! Terminal sessions through `serve` and the scripted model: an agent drives a Python REPL on a
//! terminal of its own, and a session it leaves running ends with its task.

use crate::support::{Env, assert_no_process_with, processes_with, unique_sleep};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::json;

#[test]
fn an_agent_drives_a_repl_and_its_sessions_end_with_the_task() {
    orchestrator_test_support::require(orchestrator_test_support::Program::Python3);
    let killed = unique_sleep();
    let left = unique_sleep();
    let (kill_me, leave_me) = (format!("sleep {killed}"), format!("sleep {left}"));
    let model = ScriptedModel::start_blocking(move |request: &Request| {
        let step = |name: &str, args: serde_json::Value| Reply::ToolCalls(vec![call(name, args)]);
        match request.assistant_turns() {
            0 => step(
                "pty_open",
                json!({"command": "python3 -q", "until": ">>> ", "wait_ms": 20000}),
            ),
            1 => step(
                "pty_write",
                json!({"session_id": "pty-1", "input": "print(6 * 7)\n", "until": ">>> ", "wait_ms": 20000}),
            ),
            2 => step("pty_open", json!({"command": kill_me, "wait_ms": 200})),
            3 => step("pty_list", json!({})),
            4 => step("pty_poll", json!({"session_id": "pty-1", "wait_ms": 0})),
            5 => step("pty_kill", json!({"session_id": "pty-2"})),
            6 => step("pty_open", json!({"command": leave_me, "wait_ms": 200})),
            _ => Reply::Text("The answer is 42.".into()),
        }
    });
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "repl",
        "--prompt",
        "Ask Python for six times seven.",
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--workspace",
        &ws.path().display().to_string(),
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let _serve = env.serve(&[]);
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");

    let requests = model.received();
    let result_of = |turn: usize| {
        requests
            .iter()
            .find(|r| r.assistant_turns() == turn)
            .unwrap()
            .last_tool_results()
            .join("\n")
    };
    let opened = result_of(1);
    assert!(
        opened.contains("Opened terminal session pty-1") && opened.contains(">>> "),
        "{opened}"
    );
    let answered = result_of(2);
    assert!(
        answered.contains("print(6 * 7)") && answered.contains("42\n"),
        "{answered}"
    );
    let listed = result_of(4);
    assert!(
        listed.contains("pty-1") && listed.contains("pty-2") && listed.contains(&killed),
        "{listed}"
    );
    let polled = result_of(5);
    assert!(polled.contains("(no new output)"), "{polled}");
    let ended = result_of(6);
    assert!(ended.contains("killed by signal"), "{ended}");
    assert!(result_of(7).contains("Opened terminal session pty-3"));
    // Killed means gone; the session the agent left running ended with its task, the REPL too.
    assert_no_process_with(&killed);
    assert_no_process_with(&left);
    assert!(processes_with(&left).is_empty());

    // Each terminal was recorded as it drew, in the store, for a person: `task logs --terminal`
    // reads it, raw to a pipe (the terminal's own \r\n kept), and says how it ended.
    let tail = id.to_string();
    let log_of =
        |terminal: &str| env.json(&["task", "logs", &tail, "--terminal", terminal, "--json"]);
    // The sessions the task's end killed are ended by their recorder just after it.
    crate::support::wait_for(|| {
        ["pty-1", "pty-2", "pty-3"]
            .iter()
            .all(|t| log_of(t)["state"] == "finished")
    });
    let repl = log_of("pty-1");
    assert_eq!(repl["command"], "python3 -q", "{repl}");
    let text = repl["text"].as_str().unwrap();
    assert!(
        text.contains(">>> ") && text.contains("print(6 * 7)") && text.contains("42\r\n"),
        "what the REPL drew, as drawn: {text:?}"
    );
    let killed_log = log_of("pty-2");
    assert!(
        killed_log["end_reason"]
            .as_str()
            .is_some_and(|r| r.contains("killed by signal")),
        "{killed_log}"
    );
    assert_eq!(killed_log["exit_code"], serde_json::Value::Null);
    let raw = env.run(&["task", "logs", &tail, "--terminal", "1", "--follow"]);
    assert!(
        raw.stdout.windows(4).any(|w| w == b"42\r\n"),
        "a pipe gets the bytes as drawn: {:?}",
        String::from_utf8_lossy(&raw.stdout)
    );
    assert_eq!(
        raw.status.code(),
        Some(1),
        "a REPL killed with its task did not exit 0"
    );
    let stderr = String::from_utf8_lossy(&raw.stderr);
    assert!(
        stderr.contains("[terminal pty-1 finished: the program ended: killed by signal"),
        "{stderr}"
    );
    let missing = env.run(&["task", "logs", &tail, "--terminal", "pty-9"]);
    assert_eq!(missing.status.code(), Some(3));
}
