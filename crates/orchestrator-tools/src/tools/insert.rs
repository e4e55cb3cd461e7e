//! insert_text: put lines into a file after a given line, without repeating any of the file's
//! text. edit_file needs an `old_string` to anchor on, which for an insertion means copying a
//! neighbouring line exactly; a line number is the simpler anchor when the model has just read
//! the file (and the file must not have changed since it was read, or the number may be stale).

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
pub(crate) struct Args {
    path: String,
    /// Insert after this line (1-based); 0 inserts at the top.
    after_line: u64,
    text: String,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "insert_text",
        description: "Insert lines into an existing file after line after_line (as read_file numbers them; 0: the top). Refuses a file changed since you last read it: read it again first. To change lines use edit_file.",
        schema: schema(
            json!({
                "path": {"type": "string"},
                "after_line": {"type": "integer", "minimum": 0},
                "text": {"type": "string"}
            }),
            &["path", "after_line", "text"],
        ),
        read_only: false,
        approval: ApprovalClass::Write,
        aliases: &[("line", "after_line"), ("content", "text")],
        example: json!({"path": "src/lib.rs", "after_line": 3, "text": "use std::fmt;\n"}),
        handler: editing("insert_text", run),
    }
}

fn run(args: Args, ctx: &ToolContext) -> ToolOutcome {
    let r = ctx.workspace.resolve_for_write(&args.path)?;
    let meta = ctx
        .workspace
        .metadata(&r)
        .map_err(|e| io_refusal("insert_text", &r.rel, &e))?;
    if meta.is_dir() {
        return Err(refuse(format!(
            "{} is a directory; give a file path",
            r.rel
        )));
    }
    if ctx.reads.changed_since_seen(&r.abs) == Some(true) {
        return Err(refuse(format!(
            "{} changed since you last read it, so line {} may not be where you think; read it again with read_file first",
            r.rel, args.after_line
        )));
    }
    let bytes = ctx
        .workspace
        .read(&r)
        .map_err(|e| io_refusal("read", &r.rel, &e))?;
    if looks_binary(&bytes[..bytes.len().min(8192)]) {
        return Err(refuse(format!(
            "{} is a binary file; insert_text only changes text files",
            r.rel
        )));
    }
    let content = String::from_utf8(bytes).map_err(|_| {
        refuse(format!(
            "{} is not valid UTF-8; insert_text only changes UTF-8 text",
            r.rel
        ))
    })?;
    if args.text.is_empty() {
        return Err(refuse("insert_text: text is empty"));
    }
    let lines: Vec<&str> = content.split_inclusive('\n').collect();
    let after = args.after_line as usize;
    if after > lines.len() {
        return Err(refuse(format!(
            "insert_text: {} has {} lines; after_line must be between 0 and {}",
            r.rel,
            lines.len(),
            lines.len()
        )));
    }
    let crlf = is_crlf(&content);
    let mut text = args.text.replace("\r\n", "\n");
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let text = to_eol(&text, crlf);
    let mut out = String::with_capacity(content.len() + text.len() + 2);
    for line in &lines[..after] {
        out.push_str(line);
    }
    // A last line without a newline gets one before the inserted text follows it.
    if after == lines.len() && !content.is_empty() && !content.ends_with('\n') {
        out.push_str(if crlf { "\r\n" } else { "\n" });
    }
    out.push_str(&text);
    for line in &lines[after..] {
        out.push_str(line);
    }
    ctx.workspace
        .write_atomic(&r, out.as_bytes())
        .map_err(|e| io_refusal("write", &r.rel, &e))?;
    ctx.reads.record(&r.abs);
    let inserted = text.lines().count();
    Ok(ToolResult::text(format!(
        "Inserted {inserted} line{} into {} after line {after}; they are now lines {} to {}.",
        if inserted == 1 { "" } else { "s" },
        r.rel,
        after + 1,
        after + inserted
    ))
    .with_meta(
        "insert",
        json!({"path": r.rel, "after_line": after, "lines": inserted}),
    )
    .with_meta(CHANGED_FILES, json!([r.rel])))
    .map(|result| with_wrote(result, ctx, [r.abs.as_path()]))
}
