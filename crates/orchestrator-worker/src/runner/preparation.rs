//! The attempt's workspace: the worktree a task asks for, or a repository task's clone (or the
//! workspace found from an earlier attempt, when it still holds the task's latest checkpoint),
//! recorded as a `workspace_prepared` event, with the repository's environment and, for a task
//! taken over from another machine, its last checkpoint applied.

use super::{
    AttemptEnd, FenceError, RunContext, Stop, environment, failed, fenced, lost_or, retry_or_fail,
    stopped_outcome, with_retries,
};
use crate::Result;
use crate::workspace::{self, worktree};
use orchestrator_store::{Lease, Task};
use orchestrator_types::EventKind;
use serde_json::json;
use std::path::Path;

/// Makes (or finds) the worktree a task asks for and records it as a `workspace_prepared` event;
/// `Err` carries how the attempt ends when that cannot be done. A function of its own, boxed by
/// its caller: its store write is most of an attempt's future, made and moved for every task.
pub(super) async fn prepare_worktree(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    source: &str,
    workspace: &str,
) -> std::result::Result<(), Result<AttemptEnd>> {
    let prepared = match Box::pin(worktree::ensure(Path::new(source), Path::new(workspace))).await {
        Ok(prepared) => prepared,
        Err(error) => return Err(Ok(failed(error))),
    };
    if prepared.cloned
        && let Some(settings) = &ctx.agent.workspaces
        && let Err(e) =
            workspace::cleanup::record_clone(&settings.dir, task.id, Path::new(workspace))
    {
        // Without the record the clone is only left in place when the task ends.
        tracing::warn!(task = %task.id, error = %e, "cannot record a clone for its cleanup");
    }
    let recorded = with_retries(|| {
        ctx.store.append_event(
            lease,
            EventKind::WorkspacePrepared,
            json!({
                "source": source,
                "workspace": workspace,
                "head": prepared.head,
                "outcome": if prepared.cloned { "cloned" } else { "found" },
            }),
        )
    })
    .await;
    if let Err(e) = fenced(recorded) {
        return Err(lost_or(e));
    }
    Ok(())
}

/// Makes (or finds) a repository task's workspace and records it as a `workspace_prepared`
/// event, the base among its facts; returns the task with `workspace` set to it, or how the
/// attempt ends when that cannot be done.
///
/// The seam for checkpoints: when `workspace::prepare` answers
/// `Preparation::ClonedAtRecordedBase`, the workspace is fresh at the recorded base and the
/// task's last checkpoint is to be applied to it here, before the agent resumes.
pub(super) async fn prepare_repository(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    repository: &orchestrator_types::RepositoryRef,
    stop: &Stop,
) -> std::result::Result<(Task, Option<environment::Pending>), Result<AttemptEnd>> {
    let Some(settings) = ctx.agent.workspaces.clone() else {
        return Err(Ok(failed(
            "this daemon has no workspaces directory, so it cannot make a workspace from a \
             repository"
                .into(),
        )));
    };
    let recorded = match with_retries(|| {
        ctx.store
            .events_of_kind(task.id, EventKind::WorkspacePrepared)
    })
    .await
    {
        Ok(events) => recorded_base(&events, &repository.url),
        Err(e) => return Err(lost_or(FenceError::Store(e))),
    };
    let prepare = async {
        let prepared =
            workspace::prepare(&settings, task.id, repository, recorded.as_deref()).await?;
        if prepared.preparation != workspace::Preparation::Found {
            return Ok((prepared, None));
        }
        // Found here: used only when its files are the task's latest checkpoint's (the task may
        // have run on another machine since this one last held it), and its environment was
        // made (a setup that failed or was cut short leaves a workspace that looks clean); else
        // it is made again.
        let current = match found_is_current(&ctx.store, task.id, &prepared).await {
            Ok(()) if repository.environment.is_some() => {
                environment::ready_in(&ctx.store, task.id, &prepared.path).await
            }
            other => other,
        };
        match current {
            Ok(()) => Ok((prepared, None)),
            Err(reason) => {
                tracing::info!(task = %task.id, %reason, "the workspace found is made again");
                workspace::discard(&prepared.path).map_err(|e| {
                    workspace::PrepareError::Retryable(format!(
                        "{reason}, and it cannot be removed: {e}"
                    ))
                })?;
                let remade =
                    workspace::prepare(&settings, task.id, repository, recorded.as_deref()).await?;
                Ok((remade, Some(reason)))
            }
        }
    };
    let prepared = tokio::select! {
        prepared = prepare => prepared,
        // Stopped: the git processes are killed as their futures drop; the outcome follows from
        // the stop reason below, as for a stopped agent.
        () = stop.token().cancelled() => {
            return Err(Ok(AttemptEnd { outcome: stopped_outcome(stop), details: json!({}) }));
        }
    };
    let (prepared, remade) = match prepared {
        Ok(prepared) => prepared,
        Err(workspace::PrepareError::Final(error)) => return Err(Ok(failed(error))),
        Err(workspace::PrepareError::Retryable(error)) => {
            return Err(Ok(AttemptEnd {
                outcome: Some(retry_or_fail(ctx, task, error)),
                details: json!({}),
            }));
        }
    };
    let path = prepared.path.to_string_lossy().into_owned();
    let recorded = with_retries(|| {
        ctx.store.append_event(
            lease,
            EventKind::WorkspacePrepared,
            json!({
                "repository": repository.url,
                "ref": repository.git_ref,
                "base": prepared.base,
                "workspace": path,
                "outcome": prepared.preparation.outcome(),
                "mirror": prepared.mirror.map(|m| m.as_str()),
                "from": match prepared.preparation {
                    workspace::Preparation::ClonedAtRecordedBase => "recorded_base",
                    workspace::Preparation::Found => "workspace",
                    workspace::Preparation::Cloned => "ref",
                },
                "remade": remade,
                // Which attempt's workspace this is: what the resumed agent is told is lost
                // (lost.rs) depends on whether this attempt made it again.
                "epoch": lease.epoch,
            }),
        )
    })
    .await;
    if let Err(e) = fenced(recorded) {
        return Err(lost_or(e));
    }
    // A workspace made here gets the repository's environment before anything else: from this
    // machine's cache or by running setup, and before a checkpoint is applied on top of it. A
    // fresh one for an agent gets it while the agent's first request goes out (`Pending`).
    if let Some(spec) = &repository.environment
        && prepared.preparation == workspace::Preparation::Cloned
        && task.prompt.is_some()
    {
        let step = environment::Pending::start(ctx, task, lease, Path::new(&path), spec, stop);
        return Ok((
            Task {
                workspace: Some(path),
                ..task.clone()
            },
            Some(step),
        ));
    }
    if let Some(spec) = &repository.environment
        && prepared.preparation != workspace::Preparation::Found
    {
        Box::pin(environment::prepare(
            ctx,
            task,
            lease,
            Path::new(&path),
            spec,
            stop,
        ))
        .await?;
    }
    // A workspace made again at the recorded base (another machine took the task over, or this
    // one lost it) gets the files the agent had at its last saved turn.
    if prepared.preparation == workspace::Preparation::ClonedAtRecordedBase {
        match workspace::checkpoint::restore_latest(
            &ctx.store,
            lease,
            Path::new(&path),
            &prepared.base,
        )
        .await
        {
            Ok(_) => {}
            Err(workspace::checkpoint::CheckpointError::Store(
                orchestrator_store::Error::StaleLease { .. },
            )) => return Err(lost_or(FenceError::Lost)),
            Err(e) => {
                return Err(Ok(failed(format!(
                    "the workspace was made again at its base {}, but its last checkpoint could \
                     not be restored: {e}",
                    prepared.base
                ))));
            }
        }
    }
    Ok((
        Task {
            workspace: Some(path),
            ..task.clone()
        },
        None,
    ))
}

/// Whether a workspace found on disk holds what the task's conversation was last saved with:
/// the latest checkpoint's tree, or the base's when the task saved none. `Err` says why not (or
/// why it cannot be told), and the caller makes the workspace again and restores the checkpoint.
///
/// One exception: a task pinned to this machine because its checkpoint could not be saved (over
/// the cap, unreadable) has its only copy in this workspace, which is then used as it is.
async fn found_is_current(
    store: &orchestrator_store::Store,
    task: orchestrator_types::TaskId,
    prepared: &workspace::Prepared,
) -> std::result::Result<(), String> {
    let latest = |events: Vec<orchestrator_types::TaskEvent>| {
        events
            .into_iter()
            .filter(|e| e.data.get("pinned").and_then(|p| p.as_bool()) != Some(false))
            .map(|e| e.seq)
            .max()
    };
    let not_saved = with_retries(|| store.events_of_kind(task, EventKind::CheckpointNotSaved))
        .await
        .map_err(|e| format!("the task's checkpoints cannot be read: {e}"))?;
    let saved = with_retries(|| store.events_of_kind(task, EventKind::CheckpointSaved))
        .await
        .map_err(|e| format!("the task's checkpoints cannot be read: {e}"))?;
    if latest(not_saved) > latest(saved) {
        return Ok(());
    }
    let checkpoint = with_retries(|| store.checkpoint_info(task))
        .await
        .map_err(|e| format!("the task's checkpoint cannot be read: {e}"))?
        .filter(|c| c.base.eq_ignore_ascii_case(&prepared.base));
    let found = tokio::task::spawn_blocking({
        let path = prepared.path.clone();
        let base = prepared.base.clone();
        move || workspace::checkpoint::tree_of(&path, &base)
    })
    .await
    .map_err(|e| format!("the workspace found could not be read: {e}"))?
    .map_err(|e| format!("the workspace found could not be read: {e}"))?;
    match checkpoint {
        Some(c) if c.tree == found.0 => Ok(()),
        Some(c) => Err(format!(
            "the workspace found holds tree {}, not the task's latest checkpoint (turn {}, tree \
             {}, saved by {})",
            found.0, c.turn, c.tree, c.worker
        )),
        None if found.1 => Ok(()),
        None => Err(format!(
            "the workspace found holds tree {}, but the task saved no checkpoint, so its files \
             are not its base's",
            found.0
        )),
    }
}

/// The base the task's latest workspace on `url` was made at, from its `workspace_prepared`
/// events: where a workspace made again (on another machine) must start.
fn recorded_base(events: &[orchestrator_types::TaskEvent], url: &str) -> Option<String> {
    events
        .iter()
        .rev()
        .filter(|e| e.data.get("repository").and_then(|r| r.as_str()) == Some(url))
        .find_map(|e| {
            e.data
                .get("base")
                .and_then(|b| b.as_str())
                .map(str::to_owned)
        })
}
