//! `orchestrator tool list|run` and `orchestrator mcp` as a user and an MCP client see them: exit codes,
//! JSON shapes, and a real MCP client that the project did not write (the official Python `mcp`
//! package) listing the tools and calling read_file and grep_files.

use std::process::Command;

use orchestrator_test_support::Program;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_orchestrator");
const MCP_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_client.py");

fn orchestrator(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .env("ORCHESTRATOR_HOME", home)
        .args(args)
        .output()
        .expect("the orchestrator binary runs")
}

#[test]
fn tool_list_json_has_name_description_schema() {
    let home = tempfile::tempdir().unwrap();
    let out = orchestrator(
        home.path(),
        &["tool", "list", "--profile", "full", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tools: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for expected in [
        "read_file",
        "list_dir",
        "write_file",
        "edit_file",
        "multi_edit",
        "apply_patch",
        "grep_files",
        "file_search",
        "glob",
        "exec_shell",
        "exec_shell_wait",
        "exec_shell_interact",
        "exec_shell_cancel",
        "git_status",
        "git_diff",
        "diagnostics",
        "retrieve_tool_result",
        "fetch_url",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    for t in &tools {
        assert!(t["description"].as_str().unwrap().len() > 40, "{t}");
        assert_eq!(t["input_schema"]["type"], "object", "{t}");
    }
    let human = orchestrator(home.path(), &["tool", "list"]);
    assert!(human.status.success());
    assert!(String::from_utf8_lossy(&human.stdout).starts_with("NAME"));
}

/// `tool list --profile P` is what a model of that profile receives, durable tools included, with
/// what each costs in every request.
#[test]
fn tool_list_shows_a_profiles_tools_and_their_size_in_tokens() {
    let home = tempfile::tempdir().unwrap();
    let list = |profile: &str| -> Vec<Value> {
        let out = orchestrator(
            home.path(),
            &["tool", "list", "--profile", profile, "--json"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let minimal = list("minimal");
    let names: Vec<&str> = minimal
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "context_status",
            "file_search",
            "glob",
            "grep_files",
            "list_dir",
            "read_file",
            "read_skill",
            "retrieve_tool_result",
            "skill",
            "think",
            "view_image"
        ]
    );
    assert!(minimal.iter().all(|t| t["tokens"].as_u64().unwrap() > 0));
    // Every profile can ask how full its window is; the rest of minimal is workspace tools.
    assert!(
        minimal
            .iter()
            .all(|t| (t["durable"] == true) == (t["name"] == "context_status")),
        "{minimal:?}"
    );
    let coding = list("coding");
    let durable: Vec<&str> = coding
        .iter()
        .filter(|t| t["durable"] == true)
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        durable.contains(&"checklist_write") && durable.contains(&"task_gate_run"),
        "{durable:?}"
    );
    assert!(
        !durable.contains(&"agent_spawn"),
        "sub-agents come with full: {durable:?}"
    );
    assert!(
        !coding
            .iter()
            .any(|t| t["name"].as_str().unwrap().starts_with("github_")),
        "no GitHub is configured"
    );
    // Code intelligence comes with coding; one-shot model fan-out with full.
    assert!(coding.iter().any(|t| t["name"] == "lsp"));
    // Interactive terminals come with the shell, so with coding, not minimal.
    for tool in ["pty_open", "pty_write", "pty_poll", "pty_list", "pty_kill"] {
        assert!(coding.iter().any(|t| t["name"] == tool), "{tool}");
        assert!(!minimal.iter().any(|t| t["name"] == tool), "{tool}");
    }
    assert!(!coding.iter().any(|t| t["name"] == "llm_query_batched"));
    let full = list("full");
    assert!(full.iter().any(|t| t["name"] == "agent_spawn"));
    // The schedules are full's: all eight automation tools, durable, and none below it.
    let automation_tools = |tools: &[Value]| {
        tools
            .iter()
            .filter(|t| {
                t["name"].as_str().unwrap().starts_with("automation_") && t["durable"] == true
            })
            .count()
    };
    assert_eq!(automation_tools(&full), 8);
    assert_eq!(automation_tools(&coding), 0);
    assert_eq!(automation_tools(&minimal), 0);
    assert!(
        full.iter()
            .any(|t| t["name"] == "llm_query_batched" && t["durable"] == true)
    );
    let total =
        |tools: &[Value]| -> u64 { tools.iter().map(|t| t["tokens"].as_u64().unwrap()).sum() };
    assert!(total(&minimal) < total(&coding) && total(&coding) < total(&full));
    let human = orchestrator(home.path(), &["tool", "list", "--profile", "minimal"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains(&format!(
            "11 tools, about {} tokens of definitions",
            total(&minimal)
        )),
        "{text}"
    );
}

#[test]
fn tool_run_success_and_errors_have_distinct_exit_codes() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "alpha\nbeta\n").unwrap();
    let w = ws.path().to_str().unwrap();
    let out = orchestrator(
        home.path(),
        &[
            "tool",
            "run",
            "read_file",
            "--workspace",
            w,
            "--args",
            r#"{"path": "a.txt"}"#,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("     2\tbeta"));

    let out = orchestrator(
        home.path(),
        &[
            "tool",
            "run",
            "read_file",
            "--workspace",
            w,
            "--args",
            r#"{"path": "nope.txt"}"#,
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "a tool error must exit 1");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["is_error"], true);
    assert!(
        v["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("does not exist")
    );

    let out = orchestrator(
        home.path(),
        &[
            "tool",
            "run",
            "read_file",
            "--workspace",
            w,
            "--args",
            "{not json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid JSON"));

    let out = orchestrator(
        home.path(),
        &[
            "tool",
            "run",
            "read_file",
            "--workspace",
            w,
            "--args",
            r#"{"path": "../etc/passwd"}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused"));

    let args_file = ws.path().join("args.json");
    std::fs::write(
        &args_file,
        r#"{"path": "a.txt", "old_string": "beta", "new_string": "gamma"}"#,
    )
    .unwrap();
    let out = orchestrator(
        home.path(),
        &[
            "tool",
            "run",
            "edit_file",
            "--workspace",
            w,
            "--args-file",
            args_file.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "alpha\ngamma\n"
    );

    let out = orchestrator(
        home.path(),
        &[
            "tool",
            "run",
            "no_such_tool",
            "--workspace",
            w,
            "--args",
            "{}",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown tool"));
}

#[test]
fn official_python_mcp_client_lists_and_calls_tools() {
    orchestrator_test_support::require(Program::Python3);
    orchestrator_test_support::require(Program::PythonMcp);
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.txt"), "hello from the workspace\n").unwrap();
    std::fs::create_dir(ws.path().join("src")).unwrap();
    std::fs::write(ws.path().join("src/a.rs"), "fn f() { needle(); }\n").unwrap();
    let out = Command::new("python3")
        .args([
            MCP_CLIENT,
            BIN,
            ws.path().to_str().unwrap(),
            home.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Python MCP client failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["tools"]["read_file"]["schema"]["properties"]["path"].is_object(),
        "{v}"
    );
    assert!(
        v["tools"]["grep_files"]["description"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("regex")
    );
    assert_eq!(v["read_file"]["is_error"], false);
    assert!(
        v["read_file"]["text"]
            .as_str()
            .unwrap()
            .contains("     1\thello from the workspace")
    );
    assert_eq!(v["grep_files"]["is_error"], false);
    assert!(
        v["grep_files"]["text"]
            .as_str()
            .unwrap()
            .contains("src/a.rs:1:fn f() { needle(); }"),
        "{v}"
    );
    assert_eq!(v["missing"]["is_error"], true);
    assert!(
        v["missing"]["text"]
            .as_str()
            .unwrap()
            .contains("does not exist")
    );
}
