//! What can go wrong in the scheduler, and whether trying again can help.

/// A scheduler failure. A slot skipped by a policy is not an error: it is recorded as skipped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cron expression cannot be parsed. Not retryable: fix the expression.
    #[error("invalid schedule {expr:?}: {message}")]
    BadSchedule { expr: String, message: String },
    /// The time zone is not an IANA name this build knows. Not retryable.
    #[error(
        "unknown time zone {zone:?}: use an IANA name such as Europe/Berlin, America/New_York or UTC"
    )]
    UnknownTimeZone { zone: String },
    /// The schedule never fires again (a year in the past, February 30th). Not retryable.
    #[error("schedule {expr:?} has no fire time after {after}")]
    NeverFires { expr: String, after: String },
    /// An automation spec does not validate. Not retryable.
    #[error(transparent)]
    Invalid(#[from] orchestrator_types::Error),
    /// A schedules file cannot be read or parsed. Not retryable until the file changes.
    #[error("{path}: {message}")]
    File { path: String, message: String },
    /// A service was configured with values it cannot run with. Not retryable.
    #[error("invalid scheduler configuration: {0}")]
    Config(String),
    /// The store failed; retryable when the store says so.
    #[error(transparent)]
    Store(#[from] orchestrator_store::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Store(e) if e.is_retryable())
    }
}
