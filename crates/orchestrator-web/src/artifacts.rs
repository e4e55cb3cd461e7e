//! `/api/v1/artifacts/{id}`: what an artifact is, and its bytes, whole, a byte range
//! (`Range: bytes=A-B`, `bytes=A-`, `bytes=-N`, answered 206 with `Content-Range`), or its last
//! bytes (`?tail=N`, for a log's end). A range outside the artifact is 416. `?download=1` asks the
//! browser to save it.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use orchestrator_types::ArtifactId;
use serde::Deserialize;

use crate::{ApiError, ApiResult, Web, ok, parse_id, query};

/// `GET /api/v1/tasks/{id}/artifacts`: what a task's artifacts are, oldest first.
pub(crate) async fn of_task(State(web): State<Web>, Path(id): Path<String>) -> ApiResult {
    let task = orchestrator_types::TaskId(parse_id(&id)?);
    web.store.get_task(task).await?;
    ok(&serde_json::json!({ "artifacts": web.store.task_artifacts(task).await? }))
}

pub(crate) async fn meta(State(web): State<Web>, Path(id): Path<String>) -> ApiResult {
    let artifact = web.store.get_artifact(ArtifactId(parse_id(&id)?)).await?;
    ok(&artifact.meta)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContentQuery {
    /// Only the last this many bytes.
    tail: Option<u64>,
    /// Served as an attachment, to be saved: `1` or `true`.
    download: Option<String>,
}

/// A `Range` header's one range, resolved against `len`: `Ok(None)` without a header, `Err` when
/// it cannot be satisfied or is not one byte range.
fn range(headers: &HeaderMap, len: u64) -> Result<Option<(u64, u64)>, ApiError> {
    let Some(value) = headers.get(header::RANGE) else {
        return Ok(None);
    };
    let unsatisfiable = || {
        ApiError::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "range_not_satisfiable",
            format!("the range is not one byte range within the artifact's {len} bytes"),
        )
    };
    let spec = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().strip_prefix("bytes="))
        .filter(|v| !v.contains(','))
        .ok_or_else(unsatisfiable)?;
    let (start, end) = spec.split_once('-').ok_or_else(unsatisfiable)?;
    let (start, end) = match (start.trim(), end.trim()) {
        ("", suffix) => {
            let n: u64 = suffix.parse().map_err(|_| unsatisfiable())?;
            if n == 0 {
                return Err(unsatisfiable());
            }
            (len.saturating_sub(n), len.saturating_sub(1))
        }
        (start, "") => (
            start.parse().map_err(|_| unsatisfiable())?,
            len.saturating_sub(1),
        ),
        (start, end) => (
            start.parse().map_err(|_| unsatisfiable())?,
            end.parse::<u64>()
                .map_err(|_| unsatisfiable())?
                .min(len.saturating_sub(1)),
        ),
    };
    if len == 0 || start > end || start >= len {
        return Err(unsatisfiable());
    }
    Ok(Some((start, end)))
}

pub(crate) async fn content(
    State(web): State<Web>,
    Path(id): Path<String>,
    headers: HeaderMap,
    params: Result<Query<ContentQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let params = query(params)?;
    let artifact = web.store.get_artifact(ArtifactId(parse_id(&id)?)).await?;
    let len = artifact.bytes.len() as u64;
    let mut status = StatusCode::OK;
    let mut content_range = None;
    let (start, end) = match (params.tail, range(&headers, len)?) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give a Range header or tail, not both",
            ));
        }
        (Some(tail), None) => (len.saturating_sub(tail), len),
        (None, Some((start, end))) => {
            status = StatusCode::PARTIAL_CONTENT;
            content_range = Some(format!("bytes {start}-{end}/{len}"));
            (start, end + 1)
        }
        (None, None) => (0, len),
    };
    let body = artifact.bytes[start as usize..end as usize].to_vec();
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    let media = HeaderValue::from_str(&artifact.meta.media_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, media);
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    // What the browser shows is never run as a page of ours.
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    if let Some(value) = content_range.and_then(|v| HeaderValue::from_str(&v).ok()) {
        headers.insert(header::CONTENT_RANGE, value);
    }
    if matches!(params.download.as_deref(), Some("1" | "true")) {
        let name = format!("attachment; filename=\"artifact-{}\"", artifact.meta.id.0);
        if let Ok(value) = HeaderValue::from_str(&name) {
            headers.insert(header::CONTENT_DISPOSITION, value);
        }
    }
    Ok(response)
}
