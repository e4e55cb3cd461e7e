//! The tasks page (the home page: counts per state, filters kept in the URL, keyset pages) and a
//! task's page (header with cancel and retry, gates with evidence, approvals, children, the event
//! timeline, live while the task runs). Cancel, retry and their bulk forms are in
//! `task_actions.rs`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::html;
use orchestrator_store::{ApprovalFilter, LogKind, log_state};
use orchestrator_types::{EventKind, TaskId, TaskState};
use serde::Deserialize;
use std::collections::HashMap;

use super::{Viewer, duration, layout, page_error, store_error, time};
use crate::Web;
use crate::filter::Filter;

const PAGE: u64 = 50;
/// Repositories the filter offers.
const REPOSITORIES: u64 = 100;
const TIMELINE: u64 = 1000;

#[derive(Deserialize)]
pub(crate) struct Filters {
    pub(super) state: Option<String>,
    pub(super) queue: Option<String>,
    pub(super) automation: Option<String>,
    pub(super) q: Option<String>,
    pub(super) repository: Option<String>,
    pub(super) verdict: Option<String>,
    pub(super) before: Option<i64>,
}

impl Filters {
    pub(super) fn filter(&self) -> Filter {
        Filter {
            state: self.state.clone(),
            queue: self.queue.clone(),
            automation: self.automation.clone(),
            q: self.q.clone(),
            repository: self.repository.clone(),
            verdict: self.verdict.clone(),
        }
    }

    /// The filters as a query string, with the state and `before` replaced.
    pub(super) fn link(&self, state: Option<&str>, before: Option<i64>) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if let Some(state) = state {
            query.append_pair("state", state);
        }
        for (name, value) in self.filter().pairs() {
            if name != "state" {
                query.append_pair(name, value);
            }
        }
        if let Some(before) = before {
            query.append_pair("before", &before.to_string());
        }
        let query = query.finish();
        if query.is_empty() {
            "/".to_owned()
        } else {
            format!("/?{query}")
        }
    }
}

pub(super) fn state_class(state: &str) -> String {
    format!("state state-{state}")
}

pub(crate) async fn list(
    State(web): State<Web>,
    headers: HeaderMap,
    filters: Result<Query<Filters>, QueryRejection>,
) -> Response {
    let filters = match filters {
        Ok(Query(filters)) => filters,
        Err(e) => return page_error(StatusCode::BAD_REQUEST, "Bad filter", &e.body_text()),
    };
    let viewer = Viewer::of(&web, &headers).await;
    let page = match filters
        .filter()
        .page(&web.store, filters.before.map(TaskId), PAGE + 1)
        .await
    {
        Ok(page) => page,
        Err(e) if e.status == StatusCode::BAD_REQUEST => {
            return page_error(StatusCode::BAD_REQUEST, "Bad filter", &e.message);
        }
        Err(e) => return page_error(e.status, "Something went wrong", &e.message),
    };
    let state = page.state;
    let pending = ApprovalFilter {
        status: Some(orchestrator_store::approval_status::PENDING.to_owned()),
        task: None,
        limit: Some(200),
    };
    // Where the rows are read in the order of changes, taken before them: the page's script
    // follows the changes from there, so one that commits after the rows were read and before
    // its stream opens is not missed (every change after this point is after it).
    let horizon = match web.store.change_horizon().await {
        Ok(horizon) => horizon.change,
        Err(e) => return store_error(e),
    };
    let (mut tasks, counts, repositories, automations, pending, live) = match tokio::try_join!(
        web.store.task_page(&page),
        web.store.count_by_state(),
        web.store.repositories(REPOSITORIES),
        web.store.list_automations(),
        web.store.list_approvals(&pending),
        web.store.live_workers(orchestrator_types::now_millis()),
    ) {
        Ok(found) => found,
        Err(e) => return store_error(e),
    };
    let older = if tasks.len() as u64 > PAGE {
        tasks.truncate(PAGE as usize);
        tasks.last().map(|t| t.id.0)
    } else {
        None
    };
    let current = state.map(|s| s.as_str());
    let total: i64 = counts.iter().map(|(_, n)| n).sum();
    let content = html! {
        h1 { "Tasks" }
        nav.counts {
            a class=@if current.is_none() { "current" } href=(filters.link(None, None)) { "all " span.muted data-count="all" { (total) } }
            @for (s, n) in &counts {
                a class=@if current == Some(s.as_str()) { "current" } href=(filters.link(Some(s.as_str()), None)) {
                    span class=(state_class(s.as_str())) { (s.as_str()) } " " span.muted data-count=(s.as_str()) { (n) }
                }
            }
        }
        form.filters method="get" action="/" {
            select name="state" {
                option value="" { "any state" }
                @for s in TaskState::ALL {
                    option value=(s.as_str()) selected[current == Some(s.as_str())] { (s.as_str()) }
                }
            }
            input type="text" name="q" placeholder="title contains" value=(filters.q.clone().unwrap_or_default());
            input type="text" name="queue" placeholder="queue" value=(filters.queue.clone().unwrap_or_default());
            input type="text" name="automation" placeholder="automation" value=(filters.automation.clone().unwrap_or_default());
            @let repository = filters.repository.clone().unwrap_or_default();
            select name="repository" aria-label="repository" {
                option value="" { "any repository" }
                @for r in &repositories { option value=(r) selected[*r == repository] { (r) } }
                // One given in the URL that no task has (any more) stays selected.
                @if !repository.is_empty() && !repositories.contains(&repository) { option value=(repository) selected { (repository) } }
            }
            @let verdict = filters.verdict.clone().unwrap_or_default();
            select name="verdict" aria-label="gate verdict" {
                option value="" { "any gate verdict" }
                @for v in ["passed", "failed", "timed_out", "error", "canceled"] {
                    option value=(v) selected[verdict == v] { "a gate " (v) }
                }
            }
            button type="submit" { "Filter" }
            " " a href="/" { "clear" }
        }
        // On the newest page, a script follows the changes to tasks: the rows shown follow their
        // state, and newer tasks that match are counted instead of moving the rows under the
        // reader's cursor. Live updates can be paused.
        @if filters.before.is_none() {
            p { button type="button" data-live-toggle hidden { "Pause live updates" } }
            p.live data-new-tasks data-newest=(tasks.first().map_or(0, |t| t.id.0)) data-after=(horizon)
                data-poll=(format!("/api/v1/tasks?limit=200&{}", filters.link(current, None).trim_start_matches('/').trim_start_matches('?'))) hidden {
                a href=(filters.link(current, None)) { span data-new-count { "0" } " new: show them" }
            }
        }
        @if tasks.is_empty() {
            p.muted { "No tasks match." }
        } @else {
            table.tasks {
                thead { tr { th { "id" } th { "state" } th { "title" } th { "kind" } th { "attempt" } th { "took" } th { "updated" } } }
                tbody {
                    @for t in &tasks {
                        tr data-task=(t.id.0) {
                            td { a href=(format!("/tasks/{}", t.id.0)) { (t.id.0) } }
                            td {
                                span class=(state_class(t.state.as_str())) data-row-state=(t.state.as_str()) { (t.state.as_str()) }
                                @if let Some(why) = row_reason(t, &pending, &live) { div.muted.why data-row-why { (orchestrator_types::visible(&why)) } }
                            }
                            td {
                                a href=(format!("/tasks/{}", t.id.0)) { (t.title) }
                                div.muted.origin { (row_origin(t, &automations)) }
                            }
                            td { @if t.prompt.is_some() { "agent" } @else { "gates" } }
                            td data-row-attempt { (t.attempt) "/" (t.max_attempts) }
                            td.muted { (row_duration(t)) }
                            td.muted { (time(t.updated_at)) }
                        }
                    }
                }
            }
        }
        @if !viewer.read_only && !filters.filter().is_empty() {
            p.muted {
                "All that match: "
                a href=(format!("/bulk?action=cancel&{}", filters.link(current, None).trim_start_matches("/?"))) { "Cancel matching…" }
                " · "
                a href=(format!("/bulk?action=retry&{}", filters.link(current, None).trim_start_matches("/?"))) { "Retry matching…" }
            }
        }
        p {
            @if filters.before.is_some() { a href=(filters.link(current, None)) { "Newest" } " " }
            @if let Some(before) = older { a rel="next" href=(filters.link(current, Some(before))) { "Older →" } }
        }
    };
    layout(&viewer, "Tasks", content)
}

/// The base and the workspace of a repository task's latest `workspace_prepared` event.
fn prepared_base(events: &[orchestrator_types::TaskEvent]) -> Option<(String, String)> {
    let prepared = events.iter().rev().find(|e| {
        e.kind == EventKind::WorkspacePrepared.as_str() && e.data.get("base").is_some()
    })?;
    let text = |key: &str| {
        prepared
            .data
            .get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    Some((text("base"), text("workspace")))
}

/// Where a task works and what made it, for its row: "/src/widgets · automation nightly · queue
/// default".
fn row_origin(
    task: &orchestrator_store::Task,
    automations: &[orchestrator_store::Automation],
) -> String {
    let mut parts = Vec::new();
    if let Some(repository) = &task.repository {
        parts.push(repository.url.clone());
    } else if let Some(workspace) = task.worktree_of.as_ref().or(task.workspace.as_ref()) {
        parts.push(workspace.clone());
    }
    if let Some(id) = task.automation_id {
        match automations.iter().find(|a| a.id == id) {
            Some(a) => parts.push(format!("automation {}", a.spec.name)),
            None => parts.push(format!("automation {id}")),
        }
    } else if let Some(origin) = &task.origin {
        parts.push(origin.clone());
    } else if let Some(parent) = task.parent_id {
        parts.push(format!("sub-agent of task {}", parent.0));
    }
    parts.push(format!("queue {}", task.queue));
    parts.join(" · ")
}

/// What a row needs to say under its state: what a waiting task waits for (the command or the
/// question), or the first line of why it failed.
fn row_reason(
    task: &orchestrator_store::Task,
    pending: &[orchestrator_store::Approval],
    live: &[orchestrator_store::WorkerRow],
) -> Option<String> {
    if task.state == TaskState::Queued
        && let Some(unmet) = orchestrator_store::unmet(&task.requires, live)
    {
        return Some(format!("waiting: {unmet}"));
    }
    match task.state {
        TaskState::Waiting => {
            let asked = pending
                .iter()
                .filter(|a| a.task_id == task.id)
                .collect::<Vec<_>>();
            let first = asked.first()?;
            let what = super::asked(first);
            let more = if asked.len() > 1 {
                format!(" (and {} more)", asked.len() - 1)
            } else {
                String::new()
            };
            Some(format!("waits for {what}{more}"))
        }
        TaskState::Failed | TaskState::Canceled | TaskState::Queued => task
            .last_error
            .as_deref()
            .and_then(|e| e.lines().map(str::trim).find(|l| !l.is_empty()))
            .map(|line| line.chars().take(160).collect()),
        _ => None,
    }
}

/// When the run that the claim numbered `claim` started ended: at the next event that gives the
/// task up (it ended, waits for a person, or went back to the queue), if there is one yet.
fn attempt_end(events: &[orchestrator_types::TaskEvent], claim: i64) -> Option<i64> {
    const ENDS: [EventKind; 7] = [
        EventKind::Succeeded,
        EventKind::Failed,
        EventKind::Canceled,
        EventKind::Requeued,
        EventKind::Rescued,
        EventKind::HandedBack,
        EventKind::Waiting,
    ];
    events
        .iter()
        .filter(|e| e.seq > claim)
        .find(|e| ENDS.iter().any(|k| k.as_str() == e.kind))
        .map(|e| e.at)
}

/// How long a task ran (or has run so far); nothing before it starts.
fn row_duration(task: &orchestrator_store::Task) -> String {
    match (task.started_at, task.finished_at) {
        (Some(started), Some(finished)) => duration(finished - started),
        (Some(started), None) if task.state == TaskState::Running => {
            duration(orchestrator_types::now_millis() - started)
        }
        _ => "-".to_owned(),
    }
}

/// The last `pr_attempt_preflight` of an attempt, as the agent ran it.
struct Preflight {
    status: String,
    summary: String,
    onto: Option<String>,
}

/// Each attempt's last preflight, from the task's tool calls (the arguments as the model wrote
/// them, under any of the tool's names for the attempt).
fn preflights(calls: &[orchestrator_store::ToolCallRecord]) -> HashMap<i64, Preflight> {
    let mut found = HashMap::new();
    for call in calls.iter().filter(|c| c.name == "pr_attempt_preflight") {
        let Ok(args) = serde_json::from_str::<serde_json::Value>(&call.arguments) else {
            continue;
        };
        let Some(attempt) = ["attempt_id", "id", "attempt"]
            .iter()
            .find_map(|key| args.get(key).and_then(serde_json::Value::as_i64))
        else {
            continue;
        };
        found.insert(
            attempt,
            Preflight {
                status: call.status.clone(),
                summary: call.summary.clone().unwrap_or_else(|| call.status.clone()),
                onto: args
                    .get("onto")
                    .or_else(|| args.get("base"))
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned),
            },
        );
    }
    found
}

/// The pull requests opened for each attempt (number and address), from the task's GitHub
/// writes.
fn pulls(writes: &[orchestrator_types::TaskEvent]) -> HashMap<i64, Vec<(i64, String)>> {
    let mut found: HashMap<i64, Vec<(i64, String)>> = HashMap::new();
    for data in writes.iter().map(|e| &e.data) {
        if data["action"] != "pr_opened" {
            continue;
        }
        if let (Some(attempt), Some(number)) = (data["attempt"].as_i64(), data["number"].as_i64()) {
            let url = data["url"].as_str().unwrap_or_default().to_owned();
            found.entry(attempt).or_default().push((number, url));
        }
    }
    found
}

pub(super) fn parse_id(id: &str) -> Result<TaskId, super::Refused> {
    id.parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .map(TaskId)
        .ok_or_else(|| {
            page_error(
                StatusCode::BAD_REQUEST,
                "Bad task id",
                &format!("{id:?} is not a task id"),
            )
            .into()
        })
}

pub(crate) async fn read(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let id = match parse_id(&id) {
        Ok(id) => id,
        Err(page) => return page.into_response(),
    };
    let viewer = Viewer::of(&web, &headers).await;
    let of_task = ApprovalFilter {
        status: None,
        task: Some(id),
        limit: Some(100),
    };
    let found = tokio::try_join!(
        web.store.get_task(id),
        web.store.gates(id),
        web.store.events(id, 0, TIMELINE),
        web.store.children(id),
        web.store.list_approvals(&of_task),
        web.store.attempts(Some(id), None),
        web.store.checklist(id),
        web.store.messages(id),
        web.store.tool_calls(id),
        web.store.task_artifacts(id),
        web.store.events_of_kind(id, EventKind::GithubWrite),
        web.store.live_logs(id),
        crate::logs::entries(&web.store, id),
        web.store.pull_chains(id),
    );
    let (
        task,
        gates,
        events,
        children,
        approvals,
        attempts,
        checklist,
        messages,
        calls,
        artifacts,
        writes,
        live_logs,
        logs,
        chains,
    ) = match found {
        Ok(found) => found,
        Err(e) => return store_error(e),
    };
    // The reads above run side by side: the task's row may have been read before an event that
    // the timeline holds (a claim between the two). The page follows only the events after its
    // timeline, so it would show the older state until the next change of state; the row read
    // again is at least as new as the timeline.
    let task = match events.last() {
        Some(last) if last.seq > task.event_seq => match web.store.get_task(id).await {
            Ok(newer) => newer,
            Err(e) => return store_error(e),
        },
        _ => task,
    };
    let board = match web.store.best_of_board(&task).await {
        Ok(board) => board,
        Err(e) => return store_error(e),
    };
    let running = running_gates(&events, &live_logs, task.attempt);
    // Where it can run, and while it is queued, whether some live worker can run it.
    let waiting_for = match task.state {
        // What no live worker offers, a spent daily budget, a concurrency key's taken turns.
        TaskState::Queued => web.store.why_queued(&task).await.unwrap_or_default(),
        // A request of the agent waits for its model server's slot.
        TaskState::Running => web
            .store
            .model_wait_of(task.id)
            .await
            .unwrap_or_default()
            .map(|w| w.describe(orchestrator_types::now_millis())),
        _ => None,
    };
    // Shell jobs, terminals and background jobs: a panel follows each that runs, and each links
    // to its log view.
    let commands: Vec<&crate::logs::LogEntry> = logs
        .iter()
        .filter(|e| !matches!(e.kind, LogKind::Gate(_)))
        .collect();
    let checks = preflights(&calls);
    let pulls = pulls(&writes);
    let turns = crate::turns::turns(messages, calls);
    let live = !task.state.is_terminal();
    let kinds: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
    let content = html! {
        h1 { "Task " (task.id.0) ": " (task.title) }
        div.card {
            p {
                span class=(state_class(task.state.as_str())) data-state=(task.state.as_str()) { (task.state.as_str()) }
                " · attempt " span data-attempt-now { (task.attempt.max(1)) } " of " (task.max_attempts)
                " · queue " (task.queue)
                @if let Some(parent) = task.parent_id { " · child of " a href=(format!("/tasks/{}", parent.0)) { "task " (parent.0) } }
                @if let Some(automation) = task.automation_id { " · made by automation " (automation) }
            }
            p.muted {
                "created " (time(task.created_at)) " · updated " (time(task.updated_at))
                @if let Some(started) = task.started_at {
                    @if let Some(finished) = task.finished_at { " · ran for " (duration(finished - started)) }
                    @else if task.state == TaskState::Running { " · running for " (duration(orchestrator_types::now_millis() - started)) }
                }
            }
            // The error is the task's own once it ended; while it is queued or runs again it is
            // what ended the attempt before, said as such (the script drops it when the next
            // attempt starts).
            @if let Some(error) = &task.last_error {
                @if task.state.is_terminal() { p.error data-last-error { (error) } }
                // A claim counts the attempt: while one runs (or waits on a person) the error is the
                // one before it; while queued, the last one's.
                @else {
                    @let ended = if task.state == TaskState::Queued { task.attempt } else { task.attempt - 1 };
                    p.muted data-last-error { "attempt " (ended.max(1)) " ended: " (error) }
                }
            }
            @if let Some(model) = &task.model {
                p.muted data-model {
                    "model " code { (model.model) } " at " code { (orchestrator_store::redact_url(&model.base_url)) }
                    @match &model.api_key_env {
                        Some(var) => { " · key from " code { (var) } }
                        None => { " · no key" }
                    }
                    " · tools " (task.agent.profile)
                }
            }
            @if let Some(workspace) = &task.workspace { p.muted { "workspace " code { (workspace) } } }
            @if !task.requires.is_empty() {
                p.muted data-requires {
                    "runs on a worker with "
                    (task.requires.iter().map(|w| orchestrator_types::placement::describe_requirement(w)).collect::<Vec<_>>().join(", "))
                }
            }
            @if let Some(waiting) = &waiting_for { p.warn data-waiting-for { "waiting: " (waiting) } }
            @if let Some(repository) = &task.repository {
                p.muted data-repository=(repository.url) {
                    "repository " code { (repository.url) }
                    @if let Some(name) = &repository.name { " (" (name) ")" }
                    " at " code { (repository.git_ref.as_deref().unwrap_or("its default branch")) }
                    @match prepared_base(&events) {
                        Some((base, workspace)) => { " · base " code data-base=(base) { (base) } " · workspace " code { (workspace) } }
                        None => { " · workspace not made yet (the daemon that claims the task makes it)" }
                    }
                }
            }
            @if !viewer.read_only {
                p {
                    @if !task.state.is_terminal() { a data-action="cancel" href=(format!("/tasks/{}/cancel", task.id.0)) { "Cancel…" } " " }
                    @if matches!(task.state, TaskState::Failed | TaskState::Canceled) { a href=(format!("/tasks/{}/retry", task.id.0)) { "Retry…" } }
                }
            }
        }
        // The pull request's tasks together: the one that opened it, then each round.
        @for chain in &chains {
            h2 { "Pull request " (chain.pull) }
            table data-pull-chain=(chain.pull) {
                thead { tr { th { "task" } th { "on it" } th { "state" } th { "title" } th { "made by" } } }
                tbody {
                    @for (what, t) in chain.steps() {
                        tr data-chain-task=(t.task.id.0) {
                            td {
                                @if t.task.id == task.id { strong { (t.task.id.0) } " (this task)" }
                                @else { a href=(format!("/tasks/{}", t.task.id.0)) { (t.task.id.0) } }
                            }
                            td { (what) }
                            td { span class=(state_class(t.task.state.as_str())) { (t.task.state.as_str()) } }
                            td { (t.task.title) }
                            td.muted { (t.task.origin.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
        @if let Some(prompt) = &task.prompt { h2 { "Prompt" } pre { (prompt) } }
        @if !checklist.is_empty() {
            h2 { "Checklist" }
            ul.checklist {
                @for item in &checklist {
                    li data-item-status=(item.status) { span.muted { "[" (item.status) "] " } (item.text) }
                }
            }
        }
        @if let Some(board) = &board {
            (super::best_of::section(board, &task.gates))
        }
        h2 { "Gates" }
        // The output of each gate while it runs: filled by the script from the log stream, and a
        // panel added for each gate that starts while the page is open.
        div.gate-panels data-gate-panels=(task.id.0) data-live=(live) {
            @if live {
                @for (position, name) in &running {
                    (log_panel(task.id, LogKind::Gate(*position), "Gate", name))
                }
            }
        }
        @if gates.is_empty() {
            @if task.gates.is_empty() { p.muted { "No gates." } }
            @else {
                // What will run, before anything has: each gate of the task with its command.
                table data-gate-specs {
                    thead { tr { th { "gate" } th { "command" } th { "state" } } }
                    tbody {
                        @for (position, g) in task.gates.iter().enumerate() {
                            tr {
                                td { (g.name) }
                                td { code { (g.command) } }
                                td.muted {
                                    @if running.iter().any(|(p, _)| *p == position as i64) { span.state.state-running { "running" } }
                                    @else { "not run yet" }
                                }
                            }
                        }
                    }
                }
            }
        } @else {
            table {
                thead { tr { th { "attempt" } th { "gate" } th { "verdict" } th { "exit" } th { "duration" } th { "summary" } th { "log" } } }
                tbody {
                    @for g in &gates {
                        tr {
                            td { (g.attempt) }
                            td { (g.name) br; code.muted { (g.command) } }
                            td { span class=(format!("verdict-{}", g.verdict)) { (g.verdict.to_string()) } }
                            td { (g.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into())) }
                            td { (duration(g.duration_ms)) }
                            td { (g.summary) }
                            td {
                                a data-log-link href=(format!("/tasks/{}/gates/{}/log", task.id.0, g.position)) { "view" }
                                @if let Some(log) = g.log_artifact {
                                    " · "
                                    a href=(format!("/api/v1/artifacts/{}/content?tail=65536", log.0)) { "tail" }
                                    " · "
                                    a href=(format!("/api/v1/artifacts/{}/content?download=1", log.0)) { "download" }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Shell jobs, terminals and background jobs" }
        // Each running one's output, followed by the script; the script adds a panel for one that
        // starts while the page is open (it asks /api/v1/tasks/ID/logs after each tool call).
        div.gate-panels data-log-panels=(task.id.0) data-live=(live) {
            @if live {
                @for e in commands.iter().filter(|e| e.state == log_state::RUNNING) {
                    (log_panel(task.id, e.kind, kind_title(e.kind), &e.name))
                }
            }
        }
        @if commands.is_empty() {
            p.muted data-no-commands { "The agent started no shell job or background job and opened no terminal." }
        } @else {
            table data-commands {
                thead { tr { th { "" } th { "command" } th { "state" } th { "how it ended" } th { "log" } } }
                tbody {
                    @for e in &commands {
                        @let path = crate::logs::kind_path(e.kind);
                        tr data-command=(path) {
                            td { (kind_title(e.kind)) " " (command_id(e.kind)) }
                            td { code { (e.name) } }
                            td { span class=(format!("state state-{}", e.state)) data-log-state=(e.state) { (e.state) } }
                            td.muted { (e.detail.clone().unwrap_or_default()) }
                            td { a data-log-link href=(format!("/tasks/{}/{path}/log", task.id.0)) { "view" } }
                        }
                    }
                }
            }
        }
        @if !approvals.is_empty() {
            h2 { "Approvals" }
            table {
                tbody {
                    @for a in &approvals {
                        tr data-task-approval=(a.id) {
                            td { (a.tool) }
                            td { span class=(format!("status-{}", a.status)) { (a.status) } }
                            td {
                                @if let Some(command) = super::command_of(&a.arguments) { pre.command { (orchestrator_types::visible(command)) } }
                                (a.reason)
                            }
                            td.muted { (time(a.requested_at)) }
                            td {
                                // Decided here as in the inbox: the same forms, the same posts.
                                @if a.status == "pending" && !viewer.read_only { (super::approvals::decide_forms(&viewer, a, &format!("/tasks/{}", task.id.0))) }
                            }
                        }
                    }
                }
            }
        }
        @if !attempts.is_empty() {
            h2 { "PR attempts" }
            table {
                thead { tr { th { "id" } th { "group" } th { "label" } th { "base" } th { "patch" } th { "selected" } th { "last preflight" } th { "pull request" } } }
                tbody {
                    @for a in &attempts {
                        tr data-attempt=(a.id) {
                            td { (a.id) }
                            td { (a.group) }
                            td { (a.label) }
                            td { code { (a.base.chars().take(12).collect::<String>()) } }
                            td { (a.patch_bytes) " bytes" }
                            td { @if a.selected { strong { "selected" } } }
                            td data-preflight {
                                @if let Some(check) = checks.get(&a.id) {
                                    span class=(format!("status-{}", check.status)) { (check.summary) }
                                    @if let Some(onto) = &check.onto { " " span.muted { "onto " code { (onto) } } }
                                } @else { span.muted { "none run" } }
                            }
                            td {
                                @for (number, url) in pulls.get(&a.id).into_iter().flatten() {
                                    @if url.starts_with("https://") || url.starts_with("http://") {
                                        a data-pull href=(url) rel="noreferrer" { "#" (number) }
                                    } @else { "#" (number) }
                                    " "
                                }
                            }
                        }
                    }
                }
            }
        }
        (crate::turns::section(task.id, &turns))
        @if !artifacts.is_empty() {
            h2 { "Artifacts" }
            table {
                thead { tr { th { "id" } th { "kind" } th { "summary" } th { "size" } th { "created" } th {} } }
                tbody {
                    @for a in &artifacts {
                        tr data-artifact=(a.id.0) {
                            td { (a.id.0) }
                            td { (a.kind) }
                            td { (a.summary) }
                            td { (a.original_bytes) " bytes" @if a.cut_bytes > 0 { span.muted { " (" (a.cut_bytes) " cut from the middle)" } } }
                            td.muted { (time(a.created_at)) }
                            td {
                                a href=(format!("/api/v1/artifacts/{}/content", a.id.0)) { "view" }
                                " · "
                                a href=(format!("/api/v1/artifacts/{}/content?tail=65536", a.id.0)) { "tail" }
                                " · "
                                a href=(format!("/api/v1/artifacts/{}/content?download=1", a.id.0)) { "download" }
                            }
                        }
                    }
                }
            }
        }
        @if !children.is_empty() && board.is_none() {
            h2 { "Children" }
            ul { @for c in &children { li { a href=(format!("/tasks/{}", c.id.0)) { "task " (c.id.0) } " " span class=(state_class(c.state.as_str())) { (c.state.as_str()) } " " (c.title) } } }
        }
        h2 { "Timeline " span.live data-live-status { @if live { "(refresh or enable scripts for live updates)" } } }
        table.timeline {
            thead { tr { th { "#" } th { "when" } th { "event" } th { "what happened" } } }
            tbody data-task-events=(format!("/api/v1/tasks/{}/events/stream?after={}", task.id.0, events.last().map_or(0, |e| e.seq)))
                  data-live=(live) data-kinds=(kinds.join(" ")) {
                @for e in &events {
                    // Each attempt starts with its claim: a row names it, so the timeline reads
                    // attempt by attempt.
                    @if e.kind == EventKind::Claimed.as_str() {
                        @let attempt = e.data.get("attempt").and_then(|a| a.as_i64()).unwrap_or(0);
                        tr.attempt data-attempt=(attempt) {
                            td colspan="4" {
                                "Attempt " (attempt)
                                // A wait for a person does not spend the attempt: it goes on.
                                @if events.iter().take_while(|x| x.seq < e.seq).any(|x| x.kind == EventKind::Claimed.as_str() && x.data.get("attempt").and_then(|a| a.as_i64()) == Some(attempt)) { ", resumed" }
                                @if let Some(end) = attempt_end(&events, e.seq) { span.muted { " · " (duration(end - e.at)) } }
                            }
                        }
                    }
                    @let described = orchestrator_types::describe(&e.kind, &e.data);
                    tr id=(format!("event-{}", e.seq)) data-tone=(described.tone.as_str()) {
                        td { (e.seq) }
                        td.muted { (time(e.at)) }
                        td.muted { (e.kind) }
                        td { (orchestrator_types::visible(&described.text)) }
                    }
                }
            }
        }
        // The model's reply as it streams, filled by the script while this daemon runs the task.
        @if live { pre.live-reply data-live-reply hidden {} }
    };
    layout(&viewer, &format!("Task {}", task.id.0), content)
}

/// The gates of this attempt that run now: those with a live log, and those whose start the
/// timeline shows without their end (the live log may not be written yet; the panel's stream
/// waits for it).
fn running_gates(
    events: &[orchestrator_types::TaskEvent],
    live_logs: &[orchestrator_store::LiveLog],
    attempt: i64,
) -> Vec<(i64, String)> {
    let mut running: Vec<(i64, String)> = live_logs
        .iter()
        .filter(|l| l.source == orchestrator_store::live_source::GATE && l.attempt == attempt)
        .map(|l| (l.source_key, l.name.clone()))
        .collect();
    let mut started: Vec<(i64, String)> = Vec::new();
    for event in events {
        let position = event.data["position"].as_i64();
        match (event.kind.as_str(), position) {
            ("claimed", _) => started.clear(),
            ("gate_started", Some(position)) => started.push((
                position,
                event.data["gate"].as_str().unwrap_or_default().to_owned(),
            )),
            ("gate_finished", Some(position)) => started.retain(|(p, _)| *p != position),
            _ => {}
        }
    }
    for (position, name) in started {
        if !running.iter().any(|(p, _)| *p == position) {
            running.push((position, name));
        }
    }
    running
}

/// What a kind of log is called on the page.
fn kind_title(kind: LogKind) -> &'static str {
    match kind {
        LogKind::Gate(_) => "Gate",
        LogKind::Job(_) => "Shell job",
        LogKind::Terminal(_) => "Terminal",
        LogKind::Background(_) => "Background job",
    }
}

/// A job's, a terminal's or a background job's id as the agent knows it.
fn command_id(kind: LogKind) -> String {
    match kind {
        LogKind::Terminal(n) => format!("pty-{n}"),
        LogKind::Background(n) => format!("job-{n}"),
        kind => kind.key().to_string(),
    }
}

/// A running command's output on the task page (a gate's, a job's, a terminal's), followed by
/// the script; the script makes the same for one that starts while the page is open.
fn log_panel(task: TaskId, kind: LogKind, title: &str, name: &str) -> maud::Markup {
    let path = crate::logs::kind_path(kind);
    let terminal = matches!(kind, LogKind::Terminal(_));
    let gate = match kind {
        LogKind::Gate(position) => Some(position),
        _ => None,
    };
    html! {
        div.card.gate-panel data-gate-panel=[gate] data-log-panel=(path) {
            p {
                (title) " "
                @if gate.is_none() { (command_id(kind)) " " }
                a href=(format!("/tasks/{}/{path}/log", task.0)) { (name) }
                " " span.live data-gate-status { "running" }
            }
            div.log.log-tail data-log-view data-stream=(format!("/api/v1/tasks/{}/{path}/log/stream", task.0))
                data-next="0" data-lines="0" data-live="true" data-terminal=(terminal) data-follow-now {}
        }
    }
}
