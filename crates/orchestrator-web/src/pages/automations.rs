//! The automations page: schedule and time zone, status and why one was parked, next fire time,
//! and run now, pause and resume.
//!
//! Run now asks first, without the script too: the button's form (and a GET of
//! `/automations/{name}/run`) lands on a page that says what will run (the automation, its task
//! template, and whether a slot of it still runs, with what its overlap policy will then do),
//! whose button posts with `confirmed=yes`. The script's confirm dialog is a shortcut that adds
//! the same field.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use orchestrator_scheduler::{
    AutomationView, DEFAULT_PREVIEW_COUNT, SlotView, in_zone, manage, next_fires, run_now,
};
use orchestrator_store::SlotResult;
use orchestrator_types::{AutomationStatus, Overlap, now_millis};

use super::{Viewer, field, form, layout, page_error, store_error, time};
use crate::Web;

pub(crate) async fn list(State(web): State<Web>, headers: HeaderMap) -> Response {
    let viewer = Viewer::of(&web, &headers).await;
    let all = match web.store.list_automations().await {
        Ok(all) => all,
        Err(e) => return store_error(e),
    };
    let views: Vec<AutomationView> = all.iter().map(AutomationView::new).collect();
    // Each automation's recent slots, for its row of marks: one read per automation shown.
    let recent = futures_util::future::join_all(
        all.iter()
            .take(MARKED)
            .map(|a| web.store.slots(a.id, MARKS)),
    )
    .await;
    let marks_of = |id: i64| -> Vec<SlotView> {
        all.iter()
            .position(|a| a.id == id)
            .and_then(|i| recent.get(i))
            .and_then(|r| r.as_ref().ok())
            .map(|slots| slots.iter().rev().map(SlotView::new).collect())
            .unwrap_or_default()
    };
    let content = html! {
        h1 { "Automations" }
        @if views.is_empty() { p.muted { "No automations." } }
        @else {
            table {
                thead { tr { th { "name" } th { "schedule" } th { "status" } th { "recent runs" } th { "next fire" } th { "tasks" } th {} } }
                tbody {
                    @for v in &views {
                        tr data-automation=(v.name) {
                            td { a href=(format!("/automations/{}", v.name)) { (v.name) } }
                            td { span data-words { (v.schedule_words) } br; code.muted { (v.schedule) } " " span.muted { (v.timezone) } }
                            td {
                                (v.status.to_string())
                                @if let Some(error) = &v.last_error { br; span.error { "parked: " (error) } }
                                @if let Some(note) = &v.status_note { br; span.muted data-note { "“" (note) "”" } }
                            }
                            td { (run_marks(&marks_of(v.id))) }
                            td {
                                @match (&v.next_fire_local, all.iter().find(|a| a.id == v.id).and_then(|a| a.next_fire_at)) {
                                    (Some(local), Some(at)) if v.status != AutomationStatus::Paused => { (local) br; span.muted { (time(at)) } }
                                    _ => { "-" }
                                }
                            }
                            td { a href=(format!("/?automation={}", v.name)) { "its tasks" } }
                            td { (actions(&viewer, v)) }
                        }
                    }
                }
            }
        }
    };
    layout(&viewer, "Automations", content)
}

/// How many automations of the list get their recent runs read, and how many runs each.
const MARKED: usize = 200;
const MARKS: u64 = 12;

/// An automation's recent slots as a row of coloured marks, oldest first (as Dagu shows runs):
/// each mark is its slot's outcome, the worst state among its tasks when it fired (failed over
/// running over the rest), or skipped; each links to its task and says what happened on hover.
fn run_marks(slots: &[SlotView]) -> Markup {
    html! {
        @if slots.is_empty() { span.muted { "none yet" } }
        span.marks {
            @for s in slots {
                @let outcome = slot_outcome(s);
                @let tasks = s.tasks.iter().map(|t| format!("task {} {}", t.id, t.state)).collect::<Vec<_>>().join(", ");
                @let said = format!("{}: {}{}{}", s.slot, s.status, if tasks.is_empty() { String::new() } else { format!(", {tasks}") }, s.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default());
                @match s.tasks.first() {
                    Some(task) => { a class=(format!("mark mark-{outcome}")) href=(format!("/tasks/{}", task.id)) title=(said) data-mark=(outcome) { "" } }
                    None => { span class=(format!("mark mark-{outcome}")) title=(said) data-mark=(outcome) { "" } }
                }
            }
        }
    }
}

/// One word for a slot's outcome: its tasks' worst state, else its own status.
fn slot_outcome(slot: &SlotView) -> &str {
    for state in [
        "failed",
        "running",
        "waiting",
        "queued",
        "canceled",
        "succeeded",
    ] {
        if slot.tasks.iter().any(|t| t.state == state) {
            return state;
        }
    }
    if slot.status == "fired" {
        "fired"
    } else {
        "skipped"
    }
}

/// Run now, and pause or resume with a note; nothing in read-only mode.
fn actions(viewer: &Viewer, v: &AutomationView) -> Markup {
    let (action, label) = if v.status == AutomationStatus::Paused {
        ("resume", "Resume")
    } else {
        ("pause", "Pause")
    };
    html! {
        @if !viewer.read_only {
            // Without `confirmed` the post lands on the confirmation page; the script's confirm
            // dialog adds it.
            form.inline method="post" action=(format!("/automations/{}/run", v.name)) data-confirm=(format!("Run {} now?", v.name)) data-confirm-field="confirmed" {
                (viewer.csrf_field()) button type="submit" { "Run now" }
            }
            " "
            form.inline method="post" action=(format!("/automations/{}/{action}", v.name)) {
                (viewer.csrf_field())
                input type="text" name="note" placeholder="note (optional)" aria-label=(format!("why {action}")) maxlength="500";
                " "
                button type="submit" { (label) }
            }
        }
    }
}

/// Recent slots an automation's page shows.
const SLOTS: u64 = 20;

/// One automation: its schedule, policies, next fire times, and recent slots with their tasks.
pub(crate) async fn read(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let viewer = Viewer::of(&web, &headers).await;
    let automation = match web.store.automation(&name).await {
        Ok(a) => a,
        Err(e) => return store_error(e),
    };
    let slots = match web.store.slots(automation.id, SLOTS).await {
        Ok(slots) => slots,
        Err(e) => return store_error(e),
    };
    let view = AutomationView::new(&automation);
    // A schedule that no longer parses shows no fire times; its parked reason says why.
    let fires: Vec<i64> =
        next_fires(&automation, now_millis(), DEFAULT_PREVIEW_COUNT).unwrap_or_default();
    let slots: Vec<SlotView> = slots.iter().map(SlotView::new).collect();
    let content = html! {
        h1 { "Automation " (view.name) }
        div.card {
            p { strong data-words { (view.schedule_words) } " (" code { (view.schedule) } ") in " (view.timezone) " · " span data-status=(view.status.to_string()) { (view.status.to_string()) } }
            @if let Some(error) = &view.last_error { p.error { "Parked: " (error) ". Fix the template, then resume it." } }
            @if let Some(note) = &view.status_note { p data-note { (if view.status == AutomationStatus::Paused { "Paused: " } else { "Resumed: " }) "“" (note) "”" } }
            p.muted { "catch-up " (view.catch_up.to_string()) " · overlap " (view.overlap.to_string()) " · jitter " (view.jitter_secs) " s · from " (view.source) }
            @for w in &view.workspaces { p.muted { "workspace " code { (w) } } }
            @for g in &view.gates { p.muted { "gate " code { (g.command) } } }
            @if let Some(prompt) = &view.prompt { pre { (prompt) } }
            p { a href=(format!("/?automation={}", view.name)) { "Its tasks" } }
            (actions(&viewer, &view))
        }
        h2 { "Next fire times" }
        @if fires.is_empty() { p.muted { "None: it is paused, or its schedule never fires again." } }
        ul { @for f in &fires { li data-fire { (in_zone(*f, &view.timezone)) " · " span.muted { (time(*f)) } } } }
        h2 { "Recent slots" }
        @if slots.is_empty() { p.muted { "No slot has fired yet." } }
        @else {
            table {
                thead { tr { th { "slot" } th { "kind" } th { "status" } th { "tasks" } th { "reason" } } }
                tbody {
                    @for s in &slots {
                        tr data-slot {
                            td { (s.slot) }
                            td { (s.kind) }
                            td { (s.status) }
                            td { @for t in &s.tasks { a href=(format!("/tasks/{}", t.id)) { (t.id) } " " span class=(format!("state state-{}", t.state)) { (t.state) } " " } }
                            td.muted { (s.reason.clone().unwrap_or_default()) }
                        }
                    }
                }
            }
        }
    };
    layout(&viewer, &format!("Automation {}", view.name), content)
}

/// The tasks of an automation's recent slots that have not ended: what "a slot still runs" means.
async fn unfinished(web: &Web, automation_id: i64) -> Result<Vec<(i64, String)>, Response> {
    let slots = web
        .store
        .slots(automation_id, SLOTS)
        .await
        .map_err(store_error)?;
    Ok(slots
        .iter()
        .map(SlotView::new)
        .flat_map(|s| s.tasks)
        .filter(|t| matches!(t.state.as_str(), "queued" | "running" | "waiting"))
        .map(|t| (t.id, t.state))
        .collect())
}

/// What a run started now does beside a slot that still runs, by overlap policy.
fn overlap_words(overlap: Overlap) -> &'static str {
    match overlap {
        Overlap::Skip => "this run will be skipped while it runs (nothing is made)",
        Overlap::BufferOne => "this run's task waits until it ends (one waits at most)",
        Overlap::Allow => "both will run at once",
        Overlap::CancelPrevious => "it will be canceled and this run's task takes its place",
    }
}

/// `GET /automations/{name}/run`, and a run-now post without `confirmed`: what will run, and the
/// button that runs it.
pub(crate) async fn confirm(
    State(web): State<Web>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    if action != "run" {
        // Pause and resume are posted from the automation's own forms; there is nothing to ask.
        return Redirect::to(&format!("/automations/{name}")).into_response();
    }
    let viewer = Viewer::of(&web, &headers).await;
    confirm_run(&web, &viewer, &name).await
}

async fn confirm_run(web: &Web, viewer: &Viewer, name: &str) -> Response {
    let automation = match web.store.automation(name).await {
        Ok(a) => a,
        Err(e) => return store_error(e),
    };
    let running = match unfinished(web, automation.id).await {
        Ok(running) => running,
        Err(page) => return page,
    };
    let view = AutomationView::new(&automation);
    let content = html! {
        h1 { "Run " (view.name) " now?" }
        div.card data-run-confirm=(view.name) {
            p { "It runs on its schedule " strong data-words { (view.schedule_words) } " (" code { (view.schedule) } ") in " (view.timezone) "; this run is one more, now." }
            @if view.status == AutomationStatus::Paused { p.muted { "It is paused: this run goes ahead all the same, and the schedule stays paused." } }
            h2 { "What it makes" }
            p data-template-title { "A task titled " strong { (view.title.clone().unwrap_or_else(|| view.name.clone())) } " in queue " (view.queue) ", " (view.max_attempts) " attempts at most." }
            @for w in &view.workspaces { p.muted { "workspace " code { (w) } } }
            @if let Some(prompt) = &view.prompt { p { "The agent is asked:" } pre data-template-prompt { (prompt) } }
            @for g in &view.gates { p data-template-gate { "gate " code { (g.command) } } }
            @if view.gates.is_empty() && view.prompt.is_none() { p.muted { "Its template has neither a prompt nor gates." } }
            h2 { "What runs now" }
            @if running.is_empty() {
                p data-running-slot="none" { "No task of it is running or waiting." }
            } @else {
                p data-running-slot=(running.len()) {
                    "A slot of it has not ended: "
                    @for (id, state) in &running { a href=(format!("/tasks/{id}")) { "task " (id) } " (" (state) ") " }
                    "· its overlap policy is " code { (view.overlap.to_string()) } ", so " (overlap_words(automation.spec.overlap)) "."
                }
            }
            @if viewer.read_only {
                p.muted { "This dashboard is read-only." }
            } @else {
                form method="post" action=(format!("/automations/{}/run", view.name)) {
                    (viewer.csrf_field())
                    input type="hidden" name="confirmed" value="yes";
                    button.danger type="submit" { "Run now" }
                    " " a href="/automations" { "Back" }
                }
            }
        }
    };
    layout(viewer, &format!("Run {} now?", view.name), content)
}

pub(crate) async fn act(
    State(web): State<Web>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let fields = match form(&web, &headers, &body) {
        Ok(fields) => fields,
        Err(refused) => return refused.into_response(),
    };
    if action == "run" && field(&fields, "confirmed") != Some("yes") {
        // A run-now that was not confirmed (the form without the script) asks first.
        let viewer = Viewer::of(&web, &headers).await;
        return confirm_run(&web, &viewer, &name).await;
    }
    let now = now_millis();
    let done = match action.as_str() {
        "pause" | "resume" => {
            let status = if action == "pause" {
                AutomationStatus::Paused
            } else {
                AutomationStatus::Active
            };
            manage::set_status(
                &web.store,
                &name,
                status,
                field(&fields, "note"),
                "the dashboard",
                now,
            )
            .await
            .map(|_| None)
        }
        "run" => match web.store.automation(&name).await {
            Ok(automation) => run_now(&web.store, &automation, false, "dashboard", now)
                .await
                .map(Some),
            Err(e) => return store_error(e),
        },
        other => {
            return page_error(
                StatusCode::NOT_FOUND,
                "No such action",
                &format!("{other:?} is not run, pause or resume"),
            );
        }
    };
    match done {
        Ok(Some(SlotResult::Skipped { reason })) => page_error(
            StatusCode::CONFLICT,
            "Not run",
            &format!("{name} did not fire: {reason}."),
        ),
        Ok(Some(SlotResult::Fired { tasks })) => match tasks.first() {
            Some(task) => Redirect::to(&format!("/tasks/{}", task.0)).into_response(),
            None => Redirect::to("/automations").into_response(),
        },
        Ok(_) => Redirect::to("/automations").into_response(),
        Err(e) => {
            let api = crate::ApiError::from(e);
            page_error(api.status, "Something went wrong", &api.message)
        }
    }
}
