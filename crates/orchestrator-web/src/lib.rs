//! The daemon's JSON API, `/api/v1`: the contract the dashboard, scripts and other machines use.
//!
//! The router is built from a store and a few settings, so tests serve it on a loopback port and
//! reach it over real HTTP. Every route needs the bearer token (`Authorization: Bearer ...`);
//! `read_only` refuses every write with 403 `read_only`, whatever the token; a write whose
//! `Origin` (or `Referer`) names another site is refused with 403 `cross_origin` (see origin.rs). Errors are JSON with a
//! stable code (see [`error`]). Times are Unix milliseconds, as the store keeps them; the CLI's
//! `--json` views format them for people. `GET /api/v1/openapi.json` describes every route, and a
//! test checks the document against the router both ways.
//!
//! - tasks: list (filters, keyset pagination, counts per state), create, read, events (a page, or
//!   live as Server-Sent Events resumable with `Last-Event-ID`, with the pieces of the model's
//!   reply while this daemon runs it), turns with their tool calls, cancel, retry, and the list's
//!   changes as they happen;
//! - automations: list, create, read (next fire times, recent slots), replace, pause, resume, run
//!   now, and the next fire times of any expression;
//! - artifacts: what one is, and its bytes (a `Range`, or the tail of a log);
//! - logs: a gate's or a shell job's output, live while it runs and recorded after, read from a
//!   byte offset or followed as Server-Sent Events until it ends with its verdict;
//! - approvals: list, read, approve, deny, answer, and the inbox's changes as they happen;
//! - GitHub: PR attempts of a task or group, webhook and poller deliveries;
//! - health.

mod approvals;
mod artifacts;
mod automations;
pub mod bulk;
pub mod error;
pub mod filter;
mod github;
pub mod logs;
mod openapi;
mod origin;
pub mod pages;
mod session;
mod stream;
mod tasks;
mod turns;
mod watch;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use orchestrator_store::Store;
use serde_json::json;

pub use approvals::{DecideBody, Decision};
pub use error::ApiError;
pub use openapi::document;
pub use session::Sessions;
use tokio::sync::broadcast;

/// A piece of a model's reply as it streams, for a task a worker of this daemon runs: sent to the
/// task's event stream, never stored (the whole message is, as an event).
#[derive(Debug, Clone)]
pub struct LivePiece {
    pub task: orchestrator_types::TaskId,
    /// The event's name in the stream: `delta` (text, or a piece of a tool call) or `retrying`.
    pub kind: &'static str,
    pub data: serde_json::Value,
}

/// Pieces the streams may fall behind by before they skip some.
const LIVE_CAPACITY: usize = 1024;

/// What the API and the pages serve from.
#[derive(Clone)]
pub struct Web {
    pub store: Store,
    /// The bearer token every route needs (the pages: the token a person logs in with).
    pub token: Arc<str>,
    /// Refuse every write (403 `read_only`): for a dashboard shown to people who may look only.
    pub read_only: bool,
    /// The pages' sessions; a GET of the API also accepts a session's cookie, so the pages'
    /// script can read the event stream, which a browser's `EventSource` opens without headers.
    pub sessions: session::Sessions,
    /// Finds what changed in the store for every open stream at once.
    watch: Arc<watch::Watch>,
    /// Where this daemon's workers send the pieces of replies as they stream.
    live: broadcast::Sender<LivePiece>,
}

impl Web {
    /// The same, with sessions made elsewhere (`serve` makes them, to print a one-time link).
    pub fn with_sessions(mut self, sessions: Sessions) -> Web {
        self.sessions = sessions;
        self
    }

    pub fn new(store: Store, token: Arc<str>, read_only: bool) -> Web {
        Web {
            watch: Arc::new(watch::Watch::new(store.clone())),
            store,
            token,
            read_only,
            sessions: session::Sessions::default(),
            live: broadcast::channel(LIVE_CAPACITY).0,
        }
    }

    /// The same, with the task streams fed by `live`, where `serve`'s workers send the pieces of
    /// replies as they stream.
    pub fn with_live(mut self, live: broadcast::Sender<LivePiece>) -> Web {
        self.live = live;
        self
    }

    /// Where to send the pieces of replies, for the task streams.
    pub fn live(&self) -> broadcast::Sender<LivePiece> {
        self.live.clone()
    }

    /// A channel for [`Web::with_live`].
    pub fn live_channel() -> broadcast::Sender<LivePiece> {
        broadcast::channel(LIVE_CAPACITY).0
    }
}

/// The API and the dashboard's pages together, to merge into the daemon's router.
pub fn app(web: Web) -> Router {
    router(web.clone()).merge(pages::router(web))
}

/// Every route: method and path, as the OpenAPI document names them.
pub const ROUTES: [(&str, &str); 44] = [
    ("GET", "/api/v1/health"),
    ("GET", "/api/v1/openapi.json"),
    ("GET", "/api/v1/tasks"),
    ("POST", "/api/v1/tasks"),
    ("POST", "/api/v1/tasks/bulk"),
    ("GET", "/api/v1/tasks/stream"),
    ("GET", "/api/v1/tasks/{id}"),
    ("GET", "/api/v1/tasks/{id}/events"),
    ("GET", "/api/v1/tasks/{id}/events/stream"),
    ("GET", "/api/v1/tasks/{id}/turns"),
    ("GET", "/api/v1/tasks/{id}/artifacts"),
    ("GET", "/api/v1/tasks/{id}/gates/{n}/log"),
    ("GET", "/api/v1/tasks/{id}/gates/{n}/log/stream"),
    ("GET", "/api/v1/tasks/{id}/jobs/{job}/log"),
    ("GET", "/api/v1/tasks/{id}/jobs/{job}/log/stream"),
    ("GET", "/api/v1/tasks/{id}/terminals/{terminal}/log"),
    ("GET", "/api/v1/tasks/{id}/terminals/{terminal}/log/stream"),
    (
        "GET",
        "/api/v1/tasks/{id}/background-jobs/{background_job}/log",
    ),
    (
        "GET",
        "/api/v1/tasks/{id}/background-jobs/{background_job}/log/stream",
    ),
    ("GET", "/api/v1/tasks/{id}/logs"),
    ("POST", "/api/v1/tasks/{id}/cancel"),
    ("POST", "/api/v1/tasks/{id}/retry"),
    ("GET", "/api/v1/automations"),
    ("POST", "/api/v1/automations"),
    ("GET", "/api/v1/automations/{name}"),
    ("PUT", "/api/v1/automations/{name}"),
    ("GET", "/api/v1/schedule-preview"),
    ("GET", "/api/v1/artifacts/{id}"),
    ("GET", "/api/v1/artifacts/{id}/content"),
    ("POST", "/api/v1/automations/{name}/pause"),
    ("POST", "/api/v1/automations/{name}/resume"),
    ("POST", "/api/v1/automations/{name}/run"),
    ("GET", "/api/v1/approvals"),
    ("GET", "/api/v1/approvals/stream"),
    ("GET", "/api/v1/approvals/{id}"),
    ("POST", "/api/v1/approvals/{id}/approve"),
    ("POST", "/api/v1/approvals/{id}/deny"),
    ("POST", "/api/v1/approvals/{id}/answer"),
    ("GET", "/api/v1/attempts"),
    ("GET", "/api/v1/attempts/{id}"),
    ("GET", "/api/v1/deliveries"),
    ("GET", "/api/v1/deliveries/{id}"),
    ("GET", "/api/v1/workers"),
    ("GET", "/api/v1/counts"),
];

/// The `/api/v1` routes, to merge into the daemon's router.
pub fn router(web: Web) -> Router {
    let api = Router::new()
        .route("/health", get(health))
        .route("/openapi.json", get(openapi))
        .route("/counts", get(tasks::counts))
        .route("/workers", get(workers))
        .route("/attempts", get(github::attempts))
        .route("/attempts/{id}", get(github::attempt))
        .route("/deliveries", get(github::deliveries))
        .route("/deliveries/{id}", get(github::delivery))
        .route("/tasks", get(tasks::list).post(tasks::create))
        .route("/tasks/bulk", post(bulk::api))
        .route("/tasks/stream", get(stream::tasks))
        .route("/tasks/{id}", get(tasks::read))
        .route("/tasks/{id}/events", get(tasks::events))
        .route("/tasks/{id}/events/stream", get(stream::task_events))
        .route("/tasks/{id}/turns", get(turns::api))
        .route("/tasks/{id}/artifacts", get(artifacts::of_task))
        .route("/tasks/{id}/logs", get(logs::list))
        // gates/{n}, jobs/{job}, terminals/{t} and background-jobs/{b}: one reader over the kind
        // of log.
        .route("/tasks/{id}/{kind}/{key}/log", get(logs::log))
        .route("/tasks/{id}/{kind}/{key}/log/stream", get(logs::stream))
        .route("/tasks/{id}/cancel", post(tasks::cancel))
        .route("/tasks/{id}/retry", post(tasks::retry))
        .route(
            "/automations",
            get(automations::list).post(automations::create),
        )
        .route(
            "/automations/{name}",
            get(automations::read).put(automations::replace),
        )
        .route("/schedule-preview", get(automations::preview))
        .route("/artifacts/{id}", get(artifacts::meta))
        .route("/artifacts/{id}/content", get(artifacts::content))
        .route("/automations/{name}/pause", post(automations::pause))
        .route("/automations/{name}/resume", post(automations::resume))
        .route("/automations/{name}/run", post(automations::run))
        .route("/approvals", get(approvals::list))
        .route("/approvals/stream", get(stream::approvals))
        .route("/approvals/{id}", get(approvals::read))
        .route("/approvals/{id}/approve", post(approvals::approve))
        .route("/approvals/{id}/deny", post(approvals::deny))
        .route("/approvals/{id}/answer", post(approvals::answer))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(web.clone(), guard))
        .with_state(web);
    Router::new().nest("/api/v1", api)
}

/// The origin of a write, the token, then read-only mode, for every route.
async fn guard(State(web): State<Web>, request: Request, next: Next) -> Response {
    if let Some(why) = origin::cross_origin(request.method(), request.headers()) {
        return ApiError::new(StatusCode::FORBIDDEN, "cross_origin", why).into_response();
    }
    // A page's session may read (never write: a cookie is sent by the browser whoever asks, and
    // the API's writes have no CSRF token).
    let reading = request.method() == Method::GET || request.method() == Method::HEAD;
    let session = reading && web.sessions.csrf_of(request.headers()).is_some();
    if !session && !authorized(request.headers(), &web.token) {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token; it is in the api-token file of the home directory",
        )
        .into_response();
    }
    if web.read_only && !reading {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "read_only",
            "this daemon serves its API read-only; nothing was changed",
        )
        .into_response();
    }
    next.run(request).await
}

/// Compares the presented bearer token with the expected one in constant time.
pub fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(presented) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (presented.trim().as_bytes(), token.as_bytes());
    // An empty token (presented or expected) authorizes nothing.
    !a.is_empty()
        && a.len() == b.len()
        && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn no_route(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!(
            "no route {} {}; GET /api/v1/openapi.json lists them",
            request.method(),
            request.uri().path()
        ),
    )
}

async fn wrong_method(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} is not allowed on {}; GET /api/v1/openapi.json lists the routes",
            request.method(),
            request.uri().path()
        ),
    )
}

type ApiResult = Result<Response, ApiError>;

/// An event as the API and the streams send it: the stored record, plus `text`, what it says in
/// words (as the CLI's `task events` and the task page show it), and `tone` (info, good, bad,
/// wait).
pub(crate) fn event_json(event: &orchestrator_types::TaskEvent) -> serde_json::Value {
    let described = orchestrator_types::describe(&event.kind, &event.data);
    let mut value = api_json(event);
    if let Some(map) = value.as_object_mut() {
        map.insert("text".into(), described.text.into());
        map.insert("tone".into(), described.tone.as_str().into());
    }
    value
}

fn ok<T: serde::Serialize>(value: &T) -> ApiResult {
    Ok(axum::Json(api_json(value)).into_response())
}

/// `value` as the API sends it: the store keeps times as Unix milliseconds, and the API (like the
/// CLI's `--json`) sends every time as an RFC 3339 string in UTC (`2026-11-26T03:00:00.000Z`): each
/// integer field named `at`, `run_after` or `…_at`, at any depth except inside what is sent as it
/// was stored (an event's `data`, a call's `arguments`, a task's `spec`).
pub(crate) fn api_json<T: serde::Serialize>(value: &T) -> serde_json::Value {
    let mut value = serde_json::to_value(value).unwrap_or_default();
    rfc3339_times(&mut value);
    value
}

fn rfc3339_times(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                let is_time = key == "at" || key == "run_after" || key.ends_with("_at");
                match field {
                    serde_json::Value::Number(n) if is_time => {
                        if let Some(ms) = n.as_i64() {
                            *field = orchestrator_types::format_millis(ms).into();
                        }
                    }
                    _ if matches!(key.as_str(), "data" | "arguments" | "spec") => {}
                    _ => rfc3339_times(field),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(rfc3339_times),
        _ => {}
    }
}

async fn health(State(web): State<Web>) -> ApiResult {
    let counts = web.store.count_by_state().await?;
    let counts: serde_json::Map<String, serde_json::Value> = counts
        .into_iter()
        .map(|(state, n)| (state.as_str().to_owned(), json!(n)))
        .collect();
    ok(&json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "read_only": web.read_only,
        "tasks": counts,
    }))
}

async fn openapi() -> ApiResult {
    ok(&document())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkersQuery {
    limit: Option<u64>,
}

async fn workers(
    State(web): State<Web>,
    params: Result<axum::extract::Query<WorkersQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let limit = params.limit.unwrap_or(50).clamp(1, 500);
    ok(&json!({"workers": web.store.workers(limit).await?}))
}

/// The query string, or 400 saying what is wrong with it.
fn query<T>(
    query: Result<axum::extract::Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T, ApiError> {
    query
        .map(|axum::extract::Query(q)| q)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}

/// An id in a path: a positive integer.
fn parse_id(text: &str) -> Result<i64, ApiError> {
    match text.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(ApiError::bad_request(format!("{text:?} is not an id"))),
    }
}

/// A JSON body, or 400/422 saying what is wrong with it; an empty body is `T::default()` where
/// `empty` allows it.
fn body<T: serde::de::DeserializeOwned + Default>(
    bytes: &[u8],
    empty: bool,
) -> Result<T, ApiError> {
    if empty && bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            ApiError::bad_request(format!("the body is not JSON: {e}"))
        } else {
            ApiError::unprocessable(format!("the body does not fit: {e}"))
        }
    })
}
