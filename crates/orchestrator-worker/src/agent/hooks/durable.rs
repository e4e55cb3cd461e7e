//! The hooks of one step of an attempt, each run once: its decision is a `hook` event, which a
//! resumed attempt replays instead of running the hook again.

use super::{Decision, HookEvent, Verdict, interpret, run_hook};
use crate::agent::session::Session;
use crate::runner::RunContext;
use orchestrator_types::EventKind;
use serde_json::{Value, json};
use std::path::Path;

/// Characters of a hook's stdout and stderr its event keeps.
const KEPT_CHARS: usize = 2000;

fn kept(text: &str) -> String {
    let mut out: String = text.chars().take(KEPT_CHARS).collect();
    if out.len() < text.len() {
        out.push_str("...");
    }
    out
}

/// Where the hooks of an attempt run.
pub(crate) struct HookStep<'a> {
    pub ctx: &'a RunContext,
    pub session: &'a Session,
    pub workspace: &'a Path,
}

impl HookStep<'_> {
    /// Whether any hook of `event` applies (to `tool`): nothing is read or run otherwise.
    pub fn any(&self, event: HookEvent, tool: Option<&str>) -> bool {
        !self.ctx.agent.hooks.matching(event, tool).is_empty()
    }

    /// Runs the hooks of `event` that apply (to `tool`) for the step named `key` (a call's id,
    /// `turn-7`, ...), or replays their recorded decisions. `fields` are the step's own input
    /// fields (`tool_name`, `tool_input`, `tool_response`, ...). Stops at the first that blocks.
    pub async fn run(
        &self,
        event: HookEvent,
        tool: Option<&str>,
        key: &str,
        fields: Value,
    ) -> orchestrator_store::Result<Decision> {
        let hooks = self.ctx.agent.hooks.matching(event, tool);
        let mut decision = Decision::default();
        if hooks.is_empty() {
            return Ok(decision);
        }
        let store = &self.session.store;
        let task = self.session.task_id();
        let recorded: Vec<Value> = store
            .events_of_kind(task, EventKind::Hook)
            .await?
            .into_iter()
            .map(|e| e.data)
            .filter(|d| d["event"] == event.as_str() && d["key"] == key)
            .collect();
        let mut transcript: Option<Vec<u8>> = None;
        for (index, spec) in hooks {
            // The same hook: its place and its command (a config changed between attempts, or
            // another machine's, runs its own hook rather than replaying another's decision).
            let (verdict, reason, updated, context) = match recorded
                .iter()
                .find(|d| d["hook"] == index && d["command"] == spec.command.as_str())
            {
                Some(data) => (
                    serde_json::from_value(data["verdict"].clone()).unwrap_or(Verdict::Continue),
                    data["reason"].as_str().map(str::to_owned),
                    Some(data["updated_input"].clone()).filter(|v| !v.is_null()),
                    data["context"].as_str().map(str::to_owned),
                ),
                None => {
                    if transcript.is_none() {
                        let messages = store.messages(task).await?;
                        let mut bytes = Vec::new();
                        for m in messages {
                            if let Ok(line) = serde_json::to_vec(&m.message) {
                                bytes.extend(line);
                                bytes.push(b'\n');
                            }
                        }
                        transcript = Some(bytes);
                    }
                    let mut input = json!({
                        "session_id": format!("task-{}", task.0),
                        "cwd": self.workspace.display().to_string(),
                        "hook_event_name": event.as_str(),
                        "permission_mode": "default",
                        "orchestrator": {
                            "task": task.0,
                            "attempt": self.session.attempt(),
                            "tool": tool,
                        },
                    });
                    if let (Some(target), Some(extra)) = (input.as_object_mut(), fields.as_object())
                    {
                        for (k, v) in extra {
                            target.insert(k.clone(), v.clone());
                        }
                        // A hook before this one changed the call's input: this one sees it.
                        if let Some(updated) = &decision.updated_input {
                            target.insert("tool_input".into(), updated.clone());
                        }
                    }
                    // A task with an environment: its hooks find its caches as its agent does.
                    let vars = match self
                        .session
                        .task
                        .repository
                        .as_ref()
                        .and_then(|r| r.environment.as_ref())
                    {
                        Some(_) => crate::workspace::environment::vars(self.workspace),
                        None => Vec::new(),
                    };
                    let result = run_hook(
                        &self.ctx.sandbox,
                        spec,
                        self.workspace,
                        input,
                        &crate::containment::model_key_vars(&self.session.task, &self.ctx.agent),
                        &vars,
                        transcript.as_deref(),
                    )
                    .await;
                    if spec.write {
                        decision.wrote = true;
                    }
                    let (verdict, reason, updated, context) = interpret(event, spec, &result);
                    store
                        .append_event(
                            &self.session.lease,
                            EventKind::Hook,
                            json!({
                                "event": event.as_str(),
                                "hook": index,
                                "key": key,
                                "tool": tool,
                                "command": spec.command,
                                "verdict": verdict,
                                "reason": reason,
                                "updated_input": updated,
                                "context": context,
                                "exit_code": result.exit_code,
                                "error": result.error,
                                "duration_ms": result.duration_ms,
                                "stdout": kept(&result.stdout),
                                "stderr": kept(&result.stderr),
                            }),
                        )
                        .await?;
                    (verdict, reason, updated, context)
                }
            };
            if let Some(context) = context {
                decision.context.push(context);
            }
            if updated.is_some() {
                decision.updated_input = updated;
            }
            let stronger = match (decision.verdict, verdict) {
                (None, _) => true,
                (Some(now), next) => rank(next) > rank(now),
            };
            if stronger {
                decision.verdict = Some(verdict);
                decision.reason = reason.or(decision.reason.take());
            }
            // A step that blocks stops at its first hook that blocks; the others run every hook.
            if verdict == Verdict::Block && event.can_block() {
                break;
            }
        }
        Ok(decision)
    }
}

fn rank(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Continue => 0,
        Verdict::Allow => 1,
        Verdict::Ask => 2,
        Verdict::Block => 3,
    }
}
