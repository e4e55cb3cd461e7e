//! `GET /api/v1/tasks/{id}/events/stream`: a task's events as Server-Sent Events, live.
//!
//! Each event is sent with its sequence number as the SSE `id`, its kind as the SSE `event` and
//! the event's JSON as `data`, so a client that reconnects with `Last-Event-ID` (browsers do it by
//! themselves) resumes exactly after the last event it got; `?after=N` does the same for a first
//! connection. New events are read from the store as they are written, by any process sharing it.
//! Once the task has ended and every event is sent, a last `end` event carries its state and the
//! stream closes. Comments keep an idle connection alive through proxies.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use orchestrator_store::Store;
use orchestrator_types::TaskId;
use serde::Deserialize;

use crate::{ApiError, ApiResult, Web, parse_id, query};

/// How often the store is asked for new events while none came.
const POLL: Duration = Duration::from_millis(200);
/// Events read per look.
const BATCH: u64 = 500;
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StreamQuery {
    after: Option<i64>,
}

/// Where a follower is.
struct Follow {
    store: Store,
    task: TaskId,
    after: i64,
    ready: VecDeque<Event>,
    done: bool,
}

impl Follow {
    /// Queues the events after `after`; whether there were any.
    async fn read(&mut self) -> Result<bool, orchestrator_store::Error> {
        let events = self.store.events(self.task, self.after, BATCH).await?;
        for event in &events {
            self.after = event.seq;
            self.ready.push_back(
                Event::default()
                    .id(event.seq.to_string())
                    .event(event.kind.clone())
                    .data(serde_json::to_string(event).unwrap_or_default()),
            );
        }
        Ok(!events.is_empty())
    }

    /// The next event to send, waiting for one; `None` once the stream is over.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            let step = async {
                if self.read().await? {
                    return Ok(());
                }
                let task = self.store.get_task(self.task).await?;
                if task.state.is_terminal() {
                    // Events written between the look above and the task's end are sent first.
                    self.read().await?;
                    self.ready
                        .push_back(Event::default().event("end").data(task.state.as_str()));
                    self.done = true;
                } else {
                    tokio::time::sleep(POLL).await;
                }
                Ok::<(), orchestrator_store::Error>(())
            };
            if let Err(e) = step.await {
                // The store failed: say so and end; the client reconnects from its last id.
                self.ready
                    .push_back(Event::default().event("error").data(e.to_string()));
                self.done = true;
            }
        }
    }
}

/// The sequence number a reconnecting client last got.
fn last_event_id(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    match headers.get("last-event-id") {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .filter(|seq| *seq >= 0)
            .map(Some)
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID is not an event number")),
    }
}

pub(crate) async fn task_events(
    State(web): State<Web>,
    Path(id): Path<String>,
    headers: HeaderMap,
    params: Result<Query<StreamQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let task = TaskId(parse_id(&id)?);
    // An unknown task is a 404 before the stream starts, not an empty stream.
    web.store.get_task(task).await?;
    let after = last_event_id(&headers)?.or(params.after).unwrap_or(0);
    let follow = Follow {
        store: web.store.clone(),
        task,
        after,
        ready: VecDeque::new(),
        done: false,
    };
    let events = futures_util::stream::unfold(follow, |mut follow| async move {
        let event = follow.next().await?;
        Some((Ok::<Event, Infallible>(event), follow))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}
