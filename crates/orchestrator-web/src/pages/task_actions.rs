//! What a person does to tasks from the dashboard: cancel and retry one (a confirmation page,
//! then the form's POST), and the same for the tasks a list's filter selects (`/bulk`).

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::tasks::{Filters, parse_id, state_class};
use super::{Viewer, form, layout, page_error, store_error};
use crate::Web;
use crate::filter::Filter;

fn confirm(viewer: &Viewer, task: &orchestrator_store::Task, verb: &str, action: &str) -> Response {
    let content = html! {
        h1 { (verb) " task " (task.id.0) "?" }
        p { (task.title) " is " span class=(state_class(task.state.as_str())) { (task.state.as_str()) } "." }
        form method="post" action=(action) {
            (viewer.csrf_field())
            button.danger type="submit" { (verb) }
            " " a href=(format!("/tasks/{}", task.id.0)) { "Back" }
        }
    };
    layout(viewer, &format!("{verb} task {}", task.id.0), content)
}

pub(crate) async fn confirm_cancel(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    confirm_page(&web, &headers, &id, "Cancel", "cancel").await
}

pub(crate) async fn confirm_retry(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    confirm_page(&web, &headers, &id, "Retry", "retry").await
}

async fn confirm_page(
    web: &Web,
    headers: &HeaderMap,
    id: &str,
    verb: &str,
    action: &str,
) -> Response {
    let id = match parse_id(id) {
        Ok(id) => id,
        Err(page) => return page.into_response(),
    };
    let viewer = Viewer::of(web, headers).await;
    match web.store.get_task(id).await {
        Ok(task) => confirm(&viewer, &task, verb, &format!("/tasks/{}/{action}", id.0)),
        Err(e) => store_error(e),
    }
}

pub(crate) async fn cancel(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    act(&web, &headers, &id, &body, true).await
}

pub(crate) async fn retry(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    act(&web, &headers, &id, &body, false).await
}

async fn act(web: &Web, headers: &HeaderMap, id: &str, body: &Bytes, cancel: bool) -> Response {
    if let Err(refused) = form(web, headers, body) {
        return refused.into_response();
    }
    let id = match parse_id(id) {
        Ok(id) => id,
        Err(page) => return page.into_response(),
    };
    let done = if cancel {
        web.store.cancel_task(id).await.map(|_| ())
    } else {
        web.store.retry_task(id).await.map(|_| ())
    };
    match done {
        Ok(()) => Redirect::to(&format!("/tasks/{}", id.0)).into_response(),
        Err(e) => store_error(e),
    }
}

#[derive(Deserialize)]
pub(crate) struct BulkQuery {
    #[serde(default)]
    action: crate::bulk::Action,
    #[serde(flatten)]
    filter: Filter,
}

fn verb(action: crate::bulk::Action) -> &'static str {
    match action {
        crate::bulk::Action::Cancel => "Cancel",
        crate::bulk::Action::Retry => "Retry",
    }
}

/// The preview of a bulk action: how many tasks it would change, and the form that does it.
pub(crate) async fn confirm_bulk(
    State(web): State<Web>,
    headers: HeaderMap,
    query: Result<Query<BulkQuery>, QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return page_error(
            StatusCode::BAD_REQUEST,
            "Bad request",
            "That is not a bulk action.",
        );
    };
    let viewer = Viewer::of(&web, &headers).await;
    let filter = &query.filter;
    let preview = match crate::bulk::run(&web.store, query.action, filter, true).await {
        Ok(preview) => preview,
        Err(e) => return page_error(e.status, "Not possible", &e.message),
    };
    let verb = verb(query.action);
    let content = html! {
        h1 { (verb) " matching tasks?" }
        p {
            span data-matched=(preview.matched) { (preview.matched) } " tasks match"
            @if preview.more { " (more than that: one action changes at most " (crate::bulk::MAX_BULK) ")" }
            "."
        }
        @if preview.matched > 0 {
            form method="post" action="/bulk" {
                (viewer.csrf_field())
                input type="hidden" name="action" value=(verb.to_lowercase());
                @for (name, value) in filter.pairs() {
                    input type="hidden" name=(name) value=(value);
                }
                button.danger type="submit" { (verb) " " (preview.matched) " tasks" }
                " " a href="/" { "Back" }
            }
        }
    };
    layout(&viewer, &format!("{verb} matching tasks"), content)
}

/// Does a bulk action, then shows the list it was made from.
pub(crate) async fn bulk(State(web): State<Web>, headers: HeaderMap, body: Bytes) -> Response {
    let fields = match form(&web, &headers, &body) {
        Ok(fields) => fields,
        Err(refused) => return refused.into_response(),
    };
    let get = |name: &str| super::field(&fields, name).map(str::to_owned);
    let action = match get("action").as_deref() {
        Some("cancel") => crate::bulk::Action::Cancel,
        Some("retry") => crate::bulk::Action::Retry,
        _ => {
            return page_error(
                StatusCode::BAD_REQUEST,
                "Bad request",
                "The action is cancel or retry.",
            );
        }
    };
    let filters = Filters {
        state: get("state"),
        queue: get("queue"),
        automation: get("automation"),
        q: get("q"),
        repository: get("repository"),
        verdict: get("verdict"),
        before: None,
    };
    match crate::bulk::run(&web.store, action, &filters.filter(), false).await {
        Ok(_) => Redirect::to(&filters.link(filters.state.as_deref(), None)).into_response(),
        Err(e) => page_error(e.status, "Not possible", &e.message),
    }
}
