//! Sub-agent roles through `serve`: a parent spawns a built-in `explore` child (read-only tools,
//! the explorer's instructions) and a child in a role of the config (its instructions, its model
//! at the parent's endpoint); an unknown role is refused with the roles there are.

use crate::support::Env;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::json;

fn system(request: &Request) -> String {
    request
        .messages()
        .first()
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned()
}

fn script(request: &Request) -> Reply {
    if system(request).contains("Your role:") {
        return Reply::Text("child done".into());
    }
    match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![
            call(
                "agent_spawn",
                json!({"prompt": "Find the callers of parse.", "role": "explore"}),
            ),
            call(
                "agent_spawn",
                json!({"prompt": "Look for secrets.", "role": "security-review"}),
            ),
            call(
                "agent_spawn",
                json!({"prompt": "Do magic.", "role": "wizard"}),
            ),
        ]),
        1 => Reply::ToolCalls(vec![call("agent_wait", json!({"timeout_secs": 600}))]),
        _ => Reply::Text("parent done".into()),
    }
}

#[test]
fn a_role_gives_a_child_its_instructions_profile_and_model() {
    let model = ScriptedModel::start_blocking(script);
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        "[agent_roles.security-review]\ninstructions = \"Look only for leaked secrets.\"\nprofile = \"minimal\"\nmodel = \"scout-model\"\n",
    )
    .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "delegate",
        "--prompt",
        "Delegate.",
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--profile",
        "full",
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
    let explorer = requests
        .iter()
        .find(|r| system(r).contains("Your role: explore. You are an explorer"))
        .expect("the explore child asked the model");
    let tools = explorer.tool_names();
    assert!(tools.contains(&"read_file".to_owned()), "{tools:?}");
    assert!(
        !tools.iter().any(|t| t == "write_file" || t == "exec_shell"),
        "an explorer reads only: {tools:?}"
    );
    assert_eq!(explorer.body["model"], "scripted");
    let reviewer = requests
        .iter()
        .find(|r| system(r).contains("Your role: security-review. Look only for leaked secrets."))
        .expect("the configured role's child asked the model");
    assert_eq!(reviewer.body["model"], "scout-model");

    let parent = requests
        .iter()
        .find(|r| !system(r).contains("Your role:") && r.assistant_turns() == 1)
        .unwrap();
    let results = parent.last_tool_results().join("\n");
    assert!(
        results.contains("there is no role \"wizard\"; roles: explore, general, implementer, plan, review, security-review, verifier"),
        "{results}"
    );
    // Each child keeps its role, with the instructions it was given.
    let mut roles = Vec::new();
    for child in env.json(&["task", "list", "--json"]).as_array().unwrap() {
        let child = child["id"].as_i64().unwrap();
        if child == id {
            continue;
        }
        let read = env.json(&["task", "read", &child.to_string(), "--json"]);
        roles.push(
            read["task"]["agent"]["role"]["name"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    roles.sort();
    assert_eq!(roles, ["explore", "security-review"]);
}
