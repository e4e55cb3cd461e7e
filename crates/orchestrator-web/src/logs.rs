//! A task's logs while they run and after, one reader over the kind of log: a gate's
//! (`GET /api/v1/tasks/{id}/gates/{n}/log`), a shell job's (`/jobs/{job}/log`), a terminal
//! session's (`/terminals/{t}/log`) and a background job's of exec_shell
//! (`/background-jobs/{b}/log`), each with a `/stream` that follows it; and the list of a task's
//! logs (`/api/v1/tasks/{id}/logs`), which the task page asks for when a job or a terminal
//! starts.
//!
//! `{n}` is the gate's position: its place in the task's spec from 0, or 1000 and up for the
//! checks an agent ran with commands of its own; `{job}` a shell job's id; `{t}` a terminal's id
//! (`pty-2`, or `2`); `{b}` a background job's id (`job-3`, or `3`). A read gives the bytes after `after` (a byte offset in the output) as text,
//! and `next`, the offset to ask from next; while the command runs that is its live log (the
//! store's `live_logs`), once it ended its recorded log (a terminal's live log is its record), so
//! a follower never sees a seam. The stream sends each new piece as a `log` event whose id is its
//! `next` (so a reconnection with `Last-Event-ID` resumes where it was), and when the command
//! ends, the rest and an `end` event with the verdict (or the job's status, the terminal's exit,
//! or why it was abandoned). It reads the store every [`POLL`], which is what makes it work for
//! a command another daemon runs.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::Event;
use orchestrator_store::{Log, LogKind, Store, log_state};
use orchestrator_types::TaskId;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{ApiError, ApiResult, Web, ok, parse_id, query};

/// How often a follower reads the store: the live log is written every 250 ms at most.
pub const POLL: Duration = Duration::from_millis(250);
/// Bytes one read or one event carries by default, and at most.
pub const DEFAULT_READ: usize = 1024 * 1024;
pub const MAX_READ: usize = 8 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogQuery {
    after: Option<u64>,
    limit: Option<u64>,
}

/// One read of a log: its JSON (with `text`), where to read next, and whether it is over
/// (nothing more will come).
pub struct LogRead {
    pub log: Log,
    pub json: Value,
    pub next: u64,
    pub ended: bool,
}

/// The kind of log a path names: `gates/0`, `jobs/3`, `terminals/pty-2` (or `terminals/2`),
/// `background-jobs/job-4` (or `background-jobs/4`).
pub fn parse_kind(kind: &str, key: &str) -> Result<LogKind, ApiError> {
    match kind {
        "gates" => match key.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(LogKind::Gate(n)),
            _ => Err(ApiError::bad_request(format!(
                "{key:?} is not a gate position (0 for the first gate)"
            ))),
        },
        "jobs" => Ok(LogKind::Job(parse_id(key)?)),
        "terminals" => terminal_number(key).map(LogKind::Terminal).ok_or_else(|| {
            ApiError::bad_request(format!("{key:?} is not a terminal session (pty-1, or 1)"))
        }),
        "background-jobs" => background_number(key)
            .map(LogKind::Background)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{key:?} is not a background job of exec_shell (job-1, or 1)"
                ))
            }),
        other => Err(ApiError::not_found(format!(
            "a task has gates, jobs, terminals and background-jobs, not {other:?}"
        ))),
    }
}

/// N of a terminal's id `pty-N` (or N alone).
pub fn terminal_number(text: &str) -> Option<i64> {
    let n = text.strip_prefix("pty-").unwrap_or(text);
    n.parse::<i64>().ok().filter(|n| *n > 0)
}

/// N of a background job's id `job-N` (or N alone).
pub fn background_number(text: &str) -> Option<i64> {
    let n = text.strip_prefix("job-").unwrap_or(text);
    n.parse::<i64>().ok().filter(|n| *n > 0)
}

/// Where a log is in the API and on the pages: `gates/0`, `jobs/3`, `terminals/pty-2`,
/// `background-jobs/job-4`.
pub fn kind_path(kind: LogKind) -> String {
    match kind {
        LogKind::Gate(n) => format!("gates/{n}"),
        LogKind::Job(n) => format!("jobs/{n}"),
        LogKind::Terminal(n) => format!("terminals/pty-{n}"),
        LogKind::Background(n) => format!("background-jobs/job-{n}"),
    }
}

/// What a person calls a log: `gate "cargo test"`, `shell job 3`, `terminal pty-2`,
/// `background job job-4`.
pub fn kind_label(log: &Log) -> String {
    match log.kind {
        LogKind::Gate(_) => format!("gate {:?}", log.name),
        LogKind::Job(n) => format!("shell job {n}"),
        LogKind::Terminal(n) => format!("terminal pty-{n}"),
        LogKind::Background(n) => format!("background job job-{n}"),
    }
}

/// A log as the API, the pages and the CLI's `--json` show it: the same fields for every kind,
/// and each kind's own (a gate's position and verdict, a job's id and status, a terminal's or a
/// background job's id).
pub fn log_json(log: &Log) -> Value {
    let gate = log.gate.as_ref();
    let job = log.job.as_ref();
    let mut json = json!({
        "task_id": log.task_id.0,
        "kind": log.kind.source(),
        "name": log.name,
        "state": log.state,
        "attempt": log.attempt,
        "total_bytes": log.total_bytes,
        "from": log.slice.from,
        "next": log.slice.next,
        "cut_bytes": log.slice.cut,
        "text": String::from_utf8_lossy(&log.slice.bytes),
        "verdict": gate.map(|g| g.verdict),
        "exit_code": log.exit_code,
        "duration_ms": gate.map(|g| g.duration_ms),
        "summary": gate.map(|g| g.summary.clone()).or_else(|| job.and_then(|j| j.summary.clone())),
        "log_artifact": gate.and_then(|g| g.log_artifact).map(|a| a.0).or_else(|| job.and_then(|j| j.log_artifact_id)),
        "first_failure": log.first_failure,
        "end_reason": log.end_reason,
        "updated_at": log.updated_at.map(orchestrator_types::format_millis),
    });
    if let Some(object) = json.as_object_mut() {
        match log.kind {
            LogKind::Gate(position) => {
                object.insert("position".into(), json!(position));
                object.insert("gate".into(), json!(log.name));
            }
            LogKind::Job(id) => {
                object.insert("job".into(), json!(id));
                object.insert("command".into(), json!(log.name));
                object.insert("job_status".into(), json!(job.map(|j| j.status.clone())));
            }
            LogKind::Terminal(n) => {
                object.insert("terminal".into(), json!(format!("pty-{n}")));
                object.insert("command".into(), json!(log.name));
            }
            LogKind::Background(n) => {
                object.insert("background_job".into(), json!(format!("job-{n}")));
                object.insert("command".into(), json!(log.name));
            }
        }
    }
    json
}

/// Reads a log from `from`: the one reader behind the API, the streams, the pages and `task
/// logs`.
pub async fn read(
    store: &Store,
    task: TaskId,
    kind: LogKind,
    from: u64,
    limit: usize,
) -> Result<LogRead, orchestrator_store::Error> {
    let log = store.log(task, kind, from, limit).await?;
    // A gate that has not started never will once its task is over.
    let over = log.state == log_state::PENDING && store.get_task(task).await?.state.is_terminal();
    Ok(LogRead {
        json: log_json(&log),
        next: log.slice.next,
        ended: log.ended(over),
        log,
    })
}

fn limit_of(params: &LogQuery) -> usize {
    params
        .limit
        .map_or(DEFAULT_READ, |l| usize::try_from(l).unwrap_or(MAX_READ))
        .clamp(1, MAX_READ)
}

/// `GET /api/v1/tasks/{id}/{gates|jobs|terminals|background-jobs}/{key}/log`.
pub(crate) async fn log(
    State(web): State<Web>,
    Path((id, kind, key)): Path<(String, String, String)>,
    params: Result<Query<LogQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let task = TaskId(parse_id(&id)?);
    let kind = parse_kind(&kind, &key)?;
    let read = read(
        &web.store,
        task,
        kind,
        params.after.unwrap_or(0),
        limit_of(&params),
    )
    .await?;
    ok(&read.json)
}

/// `GET /api/v1/tasks/{id}/{gates|jobs|terminals|background-jobs}/{key}/log/stream`.
pub(crate) async fn stream(
    State(web): State<Web>,
    Path((id, kind, key)): Path<(String, String, String)>,
    headers: HeaderMap,
    params: Result<Query<LogQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let task = TaskId(parse_id(&id)?);
    let kind = parse_kind(&kind, &key)?;
    follow(web, task, kind, &headers, &params).await
}

/// One log of a task, as the list names it.
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub kind: LogKind,
    /// The gate's name, the job's or the terminal's command.
    pub name: String,
    /// One of `log_state`.
    pub state: &'static str,
    /// A job's status (exited, killed, timed_out, stale), a terminal's or a background job's
    /// end, a gate's nothing.
    pub detail: Option<String>,
    pub attempt: Option<i64>,
}

impl LogEntry {
    pub fn json(&self, task: TaskId) -> Value {
        let path = kind_path(self.kind);
        json!({
            "kind": self.kind.source(),
            "key": match self.kind {
                LogKind::Terminal(n) => json!(format!("pty-{n}")),
                LogKind::Background(n) => json!(format!("job-{n}")),
                kind => json!(kind.key()),
            },
            "name": self.name,
            "state": self.state,
            "detail": self.detail,
            "attempt": self.attempt,
            "log": format!("/api/v1/tasks/{}/{path}/log", task.0),
            "stream": format!("/api/v1/tasks/{}/{path}/log/stream", task.0),
            "page": format!("/tasks/{}/{path}/log", task.0),
        })
    }
}

/// A task's shell jobs, terminal sessions and background jobs with their states, oldest first,
/// read from the rows alone (no log's bytes): what the task page lists and
/// `/api/v1/tasks/{id}/logs` returns beside the gates with a live log.
pub async fn entries(
    store: &Store,
    task: TaskId,
) -> Result<Vec<LogEntry>, orchestrator_store::Error> {
    let current = store.get_task(task).await?;
    let (jobs, live) = tokio::try_join!(store.shell_jobs(task), store.live_logs(task))?;
    let mut entries = Vec::new();
    for live in live.iter().filter(|l| {
        matches!(
            LogKind::of(l),
            Some(LogKind::Gate(_) | LogKind::Terminal(_) | LogKind::Background(_))
        )
    }) {
        let Some(kind) = LogKind::of(live) else {
            continue;
        };
        let state = match kind {
            LogKind::Gate(_)
                if current.state == orchestrator_types::TaskState::Running
                    && current.attempt == live.attempt
                    && live.ended_at.is_none() =>
            {
                log_state::RUNNING
            }
            LogKind::Gate(_) => log_state::ABANDONED,
            _ => live.state(current.attempt),
        };
        entries.push(LogEntry {
            kind,
            name: live.name.clone(),
            state,
            detail: live.end_reason.clone(),
            attempt: Some(live.attempt),
        });
    }
    for job in &jobs {
        let running_live = live.iter().find(|l| {
            l.source == orchestrator_store::live_source::SHELL_JOB && l.source_key == job.id
        });
        let state = match (job.status.as_str(), running_live) {
            (orchestrator_store::job_status::RUNNING, Some(live)) => live.state(current.attempt),
            (orchestrator_store::job_status::RUNNING, None) => log_state::RUNNING,
            (orchestrator_store::job_status::STALE, _) => log_state::ABANDONED,
            _ => log_state::FINISHED,
        };
        entries.push(LogEntry {
            kind: LogKind::Job(job.id),
            name: job.command.clone(),
            state,
            detail: Some(match job.exit_code {
                Some(code) => format!("{} (exit {code})", job.status),
                None => job.status.clone(),
            }),
            attempt: None,
        });
    }
    Ok(entries)
}

/// `GET /api/v1/tasks/{id}/logs`: the task's gates that have a live log, its shell jobs, its
/// terminals and its background jobs, each with its state and where to read and follow it.
pub(crate) async fn list(State(web): State<Web>, Path(id): Path<String>) -> ApiResult {
    let task = TaskId(parse_id(&id)?);
    let entries = entries(&web.store, task).await?;
    let items: Vec<Value> = entries.iter().map(|e| e.json(task)).collect();
    ok(&json!({ "logs": items }))
}

/// The offset a reconnecting client last got.
fn last_offset(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers.get("last-event-id") {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID is not a byte offset")),
    }
}

/// Where a follower of a log is.
struct Follower {
    store: Store,
    task: TaskId,
    kind: LogKind,
    next: u64,
    limit: usize,
    done: bool,
    /// Whether the first read is still to come (it is made at once, not after a poll).
    first: bool,
}

impl Follower {
    async fn next_event(&mut self) -> Option<Event> {
        loop {
            if self.done {
                return None;
            }
            if !std::mem::take(&mut self.first) {
                tokio::time::sleep(POLL).await;
            }
            let read = match read(&self.store, self.task, self.kind, self.next, self.limit).await {
                Ok(read) => read,
                Err(e) => {
                    // The store failed (or the log is gone): say so and end; the client
                    // reconnects from its last offset.
                    self.done = true;
                    return Some(Event::default().event("error").data(e.to_string()));
                }
            };
            let moved = read.next != self.next || read.json["cut_bytes"].as_u64().unwrap_or(0) > 0;
            self.next = read.next;
            if read.ended && !moved {
                self.done = true;
                let mut end = read.json;
                if let Some(end) = end.as_object_mut() {
                    end.remove("text");
                }
                return Some(Event::default().event("end").data(end.to_string()));
            }
            if moved {
                let json = &read.json;
                let data = json!({
                    "from": json["from"],
                    "next": json["next"],
                    "cut_bytes": json["cut_bytes"],
                    "total_bytes": json["total_bytes"],
                    "state": json["state"],
                    "text": json["text"],
                });
                // More may be waiting at once (a read is bounded): read again without a pause.
                self.first = true;
                return Some(
                    Event::default()
                        .id(read.next.to_string())
                        .event("log")
                        .data(data.to_string()),
                );
            }
        }
    }
}

async fn follow(
    web: Web,
    task: TaskId,
    kind: LogKind,
    headers: &HeaderMap,
    params: &LogQuery,
) -> ApiResult {
    let from = last_offset(headers)?.or(params.after).unwrap_or(0);
    let limit = limit_of(params);
    // A log that does not exist is a 404 before the stream starts, not an empty stream.
    read(&web.store, task, kind, from, 1).await?;
    let follower = Follower {
        store: web.store.clone(),
        task,
        kind,
        next: from,
        limit,
        done: false,
        first: true,
    };
    crate::stream::sse(futures_util::stream::unfold(
        follower,
        |mut follower| async move {
            let event = follower.next_event().await?;
            Some((Ok::<Event, Infallible>(event), follower))
        },
    ))
}
