//! `/api/v1/approvals`: list, read, approve, deny, answer.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use orchestrator_store::{ApprovalDecision, ApprovalFilter, approval_status};
use orchestrator_types::TaskId;
use serde::Deserialize;
use serde_json::json;

use crate::{ApiError, ApiResult, Web, body, ok, parse_id, query};

/// Who decided when a request body names nobody: the holder of the token.
const DEFAULT_DECIDER: &str = "token";
/// Longest `by` kept, so a client cannot fill the store with a name.
const MAX_DECIDER_CHARS: usize = 100;

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

/// What a person decides about an approval.
#[derive(Debug, Clone, Copy)]
pub enum Decision {
    Approve,
    Deny,
    Answer,
}

/// The body of a decision, all optional, shared by `/api/v1` and the older `/api` routes. Unknown
/// fields are refused, so a typo (`"reasn"`) is not lost silently.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    reason: Option<String>,
    answer: Option<String>,
    by: Option<String>,
}

impl DecideBody {
    /// An empty body means no fields; anything else must be a JSON object of them.
    pub fn parse(bytes: &[u8]) -> Result<DecideBody, String> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(DecideBody::default());
        }
        serde_json::from_slice(bytes).map_err(|e| format!("the body is not a decision: {e}"))
    }

    /// Who decided, as recorded: `api:` and the body's `by`, else the token.
    pub fn decider(&self) -> String {
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

    /// The store's decision; an answer needs its text.
    pub fn decision(&self, kind: Decision) -> Result<ApprovalDecision, String> {
        Ok(match kind {
            Decision::Approve => ApprovalDecision::Approve,
            Decision::Deny => ApprovalDecision::Deny {
                reason: self.reason.clone().filter(|r| !r.trim().is_empty()),
            },
            Decision::Answer => match &self.answer {
                Some(text) => ApprovalDecision::Answer(text.clone()),
                None => return Err("give the answer in the body: {\"answer\": \"...\"}".into()),
            },
        })
    }
}

async fn decide(web: &Web, id: &str, bytes: &[u8], kind: Decision) -> ApiResult {
    let id = parse_id(id)?;
    let request: DecideBody = body(bytes, true)?;
    let decision = request.decision(kind).map_err(ApiError::unprocessable)?;
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
    decide(&web, &id, &bytes, Decision::Approve).await
}

pub(crate) async fn deny(
    State(web): State<Web>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    decide(&web, &id, &bytes, Decision::Deny).await
}

pub(crate) async fn answer(
    State(web): State<Web>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    decide(&web, &id, &bytes, Decision::Answer).await
}
