//! The approvals inbox: what is asked, by which task, why, with the call's arguments as evidence
//! and its deadline; approve, deny with a reason, or answer a question.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use orchestrator_store::{ApprovalDecision, ApprovalFilter, approval_status};

use orchestrator_types::{EventKind, TaskId, visible};
use std::collections::HashMap;

use super::{Viewer, command_of, field, form, layout, page_error, store_error, time};
use crate::Web;

/// The asking tasks whose last messages the inbox reads; more wait without that context.
const LAST_MESSAGES: usize = 50;

pub(crate) async fn inbox(State(web): State<Web>, headers: HeaderMap) -> Response {
    let viewer = Viewer::of(&web, &headers).await;
    let pending = match web
        .store
        .list_approvals(&ApprovalFilter {
            status: Some(approval_status::PENDING.to_owned()),
            task: None,
            limit: Some(200),
        })
        .await
    {
        Ok(pending) => pending,
        Err(e) => return store_error(e),
    };
    // What each asking agent said last before it asked: the context a person decides in.
    let mut said: HashMap<(i64, i64), String> = HashMap::new();
    let mut tasks: Vec<TaskId> = pending.iter().map(|a| a.task_id).collect();
    tasks.sort_by_key(|t| t.0);
    tasks.dedup();
    for task in tasks.into_iter().take(LAST_MESSAGES) {
        let messages = match web.store.events_of_kind(task, EventKind::Message).await {
            Ok(messages) => messages,
            Err(e) => return store_error(e),
        };
        for a in pending.iter().filter(|a| a.task_id == task) {
            let last = messages.iter().rev().find(|m| {
                m.at <= a.requested_at
                    && m.data.get("role").and_then(|r| r.as_str()) == Some("assistant")
                    && m.data
                        .get("text")
                        .and_then(|t| t.as_str())
                        .is_some_and(|t| !t.trim().is_empty())
            });
            if let Some(text) = last
                .and_then(|m| m.data.get("text"))
                .and_then(|t| t.as_str())
            {
                said.insert((task.0, a.id), text.trim().to_owned());
            }
        }
    }
    let content = html! {
        h1 { "Approvals" }
        p.live data-inbox-new hidden { "What waits has changed: " a href="/approvals" { "show it" } }
        @if pending.is_empty() {
            p.muted { "Nothing waits for a decision." }
        }
        @for a in &pending {
            div.card id=(format!("approval-{}", a.id)) data-approval=(a.id) {
                p {
                    strong { (a.tool) }
                    " asked by " a href=(format!("/tasks/{}", a.task_id.0)) { "task " (a.task_id.0) }
                    span.muted { " · requested " (time(a.requested_at)) " · expires " (time(a.expires_at)) }
                }
                @if let Some(text) = said.get(&(a.task_id.0, a.id)) {
                    blockquote.said data-said { span.muted { "The agent said before asking: " } (visible(text)) }
                }
                p { (visible(&a.reason)) }
                @if let Some(command) = command_of(&a.arguments) {
                    p.muted { "It would run:" }
                    pre.command data-command { (visible(command)) }
                }
                details open[command_of(&a.arguments).is_none()] {
                    summary { "The call's arguments" }
                    pre { (visible(&serde_json::to_string_pretty(&a.arguments).unwrap_or_default())) }
                }
                @if !viewer.read_only { (decide_forms(&viewer, a, "/approvals")) }
            }
        }
    };
    layout(&viewer, "Approvals", content)
}

/// The forms that decide a pending request: approve and deny with a reason, or a question's
/// answer; after the decision the browser goes back to `back` (the inbox, or the task's page).
pub(crate) fn decide_forms(
    viewer: &Viewer,
    a: &orchestrator_store::Approval,
    back: &str,
) -> maud::Markup {
    html! {
        @if a.kind == orchestrator_store::approval_kind::QUESTION {
            form method="post" action=(format!("/approvals/{}/answer", a.id)) {
                (viewer.csrf_field())
                input type="hidden" name="back" value=(back);
                @if let Some(options) = &a.options {
                    @for option in options {
                        button type="submit" name="answer" value=(option) { (option) } " "
                    }
                } @else {
                    input type="text" name="answer" placeholder="your answer" required;
                    " " button type="submit" { "Answer" }
                }
            }
        } @else {
            form.inline method="post" action=(format!("/approvals/{}/approve", a.id)) {
                (viewer.csrf_field())
                input type="hidden" name="back" value=(back);
                button type="submit" { "Approve" }
            }
            " "
            form.inline method="post" action=(format!("/approvals/{}/deny", a.id)) {
                (viewer.csrf_field())
                input type="hidden" name="back" value=(back);
                input type="text" name="reason" placeholder="reason (optional)";
                " " button.danger type="submit" { "Deny" }
            }
        }
    }
}

/// Where a decision's form asked to go back to: the inbox or a task's page of this dashboard,
/// never elsewhere (a field could name any address).
fn back_to(fields: &[(String, String)]) -> String {
    match field(fields, "back") {
        Some(back)
            if back == "/approvals"
                || back
                    .strip_prefix("/tasks/")
                    .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())) =>
        {
            back.to_owned()
        }
        _ => "/approvals".to_owned(),
    }
}

pub(crate) async fn decide(
    State(web): State<Web>,
    headers: HeaderMap,
    Path((id, decision)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let fields = match form(&web, &headers, &body) {
        Ok(fields) => fields,
        Err(refused) => return refused.into_response(),
    };
    let Some(id) = id.parse::<i64>().ok().filter(|n| *n > 0) else {
        return page_error(
            StatusCode::BAD_REQUEST,
            "Bad approval id",
            "That is not an approval id.",
        );
    };
    let decision = match decision.as_str() {
        "approve" => ApprovalDecision::Approve,
        "deny" => ApprovalDecision::Deny {
            reason: field(&fields, "reason").map(str::to_owned),
        },
        "answer" => match field(&fields, "answer") {
            Some(answer) => ApprovalDecision::Answer(answer.to_owned()),
            None => {
                return page_error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "No answer",
                    "Give an answer.",
                );
            }
        },
        other => {
            return page_error(
                StatusCode::NOT_FOUND,
                "No such decision",
                &format!("{other:?} is not approve, deny or answer"),
            );
        }
    };
    match web.store.decide_approval(id, &decision, "dashboard").await {
        Ok(_) => Redirect::to(&back_to(&fields)).into_response(),
        Err(e) => store_error(e),
    }
}
