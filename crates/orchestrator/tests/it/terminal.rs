//! Terminal sessions through `serve` and the scripted model: an agent drives a Python REPL on a
//! terminal of its own, and a session it leaves running ends with its task.

use crate::support::{Env, assert_no_process_with, processes_with, unique_sleep};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::json;

#[test]
fn an_agent_drives_a_repl_and_its_sessions_end_with_the_task() {
    let marker = unique_sleep();
    let left_running = format!("sleep {marker}");
    let model = ScriptedModel::start_blocking(move |request: &Request| {
        match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "pty_open",
                json!({"command": "python3 -q", "until": ">>> ", "wait_ms": 20000}),
            )]),
            1 => Reply::ToolCalls(vec![call(
                "pty_write",
                json!({"session_id": "pty-1", "input": "print(6 * 7)\n", "until": ">>> ", "wait_ms": 20000}),
            )]),
            2 => Reply::ToolCalls(vec![call(
                "pty_open",
                json!({"command": left_running, "wait_ms": 200}),
            )]),
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
    let task = env.wait_task(id, "finished", |t| {
        t["state"]
            .as_str()
            .is_some_and(|s| s == "succeeded" || s == "failed")
    });
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
    let second = result_of(3);
    assert!(second.contains("Opened terminal session pty-2"), "{second}");
    // The session the agent left running ended with its task (and the REPL with it).
    assert_no_process_with(&marker);
    assert!(processes_with(&marker).is_empty());
}
