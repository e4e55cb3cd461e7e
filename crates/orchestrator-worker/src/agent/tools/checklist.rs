//! checklist_write, checklist_add, checklist_update, checklist_list, update_plan and note: what the
//! agent tells the person watching it.

use std::sync::Arc;

use orchestrator_store::ChecklistItem;
use orchestrator_tools::{ApprovalClass, ToolResult, ToolSpec, refuse};
use orchestrator_types::EventKind;
use serde::Deserialize;
use serde_json::json;

use super::{Def, Session, schema, spec, store_failure, text};

const STATUSES: [&str; 4] = ["pending", "in_progress", "done", "skipped"];
/// Most items a checklist holds; a longer list is a plan, not a checklist.
const MAX_ITEMS: usize = 100;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemArg {
    text: String,
    status: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    items: Vec<ItemArg>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddArgs {
    text: String,
    status: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateArgs {
    position: i64,
    status: Option<String>,
    text: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanStep {
    step: String,
    status: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanArgs {
    explanation: Option<String>,
    plan: Vec<PlanStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoteArgs {
    text: String,
}

fn status_of(status: Option<String>) -> Result<String, orchestrator_tools::ToolFailure> {
    let status = status.unwrap_or_else(|| "pending".to_owned());
    if STATUSES.contains(&status.as_str()) {
        Ok(status)
    } else {
        Err(refuse(format!(
            "unknown status {status:?}; use one of: {}",
            STATUSES.join(", ")
        )))
    }
}

/// The checklist as the model and a person read it: one line per item and the completion.
pub(crate) fn render(items: &[ChecklistItem]) -> String {
    if items.is_empty() {
        return "The checklist is empty.".to_owned();
    }
    let done = items.iter().filter(|i| i.status == "done").count();
    let mut out = format!("Checklist ({done}/{} done):\n", items.len());
    for item in items {
        let mark = match item.status.as_str() {
            "done" => "[x]",
            "in_progress" => "[~]",
            "skipped" => "[-]",
            _ => "[ ]",
        };
        out.push_str(&format!("{:>3}. {mark} {}\n", item.position, item.text));
    }
    out
}

async fn write(
    session: &Session,
    items: Vec<(String, String)>,
) -> Result<ToolResult, orchestrator_tools::ToolFailure> {
    if items.len() > MAX_ITEMS {
        return Err(refuse(format!(
            "a checklist holds at most {MAX_ITEMS} items; group the work into fewer steps"
        )));
    }
    if items.iter().any(|(t, _)| t.trim().is_empty()) {
        return Err(refuse("an item's text is empty"));
    }
    let written = session
        .store
        .write_checklist(&session.lease, &items)
        .await
        .map_err(store_failure)?;
    Ok(ToolResult::text(render(&written)))
}

async fn current(
    session: &Session,
) -> Result<Vec<(String, String)>, orchestrator_tools::ToolFailure> {
    Ok(session
        .store
        .checklist(session.task_id())
        .await
        .map_err(store_failure)?
        .into_iter()
        .map(|i| (i.text, i.status))
        .collect())
}

pub(super) fn specs(session: &Arc<Session>) -> Vec<ToolSpec> {
    let status_schema =
        json!({"type": "string", "enum": STATUSES, "description": "Default pending."});
    vec![
        spec(
            Def {
                name: "checklist_write",
                description: "Replace the task's checklist (the user watches it live). Use it once to lay out the work, then tick items off with checklist_update.",
                schema: schema(
                    json!({"items": {"type": "array", "items": {"type": "object", "properties": {"text": {"type": "string"}, "status": status_schema}, "required": ["text"], "additionalProperties": false}}}),
                    &["items"],
                ),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[("todos", "items")],
                example: json!({"items": [{"text": "reproduce the failure"}, {"text": "fix the parser", "status": "in_progress"}]}),
            },
            session,
            |session, args: WriteArgs, _ctx| async move {
                let mut items = Vec::with_capacity(args.items.len());
                for item in args.items {
                    items.push((item.text, status_of(item.status)?));
                }
                write(&session, items).await
            },
        ),
        spec(
            Def {
                name: "checklist_add",
                description: "Add one item at the end of the checklist.",
                schema: schema(
                    json!({"text": {"type": "string"}, "status": status_schema}),
                    &["text"],
                ),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[("content", "text")],
                example: json!({"text": "run the whole test suite"}),
            },
            session,
            |session, args: AddArgs, _ctx| async move {
                let mut items = current(&session).await?;
                items.push((args.text, status_of(args.status)?));
                write(&session, items).await
            },
        ),
        spec(
            Def {
                name: "checklist_update",
                description: "Change the status or text of the item at position (1-based); tick items off as you finish.",
                schema: schema(
                    json!({"position": {"type": "integer", "minimum": 1}, "status": status_schema, "text": {"type": "string"}}),
                    &["position"],
                ),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[("id", "position"), ("index", "position")],
                example: json!({"position": 1, "status": "done"}),
            },
            session,
            |session, args: UpdateArgs, _ctx| async move {
                let mut items = current(&session).await?;
                let n = items.len();
                let Some(item) = usize::try_from(args.position - 1)
                    .ok()
                    .and_then(|i| items.get_mut(i))
                else {
                    return Err(refuse(format!(
                        "there is no item {}; the checklist has {n} items (see checklist_list)",
                        args.position
                    )));
                };
                if args.status.is_none() && args.text.is_none() {
                    return Err(refuse("give a status, a text or both"));
                }
                if let Some(status) = args.status {
                    item.1 = status_of(Some(status))?;
                }
                if let Some(t) = args.text {
                    item.0 = t;
                }
                write(&session, items).await
            },
        ),
        spec(
            Def {
                name: "checklist_list",
                description: "Show the checklist with positions and completion.",
                schema: schema(json!({}), &[]),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[],
                example: json!({}),
            },
            session,
            |session, _args: NoArgs, _ctx| async move {
                let items = session
                    .store
                    .checklist(session.task_id())
                    .await
                    .map_err(store_failure)?;
                text(render(&items))
            },
        ),
        spec(
            Def {
                name: "update_plan",
                description: "Record your plan (steps with a status) and why it changed. Unlike the checklist it is a free-form record for the person reading the timeline; use the checklist for the work items.",
                schema: schema(
                    json!({"explanation": {"type": "string"}, "plan": {"type": "array", "items": {"type": "object", "properties": {"step": {"type": "string"}, "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}}, "required": ["step", "status"], "additionalProperties": false}}}),
                    &["plan"],
                ),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[],
                example: json!({"explanation": "the bug is in the lexer", "plan": [{"step": "fix the lexer", "status": "in_progress"}]}),
            },
            session,
            |session, args: PlanArgs, _ctx| async move {
                let steps: Vec<_> = args
                    .plan
                    .iter()
                    .map(|s| json!({"step": s.step, "status": s.status}))
                    .collect();
                session
                    .store
                    .append_event(
                        &session.lease,
                        EventKind::Plan,
                        json!({"explanation": args.explanation, "plan": steps}),
                    )
                    .await
                    .map_err(store_failure)?;
                text(format!("Plan recorded ({} steps).", steps.len()))
            },
        ),
        spec(
            Def {
                name: "context_status",
                description: "Your context window: size, tokens used and left before compaction. Check before reading something large.",
                schema: schema(json!({}), &[]),
                read_only: true,
                approval: ApprovalClass::Read,
                aliases: &[],
                example: json!({}),
            },
            session,
            |session, _args: NoArgs, _ctx| async move {
                let status = session.context();
                if status.is_null() {
                    return text(
                        "The context window is not known here (no agent loop runs this call).",
                    );
                }
                text(serde_json::to_string_pretty(&status).unwrap_or_default())
            },
        ),
        spec(
            Def {
                name: "note",
                description: "Leave a note (finding, decision, caveat) in the task's timeline.",
                schema: schema(json!({"text": {"type": "string"}}), &["text"]),
                read_only: false,
                approval: ApprovalClass::Read,
                aliases: &[("note", "text"), ("message", "text")],
                example: json!({"text": "the flaky test depends on the time zone"}),
            },
            session,
            |session, args: NoteArgs, _ctx| async move {
                if args.text.trim().is_empty() {
                    return Err(refuse("the note is empty"));
                }
                session
                    .store
                    .append_event(&session.lease, EventKind::Note, json!({"text": args.text}))
                    .await
                    .map_err(store_failure)?;
                text("Noted.")
            },
        ),
    ]
}
