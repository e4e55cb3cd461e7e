//! retrieve_tool_result: reads back the full output of a result that was cut to head and tail.

use serde::Deserialize;
use serde_json::json;

use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::blocking;
use crate::result::{ToolOutcome, ToolResult, refuse};

pub const DEFAULT_COUNT: u64 = 100;
pub const MAX_QUERY_MATCHES: u64 = 200;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    id: String,
    mode: Option<String>,
    count: Option<u64>,
    start: Option<u64>,
    end: Option<u64>,
    query: Option<String>,
    context: Option<u64>,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "retrieve_tool_result",
        description: "More of a cut tool result (id from its marker): summary (default), head/tail (count lines, default 100), lines start to end (1-based, inclusive), query (case-insensitive; context lines, default 2).",
        schema: schema(
            json!({
                "id": {"type": "string"},
                "mode": {"type": "string", "enum": ["summary", "head", "tail", "lines", "query"]},
                "count": {"type": "integer", "minimum": 1},
                "start": {"type": "integer", "minimum": 1},
                "end": {"type": "integer", "minimum": 1},
                "query": {"type": "string"},
                "context": {"type": "integer", "minimum": 0}
            }),
            &["id"],
        ),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[
            ("result_id", "id"),
            ("pattern", "query"),
            ("offset", "start"),
        ],
        example: json!({"id": "exec_shell-1732000000000-4242-0", "mode": "query", "query": "error"}),
        handler: blocking("retrieve_tool_result", run),
    }
}

fn numbered(lines: &[&str], first: usize) -> String {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{:>6}\t{l}\n", first + i))
        .collect()
}

fn run(args: Args, ctx: &ToolContext) -> ToolOutcome {
    let Some(text) = ctx.sink.get(args.id.trim())? else {
        return Err(refuse(format!(
            "no kept result has the id {:?}; copy the id exactly from the truncation marker of the earlier result",
            args.id
        )));
    };
    let lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    let count = args.count.unwrap_or(DEFAULT_COUNT).max(1) as usize;
    let out = match args.mode.as_deref().unwrap_or("summary") {
        "summary" => {
            let head = &lines[..n.min(10)];
            let tail_start = n.saturating_sub(10).max(head.len());
            format!(
                "Result {}: {} bytes, {n} lines.\nFirst lines:\n{}{}Use mode lines with start/end, or mode query, to read more.",
                args.id,
                text.len(),
                numbered(head, 1),
                if tail_start < n {
                    format!(
                        "Last lines:\n{}",
                        numbered(&lines[tail_start..], tail_start + 1)
                    )
                } else {
                    String::new()
                }
            )
        }
        "head" => format!(
            "{}[lines 1-{} of {n}]",
            numbered(&lines[..n.min(count)], 1),
            n.min(count)
        ),
        "tail" => {
            let s = n.saturating_sub(count);
            format!(
                "{}[lines {}-{n} of {n}]",
                numbered(&lines[s..], s + 1),
                s + 1
            )
        }
        "lines" => {
            let start = args
                .start
                .ok_or_else(|| refuse("mode lines needs start (1-based) and optionally end"))?
                as usize;
            if start > n {
                return Err(refuse(format!(
                    "start {start} is past the end: the result has {n} lines"
                )));
            }
            let end = args
                .end
                .map(|e| e as usize)
                .unwrap_or(start + 99)
                .clamp(start, n);
            format!(
                "{}[lines {start}-{end} of {n}]",
                numbered(&lines[start - 1..end], start)
            )
        }
        "query" => {
            let q = args
                .query
                .as_deref()
                .filter(|q| !q.is_empty())
                .ok_or_else(|| refuse("mode query needs query, the text to look for"))?;
            let q = q.to_lowercase();
            let context = args.context.unwrap_or(2) as usize;
            let hits: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| l.to_lowercase().contains(&q))
                .map(|(i, _)| i)
                .collect();
            if hits.is_empty() {
                format!("No line of result {} contains {q:?} ({n} lines).", args.id)
            } else {
                let mut out = String::new();
                let mut last_end = 0usize;
                for &h in hits.iter().take(MAX_QUERY_MATCHES as usize) {
                    let s = h.saturating_sub(context).max(last_end);
                    let e = (h + context + 1).min(n);
                    if s > last_end && last_end > 0 {
                        out.push_str("--\n");
                    }
                    if s < e {
                        out.push_str(&numbered(&lines[s..e], s + 1));
                    }
                    last_end = e;
                }
                out.push_str(&format!(
                    "[{} matching lines of {n}{}]",
                    hits.len(),
                    if hits.len() > MAX_QUERY_MATCHES as usize {
                        format!(", first {MAX_QUERY_MATCHES} shown")
                    } else {
                        String::new()
                    }
                ));
                out
            }
        }
        other => {
            return Err(refuse(format!(
                "unknown mode {other:?}; use summary, head, tail, lines or query"
            )));
        }
    };
    Ok(ToolResult::text(out).with_meta(
        "result",
        json!({"id": args.id, "total_lines": n, "total_bytes": text.len()}),
    ))
}
