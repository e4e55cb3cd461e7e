//! grep_files: ripgrep's own crates in process (ignore for the walk, grep-regex for the matcher,
//! grep-searcher for the search), so results agree with `rg` on the same tree and the speed is close
//! to it. The walk is parallel like rg's; results are sorted by path afterwards, so output is stable.
//!
//! Matches are counted in full even when only the first `max_results` are shown, so that a truncated
//! result can say exactly how many it left out.

use std::sync::Mutex;

use grep_regex::RegexMatcherBuilder;
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
use serde::Deserialize;
use serde_json::json;

use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::blocking;
use crate::result::{ToolOutcome, ToolResult, io_refusal, refuse};

pub const DEFAULT_MAX_RESULTS: u64 = 200;
pub const MAX_RESULTS: u64 = 5000;
pub const MAX_CONTEXT: u64 = 20;
/// Matched lines longer than this are cut (minified files would flood the result otherwise).
pub const MAX_SHOWN_LINE: usize = 500;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    mode: Option<String>,
    context: Option<u64>,
    before: Option<u64>,
    after: Option<u64>,
    case_insensitive: Option<bool>,
    fixed_strings: Option<bool>,
    multiline: Option<bool>,
    max_results: Option<u64>,
    include_hidden: Option<bool>,
    include_ignored: Option<bool>,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "grep_files",
        description: "Regex search (ripgrep syntax; a literal with fixed_strings) of file contents, skipping gitignored, hidden and binary files. mode: content (path:line:text, default), files_with_matches, count. Shows max_results (default 200, at most 5000) and the total.",
        schema: schema(
            json!({
                "pattern": {"type": "string"},
                "path": {"type": "string"},
                "glob": {"type": "string", "description": "As rg -g (\"*.rs\")."},
                "mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
                "context": {"type": "integer", "minimum": 0, "description": "At most 20."},
                "before": {"type": "integer", "minimum": 0},
                "after": {"type": "integer", "minimum": 0},
                "case_insensitive": {"type": "boolean"},
                "fixed_strings": {"type": "boolean"},
                "multiline": {"type": "boolean"},
                "max_results": {"type": "integer", "minimum": 1},
                "include_hidden": {"type": "boolean"},
                "include_ignored": {"type": "boolean"}
            }),
            &["pattern"],
        ),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[
            ("output_mode", "mode"),
            ("context_lines", "context"),
            ("ignore_case", "case_insensitive"),
            ("include", "glob"),
            ("file_pattern", "glob"),
            ("head_limit", "max_results"),
            ("max_count", "max_results"),
            ("literal", "fixed_strings"),
        ],
        example: json!({"pattern": "fn \\w+_test", "path": "src", "glob": "*.rs", "mode": "content", "context": 2}),
        handler: blocking("grep_files", run),
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Content,
    Files,
    Count,
}

/// One line of output for one file.
#[derive(Debug)]
struct Line {
    number: u64,
    text: String,
    is_match: bool,
}

#[derive(Debug)]
struct FileHits {
    path: String,
    matches: u64,
    lines: Vec<Line>,
}

struct Collect {
    mode: Mode,
    cap: u64,
    matches: u64,
    stored: u64,
    lines: Vec<Line>,
}

fn shown(bytes: &[u8]) -> String {
    let mut b = bytes;
    while let Some(rest) = b.strip_suffix(b"\n").or_else(|| b.strip_suffix(b"\r")) {
        b = rest;
    }
    if b.len() > MAX_SHOWN_LINE {
        let mut s = String::from_utf8_lossy(&b[..MAX_SHOWN_LINE]).into_owned();
        s.push_str(&format!(" [... {} more bytes]", b.len() - MAX_SHOWN_LINE));
        s
    } else {
        String::from_utf8_lossy(b).into_owned()
    }
}

impl Sink for Collect {
    type Error = std::io::Error;

    fn matched(&mut self, _searcher: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        // In multiline mode one SinkMatch may span several lines; rg -c counts it as one match per
        // line it covers only for non-multiline, so count per matched line here too.
        let count = if m.lines().count() > 1 {
            m.lines().count() as u64
        } else {
            1
        };
        self.matches += count;
        if self.mode == Mode::Files {
            return Ok(false);
        }
        if self.mode == Mode::Content && self.stored < self.cap {
            for (number, line) in (m.line_number().unwrap_or(0)..).zip(m.lines()) {
                self.lines.push(Line {
                    number,
                    text: shown(line),
                    is_match: true,
                });
            }
            self.stored += count;
        }
        Ok(true)
    }

    fn context(&mut self, _searcher: &Searcher, c: &SinkContext<'_>) -> Result<bool, Self::Error> {
        if self.mode == Mode::Content
            && self.stored < self.cap + 1
            && matches!(c.kind(), SinkContextKind::Before | SinkContextKind::After)
        {
            self.lines.push(Line {
                number: c.line_number().unwrap_or(0),
                text: shown(c.bytes()),
                is_match: false,
            });
        }
        Ok(true)
    }
}

fn run(args: Args, ctx: &ToolContext) -> ToolOutcome {
    if args.pattern.is_empty() {
        return Err(refuse(
            "grep_files: pattern is empty; give a regular expression or a literal with fixed_strings=true",
        ));
    }
    let r = ctx.workspace.resolve(args.path.as_deref().unwrap_or("."))?;
    ctx.workspace
        .metadata(&r)
        .map_err(|e| io_refusal("search", &r.rel, &e))?;
    let mode = match args.mode.as_deref().unwrap_or("content") {
        "content" => Mode::Content,
        "files_with_matches" | "files" => Mode::Files,
        "count" => Mode::Count,
        other => {
            return Err(refuse(format!(
                "grep_files: unknown mode {other:?}; use content, files_with_matches or count"
            )));
        }
    };
    let multiline = args.multiline.unwrap_or(false);
    let mut builder = RegexMatcherBuilder::new();
    builder
        .case_insensitive(args.case_insensitive.unwrap_or(false))
        .fixed_strings(args.fixed_strings.unwrap_or(false));
    if multiline {
        builder.multi_line(true).dot_matches_new_line(true);
    } else {
        builder.line_terminator(Some(b'\n'));
    }
    let matcher = builder.build(&args.pattern).map_err(|e| {
        refuse(format!(
            "grep_files: the pattern is not a valid regular expression: {e}. Escape special characters (\\( \\[ \\. \\{{) or set fixed_strings=true to search for the text literally."
        ))
    })?;
    let context = args.context.unwrap_or(0).min(MAX_CONTEXT) as usize;
    let before = args
        .before
        .map(|b| b.min(MAX_CONTEXT) as usize)
        .unwrap_or(context);
    let after = args
        .after
        .map(|a| a.min(MAX_CONTEXT) as usize)
        .unwrap_or(context);
    let cap = args
        .max_results
        .unwrap_or(DEFAULT_MAX_RESULTS)
        .clamp(1, MAX_RESULTS);
    let hidden = args.include_hidden.unwrap_or(false);
    let ignored = args.include_ignored.unwrap_or(false);

    let mut walker = ignore::WalkBuilder::new(&r.abs);
    walker
        .hidden(!hidden)
        .git_ignore(!ignored)
        .git_global(!ignored)
        .git_exclude(!ignored)
        .ignore(!ignored)
        .parents(!ignored)
        .require_git(false)
        .follow_links(false);
    if !ignored {
        walker.add_custom_ignore_filename(".rgignore");
    }
    if let Some(glob) = &args.glob {
        let mut ob = ignore::overrides::OverrideBuilder::new(&r.abs);
        for g in split_globs(glob) {
            ob.add(&g)
                .map_err(|e| refuse(format!("grep_files: invalid glob {g:?}: {e}")))?;
        }
        let overrides = ob
            .build()
            .map_err(|e| refuse(format!("grep_files: invalid glob {glob:?}: {e}")))?;
        walker.overrides(overrides);
    }
    let results: Mutex<Vec<FileHits>> = Mutex::new(Vec::new());
    let searched = std::sync::atomic::AtomicU64::new(0);
    let root = ctx.workspace.root().to_owned();
    walker.build_parallel().run(|| {
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .line_number(true)
            .multi_line(multiline)
            .before_context(if mode == Mode::Content { before } else { 0 })
            .after_context(if mode == Mode::Content { after } else { 0 })
            .build();
        let matcher = &matcher;
        let results = &results;
        let searched = &searched;
        let root = &root;
        let workspace = &ctx.workspace;
        Box::new(move |entry| {
            let Ok(entry) = entry else {
                return ignore::WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return ignore::WalkState::Continue;
            }
            searched.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut sink = Collect {
                mode,
                cap,
                matches: 0,
                stored: 0,
                lines: Vec::new(),
            };
            // Opened through the workspace's descriptor: the walk found the file by name, and a
            // directory swapped for a symlink since then must not lead the search outside.
            let found = crate::workspace::Resolved {
                abs: entry.path().to_owned(),
                rel: String::new(),
            };
            let Ok(file) = workspace.open_read(&found) else {
                return ignore::WalkState::Continue;
            };
            if searcher.search_file(matcher, &file, &mut sink).is_err() || sink.matches == 0 {
                return ignore::WalkState::Continue;
            }
            let path = entry
                .path()
                .strip_prefix(root)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| entry.path().display().to_string());
            if let Ok(mut all) = results.lock() {
                all.push(FileHits {
                    path,
                    matches: sink.matches,
                    lines: sink.lines,
                });
            }
            ignore::WalkState::Continue
        })
    });
    let mut files = results.into_inner().unwrap_or_default();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let total_matches: u64 = files.iter().map(|f| f.matches).sum();
    let total_files = files.len() as u64;
    let searched = searched.into_inner();
    let meta = |shown: u64| json!({"mode": format!("{mode:?}").to_lowercase(), "total_matches": total_matches, "files_matched": total_files, "files_searched": searched, "shown": shown, "truncated": shown < if mode == Mode::Content { total_matches } else { total_files }});
    if files.is_empty() {
        let mut text = format!(
            "No matches for {:?} in {} ({searched} files searched).",
            args.pattern, r.rel
        );
        if !hidden || !ignored {
            text.push_str(" Hidden and gitignored files were skipped; set include_hidden or include_ignored to search them.");
        }
        return Ok(ToolResult::text(text).with_meta("search", meta(0)));
    }
    let mut out = String::new();
    let shown_count;
    match mode {
        Mode::Files => {
            let n = cap.min(total_files);
            for f in files.iter().take(n as usize) {
                out.push_str(&f.path);
                out.push('\n');
            }
            shown_count = n;
            if n < total_files {
                out.push_str(&format!("[Showing {n} of {total_files} files with matches; narrow the search or raise max_results.]\n"));
            } else {
                out.push_str(&format!("{total_files} files with matches.\n"));
            }
        }
        Mode::Count => {
            let n = cap.min(total_files);
            for f in files.iter().take(n as usize) {
                out.push_str(&format!("{}:{}\n", f.path, f.matches));
            }
            shown_count = n;
            if n < total_files {
                out.push_str(&format!(
                    "[Showing {n} of {total_files} files; {total_matches} matching lines in all.]\n"
                ));
            } else {
                out.push_str(&format!(
                    "{total_matches} matching lines in {total_files} files.\n"
                ));
            }
        }
        Mode::Content => {
            let mut left = cap;
            let mut shown_matches = 0u64;
            for f in &files {
                if left == 0 {
                    break;
                }
                let mut prev: Option<u64> = None;
                for line in &f.lines {
                    if line.is_match {
                        if left == 0 {
                            break;
                        }
                        left -= 1;
                        shown_matches += 1;
                    } else if left == 0 {
                        break;
                    }
                    if let Some(p) = prev
                        && line.number > p + 1
                        && (before > 0 || after > 0)
                    {
                        out.push_str("--\n");
                    }
                    prev = Some(line.number);
                    let sep = if line.is_match { ':' } else { '-' };
                    out.push_str(&format!(
                        "{}{sep}{}{sep}{}\n",
                        f.path, line.number, line.text
                    ));
                }
            }
            shown_count = shown_matches;
            if shown_matches < total_matches {
                out.push_str(&format!(
                    "[Showing {shown_matches} of {total_matches} matches in {total_files} files; narrow the pattern, path or glob, use mode=files_with_matches or count, or raise max_results (at most {MAX_RESULTS}).]\n"
                ));
            } else {
                out.push_str(&format!(
                    "{total_matches} matches in {total_files} files.\n"
                ));
            }
        }
    }
    Ok(ToolResult::text(out).with_meta("search", meta(shown_count)))
}

/// A glob argument may hold several globs separated by commas or spaces, but commas inside braces
/// belong to the brace alternation (`*.{rs,toml}`).
fn split_globs(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0;
    for c in s.chars() {
        match c {
            '{' => {
                depth += 1;
                cur.push(c);
            }
            '}' => {
                depth -= 1;
                cur.push(c);
            }
            ',' | ' ' if depth == 0 => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            _ => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn splits_globs() {
        assert_eq!(
            super::split_globs("*.{rs,toml}, !target/**"),
            vec!["*.{rs,toml}", "!target/**"]
        );
    }
}
