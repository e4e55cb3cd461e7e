//! PR attempts taken from a worktree: the byte-exact patch against a base, the files it touches,
//! and the gates of the task that ran on exactly that tree, kept in the store as one attempt.
//!
//! The agent's `pr_attempt_*` tools and `orchestrator attempt` share this module, so an attempt a
//! person records by hand carries the same evidence as one an agent records.
//!
//! "The gates that ran on this tree" are the task's gates whose recorded git tree (HEAD, dirty,
//! diff hash) equals the worktree's at record time. The tree is read before and after the patch,
//! and an attempt is refused if it moved in between: otherwise the gates could vouch for a tree the
//! patch does not hold.

use orchestrator_types::BoxFuture;
use std::path::{Path, PathBuf};

use orchestrator_github::{ChangedFile, FileStatus, Preflight, RecordedPatch};
use orchestrator_store::{Attempt, NewAttempt, Store};
use orchestrator_types::{Byproducts, GateRecord, GitTree, TaskId, Verdict, format_millis};
use serde_json::{Value, json};

use crate::gate::{KnownByproducts, read_tree};

/// The group an attempt joins when none is named.
pub const DEFAULT_GROUP: &str = "default";
/// The base an attempt is recorded against when none is named.
pub const DEFAULT_BASE: &str = "HEAD";

/// Why an attempt could not be recorded or checked.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    /// The directory is not inside a git worktree. Not retryable.
    #[error("{0} is not inside a git worktree")]
    NotAWorktree(String),
    /// The worktree holds the base exactly, so there is no patch. Not retryable until something
    /// changes.
    #[error(
        "the worktree has no changes against {base}: there is nothing to record (change files first, or name another base)"
    )]
    NoChanges { base: String },
    /// Something wrote to the worktree while it was being recorded. Retryable once it is still.
    #[error(
        "the worktree changed while it was being recorded; record it again once nothing is writing to it"
    )]
    Moved,
    /// The git work failed: an unknown base, an unmerged index, a malformed patch, a read error.
    /// Retryable only when the cause is (a missing commit fetched, a full disk freed).
    #[error(transparent)]
    Git(#[from] orchestrator_github::Error),
    /// The blocking git work did not finish (it panicked). Not retryable.
    #[error("the git work stopped unexpectedly: {0}")]
    Interrupted(String),
    /// The store failed, or refused the attempt (an unknown task or attempt, an empty label).
    /// Retryable when the store error is.
    #[error(transparent)]
    Store(#[from] orchestrator_store::Error),
}

pub type Result<T, E = AttemptError> = std::result::Result<T, E>;

/// A recorded attempt with what it was made of.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub attempt: Attempt,
    /// The files the patch touches, in the patch's order.
    pub files: Vec<ChangedFile>,
    /// The task's gates that ran on exactly the recorded tree, oldest first.
    pub gates: Vec<GateRecord>,
}

/// Records the changes of the worktree at `workspace` (staged, unstaged and untracked, not
/// ignored) against `base` as an attempt of `task` in `group`, with the task's gates that ran on
/// that tree as its evidence. The attempt stores the base as the full commit id it resolved to, so
/// later preflights check against the commit the patch was made from, not wherever `HEAD` moved.
pub fn record_attempt<'a>(
    store: &'a Store,
    task: TaskId,
    workspace: &'a Path,
    base: &'a str,
    group: &'a str,
    label: &'a str,
) -> BoxFuture<'a, Result<Recorded>> {
    Box::pin(record_attempt_unboxed(
        store, task, workspace, base, group, label,
    ))
}

async fn record_attempt_unboxed(
    store: &Store,
    task: TaskId,
    workspace: &Path,
    base: &str,
    group: &str,
    label: &str,
) -> Result<Recorded> {
    // Before the git work: a typo should not cost a diff of the whole worktree.
    for (field, text) in [("group", group), ("label", label), ("base", base)] {
        if text.trim().is_empty() {
            return Err(
                orchestrator_store::Error::from(orchestrator_types::Error::invalid(
                    field,
                    "must not be empty",
                ))
                .into(),
            );
        }
    }
    let top = repository_of(workspace).await?;
    // The task's gates, read first: what they left in the worktree (`__pycache__`, coverage data)
    // is set aside while it still holds the gate's content, so the patch carries the agent's work
    // and the tree matches the gates that ran on it.
    let records = store.gates(task).await?;
    let known = KnownByproducts::of_gates(&records);
    let before = read_tree(&top, &known)
        .await
        .ok_or_else(|| AttemptError::NotAWorktree(workspace.display().to_string()))?;
    let leave_out: Vec<String> = before.set_aside.iter().map(|f| f.path.clone()).collect();
    let recorded = blocking({
        let top = top.clone();
        let base = base.to_owned();
        move || orchestrator_github::record(&top, &base, &leave_out)
    })
    .await?;
    if recorded.patch.is_empty() {
        return Err(AttemptError::NoChanges {
            base: base.to_owned(),
        });
    }
    if read_tree(&top, &known).await.as_ref() != Some(&before) {
        return Err(AttemptError::Moved);
    }
    let gates: Vec<GateRecord> = records
        .into_iter()
        .filter(|g| ran_on(g, &before.tree))
        .collect();
    let RecordedPatch {
        patch,
        base_commit,
        changed_files,
        ..
    } = recorded;
    let left_out = Byproducts {
        files: before.set_aside.clone(),
        omitted: 0,
    };
    let attempt = store
        .record_attempt(&NewAttempt {
            task,
            group,
            label,
            base: &base_commit,
            head: before.tree.head.as_deref(),
            diff_hash: before.tree.diff_hash.as_deref(),
            patch: &patch,
            files: files_json(&changed_files),
            gates: gates_json(&gates),
            left_out,
        })
        .await?;
    Ok(Recorded {
        attempt,
        files: changed_files,
        gates,
    })
}

/// Checks whether `attempt`'s patch applies, in the repository that holds `dir`, to `onto` (any
/// commit-ish, say `origin/main`) or else to the attempt's own base. Reads only: no worktree file
/// or index is touched.
///
/// Against its own base a recorded patch always applies, as long as the repository has that commit;
/// the question worth asking before a pull request is usually whether it still applies where the
/// base branch is now.
pub fn preflight_attempt<'a>(
    store: &'a Store,
    attempt: &'a Attempt,
    dir: &'a Path,
    onto: Option<&'a str>,
) -> BoxFuture<'a, Result<Preflight>> {
    Box::pin(preflight_attempt_unboxed(store, attempt, dir, onto))
}

async fn preflight_attempt_unboxed(
    store: &Store,
    attempt: &Attempt,
    dir: &Path,
    onto: Option<&str>,
) -> Result<Preflight> {
    let top = repository_of(dir).await?;
    let patch = store.attempt_patch(attempt.id).await?;
    let onto = onto.unwrap_or(&attempt.base).to_owned();
    blocking(move || orchestrator_github::preflight(&top, &patch, &onto)).await
}

/// An attempt in a few lines for people and models: its fields, its files and its gates.
pub fn describe(attempt: &Attempt) -> String {
    let mut out = format!(
        "attempt {} of task {}{}\n",
        attempt.id,
        attempt.task_id,
        if attempt.selected { " (selected)" } else { "" }
    );
    let mut field = |name: &str, value: &str| out.push_str(&format!("{name:<9} {value}\n"));
    field("group", &attempt.group);
    field("label", &attempt.label);
    field("base", &attempt.base);
    if let Some(head) = &attempt.head {
        field("head", head);
    }
    field(
        "patch",
        &format!(
            "{} bytes, sha256 {}",
            attempt.patch_bytes, attempt.patch_sha256
        ),
    );
    field("recorded", &format_millis(attempt.created_at));
    if let Some(at) = attempt.selected_at {
        field("selected", &format_millis(at));
    }
    let files = attempt.files.as_array().map(Vec::as_slice).unwrap_or(&[]);
    out.push_str(&format!("files ({})\n", files.len()));
    for file in files {
        let text = |key: &str| file.get(key).and_then(Value::as_str).unwrap_or("?");
        let mut line = format!("  {:<9} {}", text("status"), text("path"));
        if let Some(from) = file.get("from").and_then(Value::as_str) {
            line.push_str(&format!(" (from {from})"));
        }
        if file.get("binary").and_then(Value::as_bool) == Some(true) {
            line.push_str(" (binary)");
        }
        out.push_str(&line);
        out.push('\n');
    }
    let gates = attempt.gates.as_array().map(Vec::as_slice).unwrap_or(&[]);
    if gates.is_empty() {
        out.push_str("gates that ran on this tree: none\n");
    } else {
        out.push_str(&format!("gates that ran on this tree ({})\n", gates.len()));
        for gate in gates {
            out.push_str(&format!(
                "  {:<9} {} (gate {})\n",
                gate.get("verdict").and_then(Value::as_str).unwrap_or("?"),
                gate.get("name").and_then(Value::as_str).unwrap_or("?"),
                gate.get("gate_id")
                    .and_then(Value::as_i64)
                    .unwrap_or_default(),
            ));
        }
    }
    if !attempt.left_out.files.is_empty() {
        out.push_str(&format!(
            "left out ({}): untracked files a gate created and nothing changed since\n",
            attempt.left_out.files.len()
        ));
        for file in &attempt.left_out.files {
            out.push_str(&format!("  {}\n", file.path));
        }
    }
    out
}

/// Whether a gate ran on the tree `tree` names: same HEAD, same dirtiness, same changes.
pub fn ran_on(gate: &GateRecord, tree: &GitTree) -> bool {
    gate.git_head.is_some()
        && gate.git_head == tree.head
        && gate.git_dirty == Some(tree.dirty)
        && gate.diff_hash == tree.diff_hash
}

/// What an attempt's `gates` column says: how many passed, and how many did not (failed, timed
/// out, errored or canceled).
pub fn gate_counts(attempt: &Attempt) -> (usize, usize) {
    let verdicts: Vec<&str> = attempt
        .gates
        .as_array()
        .map(|gates| {
            gates
                .iter()
                .filter_map(|g| g.get("verdict").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let passed = verdicts
        .iter()
        .filter(|v| **v == Verdict::Passed.as_str())
        .count();
    (passed, verdicts.len() - passed)
}

/// How many files an attempt's `files` column lists.
pub fn file_count(attempt: &Attempt) -> usize {
    attempt.files.as_array().map_or(0, Vec::len)
}

/// The name of a file status as the `files` column stores it.
pub fn status_name(status: &FileStatus) -> &'static str {
    match status {
        FileStatus::Added => "added",
        FileStatus::Modified => "modified",
        FileStatus::Deleted => "deleted",
        FileStatus::Renamed { .. } => "renamed",
    }
}

/// `[{path, status, binary}]`, with `from` for a rename.
fn files_json(files: &[ChangedFile]) -> Value {
    Value::Array(
        files
            .iter()
            .map(|f| {
                let mut entry = json!({
                    "path": f.path.to_string_lossy(),
                    "status": status_name(&f.status),
                    "binary": f.binary,
                });
                if let FileStatus::Renamed { from } = &f.status {
                    entry["from"] = json!(from.to_string_lossy());
                }
                entry
            })
            .collect(),
    )
}

/// `[{gate_id, name, verdict}]`.
fn gates_json(gates: &[GateRecord]) -> Value {
    Value::Array(
        gates
            .iter()
            .map(|g| json!({"gate_id": g.id, "name": g.name, "verdict": g.verdict.as_str()}))
            .collect(),
    )
}

/// The top of the worktree holding `dir`: a task's workspace may be a subdirectory of its
/// repository, and patches name paths from the top. Found the way every git command of the daemon
/// finds it (`git_command::pin`): the worktree is the agent's, and a repository that names
/// another work tree, common directory or object store is refused, because libgit2 would obey it.
pub(crate) async fn repository_of(dir: &Path) -> Result<PathBuf> {
    let owned = dir.to_owned();
    let pinned = tokio::task::spawn_blocking(move || orchestrator_tools::git_command::pin(&owned))
        .await
        .map_err(|_| AttemptError::NotAWorktree(dir.display().to_string()))?;
    match pinned {
        Ok(repo) => Ok(repo.work_tree),
        Err(why) if why.starts_with("refused") => Err(AttemptError::NotAWorktree(format!(
            "{}: {why}",
            dir.display()
        ))),
        Err(_) => Err(AttemptError::NotAWorktree(dir.display().to_string())),
    }
}

/// Runs git2 work off the async threads: it reads whole trees and blobs.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> orchestrator_github::Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AttemptError::Interrupted(e.to_string()))?
        .map_err(AttemptError::from)
}
