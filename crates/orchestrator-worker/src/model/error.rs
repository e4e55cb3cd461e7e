//! Why a model call failed, and the words that tell a failure about the request from one that may
//! pass on its own.

use super::*;

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The environment variable that should hold the API key is unset or empty. Not retryable.
    #[error("the API key variable {var} is not set or is empty")]
    MissingKey { var: String },
    /// The provider refused the key (401 or 403). Not retryable: the key must be fixed first.
    #[error("the model provider refused the request (HTTP {status}): {message}")]
    Unauthorized { status: u16, message: String },
    /// The provider does not know the model, or the base URL is wrong (404). Not retryable.
    #[error("unknown model {model:?}: {message}")]
    UnknownModel { model: String, message: String },
    /// The provider rejected the request itself (400, 422 and other 4xx, or a 5xx whose message is
    /// about the request), for example a malformed tool schema. Not retryable.
    #[error("the model provider rejected the request (HTTP {status}): {message}")]
    BadRequest { status: u16, message: String },
    /// The conversation does not fit the model's context window. Not retryable: the same request
    /// overflows again.
    #[error("the conversation does not fit the model's context window{window}: {message}")]
    ContextOverflow { message: String, window: String },
    /// A 200 with nothing in it, to an unstreamed request (an empty streamed answer is asked again
    /// unstreamed first). Not retryable: the server answers the same request the same way. Not an
    /// overflow either: nothing in it says so, and llama-cpp-python answers an unstreamed prompt
    /// over its window with a 400 that does.
    #[error(
        "the model server answered 200 with an empty body{0}; it said nothing about why, so its \
         own log may (a model that failed to load, a chat template that broke)"
    )]
    EmptyReply(String),
    /// Too many requests (429). Retryable, after the provider's `Retry-After` when it gives one.
    #[error("rate limited by the model provider: {message}")]
    RateLimited { message: String },
    /// The provider failed (5xx). Retryable.
    #[error("the model provider failed (HTTP {status}): {message}")]
    Server { status: u16, message: String },
    /// The server could not be reached or dropped the connection before answering. Retryable.
    #[error("cannot reach the model server: {0}")]
    Connect(String),
    /// The server was silent for longer than the idle timeout, or answered 408. Retryable.
    #[error("the model request timed out: {0}")]
    Timeout(String),
    /// The reply stream ended or broke before the reply was complete. Retryable.
    #[error("the reply stream broke off: {0}")]
    BrokenStream(String),
    /// The server answered with something that is not a Chat Completions reply. Not retryable:
    /// the same server will most likely answer the same way again.
    #[error("the model server sent an invalid response: {0}")]
    InvalidResponse(String),
    /// The model spec or client configuration cannot work. Not retryable.
    #[error("invalid model client configuration: {0}")]
    Config(String),
}

impl ModelError {
    /// Whether sending the same request again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::RateLimited { .. }
            | ModelError::Server { .. }
            | ModelError::Connect(_)
            | ModelError::Timeout(_)
            | ModelError::BrokenStream(_) => true,
            ModelError::MissingKey { .. }
            | ModelError::Unauthorized { .. }
            | ModelError::UnknownModel { .. }
            | ModelError::BadRequest { .. }
            | ModelError::ContextOverflow { .. }
            | ModelError::EmptyReply(_)
            | ModelError::InvalidResponse(_)
            | ModelError::Config(_) => false,
        }
    }

    /// Whether the server pushed back on its load rather than failed the request: a 429, or a
    /// 503 or 529 (overloaded). A paced server makes every task wait for it together.
    pub fn is_pushback(&self) -> bool {
        matches!(
            self,
            ModelError::RateLimited { .. }
                | ModelError::Server {
                    status: 503 | 529,
                    ..
                }
        )
    }

    /// One word for the kind of failure, for retry events and task errors.
    pub fn cause(&self) -> &'static str {
        match self {
            ModelError::MissingKey { .. } | ModelError::Config(_) => "configuration",
            ModelError::Unauthorized { .. } => "unauthorized",
            ModelError::UnknownModel { .. } => "unknown_model",
            ModelError::BadRequest { .. } => "invalid_request",
            ModelError::ContextOverflow { .. } => "context_overflow",
            ModelError::EmptyReply(_) => "empty_reply",
            ModelError::RateLimited { .. } => "rate_limited",
            ModelError::Server { .. } => "server_error",
            ModelError::Connect(_) => "transport",
            ModelError::Timeout(_) => "timeout",
            ModelError::BrokenStream(_) => "broken_stream",
            ModelError::InvalidResponse(_) => "invalid_response",
        }
    }
}

/// Words servers use for a prompt that does not fit: OpenAI's `context_length_exceeded`,
/// llama.cpp's `exceed_context_size_error` and "exceeds the available context size",
/// llama-cpp-python's "Requested tokens (N) exceed context window of M", vLLM's "maximum context
/// length".
pub(super) fn is_overflow(code: &str, message: &str) -> bool {
    let text = format!("{code} {message}").to_ascii_lowercase();
    [
        "context_length_exceeded",
        "exceed_context_size",
        "context length",
        "context size",
        "context window",
        "maximum context",
        "prompt is too long",
        "too many tokens",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// Words that show a 5xx is the server refusing this request rather than failing by itself:
/// llama.cpp's JSON parse errors on a history it cannot read, validation and type errors.
pub(super) fn is_about_the_request(code: &str, message: &str) -> bool {
    let text = format!("{code} {message}").to_ascii_lowercase();
    [
        "invalid_request",
        "invalid request",
        "parse error",
        "parse_error",
        "failed to parse",
        "validation error",
        "is not valid",
        "invalid value",
        // Python servers (llama-cpp-python) answer a request they cannot take with the exception.
        "typeerror",
        "keyerror",
        "attributeerror",
        "valueerror",
        "nonetype",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// A failed attempt, with the wait the server asked for.
pub(super) struct Failure {
    pub(super) error: ModelError,
    pub(super) retry_after: Option<Duration>,
}

impl From<ModelError> for Failure {
    fn from(error: ModelError) -> Self {
        Failure {
            error,
            retry_after: None,
        }
    }
}

/// The wait before the retry that follows failed attempt `attempt` (1-based), for a random draw
/// in [0, 1). The server's `Retry-After` wins over our own backoff, since it knows when it will
/// take requests again, but neither may exceed `max_backoff`.
pub(super) fn retry_delay(
    config: &ClientConfig,
    attempt: u32,
    retry_after: Option<Duration>,
    draw: f64,
) -> Duration {
    if let Some(wait) = retry_after {
        return wait.min(config.max_backoff);
    }
    let backoff = Backoff {
        base: config.initial_backoff,
        cap: config.max_backoff,
        jitter: BACKOFF_JITTER,
    };
    let millis = backoff.delay_with(i64::from(attempt), draw).max(0) as u64;
    // Jitter may push past the cap; the cap is a promise.
    Duration::from_millis(millis).min(config.max_backoff)
}

/// The wait a server asked for: `retry-after-ms` (OpenAI, Azure) or `Retry-After` in seconds. The
/// HTTP-date form of `Retry-After` is ignored; our own backoff applies then.
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let value = headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    number(RETRY_AFTER.as_str()).map(Duration::from_secs_f64)
}

/// A provider's error type or code, lower-cased, for telling kinds of errors apart.
pub(super) fn error_code(body: &Value) -> Option<String> {
    let error = body.get("error").unwrap_or(body);
    let text: Vec<&str> = ["code", "type"]
        .iter()
        .filter_map(|key| error.get(*key).and_then(Value::as_str))
        .collect();
    (!text.is_empty()).then(|| text.join(" ").to_ascii_lowercase())
}

pub(super) async fn read_error_body(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            // The status already says what went wrong; a body we cannot read adds nothing.
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(MAX_ERROR_BODY_BYTES);
    String::from_utf8_lossy(&body).into_owned()
}

pub(super) fn send_error(error: &reqwest::Error) -> Failure {
    let error = if error.is_timeout() && !error.is_connect() {
        ModelError::Timeout(error_chain(error))
    } else {
        ModelError::Connect(error_chain(error))
    };
    Failure::from(error)
}

/// An error with its causes, since reqwest's own message ("error sending request") hides the part
/// that helps (connection refused, certificate invalid, ...).
pub(super) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

pub(super) fn shorten(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(MAX_PROVIDER_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}
