//! A task's turns: what the model said each turn, what it spent, and the tools it called with
//! their status, duration and result summary. `GET /api/v1/tasks/{id}/turns` and the task's page
//! show the same.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use maud::{Markup, html};
use orchestrator_store::{SavedMessage, ToolCallRecord};
use orchestrator_types::{Role, TaskId, Usage};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{ApiResult, Web, ok, parse_id, query};

/// One turn of an agent: a model call and the tool calls of its reply.
#[derive(Debug, Serialize)]
pub(crate) struct Turn {
    pub turn: i64,
    pub attempt: i64,
    /// The reply's text, if it had any.
    pub text: Option<String>,
    pub usage: Option<Usage>,
    pub model_ms: Option<i64>,
    pub at: i64,
    pub tool_calls: Vec<ToolCallRecord>,
}

/// The turns of a conversation, oldest first; messages of people and tools are not turns.
pub(crate) fn turns(messages: Vec<SavedMessage>, calls: Vec<ToolCallRecord>) -> Vec<Turn> {
    let mut turns: Vec<Turn> = Vec::new();
    for saved in messages {
        if saved.message.role != Role::Assistant {
            continue;
        }
        turns.push(Turn {
            turn: saved.turn,
            attempt: saved.attempt,
            text: saved.message.content.filter(|t| !t.trim().is_empty()),
            usage: saved.usage,
            model_ms: saved.model_ms,
            at: saved.created_at,
            tool_calls: Vec::new(),
        });
    }
    for call in calls {
        // A call belongs to the latest reply of its turn and attempt (a retried attempt replays
        // the turn numbers).
        match turns
            .iter_mut()
            .rev()
            .find(|t| t.turn == call.turn && t.attempt == call.attempt)
        {
            Some(turn) => turn.tool_calls.push(call),
            None => turns.push(Turn {
                turn: call.turn,
                attempt: call.attempt,
                text: None,
                usage: None,
                model_ms: None,
                at: call.started_at,
                tool_calls: vec![call],
            }),
        }
    }
    turns.sort_by_key(|t| (t.attempt, t.turn, t.at));
    for turn in &mut turns {
        turn.tool_calls.sort_by_key(|c| c.position);
    }
    turns
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TurnsQuery {
    /// Only the last this many turns (default all).
    last: Option<usize>,
}

pub(crate) async fn api(
    State(web): State<Web>,
    Path(id): Path<String>,
    params: Result<Query<TurnsQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let id = TaskId(parse_id(&id)?);
    web.store.get_task(id).await?;
    let (messages, calls) = tokio::try_join!(web.store.messages(id), web.store.tool_calls(id))?;
    let mut all = turns(messages, calls);
    let total = all.len();
    if let Some(last) = params.last {
        all.drain(..total.saturating_sub(last));
    }
    ok(&json!({ "total": total, "turns": all }))
}

/// Turns a page shows; the API has them all.
const SHOWN: usize = 100;
/// Characters of a reply's text or a call's arguments a page shows.
const TEXT_CHARS: usize = 4000;

fn clipped(text: &str) -> String {
    match text.char_indices().nth(TEXT_CHARS) {
        Some((end, _)) => format!(
            "{}… ({} characters in all)",
            &text[..end],
            text.chars().count()
        ),
        None => text.to_owned(),
    }
}

/// The task page's section: the last turns, each with its calls.
pub(crate) fn section(task: TaskId, turns: &[Turn]) -> Markup {
    let hidden = turns.len().saturating_sub(SHOWN);
    html! {
        @if !turns.is_empty() {
            h2 { "Turns" }
            @if hidden > 0 {
                p.muted { (hidden) " earlier turns are not shown: " a href=(format!("/api/v1/tasks/{}/turns", task.0)) { "all of them as JSON" } }
            }
            @for t in &turns[hidden..] {
                div.card.turn data-turn=(t.turn) {
                    p.muted {
                        "turn " (t.turn) " · attempt " (t.attempt) " · " (crate::pages::time(t.at))
                        @if let Some(u) = &t.usage { " · " (u.prompt_tokens) " in / " (u.completion_tokens) " out tokens" }
                        @if let Some(ms) = t.model_ms { " · model " (ms) " ms" }
                    }
                    @if let Some(text) = &t.text { pre { (clipped(text)) } }
                    @if !t.tool_calls.is_empty() {
                        table {
                            thead { tr { th { "tool" } th { "status" } th { "duration" } th { "result" } th { "output" } } }
                            tbody {
                                @for c in &t.tool_calls {
                                    tr data-call=(c.call_id) {
                                        td { code { (c.name) } details { summary { "arguments" } pre { (clipped(&c.arguments)) } } }
                                        td { span class=(format!("status-{}", c.status)) { (c.status) } }
                                        td { (c.duration_ms.map(|d| format!("{d} ms")).unwrap_or_else(|| "-".into())) }
                                        td { (c.summary.clone().unwrap_or_default()) }
                                        td { @if let Some(artifact) = c.artifact_id { a href=(format!("/api/v1/artifacts/{artifact}/content")) { "output" } } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
