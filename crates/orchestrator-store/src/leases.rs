//! Leases on tasks: heartbeats, completion fenced by the lease epoch (with group commit), the
//! rescue of expired leases, and the fence every other write of an attempt goes through. The claims
//! that grant leases are in `leases/claim.rs`.
//!
//! Every write of an attempt names its lease; a write whose epoch is no longer the task's is
//! refused, which is what makes a worker that lost its lease harmless.

use orchestrator_types::BoxFuture;
mod claim;
mod successes;

#[cfg(test)]
pub(crate) use claim::claimed_data;

use crate::Backend;
use crate::batch_rows::{Column, json_rows};
use crate::events::{EventInsert, insert_events};
use crate::exec::Tx;
use crate::tasks::{Tasks, state_is};
use crate::{Error, Result, Store};
use orchestrator_types::{EventKind, TaskId, TaskState, now_millis};
use sea_query::{Alias, Cond, Expr, ExprTrait, IntoIden, Order, Query, TableRef};
use serde::Serialize;
use serde_json::json;
use std::collections::HashMap;

/// A worker's hold on one attempt of a task. Every write the attempt makes names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    pub task_id: TaskId,
    pub epoch: i64,
}

/// What a heartbeat learned about one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseStatus {
    pub lease: Lease,
    /// False when the lease is gone: the task was rescued, finished or handed to someone else.
    pub held: bool,
    /// A user asked to cancel the task.
    pub cancel_requested: bool,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every gate passed.
    Succeeded,
    /// Terminal failure; `error` says why.
    Failed { error: String },
    /// The task was canceled while running.
    Canceled,
    /// Put the task back in the queue: a retryable failure (`refund` false, `Requeued` event), or a
    /// graceful hand-back on shutdown (`refund` true: the attempt does not count, `HandedBack` event).
    Requeue {
        run_after: i64,
        error: Option<String>,
        refund: bool,
    },
    /// The agent paused on a person (an approval or a question): the task waits without a lease and
    /// without spending the attempt, until an answer or expiry queues it again. If every approval was
    /// already answered when this lands, the task is queued at once.
    Wait { reason: String },
    /// A best-of-N lead waits for its siblings, without a lease and without spending the attempt,
    /// until one ends ([`Store::wake_lead`]). If more than `ended` of them (the number it decided
    /// on) ended when this lands, it is queued at once.
    AwaitSiblings { reason: String, ended: i64 },
}

/// One attempt's end, as a worker reports it.
#[derive(Debug, Clone)]
pub struct Completion {
    pub lease: Lease,
    pub outcome: Outcome,
    /// Extra details for the final event.
    pub details: serde_json::Value,
}

/// Whether a completion was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionResult {
    Applied,
    /// The lease's epoch was no longer current; nothing was written.
    Stale,
}

/// Counts of one rescuer pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RescueCounts {
    pub requeued: u64,
    pub failed: u64,
    pub canceled: u64,
}

/// Most successes ended by one statement.
const SUCCESS_CHUNK: usize = 400;

/// The end of the running tasks that `leases` hold as successes, at `now`, returning each ended
/// task's id, epoch, event number and state. A cancel requested while the attempt finished wins:
/// the user asked for it to stop, and a parent's cancel must not leave a child reported as
/// succeeded.
fn successes_update<'a>(
    backend: Backend,
    leases: impl Iterator<Item = &'a Lease>,
    now: i64,
    change_mark: Expr,
) -> sea_query::UpdateStatement {
    let mut stmt = Query::update()
        .table(Tasks::Table)
        .value(Tasks::State, unless_canceled(TaskState::Succeeded))
        .value(Tasks::LeaseOwner, Option::<String>::None)
        .value(Tasks::LeaseExpiresAt, Option::<i64>::None)
        .value(Tasks::EventSeq, Expr::col(Tasks::EventSeq).add(1))
        .value(Tasks::ChangeId, change_mark)
        .value(Tasks::LastError, Option::<String>::None)
        .value(Tasks::FinishedAt, now)
        .value(Tasks::UpdatedAt, now)
        .returning(Query::returning().columns([
            Tasks::Id,
            Tasks::Epoch,
            Tasks::EventSeq,
            Tasks::State,
        ]))
        .to_owned();
    held_by(&mut stmt, backend, leases);
    stmt
}

/// `state`, unless a cancel was requested while the attempt ended: the cancel wins, so a task
/// asked to stop is never left queued, waiting or reported as succeeded.
fn unless_canceled(state: TaskState) -> sea_query::CaseStatement {
    Expr::case(
        Expr::col(Tasks::CancelRequested).eq(true),
        TaskState::Canceled.as_str(),
    )
    .finally(state.as_str())
}

/// The finish time of a task that [`unless_canceled`] may end: `now` if canceled, else none.
fn finished_if_canceled(now: i64) -> sea_query::CaseStatement {
    Expr::case(Expr::col(Tasks::CancelRequested).eq(true), now)
        .finally(Expr::val(Option::<i64>::None))
}

fn lease_matches(lease: &Lease) -> Cond {
    Cond::all()
        .add(Expr::col(Tasks::Id).eq(lease.task_id.0))
        .add(Expr::col(Tasks::Epoch).eq(lease.epoch))
}

/// The name of a batch's leases inside its statement.
const LEASES: &str = "leases";

/// Limits `stmt` to the running rows `leases` hold: `UPDATE tasks ... FROM (the leases, bound as
/// one list) AS leases WHERE tasks.id = leases.held_id AND tasks.epoch = leases.held_epoch AND
/// state = 'running'`. Both databases read the list once and find each row by its primary key,
/// and the statement's text is the same for a batch of any size (see batch_rows.rs). The form
/// before it, `FROM (VALUES (id, epoch), ...)`, was a new statement to compile for each size; the
/// one before that, `id IN (...) AND epoch = CASE WHEN id = .. THEN .. END`, made each row walk the
/// CASE to its own id, so a batch's cost grew with the square of its size. One task twice (an old
/// attempt and the new one) is one more row of the list, of which only the current epoch matches.
///
/// On SQLite the state's term is written `+"state" = 'running'`: the unary plus keeps the planner
/// from reading the running tasks through an index of their state (`tasks_by_state` until
/// migration 0024; `tasks_leased` is partial on it) and scanning the list for each of them (it
/// cannot tell how long the list is), which made a completion cost the product of the batch and
/// the running tasks. The list then leads, and each of its rows finds its task by id.
fn held_by<'a>(
    stmt: &mut sea_query::UpdateStatement,
    backend: Backend,
    leases: impl Iterator<Item = &'a Lease>,
) {
    let list = Alias::new(LEASES);
    let rows = leases
        .map(|lease| json!([lease.task_id.0, lease.epoch]))
        .collect();
    // Named apart from the task's own columns, which the statement returns unqualified.
    let held = json_rows(
        backend,
        &[Column::Int("held_id"), Column::Int("held_epoch")],
        rows,
    );
    let running = match backend {
        Backend::Sqlite => Expr::cust(format!("+\"state\" = '{}'", TaskState::Running.as_str())),
        Backend::Postgres => state_is(TaskState::Running),
    };
    stmt.from(TableRef::SubQuery(held.into(), list.clone().into_iden()))
        .and_where(
            Expr::col((Tasks::Table, Tasks::Id)).equals((list.clone(), Alias::new("held_id"))),
        )
        .and_where(Expr::col((Tasks::Table, Tasks::Epoch)).equals((list, Alias::new("held_epoch"))))
        .and_where(running);
}

/// Bumps the task's event counter if `lease` still holds the running task, returning the number for
/// the next event; `StaleLease` if it does not.
pub(crate) async fn next_seq_fenced(tx: &mut Tx, lease: &Lease, now: i64) -> Result<i64> {
    tx.fetch_optional::<(i64,), _>(&fence_statement(lease, now))
        .await?
        .map(|(s,)| s)
        .ok_or(Error::StaleLease {
            task: lease.task_id,
            epoch: lease.epoch,
        })
}

/// The fence: bumps the event counter of the task `lease` holds, running, returning the new number;
/// no row when the lease is stale.
pub(crate) fn fence_statement(lease: &Lease, now: i64) -> sea_query::UpdateStatement {
    Query::update()
        .table(Tasks::Table)
        .value(Tasks::EventSeq, Expr::col(Tasks::EventSeq).add(1))
        .value(Tasks::UpdatedAt, now)
        .cond_where(lease_matches(lease))
        .and_where(state_is(TaskState::Running))
        .returning_col(Tasks::EventSeq)
        .to_owned()
}

/// Applies a `Wait` end: the task waits, its attempt refunded, unless a cancel was requested (it
/// ends canceled) or its approvals were all answered already (it is queued again at once). The
/// check for answers is a statement of its own, after the task row is locked by the first one, so
/// a decision that committed in between is seen (see approvals.rs).
/// What queues a waiting task again: an answer to each of its approvals, or its siblings.
#[derive(Clone, Copy)]
enum Resume {
    IfAnswered,
    /// When more siblings ended than the `ended` the lead decided on.
    IfMoreSiblingsEnded {
        ended: i64,
    },
}

async fn wait(
    tx: &mut Tx,
    completion: &Completion,
    reason: &str,
    resume: Resume,
    now: i64,
) -> Result<Option<EventInsert>> {
    let stmt = Query::update()
        .table(Tasks::Table)
        .value(Tasks::State, unless_canceled(TaskState::Waiting))
        .value(Tasks::FinishedAt, finished_if_canceled(now))
        .value(Tasks::LeaseOwner, Option::<String>::None)
        .value(Tasks::LeaseExpiresAt, Option::<i64>::None)
        .value(Tasks::Attempt, Expr::col(Tasks::Attempt).sub(1))
        .value(Tasks::EventSeq, Expr::col(Tasks::EventSeq).add(1))
        .value(Tasks::ChangeId, tx.change_mark())
        .value(Tasks::UpdatedAt, now)
        .cond_where(lease_matches(&completion.lease))
        .and_where(state_is(TaskState::Running))
        .returning(Query::returning().columns([Tasks::Id, Tasks::EventSeq, Tasks::State]))
        .to_owned();
    let Some((id, seq, ended)) = tx.fetch_optional::<(i64, i64, String), _>(&stmt).await? else {
        return Ok(None);
    };
    let mut data = completion.details.clone();
    if !data.is_object() {
        data = json!({});
    }
    if ended == TaskState::Canceled.as_str() {
        crate::approvals::close_pending(tx, TaskId(id), now).await?;
        return Ok(Some(EventInsert {
            task_id: id,
            seq,
            at: now,
            kind: EventKind::Canceled,
            data,
        }));
    }
    let resumed = match resume {
        Resume::IfAnswered => crate::approvals::resume_if_answered(tx, TaskId(id), now).await?,
        Resume::IfMoreSiblingsEnded { ended } => {
            crate::best_of::resume_if_more_ended(tx, TaskId(id), ended, now).await?
        }
    };
    if let Some(map) = data.as_object_mut() {
        map.insert("reason".into(), json!(reason));
        map.insert("resumed".into(), json!(resumed));
    }
    Ok(Some(EventInsert {
        task_id: id,
        seq,
        at: now,
        kind: EventKind::Waiting,
        data,
    }))
}

impl Store {
    /// Extends the leases that are still held by `lease_ms` from now, and reports for each lease
    /// whether it is held and whether a cancel was requested.
    pub fn heartbeat<'a>(
        &'a self,
        leases: &'a [Lease],
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<Vec<LeaseStatus>>> {
        Box::pin(self.heartbeat_unboxed(leases, lease_ms))
    }

    async fn heartbeat_unboxed(&self, leases: &[Lease], lease_ms: i64) -> Result<Vec<LeaseStatus>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        // On the heartbeat's own connection, ahead of ordinary writes (see lease_line.rs). The
        // time is read once the connection is ours (on SQLite, once it is our turn in the writer
        // queue): a heartbeat that read the clock before waiting behind other writers, or before a
        // slow round trip, would extend a lease to a moment already past, and its keeper would
        // fence itself.
        let backend = self.backend();
        let held: Vec<(i64, i64, bool)> = self
            .lease_line
            .write_each_at(|now| {
                leases
                    .chunks(400)
                    .map(|chunk| {
                        let mut stmt = Query::update()
                            .table(Tasks::Table)
                            .value(Tasks::LeaseExpiresAt, now + lease_ms)
                            .returning(Query::returning().columns([
                                Tasks::Id,
                                Tasks::Epoch,
                                Tasks::CancelRequested,
                            ]))
                            .to_owned();
                        held_by(&mut stmt, backend, chunk.iter());
                        stmt
                    })
                    .collect()
            })
            .await?;
        let held: HashMap<(i64, i64), bool> = held
            .into_iter()
            .map(|(id, epoch, cancel)| ((id, epoch), cancel))
            .collect();
        Ok(leases
            .iter()
            .map(|lease| {
                let row = held.get(&(lease.task_id.0, lease.epoch));
                LeaseStatus {
                    lease: lease.clone(),
                    held: row.is_some(),
                    cancel_requested: row.is_some_and(|c| *c),
                }
            })
            .collect())
    }

    /// Running tasks of `owner` whose cancel was requested, as leases. Cheap enough to poll often.
    pub fn cancel_requests<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<Vec<Lease>>> {
        Box::pin(self.cancel_requests_unboxed(owner))
    }

    async fn cancel_requests_unboxed(&self, owner: &str) -> Result<Vec<Lease>> {
        let stmt = Query::select()
            .columns([Tasks::Id, Tasks::Epoch])
            .from(Tasks::Table)
            .and_where(state_is(TaskState::Running))
            .and_where(Expr::col(Tasks::LeaseOwner).eq(owner))
            .and_where(Expr::col(Tasks::CancelRequested).eq(true))
            .to_owned();
        Ok(self
            .pool
            .fetch_all::<(i64, i64), _>(&stmt)
            .await?
            .into_iter()
            .map(|(id, epoch)| Lease {
                task_id: TaskId(id),
                epoch,
            })
            .collect())
    }

    /// Applies the ends of attempts in one transaction (group commit). Each is fenced by its lease:
    /// a stale one changes nothing and is reported `Stale`.
    pub fn complete<'a>(
        &'a self,
        completions: &'a [Completion],
    ) -> BoxFuture<'a, Result<Vec<CompletionResult>>> {
        Box::pin(self.complete_unboxed(completions))
    }

    async fn complete_unboxed(&self, completions: &[Completion]) -> Result<Vec<CompletionResult>> {
        if completions.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_millis();
        if let Some(results) = self.complete_successes(completions, now).await? {
            return Ok(results);
        }
        let mut results = vec![CompletionResult::Stale; completions.len()];
        let mut events = Vec::with_capacity(completions.len());
        let mut requeued = false;
        let mut tx = self.pool.begin().await?;

        // Successes are the hot path: one UPDATE for all of them.
        let successes: Vec<usize> = (0..completions.len())
            .filter(|i| completions[*i].outcome == Outcome::Succeeded)
            .collect();
        let by_lease: HashMap<(i64, i64), usize> = successes
            .iter()
            .map(|&i| {
                let lease = &completions[i].lease;
                ((lease.task_id.0, lease.epoch), i)
            })
            .collect();
        for chunk in successes.chunks(SUCCESS_CHUNK) {
            let leases = chunk.iter().map(|i| &completions[*i].lease);
            let stmt = successes_update(tx.backend(), leases, now, tx.change_mark());
            let rows: Vec<(i64, i64, i64, String)> = tx.fetch_all(&stmt).await?;
            for (id, epoch, seq, ended) in rows {
                if let Some(&i) = by_lease.get(&(id, epoch)) {
                    results[i] = CompletionResult::Applied;
                    events.push(EventInsert {
                        task_id: id,
                        seq,
                        at: now,
                        kind: if ended == TaskState::Canceled.as_str() {
                            EventKind::Canceled
                        } else {
                            EventKind::Succeeded
                        },
                        data: completions[i].details.clone(),
                    });
                }
            }
        }

        for (i, completion) in completions.iter().enumerate() {
            let waiting = match &completion.outcome {
                Outcome::Wait { reason } => Some((reason, Resume::IfAnswered)),
                Outcome::AwaitSiblings { reason, ended } => {
                    Some((reason, Resume::IfMoreSiblingsEnded { ended: *ended }))
                }
                _ => None,
            };
            if let Some((reason, resume)) = waiting {
                if let Some(event) = wait(&mut tx, completion, reason, resume, now).await? {
                    results[i] = CompletionResult::Applied;
                    requeued |= event.data["resumed"] == json!(true);
                    events.push(event);
                }
                continue;
            }
            let (state, kind, error) = match &completion.outcome {
                Outcome::Succeeded | Outcome::Wait { .. } | Outcome::AwaitSiblings { .. } => {
                    continue;
                }
                Outcome::Failed { error } => {
                    (TaskState::Failed, EventKind::Failed, Some(error.clone()))
                }
                Outcome::Canceled => (TaskState::Canceled, EventKind::Canceled, None),
                Outcome::Requeue { error, refund, .. } => (
                    TaskState::Queued,
                    if *refund {
                        EventKind::HandedBack
                    } else {
                        EventKind::Requeued
                    },
                    error.clone(),
                ),
            };
            let mut stmt = Query::update()
                .table(Tasks::Table)
                .value(Tasks::LeaseOwner, Option::<String>::None)
                .value(Tasks::LeaseExpiresAt, Option::<i64>::None)
                .value(Tasks::EventSeq, Expr::col(Tasks::EventSeq).add(1))
                .value(Tasks::ChangeId, tx.change_mark())
                .value(Tasks::LastError, error.clone())
                .value(Tasks::UpdatedAt, now)
                .cond_where(lease_matches(&completion.lease))
                .and_where(state_is(TaskState::Running))
                .returning(Query::returning().columns([Tasks::Id, Tasks::EventSeq, Tasks::State]))
                .to_owned();
            match &completion.outcome {
                Outcome::Requeue {
                    run_after, refund, ..
                } => {
                    // A cancel requested while the attempt ended must not be lost in the queue.
                    stmt.value(Tasks::State, unless_canceled(TaskState::Queued));
                    stmt.value(Tasks::FinishedAt, finished_if_canceled(now));
                    stmt.value(Tasks::RunAfter, *run_after);
                    if *refund {
                        stmt.value(Tasks::Attempt, Expr::col(Tasks::Attempt).sub(1));
                    }
                    requeued = true;
                }
                _ => {
                    stmt.value(Tasks::State, state.as_str());
                    stmt.value(Tasks::FinishedAt, now);
                }
            }
            if let Some((id, seq, ended)) =
                tx.fetch_optional::<(i64, i64, String), _>(&stmt).await?
            {
                results[i] = CompletionResult::Applied;
                let kind = if ended == TaskState::Canceled.as_str() {
                    EventKind::Canceled
                } else {
                    kind
                };
                let mut data = completion.details.clone();
                if let (Some(error), Some(map)) = (&error, data.as_object_mut()) {
                    map.insert("error".into(), json!(error));
                }
                if let (Outcome::Requeue { run_after, .. }, Some(map)) =
                    (&completion.outcome, data.as_object_mut())
                {
                    map.insert("run_after".into(), json!(run_after));
                }
                events.push(EventInsert {
                    task_id: id,
                    seq,
                    at: now,
                    kind,
                    data,
                });
            }
        }
        close_approvals_of_ended(&mut tx, &events, now).await?;
        insert_events(&mut tx, &events).await?;
        if requeued {
            tx.notify_task_available().await?;
        }
        tx.commit().await?;
        if requeued {
            self.wake.wake();
        }
        Ok(results)
    }

    /// Takes back running tasks whose lease expired before `now`: canceled if a cancel was
    /// requested, failed if no attempt is left, otherwise queued again after `backoff(attempt)`
    /// milliseconds. At most `limit` tasks per call.
    pub fn rescue_expired<'a>(
        &'a self,
        now: i64,
        limit: u64,
        backoff: impl Fn(i64) -> i64 + Send + Sync + 'a,
    ) -> BoxFuture<'a, Result<RescueCounts>> {
        self.rescue_expired_boxed(now, limit, Box::new(backoff))
    }

    /// [`Store::rescue_expired`] with its backoff behind a pointer, so that the body is compiled
    /// here once, not in each crate for each closure.
    fn rescue_expired_boxed<'a>(
        &'a self,
        now: i64,
        limit: u64,
        backoff: Box<dyn Fn(i64) -> i64 + Send + Sync + 'a>,
    ) -> BoxFuture<'a, Result<RescueCounts>> {
        Box::pin(async move { self.rescue_expired_unboxed(now, limit, &*backoff).await })
    }

    async fn rescue_expired_unboxed(
        &self,
        now: i64,
        limit: u64,
        backoff: &(dyn Fn(i64) -> i64 + Send + Sync),
    ) -> Result<RescueCounts> {
        let mut counts = RescueCounts::default();
        let mut tx = self.pool.begin().await?;
        let mut stmt = Query::select()
            .columns([
                Tasks::Id,
                Tasks::Epoch,
                Tasks::Attempt,
                Tasks::MaxAttempts,
                Tasks::CancelRequested,
                Tasks::LeaseOwner,
                Tasks::SiblingOf,
            ])
            .from(Tasks::Table)
            .and_where(state_is(TaskState::Running))
            .and_where(Expr::col(Tasks::LeaseExpiresAt).lt(now))
            .order_by(Tasks::LeaseExpiresAt, Order::Asc)
            .limit(limit)
            .to_owned();
        stmt.lock_with_behavior(
            sea_query::LockType::Update,
            sea_query::LockBehavior::SkipLocked,
        );
        #[allow(clippy::type_complexity)]
        let expired: Vec<(i64, i64, i64, i64, bool, Option<String>, Option<i64>)> =
            tx.fetch_all(&stmt).await?;
        let mut events = Vec::new();
        for (id, epoch, attempt, max_attempts, cancel_requested, owner, lead) in expired {
            let lease = Lease {
                task_id: TaskId(id),
                epoch,
            };
            let (state, kind, error) = if cancel_requested {
                (TaskState::Canceled, EventKind::Canceled, None)
            } else if attempt >= max_attempts {
                (
                    TaskState::Failed,
                    EventKind::Failed,
                    Some(format!(
                        "lease expired on attempt {attempt} of {max_attempts}; no attempts left"
                    )),
                )
            } else {
                (
                    TaskState::Queued,
                    EventKind::Rescued,
                    Some(format!(
                        "lease of worker {} expired",
                        owner.as_deref().unwrap_or("?")
                    )),
                )
            };
            let mut update = Query::update()
                .table(Tasks::Table)
                .value(Tasks::State, state.as_str())
                .value(Tasks::LeaseOwner, Option::<String>::None)
                .value(Tasks::LeaseExpiresAt, Option::<i64>::None)
                .value(Tasks::EventSeq, Expr::col(Tasks::EventSeq).add(1))
                .value(Tasks::LastError, error.clone())
                .value(Tasks::UpdatedAt, now)
                .cond_where(lease_matches(&lease))
                .and_where(state_is(TaskState::Running))
                .returning_col(Tasks::EventSeq)
                .to_owned();
            let run_after = now + backoff(attempt);
            if state == TaskState::Queued {
                update.value(Tasks::RunAfter, run_after);
            } else {
                update.value(Tasks::FinishedAt, now);
            }
            let Some((seq,)) = tx.fetch_optional::<(i64,), _>(&update).await? else {
                continue;
            };
            // A best-of sibling that ended here: its lead looks at its siblings again.
            if let (Some(lead), true) = (lead, state.is_terminal()) {
                crate::best_of::queue_lead(&mut tx, TaskId(lead), now).await?;
            }
            match state {
                TaskState::Queued => counts.requeued += 1,
                TaskState::Failed => counts.failed += 1,
                _ => counts.canceled += 1,
            }
            events.push(EventInsert {
                task_id: id,
                seq,
                at: now,
                kind,
                data: json!({
                    "rescued": true,
                    "attempt": attempt,
                    "epoch": epoch,
                    "worker": owner,
                    "error": error,
                    "run_after": (state == TaskState::Queued).then_some(run_after),
                }),
            });
        }
        close_approvals_of_ended(&mut tx, &events, now).await?;
        // The worker of each rescued attempt is gone: its live logs end and its jobs are stale,
        // so followers stop waiting for output that will never come.
        let rescued: Vec<i64> = events.iter().map(|e| e.task_id).collect();
        crate::live_logs::end_abandoned(&mut tx, &rescued, now).await?;
        insert_events(&mut tx, &events).await?;
        if counts.requeued > 0 {
            tx.notify_task_available().await?;
        }
        tx.commit().await?;
        if counts.requeued > 0 {
            self.wake.wake();
        }
        Ok(counts)
    }

    /// The earliest `run_after` among queued tasks that a worker offering `offers` could claim,
    /// so an idle worker can sleep exactly until then (a task it can never claim, due already,
    /// would keep it polling).
    pub fn next_run_after<'a>(
        &'a self,
        queues: &'a [String],
        offers: &'a [String],
    ) -> BoxFuture<'a, Result<Option<i64>>> {
        Box::pin(self.next_run_after_unboxed(queues, offers))
    }

    async fn next_run_after_unboxed(
        &self,
        queues: &[String],
        offers: &[String],
    ) -> Result<Option<i64>> {
        let stmt = Query::select()
            .expr(Expr::col(Tasks::RunAfter).min())
            .from(Tasks::Table)
            .and_where(state_is(TaskState::Queued))
            .and_where(Expr::col(Tasks::Queue).is_in(queues.iter().map(String::as_str)))
            .and_where(claim::requirements_met(offers))
            .to_owned();
        Ok(self
            .pool
            .fetch_optional::<(Option<i64>,), _>(&stmt)
            .await?
            .and_then(|(t,)| t))
    }
}

/// Closes the pending approvals of every task an event says has ended, in the transaction that
/// ends it: an approval left in the inbox would report success when approved, and do nothing.
/// One statement for the whole batch (see `close_pending_of`), none when nothing ended.
async fn close_approvals_of_ended(tx: &mut Tx, events: &[EventInsert], now: i64) -> Result<()> {
    let ended: Vec<i64> = events
        .iter()
        .filter(|event| {
            matches!(
                event.kind,
                EventKind::Succeeded | EventKind::Failed | EventKind::Canceled
            )
        })
        .map(|event| event.task_id)
        .collect();
    crate::approvals::close_pending_of(tx, &ended, now).await
}

/// Checks inside `tx` that `lease` still holds its task (running, at the same epoch), locking the
/// task's row until `tx` ends; `StaleLease` if it does not. For writes made on behalf of an attempt
/// that have no event of their own.
pub(crate) async fn check_lease(tx: &mut Tx, lease: &Lease, now: i64) -> Result<()> {
    let check = Query::update()
        .table(Tasks::Table)
        .value(Tasks::UpdatedAt, now)
        .cond_where(lease_matches(lease))
        .and_where(state_is(TaskState::Running))
        .to_owned();
    if tx.execute(&check).await? == 0 {
        return Err(Error::StaleLease {
            task: lease.task_id,
            epoch: lease.epoch,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
