//! list_dir: a directory as an indented tree, directories first, honouring .gitignore and skipping
//! noise folders (dependency and build caches) that would drown the listing.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::json;

use super::fsutil::human_size;
use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::blocking;
use crate::result::{ToolOutcome, ToolResult, io_refusal, refuse};

/// Folders that are shown but never entered: they are large, generated and rarely what a model wants.
pub const NOISE_DIRS: &[&str] = &[
    ".git",
    "node_modules",
    "target",
    "__pycache__",
    ".venv",
    "venv",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    ".next",
    ".nuxt",
    ".gradle",
    ".idea",
    ".cache",
    "bower_components",
];
pub const DEFAULT_DEPTH: u64 = 2;
pub const MAX_DEPTH: u64 = 6;
pub const DEFAULT_LIMIT: u64 = 400;
pub const MAX_LIMIT: u64 = 2000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    path: Option<String>,
    depth: Option<u64>,
    limit: Option<u64>,
    include_hidden: Option<bool>,
    include_ignored: Option<bool>,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "list_dir",
        description: "List a directory as a tree with file sizes, skipping gitignored and hidden entries; node_modules, target and the like are shown but not entered.",
        schema: schema(
            json!({
                "path": {"type": "string"},
                "depth": {"type": "integer", "minimum": 1, "description": "Default 2, at most 6."},
                "limit": {"type": "integer", "minimum": 1, "description": "Default 400."},
                "include_hidden": {"type": "boolean"},
                "include_ignored": {"type": "boolean"}
            }),
            &[],
        ),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[("max_depth", "depth"), ("recursive_depth", "depth")],
        example: json!({"path": "src", "depth": 2}),
        handler: blocking("list_dir", run),
    }
}

struct Entry {
    name: String,
    is_dir: bool,
    size: u64,
    noise: bool,
}

fn run(args: Args, ctx: &ToolContext) -> ToolOutcome {
    let r = ctx.workspace.resolve(args.path.as_deref().unwrap_or("."))?;
    let meta = ctx
        .workspace
        .metadata(&r)
        .map_err(|e| io_refusal("list", &r.rel, &e))?;
    if !meta.is_dir() {
        return Err(refuse(format!(
            "{} is a file, not a directory; use read_file with {{\"path\": \"{}\"}} to read it",
            r.rel, r.rel
        )));
    }
    let depth = args.depth.unwrap_or(DEFAULT_DEPTH).clamp(1, MAX_DEPTH) as usize;
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT) as usize;
    let hidden = args.include_hidden.unwrap_or(false);
    let ignored = args.include_ignored.unwrap_or(false);

    let root = r.abs.clone();
    let mut walker = ignore::WalkBuilder::new(&root);
    walker
        .max_depth(Some(depth))
        .hidden(!hidden)
        .git_ignore(!ignored)
        .git_global(!ignored)
        .git_exclude(!ignored)
        .ignore(!ignored)
        .parents(!ignored)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| {
            // Noise folders are listed (so the model knows they exist) but not descended into.
            !(e.depth() > 1
                && e.path()
                    .parent()
                    .and_then(|p| p.file_name())
                    .is_some_and(|n| NOISE_DIRS.iter().any(|d| n == *d)))
        });
    let mut children: BTreeMap<PathBuf, Vec<Entry>> = BTreeMap::new();
    let mut total = 0usize;
    let mut errors = 0usize;
    for item in walker.build() {
        let Ok(entry) = item else {
            errors += 1;
            continue;
        };
        if entry.depth() == 0 {
            continue;
        }
        let path = entry.path();
        let Some(parent) = path.parent() else {
            continue;
        };
        // The walk reads directories by name; what it found must still be below the root when
        // looked up through the workspace's descriptor.
        if !ctx.workspace.is_beneath(path) {
            errors += 1;
            continue;
        }
        // A symlink that leads out of the workspace is listed but marked, never followed.
        let file_type = entry.file_type();
        let is_dir = file_type.is_some_and(|t| t.is_dir());
        let name = entry.file_name().to_string_lossy().into_owned();
        let noise = is_dir && NOISE_DIRS.contains(&name.as_str());
        let size = if is_dir {
            0
        } else {
            entry.metadata().map(|m| m.len()).unwrap_or(0)
        };
        total += 1;
        children.entry(parent.to_owned()).or_default().push(Entry {
            name,
            is_dir,
            size,
            noise,
        });
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| b.is_dir.cmp(&a.is_dir).then_with(|| a.name.cmp(&b.name)));
    }
    let mut out = String::new();
    let mut shown = 0usize;
    render(&children, &root, 0, limit, &mut shown, &mut out);
    let mut text = format!(
        "{}/ ({} entries{}{}):\n{out}",
        r.rel,
        total,
        if hidden { "" } else { ", hidden skipped" },
        if ignored { "" } else { ", gitignored skipped" },
    );
    if total == 0 {
        text.push_str("(empty directory)\n");
    }
    if shown < total {
        text.push_str(&format!(
            "[{} more entries not shown (limit {limit}); list a subdirectory, lower depth, or raise limit]\n",
            total - shown
        ));
    }
    if errors > 0 {
        text.push_str(&format!("[{errors} entries could not be read]\n"));
    }
    Ok(ToolResult::text(text).with_meta("entries", json!({"total": total, "shown": shown})))
}

fn render(
    children: &BTreeMap<PathBuf, Vec<Entry>>,
    dir: &std::path::Path,
    level: usize,
    limit: usize,
    shown: &mut usize,
    out: &mut String,
) {
    let Some(list) = children.get(dir) else {
        return;
    };
    for e in list {
        if *shown >= limit {
            return;
        }
        *shown += 1;
        let indent = "  ".repeat(level);
        if e.is_dir {
            let note = if e.noise { "  [not entered]" } else { "" };
            out.push_str(&format!("{indent}{}/{note}\n", e.name));
            render(children, &dir.join(&e.name), level + 1, limit, shown, out);
        } else {
            out.push_str(&format!("{indent}{} ({})\n", e.name, human_size(e.size)));
        }
    }
}
