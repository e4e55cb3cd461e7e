//! What can go wrong in notifying, and whether trying again can help.

/// A notification failure. A sink that refuses one message is an `Err` of its send, which the
/// outbox records on the row and tries again if [`Error::retryable`] says so.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `[notify]` config cannot be followed. Not retryable: fix the config.
    #[error("{0}")]
    Config(String),
    /// No sink has that name. Not retryable.
    #[error("no sink named {name:?} in [notify.sinks] (the sinks are: {})", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
    UnknownSink { name: String, known: Vec<String> },
    /// A variable a sink reads is not set. Retryable: a daemon started with it set sends.
    #[error("notify.sinks.{sink}: the environment variable {var} is not set")]
    MissingEnv { sink: String, var: String },
    /// The sink could not be reached, or answered with an error. Retryable when `retryable`: a
    /// receiver that is down or overloaded comes back; one that refuses the message (a revoked
    /// Slack hook, a mailbox that does not exist) does not.
    #[error("{sink}: {message}")]
    Send {
        sink: String,
        message: String,
        retryable: bool,
    },
    /// The store failed. Retryable as the store's own error says.
    #[error(transparent)]
    Store(#[from] orchestrator_store::Error),
}

impl Error {
    /// Whether a later try of the same message may succeed.
    pub fn retryable(&self) -> bool {
        match self {
            Error::Config(_) | Error::UnknownSink { .. } => false,
            Error::MissingEnv { .. } | Error::Store(_) => true,
            Error::Send { retryable, .. } => *retryable,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
