//! The HTTP endpoint of `serve`: `/healthz` for liveness checks, `/metrics` for Prometheus, and a
//! small JSON API under `/api` for answering the agents' requests from elsewhere than a terminal
//! (a chat bot, a web page):
//!
//! - `GET /api/approvals` (`?status=pending` by default, `?all=true` for every status, `?task=ID`)
//! - `GET /api/approvals/{id}`
//! - `POST /api/approvals/{id}/approve`, `.../deny` and `.../answer`, with an optional JSON body
//!   `{"reason": "...", "answer": "...", "by": "..."}`; the decider is recorded as `api:<by>`
//! - `GET /api/tasks/{id}` and `GET /api/tasks/{id}/events?after=N`
//!
//! The versioned API, `/api/v1` (the `orchestrator-web` crate, with its OpenAPI document), is
//! merged into the same router; these older routes keep working beside it.
//!
//! The API speaks the store's types as they serialize (times in Unix milliseconds); the CLI's
//! `--json` views format times as RFC 3339 for people. Errors are `{"error": "..."}` with 401 (no or
//! wrong token), 400 (malformed request), 404, 409 (already decided), 422 (an answer that does not
//! fit the request) or 503 (the store is unavailable).
//!
//! `POST /webhooks/github` takes GitHub's deliveries. It needs no bearer token: it is authenticated
//! by the `X-Hub-Signature-256` HMAC of the raw body with the webhook secret, checked in constant
//! time, and a missing or wrong signature is 401. A delivery is accepted into the ledger
//! (`X-GitHub-Delivery`) with its payload and answered at once, 202 `{"status": "accepted"}`; the
//! daemon processes it in the background (see `triggers::process_loop`), and `github deliveries`
//! shows what it came to. A redelivery of a processed one is 200 `{"status": "duplicate", "tasks":
//! [...]}`; a redelivery of a failed one queues it again. 503 when the store could not record it.
//!
//! Every other route but `/healthz` needs the bearer token (generated into the home directory at first
//! start), because metrics reveal what the daemon is doing and the API acts on it; the listener
//! binds 127.0.0.1 by default.
//!
//! A client gets [`HEADER_READ_TIMEOUT`] to send a request's headers and [`BODY_READ_TIMEOUT`] to
//! send its body, each counted for the whole, not between reads: a client that trickles its
//! headers a byte at a time (slowloris) is disconnected, and one that never finishes its body gets
//! 408 and is disconnected, so a few idle sockets cannot hold the daemon's connections open.
//!
//! What a stranger can make the daemon hold in memory is bounded before anyone is authenticated
//! (see [`Limits`]):
//!
//! - at most [`Limits::max_connections`] connections are served at once (`[http] max_connections`
//!   in the config, [`DEFAULT_MAX_CONNECTIONS`] by default); one more is answered 503 at once and
//!   closed, without a byte of it read;
//! - the token (or a page's session) is checked before a body is read: an API route refuses a
//!   request without one and never reads its body, and any other route (the login form) reads at
//!   most [`MAX_UNAUTHENTICATED_BODY_BYTES`], out of [`Limits::unauthenticated_bytes`] shared by
//!   every such request in flight (503 when that is spent);
//! - a webhook delivery's signature header is checked before its body is read, the body is fed to
//!   the HMAC as it streams in, and the bytes held until the signature is known come out of
//!   [`Limits::unverified_webhook_bytes`] shared by every delivery in flight (503 when that is
//!   spent, 413 past [`MAX_WEBHOOK_BYTES`]); a wrong signature is 401 once the body is in.

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use orchestrator_store::{ApprovalFilter, Store, approval_status};
use orchestrator_types::TaskId;
use orchestrator_web::{DecideBody, Decision};
use orchestrator_worker::Metrics;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Clone)]
pub struct HttpState {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub token: Arc<str>,
    /// GitHub webhooks: the secret and the rules. `None` when no secret is configured, and the
    /// route then answers 404 saying how to configure one.
    pub webhooks: Option<Webhooks>,
    /// Refuse every write of the API, the old routes' and `/api/v1`'s (`serve --read-only`).
    pub read_only: bool,
    /// The dashboard's sessions, made by `serve` so that it can print a one-time login link.
    pub sessions: orchestrator_web::Sessions,
    /// Where this daemon's workers send the pieces of replies as they stream, for the dashboard's
    /// task streams; `None` in tests that run no worker.
    pub live: Option<tokio::sync::broadcast::Sender<orchestrator_web::LivePiece>>,
    /// What clients may make the listener hold; [`Limits::default`] outside tests.
    pub limits: Limits,
}

/// The trigger rules, and the webhook secret when one is configured (the poller needs the rules
/// only).
#[derive(Clone)]
pub struct Webhooks {
    pub secret: Option<Arc<[u8]>>,
    pub triggers: Arc<crate::triggers::Triggers>,
    /// Wakes the background processor when a delivery is accepted.
    pub wake: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        f.debug_struct("Webhooks")
            .field("secret", &self.secret.as_ref().map(|_| "<set>"))
            .field("rules", &self.triggers.rules.len())
            .finish()
    }
}

mod listener;
mod webhook;

use webhook::error;

pub use listener::*;

/// Events returned by one `GET /api/tasks/{id}/events` when the request names no smaller limit.
const MAX_EVENTS_PER_PAGE: u64 = 1000;

pub fn router(state: HttpState) -> Router {
    let mut web =
        orchestrator_web::Web::new(state.store.clone(), state.token.clone(), state.read_only)
            .with_sessions(state.sessions.clone());
    if let Some(live) = &state.live {
        web = web.with_live(live.clone());
    }
    let v1 = orchestrator_web::app(web);
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/api/approvals", get(list_approvals))
        .route("/api/approvals/{id}", get(get_approval))
        .route("/api/approvals/{id}/approve", post(approve))
        .route("/api/approvals/{id}/deny", post(deny))
        .route("/api/approvals/{id}/answer", post(answer))
        .route("/api/tasks/{id}", get(get_task))
        .route("/api/tasks/{id}/events", get(task_events))
        .route(
            WEBHOOK_PATH,
            post(webhook::github_webhook)
                .layer(axum::extract::DefaultBodyLimit::max(MAX_WEBHOOK_BYTES)),
        )
        .with_state(state.clone())
        .merge(v1)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(BodyGate::new(&state)),
            read_body,
        ))
}

async fn healthz(State(state): State<HttpState>) -> Response {
    axum::Json(serde_json::json!({
        "status": "ok",
        "backend": state.store.backend().as_str(),
    }))
    .into_response()
}

async fn metrics(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if !orchestrator_web::authorized(&headers, &state.token) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "missing or wrong bearer token; it is in the api-token file of the home directory\n",
        )
            .into_response();
    }
    let read = async {
        let states = state.store.count_by_state().await?;
        let servers = state.store.model_servers().await?;
        Ok::<_, orchestrator_store::Error>((states, servers))
    };
    match read.await {
        Ok((states, servers)) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            state.metrics.render(&states)
                + &orchestrator_worker::metrics::render_model_servers(&servers),
        )
            .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store unavailable: {e}\n"),
        )
            .into_response(),
    }
}

/// An API failure: a status and a message, sent as `{"error": message}`.
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<orchestrator_store::Error> for ApiError {
    fn from(e: orchestrator_store::Error) -> ApiError {
        use orchestrator_store::Error as S;
        let status = match &e {
            S::TaskNotFound(_)
            | S::ArtifactNotFound(_)
            | S::GateNotFound { .. }
            | S::ShellJobNotFound { .. }
            | S::TerminalNotFound { .. }
            | S::BackgroundJobNotFound { .. }
            | S::AutomationNotFound(_)
            | S::ApprovalNotFound(_)
            | S::AttemptNotFound(_) => StatusCode::NOT_FOUND,
            S::ApprovalDecided { .. }
            | S::WrongState { .. }
            | S::StaleLease { .. }
            | S::DuplicateAutomation(_)
            | S::DeliveryNotClaimed { .. } => StatusCode::CONFLICT,
            S::InvalidAnswer(_) | S::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            S::BadUrl { .. }
            | S::Unreachable { .. }
            | S::ConnectRefused { .. }
            | S::Migration(_)
            | S::Database(_)
            | S::DiskFull(_)
            | S::Query(_) => StatusCode::SERVICE_UNAVAILABLE,
            // A row the store cannot read back is a bug or damage, not an outage.
            S::Corrupt { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = axum::Json(serde_json::json!({ "error": self.message }));
        if self.status == StatusCode::UNAUTHORIZED {
            (self.status, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
        } else {
            (self.status, body).into_response()
        }
    }
}

type ApiResult = Result<Response, ApiError>;

fn check_token(headers: &HeaderMap, state: &HttpState) -> Result<(), ApiError> {
    if orchestrator_web::authorized(headers, &state.token) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token; it is in the api-token file of the home directory",
        ))
    }
}

fn json<T: serde::Serialize>(value: &T) -> ApiResult {
    Ok(axum::Json(value).into_response())
}

fn parse_id(text: &str) -> Result<i64, ApiError> {
    match text.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(ApiError::bad_request(format!("{text:?} is not an id"))),
    }
}

fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    status: Option<String>,
    #[serde(default)]
    all: bool,
    task: Option<i64>,
    limit: Option<u64>,
}

async fn list_approvals(
    State(state): State<HttpState>,
    headers: HeaderMap,
    params: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult {
    check_token(&headers, &state)?;
    let params = query(params)?;
    const STATUSES: [&str; 6] = [
        approval_status::PENDING,
        approval_status::APPROVED,
        approval_status::DENIED,
        approval_status::ANSWERED,
        approval_status::EXPIRED,
        approval_status::CANCELED,
    ];
    let status = match (params.all, params.status) {
        (true, _) => None,
        (false, None) => Some(approval_status::PENDING.to_owned()),
        (false, Some(s)) if STATUSES.contains(&s.as_str()) => Some(s),
        (false, Some(s)) => {
            return Err(ApiError::bad_request(format!(
                "unknown status {s:?}: one of {}",
                STATUSES.join(", ")
            )));
        }
    };
    let approvals = state
        .store
        .list_approvals(&ApprovalFilter {
            status,
            task: params.task.map(TaskId),
            limit: params.limit,
        })
        .await?;
    json(&approvals)
}

async fn get_approval(
    State(state): State<HttpState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult {
    check_token(&headers, &state)?;
    json(&state.store.get_approval(parse_id(&id)?).await?)
}

async fn decide(state: &HttpState, id: &str, body: &[u8], kind: Decision) -> ApiResult {
    if state.read_only {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "this daemon serves its API read-only; nothing was changed",
        ));
    }
    let id = parse_id(id)?;
    let body = DecideBody::parse(body).map_err(ApiError::bad_request)?;
    let decision = body
        .decision(kind)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    let approval = state
        .store
        .decide_approval(id, &decision, &body.decider())
        .await?;
    json(&approval)
}

async fn approve(
    State(state): State<HttpState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    check_token(&headers, &state)?;
    decide(&state, &id, &body, Decision::Approve).await
}

async fn deny(
    State(state): State<HttpState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    check_token(&headers, &state)?;
    decide(&state, &id, &body, Decision::Deny).await
}

async fn answer(
    State(state): State<HttpState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    check_token(&headers, &state)?;
    decide(&state, &id, &body, Decision::Answer).await
}

async fn get_task(
    State(state): State<HttpState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult {
    check_token(&headers, &state)?;
    json(&state.store.get_task(TaskId(parse_id(&id)?)).await?)
}

#[derive(Debug, Deserialize)]
struct EventsQuery {
    #[serde(default)]
    after: i64,
    limit: Option<u64>,
}

async fn task_events(
    State(state): State<HttpState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    params: Result<Query<EventsQuery>, QueryRejection>,
) -> ApiResult {
    check_token(&headers, &state)?;
    let params = query(params)?;
    let id = TaskId(parse_id(&id)?);
    // An unknown task is a 404, not an empty page a client would poll forever.
    state.store.get_task(id).await?;
    let limit = params
        .limit
        .unwrap_or(MAX_EVENTS_PER_PAGE)
        .clamp(1, MAX_EVENTS_PER_PAGE);
    json(&state.store.events(id, params.after, limit).await?)
}

#[cfg(test)]
mod tests;
