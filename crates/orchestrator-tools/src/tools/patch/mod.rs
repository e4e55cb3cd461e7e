//! apply_patch: the `*** Begin Patch` envelope (as Codex CLI writes it) and unified diffs, applied all or
//! nothing.
//!
//! The envelope's parser is in envelope.rs, the unified diff's in unified.rs, matching and applying
//! chunks in apply.rs; this file holds the tool: parsing either format, the plan and the commit.
//!
//! Every hunk of every file is parsed and applied in memory first, against an overlay of the files the
//! patch has already touched (so that one patch may add a file and then update it); only when all of
//! them succeed is anything written. That is a deliberate difference from Codex, which writes as it
//! goes and leaves the first files changed when the third fails. If a write itself fails half-way (a
//! full disk), the files already written are restored from the in-memory originals.
//!
//! Matching follows Codex: an optional `@@ context` line is found first, then the chunk's old lines at
//! or after the position of the previous chunk, exactly, then ignoring trailing whitespace, then
//! ignoring surrounding whitespace, then with typographic punctuation normalised. Unified-diff hunks
//! carry a line number, and of several candidate positions the one nearest to it wins. CRLF files stay
//! CRLF.

mod apply;
mod envelope;
mod unified;

use apply::*;
use envelope::*;
use std::collections::HashMap;
use std::path::PathBuf;
use unified::*;

use serde::Deserialize;
use serde_json::json;

use super::fsutil::looks_binary;
use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::{CHANGED_FILES, editing, with_wrote};
use crate::result::{ToolFailure, ToolOutcome, ToolResult, refuse};
use crate::workspace::Resolved;

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE_TO: &str = "*** Move to: ";
const EOF_MARKER: &str = "*** End of File";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    patch: String,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "apply_patch",
        description: "Patch files, all or nothing (every hunk is checked before any write). Formats: '*** Begin Patch' to '*** End Patch' (*** Add File / *** Delete File / *** Update File, optional *** Move to, chunks after @@ or '@@ context line', lines starting with ' ', '-' or '+', *** End of File) or a unified diff. For one replacement use edit_file.",
        schema: schema(
            json!({
                "patch": {"type": "string"}
            }),
            &["patch"],
        ),
        read_only: false,
        approval: ApprovalClass::Write,
        aliases: &[("input", "patch")],
        example: json!({"patch": "*** Begin Patch\n*** Update File: src/lib.rs\n@@ fn main() {\n-    println!(\"hi\");\n+    println!(\"hello\");\n*** End Patch\n"}),
        handler: editing("apply_patch", run),
    }
}

/// One file operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Hunk {
    Add {
        path: String,
        contents: String,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
    },
}

/// One replacement inside an updated file.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Chunk {
    pub context: Option<String>,
    pub old: Vec<String>,
    pub new: Vec<String>,
    pub end_of_file: bool,
    /// The 0-based line a unified diff says the old lines start at.
    pub hint: Option<usize>,
    /// A unified diff said the new file ends without a newline.
    pub new_no_final_newline: bool,
}

/// Parses either format.
pub(crate) fn parse(text: &str) -> Result<Vec<Hunk>, String> {
    let text = unwrap_text(text);
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if first == BEGIN || !looks_unified(&text) {
        parse_envelope(&text)
    } else {
        parse_unified(&text)
    }
}

/// Removes what models put around a patch: a markdown fence and a shell heredoc wrapper.
fn unwrap_text(text: &str) -> String {
    // Blank lines around the patch go; the lines themselves stay as they are: the last line may be
    // a context line whose trailing spaces are part of the file.
    let mut lines: Vec<&str> = text.lines().collect();
    while lines.first().is_some_and(|l| l.trim().is_empty()) {
        lines.remove(0);
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    if lines
        .first()
        .is_some_and(|l| l.trim_start().starts_with("```"))
        && lines.last().is_some_and(|l| l.trim() == "```")
        && lines.len() >= 2
    {
        lines = lines[1..lines.len() - 1].to_vec();
    }
    if let (Some(first), Some(last)) = (lines.first(), lines.last())
        && let Some(word) = heredoc_word(first)
        && lines.len() >= 2
        && last.trim() == word
    {
        lines = lines[1..lines.len() - 1].to_vec();
    }
    lines.join("\n")
}

/// `<<'EOF'`, `<<EOF`, `<<"EOF"`, optionally after `apply_patch`: returns the delimiter word.
fn heredoc_word(line: &str) -> Option<String> {
    let line = line.trim();
    let line = line
        .strip_prefix("apply_patch")
        .map(str::trim_start)
        .unwrap_or(line);
    let rest = line.strip_prefix("<<")?;
    let rest = rest.strip_prefix('-').unwrap_or(rest).trim();
    let word = rest.trim_matches(|c| c == '\'' || c == '"');
    (!word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then(|| word.to_owned())
}

fn looks_unified(text: &str) -> bool {
    let mut minus = false;
    for line in text.lines() {
        if line.starts_with("diff --git ") {
            return true;
        }
        if line.starts_with("--- ") {
            minus = true;
        } else if minus && line.starts_with("+++ ") {
            return true;
        } else {
            minus = false;
        }
    }
    false
}

/// The state of one path while the patch is applied in memory.
#[derive(Debug, Clone)]
enum Planned {
    Write(String),
    Remove,
}

struct Plan {
    order: Vec<PathBuf>,
    state: HashMap<PathBuf, Planned>,
    added: Vec<String>,
    modified: Vec<String>,
    deleted: Vec<String>,
}

impl Plan {
    fn set(&mut self, path: PathBuf, p: Planned) {
        if !self.state.contains_key(&path) {
            self.order.push(path.clone());
        }
        self.state.insert(path, p);
    }

    /// The current text of a path: the overlay first, then the disk.
    fn current(&self, abs: &std::path::Path) -> Option<Result<String, std::io::Error>> {
        match self.state.get(abs) {
            Some(Planned::Write(t)) => Some(Ok(t.clone())),
            Some(Planned::Remove) => Some(Err(std::io::Error::from(std::io::ErrorKind::NotFound))),
            None => None,
        }
    }
}

fn read_for_update(
    plan: &Plan,
    ctx: &ToolContext,
    abs: &std::path::Path,
    shown: &str,
) -> Result<String, String> {
    if let Some(r) = plan.current(abs) {
        return r.map_err(|e| format!("Failed to read file to update {shown}: {e}"));
    }
    let resolved = at(ctx, abs);
    if ctx.workspace.metadata(&resolved).is_ok_and(|m| m.is_dir()) {
        return Err(format!(
            "Failed to read file to update {shown}: it is a directory"
        ));
    }
    let bytes = ctx
        .workspace
        .read(&resolved)
        .map_err(|e| format!("Failed to read file to update {shown}: {e}"))?;
    if looks_binary(&bytes[..bytes.len().min(8192)]) {
        return Err(format!(
            "Failed to read file to update {shown}: it is a binary file"
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| format!("Failed to read file to update {shown}: it is not valid UTF-8"))
}

fn exists_as_file(plan: &Plan, ctx: &ToolContext, abs: &std::path::Path) -> bool {
    match plan.state.get(abs) {
        Some(Planned::Write(_)) => true,
        Some(Planned::Remove) => false,
        None => ctx
            .workspace
            .metadata(&at(ctx, abs))
            .is_ok_and(|m| m.is_file()),
    }
}

/// A planned path as the workspace's descriptor-relative operations take it. Every path of the
/// plan came out of `resolve_for_write`.
fn at(ctx: &ToolContext, abs: &std::path::Path) -> Resolved {
    Resolved {
        abs: abs.to_owned(),
        rel: ctx.workspace.rel_of(abs),
    }
}

fn run(args: Args, ctx: &ToolContext) -> ToolOutcome {
    let hunks = parse(&args.patch).map_err(|e| refuse(format!("{e}\nNo files were modified.")))?;
    if hunks.is_empty() {
        return Err(refuse(
            "No files were modified. The patch contains no file operation; add '*** Update File: path' (or Add File / Delete File) sections between '*** Begin Patch' and '*** End Patch'.",
        ));
    }
    let mut plan = Plan {
        order: Vec::new(),
        state: HashMap::new(),
        added: Vec::new(),
        modified: Vec::new(),
        deleted: Vec::new(),
    };
    let fail = |m: String| -> ToolFailure {
        refuse(format!(
            "{m}\nNo files were modified (apply_patch is all or nothing)."
        ))
    };
    for hunk in &hunks {
        match hunk {
            Hunk::Add { path, contents } => {
                let r = ctx
                    .workspace
                    .resolve_for_write(path)
                    .map_err(prefix_refusal)?;
                if ctx.workspace.metadata(&r).is_ok_and(|m| m.is_dir()) {
                    return Err(fail(format!(
                        "Failed to add file {path}: a directory of that name exists"
                    )));
                }
                plan.set(r.abs, Planned::Write(contents.clone()));
                plan.added.push(path.clone());
            }
            Hunk::Delete { path } => {
                let r = ctx
                    .workspace
                    .resolve_for_write(path)
                    .map_err(prefix_refusal)?;
                if !exists_as_file(&plan, ctx, &r.abs) {
                    return Err(fail(format!("Failed to delete file {path}")));
                }
                plan.set(r.abs, Planned::Remove);
                plan.deleted.push(path.clone());
            }
            Hunk::Update {
                path,
                move_to,
                chunks,
            } => {
                let r = ctx
                    .workspace
                    .resolve_for_write(path)
                    .map_err(prefix_refusal)?;
                let text = read_for_update(&plan, ctx, &r.abs, path).map_err(fail)?;
                let new = if chunks.is_empty() {
                    text
                } else {
                    apply_chunks(&text, chunks, path).map_err(fail)?
                };
                match move_to {
                    Some(dest) => {
                        let d = ctx
                            .workspace
                            .resolve_for_write(dest)
                            .map_err(prefix_refusal)?;
                        if ctx.workspace.metadata(&d).is_ok_and(|m| m.is_dir()) {
                            return Err(fail(format!(
                                "Failed to move {path} to {dest}: a directory of that name exists"
                            )));
                        }
                        if d.abs != r.abs {
                            plan.set(r.abs, Planned::Remove);
                        }
                        plan.set(d.abs, Planned::Write(new));
                        plan.modified.push(dest.clone());
                    }
                    None => {
                        plan.set(r.abs, Planned::Write(new));
                        plan.modified.push(path.clone());
                    }
                }
            }
        }
    }
    commit(&plan, ctx)?;
    let mut summary = String::from("Success. Updated the following files:\n");
    for (sign, list) in [
        ("A", &plan.added),
        ("M", &plan.modified),
        ("D", &plan.deleted),
    ] {
        for p in list.iter() {
            summary.push_str(&format!("{sign} {p}\n"));
        }
    }
    let result = ToolResult::text(summary)
        .with_meta(
            "files",
            json!({"added": plan.added, "modified": plan.modified, "deleted": plan.deleted}),
        )
        .with_meta(
            CHANGED_FILES,
            json!(
                plan.added
                    .iter()
                    .chain(plan.modified.iter())
                    .collect::<Vec<_>>()
            ),
        );
    Ok(with_wrote(
        result,
        ctx,
        plan.order.iter().map(PathBuf::as_path),
    ))
}

fn prefix_refusal(f: ToolFailure) -> ToolFailure {
    match f {
        ToolFailure::Refused(m) => refuse(format!("{m}\nNo files were modified.")),
        other => other,
    }
}

/// Writes the plan; on an IO error, restores what was already written and reports the failure.
fn commit(plan: &Plan, ctx: &ToolContext) -> Result<(), ToolFailure> {
    let mut undo: Vec<(PathBuf, Option<Vec<u8>>)> = Vec::new();
    let mut created_dirs: Vec<PathBuf> = Vec::new();
    for path in &plan.order {
        let Some(planned) = plan.state.get(path) else {
            continue;
        };
        let target = at(ctx, path);
        let original = ctx.workspace.read(&target).ok();
        let result = match planned {
            Planned::Write(text) => {
                let mut missing = Vec::new();
                let mut p = path.parent();
                while let Some(dir) = p {
                    if dir == ctx.workspace.root() || ctx.workspace.metadata(&at(ctx, dir)).is_ok()
                    {
                        break;
                    }
                    missing.push(dir.to_owned());
                    p = dir.parent();
                }
                created_dirs.extend(missing.into_iter().rev());
                ctx.workspace.write_atomic(&target, text.as_bytes())
            }
            Planned::Remove => match ctx.workspace.remove_file(&target) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && original.is_none() => Ok(()),
                other => other,
            },
        };
        match result {
            Ok(()) => {
                undo.push((path.clone(), original));
                ctx.reads.record(path);
            }
            Err(e) => {
                for (p, orig) in undo.into_iter().rev() {
                    let _ = match orig {
                        Some(bytes) => ctx.workspace.write_atomic(&at(ctx, &p), &bytes),
                        None => ctx.workspace.remove_file(&at(ctx, &p)),
                    };
                }
                for dir in created_dirs.iter().rev() {
                    let _ = ctx.workspace.remove_empty_dir(&at(ctx, dir));
                }
                return Err(refuse(format!(
                    "writing {} failed ({e}); the files already written were restored, so nothing changed",
                    ctx.workspace.rel_of(path)
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
