//! write_file: create or replace a whole file, atomically, refusing to overwrite a file that changed
//! since this session last read it (someone else's edit would be lost silently otherwise).

use serde::Deserialize;
use serde_json::json;

use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::{CHANGED_FILES, editing, with_wrote};
use crate::result::{ToolOutcome, ToolResult, io_refusal, refuse};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    path: String,
    content: String,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "write_file",
        description: "Create a file or replace its whole content, atomically, creating parent directories. Refuses to overwrite a file changed since you last read it: read it again first. To change part of a file prefer edit_file or apply_patch.",
        schema: schema(
            json!({
                "path": {"type": "string"},
                "content": {"type": "string"}
            }),
            &["path", "content"],
        ),
        read_only: false,
        approval: ApprovalClass::Write,
        aliases: &[],
        example: json!({"path": "notes/todo.md", "content": "# Todo\n\n- write tests\n"}),
        handler: editing("write_file", run),
    }
}

fn run(args: Args, ctx: &ToolContext) -> ToolOutcome {
    let r = ctx.workspace.resolve_for_write(&args.path)?;
    let existed = match ctx.workspace.metadata(&r) {
        Ok(m) if m.is_dir() => {
            return Err(refuse(format!(
                "{} is a directory; give a file path",
                r.rel
            )));
        }
        Ok(_) => true,
        Err(_) => false,
    };
    if existed && ctx.reads.changed_since_seen(&r.abs) == Some(true) {
        return Err(refuse(format!(
            "{} changed since you last read it (by another tool, a command or a person); read it again with read_file and redo the change, so that nothing is lost",
            r.rel
        )));
    }
    ctx.workspace
        .write_atomic(&r, args.content.as_bytes())
        .map_err(|e| io_refusal("write", &r.rel, &e))?;
    ctx.reads.record(&r.abs);
    let lines = args.content.lines().count();
    Ok(ToolResult::text(format!(
        "{} {} ({} bytes, {lines} lines).",
        if existed { "Overwrote" } else { "Created" },
        r.rel,
        args.content.len()
    ))
    .with_meta(
        "file",
        json!({"path": r.rel, "created": !existed, "bytes": args.content.len()}),
    )
    .with_meta(CHANGED_FILES, json!([r.rel])))
    .map(|result| with_wrote(result, ctx, [r.abs.as_path()]))
}
