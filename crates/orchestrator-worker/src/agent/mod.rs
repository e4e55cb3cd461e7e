//! The agent loop: turns of a model conversation, each saved whole, with the tool calls it asks for
//! run through the registry, until the model answers without calling a tool or a budget runs out.
//!
//! Durability, step by step:
//! - the first attempt saves the system prompt and the user's prompt as messages 1 and 2;
//! - each model reply is saved as soon as it is complete, before any of its tool calls runs, so a
//!   restart never asks the model for the same turn twice;
//! - each tool call gets a `started` row before it runs and its result message with its end, in one
//!   transaction; a restart that finds a `started` row without a result tells the model the call was
//!   interrupted instead of running it again behind its back;
//! - a call that needs a person's answer pauses the attempt (`Wait`); the resumed attempt runs the
//!   remaining calls of that reply, then asks the model for the next turn;
//! - a conversation whose last message is the model's final answer is finished: a resumed attempt
//!   goes straight to the gates instead of asking the model again.
//!
//! What a reply must be before it is acted on: each tool call id unique within the task (servers
//! that send none, or repeat them, get ids made up from the turn), and a reply the output token
//! limit cut off (`finish_reason: length`) is neither an answer nor a call to run. Its calls are
//! answered "not run" and its text gets a request to go on; a reply cut off before it said anything
//! fails the task with the reason.
//!
//! Budgets: turns, tokens (the server's counts; an estimate where it sends none, marked so), and
//! seconds of agent work: model calls and tool calls summed over attempts, so time spent waiting
//! for a person, queued or backing off does not count. A model call in flight stops when the time
//! budget runs out.
//!
//! Streamed pieces of a reply go to the live channel only; the store sees whole messages.

mod calls;
mod compaction;
pub mod context;
mod mcp;
pub(crate) mod policy;
mod prompt;
pub mod roles;
mod session;
pub mod tools;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use compaction::{Compaction, read_path};
use context::Limits;
use orchestrator_store::{Lease, NewMessage, SavedMessage, Task};
use orchestrator_tools::{Profile, Registry};
use orchestrator_types::{ChatMessage, EventKind, ModelSpec, Role, Usage};
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use crate::model::{
    ClientConfig, Delta, ModelClient, ModelError, ModelReply, ToolDefinition, WindowSource,
};
use crate::runner::{RunContext, Stop};
pub use policy::{automation_default_policy, effective_policy};
pub(crate) use session::Session;

/// Longest text of a message kept in its event (the message itself is saved whole).
const EVENT_TEXT_CHARS: usize = 2000;
/// Replies cut off by the output token limit in a row before the agent gives up.
const MAX_CUT_REPLIES: u32 = 3;
/// What a finish reason of `length` means: the output token limit cut the reply.
const FINISH_LENGTH: &str = "length";

/// A piece of live output of a task, for whoever follows it in this process.
#[derive(Debug, Clone)]
pub struct LiveDelta {
    pub task: orchestrator_types::TaskId,
    pub delta: Delta,
}

/// What the agent needs from its worker besides the task.
#[derive(Debug, Clone, Default)]
pub struct AgentConfig {
    /// The model of tasks that name none.
    pub default_model: Option<ModelSpec>,
    pub client: ClientConfig,
    /// Streamed pieces of replies, for `orchestrator run` and anyone else in this process.
    pub live: Option<broadcast::Sender<LiveDelta>>,
    /// The GitHub client of the github_* tools; `None` when no GitHub is configured, and the tools
    /// then say how to configure one.
    pub github: Option<orchestrator_github::GitHub>,
    /// The search backend of web_search, from the config.
    pub web_search: Option<Arc<orchestrator_tools::WebSearchConfig>>,
    /// The config's `[mcp_servers]`, from which each task selects by name.
    pub mcp_servers:
        Arc<std::collections::BTreeMap<String, orchestrator_tools::mcp::McpServerConfig>>,
    /// The config's `[lsp_servers]`: started in the task's jail when a file they serve is asked
    /// about or edited.
    pub lsp_servers: Vec<orchestrator_tools::lsp::LspServer>,
    /// The config's `[agent_roles]`, beside the built-in roles of agent_spawn.
    pub roles: Arc<std::collections::BTreeMap<String, roles::RoleDef>>,
}

/// How the agent part of an attempt ended.
#[derive(Debug)]
pub enum AgentEnd {
    /// The model answered without calling a tool: the gates decide now.
    Finished,
    /// A call waits on a person.
    Wait { reason: String, approval: i64 },
    /// The agent cannot go on, and trying again will not help (budget spent, bad key, unknown model).
    Failed(String),
    /// The agent could not go on for a reason that may pass (model server down, stream cut).
    Retryable(String),
    /// The attempt was stopped (cancel, shutdown, lost lease); the runner knows why.
    Stopped,
    /// The lease is gone: nothing more may be written.
    LeaseLost,
}

/// Runs the agent part of an attempt.
pub async fn run_agent(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    stop: &Stop,
    jail: Option<&orchestrator_sandbox::Jail>,
) -> crate::Result<AgentEnd> {
    let Some(prompt) = task.prompt.clone() else {
        return Ok(AgentEnd::Finished);
    };
    let Some(workspace) = task.workspace.clone() else {
        return Ok(AgentEnd::Failed("an agent task needs a workspace".into()));
    };
    let Some(spec) = task
        .model
        .clone()
        .or_else(|| ctx.agent.default_model.clone())
    else {
        return Ok(AgentEnd::Failed(
            "no model is configured: give the task --model and --base-url, or set [model] in the \
             config file"
                .into(),
        ));
    };
    let client = match ModelClient::new(&spec, ctx.agent.client.clone()) {
        Ok(client) => client.with_cache_key(format!("orchestrator-task-{}", task.id)),
        Err(e) => return Ok(AgentEnd::Failed(e.to_string())),
    };
    let profile: Profile = match task.agent.profile.parse() {
        Ok(p) => p,
        Err(e) => return Ok(AgentEnd::Failed(e)),
    };
    let policy = match effective_policy(task) {
        Ok(p) => p,
        Err(e) => return Ok(AgentEnd::Failed(e)),
    };
    // What a person granted this task (request_permissions) holds in every attempt.
    let policy = match tools::with_grants(policy, &ctx.store, task.id).await {
        Ok(p) => p,
        Err(e) => return Ok(AgentEnd::Retryable(e)),
    };
    let catalog = tools::Catalog::default();
    let session = Arc::new(Session::new(
        ctx.store.clone(),
        task.clone(),
        lease.clone(),
        ctx.worker_id.clone(),
        policy.clone(),
        policy::rank(profile),
        stop.token().clone(),
    ));
    let mut registry = Registry::new(profile);
    let github = ctx.agent.github.is_some();
    let automations =
        match tools::may_manage_automations(&ctx.store, task, session.policy.task_scope).await {
            Ok(may) => may,
            Err(e) => return Ok(AgentEnd::Retryable(e.to_string())),
        };
    if let Err(e) = tools::register(
        &mut registry,
        &session,
        ctx,
        Some(client.clone()),
        catalog.clone(),
        Some((profile, github)),
        automations,
    ) {
        return Err(crate::Error::Config(format!("tool registration: {e}")));
    }
    let Some(jail) = jail else {
        return Ok(AgentEnd::Failed(
            "the agent's processes have no sandbox to run in".into(),
        ));
    };
    let tool_ctx = match orchestrator_tools::ToolContext::new(&workspace, std::env::temp_dir())
        .and_then(|c| c.with_policy(policy))
    {
        Ok(c) => c
            .with_jail(jail.clone())
            .with_web_search(ctx.agent.web_search.clone())
            .with_lsp(ctx.agent.lsp_servers.clone())
            .with_model_images(client.model(), client.config().images),
        Err(e) => {
            return Ok(AgentEnd::Failed(format!(
                "the workspace {workspace} cannot be used: {e}"
            )));
        }
    };
    // The task's MCP servers start in its jail before the first turn, so the tool list is whole
    // from the start; each outcome is an event, and a required server that failed makes the
    // attempt fail for a reason that may pass.
    let mcp = match mcp::start_servers(ctx, task, lease, jail, &workspace, &mut registry).await {
        Ok(mcp) => mcp,
        Err(end) => return Ok(end),
    };
    let _ = catalog.set(
        registry
            .specs()
            .map(|spec| (spec.name.clone(), spec.approval))
            .collect(),
    );
    // Sorted by name, so the tools' bytes are the same in every request and after a resume: a
    // prompt cache matches only an identical prefix.
    let mut definitions: Vec<ToolDefinition> = registry
        .list()
        .into_iter()
        .map(|t| ToolDefinition::new(t.name, t.description, t.input_schema))
        .collect();
    definitions.sort_by(|a, b| a.name.cmp(&b.name));
    let window = client.window().await;
    let limits = Limits::new(
        window,
        client.config().max_output_tokens,
        client.config().compact_at,
    );
    let mut agent = Agent {
        ctx,
        task,
        lease,
        stop,
        session,
        registry,
        tool_ctx,
        client,
        definitions,
        limits,
        compaction_turns: Vec::new(),
        reads: std::collections::HashMap::new(),
        tool_usage: Usage::default(),
    };
    let end = agent.run(&prompt, &workspace).await;
    agent.tool_ctx.shutdown().await;
    agent.session.stop_jobs();
    if let Some(mcp) = mcp {
        mcp.shutdown().await;
    }
    end
}

struct Agent<'a> {
    ctx: &'a RunContext,
    task: &'a Task,
    lease: &'a Lease,
    stop: &'a Stop,
    session: Arc<Session>,
    registry: Registry,
    tool_ctx: orchestrator_tools::ToolContext,
    client: ModelClient,
    definitions: Vec<ToolDefinition>,
    /// The model's window and where compaction starts.
    limits: Limits,
    /// The turn of each compaction of the task so far.
    compaction_turns: Vec<i64>,
    /// The turns at which each file was read (read_file), to see a re-read loop after compactions.
    reads: std::collections::HashMap<String, Vec<i64>>,
    /// Model tokens tool calls spent since the budget last counted them (llm_query_batched).
    tool_usage: Usage,
}

/// Adds a model call's tokens to this process's counters.
fn count_tokens(metrics: &crate::metrics::Metrics, u: Usage) {
    metrics
        .prompt_tokens
        .fetch_add(u.prompt_tokens, Ordering::Relaxed);
    metrics
        .cached_tokens
        .fetch_add(u.cached_tokens, Ordering::Relaxed);
    metrics
        .completion_tokens
        .fetch_add(u.completion_tokens, Ordering::Relaxed);
}

/// Why a model call gave no reply.
enum Refusal {
    /// The request does not fit the server's context window.
    Overflow(String),
    End(AgentEnd),
}

/// What a store write's failure means for the loop.
enum Halt {
    End(AgentEnd),
    Store(orchestrator_store::Error),
}

impl From<orchestrator_store::Error> for Halt {
    fn from(e: orchestrator_store::Error) -> Self {
        match e {
            orchestrator_store::Error::StaleLease { .. } => Halt::End(AgentEnd::LeaseLost),
            other => Halt::Store(other),
        }
    }
}

impl Agent<'_> {
    async fn run(&mut self, prompt: &str, workspace: &str) -> crate::Result<AgentEnd> {
        match self.turns(prompt, workspace).await {
            Ok(end) | Err(Halt::End(end)) => Ok(end),
            Err(Halt::Store(e)) => Err(crate::Error::Store(e)),
        }
    }

    async fn turns(&mut self, prompt: &str, workspace: &str) -> Result<AgentEnd, Halt> {
        let mut saved = self.ctx.store.messages(self.task.id).await?;
        if saved.is_empty() {
            let system = prompt::system_prompt(
                &self.task.gates,
                &self.task.acceptance,
                workspace,
                &self.registry,
                self.task.agent.role.as_ref(),
            );
            let user = prompt::user_prompt(self.task, prompt);
            // A forked child starts with its parent's conversation, byte for byte (a prompt cache
            // matches it), and its own task after it.
            let mut first: Vec<NewMessage> = match self.task.agent.fork {
                Some(fork) => self
                    .ctx
                    .store
                    .messages(orchestrator_types::TaskId(fork.task))
                    .await?
                    .into_iter()
                    .filter(|m| m.seq >= fork.from_seq && m.seq <= fork.through_seq)
                    .map(|m| NewMessage {
                        turn: 0,
                        message: m.message,
                        usage: None,
                        model_ms: None,
                    })
                    .collect(),
                None => Vec::new(),
            };
            let opening = if first.is_empty() {
                first.push(NewMessage {
                    turn: 0,
                    message: ChatMessage::system(system),
                    usage: None,
                    model_ms: None,
                });
                user
            } else {
                prompt::forked_prompt(self.task, prompt)
            };
            first.push(NewMessage {
                turn: 0,
                message: ChatMessage::user(opening),
                usage: None,
                model_ms: None,
            });
            self.ctx
                .store
                .append_messages(
                    self.lease,
                    self.task.attempt,
                    &first,
                    (
                        EventKind::Message,
                        json!({"turn": 0, "role": "user", "text": clip(prompt)}),
                    ),
                )
                .await?;
            saved = self.ctx.store.messages(self.task.id).await?;
        }
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
        let mut budget = Budget::of_saved(&saved, &self.ctx.store.tool_calls(self.task.id).await?);
        budget.estimate_missing(&saved, &starts, &self.definitions);
        let mut turn = saved.iter().map(|m| m.turn).max().unwrap_or(0);
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

        // The model already gave its final answer; the attempt that saved it did not get to the
        // gates (handed back, killed, a gate that could not run). Asking again would spend a turn
        // and could change the answer.
        if saved
            .last()
            .is_some_and(|m| m.message.role == Role::Assistant && m.message.tool_calls.is_empty())
        {
            return Ok(AgentEnd::Finished);
        }

        // A reply whose tool calls did not all get results: finish them first.
        if let Some(pending) = unanswered_calls(&saved) {
            let (reply_turn, calls) = pending;
            if let Some(end) = self
                .run_calls(reply_turn, &calls, &mut conversation, true)
                .await?
            {
                return Ok(end);
            }
        }

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
            if turn >= i64::from(limits.max_turns) {
                return Ok(AgentEnd::Failed(format!(
                    "the turn budget of {} turns is spent and the model was still calling tools",
                    limits.max_turns
                )));
            }
            if let Some(max) = limits.max_tokens
                && budget.usage.total_tokens >= max
            {
                return Ok(AgentEnd::Failed(format!(
                    "the token budget of {max} tokens is spent ({} used{})",
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
            let reply = match self.ask_model(&conversation, time_left).await? {
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
            budget.work_ms += millis_since(asked);
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
            self.ctx
                .store
                .append_messages(
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
                return Ok(AgentEnd::Finished);
            }
            if let Some(stall) = self.note_reads(turn, &message.tool_calls) {
                return Ok(AgentEnd::Failed(stall));
            }
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
                return Ok(end);
            }
            budget.work_ms += millis_since(calls_started);
        }
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
            self.ctx
                .store
                .append_messages(
                    self.lease,
                    self.task.attempt,
                    &[NewMessage {
                        turn,
                        message: message.clone(),
                        usage: None,
                        model_ms: None,
                    }],
                    (
                        EventKind::Message,
                        json!({"turn": turn, "role": "user", "text": clip(text), "input": event.seq}),
                    ),
                )
                .await?;
            conversation.push(message);
        }
        Ok(())
    }

    /// One model call, with its pieces sent live and its retries recorded as events.
    async fn ask_model(
        &self,
        conversation: &[ChatMessage],
        time_left: Option<Duration>,
    ) -> Result<Result<ModelReply, Refusal>, Halt> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Delta>();
        let live = self.ctx.agent.live.clone();
        let store = self.ctx.store.clone();
        let lease = self.lease.clone();
        let task = self.task.id;
        let forward = tokio::spawn(async move {
            while let Some(delta) = rx.recv().await {
                if let Delta::Retrying {
                    attempt,
                    cause,
                    error,
                } = &delta
                {
                    let _ = store
                        .append_event(
                            &lease,
                            EventKind::ModelRetry,
                            json!({"attempt": attempt, "cause": cause, "error": error}),
                        )
                        .await;
                }
                if let Some(live) = &live {
                    let _ = live.send(LiveDelta { task, delta });
                }
            }
        });
        let out_of_time = async {
            match time_left {
                Some(left) => tokio::time::sleep(left).await,
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            reply = self.client.complete(conversation, &self.definitions, Some(&tx)) => Ok(reply),
            () = self.stop.token().cancelled() => Err(AgentEnd::Stopped),
            () = out_of_time => Err(AgentEnd::Failed(format!(
                "{} while the model was writing its reply",
                time_spent(self.task.agent.max_seconds.unwrap_or_default())
            ))),
        };
        drop(tx);
        let _ = forward.await;
        Ok(match outcome {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e @ ModelError::ContextOverflow { .. })) => {
                Err(Refusal::Overflow(e.to_string()))
            }
            Ok(Err(e)) => Err(Refusal::End(model_failure(&e))),
            Err(end) => Err(Refusal::End(end)),
        })
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
            for result in results {
                match result? {
                    calls::CallEnd::Answered(message, usage) => {
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
                    session::Pause::Waiting { call_id, approval } => AgentEnd::Wait {
                        reason: format!("tool call {call_id} waits for approval {approval}"),
                        approval,
                    },
                    session::Pause::Broken(message) => AgentEnd::Retryable(message),
                }));
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

/// What a failed model call means for the task.
fn model_failure(e: &ModelError) -> AgentEnd {
    let message = format!("model call failed ({}): {e}", e.cause());
    if e.is_retryable() {
        AgentEnd::Retryable(message)
    } else {
        AgentEnd::Failed(message)
    }
}

fn time_spent(max: u64) -> String {
    format!("the time budget of {max} s of agent work (model and tool calls) is spent")
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

/// What a budget has spent so far: tokens (with how many of them are estimates) and milliseconds
/// of agent work.
#[derive(Debug, Default)]
struct Budget {
    usage: Usage,
    estimated_tokens: u64,
    work_ms: i64,
}

impl Budget {
    /// What earlier attempts spent: their replies' usage and model time, their calls' time.
    fn of_saved(saved: &[SavedMessage], calls: &[orchestrator_store::ToolCallRecord]) -> Budget {
        let mut budget = Budget::default();
        for m in saved {
            if let Some(u) = m.usage {
                budget.usage.add(u);
            }
            budget.work_ms += m.model_ms.unwrap_or(0);
        }
        budget.work_ms += calls.iter().filter_map(|c| c.duration_ms).sum::<i64>();
        budget
    }

    /// Adds an estimate for each saved reply whose server reported no usage.
    /// `starts`: where each compaction's rows begin; a reply was asked with the rows of its own
    /// conversation, not with every row before it.
    fn estimate_missing(
        &mut self,
        saved: &[SavedMessage],
        starts: &[i64],
        tools: &[ToolDefinition],
    ) {
        // A compaction copies replies into its rows; a copy was no model call.
        let mut seen = std::collections::HashSet::new();
        for (at, m) in saved.iter().enumerate() {
            if m.message.role == Role::Assistant
                && !seen.insert(serde_json::to_string(&m.message).unwrap_or_default())
            {
                continue;
            }
            if m.message.role == Role::Assistant && m.usage.is_none() {
                let start = starts.iter().filter(|s| **s <= m.seq).max().copied();
                let before: Vec<ChatMessage> = saved[..at]
                    .iter()
                    .filter(|r| start.is_none_or(|s| r.seq >= s))
                    .map(|m| m.message.clone())
                    .collect();
                self.add_estimate(estimate_usage(&before, tools, &m.message));
            }
        }
    }

    fn add_estimate(&mut self, guess: Usage) {
        self.usage.add(guess);
        self.estimated_tokens += guess.total_tokens;
    }

    fn estimate_note(&self) -> String {
        if self.estimated_tokens == 0 {
            String::new()
        } else {
            format!(
                ", {} of them estimated because the model server did not report usage",
                self.estimated_tokens
            )
        }
    }
}

/// A rough count of the tokens of a request and its reply, for servers that report none: four
/// bytes of JSON to a token, the usual ratio for English and code.
fn estimate_usage(
    conversation: &[ChatMessage],
    tools: &[ToolDefinition],
    reply: &ChatMessage,
) -> Usage {
    let bytes = |m: &ChatMessage| serde_json::to_vec(m).map_or(0, |v| v.len());
    let prompt: usize = conversation.iter().map(bytes).sum::<usize>()
        + tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
            .sum::<usize>();
    let prompt_tokens = crate::model::estimate_tokens(prompt);
    let completion_tokens = crate::model::estimate_tokens(bytes(reply));
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
        cached_tokens: 0,
    }
}

fn clip(text: &str) -> String {
    if text.chars().count() <= EVENT_TEXT_CHARS {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(EVENT_TEXT_CHARS).collect();
    out.push('…');
    out
}

/// How long a tool call took, in milliseconds.
pub(crate) fn millis_since(start: Instant) -> i64 {
    Duration::as_millis(&start.elapsed()) as i64
}
