//! The soak's mixed workload, as its users would bring it: gate tasks made with `task create`,
//! agent tasks whose shell calls wait for a person (answered here by a script through
//! `approval approve`), a per-second automation, and signed GitHub deliveries posted to whichever
//! daemon is up, redelivered with the same id when the daemon died before answering (as GitHub's
//! "Redeliver" does).
//!
//! Everything the soak will hold the daemons to is written down here as it happens: the tasks it
//! created, the deliveries a daemon acknowledged, the approvals the script approved.

use super::daemon::DaemonSpec;
use anyhow::{Context, Result, bail};
use orchestrator_test_support::model_server::{Reply, Request, call};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The webhook secret the daemons check deliveries against.
pub const SECRET: &str = "soak secret";
/// The repository the deliveries name.
pub const REPO: &str = "soak/widgets";
/// The sender of the deliveries, who has write access on the fake GitHub.
pub const SENDER: &str = "soak-sender";
/// The label the trigger rule listens for.
pub const LABEL: &str = "soak";
/// The automation that fires every second.
pub const AUTOMATION: &str = "soak-tick";
/// What the agent's shell call prints once it ran, so the scripted model knows it did.
const RAN: &str = "soak-ran";

/// What the workload made, and what the daemons acknowledged.
#[derive(Debug, Default)]
pub struct Ledger {
    pub gate_tasks: Vec<i64>,
    pub agent_tasks: Vec<i64>,
    /// Delivery ids a daemon answered with a 2xx (accepted, or a duplicate of an accepted one).
    pub deliveries: Vec<String>,
    /// Approval ids the script approved.
    pub approved: Vec<i64>,
}

/// The gate of the automation's and the deliveries' tasks: short, and with a `sleep` whose
/// duration is unique to this soak so its processes can be told from anyone else's.
pub fn gate_command(marker: &str) -> String {
    format!("sleep 0.3{marker}; echo ok")
}

/// The gate of the soak's own gate tasks: long enough (3 s) to be running when a daemon is killed
/// and still running after it restarted, unless something ends it.
pub fn long_gate_command(marker: &str) -> String {
    format!("sleep 3.3{marker}; echo ok")
}

/// The trigger rule and GitHub settings the daemons load from the home's config.toml.
pub fn write_config(home: &Path, workspace: &Path, marker: &str) -> Result<()> {
    let gate = gate_command(marker);
    let config = format!(
        r#"[github]
bot_login = "soak-bot"
# Short, like the lease: a delivery a killed daemon held is taken over within the cycle after.
delivery_stale_secs = 5

[[github.trigger]]
name = "soak"
event = "issues.labeled"
label = "{LABEL}"
repos = ["{REPO}"]
workspace = "{workspace}"
task = {{ title = "Soak {{repo}}#{{number}}", gates = ["{gate}"], max_attempts = 10 }}
"#,
        workspace = workspace.display()
    );
    let path = home.join("config.toml");
    std::fs::write(&path, config).with_context(|| format!("cannot write {}", path.display()))
}

/// The per-second automation: catches up every slot a dead scheduler missed, and lets slots
/// overlap so none is skipped by policy.
pub fn create_automation(spec: &DaemonSpec, workspace: &Path, marker: &str) -> Result<()> {
    let ws = workspace.display().to_string();
    let gate = gate_command(marker);
    spec.run(&[
        "automation",
        "create",
        "--name",
        AUTOMATION,
        "--schedule",
        "* * * * * *",
        "--gate",
        &gate,
        "--workspace",
        &ws,
        "--overlap",
        "allow",
        "--catch-up",
        "all",
        "--catch-up-window",
        "3600",
        "--catch-up-cap",
        "100000",
        "--json",
    ])
    .map(drop)
}

/// Creates a gate task and returns its id.
pub fn create_gate_task(
    spec: &DaemonSpec,
    n: usize,
    workspace: &Path,
    marker: &str,
) -> Result<i64> {
    let title = format!("soak gate {n}");
    let ws = workspace.display().to_string();
    let gate = long_gate_command(marker);
    created_id(&spec.run(&[
        "task",
        "create",
        "--title",
        &title,
        "--gate",
        &gate,
        "--workspace",
        &ws,
        "--max-attempts",
        "10",
        "--json",
    ])?)
}

/// Creates an agent task in a workspace of its own: the model runs one shell command, which
/// needs a person's approval, and the gate checks that it ran.
pub fn create_agent_task(
    spec: &DaemonSpec,
    n: usize,
    workspaces: &Path,
    model_url: &str,
) -> Result<i64> {
    let dir = workspaces.join(format!("agent-{n}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let title = format!("soak agent {n}");
    let ws = dir.display().to_string();
    created_id(&spec.run(&[
        "task",
        "create",
        "--title",
        &title,
        "--prompt",
        "Record that the soak ran.",
        "--model",
        "scripted",
        "--base-url",
        model_url,
        "--ask",
        "shell",
        "--gate",
        "test -s ran.log",
        "--workspace",
        &ws,
        "--max-attempts",
        "10",
        "--json",
    ])?)
}

fn created_id(stdout: &str) -> Result<i64> {
    let value: Value = serde_json::from_str(stdout)
        .with_context(|| format!("`task create` printed no JSON: {stdout}"))?;
    value["id"]
        .as_i64()
        .with_context(|| format!("`task create` printed no id: {value}"))
}

/// The scripted model of the agent tasks: it asks for the shell command until a tool result
/// says the command ran (an interrupted or refused call is asked for again), then finishes.
pub fn agent_model(request: &Request) -> Reply {
    if request
        .last_tool_results()
        .iter()
        .any(|result| result.contains(RAN))
    {
        Reply::Text("The soak ran.".into())
    } else {
        Reply::ToolCalls(vec![call(
            "exec_shell",
            json!({"command": format!("echo {RAN} >> ran.log; echo {RAN}")}),
        )])
    }
}

/// A labelled-issue delivery for issue `number`, signed as GitHub signs it.
pub fn delivery_body(number: u64) -> Vec<u8> {
    json!({
        "action": "labeled",
        "label": {"name": LABEL},
        "issue": {
            "number": number,
            "title": format!("Soak issue {number}"),
            "html_url": format!("https://github.com/{REPO}/issues/{number}"),
        },
        "repository": {"full_name": REPO},
        "sender": {"login": SENDER},
    })
    .to_string()
    .into_bytes()
}

/// Posts a delivery to the daemon at `addr`. `Ok(true)` when the daemon acknowledged it (202
/// accepted, or 200 for a duplicate), `Ok(false)` when it did not answer (it died, or is not up):
/// the caller redelivers. Any other answer is an error: the soak's deliveries are all valid.
pub fn post_delivery(addr: &str, delivery: &str, body: &[u8]) -> Result<bool> {
    let signature = orchestrator_github::sign(SECRET.as_bytes(), body);
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return Ok(false);
    };
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let head = format!(
        "POST /webhooks/github HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         X-GitHub-Event: issues\r\nX-GitHub-Delivery: {delivery}\r\n\
         X-Hub-Signature-256: {signature}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if stream.write_all(head.as_bytes()).is_err() || stream.write_all(body).is_err() {
        return Ok(false);
    }
    let mut answer = Vec::new();
    if stream.read_to_end(&mut answer).is_err() {
        return Ok(false);
    }
    let text = String::from_utf8_lossy(&answer);
    let Some(status) = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
    else {
        // The connection closed before a status line: the daemon died mid-request.
        return Ok(false);
    };
    match status {
        200 | 202 => Ok(true),
        // A daemon shutting down may refuse; another will take it.
        503 => Ok(false),
        other => bail!("delivery {delivery} was answered {other}: {text}"),
    }
}

/// Approves, through the CLI as a person's script would, every pending approval it is given, and
/// returns the ids it approved. An approval that expired or was decided meanwhile is skipped.
pub fn approve(spec: &DaemonSpec, pending: &[i64]) -> Vec<i64> {
    pending
        .iter()
        .copied()
        .filter(|id| spec.run(&["approval", "approve", &id.to_string()]).is_ok())
        .collect()
}

/// The directory the soak's gate tasks run in (they only sleep and print), beside the agents'
/// workspaces and outside the home: a person's gates run in the sandbox, which hides the home.
pub fn gate_workspace(workspaces: &Path) -> Result<PathBuf> {
    let dir = workspaces.join("gates");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}
