//! Errors of the API: JSON with a stable code a client can branch on, and a message for people.
//!
//! `{"error": {"code": "not_found", "message": "task 7 not found"}}`. The codes are part of the
//! contract (listed in the OpenAPI document); the messages may change.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The codes, with their statuses.
pub const CODES: [(&str, u16); 12] = [
    ("bad_request", 400),
    ("unauthorized", 401),
    ("read_only", 403),
    ("cross_origin", 403),
    ("not_found", 404),
    ("no_route", 404),
    ("method_not_allowed", 405),
    ("conflict", 409),
    ("range_not_satisfiable", 416),
    ("unprocessable", 422),
    ("unavailable", 503),
    ("internal", 500),
];

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn unprocessable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unprocessable", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }
}

impl From<orchestrator_store::Error> for ApiError {
    fn from(e: orchestrator_store::Error) -> ApiError {
        use orchestrator_store::Error as S;
        let (status, code) = match &e {
            S::TaskNotFound(_)
            | S::ArtifactNotFound(_)
            | S::GateNotFound { .. }
            | S::ShellJobNotFound { .. }
            | S::TerminalNotFound { .. }
            | S::BackgroundJobNotFound { .. }
            | S::AutomationNotFound(_)
            | S::ApprovalNotFound(_)
            | S::AttemptNotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            S::ApprovalDecided { .. }
            | S::WrongState { .. }
            | S::StaleLease { .. }
            | S::DuplicateAutomation(_)
            | S::DeliveryNotClaimed { .. } => (StatusCode::CONFLICT, "conflict"),
            S::InvalidAnswer(_) | S::Invalid(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable")
            }
            S::BadUrl { .. }
            | S::Unreachable { .. }
            | S::ConnectRefused { .. }
            | S::Migration(_)
            | S::Database(_)
            | S::DiskFull(_)
            | S::Query(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            // A row the store cannot read back is a bug or damage, not an outage.
            S::Corrupt { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<orchestrator_scheduler::Error> for ApiError {
    fn from(e: orchestrator_scheduler::Error) -> ApiError {
        match e {
            orchestrator_scheduler::Error::Store(e) => e.into(),
            other => ApiError::unprocessable(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = axum::Json(json!({"error": {"code": self.code, "message": self.message}}));
        if self.status == StatusCode::UNAUTHORIZED {
            (self.status, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
        } else {
            (self.status, body).into_response()
        }
    }
}
