//! llm_query_batched: up to 16 one-shot questions to the task's own model at once, with no tools
//! and no conversation, for cheap fan-out (classify these files, summarise each of these logs).
//! Each answer comes back under its number; one that fails says why without failing the others.

use std::fmt::Write as _;
use std::sync::Arc;

use orchestrator_tools::{ApprovalClass, ToolResult, ToolSpec, refuse};
use orchestrator_types::{ChatMessage, Usage};
use serde::Deserialize;
use serde_json::json;

use super::{Def, Session, schema, spec};
use crate::model::ModelClient;

/// Questions per call.
pub const MAX_PROMPTS: usize = 16;
/// Characters of one question.
const MAX_PROMPT_CHARS: usize = 100_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    prompts: Vec<String>,
    system: Option<String>,
}

pub(super) fn specs(session: &Arc<Session>, client: Option<ModelClient>) -> Vec<ToolSpec> {
    vec![spec(
        Def {
            name: "llm_query_batched",
            description: "Ask the model up to 16 independent one-shot questions at once (no tools, no conversation, each sees only its own prompt and the optional system text); the answers come back numbered. For cheap fan-out: classify, summarise or extract from many pieces you already have.",
            schema: schema(
                json!({
                    "prompts": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_PROMPTS, "description": "Self-contained questions; include the text each is about."},
                    "system": {"type": "string", "description": "Instructions given to every question."}
                }),
                &["prompts"],
            ),
            read_only: true,
            approval: ApprovalClass::Read,
            aliases: &[("queries", "prompts"), ("questions", "prompts")],
            example: json!({"prompts": ["Does this log show a timeout? Answer yes or no.\n<log 1>", "Does this log show a timeout? Answer yes or no.\n<log 2>"]}),
        },
        session,
        move |_session, args: Args, _ctx| {
            let client = client.clone();
            async move { ask_all(client, args).await }
        },
    )]
}

async fn ask_all(client: Option<ModelClient>, args: Args) -> orchestrator_tools::ToolOutcome {
    let Some(client) = client else {
        return Err(refuse(
            "llm_query_batched: no model is configured for this task",
        ));
    };
    if args.prompts.is_empty() {
        return Err(refuse(
            "llm_query_batched: prompts is empty; give 1 to 16 questions",
        ));
    }
    if args.prompts.len() > MAX_PROMPTS {
        return Err(refuse(format!(
            "llm_query_batched: {} prompts; at most {MAX_PROMPTS} per call (split them over several calls)",
            args.prompts.len()
        )));
    }
    if let Some((i, p)) = args
        .prompts
        .iter()
        .enumerate()
        .find(|(_, p)| p.chars().count() > MAX_PROMPT_CHARS)
    {
        return Err(refuse(format!(
            "llm_query_batched: prompt {} has {} characters; at most {MAX_PROMPT_CHARS}",
            i + 1,
            p.chars().count()
        )));
    }
    let asks = args.prompts.iter().map(|prompt| {
        let client = client.clone();
        let mut messages = Vec::with_capacity(2);
        if let Some(system) = args.system.as_deref().filter(|s| !s.trim().is_empty()) {
            messages.push(ChatMessage::system(system));
        }
        messages.push(ChatMessage::user(prompt.clone()));
        async move { client.complete(&messages, &[], None).await }
    });
    let replies = futures_util::future::join_all(asks).await;
    let mut usage = Usage::default();
    let mut failed = 0usize;
    let mut out = String::new();
    for (i, reply) in replies.into_iter().enumerate() {
        let _ = writeln!(out, "## {}", i + 1);
        match reply {
            Ok(reply) => {
                if let Some(u) = reply.usage {
                    usage.add(u);
                }
                let text = reply.message.content.unwrap_or_default();
                let text = text.trim();
                out.push_str(if text.is_empty() {
                    "(empty answer)"
                } else {
                    text
                });
            }
            Err(e) => {
                failed += 1;
                let _ = write!(out, "(failed: {e})");
            }
        }
        out.push_str("\n\n");
    }
    let result = ToolResult::text(out.trim_end())
        .with_meta("prompts", json!(args.prompts.len()))
        .with_meta("failed", json!(failed))
        .with_meta("usage", json!(usage));
    if failed == args.prompts.len() {
        return Ok(ToolResult {
            is_error: true,
            ..result
        });
    }
    Ok(result)
}
