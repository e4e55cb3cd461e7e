//! The environment step of a repository task's attempt: after its workspace is cloned and
//! before its checkpoint is applied and the agent's first turn, the workspace gets the
//! repository's environment, from this machine's cache or by running setup (see
//! `workspace::environment`).

use super::{
    AttemptEnd, RunContext, Stop, failed, fenced, lost_or, network_log, retry_or_fail,
    stopped_outcome, with_retries,
};
use crate::workspace::environment::{
    self as env, MAINTENANCE_KEY, Partial, SetupCommands, SetupRun,
};
use orchestrator_store::{Lease, Task};
use orchestrator_types::{EnvironmentSpec, EventKind, now_millis};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// The environment step running beside the agent's first model request. A workspace made
/// fresh gets its environment (the cache's copy, or setup) while the model writes its first
/// answer: the agent waits for it ([`Ready`]) before it acts on that answer or touches the
/// workspace in any other way, and the attempt takes the step's end ([`Pending::finish`]) before
/// anything else (gates, its outcome). Dropped unfinished (the attempt's future dropped), the step
/// is aborted, and its processes end with their jails.
pub(crate) struct Pending {
    ready: tokio::sync::watch::Receiver<Option<bool>>,
    handle: tokio::task::JoinHandle<Result<(), crate::Result<AttemptEnd>>>,
}

/// The agent's side of a [`Pending`] environment step.
#[derive(Debug, Clone)]
pub(crate) struct Ready(tokio::sync::watch::Receiver<Option<bool>>);

impl Ready {
    /// Waits until the step ends; whether the workspace got its environment. `false` also when
    /// the step ended without saying (it panicked or was aborted): its end says why.
    pub(crate) async fn wait(&mut self) -> bool {
        match self.0.wait_for(Option::is_some).await {
            Ok(done) => *done == Some(true),
            Err(_) => false,
        }
    }
}

impl Pending {
    /// Starts the environment step for `workspace` in a task of its own.
    pub(super) fn start(
        ctx: &RunContext,
        task: &Task,
        lease: &Lease,
        workspace: &Path,
        spec: &EnvironmentSpec,
        stop: &Stop,
    ) -> Pending {
        let (said, ready) = tokio::sync::watch::channel(None);
        let (ctx, task, lease, stop) = (ctx.clone(), task.clone(), lease.clone(), stop.clone());
        let (workspace, spec) = (workspace.to_owned(), spec.clone());
        let handle = tokio::spawn(async move {
            let end = Box::pin(prepare(&ctx, &task, &lease, &workspace, &spec, &stop)).await;
            let _ = said.send(Some(end.is_ok()));
            end
        });
        Pending { ready, handle }
    }

    pub(crate) fn ready(&self) -> Ready {
        Ready(self.ready.clone())
    }

    /// The step's end: `Ok` when the workspace has its environment, else how the attempt ends.
    pub(super) async fn finish(mut self) -> Result<(), crate::Result<AttemptEnd>> {
        match (&mut self.handle).await {
            Ok(end) => end,
            Err(e) => Err(Ok(failed(format!(
                "the environment step ended before it finished: {e}"
            )))),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("ready", &*self.ready.borrow())
            .finish()
    }
}

/// Model key variables of the task: secrets whatever their names.
fn model_keys(ctx: &RunContext, task: &Task) -> Vec<String> {
    task.model
        .iter()
        .chain(ctx.agent.default_model.iter())
        .filter_map(|m| m.api_key_env.clone())
        .collect()
}

/// A jail with no network and no secret, for copying an entry's files to or from the
/// workspace: it sees `entry` (an entry's `files/`, hidden from every other jail) too.
fn quiet_jail(
    ctx: &RunContext,
    task: &Task,
    workspace: &Path,
    entry: Option<&Path>,
) -> Result<orchestrator_sandbox::Jail, String> {
    let sandbox = match entry {
        Some(dir) => ctx.sandbox.with_writable_roots(&[dir.to_owned()]),
        None => ctx.sandbox.clone(),
    };
    sandbox
        .agent_jail(orchestrator_sandbox::Confinement {
            mode: orchestrator_sandbox::SandboxMode::WorkspaceWrite,
            network: false,
            network_hosts: Vec::new(),
            connections: None,
            workspace: workspace.to_owned(),
            env: Vec::new(),
            secrets: model_keys(ctx, task),
            label: format!("env-task-{}", task.id),
        })
        .map_err(|e| e.to_string())
}

/// Whether the workspace at `path` got its environment (made, reused or maintained there): a
/// workspace found on disk without one had its setup fail or cut short, and is made again.
pub(super) async fn ready_in(
    store: &orchestrator_store::Store,
    task: orchestrator_types::TaskId,
    path: &Path,
) -> Result<(), String> {
    let events = with_retries(|| store.events_of_kind(task, EventKind::Environment))
        .await
        .map_err(|e| format!("the task's environment cannot be read: {e}"))?;
    let here = path.display().to_string();
    let ready = events.iter().any(|e| {
        e.data["workspace"] == here.as_str()
            && matches!(
                e.data["how"].as_str(),
                Some("made" | "reused" | "maintained")
            )
    });
    if ready {
        Ok(())
    } else {
        Err("its environment was never made (setup failed or was cut short)".into())
    }
}

/// Gives the freshly made `workspace` the environment `spec` describes. `Err` carries how the
/// attempt ends: a failing setup or maintenance fails it as the environment's failure (retried
/// like any failure while attempts are left), with each command's log as an artifact.
pub(super) async fn prepare(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    workspace: &Path,
    spec: &EnvironmentSpec,
    stop: &Stop,
) -> Result<(), crate::Result<AttemptEnd>> {
    let Some(settings) = ctx.agent.workspaces.clone() else {
        return Ok(());
    };
    let url = task.repository.as_ref().map_or("", |r| r.url.as_str());
    let clock = Instant::now();
    let key = env::key(workspace, url, spec).await.map_err(|e| {
        Ok(failed(format!(
            "the environment's cache key could not be made: {e}"
        )))
    })?;
    let commit = env::head(workspace).await.map_err(|e| {
        Ok(failed(format!(
            "the workspace's commit could not be read: {e}"
        )))
    })?;
    env::exclude_state_dir(workspace).map_err(|e| {
        Ok(failed(format!(
            "the environment's directory could not be kept out of git's view: {e}"
        )))
    })?;
    let root = env::cache_root(&settings.dir);
    let limit = settings
        .environment_cache_bytes
        .unwrap_or(crate::workspace::DEFAULT_ENVIRONMENT_CACHE_BYTES);

    // A hit: the entry's files, then maintenance when the commit moved.
    if let Some((entry, files)) = env::find(&root, &key) {
        match reuse(ctx, task, workspace, &files, stop).await {
            Ok(()) => {
                let maintain = spec
                    .maintenance
                    .as_ref()
                    .filter(|_| !entry.commit.eq_ignore_ascii_case(&commit));
                let mut artifacts = Vec::new();
                if let Some(command) = maintain {
                    let runs = run_in_setup_jail(
                        ctx,
                        task,
                        lease,
                        workspace,
                        spec,
                        std::slice::from_ref(command),
                        MAINTENANCE_KEY,
                        stop,
                    )
                    .await?;
                    artifacts = keep_logs(ctx, task, &runs, "maintenance").await;
                    if let Some(failure) = runs.iter().find(|r| !r.passed()) {
                        return Err(environment_failed(
                            ctx,
                            task,
                            lease,
                            workspace,
                            &key,
                            format!("maintenance {}", failure.describe()),
                            &artifacts,
                            stop,
                        )
                        .await);
                    }
                }
                if let Err(e) = keep_out_of_diff(ctx, task, workspace).await {
                    tracing::warn!(task = %task.id, error = %e, "the environment's files could not be kept out of the diff");
                }
                // The entry keeps the commit it was made at: the next task at a newer commit
                // runs maintenance on it again, rather than finding it stale.
                let _ = env::touch(&root, &key);
                let how = if maintain.is_some() {
                    "maintained"
                } else {
                    "reused"
                };
                record(
                    ctx,
                    lease,
                    workspace,
                    json!({
                        "how": how,
                        "key": key,
                        "commit": commit,
                        "made_at_commit": entry.commit,
                        "made_by_task": entry.made_by_task,
                        "bytes": entry.bytes,
                        "duration_ms": clock.elapsed().as_millis() as i64,
                        "artifacts": artifacts,
                    }),
                )
                .await?;
                return Ok(());
            }
            Err(_) if stop.token().is_cancelled() => {
                // Stopped in the middle of the copy: the entry is whole, the workspace is not
                // (the next attempt makes it again).
                return Err(Ok(AttemptEnd {
                    outcome: stopped_outcome(stop),
                    details: json!({}),
                }));
            }
            Err(e) => {
                // An entry that cannot be unpacked is dropped, and setup makes it again on a
                // clean workspace.
                tracing::warn!(task = %task.id, key, error = %e, "a cached environment could not be used; setup runs");
                let _ = env::drop_entry(&root, &key);
                if let Err(e) = clean_untracked(ctx, task, workspace).await {
                    return Err(Ok(failed(format!(
                        "a cached environment could not be unpacked, nor its files removed: {e}"
                    ))));
                }
            }
        }
    }

    // A miss: setup runs, and what it leaves is cached.
    let runs = run_in_setup_jail(ctx, task, lease, workspace, spec, &spec.setup, 0, stop).await?;
    let artifacts = keep_logs(ctx, task, &runs, "setup").await;
    let setup_ms = clock.elapsed().as_millis() as i64;
    if stop.token().is_cancelled() {
        return Err(Ok(AttemptEnd {
            outcome: stopped_outcome(stop),
            details: json!({}),
        }));
    }
    if let Some(failure) = runs.iter().find(|r| !r.passed()) {
        return Err(environment_failed(
            ctx,
            task,
            lease,
            workspace,
            &key,
            format!("setup {}", failure.describe()),
            &artifacts,
            stop,
        )
        .await);
    }
    if let Err(e) = keep_out_of_diff(ctx, task, workspace).await {
        tracing::warn!(task = %task.id, error = %e, "the environment's files could not be kept out of the diff");
    }
    let bytes = match cache(
        ctx, task, workspace, &root, &key, &commit, spec, setup_ms, stop,
    )
    .await
    {
        Ok(bytes) => {
            let evicted = env::evict(&root, limit, &key);
            if !evicted.is_empty() {
                tracing::info!(
                    count = evicted.len(),
                    "cached environments evicted (least recently used)"
                );
            }
            Some(bytes)
        }
        Err(e) => {
            // The task goes on with its environment; the next one runs setup again.
            tracing::warn!(task = %task.id, key, error = %e, "the environment could not be cached");
            None
        }
    };
    record(
        ctx,
        lease,
        workspace,
        json!({
            "how": "made",
            "key": key,
            "commit": commit,
            "bytes": bytes,
            "duration_ms": setup_ms,
            "artifacts": artifacts,
        }),
    )
    .await
}

/// Keeps the files setup left outside every ignore rule out of the task's diff (git lists them
/// in a jail; the daemon writes their escaped names into `.git/info/exclude`).
async fn keep_out_of_diff(ctx: &RunContext, task: &Task, workspace: &Path) -> Result<(), String> {
    let jail = quiet_jail(ctx, task, workspace, None)?;
    let paths = env::unignored(&jail, workspace).await?;
    env::exclude_paths(workspace, &paths).map_err(|e| e.to_string())
}

async fn reuse(
    ctx: &RunContext,
    task: &Task,
    workspace: &Path,
    files: &Path,
    stop: &Stop,
) -> Result<(), String> {
    let jail = quiet_jail(ctx, task, workspace, Some(files))?;
    until_stopped(env::unpack(&jail, workspace, files), stop).await
}

/// `work`, unless the attempt is stopped first: then it is dropped, and with it the copy's
/// processes.
async fn until_stopped(
    work: impl std::future::Future<Output = Result<(), String>>,
    stop: &Stop,
) -> Result<(), String> {
    tokio::select! {
        done = work => done,
        () = stop.token().cancelled() => Err("the attempt was stopped".into()),
    }
}

/// Removes what a failed unpacking left: every file git does not track.
async fn clean_untracked(ctx: &RunContext, task: &Task, workspace: &Path) -> Result<(), String> {
    let jail = quiet_jail(ctx, task, workspace, None)?;
    let mut process = jail
        .spawn(orchestrator_sandbox::Spawn::shell(
            "git -c core.fsmonitor=false -c core.hooksPath=/dev/null clean -ffdxq",
            workspace,
            false,
        ))
        .await
        .map_err(|e| e.to_string())?;
    match process.wait().await {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("git clean ended with {status}")),
        Err(e) => Err(e.to_string()),
    }
}

#[allow(clippy::too_many_arguments)] // private: the environment step's parts, named
async fn run_in_setup_jail(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    workspace: &Path,
    spec: &EnvironmentSpec,
    commands: &[String],
    first_key: i64,
    stop: &Stop,
) -> Result<Vec<SetupRun>, crate::Result<AttemptEnd>> {
    let jail = ctx
        .sandbox
        .person_jail(orchestrator_sandbox::PersonConfinement {
            mode: orchestrator_sandbox::SandboxMode::WorkspaceWrite,
            workspace: workspace.to_owned(),
            network: true,
            network_hosts: spec.network_hosts.clone(),
            connections: Some(network_log(ctx.store.clone(), lease.clone())),
            env: spec.env.clone(),
            secrets: model_keys(ctx, task),
            vars: env::vars(workspace),
            label: format!("setup-task-{}", task.id),
        })
        .map_err(|e| Ok(failed(format!("the setup's jail could not be made: {e}"))))?;
    let secret_values: Vec<String> = spec
        .env
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .filter(|v| !v.trim().is_empty())
        .collect();
    let runs = env::run_setup_commands(
        &SetupCommands {
            store: &ctx.store,
            lease,
            attempt: task.attempt,
            jail: &jail,
            workspace,
            timeout_secs: spec.timeout_secs,
            log_cap_bytes: ctx.log_cap_bytes,
            cancel: stop.token(),
            secret_values: &secret_values,
        },
        commands,
        first_key,
    )
    .await;
    // The jail ends here, and with it every process setup started: its secrets go with them.
    drop(jail);
    Ok(runs)
}

/// Keeps each command's log as an artifact of the task; their ids.
async fn keep_logs(ctx: &RunContext, task: &Task, runs: &[SetupRun], phase: &str) -> Vec<i64> {
    let mut ids = Vec::new();
    for run in runs {
        let summary = format!("{phase} {}", run.describe());
        match with_retries(|| {
            ctx.store.put_artifact(
                Some(task.id),
                "setup_log",
                "text/plain",
                &summary,
                &run.output.log,
            )
        })
        .await
        {
            Ok(id) => ids.push(id.0),
            Err(e) => tracing::warn!(task = %task.id, error = %e, "a setup log could not be kept"),
        }
    }
    ids
}

#[allow(clippy::too_many_arguments)] // private: an entry's parts, named
async fn cache(
    ctx: &RunContext,
    task: &Task,
    workspace: &Path,
    root: &Path,
    key: &str,
    commit: &str,
    spec: &EnvironmentSpec,
    setup_ms: i64,
    stop: &Stop,
) -> Result<u64, String> {
    let partial = Partial::new(root, key).map_err(|e| e.to_string())?;
    let files = partial.files();
    let jail = quiet_jail(ctx, task, workspace, Some(&files))?;
    // Stopped while it copies: the half entry goes with `partial`.
    until_stopped(env::pack(&jail, workspace, &files), stop).await?;
    let now = now_millis();
    let entry = env::Entry {
        key: key.to_owned(),
        repository: task
            .repository
            .as_ref()
            .map(|r| r.url.clone())
            .unwrap_or_default(),
        commit: commit.to_owned(),
        setup: spec.setup.clone(),
        made_at: now,
        last_used: now,
        bytes: 0,
        setup_ms,
        made_by_task: task.id.0,
    };
    partial.commit(entry).map_err(|e| e.to_string())?;
    Ok(env::find(root, key).map_or(0, |(e, _)| e.bytes))
}

async fn record(
    ctx: &RunContext,
    lease: &Lease,
    workspace: &Path,
    mut data: serde_json::Value,
) -> Result<(), crate::Result<AttemptEnd>> {
    if let Some(fields) = data.as_object_mut() {
        fields.insert("workspace".into(), workspace.display().to_string().into());
    }
    let recorded = with_retries(|| {
        ctx.store
            .append_event(lease, EventKind::Environment, data.clone())
    })
    .await;
    fenced(recorded).map(|_| ()).map_err(lost_or)
}

/// Records the environment's failure and says how the attempt ends: stopped as its stop says,
/// else retried like any failure while attempts are left.
#[allow(clippy::too_many_arguments)] // private: the failure's parts, named
async fn environment_failed(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    workspace: &Path,
    key: &str,
    what: String,
    artifacts: &[i64],
    stop: &Stop,
) -> crate::Result<AttemptEnd> {
    if stop.token().is_cancelled() {
        return Ok(AttemptEnd {
            outcome: stopped_outcome(stop),
            details: json!({}),
        });
    }
    let error = format!(
        "the environment failed, not the agent: {what} (its log is artifact {})",
        artifacts
            .last()
            .map_or("none".to_owned(), |id| id.to_string())
    );
    if let Err(end) = record(
        ctx,
        lease,
        workspace,
        json!({ "how": "failed", "key": key, "error": error, "artifacts": artifacts }),
    )
    .await
    {
        return end;
    }
    Ok(AttemptEnd {
        outcome: Some(retry_or_fail(ctx, task, error)),
        details: json!({ "environment": "failed" }),
    })
}
