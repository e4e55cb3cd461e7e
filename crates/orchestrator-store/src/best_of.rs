//! Best of N in the store: a lead's siblings made once, the lead woken when a sibling ends, and
//! the choice recorded once.
//!
//! A lead waits for its siblings without a lease (`Outcome::AwaitSiblings`). Whoever ends a
//! sibling queues its lead again ([`Store::wake_lead`]); the wait itself queues the lead at once
//! when a sibling ended while it decided to wait, so no end is missed between the two. A daemon
//! killed between ending a sibling and waking its lead leaves the rescuer's pass to wake it
//! ([`Store::wake_settled_leads`]).

use crate::events::{EventInsert, TaskEvents, insert_events};
use crate::exec::Tx;
use crate::tasks::TaskRow;
use crate::tasks::{Tasks, insert_tasks, select_tasks};
use crate::{Error, Lease, Result, Store, Task};
use orchestrator_types::{EventKind, NewTask, TaskId, TaskState, now_millis};
use sea_query::{Alias, Expr, ExprTrait, Order, Query};
use serde_json::{Value, json};

/// The states a sibling ends in.
const ENDED: [&str; 3] = ["succeeded", "failed", "canceled"];

/// Whether the lead can decide now, in SQL over the row `lead` (an alias of `tasks`): every
/// sibling ended, or, choosing the first that passes, one succeeded.
fn decidable(first_passing: bool) -> sea_query::Condition {
    let lead = Alias::new("lead");
    let sibling = Alias::new("sibling");
    let running = Query::select()
        .expr(Expr::val(1))
        .from_as(Tasks::Table, sibling.clone())
        .and_where(Expr::col((sibling.clone(), Tasks::SiblingOf)).equals((lead.clone(), Tasks::Id)))
        .and_where(Expr::col((sibling.clone(), Tasks::State)).is_not_in(ENDED))
        .to_owned();
    let mut any = sea_query::Condition::any().add(Expr::exists(running).not());
    if first_passing {
        let passed = Query::select()
            .expr(Expr::val(1))
            .from_as(Tasks::Table, sibling.clone())
            .and_where(Expr::col((sibling.clone(), Tasks::SiblingOf)).equals((lead, Tasks::Id)))
            .and_where(Expr::col((sibling, Tasks::State)).eq(TaskState::Succeeded.as_str()))
            .to_owned();
        any = any.add(Expr::exists(passed));
    }
    any
}

/// Queues `lead` again if it waits for its siblings and `condition` holds; whether it did.
async fn queue_lead(
    tx: &mut Tx,
    lead: TaskId,
    condition: Option<sea_query::Condition>,
    now: i64,
) -> Result<bool> {
    let alias = Alias::new("lead");
    let mut select = Query::select()
        .column((alias.clone(), Tasks::Id))
        .from_as(Tasks::Table, alias.clone())
        .and_where(Expr::col((alias.clone(), Tasks::Id)).eq(lead.0))
        .and_where(Expr::col((alias, Tasks::State)).eq(TaskState::Waiting.as_str()))
        .to_owned();
    if let Some(condition) = condition {
        select.cond_where(condition);
    }
    let stmt = Query::update()
        .table(Tasks::Table)
        .value(Tasks::State, TaskState::Queued.as_str())
        .value(Tasks::RunAfter, now)
        .value(Tasks::UpdatedAt, now)
        .value(Tasks::ChangeId, tx.change_mark())
        .and_where(Expr::col(Tasks::Id).in_subquery(select))
        .to_owned();
    let queued = tx.execute(&stmt).await? > 0;
    if queued {
        tx.notify_task_available().await?;
    }
    Ok(queued)
}

/// In the transaction that makes a lead wait: queues it again at once when it could decide
/// already (a sibling ended while it looked). The wait's update of the lead's row comes first, so
/// an end committed after this read finds the lead waiting and wakes it itself.
pub(crate) async fn resume_if_decidable(
    tx: &mut Tx,
    lead: TaskId,
    first_passing: bool,
    now: i64,
) -> Result<bool> {
    queue_lead(tx, lead, Some(decidable(first_passing)), now).await
}

impl Store {
    /// The siblings of `lead`, in their order.
    pub async fn siblings(&self, lead: TaskId) -> Result<Vec<Task>> {
        let mut stmt = select_tasks();
        stmt.and_where(Expr::col(Tasks::SiblingOf).eq(lead.0))
            .order_by(Tasks::Id, Order::Asc);
        let rows: Vec<TaskRow> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter().map(Task::try_from).collect()
    }

    /// Makes the siblings of the lead that holds `lease`, once: when it has siblings already (an
    /// earlier attempt made them and was killed before it could go on), nothing is made and
    /// those are returned. Fenced by the lease, with a `best_of` event (`siblings`) on the lead in
    /// the same transaction.
    pub async fn make_siblings(&self, lease: &Lease, siblings: &[NewTask]) -> Result<Vec<Task>> {
        for sibling in siblings {
            sibling.validate()?;
            if sibling.parent != Some(lease.task_id) || sibling.sibling.is_none() {
                return Err(Error::Invalid(orchestrator_types::Error::invalid(
                    "sibling",
                    "a sibling names its lead as its parent and its place among the siblings",
                )));
            }
        }
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let seq = crate::leases::next_seq_fenced(&mut tx, lease, now).await?;
        let existing = Query::select()
            .expr(Expr::col(Tasks::Id).count())
            .from(Tasks::Table)
            .and_where(Expr::col(Tasks::SiblingOf).eq(lease.task_id.0))
            .to_owned();
        let (n,): (i64,) = tx.fetch_optional(&existing).await?.unwrap_or((0,));
        if n == 0 {
            let ids = insert_tasks(&mut tx, siblings, now, None, self.placement()).await?;
            insert_events(
                &mut tx,
                &[EventInsert {
                    task_id: lease.task_id.0,
                    seq,
                    at: now,
                    kind: EventKind::BestOf,
                    data: json!({
                        "step": "siblings",
                        "n": ids.len(),
                        "tasks": ids.iter().map(|id| id.0).collect::<Vec<_>>(),
                    }),
                }],
            )
            .await?;
            tx.notify_task_available().await?;
            tx.commit().await?;
            self.wake.wake();
        }
        // Otherwise the transaction is dropped: the counter did not move.
        self.siblings(lease.task_id).await
    }

    /// Queues `lead` again if it waits for its siblings, so that it looks at them: called by the
    /// daemon that ended one of them. Whether it was waiting.
    pub async fn wake_lead(&self, lead: TaskId) -> Result<bool> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let queued = queue_lead(&mut tx, lead, None, now).await?;
        tx.commit().await?;
        if queued {
            self.wake.wake();
        }
        Ok(queued)
    }

    /// The rescuer's pass: queues every lead that waits although all its siblings ended (its wake
    /// was lost with the daemon that ended the last one). How many.
    pub async fn wake_settled_leads(&self) -> Result<u64> {
        let now = now_millis();
        let lead = Alias::new("lead");
        let waiting = Query::select()
            .column((lead.clone(), Tasks::Id))
            .from_as(Tasks::Table, lead.clone())
            .and_where(Expr::col((lead.clone(), Tasks::State)).eq(TaskState::Waiting.as_str()))
            .and_where(
                Expr::col((lead, Tasks::Id)).in_subquery(
                    Query::select()
                        .column(Tasks::SiblingOf)
                        .from(Tasks::Table)
                        .and_where(Expr::col(Tasks::SiblingOf).is_not_null())
                        .and_where(Expr::col(Tasks::State).is_in(ENDED))
                        .to_owned(),
                ),
            )
            .cond_where(decidable(false))
            .to_owned();
        let stmt = Query::update()
            .table(Tasks::Table)
            .value(Tasks::State, TaskState::Queued.as_str())
            .value(Tasks::RunAfter, now)
            .value(Tasks::UpdatedAt, now)
            .and_where(Expr::col(Tasks::Id).in_subquery(waiting))
            .to_owned();
        let mut tx = self.pool.begin().await?;
        let mark = tx.change_mark();
        let mut stmt = stmt;
        stmt.value(Tasks::ChangeId, mark);
        let n = tx.execute(&stmt).await?;
        if n > 0 {
            tx.notify_task_available().await?;
        }
        tx.commit().await?;
        if n > 0 {
            self.wake.wake();
        }
        Ok(n)
    }

    /// The choice recorded for the lead `lead`, if one was: the data of its `chosen` event, and of
    /// a person's later override (`overridden`) when there is one.
    pub async fn best_of_steps(&self, lead: TaskId) -> Result<Vec<Value>> {
        Ok(self
            .events_of_kind(lead, EventKind::BestOf)
            .await?
            .into_iter()
            .map(|e| e.data)
            .collect())
    }

    /// Records the lead's choice once, fenced by its lease: the `chosen` step (`data`, which
    /// names the `attempt` and `sibling`), and the chosen attempt selected in its group, in one
    /// transaction. When a choice was recorded already (an earlier attempt chose and was killed),
    /// nothing is written and that choice is returned.
    pub async fn record_choice(&self, lease: &Lease, data: Value) -> Result<Value> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let seq = crate::leases::next_seq_fenced(&mut tx, lease, now).await?;
        if let Some(earlier) = step_of(&mut tx, lease.task_id, "chosen").await? {
            return Ok(earlier);
        }
        let mut data = data;
        data["step"] = json!("chosen");
        let mut events = vec![EventInsert {
            task_id: lease.task_id.0,
            seq,
            at: now,
            kind: EventKind::BestOf,
            data: data.clone(),
        }];
        if let Some(attempt) = data["attempt"].as_i64() {
            events.extend(crate::attempts::select_in_tx(&mut tx, attempt, now).await?);
        }
        insert_events(&mut tx, &events).await?;
        tx.commit().await?;
        Ok(data)
    }

    /// Appends a `best_of` step to the lead that holds `lease` (fenced): `none_passed`,
    /// `pull_opened`.
    pub async fn record_best_of_step(&self, lease: &Lease, data: Value) -> Result<()> {
        self.append_event(lease, EventKind::BestOf, data)
            .await
            .map(|_| ())
    }
}

/// The data of the lead's `best_of` events, oldest first, read inside `tx`.
pub(crate) async fn steps_in_tx(tx: &mut Tx, lead: TaskId) -> Result<Vec<Value>> {
    let stmt = Query::select()
        .column(TaskEvents::Data)
        .from(TaskEvents::Table)
        .and_where(Expr::col(TaskEvents::TaskId).eq(lead.0))
        .and_where(Expr::col(TaskEvents::Kind).eq(EventKind::BestOf.as_str()))
        .order_by(TaskEvents::Seq, Order::Asc)
        .to_owned();
    let rows: Vec<(String,)> = tx.fetch_all(&stmt).await?;
    Ok(rows
        .into_iter()
        .filter_map(|(data,)| serde_json::from_str::<Value>(&data).ok())
        .collect())
}

/// The data of the lead's first `best_of` event of `step`, read inside `tx`.
async fn step_of(tx: &mut Tx, lead: TaskId, step: &str) -> Result<Option<Value>> {
    Ok(steps_in_tx(tx, lead)
        .await?
        .into_iter()
        .find(|d| d["step"] == step))
}

/// Which sibling (from 1) `task` is, from its spec; 0 when it names none.
pub(crate) async fn sibling_number(tx: &mut Tx, task: TaskId) -> Result<u32> {
    let stmt = Query::select()
        .column(Tasks::Spec)
        .from(Tasks::Table)
        .and_where(Expr::col(Tasks::Id).eq(task.0))
        .to_owned();
    let row: Option<(String,)> = tx.fetch_optional(&stmt).await?;
    Ok(row
        .and_then(|(spec,)| serde_json::from_str::<NewTask>(&spec).ok())
        .and_then(|spec| spec.sibling)
        .unwrap_or(0))
}

/// The lead of `task` when it is a sibling whose lead waits for siblings to end: read in `tx`.
pub(crate) async fn lead_of(tx: &mut Tx, task: TaskId) -> Result<Option<TaskId>> {
    let stmt = Query::select()
        .column(Tasks::SiblingOf)
        .from(Tasks::Table)
        .and_where(Expr::col(Tasks::Id).eq(task.0))
        .to_owned();
    let row: Option<(Option<i64>,)> = tx.fetch_optional(&stmt).await?;
    Ok(row.and_then(|(lead,)| lead).map(TaskId))
}
