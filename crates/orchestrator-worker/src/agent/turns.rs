//! The turn loop: budgets checked, the window kept (compaction), the model asked, its reply saved
//! before anything of it runs, and its tool calls run, until an answer or an end.

use std::time::{Duration, Instant};

use orchestrator_store::{NewMessage, SavedMessage};
use orchestrator_types::{ChatMessage, EventKind, Role};
use serde_json::json;

use super::budget::{Budget, estimate_usage, time_spent};
use super::compaction::{Compaction, read_path};
use super::hooks::{HookEvent, HookStep};
use super::model_call::Refusal;
use super::{Agent, AgentEnd, Halt, calls, clip, context, count_tokens, millis_since, session};
use crate::model::WindowSource;

/// How a Stop hook's feedback starts, in the user message it becomes.
pub(super) const STOP_HOOK_PREFIX: &str =
    "A Stop hook of the person's config refused to end the task: ";

/// Replies cut off by the output token limit in a row before the agent gives up.
const MAX_CUT_REPLIES: u32 = 3;
/// What a finish reason of `length` means: the output token limit cut the reply.
pub(super) const FINISH_LENGTH: &str = "length";

impl Agent<'_> {
    pub(super) async fn turns(&mut self, prompt: &str, workspace: &str) -> Result<AgentEnd, Halt> {
        let started = orchestrator_types::now_millis();
        let mut saved = self.ctx.store.messages(self.task.id).await?;
        if saved.is_empty() {
            saved = self.open_conversation(prompt, workspace).await?;
        } else {
            // A conversation taken up again acts on the workspace before it asks the model.
            self.environment_ready().await?;
        }
        // The groups of tools loaded in earlier turns go with the requests again.
        let calls_made: Vec<orchestrator_types::ToolCallRequest> = saved
            .iter()
            .flat_map(|m| m.message.tool_calls.iter().cloned())
            .collect();
        self.load_on_demand(&calls_made);
        // After a compaction the conversation is the rows it wrote and what followed them.
        let compactions = self
            .ctx
            .store
            .events_of_kind(self.task.id, EventKind::Compacted)
            .await?;
        self.compaction_turns = compactions
            .iter()
            .filter_map(|e| e.data["turn"].as_i64())
            .collect();
        let starts: Vec<i64> = compactions
            .iter()
            .filter_map(|e| e.data["first_seq"].as_i64())
            .collect();
        let run_start = self.run_start().await?;
        let mut budget = Budget::of_saved(
            &saved,
            &self.ctx.store.tool_calls(self.task.id).await?,
            run_start,
        );
        budget.estimate_missing(&saved, &starts, &self.definitions, run_start);
        let mut turn = saved.iter().map(|m| m.turn).max().unwrap_or(0);
        // Turns are numbered over the whole task; the budget counts the run's.
        let turns_before_run = saved
            .iter()
            .filter(|m| m.attempt <= run_start)
            .map(|m| m.turn)
            .max()
            .unwrap_or(0);
        let per_run = if run_start > 0 {
            " (counted since the task was last retried)"
        } else {
            ""
        };
        let mut used_ids: std::collections::HashSet<String> = saved
            .iter()
            .flat_map(|m| m.message.tool_calls.iter().map(|c| c.id.clone()))
            .collect();
        for call in self.ctx.store.tool_calls(self.task.id).await? {
            if let Some(path) = read_path(&call.name, &call.arguments) {
                self.reads.entry(path).or_default().push(call.turn);
            }
        }
        let first_seq = compactions
            .last()
            .and_then(|e| e.data["first_seq"].as_i64())
            .unwrap_or(0);
        let saved: Vec<SavedMessage> = saved.into_iter().filter(|m| m.seq >= first_seq).collect();
        let mut conversation: Vec<ChatMessage> = saved.iter().map(|m| m.message.clone()).collect();
        // The server's count for the last reply that has one anchors the size of the next request.
        let mut counted: Option<(usize, u64)> = saved
            .iter()
            .rposition(|m| m.message.role == Role::Assistant && m.usage.is_some())
            .and_then(|at| {
                saved[at]
                    .usage
                    .map(|u| (at, u.prompt_tokens + u.completion_tokens))
            });
        let limits = self.limits;
        self.ctx
            .store
            .append_event(
                self.lease,
                EventKind::ContextWindow,
                json!({
                    "tokens": limits.window.tokens,
                    "source": limits.window.source.as_str(),
                    "trigger": limits.trigger,
                    "reserve": limits.reserve,
                    "estimate": format!("{} bytes of JSON per token beyond the server's last count", context::BYTES_PER_TOKEN),
                }),
            )
            .await?;

        // The model already gave its final answer. Judged by gates that failed, and this a later
        // attempt (a person's retry): the model is told what failed and works on. Not judged yet
        // (handed back, killed, a gate that could not run): the gates decide; asking again would
        // spend a turn and could change the answer.
        if let Some(answer) = saved
            .last()
            .filter(|m| m.message.role == Role::Assistant && m.message.tool_calls.is_empty())
        {
            match self.gate_failures_since(answer, turn).await? {
                Some(message) => conversation.push(message),
                // A Stop hook decided (or decides now) whether this answer ends the work.
                None => match self.stop_hooks(turn, &answer.message, workspace).await? {
                    Some(message) => conversation.push(message),
                    None => return Ok(AgentEnd::Finished),
                },
            }
        }

        // A reply whose tool calls did not all get results: finish them first.
        if let Some(pending) = unanswered_calls(&saved) {
            let (reply_turn, calls) = pending;
            if let Some(end) = self
                .run_calls(reply_turn, &calls, &mut conversation, true)
                .await?
            {
                return Ok(self.checkpoint_before(end, reply_turn).await);
            }
            self.checkpoint(reply_turn).await?;
        }
        self.report_lost(turn, &saved, started, &mut conversation)
            .await?;

        let mut input_seen = saved
            .iter()
            .filter_map(|m| input_seq(&m.message))
            .max()
            .unwrap_or(0);
        let mut cut_in_a_row = 0u32;
        let mut overflow_retried = false;
        loop {
            if self.stop.token().is_cancelled() {
                return Ok(AgentEnd::Stopped);
            }
            if self.task.parent_id.is_some() {
                self.take_input(turn, &mut input_seen, &mut conversation)
                    .await?;
            }
            budget.usage.add(std::mem::take(&mut self.tool_usage));
            let limits = &self.task.agent;
            if turn - turns_before_run >= i64::from(limits.max_turns) {
                return Ok(AgentEnd::Failed(format!(
                    "the turn budget of {} turns{per_run} is spent and the model was still \
                     calling tools",
                    limits.max_turns
                )));
            }
            if let Some(max) = limits.max_tokens
                && budget.usage.total_tokens >= max
            {
                return Ok(AgentEnd::Failed(format!(
                    "the token budget of {max} tokens{per_run} is spent ({} used{})",
                    budget.usage.total_tokens,
                    budget.estimate_note()
                )));
            }
            let time_left = match limits.max_seconds {
                Some(max) => {
                    let left = (max as i64).saturating_mul(1000) - budget.work_ms;
                    if left <= 0 {
                        return Ok(AgentEnd::Failed(time_spent(max)));
                    }
                    Some(Duration::from_millis(left as u64))
                }
                None => None,
            };

            // A window nobody stated is a guess: only the server's refusal compacts then.
            let size = context::request_tokens(&conversation, &self.definitions, counted);
            if size > self.limits.trigger
                && self.limits.window.source != WindowSource::Default
                && self.client.config().auto_compact
            {
                let why = format!(
                    "the next request would be about {size} tokens, past the trigger of {} in a window of {}",
                    self.limits.trigger, self.limits.window.tokens
                );
                match self
                    .compact(&mut conversation, turn, &mut budget, &why)
                    .await?
                {
                    Compaction::Done => counted = None,
                    // The estimate errs high: let the server say whether it fits.
                    Compaction::Nothing(_) => {}
                    Compaction::End(end) => return Ok(end),
                }
            }

            let asked = Instant::now();
            // While the environment is still being made, a failed one ends the attempt at once,
            // not when the model answers.
            let answered = match self.environment.clone() {
                Some(mut ready) => {
                    let failed = async move {
                        if ready.wait().await {
                            std::future::pending::<()>().await;
                        }
                    };
                    tokio::select! {
                        answered = self.ask_model(&conversation, time_left) => answered?,
                        () = failed => return Err(Halt::End(AgentEnd::EnvironmentFailed)),
                    }
                }
                None => self.ask_model(&conversation, time_left).await?,
            };
            // The first answer waits here for the workspace's environment, when it is still
            // being made: the request went out beside it.
            let waited = Instant::now();
            self.environment_ready().await?;
            // The wait is no work of the agent's either.
            let asked = asked + waited.elapsed();
            let reply = match answered {
                Ok(reply) => {
                    overflow_retried = false;
                    reply
                }
                Err(Refusal::Overflow(error))
                    if !overflow_retried && self.client.config().auto_compact =>
                {
                    // The server's window is smaller than this request: compact, then ask once
                    // more.
                    budget.work_ms += millis_since(asked);
                    overflow_retried = true;
                    let why = format!("the model server refused the request as too long: {error}");
                    match self
                        .compact(&mut conversation, turn, &mut budget, &why)
                        .await?
                    {
                        Compaction::Done => counted = None,
                        Compaction::Nothing(message) => return Ok(AgentEnd::Failed(message)),
                        Compaction::End(end) => return Ok(end),
                    }
                    continue;
                }
                Err(Refusal::Overflow(error)) if !self.client.config().auto_compact => {
                    return Ok(AgentEnd::Failed(format!(
                        "model call failed (context_overflow): {error}; auto_compact is off for \
                         this model"
                    )));
                }
                Err(Refusal::Overflow(error)) => {
                    return Ok(AgentEnd::Failed(format!(
                        "stalled: the model server refused the request as too long again right \
                         after a compaction, so its real context window is smaller than the {} \
                         tokens assumed ({}); set context_window for this model ({error})",
                        self.limits.window.tokens,
                        self.limits.window.source.as_str()
                    )));
                }
                Err(Refusal::End(end)) => return Ok(end),
            };
            // A wait for the model server's slot is no work of the agent's.
            budget.work_ms += (millis_since(asked) - reply.waited.as_millis() as i64).max(0);
            turn += 1;
            let mut message = reply.message.clone();
            unique_call_ids(&mut message, turn, &mut used_ids);
            let estimate = match reply.usage {
                Some(u) => {
                    budget.usage.add(u);
                    None
                }
                None => {
                    let guess = estimate_usage(&conversation, &self.definitions, &message);
                    budget.add_estimate(guess);
                    Some(guess)
                }
            };
            let cut = reply.finish_reason.as_deref() == Some(FINISH_LENGTH);
            let event = json!({
                "turn": turn,
                "role": "assistant",
                "text": message.content.as_deref().map(clip),
                "tool_calls": message.tool_calls.iter().map(|c| json!({"id": c.id, "name": c.name})).collect::<Vec<_>>(),
                "usage": reply.usage,
                "usage_estimate": estimate,
                "model": reply.model,
                "model_ms": reply.elapsed.as_millis() as i64,
                "attempts": reply.attempts,
                "finish_reason": reply.finish_reason,
            });
            let mut batch = vec![NewMessage {
                turn,
                message: message.clone(),
                usage: reply.usage,
                model_ms: Some(reply.elapsed.as_millis() as i64),
            }];
            if cut {
                if message.content.is_none() && message.tool_calls.is_empty() {
                    return Ok(AgentEnd::Failed(format!(
                        "the model's reply was cut off by the output token limit before it wrote \
                         anything (finish_reason length){}; the prompt may fill the model's \
                         context window",
                        self.limit_note()
                    )));
                }
                cut_in_a_row += 1;
                // Saved with the reply, in one transaction, so a resumed attempt never runs a call
                // of a cut reply nor takes its text for a final answer.
                batch.extend(cut_answers(&message, turn, &self.limit_note()));
            } else {
                cut_in_a_row = 0;
            }
            // Committed without waiting for the disk: what follows (a changing call's start, a
            // call's end, the attempt's end) syncs it before anything acts on it.
            self.ctx
                .store
                .append_reply(
                    self.lease,
                    self.task.attempt,
                    &batch,
                    (EventKind::Message, event),
                )
                .await?;
            if let Some(u) = reply.usage {
                counted = Some((conversation.len(), u.prompt_tokens + u.completion_tokens));
                count_tokens(&self.ctx.metrics, u);
            }
            conversation.extend(batch.into_iter().map(|m| m.message));
            if cut {
                if cut_in_a_row >= MAX_CUT_REPLIES {
                    return Ok(AgentEnd::Failed(format!(
                        "the model's replies were cut off by the output token limit {MAX_CUT_REPLIES} \
                         times in a row{}",
                        self.limit_note()
                    )));
                }
                continue;
            }
            if message.tool_calls.is_empty() {
                match self.stop_hooks(turn, &message, workspace).await? {
                    Some(feedback) => {
                        conversation.push(feedback);
                        continue;
                    }
                    None => return Ok(AgentEnd::Finished),
                }
            }
            if let Some(stall) = self.note_reads(turn, &message.tool_calls) {
                return Ok(AgentEnd::Failed(stall));
            }
            self.load_on_demand(&message.tool_calls);
            let calls_started = Instant::now();
            if let Some(end) = self
                .run_calls(
                    turn,
                    &message
                        .tool_calls
                        .iter()
                        .cloned()
                        .enumerate()
                        .collect::<Vec<_>>(),
                    &mut conversation,
                    false,
                )
                .await?
            {
                return Ok(self.checkpoint_before(end, turn).await);
            }
            budget.work_ms += millis_since(calls_started);
            self.checkpoint(turn).await?;
        }
    }

    /// Runs the person's Notification hooks when the agent waits for a person (once per
    /// approval: a replayed decision runs nothing).
    async fn notification_hooks(&self, approval: i64, reason: &str) -> Result<(), Halt> {
        let workspace = self.task.workspace.clone().unwrap_or_default();
        let step = HookStep {
            ctx: self.ctx,
            session: &self.session,
            workspace: std::path::Path::new(&workspace),
        };
        if step.any(HookEvent::Notification, None) {
            // The approval's own words say what waits and why (a policy's or a hook's reason).
            let why = match self.ctx.store.get_approval(approval).await {
                Ok(a) => format!("{} ({}): {}", a.tool, a.kind, a.reason),
                Err(_) => reason.to_owned(),
            };
            step.run(
                HookEvent::Notification,
                None,
                &format!("approval-{approval}"),
                json!({
                    "message": format!(
                        "Task {} needs your approval (approval {approval}): {why}",
                        self.task.id
                    ),
                    "notification_type": "permission_prompt",
                }),
            )
            .await?;
        }
        Ok(())
    }

    /// Runs the person's Stop hooks on the final answer of `turn` (or replays their decision).
    /// A hook that blocks keeps the agent working: its reason is saved as a user message, which
    /// this returns; `None` lets the answer end the work.
    async fn stop_hooks(
        &self,
        turn: i64,
        answer: &ChatMessage,
        workspace: &str,
    ) -> Result<Option<ChatMessage>, Halt> {
        let step = HookStep {
            ctx: self.ctx,
            session: &self.session,
            workspace: std::path::Path::new(workspace),
        };
        if !step.any(HookEvent::Stop, None) {
            return Ok(None);
        }
        // Claude Code's flag: an earlier Stop hook already kept this task going.
        let active = self
            .ctx
            .store
            .events_of_kind(self.task.id, EventKind::Hook)
            .await?
            .iter()
            .any(|e| e.data["event"] == "Stop" && e.data["verdict"] == "block");
        let decision = step
            .run(
                HookEvent::Stop,
                None,
                &format!("turn-{turn}"),
                json!({
                    "stop_hook_active": active,
                    "last_assistant_message": answer.content.clone().unwrap_or_default(),
                }),
            )
            .await?;
        if !decision.blocked() {
            return Ok(None);
        }
        let reason = decision
            .reason
            .unwrap_or_else(|| "(no reason given)".into());
        let text = format!(
            "{STOP_HOOK_PREFIX}{reason}\nThe work is not accepted as finished yet: keep working \
             until this is resolved, then answer again."
        );
        let message = ChatMessage::user(&text);
        self.save_user_message(turn, &message, &text, json!({"stop_hook": turn}))
            .await?;
        Ok(Some(message))
    }

    /// `" (max_output_tokens N)"` when the model's settings set the limit.
    fn limit_note(&self) -> String {
        match self.client.config().max_output_tokens {
            Some(n) => format!(" (max_output_tokens {n})"),
            None => String::new(),
        }
    }

    /// Adds the input a parent sent since `seen` (agent_send_input) as user messages.
    async fn take_input(
        &self,
        turn: i64,
        seen: &mut i64,
        conversation: &mut Vec<ChatMessage>,
    ) -> Result<(), Halt> {
        let events = self.ctx.store.events(self.task.id, *seen, 1000).await?;
        for event in events {
            *seen = (*seen).max(event.seq);
            if event.kind != EventKind::Input.as_str() {
                continue;
            }
            let text = event.data["text"].as_str().unwrap_or_default();
            let message = ChatMessage::user(format!("{INPUT_PREFIX}{}):\n{text}", event.seq));
            self.save_user_message(turn, &message, text, json!({"input": event.seq}))
                .await?;
            conversation.push(message);
        }
        Ok(())
    }

    /// Runs the calls of one reply, in the registry's order: runs of read-only calls together,
    /// each mutating call alone. Returns an end when the attempt must stop here.
    async fn run_calls(
        &mut self,
        turn: i64,
        calls: &[(usize, orchestrator_types::ToolCallRequest)],
        conversation: &mut Vec<ChatMessage>,
        resuming: bool,
    ) -> Result<Option<AgentEnd>, Halt> {
        self.environment_ready().await?;
        let records = if resuming {
            self.ctx.store.tool_calls(self.task.id).await?
        } else {
            Vec::new()
        };
        // Each result is bounded when it is recorded, never cut later: by what the window has
        // left, shared among the reply's calls. Cut results keep head and tail and name the full
        // output, which retrieve_tool_result reads.
        let tool_ctx = self
            .tool_ctx
            .clone()
            .with_limits(orchestrator_tools::Limits {
                max_result_bytes: self.result_bytes(conversation, calls.len()),
            });
        self.session.set_context(self.context_status(conversation));
        let mut i = 0;
        while i < calls.len() {
            let mut j = i + 1;
            if self.registry.is_read_only(&calls[i].1.name) {
                while j < calls.len() && self.registry.is_read_only(&calls[j].1.name) {
                    j += 1;
                }
            }
            let group = calls[i..j].iter().map(|(position, call)| {
                let record = records.iter().find(|r| r.call_id == call.id);
                calls::run_call(
                    self.ctx,
                    &self.session,
                    &self.registry,
                    &tool_ctx,
                    self.stop,
                    turn,
                    *position as i64,
                    call,
                    record,
                )
            });
            let results = futures_util::future::join_all(group).await;
            for (result, (_, call)) in results.into_iter().zip(&calls[i..j]) {
                match result? {
                    calls::CallEnd::Answered(message, usage, wrote, hooks_wrote) => {
                        // What the next checkpoint reads: the paths a file tool says it wrote,
                        // or the whole workspace after any other call that may change files (a
                        // turn of read-only calls costs nothing).
                        if let Some(saver) = self.checkpoints.as_mut() {
                            match wrote {
                                Some(paths) if self.registry.may_change_files(&call.name) => {
                                    saver.wrote(paths);
                                }
                                _ if !self.registry.is_read_only(&call.name) || hooks_wrote => {
                                    saver.touched()
                                }
                                _ => {}
                            }
                        }
                        conversation.push(message);
                        if let Some(u) = usage {
                            count_tokens(&self.ctx.metrics, u);
                            self.tool_usage.add(u);
                        }
                    }
                    calls::CallEnd::Paused => {}
                    calls::CallEnd::Stopped => return Ok(Some(AgentEnd::Stopped)),
                }
            }
            if let Some(pause) = self.session.pause() {
                return Ok(Some(match pause {
                    session::Pause::Waiting { call_id, approval } => {
                        let reason = format!("tool call {call_id} waits for approval {approval}");
                        self.notification_hooks(approval, &reason).await?;
                        AgentEnd::Wait { reason, approval }
                    }
                    session::Pause::Broken(message) => AgentEnd::Retryable(message),
                }));
            }
            // A call that may have changed files is saved before the next one starts: a long
            // command after an edit is the common shape, and a machine that dies in it must not
            // take the edit with it.
            if j == i + 1 && self.registry.may_change_files(&calls[i].1.name) {
                self.checkpoint(turn).await?;
            }
            i = j;
        }
        Ok(None)
    }
}

/// The last assistant reply's calls that have no result message yet, with their positions in the
/// reply, and the reply's turn.
fn unanswered_calls(
    saved: &[SavedMessage],
) -> Option<(i64, Vec<(usize, orchestrator_types::ToolCallRequest)>)> {
    let at = saved
        .iter()
        .rposition(|m| m.message.role == Role::Assistant)?;
    let reply = &saved[at];
    let answered: Vec<&str> = saved[at + 1..]
        .iter()
        .filter_map(|m| m.message.tool_call_id.as_deref())
        .collect();
    let pending: Vec<_> = reply
        .message
        .tool_calls
        .iter()
        .cloned()
        .enumerate()
        .filter(|(_, c)| !answered.contains(&c.id.as_str()))
        .collect();
    (!pending.is_empty()).then_some((reply.turn, pending))
}

/// How a parent's input begins as a user message; the event number follows, so a resumed agent
/// knows which inputs it already has.
const INPUT_PREFIX: &str = context::PERSON_INPUT_PREFIX;

fn input_seq(message: &ChatMessage) -> Option<i64> {
    if message.role != Role::User {
        return None;
    }
    let rest = message.content.as_deref()?.strip_prefix(INPUT_PREFIX)?;
    rest.split(')').next()?.parse().ok()
}

/// Makes every tool call id of `message` unique within the task: a server that sends no ids gets
/// `call_{index}` from the client on every turn, and some servers repeat their own. Approvals and
/// tool call rows are keyed by id, so a repeated one would find another call's approval.
fn unique_call_ids(
    message: &mut ChatMessage,
    turn: i64,
    used: &mut std::collections::HashSet<String>,
) {
    for (position, call) in message.tool_calls.iter_mut().enumerate() {
        if call.id.trim().is_empty() || used.contains(&call.id) {
            let base = format!("call_t{turn}_{position}");
            let mut id = base.clone();
            let mut n = 1;
            while used.contains(&id) {
                n += 1;
                id = format!("{base}_{n}");
            }
            call.id = id;
        }
        used.insert(call.id.clone());
    }
}

/// The messages that answer a reply the output token limit cut off: each of its calls "not run",
/// and, for a reply of text only, a request to go on.
fn cut_answers(message: &ChatMessage, turn: i64, limit: &str) -> Vec<NewMessage> {
    let saved = |message: ChatMessage| NewMessage {
        turn,
        message,
        usage: None,
        model_ms: None,
    };
    if message.tool_calls.is_empty() {
        return vec![saved(ChatMessage::user(format!(
            "Your reply was cut off by the output token limit{limit}, so it is not taken as your \
             final answer. Go on from where it stopped, more briefly."
        )))];
    }
    message
        .tool_calls
        .iter()
        .map(|call| {
            saved(ChatMessage::tool(
                &call.id,
                format!(
                    "Not run: your reply was cut off by the output token limit{limit} while you \
                     wrote its tool calls, so none of them ran (their arguments may be \
                     incomplete). Send the calls again, fewer or smaller at a time (for a large \
                     file, write it in parts)."
                ),
            ))
        })
        .collect()
}
