//! Which policy an agent task runs under, and how a child's is kept no broader than its parent's.

use orchestrator_store::Task;
use orchestrator_tools::{ApprovalClass, Decision, Policy, Profile};

/// The policy of a task that an automation created and that names none: reading is allowed, and
/// file writes, commands and the network are denied. An automation grants more by naming a policy.
pub fn automation_default_policy() -> Policy {
    let mut policy = Policy::allow_all();
    policy.classes.insert(ApprovalClass::Write, Decision::Deny);
    policy.classes.insert(ApprovalClass::Shell, Decision::Deny);
    policy
        .classes
        .insert(ApprovalClass::Network, Decision::Deny);
    policy
}

/// The policy a task runs under: its own, or the default of where it came from. A task that a
/// person created runs everything (the person chose to run it); an automation's task may only read.
pub fn effective_policy(task: &Task) -> Result<Policy, String> {
    match &task.agent.policy {
        Some(value) => serde_json::from_value(value.clone())
            .map_err(|e| format!("the task's policy cannot be read: {e}")),
        None if task.automation_id.is_some() => Ok(automation_default_policy()),
        None => Ok(Policy::allow_all()),
    }
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
