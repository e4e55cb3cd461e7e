//! `orchestrator demo`: the GitHub flow on this machine, without any account. It starts a GitHub
//! stand-in (the local server the test suite checks the GitHub client against, speaking GitHub's
//! REST API, with a repository `acme/widgets` and an issue labelled `agent-fix` by a writer), a
//! scripted model (a local Chat Completions server whose replies are written in advance: it fixes
//! the file, runs the gate, records and opens the pull request and comments on the issue, as a
//! real model drives the tools), and this binary's `serve` on a home of its own configured for
//! both. The label reaches `serve` as a signed webhook delivery, as GitHub would send it; the
//! issue becomes a task, the task a draft pull request, all of it on the dashboard and on the
//! stand-in's page.
//!
//! Nothing here goes around the product: the task runs in `serve`'s workers, its gate and the
//! agent's commands in the sandbox, its GitHub writes through the guarded tools with the trigger's
//! `pre_approve`. Everything lives in one directory (a temporary one unless `--dir`), removed at
//! the end unless `--dir` named it.

use super::GlobalArgs;
use crate::exit::CliError;
use anyhow::Context;
use clap::Args;
use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;

const REPO: &str = "acme/widgets";
const ISSUE: u64 = 7;
/// How long the demo waits for the task before it gives up and says so.
const PATIENCE: Duration = Duration::from_secs(300);

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  orchestrator demo                       # runs until Ctrl-C, so the dashboard can be looked at
  orchestrator demo --exit                # stops once the pull request is open (exit 0), or says why not (exit 1)
  orchestrator demo --dir /tmp/demo --listen 127.0.0.1:7420

It needs git and bubblewrap (gates run in the sandbox, as every gate does); no network, no account,
no key. Its home, repository and workspaces are in one directory, removed at the end unless --dir
named it.")]
pub struct DemoArgs {
    /// Stop once the pull request is open (or the task ended without one) instead of waiting
    /// for Ctrl-C.
    #[arg(long)]
    pub exit: bool,
    /// The directory for the demo's home, repository and workspaces (new or empty; kept).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Where the demo's `serve` listens (the dashboard's address).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub listen: std::net::SocketAddr,
}

pub async fn run(_global: &GlobalArgs, args: DemoArgs) -> anyhow::Result<ExitCode> {
    let git = std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !git {
        return Err(CliError::Invalid(
            "the demo needs git (sudo apt install git): its repository is a git repository".into(),
        )
        .into());
    }
    let (_scratch, dir) = match &args.dir {
        Some(dir) => {
            let empty = std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none());
            if !empty {
                return Err(CliError::Invalid(format!(
                    "--dir {} is not empty: give a new or empty directory",
                    dir.display()
                ))
                .into());
            }
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            (None, dir.canonicalize()?)
        }
        None => {
            let scratch = tempfile::Builder::new()
                .prefix("orchestrator-demo-")
                .tempdir()
                .context("cannot make a temporary directory for the demo")?;
            let dir = scratch.path().canonicalize()?;
            (Some(scratch), dir)
        }
    };
    let home = dir.join("home");
    std::fs::create_dir_all(&home)?;
    let exe = std::env::current_exe().context("cannot find this program to start serve")?;

    // Gates run in the sandbox; without one the task could only fail, so say so first.
    let check = std::process::Command::new(&exe)
        .args(["sandbox", "--check"])
        .env("ORCHESTRATOR_HOME", &home)
        .env_remove("ORCHESTRATOR_CONFIG")
        .output()
        .context("cannot run sandbox --check")?;
    if !check.status.success() {
        return Err(CliError::Invalid(format!(
            "the demo's gate runs in the sandbox, as every gate does, and this machine has none: \
             {} (sudo apt install bubblewrap)",
            String::from_utf8_lossy(&check.stdout).trim()
        ))
        .into());
    }

    let source = dir.join("widgets");
    make_repository(&source)?;
    let github = FakeGitHub::start().await;
    github.seed_git(REPO, &source);
    github.add_issue(
        REPO,
        ISSUE,
        "The answer is wrong",
        "answer.txt says 41. It should say 42.",
        "carol",
    );
    github.set_permission(REPO, "alice", "write");
    github.label_issue(REPO, ISSUE, "agent-fix", "alice");
    let model = ScriptedModel::start(scripted_agent()).await;

    std::fs::write(home.join("config.toml"), config(&source, &model.base_url()))?;
    let secret = hex::encode(rand::random::<[u8; 16]>());
    let log_path = dir.join("serve.log");
    let mut serve = tokio::process::Command::new(&exe)
        .args([
            "serve",
            "--listen",
            &args.listen.to_string(),
            "--workers",
            "2",
        ])
        .env("ORCHESTRATOR_HOME", &home)
        .env("GITHUB_TOKEN", FAKE_TOKEN)
        .env("ORCHESTRATOR_GITHUB_API_URL", github.url())
        .env("ORCHESTRATOR_GITHUB_WEBHOOK_SECRET", &secret)
        .env_remove("GH_TOKEN")
        .env_remove("ORCHESTRATOR_CONFIG")
        .env_remove("ORCHESTRATOR_DATABASE_URL")
        .env_remove("ORCHESTRATOR_API_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // A group of its own: the terminal's Ctrl-C reaches the demo, which stops serve once.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .context("cannot start serve")?;
    let stderr = serve.stderr.take().context("no stderr from serve")?;
    // Ctrl-C at any point stops serve (a process group of its own, so the terminal's signal
    // reaches this process alone) and removes the demo's directory.
    let shown = tokio::select! {
        shown = show(&home, &dir, &log_path, &github, &model, stderr, &secret) => shown,
        _ = tokio::signal::ctrl_c() => {
            println!("interrupted; stopping the demo");
            stop(&mut serve).await;
            return Ok(ExitCode::from(130));
        }
    };
    let opened = match shown {
        Ok(opened) => opened,
        Err(e) => {
            stop(&mut serve).await;
            return Err(e);
        }
    };
    if !args.exit {
        println!(
            "Look around; Ctrl-C stops the demo{}.",
            if args.dir.is_none() {
                " and removes its directory"
            } else {
                ""
            }
        );
        let _ = tokio::signal::ctrl_c().await;
    }
    stop(&mut serve).await;
    Ok(if opened {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Starts the flow once serve runs: prints what to open, sends the label, follows the task, and
/// says whether a pull request came of it.
async fn show(
    home: &Path,
    dir: &Path,
    log_path: &Path,
    github: &FakeGitHub,
    model: &ScriptedModel,
    stderr: tokio::process::ChildStderr,
    secret: &str,
) -> anyhow::Result<bool> {
    let (address, once) = read_start(stderr, log_path).await?;
    let token = std::fs::read_to_string(home.join("api-token"))
        .context("serve wrote no api-token")?
        .trim()
        .to_owned();

    println!(
        "orchestrator demo: everything below runs on this machine, in {}",
        dir.display()
    );
    println!(
        "  GitHub stand-in  {}/  ({REPO}: issue #{ISSUE}, labelled agent-fix by alice, a writer)",
        github.url()
    );
    println!(
        "  model            {}  (scripted: it fixes answer.txt, runs the gate, opens a pull request, comments)",
        model.base_url()
    );
    println!(
        "  dashboard        {once}  (a one-time login link; the API token is in {})",
        home.join("api-token").display()
    );
    println!("  serve's log      {}", log_path.display());

    // GitHub's side: the label arrives as a signed webhook delivery.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let payload = json!({
        "action": "labeled",
        "label": {"name": "agent-fix"},
        "issue": {
            "number": ISSUE,
            "title": "The answer is wrong",
            "html_url": format!("https://github.com/{REPO}/issues/{ISSUE}"),
        },
        "repository": {"full_name": REPO},
        "sender": {"login": "alice"},
    })
    .to_string();
    let answer = http
        .post(format!("http://{address}/webhooks/github"))
        .header("Content-Type", "application/json")
        .header("X-GitHub-Event", "issues")
        .header("X-GitHub-Delivery", "demo-labeled-7")
        .header(
            "X-Hub-Signature-256",
            orchestrator_github::sign(secret.as_bytes(), payload.as_bytes()),
        )
        .body(payload)
        .send()
        .await
        .context("serve did not take the webhook delivery")?;
    println!(
        "GitHub sent the label as a signed webhook delivery; serve answered {}.",
        answer.status()
    );

    let outcome = follow(&http, &address, &token).await;
    let pulls = github.pulls(REPO);
    Ok(match (&outcome, pulls.first()) {
        (Ok((id, state)), Some(pull)) => {
            let branch = pull
                .pull
                .as_ref()
                .map(|p| p.head_ref.clone())
                .unwrap_or_default();
            println!(
                "Task {id} {state}: pull request #{} \"{}\" from {branch}, a draft with the gate's \
                 evidence; issue #{ISSUE} has a comment linking it.",
                pull.number, pull.title
            );
            println!("  on the stand-in  {}/#pull-{}", github.url(), pull.number);
            println!("  on the dashboard http://{address}/tasks/{id}");
            true
        }
        (Ok((id, state)), None) => {
            println!(
                "Task {id} {state} without a pull request; `orchestrator --home {} task read {id}` says why.",
                home.display()
            );
            false
        }
        (Err(e), _) => {
            println!(
                "The demo stopped waiting: {e:#}; serve's log is {}",
                log_path.display()
            );
            false
        }
    })
}

/// The repository of the issue: a file with the wrong answer, committed on `main`.
fn make_repository(source: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(source)?;
    std::fs::write(
        source.join("README.md"),
        "# widgets\n\nThe answer is in answer.txt.\n",
    )?;
    std::fs::write(source.join("answer.txt"), "41\n")?;
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &["commit", "-q", "-m", "The answer"],
    ] {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=Demo", "-c", "user.email=demo@example.com"])
            .args(args)
            .current_dir(source)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()?;
        if !out.status.success() {
            anyhow::bail!(
                "git {} in {}: {}",
                args.join(" "),
                source.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}

/// The home's config: the scripted model, and a trigger rule as docs/github-workflow.md writes
/// one, its gate the check that the answer is right.
fn config(source: &Path, model_url: &str) -> String {
    r#"# Written by `orchestrator demo`: the scripted model, and the trigger of docs/github-workflow.md.
[model]
base_url = "MODEL_URL"
model = "demo-scripted"

[github]
bot_login = "orchestrator-bot"

[[github.trigger]]
name = "agent-fix"
event = "issues.labeled"
label = "agent-fix"
repos = ["acme/widgets"]
workspace = "SOURCE"
worktree = true
pre_approve = ["github_comment", "pr_open"]

[github.trigger.task]
title = "Fix {repo}#{number}: {title}"
prompt = """
Fix {repo}#{number} ({url}). Read it with github_issue_context. When the change is made, run the
task's gate with task_gate_run (gate "test"). When it passes, record the change with
pr_attempt_record, select it with pr_attempt_select, and open a pull request with pr_open (repo
"{repo}", issue {number}). Then tell the issue what you did with github_comment.
"""
acceptance = ["answer.txt says 42", "a draft pull request fixes the issue"]
gates = [{ name = "test", command = "grep -qx 42 answer.txt", timeout_secs = 60 }]

[github.trigger.task.agent]
policy = { default = "allow", classes = { network = "deny" } }
"#
    .replace("MODEL_URL", model_url)
    .replace("SOURCE", &source.display().to_string())
}

/// The model's side, written in advance: one tool call per turn, in the order the prompt asks.
fn scripted_agent() -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    let attempt = Arc::new(AtomicI64::new(0));
    move |request: &Request| {
        let last = request.last_tool_results().join("\n");
        match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "github_issue_context",
                json!({"repo": REPO, "number": ISSUE}),
            )]),
            1 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "answer.txt", "content": "42\n"}),
            )]),
            2 => Reply::ToolCalls(vec![call("task_gate_run", json!({"gate": "test"}))]),
            3 => Reply::ToolCalls(vec![call(
                "pr_attempt_record",
                json!({"label": "the answer is 42", "group": "fix-7"}),
            )]),
            4 => {
                let id: i64 = last
                    .strip_prefix("Recorded attempt ")
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(-1);
                attempt.store(id, Ordering::SeqCst);
                Reply::ToolCalls(vec![call("pr_attempt_select", json!({"attempt_id": id}))])
            }
            5 => Reply::ToolCalls(vec![call(
                "pr_open",
                json!({
                    "attempt_id": attempt.load(Ordering::SeqCst),
                    "repo": REPO,
                    "issue": ISSUE,
                    "description": "answer.txt says 42 now.",
                }),
            )]),
            6 => {
                let url = last
                    .split_whitespace()
                    .find(|w| w.starts_with("http"))
                    .unwrap_or("(no URL)")
                    .to_owned();
                Reply::ToolCalls(vec![call(
                    "github_comment",
                    json!({
                        "repo": REPO,
                        "number": ISSUE,
                        "body": format!("Opened {url}; the test gate passes."),
                    }),
                )])
            }
            _ => Reply::Text("Fixed: answer.txt says 42, and a draft pull request is open.".into()),
        }
    }
}

/// Reads serve's stderr into the log file, and returns its address and one-time login link once
/// it printed them; serve's own error if it stopped first.
async fn read_start(
    stderr: tokio::process::ChildStderr,
    log_path: &Path,
) -> anyhow::Result<(String, String)> {
    let mut log = tokio::fs::File::create(log_path).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = log.write_all(format!("{line}\n").as_bytes()).await;
            let _ = tx.send(line);
        }
    });
    let mut said = String::new();
    let started = Instant::now();
    let (mut address, mut once) = (None, None);
    while address.is_none() || once.is_none() {
        let Ok(line) = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await else {
            anyhow::bail!("serve did not start within a minute: {said}");
        };
        let Some(line) = line else {
            anyhow::bail!("serve stopped: {said}");
        };
        said.push_str(&line);
        said.push('\n');
        if let Some(link) = line.split_whitespace().find(|w| w.contains("/login?once=")) {
            once = Some(link.to_owned());
        } else if address.is_none()
            && let Some(at) = line.find("http://")
        {
            address = line[at + 7..].split_whitespace().next().map(str::to_owned);
        }
        if started.elapsed() > Duration::from_secs(60) {
            anyhow::bail!("serve did not start within a minute: {said}");
        }
    }
    Ok((address.unwrap_or_default(), once.unwrap_or_default()))
}

/// Follows the task the delivery made through the API, saying each state it reaches, until it
/// ends: its id and its last state.
async fn follow(
    http: &reqwest::Client,
    address: &str,
    token: &str,
) -> anyhow::Result<(i64, String)> {
    let started = Instant::now();
    let get = |path: String| {
        let request = http
            .get(format!("http://{address}{path}"))
            .bearer_auth(token);
        async move {
            let response = request.send().await?;
            anyhow::Ok(response.json::<Value>().await?)
        }
    };
    let id = loop {
        let list = get("/api/v1/tasks?limit=1".into()).await?;
        if let Some(id) = list["tasks"][0]["id"].as_i64() {
            break id;
        }
        if started.elapsed() > PATIENCE {
            anyhow::bail!("no task was made from the delivery (`github deliveries` says why)");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut last = String::new();
    loop {
        let task = get(format!("/api/v1/tasks/{id}")).await?;
        let state = task["state"]
            .as_str()
            .or_else(|| task["task"]["state"].as_str())
            .unwrap_or("unknown")
            .to_owned();
        if state != last {
            println!("  task {id}: {state}");
            last = state.clone();
        }
        if ["succeeded", "failed", "canceled"].contains(&state.as_str()) {
            return Ok((id, state));
        }
        if started.elapsed() > PATIENCE {
            anyhow::bail!("task {id} is still {state} after {} s", PATIENCE.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Stops serve as Ctrl-C would, and waits for it.
async fn stop(serve: &mut tokio::process::Child) {
    if let Some(pid) = serve.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if tokio::time::timeout(Duration::from_secs(20), serve.wait())
        .await
        .is_err()
    {
        let _ = serve.kill().await;
    }
}
