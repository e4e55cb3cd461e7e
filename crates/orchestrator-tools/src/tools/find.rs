//! glob and file_search: finding files by name. glob matches a pattern exactly; file_search ranks
//! paths by a fuzzy match of a few remembered characters, the way an editor's "go to file" does.

use serde::Deserialize;
use serde_json::json;

use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::blocking;
use crate::result::{ToolOutcome, ToolResult, io_refusal, refuse};
use crate::workspace::Resolved;

pub const GLOB_DEFAULT_LIMIT: u64 = 200;
pub const GLOB_MAX_LIMIT: u64 = 5000;
pub const SEARCH_DEFAULT_LIMIT: u64 = 20;
pub const SEARCH_MAX_LIMIT: u64 = 200;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GlobArgs {
    pattern: String,
    path: Option<String>,
    limit: Option<u64>,
    sort: Option<String>,
    include_hidden: Option<bool>,
    include_ignored: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchArgs {
    query: String,
    path: Option<String>,
    limit: Option<u64>,
    include_hidden: Option<bool>,
    include_ignored: Option<bool>,
}

pub(crate) fn glob_def() -> ToolDef {
    ToolDef {
        name: "glob",
        description: "Find files by glob (\"**/*.rs\"; without '/' it matches names at any depth), relative to path, skipping gitignored and hidden files. limit: default 200, at most 5000.",
        schema: schema(
            json!({
                "pattern": {"type": "string"},
                "path": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1},
                "sort": {"type": "string", "enum": ["path", "mtime"], "description": "mtime: newest first."},
                "include_hidden": {"type": "boolean"},
                "include_ignored": {"type": "boolean"}
            }),
            &["pattern"],
        ),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[("glob", "pattern")],
        example: json!({"pattern": "**/*.rs", "path": "crates"}),
        handler: blocking("glob", run_glob),
    }
}

pub(crate) fn search_def() -> ToolDef {
    ToolDef {
        name: "file_search",
        description: "Find files by approximate name (\"ordrs\" finds src/orders.rs), best matches first.",
        schema: schema(
            json!({
                "query": {"type": "string"},
                "path": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "description": "Default 20."},
                "include_hidden": {"type": "boolean"},
                "include_ignored": {"type": "boolean"}
            }),
            &["query"],
        ),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[("name", "query"), ("pattern", "query")],
        example: json!({"query": "registry rs"}),
        handler: blocking("file_search", run_search),
    }
}

/// Files under `r` (relative paths to the workspace root), honouring ignore rules.
fn walk_files(
    ctx: &ToolContext,
    r: &Resolved,
    hidden: bool,
    ignored: bool,
) -> Vec<(String, std::path::PathBuf)> {
    let mut walker = ignore::WalkBuilder::new(&r.abs);
    walker
        .hidden(!hidden)
        .git_ignore(!ignored)
        .git_global(!ignored)
        .git_exclude(!ignored)
        .ignore(!ignored)
        .parents(!ignored)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| {
            ignored || !(e.file_type().is_some_and(|t| t.is_dir()) && e.file_name() == ".git")
        });
    let mut out = Vec::new();
    for entry in walker.build().flatten() {
        // Checked through the workspace's descriptor: the walk reads directories by name.
        if entry.file_type().is_some_and(|t| t.is_file()) && ctx.workspace.is_beneath(entry.path())
        {
            out.push((ctx.workspace.rel_of(entry.path()), entry.into_path()));
        }
    }
    out
}

fn run_glob(args: GlobArgs, ctx: &ToolContext) -> ToolOutcome {
    let r = ctx.workspace.resolve(args.path.as_deref().unwrap_or("."))?;
    let meta = ctx
        .workspace
        .metadata(&r)
        .map_err(|e| io_refusal("search", &r.rel, &e))?;
    if !meta.is_dir() {
        return Err(refuse(format!(
            "{} is not a directory; glob searches a directory",
            r.rel
        )));
    }
    let pattern = args.pattern.trim().trim_start_matches("./").to_owned();
    if pattern.is_empty() {
        return Err(refuse("glob: pattern is empty; e.g. \"**/*.rs\""));
    }
    let by_name = !pattern.contains('/');
    let matcher = globset::GlobBuilder::new(&pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| refuse(format!("glob: invalid pattern {pattern:?}: {e}")))?
        .compile_matcher();
    let limit = args
        .limit
        .unwrap_or(GLOB_DEFAULT_LIMIT)
        .clamp(1, GLOB_MAX_LIMIT) as usize;
    let mut hits: Vec<(String, std::path::PathBuf)> = walk_files(
        ctx,
        &r,
        args.include_hidden.unwrap_or(false),
        args.include_ignored.unwrap_or(false),
    )
    .into_iter()
    .filter(|(_, abs)| {
        let Ok(rel) = abs.strip_prefix(&r.abs) else {
            return false;
        };
        if by_name {
            rel.file_name().is_some_and(|n| matcher.is_match(n))
        } else {
            matcher.is_match(rel)
        }
    })
    .collect();
    match args.sort.as_deref() {
        Some("mtime") => {
            let mut with_time: Vec<_> = hits
                .into_iter()
                .map(|(rel, abs)| {
                    let found = Resolved {
                        abs: abs.clone(),
                        rel: String::new(),
                    };
                    let t = ctx
                        .workspace
                        .metadata(&found)
                        .and_then(|m| m.modified())
                        .ok();
                    (t, rel, abs)
                })
                .collect();
            with_time.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            hits = with_time
                .into_iter()
                .map(|(_, rel, abs)| (rel, abs))
                .collect();
        }
        _ => hits.sort(),
    }
    let total = hits.len();
    if total == 0 {
        return Ok(ToolResult::text(format!(
            "No files match {pattern:?} under {}. Hidden and gitignored files were skipped; a pattern with '/' is matched against the whole path below {} (use **/ for any depth).",
            r.rel, r.rel
        ))
        .with_meta("files", json!({"total": 0})));
    }
    let mut out: String = hits
        .iter()
        .take(limit)
        .map(|(rel, _)| format!("{rel}\n"))
        .collect();
    if total > limit {
        out.push_str(&format!(
            "[Showing {limit} of {total} files; narrow the pattern or raise limit.]\n"
        ));
    } else {
        out.push_str(&format!("{total} files.\n"));
    }
    Ok(
        ToolResult::text(out)
            .with_meta("files", json!({"total": total, "shown": total.min(limit)})),
    )
}

/// Ranks paths for a query with nucleo, the fuzzy matcher of the Helix editor, set for paths (a
/// match at the start of a file name or after a separator scores more). Every word of the query
/// must match, in any order; a word matches when its characters appear in order, case ignored
/// unless the word has a capital.
struct Ranker {
    matcher: nucleo_matcher::Matcher,
    pattern: nucleo_matcher::pattern::Pattern,
    buf: Vec<char>,
}

impl Ranker {
    fn new(query: &str) -> Ranker {
        use nucleo_matcher::pattern::{AtomKind, CaseMatching, Normalization, Pattern};
        Ranker {
            matcher: nucleo_matcher::Matcher::new(nucleo_matcher::Config::DEFAULT.match_paths()),
            // Plain fuzzy words: an agent does not know fzf's `^`, `$`, `!` and `'` syntax.
            pattern: Pattern::new(
                query,
                CaseMatching::Smart,
                Normalization::Smart,
                AtomKind::Fuzzy,
            ),
            buf: Vec::new(),
        }
    }

    /// The score of `path`, or `None` when a word does not match.
    fn score(&mut self, path: &str) -> Option<u32> {
        self.pattern.score(
            nucleo_matcher::Utf32Str::new(path, &mut self.buf),
            &mut self.matcher,
        )
    }
}

fn run_search(args: SearchArgs, ctx: &ToolContext) -> ToolOutcome {
    let r = ctx.workspace.resolve(args.path.as_deref().unwrap_or("."))?;
    ctx.workspace
        .metadata(&r)
        .map_err(|e| io_refusal("search", &r.rel, &e))?;
    if args.query.trim().is_empty() {
        return Err(refuse(
            "file_search: query is empty; give part of a file name",
        ));
    }
    let limit = args
        .limit
        .unwrap_or(SEARCH_DEFAULT_LIMIT)
        .clamp(1, SEARCH_MAX_LIMIT) as usize;
    let mut ranker = Ranker::new(&args.query);
    let mut scored: Vec<(u32, String)> = walk_files(
        ctx,
        &r,
        args.include_hidden.unwrap_or(false),
        args.include_ignored.unwrap_or(false),
    )
    .into_iter()
    .filter_map(|(rel, _)| ranker.score(&rel).map(|score| (score, rel)))
    .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = scored.len();
    if total == 0 {
        return Ok(ToolResult::text(format!(
            "No file path under {} contains the characters of {:?} in order. Try fewer characters, or glob / grep_files.",
            r.rel, args.query
        ))
        .with_meta("files", json!({"total": 0})));
    }
    let mut out: String = scored
        .iter()
        .take(limit)
        .map(|(_, rel)| format!("{rel}\n"))
        .collect();
    out.push_str(&format!(
        "[{} of {total} matching files, best first.]\n",
        total.min(limit)
    ));
    Ok(
        ToolResult::text(out)
            .with_meta("files", json!({"total": total, "shown": total.min(limit)})),
    )
}

#[cfg(test)]
mod tests {
    use super::Ranker;

    #[test]
    fn fuzzy_prefers_names_and_runs() {
        let mut ranker = Ranker::new("orders");
        let a = ranker.score("src/orders.rs").unwrap();
        let b = ranker.score("orchestrator/dispatch/rules/sort.rs").unwrap();
        assert!(a > b, "{a} {b}");
        assert!(Ranker::new("xyz").score("src/main.rs").is_none());
        assert!(Ranker::new("ob").score("src/OrderBook.rs").is_some());
        // Every word must match, in any order.
        let mut two = Ranker::new("rs main");
        assert!(two.score("src/main.rs").is_some());
        assert!(two.score("src/lib.rs").is_none());
    }
}
