//! The approvals inbox: what is asked, by which task, why, with the call's arguments as evidence
//! and its deadline; approve, deny with a reason, or answer a question.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use orchestrator_store::{ApprovalDecision, ApprovalFilter, approval_status};

use super::{Viewer, field, form, layout, page_error, store_error, time};
use crate::Web;

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
                p { (a.reason) }
                pre { (serde_json::to_string_pretty(&a.arguments).unwrap_or_default()) }
                @if !viewer.read_only {
                    @if a.kind == orchestrator_store::approval_kind::QUESTION {
                        form method="post" action=(format!("/approvals/{}/answer", a.id)) {
                            (viewer.csrf_field())
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
                            button type="submit" { "Approve" }
                        }
                        " "
                        form.inline method="post" action=(format!("/approvals/{}/deny", a.id)) {
                            (viewer.csrf_field())
                            input type="text" name="reason" placeholder="reason (optional)";
                            " " button.danger type="submit" { "Deny" }
                        }
                    }
                }
            }
        }
    };
    layout(&viewer, "Approvals", content)
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
        Ok(_) => Redirect::to("/approvals").into_response(),
        Err(e) => store_error(e),
    }
}
