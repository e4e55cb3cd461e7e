//! think: a place for the model to reason out loud between calls. It runs nothing and changes
//! nothing; the thought is kept in the conversation (and so in the task's record), which is the
//! point: a plan written down before a risky step is one a person can read afterwards.

use serde::Deserialize;
use serde_json::json;

use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::blocking;
use crate::result::{ToolOutcome, ToolResult, refuse};

/// Longest thought kept, in bytes: a thought is a paragraph, not a file.
const MAX_THOUGHT: usize = 16 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    thought: String,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "think",
        description: "Think before acting (weigh options, check a plan, list risks); changes nothing, kept in the task's record.",
        schema: schema(json!({"thought": {"type": "string"}}), &["thought"]),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[],
        example: json!({"thought": "The failing test reads the config before the env override; fix the order in load(), then run cargo test."}),
        handler: blocking("think", run),
    }
}

fn run(args: Args, _ctx: &ToolContext) -> ToolOutcome {
    let thought = args.thought.trim();
    if thought.is_empty() {
        return Err(refuse("think: thought is empty"));
    }
    if thought.len() > MAX_THOUGHT {
        return Err(refuse(format!(
            "think: the thought has {} bytes; keep it under {MAX_THOUGHT} (a paragraph, not a file)",
            thought.len()
        )));
    }
    Ok(ToolResult::text("Noted.").with_meta("thought_bytes", json!(thought.len())))
}
