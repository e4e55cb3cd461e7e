//! diagnostics: the project's own checker (cargo check, tsc, go vet, Python's compileall), chosen from
//! the files in the workspace, with its errors and warnings counted.

use serde::Deserialize;
use serde_json::json;

use super::shell::{ExecArgs, exec};
use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::asynchronous;
use crate::result::{ToolOutcome, refuse};

pub const DEFAULT_TIMEOUT_SECS: u64 = 600;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    kind: Option<String>,
    path: Option<String>,
    timeout: Option<u64>,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "diagnostics",
        description: "Compile errors and warnings from cargo check, tsc --noEmit, go vet or python3 -m compileall (chosen from the project, or by kind).",
        schema: schema(
            json!({
                "kind": {"type": "string", "enum": ["auto", "cargo", "tsc", "go", "python"], "description": "Default auto."},
                "path": {"type": "string"},
                "timeout": {"type": "integer", "minimum": 1, "description": "Seconds (at most 600)."}
            }),
            &[],
        ),
        read_only: true,
        approval: ApprovalClass::Shell,
        aliases: &[("checker", "kind")],
        example: json!({"kind": "auto"}),
        handler: asynchronous("diagnostics", run),
    }
}

fn command_for(kind: &str) -> Option<&'static str> {
    match kind {
        "cargo" => Some("cargo check --all-targets --message-format=short 2>&1"),
        "tsc" => Some("npx --no-install tsc --noEmit --pretty false 2>&1"),
        "go" => Some("go vet ./... 2>&1"),
        "python" => {
            Some("python3 -m compileall -q -x '(^|/)(\\.venv|venv|node_modules|\\.git)/' . 2>&1")
        }
        _ => None,
    }
}

async fn run(args: Args, ctx: ToolContext) -> ToolOutcome {
    let dir = ctx.workspace.resolve(args.path.as_deref().unwrap_or("."))?;
    if !ctx.workspace.metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return Err(refuse(format!(
            "diagnostics: {} is not a directory",
            dir.rel
        )));
    }
    let kind = match args.kind.as_deref().unwrap_or("auto") {
        "auto" => {
            // Listed through the workspace's descriptor, like every file tool's reads.
            let names: Vec<std::ffi::OsString> = ctx
                .workspace
                .read_dir(&dir)
                .map(|entries| entries.into_iter().map(|e| e.name).collect())
                .unwrap_or_default();
            let has = |f: &str| names.iter().any(|n| n == f);
            if has("Cargo.toml") {
                "cargo"
            } else if has("tsconfig.json") {
                "tsc"
            } else if has("go.mod") {
                "go"
            } else if has("pyproject.toml")
                || has("setup.py")
                || names.iter().any(|n| {
                    std::path::Path::new(n)
                        .extension()
                        .is_some_and(|x| x == "py")
                })
            {
                "python"
            } else {
                return Err(refuse(format!(
                    "diagnostics: no project found in {} (no Cargo.toml, tsconfig.json, go.mod or Python files); pass kind or path, or run the checker with exec_shell",
                    dir.rel
                )));
            }
        }
        other => other,
    };
    let Some(command) = command_for(kind) else {
        return Err(refuse(format!(
            "diagnostics: unknown kind {kind:?}; use auto, cargo, tsc, go or python"
        )));
    };
    let timeout = args
        .timeout
        .unwrap_or(DEFAULT_TIMEOUT_SECS)
        .min(DEFAULT_TIMEOUT_SECS);
    let mut result = exec(
        ExecArgs {
            command: command.to_owned(),
            timeout: Some(timeout),
            background: None,
            cwd: Some(dir.rel.clone()),
        },
        ctx,
    )
    .await?;
    let text = result.joined_text();
    let (mut errors, mut warnings) = (0usize, 0usize);
    for line in text.lines() {
        let l = line.trim_start();
        // Whole-word forms of the checkers' own line formats, not bare substrings.
        if l.contains(": error:")
            || l.contains(": error[")
            || l.starts_with("error:")
            || l.starts_with("error[")
            || l.contains("): error TS")
            || l.starts_with("*** Error")
            || l.starts_with("SyntaxError")
        {
            errors += 1;
        } else if l.contains(": warning:") || l.starts_with("warning:") {
            warnings += 1;
        }
    }
    // cargo repeats a summary line "error: could not compile" / "warning: N warnings emitted".
    let summary_lines = text
        .lines()
        .filter(|l| l.starts_with("error: could not compile") || l.starts_with("error: aborting"))
        .count();
    errors = errors.saturating_sub(summary_lines);
    let timed_out = result
        .metadata
        .get("exit")
        .and_then(|e| e.get("timed_out"))
        .and_then(|t| t.as_bool())
        .unwrap_or(false);
    // A checker that ran and found problems did its job: the result is not a tool error.
    result.is_error = timed_out;
    if let Some(crate::result::Content::Text { text }) = result.content.first_mut() {
        text.push_str(&format!(
            "\n[diagnostics ({kind}): {errors} error(s), {warnings} warning(s)]"
        ));
    }
    Ok(result.with_meta(
        "diagnostics",
        json!({"kind": kind, "errors": errors, "warnings": warnings}),
    ))
}
