//! The overview: tasks per state, what ended in the last 24 hours (throughput and failures),
//! queue depth, the workers, and the next automation to fire.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;
use orchestrator_types::{AutomationStatus, TaskState, now_millis};

use super::{Viewer, layout, store_error, time};
use crate::Web;

const DAY_MS: i64 = 24 * 3600 * 1000;
/// A worker whose heartbeat is older than this is shown as silent.
const SILENT_MS: i64 = 60_000;

pub(crate) async fn page(State(web): State<Web>, headers: HeaderMap) -> Response {
    let viewer = Viewer::of(&web, &headers).await;
    let now = now_millis();
    let found = tokio::try_join!(
        web.store.count_by_state(),
        web.store.finished_since(now - DAY_MS),
        web.store.queued_by_queue(),
        web.store.workers(20),
        web.store.list_automations(),
    );
    let (counts, ended, queues, workers, automations) = match found {
        Ok(found) => found,
        Err(e) => return store_error(e),
    };
    let ended_in = |state: TaskState| {
        ended
            .iter()
            .find(|(s, _)| *s == state)
            .map_or(0, |(_, n)| *n)
    };
    let (succeeded, failed, canceled) = (
        ended_in(TaskState::Succeeded),
        ended_in(TaskState::Failed),
        ended_in(TaskState::Canceled),
    );
    let finished = succeeded + failed;
    let next = automations
        .iter()
        .filter(|a| a.status == AutomationStatus::Active)
        .filter_map(|a| a.next_fire_at.map(|t| (t, a)))
        .min_by_key(|(t, _)| *t);
    let content = html! {
        h1 { "Overview" }
        div.card {
            h2 { "Tasks" }
            nav.counts {
                @for (state, n) in &counts {
                    a href=(format!("/?state={}", state.as_str())) {
                        span class=(format!("state state-{}", state.as_str())) { (state.as_str()) } " " span.muted data-count=(state.as_str()) { (n) }
                    }
                }
            }
        }
        div.card {
            h2 { "Last 24 hours" }
            p {
                span data-ended="succeeded" { (succeeded) } " succeeded, "
                span data-ended="failed" { (failed) } " failed, "
                span data-ended="canceled" { (canceled) } " canceled"
                @if finished > 0 { span.muted { " · " (failed * 100 / finished) "% of finished tasks failed" } }
            }
        }
        div.card {
            h2 { "Queues" }
            @if queues.is_empty() { p.muted { "Nothing is queued." } }
            @else {
                table { tbody { @for (queue, n) in &queues { tr data-queue=(queue) { td { a href=(format!("/?state=queued&queue={queue}")) { (queue) } } td { (n) " queued" } } } } }
            }
        }
        div.card {
            h2 { "Workers" }
            @if workers.is_empty() { p.muted { "No worker has started." } }
            @else {
                table {
                    thead { tr { th { "worker" } th { "host" } th { "slots" } th { "started" } th { "status" } } }
                    tbody {
                        @for w in &workers {
                            tr {
                                td { (w.id) }
                                td { (w.hostname) " (pid " (w.pid) ")" }
                                td { (w.slots) }
                                td.muted { (time(w.started_at)) }
                                td {
                                    @if let Some(stopped) = w.stopped_at { span.muted { "stopped " (time(stopped)) } }
                                    @else if now - w.heartbeat_at > SILENT_MS { span.error { "silent since " (time(w.heartbeat_at)) } }
                                    @else { span.state.state-succeeded { "alive" } }
                                }
                            }
                        }
                    }
                }
            }
        }
        div.card {
            h2 { "Next automation" }
            @if let Some((at, automation)) = next {
                p data-next-automation=(automation.spec.name) {
                    a href=(format!("/automations/{}", automation.spec.name)) { (automation.spec.name) }
                    " fires at " (time(at))
                }
            } @else {
                p.muted { "No active automation will fire." }
            }
        }
    };
    layout(&viewer, "Overview", content)
}
