//! The first request of an agent task stays under its profile's token target
//! (`FIRST_REQUEST_TARGETS`) without a GitHub configured, and for minimal with one too, and carries
//! no tool the task's policy denies outright.
//!
//! Coding and full with a GitHub are held to `FIRST_REQUEST_GITHUB_CEILINGS` instead, which is a
//! ratchet, not the design target: the GitHub and pull-request tools put them about 1,090 (coding)
//! and 590 (full) tokens over their targets, a gap that trimming descriptions cannot close (the
//! JSON structure of coding's 43 schemas alone is about 3,000 tokens). The ceilings only keep the
//! figures from growing; meeting the targets needs fewer tools in those requests.
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
use orchestrator_worker::agent::{FIRST_REQUEST_GITHUB_CEILINGS, FIRST_REQUEST_TARGETS};
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
async fn the_first_request_of_every_profile_is_under_its_target_or_ratchet() {
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
            // The GitHub tools come with a GitHub and the coding or full profile, never without.
            let has_github_tools = names.iter().any(|n| n.starts_with("github_"));
            assert_eq!(
                has_github_tools,
                github.is_some() && *profile != Profile::Minimal,
                "{profile:?}: {names:?}"
            );
            // With a GitHub, coding and full answer to a ratchet, not to their target.
            let ceiling = FIRST_REQUEST_GITHUB_CEILINGS
                .iter()
                .find(|(p, _)| github.is_some() && p == profile)
                .map(|(_, ceiling)| *ceiling);
            let limit = ceiling.unwrap_or(*target);
            if sent > limit {
                let what = match ceiling {
                    Some(ceiling) => format!(
                        "over the ceiling of {ceiling} (FIRST_REQUEST_GITHUB_CEILINGS: a ratchet \
                         set at the figure when it was last lowered, not the design target of \
                         {target}, which this request misses by {} tokens); the request grew: \
                         cut it back, and do not raise the ceiling",
                        sent - target
                    ),
                    None => format!("over the target of {target} (FIRST_REQUEST_TARGETS)"),
                };
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
    let everything = requests[0].tool_names();
    let sent = requests[1].tool_names();
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
