//! `orchestrator task read`: one task with everything the store knows about it. For a gate task
//! that is its gates and their evidence; an agent task adds its model, acceptance criteria, parent
//! and children, checklist, turns with their token usage, tool calls, shell jobs and the requests
//! that wait on a person.

use super::GlobalArgs;
use super::approval::{self, ApprovalView};
use super::task::{IdArgs, parse_id};
use super::views::TaskView;
use crate::output;
use orchestrator_store::{
    Approval, ApprovalFilter, ChecklistItem, PullChain, SavedMessage, ShellJob, Store, Task,
    ToolCallRecord, approval_status,
};
use orchestrator_types::{EventKind, Role, TaskEvent, format_millis};
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::ExitCode;

mod sections;

/// Everything `task read` shows, loaded once for both outputs.
struct Report {
    task: Task,
    view: TaskView,
    checklist: Vec<ChecklistItem>,
    turns: Vec<TurnView>,
    tool_calls: Vec<ToolCallRecord>,
    shell_jobs: Vec<ShellJob>,
    approvals: Vec<Approval>,
    children: Vec<Task>,
    /// The `github_write` events: comments, closes, pull requests.
    github_writes: Vec<TaskEvent>,
    /// The steps of its work on a pull request (`pull_round` events).
    rounds: Vec<TaskEvent>,
    /// Each pull request it opened or worked on, with every task recorded on it.
    chains: Vec<PullChain>,
    /// The context window and its use, for an agent task that has asked its model anything.
    context: Option<ContextView>,
    /// The last `environment` event: which environment the task got (made, reused,
    /// maintained, failed).
    environment: Option<TaskEvent>,
    /// The repository instructions the conversation opened with (`instructions` event).
    instructions: Option<TaskEvent>,
    /// A best-of lead's siblings side by side.
    best_of: Option<orchestrator_store::BestOfBoard>,
}

/// How an agent task used its model's context window: the window and where it came from, the
/// tokens its servers reported (with prompt cache hits), and its compactions.
#[derive(Debug, Serialize)]
struct ContextView {
    window_tokens: Option<u64>,
    window_source: Option<String>,
    compact_at_tokens: Option<u64>,
    prompt_tokens: u64,
    completion_tokens: u64,
    cached_tokens: u64,
    /// Cached prompt tokens over prompt tokens, over the replies whose server reported usage.
    cache_hit_rate: Option<f64>,
    compactions: Vec<serde_json::Value>,
}

impl ContextView {
    async fn load(store: &Store, id: orchestrator_types::TaskId) -> anyhow::Result<Option<Self>> {
        let window = store.events_of_kind(id, EventKind::ContextWindow).await?;
        let Some(last) = window.last() else {
            return Ok(None);
        };
        let mut view = ContextView {
            window_tokens: last.data["tokens"].as_u64(),
            window_source: last.data["source"].as_str().map(str::to_owned),
            compact_at_tokens: last.data["trigger"].as_u64(),
            prompt_tokens: 0,
            completion_tokens: 0,
            cached_tokens: 0,
            cache_hit_rate: None,
            compactions: store
                .events_of_kind(id, EventKind::Compacted)
                .await?
                .into_iter()
                .map(|e| e.data)
                .collect(),
        };
        // Replies, and the summaries compactions asked for.
        let mut calls = store.events_of_kind(id, EventKind::Message).await?;
        calls.extend(store.events_of_kind(id, EventKind::Compacted).await?);
        for event in calls {
            let usage = &event.data["usage"];
            view.prompt_tokens += usage["prompt_tokens"].as_u64().unwrap_or(0);
            view.completion_tokens += usage["completion_tokens"].as_u64().unwrap_or(0);
            view.cached_tokens += usage["cached_tokens"].as_u64().unwrap_or(0);
        }
        if view.prompt_tokens > 0 {
            view.cache_hit_rate = Some(view.cached_tokens as f64 / view.prompt_tokens as f64);
        }
        Ok(Some(view))
    }
}

/// One model call of the agent: what it cost and what it said first.
#[derive(Debug, Serialize)]
struct TurnView {
    turn: i64,
    attempt: i64,
    prompt_tokens: u64,
    completion_tokens: u64,
    model_ms: i64,
    tool_calls: usize,
    /// The first line of the assistant's text, if it wrote any.
    first_line: Option<String>,
}

#[derive(Debug, Serialize)]
struct ChecklistView<'a> {
    position: i64,
    text: &'a str,
    status: &'a str,
    updated_at: String,
}

#[derive(Debug, Serialize)]
struct ToolCallView<'a> {
    call_id: &'a str,
    turn: i64,
    position: i64,
    name: &'a str,
    /// As the model wrote them (a JSON text, possibly malformed).
    arguments: &'a str,
    status: &'a str,
    summary: Option<&'a str>,
    artifact_id: Option<i64>,
    duration_ms: Option<i64>,
    attempt: i64,
    started_at: String,
    finished_at: Option<String>,
}

#[derive(Debug, Serialize)]
struct ShellJobView<'a> {
    id: i64,
    command: &'a str,
    cwd: &'a str,
    status: &'a str,
    exit_code: Option<i64>,
    worker_id: &'a str,
    log_artifact_id: Option<i64>,
    summary: Option<&'a str>,
    started_at: String,
    finished_at: Option<String>,
}

pub async fn read(global: &GlobalArgs, args: IdArgs) -> anyhow::Result<ExitCode> {
    let id = parse_id(&args.id)?;
    let store = global.open_store().await?;
    let task = store.get_task(id).await?;
    let report = Report::load(&store, task).await?;
    if args.json {
        output::json(&report.json()?)?;
    } else {
        report.print()?;
    }
    Ok(ExitCode::SUCCESS)
}

impl Report {
    async fn load(store: &Store, task: Task) -> anyhow::Result<Report> {
        let id = task.id;
        let view = TaskView::full(store, &task).await?;
        let approvals = store
            .list_approvals(&ApprovalFilter {
                status: None,
                task: Some(id),
                limit: None,
            })
            .await?;
        Ok(Report {
            view,
            checklist: store.checklist(id).await?,
            turns: turns(&store.messages(id).await?),
            tool_calls: store.tool_calls(id).await?,
            shell_jobs: store.shell_jobs(id).await?,
            approvals,
            children: store.children(id).await?,
            github_writes: store.events_of_kind(id, EventKind::GithubWrite).await?,
            rounds: store.events_of_kind(id, EventKind::PullRound).await?,
            chains: store.pull_chains(id).await?,
            context: ContextView::load(store, id).await?,
            environment: store
                .events_of_kind(id, EventKind::Environment)
                .await?
                .pop(),
            instructions: store
                .events_of_kind(id, EventKind::Instructions)
                .await?
                .pop(),
            best_of: store.best_of_board(&task).await?,
            task,
        })
    }

    /// One object. The task's fields stay at the top level, where `task read --json` printed them
    /// before agent tasks existed and where scripts read them (`.state`, `.gates[]`); `task` holds
    /// them again with the agent's settings, without the gates, which have their own key.
    fn json(&self) -> anyhow::Result<serde_json::Value> {
        let mut object = serde_json::to_value(&self.view)?;
        let mut task = object.clone();
        if let Some(fields) = task.as_object_mut() {
            fields.remove("gates");
            fields.remove("gate_runs");
            fields.insert("parent_id".into(), self.task.parent_id.map(|p| p.0).into());
            fields.insert("model".into(), serde_json::to_value(&self.task.model)?);
            fields.insert("agent".into(), serde_json::to_value(&self.task.agent)?);
            fields.insert("acceptance".into(), self.task.acceptance.clone().into());
            if let Ok(policy) = orchestrator_worker::agent::effective_policy(&self.task) {
                fields.insert(
                    "sandbox".into(),
                    serde_json::json!({"mode": policy.sandbox, "network": policy.grants_network()}),
                );
            }
        }
        let Some(fields) = object.as_object_mut() else {
            anyhow::bail!("a task view is not a JSON object");
        };
        fields.insert("task".into(), task);
        let checklist: Vec<ChecklistView> = self
            .checklist
            .iter()
            .map(|i| ChecklistView {
                position: i.position,
                text: &i.text,
                status: &i.status,
                updated_at: format_millis(i.updated_at),
            })
            .collect();
        fields.insert("checklist".into(), serde_json::to_value(checklist)?);
        fields.insert("turns".into(), serde_json::to_value(&self.turns)?);
        let calls: Vec<ToolCallView> = self.tool_calls.iter().map(tool_call_view).collect();
        fields.insert("tool_calls".into(), serde_json::to_value(calls)?);
        let approvals: Vec<ApprovalView> = self.approvals.iter().map(ApprovalView::new).collect();
        fields.insert("approvals".into(), serde_json::to_value(approvals)?);
        let children: Vec<TaskView> = self.children.iter().map(TaskView::summary).collect();
        fields.insert("children".into(), serde_json::to_value(children)?);
        let jobs: Vec<ShellJobView> = self.shell_jobs.iter().map(shell_job_view).collect();
        fields.insert("shell_jobs".into(), serde_json::to_value(jobs)?);
        let writes: Vec<serde_json::Value> = self
            .github_writes
            .iter()
            .map(|e| {
                let mut data = e.data.clone();
                if let Some(fields) = data.as_object_mut() {
                    fields.insert("at".into(), format_millis(e.at).into());
                    fields.insert("seq".into(), e.seq.into());
                }
                data
            })
            .collect();
        fields.insert("github_writes".into(), writes.into());
        fields.insert("origin".into(), self.task.origin.clone().into());
        if let Some(pull) = &self.task.pull {
            let steps: Vec<serde_json::Value> = self
                .rounds
                .iter()
                .map(|e| {
                    let mut data = e.data.clone();
                    if let Some(fields) = data.as_object_mut() {
                        // The round's first message holds the context; `task read` shows the turns.
                        fields.remove("context");
                        fields.insert("at".into(), format_millis(e.at).into());
                    }
                    data
                })
                .collect();
            fields.insert(
                "pull".into(),
                serde_json::json!({"target": pull, "steps": steps}),
            );
        }
        let chains: Vec<serde_json::Value> = self
            .chains
            .iter()
            .map(|chain| {
                let tasks: Vec<serde_json::Value> = chain
                    .tasks
                    .iter()
                    .map(|t| {
                        serde_json::json!({
                            "id": t.task.id.0,
                            "role": t.role,
                            "state": t.task.state.as_str(),
                            "title": t.task.title,
                            "origin": t.task.origin,
                            "created_at": format_millis(t.task.created_at),
                        })
                    })
                    .collect();
                serde_json::json!({"pull": chain.pull, "tasks": tasks})
            })
            .collect();
        fields.insert("pull_chains".into(), chains.into());
        fields.insert("context".into(), serde_json::to_value(&self.context)?);
        fields.insert(
            "instructions".into(),
            self.instructions
                .as_ref()
                .map(|e| e.data["files"].clone())
                .unwrap_or_default(),
        );
        fields.insert("best_of".into(), serde_json::to_value(&self.best_of)?);
        fields.insert("sibling".into(), self.task.sibling.into());
        fields.insert(
            "environment".into(),
            self.environment
                .as_ref()
                .map(|e| e.data.clone())
                .unwrap_or_default(),
        );
        Ok(object)
    }

    fn print(&self) -> anyhow::Result<()> {
        let (view, task) = (&self.view, &self.task);
        output::say!("task {}  {}", view.id, view.title);
        output::say!(
            "state      {}{}",
            view.state,
            if view.cancel_requested {
                " (cancel requested)"
            } else {
                ""
            }
        );
        output::say!("attempt    {} of {}", view.attempt, view.max_attempts);
        output::say!("queue      {} (priority {})", view.queue, view.priority);
        if let Some(origin) = &task.origin {
            output::say!("made by    {origin}");
        }
        if !view.requires.is_empty() {
            let words: Vec<String> = view
                .requires
                .iter()
                .map(|w| orchestrator_types::placement::describe_requirement(w))
                .collect();
            output::say!("runs on    a worker with {}", words.join(", "));
        }
        if let Some(waiting) = &view.waiting_for {
            output::say!("waiting    {waiting}");
        }
        if let Some(ws) = &view.workspace {
            output::say!("workspace  {ws}");
            if let Some(source) = &view.worktree_of {
                output::say!("clone of   {source}");
            }
        }
        if let Some(repo) = &view.repository {
            output::say!(
                "repository {}{}{}",
                repo.url,
                repo.name
                    .as_ref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default(),
                repo.git_ref
                    .as_ref()
                    .map(|r| format!(" at {r}"))
                    .unwrap_or_else(|| " at its default branch".to_owned())
            );
            match (&repo.base, &repo.workspace) {
                (Some(base), Some(ws)) => output::say!("base       {base} (workspace {ws})"),
                _ => output::say!(
                    "base       not yet: the workspace is made when a daemon claims the task"
                ),
            }
            if let Some(event) = &self.environment {
                let said = orchestrator_types::describe(&event.kind, &event.data);
                output::say!(
                    "environment {}",
                    said.text.trim_start_matches("environment ")
                );
            } else if let Some(spec) = &task.repository.as_ref().and_then(|r| r.environment.clone())
            {
                output::say!(
                    "environment not yet: setup `{}` runs (or this machine's cache is used) when a \
                     daemon makes the workspace",
                    spec.setup.join(" && ")
                );
            }
        }
        if let Some(event) = &self.instructions {
            let files: Vec<String> = event.data["files"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|f| {
                    format!(
                        "{} ({} bytes{})",
                        f["path"].as_str().unwrap_or("?"),
                        f["bytes"],
                        if f["cut"] == true { ", cut" } else { "" }
                    )
                })
                .collect();
            output::say!("instructions {} (repository text)", files.join(", "));
        }
        if task.prompt.is_some() {
            let model = match &task.model {
                Some(m) => format!(
                    "{} at {}{}",
                    m.model,
                    m.base_url,
                    settings_note(&m.settings)
                ),
                None => "the worker's default".to_owned(),
            };
            output::say!("model      {model}");
            output::say!(
                "profile    {} (at most {} turns)",
                task.agent.profile,
                task.agent.max_turns
            );
            if let Ok(policy) = orchestrator_worker::agent::effective_policy(task) {
                output::say!(
                    "sandbox    {}, network {}",
                    policy.sandbox,
                    if policy.grants_network() { "on" } else { "off" }
                );
            }
        }
        match (task.parent_id, task.sibling) {
            (Some(parent), Some(k)) => {
                output::say!(
                    "sibling    {k} of task {parent}, which keeps the best of its siblings"
                )
            }
            (Some(parent), None) => output::say!("parent     task {parent}"),
            _ => {}
        }
        if !self.children.is_empty() && self.best_of.is_none() {
            let children: Vec<String> = self
                .children
                .iter()
                .map(|c| format!("{} ({})", c.id, c.state))
                .collect();
            output::say!("children   {}", children.join(", "));
        }
        output::say!("created    {}", view.created_at);
        if let Some(t) = &view.finished_at {
            output::say!("finished   {t}");
        }
        if let Some(owner) = &view.lease_owner {
            output::say!(
                "lease      {owner} until {}",
                view.lease_expires_at.as_deref().unwrap_or("?")
            );
        }
        if let Some(error) = &view.last_error {
            output::say!("error      {error}");
        }
        if let Some(prompt) = &task.prompt {
            output::say!("prompt     {}", output::clip(&first_line(prompt), 100));
        }
        if !task.acceptance.is_empty() {
            output::say!("acceptance");
            for criterion in &task.acceptance {
                output::say!("  - {criterion}");
            }
        }
        self.print_checklist();
        self.print_turns()?;
        self.print_context();
        self.print_tool_calls()?;
        self.print_shell_jobs()?;
        self.print_siblings();
        self.print_gates()?;
        self.print_pull();
        self.print_chains();
        self.print_github_writes();
        self.print_approvals()?;
        Ok(())
    }
}

fn dash() -> String {
    "-".to_owned()
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_owned()
}

/// The turns of a conversation: its assistant messages grouped by turn number, with their usage
/// summed (a turn that was retried after a crash has one message per try).
fn turns(messages: &[SavedMessage]) -> Vec<TurnView> {
    let mut by_turn: BTreeMap<i64, TurnView> = BTreeMap::new();
    // A compaction copies replies into its rows; a copy is no turn of its own.
    let mut seen = std::collections::HashSet::new();
    for saved in messages.iter().filter(|m| {
        m.message.role == Role::Assistant
            && seen.insert(serde_json::to_string(&m.message).unwrap_or_default())
    }) {
        let turn = by_turn.entry(saved.turn).or_insert_with(|| TurnView {
            turn: saved.turn,
            attempt: saved.attempt,
            prompt_tokens: 0,
            completion_tokens: 0,
            model_ms: 0,
            tool_calls: 0,
            first_line: None,
        });
        turn.attempt = saved.attempt;
        if let Some(usage) = &saved.usage {
            turn.prompt_tokens += usage.prompt_tokens;
            turn.completion_tokens += usage.completion_tokens;
        }
        turn.model_ms += saved.model_ms.unwrap_or(0);
        turn.tool_calls += saved.message.tool_calls.len();
        if turn.first_line.is_none() {
            turn.first_line = saved
                .message
                .content
                .as_deref()
                .map(first_line)
                .filter(|l| !l.is_empty());
        }
    }
    by_turn.into_values().collect()
}

fn tool_call_view(c: &ToolCallRecord) -> ToolCallView<'_> {
    ToolCallView {
        call_id: &c.call_id,
        turn: c.turn,
        position: c.position,
        name: &c.name,
        arguments: &c.arguments,
        status: &c.status,
        summary: c.summary.as_deref(),
        artifact_id: c.artifact_id,
        duration_ms: c.duration_ms,
        attempt: c.attempt,
        started_at: format_millis(c.started_at),
        finished_at: c.finished_at.map(format_millis),
    }
}

fn shell_job_view(j: &ShellJob) -> ShellJobView<'_> {
    ShellJobView {
        id: j.id,
        command: &j.command,
        cwd: &j.cwd,
        status: &j.status,
        exit_code: j.exit_code,
        worker_id: &j.worker_id,
        log_artifact_id: j.log_artifact_id,
        summary: j.summary.as_deref(),
        started_at: format_millis(j.started_at),
        finished_at: j.finished_at.map(format_millis),
    }
}

/// A model's settings in a few words, `""` when it has none.
fn settings_note(settings: &orchestrator_types::ModelSettings) -> String {
    let mut parts = Vec::new();
    if let Some(stream) = settings.stream {
        parts.push(format!("stream {}", if stream { "on" } else { "off" }));
    }
    if let Some(secs) = settings.idle_timeout_secs {
        parts.push(format!("idle timeout {secs} s"));
    }
    if let Some(n) = settings.max_retries {
        parts.push(format!("{n} retries"));
    }
    if let Some(n) = settings.context_window {
        parts.push(format!("context window {n}"));
    }
    if let Some(n) = settings.max_output_tokens {
        parts.push(format!("max output {n}"));
    }
    if let Some(choice) = &settings.tool_choice {
        parts.push(format!("tool_choice {choice}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}
