//! The durable tools: the tools whose effects live in the store rather than the workspace, which the
//! worker registers into each agent task's registry beside the workspace tools.
//!
//! Each handler captures the attempt's [`Session`], so it writes under the attempt's lease and a
//! stale attempt's writes are refused by the store like any other.

mod agents;
mod checklist;
mod work;

use std::future::Future;
use std::sync::Arc;

use orchestrator_tools::{
    ApprovalClass, DeprecatedAlias, Registry, ToolContext, ToolFailure, ToolOutcome, ToolResult,
    ToolSpec, refuse,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::Session;
use crate::runner::RunContext;

/// Registers every durable tool the task's policy and profile allow into `registry`.
pub(crate) fn register(
    registry: &mut Registry,
    session: &Arc<Session>,
    ctx: &RunContext,
) -> orchestrator_tools::Result<()> {
    let mut specs = Vec::new();
    specs.extend(checklist::specs(session));
    specs.extend(agents::specs(session));
    specs.extend(work::specs(session, ctx));
    for spec in specs {
        registry.register(spec)?;
    }
    for (old, new) in [
        ("todo_write", "checklist_write"),
        ("todo_add", "checklist_add"),
        ("todo_update", "checklist_update"),
        ("todo_list", "checklist_list"),
    ] {
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
        "checklist_add",
        "checklist_list",
        "checklist_update",
        "checklist_write",
        "note",
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
        handler: Arc::new(move |args: Value, ctx: ToolContext| {
            let session = session.clone();
            let f = f.clone();
            async move {
                let parsed: T = serde_json::from_value(args)
                    .map_err(|e| refuse(format!("{name}: invalid arguments: {e}")))?;
                f(session, parsed, ctx).await
            }
        }),
    }
}

/// A store failure inside a durable tool: a stale lease stops the attempt anyway; anything else
/// is reported to the model as a failure of the orchestrator, not of its call.
fn store_failure(e: orchestrator_store::Error) -> ToolFailure {
    refuse(format!(
        "the orchestrator's store failed: {e}; this is not a problem with your call, try again later"
    ))
}

fn text(s: impl Into<String>) -> ToolOutcome {
    Ok(ToolResult::text(s))
}
