//! The JSON shapes of the CLI: what `--json` prints and what scripts and later tests rely on. Times
//! are RFC 3339 strings in UTC.

use orchestrator_store::{Store, Task};
use orchestrator_types::{GateRecord, TaskEvent, format_millis};
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct TaskView {
    pub id: i64,
    pub title: String,
    pub state: String,
    pub attempt: i64,
    pub max_attempts: i64,
    pub queue: String,
    pub priority: i64,
    pub workspace: Option<String>,
    /// The checkout the workspace is cloned from, for a task that works in a clone of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree_of: Option<String>,
    /// The repository the daemon that runs the task makes its workspace from, with the base and
    /// the workspace once one was prepared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositoryView>,
    pub prompt: Option<String>,
    pub run_after: String,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<String>,
    pub cancel_requested: bool,
    pub last_error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// One entry per gate of the spec, with the latest result recorded for it (if any).
    pub gates: Vec<GateView>,
    /// Every gate run of every attempt, oldest first.
    pub gate_runs: Vec<GateView>,
    /// The automation whose slot created the task, if one did.
    pub automation_id: Option<i64>,
    /// That slot's time.
    pub slot: Option<String>,
    /// What a worker must offer to run the task: labels, `host:<id>`, `shared:<dir>`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// Its concurrency key and how many of the key's tasks may run at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<orchestrator_types::Concurrency>,
    /// Why a queued task waits for a worker (no live worker offers what it requires), or why a
    /// running one waits for its model server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// The wait for a model server, when a request of the running task waits for one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_wait: Option<orchestrator_store::ModelWait>,
}

/// A repository task's repository, as `task read` shows it.
#[derive(Debug, Serialize, Clone)]
pub struct RepositoryView {
    pub url: String,
    #[serde(rename = "ref")]
    pub git_ref: Option<String>,
    /// The config's name for it, when the task was created by name.
    pub name: Option<String>,
    /// The commit the latest workspace was made at (from its `workspace_prepared` event).
    pub base: Option<String>,
    /// Where that workspace is, on the machine of the daemon that made it.
    pub workspace: Option<String>,
    /// Its setup phase, when it has one (docs/environments.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<orchestrator_types::EnvironmentSpec>,
}

#[derive(Debug, Serialize, Clone)]
pub struct GateView {
    pub name: String,
    pub command: String,
    pub position: i64,
    pub attempt: Option<i64>,
    pub verdict: Option<String>,
    pub failure_kind: Option<String>,
    pub exit_code: Option<i32>,
    pub duration_ms: Option<i64>,
    pub summary: Option<String>,
    pub log_artifact: Option<i64>,
    pub git_head: Option<String>,
    pub git_dirty: Option<bool>,
    pub diff_hash: Option<String>,
    pub finished_at: Option<String>,
}

impl GateView {
    fn from_record(record: &GateRecord) -> GateView {
        GateView {
            name: record.name.clone(),
            command: record.command.clone(),
            position: record.position,
            attempt: Some(record.attempt),
            verdict: Some(record.verdict.to_string()),
            failure_kind: record.failure_kind.map(|k| k.to_string()),
            exit_code: record.exit_code,
            duration_ms: Some(record.duration_ms),
            summary: Some(record.summary.clone()),
            log_artifact: record.log_artifact.map(|a| a.0),
            git_head: record.git_head.clone(),
            git_dirty: record.git_dirty,
            diff_hash: record.diff_hash.clone(),
            finished_at: Some(format_millis(record.finished_at)),
        }
    }
}

impl TaskView {
    /// The task without its gate results, for lists.
    pub fn summary(task: &Task) -> TaskView {
        TaskView::build(task, &[])
    }

    /// The task with every gate result, for `task read`.
    pub async fn full(store: &Store, task: &Task) -> anyhow::Result<TaskView> {
        let records = store.gates(task.id).await?;
        let mut view = TaskView::build(task, &records);
        if task.state == orchestrator_types::TaskState::Queued {
            view.waiting_for = store.why_queued(task).await?;
        }
        if task.state == orchestrator_types::TaskState::Running
            && let Some(wait) = store.model_wait_of(task.id).await?
        {
            view.waiting_for = Some(wait.describe(orchestrator_types::now_millis()));
            view.model_wait = Some(wait);
        }
        if let Some(repository) = &mut view.repository {
            let prepared = store
                .events_of_kind(task.id, orchestrator_types::EventKind::WorkspacePrepared)
                .await?;
            if let Some(latest) = prepared.iter().rev().find(|e| e.data.get("base").is_some()) {
                let text = |key: &str| {
                    latest
                        .data
                        .get(key)
                        .and_then(|v| v.as_str())
                        .map(str::to_owned)
                };
                repository.base = text("base");
                repository.workspace = text("workspace");
            }
        }
        Ok(view)
    }

    fn build(task: &Task, records: &[GateRecord]) -> TaskView {
        let gates = task
            .gates
            .iter()
            .enumerate()
            .map(|(position, spec)| {
                let latest = records
                    .iter()
                    .filter(|r| r.position == position as i64)
                    .max_by_key(|r| (r.attempt, r.id));
                match latest {
                    Some(record) => GateView::from_record(record),
                    None => GateView {
                        name: spec.name.clone(),
                        command: spec.command.clone(),
                        position: position as i64,
                        attempt: None,
                        verdict: None,
                        failure_kind: None,
                        exit_code: None,
                        duration_ms: None,
                        summary: None,
                        log_artifact: None,
                        git_head: None,
                        git_dirty: None,
                        diff_hash: None,
                        finished_at: None,
                    },
                }
            })
            .collect();
        TaskView {
            id: task.id.0,
            title: task.title.clone(),
            state: task.state.to_string(),
            attempt: task.attempt,
            max_attempts: task.max_attempts,
            queue: task.queue.clone(),
            priority: task.priority,
            workspace: task.workspace.clone(),
            worktree_of: task.worktree_of.clone(),
            repository: task.repository.as_ref().map(|r| RepositoryView {
                url: r.url.clone(),
                git_ref: r.git_ref.clone(),
                name: r.name.clone(),
                base: None,
                workspace: None,
                environment: r.environment.clone(),
            }),
            prompt: task.prompt.clone(),
            run_after: format_millis(task.run_after),
            lease_owner: task.lease_owner.clone(),
            lease_expires_at: task.lease_expires_at.map(format_millis),
            cancel_requested: task.cancel_requested,
            last_error: task.last_error.clone(),
            created_at: format_millis(task.created_at),
            updated_at: format_millis(task.updated_at),
            started_at: task.started_at.map(format_millis),
            finished_at: task.finished_at.map(format_millis),
            gates,
            gate_runs: records.iter().map(GateView::from_record).collect(),
            automation_id: task.automation_id,
            slot: task.slot_at.map(format_millis),
            requires: task.requires.clone(),
            concurrency: task.concurrency.clone(),
            waiting_for: None,
            model_wait: None,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct EventView<'a> {
    pub task_id: i64,
    pub seq: i64,
    pub at: String,
    pub kind: &'a str,
    pub data: &'a serde_json::Value,
}

impl<'a> EventView<'a> {
    pub fn new(event: &'a TaskEvent) -> Self {
        EventView {
            task_id: event.task_id.0,
            seq: event.seq,
            at: format_millis(event.at),
            kind: &event.kind,
            data: &event.data,
        }
    }
}

/// One human line for an event, in words: "#3   12:00:01.250  gate_finished     gate \"test\"
/// passed in 3.1 s [log: artifact 5]". The time is the machine's local time of day; the kind's name
/// stays in its column, for grep, and `--json` keeps the whole record.
pub fn event_line(event: &TaskEvent) -> String {
    let time = chrono::DateTime::from_timestamp_millis(event.at)
        .map(|t| {
            t.with_timezone(&chrono::Local)
                .format("%H:%M:%S%.3f")
                .to_string()
        })
        .unwrap_or_else(|| format_millis(event.at));
    let described = orchestrator_types::describe(&event.kind, &event.data);
    // The words hold what the model and strangers wrote: shown with their escapes written out.
    orchestrator_types::visible(&format!(
        "#{:<3} {time} {:<17} {}",
        event.seq, event.kind, described.text
    ))
    .into_owned()
    .trim_end()
    .to_owned()
}

/// The line that opens an attempt's group of events: printed before each `claimed` event (each
/// attempt starts with one), so a timeline reads attempt by attempt.
pub fn attempt_header(event: &TaskEvent) -> Option<String> {
    (event.kind == orchestrator_types::EventKind::Claimed.as_str()).then(|| {
        let attempt = event
            .data
            .get("attempt")
            .and_then(|v| v.as_i64())
            .unwrap_or(0);
        format!("-- attempt {attempt} --")
    })
}
