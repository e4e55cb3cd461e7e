//! `/api/v1/approvals`: list, read, approve, deny, answer.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use orchestrator_store::{ApprovalDecision, ApprovalFilter, approval_status};
use orchestrator_types::TaskId;
use serde::Deserialize;
use serde_json::json;

use crate::{ApiError, ApiResult, Web, body, ok, parse_id, query};

/// Who decided, when the body does not say.
const DEFAULT_DECIDER: &str = "anonymous";
const MAX_DECIDER_CHARS: usize = 64;

const STATUSES: [&str; 6] = [
    approval_status::PENDING,
    approval_status::APPROVED,
    approval_status::DENIED,
    approval_status::ANSWERED,
    approval_status::EXPIRED,
    approval_status::CANCELED,
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// One status, `pending` unless given; `all` for every status.
    status: Option<String>,
    task: Option<i64>,
    limit: Option<u64>,
}

pub(crate) async fn list(
    State(web): State<Web>,
    params: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let status = match params.status.as_deref() {
        None | Some("") => Some(approval_status::PENDING.to_owned()),
        Some("all") => None,
        Some(s) if STATUSES.contains(&s) => Some(s.to_owned()),
        Some(s) => {
            return Err(ApiError::bad_request(format!(
                "unknown status {s:?}: one of {}, or all",
                STATUSES.join(", ")
            )));
        }
    };
    let approvals = web
        .store
        .list_approvals(&ApprovalFilter {
            status,
            task: params.task.map(TaskId),
            limit: Some(params.limit.unwrap_or(100).clamp(1, 1000)),
        })
        .await?;
    ok(&json!({ "approvals": approvals }))
}

pub(crate) async fn read(State(web): State<Web>, Path(id): Path<String>) -> ApiResult {
    ok(&web.store.get_approval(parse_id(&id)?).await?)
}

/// The body of a decision, all optional. Unknown fields are refused, so a typo (`"reasn"`) is not
/// lost silently.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecideBody {
    reason: Option<String>,
    answer: Option<String>,
    by: Option<String>,
}

impl DecideBody {
    fn decider(&self) -> String {
        let name = self
            .by
            .as_deref()
            .map(str::trim)
            .filter(|b| !b.is_empty())
            .unwrap_or(DEFAULT_DECIDER);
        format!(
            "api:{}",
            name.chars().take(MAX_DECIDER_CHARS).collect::<String>()
        )
    }
}

async fn decide(
    web: &Web,
    id: &str,
    bytes: &[u8],
    decision: impl FnOnce(&DecideBody) -> Result<ApprovalDecision, ApiError>,
) -> ApiResult {
    let id = parse_id(id)?;
    let request: DecideBody = body(bytes, true)?;
    let decision = decision(&request)?;
    ok(&web
        .store
        .decide_approval(id, &decision, &request.decider())
        .await?)
}

pub(crate) async fn approve(
    State(web): State<Web>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    decide(&web, &id, &bytes, |_| Ok(ApprovalDecision::Approve)).await
}

pub(crate) async fn deny(
    State(web): State<Web>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    decide(&web, &id, &bytes, |request| {
        Ok(ApprovalDecision::Deny {
            reason: request.reason.clone().filter(|r| !r.trim().is_empty()),
        })
    })
    .await
}

pub(crate) async fn answer(
    State(web): State<Web>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    decide(&web, &id, &bytes, |request| match &request.answer {
        Some(text) => Ok(ApprovalDecision::Answer(text.clone())),
        None => Err(ApiError::unprocessable(
            "give the answer in the body: {\"answer\": \"...\"}",
        )),
    })
    .await
}
