//! The crate's error type: what it means when the GitHub-side machinery itself breaks.
//!
//! A patch that does not apply to its base is not an error here: that is a
//! [`crate::Preflight`] verdict with `applies == false`. A refused webhook signature is a
//! [`crate::SignatureError`], a verdict about one delivery. [`Error`] is reserved for the cases where
//! the work could not be done at all (the repository cannot be opened, the base is unknown, the
//! object database refuses a write).

use std::path::PathBuf;

/// The machinery of the GitHub layer broke.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The directory is not a git repository, or it is a bare one with no worktree to record. Not
    /// retryable: the caller pointed at the wrong place.
    #[error("{path} is not a git worktree: {reason}")]
    NotAWorktree { path: PathBuf, reason: String },
    /// The base does not name a commit in the repository. Not retryable until the commit is fetched.
    #[error("base {base:?} does not name a commit: {source}")]
    UnknownBase {
        base: String,
        #[source]
        source: git2::Error,
    },
    /// The index holds unmerged entries (a merge or rebase stopped half-way), so the worktree has no
    /// single tree to record. Retryable once the conflict is resolved.
    #[error("the index has unmerged entries; resolve the conflict before recording")]
    Unmerged,
    /// The patch bytes are not a git patch libgit2 can parse. Not retryable: the stored patch is
    /// corrupt or was never a patch.
    #[error("the patch cannot be parsed: {0}")]
    MalformedPatch(#[source] git2::Error),
    /// Any other git operation failed (reading objects, hashing files, writing to the object
    /// database). Retryable once the cause (a full disk, a permission, a lock) is fixed.
    #[error("git: {0}")]
    Git(#[from] git2::Error),
}

/// The crate's result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
