//! Sub-agent roles through `serve`: a parent spawns a built-in `explore` child (read-only tools,
//! the explorer's instructions) and a child in a role of the config (its instructions, its model
//! at the parent's endpoint); an unknown role is refused with the roles there are; and a child
//! forked with `fork_context` starts with its parent's conversation, byte for byte.

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
    let task = env.wait_finished(id);
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

fn fork_script(request: &Request) -> Reply {
    let last_user = request
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    if last_user.contains("forked from the conversation above") {
        return Reply::Text("The code word is PELICAN.".into());
    }
    match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call(
            "note",
            json!({"text": "the code word is PELICAN"}),
        )]),
        1 => Reply::ToolCalls(vec![call(
            "agent_spawn",
            json!({"prompt": "Say the code word.", "role": "explore", "fork_context": true}),
        )]),
        2 => Reply::ToolCalls(vec![call("agent_wait", json!({"timeout_secs": 600}))]),
        _ => Reply::Text(request.last_tool_results().join("\n")),
    }
}

#[test]
fn a_forked_child_continues_its_parents_conversation_byte_for_byte() {
    let model = ScriptedModel::start_blocking(fork_script);
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "fork",
        "--prompt",
        "Remember the code word PELICAN, then ask a sub-agent for it.",
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
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");

    let requests = model.received();
    let forked_user = |r: &&Request| {
        r.messages()
            .last()
            .and_then(|m| m["content"].as_str())
            .is_some_and(|c| c.contains("forked from the conversation above"))
    };
    let child = requests
        .iter()
        .find(forked_user)
        .expect("the child asked the model");
    // The parent's request that spawned it: its messages are the child's prefix, exactly.
    let spawning = requests
        .iter()
        .find(|r| !forked_user(r) && r.assistant_turns() == 1)
        .unwrap();
    let parent_messages = spawning.messages();
    let child_messages = child.messages();
    assert_eq!(child_messages.len(), parent_messages.len() + 1);
    assert_eq!(
        serde_json::to_string(&child_messages[..parent_messages.len()]).unwrap(),
        serde_json::to_string(parent_messages).unwrap(),
        "the child's prefix is the parent's conversation"
    );
    let opening = child_messages.last().unwrap()["content"].as_str().unwrap();
    assert!(
        opening.contains(&format!("which was task {id}'s")),
        "{opening}"
    );
    assert!(opening.contains("Your role: explore."), "{opening}");
    assert!(
        opening.ends_with("Your task: Say the code word."),
        "{opening}"
    );
    // The spawning call itself is not in the child's conversation: no call without its result.
    assert!(!child.body.to_string().contains("agent_spawn\",\"arguments"));
    let last = requests.last().unwrap().last_tool_results().join("\n");
    assert!(last.contains("The code word is PELICAN."), "{last}");
}
