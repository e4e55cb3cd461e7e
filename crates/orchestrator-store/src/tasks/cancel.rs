//! Canceling and retrying tasks: a cancel that finds no worker ends the task at once, one that
//! finds a worker asks it to stop; a canceled parent cancels its children.

use super::*;
use orchestrator_types::BoxFuture;

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelOutcome {
    /// The task was not running and is now canceled.
    Canceled,
    /// The task is running; its worker was asked to stop it and will mark it canceled.
    Requested,
    /// The task was already canceled.
    AlreadyCanceled,
}

/// Cancels a task inside `tx` (see `Store::cancel_task`); the scheduler's `cancel_previous` overlap
/// policy uses it so the cancel and the new slot commit together.
pub(crate) async fn cancel_task_tx(tx: &mut Tx, id: TaskId, now: i64) -> Result<CancelOutcome> {
    let task = fetch_task_tx(tx, id).await?;
    // A running task whose lease already expired has no worker left to stop it (a killed
    // `orchestrator run`, a crashed daemon with no rescuer running): cancel it here, at once.
    let orphaned =
        task.state == TaskState::Running && task.lease_expires_at.is_some_and(|t| t < now);
    let outcome = match task.state {
        TaskState::Queued | TaskState::Waiting => cancel_at_once(tx, &task, now, false).await?,
        TaskState::Running if orphaned => cancel_at_once(tx, &task, now, true).await?,
        TaskState::Running if task.cancel_requested => CancelOutcome::Requested,
        TaskState::Running => {
            let seq = next_seq(tx, id, now).await?;
            let stmt = Query::update()
                .table(Tasks::Table)
                .value(Tasks::CancelRequested, true)
                .and_where(Expr::col(Tasks::Id).eq(id.0))
                .to_owned();
            tx.execute(&stmt).await?;
            insert_events(
                tx,
                &[EventInsert {
                    task_id: id.0,
                    seq,
                    at: now,
                    kind: EventKind::CancelRequested,
                    data: json!({ "worker": task.lease_owner }),
                }],
            )
            .await?;
            CancelOutcome::Requested
        }
        TaskState::Canceled => CancelOutcome::AlreadyCanceled,
        TaskState::Succeeded | TaskState::Failed => {
            return Err(Error::WrongState {
                task: id,
                state: task.state.to_string(),
                message: "a finished task cannot be canceled".into(),
            });
        }
    };
    Ok(outcome)
}

/// Ends a task `canceled` now, with its event: for tasks no worker holds.
async fn cancel_at_once(
    tx: &mut Tx,
    task: &Task,
    now: i64,
    orphaned: bool,
) -> Result<CancelOutcome> {
    let id = task.id;
    let seq = next_seq(tx, id, now).await?;
    let stmt = Query::update()
        .table(Tasks::Table)
        .value(Tasks::State, TaskState::Canceled.as_str())
        .value(Tasks::FinishedAt, now)
        .value(Tasks::LeaseOwner, Option::<String>::None)
        .value(Tasks::LeaseExpiresAt, Option::<i64>::None)
        .and_where(Expr::col(Tasks::Id).eq(id.0))
        .to_owned();
    tx.execute(&stmt).await?;
    crate::approvals::close_pending(tx, id, now).await?;
    // A best-of sibling canceled by a person: its lead looks at its siblings again.
    if let (Some(_), Some(lead)) = (task.sibling, task.parent_id) {
        crate::best_of::queue_lead(tx, lead, now).await?;
    }
    if orphaned {
        // No worker holds it: what its last worker was writing ends here.
        crate::live_logs::end_abandoned(tx, &[id.0], now).await?;
    }
    insert_events(
        tx,
        &[EventInsert {
            task_id: id.0,
            seq,
            at: now,
            kind: EventKind::Canceled,
            data: json!({ "from": task.state.as_str(), "lease_expired": orphaned }),
        }],
    )
    .await?;
    Ok(CancelOutcome::Canceled)
}

impl Store {
    /// Cancels a task: a queued or waiting one at once, a running one by asking its worker (which
    /// kills the gate's process group and marks the task canceled). Finished tasks are refused.
    /// Its unfinished descendants (sub-agents) are canceled in the same transaction.
    pub fn cancel_task<'a>(&'a self, id: TaskId) -> BoxFuture<'a, Result<CancelOutcome>> {
        Box::pin(self.cancel_task_unboxed(id))
    }

    async fn cancel_task_unboxed(&self, id: TaskId) -> Result<CancelOutcome> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let outcome = cancel_task_tx(&mut tx, id, now).await?;
        let mut parents = vec![id];
        while let Some(parent) = parents.pop() {
            let stmt = Query::select()
                .column(Tasks::Id)
                .from(Tasks::Table)
                .and_where(Expr::col(Tasks::ParentId).eq(parent.0))
                .and_where(Expr::col(Tasks::State).is_in([
                    TaskState::Queued.as_str(),
                    TaskState::Running.as_str(),
                    TaskState::Waiting.as_str(),
                ]))
                .to_owned();
            let children: Vec<(i64,)> = tx.fetch_all(&stmt).await?;
            for (child,) in children {
                cancel_task_tx(&mut tx, TaskId(child), now).await?;
                parents.push(TaskId(child));
            }
        }
        tx.commit().await?;
        Ok(outcome)
    }

    /// Queues a failed or canceled task again, now, with at least one attempt left.
    pub fn retry_task<'a>(&'a self, id: TaskId) -> BoxFuture<'a, Result<Task>> {
        Box::pin(self.retry_task_unboxed(id))
    }

    async fn retry_task_unboxed(&self, id: TaskId) -> Result<Task> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let task = fetch_task_tx(&mut tx, id).await?;
        if !matches!(task.state, TaskState::Failed | TaskState::Canceled) {
            // Ended here, not when dropped: the row's lock would outlive the call, and a claim of
            // the queued task meanwhile would pass it over.
            tx.rollback().await?;
            return Err(Error::WrongState {
                task: id,
                state: task.state.to_string(),
                message: "only failed or canceled tasks can be retried".into(),
            });
        }
        let seq = next_seq(&mut tx, id, now).await?;
        let stmt = Query::update()
            .table(Tasks::Table)
            .value(Tasks::State, TaskState::Queued.as_str())
            .value(Tasks::RunAfter, now)
            .value(Tasks::CancelRequested, false)
            .value(Tasks::FinishedAt, Option::<i64>::None)
            .value(
                Tasks::MaxAttempts,
                Ord::max(task.max_attempts, task.attempt + 1),
            )
            .and_where(Expr::col(Tasks::Id).eq(id.0))
            .to_owned();
        tx.execute(&stmt).await?;
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: id.0,
                seq,
                at: now,
                kind: EventKind::Retried,
                // `attempt`: the last attempt before the retry. An agent's budgets count from the
                // attempt after it, so a task that failed on its budget is not retried into the
                // same wall.
                data: json!({
                    "from": task.state.as_str(),
                    "previous_error": task.last_error,
                    "attempt": task.attempt,
                }),
            }],
        )
        .await?;
        tx.notify_task_available().await?;
        let task = fetch_task_tx(&mut tx, id).await?;
        tx.commit().await?;
        self.wake.wake();
        Ok(task)
    }
}
