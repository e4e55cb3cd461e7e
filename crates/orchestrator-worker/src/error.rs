//! Failures of the worker machinery. A failing gate is not one of them: it is a verdict.

/// The worker could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed. Retryable when the store says so (a lost connection).
    #[error(transparent)]
    Store(#[from] orchestrator_store::Error),
    /// The configuration cannot work. Not retryable.
    #[error("invalid worker configuration: {0}")]
    Config(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
