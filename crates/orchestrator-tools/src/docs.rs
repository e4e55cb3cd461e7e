//! docs/tools.md, rendered from the registry so that the reference and the code cannot drift: a test
//! renders it and compares it with the file in the repository.

use serde_json::Value;

use crate::registry::{Profile, Registry};

/// The markdown of docs/tools.md for the full profile.
pub fn render_tools_md() -> String {
    let registry = Registry::new(Profile::Full);
    let mut out = String::from(
        "# Tools\n\n<!-- Generated from the registry of crates/orchestrator-tools by `docs::render_tools_md`; a test fails when this file and the code differ. Regenerate with `UPDATE_DOCS=1 cargo test -p orchestrator-tools --test it docs`. -->\n\n",
    );
    out.push_str("Every tool gets the registry's guarantees: arguments are repaired only where unambiguous (a markdown fence around the JSON, trailing commas, known aliases such as `file_path` for `path` or `start_line` for `offset`, numbers sent as strings) and otherwise refused with a corrective message; results over 60 KiB (less in an agent task whose context window is filling: half of what is left, at least 2 KiB) show their head and tail with a marker, and the full text is kept for `retrieve_tool_result`; every path is confined to the workspace (`..`, absolute paths outside it and symlinks that lead out are refused); read-only calls of one batch run concurrently and mutating calls run in order.\n\n");
    out.push_str("After a successful write_file, edit_file, multi_edit, insert_text or apply_patch, the result also lists the errors of the files it changed (errors only, at most 20 per file), so the model sees at once what its edit broke: from the language server configured for the file's kind under `[lsp_servers]` (rust-analyzer checks on save with `cargo check`; the edit waits for it up to `diagnostics_timeout_sec`), else from a fast syntax check (a JSON or TOML parse, `python3 -m py_compile`, `node --check`, `gofmt -e`, `rustfmt`). A file whose errors are gone says so once. Language servers start on demand in the task's sandbox, only where the policy lets commands run without asking, and are shut down when idle and when the task's attempt ends.\n\n");
    out.push_str("Profiles: `minimal` (read-only tools), `coding` (minimal plus writing, patching, shell, git and diagnostics), `full` (coding plus fetch_url and web_search of these, and in an agent task most of the durable tools of [agent-tools.md](agent-tools.md): sub-agents, tasks, plans, durable shell jobs, PR attempts and automations). Of the durable tools, coding brings the checklist, task_gate_run and ask_user; `orchestrator tool list --profile P` lists exactly what a model of profile P can call (the terminal, GitHub and PR-attempt tools are sent once the model loads their group with `load_tools`; see [agent-tools.md](agent-tools.md)).\n\n");
    let minimal = Registry::new(Profile::Minimal);
    let coding = Registry::new(Profile::Coding);
    out.push_str("| tool | read-only | approval class | profiles |\n|---|---|---|---|\n");
    for spec in registry.specs() {
        let profiles = if minimal.spec(&spec.name).is_some() {
            "minimal, coding, full"
        } else if coding.spec(&spec.name).is_some() {
            "coding, full"
        } else {
            "full"
        };
        out.push_str(&format!(
            "| [{0}](#{0}) | {1} | {2} | {profiles} |\n",
            spec.name,
            if spec.read_only { "yes" } else { "no" },
            serde_json::to_value(spec.approval)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        ));
    }
    out.push('\n');
    out.push_str(&render_sections(&registry));
    out
}

/// One section per tool of `registry` (description, parameters, aliases, example) and the table of
/// its deprecated names; the worker renders its durable tools with it.
pub fn render_sections(registry: &Registry) -> String {
    let mut out = String::new();
    for spec in registry.specs() {
        out.push_str(&format!("## {}\n\n{}\n\n", spec.name, spec.description));
        out.push_str("| parameter | type | required | description |\n|---|---|---|---|\n");
        let required: Vec<&str> = spec
            .input_schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(props) = spec
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
        {
            for (name, prop) in props {
                let mut ty = prop
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("any")
                    .to_owned();
                if let Some(options) = prop.get("enum").and_then(Value::as_array) {
                    let list: Vec<String> = options
                        .iter()
                        .map(|o| format!("`{}`", o.as_str().unwrap_or_default()))
                        .collect();
                    ty = format!("{ty}: {}", list.join(", "));
                }
                out.push_str(&format!(
                    "| `{name}` | {ty} | {} | {} |\n",
                    if required.contains(&name.as_str()) {
                        "yes"
                    } else {
                        "no"
                    },
                    prop.get("description")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .replace('|', "\\|")
                ));
            }
        }
        if !spec.arg_aliases.is_empty() {
            let list: Vec<String> = spec
                .arg_aliases
                .iter()
                .map(|(a, c)| format!("`{a}` for `{c}`"))
                .collect();
            out.push_str(&format!("\nAlso accepted: {}.\n", list.join(", ")));
        }
        out.push_str(&format!(
            "\nExample:\n\n```json\n{}\n```\n\n",
            serde_json::to_string_pretty(&spec.example).unwrap_or_default()
        ));
    }
    let aliases: Vec<_> = registry.aliases().collect();
    if !aliases.is_empty() {
        out.push_str("## Deprecated names\n\nThese names still work and add a `_deprecation` block (`this_tool`, `use_instead`, `removed_in`, `message`) to the result's metadata.\n\n| name | use instead | removed in |\n|---|---|---|\n");
        for a in aliases {
            out.push_str(&format!(
                "| `{}` | [{}](#{}) | {} |\n",
                a.this_tool, a.use_instead, a.use_instead, a.removed_in
            ));
        }
    }
    out
}
