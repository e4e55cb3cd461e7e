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
    #[error("{}", unknown_base(base, cause))]
    UnknownBase { base: String, cause: git2::Error },
    /// The index holds unmerged entries (a merge or rebase stopped half-way), so the worktree has no
    /// single tree to record. Retryable once the conflict is resolved.
    #[error("the index has unmerged entries; resolve the conflict before recording")]
    Unmerged,
    /// The patch bytes are not a git patch libgit2 can parse. Not retryable: the stored patch is
    /// corrupt or was never a patch.
    #[error("the patch cannot be parsed: {}", .0.message())]
    MalformedPatch(git2::Error),
    /// Any other git operation failed (reading objects, hashing files, writing to the object
    /// database). Retryable once the cause (a full disk, a permission, a lock) is fixed.
    #[error("git: {}", .0.message())]
    Git(git2::Error),
}

/// What an unknown base means, with the step that fixes it: a branch with no commit yet (a
/// repository just made with `git init`) has nothing to compare with.
fn unknown_base(base: &str, cause: &git2::Error) -> String {
    if cause.class() == git2::ErrorClass::Reference
        && matches!(
            cause.code(),
            git2::ErrorCode::NotFound | git2::ErrorCode::UnbornBranch
        )
        && base == "HEAD"
    {
        return format!(
            "the repository has no commit yet, so HEAD names none to record against ({}): commit once (`git commit --allow-empty -m init`), or name another base",
            cause.message()
        );
    }
    format!(
        "base {base:?} does not name a commit in this repository ({}); fetch it, or name another base",
        cause.message()
    )
}

// libgit2's errors are said by their message alone: their Display appends libgit2's internal class
// and code ("class=Reference (4); code=NotFound (-3)"), which tells a person nothing, so they are
// kept as fields rather than as sources a report would print.
impl From<git2::Error> for Error {
    fn from(error: git2::Error) -> Self {
        Error::Git(error)
    }
}

/// The crate's result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
