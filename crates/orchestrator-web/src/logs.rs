//! A gate's (or a shell job's) log while it runs and after: `GET /api/v1/tasks/{id}/gates/{n}/log`
//! and `/api/v1/tasks/{id}/jobs/{job}/log`, each with a `/stream` that follows it.
//!
//! `{n}` is the gate's position: its place in the task's spec from 0, or 1000 and up for the
//! checks an agent ran with commands of its own. A read gives the bytes after `after` (a byte
//! offset in the gate's output) as text, and `next`, the offset to ask from next; while the gate
//! runs that is its live log (the store's `live_logs`), once it ended its recorded log, so a
//! follower never sees a seam. The stream sends each new piece as a `log` event whose id is its
//! `next` (so a reconnection with `Last-Event-ID` resumes where it was), and when the gate ends,
//! the rest and an `end` event with the verdict. It reads the store every [`POLL`], which is what
//! makes it work for a gate another daemon runs.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::Event;
use orchestrator_store::{GateLog, JobLog, Store, log_state};
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

/// Which log of a task.
#[derive(Debug, Clone, Copy)]
enum Source {
    Gate(i64),
    Job(i64),
}

/// One read of a log: its JSON (with `text`), and whether it is over (nothing more will come).
struct Read {
    json: Value,
    next: u64,
    ended: bool,
}

/// A gate position in a path: 0 and up.
fn parse_position(text: &str) -> Result<i64, ApiError> {
    match text.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n),
        _ => Err(ApiError::bad_request(format!(
            "{text:?} is not a gate position (0 for the first gate)"
        ))),
    }
}

/// A gate's log as the API, the pages and the CLI's `--json` show it.
pub fn gate_log_json(log: &GateLog) -> Value {
    let gate = log.gate.as_ref();
    json!({
        "task_id": log.task_id.0,
        "position": log.position,
        "gate": log.name,
        "state": log.state,
        "attempt": log.attempt,
        "total_bytes": log.total_bytes,
        "from": log.slice.from,
        "next": log.slice.next,
        "cut_bytes": log.slice.cut,
        "text": String::from_utf8_lossy(&log.slice.bytes),
        "verdict": gate.map(|g| g.verdict),
        "exit_code": gate.and_then(|g| g.exit_code),
        "duration_ms": gate.map(|g| g.duration_ms),
        "summary": gate.map(|g| g.summary.clone()),
        "log_artifact": gate.and_then(|g| g.log_artifact).map(|a| a.0),
        "first_failure": log.first_failure,
        "updated_at": log.updated_at.map(orchestrator_types::format_millis),
    })
}

/// A shell job's log as the API and the CLI's `--json` show it.
pub fn job_log_json(log: &JobLog) -> Value {
    json!({
        "task_id": log.job.task_id,
        "job": log.job.id,
        "command": log.job.command,
        "state": log.state,
        "total_bytes": log.total_bytes,
        "from": log.slice.from,
        "next": log.slice.next,
        "cut_bytes": log.slice.cut,
        "text": String::from_utf8_lossy(&log.slice.bytes),
        "exit_code": log.job.exit_code,
        "summary": log.job.summary,
        "log_artifact": log.job.log_artifact_id,
    })
}

async fn read(
    store: &Store,
    task: TaskId,
    source: Source,
    from: u64,
    limit: usize,
) -> Result<Read, orchestrator_store::Error> {
    match source {
        Source::Gate(position) => {
            let log = store.gate_log(task, position, from, limit).await?;
            let ended = match log.state {
                log_state::FINISHED | log_state::ABANDONED => log.slice.next >= log.total_bytes,
                log_state::PENDING => store.get_task(task).await?.state.is_terminal(),
                _ => false,
            };
            Ok(Read {
                json: gate_log_json(&log),
                next: log.slice.next,
                ended,
            })
        }
        Source::Job(job) => {
            let log = store.job_log(task, job, from, limit).await?;
            Ok(Read {
                json: job_log_json(&log),
                next: log.slice.next,
                ended: log.state != orchestrator_store::job_status::RUNNING
                    && log.slice.next >= log.total_bytes,
            })
        }
    }
}

fn limit_of(params: &LogQuery) -> usize {
    params
        .limit
        .map_or(DEFAULT_READ, |l| usize::try_from(l).unwrap_or(MAX_READ))
        .clamp(1, MAX_READ)
}

pub(crate) async fn gate(
    State(web): State<Web>,
    Path((id, n)): Path<(String, String)>,
    params: Result<Query<LogQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let task = TaskId(parse_id(&id)?);
    let source = Source::Gate(parse_position(&n)?);
    let read = read(
        &web.store,
        task,
        source,
        params.after.unwrap_or(0),
        limit_of(&params),
    )
    .await?;
    ok(&read.json)
}

pub(crate) async fn job(
    State(web): State<Web>,
    Path((id, job)): Path<(String, String)>,
    params: Result<Query<LogQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let task = TaskId(parse_id(&id)?);
    let source = Source::Job(parse_id(&job)?);
    let read = read(
        &web.store,
        task,
        source,
        params.after.unwrap_or(0),
        limit_of(&params),
    )
    .await?;
    ok(&read.json)
}

pub(crate) async fn gate_stream(
    State(web): State<Web>,
    Path((id, n)): Path<(String, String)>,
    headers: HeaderMap,
    params: Result<Query<LogQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let task = TaskId(parse_id(&id)?);
    follow(
        web,
        task,
        Source::Gate(parse_position(&n)?),
        &headers,
        &params,
    )
    .await
}

pub(crate) async fn job_stream(
    State(web): State<Web>,
    Path((id, job)): Path<(String, String)>,
    headers: HeaderMap,
    params: Result<Query<LogQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let task = TaskId(parse_id(&id)?);
    follow(web, task, Source::Job(parse_id(&job)?), &headers, &params).await
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
    source: Source,
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
            let read = match read(&self.store, self.task, self.source, self.next, self.limit).await
            {
                Ok(read) => read,
                Err(e) => {
                    // The store failed (or the gate is gone): say so and end; the client
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
    source: Source,
    headers: &HeaderMap,
    params: &LogQuery,
) -> ApiResult {
    let from = last_offset(headers)?.or(params.after).unwrap_or(0);
    let limit = limit_of(params);
    // A log that does not exist is a 404 before the stream starts, not an empty stream.
    read(&web.store, task, source, from, 1).await?;
    let follower = Follower {
        store: web.store.clone(),
        task,
        source,
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
