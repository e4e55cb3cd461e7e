//! The automation tools through `serve` and the scripted model: a person's agent makes an
//! automation, which waits for a person's approval (the default); a pre-approved run fires it at
//! once; the automation's own agent, on the same model with the same profile, is never offered the
//! automation tools.

use crate::support::Env;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::json;

const PERSON: &str = "Schedule a nightly look at the build.";
const NIGHTLY: &str = "Nightly: look at the build.";

const TOOLS: [&str; 8] = [
    "automation_create",
    "automation_delete",
    "automation_list",
    "automation_pause",
    "automation_read",
    "automation_resume",
    "automation_run",
    "automation_update",
];

fn is_from(request: &Request, prompt: &str) -> bool {
    request
        .messages()
        .iter()
        .any(|m| m["role"] == "user" && m["content"].as_str().is_some_and(|c| c.contains(prompt)))
}

fn script(request: &Request) -> Reply {
    if is_from(request, NIGHTLY) {
        return Reply::Text("The build looks fine.".into());
    }
    let step = |name: &str, args: serde_json::Value| Reply::ToolCalls(vec![call(name, args)]);
    let nightly = json!({"name": "nightly"});
    match request.assistant_turns() {
        0 => step(
            "automation_create",
            json!({
                "name": "nightly",
                "schedule": "0 3 * * *",
                "timezone": "Europe/Berlin",
                "prompt": NIGHTLY,
                "gates": ["echo gate-ran"]
            }),
        ),
        1 => step("automation_run", nightly),
        2 => step("automation_list", json!({})),
        3 => step(
            "automation_update",
            json!({"name": "nightly", "schedule": "30 2 * * *"}),
        ),
        4 => step("automation_pause", nightly),
        5 => step("automation_resume", nightly),
        6 => step("automation_read", nightly),
        7 => step("automation_delete", nightly),
        _ => Reply::Text("Scheduled, ran once, and cleaned up.".into()),
    }
}

#[test]
fn an_agent_schedules_work_with_consent_and_its_automations_agent_cannot_schedule_more() {
    let model = ScriptedModel::start_blocking(script);
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let workspace = ws.path().display().to_string();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "schedule it",
        "--prompt",
        PERSON,
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--profile",
        "full",
        "--policy",
        r#"{"default": "allow", "tools": {"automation_run": "allow", "automation_update": "allow",
            "automation_pause": "allow", "automation_resume": "allow", "automation_delete": "allow"}}"#,
        "--workspace",
        &workspace,
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let _serve = env.serve(&[]);

    // Creating an automation waits for a person, even under a policy that allows by default.
    env.wait_task(id, "waiting", |t| t["state"] == "waiting");
    let listed = env.json(&["automation", "list", "--json"]);
    assert_eq!(listed, json!([]), "nothing is made before the approval");
    let approvals = env.json(&["approval", "list", "--json"]);
    let approvals = approvals.as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0]["tool"], "automation_create");
    assert_eq!(approvals[0]["arguments"]["schedule"], "0 3 * * *");
    let approval = approvals[0]["id"].as_i64().unwrap().to_string();
    let out = env.run(&["approval", "approve", &approval, "--as", "ann"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");
    // The pre-approved calls asked nobody.
    let all = env.json(&["approval", "list", "--all", "--json"]);
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    // The agent deleted it at the end; the task its manual slot made stays.
    let out = env.run(&["automation", "read", "nightly"]);
    assert!(!out.status.success(), "deleted, so not found");

    let requests = model.received();
    let result_of = |turn: usize| {
        requests
            .iter()
            .find(|r| is_from(r, PERSON) && r.assistant_turns() == turn)
            .unwrap()
            .last_tool_results()
            .join("\n")
    };
    let created = result_of(1);
    assert!(
        created.starts_with("Created automation nightly (0 3 * * * in Europe/Berlin, active")
            && created.contains(&format!("\"workspaces\": [\n    {}", json!(workspace))),
        "{created}"
    );
    let ran = result_of(2);
    let child: i64 = ran
        .strip_prefix("Fired a manual slot of nightly: created task ")
        .and_then(|rest| rest.split('.').next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("{ran}"));
    assert!(result_of(3).contains("\"name\": \"nightly\""));
    assert!(result_of(4).starts_with("Updated automation nightly (30 2 * * * in Europe/Berlin"));
    assert!(result_of(5).starts_with("Paused automation nightly"));
    assert!(result_of(6).starts_with("Resumed automation nightly"));
    let read: serde_json::Value = serde_json::from_str(&result_of(7)).unwrap();
    assert_eq!(read["source"], "agent", "{read}");
    assert_eq!(read["schedule"], "30 2 * * *");
    // The one manual slot is the agent's; the schedule's own slot may fire too when the test runs
    // across its minute, so the manual slot is not always the latest.
    let manual: Vec<&serde_json::Value> = read["slots"]
        .as_array()
        .map(|slots| slots.iter().filter(|s| s["kind"] == "manual").collect())
        .unwrap_or_default();
    assert_eq!(manual.len(), 1, "{read}");
    assert_eq!(manual[0]["tasks"][0]["id"], child, "{read}");
    assert!(result_of(8).contains("Deleted automation nightly"));
    let nightly = env.wait_finished(child);
    assert_eq!(nightly["state"], "succeeded", "{nightly}");

    let person = requests.iter().find(|r| is_from(r, PERSON)).unwrap();
    let offered = person.tool_names();
    for tool in TOOLS {
        assert!(
            offered.iter().any(|t| t == tool),
            "{tool} not in {offered:?}"
        );
    }
    // The automation's agent has the full profile too, and not one automation tool.
    let own = requests.iter().find(|r| is_from(r, NIGHTLY)).unwrap();
    let own_tools = own.tool_names();
    assert!(
        own_tools.iter().any(|t| t == "task_list"),
        "full profile: {own_tools:?}"
    );
    assert!(
        !own_tools.iter().any(|t| t.starts_with("automation_")),
        "an automation's task must not schedule more: {own_tools:?}"
    );
}
