//! Journeys through the dashboard in a real browser: Debian's chromium driven by playwright-core
//! (npm) under node's test runner, against this binary's `serve` with a real store, real gates
//! and an agent on the scripted model. The journeys are in tests/journeys/dashboard.test.cjs; each
//! saves a screenshot under this test's output folder (`target/tmp/journeys`), and
//! docs/screenshots keeps copies of those the docs show (the README's is overview.png).
//! `scripts/test` installs chromium and playwright-core; without them this test fails and says
//! how to install them.

use crate::support::Env;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where npm's global packages are, for node to find playwright-core.
fn npm_global_root() -> Option<String> {
    let out = Command::new("npm").args(["root", "-g"]).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// What an agent's process runs: a server on 127.0.0.1 of its jail that writes down the cookie of
/// every request reaching it, and says when it listens.
const AGENT_SERVER: &str = r#"
import http.server, sys
port, seen, ready = int(sys.argv[1]), sys.argv[2], sys.argv[3]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(seen, "a") as f:
            f.write(str(self.headers.get("Cookie")) + "\n")
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"agent")
server = http.server.HTTPServer(("127.0.0.1", port), Handler)
open(ready, "w").write("listening")
server.serve_forever()
"#;

#[test]
fn dashboard_journeys_in_a_real_browser() {
    let chromium = chromium();
    let root = npm_global_root();
    let playwright = root
        .as_deref()
        .is_some_and(|r| Path::new(r).join("playwright-core").is_dir());
    assert!(
        chromium.is_some() && playwright,
        "{}",
        orchestrator_test_support::Program::ChromiumPlaywright.missing_message()
    );

    // An agent that runs one command, which its policy asks a person about.
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({"command": "echo approved-run"}),
            )]),
            _ => Reply::Text("Done.".into()),
        });
    // An agent that starts a shell job and opens a terminal, each printing a line a second, and
    // waits for the terminal's program to end: the journey watches both on the task page.
    let watched = ScriptedModel::start_blocking(|request: &Request| {
        match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "task_shell_start",
                json!({"command": "for i in 1 2 3 4 5 6 7 8; do echo job-tick-$i; sleep 1; done"}),
            )]),
            1 => Reply::ToolCalls(vec![call(
                "pty_open",
                json!({"command": "for i in 1 2 3 4 5 6 7 8; do printf '\\033[32mpty-tick-%s\\033[0m\\033[K\\n' $i; sleep 1; done", "wait_ms": 200}),
            )]),
            2 => Reply::ToolCalls(vec![call(
                "pty_poll",
                json!({"session_id": "pty-1", "wait_ms": 20000}),
            )]),
            _ => Reply::Text("Both ran.".into()),
        }
    });
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let workspace = ws.path().display().to_string();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "asks first",
        "--prompt",
        "Run the command.",
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--ask",
        "shell",
        "--workspace",
        &workspace,
        "--json",
    ]);
    let waiting = created["id"].as_i64().unwrap();
    let out = env.run(&[
        "automation",
        "create",
        "--name",
        "nightly",
        "--schedule",
        "0 3 * * *",
        "--gate",
        "true",
        "--workspace",
        &workspace,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let serve = env.serve(&[]);
    env.wait_task(waiting, "waiting", |t| t["state"] == "waiting");

    // An agent's process granted the network listens on 127.0.0.1 in its jail and writes down
    // any request that reaches it: a logged-in browser visiting that port would send it the
    // dashboard's session cookie (cookies ignore ports), had the jail the host's loopback.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let agent_port = listener.local_addr().unwrap().port();
    drop(listener);
    let seen = ws.path().join("agent-saw-a-request.txt");
    let ready = ws.path().join("agent-listens.txt");
    std::fs::write(ws.path().join("agent_server.py"), AGENT_SERVER).unwrap();
    let mut agent = env
        .cmd(&[
            "sandbox",
            "--network",
            "--workspace",
            &workspace,
            "--",
            "python3",
            "agent_server.py",
            &agent_port.to_string(),
            &seen.display().to_string(),
            &ready.display().to_string(),
        ])
        .current_dir(ws.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::support::wait_for(|| ready.exists());

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("journeys");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let journeys = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/journeys/dashboard.test.cjs");
    let output = Command::new("node")
        .arg("--test")
        .arg("--test-concurrency=1")
        .arg(&journeys)
        .env("NODE_PATH", root.unwrap())
        .env("CHROMIUM", chromium.unwrap())
        .env("BASE", format!("http://{}", serve.addr))
        .env("TOKEN", serve.token())
        .env("SHOTS", &shots)
        .env("WORKSPACE", &workspace)
        .env("WAITING_TASK", waiting.to_string())
        .env("AUTOMATION", "nightly")
        .env("AGENT_PORT", agent_port.to_string())
        .env("WATCH_MODEL", watched.base_url())
        .env("ASK_MODEL", model.base_url())
        .output()
        .unwrap();
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(
        !seen.exists(),
        "a request from the browser reached the agent's listener: {}",
        std::fs::read_to_string(&seen).unwrap_or_default()
    );
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the journeys failed:\n{report}\n--- daemon log ---\n{}",
        serve.log()
    );
    assert!(
        report.contains("# pass 9") && report.contains("# fail 0"),
        "{report}"
    );
    for shot in [
        "tasks-one-new.png",
        "tasks-row-passed.png",
        "task-passed.png",
        "approvals-after-approve.png",
        "approved-task.png",
        "automation-run-now.png",
        "task-gate-live.png",
        "log-view.png",
        "task-job-terminal-live.png",
        "overview.png",
        "automations.png",
        "task-queued.png",
        "task-approval-on-page.png",
    ] {
        let bytes = std::fs::read(shots.join(shot)).unwrap_or_default();
        assert!(bytes.starts_with(b"\x89PNG"), "no screenshot {shot}");
    }
    // What the browser did is what the store holds.
    assert_eq!(env.task(waiting)["state"], "succeeded");
    let automation = env.json(&["automation", "read", "nightly", "--json"]);
    // The dashboard's "Run now" made the one manual slot. The schedule's own 03:00 UTC slot fires
    // too when the test runs across that minute, so the manual slot is not always the latest.
    let manual: Vec<&serde_json::Value> = automation["slots"]
        .as_array()
        .map(|slots| slots.iter().filter(|s| s["kind"] == "manual").collect())
        .unwrap_or_default();
    assert_eq!(manual.len(), 1, "{automation}");
    assert_eq!(manual[0]["scheduler"], "dashboard", "{automation}");
}
