//! The overview: tasks per state, what ended in the last 24 hours (throughput and failures, and
//! per hour as a chart drawn here, as SVG, with no script), the queue's latency per hour, queue
//! depth, the workers (stopped ones folded away), and the next automation to fire.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use orchestrator_store::{HourOfEnds, HourOfWaits, WorkerRow};
use orchestrator_types::{AutomationStatus, TaskState, format_duration, now_millis, placement};

use super::{Viewer, layout, store_error, time};
use crate::Web;

const DAY_MS: i64 = 24 * 3600 * 1000;
/// A worker whose heartbeat is older than this is shown as silent.
const SILENT_MS: i64 = 60_000;

pub(crate) async fn page(State(web): State<Web>, headers: HeaderMap) -> Response {
    let viewer = Viewer::of(&web, &headers).await;
    let now = now_millis();
    // The charts' window: whole hours, the current one and the 23 before it.
    let first_hour = (now.div_euclid(HOUR_MS) - (HOURS - 1)) * HOUR_MS;
    let found = tokio::try_join!(
        web.store.count_by_state(),
        web.store.finished_since(now - DAY_MS),
        web.store.queued_by_queue(),
        web.store.workers(50),
        web.store.list_automations(),
        web.store.ended_per_hour(first_hour),
        web.store.start_waits_per_hour(first_hour),
    );
    let (counts, ended, queues, workers, automations, per_hour, waits) = match found {
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
    let (stopped, running): (Vec<&WorkerRow>, Vec<&WorkerRow>) =
        workers.iter().partition(|w| w.stopped_at.is_some());
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
            div.charts {
                figure {
                    figcaption { "Tasks ended per hour: " span.legend-ok { "succeeded" } ", " span.legend-bad { "failed" } }
                    (ended_chart(&per_hour, now))
                }
                figure {
                    figcaption { "Queue latency per hour: from a task's creation to its first start, " span.legend-run { "mean" } " and " span.legend-warn { "longest" } }
                    (latency_chart(&waits, now))
                }
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
                @if running.is_empty() { p.muted { "No worker runs now." } }
                @else { (workers_table(&running, now)) }
                @if !stopped.is_empty() {
                    details.stopped-workers {
                        summary { (stopped.len()) " stopped" }
                        (workers_table(&stopped, now))
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

/// The workers as a table: which machine (its host id), what each offers tasks (labels, the key
/// variables it holds, shared directories) and whether it is alive.
fn workers_table(workers: &[&WorkerRow], now: i64) -> Markup {
    html! {
        table.workers {
            thead { tr { th { "worker" } th { "host" } th { "offers" } th { "slots" } th { "started" } th { "status" } } }
            tbody {
                @for w in workers {
                    @let offered = w.offered();
                    @let host = offered.iter().find_map(|o| o.strip_prefix(placement::HOST_PREFIX));
                    tr data-worker=(w.id) {
                        td { (w.id) }
                        td {
                            (w.hostname) " (pid " (w.pid) ")"
                            @if let Some(host) = host { br; span.muted { "host id " code { (host) } } }
                        }
                        td {
                            @let words: Vec<&String> = offered.iter().filter(|o| !o.starts_with(placement::HOST_PREFIX)).collect();
                            @if words.is_empty() { span.muted { "nothing: takes tasks that require nothing" } }
                            @for word in words { span.offer title=(placement::describe_requirement(word)) { (word) } " " }
                        }
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

/// Chart geometry: 24 hourly columns, the newest on the right.
const HOURS: i64 = 24;
const CHART_W: i64 = 480;
const CHART_H: i64 = 100;
const COLUMN_W: i64 = CHART_W / HOURS;

/// The column of the hour that starts at `hour` (the current hour is the last), if in the window.
fn column(hour: i64, now: i64) -> Option<i64> {
    let current = now.div_euclid(HOUR_MS);
    let back = current - hour.div_euclid(HOUR_MS);
    (0..HOURS).contains(&back).then(|| HOURS - 1 - back)
}

const HOUR_MS: i64 = 3_600_000;

/// The x axis: hours ago, which reads the same in every time zone.
fn hours_axis() -> Markup {
    html! {
        // Column i is the hour that began 23 - i hours before this one.
        @for (i, label) in [(0, "-23 h"), (5, "-18 h"), (11, "-12 h"), (17, "-6 h"), (23, "now")] {
            text.axis x=(i * COLUMN_W + COLUMN_W / 2) y=(CHART_H + 14) text-anchor="middle" { (label) }
        }
    }
}

/// Stacked columns of the tasks that ended each hour: succeeded below, failed above.
fn ended_chart(hours: &[HourOfEnds], now: i64) -> Markup {
    let top = hours
        .iter()
        .map(|h| h.succeeded + h.failed)
        .max()
        .unwrap_or(0)
        .max(1);
    let scale = |n: i64| n * CHART_H / top;
    html! {
        svg.chart role="img" data-chart="ended" viewBox=(format!("0 0 {CHART_W} {}", CHART_H + 18)) {
            title { "Tasks ended per hour over the last 24 hours" }
            line.baseline x1="0" y1=(CHART_H) x2=(CHART_W) y2=(CHART_H) {}
            text.axis x=(CHART_W) y="10" text-anchor="end" { (top) }
            @for h in hours {
                @if let Some(col) = column(h.hour, now) {
                    @let x = col * COLUMN_W + 1;
                    @let ok = scale(h.succeeded);
                    @let bad = scale(h.failed);
                    g data-hour=(h.hour) data-succeeded=(h.succeeded) data-failed=(h.failed) {
                        title { (h.succeeded) " succeeded, " (h.failed) " failed, " (hours_ago(h.hour, now)) }
                        @if h.succeeded > 0 { rect.bar-ok x=(x) y=(CHART_H - ok) width=(COLUMN_W - 2) height=(ok.max(1)) {} }
                        @if h.failed > 0 { rect.bar-bad x=(x) y=(CHART_H - ok - bad.max(1)) width=(COLUMN_W - 2) height=(bad.max(1)) {} }
                    }
                }
            }
            (hours_axis())
        }
        @if hours.is_empty() { p.muted { "No task ended in the last 24 hours." } }
    }
}

/// Columns of the mean wait each hour, with a mark at the longest.
fn latency_chart(hours: &[HourOfWaits], now: i64) -> Markup {
    let top = hours.iter().map(|h| h.max_ms).max().unwrap_or(0).max(1);
    let scale = |ms: i64| ms * CHART_H / top;
    html! {
        svg.chart role="img" data-chart="latency" viewBox=(format!("0 0 {CHART_W} {}", CHART_H + 18)) {
            title { "Queue latency per hour over the last 24 hours" }
            line.baseline x1="0" y1=(CHART_H) x2=(CHART_W) y2=(CHART_H) {}
            text.axis x=(CHART_W) y="10" text-anchor="end" { (format_duration(top)) }
            @for h in hours {
                @if let Some(col) = column(h.hour, now) {
                    @let x = col * COLUMN_W + 1;
                    @let mean = scale(h.mean_ms);
                    g data-hour=(h.hour) data-mean-ms=(h.mean_ms) data-max-ms=(h.max_ms) {
                        title { (h.started) " started, waiting " (format_duration(h.mean_ms)) " on average and " (format_duration(h.max_ms)) " at most, " (hours_ago(h.hour, now)) }
                        rect.bar-run x=(x) y=(CHART_H - mean.max(1)) width=(COLUMN_W - 2) height=(mean.max(1)) {}
                        rect.bar-warn x=(x) y=(CHART_H - scale(h.max_ms)) width=(COLUMN_W - 2) height="2" {}
                    }
                }
            }
            (hours_axis())
        }
        @if hours.is_empty() { p.muted { "No task started in the last 24 hours." } }
    }
}

/// The hour `hour` starts, said relative to now: "this hour", "3 h ago".
fn hours_ago(hour: i64, now: i64) -> String {
    match now.div_euclid(HOUR_MS) - hour.div_euclid(HOUR_MS) {
        0 => "this hour".to_owned(),
        n => format!("{n} h ago"),
    }
}
