//! task_gate_run, task_shell_start, task_shell_wait and ask_user: work whose evidence or answer
//! lives in the store.
//!
//! task_gate_run is the task's own gate machinery (process group, timeout, log artifact, git tree)
//! recorded on the current task. Shell jobs are rows before their process starts; a job whose row
//! says `running` but which this attempt does not know was left by a dead worker and reads `stale`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use orchestrator_store::{GateRun, approval_kind, job_status};
use orchestrator_tools::{ApprovalClass, ToolFailure, ToolResult, ToolSpec, refuse};
use orchestrator_types::{GateSpec, Verdict};
use serde::Deserialize;
use serde_json::json;

use super::{Def, Session, schema, spec, store_failure, text};
use crate::agent::session::{Answer, JobHandle};
use crate::gate;
use crate::runner::RunContext;

use crate::gate::AD_HOC_GATE_POSITION as AD_HOC_POSITION;

const DEFAULT_GATE_TIMEOUT_SECS: u64 = 600;
const MAX_GATE_TIMEOUT_SECS: u64 = 3600;
const DEFAULT_JOB_WAIT_SECS: u64 = 60;
const MAX_JOB_WAIT_SECS: u64 = 600;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GateArgs {
    command: String,
    name: Option<String>,
    cwd: Option<String>,
    timeout_secs: Option<u64>,
}

/// task_gate_run's arguments: a check of the agent's own (`command`, with an optional name, cwd and
/// timeout), or one of the task's own gates by name (`gate`), run exactly as its author wrote it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GateRunArgs {
    command: Option<String>,
    gate: Option<String>,
    name: Option<String>,
    cwd: Option<String>,
    timeout_secs: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobWaitArgs {
    job_id: i64,
    timeout_secs: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AskArgs {
    question: String,
    options: Option<Vec<String>>,
}

/// The gate an agent asked to run. The registry has already decided its command as a shell
/// command (both tools are of the shell class, so the class's default and the command rules
/// apply); it is marked as the agent's, so it runs in the task's sandbox.
fn gate_spec(args: GateArgs) -> Result<GateSpec, ToolFailure> {
    let mut spec = GateSpec::from_command(args.command);
    spec.by_agent = true;
    if let Some(name) = args.name {
        spec.name = name;
    }
    spec.cwd = args.cwd.filter(|c| !c.is_empty() && c != ".");
    spec.timeout_secs = args
        .timeout_secs
        .unwrap_or(DEFAULT_GATE_TIMEOUT_SECS)
        .clamp(1, MAX_GATE_TIMEOUT_SECS);
    spec.validate().map_err(|e| refuse(e.to_string()))?;
    Ok(spec)
}

/// The gate task_gate_run runs, and the position it is recorded at: the task's own gate keeps its
/// place in the spec (so its evidence counts as that gate's, for the close guard), and a check of
/// the agent's own goes after every gate of the task.
fn gate_to_run(
    session: &Session,
    args: GateRunArgs,
    recorded_ad_hoc: i64,
) -> Result<(GateSpec, i64), ToolFailure> {
    match (args.gate, args.command) {
        (Some(_), Some(_)) => Err(refuse(
            "give either gate (the name of one of the task's own gates) or command (a check of your own), not both",
        )),
        (None, None) => Err(refuse(
            "give command (a check of your own) or gate (the name of one of the task's own gates)",
        )),
        (Some(name), None) => {
            if args.name.is_some() || args.cwd.is_some() || args.timeout_secs.is_some() {
                return Err(refuse(
                    "the task's own gate runs as its author wrote it: leave out name, cwd and timeout_secs",
                ));
            }
            let gates = &session.task.gates;
            match gates.iter().position(|g| g.name == name) {
                Some(position) => Ok((gates[position].clone(), position as i64)),
                None if gates.is_empty() => Err(refuse(format!(
                    "the task has no gates of its own, so there is no gate {name:?}; run a check with command instead"
                ))),
                None => Err(refuse(format!(
                    "the task has no gate {name:?}; its gates are {}",
                    gates
                        .iter()
                        .map(|g| format!("{:?}", g.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            }
        }
        (None, Some(command)) => Ok((
            gate_spec(GateArgs {
                command,
                name: args.name,
                cwd: args.cwd,
                timeout_secs: args.timeout_secs,
            })?,
            AD_HOC_POSITION + recorded_ad_hoc,
        )),
    }
}

fn workspace(session: &Session) -> Result<PathBuf, ToolFailure> {
    session
        .task
        .workspace
        .as_ref()
        .map(PathBuf::from)
        .ok_or_else(|| refuse("the task has no workspace"))
}

fn job_status_of(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Passed | Verdict::Failed | Verdict::Error => job_status::EXITED,
        Verdict::TimedOut => job_status::TIMED_OUT,
        Verdict::Canceled => job_status::KILLED,
    }
}

pub(super) fn specs(session: &Arc<Session>, ctx: &RunContext) -> Vec<ToolSpec> {
    let cap = ctx.log_cap_bytes;
    vec![
        spec(
            Def {
                name: "task_gate_run",
                description: "Run a check whose result (exit code, verdict, log) is kept as evidence: one of the task's gates by name (gate), or a command of your own.",
                schema: schema(
                    json!({
                        "command": {"type": "string"},
                        "gate": {"type": "string"},
                        "name": {"type": "string"},
                        "cwd": {"type": "string"},
                        "timeout_secs": {"type": "integer", "minimum": 1, "maximum": MAX_GATE_TIMEOUT_SECS}
                    }),
                    &[],
                ),
                read_only: false,
                approval: ApprovalClass::Shell,
                aliases: &[("cmd", "command"), ("timeout", "timeout_secs")],
                example: json!({"command": "cargo test -p parser", "name": "parser tests"}),
            },
            session,
            move |session, args: GateRunArgs, ctx| async move {
                let dir = workspace(&session)?;
                let records = session
                    .store
                    .gates(session.task_id())
                    .await
                    .map_err(store_failure)?;
                let recorded = records
                    .iter()
                    .filter(|g| g.position >= AD_HOC_POSITION)
                    .count() as i64;
                let known = gate::KnownByproducts::of_gates(&records);
                let (spec, position) = gate_to_run(&session, args, recorded)?;
                // The agent's own command runs in its jail, like its exec_shell; one of the task's
                // gates runs as the runner would run it, because a person wrote it.
                let person_jail;
                let jail = if spec.by_agent {
                    ctx.jail()
                } else {
                    let secrets: Vec<String> = session
                        .task
                        .model
                        .iter()
                        .filter_map(|m| m.api_key_env.clone())
                        .collect();
                    person_jail = ctx
                        .jail()
                        .sandbox()
                        .person_gate_jail(&dir, &secrets)
                        .map_err(|e| refuse(e.to_string()))?;
                    &person_jail
                };
                let live = gate::live::LiveWriter::start(
                    &session.store,
                    &orchestrator_store::LiveLogStart {
                        lease: &session.lease,
                        source: orchestrator_store::live_source::GATE,
                        key: position,
                        attempt: session.attempt(),
                        name: &spec.name,
                        head_cap: (cap / 2) as u64,
                        tail_cap: (cap - cap / 2) as u64,
                    },
                )
                .await;
                let output = gate::run_gate_live(
                    &spec,
                    &dir,
                    &session.stop,
                    cap,
                    jail,
                    &live.tap(),
                    Some(&known),
                )
                .await;
                live.finish().await;
                let (gate_id, log) = session
                    .store
                    .record_gate(&GateRun {
                        lease: &session.lease,
                        attempt: session.attempt(),
                        position,
                        spec: &spec,
                        evidence: &output.evidence,
                        log: &output.log,
                    })
                    .await
                    .map_err(store_failure)?;
                let evidence = &output.evidence;
                let tail = tail_lines(&String::from_utf8_lossy(&output.log.to_bytes()), 40);
                let result = ToolResult::text(format!(
                    "Gate {:?} {} in {} ms (exit {}): {}\nRecorded as gate {gate_id}, log artifact {log}.\n--- last lines ---\n{tail}",
                    spec.name,
                    evidence.verdict,
                    evidence.duration_ms,
                    evidence
                        .exit_code
                        .map_or("none".to_owned(), |c| c.to_string()),
                    evidence.summary.text,
                ));
                Ok(if evidence.verdict == Verdict::Passed {
                    result
                } else {
                    ToolResult {
                        is_error: true,
                        ..result
                    }
                })
            },
        ),
        spec(
            Def {
                name: "task_shell_start",
                description: "Start a long command (a build, a server, a long test run) as a background job of this task; returns its job id at once, for task_shell_wait. Default timeout 600 s. After a restart a job that was running reads as stale.",
                schema: schema(
                    json!({
                        "command": {"type": "string"},
                        "cwd": {"type": "string"},
                        "timeout_secs": {"type": "integer", "minimum": 1, "maximum": MAX_GATE_TIMEOUT_SECS}
                    }),
                    &["command"],
                ),
                read_only: false,
                approval: ApprovalClass::Shell,
                aliases: &[("cmd", "command"), ("timeout", "timeout_secs")],
                example: json!({"command": "cargo build --release"}),
            },
            session,
            move |session, args: GateArgs, ctx| async move {
                let spec = gate_spec(GateArgs { name: None, ..args })?;
                let jail = ctx.jail().clone();
                let dir = workspace(&session)?;
                let id = session
                    .store
                    .shell_job_started(
                        &session.lease,
                        &session.worker_id,
                        &spec.command,
                        spec.cwd.as_deref().unwrap_or("."),
                    )
                    .await
                    .map_err(store_failure)?;
                let kill = session.stop.child_token();
                let (done_tx, done_rx) = tokio::sync::watch::channel(false);
                session.jobs_insert(
                    id,
                    JobHandle {
                        done: done_rx,
                        kill: kill.clone(),
                    },
                );
                let store = session.store.clone();
                let task = session.task_id();
                let live = gate::live::LiveWriter::start(
                    &session.store,
                    &orchestrator_store::LiveLogStart {
                        lease: &session.lease,
                        source: orchestrator_store::live_source::SHELL_JOB,
                        key: id,
                        attempt: session.attempt(),
                        name: &spec.command,
                        head_cap: (cap / 2) as u64,
                        tail_cap: (cap - cap / 2) as u64,
                    },
                )
                .await;
                tokio::spawn(async move {
                    let output =
                        gate::run_gate_live(&spec, &dir, &kill, cap, &jail, &live.tap(), None)
                            .await;
                    live.finish().await;
                    let evidence = &output.evidence;
                    let summary = format!(
                        "{} (exit {}) in {} ms: {}",
                        evidence.verdict,
                        evidence
                            .exit_code
                            .map_or("none".to_owned(), |c| c.to_string()),
                        evidence.duration_ms,
                        evidence.summary.text
                    );
                    let _ = store
                        .shell_job_finished(
                            id,
                            task,
                            job_status_of(evidence.verdict),
                            evidence.exit_code.map(i64::from),
                            &summary,
                            &output.log,
                        )
                        .await;
                    let _ = done_tx.send(true);
                });
                text(format!(
                    "Started job {id}. Wait for it with task_shell_wait {{\"job_id\": {id}}}."
                ))
            },
        ),
        spec(
            Def {
                name: "task_shell_wait",
                description: "Wait for a task_shell_start job to end (default 60 s, at most 600) and return its status, exit code and output; if still running, wait again. A stale job's outcome is unknown: check its effects or start it again.",
                schema: schema(
                    json!({"job_id": {"type": "integer"}, "timeout_secs": {"type": "integer", "minimum": 1, "maximum": MAX_JOB_WAIT_SECS}}),
                    &["job_id"],
                ),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[("id", "job_id"), ("timeout", "timeout_secs")],
                example: json!({"job_id": 3, "timeout_secs": 120}),
            },
            session,
            |session, args: JobWaitArgs, _ctx| async move {
                let Some(job) = session
                    .store
                    .shell_job(args.job_id)
                    .await
                    .map_err(store_failure)?
                else {
                    return Err(refuse(format!("there is no job {}", args.job_id)));
                };
                if job.task_id != session.task_id().0 {
                    return Err(refuse(format!(
                        "job {} belongs to another task",
                        args.job_id
                    )));
                }
                let mut job = job;
                if job.status == job_status::RUNNING {
                    match session.job_done(args.job_id) {
                        Some(mut done) => {
                            let wait = Duration::from_secs(
                                args.timeout_secs
                                    .unwrap_or(DEFAULT_JOB_WAIT_SECS)
                                    .min(MAX_JOB_WAIT_SECS),
                            );
                            let _ = tokio::time::timeout(wait, done.wait_for(|d| *d)).await;
                        }
                        None => {
                            session
                                .store
                                .shell_job_stale(args.job_id)
                                .await
                                .map_err(store_failure)?;
                        }
                    }
                    job = session
                        .store
                        .shell_job(args.job_id)
                        .await
                        .map_err(store_failure)?
                        .ok_or_else(|| refuse("the job vanished"))?;
                }
                match job.status.as_str() {
                    job_status::RUNNING => text(format!(
                        "Job {} is still running ({}).",
                        job.id, job.command
                    )),
                    job_status::STALE => Err(refuse(format!(
                        "job {} ({}) is stale: the worker that ran it stopped before it ended, so its outcome is unknown; check its effects or start it again",
                        job.id, job.command
                    ))),
                    _ => {
                        let log = match job.log_artifact_id {
                            Some(a) => session
                                .store
                                .get_artifact(orchestrator_types::ArtifactId(a))
                                .await
                                .map(|a| String::from_utf8_lossy(&a.bytes).into_owned())
                                .unwrap_or_default(),
                            None => String::new(),
                        };
                        let result = ToolResult::text(format!(
                            "Job {} ({}) {}: {}\n--- output ---\n{log}",
                            job.id,
                            job.command,
                            job.status,
                            job.summary.clone().unwrap_or_default()
                        ));
                        Ok(if job.exit_code == Some(0) {
                            result
                        } else {
                            ToolResult {
                                is_error: true,
                                ..result
                            }
                        })
                    }
                }
            },
        ),
        spec(
            Def {
                name: "ask_user",
                description: "Ask the task's person a question (with options, or none for free text); the task pauses until they answer. Ask only what you cannot find out.",
                schema: schema(
                    json!({"question": {"type": "string"}, "options": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4}}),
                    &["question"],
                ),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[("choices", "options"), ("prompt", "question")],
                example: json!({"question": "Which database should the migration target?", "options": ["sqlite", "postgres"]}),
            },
            session,
            |session, args: AskArgs, ctx| async move {
                if args.question.trim().is_empty() {
                    return Err(refuse("the question is empty"));
                }
                if let Some(options) = &args.options
                    && !(2..=4).contains(&options.len())
                {
                    return Err(refuse(
                        "give 2 to 4 options, or none for a free-text answer",
                    ));
                }
                let Some(call_id) = ctx.call_id().map(str::to_owned) else {
                    return Err(refuse("ask_user works only inside an agent task"));
                };
                let arguments = json!({"question": args.question, "options": args.options});
                match session
                    .ask(
                        &call_id,
                        approval_kind::QUESTION,
                        "ask_user",
                        &arguments,
                        &args.question,
                        args.options.clone(),
                    )
                    .await
                {
                    Answer::Answered(answer) => text(format!("The user answered: {answer}")),
                    Answer::Refused(why) => Err(refuse(format!(
                        "no answer: {why}. Decide yourself and say in your summary what you assumed"
                    ))),
                    Answer::Approved | Answer::Pending => text("waiting for the user's answer"),
                }
            },
        ),
    ]
}

fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Session {
    fn jobs_insert(&self, id: i64, handle: JobHandle) {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, handle);
    }

    fn job_done(&self, id: i64) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
            .map(|h| h.done.clone())
    }

    /// Kills the background jobs of the attempt (it ended).
    pub(crate) fn stop_jobs(&self) {
        for handle in self
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
        {
            handle.kill.cancel();
        }
    }
}
