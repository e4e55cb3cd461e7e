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
use orchestrator_types::BoxFuture;
use orchestrator_types::{EventKind, NewTask, TaskId, TaskState, now_millis};
use sea_query::{Alias, Expr, ExprTrait, Order, Query};
use serde_json::{Value, json};

/// The states a sibling ends in.
const ENDED: [&str; 3] = ["succeeded", "failed", "canceled"];

/// Queues `lead` again if it waits for its siblings; whether it did. The update names the row
/// itself, so on PostgreSQL one that waits for the lead's wait to commit reads the row again
/// once it did (a subquery would have read it as it was, running, and found nothing to wake).
pub(crate) async fn queue_lead(tx: &mut Tx, lead: TaskId, now: i64) -> Result<bool> {
    let stmt = Query::update()
        .table(Tasks::Table)
        .value(Tasks::State, TaskState::Queued.as_str())
        .value(Tasks::RunAfter, now)
        .value(Tasks::UpdatedAt, now)
        .value(Tasks::ChangeId, tx.change_mark())
        .and_where(Expr::col(Tasks::Id).eq(lead.0))
        .and_where(Expr::col(Tasks::State).eq(TaskState::Waiting.as_str()))
        .to_owned();
    let queued = tx.execute(&stmt).await? > 0;
    if queued {
        tx.notify_task_available().await?;
    }
    Ok(queued)
}

/// In the transaction that makes a lead wait: queues it again at once when more of its siblings
/// ended than the `seen` it decided on (one ended while it looked). The wait's update of the
/// lead's row comes first, so an end committed after this read finds the lead waiting and wakes
/// it itself.
pub(crate) async fn resume_if_more_ended(
    tx: &mut Tx,
    lead: TaskId,
    seen: i64,
    now: i64,
) -> Result<bool> {
    let count = Query::select()
        .expr(Expr::col(Tasks::Id).count())
        .from(Tasks::Table)
        .and_where(Expr::col(Tasks::SiblingOf).eq(lead.0))
        .and_where(Expr::col(Tasks::State).is_in(ENDED))
        .to_owned();
    let (ended,): (i64,) = tx.fetch_optional(&count).await?.unwrap_or((0,));
    if ended <= seen {
        return Ok(false);
    }
    queue_lead(tx, lead, now).await
}

impl Store {
    /// The siblings of `lead`, in their order.
    pub fn siblings<'a>(&'a self, lead: TaskId) -> BoxFuture<'a, Result<Vec<Task>>> {
        Box::pin(self.siblings_unboxed(lead))
    }

    async fn siblings_unboxed(&self, lead: TaskId) -> Result<Vec<Task>> {
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
    pub fn make_siblings<'a>(
        &'a self,
        lease: &'a Lease,
        siblings: &'a [NewTask],
    ) -> BoxFuture<'a, Result<Vec<Task>>> {
        Box::pin(self.make_siblings_unboxed(lease, siblings))
    }

    async fn make_siblings_unboxed(
        &self,
        lease: &Lease,
        siblings: &[NewTask],
    ) -> Result<Vec<Task>> {
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
        } else {
            // Made already: the counter did not move, and the lead's row is let go at once.
            tx.rollback().await?;
        }
        self.siblings(lease.task_id).await
    }

    /// Queues `lead` again if it waits for its siblings, so that it looks at them: called by the
    /// daemon that ended one of them. Whether it was waiting.
    pub fn wake_lead<'a>(&'a self, lead: TaskId) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.wake_lead_unboxed(lead))
    }

    async fn wake_lead_unboxed(&self, lead: TaskId) -> Result<bool> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let queued = queue_lead(&mut tx, lead, now).await?;
        tx.commit().await?;
        if queued {
            self.wake.wake();
        }
        Ok(queued)
    }

    /// The rescuer's pass: queues every lead that waits although all its siblings ended (its wake
    /// was lost with the daemon that ended the last one). How many.
    pub fn wake_settled_leads<'a>(&'a self) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.wake_settled_leads_unboxed())
    }

    async fn wake_settled_leads_unboxed(&self) -> Result<u64> {
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
            .and_where(
                Expr::exists(
                    Query::select()
                        .expr(Expr::val(1))
                        .from_as(Tasks::Table, Alias::new("sibling"))
                        .and_where(
                            Expr::col((Alias::new("sibling"), Tasks::SiblingOf))
                                .equals((Alias::new("lead"), Tasks::Id)),
                        )
                        .and_where(
                            Expr::col((Alias::new("sibling"), Tasks::State)).is_not_in(ENDED),
                        )
                        .to_owned(),
                )
                .not(),
            )
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
    pub fn best_of_steps<'a>(&'a self, lead: TaskId) -> BoxFuture<'a, Result<Vec<Value>>> {
        Box::pin(self.best_of_steps_unboxed(lead))
    }

    async fn best_of_steps_unboxed(&self, lead: TaskId) -> Result<Vec<Value>> {
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
    pub fn record_choice<'a>(
        &'a self,
        lease: &'a Lease,
        data: Value,
    ) -> BoxFuture<'a, Result<Value>> {
        Box::pin(self.record_choice_unboxed(lease, data))
    }

    async fn record_choice_unboxed(&self, lease: &Lease, data: Value) -> Result<Value> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let seq = crate::leases::next_seq_fenced(&mut tx, lease, now).await?;
        if let Some(earlier) = step_of(&mut tx, lease.task_id, "chosen").await? {
            tx.rollback().await?;
            return Ok(earlier);
        }
        let opened = opening(&steps_in_tx(&mut tx, lease.task_id).await?).is_some();
        let mut data = data;
        data["step"] = json!("chosen");
        let mut events = vec![EventInsert {
            task_id: lease.task_id.0,
            seq,
            at: now,
            kind: EventKind::BestOf,
            data: data.clone(),
        }];
        // A pull request a person opened (or is opening) already keeps its selection.
        if let (Some(attempt), false) = (data["attempt"].as_i64(), opened) {
            events.extend(crate::attempts::select_in_tx(&mut tx, attempt, now).await?);
        }
        insert_events(&mut tx, &events).await?;
        tx.commit().await?;
        Ok(data)
    }

    /// Claims the lead's one pull request for `attempt` before GitHub is asked, in a transaction
    /// that holds the lead's row: refused (`WrongState`, naming it) when one is being opened or
    /// was opened from another attempt; otherwise a `pull_opening` step (`data`, which names the
    /// `attempt`) is written unless one for this attempt is there already (a retry). From then on
    /// no selection among the lead's siblings changes.
    pub fn claim_pull_opening<'a>(
        &'a self,
        lead: TaskId,
        attempt: i64,
        data: Value,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.claim_pull_opening_unboxed(lead, attempt, data))
    }

    async fn claim_pull_opening_unboxed(
        &self,
        lead: TaskId,
        attempt: i64,
        data: Value,
    ) -> Result<()> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        lock_lead(&mut tx, lead).await?;
        let steps = steps_in_tx(&mut tx, lead).await?;
        if let Some(other) = opening(&steps).filter(|s| s["attempt"].as_i64() != Some(attempt)) {
            return Err(pull_taken(lead, other));
        }
        if opening(&steps).is_none() {
            let seq = crate::tasks::next_seq(&mut tx, lead, now).await?;
            let mut data = data;
            data["step"] = json!("pull_opening");
            data["attempt"] = json!(attempt);
            insert_events(
                &mut tx,
                &[EventInsert {
                    task_id: lead.0,
                    seq,
                    at: now,
                    kind: EventKind::BestOf,
                    data,
                }],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Appends a `best_of` step to the lead that holds `lease` (fenced): `none_passed`,
    /// `pull_opened`.
    pub fn record_best_of_step<'a>(
        &'a self,
        lease: &'a Lease,
        data: Value,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.record_best_of_step_unboxed(lease, data))
    }

    async fn record_best_of_step_unboxed(&self, lease: &Lease, data: Value) -> Result<()> {
        self.append_event(lease, EventKind::BestOf, data)
            .await
            .map(|_| ())
    }
}

/// The step that took the lead's one pull request: `pull_opening` or `pull_opened`.
pub(crate) fn opening(steps: &[Value]) -> Option<&Value> {
    steps
        .iter()
        .find(|s| s["step"] == "pull_opening" || s["step"] == "pull_opened")
}

/// Why no other attempt of the lead's siblings may be selected or opened.
pub(crate) fn pull_taken(lead: TaskId, step: &Value) -> Error {
    Error::WrongState {
        task: lead,
        state: "pull request opened".into(),
        message: format!(
            "task {lead} has its one pull request from sibling {}'s attempt {}{}; one pull \
             request per task, and the choice changes only before it is opened",
            step["sibling"],
            step["attempt"],
            step["url"]
                .as_str()
                .map(|u| format!(" ({u})"))
                .unwrap_or_else(|| " (being opened)".into())
        ),
    }
}

/// Holds the lead's row for the rest of `tx` (PostgreSQL; SQLite's write lock holds all).
async fn lock_lead(tx: &mut Tx, lead: TaskId) -> Result<()> {
    let lock = Query::select()
        .column(Tasks::Id)
        .from(Tasks::Table)
        .and_where(Expr::col(Tasks::Id).eq(lead.0))
        .lock(sea_query::LockType::Update)
        .to_owned();
    tx.fetch_optional::<(i64,), _>(&lock).await?;
    Ok(())
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

/// One sibling's column on the task page and in `task read`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SiblingColumn {
    pub sibling: u32,
    pub task: i64,
    pub state: String,
    /// The model's answers so far.
    pub turns: u64,
    /// Prompt and completion tokens the servers reported.
    pub tokens: u64,
    /// From its first claim to its end (or to now while it runs), in milliseconds.
    pub elapsed_ms: Option<i64>,
    /// Each gate's verdict on its recorded tree: `[{name, verdict}]`.
    pub gates: Value,
    /// Its newest attempt in the best-of group, its size and whether it is selected.
    pub attempt: Option<i64>,
    pub patch_bytes: Option<i64>,
    pub lines: Option<u64>,
    pub files: Option<usize>,
    pub selected: bool,
    pub last_error: Option<String>,
}

/// A best-of lead's siblings side by side, with the choice and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BestOfBoard {
    pub n: u32,
    pub choose: &'static str,
    pub siblings: Vec<SiblingColumn>,
    /// The winner's sibling number: a person's override, else the lead's choice.
    pub winner: Option<u32>,
    /// Why it won, in words.
    pub why: Option<String>,
    /// The pull request opened from it.
    pub pull: Option<String>,
}

/// The lines a patch adds or removes (its `+` and `-` lines, the file headers left out).
pub fn changed_lines(patch: &[u8]) -> u64 {
    patch
        .split(|b| *b == b'\n')
        .filter(|line| {
            (line.starts_with(b"+") && !line.starts_with(b"+++ "))
                || (line.starts_with(b"-") && !line.starts_with(b"--- "))
        })
        .count() as u64
}

impl Store {
    /// The board of the best-of lead `lead`; `None` for any other task.
    pub fn best_of_board<'a>(
        &'a self,
        lead: &'a Task,
    ) -> BoxFuture<'a, Result<Option<BestOfBoard>>> {
        Box::pin(self.best_of_board_unboxed(lead))
    }

    async fn best_of_board_unboxed(&self, lead: &Task) -> Result<Option<BestOfBoard>> {
        let Some(best_of) = &lead.best_of else {
            return Ok(None);
        };
        let now = now_millis();
        let mut siblings = Vec::new();
        for task in self.siblings(lead.id).await? {
            let messages = self.messages(task.id).await?;
            let turns = messages
                .iter()
                .filter(|m| m.message.role == orchestrator_types::Role::Assistant)
                .count() as u64;
            let tokens = messages
                .iter()
                .filter_map(|m| m.usage.as_ref())
                .map(|u| u.prompt_tokens + u.completion_tokens)
                .sum();
            let attempt = self
                .attempts(Some(task.id), Some(orchestrator_types::BEST_OF_GROUP))
                .await?
                .pop();
            let lines = match &attempt {
                Some(a) => Some(changed_lines(&self.attempt_patch(a.id).await?)),
                None => None,
            };
            let gates = match &attempt {
                Some(a) => Value::Array(
                    a.gates
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|g| json!({"name": g["name"], "verdict": g["verdict"]}))
                        .collect(),
                ),
                None => Value::Array(
                    self.gates(task.id)
                        .await?
                        .iter()
                        .map(|g| json!({"name": g.name, "verdict": g.verdict.as_str()}))
                        .collect(),
                ),
            };
            siblings.push(SiblingColumn {
                sibling: task.sibling.unwrap_or(0),
                task: task.id.0,
                state: task.state.as_str().to_owned(),
                turns,
                tokens,
                elapsed_ms: task.started_at.map(|s| task.finished_at.unwrap_or(now) - s),
                gates,
                attempt: attempt.as_ref().map(|a| a.id),
                patch_bytes: attempt.as_ref().map(|a| a.patch_bytes),
                lines,
                files: attempt
                    .as_ref()
                    .map(|a| a.files.as_array().map_or(0, Vec::len)),
                selected: attempt.as_ref().is_some_and(|a| a.selected),
                last_error: task.last_error.clone(),
            });
        }
        let steps = self.best_of_steps(lead.id).await?;
        let chosen = steps
            .iter()
            .rev()
            .find(|s| s["step"] == "chosen" || s["step"] == "overridden");
        let winner = chosen.and_then(|s| s["sibling"].as_u64()).map(|k| k as u32);
        let why = chosen.map(|s| match s["step"].as_str() {
            Some("overridden") => format!(
                "a person chose it instead of sibling {}",
                s["was"].as_u64().unwrap_or(0)
            ),
            _ => s["why"].as_str().unwrap_or("").to_owned(),
        });
        let pull = steps
            .iter()
            .find(|s| s["step"] == "pull_opened")
            .and_then(|s| s["url"].as_str())
            .map(str::to_owned);
        Ok(Some(BestOfBoard {
            n: best_of.n,
            choose: best_of.choose.as_str(),
            siblings,
            winner,
            why,
            pull,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::changed_lines;

    #[test]
    fn changed_lines_count_additions_and_removals_not_headers() {
        let patch =
            b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-old\n+new\n+more\n same\n";
        assert_eq!(changed_lines(patch), 3);
    }
}
