//! automation_create, automation_list, automation_read, automation_update, automation_pause,
//! automation_resume, automation_delete and automation_run: an agent's view of the
//! orchestrator's schedules, and, with a person's consent, changes to them.
//!
//! Every change is of the `automation` approval class, which a policy's `default` never lets
//! through: a person approves it (or a rule naming the tool or the class pre-approves it), because a
//! schedule goes on creating tasks long after the task that made it. Tasks an automation created,
//! and their sub-agents, are never offered these tools, nor are tasks limited to their own tree
//! (a trigger's): a schedule must not be able to make more schedules, and text a stranger wrote
//! must not reach the schedules at all.
//!
//! An automation an agent makes is no broader than the agent: its tasks run in the agent's
//! workspace, under the read-only policy of an automation's tasks with a sandbox no wider than the
//! agent's, with a profile no broader than the agent's, on the agent's model, and with only gates
//! the agent's policy lets it run. A person widens it afterwards with `orchestrator automation
//! update`.

use std::sync::Arc;

use orchestrator_scheduler::files::validate_spec;
use orchestrator_scheduler::{AutomationView, manage, run_now};
use orchestrator_store::{Automation, SOURCE_AGENT, SOURCE_FILE, SlotResult, Store, Task};
use orchestrator_tools::{
    ApprovalClass, Decision, TaskScope, ToolFailure, ToolResult, ToolSpec, refuse,
};
use orchestrator_types::{AutomationSpec, AutomationStatus, GateSpec, TaskId, now_millis};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Def, Session, check_gates, schema, spec, store_failure};
use crate::agent::policy::{automation_default_policy, decide_gate, profile_name, rank};

/// Most recent slots automation_read shows.
const MAX_SLOTS: u64 = 50;
const DEFAULT_SLOTS: u64 = 10;
/// Longest chain of parents followed to find whether an automation made a task's tree.
const MAX_ANCESTRY: u32 = 64;

/// Whether `task` may be offered the automation tools: only a task a person made (or its
/// sub-agents), that may read every task. A task an automation made, or any task below one, never
/// is, whatever its policy says; nor is a task whose policy keeps it to its own tree.
pub(crate) async fn may_manage_automations(
    store: &Store,
    task: &Task,
    scope: Option<TaskScope>,
) -> orchestrator_store::Result<bool> {
    if scope != Some(TaskScope::All) {
        return Ok(false);
    }
    let mut current = task.clone();
    for _ in 0..=MAX_ANCESTRY {
        if current.automation_id.is_some() {
            return Ok(false);
        }
        match current.parent_id {
            Some(parent) => current = store.get_task(parent).await?,
            None => return Ok(true),
        }
    }
    // Deeper than any chain agents can build: not known to be a person's, so not offered.
    Ok(false)
}

/// An automation's name and what its tasks do and when; every field but the name is optional on
/// update.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangeArgs {
    name: String,
    schedule: Option<String>,
    timezone: Option<String>,
    title: Option<String>,
    prompt: Option<String>,
    gates: Option<Vec<String>>,
    profile: Option<String>,
    overlap: Option<String>,
    catch_up: Option<String>,
    jitter_secs: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameArgs {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    name: String,
    slots: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    name: String,
    #[serde(default)]
    force: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// The properties of what a schedule's tasks do, shared by create and update.
fn spec_properties() -> serde_json::Map<String, Value> {
    let properties = json!({
        "schedule": {"type": "string", "description": "Cron: 5 fields (minute hour day-of-month month day-of-week), or 6/7 with seconds first and year last, e.g. \"0 3 * * 1-5\"."},
        "timezone": {"type": "string", "description": "IANA zone, e.g. Europe/Berlin (default UTC)."},
        "title": {"type": "string", "description": "Of its tasks (default the name), with each slot's local time appended."},
        "prompt": {"type": "string", "description": "Agent instructions; its tasks then run an agent on this task's model."},
        "gates": {"type": "array", "items": {"type": "string"}, "description": "Shell commands each task runs as gates."},
        "profile": {"type": "string", "enum": ["minimal", "coding", "full"], "description": "Of its agents, no broader than yours (default yours)."},
        "overlap": {"type": "string", "enum": ["skip", "buffer_one", "allow", "cancel_previous"], "description": "When a previous run is unfinished (default skip)."},
        "catch_up": {"type": "string", "enum": ["skip", "latest", "all"], "description": "Slots missed while no scheduler ran (default latest)."},
        "jitter_secs": {"type": "integer", "minimum": 0, "maximum": 86400, "description": "A stable delay in [0, jitter_secs) after each slot."}
    });
    match properties {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

/// The schema of automation_create, whose properties are described. automation_update takes the
/// same properties without their descriptions (its own says they mean what they mean for
/// automation_create): both are offered together, and the text would cost tokens twice.
fn change_schema(required: &[&str], described: bool) -> Value {
    let mut properties = spec_properties();
    properties.insert(
        "name".into(),
        json!({"type": "string", "description": "Letters, digits, '-', '_' or '.', starting with a letter or digit."}),
    );
    if !described {
        for property in properties.values_mut() {
            if let Some(property) = property.as_object_mut() {
                property.remove("description");
            }
        }
    }
    schema(Value::Object(properties), required)
}

fn name_schema() -> Value {
    schema(json!({"name": {"type": "string"}}), &["name"])
}

/// A refusal for a store error: not found and name taken are the call's problem, said plainly;
/// anything else is the store's.
fn automation_error(e: orchestrator_store::Error) -> ToolFailure {
    match e {
        orchestrator_store::Error::AutomationNotFound(name) => refuse(format!(
            "there is no automation named {name:?}; automation_list shows them"
        )),
        orchestrator_store::Error::DuplicateAutomation(name) => refuse(format!(
            "an automation named {name:?} already exists; choose another name, or change it with automation_update"
        )),
        other => store_failure(other),
    }
}

/// A refusal for a scheduler error: a bad expression, zone or spec is the call's problem.
fn schedule_error(e: orchestrator_scheduler::Error) -> ToolFailure {
    match e {
        orchestrator_scheduler::Error::Store(e) => automation_error(e),
        other => refuse(format!("{other}; nothing was changed")),
    }
}

/// The automation `name` (trimmed), or a refusal that says how to find the names.
async fn find(session: &Session, name: &str) -> Result<Automation, ToolFailure> {
    session
        .store
        .automation(name.trim())
        .await
        .map_err(automation_error)
}

/// The automation `name`, refused when it comes from a schedules file (`automation apply` would
/// undo a change made here).
async fn editable(session: &Session, name: &str, verb: &str) -> Result<Automation, ToolFailure> {
    let automation = find(session, name).await?;
    if automation.source == SOURCE_FILE {
        return Err(refuse(format!(
            "automation {name:?} comes from the schedules file {}; `orchestrator automation apply` would undo a change made here, so it cannot be {verb} by a tool: change the file instead",
            automation.source_path.as_deref().unwrap_or("(unknown)")
        )));
    }
    Ok(automation)
}

/// Applies what `args` gives to `spec`, keeping the tasks no broader than this one, and checks the
/// result as the scheduler will (expression, zone, the task every slot creates). A gate command
/// this task's policy denies (decided as exec_shell) refuses the call. Asks nobody, so it is also
/// the check made before a person is asked to approve the call.
fn build(
    session: &Session,
    spec: &mut AutomationSpec,
    args: &ChangeArgs,
) -> Result<(), ToolFailure> {
    if let Some(schedule) = &args.schedule {
        spec.schedule = schedule.trim().to_owned();
    }
    if let Some(zone) = &args.timezone {
        spec.timezone = zone.trim().to_owned();
    }
    if let Some(title) = &args.title {
        spec.template.title = Some(title.clone()).filter(|t| !t.trim().is_empty());
    }
    if let Some(gates) = &args.gates {
        for command in gates {
            if let (Decision::Deny, rule) = decide_gate(&session.policy, command) {
                return Err(refuse(format!(
                    "the gate command `{command}` is denied by policy ({rule}); a gate is a shell command and is decided like exec_shell. Nothing was changed: leave that gate out"
                )));
            }
        }
        spec.template.gates = gates
            .iter()
            .map(|command| {
                let mut gate = GateSpec::from_command(command.clone());
                // Written by an agent: it runs in the sandbox with an agent's environment.
                gate.by_agent = true;
                gate
            })
            .collect();
    }
    if let Some(prompt) = &args.prompt {
        spec.template.prompt = Some(prompt.clone()).filter(|p| !p.trim().is_empty());
    }
    // A new prompt or profile makes the agent of the tasks this agent's: no broader than it, and
    // back to read-only even where a person had widened it (the person widens it again).
    let agent_changed = args.prompt.is_some() || args.profile.is_some();
    if spec.template.prompt.is_some() && agent_changed {
        let requested = match args.profile.as_deref() {
            Some(name) => {
                let profile: orchestrator_tools::Profile = name.parse().map_err(refuse)?;
                rank(profile)
            }
            None => session.profile_rank,
        };
        spec.template.agent.profile = profile_name(requested.min(session.profile_rank)).to_owned();
        if spec.template.model.is_none() {
            spec.template.model = session.task.model.clone();
        }
    } else if spec.template.prompt.is_none() && args.profile.is_some() {
        return Err(refuse(
            "profile is for an automation whose tasks are agents: give a prompt too",
        ));
    }
    // Whatever this agent makes run (its gates, an agent's prompt or profile) runs no broader than
    // this agent, whatever the automation had: read and search only, in a sandbox no wider than
    // this task's (the policy also decides the sandbox of the gates an agent wrote). A gate-only
    // automation without a policy would otherwise get an automation task's default,
    // `workspace_write`, and a person's automation would keep its own, possibly `full`, policy
    // while the agent chose its gates. A person widens it afterwards.
    if agent_changed || args.gates.is_some() {
        let mut policy = automation_default_policy();
        policy.sandbox = policy.sandbox.narrowed_to(session.policy.sandbox);
        spec.template.agent.policy = Some(
            serde_json::to_value(&policy)
                .map_err(|e| refuse(format!("the policy cannot be written: {e}")))?,
        );
    }
    if let Some(word) = &args.overlap {
        spec.overlap = word.parse().map_err(|e| refuse(format!("{e}")))?;
    }
    if let Some(word) = &args.catch_up {
        spec.catch_up = word.parse().map_err(|e| refuse(format!("{e}")))?;
    }
    if let Some(jitter) = args.jitter_secs {
        spec.jitter_secs = jitter;
    }
    validate_spec(spec).map_err(schedule_error)?;
    Ok(())
}

/// The automation a create or update call would store, checked, with the current one for an
/// update; refused as the handler would refuse it.
async fn prepare(
    session: &Session,
    tool: &str,
    args: &ChangeArgs,
) -> Result<(Option<Automation>, AutomationSpec), ToolFailure> {
    let name = args.name.trim();
    let (current, mut spec) = if tool == "automation_create" {
        let Some(schedule) = &args.schedule else {
            return Err(refuse("automation_create needs a schedule"));
        };
        let mut spec = AutomationSpec::new(name, schedule.trim());
        spec.workspaces = vec![workspace_of(&session.task)?];
        (None, spec)
    } else {
        let current = editable(session, name, "changed").await?;
        let spec = current.spec.clone();
        (Some(current), spec)
    };
    build(session, &mut spec, args)?;
    Ok((current, spec))
}

/// Creates or updates the automation `args` names. Gate commands the policy asks about need a
/// person: the call's own approval was that person unless a rule pre-approved the tool, and then
/// they are asked about on their own.
async fn change(
    session: &Session,
    ctx: &orchestrator_tools::ToolContext,
    tool: &str,
    args: ChangeArgs,
) -> Result<Automation, ToolFailure> {
    let (current, spec) = prepare(session, tool, &args).await?;
    let call_was_asked = ctx
        .policy()
        .decide(tool, ApprovalClass::Automation, &json!({}))
        .0
        == Decision::Ask;
    if let Some(gates) = &args.gates
        && !call_was_asked
    {
        let commands: Vec<&str> = gates.iter().map(String::as_str).collect();
        let arguments = json!({ "name": args.name, "gates": gates });
        check_gates(session, ctx, tool, &arguments, &commands).await?;
    }
    let now = now_millis();
    match current {
        None => manage::create(&session.store, &spec, SOURCE_AGENT, now).await,
        Some(current) => manage::update(&session.store, &current, &spec, now).await,
    }
    .map_err(schedule_error)
}

/// The check made before a person is asked about a create or update.
fn precheck(
    session: &Arc<Session>,
    tool: &'static str,
) -> Arc<dyn orchestrator_tools::ToolHandler> {
    let session = session.clone();
    Arc::new(move |args: Value, _ctx: orchestrator_tools::ToolContext| {
        let session = session.clone();
        async move {
            let args: ChangeArgs = serde_json::from_value(args)
                .map_err(|e| refuse(format!("{tool}: invalid arguments: {e}")))?;
            prepare(&session, tool, &args).await?;
            Ok(ToolResult::text(""))
        }
    })
}

/// The workspace an agent's automation runs in: the checkout this task's tree was cloned from, or
/// its own workspace.
fn workspace_of(task: &Task) -> Result<String, ToolFailure> {
    task.worktree_of
        .clone()
        .or_else(|| task.workspace.clone())
        .ok_or_else(|| refuse("this task has no workspace for an automation to run in"))
}

fn view_text(headline: String, view: &AutomationView) -> ToolResult {
    ToolResult::text(format!(
        "{headline}\n{}",
        serde_json::to_string_pretty(view).unwrap_or_default()
    ))
}

fn summary(view: &AutomationView) -> String {
    format!(
        "{} in {}, {}; next fire {}",
        view.schedule,
        view.timezone,
        view.status,
        view.next_fire_at.as_deref().unwrap_or("never")
    )
}

pub(super) fn specs(session: &Arc<Session>) -> Vec<ToolSpec> {
    let mut specs = vec![
        spec(
            Def {
                name: "automation_list",
                description: "The orchestrator's automations (cron schedules that create tasks): name, status, schedule and time zone, next fire time, and why one was parked.",
                schema: schema(json!({}), &[]),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[],
                example: json!({}),
            },
            session,
            |session, _args: NoArgs, _ctx| async move {
                let all = session
                    .store
                    .list_automations()
                    .await
                    .map_err(store_failure)?;
                if all.is_empty() {
                    return Ok(ToolResult::text("There are no automations."));
                }
                let list: Vec<Value> = all
                    .iter()
                    .map(AutomationView::new)
                    .map(|v| {
                        json!({
                            "name": v.name,
                            "status": v.status,
                            "schedule": v.schedule,
                            "timezone": v.timezone,
                            "next_fire_at": v.next_fire_at,
                            "overlap": v.overlap,
                            "source": v.source,
                            "last_error": v.last_error,
                        })
                    })
                    .collect();
                Ok(ToolResult::text(
                    serde_json::to_string_pretty(&json!({ "automations": list }))
                        .unwrap_or_default(),
                ))
            },
        ),
        spec(
            Def {
                name: "automation_read",
                description: "One automation: its schedule, what its tasks do, its next fire times, and its recent slots with the states of the tasks they created.",
                schema: schema(
                    json!({
                        "name": {"type": "string"},
                        "slots": {"type": "integer", "minimum": 1, "maximum": MAX_SLOTS, "description": "Recent slots to show (default 10)."}
                    }),
                    &["name"],
                ),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[],
                example: json!({"name": "nightly-tests"}),
            },
            session,
            |session, args: ReadArgs, _ctx| async move {
                let automation = find(&session, &args.name).await?;
                let limit = args.slots.unwrap_or(DEFAULT_SLOTS).clamp(1, MAX_SLOTS);
                let slots = session
                    .store
                    .slots(automation.id, limit)
                    .await
                    .map_err(store_failure)?;
                let view = AutomationView::detailed(&automation, &slots, now_millis())
                    .map_err(schedule_error)?;
                Ok(ToolResult::text(
                    serde_json::to_string_pretty(&view).unwrap_or_default(),
                ))
            },
        ),
        spec(
            Def {
                name: "automation_create",
                description: "Create an automation: a cron schedule that creates a task in this workspace at every slot, running gates, an agent's prompt, or both. A person approves it first. Its agents may only read and search until a person widens its policy; your policy decides its gates as for exec_shell.",
                schema: change_schema(&["name", "schedule"], true),
                read_only: false,
                approval: ApprovalClass::Automation,
                aliases: &[
                    ("cron", "schedule"),
                    ("tz", "timezone"),
                    ("jitter", "jitter_secs"),
                ],
                example: json!({"name": "nightly-tests", "schedule": "0 3 * * 1-5", "timezone": "Europe/Berlin", "gates": ["cargo test --workspace"]}),
            },
            session,
            |session, args: ChangeArgs, ctx| async move {
                let created = change(&session, &ctx, "automation_create", args).await?;
                let view = AutomationView::new(&created);
                Ok(view_text(
                    format!(
                        "Created automation {} ({}), made by task {}.",
                        view.name,
                        summary(&view),
                        session.task_id()
                    ),
                    &view,
                ))
            },
        ),
        spec(
            Def {
                name: "automation_update",
                description: "Change an automation: only the fields given change, each meaning what it does for automation_create (gates decided by your policy as for exec_shell); a new schedule, time zone or jitter starts from the next slot after now. A person approves it first. Automations from schedules files are changed in their files instead.",
                schema: change_schema(&["name"], false),
                read_only: false,
                approval: ApprovalClass::Automation,
                aliases: &[
                    ("cron", "schedule"),
                    ("tz", "timezone"),
                    ("jitter", "jitter_secs"),
                ],
                example: json!({"name": "nightly-tests", "schedule": "30 2 * * *"}),
            },
            session,
            |session, args: ChangeArgs, ctx| async move {
                let updated = change(&session, &ctx, "automation_update", args).await?;
                let view = AutomationView::new(&updated);
                Ok(view_text(
                    format!("Updated automation {} ({}).", view.name, summary(&view)),
                    &view,
                ))
            },
        ),
        status_spec(session, AutomationStatus::Paused),
        status_spec(session, AutomationStatus::Active),
        spec(
            Def {
                name: "automation_delete",
                description: "Delete an automation and its slot history; the tasks it created stay. A person approves it first.",
                schema: name_schema(),
                read_only: false,
                approval: ApprovalClass::Automation,
                aliases: &[],
                example: json!({"name": "nightly-tests"}),
            },
            session,
            |session, args: NameArgs, _ctx| async move {
                let name = args.name.trim();
                editable(&session, name, "deleted").await?;
                session
                    .store
                    .delete_automation(name)
                    .await
                    .map_err(automation_error)?;
                Ok(ToolResult::text(format!(
                    "Deleted automation {name}; the tasks it created stay."
                )))
            },
        ),
        spec(
            Def {
                name: "automation_run",
                description: "Fire a manual slot of an automation now, outside its schedule, honouring its overlap policy unless force. A person approves it first. Returns the tasks it created.",
                schema: schema(
                    json!({
                        "name": {"type": "string"},
                        "force": {"type": "boolean", "description": "Fire even if a previous run is unfinished."}
                    }),
                    &["name"],
                ),
                read_only: false,
                approval: ApprovalClass::Automation,
                aliases: &[],
                example: json!({"name": "nightly-tests"}),
            },
            session,
            |session, args: RunArgs, _ctx| async move {
                let automation = find(&session, &args.name).await?;
                let recorder = format!("task {}", session.task_id());
                // A manual slot is stamped with the current millisecond; two runs asked within
                // one millisecond (an agent's calls can be that quick) take the next free ones.
                let first = now_millis();
                let mut at = first;
                let result = loop {
                    let result = run_now(&session.store, &automation, args.force, &recorder, at)
                        .await
                        .map_err(schedule_error)?;
                    if matches!(result, SlotResult::AlreadyRecorded) && at < first + 3 {
                        at += 1;
                        continue;
                    }
                    break result;
                };
                let name = &automation.spec.name;
                match result {
                    SlotResult::Fired { tasks } => Ok(ToolResult::text(format!(
                        "Fired a manual slot of {name}: created {}. Read them with task_read.",
                        list_tasks(&tasks)
                    ))),
                    SlotResult::Skipped { reason } => Err(refuse(format!(
                        "{name} did not fire: {reason}. Wait for its unfinished run, or give force: true to fire anyway"
                    ))),
                    SlotResult::Buffered => Ok(ToolResult::text(format!(
                        "Buffered: {name} fires when its unfinished run finishes."
                    ))),
                    SlotResult::AlreadyRecorded => Err(refuse(format!(
                        "a slot of {name} at this very instant already exists; try again"
                    ))),
                }
            },
        ),
    ];
    for spec in &mut specs {
        if matches!(
            spec.name.as_str(),
            "automation_create" | "automation_update"
        ) {
            let name = if spec.name == "automation_create" {
                "automation_create"
            } else {
                "automation_update"
            };
            spec.precheck = Some(precheck(session, name));
        }
    }
    specs
}

fn list_tasks(tasks: &[TaskId]) -> String {
    let ids: Vec<String> = tasks.iter().map(ToString::to_string).collect();
    match ids.len() {
        1 => format!("task {}", ids[0]),
        _ => format!("tasks {}", ids.join(", ")),
    }
}

/// automation_pause or automation_resume.
fn status_spec(session: &Arc<Session>, status: AutomationStatus) -> ToolSpec {
    let (name, description, verb) = match status {
        AutomationStatus::Paused => (
            "automation_pause",
            "Stop an automation firing; slots that pass while it is paused are not caught up. A person approves it first.",
            "Paused",
        ),
        AutomationStatus::Active => (
            "automation_resume",
            "Let a paused (or parked) automation fire again, from its next slot after now. A person approves it first.",
            "Resumed",
        ),
    };
    spec(
        Def {
            name,
            description,
            schema: name_schema(),
            read_only: false,
            approval: ApprovalClass::Automation,
            aliases: &[],
            example: json!({"name": "nightly-tests"}),
        },
        session,
        move |session, args: NameArgs, _ctx| async move {
            let name = args.name.trim();
            // A missing automation comes back from set_status as automation_error's refusal.
            let updated = manage::set_status(
                &session.store,
                name,
                status,
                None,
                &format!("the agent of task {}", session.task_id()),
                now_millis(),
            )
            .await
            .map_err(schedule_error)?;
            let view = AutomationView::new(&updated);
            Ok(view_text(
                format!("{verb} automation {} ({}).", view.name, summary(&view)),
                &view,
            ))
        },
    )
}
