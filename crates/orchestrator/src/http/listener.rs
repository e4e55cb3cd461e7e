//! The listener of `serve`'s HTTP endpoint: its own accept loop, and what it bounds before anyone
//! is authenticated (connections, read deadlines, unauthenticated bodies, unverified webhook
//! bodies). The parent module holds the routes, and its documentation the rules.

use super::*;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a client has to send a request's headers, from the moment the server starts reading
/// them.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send a request's whole body once its headers are in. GitHub's webhook
/// deliveries (at most 25 MB) arrive well within it.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest body read for a request with the bearer token or a page's session: axum's default
/// limit, which the routes have always had.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// The largest body read for a request without the token or a session, on a route that may
/// take one (the login form): enough for any form the pages send.
pub const MAX_UNAUTHENTICATED_BODY_BYTES: usize = 64 * 1024;
/// The largest webhook delivery: GitHub caps payloads at 25 MB.
pub const MAX_WEBHOOK_BYTES: usize = 25 * 1024 * 1024;
/// Connections served at once unless `[http] max_connections` says otherwise: far more than a
/// dashboard, a few scripts and GitHub need, far fewer than would exhaust file descriptors or
/// memory (each may hold at most [`MAX_BODY_BYTES`] once authenticated).
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Bytes of unauthenticated bodies held at once, across all requests: 64 login forms of the
/// largest size.
pub const DEFAULT_UNAUTHENTICATED_BYTES: usize = 64 * MAX_UNAUTHENTICATED_BODY_BYTES;
/// Bytes of webhook bodies held before their signature is known, across all deliveries: two of
/// GitHub's largest at once, or many ordinary ones (a few KB each).
pub const DEFAULT_UNVERIFIED_WEBHOOK_BYTES: usize = 64 * 1024 * 1024;
/// The route of GitHub's deliveries, the one route that takes bodies up to [`MAX_WEBHOOK_BYTES`].
pub(super) const WEBHOOK_PATH: &str = "/webhooks/github";
/// How long the accept loop waits after a failed accept (out of file descriptors, say) before it
/// tries again, instead of spinning.
pub(super) const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// The whole answer to a connection over [`Limits::max_connections`], written without reading
/// anything from it.
pub(super) const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 50\r\n\r\n{\"error\": \"too many connections; try again later\"}";

/// The listener's read deadlines; [`HEADER_READ_TIMEOUT`] and [`BODY_READ_TIMEOUT`] unless a test
/// wants shorter ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadTimeouts {
    pub headers: Duration,
    pub body: Duration,
}

impl Default for ReadTimeouts {
    fn default() -> Self {
        ReadTimeouts {
            headers: HEADER_READ_TIMEOUT,
            body: BODY_READ_TIMEOUT,
        }
    }
}

/// What clients may make the listener hold: connections, and bytes of bodies nobody has
/// authenticated yet. The named defaults unless the config (`max_connections`) or a test says
/// otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub timeouts: ReadTimeouts,
    /// Connections served at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Bytes of bodies without the token or a session held at once, across all requests.
    pub unauthenticated_bytes: usize,
    /// Bytes of webhook bodies held before their signature is checked, across all deliveries.
    pub unverified_webhook_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeouts: ReadTimeouts::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            unauthenticated_bytes: DEFAULT_UNAUTHENTICATED_BYTES,
            unverified_webhook_bytes: DEFAULT_UNVERIFIED_WEBHOOK_BYTES,
        }
    }
}

impl Limits {
    /// Refuses limits that would refuse everything.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 {
            return Err("http.max_connections must be at least 1".to_owned());
        }
        Ok(())
    }
}

/// Serves `app` on `listener` until `stop`, then lets each connection finish the request it is
/// answering and waits for them all.
///
/// hyper's HTTP/1 connection enforces the header deadline (it closes a connection whose head has
/// not arrived whole in time, without an answer: the request is not known yet); the body deadline
/// and the bounds on bodies are a layer [`router`] puts around every route, which decides how much
/// of a body may be read before anything else looks at the request. A connection over
/// `limits.max_connections` is answered 503 and closed before anything is read from it: it costs
/// one accept and one write, and holds no task or buffer.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, stop: CancellationToken) {
    let connections = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // The send buffer of a fresh connection is empty, so the answer goes out whole without
            // waiting; if it does not, the client only misses the explanation.
            let _ = stream.try_write(TOO_MANY_CONNECTIONS);
            tracing::debug!("an HTTP connection over the limit was refused");
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let stop = stop.clone();
        connections.spawn(async move {
            // Held until the connection ends.
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.timeouts.headers);
            let connection =
                builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                // A client that went away or was cut off: worth a line when debugging, no more.
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    connections.close();
    connections.wait().await;
}

/// What the body layer needs to decide, before reading a body, how much of it may be read.
pub(super) struct BodyGate {
    token: Arc<str>,
    sessions: orchestrator_web::Sessions,
    /// The webhook secret, when webhooks are configured.
    secret: Option<Arc<[u8]>>,
    deadline: Duration,
    /// Bytes of unauthenticated bodies that may still be held.
    unauthenticated: Arc<Semaphore>,
    /// Bytes of unverified webhook bodies that may still be held.
    webhooks: Arc<Semaphore>,
}

impl BodyGate {
    pub(super) fn new(state: &HttpState) -> BodyGate {
        let limits = &state.limits;
        BodyGate {
            token: state.token.clone(),
            sessions: state.sessions.clone(),
            secret: state.webhooks.as_ref().and_then(|h| h.secret.clone()),
            deadline: limits.timeouts.body,
            unauthenticated: Arc::new(Semaphore::new(limits.unauthenticated_bytes)),
            webhooks: Arc::new(Semaphore::new(limits.unverified_webhook_bytes)),
        }
    }
}

/// The routes that need the bearer token (or, for reading, a page's session) whatever the
/// request: the API, old and versioned, and the metrics.
pub(super) fn needs_token(path: &str) -> bool {
    path == "/metrics" || path == "/api" || path.starts_with("/api/")
}

/// Takes `bytes` out of `budget` without waiting; `None` when it does not hold that many now.
pub(super) fn reserve(budget: &Arc<Semaphore>, bytes: usize) -> Option<OwnedSemaphorePermit> {
    let bytes = u32::try_from(bytes).ok()?;
    budget.clone().try_acquire_many_owned(bytes).ok()
}

/// `answer` with `Connection: close`: the rest of the request's body may still be on its way, and
/// the connection cannot carry another request after it.
pub(super) fn closing(mut answer: Response) -> Response {
    answer.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    answer
}

/// 503 for a request whose body the daemon has no room for now.
pub(super) fn busy(what: &str) -> Response {
    let mut answer = error(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("too many {what} in flight; try again later"),
    );
    answer.headers_mut().insert(
        header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    closing(answer)
}

pub(super) fn too_large(max: usize) -> Response {
    closing(error(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the request body is larger than {max} bytes"),
    ))
}

pub(super) fn too_slow(deadline: Duration) -> Response {
    closing(error(
        StatusCode::REQUEST_TIMEOUT,
        &format!(
            "the request body did not arrive within {} seconds",
            deadline.as_secs_f64()
        ),
    ))
}

/// Decides how much of the body may be read, reads it within the deadline, and hands the request
/// on with it:
///
/// - the webhook route: see [`webhook_body`];
/// - with the bearer token or a page's session: up to [`MAX_BODY_BYTES`];
/// - an API route without either: not read at all; the route refuses the request (401) on its
///   headers, so whatever a stranger sends is never held;
/// - any other route without either (the login form): up to [`MAX_UNAUTHENTICATED_BODY_BYTES`],
///   taken out of the shared budget for unauthenticated bodies first (503 when it is spent).
///
/// 408 and a closed connection when a body does not arrive in time, 413 as JSON when it is too
/// large.
pub(super) async fn read_body(
    State(gate): State<Arc<BodyGate>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    if parts.uri.path() == WEBHOOK_PATH {
        return webhook_body(&gate, parts, body, next).await;
    }
    let known = orchestrator_web::authorized(&parts.headers, &gate.token)
        || gate.sessions.csrf_of(&parts.headers).is_some();
    if known {
        return read_whole(parts, body, MAX_BODY_BYTES, gate.deadline, next).await;
    }
    let empty = axum::body::HttpBody::is_end_stream(&body);
    if needs_token(parts.uri.path()) {
        let answer = next.run(Request::from_parts(parts, Body::empty())).await;
        return if empty { answer } else { closing(answer) };
    }
    // The size the headers promise (Content-Length), or the most that may come (chunked).
    let expected = axum::body::HttpBody::size_hint(&body).exact();
    let max = MAX_UNAUTHENTICATED_BODY_BYTES;
    if expected.is_some_and(|n| n > max as u64) {
        return too_large(max);
    }
    let wanted = expected.map_or(max, |n| n as usize);
    let Some(_held) = reserve(&gate.unauthenticated, wanted) else {
        return busy("unauthenticated request bodies");
    };
    read_whole(parts, body, max, gate.deadline, next).await
}

/// Reads the whole body, at most `max` bytes within `deadline`, and runs the route with it.
pub(super) async fn read_whole(
    parts: axum::http::request::Parts,
    body: Body,
    max: usize,
    deadline: Duration,
    next: Next,
) -> Response {
    let limited = http_body_util::Limited::new(body, max);
    match tokio::time::timeout(deadline, limited.collect()).await {
        Ok(Ok(collected)) => {
            next.run(Request::from_parts(parts, Body::from(collected.to_bytes())))
                .await
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => too_large(max),
        Ok(Err(e)) => error(
            StatusCode::BAD_REQUEST,
            &format!("the request body could not be read: {e}"),
        ),
        Err(_) => too_slow(deadline),
    }
}

/// Why a webhook body was not read whole.
pub(super) enum Unread {
    TooLarge,
    Busy,
    Broken(axum::Error),
}

/// A delivery's body, verified as it streams in. Its signature header is checked first (401 at
/// once when missing or malformed, before a byte of the body is read); a `Content-Length` over
/// [`MAX_WEBHOOK_BYTES`] is 413 at once. The bytes held until the signature is known come out of
/// the shared budget for unverified deliveries: all of a `Content-Length` up front, or chunk by
/// chunk for a chunked body, and 503 when the budget cannot cover them. Each chunk is fed to the
/// HMAC as it arrives; a wrong signature is 401 once the body is in, and the route gets only a
/// body whose signature matched (it checks again, as it always has).
///
/// Without a configured secret the route answers 404 on the headers, and the body is not read.
pub(super) async fn webhook_body(
    gate: &BodyGate,
    parts: axum::http::request::Parts,
    mut body: Body,
    next: Next,
) -> Response {
    let Some(secret) = &gate.secret else {
        return closing(next.run(Request::from_parts(parts, Body::empty())).await);
    };
    let header = parts
        .headers
        .get("x-hub-signature-256")
        .and_then(|v| v.to_str().ok());
    let mut check = match orchestrator_github::SignatureCheck::new(secret, header) {
        Ok(check) => check,
        Err(e) => {
            return closing(error(
                StatusCode::UNAUTHORIZED,
                &format!("signature refused: {e}"),
            ));
        }
    };
    let expected = axum::body::HttpBody::size_hint(&body).exact();
    if expected.is_some_and(|n| n > MAX_WEBHOOK_BYTES as u64) {
        return too_large(MAX_WEBHOOK_BYTES);
    }
    let mut held: Vec<OwnedSemaphorePermit> = Vec::new();
    if let Some(n) = expected {
        match reserve(&gate.webhooks, n as usize) {
            Some(permit) => held.push(permit),
            None => return busy("unverified webhook deliveries"),
        }
    }
    let read = async {
        // Exactly the promised size when it is known (and already reserved); a chunked body
        // grows, and each chunk is reserved before it is kept (while it grows, its buffer's
        // capacity may reach twice what it holds: the budget counts bytes, not capacity).
        let mut bytes = Vec::with_capacity(expected.map_or(0, |n| n as usize));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(Unread::Broken)?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if bytes.len() + data.len() > MAX_WEBHOOK_BYTES {
                return Err(Unread::TooLarge);
            }
            if expected.is_none() {
                held.push(reserve(&gate.webhooks, data.len()).ok_or(Unread::Busy)?);
            }
            check.update(&data);
            bytes.extend_from_slice(&data);
        }
        Ok(bytes)
    };
    let bytes = match tokio::time::timeout(gate.deadline, read).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(Unread::TooLarge)) => return too_large(MAX_WEBHOOK_BYTES),
        Ok(Err(Unread::Busy)) => return busy("unverified webhook deliveries"),
        Ok(Err(Unread::Broken(e))) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("the request body could not be read: {e}"),
            );
        }
        Err(_) => return too_slow(gate.deadline),
    };
    if let Err(e) = check.finish() {
        return error(StatusCode::UNAUTHORIZED, &format!("signature refused: {e}"));
    }
    let answer = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    drop(held);
    answer
}
