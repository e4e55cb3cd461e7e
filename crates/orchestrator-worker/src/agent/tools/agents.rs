//! Tasks and sub-agents: task_create, task_list, task_read, task_cancel, and agent_spawn,
//! agent_result, agent_wait, agent_send_input, agent_cancel, agent_list.
//!
//! Every task an agent creates is its child (`parent_id`), so it is listed, capped and canceled with
//! it. A child never gets more than its parent: the same workspace, the parent's effective policy
//! (with its task scope), a profile and a sandbox mode no broader than the parent's, and only gates
//! the parent's policy lets it run as shell commands (see `check_gates`).
//!
//! What an agent reads of other tasks is bounded by its policy's task scope: with `tree` (the
//! default for a task an automation or a trigger created) task_read and task_list see only the
//! task's own tree, the root of its ancestry and that root's descendants.

use std::sync::Arc;
use std::time::Duration;

use orchestrator_store::{Task, TaskFilter};
use orchestrator_tools::{
    ApprovalClass, TaskScope, ToolContext, ToolFailure, ToolResult, ToolSpec, refuse,
};
use orchestrator_types::{ChatMessage, MAX_DEPTH, NewTask, Role, SandboxMode, TaskId, TaskState};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Def, Session, check_gates, schema, spec, store_failure, text};
use crate::agent::policy::profile_name;

/// Longest agent_wait.
const MAX_WAIT_SECS: u64 = 1800;
const DEFAULT_WAIT_SECS: u64 = 300;
/// How often agent_wait looks at its children.
const WAIT_POLL: Duration = Duration::from_millis(250);

/// Longest chain of parents followed to find a task's root; deeper than any chain the depth limit
/// lets agents build.
const MAX_ANCESTRY: u32 = 64;

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct SpawnArgs {
    prompt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<String>,
    #[serde(default)]
    gates: Vec<String>,
    #[serde(default)]
    acceptance: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    fork_context: bool,
}

/// The roles agent_spawn can give: the config's and the built-in ones, and the model a role's
/// model name is resolved against when the parent names none.
#[derive(Clone)]
pub(super) struct Roles {
    pub configured: Arc<std::collections::BTreeMap<String, crate::agent::roles::RoleDef>>,
    pub default_model: Option<orchestrator_types::ModelSpec>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct CreateArgs {
    title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<String>,
    #[serde(default)]
    gates: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdArgs {
    id: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    state: Option<String>,
    limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitArgs {
    #[serde(default)]
    ids: Vec<i64>,
    timeout_secs: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputArgs {
    id: i64,
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// Walks up `task`'s ancestry, at most `limit` parents: the last task reached, how many parents
/// were counted, and whether more lie above the limit (then the count is `limit + 1`).
async fn ancestry(
    session: &Session,
    task: &Task,
    limit: u32,
) -> Result<(TaskId, u32, bool), ToolFailure> {
    let mut top = task.id;
    let mut parent = task.parent_id;
    let mut steps = 0;
    while let Some(id) = parent {
        steps += 1;
        if steps > limit {
            return Ok((top, steps, true));
        }
        top = id;
        parent = session
            .store
            .get_task(id)
            .await
            .map_err(store_failure)?
            .parent_id;
    }
    Ok((top, steps, false))
}

/// How deep `task` is: 0 for a task without a parent (counted no further than one past the
/// deepest allowed).
async fn depth(session: &Session) -> Result<u32, ToolFailure> {
    let (_, depth, _) = ancestry(session, &session.task, MAX_DEPTH + 1).await?;
    Ok(depth)
}

/// A child of this task, or a refusal that says so.
async fn own_child(session: &Session, id: i64) -> Result<Task, ToolFailure> {
    let task = match session.store.get_task(TaskId(id)).await {
        Ok(task) => task,
        Err(orchestrator_store::Error::TaskNotFound(_)) => {
            return Err(refuse(format!(
                "task {id} does not exist; agent_list shows your children"
            )));
        }
        Err(e) => return Err(store_failure(e)),
    };
    if task.parent_id != Some(session.task_id()) {
        return Err(refuse(format!(
            "task {id} is not a child of this task; you may only manage the tasks you created (agent_list)"
        )));
    }
    Ok(task)
}

/// What an agent asks for when it creates a child task.
struct ChildRequest<'a> {
    /// The tool and its arguments, shown to a person who is asked about the child's gates.
    tool: &'a str,
    arguments: serde_json::Value,
    task: NewTask,
    profile: Option<String>,
    sandbox: Option<String>,
    /// Another model than the parent's (a role's).
    model: Option<orchestrator_types::ModelSpec>,
}

/// A child task as it was created: its id and what it was granted.
struct Created {
    id: TaskId,
    profile: &'static str,
    sandbox: SandboxMode,
}

/// A new child task on the parent's terms. Its gates are the agent's: each is decided as a shell
/// command by the parent's policy (and asked about, if the policy says so) before the child exists,
/// and marked as written by an agent, so it runs in the child's sandbox.
async fn create_child(
    session: &Session,
    ctx: &ToolContext,
    request: ChildRequest<'_>,
) -> Result<Created, ToolFailure> {
    let ChildRequest {
        tool,
        arguments,
        task: mut child,
        profile,
        sandbox,
        model,
    } = request;
    let parent = &session.task;
    let depth = depth(session).await?;
    if depth + 1 > MAX_DEPTH {
        return Err(refuse(format!(
            "sub-agents nest at most {MAX_DEPTH} deep and this task is at depth {depth}; do the work yourself"
        )));
    }
    let children = session
        .store
        .children(parent.id)
        .await
        .map_err(store_failure)?;
    let active = children.iter().filter(|t| !t.state.is_terminal()).count() as u32;
    if active >= parent.agent.max_children {
        return Err(refuse(format!(
            "this task already has {active} unfinished children, its limit; wait for one with agent_wait or cancel one"
        )));
    }
    let rank = match profile.as_deref() {
        None => session.profile_rank,
        Some(name) => {
            let requested: orchestrator_tools::Profile = name.parse().map_err(refuse)?;
            crate::agent::policy::rank(requested).min(session.profile_rank)
        }
    };
    let sandbox = match sandbox.as_deref() {
        None => None,
        Some(name) => Some(
            name.parse::<SandboxMode>()
                .map_err(|e| refuse(e.to_string()))?,
        ),
    };
    // Copied, never built anew: the child's policy is the parent's effective one, with the task
    // scope it resolved to, and a sandbox mode no wider than the parent's.
    let policy = session.policy.for_child(sandbox);
    let commands: Vec<&str> = child.gates.iter().map(|g| g.command.as_str()).collect();
    check_gates(session, ctx, tool, &arguments, &commands).await?;
    for gate in &mut child.gates {
        gate.by_agent = true;
    }
    child.workspace = parent.workspace.clone();
    child.parent = Some(parent.id);
    child.queue = parent.queue.clone();
    child.priority = parent.priority;
    child.model = model.or_else(|| parent.model.clone());
    child.agent.profile = profile_name(rank).to_owned();
    child.agent.policy = Some(
        serde_json::to_value(&policy)
            .map_err(|e| refuse(format!("the policy cannot be copied: {e}")))?,
    );
    child.agent.approval_timeout_secs = parent.agent.approval_timeout_secs;
    child.agent.max_children = parent.agent.max_children;
    // A child spends from its parent's budget and takes turns under its parent's key.
    child.budget = parent.budget.clone();
    child.fair_key = (!parent.fair_key.is_empty()).then(|| parent.fair_key.clone());
    child.weight = parent.weight;
    child.validate().map_err(|e| refuse(e.to_string()))?;
    let id = session
        .store
        .create_task_under(&session.lease, &child)
        .await
        .map_err(store_failure)?;
    Ok(Created {
        id,
        profile: profile_name(rank),
        sandbox: policy.sandbox,
    })
}

/// Where a forked child's conversation ends: the parent's current conversation (from its last
/// compaction) up to the message before the reply whose call spawns the child, so the child's
/// prefix is whole (no call without its result) and byte for byte the parent's.
async fn fork_point(
    session: &Session,
    ctx: &ToolContext,
) -> Result<orchestrator_types::ForkPoint, ToolFailure> {
    let Some(call_id) = ctx.call_id() else {
        return Err(refuse("fork_context works only inside an agent task"));
    };
    let task = session.task_id();
    let saved = session.store.messages(task).await.map_err(store_failure)?;
    let Some(reply) = saved
        .iter()
        .rposition(|m| m.message.tool_calls.iter().any(|c| c.id == call_id))
    else {
        return Err(refuse(
            "fork_context: this call's reply is not saved yet; spawn without it",
        ));
    };
    let from_seq = session
        .store
        .events_of_kind(task, orchestrator_types::EventKind::Compacted)
        .await
        .map_err(store_failure)?
        .last()
        .and_then(|e| e.data["first_seq"].as_i64())
        .unwrap_or(0);
    let Some(through) = reply.checked_sub(1).map(|at| saved[at].seq) else {
        return Err(refuse("fork_context: there is no conversation to fork yet"));
    };
    Ok(orchestrator_types::ForkPoint {
        task: task.0,
        from_seq,
        through_seq: through,
    })
}

/// The task scope of this task's policy. The worker fills it in when it reads the policy; a
/// session without one (a registry built for docs) gets the narrow scope.
fn scope(session: &Session) -> TaskScope {
    session.policy.task_scope.unwrap_or(TaskScope::Tree)
}

/// The root of `task`'s tree: the first task of its ancestry, which has no parent.
async fn root_of(session: &Session, task: &Task) -> Result<TaskId, ToolFailure> {
    let (root, _, cut) = ancestry(session, task, MAX_ANCESTRY).await?;
    if cut {
        return Err(refuse(format!(
            "task {} has more than {MAX_ANCESTRY} ancestors, so its tree cannot be told",
            task.id
        )));
    }
    Ok(root)
}

/// The tasks of the tree rooted at `root`: the root and all its descendants.
async fn tree(session: &Session, root: TaskId) -> Result<Vec<Task>, ToolFailure> {
    let mut tasks = vec![session.store.get_task(root).await.map_err(store_failure)?];
    let mut next = vec![root];
    while let Some(id) = next.pop() {
        for child in session.store.children(id).await.map_err(store_failure)? {
            next.push(child.id);
            tasks.push(child);
        }
    }
    Ok(tasks)
}

/// A refusal unless this task may read `task`: with task scope `tree`, only tasks of its own tree.
async fn may_read(session: &Session, task: &Task) -> Result<(), ToolFailure> {
    if scope(session) == TaskScope::All {
        return Ok(());
    }
    let own = root_of(session, &session.task).await?;
    if root_of(session, task).await? != own {
        return Err(refuse(format!(
            "task {} is outside this task's tree: this task's policy (task scope `tree`) lets it \
             read only task {own} and the tasks under it; task_list shows them",
            task.id
        )));
    }
    Ok(())
}

/// Cancels a child of this task (and its own children); agent_cancel and task_cancel share it.
async fn cancel_child(session: &Session, id: i64) -> Result<ToolResult, ToolFailure> {
    let task = own_child(session, id).await?;
    match session.store.cancel_task(task.id).await {
        Ok(outcome) => text(format!("Task {}: {outcome:?}.", task.id)),
        Err(orchestrator_store::Error::WrongState { state, .. }) => {
            Err(refuse(format!("task {} already {state}", task.id)))
        }
        Err(e) => Err(store_failure(e)),
    }
}

/// The last thing a finished agent said.
async fn final_answer(session: &Session, id: TaskId) -> Result<Option<String>, ToolFailure> {
    let messages = session.store.messages(id).await.map_err(store_failure)?;
    Ok(messages
        .iter()
        .rev()
        .map(|m| &m.message)
        .find(|m: &&ChatMessage| m.role == Role::Assistant && m.tool_calls.is_empty())
        .and_then(|m| m.content.clone()))
}

async fn describe(session: &Session, task: &Task) -> Result<serde_json::Value, ToolFailure> {
    let answer = if task.state.is_terminal() {
        final_answer(session, task.id).await?
    } else {
        None
    };
    Ok(json!({
        "id": task.id.0,
        "title": task.title,
        "state": task.state.as_str(),
        "attempt": task.attempt,
        "last_error": task.last_error,
        "final_answer": answer,
    }))
}

fn pretty(value: &serde_json::Value) -> Result<ToolResult, ToolFailure> {
    Ok(ToolResult::text(
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()),
    ))
}

pub(super) fn specs(session: &Arc<Session>, roles: Roles) -> Vec<ToolSpec> {
    vec![
        spec(
            Def {
                name: "agent_spawn",
                description: "Start a sub-agent: a child task working on `prompt` in this workspace, with at most your permissions (profile and sandbox never broader than yours; your policy decides its gates as for exec_shell). For independent pieces of work; it runs in parallel when workers are free. Returns its id; read its answer with agent_wait or agent_result. At most 10 unfinished children by default, 3 levels of nesting.",
                schema: schema(
                    json!({
                        "prompt": {"type": "string", "description": "Self-contained."},
                        "title": {"type": "string"},
                        "profile": {"type": "string", "enum": ["minimal", "coding", "full"]},
                        "sandbox": {"type": "string", "enum": ["read_only", "workspace_write", "full"], "description": "Where its commands may write (default yours)."},
                        "gates": {"type": "array", "items": {"type": "string"}, "description": "Shell commands that must pass for it to succeed."},
                        "acceptance": {"type": "array", "items": {"type": "string"}},
                        "role": {"type": "string", "description": "general (default), explore, plan, review (read only), implementer, verifier (coding) or a configured role: its instructions and default profile."},
                        "fork_context": {"type": "boolean", "description": "Give it this conversation so far, not only the prompt."}
                    }),
                    &["prompt"],
                ),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[
                    ("task", "prompt"),
                    ("instructions", "prompt"),
                    ("agent_type", "role"),
                ],
                example: json!({"prompt": "Find every caller of parse_header and list them with file and line.", "profile": "minimal"}),
            },
            session,
            move |session, args: SpawnArgs, ctx| {
                let roles = roles.clone();
                async move {
                    let arguments = serde_json::to_value(&args).unwrap_or_default();
                    let role = match args.role.as_deref().filter(|r| !r.trim().is_empty()) {
                        None => None,
                        Some(name) => {
                            let Some(def) = crate::agent::roles::find(name, &roles.configured)
                            else {
                                let mut known: Vec<String> = crate::agent::roles::built_in_names()
                                    .into_iter()
                                    .map(str::to_owned)
                                    .collect();
                                known.extend(roles.configured.keys().cloned());
                                known.sort();
                                known.dedup();
                                return Err(refuse(format!(
                                    "agent_spawn: there is no role {name:?}; roles: {}",
                                    known.join(", ")
                                )));
                            };
                            Some((name.to_owned(), def))
                        }
                    };
                    let title = args
                        .title
                        .unwrap_or_else(|| args.prompt.chars().take(60).collect());
                    let mut child = NewTask::agent(title, args.prompt);
                    for gate in args.gates {
                        child = child.with_gate(gate);
                    }
                    child.acceptance = args.acceptance;
                    let mut profile = args.profile;
                    let mut model = None;
                    if let Some((name, def)) = role {
                        profile = profile.or(def.profile);
                        if let Some(name) = def.model {
                            let Some(mut spec) = session
                                .task
                                .model
                                .clone()
                                .or_else(|| roles.default_model.clone())
                            else {
                                return Err(refuse(
                                    "agent_spawn: the role names a model, and this task has no model endpoint to ask it at",
                                ));
                            };
                            spec.model = name;
                            model = Some(spec);
                        }
                        child.agent.role = Some(orchestrator_types::AgentRole {
                            name,
                            instructions: def.instructions,
                        });
                    }
                    if args.fork_context {
                        child.agent.fork = Some(fork_point(&session, &ctx).await?);
                    }
                    let Created {
                        id,
                        profile,
                        sandbox,
                    } = create_child(
                        &session,
                        &ctx,
                        ChildRequest {
                            tool: "agent_spawn",
                            arguments,
                            task: child,
                            profile,
                            sandbox: args.sandbox,
                            model,
                        },
                    )
                    .await?;
                    session
                        .store
                        .append_event(
                            &session.lease,
                            orchestrator_types::EventKind::ChildSpawned,
                            json!({"child": id.0}),
                        )
                        .await
                        .map_err(store_failure)?;
                    text(format!(
                        "Spawned sub-agent task {id} (profile {profile}, sandbox {sandbox}). Use agent_wait {{\"ids\": [{id}]}} to wait for its answer."
                    ))
                }
            },
        ),
        spec(
            Def {
                name: "agent_result",
                description: "The state of a child task and, once it finished, its final answer and error.",
                schema: schema(json!({"id": {"type": "integer"}}), &["id"]),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[("task_id", "id"), ("agent_id", "id")],
                example: json!({"id": 42}),
            },
            session,
            |session, args: IdArgs, _ctx| async move {
                let task = own_child(&session, args.id).await?;
                pretty(&describe(&session, &task).await?)
            },
        ),
        spec(
            Def {
                name: "agent_wait",
                description: "Wait until the given children (all unfinished ones when `ids` is empty) finish, or the timeout (default 300 s); returns each one's state and final answer. Waiting holds a worker; prefer doing other work first.",
                schema: schema(
                    json!({"ids": {"type": "array", "items": {"type": "integer"}}, "timeout_secs": {"type": "integer", "minimum": 1, "maximum": MAX_WAIT_SECS}}),
                    &[],
                ),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[("timeout", "timeout_secs")],
                example: json!({"ids": [42, 43], "timeout_secs": 600}),
            },
            session,
            |session, args: WaitArgs, _ctx| async move {
                let ids: Vec<i64> = if args.ids.is_empty() {
                    session
                        .store
                        .children(session.task_id())
                        .await
                        .map_err(store_failure)?
                        .iter()
                        .filter(|t| !t.state.is_terminal())
                        .map(|t| t.id.0)
                        .collect()
                } else {
                    args.ids
                };
                for id in &ids {
                    own_child(&session, *id).await?;
                }
                let limit = Duration::from_secs(
                    args.timeout_secs
                        .unwrap_or(DEFAULT_WAIT_SECS)
                        .min(MAX_WAIT_SECS),
                );
                let deadline = tokio::time::Instant::now() + limit;
                loop {
                    let mut tasks = Vec::with_capacity(ids.len());
                    for id in &ids {
                        tasks.push(
                            session
                                .store
                                .get_task(TaskId(*id))
                                .await
                                .map_err(store_failure)?,
                        );
                    }
                    let finished = tasks.iter().all(|t| t.state.is_terminal());
                    if finished || tokio::time::Instant::now() >= deadline {
                        let mut out = Vec::with_capacity(tasks.len());
                        for task in &tasks {
                            out.push(describe(&session, task).await?);
                        }
                        return pretty(&json!({"all_finished": finished, "tasks": out}));
                    }
                    tokio::select! {
                        () = tokio::time::sleep(WAIT_POLL) => {}
                        () = session.stop.cancelled() => return Err(refuse("the task is stopping")),
                    }
                }
            },
        ),
        spec(
            Def {
                name: "agent_send_input",
                description: "Send more instructions to an unfinished child; its agent reads them before its next turn.",
                schema: schema(
                    json!({"id": {"type": "integer"}, "text": {"type": "string"}}),
                    &["id", "text"],
                ),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[("message", "text"), ("input", "text")],
                example: json!({"id": 42, "text": "Also check the tests directory."}),
            },
            session,
            |session, args: InputArgs, _ctx| async move {
                let task = own_child(&session, args.id).await?;
                if args.text.trim().is_empty() {
                    return Err(refuse("the input is empty"));
                }
                if task.state.is_terminal() {
                    return Err(refuse(format!(
                        "task {} already {}; spawn a new sub-agent instead",
                        task.id, task.state
                    )));
                }
                session
                    .store
                    .post_input(task.id, &args.text)
                    .await
                    .map_err(store_failure)?;
                text(format!("Sent to task {}.", task.id))
            },
        ),
        spec(
            Def {
                name: "agent_cancel",
                description: "Cancel a child task (and its own children).",
                schema: schema(json!({"id": {"type": "integer"}}), &["id"]),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[("task_id", "id")],
                example: json!({"id": 42}),
            },
            session,
            |session, args: IdArgs, _ctx| async move { cancel_child(&session, args.id).await },
        ),
        spec(
            Def {
                name: "agent_list",
                description: "This task's children (sub-agents and created tasks) with their states.",
                schema: schema(json!({}), &[]),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[],
                example: json!({}),
            },
            session,
            |session, _args: NoArgs, _ctx| async move {
                let children = session
                    .store
                    .children(session.task_id())
                    .await
                    .map_err(store_failure)?;
                let list: Vec<_> = children
                    .iter()
                    .map(|t| json!({"id": t.id.0, "title": t.title, "state": t.state.as_str()}))
                    .collect();
                pretty(&json!({"children": list}))
            },
        ),
        spec(
            Def {
                name: "task_create",
                description: "Create a follow-up task (a child of this one) in this workspace: a verification task when given only gates, or an agent task with a prompt. It runs on its own; prefer agent_spawn when you need its answer.",
                schema: schema(
                    json!({"title": {"type": "string"}, "prompt": {"type": "string"}, "gates": {"type": "array", "items": {"type": "string"}, "description": "Shell commands that must pass; decided by this task's policy like exec_shell."}}),
                    &["title"],
                ),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[("name", "title")],
                example: json!({"title": "nightly check", "gates": ["cargo test --workspace"]}),
            },
            session,
            |session, args: CreateArgs, ctx| async move {
                if args.prompt.is_none() && args.gates.is_empty() {
                    return Err(refuse("give a prompt, gates or both"));
                }
                let arguments = serde_json::to_value(&args).unwrap_or_default();
                let mut task = NewTask::new(args.title);
                task.prompt = args.prompt;
                for gate in args.gates {
                    task = task.with_gate(gate);
                }
                let created = create_child(
                    &session,
                    &ctx,
                    ChildRequest {
                        tool: "task_create",
                        arguments,
                        task,
                        profile: None,
                        sandbox: None,
                        model: None,
                    },
                )
                .await?;
                text(format!("Created task {}.", created.id))
            },
        ),
        spec(
            Def {
                name: "task_list",
                description: "Recent tasks of the orchestrator, newest first, optionally of one state (queued, running, waiting, succeeded, failed, canceled). A task whose policy limits it to its own tree (tasks an automation or a trigger created) sees only that tree.",
                schema: schema(
                    json!({"state": {"type": "string", "enum": ["queued", "running", "waiting", "succeeded", "failed", "canceled"]}, "limit": {"type": "integer", "minimum": 1, "maximum": 100}}),
                    &[],
                ),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[],
                example: json!({"state": "failed", "limit": 10}),
            },
            session,
            |session, args: ListArgs, _ctx| async move {
                let state = match args.state.as_deref() {
                    Some(s) => Some(s.parse::<TaskState>().map_err(|e| refuse(e.to_string()))?),
                    None => None,
                };
                let limit = args.limit.unwrap_or(20).min(100);
                let tasks = match scope(&session) {
                    TaskScope::All => session
                        .store
                        .list_tasks(&TaskFilter {
                            state,
                            queue: None,
                            limit: Some(limit),
                        })
                        .await
                        .map_err(store_failure)?,
                    TaskScope::Tree => {
                        let root = root_of(&session, &session.task).await?;
                        let mut tasks: Vec<Task> = tree(&session, root)
                            .await?
                            .into_iter()
                            .filter(|t| state.is_none_or(|s| t.state == s))
                            .collect();
                        tasks.sort_by_key(|t| std::cmp::Reverse(t.id.0));
                        tasks.truncate(limit as usize);
                        tasks
                    }
                };
                let list: Vec<_> = tasks
                    .iter()
                    .map(|t| json!({"id": t.id.0, "title": t.title, "state": t.state.as_str(), "parent": t.parent_id.map(|p| p.0)}))
                    .collect();
                pretty(&json!({"tasks": list}))
            },
        ),
        spec(
            Def {
                name: "task_read",
                description: "One task: state, error, checklist, gates with verdicts, and its final answer when it finished. A task whose policy limits it to its own tree (tasks an automation or a trigger created) reads only tasks of that tree.",
                schema: schema(json!({"id": {"type": "integer"}}), &["id"]),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[("task_id", "id")],
                example: json!({"id": 42}),
            },
            session,
            |session, args: IdArgs, _ctx| async move {
                let id = TaskId(args.id);
                let task = match session.store.get_task(id).await {
                    Ok(t) => t,
                    Err(orchestrator_store::Error::TaskNotFound(_)) => {
                        return Err(refuse(format!("task {id} does not exist")));
                    }
                    Err(e) => return Err(store_failure(e)),
                };
                may_read(&session, &task).await?;
                let checklist = session.store.checklist(id).await.map_err(store_failure)?;
                let gates = session.store.gates(id).await.map_err(store_failure)?;
                let mut value = describe(&session, &task).await?;
                value["checklist"] = json!(super::checklist::render(&checklist));
                value["gates"] = json!(gates.iter().map(|g| json!({"name": g.name, "verdict": g.verdict.to_string(), "summary": g.summary})).collect::<Vec<_>>());
                pretty(&value)
            },
        ),
        spec(
            Def {
                name: "task_cancel",
                description: "Cancel a task this task created (and its children).",
                schema: schema(json!({"id": {"type": "integer"}}), &["id"]),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[("task_id", "id")],
                example: json!({"id": 42}),
            },
            session,
            |session, args: IdArgs, _ctx| async move { cancel_child(&session, args.id).await },
        ),
    ]
}
