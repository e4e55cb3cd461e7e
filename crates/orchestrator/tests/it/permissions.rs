//! request_permissions through `serve`: an agent whose policy asks before commands asks a person
//! to widen exec_shell for the rest of the task; once approved its commands run without another
//! approval, across the pause and resume; a tool the policy denies is never part of the request.

use crate::support::Env;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::json;

fn script(request: &Request) -> Reply {
    match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call(
            "request_permissions",
            json!({"tools": ["exec_shell", "write_file"], "reason": "I run the tests after every change."}),
        )]),
        1 => Reply::ToolCalls(vec![call(
            "exec_shell",
            json!({"command": "echo first > first.flag"}),
        )]),
        2 => Reply::ToolCalls(vec![call(
            "exec_shell",
            json!({"command": "echo second > second.flag"}),
        )]),
        _ => Reply::Text("Done.".into()),
    }
}

#[test]
fn an_approved_request_lets_commands_run_unasked_for_the_rest_of_the_task() {
    let model = ScriptedModel::start_blocking(script);
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "widen",
        "--prompt",
        "Run the tests often.",
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--ask",
        "shell",
        "--deny",
        "write_file",
        "--workspace",
        &ws.path().display().to_string(),
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let _serve = env.serve(&[]);
    env.wait_task(id, "waiting", |t| t["state"] == "waiting");

    let listed = env.json(&["approval", "list", "--json"]);
    let approvals = listed.as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{listed}");
    assert_eq!(approvals[0]["tool"], "request_permissions");
    // Only what a person can grant is asked: the denied write_file is not in it.
    assert_eq!(
        approvals[0]["arguments"]["tools"],
        json!([{"name": "exec_shell", "class": "shell"}]),
        "{listed}"
    );
    assert!(
        approvals[0]["reason"]
            .as_str()
            .unwrap()
            .contains("I run the tests after every change."),
        "{listed}"
    );
    let approval = approvals[0]["id"].as_i64().unwrap().to_string();
    let out = env.run(&["approval", "approve", &approval, "--as", "ann"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");
    // Both commands ran, and nobody was asked again.
    assert!(ws.path().join("first.flag").exists());
    assert!(ws.path().join("second.flag").exists());
    let listed = env.json(&["approval", "list", "--all", "--json"]);
    let all = listed.as_array().unwrap();
    assert_eq!(all.len(), 1, "{listed}");
    assert_eq!(all[0]["status"], "approved");
    let requests = model.received();
    let granted = requests
        .iter()
        .find(|r| r.assistant_turns() == 1)
        .unwrap()
        .last_tool_results()
        .join("\n");
    assert!(
        granted.contains("Granted for the rest of this task by cli:ann: exec_shell"),
        "{granted}"
    );
}
