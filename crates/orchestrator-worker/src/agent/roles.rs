//! Sub-agent roles: what agent_spawn's `role` gives a child. Six are built in (general, explore,
//! plan, review, implementer, verifier); the config's `[agent_roles.NAME]` adds others or replaces
//! one, each with its instructions, a tool profile and a model.
//!
//! A role never widens anything: its profile is narrowed to the parent's like any requested
//! profile, and the child keeps the parent's policy and sandbox.

use serde::Deserialize;

/// A role as the config writes it, or as it is built in.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleDef {
    /// What the child's system prompt adds: how this role works.
    pub instructions: String,
    /// The tool profile the role asks for (narrowed to the parent's).
    #[serde(default)]
    pub profile: Option<String>,
    /// A model name the child talks to, at the parent's endpoint and key.
    #[serde(default)]
    pub model: Option<String>,
}

const BUILT_IN: &[(&str, Option<&str>, &str)] = &[
    (
        "general",
        None,
        "Do the task you are given as a whole, as your parent would.",
    ),
    (
        "explore",
        Some("minimal"),
        "You are an explorer: find facts in the workspace (files, symbols, callers, configuration) and report them with paths and line numbers. Change nothing.",
    ),
    (
        "plan",
        Some("minimal"),
        "You are a planner: read what you need, then answer with a numbered plan of the changes (files, functions, tests to add) and the risks. Change nothing.",
    ),
    (
        "review",
        Some("minimal"),
        "You are a reviewer: review the changes in the workspace against the task (read the diff and the code around it) and report each problem with its file and line, most serious first. Change nothing.",
    ),
    (
        "implementer",
        Some("coding"),
        "You are an implementer: make the change described, keep it as small as the task allows, and run the relevant tests before you finish.",
    ),
    (
        "verifier",
        Some("coding"),
        "You are a verifier: run the checks the task names (tests, linters, the gates) and report each one with its result and evidence. Fix nothing unless the task says so.",
    ),
];

/// The built-in roles' names.
pub fn built_in_names() -> Vec<&'static str> {
    BUILT_IN.iter().map(|(name, _, _)| *name).collect()
}

/// The role `name`: the config's, else a built-in one.
pub fn find(
    name: &str,
    configured: &std::collections::BTreeMap<String, RoleDef>,
) -> Option<RoleDef> {
    if let Some(role) = configured.get(name) {
        return Some(role.clone());
    }
    BUILT_IN
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, profile, instructions)| RoleDef {
            instructions: (*instructions).to_owned(),
            profile: profile.map(str::to_owned),
            model: None,
        })
}

/// Checks the config's roles.
pub fn validate(configured: &std::collections::BTreeMap<String, RoleDef>) -> Result<(), String> {
    for (name, role) in configured {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
        {
            return Err(format!(
                "agent_roles.{name:?}: a name is letters, digits, '-' and '_'"
            ));
        }
        if role.instructions.trim().is_empty() {
            return Err(format!("agent_roles.{name}.instructions is empty"));
        }
        if let Some(profile) = &role.profile
            && !matches!(profile.as_str(), "minimal" | "coding" | "full")
        {
            return Err(format!(
                "agent_roles.{name}.profile is {profile:?}: minimal, coding or full"
            ));
        }
        if role.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(format!("agent_roles.{name}.model is empty"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_config_adds_and_replaces_roles_and_bad_ones_are_refused() {
        let mut configured = BTreeMap::new();
        configured.insert(
            "review".to_owned(),
            RoleDef {
                instructions: "Review for security only.".into(),
                profile: Some("minimal".into()),
                model: Some("big-model".into()),
            },
        );
        assert_eq!(
            find("review", &configured).unwrap().model.as_deref(),
            Some("big-model")
        );
        assert_eq!(
            find("explore", &configured).unwrap().profile.as_deref(),
            Some("minimal")
        );
        assert!(find("nobody", &configured).is_none());
        assert!(validate(&configured).is_ok());
        configured.insert(
            "bad".to_owned(),
            RoleDef {
                instructions: "x".into(),
                profile: Some("root".into()),
                model: None,
            },
        );
        assert!(
            validate(&configured)
                .unwrap_err()
                .contains("minimal, coding or full")
        );
    }
}
