//! The crate's error type: what it means when the tool machinery itself breaks.
//!
//! A tool that refuses its input (a path outside the workspace, an edit whose text is not found, a patch
//! whose hunk does not apply) is not an error here: that is a [`crate::ToolResult`] with `is_error`
//! set, which the model reads and corrects. [`Error`] is reserved for the cases where the machinery
//! could not do its job at all (the spill directory is not writable, a worker thread panicked).

use std::path::PathBuf;

/// The machinery of the tool layer broke.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An IO error outside the workspace (the home directory, the spill store). Retryable once the
    /// cause (a full disk, a permission) is fixed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The workspace given to a context does not exist or is not a directory. Not retryable.
    #[error("workspace {path} is not a usable directory: {reason}")]
    Workspace { path: PathBuf, reason: String },
    /// A blocking task panicked or was cancelled. Not retryable: it is a bug.
    #[error("a tool task failed to complete: {0}")]
    Join(String),
    /// A value could not be serialized (a bug in a tool's output). Not retryable.
    #[error("serialization failed: {0}")]
    Json(#[from] serde_json::Error),
    /// The MCP transport failed (the client went away, stdio broke). Retryable by restarting.
    #[error("MCP server failed: {0}")]
    Mcp(String),
    /// A tool name was registered twice. Not retryable: it is a programming error.
    #[error("tool {0} is registered twice")]
    Duplicate(String),
}

/// The crate's result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
