//! One tool call of a reply: recorded before it runs, dispatched through the registry with its
//! guarantees and this call's approver and sink, recorded with its result after.
//!
//! A read-only call is recorded as started only once it has run for [`QUIET_START`] (or when it
//! waits for a person): most end sooner, and their row is then written whole with their result,
//! one transaction instead of two. One that a dead worker left unrecorded is simply run again
//! by the next attempt, which a call that changes nothing allows; a call that may change
//! something is always recorded first, so that it is reported as interrupted instead.

use std::sync::Arc;
use std::time::Instant;

use orchestrator_store::{
    DEFAULT_ARTIFACT_CAP, ToolCallEnd, ToolCallRecord, ToolCallStart, call_status,
};
use orchestrator_tools::{Content, Registry, ToolContext, ToolResult};
use orchestrator_types::{Captured, ChatMessage, ImagePart, ToolCallRequest, Usage};
use serde_json::json;

use super::hooks::{self, HookEvent, HookStep, Verdict};
use super::session::{Answer, CallApprover, CallSink, Pause, Session};
use super::{Halt, millis_since};
use crate::runner::{RunContext, Stop};
use orchestrator_store::approval_kind;
use std::path::Path;

/// Longest summary of a call kept on its row and event.
const SUMMARY_CHARS: usize = 200;

/// How long a read-only call runs before it is recorded as started, so that the task's page shows
/// it running.
const QUIET_START: std::time::Duration = std::time::Duration::from_millis(50);

pub(crate) enum CallEnd {
    /// The call has its result message, the model tokens it spent (llm_query_batched), and the
    /// paths it says it wrote (a file tool's `wrote_paths`; `None` when it does not say).
    Answered(ChatMessage, Option<Usage>, Option<Vec<String>>, bool),
    /// The call waits on a person.
    Paused,
    /// The attempt was stopped while the call ran; its row stays `started` (a quick read-only
    /// call has none yet, and runs again).
    Stopped,
}

/// The message a model reads for a call that a dead worker left unfinished.
fn interrupted_message(name: &str, attempt: i64) -> String {
    format!(
        "Tool call interrupted: the worker running {name} stopped before it finished (in attempt \
         {attempt}), so its result is unknown and its effects may be partial. Check the current \
         state (for example with read_file, git_status or git_diff) before you run it again."
    )
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_call(
    ctx: &RunContext,
    session: &Arc<Session>,
    registry: &Registry,
    tool_ctx: &ToolContext,
    stop: &Stop,
    turn: i64,
    position: i64,
    call: &ToolCallRequest,
    record: Option<&ToolCallRecord>,
) -> Result<CallEnd, Halt> {
    let store = &ctx.store;
    let lease = &session.lease;
    let attempt = session.attempt();
    if let Some(record) = record
        && record.status == call_status::STARTED
    {
        let text = interrupted_message(&call.name, record.attempt);
        let message = ChatMessage::tool(&call.id, &text);
        store
            .tool_call_finished(
                lease,
                attempt,
                &ToolCallEnd {
                    call_id: call.id.clone(),
                    turn,
                    status: call_status::INTERRUPTED,
                    summary: "interrupted: the worker stopped while it ran".into(),
                    artifact_id: None,
                    duration_ms: 0,
                    message: message.clone(),
                    usage: None,
                    event: json!({
                        "turn": turn,
                        "call_id": call.id,
                        "name": call.name,
                        "status": call_status::INTERRUPTED,
                        "started_in_attempt": record.attempt,
                    }),
                    unrecorded_start: None,
                },
            )
            .await?;
        return Ok(CallEnd::Answered(message, None, None, false));
    }

    // The person's PreToolUse hooks: they may block the call, hand it to a person, or change
    // its input. Each decision is recorded before the call runs, and replayed on a resume.
    let workspace = session.task.workspace.clone().unwrap_or_default();
    let step = HookStep {
        ctx,
        session,
        workspace: Path::new(&workspace),
    };
    let mut arguments = call.arguments.clone();
    let mut hooks_wrote = false;
    let mut pre_context: Vec<String> = Vec::new();
    if step.any(HookEvent::PreToolUse, Some(&call.name)) {
        let decision = step
            .run(
                HookEvent::PreToolUse,
                Some(&call.name),
                &call.id,
                json!({
                    "tool_name": hooks::claude_name(&call.name),
                    "tool_input": hook_input(&call.arguments, &workspace),
                    "tool_use_id": call.id,
                }),
            )
            .await?;
        if let Some(updated) = &decision.updated_input {
            arguments = from_hook_input(updated, &workspace).to_string();
        }
        hooks_wrote |= decision.wrote;
        pre_context = decision.context.clone();
        let refusal = match decision.verdict {
            Some(Verdict::Block) => Some(format!(
                "Blocked by a PreToolUse hook of the person's config: {}",
                decision.reason.as_deref().unwrap_or("no reason given")
            )),
            Some(Verdict::Ask) => {
                let reason = format!(
                    "a PreToolUse hook asks a person: {}",
                    decision.reason.as_deref().unwrap_or("no reason given")
                );
                let args: serde_json::Value =
                    serde_json::from_str(&arguments).unwrap_or(serde_json::Value::Null);
                match session
                    .ask(
                        &call.id,
                        approval_kind::TOOL,
                        &call.name,
                        &args,
                        &reason,
                        None,
                    )
                    .await
                {
                    Answer::Approved => {
                        // The person approved this call: the policy's own ask, if it has one,
                        // is answered by the same approval (its arguments are the call's after
                        // validation, which may spell them otherwise).
                        session.approved_by_person(&call.id);
                        None
                    }
                    Answer::Pending => {
                        if record.is_none() {
                            store
                                .tool_call_started(
                                    lease,
                                    attempt,
                                    turn,
                                    position,
                                    &call.id,
                                    &call.name,
                                    &call.arguments,
                                )
                                .await?;
                        }
                        store.tool_call_waiting(lease, &call.id).await?;
                        return Ok(CallEnd::Paused);
                    }
                    Answer::Refused(why) | Answer::Answered(why) => Some(format!(
                        "Not run: {why}; do not retry the same call, choose another approach or \
                         ask the user"
                    )),
                }
            }
            _ => None,
        };
        if let Some(text) = refusal {
            let message = ChatMessage::tool(&call.id, &text);
            store
                .tool_call_finished(
                    lease,
                    attempt,
                    &ToolCallEnd {
                        call_id: call.id.clone(),
                        turn,
                        status: call_status::FAILED,
                        summary: summarize(&text),
                        artifact_id: None,
                        duration_ms: 0,
                        message: message.clone(),
                        usage: None,
                        event: json!({
                            "turn": turn,
                            "call_id": call.id,
                            "name": call.name,
                            "status": call_status::FAILED,
                            "summary": summarize(&text),
                            "blocked_by": "hook",
                        }),
                        unrecorded_start: record.is_none().then(|| ToolCallStart {
                            position,
                            name: call.name.clone(),
                            arguments: call.arguments.clone(),
                            started_at: orchestrator_types::now_millis(),
                        }),
                    },
                )
                .await?;
            return Ok(CallEnd::Answered(message, None, None, hooks_wrote));
        }
    }

    let record_start = || {
        store.tool_call_started(
            lease,
            attempt,
            turn,
            position,
            &call.id,
            &call.name,
            &call.arguments,
        )
    };
    // A call with a row already (one that waited for a person) updates it.
    let mut start_recorded = record.is_some();
    if !start_recorded && !registry.is_read_only(&call.name) {
        record_start().await?;
        start_recorded = true;
    }
    let started_at = orchestrator_types::now_millis();
    let call_ctx = tool_ctx
        .for_call(&call.id)
        .with_approver(Arc::new(CallApprover {
            session: session.clone(),
            call_id: call.id.clone(),
        }))
        .with_sink(Arc::new(CallSink {
            session: session.clone(),
            call_id: call.id.clone(),
        }));
    let started = Instant::now();
    let running = registry.call(&call.name, &arguments, &call_ctx);
    tokio::pin!(running);
    let quiet = tokio::time::sleep(QUIET_START);
    tokio::pin!(quiet);
    let outcome = loop {
        tokio::select! {
            outcome = &mut running => break outcome,
            () = &mut quiet, if !start_recorded => {
                record_start().await?;
                start_recorded = true;
            }
            () = stop.token().cancelled() => return Ok(CallEnd::Stopped),
        }
    };
    let duration_ms = millis_since(started);
    if let Some(Pause::Waiting { call_id, .. }) = session.pause()
        && call_id == call.id
    {
        if !start_recorded {
            record_start().await?;
        }
        store.tool_call_waiting(lease, &call.id).await?;
        return Ok(CallEnd::Paused);
    }
    let result = match outcome {
        Ok(result) => result,
        Err(e) => ToolResult::error(format!("{} failed inside the orchestrator: {e}", call.name)),
    };
    // Images go to a model that takes them, on the tool message (the client sends them in a user
    // message after the reply's results); others read that an image was not shown.
    let images_shown = tool_ctx.model_images().is_some_and(|m| m.accepts);
    let mut text = model_text(&result, images_shown);
    // The person's PostToolUse hooks: a formatter after an edit, a check whose feedback (exit 2,
    // or `decision: block`) the model reads with the result.
    if step.any(HookEvent::PostToolUse, Some(&call.name)) {
        let decision = step
            .run(
                HookEvent::PostToolUse,
                Some(&call.name),
                &call.id,
                json!({
                    "tool_name": hooks::claude_name(&call.name),
                    "tool_input": hook_input(&arguments, &workspace),
                    "tool_response": {
                        "output": text,
                        "success": !result.is_error,
                        "filePath": hook_input(&arguments, &workspace).get("file_path"),
                    },
                    "tool_use_id": call.id,
                }),
            )
            .await?;
        hooks_wrote |= decision.wrote;
        if decision.blocked() {
            text.push_str(&format!(
                "\n\nA PostToolUse hook of the person's config says: {}",
                decision.reason.as_deref().unwrap_or("(no reason given)")
            ));
        }
        for context in &decision.context {
            text.push_str(&format!("\n\n(From a PostToolUse hook:) {context}"));
        }
    }
    for context in &pre_context {
        text.push_str(&format!("\n\n(From a PreToolUse hook:) {context}"));
    }
    let summary = summarize(&text);
    let artifact_id = match session.take_spill(&call.id) {
        Some(full) => Some(
            session
                .store
                .put_artifact(
                    Some(session.task_id()),
                    "tool_output",
                    "text/plain",
                    &format!("{}: {summary}", call.name),
                    &Captured::from_bytes(full.as_bytes(), DEFAULT_ARTIFACT_CAP),
                )
                .await?,
        ),
        None => None,
    };
    let status = if result.is_error {
        call_status::FAILED
    } else {
        call_status::SUCCEEDED
    };
    let usage = result
        .metadata
        .get("usage")
        .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok())
        .filter(|u| u.total_tokens > 0);
    let wrote = result
        .metadata
        .get(orchestrator_tools::registry::WROTE_PATHS)
        .and_then(|paths| serde_json::from_value::<Vec<String>>(paths.clone()).ok());
    let mut message = ChatMessage::tool(&call.id, &text);
    if images_shown {
        message.images = result
            .content
            .iter()
            .filter_map(|block| match block {
                Content::Image { media_type, data } => Some(ImagePart {
                    media_type: media_type.clone(),
                    data: data.clone(),
                }),
                Content::Text { .. } => None,
            })
            .collect();
    }
    store
        .tool_call_finished(
            lease,
            attempt,
            &ToolCallEnd {
                call_id: call.id.clone(),
                turn,
                status,
                summary: summary.clone(),
                artifact_id,
                duration_ms,
                message: message.clone(),
                usage,
                event: json!({
                    "turn": turn,
                    "call_id": call.id,
                    "name": call.name,
                    // In short, for the timeline; the whole text is in the conversation.
                    "arguments": call.arguments.chars().take(ARGUMENTS_IN_EVENT).collect::<String>(),
                    "status": status,
                    "duration_ms": duration_ms,
                    "summary": summary,
                    "artifact": artifact_id,
                }),
                unrecorded_start: (!start_recorded).then(|| ToolCallStart {
                    position,
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                    started_at,
                }),
            },
        )
        .await?;
    // A hook that may write the workspace ran: what it changed is the task's work too, and the
    // next checkpoint reads the whole workspace rather than the paths the tool named.
    let wrote = if hooks_wrote { None } else { wrote };
    Ok(CallEnd::Answered(message, usage, wrote, hooks_wrote))
}

/// A call's arguments as a hook reads them as `tool_input`: the object the model wrote, with
/// Claude Code's `file_path` (absolute) beside a `path` of ours, so that scripts written for
/// Claude Code's file tools find it.
fn hook_input(arguments: &str, workspace: &str) -> serde_json::Value {
    let mut input: serde_json::Value =
        serde_json::from_str(arguments).unwrap_or_else(|_| json!({ "raw": arguments }));
    if let Some(fields) = input.as_object_mut()
        && let Some(path) = fields
            .get("path")
            .and_then(|p| p.as_str())
            .map(str::to_owned)
        && !fields.contains_key("file_path")
    {
        let absolute = Path::new(workspace).join(&path);
        fields.insert("file_path".into(), absolute.display().to_string().into());
    }
    input
}

/// A hook's `updatedInput` as our tool reads it: the `file_path` [`hook_input`] added is dropped
/// when it still names the same file, or becomes the workspace-relative `path` when the hook
/// changed it.
fn from_hook_input(updated: &serde_json::Value, workspace: &str) -> serde_json::Value {
    let mut input = updated.clone();
    if let Some(fields) = input.as_object_mut()
        && let Some(file) = fields.remove("file_path")
        && let Some(file) = file.as_str()
    {
        let relative = Path::new(file)
            .strip_prefix(workspace)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| file.to_owned());
        let same = fields.get("path").and_then(|p| p.as_str()) == Some(relative.as_str());
        if !same {
            fields.insert("path".into(), relative.into());
        }
    }
    input
}

/// How much of a call's argument text its `tool_call` event keeps.
const ARGUMENTS_IN_EVENT: usize = 300;

/// The text a model reads: the text blocks, with images named (Chat Completions tool messages
/// carry text only; a model that takes images gets them after the results).
fn model_text(result: &ToolResult, images_shown: bool) -> String {
    let mut out = String::new();
    for block in &result.content {
        if !out.is_empty() {
            out.push('\n');
        }
        match block {
            Content::Text { text } => out.push_str(text),
            Content::Image { media_type, .. } if images_shown => {
                out.push_str(&format!("[an image ({media_type}) follows the results]"));
            }
            Content::Image { media_type, .. } => out.push_str(&format!(
                "[an image ({media_type}) was returned and is not shown: this model does not take images]"
            )),
        }
    }
    if out.is_empty() {
        out.push_str(if result.is_error {
            "(failed without a message)"
        } else {
            "(no output)"
        });
    }
    out
}

fn summarize(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() <= SUMMARY_CHARS {
        line.to_owned()
    } else {
        let mut s: String = line.chars().take(SUMMARY_CHARS - 1).collect();
        s.push('…');
        s
    }
}
