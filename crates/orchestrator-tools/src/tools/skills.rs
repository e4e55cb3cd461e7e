//! skill and read_skill: the workspace's own instructions for recurring jobs, kept as Markdown
//! files in `.agents/skills/` ("how we cut a release", "how to add a migration"). `skill` lists
//! them with the one-line description each starts with; `read_skill` reads one. Listing first and
//! reading on demand keeps them out of every request's prompt.

use serde::Deserialize;
use serde_json::json;

use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::blocking;
use crate::result::{ToolOutcome, ToolResult, io_refusal, refuse};

/// Where a workspace keeps its skills.
pub(crate) const SKILLS_DIR: &str = ".agents/skills";
/// Longest skill returned whole, in bytes.
const MAX_SKILL: usize = 64 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListArgs {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadArgs {
    name: String,
}

pub(crate) fn list_def() -> ToolDef {
    ToolDef {
        name: "skill",
        description: "The workspace's skills (.agents/skills/*.md: instructions for recurring jobs). Read one with read_skill before doing its job.",
        schema: schema(json!({}), &[]),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[],
        example: json!({}),
        handler: blocking("skill", list),
    }
}

pub(crate) fn read_def() -> ToolDef {
    ToolDef {
        name: "read_skill",
        description: "Read a workspace skill (.agents/skills/NAME.md) by the name skill lists.",
        schema: schema(json!({"name": {"type": "string"}}), &["name"]),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[("skill", "name")],
        example: json!({"name": "release"}),
        handler: blocking("read_skill", read),
    }
}

/// The description of a skill: the `description:` of a front matter, else its first line of
/// prose (a heading's text counts).
fn description(text: &str) -> String {
    let mut lines = text.lines();
    if text.starts_with("---") {
        lines.next();
        for line in lines.by_ref() {
            if line.trim() == "---" {
                break;
            }
            if let Some(value) = line.trim().strip_prefix("description:") {
                return value.trim().trim_matches('"').to_owned();
            }
        }
    }
    lines
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .unwrap_or("(no description)")
        .chars()
        .take(200)
        .collect()
}

fn list(_args: ListArgs, ctx: &ToolContext) -> ToolOutcome {
    let dir = ctx.workspace.resolve(SKILLS_DIR)?;
    let Ok(entries) = ctx.workspace.read_dir(&dir) else {
        return Ok(ToolResult::text(format!(
            "This workspace has no skills ({SKILLS_DIR}/ does not exist)."
        ))
        .with_meta("skills", json!([])));
    };
    // Each file is resolved and read through the workspace's descriptor like read_skill's, so a
    // committed symlink to the orchestrator's token (or anywhere outside) is skipped, not read.
    let mut skills: Vec<(String, String)> = entries
        .into_iter()
        .filter_map(|entry| {
            let name = entry.name.to_str()?;
            let stem = name.strip_suffix(".md")?;
            if stem.is_empty() || stem.starts_with('.') {
                return None;
            }
            let file = ctx
                .workspace
                .resolve(&format!("{SKILLS_DIR}/{name}"))
                .ok()?;
            let bytes = ctx.workspace.read(&file).ok()?;
            if bytes.len() > MAX_SKILL {
                return None;
            }
            let text = String::from_utf8(bytes).ok()?;
            Some((stem.to_owned(), description(&text)))
        })
        .collect();
    skills.sort();
    if skills.is_empty() {
        return Ok(
            ToolResult::text(format!("{SKILLS_DIR}/ holds no .md files."))
                .with_meta("skills", json!([])),
        );
    }
    let mut out = String::new();
    for (name, about) in &skills {
        out.push_str(&format!("{name}: {about}\n"));
    }
    out.push_str(&format!(
        "[{} skills; read one with read_skill]\n",
        skills.len()
    ));
    let names: Vec<&str> = skills.iter().map(|(n, _)| n.as_str()).collect();
    Ok(ToolResult::text(out).with_meta("skills", json!(names)))
}

fn read(args: ReadArgs, ctx: &ToolContext) -> ToolOutcome {
    let name = args.name.trim().trim_end_matches(".md");
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ' '))
        || name.starts_with('.')
    {
        return Err(refuse(format!(
            "read_skill: {:?} is not a skill name; call skill to list them",
            args.name
        )));
    }
    let r = ctx.workspace.resolve(&format!("{SKILLS_DIR}/{name}.md"))?;
    let text = match ctx.workspace.read_to_string(&r) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse(format!(
                "read_skill: there is no skill {name:?}; call skill to list them"
            )));
        }
        Err(e) => return Err(io_refusal("read_skill", &r.rel, &e)),
    };
    if text.len() > MAX_SKILL {
        return Err(refuse(format!(
            "read_skill: {} has {} bytes, over {MAX_SKILL}; read it with read_file in parts",
            r.rel,
            text.len()
        )));
    }
    Ok(ToolResult::text(text).with_meta("skill", json!({"name": name, "path": r.rel})))
}
