//! A gate's outcome: the verdict, why it failed, what the test runner said, and on which tree.

use crate::ArtifactId;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How a gate ended. Decided by the exit status and by who stopped it, never by reading the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Exit status 0.
    Passed,
    /// A non-zero exit status or a death by signal that nobody asked for.
    Failed,
    /// Killed, with its whole process group, when its timeout ran out.
    TimedOut,
    /// The gate could not be run at all (missing workspace, spawn failure). Retryable.
    Error,
    /// Killed because the task was canceled or the daemon shut down.
    Canceled,
}

impl Verdict {
    pub const ALL: [Verdict; 5] = [
        Verdict::Passed,
        Verdict::Failed,
        Verdict::TimedOut,
        Verdict::Error,
        Verdict::Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Failed => "failed",
            Verdict::TimedOut => "timed_out",
            Verdict::Error => "error",
            Verdict::Canceled => "canceled",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Verdict {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        Verdict::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| crate::Error::Unknown {
                what: "verdict",
                value: s.to_owned(),
                expected: "passed, failed, timed_out, error, canceled",
            })
    }
}

/// Why a gate that did not pass failed, read from its output by known formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The code did not compile.
    Build,
    /// Tests ran and some failed.
    Test,
    /// A linter or formatter complained.
    Lint,
    /// The machinery failed: missing command, missing workspace, out of resources.
    Infra,
    /// The timeout ran out.
    Timeout,
    /// Nothing in the output was recognised.
    Unknown,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Build => "build",
            FailureKind::Test => "test",
            FailureKind::Lint => "lint",
            FailureKind::Infra => "infra",
            FailureKind::Timeout => "timeout",
            FailureKind::Unknown => "unknown",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FailureKind {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        [
            FailureKind::Build,
            FailureKind::Test,
            FailureKind::Lint,
            FailureKind::Infra,
            FailureKind::Timeout,
            FailureKind::Unknown,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
        .ok_or_else(|| crate::Error::Unknown {
            what: "failure kind",
            value: s.to_owned(),
            expected: "build, test, lint, infra, timeout, unknown",
        })
    }
}

/// Counts a test runner printed, when it printed them in a format we know.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateSummary {
    /// Which format was recognised: `cargo-test`, `nextest`, `pytest`, `go-test`, `jest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<u64>,
    /// Names of failing tests, as many as were kept (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing_tests: Vec<String>,
    /// One human line: "12 passed, 1 failed (cargo-test)" or the last meaningful output line.
    pub text: String,
}

/// The git tree a gate ran on, so a later step can prove a gate passed on exactly this tree.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitTree {
    /// `HEAD`'s commit id, if the workspace is a git repository with a commit.
    pub head: Option<String>,
    /// Whether tracked files differ from `HEAD` or untracked, unignored files exist.
    pub dirty: bool,
    /// SHA-256 of `git diff HEAD --binary` plus the untracked files' names and bytes; `None` when clean.
    pub diff_hash: Option<String>,
}

/// What running one gate produced, before the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateEvidence {
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
    pub exit_code: Option<i32>,
    /// The signal that ended the process, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub duration_ms: i64,
    pub summary: GateSummary,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitTree>,
    /// The untracked files the gate's own run created (`__pycache__/*.pyc`, coverage data), so an
    /// attempt can leave them out unless the agent wrote them too.
    #[serde(default, skip_serializing_if = "Byproducts::is_empty")]
    pub byproducts: Byproducts,
    pub started_at: i64,
    pub finished_at: i64,
}

/// Untracked files a gate's run created: each by its path in the work tree and a digest of its
/// content, so a later change to the file (the agent writing it) is told apart from the gate's copy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Byproducts {
    /// At most a bounded number of files, in path order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<CreatedFile>,
    /// Files created past the bound, which are not listed (and so never left out of an attempt).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: u64,
}

impl Byproducts {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.omitted == 0
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One file in the work tree, by path (relative to the top of the work tree, `/`-separated, as git
/// names it) and the SHA-256 of its kind and bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CreatedFile {
    pub path: String,
    pub sha256: String,
}

/// A gate as the store keeps it: its spec, the attempt it ran in and its evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateRecord {
    pub id: i64,
    pub attempt: i64,
    pub position: i64,
    pub name: String,
    pub command: String,
    pub verdict: Verdict,
    pub failure_kind: Option<FailureKind>,
    pub exit_code: Option<i32>,
    pub duration_ms: i64,
    pub summary: String,
    pub log_artifact: Option<ArtifactId>,
    pub git_head: Option<String>,
    pub git_dirty: Option<bool>,
    pub diff_hash: Option<String>,
    /// The untracked files this run created (see [`GateEvidence::byproducts`]).
    #[serde(default, skip_serializing_if = "Byproducts::is_empty")]
    pub byproducts: Byproducts,
    pub started_at: i64,
    pub finished_at: i64,
}
