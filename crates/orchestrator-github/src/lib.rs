//! orchestrator-github: GitHub's API and the git work of PR attempts, without the store.
//!
//! - [`client`]: the REST client ([`GitHub`]): issue and PR context, marked (sticky) comments,
//!   closing issues, permissions, and the reads the poller makes; [`models`]: what it reads and
//!   writes (issue references as people write them, our small models of GitHub's JSON).
//! - [`patch`]: PR attempt patches. [`record`] captures a worktree's staged, unstaged and untracked
//!   changes against a base commit as a byte-exact git patch; [`preflight`] checks that a patch
//!   applies to a base without touching any worktree or index.
//! - [`pull`]: opening a pull request from an attempt through the Git Data API: [`prepare_tree`]
//!   makes the attempt's tree locally, [`GitHub::open_pull`] makes GitHub hold the same objects
//!   and opens the pull request, found again (not opened twice) on a retry.
//! - [`webhook`]: [`verify_signature`] checks a delivery's `X-Hub-Signature-256` in constant time.
//! - [`text`]: [`sanitize_untrusted`] strips hidden HTML comments and Markdown link reference
//!   definitions from issue and comment text before a model reads it, and shows invisible
//!   characters as markers (`<U+200B>`); [`sanitize_verbatim`] does only the latter, for diffs.
//!
//! Architecture Invariant: this crate knows no store and no tools. It takes paths, bytes and
//! strings and returns values; recording events, storing artifacts and deciding what to do with a
//! verdict belong to the callers.

mod apply;
pub mod checks;
pub mod client;
pub mod error;
pub mod models;
pub mod patch;
pub mod pull;
pub mod push;
pub mod reviews;
pub mod text;
pub mod webhook;

pub use checks::{Annotation, CheckRun, CommitStatus};
pub use client::{ApiError, ApiResult, ClientConfig, DEFAULT_API_URL, GitHub};
pub use error::{Error, Result};
pub use models::{
    Branch, BranchRepo, Comment, CommentAction, Issue, IssueEvent, IssueRef, Label, PullFile,
    PullRequest, RepoRef, User,
};
pub use patch::{ChangedFile, FileStatus, Preflight, RecordedPatch, preflight, record};
pub use pull::{
    CommitIdentity, LegacyMarker, OpenedPull, PreparedTree, PullOutcome, PullSpec, TreeChange,
    prepare_tree,
};
pub use push::{PushSpec, Pushed};
pub use reviews::{Review, ReviewComment};
pub use text::{sanitize_line, sanitize_untrusted, sanitize_verbatim};
pub use webhook::{SignatureCheck, SignatureError, sign, verify_signature};

/// What the client's calls return: their bodies boxed here, so they are compiled once, in this
/// crate, rather than again in each crate that awaits them (the same as
/// `orchestrator_types::BoxFuture`, which says why; this crate does not depend on that one).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
