//! apply_patch: the `*** Begin Patch` envelope (as Codex CLI writes it) and unified diffs, applied all or
//! nothing.
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

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::json;

use super::fsutil::{looks_binary, write_atomic};
use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::blocking;
use crate::result::{ToolFailure, ToolOutcome, ToolResult, refuse};

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
        description: "Apply a patch to one or more files, all or nothing: every hunk of every file is checked before any file is written, so a failing hunk leaves the whole tree unchanged. Accepts the '*** Begin Patch' format (*** Add File / *** Delete File / *** Update File with optional *** Move to, chunks introduced by @@ or '@@ context line', lines starting with ' ', '-' or '+', *** End of File) and unified diffs (--- a/x, +++ b/x, @@ -l,n +l,n @@). Use it for changes across several files or for new files with content; use edit_file for a single replacement.",
        schema: schema(
            json!({
                "patch": {"type": "string", "description": "The whole patch text, from '*** Begin Patch' to '*** End Patch' (or a unified diff)."}
            }),
            &["patch"],
        ),
        read_only: false,
        approval: ApprovalClass::Write,
        aliases: &[("input", "patch")],
        example: json!({"patch": "*** Begin Patch\n*** Update File: src/lib.rs\n@@ fn main() {\n-    println!(\"hi\");\n+    println!(\"hello\");\n*** End Patch\n"}),
        handler: blocking("apply_patch", run),
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

fn parse_envelope(text: &str) -> Result<Vec<Hunk>, String> {
    let lines: Vec<&str> = text.trim().lines().collect();
    if lines.first().map(|l| l.trim()) != Some(BEGIN) {
        return Err(format!(
            "Invalid patch: The first line of the patch must be '{BEGIN}'"
        ));
    }
    if lines.len() < 2 || lines.last().map(|l| l.trim()) != Some(END) {
        return Err(format!(
            "Invalid patch: The last line of the patch must be '{END}'"
        ));
    }
    let body = &lines[1..lines.len() - 1];
    let mut hunks = Vec::new();
    let mut i = 0;
    while i < body.len() {
        if body[i].trim().is_empty() {
            i += 1;
            continue;
        }
        let (hunk, used) = parse_hunk(&body[i..], i + 2)?;
        hunks.push(hunk);
        i += used;
    }
    Ok(hunks)
}

fn hunk_error(line_number: usize, message: impl std::fmt::Display) -> String {
    format!("Invalid patch hunk on line {line_number}: {message}")
}

/// Parses one file operation starting at `lines[0]` (patch line `line_number`); returns it and the
/// number of lines it used.
fn parse_hunk(lines: &[&str], line_number: usize) -> Result<(Hunk, usize), String> {
    let header = lines[0].trim();
    if let Some(path) = header.strip_prefix(ADD) {
        let mut contents = String::new();
        let mut used = 1;
        for line in &lines[1..] {
            match line.strip_prefix('+') {
                Some(rest) => {
                    contents.push_str(rest);
                    contents.push('\n');
                    used += 1;
                }
                None => break,
            }
        }
        return Ok((
            Hunk::Add {
                path: path.trim().to_owned(),
                contents,
            },
            used,
        ));
    }
    if let Some(path) = header.strip_prefix(DELETE) {
        return Ok((
            Hunk::Delete {
                path: path.trim().to_owned(),
            },
            1,
        ));
    }
    if let Some(path) = header.strip_prefix(UPDATE) {
        let path = path.trim().to_owned();
        let mut used = 1;
        let mut move_to = None;
        if let Some(dest) = lines.get(1).and_then(|l| l.trim().strip_prefix(MOVE_TO)) {
            move_to = Some(dest.trim().to_owned());
            used += 1;
        }
        let mut chunks = Vec::new();
        while used < lines.len() {
            let line = lines[used];
            if line.trim().is_empty() && !chunks.is_empty() {
                // A blank line between chunks; inside a chunk it is an empty context line.
                used += 1;
                continue;
            }
            if line.trim_start().starts_with("***") && line.trim() != EOF_MARKER {
                break;
            }
            let (chunk, n) = parse_chunk(&lines[used..], line_number + used, chunks.is_empty())?;
            chunks.push(chunk);
            used += n;
        }
        if chunks.is_empty() {
            return Err(hunk_error(
                line_number,
                format!("Update file hunk for path '{path}' is empty"),
            ));
        }
        return Ok((
            Hunk::Update {
                path,
                move_to,
                chunks,
            },
            used,
        ));
    }
    Err(hunk_error(
        line_number,
        format!(
            "'{header}' is not a valid hunk header. Valid hunk headers: '*** Add File: {{path}}', '*** Delete File: {{path}}', '*** Update File: {{path}}'"
        ),
    ))
}

fn parse_chunk(lines: &[&str], line_number: usize, first: bool) -> Result<(Chunk, usize), String> {
    let head = lines[0];
    let (context, start) = if head.trim() == "@@" {
        (None, 1)
    } else if let Some(ctx) = head.trim_start().strip_prefix("@@ ") {
        (Some(ctx.to_owned()), 1)
    } else if first {
        (None, 0)
    } else {
        return Err(hunk_error(
            line_number,
            format!("Expected update hunk to start with a @@ context marker, got: '{head}'"),
        ));
    };
    if start >= lines.len() {
        return Err(hunk_error(
            line_number + 1,
            "Update hunk does not contain any lines",
        ));
    }
    let mut chunk = Chunk {
        context,
        ..Chunk::default()
    };
    let mut parsed = 0;
    for line in &lines[start..] {
        if line.trim() == EOF_MARKER {
            if parsed == 0 {
                return Err(hunk_error(
                    line_number + 1,
                    "Update hunk does not contain any lines",
                ));
            }
            chunk.end_of_file = true;
            parsed += 1;
            break;
        }
        match line.chars().next() {
            None => {
                chunk.old.push(String::new());
                chunk.new.push(String::new());
            }
            Some(' ') => {
                chunk.old.push(line[1..].to_owned());
                chunk.new.push(line[1..].to_owned());
            }
            Some('+') => chunk.new.push(line[1..].to_owned()),
            Some('-') => chunk.old.push(line[1..].to_owned()),
            Some(_) => {
                if parsed == 0 {
                    return Err(hunk_error(
                        line_number + start,
                        format!(
                            "Unexpected line found in update hunk: '{line}'. Every line should start with ' ' (context line), '+' (added line), or '-' (removed line)"
                        ),
                    ));
                }
                break;
            }
        }
        parsed += 1;
    }
    // A trailing empty context line is usually the blank line before the next header, not content.
    while chunk.old.last().is_some_and(String::is_empty)
        && chunk.new.last().is_some_and(String::is_empty)
        && !chunk.end_of_file
        && parsed > 0
    {
        let old_all_empty =
            chunk.old.iter().all(String::is_empty) && chunk.new.iter().all(String::is_empty);
        if old_all_empty {
            break;
        }
        if lines.get(start + parsed - 1).is_some_and(|l| l.is_empty()) {
            chunk.old.pop();
            chunk.new.pop();
            parsed -= 1;
            // Give the blank line back to the caller, who skips it.
        } else {
            break;
        }
    }
    Ok((chunk, start + parsed))
}

/// Strips `a/` or `b/` and a trailing tab-separated timestamp from a unified-diff path.
fn diff_path(raw: &str) -> Option<String> {
    let raw = raw.split('\t').next().unwrap_or(raw).trim();
    if raw == "/dev/null" {
        return None;
    }
    let raw = raw.trim_matches('"');
    let stripped = raw
        .strip_prefix("a/")
        .or_else(|| raw.strip_prefix("b/"))
        .unwrap_or(raw);
    Some(stripped.to_owned())
}

fn parse_unified(text: &str) -> Result<Vec<Hunk>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut hunks = Vec::new();
    let mut i = 0;
    let mut rename: (Option<String>, Option<String>) = (None, None);
    let mut git_paths: Option<(String, String)> = None;
    let flush_rename = |hunks: &mut Vec<Hunk>, rename: &mut (Option<String>, Option<String>)| {
        if let (Some(from), Some(to)) = (rename.0.take(), rename.1.take()) {
            hunks.push(Hunk::Update {
                path: from,
                move_to: Some(to),
                chunks: Vec::new(),
            });
        }
    };
    while i < lines.len() {
        let line = lines[i];
        if let Some(rest) = line.strip_prefix("diff --git ") {
            flush_rename(&mut hunks, &mut rename);
            git_paths = rest
                .split_once(" b/")
                .map(|(a, b)| (a.trim_start_matches("a/").to_owned(), b.to_owned()));
            i += 1;
            continue;
        }
        if let Some(from) = line.strip_prefix("rename from ") {
            rename.0 = Some(from.trim().to_owned());
            i += 1;
            continue;
        }
        if let Some(to) = line.strip_prefix("rename to ") {
            rename.1 = Some(to.trim().to_owned());
            i += 1;
            continue;
        }
        if line.starts_with("--- ") && lines.get(i + 1).is_some_and(|l| l.starts_with("+++ ")) {
            let old_path = diff_path(&line[4..]);
            let new_path = diff_path(&lines[i + 1][4..]);
            let pending_rename = (rename.0.take(), rename.1.take());
            i += 2;
            let mut chunks = Vec::new();
            while i < lines.len() && lines[i].starts_with("@@") {
                let (chunk, used) = parse_unified_hunk(&lines[i..], i + 1)?;
                chunks.push(chunk);
                i += used;
            }
            match (old_path, new_path) {
                (None, Some(path)) => {
                    let mut contents = String::new();
                    let mut no_eol = false;
                    for c in &chunks {
                        for l in &c.new {
                            contents.push_str(l);
                            contents.push('\n');
                        }
                        no_eol |= c.new_no_final_newline;
                    }
                    if no_eol && contents.ends_with('\n') {
                        contents.pop();
                    }
                    hunks.push(Hunk::Add { path, contents });
                }
                (Some(path), None) => hunks.push(Hunk::Delete { path }),
                (Some(old), Some(new)) => {
                    if chunks.is_empty() && pending_rename.0.is_none() {
                        return Err(format!("Invalid patch: the diff of {new} has no @@ hunk"));
                    }
                    let from = pending_rename.0.unwrap_or(old);
                    let to = pending_rename.1.unwrap_or(new);
                    let move_to = (to != from).then_some(to);
                    hunks.push(Hunk::Update {
                        path: from,
                        move_to,
                        chunks,
                    });
                }
                (None, None) => {
                    return Err("Invalid patch: a diff goes from /dev/null to /dev/null".into());
                }
            }
            continue;
        }
        i += 1;
    }
    flush_rename(&mut hunks, &mut rename);
    let _ = git_paths;
    Ok(hunks)
}

/// Parses `@@ -a,b +c,d @@` and its lines.
fn parse_unified_hunk(lines: &[&str], line_number: usize) -> Result<(Chunk, usize), String> {
    let header = lines[0];
    let bad = || {
        hunk_error(
            line_number,
            format!(
                "'{header}' is not a valid unified diff hunk header (expected '@@ -start,count +start,count @@')"
            ),
        )
    };
    let inner = header.strip_prefix("@@").ok_or_else(bad)?;
    let end = inner.find("@@").ok_or_else(bad)?;
    let mut parts = inner[..end].split_whitespace();
    let old_spec = parts
        .next()
        .and_then(|p| p.strip_prefix('-'))
        .ok_or_else(bad)?;
    let new_spec = parts
        .next()
        .and_then(|p| p.strip_prefix('+'))
        .ok_or_else(bad)?;
    let range = |s: &str| -> Option<(usize, usize)> {
        let mut it = s.split(',');
        let start = it.next()?.parse().ok()?;
        let count = match it.next() {
            Some(c) => c.parse().ok()?,
            None => 1,
        };
        Some((start, count))
    };
    let (old_start, mut old_left) = range(old_spec).ok_or_else(bad)?;
    let (_, mut new_left) = range(new_spec).ok_or_else(bad)?;
    let mut chunk = Chunk {
        hint: Some(old_start.saturating_sub(1)),
        ..Chunk::default()
    };
    let mut used = 1;
    let mut last_sign = ' ';
    while used < lines.len() && (old_left > 0 || new_left > 0 || lines[used].starts_with('\\')) {
        let line = lines[used];
        match line.chars().next() {
            Some('\\') => {
                if last_sign == '+' || last_sign == ' ' {
                    chunk.new_no_final_newline = true;
                }
            }
            Some(' ') | None => {
                let body = line.get(1..).unwrap_or("");
                chunk.old.push(body.to_owned());
                chunk.new.push(body.to_owned());
                old_left = old_left.saturating_sub(1);
                new_left = new_left.saturating_sub(1);
                last_sign = ' ';
            }
            Some('-') => {
                chunk.old.push(line[1..].to_owned());
                old_left = old_left.saturating_sub(1);
                last_sign = '-';
            }
            Some('+') => {
                chunk.new.push(line[1..].to_owned());
                new_left = new_left.saturating_sub(1);
                last_sign = '+';
            }
            Some(_) => break,
        }
        used += 1;
    }
    if old_left > 0 || new_left > 0 {
        return Err(hunk_error(
            line_number,
            format!("the hunk '{header}' ends early: its line counts do not match its lines"),
        ));
    }
    Ok((chunk, used))
}

fn normalise_punctuation(s: &str) -> String {
    s.trim()
        .chars()
        .map(|c| match c {
            '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}'
            | '\u{2212}' => '-',
            '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}' | '\u{2003}' | '\u{2004}' | '\u{2005}' | '\u{2006}'
            | '\u{2007}' | '\u{2008}' | '\u{2009}' | '\u{200A}' | '\u{202F}' | '\u{205F}'
            | '\u{3000}' => ' ',
            other => other,
        })
        .collect()
}

/// A comparison of a file line with a pattern line.
type LineEq = dyn Fn(&str, &str) -> bool;

/// Finds `pattern` in `lines` at or after `start` (at the end when `eof`), trying ever looser
/// comparisons. With a hint, the match nearest to it wins within the loosest level that matches.
fn seek(
    lines: &[String],
    pattern: &[String],
    start: usize,
    eof: bool,
    hint: Option<usize>,
) -> Option<usize> {
    if pattern.is_empty() {
        return Some(start);
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    let from = if eof {
        last_start
    } else {
        start.min(last_start + 1)
    };
    let levels: [&LineEq; 4] = [
        &|a, b| a == b,
        &|a, b| a.trim_end() == b.trim_end(),
        &|a, b| a.trim() == b.trim(),
        &|a, b| normalise_punctuation(a) == normalise_punctuation(b),
    ];
    for eq in levels {
        let matches = |i: usize| {
            pattern
                .iter()
                .enumerate()
                .all(|(j, p)| eq(&lines[i + j], p))
        };
        match hint {
            None => {
                if let Some(i) = (from..=last_start).find(|i| matches(*i)) {
                    return Some(i);
                }
            }
            Some(h) => {
                let best = (from..=last_start)
                    .filter(|i| matches(*i))
                    .min_by_key(|i| i.abs_diff(h));
                if best.is_some() {
                    return best;
                }
            }
        }
    }
    None
}

/// Applies the chunks of one file to its text; the message on failure is Codex's.
pub(crate) fn apply_chunks(text: &str, chunks: &[Chunk], shown: &str) -> Result<String, String> {
    let crlf = super::fsutil::is_crlf(text);
    let mut lines: Vec<String> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned())
        .collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut replacements: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let mut index = 0;
    let mut no_final_newline = false;
    for chunk in chunks {
        no_final_newline |= chunk.new_no_final_newline;
        if let Some(ctx) = &chunk.context {
            match seek(&lines, std::slice::from_ref(ctx), index, false, None) {
                Some(i) => index = i + 1,
                None => return Err(format!("Failed to find context '{ctx}' in {shown}")),
            }
        }
        if chunk.old.is_empty() {
            let at = match chunk.hint {
                Some(h) => h.min(lines.len()),
                None => lines.len(),
            };
            replacements.push((at, 0, chunk.new.clone()));
            continue;
        }
        let mut pattern: &[String] = &chunk.old;
        let mut new: &[String] = &chunk.new;
        let mut found = seek(&lines, pattern, index, chunk.end_of_file, chunk.hint);
        if found.is_none() && pattern.last().is_some_and(String::is_empty) {
            pattern = &pattern[..pattern.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = seek(&lines, pattern, index, chunk.end_of_file, chunk.hint);
        }
        match found {
            Some(start) => {
                replacements.push((start, pattern.len(), new.to_vec()));
                index = start + pattern.len();
            }
            None => {
                return Err(format!(
                    "Failed to find expected lines in {shown}:\n{}",
                    chunk.old.join("\n")
                ));
            }
        }
    }
    replacements.sort_by_key(|r| r.0);
    for w in replacements.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(format!(
                "Two hunks of {shown} overlap (near line {}); merge them into one",
                w[1].0 + 1
            ));
        }
    }
    for (start, len, new) in replacements.into_iter().rev() {
        lines.splice(start..start + len, new);
    }
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut out = lines.join(eol);
    // A file whose every line was removed is empty, not one blank line.
    if !no_final_newline && !lines.is_empty() {
        out.push_str(eol);
    }
    Ok(out)
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

fn read_for_update(plan: &Plan, abs: &std::path::Path, shown: &str) -> Result<String, String> {
    if let Some(r) = plan.current(abs) {
        return r.map_err(|e| format!("Failed to read file to update {shown}: {e}"));
    }
    if abs.is_dir() {
        return Err(format!(
            "Failed to read file to update {shown}: it is a directory"
        ));
    }
    let bytes =
        std::fs::read(abs).map_err(|e| format!("Failed to read file to update {shown}: {e}"))?;
    if looks_binary(&bytes[..bytes.len().min(8192)]) {
        return Err(format!(
            "Failed to read file to update {shown}: it is a binary file"
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| format!("Failed to read file to update {shown}: it is not valid UTF-8"))
}

fn exists_as_file(plan: &Plan, abs: &std::path::Path) -> bool {
    match plan.state.get(abs) {
        Some(Planned::Write(_)) => true,
        Some(Planned::Remove) => false,
        None => {
            std::fs::symlink_metadata(abs).is_ok_and(|m| m.is_file() || m.file_type().is_symlink())
        }
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
                if r.abs.is_dir() {
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
                if !exists_as_file(&plan, &r.abs) {
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
                let text = read_for_update(&plan, &r.abs, path).map_err(fail)?;
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
                        if d.abs.is_dir() {
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
    Ok(ToolResult::text(summary).with_meta(
        "files",
        json!({"added": plan.added, "modified": plan.modified, "deleted": plan.deleted}),
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
        let original = std::fs::read(path).ok();
        let result = match planned {
            Planned::Write(text) => {
                let mut missing = Vec::new();
                let mut p = path.parent();
                while let Some(dir) = p {
                    if dir.exists() {
                        break;
                    }
                    missing.push(dir.to_owned());
                    p = dir.parent();
                }
                created_dirs.extend(missing.into_iter().rev());
                write_atomic(path, text.as_bytes())
            }
            Planned::Remove => match std::fs::remove_file(path) {
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
                        Some(bytes) => write_atomic(&p, &bytes),
                        None => std::fs::remove_file(&p),
                    };
                }
                for dir in created_dirs.iter().rev() {
                    let _ = std::fs::remove_dir(dir);
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A file of distinct lines and an edit of it: the lines `[at, at + removed)` replaced by
    /// `added`, with up to three lines of context on each side.
    fn edit() -> impl Strategy<Value = (Vec<String>, usize, usize, Vec<String>, usize)> {
        (2..40usize)
            .prop_flat_map(|n| (Just(n), 0..n))
            .prop_flat_map(|(n, at)| {
                (
                    prop::collection::vec("[a-z ]{0,12}", n),
                    Just(at),
                    1..=(n - at),
                    prop::collection::vec("[A-Z ]{0,12}", 0..5),
                    0..4usize,
                )
            })
            .prop_map(|(words, at, removed, added, context)| {
                let lines = words
                    .iter()
                    .enumerate()
                    .map(|(i, w)| format!("line {i}: {w}"))
                    .collect();
                let added = added
                    .iter()
                    .enumerate()
                    .map(|(i, w)| format!("new {i}: {w}"))
                    .collect();
                (lines, at, removed, added, context)
            })
    }

    proptest! {
        // `PROPTEST_CASES` runs more (`just fuzz`).
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256)
        ))]

        /// A generated edit, written as an envelope and as a unified diff, applies to the
        /// generated file and gives exactly the expected file; the same patch against a file
        /// whose lines differ is refused.
        #[test]
        fn a_generated_patch_gives_the_expected_file(
            (lines, at, removed, added, context) in edit(),
        ) {
            let file = format!("{}\n", lines.join("\n"));
            let mut expected: Vec<String> = lines[..at].to_vec();
            expected.extend(added.iter().cloned());
            expected.extend(lines[at + removed..].iter().cloned());
            let expected = if expected.is_empty() {
                String::new()
            } else {
                format!("{}\n", expected.join("\n"))
            };
            let before = &lines[at.saturating_sub(context)..at];
            let after = &lines[at + removed..(at + removed + context).min(lines.len())];
            let mut body = String::new();
            for l in before {
                body.push_str(&format!(" {l}\n"));
            }
            for l in &lines[at..at + removed] {
                body.push_str(&format!("-{l}\n"));
            }
            for l in &added {
                body.push_str(&format!("+{l}\n"));
            }
            for l in after {
                body.push_str(&format!(" {l}\n"));
            }
            let envelope = format!(
                "*** Begin Patch\n*** Update File: f.txt\n@@\n{body}*** End Patch\n"
            );
            let old_count = before.len() + removed + after.len();
            let new_count = before.len() + added.len() + after.len();
            let unified = format!(
                "--- a/f.txt\n+++ b/f.txt\n@@ -{},{old_count} +{},{new_count} @@\n{body}",
                at - before.len() + 1,
                at - before.len() + 1,
            );
            for patch in [&envelope, &unified] {
                let hunks = parse(patch).map_err(|e| TestCaseError::fail(format!("{e}\n{patch}")))?;
                let [Hunk::Update { chunks, .. }] = hunks.as_slice() else {
                    return Err(TestCaseError::fail(format!("{hunks:?}")));
                };
                let out = apply_chunks(&file, chunks, "f.txt")
                    .map_err(|e| TestCaseError::fail(format!("{e}\n{patch}")))?;
                prop_assert_eq!(&out, &expected, "{}", patch);
                // Against a file none of whose lines the patch names, it is refused.
                let other = file.replace("line ", "row ");
                prop_assert!(apply_chunks(&other, chunks, "f.txt").is_err(), "{}", patch);
            }
        }
    }

    /// Found by the property test above: the patch text was trimmed as a whole, so a unified
    /// diff ending in a context line lost that line's trailing spaces, and the file with them.
    #[test]
    fn a_last_context_line_keeps_its_trailing_spaces() {
        let file = "a\nb  \n";
        let patch = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+A\n b  ";
        let hunks = parse(patch).unwrap();
        let [Hunk::Update { chunks, .. }] = hunks.as_slice() else {
            panic!("one update: {hunks:?}");
        };
        assert_eq!(apply_chunks(file, chunks, "f").unwrap(), "A\nb  \n");
    }

    /// Found by the property test above: removing every line left one blank line.
    #[test]
    fn removing_every_line_leaves_an_empty_file() {
        let chunk = Chunk {
            old: s(&["a", "b"]),
            ..Chunk::default()
        };
        assert_eq!(apply_chunks("a\nb\n", &[chunk], "f").unwrap(), "");
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn parses_envelope_with_leniency() {
        let p =
            "<<'EOF'\n *** Begin Patch\n*** Update File: a.txt\n-old\n+new\n*** End Patch \nEOF\n";
        let hunks = parse(p).unwrap();
        assert_eq!(
            hunks,
            vec![Hunk::Update {
                path: "a.txt".into(),
                move_to: None,
                chunks: vec![Chunk {
                    old: s(&["old"]),
                    new: s(&["new"]),
                    ..Chunk::default()
                }]
            }]
        );
        let e = parse("*** Begin Patch\n*** Frobnicate File: foo\n*** End Patch").unwrap_err();
        assert!(e.starts_with("Invalid patch hunk on line 2: '*** Frobnicate File: foo' is not a valid hunk header."), "{e}");
        let e = parse("*** Begin Patch\n*** Update File: foo.txt\n*** End Patch").unwrap_err();
        assert_eq!(
            e,
            "Invalid patch hunk on line 2: Update file hunk for path 'foo.txt' is empty"
        );
    }

    #[test]
    fn applies_chunks_like_codex() {
        let c = Chunk {
            context: Some("fn b".into()),
            old: s(&["  x"]),
            new: s(&["  y"]),
            ..Chunk::default()
        };
        let out = apply_chunks("fn a\n  x\nfn b\n  x\n", &[c], "f").unwrap();
        assert_eq!(out, "fn a\n  x\nfn b\n  y\n");
        let c = Chunk {
            old: s(&["no newline at end"]),
            new: s(&["first line", "second line"]),
            ..Chunk::default()
        };
        assert_eq!(
            apply_chunks("no newline at end", &[c], "f").unwrap(),
            "first line\nsecond line\n"
        );
        let c = Chunk {
            old: s(&["b"]),
            new: s(&["B"]),
            ..Chunk::default()
        };
        assert_eq!(apply_chunks("a\r\nb\r\n", &[c], "f").unwrap(), "a\r\nB\r\n");
        let c = Chunk {
            old: s(&["missing"]),
            new: s(&["x"]),
            ..Chunk::default()
        };
        assert_eq!(
            apply_chunks("a\n", &[c], "modify.txt").unwrap_err(),
            "Failed to find expected lines in modify.txt:\nmissing"
        );
    }

    #[test]
    fn parses_unified_diffs() {
        let p = "diff --git a/x.txt b/x.txt\n--- a/x.txt\n+++ b/x.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,1 @@\n+hello\n";
        let hunks = parse(p).unwrap();
        assert_eq!(hunks.len(), 2);
        let Hunk::Update { chunks, .. } = &hunks[0] else {
            panic!()
        };
        assert_eq!(apply_chunks("a\nb\nc\n", chunks, "x").unwrap(), "a\nB\nc\n");
        assert_eq!(
            hunks[1],
            Hunk::Add {
                path: "new.txt".into(),
                contents: "hello\n".into()
            }
        );
    }
}
