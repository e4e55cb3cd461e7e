//! Bulk cancel and retry over a filter, with a preview count first: the API's
//! `POST /api/v1/tasks/bulk` and the tasks page's "Cancel matching…" use the same walk.
//!
//! A filter is required (at least one of state, queue, automation, text, repository, verdict): "every task" is never
//! one click away. At most [`MAX_BULK`] tasks change per call; `more` says when others matched.

use axum::body::Bytes;
use axum::extract::State;
use orchestrator_store::{Store, TaskPage};
use orchestrator_types::{TaskId, TaskState};
use serde::{Deserialize, Serialize};

use crate::{ApiError, ApiResult, Web, body, ok};

/// Most tasks one bulk call changes.
pub const MAX_BULK: usize = 1000;
const WALK_PAGE: u64 = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    #[default]
    Cancel,
    Retry,
}

impl Action {
    /// Whether a task in `state` is one this action changes.
    fn applies(self, state: TaskState) -> bool {
        match self {
            Action::Cancel => !state.is_terminal(),
            Action::Retry => matches!(state, TaskState::Failed | TaskState::Canceled),
        }
    }
}

pub use crate::filter::Filter;

/// What a bulk call found and did.
#[derive(Debug, Serialize)]
pub struct Outcome {
    pub action: Action,
    /// Tasks the filter matches that the action applies to (at most [`MAX_BULK`]).
    pub matched: usize,
    /// Tasks changed (0 for a preview).
    pub changed: usize,
    pub ids: Vec<i64>,
    /// More tasks matched than one call changes.
    pub more: bool,
}

/// The filter as a page of the store, refused when it names nothing.
async fn page_of(store: &Store, filter: &Filter) -> Result<TaskPage, ApiError> {
    if filter.is_empty() {
        return Err(ApiError::unprocessable(
            "a bulk action needs a filter (state, queue, automation, q, repository or verdict); it never applies to every task",
        ));
    }
    filter
        .page(store, None, WALK_PAGE)
        .await
        .map_err(|e| match e.status {
            // A value that cannot be is the body's fault here, as the rest of the body's.
            axum::http::StatusCode::BAD_REQUEST => ApiError::unprocessable(e.message),
            _ => e,
        })
}

/// Finds the tasks `filter` matches that `action` applies to, and unless `preview` applies it.
pub async fn run(
    store: &Store,
    action: Action,
    filter: &Filter,
    preview: bool,
) -> Result<Outcome, ApiError> {
    let mut page = page_of(store, filter).await?;
    let mut ids = Vec::new();
    let mut more = false;
    'walk: loop {
        let tasks = store.task_page(&page).await?;
        let Some(last) = tasks.last() else { break };
        page.before = Some(last.id);
        for task in tasks.iter().filter(|t| action.applies(t.state)) {
            if ids.len() == MAX_BULK {
                more = true;
                break 'walk;
            }
            ids.push(task.id);
        }
        if (tasks.len() as u64) < WALK_PAGE {
            break;
        }
    }
    let mut changed = 0;
    if !preview {
        for id in &ids {
            let done = match action {
                Action::Cancel => store.cancel_task(*id).await.map(|_| ()),
                Action::Retry => store.retry_task(*id).await.map(|_| ()),
            };
            match done {
                Ok(()) => changed += 1,
                // Moved on by a worker or a person in the meantime: not this call's to change.
                Err(orchestrator_store::Error::WrongState { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Outcome {
        action,
        matched: ids.len(),
        changed,
        ids: ids.into_iter().map(|TaskId(id)| id).collect(),
        more,
    })
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkBody {
    action: Action,
    #[serde(default)]
    preview: bool,
    state: Option<String>,
    queue: Option<String>,
    automation: Option<String>,
    q: Option<String>,
    repository: Option<String>,
    verdict: Option<String>,
}

/// `POST /api/v1/tasks/bulk`.
pub(crate) async fn api(State(web): State<Web>, bytes: Bytes) -> ApiResult {
    let request: BulkBody = body(&bytes, false)?;
    let filter = Filter {
        state: request.state,
        queue: request.queue,
        automation: request.automation,
        q: request.q,
        repository: request.repository,
        verdict: request.verdict,
    };
    ok(&run(&web.store, request.action, &filter, request.preview).await?)
}
