//! The `tasks` table: creation, claims under a lease, heartbeats, completion fenced by the lease
//! epoch, cancel, retry and the rescue of expired leases.
//!
//! Every state change appends its event to `task_events` in the same transaction, numbered from the
//! task's `event_seq` counter: the counter's row lock (PostgreSQL) or the write lock (SQLite) makes the
//! numbers gap-free and unique, and an event can never describe a change that did not commit.

use crate::events::{EventInsert, insert_events};
use crate::exec::Tx;
use crate::{Error, Result, Store};
use orchestrator_types::{EventKind, GateSpec, NewTask, TaskId, TaskState, now_millis};
use sea_query::{Cond, Expr, ExprTrait, Iden, Order, Query, SelectStatement};
use serde::Serialize;
use serde_json::json;

#[derive(Iden, Clone, Copy)]
pub(crate) enum Tasks {
    Table,
    Id,
    Title,
    Prompt,
    Spec,
    Workspace,
    State,
    Queue,
    Priority,
    Attempt,
    MaxAttempts,
    RunAfter,
    Epoch,
    LeaseOwner,
    LeaseExpiresAt,
    CancelRequested,
    EventSeq,
    LastError,
    CreatedAt,
    UpdatedAt,
    StartedAt,
    FinishedAt,
    AutomationId,
    SlotAt,
}

const COLUMNS: [Tasks; 23] = [
    Tasks::Id,
    Tasks::Title,
    Tasks::Prompt,
    Tasks::Spec,
    Tasks::Workspace,
    Tasks::State,
    Tasks::Queue,
    Tasks::Priority,
    Tasks::Attempt,
    Tasks::MaxAttempts,
    Tasks::RunAfter,
    Tasks::Epoch,
    Tasks::LeaseOwner,
    Tasks::LeaseExpiresAt,
    Tasks::CancelRequested,
    Tasks::EventSeq,
    Tasks::LastError,
    Tasks::CreatedAt,
    Tasks::UpdatedAt,
    Tasks::StartedAt,
    Tasks::FinishedAt,
    Tasks::AutomationId,
    Tasks::SlotAt,
];

#[derive(sqlx::FromRow)]
struct TaskRow {
    id: i64,
    title: String,
    prompt: Option<String>,
    spec: String,
    workspace: Option<String>,
    state: String,
    queue: String,
    priority: i64,
    attempt: i64,
    max_attempts: i64,
    run_after: i64,
    epoch: i64,
    lease_owner: Option<String>,
    lease_expires_at: Option<i64>,
    cancel_requested: bool,
    event_seq: i64,
    last_error: Option<String>,
    created_at: i64,
    updated_at: i64,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    automation_id: Option<i64>,
    slot_at: Option<i64>,
}

/// A task as stored. Times are Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Task {
    pub id: TaskId,
    pub title: String,
    pub prompt: Option<String>,
    pub gates: Vec<GateSpec>,
    pub workspace: Option<String>,
    pub state: TaskState,
    pub queue: String,
    pub priority: i64,
    /// Claims so far; the attempt a worker is running is this number.
    pub attempt: i64,
    pub max_attempts: i64,
    pub run_after: i64,
    /// Bumped by every claim; writes of an attempt must name it.
    pub epoch: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub cancel_requested: bool,
    /// Number of the latest event.
    pub event_seq: i64,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The automation whose slot created this task, if one did.
    pub automation_id: Option<i64>,
    /// That slot's time (Unix milliseconds).
    pub slot_at: Option<i64>,
}

impl TryFrom<TaskRow> for Task {
    type Error = Error;
    fn try_from(row: TaskRow) -> Result<Task> {
        let spec: NewTask = serde_json::from_str(&row.spec).map_err(|e| Error::Corrupt {
            what: "tasks.spec",
            message: format!("task {}: {e}", row.id),
        })?;
        let state = row.state.parse::<TaskState>().map_err(|e| Error::Corrupt {
            what: "tasks.state",
            message: format!("task {}: {e}", row.id),
        })?;
        Ok(Task {
            id: TaskId(row.id),
            title: row.title,
            prompt: row.prompt,
            gates: spec.gates,
            workspace: row.workspace,
            state,
            queue: row.queue,
            priority: row.priority,
            attempt: row.attempt,
            max_attempts: row.max_attempts,
            run_after: row.run_after,
            epoch: row.epoch,
            lease_owner: row.lease_owner,
            lease_expires_at: row.lease_expires_at,
            cancel_requested: row.cancel_requested,
            event_seq: row.event_seq,
            last_error: row.last_error,
            created_at: row.created_at,
            updated_at: row.updated_at,
            started_at: row.started_at,
            finished_at: row.finished_at,
            automation_id: row.automation_id,
            slot_at: row.slot_at,
        })
    }
}

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

/// Counts of one rescuer pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RescueCounts {
    pub requeued: u64,
    pub failed: u64,
    pub canceled: u64,
}

/// Which tasks `list_tasks` returns, newest first.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub state: Option<TaskState>,
    pub queue: Option<String>,
    pub limit: Option<u64>,
}

/// `"state" = 'queued'` with the value inlined. The partial indexes are declared with a literal, and
/// a planner can only use them when the query's predicate is that same literal, not a parameter.
fn state_is(state: TaskState) -> Expr {
    Expr::cust(format!("\"state\" = '{}'", state.as_str()))
}

fn select_tasks() -> SelectStatement {
    Query::select()
        .columns(COLUMNS)
        .from(Tasks::Table)
        .to_owned()
}

fn lease_matches(lease: &Lease) -> Cond {
    Cond::all()
        .add(Expr::col(Tasks::Id).eq(lease.task_id.0))
        .add(Expr::col(Tasks::Epoch).eq(lease.epoch))
}

/// Matches the rows of many leases at once: `id IN (...) AND epoch = CASE WHEN id = .. THEN .. END`.
/// An OR of `(id = ? AND epoch = ?)` pairs reads the same, but SQLite plans it as a scan of every
/// running row checked against the whole chain; this form finds the rows by primary key and checks
/// one epoch each.
fn leases_match<'a>(leases: impl Iterator<Item = &'a Lease> + Clone) -> Cond {
    // One task can appear twice (an old attempt and the new one of the same process); a CASE on
    // the id would only see the first, so such a batch takes the plain OR form.
    let mut seen = std::collections::HashSet::new();
    if !leases.clone().all(|l| seen.insert(l.task_id)) {
        return leases.fold(Cond::any(), |cond, lease| cond.add(lease_matches(lease)));
    }
    let mut epochs: Option<sea_query::CaseStatement> = None;
    for lease in leases.clone() {
        let when = Expr::col(Tasks::Id).eq(lease.task_id.0);
        epochs = Some(match epochs {
            None => Expr::case(when, lease.epoch),
            Some(case) => case.case(when, lease.epoch),
        });
    }
    let ids: Vec<i64> = leases.map(|l| l.task_id.0).collect();
    let Some(epochs) = epochs else {
        // No leases: match nothing.
        return Cond::all().add(Expr::cust("1 = 0"));
    };
    Cond::all()
        .add(Expr::col(Tasks::Id).is_in(ids))
        .add(Expr::col(Tasks::Epoch).eq(Into::<Expr>::into(epochs.finally(-1i64))))
}

/// Bumps the task's event counter if `lease` still holds the running task, returning the number for
/// the next event. `None` means the lease is stale.
pub(crate) async fn next_seq_fenced(tx: &mut Tx, lease: &Lease, now: i64) -> Result<Option<i64>> {
    let stmt = Query::update()
        .table(Tasks::Table)
        .value(Tasks::EventSeq, Expr::col(Tasks::EventSeq).add(1))
        .value(Tasks::UpdatedAt, now)
        .cond_where(lease_matches(lease))
        .and_where(state_is(TaskState::Running))
        .returning_col(Tasks::EventSeq)
        .to_owned();
    Ok(tx.fetch_optional::<(i64,), _>(&stmt).await?.map(|(s,)| s))
}

/// Bumps the task's event counter unconditionally, for changes made on a user's behalf.
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

/// Reads a task inside a write transaction and holds it: `FOR UPDATE` on PostgreSQL, where READ
/// COMMITTED would otherwise let a concurrent claim or completion slip between this read and the
/// caller's write (a retry could then queue a task that just succeeded). SQLite's `BEGIN IMMEDIATE`
/// already holds the whole database.
async fn fetch_task_tx(tx: &mut Tx, id: TaskId) -> Result<Task> {
    let mut stmt = select_tasks();
    stmt.and_where(Expr::col(Tasks::Id).eq(id.0));
    stmt.lock(sea_query::LockType::Update);
    tx.fetch_optional::<TaskRow, _>(&stmt)
        .await?
        .ok_or(Error::TaskNotFound(id))?
        .try_into()
}

/// The slot a task was created for, kept on the task so `task read` can say where it came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskOrigin {
    pub automation_id: i64,
    pub slot_at: i64,
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

/// Inserts validated tasks in `tx`, each with its `created` event, and returns their ids in order.
/// Shared by `create_tasks` and by the scheduler's slot writes, which must create a slot's tasks in
/// the same transaction as the slot row.
pub(crate) async fn insert_tasks(
    tx: &mut Tx,
    new: &[NewTask],
    now: i64,
    origin: Option<TaskOrigin>,
) -> Result<Vec<TaskId>> {
    let mut ids = Vec::with_capacity(new.len());
    // Chunks keep each statement under SQLite's limit of bound parameters.
    for chunk in new.chunks(500) {
        let mut stmt = Query::insert()
            .into_table(Tasks::Table)
            .columns([
                Tasks::Title,
                Tasks::Prompt,
                Tasks::Spec,
                Tasks::Workspace,
                Tasks::State,
                Tasks::Queue,
                Tasks::Priority,
                Tasks::MaxAttempts,
                Tasks::RunAfter,
                Tasks::EventSeq,
                Tasks::CreatedAt,
                Tasks::UpdatedAt,
                Tasks::AutomationId,
                Tasks::SlotAt,
            ])
            .returning_col(Tasks::Id)
            .to_owned();
        for task in chunk {
            let spec = serde_json::to_string(task).map_err(|e| Error::Corrupt {
                what: "task spec",
                message: e.to_string(),
            })?;
            stmt.values([
                task.title.trim().into(),
                task.prompt.clone().into(),
                spec.into(),
                task.workspace.clone().into(),
                TaskState::Queued.as_str().into(),
                task.queue.clone().into(),
                task.priority.into(),
                task.max_attempts.into(),
                task.run_after.unwrap_or(now).into(),
                1i64.into(),
                now.into(),
                now.into(),
                origin.map(|o| o.automation_id).into(),
                origin.map(|o| o.slot_at).into(),
            ])?;
        }
        let mut rows: Vec<(i64,)> = tx.fetch_all(&stmt).await?;
        // RETURNING follows insertion order on both backends, but sorting costs nothing and
        // makes the pairing with `chunk` independent of that.
        rows.sort_unstable();
        let events: Vec<EventInsert> = rows
            .iter()
            .zip(chunk)
            .map(|((id,), task)| EventInsert {
                task_id: *id,
                seq: 1,
                at: now,
                kind: EventKind::Created,
                data: match origin {
                    None => json!({ "title": task.title.trim(), "queue": task.queue, "gates": task.gates.len() }),
                    Some(o) => json!({
                        "title": task.title.trim(),
                        "queue": task.queue,
                        "gates": task.gates.len(),
                        "automation_id": o.automation_id,
                        "slot_at": o.slot_at,
                    }),
                },
            })
            .collect();
        insert_events(tx, &events).await?;
        ids.extend(rows.into_iter().map(|(id,)| TaskId(id)));
    }
    Ok(ids)
}

impl Store {
    /// Creates one task in state `queued`, with its `created` event.
    pub async fn create_task(&self, new: &NewTask) -> Result<TaskId> {
        let ids = self.create_tasks(std::slice::from_ref(new)).await?;
        ids.into_iter()
            .next()
            .ok_or_else(|| Error::Migration("insert returned no id".into()))
    }

    /// Creates tasks in one transaction (one commit, one wake-up), in order.
    pub async fn create_tasks(&self, new: &[NewTask]) -> Result<Vec<TaskId>> {
        if new.is_empty() {
            return Ok(Vec::new());
        }
        for task in new {
            task.validate()?;
        }
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let ids = insert_tasks(&mut tx, new, now, None).await?;
        tx.notify_task_available().await?;
        tx.commit().await?;
        self.wake.wake();
        Ok(ids)
    }

    pub async fn get_task(&self, id: TaskId) -> Result<Task> {
        let mut stmt = select_tasks();
        stmt.and_where(Expr::col(Tasks::Id).eq(id.0));
        self.pool
            .fetch_optional::<TaskRow, _>(&stmt)
            .await?
            .ok_or(Error::TaskNotFound(id))?
            .try_into()
    }

    /// Tasks matching `filter`, newest first.
    pub async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        let mut stmt = select_tasks();
        if let Some(state) = filter.state {
            stmt.and_where(state_is(state));
        }
        if let Some(queue) = &filter.queue {
            stmt.and_where(Expr::col(Tasks::Queue).eq(queue.as_str()));
        }
        stmt.order_by(Tasks::Id, Order::Desc)
            .limit(filter.limit.unwrap_or(100));
        self.pool
            .fetch_all::<TaskRow, _>(&stmt)
            .await?
            .into_iter()
            .map(Task::try_from)
            .collect()
    }

    /// Number of tasks in each state; states without tasks are listed with 0.
    pub async fn count_by_state(&self) -> Result<Vec<(TaskState, i64)>> {
        let stmt = Query::select()
            .column(Tasks::State)
            .expr(Expr::col(Tasks::Id).count())
            .from(Tasks::Table)
            .group_by_col(Tasks::State)
            .to_owned();
        let rows: Vec<(String, i64)> = self.pool.fetch_all(&stmt).await?;
        Ok(TaskState::ALL
            .into_iter()
            .map(|state| {
                let n = rows
                    .iter()
                    .find(|(s, _)| s == state.as_str())
                    .map(|(_, n)| *n)
                    .unwrap_or(0);
                (state, n)
            })
            .collect())
    }

    /// Claims up to `limit` queued tasks of `queues` whose `run_after` has passed, highest priority
    /// first, for `owner` under a lease of `lease_ms`. Each claimed task gets a new epoch, its attempt
    /// counter bumped and a `claimed` event, all in one transaction. On PostgreSQL, `SKIP LOCKED` lets
    /// several processes claim side by side without waiting for each other or taking the same row.
    pub async fn claim(
        &self,
        owner: &str,
        queues: &[String],
        limit: u64,
        lease_ms: i64,
    ) -> Result<Vec<(Task, Lease)>> {
        if limit == 0 || queues.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_millis();
        let mut candidates = Query::select()
            .column(Tasks::Id)
            .from(Tasks::Table)
            .and_where(state_is(TaskState::Queued))
            .and_where(Expr::col(Tasks::Queue).is_in(queues.iter().map(String::as_str)))
            .and_where(Expr::col(Tasks::RunAfter).lte(now))
            .order_by(Tasks::Priority, Order::Desc)
            .order_by(Tasks::Id, Order::Asc)
            .limit(limit)
            .to_owned();
        candidates.lock_with_behavior(
            sea_query::LockType::Update,
            sea_query::LockBehavior::SkipLocked,
        );
        self.claim_where(
            owner,
            Expr::col(Tasks::Id).in_subquery(candidates),
            lease_ms,
            now,
        )
        .await
    }

    /// Claims one specific queued task, whatever its queue or `run_after`: `orchestrator run` uses it
    /// to run the task it just created in the foreground. `None` if the task is not queued.
    pub async fn claim_task(
        &self,
        owner: &str,
        id: TaskId,
        lease_ms: i64,
    ) -> Result<Option<(Task, Lease)>> {
        let now = now_millis();
        let cond = Expr::col(Tasks::Id)
            .eq(id.0)
            .and(state_is(TaskState::Queued));
        Ok(self
            .claim_where(owner, cond, lease_ms, now)
            .await?
            .into_iter()
            .next())
    }

    async fn claim_where(
        &self,
        owner: &str,
        cond: Expr,
        lease_ms: i64,
        now: i64,
    ) -> Result<Vec<(Task, Lease)>> {
        let stmt = Query::update()
            .table(Tasks::Table)
            .value(Tasks::State, TaskState::Running.as_str())
            .value(Tasks::LeaseOwner, owner)
            .value(Tasks::LeaseExpiresAt, now + lease_ms)
            .value(Tasks::Epoch, Expr::col(Tasks::Epoch).add(1))
            .value(Tasks::Attempt, Expr::col(Tasks::Attempt).add(1))
            .value(Tasks::EventSeq, Expr::col(Tasks::EventSeq).add(1))
            .value(Tasks::StartedAt, Expr::col(Tasks::StartedAt).if_null(now))
            // Foreground tasks are created with a run_after no daemon reaches (see
            // `create_foreground`); once claimed, the row should say when it really ran.
            .value(
                Tasks::RunAfter,
                Expr::case(Expr::col(Tasks::RunAfter).gt(now), now)
                    .finally(Expr::col(Tasks::RunAfter)),
            )
            .value(Tasks::UpdatedAt, now)
            .and_where(cond)
            .returning(Query::returning().columns(COLUMNS))
            .to_owned();
        let mut tx = self.pool.begin().await?;
        let rows: Vec<TaskRow> = tx.fetch_all(&stmt).await?;
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        let mut claimed = rows
            .into_iter()
            .map(Task::try_from)
            .collect::<Result<Vec<_>>>()?;
        claimed.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
        let events: Vec<EventInsert> = claimed
            .iter()
            .map(|task| EventInsert {
                task_id: task.id.0,
                seq: task.event_seq,
                at: now,
                kind: EventKind::Claimed,
                data: json!({ "attempt": task.attempt, "epoch": task.epoch, "worker": owner }),
            })
            .collect();
        insert_events(&mut tx, &events).await?;
        tx.commit().await?;
        Ok(claimed
            .into_iter()
            .map(|task| {
                let lease = Lease {
                    task_id: task.id,
                    epoch: task.epoch,
                };
                (task, lease)
            })
            .collect())
    }

    /// Extends the leases that are still held by `lease_ms` from now, and reports for each lease
    /// whether it is held and whether a cancel was requested.
    pub async fn heartbeat(&self, leases: &[Lease], lease_ms: i64) -> Result<Vec<LeaseStatus>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_millis();
        let mut held: Vec<(i64, i64, bool)> = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(400) {
            let any = leases_match(chunk.iter());
            let stmt = Query::update()
                .table(Tasks::Table)
                .value(Tasks::LeaseExpiresAt, now + lease_ms)
                .cond_where(any)
                .and_where(state_is(TaskState::Running))
                .returning(Query::returning().columns([
                    Tasks::Id,
                    Tasks::Epoch,
                    Tasks::CancelRequested,
                ]))
                .to_owned();
            held.extend(self.pool.fetch_all::<(i64, i64, bool), _>(&stmt).await?);
        }
        Ok(leases
            .iter()
            .map(|lease| {
                let row = held
                    .iter()
                    .find(|(id, epoch, _)| *id == lease.task_id.0 && *epoch == lease.epoch);
                LeaseStatus {
                    lease: lease.clone(),
                    held: row.is_some(),
                    cancel_requested: row.is_some_and(|(_, _, c)| *c),
                }
            })
            .collect())
    }

    /// Running tasks of `owner` whose cancel was requested, as leases. Cheap enough to poll often.
    pub async fn cancel_requests(&self, owner: &str) -> Result<Vec<Lease>> {
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
    pub async fn complete(&self, completions: &[Completion]) -> Result<Vec<CompletionResult>> {
        if completions.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_millis();
        let mut results = vec![CompletionResult::Stale; completions.len()];
        let mut events = Vec::with_capacity(completions.len());
        let mut requeued = false;
        let mut tx = self.pool.begin().await?;

        // Successes are the hot path: one UPDATE for all of them.
        let successes: Vec<usize> = (0..completions.len())
            .filter(|i| completions[*i].outcome == Outcome::Succeeded)
            .collect();
        for chunk in successes.chunks(400) {
            let any = leases_match(chunk.iter().map(|i| &completions[*i].lease));
            let stmt = Query::update()
                .table(Tasks::Table)
                .value(Tasks::State, TaskState::Succeeded.as_str())
                .value(Tasks::LeaseOwner, Option::<String>::None)
                .value(Tasks::LeaseExpiresAt, Option::<i64>::None)
                .value(Tasks::EventSeq, Expr::col(Tasks::EventSeq).add(1))
                .value(Tasks::LastError, Option::<String>::None)
                .value(Tasks::FinishedAt, now)
                .value(Tasks::UpdatedAt, now)
                .cond_where(any)
                .and_where(state_is(TaskState::Running))
                .returning(Query::returning().columns([Tasks::Id, Tasks::EventSeq]))
                .to_owned();
            let rows: Vec<(i64, i64)> = tx.fetch_all(&stmt).await?;
            for (id, seq) in rows {
                if let Some(i) = chunk
                    .iter()
                    .find(|i| completions[**i].lease.task_id.0 == id)
                {
                    results[*i] = CompletionResult::Applied;
                    events.push(EventInsert {
                        task_id: id,
                        seq,
                        at: now,
                        kind: EventKind::Succeeded,
                        data: completions[*i].details.clone(),
                    });
                }
            }
        }

        for (i, completion) in completions.iter().enumerate() {
            let (state, kind, error) = match &completion.outcome {
                Outcome::Succeeded => continue,
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
                    stmt.value(
                        Tasks::State,
                        Expr::case(
                            Expr::col(Tasks::CancelRequested).eq(true),
                            TaskState::Canceled.as_str(),
                        )
                        .finally(TaskState::Queued.as_str()),
                    );
                    stmt.value(
                        Tasks::FinishedAt,
                        Expr::case(Expr::col(Tasks::CancelRequested).eq(true), now)
                            .finally(Expr::val(Option::<i64>::None)),
                    );
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

    /// Cancels a task: a queued or waiting one at once, a running one by asking its worker (which
    /// kills the gate's process group and marks the task canceled). Finished tasks are refused.
    pub async fn cancel_task(&self, id: TaskId) -> Result<CancelOutcome> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let outcome = cancel_task_tx(&mut tx, id, now).await?;
        tx.commit().await?;
        Ok(outcome)
    }

    /// Queues a failed or canceled task again, now, with at least one attempt left.
    pub async fn retry_task(&self, id: TaskId) -> Result<Task> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let task = fetch_task_tx(&mut tx, id).await?;
        if !matches!(task.state, TaskState::Failed | TaskState::Canceled) {
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
                data: json!({ "from": task.state.as_str(), "previous_error": task.last_error }),
            }],
        )
        .await?;
        tx.notify_task_available().await?;
        let task = fetch_task_tx(&mut tx, id).await?;
        tx.commit().await?;
        self.wake.wake();
        Ok(task)
    }

    /// Takes back running tasks whose lease expired before `now`: canceled if a cancel was
    /// requested, failed if no attempt is left, otherwise queued again after `backoff(attempt)`
    /// milliseconds. At most `limit` tasks per call.
    pub async fn rescue_expired(
        &self,
        now: i64,
        limit: u64,
        backoff: impl Fn(i64) -> i64,
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
        let expired: Vec<(i64, i64, i64, i64, bool, Option<String>)> = tx.fetch_all(&stmt).await?;
        let mut events = Vec::new();
        for (id, epoch, attempt, max_attempts, cancel_requested, owner) in expired {
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

    /// The earliest `run_after` among queued tasks, so an idle worker can sleep exactly until then.
    pub async fn next_run_after(&self, queues: &[String]) -> Result<Option<i64>> {
        let stmt = Query::select()
            .expr(Expr::col(Tasks::RunAfter).min())
            .from(Tasks::Table)
            .and_where(state_is(TaskState::Queued))
            .and_where(Expr::col(Tasks::Queue).is_in(queues.iter().map(String::as_str)))
            .to_owned();
        Ok(self
            .pool
            .fetch_optional::<(Option<i64>,), _>(&stmt)
            .await?
            .and_then(|(t,)| t))
    }
}

/// `run_after` of a task created for one process to run in the foreground: later than any daemon's
/// clock will reach, so `claim` never takes it, while `claim_task` (by id) does.
const FOREGROUND_RUN_AFTER: i64 = i64::MAX / 2;

impl Store {
    /// Creates a task and claims it for `owner`, so no daemon sharing the store can take it first:
    /// `orchestrator run` uses it to run its task in its own process.
    pub async fn create_foreground(
        &self,
        new: &NewTask,
        owner: &str,
        lease_ms: i64,
    ) -> Result<(Task, Lease)> {
        let mut hidden = new.clone();
        hidden.run_after = Some(FOREGROUND_RUN_AFTER);
        let id = self.create_task(&hidden).await?;
        self.claim_task(owner, id, lease_ms)
            .await?
            .ok_or_else(|| Error::WrongState {
                task: id,
                state: "unknown".into(),
                message: "the task was taken before this process could start it".into(),
            })
    }
}
