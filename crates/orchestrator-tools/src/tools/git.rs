//! git_status and git_diff: the state of the workspace's repository, through the git command line
//! (no libgit2 here: the tools crate stays light, and git's own output is what people expect),
//! hardened by [`crate::git_command`] so that the repository's config runs nothing.

use serde::Deserialize;
use serde_json::json;

use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::blocking;
use crate::result::{ToolFailure, ToolOutcome, ToolResult, refuse};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusArgs {
    path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiffArgs {
    path: Option<String>,
    staged: Option<bool>,
    base: Option<String>,
    stat: Option<bool>,
    context: Option<u64>,
}

pub(crate) fn status_def() -> ToolDef {
    ToolDef {
        name: "git_status",
        description: "The branch and the changed files (staged, unstaged, untracked, conflicted).",
        schema: schema(json!({"path": {"type": "string"}}), &[]),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[],
        example: json!({}),
        handler: blocking("git_status", status),
    }
}

pub(crate) fn diff_def() -> ToolDef {
    ToolDef {
        name: "git_diff",
        description: "Unified diff of unstaged changes, staged ones (staged), or everything since base (a commit, branch or tag); stat gives a summary. Untracked files are left out.",
        schema: schema(
            json!({
                "path": {"type": "string"},
                "staged": {"type": "boolean"},
                "base": {"type": "string"},
                "stat": {"type": "boolean"},
                "context": {"type": "integer", "minimum": 0, "description": "Lines, default 3."}
            }),
            &[],
        ),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[("cached", "staged"), ("ref", "base"), ("commit", "base")],
        example: json!({"staged": false, "path": "src"}),
        handler: blocking("git_diff", diff),
    }
}

fn git(ctx: &ToolContext, args: &[String]) -> Result<String, ToolFailure> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = crate::git_command::command(ctx.workspace.root(), &args)
        .map_err(|e| {
            if e.contains("not a git repository") {
                refuse("the workspace is not a git repository (git init creates one)")
            } else {
                refuse(e)
            }
        })?
        .output()
        .map_err(|e| refuse(format!("git could not be run: {e}; is git installed?")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("not a git repository") {
            return Err(refuse(
                "the workspace is not a git repository (git init creates one)",
            ));
        }
        return Err(refuse(format!(
            "git {} failed: {}",
            args.join(" "),
            err.trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn pathspec(ctx: &ToolContext, path: Option<&str>) -> Result<Vec<String>, ToolFailure> {
    match path {
        Some(p) => {
            let r = ctx.workspace.resolve(p)?;
            Ok(vec!["--".into(), r.rel])
        }
        None => Ok(Vec::new()),
    }
}

fn status(args: StatusArgs, ctx: &ToolContext) -> ToolOutcome {
    let mut cmd: Vec<String> = [
        "status",
        "--porcelain=v1",
        "--branch",
        "--untracked-files=all",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    cmd.extend(pathspec(ctx, args.path.as_deref())?);
    let out = git(ctx, &cmd)?;
    let mut branch = String::new();
    let (mut staged, mut unstaged, mut untracked, mut conflicted) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for line in out.lines() {
        if let Some(b) = line.strip_prefix("## ") {
            branch = b.to_owned();
            continue;
        }
        if line.len() < 4 {
            continue;
        }
        let (x, y, path) = (&line[0..1], &line[1..2], line[3..].to_owned());
        let word = |c: &str| match c {
            "M" => "modified",
            "A" => "added",
            "D" => "deleted",
            "R" => "renamed",
            "C" => "copied",
            "T" => "type changed",
            _ => "changed",
        };
        if x == "?" {
            untracked.push(path);
        } else if x == "U" || y == "U" || (x == "A" && y == "A") || (x == "D" && y == "D") {
            conflicted.push(path);
        } else {
            if x != " " {
                staged.push(format!("{}: {path}", word(x)));
            }
            if y != " " {
                unstaged.push(format!("{}: {path}", word(y)));
            }
        }
    }
    let mut text = format!(
        "Branch: {}\n",
        if branch.is_empty() {
            "(unknown)"
        } else {
            &branch
        }
    );
    let clean =
        staged.is_empty() && unstaged.is_empty() && untracked.is_empty() && conflicted.is_empty();
    for (title, list) in [
        ("Conflicted", &conflicted),
        ("Staged", &staged),
        ("Unstaged", &unstaged),
        ("Untracked", &untracked),
    ] {
        if !list.is_empty() {
            text.push_str(&format!("{title} ({}):\n", list.len()));
            for item in list.iter() {
                text.push_str(&format!("  {item}\n"));
            }
        }
    }
    if clean {
        text.push_str("Working tree clean.\n");
    }
    Ok(ToolResult::text(text).with_meta(
        "git",
        json!({"branch": branch, "staged": staged.len(), "unstaged": unstaged.len(), "untracked": untracked.len(), "conflicted": conflicted.len(), "clean": clean}),
    ))
}

fn diff(args: DiffArgs, ctx: &ToolContext) -> ToolOutcome {
    // External diffs and textconv are off in every git command (crate::git_command).
    let mut cmd: Vec<String> = vec!["diff".into(), "--no-color".into()];
    if args.staged.unwrap_or(false) {
        cmd.push("--cached".into());
    }
    if args.stat.unwrap_or(false) {
        cmd.push("--stat".into());
    }
    if let Some(c) = args.context {
        cmd.push(format!("-U{}", c.min(100)));
    }
    if let Some(base) = &args.base {
        // A base is a revision, never an option: refuse anything git would read as a flag.
        let ok = !base.starts_with('-')
            && !base.is_empty()
            && base
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._/~^@{}-:".contains(c));
        if !ok {
            return Err(refuse(format!(
                "git_diff: {base:?} is not a valid revision (a commit, branch or tag name)"
            )));
        }
        cmd.push(base.clone());
    }
    cmd.extend(pathspec(ctx, args.path.as_deref())?);
    let out = git(ctx, &cmd)?;
    if out.trim().is_empty() {
        let what = if args.staged.unwrap_or(false) {
            "staged changes"
        } else if args.base.is_some() {
            "changes against the base"
        } else {
            "unstaged changes (staged=true shows staged ones; git_status lists untracked files)"
        };
        return Ok(ToolResult::text(format!("No {what}.")).with_meta("git", json!({"files": 0})));
    }
    let files = out.lines().filter(|l| l.starts_with("diff --git ")).count();
    Ok(ToolResult::text(out).with_meta("git", json!({"files": files})))
}
