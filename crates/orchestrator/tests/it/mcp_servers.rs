//! Agents with other servers' tools: an agent task that selects two MCP servers from the config
//! (the npm reference servers), calls their tools for 20 turns across a SIGKILL of `serve`, and
//! sends the model the same tool bytes in every request; an agent that reads a server's resources
//! and fills its prompts; and `mcp-servers list|check`.

use crate::support::{Env, processes_with};
use nix::sys::signal::Signal;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const TURNS: usize = 20;

fn write_config(env: &Env, shared: &std::path::Path) {
    let config = format!(
        r#"
[mcp_servers.everything]
command = "mcp-server-everything"

[mcp_servers.fs]
command = "mcp-server-filesystem"
args = ["{}"]
"#,
        shared.display()
    );
    std::fs::write(env.home().join("config.toml"), config).unwrap();
}

fn echo_turns(request: &Request) -> Reply {
    let turn = request.assistant_turns();
    if turn < TURNS {
        Reply::ToolCalls(vec![call(
            "mcp__everything__echo",
            json!({"message": format!("turn {turn}")}),
        )])
    } else {
        Reply::Text(request.last_tool_results().join(" | "))
    }
}

#[test]
fn an_agents_mcp_tools_keep_their_bytes_across_turns_and_a_restart() {
    let model = ScriptedModel::start_blocking(echo_turns);
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    write_config(&env, ws.path());
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "echo",
        "--prompt",
        "Echo twenty times.",
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--mcp",
        "everything",
        "--mcp",
        "fs",
        "--workspace",
        &ws.path().display().to_string(),
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();

    let first = env.serve(&["--lease-seconds", "2"]);
    let start = Instant::now();
    while model.request_count() < TURNS / 2 {
        assert!(start.elapsed() < crate::support::PATIENCE, "no turns");
        std::thread::sleep(Duration::from_millis(50));
    }
    first.signal(Signal::SIGKILL);
    drop(first);
    let _second = env.serve(&["--lease-seconds", "2"]);
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");

    let requests = model.received();
    assert!(requests.len() > TURNS, "{} requests", requests.len());
    let tools: Vec<String> = requests
        .iter()
        .map(|r| r.body["tools"].to_string())
        .collect();
    assert!(
        tools.iter().all(|t| *t == tools[0]),
        "the tools array changed between requests"
    );
    let names: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .filter(|n| n.starts_with("mcp__"))
        .collect();
    assert!(names.contains(&"mcp__everything__echo"), "{names:?}");
    assert!(names.contains(&"mcp__fs__read_text_file"), "{names:?}");
    let last = requests.last().unwrap().last_tool_results().join(" ");
    assert!(last.contains("turn 19"), "{last}");

    let events = env.events(id);
    let servers: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "mcp_server")
        .map(|e| &e["data"])
        .collect();
    assert!(servers.len() >= 4, "two servers per attempt: {servers:?}");
    assert!(servers.iter().all(|s| s["state"] == "ready"), "{servers:?}");
    drop(_second);
    // The killed daemon's servers died with their sandbox; the second's ended with the task.
    let start = Instant::now();
    while !processes_with("mcp-server-").is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            processes_with("mcp-server-")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn mcp_servers_check_starts_each_server_and_says_what_failed() {
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        env.home().join("config.toml"),
        "[mcp_servers.everything]\ncommand = \"mcp-server-everything\"\n\n\
         [mcp_servers.broken]\ncommand = \"/nonexistent/mcp\"\n\n\
         [mcp_servers.off]\ncommand = \"x\"\nenabled = false\n",
    )
    .unwrap();
    let listed = env.json(&["mcp-servers", "list", "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
    assert_eq!(listed[2]["name"], "off");
    assert_eq!(listed[2]["enabled"], false);

    let out = env.run(&[
        "mcp-servers",
        "check",
        "--json",
        "--workspace",
        &ws.path().display().to_string(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed server fails the check"
    );
    let states: Value = serde_json::from_slice(&out.stdout).unwrap();
    let states = states.as_array().unwrap();
    assert_eq!(
        states.len(),
        2,
        "the disabled one is not started: {states:?}"
    );
    assert_eq!(states[0]["name"], "broken");
    assert_eq!(states[0]["state"], "failed");
    assert!(
        states[0]["error"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/mcp"),
        "{states:?}"
    );
    assert_eq!(states[1]["state"], "ready");
    assert!(
        states[1]["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("mcp__everything__echo"))
    );

    // A bad table is refused where the config is read, with the file and the server named.
    std::fs::write(
        env.home().join("config.toml"),
        "[mcp_servers.\"bad.name\"]\ncommand = \"x\"\n",
    )
    .unwrap();
    let out = env.run(&["mcp-servers", "list"]);
    assert_eq!(out.status.code(), Some(6), "invalid input: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bad.name"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn resource_turns(request: &Request) -> Reply {
    match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call("mcp_resources", json!({}))]),
        1 => Reply::ToolCalls(vec![call(
            "mcp_resource_read",
            json!({"uri": "demo://resource/static/document/architecture.md"}),
        )]),
        2 => Reply::ToolCalls(vec![call("mcp_prompts", json!({"server": "everything"}))]),
        3 => Reply::ToolCalls(vec![call(
            "mcp_prompt_get",
            json!({"name": "args-prompt", "arguments": {"city": "Lyon"}}),
        )]),
        _ => Reply::Text("Done.".into()),
    }
}

#[test]
fn an_agent_reads_an_mcp_servers_resources_and_fills_its_prompts() {
    let model = ScriptedModel::start_blocking(resource_turns);
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        "[mcp_servers.everything]\ncommand = \"mcp-server-everything\"\n",
    )
    .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "resources",
        "--prompt",
        "Read the architecture document.",
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--mcp",
        "everything",
        "--workspace",
        &ws.path().display().to_string(),
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let _serve = env.serve(&[]);
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");
    let requests = model.received();
    let names = requests[0].tool_names();
    for tool in [
        "mcp_prompt_get",
        "mcp_prompts",
        "mcp_resource_read",
        "mcp_resources",
    ] {
        assert!(
            names.contains(&tool.to_owned()),
            "{tool} missing: {names:?}"
        );
    }
    let result = |turn: usize| {
        requests
            .iter()
            .find(|r| r.assistant_turns() == turn)
            .unwrap()
            .last_tool_results()
            .join("\n")
    };
    assert!(
        result(1).contains("demo://resource/static/document/architecture.md"),
        "{}",
        result(1)
    );
    assert!(
        result(2).contains("# Everything Server – Architecture"),
        "{}",
        result(2)
    );
    assert!(
        result(3).contains("args-prompt(city, state?)"),
        "{}",
        result(3)
    );
    assert!(
        result(4).contains("user: What's weather in Lyon?"),
        "{}",
        result(4)
    );
}
