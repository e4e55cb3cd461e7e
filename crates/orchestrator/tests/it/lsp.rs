//! An agent task with rust-analyzer configured, driven by the scripted model through `serve`: an
//! edit that breaks the crate comes back with rust-analyzer's error, the fix with none, the lsp
//! tool answers, and no language server outlives the task.

use crate::support::{Env, assert_no_process_with};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::json;

const LIB: &str =
    "pub fn answer() -> u32 {\n    42\n}\n\npub fn caller() -> u32 {\n    answer()\n}\n";

fn script(request: &Request) -> Reply {
    match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call(
            "edit_file",
            json!({"path": "src/lib.rs", "old_string": "    42\n", "new_string": "    \"forty-two\"\n"}),
        )]),
        1 => Reply::ToolCalls(vec![call(
            "edit_file",
            json!({"path": "src/lib.rs", "old_string": "    \"forty-two\"\n", "new_string": "    42\n"}),
        )]),
        2 => Reply::ToolCalls(vec![call(
            "lsp",
            json!({"operation": "definition", "path": "src/lib.rs", "line": 6, "symbol": "answer"}),
        )]),
        _ => Reply::Text("Done.".into()),
    }
}

#[test]
fn an_agents_edit_gets_rust_analyzers_errors_and_its_server_ends_with_the_task() {
    let model = ScriptedModel::start_blocking(script);
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        "[lsp_servers.rust-analyzer]\ndiagnostics_timeout_sec = 300\nrequest_timeout_sec = 300\nstartup_timeout_sec = 120\n",
    )
    .unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("Cargo.toml"),
        "[package]\nname = \"answer\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::create_dir(ws.path().join("src")).unwrap();
    std::fs::write(ws.path().join("src/lib.rs"), LIB).unwrap();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "break and fix",
        "--prompt",
        "Break the crate, then fix it.",
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
    assert_eq!(requests.len(), 4, "{} requests", requests.len());
    assert!(requests[0].tool_names().contains(&"lsp".to_owned()));
    let broke = requests[1].last_tool_results().join("\n");
    assert!(
        broke.contains("in src/lib.rs after this edit (rust-analyzer):"),
        "{broke}"
    );
    assert!(broke.contains("src/lib.rs:2:5: error"), "{broke}");
    assert!(broke.contains("mismatched types"), "{broke}");
    let fixed = requests[2].last_tool_results().join("\n");
    assert!(!fixed.contains(": error"), "{fixed}");
    assert!(
        fixed.contains("No errors remain in src/lib.rs (rust-analyzer)."),
        "{fixed}"
    );
    let definition = requests[3].last_tool_results().join("\n");
    assert!(
        definition.contains("src/lib.rs:1:8: pub fn answer() -> u32 {"),
        "{definition}"
    );

    // The attempt ended, and its language server with it.
    assert_no_process_with("rust-analyzer");
}
