//! The agent loop's side of the context window: compacting the conversation and saving the result,
//! what the store re-injects into a summary, the stall that re-reading after compactions is, the
//! answer of `context_status`, and the bound on tool results. The pure rules are in `context.rs`.

use std::sync::atomic::Ordering;
use std::time::Instant;

use orchestrator_store::NewMessage;
use orchestrator_types::{ChatMessage, Role};
use serde_json::json;

use super::budget::Budget;
use super::model_call::model_failure;
use super::turns::FINISH_LENGTH;
use super::{Agent, AgentEnd, Halt, clip, context, count_tokens, millis_since};
use crate::model::{ModelError, WindowSource};

/// The first 12 hex digits of the sha256 of a file the agent named, as it is now: only inside the
/// workspace, and only up to 8 MiB (the records are read at each compaction).
fn file_hash(workspace: &std::path::Path, path: &str) -> String {
    use sha2::Digest;
    let relative = std::path::Path::new(path);
    let full = if relative.is_absolute() {
        relative.to_path_buf()
    } else {
        workspace.join(relative)
    };
    let inside = !relative
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
        && full.starts_with(workspace);
    if !inside {
        return "outside the workspace".to_owned();
    }
    match std::fs::metadata(&full) {
        Ok(meta) if meta.len() > 8 << 20 => format!("{} bytes, not hashed", meta.len()),
        Ok(_) => match std::fs::read(&full) {
            Ok(bytes) => hex::encode(sha2::Sha256::digest(&bytes))[..12].to_owned(),
            Err(e) => format!("unreadable: {e}"),
        },
        Err(_) => "gone".to_owned(),
    }
}

/// Most files and artifacts a summary's records list.
const MAX_LISTED: usize = 30;

/// The file a read_file call reads, as it names it.
pub(super) fn read_path(tool: &str, arguments: &str) -> Option<String> {
    if tool != "read_file" {
        return None;
    }
    let args: serde_json::Value = serde_json::from_str(arguments).ok()?;
    let path = args["path"].as_str()?.trim().trim_start_matches("./");
    (!path.is_empty()).then(|| path.to_owned())
}

/// What a compaction came to.
pub(super) enum Compaction {
    Done,
    /// Nothing could be compacted; why.
    Nothing(String),
    /// The task must stop.
    End(AgentEnd),
}

impl Agent<'_> {
    /// Compacts the conversation (see [`context`]) and saves the result as new rows with a
    /// `compacted` event in one transaction. Returns an end when the task must stop: nothing left
    /// to compact, a compaction that freed almost nothing, or too many compactions too close
    /// together (each a sign that the window is too small for the work, which more compactions
    /// would not change).
    pub(super) async fn compact(
        &mut self,
        conversation: &mut Vec<ChatMessage>,
        turn: i64,
        budget: &mut Budget,
        reason: &str,
    ) -> Result<Compaction, Halt> {
        // Its PreCompact hooks run in the workspace's environment.
        self.environment_ready().await?;
        let limits = self.limits;
        // Before and after on the same measure, so that what a compaction frees is not hidden by
        // the estimate's own error.
        let before = context::request_tokens(conversation, &self.definitions, None);
        let recent = self
            .compaction_turns
            .iter()
            .filter(|t| turn - **t < context::STALL_TURNS)
            .count();
        if recent >= context::STALL_COMPACTIONS {
            return Ok(Compaction::End(AgentEnd::Failed(format!(
                "stalled: {recent} compactions within the last {} turns and the conversation \
                 needs another ({reason}); the window of {} tokens ({}) is too small for this \
                 work: give the model a larger context_window or split the task",
                context::STALL_TURNS,
                limits.window.tokens,
                limits.window.source.as_str()
            ))));
        }
        let Some(tail) = context::tail_start(conversation) else {
            return Ok(Compaction::Nothing(format!(
                "the conversation does not fit the model's context window ({reason}) and holds \
                 nothing to compact: the system prompt, the task's prompt and the last two turns \
                 alone are about {before} tokens of the {}-token window",
                limits.window.tokens
            )));
        };
        let number = self.compaction_turns.len() as u32 + 1;
        // The person's PreCompact hooks see the conversation before it is compacted.
        let workspace = self.task.workspace.clone().unwrap_or_default();
        let step = super::hooks::HookStep {
            ctx: self.ctx,
            session: &self.session,
            workspace: std::path::Path::new(&workspace),
        };
        if step.any(super::hooks::HookEvent::PreCompact, None) {
            step.run(
                super::hooks::HookEvent::PreCompact,
                None,
                &format!("compaction-{turn}-{number}"),
                serde_json::json!({"trigger": "auto", "custom_instructions": "", "reason": reason}),
            )
            .await?;
        }
        let (mut next, cleared) = context::clear_old_outputs(conversation, tail, number);
        let mut after = context::request_tokens(&next, &self.definitions, None);
        let mut kind = "cleared";
        let mut summary_usage = None;
        let mut summary_text = None;
        let mut summary_ms = None;
        if after > limits.target {
            let mut ask = next.clone();
            ask.push(ChatMessage::user(context::SUMMARY_INSTRUCTION));
            let asked = Instant::now();
            let reply = tokio::select! {
                reply = self.client.complete(&ask, &[], None) => reply,
                () = self.stop.token().cancelled() => return Ok(Compaction::End(AgentEnd::Stopped)),
            };
            // The summary is the agent's work too: its time and tokens count against the budgets
            // (a wait for the model server's slot does not).
            let waited = reply.as_ref().map_or(0, |r| r.waited.as_millis() as i64);
            budget.work_ms += (millis_since(asked) - waited).max(0);
            let summary = match reply {
                Ok(reply) => {
                    summary_usage = reply.usage;
                    summary_ms = Some((millis_since(asked) - waited).max(0));
                    if let Some(u) = reply.usage {
                        budget.usage.add(u);
                        count_tokens(&self.ctx.metrics, u);
                    }
                    if reply.finish_reason.as_deref() == Some(FINISH_LENGTH) {
                        // Cut by the output limit: what it wrote is kept, and says it is cut.
                        format!(
                            "{}\n(This summary was cut off by the output token limit.)",
                            reply.message.content.unwrap_or_default()
                        )
                    } else {
                        reply.message.content.unwrap_or_default()
                    }
                }
                // Even the request for a summary does not fit: the span goes without one, and the
                // records re-injected below say what was established.
                Err(ModelError::ContextOverflow { .. }) => String::new(),
                Err(e) => return Ok(Compaction::End(model_failure(&e))),
            };
            let summary = if summary.trim().is_empty() {
                "(No summary could be written: the model answered the request for one with \
                 nothing, or the request did not fit its window. The earlier turns are gone; rely \
                 on the task's records below.)"
                    .to_owned()
            } else {
                summary
            };
            let state = self.records_state().await?;
            next = context::summarized(&next, tail, number, &summary, &state);
            after = context::request_tokens(&next, &self.definitions, None);
            kind = "summarized";
            summary_text = Some(summary);
        }
        if after.saturating_mul(100) > before.saturating_mul(100 - context::STALL_FREED_PERCENT) {
            return Ok(Compaction::End(AgentEnd::Failed(format!(
                "stalled: compaction {number} would free under {}% of the conversation (about \
                 {before} tokens before, {after} after; {reason}); what is left is the task's \
                 prompt, people's words and the last two turns",
                context::STALL_FREED_PERCENT
            ))));
        }
        let first_seq = self
            .ctx
            .store
            .messages(self.task.id)
            .await?
            .last()
            .map_or(1, |m| m.seq + 1);
        let rows: Vec<NewMessage> = next
            .iter()
            .map(|message| {
                let is_summary = kind == "summarized"
                    && message.role == Role::User
                    && message
                        .content
                        .as_deref()
                        .is_some_and(|c| c.starts_with(&format!("[Compaction {number}:")));
                NewMessage {
                    turn,
                    message: message.clone(),
                    usage: if is_summary { summary_usage } else { None },
                    model_ms: if is_summary { summary_ms } else { None },
                }
            })
            .collect();
        let mut event = context::event(
            number, kind, turn, first_seq, &limits, before, after, cleared, reason,
        );
        // The summary goes in the event and as an artifact, in the same transaction as the rows:
        // one summary per compaction, whatever stops the process.
        if let Some(text) = &summary_text {
            event["summary"] = json!(text);
        }
        // The summary call's tokens, counted with the task's like every other model call.
        if let Some(usage) = summary_usage {
            event["usage"] = json!(usage);
        }
        self.ctx
            .store
            .append_compaction(
                self.lease,
                self.task.attempt,
                &rows,
                event,
                summary_text.as_deref(),
            )
            .await?;
        *conversation = next;
        self.compaction_turns.push(turn);
        self.ctx.metrics.compactions.fetch_add(1, Ordering::Relaxed);
        Ok(Compaction::Done)
    }

    /// What the store knows of the task now, for a summary: the checklist and the newest run of
    /// each gate.
    async fn records_state(&self) -> Result<String, Halt> {
        let mut out = String::new();
        let checklist = self.ctx.store.checklist(self.task.id).await?;
        if !checklist.is_empty() {
            out.push_str("Checklist:\n");
            for item in &checklist {
                out.push_str(&format!(
                    "{}. [{}] {}\n",
                    item.position, item.status, item.text
                ));
            }
        }
        let gates = self.ctx.store.gates(self.task.id).await?;
        let mut newest: Vec<&orchestrator_types::GateRecord> = Vec::new();
        for record in gates.iter().rev() {
            if !newest.iter().any(|g| g.name == record.name) {
                newest.push(record);
            }
        }
        if !newest.is_empty() {
            out.push_str("Gates (newest run of each):\n");
            for g in newest.iter().rev() {
                out.push_str(&format!(
                    "- {} (`{}`): {} - {}\n",
                    g.name, g.command, g.verdict, g.summary
                ));
            }
        }
        let calls = self.ctx.store.tool_calls(self.task.id).await?;
        let workspace = std::path::Path::new(self.task.workspace.as_deref().unwrap_or("."));
        let mut files: std::collections::BTreeMap<String, &'static str> = Default::default();
        for call in &calls {
            for (path, how) in context::touched_files(&call.name, &call.arguments) {
                let entry = files.entry(path).or_insert(how);
                if how == "edited" {
                    *entry = how;
                }
            }
        }
        if !files.is_empty() {
            out.push_str("Files read or edited (sha256 of each as it is now):\n");
            for (path, how) in files.iter().take(MAX_LISTED) {
                let now = file_hash(workspace, path);
                out.push_str(&format!("- {path}: {how}, {now}\n"));
            }
        }
        let kept: Vec<&orchestrator_store::ToolCallRecord> =
            calls.iter().filter(|c| c.artifact_id.is_some()).collect();
        if !kept.is_empty() {
            out.push_str("Full outputs kept (retrieve_tool_result reads them):\n");
            for call in kept.iter().rev().take(MAX_LISTED).rev() {
                out.push_str(&format!(
                    "- artifact {} from {} at turn {}: {}\n",
                    call.artifact_id.unwrap_or_default(),
                    call.name,
                    call.turn,
                    clip(call.summary.as_deref().unwrap_or(""))
                        .lines()
                        .next()
                        .unwrap_or("")
                ));
            }
        }
        Ok(out)
    }

    /// Records the files a reply reads; the reason to stop when one of them has been read again
    /// more than [`context::STALL_REREADS`] times after compactions that followed its first read
    /// (the loop of agents that forget what they read at each compaction and read it again).
    pub(super) fn note_reads(
        &mut self,
        turn: i64,
        calls: &[orchestrator_types::ToolCallRequest],
    ) -> Option<String> {
        for call in calls {
            let Some(path) = read_path(&call.name, &call.arguments) else {
                continue;
            };
            let turns = self.reads.entry(path.clone()).or_default();
            turns.push(turn);
            // Compactions after the first read that were followed by a read of the file before the
            // next one: paging through a file, or reading it to check an edit, counts once.
            let first = turns[0];
            let compactions = &self.compaction_turns;
            let again = compactions
                .iter()
                .enumerate()
                .filter(|(i, c)| {
                    let next = compactions.get(i + 1).copied().unwrap_or(i64::MAX);
                    first <= **c && turns.iter().any(|t| **c < *t && *t <= next)
                })
                .count();
            if again > context::STALL_REREADS {
                return Some(format!(
                    "stalled: {path} was read again {again} times after compactions; the \
                     conversation keeps losing what the agent learns from it. Give the model a \
                     larger context_window, or split the task"
                ));
            }
        }
        None
    }

    /// What `context_status` answers: the window, the conversation's size now, what is left
    /// before compaction, and the compactions so far.
    pub(super) fn context_status(&self, conversation: &[ChatMessage]) -> serde_json::Value {
        let limits = self.limits;
        let used = context::request_tokens(conversation, &self.definitions, None);
        json!({
            "window_tokens": limits.window.tokens,
            "window_source": limits.window.source.as_str(),
            "compact_at_tokens": limits.trigger,
            "reserved_for_reply_tokens": limits.reserve,
            "conversation_tokens_estimated": used,
            "tokens_left_before_compaction": limits.trigger.saturating_sub(used),
            "percent_used": (used * 100).checked_div(limits.window.tokens).unwrap_or(0),
            "compactions_so_far": self.compaction_turns.len(),
            "messages": conversation.len(),
            "estimate": format!("{} bytes of request JSON per token", context::BYTES_PER_TOKEN),
        })
    }

    /// The most bytes one of `calls` results may show: half of what is left below the trigger,
    /// shared among the calls, between 2 KiB and the tools' own limit. A window nobody stated
    /// leaves the tools' limit.
    pub(super) fn result_bytes(&self, conversation: &[ChatMessage], calls: usize) -> usize {
        let most = orchestrator_tools::Limits::default().max_result_bytes;
        if self.limits.window.source == WindowSource::Default {
            return most;
        }
        let used = context::request_tokens(conversation, &self.definitions, None);
        let left = self.limits.trigger.saturating_sub(used) as usize * context::BYTES_PER_TOKEN;
        (left / 2 / calls.max(1)).clamp(context::MIN_RESULT_BYTES, most)
    }
}
