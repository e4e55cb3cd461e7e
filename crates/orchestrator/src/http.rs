//! The HTTP endpoint of `serve`: `/healthz` for liveness checks and `/metrics` for Prometheus.
//!
//! Every route but `/healthz` needs the bearer token (generated into the home directory at first
//! start), because metrics reveal what the daemon is doing; the listener binds 127.0.0.1 by default.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use orchestrator_store::Store;
use orchestrator_worker::Metrics;
use std::sync::Arc;

#[derive(Clone)]
pub struct HttpState {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub token: Arc<str>,
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn healthz(State(state): State<HttpState>) -> Response {
    axum::Json(serde_json::json!({
        "status": "ok",
        "backend": state.store.backend().as_str(),
    }))
    .into_response()
}

async fn metrics(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if !authorized(&headers, &state.token) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "missing or wrong bearer token; it is in the api-token file of the home directory\n",
        )
            .into_response();
    }
    match state.store.count_by_state().await {
        Ok(states) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            state.metrics.render(&states),
        )
            .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store unavailable: {e}\n"),
        )
            .into_response(),
    }
}

/// Compares the presented token with the expected one in constant time.
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(presented) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (presented.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
