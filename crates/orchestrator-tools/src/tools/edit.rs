//! edit_file and multi_edit: replace text that must match exactly once (or every time, with
//! replace_all).
//!
//! When the exact text is not found, a ladder of strategies is tried in order: the file's line endings,
//! then whole lines compared without trailing whitespace, then without indentation (the new text is
//! re-indented to fit), then the same again with escape sequences (`\n`, `\t`, `\"`) decoded, for models
//! that escaped their text twice. Every strategy still needs a unique match. There is deliberately no
//! step that matches on the first and last lines only or on similarity: such a guess can replace the
//! wrong code, and a clear failure that shows the closest region costs one more call, not a bug.

use serde::Deserialize;
use serde_json::json;

use super::fsutil::{is_crlf, looks_binary, to_eol};
use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::{CHANGED_FILES, editing, with_wrote};
use crate::result::{ToolOutcome, ToolResult, io_refusal, refuse};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    replace_all: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OneEdit {
    old_string: String,
    new_string: String,
    replace_all: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MultiArgs {
    path: String,
    edits: Vec<OneEdit>,
}

pub(crate) fn edit_file_def() -> ToolDef {
    ToolDef {
        name: "edit_file",
        description: "Replace old_string by new_string in a file; old_string must match exactly once (add surrounding lines) unless replace_all. Small whitespace and escaping differences are tolerated; a miss shows the closest region.",
        schema: schema(
            json!({
                "path": {"type": "string"},
                "old_string": {"type": "string", "description": "Without line numbers."},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"}
            }),
            &["path", "old_string", "new_string"],
        ),
        read_only: false,
        approval: ApprovalClass::Write,
        aliases: &[("search", "old_string"), ("replace", "new_string")],
        example: json!({"path": "src/lib.rs", "old_string": "fn old_name(", "new_string": "fn new_name(", "replace_all": false}),
        handler: editing("edit_file", run_edit),
    }
}

pub(crate) fn multi_edit_def() -> ToolDef {
    ToolDef {
        name: "multi_edit",
        description: "Apply several edit_file edits to one file in order, all or nothing.",
        schema: schema(
            json!({
                "path": {"type": "string"},
                "edits": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "old_string": {"type": "string"},
                            "new_string": {"type": "string"},
                            "replace_all": {"type": "boolean"}
                        },
                        "required": ["old_string", "new_string"]
                    }
                }
            }),
            &["path", "edits"],
        ),
        read_only: false,
        approval: ApprovalClass::Write,
        aliases: &[],
        example: json!({"path": "src/lib.rs", "edits": [
            {"old_string": "use std::fs;", "new_string": "use std::fs;\nuse std::io;"},
            {"old_string": "let x = 1;", "new_string": "let x = 2;"}
        ]}),
        handler: editing("multi_edit", run_multi),
    }
}

/// What an applied edit did.
#[derive(Debug, Clone)]
pub(crate) struct Applied {
    pub content: String,
    pub count: usize,
    pub strategy: &'static str,
    /// 1-based first line of the first replacement in the new content.
    pub first_line: usize,
}

/// Applies one edit to `content`; `Err` is the message for the model.
pub(crate) fn apply_edit(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<Applied, String> {
    if old.is_empty() {
        return Err("old_string is empty. To create a file use write_file; to insert text, put a neighbouring line in old_string and the same line plus your text in new_string.".into());
    }
    if old == new {
        return Err("old_string and new_string are identical, so nothing would change; give the text you want in new_string.".into());
    }
    let crlf = is_crlf(content);
    let mut attempts: Vec<(&'static str, String, String)> =
        vec![("exact", old.to_owned(), new.to_owned())];
    let unescaped = unescape(old).zip(unescape(new).or_else(|| Some(new.to_owned())));
    let variants: Vec<(bool, String, String)> =
        std::iter::once((false, old.to_owned(), new.to_owned()))
            .chain(unescaped.map(|(o, n)| (true, o, n)))
            .collect();
    attempts.clear();
    for (escaped, o, n) in &variants {
        if *escaped {
            attempts.push(("escape sequences decoded", o.clone(), n.clone()));
        } else {
            attempts.push(("exact", o.clone(), n.clone()));
        }
        let eol_o = to_eol(o, crlf);
        if eol_o != *o {
            attempts.push((
                if *escaped {
                    "escape sequences decoded, line endings"
                } else {
                    "line endings"
                },
                eol_o,
                n.clone(),
            ));
        }
    }
    for (strategy, o, n) in &attempts {
        let n = if crlf { to_eol(n, true) } else { n.clone() };
        let positions: Vec<usize> = content.match_indices(o.as_str()).map(|(i, _)| i).collect();
        match positions.len() {
            0 => continue,
            1 => {}
            k if !replace_all => return Err(ambiguous(content, &positions, k, strategy)),
            _ => {}
        }
        let first_line = line_of(content, positions[0]);
        let new_content = if replace_all {
            content.replace(o.as_str(), &n)
        } else {
            content.replacen(o.as_str(), &n, 1)
        };
        return Ok(Applied {
            content: new_content,
            count: positions.len(),
            strategy,
            first_line,
        });
    }
    for (escaped, o, n) in &variants {
        for (strategy, norm) in [
            ("trailing whitespace ignored", Norm::TrimEnd),
            ("indentation ignored", Norm::Trim),
        ] {
            let strategy = match (escaped, strategy) {
                (true, "trailing whitespace ignored") => {
                    "escape sequences decoded, trailing whitespace ignored"
                }
                (true, _) => "escape sequences decoded, indentation ignored",
                (false, s) => s,
            };
            if let Some(result) = line_match(content, o, n, norm, replace_all, strategy, crlf) {
                return result;
            }
        }
    }
    Err(not_found(content, old))
}

#[derive(Clone, Copy, PartialEq)]
enum Norm {
    TrimEnd,
    Trim,
}

fn norm(s: &str, n: Norm) -> &str {
    let s = s.strip_suffix('\r').unwrap_or(s);
    match n {
        Norm::TrimEnd => s.trim_end(),
        Norm::Trim => s.trim(),
    }
}

/// Splits into lines keeping each line's ending.
fn split_keep(content: &str) -> Vec<&str> {
    content.split_inclusive('\n').collect()
}

fn indent_of(s: &str) -> &str {
    &s[..s.len() - s.trim_start().len()]
}

/// Whole-line matching under a normalization. `None` when nothing matched (try the next strategy).
fn line_match(
    content: &str,
    old: &str,
    new: &str,
    n: Norm,
    replace_all: bool,
    strategy: &'static str,
    crlf: bool,
) -> Option<Result<Applied, String>> {
    let old_lf = old.replace("\r\n", "\n");
    let old_body = old_lf.strip_suffix('\n').unwrap_or(&old_lf);
    let old_lines: Vec<&str> = old_body.split('\n').collect();
    if old_lines.iter().all(|l| norm(l, n).is_empty()) {
        return None;
    }
    let file_lines = split_keep(content);
    let k = old_lines.len();
    if file_lines.len() < k {
        return None;
    }
    let mut hits = Vec::new();
    let mut i = 0;
    while i + k <= file_lines.len() {
        if (0..k)
            .all(|j| norm(file_lines[i + j].trim_end_matches('\n'), n) == norm(old_lines[j], n))
        {
            hits.push(i);
            i += k;
        } else {
            i += 1;
        }
    }
    if hits.is_empty() {
        return None;
    }
    if hits.len() > 1 && !replace_all {
        let lines: Vec<String> = hits.iter().take(10).map(|h| (h + 1).to_string()).collect();
        return Some(Err(format!(
            "old_string matches {} places when {strategy} (starting at lines {}); include more surrounding lines to make it unique, or set replace_all=true to change all of them.",
            hits.len(),
            lines.join(", ")
        )));
    }
    let eol = if crlf { "\r\n" } else { "\n" };
    let new_lf = new.replace("\r\n", "\n");
    let new_body = new_lf.strip_suffix('\n').unwrap_or(&new_lf);
    let mut out = String::with_capacity(content.len() + new.len());
    let mut cursor = 0;
    for &h in &hits {
        for line in &file_lines[cursor..h] {
            out.push_str(line);
        }
        let last = file_lines[h + k - 1];
        let last_eol = if last.ends_with("\r\n") {
            "\r\n"
        } else if last.ends_with('\n') {
            "\n"
        } else {
            ""
        };
        if !new_body.is_empty() || !new_lf.is_empty() {
            let replaced: Vec<String> = if n == Norm::Trim {
                // Re-indent line by line: the indentation of the old line at the same position (or the
                // last one) maps to the indentation the file has there.
                new_body
                    .split('\n')
                    .enumerate()
                    .map(|(j, l)| {
                        let at = j.min(k - 1);
                        let old_indent = indent_of(old_lines[at]);
                        let file_indent =
                            indent_of(file_lines[h + at].trim_end_matches(['\n', '\r']));
                        match l.strip_prefix(old_indent) {
                            Some(rest) if !l.trim().is_empty() => format!("{file_indent}{rest}"),
                            _ => l.to_owned(),
                        }
                    })
                    .collect()
            } else {
                new_body.split('\n').map(str::to_owned).collect()
            };
            out.push_str(&replaced.join(eol));
            out.push_str(last_eol);
        }
        cursor = h + k;
    }
    for line in &file_lines[cursor..] {
        out.push_str(line);
    }
    Some(Ok(Applied {
        content: out,
        count: hits.len(),
        strategy,
        first_line: hits[0] + 1,
    }))
}

/// Decodes `\n`, `\t`, `\r`, `\"`, `\'` and `\\` when the text contains them; `None` when it has none
/// (so that text with real backslashes is not rewritten needlessly).
fn unescape(s: &str) -> Option<String> {
    if !s.contains('\\') {
        return None;
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    let mut changed = false;
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => {
                out.push('\n');
                changed = true;
            }
            Some('t') => {
                out.push('\t');
                changed = true;
            }
            Some('r') => {
                out.push('\r');
                changed = true;
            }
            Some('"') => {
                out.push('"');
                changed = true;
            }
            Some('\'') => {
                out.push('\'');
                changed = true;
            }
            Some('\\') => {
                out.push('\\');
                changed = true;
            }
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    changed.then_some(out)
}

fn line_of(content: &str, byte: usize) -> usize {
    content.as_bytes()[..byte]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

fn ambiguous(content: &str, positions: &[usize], k: usize, strategy: &str) -> String {
    let lines: Vec<String> = positions
        .iter()
        .take(10)
        .map(|p| line_of(content, *p).to_string())
        .collect();
    let how = if strategy == "exact" {
        String::new()
    } else {
        format!(" ({strategy})")
    };
    format!(
        "old_string matches {k} places{how}, at lines {}{}; include more surrounding lines to make it unique, or set replace_all=true to change all of them.",
        lines.join(", "),
        if k > 10 { ", ..." } else { "" }
    )
}

/// The failure message: the closest region of the file with line numbers, found by counting, in each
/// window of the file as long as old_string, the lines that are equal when trimmed. Only for showing:
/// nothing is ever replaced on this basis.
fn not_found(content: &str, old: &str) -> String {
    let old_lf = old.replace("\r\n", "\n");
    let old_lines: Vec<&str> = old_lf.trim_end_matches('\n').split('\n').take(50).collect();
    let file_lines: Vec<&str> = content.lines().collect();
    let k = old_lines.len().min(file_lines.len()).max(1);
    let mut best = (0usize, 0usize);
    if !file_lines.is_empty() {
        for i in 0..=file_lines.len().saturating_sub(k) {
            let score = (0..k)
                .filter(|j| {
                    let a = old_lines.get(*j).map(|s| s.trim()).unwrap_or("");
                    !a.is_empty() && file_lines.get(i + j).map(|s| s.trim()) == Some(a)
                })
                .count();
            if score > best.1 {
                best = (i, score);
            }
        }
    }
    if best.1 == 0 {
        // No whole line matches: look for the first old line as a substring, trimmed.
        let first = old_lines
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty())
            .unwrap_or("");
        if let Some(i) = file_lines
            .iter()
            .position(|l| !first.is_empty() && l.contains(first))
        {
            best = (i, 0);
        } else {
            return "old_string was not found in the file, and none of its lines occur there. The file may have changed: read it again with read_file and copy the text exactly (without the line-number prefix).".to_owned();
        }
    }
    let start = best.0;
    let end = (start + k).min(file_lines.len()).min(start + 30);
    let region: String = (start..end)
        .map(|i| format!("{:>6}\t{}\n", i + 1, file_lines[i]))
        .collect();
    format!(
        "old_string was not found in the file (not exactly, nor ignoring line endings, trailing whitespace or indentation). The closest region is lines {}-{} ({} of {} lines equal when trimmed):\n{region}Copy the text exactly from read_file output (without the line-number prefix) and try again.",
        start + 1,
        end,
        best.1,
        old_lines.len()
    )
}

/// Reads the text file an edit is about to change; the path is resolved for writing.
fn read_text(
    ctx: &ToolContext,
    path: &str,
) -> Result<(crate::workspace::Resolved, String), crate::result::ToolFailure> {
    let r = ctx.workspace.resolve_for_write(path)?;
    let meta = ctx
        .workspace
        .metadata(&r)
        .map_err(|e| io_refusal("edit", &r.rel, &e))?;
    if meta.is_dir() {
        return Err(refuse(format!(
            "{} is a directory; give a file path",
            r.rel
        )));
    }
    let bytes = ctx
        .workspace
        .read(&r)
        .map_err(|e| io_refusal("read", &r.rel, &e))?;
    if looks_binary(&bytes[..bytes.len().min(8192)]) {
        return Err(refuse(format!(
            "{} is a binary file; edit_file only changes text files",
            r.rel
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        refuse(format!("{} is not valid UTF-8; edit_file only changes UTF-8 text (use exec_shell for other encodings)", r.rel))
    })?;
    Ok((r, text))
}

fn snippet(content: &str, first_line: usize, span: usize) -> String {
    let lines: Vec<&str> = content.lines().collect();
    let start = first_line.saturating_sub(3).max(1);
    let end = (first_line + span + 2).min(lines.len()).min(start + 20);
    (start..=end)
        .filter_map(|n| lines.get(n - 1).map(|l| format!("{n:>6}\t{l}\n")))
        .collect()
}

fn run_edit(args: EditArgs, ctx: &ToolContext) -> ToolOutcome {
    let (r, text) = read_text(ctx, &args.path)?;
    let applied = apply_edit(
        &text,
        &args.old_string,
        &args.new_string,
        args.replace_all.unwrap_or(false),
    )
    .map_err(|m| refuse(format!("edit_file {}: {m}", r.rel)))?;
    ctx.workspace
        .write_atomic(&r, applied.content.as_bytes())
        .map_err(|e| io_refusal("write", &r.rel, &e))?;
    ctx.reads.record(&r.abs);
    let span = args.new_string.lines().count();
    let how = if applied.strategy == "exact" {
        String::new()
    } else {
        format!(" (matched with {})", applied.strategy)
    };
    Ok(ToolResult::text(format!(
        "Edited {}: replaced {} occurrence{}{how}. The changed region now reads:\n{}",
        r.rel,
        applied.count,
        if applied.count == 1 { "" } else { "s" },
        snippet(&applied.content, applied.first_line, span)
    ))
    .with_meta("edit", json!({"path": r.rel, "replacements": applied.count, "strategy": applied.strategy, "first_line": applied.first_line}))
    .with_meta(CHANGED_FILES, json!([r.rel])))
    .map(|result| with_wrote(result, ctx, [r.abs.as_path()]))
}

fn run_multi(args: MultiArgs, ctx: &ToolContext) -> ToolOutcome {
    if args.edits.is_empty() {
        return Err(refuse(
            "multi_edit: edits is empty; give at least one {\"old_string\", \"new_string\"} pair",
        ));
    }
    let (r, text) = read_text(ctx, &args.path)?;
    let mut content = text;
    let mut report = Vec::new();
    for (i, e) in args.edits.iter().enumerate() {
        match apply_edit(
            &content,
            &e.old_string,
            &e.new_string,
            e.replace_all.unwrap_or(false),
        ) {
            Ok(applied) => {
                report.push(json!({"replacements": applied.count, "strategy": applied.strategy, "first_line": applied.first_line}));
                content = applied.content;
            }
            Err(m) => {
                return Err(refuse(format!(
                    "multi_edit {}: edit #{} of {} failed, so no edit was applied and the file is unchanged: {m}",
                    r.rel,
                    i + 1,
                    args.edits.len()
                )));
            }
        }
    }
    ctx.workspace
        .write_atomic(&r, content.as_bytes())
        .map_err(|e| io_refusal("write", &r.rel, &e))?;
    ctx.reads.record(&r.abs);
    Ok(
        ToolResult::text(format!("Applied {} edits to {}.", args.edits.len(), r.rel))
            .with_meta("edits", json!(report))
            .with_meta(CHANGED_FILES, json!([r.rel])),
    )
    .map(|result| with_wrote(result, ctx, [r.abs.as_path()]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_unique_and_ambiguous() {
        let a = apply_edit("a\nb\nc\n", "b", "B", false).unwrap();
        assert_eq!(a.content, "a\nB\nc\n");
        let e = apply_edit("x\nx\n", "x", "y", false).unwrap_err();
        assert!(
            e.contains("matches 2 places") && e.contains("lines 1, 2"),
            "{e}"
        );
        assert_eq!(
            apply_edit("x\nx\n", "x", "y", true).unwrap().content,
            "y\ny\n"
        );
        assert!(
            apply_edit("x", "x", "x", false)
                .unwrap_err()
                .contains("identical")
        );
    }

    #[test]
    fn ladder() {
        // CRLF file, LF old_string: stays CRLF.
        let a = apply_edit("a\r\nb\r\nc\r\n", "a\nb\n", "a\nB\n", false).unwrap();
        assert_eq!(a.content, "a\r\nB\r\nc\r\n");
        assert_eq!(a.strategy, "line endings");
        // Trailing whitespace in the file.
        let a = apply_edit(
            "fn f() {   \n    x();\n}\n",
            "fn f() {\n    x();",
            "fn g() {\n    x();",
            false,
        )
        .unwrap();
        assert_eq!(a.content, "fn g() {\n    x();\n}\n");
        // Indentation differs: new text is re-indented.
        let a = apply_edit(
            "mod m {\n        let a = 1;\n        let b = 2;\n}\n",
            "let a = 1;\n    let b = 2;",
            "let a = 10;\n    let b = 20;",
            false,
        );
        let a = a.unwrap();
        assert_eq!(
            a.content,
            "mod m {\n        let a = 10;\n        let b = 20;\n}\n"
        );
        // Escaped text.
        let a = apply_edit(
            "line one\nline two\n",
            "line one\\nline two",
            "line 1\\nline 2",
            false,
        )
        .unwrap();
        assert_eq!(a.content, "line 1\nline 2\n");
        // Ambiguous after normalization is still an error.
        let e = apply_edit("  a\nb\n    a\nb\n", "a\nb", "c\nd", false).unwrap_err();
        assert!(e.contains("matches 2 places"), "{e}");
    }

    #[test]
    fn failure_shows_closest_region() {
        let content = "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n";
        let e = apply_edit(
            content,
            "    let x = 1;\n    println!(\"{y}\");",
            "z",
            false,
        )
        .unwrap_err();
        assert!(
            e.contains("lines 2-3") && e.contains("     2\t    let x = 1;"),
            "{e}"
        );
        let e = apply_edit(content, "nothing like it", "z", false).unwrap_err();
        assert!(e.contains("none of its lines"), "{e}");
    }
}
