//! GitHub's side, read-only: PR attempts (`/api/v1/attempts`, of a task or a group), and the
//! webhook and poller deliveries with what each came to (`/api/v1/deliveries`).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use orchestrator_types::TaskId;
use serde::Deserialize;
use serde_json::json;

use crate::{ApiError, ApiResult, Web, ok, parse_id, query};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AttemptsQuery {
    task: Option<i64>,
    group: Option<String>,
}

pub(crate) async fn attempts(
    State(web): State<Web>,
    params: Result<Query<AttemptsQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    if params.task.is_none() && params.group.is_none() {
        return Err(ApiError::bad_request(
            "name a task (?task=ID) or a group (?group=NAME)",
        ));
    }
    let attempts = web
        .store
        .attempts(params.task.map(TaskId), params.group.as_deref())
        .await?;
    ok(&json!({ "attempts": attempts }))
}

pub(crate) async fn attempt(State(web): State<Web>, Path(id): Path<String>) -> ApiResult {
    ok(&web.store.attempt(parse_id(&id)?).await?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeliveriesQuery {
    limit: Option<u64>,
}

pub(crate) async fn deliveries(
    State(web): State<Web>,
    params: Result<Query<DeliveriesQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let limit = params.limit.unwrap_or(50).clamp(1, 500);
    ok(&json!({ "deliveries": web.store.deliveries(limit).await? }))
}

pub(crate) async fn delivery(State(web): State<Web>, Path(id): Path<String>) -> ApiResult {
    match web.store.delivery(&id).await? {
        Some(delivery) => ok(&delivery),
        None => Err(ApiError::not_found(format!("no delivery {id:?}"))),
    }
}
