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
//!   goes straight to the gates instead of asking the model again, unless gates already judged
//!   that answer and failed (a person's retry), when the model is told what failed and works on.
//!
//! What a reply must be before it is acted on: each tool call id unique within the task (servers
//! that send none, or repeat them, get ids made up from the turn), and a reply the output token
//! limit cut off (`finish_reason: length`) is neither an answer nor a call to run. Its calls are
//! answered "not run" and its text gets a request to go on; a reply cut off before it said anything
//! fails the task with the reason.
//!
//! Budgets: turns, tokens (the server's counts; an estimate where it sends none, marked so), and
//! seconds of agent work: model calls and tool calls summed over the run's attempts, so time spent
//! waiting for a person, queued or backing off does not count. A run is the task's attempts since
//! it was created or since a person last retried it: a retry gives the budgets back. A model call
//! in flight stops when the time budget runs out.
//!
//! Streamed pieces of a reply go to the live channel only; the store sees whole messages.

mod budget;
mod calls;
mod compaction;
pub mod context;
pub mod hooks;
pub mod instructions;
mod lost;
mod mcp;
mod model_call;
mod on_demand;
mod opening;
pub(crate) mod policy;
mod prompt;
mod retry;
pub mod roles;
mod session;
pub mod tools;
mod turns;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use context::Limits;
use orchestrator_store::{Lease, Task};
use orchestrator_tools::{Profile, Registry};
use orchestrator_types::{ModelSpec, ToolCallRequest, Usage};
use tokio::sync::broadcast;

use crate::model::{ClientConfig, Delta, ModelClient, ToolDefinition};
use crate::runner::{RunContext, Stop};
pub use policy::{automation_default_policy, effective_policy};
pub(crate) use session::Session;

/// Longest text of a message kept in its event (the message itself is saved whole).
const EVENT_TEXT_CHARS: usize = 2000;

/// Most prompt tokens the first request of a task may carry, by profile: the system prompt, a
/// short task prompt and every tool definition sent, counted as the agent bench counts them (four
/// bytes of the request body to a token, [`crate::model::estimate_tokens`]), with or without a
/// GitHub configured. Minimal and coding are DESIGN.md's targets, so that an 8k-context model has
/// room to work; full, for which the design names none, gets the same share of a 16k window as
/// coding has of an 8k one, with a GitHub configured or not: the tools few turns need (terminals,
/// GitHub, PR attempts) are offered on demand (`on_demand.rs`), not sent. The agent bench prints
/// the figures and a worker test fails past them.
pub const FIRST_REQUEST_TARGETS: [(Profile, u64); 3] = [
    (Profile::Minimal, 1_500),
    (Profile::Coding, 4_000),
    (Profile::Full, 8_000),
];

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
    /// Where repository tasks' workspaces and the mirrors go, and the repositories' credentials;
    /// `None` when the daemon has none, and repository tasks then fail saying so.
    pub workspaces: Option<Arc<crate::workspace::WorkspaceSettings>>,
    /// The largest workspace checkpoint saved, in bytes of patch; `None` for
    /// [`orchestrator_store::DEFAULT_CHECKPOINT_CAP`].
    pub checkpoint_cap_bytes: Option<u64>,
    /// The person's hooks (`[hooks]` of the config): programs run at the steps of the work.
    pub hooks: hooks::Hooks,
    /// Which repository files are instructions for agents, and how much of them is read.
    pub instructions: instructions::InstructionsConfig,
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
    /// The workspace's environment, made while the first request went out, failed: the
    /// environment step's own end says how the attempt ends.
    EnvironmentFailed,
}

/// Runs the agent part of an attempt.
pub(crate) async fn run_agent(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    stop: &Stop,
    jail: Option<&orchestrator_sandbox::Jail>,
    environment: Option<crate::runner::EnvironmentReady>,
) -> crate::Result<AgentEnd> {
    let mut environment = environment;
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
        Ok(client) => client
            .with_cache_key(format!("orchestrator-task-{}", task.id))
            .for_task(task.id),
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
            .with_model_images(client.model(), client.config().images)
            .with_output_recorder(Arc::new(crate::gate::live::BackgroundLogs {
                store: ctx.store.clone(),
                lease: lease.clone(),
                attempt: session.attempt(),
                cap: ctx.log_cap_bytes,
            })),
        Err(e) => {
            return Ok(AgentEnd::Failed(format!(
                "the workspace {workspace} cannot be used: {e}"
            )));
        }
    };
    // The task's MCP servers start in its jail before the first turn, so the tool list is whole
    // from the start; each outcome is an event, and a required server that failed makes the
    // attempt fail for a reason that may pass. They start in the workspace's environment.
    if !task.agent.mcp_servers.is_empty()
        && let Some(mut ready) = environment.take()
        && !ready.wait().await
    {
        return Ok(AgentEnd::EnvironmentFailed);
    }
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
    // The catalog keeps the denied tools, so request_permissions can say a request for one is
    // denied by policy; the model is not offered them.
    registry.withhold_denied(&session.policy);
    // Sorted by name, so the tools' bytes are the same in every request and after a resume: a
    // prompt cache matches only an identical prefix.
    let mut definitions: Vec<ToolDefinition> = registry
        .list()
        .into_iter()
        .map(|t| ToolDefinition::new(t.name, t.description, t.input_schema))
        .collect();
    definitions.sort_by(|a, b| a.name.cmp(&b.name));
    // Groups few turns need go out only once the model loads them (on_demand.rs).
    let (mut definitions, on_demand) = on_demand::OnDemand::split(definitions);
    if let Some(loader) = on_demand.spec() {
        definitions.push(ToolDefinition::new(
            loader.name.clone(),
            loader.description.clone(),
            loader.input_schema.clone(),
        ));
        definitions.sort_by(|a, b| a.name.cmp(&b.name));
        if let Err(e) = registry.register(loader) {
            return Err(crate::Error::Config(format!("tool registration: {e}")));
        }
    }
    // Checkpoints only for a workspace made from a repository at a recorded base; a task on a
    // plain path does no checkpoint work on its turns.
    let checkpoints = match crate::workspace::checkpoint::Saver::start(
        &ctx.store,
        task.id,
        std::path::Path::new(&workspace),
        ctx.agent
            .checkpoint_cap_bytes
            .unwrap_or(orchestrator_store::DEFAULT_CHECKPOINT_CAP),
        &ctx.worker_id,
    )
    .await
    {
        Ok(saver) => saver,
        Err(e) => return Ok(AgentEnd::Retryable(e.to_string())),
    };
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
        on_demand,
        limits,
        compaction_turns: Vec::new(),
        reads: std::collections::HashMap::new(),
        tool_usage: Usage::default(),
        checkpoints,
        environment,
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
    /// The tools sent with every request: those sent from the start, then the ones loaded since.
    definitions: Vec<ToolDefinition>,
    /// The tools held back until the model loads them.
    on_demand: on_demand::OnDemand,
    /// The model's window and where compaction starts.
    limits: Limits,
    /// The turn of each compaction of the task so far.
    compaction_turns: Vec<i64>,
    /// The turns at which each file was read (read_file), to see a re-read loop after compactions.
    reads: std::collections::HashMap<String, Vec<i64>>,
    /// Model tokens tool calls spent since the budget last counted them (llm_query_batched).
    tool_usage: Usage,
    /// Saves the workspace after the turns that change it; `None` for a workspace without a base.
    checkpoints: Option<crate::workspace::checkpoint::Saver>,
    /// The workspace's environment while it is still being made (see `Agent::environment_ready`).
    environment: Option<crate::runner::EnvironmentReady>,
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
    /// Waits for the workspace's environment when it is still being made. Everything that acts
    /// on the workspace or on a model's answer (a tool call, a hook, a checkpoint, a compaction,
    /// the answer itself) comes after it; only the first request goes out before.
    async fn environment_ready(&mut self) -> Result<(), Halt> {
        if let Some(mut ready) = self.environment.take()
            && !ready.wait().await
        {
            return Err(Halt::End(AgentEnd::EnvironmentFailed));
        }
        Ok(())
    }

    /// Saves a checkpoint of the workspace after `turn`, when the task takes checkpoints and the
    /// turn changed the workspace. Right after the turn's messages are saved, fenced by the lease.
    async fn checkpoint(&mut self, turn: i64) -> Result<(), Halt> {
        self.environment_ready().await?;
        if let Some(saver) = self.checkpoints.as_mut() {
            saver
                .after_turn(&self.ctx.store, self.lease, self.task.attempt, turn)
                .await?;
        }
        Ok(())
    }

    /// Before an attempt ends in the middle of a turn's calls: a pause for a person (the task
    /// waits without a lease, and any machine may take it up) or a stop (a hand-back on
    /// shutdown), the workspace as those calls left it is saved too. A save that fails changes
    /// nothing about how the attempt ends.
    async fn checkpoint_before(&mut self, end: AgentEnd, turn: i64) -> AgentEnd {
        if self.environment_ready().await.is_err() {
            return AgentEnd::EnvironmentFailed;
        }
        if matches!(end, AgentEnd::Wait { .. } | AgentEnd::Stopped)
            && let Some(saver) = self.checkpoints.as_mut()
            && let Err(e) = saver
                .after_turn(&self.ctx.store, self.lease, self.task.attempt, turn)
                .await
        {
            tracing::debug!(task = %self.task.id, "no checkpoint as the attempt ends: {e}");
        }
        end
    }

    /// Adds to the requests the tools that `load_tools` calls among `calls` asked for.
    fn load_on_demand<'c>(&mut self, calls: impl IntoIterator<Item = &'c ToolCallRequest>) {
        for call in calls {
            let loaded = self.on_demand.take(call);
            self.definitions.extend(loaded);
        }
    }

    /// Saves a user message the loop adds at `turn` (a parent's input, what failed gates said),
    /// with its `message` event carrying `event` besides the turn, the role and the clipped text.
    async fn save_user_message(
        &self,
        turn: i64,
        message: &orchestrator_types::ChatMessage,
        text: &str,
        event: serde_json::Value,
    ) -> Result<(), Halt> {
        let mut data = serde_json::json!({"turn": turn, "role": "user", "text": clip(text)});
        if let (Some(data), serde_json::Value::Object(extra)) = (data.as_object_mut(), event) {
            data.extend(extra);
        }
        self.ctx
            .store
            .append_messages(
                self.lease,
                self.task.attempt,
                &[orchestrator_store::NewMessage {
                    turn,
                    message: message.clone(),
                    usage: None,
                    model_ms: None,
                }],
                (orchestrator_types::EventKind::Message, data),
            )
            .await?;
        Ok(())
    }

    async fn run(&mut self, prompt: &str, workspace: &str) -> crate::Result<AgentEnd> {
        match self.turns(prompt, workspace).await {
            Ok(end) | Err(Halt::End(end)) => Ok(end),
            Err(Halt::Store(e)) => Err(crate::Error::Store(e)),
        }
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
