//! `/api/v1/tasks`: list with filters and keyset pagination, create, read, events, cancel, retry.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use orchestrator_store::CancelOutcome;
use orchestrator_types::{AgentOptions, GateSpec, ModelSpec, NewTask, TaskId};
use serde::Deserialize;
use serde_json::json;

use crate::filter::Filter;
use crate::{ApiError, ApiResult, Web, body, ok, parse_id, query};

const DEFAULT_PAGE: u64 = 50;
const MAX_PAGE: u64 = 200;
const MAX_EVENTS_PER_PAGE: u64 = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    state: Option<String>,
    queue: Option<String>,
    /// An automation's name: only the tasks its slots created.
    automation: Option<String>,
    /// Text the title contains, case-insensitively.
    q: Option<String>,
    repository: Option<String>,
    verdict: Option<String>,
    limit: Option<u64>,
    /// The `next_before` of the previous page: tasks older than that id.
    before: Option<i64>,
}

pub(crate) async fn list(
    State(web): State<Web>,
    params: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let limit = params.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
    let filter = Filter {
        state: params.state,
        queue: params.queue,
        automation: params.automation,
        q: params.q,
        repository: params.repository,
        verdict: params.verdict,
    };
    let page = filter
        .page(&web.store, params.before.map(TaskId), limit + 1)
        .await?;
    let mut tasks = web.store.task_page(&page).await?;
    // One more than asked says whether another page follows, without counting.
    let next_before = if tasks.len() as u64 > limit {
        tasks.truncate(limit as usize);
        tasks.last().map(|t| t.id.0)
    } else {
        None
    };
    ok(&json!({"tasks": tasks, "next_before": next_before}))
}

/// Tasks per state, every state named.
pub(crate) async fn counts(State(web): State<Web>) -> ApiResult {
    let counts: serde_json::Map<String, serde_json::Value> = web
        .store
        .count_by_state()
        .await?
        .into_iter()
        .map(|(state, n)| (state.as_str().to_owned(), json!(n)))
        .collect();
    ok(&json!({ "counts": counts }))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    title: String,
    prompt: Option<String>,
    /// Each a command, or `{"command", "name", "cwd", "timeout_secs"}`.
    #[serde(default, deserialize_with = "orchestrator_types::gates_or_commands")]
    gates: Vec<GateSpec>,
    /// An absolute path to an existing directory on the daemon's machine.
    workspace: String,
    queue: Option<String>,
    priority: Option<i64>,
    max_attempts: Option<i64>,
    model: Option<ModelSpec>,
    agent: Option<AgentOptions>,
    #[serde(default)]
    acceptance: Vec<String>,
    /// Labels the worker that runs it must have.
    #[serde(default)]
    require_labels: Vec<String>,
}

pub(crate) async fn create(State(web): State<Web>, bytes: Bytes) -> ApiResult {
    let request: CreateBody = body(&bytes, false)?;
    let workspace = std::path::Path::new(&request.workspace);
    if !workspace.is_absolute() || !workspace.is_dir() {
        return Err(ApiError::unprocessable(format!(
            "workspace {:?} is not an absolute path to a directory on the daemon's machine",
            request.workspace
        )));
    }
    let mut task = NewTask::new(request.title);
    task.prompt = request.prompt;
    task.gates = request.gates;
    task.workspace = Some(request.workspace);
    if let Some(queue) = request.queue {
        task.queue = queue;
    }
    if let Some(priority) = request.priority {
        task.priority = priority;
    }
    if let Some(max) = request.max_attempts {
        task.max_attempts = max;
    }
    task.model = request.model;
    if let Some(agent) = request.agent {
        task.agent = agent;
    }
    task.acceptance = request.acceptance;
    for label in &request.require_labels {
        orchestrator_types::placement::validate_label(label)
            .map_err(|e| ApiError::unprocessable(e.to_string()))?;
    }
    task.requires = request.require_labels;
    task.validate()
        .map_err(|e| ApiError::unprocessable(e.to_string()))?;
    let id = web.store.create_task(&task).await?;
    let created = web.store.get_task(id).await?;
    Ok((StatusCode::CREATED, axum::Json(crate::api_json(&created))).into_response())
}

/// One task; a running task whose request waits for its model server says why in `waiting_for`
/// and `model_wait`, and a queued one what keeps it (a label no live worker offers, its key's
/// spent daily budget or taken turns) in `waiting_for`.
pub(crate) async fn read(State(web): State<Web>, Path(id): Path<String>) -> ApiResult {
    let task = web.store.get_task(TaskId(parse_id(&id)?)).await?;
    let wait = match task.state {
        orchestrator_types::TaskState::Running => web.store.model_wait_of(task.id).await?,
        _ => None,
    };
    let mut value = crate::api_json(&task);
    if task.state == orchestrator_types::TaskState::Queued
        && let Some(why) = web.store.why_queued(&task).await?
        && let Some(fields) = value.as_object_mut()
    {
        fields.insert("waiting_for".into(), why.into());
    }
    if let (Some(wait), Some(fields)) = (wait, value.as_object_mut()) {
        fields.insert(
            "waiting_for".into(),
            wait.describe(orchestrator_types::now_millis()).into(),
        );
        fields.insert("model_wait".into(), crate::api_json(&wait));
    }
    Ok(axum::Json(value).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    #[serde(default)]
    after: i64,
    limit: Option<u64>,
}

pub(crate) async fn events(
    State(web): State<Web>,
    Path(id): Path<String>,
    params: Result<Query<EventsQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let id = TaskId(parse_id(&id)?);
    // An unknown task is a 404, not an empty page a client would poll forever.
    web.store.get_task(id).await?;
    let limit = params
        .limit
        .unwrap_or(MAX_EVENTS_PER_PAGE)
        .clamp(1, MAX_EVENTS_PER_PAGE);
    let events = web.store.events(id, params.after, limit).await?;
    let next_after = events.last().map(|e| e.seq);
    let events: Vec<_> = events.iter().map(crate::event_json).collect();
    ok(&json!({"events": events, "next_after": next_after}))
}

pub(crate) async fn cancel(State(web): State<Web>, Path(id): Path<String>) -> ApiResult {
    let id = TaskId(parse_id(&id)?);
    let outcome = match web.store.cancel_task(id).await? {
        CancelOutcome::Canceled => "canceled",
        CancelOutcome::Requested => "requested",
        CancelOutcome::AlreadyCanceled => "already_canceled",
    };
    let task = web.store.get_task(id).await?;
    ok(&json!({"outcome": outcome, "task": task}))
}

pub(crate) async fn retry(State(web): State<Web>, Path(id): Path<String>) -> ApiResult {
    ok(&web.store.retry_task(TaskId(parse_id(&id)?)).await?)
}
