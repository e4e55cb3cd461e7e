//! Runs one claimed attempt of a task: its gates, in order, each recorded with evidence, and the
//! outcome that follows from their verdicts.

use crate::agent::{AgentConfig, AgentEnd, run_agent};
use crate::backoff::Backoff;
use crate::containment;
use crate::gate;
use crate::metrics::Metrics;
use crate::workspace;
use crate::{Error, Result};
use orchestrator_store::{Lease, Outcome, Store, Task};
use orchestrator_types::{EventKind, Verdict, now_millis};
use serde_json::json;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

mod best_of;
mod environment;
pub(crate) use environment::Ready as EnvironmentReady;
mod preparation;
mod rounds;
mod turns;
use preparation::{prepare_repository, prepare_worktree};
pub use rounds::{PullHead, RoundError, check_pull, pushed_by_orchestrator};

/// Why an attempt is being stopped. The first reason given wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A user canceled the task: it ends `canceled`.
    Canceled,
    /// The daemon is shutting down: the task is handed back without spending the attempt.
    Shutdown,
    /// The lease is gone (rescued elsewhere): stop and write nothing more.
    LeaseLost,
}

/// A running attempt's stop switch, shared with the heartbeat loop and the shutdown path.
#[derive(Debug, Clone, Default)]
pub struct Stop {
    token: CancellationToken,
    reason: Arc<Mutex<Option<StopReason>>>,
}

impl Stop {
    pub fn stop(&self, reason: StopReason) {
        if let Ok(mut slot) = self.reason.lock()
            && slot.is_none()
        {
            *slot = Some(reason);
        }
        self.token.cancel();
    }

    pub fn reason(&self) -> Option<StopReason> {
        self.reason.lock().ok().and_then(|r| *r)
    }

    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

/// How an attempt ended, before it is written: `None` when there is nothing to write because the
/// lease was lost.
#[derive(Debug, Clone)]
pub struct AttemptEnd {
    pub outcome: Option<Outcome>,
    pub details: serde_json::Value,
}

/// What the runner needs besides the task.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub backoff: Backoff,
    pub log_cap_bytes: usize,
    /// Names this process's leases and shell jobs.
    pub worker_id: String,
    pub agent: AgentConfig,
    /// Where agents' processes and gates run.
    pub sandbox: orchestrator_sandbox::Sandbox,
}

/// `jail` with the environment's cache directories when the task's repository has a setup
/// phase, so the agent's and the gates' toolchains find what setup fetched.
fn with_environment(
    jail: orchestrator_sandbox::Jail,
    task: &Task,
    workspace: &str,
) -> orchestrator_sandbox::Jail {
    match task
        .repository
        .as_ref()
        .and_then(|r| r.environment.as_ref())
    {
        Some(_) => jail.with_vars(&workspace::environment::vars(Path::new(workspace))),
        None => jail,
    }
}

/// The jail of the attempt's agent processes, when the task has an agent or gates an agent wrote,
/// and a workspace to confine them to.
fn agent_jail(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
) -> Result<Option<orchestrator_sandbox::Jail>, String> {
    let needed = task.prompt.is_some() || task.gates.iter().any(|g| g.by_agent);
    let Some(workspace) = task.workspace.as_deref().filter(|_| needed) else {
        return Ok(None);
    };
    let policy = crate::agent::policy::effective_policy(task)?;
    let connections = policy
        .grants_network()
        .then(|| network_log(ctx.store.clone(), lease.clone()));
    containment::agent_jail(
        &ctx.sandbox,
        &ctx.agent,
        task,
        &policy,
        Path::new(workspace),
        connections,
    )
    .map(|jail| Some(with_environment(jail, task, workspace)))
}

/// The most connections of one attempt written into its timeline; a process that opens more
/// (a crawler, a retry loop) has the rest logged only, so it cannot flood the store.
const MAX_RECORDED_CONNECTIONS: usize = 1000;

/// Writes each connection the jail's proxy reports into the task's timeline as a
/// `network_connection` event. The proxy calls back on its own tasks and must not wait for the
/// store, so the events go through a channel to a writer task, which ends when the jail (and with
/// it the proxy and the channel's sender) is gone. A write refused because the lease is gone ends
/// the writer: the attempt is over.
fn network_log(store: Store, lease: Lease) -> orchestrator_sandbox::ConnectionLog {
    let (sender, mut receiver) =
        tokio::sync::mpsc::unbounded_channel::<orchestrator_sandbox::Connection>();
    tokio::spawn(async move {
        let mut recorded = 0usize;
        while let Some(c) = receiver.recv().await {
            if recorded >= MAX_RECORDED_CONNECTIONS {
                tracing::info!(
                    task = %lease.task_id,
                    host = %c.host,
                    port = c.port,
                    allowed = c.allowed,
                    "sandbox network connection (over the recorded limit)"
                );
                continue;
            }
            recorded += 1;
            let data = json!({
                "protocol": c.protocol.as_str(),
                "host": c.host,
                "port": c.port,
                "address": c.address.map(|a| a.to_string()),
                "allowed": c.allowed,
                "reason": c.reason,
                "bytes_up": c.bytes_up,
                "bytes_down": c.bytes_down,
            });
            match store
                .append_event(&lease, EventKind::NetworkConnection, data)
                .await
            {
                Ok(_) => {}
                Err(orchestrator_store::Error::StaleLease { .. }) => break,
                Err(e) => tracing::warn!(
                    task = %lease.task_id,
                    "a network connection could not be recorded: {e}"
                ),
            }
        }
    });
    orchestrator_sandbox::ConnectionLog::new(move |c| {
        // The writer is gone only when the lease is: nothing more to record.
        let _ = sender.send(c);
    })
}

fn failed(error: String) -> AttemptEnd {
    AttemptEnd {
        outcome: Some(Outcome::Failed { error }),
        details: json!({}),
    }
}

/// A failure that may pass: the task goes back to the queue after its backoff while attempts are
/// left, else fails naming how many it had.
fn retry_or_fail(ctx: &RunContext, task: &Task, error: String) -> Outcome {
    if task.attempt < task.max_attempts {
        Outcome::Requeue {
            run_after: now_millis() + ctx.backoff.delay_millis(task.attempt),
            error: Some(error),
            refund: false,
        }
    } else {
        Outcome::Failed {
            error: format!(
                "{error} (attempt {} of {})",
                task.attempt, task.max_attempts
            ),
        }
    }
}

/// The key variable of an agent task's model when it is not set (or empty) in this process's
/// environment and the task could wait for a daemon that holds it: daemons say which key
/// variables they hold (by name, `model::announced_key`), and the task does not yet require this
/// one. A task of `orchestrator run` is its own process's alone: it fails there, as before.
fn missing_key(ctx: &RunContext, task: &Task) -> Option<String> {
    task.prompt.as_ref()?;
    let own = task.model.as_ref();
    let default = ctx.agent.default_model.as_ref();
    let var = own.or(default)?.api_key_env.as_deref()?.trim();
    let set = std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
    let announced =
        crate::model::announced_key(var, default.and_then(|m| m.api_key_env.as_deref()));
    let word = orchestrator_types::placement::key_word(var);
    let foreground = task
        .requires
        .iter()
        .any(|w| w.starts_with(orchestrator_types::placement::FOREGROUND_PREFIX) || *w == word);
    (!var.is_empty() && !set && announced && !foreground).then(|| var.to_owned())
}

/// Hands the task back without spending its attempt, requiring from now on a worker that holds
/// key variable `var`: it waits for one, and its waiting reason says which variable is missing.
async fn hand_back_for_key(ctx: &RunContext, task: &Task, lease: &Lease) -> Result<AttemptEnd> {
    let Some(var) = missing_key(ctx, task) else {
        return Ok(AttemptEnd {
            outcome: Some(Outcome::Requeue {
                run_after: now_millis(),
                error: None,
                refund: true,
            }),
            details: json!({}),
        });
    };
    let var = var.as_str();
    let reason = format!(
        "the model's key variable {var} is not set where worker {} runs: it waits for a daemon \
         that holds it (export {var} where `serve` runs, then restart it)",
        ctx.worker_id
    );
    tracing::warn!(task = %task.id, var, "the model's key variable is not set here; task handed back");
    pin_and_hand_back(
        ctx,
        lease,
        &orchestrator_types::placement::key_word(var),
        reason,
    )
    .await
}

/// Hands the task back without spending its attempt, requiring `word` of the worker that takes it
/// from now on, with `reason` as the attempt's error (the task waits, saying why).
async fn pin_and_hand_back(
    ctx: &RunContext,
    lease: &Lease,
    word: &str,
    reason: String,
) -> Result<AttemptEnd> {
    match ctx.store.pin_task(lease, word, &reason).await {
        Ok(()) => {}
        Err(orchestrator_store::Error::StaleLease { .. }) => {
            return Ok(AttemptEnd {
                outcome: None,
                details: json!({}),
            });
        }
        Err(e) => return Err(e.into()),
    }
    Ok(AttemptEnd {
        outcome: Some(Outcome::Requeue {
            run_after: now_millis(),
            error: Some(reason),
            refund: true,
        }),
        details: json!({
            "requires": word,
            "waiting_for": orchestrator_types::placement::describe_requirement(word),
        }),
    })
}

/// Runs one attempt of a task (its workspace's preparation, its agent, then its gates) and decides
/// its outcome. Store failures other than a stale lease are returned as `Err`: the caller stops,
/// and the lease runs out and is rescued.
///
/// Each of those parts is a function of its own, boxed when the attempt reaches it: a store
/// write's future alone is nearly 3 KB (in a test build), and inline they made the attempt's future
/// 5.5 KB for every task, made and copied into a box whether the task had any of them or not.
pub async fn run_attempt(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    stop: &Stop,
) -> Result<AttemptEnd> {
    if task.cancel_requested {
        // Canceled while it waited in the queue (a hand-back raced the cancel): run nothing.
        stop.stop(StopReason::Canceled);
    }
    // A best-of lead runs no agent: it makes its siblings, waits for them and chooses.
    if task.best_of.is_some() {
        return Box::pin(best_of::lead(ctx, task, lease, stop)).await;
    }
    // A daemon without the model's key hands the task back for one that holds it.
    // (Nothing of the check is held across the await: the attempt's future stays small.)
    if !stop.token().is_cancelled() && missing_key(ctx, task).is_some() {
        return Box::pin(hand_back_for_key(ctx, task, lease)).await;
    }
    // A task with a daily budget starts only under it, and one of a concurrency key only in its
    // key's turn.
    if !stop.token().is_cancelled()
        && let Some(end) = Box::pin(turns::take_turn(ctx, task, lease)).await
    {
        return end;
    }
    if let (Some(source), Some(workspace)) = (&task.worktree_of, &task.workspace)
        && !stop.token().is_cancelled()
        && let Err(end) = Box::pin(prepare_worktree(ctx, task, lease, source, workspace)).await
    {
        return end;
    }
    // A task on a pull request works at the head its first attempt found (and checked), with
    // what the round is to address first in its prompt: a copy of the task says both. Boxed, as
    // the other parts of an attempt are, so that a task on no pull request pays a pointer for it.
    let pulled: Option<Box<(rounds::PullHead, Task)>> = match &task.pull {
        Some(target) if !stop.token().is_cancelled() => {
            match Box::pin(rounds::start(ctx, task, lease, target)).await {
                Ok(head) => Some(Box::new(rounds::at_head(task, head))),
                Err(end) => return end,
            }
        }
        _ => None,
    };
    let task = pulled.as_deref().map_or(task, |(_, at_head)| at_head);
    // A repository task runs on a copy of itself whose workspace is the one made here; a fresh
    // one may still be getting its environment while the agent's first request goes out.
    let prepared_task;
    let mut pending = None;
    let task = match &task.repository {
        Some(repository) if !stop.token().is_cancelled() => {
            match Box::pin(prepare_repository(ctx, task, lease, repository, stop)).await {
                Ok((prepared, environment)) => {
                    prepared_task = prepared;
                    pending = environment;
                    &prepared_task
                }
                Err(end) => return end,
            }
        }
        _ => task,
    };
    let agent_jail = match agent_jail(ctx, task, lease) {
        Ok(jail) => jail,
        Err(error) => {
            // The environment step ends before the attempt does: it works in the workspace.
            if let Some(step) = pending.take() {
                let _ = step.finish().await;
            }
            return Ok(failed(error));
        }
    };
    if task.prompt.is_some() && !stop.token().is_cancelled() {
        let ready = pending.as_ref().map(environment::Pending::ready);
        let agent = Box::pin(run_agent(
            ctx,
            task,
            lease,
            stop,
            agent_jail.as_ref(),
            ready,
        ))
        .await;
        // The environment's end comes first: a failed one ends the attempt as its own failure,
        // whatever the agent made of the wait.
        if let Some(step) = pending.take()
            && let Err(end) = step.finish().await
        {
            return end;
        }
        let end = match agent? {
            AgentEnd::Finished => None,
            AgentEnd::EnvironmentFailed => {
                return Ok(failed("the environment step failed".into()));
            }
            AgentEnd::Stopped => Some(None),
            AgentEnd::LeaseLost => {
                return Ok(AttemptEnd {
                    outcome: None,
                    details: json!({}),
                });
            }
            AgentEnd::Wait { reason, approval } => {
                return Ok(AttemptEnd {
                    outcome: Some(Outcome::Wait { reason }),
                    details: json!({ "approval": approval }),
                });
            }
            AgentEnd::Failed(error) => Some(Some(Outcome::Failed { error })),
            AgentEnd::Retryable(error) => Some(Some(retry_or_fail(ctx, task, error))),
        };
        if let Some(outcome) = end {
            // A sibling stopped because another passed first keeps its work as an attempt.
            if task.sibling.is_some() && stop.reason() == Some(StopReason::Canceled) {
                Box::pin(best_of::record_sibling(ctx, task)).await;
            }
            // Stopped: the stop reason decides; otherwise the agent's own end.
            let outcome = match (stop.reason(), outcome) {
                (Some(StopReason::LeaseLost), _) => None,
                (Some(StopReason::Canceled), _) => Some(Outcome::Canceled),
                (Some(StopReason::Shutdown), _) => Some(Outcome::Requeue {
                    run_after: now_millis(),
                    error: None,
                    refund: true,
                }),
                (None, Some(outcome)) => Some(outcome),
                (None, None) => Some(Outcome::Failed {
                    error: "the agent stopped without a reason".into(),
                }),
            };
            return Ok(AttemptEnd {
                outcome,
                details: json!({}),
            });
        }
    }
    // No agent ran (canceled before it began): the environment step still ends before anything.
    if let Some(step) = pending.take()
        && let Err(end) = step.finish().await
    {
        return end;
    }
    if task.gates.is_empty() {
        return Ok(gates_end(ctx, task, stop, 0, Vec::new(), None));
    }
    // Boxed: the gates' part of the attempt (a gate's live log, its run, its record) is most of
    // its future's size, which would otherwise be made and moved for every task, gates or not.
    {
        let end = Box::pin(run_gates(ctx, task, lease, stop, agent_jail.as_ref())).await?;
        // A best-of sibling's tree becomes an attempt with the gates that ran on it, passed or not.
        if task.sibling.is_some()
            && matches!(
                end.outcome,
                Some(Outcome::Succeeded | Outcome::Failed { .. } | Outcome::Canceled)
            )
        {
            Box::pin(best_of::record_sibling(ctx, task)).await;
        }
        if pulled.is_none() || !matches!(end.outcome, Some(Outcome::Succeeded)) {
            return Ok(end);
        }
    }
    // A task on a pull request whose gates passed pushes exactly what they passed on.
    match (&task.pull, pulled.as_deref()) {
        (Some(target), Some((head, _))) => {
            Box::pin(rounds::push(ctx, task, lease, target, head)).await
        }
        _ => Ok(failed("a round without its pull request".into())),
    }
}

/// Runs the task's gates, in order, and decides the attempt's outcome from them.
async fn run_gates(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    stop: &Stop,
    agent_jail: Option<&orchestrator_sandbox::Jail>,
) -> Result<AttemptEnd> {
    let Some(workspace) = task.workspace.as_deref().map(Path::new) else {
        return Ok(failed(
            "the task has gates but no workspace to run them in".into(),
        ));
    };

    let mut person_jail: Option<orchestrator_sandbox::Jail> = None;
    // What earlier gates of the task (in any attempt: the workspace outlives them) left behind,
    // so each gate's tree sets it aside and records what it creates itself.
    let mut byproducts = match with_retries(|| ctx.store.gates(task.id)).await {
        Ok(records) => gate::KnownByproducts::of_gates(&records),
        Err(e) => return lost_or(FenceError::Store(e)),
    };
    let mut passed = 0usize;
    let mut failures: Vec<String> = Vec::new();
    let mut infra_error: Option<(String, bool)> = None;
    for (position, spec) in task.gates.iter().enumerate() {
        if stop.token().is_cancelled() {
            break;
        }
        let started = with_retries(|| {
            ctx.store.append_event(
                lease,
                EventKind::GateStarted,
                json!({ "gate": spec.name, "position": position, "command": spec.command }),
            )
        })
        .await;
        if let Err(e) = fenced(started) {
            return lost_or(e);
        }
        // A gate an agent wrote runs like the agent's own commands; a person's in the person-gate
        // jail. Both are made once per attempt.
        let jail = if spec.by_agent {
            match agent_jail {
                Some(jail) => jail.clone(),
                None => return Ok(failed("an agent's gate has no jail to run in".into())),
            }
        } else if let Some(jail) = &person_jail {
            jail.clone()
        } else {
            match containment::person_gate_jail(&ctx.sandbox, &ctx.agent, task, workspace) {
                Ok(jail) => person_jail
                    .insert(with_environment(jail, task, &workspace.to_string_lossy()))
                    .clone(),
                Err(error) => return Ok(failed(error)),
            }
        };
        let live = gate::live::LiveWriter::start(
            &ctx.store,
            &orchestrator_store::LiveLogStart {
                lease,
                source: orchestrator_store::live_source::GATE,
                key: position as i64,
                attempt: task.attempt,
                name: &spec.name,
                head_cap: (ctx.log_cap_bytes / 2) as u64,
                tail_cap: (ctx.log_cap_bytes - ctx.log_cap_bytes / 2) as u64,
            },
        )
        .await;
        let output = Box::pin(gate::run_gate_live(
            spec,
            workspace,
            stop.token(),
            ctx.log_cap_bytes,
            &jail,
            &live.tap(),
            Some(&byproducts),
        ))
        .await;
        live.finish().await;
        byproducts.add(&output.evidence.byproducts);
        ctx.metrics.observe_gate(output.evidence.duration_ms);
        let run = orchestrator_store::GateRun {
            lease,
            attempt: task.attempt,
            position: position as i64,
            spec,
            evidence: &output.evidence,
            log: &output.log,
        };
        let recorded = with_retries(|| ctx.store.record_gate(&run)).await;
        if let Err(e) = fenced(recorded) {
            return lost_or(e);
        }
        match output.evidence.verdict {
            Verdict::Passed => passed += 1,
            Verdict::Canceled => break,
            Verdict::Error => {
                let error = format!(
                    "gate {:?} could not run: {}",
                    spec.name, output.evidence.summary.text
                );
                // Without a sandbox on this machine no retry can run it: say so and stop.
                infra_error = Some(match no_sandbox_for(ctx, &jail) {
                    Some(why) => (format!("{error}; {why}"), false),
                    None => (error, true),
                });
                break;
            }
            Verdict::Failed | Verdict::TimedOut => failures.push(format!(
                "gate {:?} {}: {}",
                spec.name, output.evidence.verdict, output.evidence.summary.text
            )),
        }
    }

    Ok(gates_end(ctx, task, stop, passed, failures, infra_error))
}

/// Why a gate that could not run would not run on a retry here either: its jail must confine
/// it, and no sandbox can be set up on this machine.
fn no_sandbox_for(ctx: &RunContext, jail: &orchestrator_sandbox::Jail) -> Option<String> {
    let orchestrator_sandbox::Availability::Missing { reason } = ctx.sandbox.availability() else {
        return None;
    };
    let must_confine = jail.mode() != orchestrator_sandbox::SandboxMode::Full;
    (must_confine && !ctx.sandbox.settings().allow_unsandboxed).then(|| {
        format!(
            "no sandbox can be set up on this machine ({reason}), so no retry can run it here. {}",
            orchestrator_sandbox::INSTALL_BUBBLEWRAP
        )
    })
}

/// How an attempt ends once its gates have run (`passed` of them, with `failures` and an
/// `infra_error` that kept one from running, and whether a retry may fix it): the stop reason
/// first, then the gates' verdicts.
fn gates_end(
    ctx: &RunContext,
    task: &Task,
    stop: &Stop,
    passed: usize,
    failures: Vec<String>,
    infra_error: Option<(String, bool)>,
) -> AttemptEnd {
    let details = json!({ "gates": task.gates.len(), "passed": passed });
    let outcome = match stop.reason() {
        Some(StopReason::LeaseLost) => None,
        Some(StopReason::Canceled) => Some(Outcome::Canceled),
        Some(StopReason::Shutdown) => Some(Outcome::Requeue {
            run_after: now_millis(),
            error: None,
            refund: true,
        }),
        None => Some(if let Some((error, retryable)) = infra_error {
            if retryable && task.attempt < task.max_attempts {
                Outcome::Requeue {
                    run_after: now_millis() + ctx.backoff.delay_millis(task.attempt),
                    error: Some(error),
                    refund: false,
                }
            } else {
                Outcome::Failed { error }
            }
        } else if failures.is_empty() && passed == task.gates.len() {
            Outcome::Succeeded
        } else if failures.is_empty() {
            // Gates were skipped without a stop reason: never call that a success.
            Outcome::Failed {
                error: format!("only {passed} of {} gates ran and passed", task.gates.len()),
            }
        } else {
            Outcome::Failed {
                error: failures.join("; "),
            }
        }),
    };
    AttemptEnd { outcome, details }
}

/// The outcome of an attempt stopped before its work began.
fn stopped_outcome(stop: &Stop) -> Option<Outcome> {
    match stop.reason() {
        Some(StopReason::LeaseLost) | None => None,
        Some(StopReason::Canceled) => Some(Outcome::Canceled),
        Some(StopReason::Shutdown) => Some(Outcome::Requeue {
            run_after: now_millis(),
            error: None,
            refund: true,
        }),
    }
}

/// Tries a fenced write a few times when the store fails in a way that can pass (a dropped
/// connection), so a blip does not cost the whole attempt and its evidence.
async fn with_retries<T, F, Fut>(mut write: F) -> orchestrator_store::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = orchestrator_store::Result<T>>,
{
    let mut delay = std::time::Duration::from_millis(100);
    for _ in 0..3 {
        match write().await {
            Err(e) if e.is_retryable() => pause_before_retry(&e, &mut delay).await,
            other => return other,
        }
    }
    write().await
}

/// Says that a store write failed and is tried again, then waits `delay`, and makes the next wait
/// four times as long. Not generic, so that each of [`with_retries`]'s many instances holds a call
/// to it rather than its own copy of the log line and the timer.
async fn pause_before_retry(error: &orchestrator_store::Error, delay: &mut std::time::Duration) {
    tracing::warn!(error = %error, "store write failed; retrying");
    tokio::time::sleep(*delay).await;
    *delay *= 4;
}

/// Separates "the lease is gone" (stop quietly) from real store failures.
fn fenced<T>(result: orchestrator_store::Result<T>) -> Result<T, FenceError> {
    result.map_err(|e| match e {
        orchestrator_store::Error::StaleLease { .. } => FenceError::Lost,
        other => FenceError::Store(other),
    })
}

enum FenceError {
    Lost,
    Store(orchestrator_store::Error),
}

fn lost_or(e: FenceError) -> Result<AttemptEnd> {
    match e {
        FenceError::Lost => Ok(AttemptEnd {
            outcome: None,
            details: json!({}),
        }),
        FenceError::Store(e) => Err(Error::Store(e)),
    }
}
