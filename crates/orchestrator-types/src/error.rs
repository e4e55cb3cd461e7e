//! Validation errors of the vocabulary: what a user typed that cannot become a task.

/// A value that does not fit the vocabulary. None of these are retryable: the input must change.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// A field is missing, empty or out of range. Not retryable.
    #[error("invalid {field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    /// A word that should name a state, verdict or kind does not. Not retryable.
    #[error("unknown {what} {value:?}; expected one of: {expected}")]
    Unknown {
        what: &'static str,
        value: String,
        expected: &'static str,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Error::Invalid {
            field,
            message: message.into(),
        }
    }
}
