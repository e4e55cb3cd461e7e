//! pr_attempt_record, pr_attempt_list, pr_attempt_read, pr_attempt_preflight and
//! pr_attempt_select: candidate patches of the task's work, kept in the store so that the one to
//! open a pull request with can be chosen on evidence.
//!
//! An agent trying two approaches records each as an attempt in one group, with the gates that ran
//! on exactly that tree, and selects the one to ship. The recording itself is
//! [`crate::attempts::record_attempt`], shared with `orchestrator attempt record`.
//!
//! All five are `Read` calls: they write only the store (an attempt row and its event), never the
//! workspace, a remote or GitHub. Attempts need no lease, so an attempt's id is checked against
//! the session's task instead: an agent sees and selects only its own task's attempts.

use std::path::PathBuf;
use std::sync::Arc;

use orchestrator_store::Attempt;
use orchestrator_tools::{ApprovalClass, ToolFailure, ToolSpec, refuse};
use serde::Deserialize;
use serde_json::json;

use super::{Def, Session, schema, spec, store_failure, text};
use crate::attempts::{
    AttemptError, DEFAULT_BASE, DEFAULT_GROUP, describe, file_count, gate_counts,
    preflight_attempt, record_attempt, status_name,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordArgs {
    label: String,
    group: Option<String>,
    base: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    group: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    attempt_id: i64,
    #[serde(default)]
    include_patch: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PreflightArgs {
    attempt_id: i64,
    onto: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SelectArgs {
    attempt_id: i64,
}

fn workspace(session: &Session) -> Result<PathBuf, ToolFailure> {
    session
        .task
        .workspace
        .as_ref()
        .map(PathBuf::from)
        .ok_or_else(|| {
            refuse("the task has no workspace, so there is no worktree to record or check")
        })
}

/// The `best-of` group is the runner's: a best-of sibling's tree is recorded there after its
/// gates, and the choice between siblings is the lead's or a person's, never an agent's.
const BEST_OF_REFUSAL: &str = "the group \"best-of\" is kept for the runner: after you stop, the task's gates run on your tree and it is recorded there, and the task chooses between siblings; record your own attempts in another group";

/// The model's mistakes and the worktree's state are refusals it can act on; only a broken store
/// is the orchestrator's failure.
fn attempt_failure(e: AttemptError) -> ToolFailure {
    match e {
        AttemptError::Store(e) => store_refusal(e),
        other => refuse(other.to_string()),
    }
}

fn store_refusal(e: orchestrator_store::Error) -> ToolFailure {
    match e {
        orchestrator_store::Error::AttemptNotFound(id) => refuse(format!(
            "there is no attempt {id}; pr_attempt_record answered with the ids of this task's attempts"
        )),
        orchestrator_store::Error::Invalid(e) => refuse(e.to_string()),
        other => store_failure(other),
    }
}

/// The attempt `id`, if it is one of the session's task's.
async fn own_attempt(session: &Session, id: i64) -> Result<Attempt, ToolFailure> {
    let attempt = session.store.attempt(id).await.map_err(store_refusal)?;
    if attempt.task_id != session.task_id() {
        return Err(refuse(format!(
            "attempt {id} belongs to task {}, not to this task ({}); pr_attempt_record answered with the ids of this task's attempts",
            attempt.task_id,
            session.task_id()
        )));
    }
    Ok(attempt)
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

fn gates_phrase(attempt: &Attempt) -> String {
    let (passed, failed) = gate_counts(attempt);
    if passed + failed == 0 {
        "no gates".to_owned()
    } else {
        format!("gates {passed} passed / {failed} failed")
    }
}

const ATTEMPT_ID: &str = "An attempt id, as pr_attempt_record gave it.";

pub(super) fn specs(session: &Arc<Session>) -> Vec<ToolSpec> {
    vec![
        spec(
            Def {
                name: "pr_attempt_record",
                description: "Record the workspace's changes (staged, unstaged, untracked not ignored) against a base commit as a PR attempt: a byte-exact patch, with the gates that ran on exactly this tree. Touches neither the workspace nor HEAD nor the index. Run the gates (task_gate_run) before recording; then pr_attempt_select one of the group. Refused outside a git worktree or without changes.",
                schema: schema(
                    json!({
                        "label": {"type": "string", "description": "Short, e.g. \"cache in the parser\"."},
                        "group": {"type": "string", "description": "Competing attempts share one; default \"default\"."},
                        "base": {"type": "string", "description": "Commit-ish, default HEAD."}
                    }),
                    &["label"],
                ),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[
                    ("name", "label"),
                    ("title", "label"),
                    ("description", "label"),
                    ("base_ref", "base"),
                    ("rev", "base"),
                ],
                example: json!({"label": "retry with backoff in the client", "group": "flaky-upload"}),
            },
            session,
            |session, args: RecordArgs, _ctx| async move {
                let dir = workspace(&session)?;
                let group = args.group.as_deref().unwrap_or(DEFAULT_GROUP);
                if group == orchestrator_types::BEST_OF_GROUP {
                    return Err(refuse(BEST_OF_REFUSAL));
                }
                let base = args.base.as_deref().unwrap_or(DEFAULT_BASE);
                let recorded = record_attempt(
                    &session.store,
                    session.task_id(),
                    &dir,
                    base,
                    group,
                    &args.label,
                )
                .await
                .map_err(attempt_failure)?;
                let attempt = &recorded.attempt;
                let mut out = format!(
                    "Recorded attempt {} in group {:?} ({:?}): {} file{} changed, {} patch bytes, against {} ({base}).\n",
                    attempt.id,
                    attempt.group,
                    attempt.label,
                    recorded.files.len(),
                    if recorded.files.len() == 1 { "" } else { "s" },
                    attempt.patch_bytes,
                    short(&attempt.base),
                );
                for file in &recorded.files {
                    out.push_str(&format!(
                        "  {:<9} {}{}\n",
                        status_name(&file.status),
                        file.path.display(),
                        if file.binary { " (binary)" } else { "" }
                    ));
                }
                if recorded.gates.is_empty() {
                    out.push_str("No gate of this task ran on this tree. Run the gates on it (task_gate_run) and record it again before selecting it.");
                } else {
                    let list: Vec<String> = recorded
                        .gates
                        .iter()
                        .map(|g| format!("{:?} {} (gate {})", g.name, g.verdict, g.id))
                        .collect();
                    out.push_str(&format!(
                        "Gates that ran on this tree: {}.",
                        list.join(", ")
                    ));
                    if gate_counts(attempt).0 == 0 {
                        out.push_str(" None of them passed: fix the tree, run the gates again and record it again before selecting it.");
                    }
                }
                if !attempt.left_out.files.is_empty() {
                    let names: Vec<&str> = attempt
                        .left_out
                        .files
                        .iter()
                        .map(|f| f.path.as_str())
                        .collect();
                    out.push_str(&format!(
                        "\nLeft out: {} untracked file{} a gate created and nothing changed since ({}). To send one, change it or add it to git.",
                        names.len(),
                        if names.len() == 1 { "" } else { "s" },
                        clip_list(&names, 10)
                    ));
                }
                text(out)
            },
        ),
        spec(
            Def {
                name: "pr_attempt_list",
                description: "List this task's PR attempts, oldest first, optionally of one group: id, group, label, files changed, patch size, how many of the gates that ran on its tree passed, and which one is selected.",
                schema: schema(
                    json!({"group": {"type": "string", "description": "Only the attempts of this group."}}),
                    &[],
                ),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[],
                example: json!({"group": "flaky-upload"}),
            },
            session,
            |session, args: ListArgs, _ctx| async move {
                let attempts = session
                    .store
                    .attempts(Some(session.task_id()), args.group.as_deref())
                    .await
                    .map_err(store_failure)?;
                if attempts.is_empty() {
                    return text(match &args.group {
                        Some(group) => format!(
                            "This task has no attempts in group {group:?}; record one with pr_attempt_record."
                        ),
                        None => "This task has no attempts yet; record one with pr_attempt_record."
                            .to_owned(),
                    });
                }
                let mut out = format!("{} attempt(s):\n", attempts.len());
                for a in &attempts {
                    out.push_str(&format!(
                        "  {}  group {:?}  {:?}  {} files, {} bytes, {}{}\n",
                        a.id,
                        a.group,
                        a.label,
                        file_count(a),
                        a.patch_bytes,
                        gates_phrase(a),
                        if a.selected { "  [selected]" } else { "" }
                    ));
                }
                text(out)
            },
        ),
        spec(
            Def {
                name: "pr_attempt_read",
                description: "Read one of this task's PR attempts: its group, label, base commit, the files it changes, the gates that ran on its tree with their verdicts, and with include_patch the patch itself (git's format; binary files as \"GIT binary patch\" hunks).",
                schema: schema(
                    json!({"attempt_id": {"type": "integer", "minimum": 1, "description": ATTEMPT_ID}, "include_patch": {"type": "boolean", "description": "Also return the patch text."}}),
                    &["attempt_id"],
                ),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[
                    ("id", "attempt_id"),
                    ("attempt", "attempt_id"),
                    ("patch", "include_patch"),
                ],
                example: json!({"attempt_id": 3, "include_patch": true}),
            },
            session,
            |session, args: ReadArgs, _ctx| async move {
                let attempt = own_attempt(&session, args.attempt_id).await?;
                let mut out = describe(&attempt);
                if args.include_patch {
                    let patch = session
                        .store
                        .attempt_patch(attempt.id)
                        .await
                        .map_err(store_refusal)?;
                    out.push_str("--- patch ---\n");
                    out.push_str(&String::from_utf8_lossy(&patch));
                }
                text(out)
            },
        ),
        spec(
            Def {
                name: "pr_attempt_preflight",
                description: "Check, as `git apply --check` would, whether a PR attempt applies to its base commit or, with onto, to another commit-ish (origin/main after the branch moved). Changes nothing; says which paths conflict.",
                schema: schema(
                    json!({
                        "attempt_id": {"type": "integer", "minimum": 1, "description": ATTEMPT_ID},
                        "onto": {"type": "string"}
                    }),
                    &["attempt_id"],
                ),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[
                    ("id", "attempt_id"),
                    ("attempt", "attempt_id"),
                    ("base", "onto"),
                ],
                example: json!({"attempt_id": 3, "onto": "origin/main"}),
            },
            session,
            |session, args: PreflightArgs, _ctx| async move {
                let attempt = own_attempt(&session, args.attempt_id).await?;
                let dir = workspace(&session)?;
                let preflight =
                    preflight_attempt(&session.store, &attempt, &dir, args.onto.as_deref())
                        .await
                        .map_err(attempt_failure)?;
                let target = match &args.onto {
                    Some(onto) => onto.clone(),
                    None => format!("its base {}", short(&attempt.base)),
                };
                // Not applying is the answer to the question, not a failed call.
                if preflight.applies {
                    text(format!(
                        "Attempt {} applies cleanly to {target}.",
                        attempt.id
                    ))
                } else {
                    text(format!(
                        "Attempt {} does not apply to {target}: {} path{} conflict: {}",
                        attempt.id,
                        preflight.conflicts.len(),
                        if preflight.conflicts.len() == 1 {
                            ""
                        } else {
                            "s"
                        },
                        preflight.conflicts.join(", ")
                    ))
                }
            },
        ),
        spec(
            Def {
                name: "pr_attempt_select",
                description: "Select the PR attempt to open a pull request with (one whose gates passed); it becomes the only selected one of its group.",
                schema: schema(
                    json!({"attempt_id": {"type": "integer", "minimum": 1, "description": ATTEMPT_ID}}),
                    &["attempt_id"],
                ),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[("id", "attempt_id"), ("attempt", "attempt_id")],
                example: json!({"attempt_id": 3}),
            },
            session,
            |session, args: SelectArgs, _ctx| async move {
                let attempt = own_attempt(&session, args.attempt_id).await?;
                if attempt.group == orchestrator_types::BEST_OF_GROUP {
                    return Err(refuse(BEST_OF_REFUSAL));
                }
                let before: Vec<i64> = session
                    .store
                    .attempts(Some(session.task_id()), Some(&attempt.group))
                    .await
                    .map_err(store_failure)?
                    .iter()
                    .filter(|a| a.selected && a.id != attempt.id)
                    .map(|a| a.id)
                    .collect();
                let selected = session
                    .store
                    .select_attempt(attempt.id)
                    .await
                    .map_err(store_refusal)?;
                let mut out = if attempt.selected {
                    format!(
                        "Attempt {} was already the selected one of group {:?}.",
                        selected.id, selected.group
                    )
                } else {
                    format!(
                        "Selected attempt {} ({:?}) in group {:?}.",
                        selected.id, selected.label, selected.group
                    )
                };
                if !attempt.selected && !before.is_empty() {
                    let ids: Vec<String> = before.iter().map(i64::to_string).collect();
                    out.push_str(&format!(" Unselected: {}.", ids.join(", ")));
                }
                if gate_counts(&selected).0 == 0 {
                    out.push_str(" Note: no gate passed on this attempt's tree.");
                }
                text(out)
            },
        ),
    ]
}

/// Names joined by commas, at most `max` of them, then how many more.
fn clip_list(names: &[&str], max: usize) -> String {
    let mut text = names
        .iter()
        .take(max)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > max {
        text.push_str(&format!(" and {} more", names.len() - max));
    }
    text
}
