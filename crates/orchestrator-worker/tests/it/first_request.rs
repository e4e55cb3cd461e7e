//! The first request of an agent task stays under its profile's token target
//! (`FIRST_REQUEST_TARGETS`), with a GitHub configured and without, and carries no tool the task's
//! policy denies outright.
//!
//! With a GitHub the request used to miss its target (coding sent 43 schemas, about 1,100 tokens
//! over): the terminal, GitHub and PR-attempt tools are now offered on demand by `load_tools`, and
//! sent once loaded, which the last test here follows through a resume.
//!
//! The request is the real one: tasks of each profile run in a worker pool against the scripted
//! model server, which keeps every request body as it arrived, so the system prompt, the tool
//! definitions (as `run_agent` builds, filters and sorts them) and the JSON around them are what a
//! model receives. The tokens are counted as the agent bench counts them: four bytes of the body to
//! a token. The figures drifted once because nothing guarded them; this test is the guard, and on
//! failure it names the largest tools, which is where to cut.

use crate::agent::wait_state;
use orchestrator_github::{ClientConfig as GithubConfig, GitHub};
use orchestrator_store::Store;
use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel};
use orchestrator_tools::{ApprovalClass, Decision, Policy, Profile};
use orchestrator_types::{ModelSpec, NewTask, TaskState};
use orchestrator_worker::agent::FIRST_REQUEST_TARGETS;
use orchestrator_worker::model::estimate_tokens;
use orchestrator_worker::{Metrics, PoolConfig, WorkerPool};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn profile_name(profile: Profile) -> &'static str {
    match profile {
        Profile::Minimal => "minimal",
        Profile::Coding => "coding",
        Profile::Full => "full",
    }
}

/// Runs one task per `(label, profile, policy)` to its end in a pool with (or without) a GitHub,
/// and returns the first request each task sent, in the same order.
async fn first_requests(
    github: Option<&FakeGitHub>,
    tasks: &[(&str, Profile, Option<Policy>)],
) -> Vec<Request> {
    let db = orchestrator_test_support::sqlite_store().await;
    let model = ScriptedModel::start(|_: &Request| Reply::Text("Done.".into())).await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "first line\n").unwrap();
    let mut ids = Vec::new();
    for (label, profile, policy) in tasks {
        let mut task = NewTask::agent(
            format!("first request {label}"),
            format!("Read notes.txt and tell me what it says ({label})."),
        );
        task.workspace = Some(ws.path().display().to_string());
        task.agent.profile = profile_name(*profile).to_owned();
        task.agent.policy = policy.as_ref().map(|p| serde_json::to_value(p).unwrap());
        ids.push(db.store.create_task(&task).await.unwrap());
    }
    let (pool, shutdown) = pool(&db.store, &model.base_url(), github);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    for &id in &ids {
        let task = wait_state(&db.store, id, &[TaskState::Succeeded, TaskState::Failed]).await;
        assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    }
    shutdown.cancel();
    running.await.unwrap().unwrap();
    let received = model.received();
    tasks
        .iter()
        .map(|(label, _, _)| {
            received
                .iter()
                .find(|r| {
                    r.last_user_text()
                        .is_some_and(|t| t.contains(&format!("({label})")))
                })
                .unwrap_or_else(|| panic!("no request of the {label} task"))
                .clone()
        })
        .collect()
}

fn pool(
    store: &Store,
    model: &str,
    github: Option<&FakeGitHub>,
) -> (WorkerPool, CancellationToken) {
    let mut config = PoolConfig::new(format!("first-request-{}", std::process::id()));
    config.slots = 2;
    config.poll_interval = Duration::from_millis(20);
    config.agent.default_model = Some(ModelSpec {
        base_url: model.to_owned(),
        model: "scripted".into(),
        api_key_env: None,
        settings: Default::default(),
    });
    config.agent.github =
        github.map(|g| GitHub::new(GithubConfig::new(g.url(), Some(FAKE_TOKEN.into()))).unwrap());
    let pool = WorkerPool::new(store.clone(), config, Arc::new(Metrics::default())).unwrap();
    (pool, CancellationToken::new())
}

/// The tools a request sends, and those its load_tools offers to load.
fn offered(request: &Request) -> Vec<String> {
    let mut names = request.tool_names();
    let loader = request.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["function"]["name"] == "load_tools")
        .and_then(|t| t["function"]["description"].as_str())
        .unwrap_or_default()
        .to_owned();
    names.extend(
        loader
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|word| word.contains('_'))
            .map(str::to_owned),
    );
    names
}

/// The request's tokens as the bench counts them: four bytes of the body to a token.
fn tokens(request: &Request) -> u64 {
    estimate_tokens(request.body.to_string().len())
}

/// Where a request's tokens go: the system prompt, then each tool, largest first.
fn breakdown(request: &Request) -> String {
    let system = request
        .messages()
        .first()
        .map_or(0, |m| estimate_tokens(m.to_string().len()));
    let mut tools: Vec<(u64, String)> = request.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                estimate_tokens(t.to_string().len()),
                t["function"]["name"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect();
    tools.sort_by(|a, b| b.cmp(a));
    let tools: Vec<String> = tools
        .iter()
        .map(|(n, name)| format!("{name} {n}"))
        .collect();
    format!("system prompt {system}; tools: {}", tools.join(", "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_request_of_every_profile_is_under_its_target() {
    let fake = FakeGitHub::start().await;
    let tasks: Vec<(String, Profile)> = FIRST_REQUEST_TARGETS
        .iter()
        .map(|(profile, _)| (profile_name(*profile).to_owned(), *profile))
        .collect();
    let labelled: Vec<(&str, Profile, Option<Policy>)> = tasks
        .iter()
        .map(|(label, profile)| (label.as_str(), *profile, None))
        .collect();
    let mut failures = Vec::new();
    for github in [None, Some(&fake)] {
        let requests = first_requests(github, &labelled).await;
        for ((profile, target), request) in FIRST_REQUEST_TARGETS.iter().zip(&requests) {
            let names = request.tool_names();
            let sent = tokens(request);
            // The GitHub tools come with a GitHub and the coding or full profile, never without,
            // offered on demand: named by load_tools, their schemas sent once loaded.
            assert!(
                !names.iter().any(|n| n.starts_with("github_")),
                "{profile:?}: {names:?}"
            );
            assert_eq!(
                offered(request).contains(&"github_comment".to_owned()),
                github.is_some() && *profile != Profile::Minimal,
                "{profile:?}: {names:?}"
            );
            eprintln!(
                "{profile:?} {} GitHub: {sent} tokens of {target} ({} tools)",
                if github.is_some() { "with" } else { "without" },
                names.len()
            );
            if sent > *target {
                let what = format!("over the target of {target} (FIRST_REQUEST_TARGETS)");
                failures.push(format!(
                    "{profile:?} {} GitHub: {sent} tokens, {what} ({} tools). {}",
                    if github.is_some() { "with" } else { "without" },
                    names.len(),
                    breakdown(request)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A tool whose every call the policy would refuse is not sent (nor named by the system prompt);
/// a tool the policy only asks about is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_the_policy_denies_are_not_sent() {
    let fake = FakeGitHub::start().await;
    let mut read_only = Policy::allow_all();
    for class in [
        ApprovalClass::Write,
        ApprovalClass::Shell,
        ApprovalClass::Network,
    ] {
        read_only.classes.insert(class, Decision::Deny);
    }
    read_only
        .tools
        .insert("github_comment".into(), Decision::Deny);
    // A rule for one tool wins over its class: this one stays.
    read_only.tools.insert("edit_file".into(), Decision::Ask);
    let requests = first_requests(
        Some(&fake),
        &[
            ("everything", Profile::Full, None),
            ("read only", Profile::Full, Some(read_only.clone())),
        ],
    )
    .await;
    let everything = offered(&requests[0]);
    let sent = offered(&requests[1]);
    for name in [
        "write_file",
        "exec_shell",
        "fetch_url",
        "github_comment",
        "edit_file",
    ] {
        assert!(
            everything.contains(&name.to_owned()),
            "{name}: {everything:?}"
        );
    }
    for name in [
        "write_file",
        "apply_patch",
        "exec_shell",
        "fetch_url",
        "github_comment",
    ] {
        assert!(
            !sent.contains(&name.to_owned()),
            "{name} was sent: {sent:?}"
        );
    }
    for name in [
        "edit_file",
        "read_file",
        "grep_files",
        "github_issue_context",
    ] {
        assert!(
            sent.contains(&name.to_owned()),
            "{name} was not sent: {sent:?}"
        );
    }
    let system = requests[1].messages()[0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(!system.contains("exec_shell"), "{system}");
    // The tools that are left are what the policy does not deny.
    for tool in requests[1].body["tools"].as_array().unwrap() {
        let name = tool["function"]["name"].as_str().unwrap();
        assert_ne!(
            read_only.tools.get(name),
            Some(&Decision::Deny),
            "{name}: {}",
            Value::to_string(tool)
        );
    }
}

/// A group loaded with load_tools goes with every later request, after the tools sent from the
/// start (whose bytes stay as they were), and again when the agent loop resumes the task after
/// it waited for a person (a new run that has only the saved conversation to go by).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loaded_group_goes_with_every_later_request_and_after_a_resume() {
    use orchestrator_store::{ApprovalDecision, ApprovalFilter, approval_status};
    use orchestrator_test_support::model_server::call;
    use serde_json::json;

    let fake = FakeGitHub::start().await;
    let model = ScriptedModel::start(|request: &Request| match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call("load_tools", json!({"groups": ["github"]}))]),
        // A shell command the policy asks a person about: the attempt pauses here.
        1 => Reply::ToolCalls(vec![call("exec_shell", json!({"command": "true"}))]),
        _ => Reply::Text("Done.".into()),
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let mut task = NewTask::agent("load", "Look at issue 9.");
    task.workspace = Some(ws.path().display().to_string());
    task.agent.profile = "coding".into();
    let mut policy = Policy::allow_all();
    policy.classes.insert(ApprovalClass::Shell, Decision::Ask);
    task.agent.policy = Some(serde_json::to_value(policy).unwrap());
    let id = db.store.create_task(&task).await.unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), Some(&fake));
    let running = tokio::spawn(pool.run(shutdown.clone()));
    wait_state(&db.store, id, &[TaskState::Waiting]).await;
    let pending = db
        .store
        .list_approvals(&ApprovalFilter {
            task: Some(id),
            status: Some(approval_status::PENDING.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    db.store
        .decide_approval(pending[0].id, &ApprovalDecision::Approve, "test:ann")
        .await
        .unwrap();
    let done = wait_state(&db.store, id, &[TaskState::Succeeded, TaskState::Failed]).await;
    assert_eq!(done.state, TaskState::Succeeded, "{:?}", done.last_error);
    shutdown.cancel();
    running.await.unwrap().unwrap();
    let requests = model.received();
    assert_eq!(
        requests.len(),
        3,
        "load, the paused call, the answer after the resume"
    );
    for name in ["github_comment", "github_issue_context", "pr_open"] {
        assert!(
            !requests[0].tool_names().contains(&name.to_owned()),
            "{name}"
        );
        for later in &requests[1..] {
            assert!(later.tool_names().contains(&name.to_owned()), "{name}");
        }
    }
    // What was sent from the start is sent first, byte for byte, in both later requests.
    let first = requests[0].body["tools"].as_array().unwrap().clone();
    for later in &requests[1..] {
        let tools = later.body["tools"].as_array().unwrap();
        assert_eq!(&tools[..first.len()], &first[..]);
    }
    assert_eq!(requests[1].body["tools"], requests[2].body["tools"]);
    assert!(tokens(&requests[1]) > tokens(&requests[0]));
}
