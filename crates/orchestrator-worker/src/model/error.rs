//! Why a model call failed, and the words that tell a failure about the request from one that may
//! pass on its own.

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
    /// A 200 with nothing in it. Not retryable: it is how llama-cpp-python answers a prompt that
    /// does not fit its context window, and it answers the same request the same way.
    #[error(
        "the model server answered 200 with an empty body; llama-cpp-python does this when the \
         prompt does not fit its context window{0}"
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

    /// One word for the kind of failure, for retry events and task errors.
    pub fn cause(&self) -> &'static str {
        match self {
            ModelError::MissingKey { .. } | ModelError::Config(_) => "configuration",
            ModelError::Unauthorized { .. } => "unauthorized",
            ModelError::UnknownModel { .. } => "unknown_model",
            ModelError::BadRequest { .. } => "invalid_request",
            ModelError::ContextOverflow { .. } | ModelError::EmptyReply(_) => "context_overflow",
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
/// llama-cpp-python's "exceed context window", vLLM's "maximum context length".
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
