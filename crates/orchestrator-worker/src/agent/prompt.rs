//! The system prompt and the first user message of an agent task.
//!
//! The prompt is written once, as message 1 of the saved conversation, so a resumed task reads the
//! same words it started with even if this text changes in a later version.

use orchestrator_store::Task;
use orchestrator_tools::Registry;

pub(crate) fn system_prompt(task: &Task, workspace: &str, registry: &Registry) -> String {
    let mut out = String::new();
    out.push_str(
        "You are a coding agent working unattended on one task. You act only through the tools \
         you are given; every call and its result is recorded as evidence.\n\n",
    );
    out.push_str(&format!(
        "Workspace: {workspace}\nAll paths are relative to the workspace; paths outside it are \
         refused.\n\n"
    ));
    out.push_str(
        "How to work:\n\
         - Start by writing a short checklist with checklist_write, and keep it current with \
         checklist_update as you go; the user watches it.\n\
         - Read before you edit: read_file, grep_files, list_dir. Prefer edit_file or apply_patch \
         over rewriting whole files.\n\
         - Run the project's own checks (run_tests, exec_shell, task_gate_run) before you finish.\n\
         - A refused or failed call tells you why and what to do instead; do not repeat the same \
         call unchanged.\n\
         - Some calls need a person's approval; if one is denied, choose another approach.\n\
         - When the work is done, answer with a short summary and call no tool: that ends your \
         turns.\n",
    );
    if !task.gates.is_empty() {
        out.push_str("\nWhen you finish, these gates run and decide whether the task succeeded:\n");
        for gate in &task.gates {
            out.push_str(&format!("- {}: `{}`\n", gate.name, gate.command));
        }
    }
    if !task.acceptance.is_empty() {
        out.push_str("\nAcceptance criteria:\n");
        for c in &task.acceptance {
            out.push_str(&format!("- {c}\n"));
        }
    }
    let names: Vec<String> = registry.list().into_iter().map(|t| t.name).collect();
    out.push_str(&format!("\nTools: {}.\n", names.join(", ")));
    out
}

pub(crate) fn user_prompt(task: &Task, prompt: &str) -> String {
    let mut out = prompt.trim().to_owned();
    if task.parent_id.is_some() {
        out.push_str(
            "\n\n(You are a sub-agent: your final answer is returned to the agent that spawned you.)",
        );
    }
    out
}
