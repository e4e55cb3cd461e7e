//! The `approvals` table: the durable inbox of guarded tool calls and questions to the user.
//!
//! One row per tool call that asked (unique on task and call id), so an agent that resumes after a
//! restart finds its request again instead of asking twice. A decision moves the waiting task back to
//! the queue in the same transaction; so does expiry, which denies. The decision locks the task row
//! before it looks at it, and the worker's `Wait` completion re-checks for pending approvals in a
//! statement of its own, so an answer that races the worker's pause is never lost (see leases.rs).

use crate::batch_rows::json_ids;
use crate::events::{EventInsert, insert_events};
use crate::exec::Tx;
use crate::leases::{Lease, next_seq_fenced};
use crate::tasks::{Tasks, state_is};
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{EventKind, TaskId, TaskState, now_millis};
use sea_query::{Expr, ExprTrait, Iden, Order, Query};
use serde::Serialize;
use serde_json::json;

#[derive(Iden, Clone, Copy)]
pub(crate) enum Approvals {
    Table,
    Id,
    TaskId,
    CallId,
    Kind,
    Tool,
    Arguments,
    Reason,
    Options,
    Status,
    Answer,
    DecidedBy,
    RequestedAt,
    ExpiresAt,
    DecidedAt,
    /// The last change's place in commit order (see changes.rs).
    ChangeId,
}

pub(crate) const COLUMNS: [Approvals; 14] = [
    Approvals::Id,
    Approvals::TaskId,
    Approvals::CallId,
    Approvals::Kind,
    Approvals::Tool,
    Approvals::Arguments,
    Approvals::Reason,
    Approvals::Options,
    Approvals::Status,
    Approvals::Answer,
    Approvals::DecidedBy,
    Approvals::RequestedAt,
    Approvals::ExpiresAt,
    Approvals::DecidedAt,
];

/// Approval states.
pub mod approval_status {
    pub const PENDING: &str = "pending";
    pub const APPROVED: &str = "approved";
    pub const DENIED: &str = "denied";
    /// A question that got its answer.
    pub const ANSWERED: &str = "answered";
    /// Nobody answered in time: counts as denied.
    pub const EXPIRED: &str = "expired";
    /// The task was canceled while it waited.
    pub const CANCELED: &str = "canceled";
}

/// `"status" = 'pending'` with the value inlined, like `tasks::state_is`. Bound as a parameter, the
/// value is one SQLite's planner reads to match the partial index `approvals_pending`, and it marks
/// the statement to be compiled again whenever the parameter is bound: every execution. The
/// completer closed approvals with such a statement once per ended task, and each run compiled it
/// again with the approvals' triggers, about an eighth of the queue's CPU on SQLite.
fn is_pending() -> Expr {
    Expr::cust(format!("\"status\" = '{}'", approval_status::PENDING))
}

/// What kind of decision is asked for.
pub mod approval_kind {
    /// A guarded tool call: approve or deny.
    pub const TOOL: &str = "tool";
    /// A question from `ask_user`: answered with one of its options or free text.
    pub const QUESTION: &str = "question";
}

pub(crate) struct ApprovalRow {
    id: i64,
    task_id: i64,
    call_id: String,
    kind: String,
    tool: String,
    arguments: String,
    reason: String,
    options: Option<String>,
    status: String,
    answer: Option<String>,
    decided_by: Option<String>,
    requested_at: i64,
    expires_at: i64,
    decided_at: Option<i64>,
}

from_row!(ApprovalRow {
    id,
    task_id,
    call_id,
    kind,
    tool,
    arguments,
    reason,
    options,
    status,
    answer,
    decided_by,
    requested_at,
    expires_at,
    decided_at
});

/// An approval or a question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Approval {
    pub id: i64,
    pub task_id: TaskId,
    pub call_id: String,
    pub kind: String,
    pub tool: String,
    pub arguments: serde_json::Value,
    pub reason: String,
    /// The choices of a question (2 to 4), if it offers any.
    pub options: Option<Vec<String>>,
    pub status: String,
    /// The answer to a question, or a note given with a decision.
    pub answer: Option<String>,
    pub decided_by: Option<String>,
    pub requested_at: i64,
    pub expires_at: i64,
    pub decided_at: Option<i64>,
}

impl TryFrom<ApprovalRow> for Approval {
    type Error = Error;
    fn try_from(row: ApprovalRow) -> Result<Approval> {
        let corrupt = |what: &'static str, e: serde_json::Error| Error::Corrupt {
            what,
            message: format!("approval {}: {e}", row.id),
        };
        Ok(Approval {
            arguments: serde_json::from_str(&row.arguments)
                .map_err(|e| corrupt("approvals.arguments", e))?,
            options: match &row.options {
                Some(text) => {
                    Some(serde_json::from_str(text).map_err(|e| corrupt("approvals.options", e))?)
                }
                None => None,
            },
            id: row.id,
            task_id: TaskId(row.task_id),
            call_id: row.call_id,
            kind: row.kind,
            tool: row.tool,
            reason: row.reason,
            status: row.status,
            answer: row.answer,
            decided_by: row.decided_by,
            requested_at: row.requested_at,
            expires_at: row.expires_at,
            decided_at: row.decided_at,
        })
    }
}

/// A request as the worker makes it.
#[derive(Debug, Clone)]
pub struct NewApproval {
    pub call_id: String,
    pub kind: &'static str,
    pub tool: String,
    pub arguments: serde_json::Value,
    pub reason: String,
    pub options: Option<Vec<String>>,
    pub expires_at: i64,
}

/// A person's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalDecision {
    Approve,
    Deny {
        reason: Option<String>,
    },
    /// The answer to a question.
    Answer(String),
}

/// Which approvals `list_approvals` returns, newest first.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    /// `None` lists every status.
    pub status: Option<String>,
    pub task: Option<TaskId>,
    pub limit: Option<u64>,
}

/// Closes the pending approvals of a task that was canceled.
pub(crate) async fn close_pending(tx: &mut Tx, task: TaskId, now: i64) -> Result<()> {
    let stmt = Query::update()
        .table(Approvals::Table)
        .value(Approvals::Status, approval_status::CANCELED)
        .value(Approvals::DecidedAt, now)
        .and_where(Expr::col(Approvals::TaskId).eq(task.0))
        .and_where(is_pending())
        .to_owned();
    tx.execute(&stmt).await?;
    Ok(())
}

/// [`close_pending`] for many tasks with one statement, whose text is the same for any number of
/// them (see batch_rows.rs): the completer and the rescuer end tasks in batches, and a statement
/// per task was a round trip per task on the claim/complete path, for approvals that almost never
/// exist.
pub(crate) async fn close_pending_of(tx: &mut Tx, tasks: &[i64], now: i64) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let ids = json_ids(tx.backend(), tasks.iter().copied());
    tx.execute(&close_pending_where(
        Expr::col(Approvals::TaskId).in_subquery(ids),
        now,
    ))
    .await?;
    Ok(())
}

/// The close of the pending approvals whose task `tasks` matches (a condition on `task_id`).
pub(crate) fn close_pending_where(tasks: Expr, now: i64) -> sea_query::UpdateStatement {
    Query::update()
        .table(Approvals::Table)
        .value(Approvals::Status, approval_status::CANCELED)
        .value(Approvals::DecidedAt, now)
        .and_where(tasks)
        .and_where(is_pending())
        .to_owned()
}

/// Queues a waiting task again if none of its approvals is pending; returns whether it did.
pub(crate) async fn resume_if_answered(tx: &mut Tx, task: TaskId, now: i64) -> Result<bool> {
    let pending = Query::select()
        .expr(Expr::col(Approvals::Id).count())
        .from(Approvals::Table)
        .and_where(Expr::col(Approvals::TaskId).eq(task.0))
        .and_where(is_pending())
        .to_owned();
    let (n,): (i64,) = tx.fetch_optional(&pending).await?.unwrap_or((0,));
    if n > 0 {
        return Ok(false);
    }
    let stmt = Query::update()
        .table(Tasks::Table)
        .value(Tasks::State, TaskState::Queued.as_str())
        .value(Tasks::RunAfter, now)
        .value(Tasks::UpdatedAt, now)
        .and_where(Expr::col(Tasks::Id).eq(task.0))
        .and_where(state_is(TaskState::Waiting))
        .to_owned();
    let resumed = tx.execute(&stmt).await? > 0;
    if resumed {
        tx.notify_task_available().await?;
    }
    Ok(resumed)
}

/// The status and answer `decision` gives `approval`, or why it cannot be given.
fn decided(
    approval: &Approval,
    decision: &ApprovalDecision,
) -> Result<(&'static str, Option<String>)> {
    if approval.status != approval_status::PENDING {
        return Err(Error::ApprovalDecided {
            id: approval.id,
            status: approval.status.clone(),
        });
    }
    match (decision, approval.kind.as_str()) {
        (ApprovalDecision::Approve, approval_kind::TOOL) => Ok((approval_status::APPROVED, None)),
        (ApprovalDecision::Deny { reason }, _) => Ok((approval_status::DENIED, reason.clone())),
        (ApprovalDecision::Answer(text), approval_kind::QUESTION) => {
            // Options are suggestions: free text is always a valid answer, an empty one is not.
            if text.trim().is_empty() {
                return Err(Error::InvalidAnswer("the answer is empty".into()));
            }
            Ok((approval_status::ANSWERED, Some(text.clone())))
        }
        (ApprovalDecision::Approve, _) => Err(Error::InvalidAnswer(
            "this is a question: answer it with a text (approval answer ID TEXT)".into(),
        )),
        (ApprovalDecision::Answer(_), _) => Err(Error::InvalidAnswer(
            "this is a tool approval: approve or deny it".into(),
        )),
    }
}

/// Locks the task row (PostgreSQL; SQLite's write lock covers it) so a decision and the worker's
/// pause are ordered.
async fn lock_task(tx: &mut Tx, task: TaskId) -> Result<Option<String>> {
    let mut stmt = Query::select()
        .column(Tasks::State)
        .from(Tasks::Table)
        .and_where(Expr::col(Tasks::Id).eq(task.0))
        .to_owned();
    stmt.lock(sea_query::LockType::Update);
    Ok(tx
        .fetch_optional::<(String,), _>(&stmt)
        .await?
        .map(|(s,)| s))
}

/// Bumps the event counter of a task for a change made on a person's behalf.
async fn next_seq(tx: &mut Tx, task: TaskId, now: i64) -> Result<i64> {
    let stmt = Query::update()
        .table(Tasks::Table)
        .value(Tasks::EventSeq, Expr::col(Tasks::EventSeq).add(1))
        .value(Tasks::UpdatedAt, now)
        .and_where(Expr::col(Tasks::Id).eq(task.0))
        .returning_col(Tasks::EventSeq)
        .to_owned();
    tx.fetch_optional::<(i64,), _>(&stmt)
        .await?
        .map(|(s,)| s)
        .ok_or(Error::TaskNotFound(task))
}

async fn fetch(tx: &mut Tx, id: i64) -> Result<Approval> {
    let stmt = Query::select()
        .columns(COLUMNS)
        .from(Approvals::Table)
        .and_where(Expr::col(Approvals::Id).eq(id))
        .to_owned();
    tx.fetch_optional::<ApprovalRow, _>(&stmt)
        .await?
        .ok_or(Error::ApprovalNotFound(id))?
        .try_into()
}

impl Store {
    /// Records a request for the running attempt of `lease`, or returns the one this call already
    /// made (an agent resuming after a restart asks again with the same call id).
    pub fn request_approval<'a>(
        &'a self,
        lease: &'a Lease,
        new: &'a NewApproval,
    ) -> BoxFuture<'a, Result<Approval>> {
        Box::pin(self.request_approval_unboxed(lease, new))
    }

    async fn request_approval_unboxed(&self, lease: &Lease, new: &NewApproval) -> Result<Approval> {
        if let Some(existing) = self.approval_for_call(lease.task_id, &new.call_id).await? {
            return Ok(existing);
        }
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let seq = next_seq_fenced(&mut tx, lease, now).await?;
        let options = match &new.options {
            Some(o) => Some(serde_json::to_string(o).map_err(|e| Error::Corrupt {
                what: "approval options",
                message: e.to_string(),
            })?),
            None => None,
        };
        let stmt = Query::insert()
            .into_table(Approvals::Table)
            .columns([
                Approvals::TaskId,
                Approvals::CallId,
                Approvals::Kind,
                Approvals::Tool,
                Approvals::Arguments,
                Approvals::Reason,
                Approvals::Options,
                Approvals::Status,
                Approvals::RequestedAt,
                Approvals::ExpiresAt,
            ])
            .values([
                lease.task_id.0.into(),
                new.call_id.as_str().into(),
                new.kind.into(),
                new.tool.as_str().into(),
                new.arguments.to_string().into(),
                new.reason.as_str().into(),
                options.into(),
                approval_status::PENDING.into(),
                now.into(),
                new.expires_at.into(),
            ])?
            .returning_col(Approvals::Id)
            .to_owned();
        let (id,): (i64,) = tx
            .fetch_optional(&stmt)
            .await?
            .ok_or_else(|| Error::Migration("approval insert returned no id".into()))?;
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: lease.task_id.0,
                seq,
                at: now,
                kind: EventKind::ApprovalRequested,
                data: json!({
                    "approval": id,
                    "kind": new.kind,
                    "tool": new.tool,
                    "reason": new.reason,
                    "expires_at": new.expires_at,
                }),
            }],
        )
        .await?;
        let approval = fetch(&mut tx, id).await?;
        tx.commit().await?;
        Ok(approval)
    }

    /// The approval a tool call asked for, if it asked.
    pub fn approval_for_call<'a>(
        &'a self,
        task: TaskId,
        call_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Approval>>> {
        Box::pin(self.approval_for_call_unboxed(task, call_id))
    }

    async fn approval_for_call_unboxed(
        &self,
        task: TaskId,
        call_id: &str,
    ) -> Result<Option<Approval>> {
        let stmt = Query::select()
            .columns(COLUMNS)
            .from(Approvals::Table)
            .and_where(Expr::col(Approvals::TaskId).eq(task.0))
            .and_where(Expr::col(Approvals::CallId).eq(call_id))
            .to_owned();
        match self.pool.fetch_optional::<ApprovalRow, _>(&stmt).await? {
            Some(row) => Ok(Some(row.try_into()?)),
            None => Ok(None),
        }
    }

    pub fn get_approval<'a>(&'a self, id: i64) -> BoxFuture<'a, Result<Approval>> {
        Box::pin(self.get_approval_unboxed(id))
    }

    async fn get_approval_unboxed(&self, id: i64) -> Result<Approval> {
        let stmt = Query::select()
            .columns(COLUMNS)
            .from(Approvals::Table)
            .and_where(Expr::col(Approvals::Id).eq(id))
            .to_owned();
        self.pool
            .fetch_optional::<ApprovalRow, _>(&stmt)
            .await?
            .ok_or(Error::ApprovalNotFound(id))?
            .try_into()
    }

    pub fn list_approvals<'a>(
        &'a self,
        filter: &'a ApprovalFilter,
    ) -> BoxFuture<'a, Result<Vec<Approval>>> {
        Box::pin(self.list_approvals_unboxed(filter))
    }

    async fn list_approvals_unboxed(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>> {
        let mut stmt = Query::select()
            .columns(COLUMNS)
            .from(Approvals::Table)
            .order_by(Approvals::Id, Order::Desc)
            .limit(filter.limit.unwrap_or(1000))
            .to_owned();
        if let Some(status) = &filter.status {
            stmt.and_where(Expr::col(Approvals::Status).eq(status.as_str()));
        }
        if let Some(task) = filter.task {
            stmt.and_where(Expr::col(Approvals::TaskId).eq(task.0));
        }
        let rows: Vec<ApprovalRow> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter().map(Approval::try_from).collect()
    }

    /// How many approvals wait for a person.
    pub fn count_pending_approvals<'a>(&'a self) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.count_pending_approvals_unboxed())
    }

    async fn count_pending_approvals_unboxed(&self) -> Result<u64> {
        let stmt = Query::select()
            .expr(Expr::col(Approvals::Id).count())
            .from(Approvals::Table)
            .and_where(is_pending())
            .to_owned();
        let (n,): (i64,) = self.pool.fetch_optional(&stmt).await?.unwrap_or((0,));
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Decides a pending approval on `by`'s behalf and, if its task waits on nothing else, queues
    /// the task to resume. Refused with `ApprovalDecided` when it was already decided or expired.
    pub fn decide_approval<'a>(
        &'a self,
        id: i64,
        decision: &'a ApprovalDecision,
        by: &'a str,
    ) -> BoxFuture<'a, Result<Approval>> {
        Box::pin(self.decide_approval_unboxed(id, decision, by))
    }

    async fn decide_approval_unboxed(
        &self,
        id: i64,
        decision: &ApprovalDecision,
        by: &str,
    ) -> Result<Approval> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let before = fetch(&mut tx, id).await?;
        lock_task(&mut tx, before.task_id).await?;
        let approval = fetch(&mut tx, id).await?;
        let (status, answer) = match decided(&approval, decision) {
            Ok(decided) => decided,
            Err(refused) => {
                // Not left to the dropped transaction: its lock on the task row would outlive
                // this call, and a claim meanwhile would pass the task over.
                tx.rollback().await?;
                return Err(refused);
            }
        };
        let stmt = Query::update()
            .table(Approvals::Table)
            .value(Approvals::Status, status)
            .value(Approvals::Answer, answer.clone())
            .value(Approvals::DecidedBy, by)
            .value(Approvals::DecidedAt, now)
            .and_where(Expr::col(Approvals::Id).eq(id))
            .and_where(is_pending())
            .to_owned();
        tx.execute(&stmt).await?;
        let seq = next_seq(&mut tx, approval.task_id, now).await?;
        let resumed = resume_if_answered(&mut tx, approval.task_id, now).await?;
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: approval.task_id.0,
                seq,
                at: now,
                kind: EventKind::ApprovalDecided,
                data: json!({
                    "approval": id,
                    "status": status,
                    "by": by,
                    "answer": answer,
                    "resumed": resumed,
                }),
            }],
        )
        .await?;
        let approval = fetch(&mut tx, id).await?;
        tx.commit().await?;
        if resumed {
            self.wake.wake();
        }
        Ok(approval)
    }

    /// Expires pending approvals whose time ran out before `now` (they count as denied) and queues
    /// their tasks to resume. Returns how many expired.
    pub fn expire_approvals<'a>(&'a self, now: i64, limit: u64) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.expire_approvals_unboxed(now, limit))
    }

    async fn expire_approvals_unboxed(&self, now: i64, limit: u64) -> Result<u64> {
        let due = Query::select()
            .columns([Approvals::Id, Approvals::TaskId])
            .from(Approvals::Table)
            .and_where(is_pending())
            .and_where(Expr::col(Approvals::ExpiresAt).lt(now))
            .order_by(Approvals::ExpiresAt, Order::Asc)
            .limit(limit)
            .to_owned();
        let rows: Vec<(i64, i64)> = self.pool.fetch_all(&due).await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let mut expired = 0;
        let mut resumed_any = false;
        let mut tx = self.pool.begin().await?;
        for (id, task) in rows {
            let task = TaskId(task);
            lock_task(&mut tx, task).await?;
            let stmt = Query::update()
                .table(Approvals::Table)
                .value(Approvals::Status, approval_status::EXPIRED)
                .value(Approvals::DecidedBy, "expiry")
                .value(Approvals::DecidedAt, now)
                .and_where(Expr::col(Approvals::Id).eq(id))
                .and_where(is_pending())
                .to_owned();
            if tx.execute(&stmt).await? == 0 {
                continue;
            }
            expired += 1;
            let seq = next_seq(&mut tx, task, now).await?;
            let resumed = resume_if_answered(&mut tx, task, now).await?;
            resumed_any |= resumed;
            insert_events(
                &mut tx,
                &[EventInsert {
                    task_id: task.0,
                    seq,
                    at: now,
                    kind: EventKind::ApprovalDecided,
                    data: json!({
                        "approval": id,
                        "status": approval_status::EXPIRED,
                        "by": "expiry",
                        "resumed": resumed,
                    }),
                }],
            )
            .await?;
        }
        tx.commit().await?;
        if resumed_any {
            self.wake.wake();
        }
        Ok(expired)
    }
}
