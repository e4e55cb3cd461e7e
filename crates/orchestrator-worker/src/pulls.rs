//! Opening the pull request of a selected PR attempt: the guard, the body with its evidence, and
//! the Git Data API work of [`orchestrator_github::GitHub::open_pull`].
//!
//! The agent's `pr_open` tool and `orchestrator attempt open-pr` share this module. The guard is
//! the close guard's rule applied to the attempt instead of the worktree: every gate a person
//! wrote for the task must have passed on exactly the attempt's tree, which is what the attempt's
//! recorded gates are (the runs whose git tree equalled the worktree the patch was taken from).
//! The newest run of each gate among them decides, so a pass followed by a failure does not count.
//!
//! A retry must find what an earlier call made: the branch is named after the task, the attempt and
//! the store, and the body carries a hidden marker naming the attempt and the store's identity, so
//! [`open_pull`] finds the pull request, or a branch that holds the attempt's tree, instead of
//! opening a second one. The store's identity is what keeps two stores (staging and production)
//! on one repository apart: their task and attempt numbers are alike. A marked pull request found
//! closed is a refusal ([`PullError::Closed`]): nothing is reopened or opened in its place.

use orchestrator_types::BoxFuture;
use std::path::Path;

use orchestrator_github::{
    ApiError, GitHub, LegacyMarker, OpenedPull, PreparedTree, PullOutcome, PullSpec, RepoRef,
    prepare_tree,
};
use orchestrator_store::{Attempt, Store, Task};
use orchestrator_types::{EventKind, GateRecord, Verdict};
use serde_json::{Value, json};

use crate::attempts::AttemptError;
use crate::gate::AD_HOC_GATE_POSITION;

/// Why a pull request was not opened. The first three are refusals with what to do about them.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(
        "attempt {0} is not the selected attempt of its group; select it first (pr_attempt_select, or `orchestrator attempt select {0}`)"
    )]
    NotSelected(i64),
    #[error(
        "task {0} has no gates of its own to prove the change; a pull request needs the gates a person gave the task (task create --gate ...) to pass on the attempt's tree, and checks an agent writes do not count"
    )]
    NoGates(i64),
    #[error(
        "not every gate of task {task} passed on the tree of attempt {attempt}: {missing}; run the task's own gates on the tree (task_gate_run with `gate` set to a gate's name), record it again and select the new attempt"
    )]
    GatesNotPassed {
        task: i64,
        attempt: i64,
        missing: String,
    },
    #[error(
        "pull request #{number} of attempt {attempt} ({url}) was {how}; it is neither reopened nor opened again: a person reopens it on GitHub, or decides what comes next"
    )]
    Closed {
        attempt: i64,
        number: u64,
        url: String,
        /// `closed` or `merged`.
        how: &'static str,
    },
    /// The local git work: no repository, a base the repository lacks, a patch that does not apply.
    #[error(transparent)]
    Attempt(#[from] AttemptError),
    /// GitHub refused or failed; a refusal names what to do (push the base, delete a branch).
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Store(#[from] orchestrator_store::Error),
}

impl PullError {
    /// Whether the caller's input or the evidence is at fault, rather than the machinery.
    pub fn is_refusal(&self) -> bool {
        match self {
            PullError::NotSelected(_)
            | PullError::NoGates(_)
            | PullError::GatesNotPassed { .. }
            | PullError::Closed { .. } => true,
            PullError::Attempt(e) => !matches!(e, AttemptError::Store(_)),
            PullError::Api(e) => !e.is_retryable() && !matches!(e, ApiError::WriteUncertain { .. }),
            PullError::Store(_) => false,
        }
    }
}

/// What to open, beyond the attempt.
#[derive(Debug, Clone)]
pub struct PullPlan {
    pub repo: RepoRef,
    /// The branch to merge into; `None` for the repository's default branch.
    pub base_branch: Option<String>,
    /// The pull request's title; `None` for the task's title.
    pub title: Option<String>,
    /// Text written above the evidence (what changed and why).
    pub description: Option<String>,
    /// An issue the pull request fixes: the body says `Fixes #N`.
    pub issue: Option<u64>,
    pub draft: bool,
}

/// A pull request opened (or found again) for an attempt, with the evidence it carries.
#[derive(Debug, Clone)]
pub struct AttemptPull {
    pub pull: OpenedPull,
    pub repo: RepoRef,
    pub attempt: i64,
    pub issue: Option<u64>,
    /// The task's gates as they passed on the attempt's tree, in the task's order.
    pub gates: Vec<GateRecord>,
}

impl AttemptPull {
    /// The data of the `github_write` event that records it.
    pub fn event(&self) -> Value {
        json!({
            "action": "pr_opened",
            "outcome": self.pull.outcome,
            "repo": self.repo.to_string(),
            "number": self.pull.number,
            "url": self.pull.url,
            "attempt": self.attempt,
            "branch": self.pull.branch,
            "base_branch": self.pull.base_branch,
            "commit": self.pull.commit,
            "tree": self.pull.tree,
            "draft": self.pull.draft,
            "issue": self.issue,
            "gates": crate::github::gate_refs(&self.gates),
        })
    }

    /// One line for people and models.
    pub fn summary(&self) -> String {
        let verb = match self.pull.outcome {
            PullOutcome::Opened => "Opened",
            PullOutcome::BranchReused => "Opened (on the branch an earlier call had pushed)",
            PullOutcome::Found => "Found the pull request an earlier call opened",
            PullOutcome::Closed => "Found closed the pull request an earlier call opened",
        };
        format!(
            "{verb}{} pull request #{} on {}: {} (branch {} into {}, attempt {}, gates {})",
            if self.pull.draft { " draft" } else { "" },
            self.pull.number,
            self.repo,
            self.pull.url,
            self.pull.branch,
            self.pull.base_branch,
            self.attempt,
            self.gates
                .iter()
                .map(|g| format!("{:?} passed", g.name))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// The branch an attempt's pull request comes from, in the store whose identity is `store`: the
/// first eight digits of it are enough to keep the stores that share a repository apart.
pub fn branch_name(attempt: &Attempt, store: &str) -> String {
    let short: String = store.chars().take(8).collect();
    format!(
        "orchestrator/task-{}-attempt-{}-{short}",
        attempt.task_id.0, attempt.id
    )
}

/// The hidden marker only the attempt's pull request body holds: the attempt and the store.
pub fn pull_marker(attempt: &Attempt, store: &str) -> String {
    format!(
        "<!-- orchestrator:pr-attempt-{} store:{store} -->",
        attempt.id
    )
}

/// The branch and marker versions before the store's identity used, which name only the numbers.
/// A pull request carrying them may be another store's, so it counts as this attempt's only when
/// this store's own events record opening it (a `pr_opened` write of this attempt on this
/// repository with its number): a retry across the upgrade finds its pull request, and a
/// neighbour's is never taken for ours. Without such a record the attempt gets a pull request of
/// its own, under the new branch and marker.
fn legacy_branch_name(attempt: &Attempt) -> String {
    format!(
        "orchestrator/task-{}-attempt-{}",
        attempt.task_id.0, attempt.id
    )
}

fn legacy_pull_marker(attempt: &Attempt) -> String {
    format!("<!-- orchestrator:pr-attempt-{} -->", attempt.id)
}

/// The pull requests this store recorded opening (or finding) for `attempt` on `repo`.
async fn recorded_pulls(
    store: &Store,
    task: &Task,
    attempt: &Attempt,
    repo: &RepoRef,
) -> Result<Vec<u64>, PullError> {
    let repo = repo.to_string();
    Ok(store
        .events_of_kind(task.id, EventKind::GithubWrite)
        .await?
        .into_iter()
        .filter(|e| {
            e.data["action"] == "pr_opened"
                && e.data["attempt"].as_i64() == Some(attempt.id)
                && e.data["repo"].as_str() == Some(repo.as_str())
        })
        .filter_map(|e| e.data["number"].as_u64())
        .collect())
}

/// Checks everything but the approval: the attempt is its task's and selected, and each gate a
/// person wrote for the task passed on the attempt's tree. Returns those passing runs.
pub async fn pull_guard(
    store: &Store,
    task: &Task,
    attempt: &Attempt,
) -> Result<Vec<GateRecord>, PullError> {
    if !attempt.selected {
        return Err(PullError::NotSelected(attempt.id));
    }
    let required: Vec<(usize, &orchestrator_types::GateSpec)> = task
        .gates
        .iter()
        .enumerate()
        .filter(|(_, g)| !g.by_agent)
        .collect();
    if required.is_empty() {
        return Err(PullError::NoGates(task.id.0));
    }
    let on_tree: Vec<i64> = attempt
        .gates
        .as_array()
        .map(|gates| {
            gates
                .iter()
                .filter_map(|g| g.get("gate_id").and_then(Value::as_i64))
                .collect()
        })
        .unwrap_or_default();
    let records = store.gates(task.id).await?;
    let mut passed = Vec::new();
    let mut missing = Vec::new();
    for (position, spec) in required {
        let newest = records
            .iter()
            .filter(|g| {
                on_tree.contains(&g.id)
                    && g.position == position as i64
                    && g.position < AD_HOC_GATE_POSITION
                    && g.name == spec.name
                    && g.command == spec.command
            })
            .max_by_key(|g| g.id);
        match newest {
            Some(run) if run.verdict == Verdict::Passed => passed.push(run.clone()),
            Some(run) => missing.push(format!("{:?} {} on it", spec.name, run.verdict)),
            None => missing.push(format!("{:?} did not run on it", spec.name)),
        }
    }
    if !missing.is_empty() {
        return Err(PullError::GatesNotPassed {
            task: task.id.0,
            attempt: attempt.id,
            missing: missing.join(", "),
        });
    }
    Ok(passed)
}

/// Opens the pull request of `attempt` (guarded by [`pull_guard`]) from the tree its patch makes
/// of its base in the repository holding `dir`. Calling it again after any error is safe: it finds
/// the pull request or the branch an earlier call made.
pub fn open_pull<'a>(
    store: &'a Store,
    github: &'a GitHub,
    task: &'a Task,
    attempt: &'a Attempt,
    dir: &'a Path,
    plan: &'a PullPlan,
) -> BoxFuture<'a, Result<AttemptPull, PullError>> {
    Box::pin(open_pull_unboxed(store, github, task, attempt, dir, plan))
}

async fn open_pull_unboxed(
    store: &Store,
    github: &GitHub,
    task: &Task,
    attempt: &Attempt,
    dir: &Path,
    plan: &PullPlan,
) -> Result<AttemptPull, PullError> {
    let gates = pull_guard(store, task, attempt).await?;
    let tree = attempt_tree(store, attempt, dir).await?;
    let identity = store.identity().await?;
    let branch = branch_name(attempt, &identity);
    let marker = pull_marker(attempt, &identity);
    let legacy_branch = legacy_branch_name(attempt);
    let legacy_marker = legacy_pull_marker(attempt);
    let recorded = recorded_pulls(store, task, attempt, &plan.repo).await?;
    let body = pull_body(task, attempt, &gates, plan, &marker);
    let title = plan
        .title
        .clone()
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| task.title.clone());
    let commit_message = format!(
        "{title}\n\nAttempt {} of task {} ({:?}), recorded by orchestrator.",
        attempt.id, task.id, attempt.label
    );
    let pull = github
        .open_pull(
            &tree,
            &PullSpec {
                repo: &plan.repo,
                branch: &branch,
                base_branch: plan.base_branch.as_deref(),
                title: &title,
                body: &body,
                marker: &marker,
                draft: plan.draft,
                commit_message: &commit_message,
                legacy: Some(LegacyMarker {
                    branch: &legacy_branch,
                    marker: &legacy_marker,
                    numbers: &recorded,
                }),
            },
        )
        .await?;
    if pull.outcome == PullOutcome::Closed {
        return Err(PullError::Closed {
            attempt: attempt.id,
            number: pull.number,
            url: pull.url,
            how: if pull.merged { "merged" } else { "closed" },
        });
    }
    Ok(AttemptPull {
        pull,
        repo: plan.repo.clone(),
        attempt: attempt.id,
        issue: plan.issue,
        gates,
    })
}

/// The tree the attempt's patch makes of its base, computed in the repository holding `dir`: a
/// worktree, or a bare repository (the daemon's mirror, for a best-of task whose siblings'
/// workspaces are gone).
pub async fn attempt_tree(
    store: &Store,
    attempt: &Attempt,
    dir: &Path,
) -> Result<PreparedTree, PullError> {
    let top = match crate::attempts::repository_of(dir).await {
        Ok(top) => top,
        Err(_) if dir.join("HEAD").is_file() && dir.join("objects").is_dir() => dir.to_owned(),
        Err(e) => return Err(e.into()),
    };
    let patch = store.attempt_patch(attempt.id).await?;
    let base = attempt.base.clone();
    let tree = tokio::task::spawn_blocking(move || prepare_tree(&top, &base, &patch))
        .await
        .map_err(|e| AttemptError::Interrupted(e.to_string()))?
        .map_err(AttemptError::from)?;
    Ok(tree)
}

/// The pull request's body: the description, `Fixes #N`, the evidence, the marker. A marker inside
/// the description is taken out, so the description cannot claim another attempt's pull request.
pub fn pull_body(
    task: &Task,
    attempt: &Attempt,
    gates: &[GateRecord],
    plan: &PullPlan,
    marker: &str,
) -> String {
    const MARKER_START: &str = "<!-- orchestrator:";
    let mut out = String::new();
    if let Some(text) = plan.description.as_deref().filter(|t| !t.trim().is_empty()) {
        let mut text = text.to_owned();
        while text.contains(MARKER_START) {
            text = text.replace(MARKER_START, "<!-- ");
        }
        out.push_str(text.trim_end());
        out.push_str("\n\n");
    }
    if let Some(issue) = plan.issue {
        out.push_str(&format!("Fixes #{issue}\n\n"));
    }
    out.push_str(&format!(
        "Opened by orchestrator from attempt {} ({}) of task {} ({}).\n\n",
        attempt.id,
        inline(&attempt.label, 120),
        task.id,
        inline(&task.title, 120)
    ));
    out.push_str("### Evidence\n\nThe task's gates, each as it passed on exactly this tree:\n\n");
    out.push_str("| Gate | Command | Verdict | Duration | Summary |\n|---|---|---|---|---|\n");
    for g in gates {
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} |\n",
            cell(&g.name, 80),
            g.command.replace('`', "'").replace('|', "\\|"),
            g.verdict,
            seconds(g.duration_ms),
            cell(&g.summary, 200)
        ));
    }
    let files = attempt.files.as_array().map_or(0, Vec::len);
    out.push_str(&format!(
        "\nBase `{}`; {} file{} changed; patch {} bytes, sha256 `{}`.\n\n{marker}\n",
        attempt.base,
        files,
        if files == 1 { "" } else { "s" },
        attempt.patch_bytes,
        attempt.patch_sha256
    ));
    out
}

/// Text on one line, clipped, quoted.
fn inline(text: &str, max: usize) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("\"{}\"", clip(&line, max))
}

/// Text fit for a Markdown table cell.
fn cell(text: &str, max: usize) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    clip(&line, max).replace('|', "\\|")
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

fn seconds(ms: i64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}
