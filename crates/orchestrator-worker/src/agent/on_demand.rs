//! Tools offered on demand: groups of tools a task has but few turns need (terminals, GitHub, PR
//! attempts) are not sent whole in every request. One small tool, `load_tools`, names each group
//! and its tools; once the model loads a group, its definitions go with every later request.
//!
//! The first request is what every task pays for, and an 8k-context model needs room to work:
//! coding with a GitHub sent 43 schemas, about 1,100 tokens over its target, and the JSON of the
//! schemas alone was most of it. The tools stay in the registry all along, so a call by name works
//! before its group is loaded (loading only gives the model the parameters); a tool the policy
//! denies was withheld before the split and is neither sent nor offered.
//!
//! What is loaded follows from the conversation alone: the `load_tools` calls the task's replies
//! made. A resumed attempt replays them from the saved replies, so its requests carry the same
//! tools as before the crash. Loaded definitions are appended after the ones sent from the start,
//! so the bytes before them stay as they were (a prompt cache keeps that prefix).

use std::sync::Arc;

use orchestrator_tools::{ApprovalClass, ToolResult, ToolSpec};
use orchestrator_types::ToolCallRequest;
use serde_json::{Value, json};

use crate::model::ToolDefinition;

/// The name of the tool that loads the others.
pub(crate) const LOAD_TOOLS: &str = "load_tools";

/// A group of tools offered on demand.
struct Group {
    name: &'static str,
    /// What the group is for, in a few words: the model decides on this whether to load it.
    purpose: &'static str,
    has: fn(&str) -> bool,
}

const GROUPS: &[Group] = &[
    Group {
        name: "terminal",
        purpose: "interactive terminal sessions, for programs that prompt or redraw",
        has: |name| name.starts_with("pty_"),
    },
    Group {
        name: "github",
        purpose: "GitHub issues and pull requests: read them, comment, close, open a draft PR",
        has: |name| name.starts_with("github_") || name == "pr_open" || name == "pr_review_decline",
    },
    Group {
        name: "attempts",
        purpose: "alternative patches kept side by side with the gates that ran on them",
        has: |name| name.starts_with("pr_attempt_"),
    },
];

/// The tools held back from the requests, by group, and the ones loaded since.
#[derive(Debug, Default)]
pub(crate) struct OnDemand {
    /// Each group that has tools in this task, with those tools not yet loaded.
    groups: Vec<(&'static str, &'static str, Vec<ToolDefinition>)>,
}

impl OnDemand {
    /// Splits a task's definitions into those sent from the first request and those offered on
    /// demand. The first keep their order.
    pub(crate) fn split(definitions: Vec<ToolDefinition>) -> (Vec<ToolDefinition>, OnDemand) {
        let mut sent = Vec::with_capacity(definitions.len());
        let mut groups: Vec<(&'static str, &'static str, Vec<ToolDefinition>)> = GROUPS
            .iter()
            .map(|g| (g.name, g.purpose, Vec::new()))
            .collect();
        for definition in definitions {
            match GROUPS.iter().position(|g| (g.has)(&definition.name)) {
                Some(at) => groups[at].2.push(definition),
                None => sent.push(definition),
            }
        }
        groups.retain(|(_, _, tools)| !tools.is_empty());
        (sent, OnDemand { groups })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The `load_tools` tool for the groups held back, or `None` when there are none.
    pub(crate) fn spec(&self) -> Option<ToolSpec> {
        if self.is_empty() {
            return None;
        }
        let mut description = String::from(
            "Add a group of tools to your tool list; they work from your next turn. Groups:",
        );
        let mut members: Vec<(String, Vec<String>)> = Vec::new();
        for (name, purpose, tools) in &self.groups {
            let names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
            description.push_str(&format!(" {name} ({purpose}: {});", names.join(", ")));
            members.push(((*name).to_owned(), names));
        }
        description.pop();
        description.push('.');
        let group_names: Vec<&str> = self.groups.iter().map(|(name, _, _)| *name).collect();
        let members = Arc::new(members);
        Some(ToolSpec {
            name: LOAD_TOOLS.to_owned(),
            description,
            input_schema: json!({
                "type": "object",
                "properties": {
                    "groups": {"type": "array", "items": {"type": "string", "enum": group_names}}
                },
                "required": ["groups"],
                "additionalProperties": false,
            }),
            read_only: true,
            approval: ApprovalClass::Read,
            arg_aliases: vec![
                ("group".into(), "groups".into()),
                ("names".into(), "groups".into()),
                ("tools".into(), "groups".into()),
            ],
            example: json!({"groups": [group_names[0]]}),
            handler: Arc::new(move |args: Value, _ctx: orchestrator_tools::ToolContext| {
                let members = members.clone();
                async move { Ok(answer(&members, &asked(&args))) }
            }),
            precheck: None,
        })
    }

    /// The definitions a `load_tools` call asks for that are still held back, taken out of the
    /// held-back set (so a second load of the same group adds nothing).
    pub(crate) fn take(&mut self, call: &ToolCallRequest) -> Vec<ToolDefinition> {
        if call.name != LOAD_TOOLS {
            return Vec::new();
        }
        let Ok((args, _)) = orchestrator_tools::args::parse_raw(&call.arguments) else {
            return Vec::new();
        };
        let wanted = asked(&Value::Object(args));
        let mut taken = Vec::new();
        for (name, _, tools) in &mut self.groups {
            if wanted.iter().any(|w| w == name) {
                taken.append(tools);
            } else {
                // A tool named alone loads just that tool.
                let (named, rest): (Vec<_>, Vec<_>) = std::mem::take(tools)
                    .into_iter()
                    .partition(|t| wanted.contains(&t.name));
                *tools = rest;
                taken.extend(named);
            }
        }
        self.groups.retain(|(_, _, tools)| !tools.is_empty());
        taken
    }
}

/// The groups (or tool names) a call's arguments name: `groups` as a list or one string, under
/// any of its aliases.
fn asked(args: &Value) -> Vec<String> {
    let field = ["groups", "group", "names", "tools"]
        .iter()
        .find_map(|key| args.get(*key));
    match field {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(|s| s.trim().to_owned())
            .collect(),
        Some(Value::String(one)) => one.split(',').map(|s| s.trim().to_owned()).collect(),
        _ => Vec::new(),
    }
}

/// What the model reads back: what it loaded, or what it can load.
fn answer(members: &[(String, Vec<String>)], wanted: &[String]) -> ToolResult {
    let mut loaded = Vec::new();
    let mut unknown = Vec::new();
    for want in wanted {
        match members
            .iter()
            .find(|(group, tools)| group == want || tools.contains(want))
        {
            Some((group, tools)) if group == want => loaded.extend(tools.iter().cloned()),
            Some(_) => loaded.push(want.clone()),
            None => unknown.push(want.clone()),
        }
    }
    let groups: Vec<&str> = members.iter().map(|(g, _)| g.as_str()).collect();
    if loaded.is_empty() {
        return ToolResult::error(format!(
            "{LOAD_TOOLS}: name one or more groups to load: {}{}",
            groups.join(", "),
            if unknown.is_empty() {
                String::new()
            } else {
                format!(" ({} is not one)", unknown.join(", "))
            }
        ));
    }
    let mut text = format!(
        "Loaded {}. Their parameters are in your tool list from your next turn.",
        loaded.join(", ")
    );
    if !unknown.is_empty() {
        text.push_str(&format!(
            " Not loaded, not a group or tool offered here: {} (groups: {}).",
            unknown.join(", "),
            groups.join(", ")
        ));
    }
    ToolResult::text(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definition(name: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.to_owned(),
            description: format!("{name} does things"),
            parameters: json!({"type": "object", "properties": {}}),
        }
    }

    fn call(arguments: &str) -> ToolCallRequest {
        ToolCallRequest {
            id: "c1".into(),
            name: LOAD_TOOLS.into(),
            arguments: arguments.into(),
        }
    }

    fn names(definitions: &[ToolDefinition]) -> Vec<&str> {
        definitions.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn groups_are_held_back_and_loaded_once() {
        let all = [
            "edit_file",
            "github_comment",
            "pr_open",
            "pty_open",
            "read_file",
        ]
        .map(definition)
        .to_vec();
        let (sent, mut on_demand) = OnDemand::split(all);
        assert_eq!(names(&sent), ["edit_file", "read_file"]);
        let spec = on_demand.spec().expect("a load_tools tool");
        assert!(
            spec.description
                .contains("github (GitHub issues and pull requests: read them, comment, close, open a draft PR: github_comment, pr_open)"),
            "{}",
            spec.description
        );
        assert!(!spec.description.contains("attempts"), "no such tools here");
        assert_eq!(
            names(&on_demand.take(&call(r#"{"groups": ["github"]}"#))),
            ["github_comment", "pr_open"]
        );
        assert!(
            on_demand
                .take(&call(r#"{"groups": ["github"]}"#))
                .is_empty(),
            "loaded once"
        );
        // One tool by its name, in a string, through an alias.
        assert_eq!(
            names(&on_demand.take(&call(r#"{"names": "pty_open"}"#))),
            ["pty_open"]
        );
        assert!(on_demand.is_empty());
        assert!(on_demand.spec().is_none());
    }

    #[test]
    fn nothing_held_back_means_no_loader() {
        let (sent, on_demand) = OnDemand::split(vec![definition("read_file")]);
        assert_eq!(names(&sent), ["read_file"]);
        assert!(on_demand.spec().is_none());
    }

    #[test]
    fn the_answer_says_what_loaded_and_what_is_not_a_group() {
        let members = vec![("github".to_owned(), vec!["github_comment".to_owned()])];
        let result = answer(&members, &["github".into(), "gitlab".into()]);
        assert!(!result.is_error);
        let text = result.joined_text();
        assert!(text.contains("Loaded github_comment."), "{text}");
        assert!(
            text.contains("Not loaded, not a group or tool offered here: gitlab"),
            "{text}"
        );
        let result = answer(&members, &["gitlab".into()]);
        assert!(result.is_error);
        assert!(
            result
                .joined_text()
                .contains("name one or more groups to load: github")
        );
    }
}
