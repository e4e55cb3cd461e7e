//! The durable tools: the tools whose effects live in the store rather than the workspace, which the
//! worker registers into each agent task's registry beside the workspace tools.
//!
//! Each handler captures the attempt's [`Session`], so it writes under the attempt's lease and a
//! stale attempt's writes are refused by the store like any other.

mod agents;
mod attempts;
mod automations;
mod batch;
mod checklist;
mod github;
mod permissions;
mod work;

use std::future::Future;
use std::sync::Arc;

use orchestrator_store::approval_kind;
use orchestrator_tools::{
    ApprovalClass, Decision, DeprecatedAlias, Profile, Registry, ToolContext, ToolFailure,
    ToolHandler, ToolOutcome, ToolResult, ToolSpec, refuse,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::Session;
use super::policy::decide_gate;
use super::session::Answer;
use crate::runner::RunContext;
pub(crate) use automations::may_manage_automations;
pub(crate) use permissions::{Catalog, with_grants};

/// Which durable tools a task of `profile` is offered. Every tool offered is sent with every request,
/// so the default set is kept to what a coding agent uses in most tasks: its checklist, a person to
/// ask, its gates, notes, and the GitHub tools where a GitHub is configured (they could do nothing
/// elsewhere): the GitHub tools include opening a pull request, and so recording and selecting the
/// PR attempt it is opened from. Sub-agents, tasks, plans, durable shell jobs and the rest of the
/// PR attempt tools come with `full`, and so do the automation tools (for tasks that may have
/// them at all: see `may_manage_automations`).
pub fn offered(name: &str, profile: Profile, github: bool) -> bool {
    if name.starts_with("github_") || name == "pr_open" {
        return github && profile != Profile::Minimal;
    }
    if matches!(
        name,
        "pr_attempt_record" | "pr_attempt_select" | "pr_review_decline"
    ) && github
    {
        return profile != Profile::Minimal;
    }
    match name {
        "checklist_write"
        | "checklist_update"
        | "checklist_list"
        | "ask_user"
        | "task_gate_run"
        | "note"
        | "request_permissions" => profile != Profile::Minimal,
        "context_status" => true,
        _ => profile == Profile::Full,
    }
}

/// Registers the durable tools into `registry`: those `offered` to `only`'s profile and GitHub
/// setting, or every one when `only` is `None` (docs). The automation tools only when
/// `automations` says the task may have them.
pub(crate) fn register(
    registry: &mut Registry,
    session: &Arc<Session>,
    ctx: &RunContext,
    model: Option<crate::model::ModelClient>,
    catalog: permissions::Catalog,
    only: Option<(Profile, bool)>,
    automations: bool,
) -> orchestrator_tools::Result<()> {
    let mut specs = Vec::new();
    specs.extend(batch::specs(session, model));
    specs.extend(permissions::specs(session, catalog));
    specs.extend(checklist::specs(session));
    specs.extend(agents::specs(
        session,
        agents::Roles {
            configured: ctx.agent.roles.clone(),
            default_model: ctx.agent.default_model.clone(),
        },
    ));
    specs.extend(work::specs(session, ctx));
    specs.extend(github::specs(session, ctx));
    specs.extend(attempts::specs(session));
    if automations {
        specs.extend(automations::specs(session));
    }
    let wanted = |name: &str| only.is_none_or(|(profile, github)| offered(name, profile, github));
    for spec in specs {
        if wanted(&spec.name) {
            registry.register(spec)?;
        }
    }
    for (old, new) in [
        ("todo_write", "checklist_write"),
        ("todo_add", "checklist_add"),
        ("todo_update", "checklist_update"),
        ("todo_list", "checklist_list"),
    ] {
        if !wanted(new) {
            continue;
        }
        registry.register_alias(DeprecatedAlias {
            this_tool: old.to_owned(),
            use_instead: new.to_owned(),
            removed_in: "0.3.0".to_owned(),
            message: format!(
                "{old} is deprecated and will be removed in 0.3.0; call {new} instead (same arguments)"
            ),
        })?;
    }
    Ok(())
}

/// The names of the durable tools, for docs and tests.
pub fn names() -> &'static [&'static str] {
    &[
        "agent_cancel",
        "agent_list",
        "agent_result",
        "agent_send_input",
        "agent_spawn",
        "agent_wait",
        "ask_user",
        "automation_create",
        "automation_delete",
        "automation_list",
        "automation_pause",
        "automation_read",
        "automation_resume",
        "automation_run",
        "automation_update",
        "checklist_add",
        "checklist_list",
        "checklist_update",
        "checklist_write",
        "context_status",
        "github_close_issue",
        "github_comment",
        "github_issue_context",
        "github_pr_context",
        "llm_query_batched",
        "note",
        "pr_attempt_list",
        "pr_attempt_preflight",
        "pr_attempt_read",
        "pr_attempt_record",
        "pr_attempt_select",
        "pr_open",
        "pr_review_decline",
        "request_permissions",
        "task_cancel",
        "task_create",
        "task_gate_run",
        "task_list",
        "task_read",
        "task_shell_start",
        "task_shell_wait",
        "update_plan",
    ]
}

/// A schema in the registry's form: an object with these properties, nothing else.
fn schema(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// Everything of a spec but its handler.
struct Def {
    name: &'static str,
    description: &'static str,
    schema: Value,
    read_only: bool,
    approval: ApprovalClass,
    aliases: &'static [(&'static str, &'static str)],
    example: Value,
}

/// A spec whose handler parses its arguments into `T` and runs `f` with the session.
fn spec<T, F, Fut>(def: Def, session: &Arc<Session>, f: F) -> ToolSpec
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Arc<Session>, T, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ToolOutcome> + Send + 'static,
{
    let session = session.clone();
    let name = def.name;
    let f = Arc::new(f);
    described(
        def,
        Arc::new(move |args: Value, ctx: ToolContext| {
            let session = session.clone();
            let f = f.clone();
            async move {
                let parsed: T = serde_json::from_value(args)
                    .map_err(|e| refuse(format!("{name}: invalid arguments: {e}")))?;
                f(session, parsed, ctx).await
            }
        }),
    )
}

/// The spec of `def` with its `handler`: what [`spec`] makes of every tool, outside its generics,
/// so that it is compiled once and not for each tool.
fn described(def: Def, handler: Arc<dyn ToolHandler>) -> ToolSpec {
    ToolSpec {
        name: def.name.to_owned(),
        description: def.description.to_owned(),
        input_schema: def.schema,
        read_only: def.read_only,
        approval: def.approval,
        arg_aliases: def
            .aliases
            .iter()
            .map(|(a, c)| ((*a).to_owned(), (*c).to_owned()))
            .collect(),
        example: def.example,
        precheck: None,
        handler,
    }
}

/// A store failure inside a durable tool: a stale lease stops the attempt anyway; anything else
/// is reported to the model as a failure of the orchestrator, not of its call.
fn store_failure(e: orchestrator_store::Error) -> ToolFailure {
    refuse(format!(
        "the orchestrator's store failed: {e}; this is not a problem with your call, try again later"
    ))
}

/// Decides the gate commands an agent gives a child task before anything is created: each one as
/// the policy decides `exec_shell` with that command. A denied command refuses the call, naming
/// the command and the rule. The commands the policy asks about go to a person as one approval of
/// this call, which names them and shows the call's arguments, so the person sees what would run;
/// the call goes on only once it is approved.
async fn check_gates(
    session: &Session,
    ctx: &ToolContext,
    tool: &str,
    arguments: &Value,
    commands: &[&str],
) -> Result<(), ToolFailure> {
    let mut asked = Vec::new();
    for command in commands {
        let (decision, rule) = decide_gate(&session.policy, command);
        match decision {
            Decision::Allow => {}
            Decision::Deny => {
                return Err(refuse(format!(
                    "{tool} was refused: the gate command `{command}` is denied by policy ({rule}). \
                     A gate is a shell command and is decided like exec_shell; nothing was created. \
                     Leave that gate out, or ask the user"
                )));
            }
            Decision::Ask => asked.push(format!("`{command}` ({rule})")),
        }
    }
    if asked.is_empty() {
        return Ok(());
    }
    let asked = asked.join(", ");
    let Some(call_id) = ctx.call_id() else {
        return Err(refuse(format!(
            "{tool} needs a person's approval for the gate commands {asked}, and this call cannot ask for one"
        )));
    };
    let reason = format!(
        "the agent gives a task gates, which run as shell commands; the policy asks before {asked}"
    );
    match session
        .ask(call_id, approval_kind::TOOL, tool, arguments, &reason, None)
        .await
    {
        Answer::Approved => Ok(()),
        Answer::Refused(why) => Err(refuse(format!(
            "{tool} was not approved: {why}; the gate commands {asked} will not run and nothing was \
             created. Do not retry the same call: leave the gates out or ask the user"
        ))),
        // The attempt pauses on the pending approval and this result is never read.
        Answer::Answered(_) | Answer::Pending => Err(refuse("waiting for approval")),
    }
}

fn text(s: impl Into<String>) -> ToolOutcome {
    Ok(ToolResult::text(s))
}

/// A registry holding only the durable tools of the attempt of `lease` on `task`, for docs and
/// tests: the same specs an agent gets, under the task's own policy as an attempt would hold it.
pub fn durable_registry(
    ctx: &RunContext,
    task: orchestrator_store::Task,
    lease: orchestrator_store::Lease,
) -> Registry {
    let policy = super::policy::effective_policy(&task)
        .unwrap_or_else(|_| orchestrator_tools::Policy::allow_all());
    let session = Arc::new(Session::new(
        ctx.store.clone(),
        task,
        lease,
        ctx.worker_id.clone(),
        policy,
        2,
        tokio_util::sync::CancellationToken::new(),
    ));
    let mut registry = Registry::empty();
    // Registering into an empty registry cannot meet a duplicate name.
    let _ = register(
        &mut registry,
        &session,
        ctx,
        None,
        Catalog::default(),
        None,
        true,
    );
    registry
}

/// Every tool a model of `profile` receives, workspace and durable tools together, as an agent
/// task's registry holds them (`github`: whether a GitHub is configured). `orchestrator tool list`
/// shows this; the durable tools' specs need an attempt to hold, so one is made in a scratch store
/// that is removed again.
pub async fn catalog(
    profile: Profile,
    github: bool,
) -> crate::Result<Vec<orchestrator_tools::ToolInfo>> {
    let dir = std::env::temp_dir().join(format!(
        "orchestrator-catalog-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| crate::Error::Config(format!("{}: {e}", dir.display())))?;
    let listed = async {
        let store = orchestrator_store::Store::open_sqlite(
            &dir.join("catalog.db"),
            &orchestrator_store::StoreOptions::default(),
        )
        .await?;
        let mut task = orchestrator_types::NewTask::agent("catalog", "list the tools");
        task.workspace = Some(dir.display().to_string());
        let id = store.create_task(&task).await?;
        let (task, lease) = store
            .claim_task("catalog", id, 60_000)
            .await?
            .ok_or_else(|| crate::Error::Config("the scratch task could not be claimed".into()))?;
        let ctx = RunContext {
            store: store.clone(),
            metrics: Arc::new(crate::Metrics::default()),
            backoff: crate::Backoff::default(),
            log_cap_bytes: 1 << 20,
            worker_id: "catalog".into(),
            agent: crate::AgentConfig::default(),
            sandbox: crate::Sandbox::new(Default::default()),
        };
        let session = Arc::new(Session::new(
            store.clone(),
            task,
            lease,
            "catalog".into(),
            orchestrator_tools::Policy::allow_all(),
            super::policy::rank(profile),
            tokio_util::sync::CancellationToken::new(),
        ));
        let mut registry = Registry::new(profile);
        register(
            &mut registry,
            &session,
            &ctx,
            None,
            Catalog::default(),
            Some((profile, github)),
            true,
        )
        .map_err(|e| crate::Error::Config(format!("tool registration: {e}")))?;
        store.close().await;
        Ok::<_, crate::Error>(registry.list())
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    listed
}

/// docs/agent-tools.md, rendered from the durable tools' specs.
pub fn render_md(registry: &Registry) -> String {
    let mut out = String::from(
        "# Durable tools\n\n<!-- Generated from crates/orchestrator-worker/src/agent/tools by `render_md`; a test fails when this file and the code differ. Regenerate with `UPDATE_DOCS=1 cargo test -p orchestrator-worker --test it docs`. -->\n\n",
    );
    out.push_str("The worker registers these tools into every agent task's registry, beside the workspace tools of [tools.md](tools.md) (with the same guarantees: argument repair or a corrective message, bounded results, policy and approvals). Their effects live in the store, so they survive restarts: the checklist and the plan a user watches, tasks and sub-agents, gate runs recorded as evidence, background shell jobs, questions to the user, PR attempts (candidate patches with the gates that ran on them), and the orchestrator's automations (offered to tasks a person made; every change waits for a person unless a rule pre-approves it).\n\nThree groups are offered on demand rather than sent whole in every request: `terminal` (the `pty_*` tools), `github` (the `github_*` tools and `pr_open`) and `attempts` (the `pr_attempt_*` tools). A task that has any of them gets one more tool, `load_tools`, whose description names each group and its tools; `load_tools {\"groups\": [\"github\"]}` adds that group's definitions to every later request (and again after a resume, from the saved calls). A call by name works before its group is loaded.\n\n");
    out.push_str("| tool | read-only | approval class |\n|---|---|---|\n");
    for spec in registry.specs() {
        out.push_str(&format!(
            "| [{0}](#{0}) | {1} | {2} |\n",
            spec.name,
            if spec.read_only { "yes" } else { "no" },
            serde_json::to_value(spec.approval)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        ));
    }
    out.push('\n');
    out.push_str(&orchestrator_tools::docs::render_sections(registry));
    out
}
