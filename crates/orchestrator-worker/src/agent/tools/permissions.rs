//! request_permissions: the model asks a person, with a reason, to let named tools run without
//! asking for the rest of the task. What a person approves is kept as the approval itself, and
//! each attempt of the task starts with its policy widened by the approved requests (see
//! [`with_grants`]), so a grant survives a restart and is evidence of who gave it. A tool the
//! policy denies is never widened, whatever was approved; command rules keep applying.

use std::sync::{Arc, OnceLock};

use orchestrator_store::{ApprovalFilter, Store, approval_kind};
use orchestrator_tools::{ApprovalClass, Decision, Policy, ToolSpec, refuse};
use orchestrator_types::TaskId;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Def, Session, schema, spec, store_failure, text};
use crate::agent::session::Answer;

/// The name of the tool, which is also the tool its approvals are recorded for.
pub const TOOL: &str = "request_permissions";
/// Tools named per request.
const MAX_TOOLS: usize = 20;

/// The task's tools and their approval classes, filled in once the registry is whole (MCP tools
/// included).
pub type Catalog = Arc<OnceLock<Vec<(String, ApprovalClass)>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    tools: Vec<String>,
    reason: String,
}

pub(super) fn specs(session: &Arc<Session>, catalog: Catalog) -> Vec<ToolSpec> {
    vec![spec(
        Def {
            name: TOOL,
            description: "Ask the task's person to let these tools (e.g. exec_shell) run unasked for the rest of the task; the task waits. Denied tools are never widened.",
            schema: schema(
                json!({
                    "tools": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_TOOLS},
                    "reason": {"type": "string", "description": "For the person deciding."}
                }),
                &["tools", "reason"],
            ),
            read_only: false,
            approval: ApprovalClass::Read,
            aliases: &[("names", "tools"), ("why", "reason")],
            example: json!({"tools": ["exec_shell"], "reason": "I need to run cargo test after each change to the parser."}),
        },
        session,
        move |session, args: Args, ctx| {
            let catalog = catalog.clone();
            async move { request(&session, args, &ctx, &catalog).await }
        },
    )]
}

async fn request(
    session: &Session,
    args: Args,
    ctx: &orchestrator_tools::ToolContext,
    catalog: &Catalog,
) -> orchestrator_tools::ToolOutcome {
    let Some(call_id) = ctx.call_id().map(str::to_owned) else {
        return Err(refuse(
            "request_permissions works only inside an agent task",
        ));
    };
    // A resumed call whose request a person already decided reads that decision, whatever the
    // policy (widened by it) now says.
    if let Some(approval) = session
        .store
        .approval_for_call(session.task_id(), &call_id)
        .await
        .map_err(store_failure)?
        && approval.tool == TOOL
        && approval.status != "pending"
    {
        let names = granted_names(&approval.arguments).join(", ");
        return if approval.status == "approved" {
            text(format!(
                "Granted for the rest of this task by {}: {names} now run without asking.",
                approval.decided_by.as_deref().unwrap_or("a person")
            ))
        } else {
            Err(refuse(format!(
                "not granted ({}{}): go on without {names}, or ask again with a better reason",
                approval.status,
                approval
                    .answer
                    .as_deref()
                    .map(|a| format!(": {a}"))
                    .unwrap_or_default()
            )))
        };
    }
    let reason = args.reason.trim();
    if reason.is_empty() {
        return Err(refuse(
            "request_permissions: reason is empty; say why you need the tools",
        ));
    }
    if args.tools.is_empty() || args.tools.len() > MAX_TOOLS {
        return Err(refuse(format!(
            "request_permissions: name 1 to {MAX_TOOLS} tools"
        )));
    }
    let Some(catalog) = catalog.get() else {
        return Err(refuse(
            "request_permissions: the task's tools are not known yet",
        ));
    };
    let mut wanted = Vec::new();
    let mut allowed = Vec::new();
    let mut denied = Vec::new();
    for name in &args.tools {
        let Some((_, class)) = catalog.iter().find(|(n, _)| n == name) else {
            return Err(refuse(format!(
                "request_permissions: this task has no tool {name:?}"
            )));
        };
        match ctx.policy().decide(name, *class, &json!({})) {
            (Decision::Allow, _) => allowed.push(name.clone()),
            (Decision::Deny, why) => denied.push(format!("{name} ({why})")),
            (Decision::Ask, _) => {
                if !wanted.iter().any(|(n, _)| n == name) {
                    wanted.push((name.clone(), *class));
                }
            }
        }
    }
    let mut said = Vec::new();
    if !allowed.is_empty() {
        said.push(format!("already allowed: {}", allowed.join(", ")));
    }
    if !denied.is_empty() {
        said.push(format!(
            "denied by the task's policy, which no request widens: {}",
            denied.join("; ")
        ));
    }
    if wanted.is_empty() {
        let message = format!("Nothing to ask: {}.", said.join("; "));
        return if denied.is_empty() {
            text(message)
        } else {
            Err(refuse(message))
        };
    }
    let arguments = json!({
        "tools": wanted.iter().map(|(n, c)| json!({"name": n, "class": c})).collect::<Vec<_>>(),
        "reason": reason,
    });
    let names: Vec<&str> = wanted.iter().map(|(n, _)| n.as_str()).collect();
    let question = format!(
        "The agent asks to run {} without asking for the rest of this task: {reason}",
        names.join(", ")
    );
    match session
        .ask(
            &call_id,
            approval_kind::TOOL,
            TOOL,
            &arguments,
            &question,
            None,
        )
        .await
    {
        Answer::Approved => {
            let mut out = format!(
                "Granted for the rest of this task: {} now run without asking.",
                names.join(", ")
            );
            if !said.is_empty() {
                out.push_str(&format!(" ({})", said.join("; ")));
            }
            text(out)
        }
        Answer::Refused(why) => Err(refuse(format!(
            "not granted: {why}. Go on without {}, or ask again with a better reason",
            names.join(", ")
        ))),
        Answer::Answered(_) | Answer::Pending => text("waiting for a person to decide"),
    }
}

/// The tool names an approved request names.
fn granted_names(arguments: &Value) -> Vec<String> {
    arguments["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `policy` widened by the task's approved requests: each tool they name is allowed, unless the
/// policy denies it (a tool rule or its class's default), which no request widens.
pub async fn with_grants(
    mut policy: Policy,
    store: &Store,
    task: TaskId,
) -> Result<Policy, String> {
    let approved = store
        .list_approvals(&ApprovalFilter {
            status: Some("approved".into()),
            task: Some(task),
            limit: None,
        })
        .await
        .map_err(|e| format!("the task's approvals cannot be read: {e}"))?;
    let grants: Vec<(String, ApprovalClass)> = approved
        .iter()
        .filter(|a| a.tool == TOOL)
        .flat_map(|a| a.arguments["tools"].as_array().cloned().unwrap_or_default())
        .filter_map(|tool| {
            let name = tool["name"].as_str()?.to_owned();
            // A class that cannot be read counts as the strictest that matters here.
            let class =
                serde_json::from_value(tool["class"].clone()).unwrap_or(ApprovalClass::Shell);
            Some((name, class))
        })
        .collect();
    apply_grants(&mut policy, &grants);
    Ok(policy)
}

/// Allows each granted tool the policy does not deny.
fn apply_grants(policy: &mut Policy, grants: &[(String, ApprovalClass)]) {
    for (name, class) in grants {
        if policy.decide(name, *class, &json!({})).0 != Decision::Deny {
            policy.tools.insert(name.clone(), Decision::Allow);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_allows_what_was_asked_and_never_what_is_denied() {
        let mut policy = Policy::allow_all();
        policy.classes.insert(ApprovalClass::Shell, Decision::Ask);
        policy.classes.insert(ApprovalClass::Write, Decision::Deny);
        policy.tools.insert("fetch_url".into(), Decision::Deny);
        policy.commands.push(orchestrator_tools::CommandRule {
            matcher: orchestrator_tools::CommandMatch::Prefix("rm".into()),
            decision: Decision::Deny,
        });
        apply_grants(
            &mut policy,
            &[
                ("exec_shell".into(), ApprovalClass::Shell),
                ("write_file".into(), ApprovalClass::Write),
                ("fetch_url".into(), ApprovalClass::Network),
            ],
        );
        let decide = |tool: &str, class, command: &str| {
            policy.decide(tool, class, &json!({"command": command})).0
        };
        assert_eq!(
            decide("exec_shell", ApprovalClass::Shell, "cargo test"),
            Decision::Allow
        );
        // Command rules still apply to a granted shell tool.
        assert_eq!(
            decide("exec_shell", ApprovalClass::Shell, "rm -rf target"),
            Decision::Deny
        );
        // Another shell tool was not granted.
        assert_eq!(
            decide("task_shell_start", ApprovalClass::Shell, "ls"),
            Decision::Ask
        );
        assert_eq!(
            decide("write_file", ApprovalClass::Write, ""),
            Decision::Deny
        );
        assert_eq!(
            decide("fetch_url", ApprovalClass::Network, ""),
            Decision::Deny
        );
    }
}
