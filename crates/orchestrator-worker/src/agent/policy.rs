//! Which policy an agent task runs under, and how a child's is kept no broader than its parent's.

use orchestrator_store::Task;
use orchestrator_tools::{ApprovalClass, Decision, Policy, Profile, TaskScope};
use serde_json::json;

/// The policy of a task that an automation created and that names none: reading its own tree of
/// tasks and the workspace is allowed, and file writes, commands and the network are denied. An
/// automation grants more by naming a policy.
pub fn automation_default_policy() -> Policy {
    let mut policy = Policy::allow_all();
    policy.task_scope = Some(TaskScope::Tree);
    policy.classes.insert(ApprovalClass::Write, Decision::Deny);
    policy.classes.insert(ApprovalClass::Shell, Decision::Deny);
    policy
        .classes
        .insert(ApprovalClass::Network, Decision::Deny);
    policy
}

/// The policy a task runs under: its own, or the default of where it came from. A task that a
/// person created runs everything (the person chose to run it); an automation's task may only read.
///
/// The task scope is always filled in here, so the policy a child copies names it: a policy that
/// leaves it unset gets its origin's default, `tree` for an automation's task (a trigger's task
/// has it set by the trigger) and `all` for a person's.
pub fn effective_policy(task: &Task) -> Result<Policy, String> {
    policy_of(task.agent.policy.as_ref(), task.automation_id.is_some())
}

/// The policy a task with this stored policy runs under; `by_automation` when an automation's
/// slot created it.
fn policy_of(stored: Option<&serde_json::Value>, by_automation: bool) -> Result<Policy, String> {
    let mut policy = match stored {
        Some(value) => serde_json::from_value(value.clone())
            .map_err(|e| format!("the task's policy cannot be read: {e}"))?,
        None if by_automation => automation_default_policy(),
        None => Policy::allow_all(),
    };
    policy.task_scope.get_or_insert(if by_automation {
        TaskScope::Tree
    } else {
        TaskScope::All
    });
    Ok(policy)
}

/// How the policy decides a command an agent gives as a gate (for a child task, or to run itself
/// with task_gate_run or task_shell_start): exactly as it decides `exec_shell` with that command,
/// so the rules for exec_shell, the shell class's default and the command rules all apply. A gate
/// is a shell command however it is named.
pub(crate) fn decide_gate(policy: &Policy, command: &str) -> (Decision, String) {
    policy.decide(
        "exec_shell",
        ApprovalClass::Shell,
        &json!({ "command": command }),
    )
}

/// Profiles in order of what they allow.
pub(crate) fn rank(profile: Profile) -> u8 {
    match profile {
        Profile::Minimal => 0,
        Profile::Coding => 1,
        Profile::Full => 2,
    }
}

pub(crate) fn profile_name(rank: u8) -> &'static str {
    match rank {
        0 => "minimal",
        1 => "coding",
        _ => "full",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_scope_is_the_origins_unless_the_policy_names_one() {
        let scope = |stored: Option<serde_json::Value>, by_automation: bool| {
            policy_of(stored.as_ref(), by_automation)
                .ok()
                .and_then(|p| p.task_scope)
        };
        assert_eq!(scope(None, false), Some(TaskScope::All), "a person's task");
        assert_eq!(scope(None, true), Some(TaskScope::Tree), "an automation's");
        // An automation that names a policy (`--ask shell` builds one from allow-all) still gets
        // the narrow scope unless the policy says otherwise.
        let named = serde_json::to_value(Policy::allow_all()).ok();
        assert_eq!(scope(named.clone(), true), Some(TaskScope::Tree));
        assert_eq!(scope(named, false), Some(TaskScope::All));
        let wide = Some(json!({"default": "allow", "task_scope": "all"}));
        assert_eq!(scope(wide, true), Some(TaskScope::All));
        let narrow = Some(json!({"default": "allow", "task_scope": "tree"}));
        assert_eq!(scope(narrow, false), Some(TaskScope::Tree));
    }

    #[test]
    fn a_gate_is_decided_as_exec_shell() {
        let mut policy = Policy::allow_all();
        assert_eq!(decide_gate(&policy, "cargo test").0, Decision::Allow);
        policy.tools.insert("exec_shell".into(), Decision::Deny);
        let (decision, rule) = decide_gate(&policy, "cargo test");
        assert_eq!(decision, Decision::Deny);
        assert!(rule.contains("exec_shell"), "{rule}");
        let read_only = automation_default_policy();
        let (decision, rule) = decide_gate(&read_only, "touch /tmp/x");
        assert_eq!(decision, Decision::Deny);
        assert_eq!(rule, "the default for Shell tools");
        let mut asks = Policy::allow_all();
        asks.classes.insert(ApprovalClass::Shell, Decision::Ask);
        asks.commands = vec![orchestrator_tools::CommandRule {
            matcher: orchestrator_tools::CommandMatch::Prefix("cargo test".into()),
            decision: Decision::Allow,
        }];
        assert_eq!(decide_gate(&asks, "cargo test -p x").0, Decision::Allow);
        assert_eq!(decide_gate(&asks, "cargo test; curl x").0, Decision::Ask);
    }
}
