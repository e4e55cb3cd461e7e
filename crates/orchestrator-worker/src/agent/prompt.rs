//! The system prompt and the first user message of an agent task.
//!
//! The prompt is written once, as message 1 of the saved conversation, so a resumed task reads the
//! same words it started with even if this text changes in a later version.

use orchestrator_store::Task;
use orchestrator_tools::Registry;
use orchestrator_types::GateSpec;

pub(crate) fn system_prompt(
    gates: &[GateSpec],
    acceptance: &[String],
    workspace: &str,
    registry: &Registry,
    role: Option<&orchestrator_types::AgentRole>,
) -> String {
    let names: Vec<String> = registry.list().into_iter().map(|t| t.name).collect();
    // Every tool the prompt names comes from the registry: a line whose tools this task lacks is
    // left out, so the model is never told to call a tool it does not have.
    let have = |wanted: &[&'static str]| -> Vec<&'static str> {
        wanted
            .iter()
            .copied()
            .filter(|w| names.iter().any(|n| n == w))
            .collect()
    };
    let list = |tools: &[&str]| match tools {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    };
    let mut out = String::new();
    out.push_str(
        "You are a coding agent working unattended on one task. You act only through your \
         tools; every call and its result is recorded as evidence.\n\n",
    );
    if let Some(role) = role {
        out.push_str(&format!(
            "Your role: {}. {}\n\n",
            role.name,
            role.instructions.trim()
        ));
    }
    out.push_str(&format!(
        "Workspace: {workspace}\nAll paths are relative to the workspace; paths outside it are \
         refused.\n\n"
    ));
    out.push_str("How to work:\n");
    if let [write, update] = have(&["checklist_write", "checklist_update"])[..] {
        out.push_str(&format!(
            "- Start with a short checklist ({write}) and keep it current ({update}); the user \
             watches it.\n"
        ));
    }
    let read = have(&["read_file", "grep_files", "list_dir"]);
    if !read.is_empty() {
        out.push_str(&format!("- Read before you edit: {}.", read.join(", ")));
        let edit = have(&["edit_file", "apply_patch"]);
        if !edit.is_empty() {
            out.push_str(&format!(
                " Prefer {} over rewriting whole files.",
                list(&edit)
            ));
        }
        out.push('\n');
    }
    let check = have(&["exec_shell", "task_gate_run"]);
    if !check.is_empty() {
        out.push_str(&format!(
            "- Run the project's own checks ({}) before you finish.\n",
            list(&check)
        ));
    }
    out.push_str(
        "- A refused or failed call tells you why and what to do instead; do not repeat the same \
         call unchanged.\n\
         - Some calls need a person's approval; if one is denied, choose another approach.\n\
         - When the work is done, answer with a short summary and call no tool: that ends your \
         turns.\n",
    );
    if !gates.is_empty() {
        out.push_str("\nWhen you finish, these gates run and decide whether the task succeeded:\n");
        for gate in gates {
            out.push_str(&format!("- {}: `{}`\n", gate.name, gate.command));
        }
    }
    if !acceptance.is_empty() {
        out.push_str("\nAcceptance criteria:\n");
        for c in acceptance {
            out.push_str(&format!("- {c}\n"));
        }
    }
    out
}

pub(crate) fn user_prompt(task: &Task, prompt: &str) -> String {
    let mut out = prompt.trim().to_owned();
    if task.parent_id.is_some() {
        out.push_str(
            "\n\n(You are a sub-agent: your final answer is returned to the agent that spawned you.)",
        );
    }
    if let Some(pull) = &task.pull {
        out.push_str(&format!(
            "\n\n(This task works on pull request {pull}: the workspace holds its head. Do not \
             open a pull request. When you finish, the task's gates run on the workspace, and if \
             they pass your changes are pushed to the pull request's branch as one commit.)"
        ));
    }
    out
}

/// The message that follows a forked child's copy of its parent's conversation: who it is now,
/// its role if it has one, and its own task.
pub(crate) fn forked_prompt(task: &Task, prompt: &str) -> String {
    let parent = task
        .parent_id
        .map_or_else(|| "your parent".to_owned(), |p| format!("task {p}"));
    let mut out = format!(
        "You are now a sub-agent (task {}) forked from the conversation above, which was {parent}'s. Your tools may be fewer than the ones used above; use only those you have. Your final answer is returned to {parent}.",
        task.id
    );
    if let Some(role) = &task.agent.role {
        out.push_str(&format!(
            "\n\nYour role: {}. {}",
            role.name,
            role.instructions.trim()
        ));
    }
    out.push_str("\n\nYour task: ");
    out.push_str(prompt.trim());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use orchestrator_tools::Profile;

    /// Every snake_case word of the prompt names a tool of the task's registry, for every profile,
    /// so a prompt edit that names a missing tool fails here.
    #[test]
    fn the_prompt_names_only_tools_the_task_has() {
        let gates = [GateSpec::from_command("cargo test")];
        for profile in [Profile::Minimal, Profile::Coding, Profile::Full] {
            let registry = Registry::new(profile);
            let names: Vec<String> = registry.list().into_iter().map(|t| t.name).collect();
            let prompt = system_prompt(&gates, &[], "/ws", &registry, None);
            let words = prompt
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| {
                    w.contains('_') && w.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                });
            for word in words {
                assert!(
                    names.iter().any(|n| n == word),
                    "{profile:?}: the prompt names {word}, which is not a tool of this task:\n{prompt}"
                );
            }
        }
        let coding = system_prompt(&gates, &[], "/ws", &Registry::new(Profile::Coding), None);
        assert!(coding.contains("exec_shell"), "{coding}");
        let minimal = system_prompt(&gates, &[], "/ws", &Registry::new(Profile::Minimal), None);
        assert!(!minimal.contains("exec_shell"), "{minimal}");
    }
}
