//! Server-Sent Events: a task's events, and the changes to the lists of tasks and approvals.
//!
//! `GET /api/v1/tasks/{id}/events/stream`: each stored event is sent with its sequence number as
//! the SSE `id`, its kind as the SSE `event` and the event's JSON as `data`, so a client that
//! reconnects with `Last-Event-ID` (browsers do it by themselves) resumes exactly after the last
//! event it got; `?after=N` does the same for a first connection. While a worker of this daemon
//! runs the task, the pieces of the model's reply are sent as they stream, as `delta` events (and
//! `retrying` when an attempt of the model failed) with no id: they are not stored, so a
//! reconnection does not replay them; the whole message follows as a stored event. Once the task
//! has ended and every event is sent, a last `end` event carries its state and the stream closes.
//!
//! `GET /api/v1/tasks/stream` and `GET /api/v1/approvals/stream` never end: they send the counts
//! first (`counts`: tasks per state; `pending`: approvals waiting), then each task (`task`) or
//! approval (`approval`) as it changes, whole, in the order the changes committed, with the
//! change's number (the store's `change_id`: a transaction id on PostgreSQL) as the `id`. A client
//! reconnecting with `Last-Event-ID` (or `?after=` such a number) first gets what changed since
//! (all of its last change again, so some may come twice); one that fell too far behind, or gives
//! a number this database never gave, gets `reset`, and should read the list again. Comments keep
//! idle connections alive through proxies.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use orchestrator_store::{ChangeCursor, Store};
use orchestrator_types::TaskId;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::watch::{Change, PAGE};
use crate::{ApiError, ApiResult, LivePiece, Web, parse_id, query};

/// How often a task's stream reads the store even when the watcher told it nothing.
const FALLBACK: Duration = Duration::from_secs(2);
/// Events read per look.
const BATCH: u64 = 500;
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Changes a reconnecting list stream catches up on before it says `reset` instead.
const CATCH_UP: usize = 5_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StreamQuery {
    after: Option<i64>,
}

/// Where a follower of a task is.
struct Follow {
    store: Store,
    task: TaskId,
    after: i64,
    ready: VecDeque<Event>,
    done: bool,
    /// The store may hold events not yet sent.
    stale: bool,
    next_look: Instant,
    changes: broadcast::Receiver<Change>,
    live: Option<broadcast::Receiver<LivePiece>>,
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
                    .data(crate::event_json(event).to_string()),
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
            if let Err(e) = self.step().await {
                // The store failed: say so and end; the client reconnects from its last id.
                self.ready
                    .push_back(Event::default().event("error").data(e.to_string()));
                self.done = true;
            }
        }
    }

    /// Reads the store if something may have changed, else waits until something does.
    async fn step(&mut self) -> Result<(), orchestrator_store::Error> {
        if self.stale {
            self.stale = false;
            self.next_look = Instant::now() + FALLBACK;
            if self.read().await? {
                // More may follow at once: look again before waiting.
                self.stale = true;
                return Ok(());
            }
            let task = self.store.get_task(self.task).await?;
            if task.state.is_terminal() {
                // Events written between the look above and the task's end are sent first.
                self.read().await?;
                self.ready
                    .push_back(Event::default().event("end").data(task.state.as_str()));
                self.done = true;
            }
            return Ok(());
        }
        tokio::select! {
            () = tokio::time::sleep_until(self.next_look) => self.stale = true,
            change = self.changes.recv() => match change {
                Ok(Change::Task(_, task)) if task.id == self.task => self.stale = true,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => self.stale = true,
                // The watcher is gone with the daemon: the fallback keeps the stream going.
                Err(RecvError::Closed) => tokio::time::sleep_until(self.next_look).await,
            },
            piece = recv_live(&mut self.live) => {
                if let Some(piece) = piece.filter(|p| p.task == self.task) {
                    self.ready.push_back(
                        Event::default()
                            .event(piece.kind)
                            .data(piece.data.to_string()),
                    );
                }
            }
        }
        Ok(())
    }
}

/// The next piece streamed in this process; pending forever when there is no stream to read.
async fn recv_live(live: &mut Option<broadcast::Receiver<LivePiece>>) -> Option<LivePiece> {
    let Some(receiver) = live else {
        return std::future::pending().await;
    };
    match receiver.recv().await {
        Ok(piece) => Some(piece),
        // Pieces missed by a slow reader are gone; the whole message is stored anyway.
        Err(RecvError::Lagged(_)) => None,
        Err(RecvError::Closed) => {
            *live = None;
            None
        }
    }
}

/// The number a reconnecting client last got.
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

pub(crate) fn sse<S>(events: S) -> ApiResult
where
    S: futures_util::Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
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
        stale: true,
        next_look: Instant::now(),
        // Subscribed before the first read, so nothing written after it is missed.
        changes: web.watch.subscribe().await?,
        live: Some(web.live.subscribe()),
    };
    sse(futures_util::stream::unfold(
        follow,
        |mut follow| async move {
            let event = follow.next().await?;
            Some((Ok::<Event, Infallible>(event), follow))
        },
    ))
}

/// Which list a stream follows.
#[derive(Clone, Copy, PartialEq)]
enum List {
    Tasks,
    Approvals,
}

/// A list stream's position: the catch-up still to send, then the watcher's changes.
struct ListFollow {
    list: List,
    ready: VecDeque<Event>,
    changes: broadcast::Receiver<Change>,
}

impl ListFollow {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            match self.changes.recv().await {
                Ok(change) => {
                    if let Some(event) = list_event(self.list, &change) {
                        return Some(event);
                    }
                }
                // Too far behind to say what changed: the client reads the list again.
                Err(RecvError::Lagged(_)) => return Some(Event::default().event("reset").data("")),
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

/// The event a list's stream sends for a change, if it is about that list.
fn list_event(list: List, change: &Change) -> Option<Event> {
    let (kind, id, data) = match (list, change) {
        (List::Tasks, Change::Task(change, task)) => {
            ("task", Some(*change), crate::api_json(&**task).to_string())
        }
        (List::Tasks, Change::Counts(counts)) => ("counts", None, counts_json(counts).to_string()),
        (List::Approvals, Change::Approval(change, approval)) => (
            "approval",
            Some(*change),
            crate::api_json(&**approval).to_string(),
        ),
        (List::Approvals, Change::Pending(n)) => {
            ("pending", None, json!({"pending": n}).to_string())
        }
        _ => return None,
    };
    let event = Event::default().event(kind).data(data);
    Some(match id {
        Some(id) => event.id(id.to_string()),
        None => event,
    })
}

fn counts_json(counts: &[(orchestrator_types::TaskState, i64)]) -> serde_json::Value {
    let counts: serde_json::Map<String, serde_json::Value> = counts
        .iter()
        .map(|(state, n)| (state.as_str().to_owned(), json!(n)))
        .collect();
    json!({ "counts": counts })
}

pub(crate) async fn tasks(
    State(web): State<Web>,
    headers: HeaderMap,
    params: Result<Query<StreamQuery>, QueryRejection>,
) -> ApiResult {
    list_stream(web, headers, params, List::Tasks).await
}

pub(crate) async fn approvals(
    State(web): State<Web>,
    headers: HeaderMap,
    params: Result<Query<StreamQuery>, QueryRejection>,
) -> ApiResult {
    list_stream(web, headers, params, List::Approvals).await
}

async fn list_stream(
    web: Web,
    headers: HeaderMap,
    params: Result<Query<StreamQuery>, QueryRejection>,
    list: List,
) -> ApiResult {
    let params = query(params)?;
    let after = last_event_id(&headers)?.or(params.after);
    // Subscribed before the first read, so nothing written after it is missed.
    let changes = web.watch.subscribe().await?;
    let mut ready = VecDeque::new();
    match list {
        List::Tasks => {
            let counts = web.store.count_by_state().await?;
            ready.push_back(
                Event::default()
                    .event("counts")
                    .data(counts_json(&counts).to_string()),
            );
        }
        List::Approvals => {
            let pending = web.store.count_pending_approvals().await?;
            ready.push_back(
                Event::default()
                    .event("pending")
                    .data(json!({"pending": pending}).to_string()),
            );
        }
    }
    if let Some(after) = after {
        catch_up(&web.store, list, after, &mut ready).await?;
    }
    let follow = ListFollow {
        list,
        ready,
        changes,
    };
    sse(futures_util::stream::unfold(
        follow,
        |mut follow| async move {
            let event = follow.next().await?;
            Some((Ok::<Event, Infallible>(event), follow))
        },
    ))
}

/// Queues what changed since the change `after` (all of it again), or `reset` when that is more
/// than a stream should replay or `after` is no change of this database's (it is ahead of every
/// change committed: a time from before the streams sent change numbers, or another database's).
async fn catch_up(
    store: &Store,
    list: List,
    after: i64,
    ready: &mut VecDeque<Event>,
) -> Result<(), ApiError> {
    if after > store.change_horizon().await?.change {
        ready.push_back(Event::default().event("reset").data(""));
        return Ok(());
    }
    let mut changes = Vec::new();
    let mut from = ChangeCursor::before(after);
    while changes.len() <= CATCH_UP {
        let full = match list {
            List::Tasks => {
                let page = store.tasks_changed_after(from, PAGE).await?;
                let full = page.len() as u64 == PAGE;
                for (at, task) in page {
                    from = at;
                    changes.push(Change::Task(at.change, std::sync::Arc::new(task)));
                }
                full
            }
            List::Approvals => {
                let page = store.approvals_changed_after(from, PAGE).await?;
                let full = page.len() as u64 == PAGE;
                for (at, approval) in page {
                    from = at;
                    changes.push(Change::Approval(at.change, std::sync::Arc::new(approval)));
                }
                full
            }
        };
        if !full {
            break;
        }
    }
    // What committed ahead of the horizon (PostgreSQL) is not in that order yet, and the watcher
    // told it before this stream came back: read now, numbered where the ordered reading stands.
    if changes.len() <= CATCH_UP {
        let mut mark = orchestrator_store::AheadMark::default();
        match list {
            List::Tasks => {
                for (_, task) in store.tasks_changed_ahead(&mut mark).await? {
                    changes.push(Change::Task(from.change, std::sync::Arc::new(task)));
                }
            }
            List::Approvals => {
                for (_, approval) in store.approvals_changed_ahead(&mut mark).await? {
                    changes.push(Change::Approval(from.change, std::sync::Arc::new(approval)));
                }
            }
        }
    }
    if changes.len() > CATCH_UP {
        ready.push_back(Event::default().event("reset").data(""));
    } else {
        ready.extend(changes.iter().filter_map(|c| list_event(list, c)));
    }
    Ok(())
}
