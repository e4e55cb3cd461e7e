//! `task retry` of a failed agent task through `serve`: the new attempt's agent is told what
//! failed and works on, and a task that failed on its budget gets its budget back.

use crate::support::Env;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::json;

const GATE: &str = "grep -q 'hello world' greeting.txt";

fn create(env: &Env, model: &ScriptedModel, extra: &[&str]) -> (i64, std::path::PathBuf) {
    let ws = env.workspace();
    std::fs::write(ws.join("greeting.txt"), "helo world\n").unwrap();
    let base_url = model.base_url();
    let workspace = ws.display().to_string();
    let mut args = vec![
        "task",
        "create",
        "--title",
        "greeting",
        "--prompt",
        "Make greeting.txt say hello world",
        "--gate",
        GATE,
        "--workspace",
        &workspace,
        "--model",
        "scripted",
        "--base-url",
        &base_url,
        "--json",
    ];
    args.extend_from_slice(extra);
    (env.json(&args)["id"].as_i64().unwrap(), ws)
}

fn retry(env: &Env, id: i64) {
    let out = env.run(&["task", "retry", &id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The retry used to end the agent at once on its saved answer: the same gate failed on the same
/// tree and the model was never asked again (one request in all).
#[test]
fn a_retried_agent_task_is_told_what_its_gate_said_and_fixes_it_sqlite() {
    a_retried_agent_task_is_told_what_its_gate_said_and_fixes_it(&Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_agent_task_is_told_what_its_gate_said_and_fixes_it_postgres() {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || {
        a_retried_agent_task_is_told_what_its_gate_said_and_fixes_it(&env)
    })
    .await
    .unwrap();
}

fn a_retried_agent_task_is_told_what_its_gate_said_and_fixes_it(env: &Env) {
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            // The first answer claims success without doing the work.
            0 => Reply::Text("It already says hello world.".into()),
            1 => Reply::ToolCalls(vec![call(
                "edit_file",
                json!({"path": "greeting.txt", "old_string": "helo", "new_string": "hello"}),
            )]),
            _ => Reply::Text("Fixed the typo.".into()),
        });
    let (id, ws) = create(env, &model, &[]);
    let _serve = env.serve(&[]);
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "failed", "{task}");
    assert_eq!(model.request_count(), 1);

    retry(env, id);
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");
    assert_eq!(
        std::fs::read_to_string(ws.join("greeting.txt")).unwrap(),
        "hello world\n"
    );
    let received = model.received();
    assert_eq!(received.len(), 3, "asked again after the retry");
    let told = received[1].last_user_text().unwrap_or_default();
    assert!(told.contains("failed"), "{told}");
    assert!(told.contains(GATE), "the gate's command: {told}");
    assert!(told.contains("exit code 1"), "{told}");
    assert!(told.contains("attempt 2"), "{told}");
    // The conversation goes on: the first answer is still there, before what the gate said.
    let messages = received[1].messages();
    assert!(
        messages
            .iter()
            .any(|m| m["content"] == "It already says hello world."),
        "{messages:?}"
    );
}

/// A task that failed on its turn budget used to fail again at once when retried: the budget
/// counted every attempt. A retry gives the budget back.
#[test]
fn a_retry_gives_the_agent_its_turn_budget_back() {
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 | 1 => Reply::ToolCalls(vec![call("list_dir", json!({"path": "."}))]),
            2 => Reply::ToolCalls(vec![call(
                "edit_file",
                json!({"path": "greeting.txt", "old_string": "helo", "new_string": "hello"}),
            )]),
            _ => Reply::Text("Fixed the typo.".into()),
        });
    let env = Env::sqlite();
    let (id, _ws) = create(&env, &model, &["--max-turns", "2"]);
    let _serve = env.serve(&[]);
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "failed", "{task}");
    let error = task["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("turn budget of 2 turns"), "{task}");
    assert_eq!(model.request_count(), 2);

    retry(&env, id);
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");
    assert_eq!(model.request_count(), 4);
}
