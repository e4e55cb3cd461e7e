//! The `tasks` table: the row, creation, reading, cancel and retry. Claims, heartbeats, completion
//! and rescue, everything that goes through a lease, live in leases.rs.
//!
//! Every state change appends its event to `task_events` in the same transaction, numbered from the
//! task's `event_seq` counter: the counter's row lock (PostgreSQL) or the write lock (SQLite) makes the
//! numbers gap-free and unique, and an event can never describe a change that did not commit.

use crate::events::{EventInsert, insert_events};
use crate::exec::Tx;
use crate::{Error, Result, Store};
use orchestrator_types::placement::{self, Placement};
use orchestrator_types::{
    AgentOptions, EventKind, GateSpec, ModelSpec, NewTask, RepositoryRef, TaskId, TaskState,
    Verdict, now_millis,
};
use sea_query::{Expr, ExprTrait, Iden, Order, Query, SelectStatement};
use serde::Serialize;
use serde_json::json;
use std::borrow::Cow;

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
    ParentId,
    Repository,
    /// What a worker must offer to claim the task, in the stored form of
    /// `orchestrator_types::placement` (`,a,b,`); NULL when anything may claim it.
    Requires,
    /// The last change's place in commit order (see changes.rs).
    ChangeId,
}

pub(crate) const COLUMNS: [Tasks; 24] = [
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
    Tasks::ParentId,
];

#[derive(sqlx::FromRow)]
pub(crate) struct TaskRow {
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
    parent_id: Option<i64>,
}

/// A task as stored. Times are Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Task {
    pub id: TaskId,
    pub title: String,
    pub prompt: Option<String>,
    pub gates: Vec<GateSpec>,
    pub workspace: Option<String>,
    /// The checkout the workspace is cloned from when the task first runs (a tree of its own).
    pub worktree_of: Option<String>,
    /// The repository the worker makes the workspace from, when the task names one instead of a
    /// path; `workspace` is then `None` here (each worker that runs it has its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositoryRef>,
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
    /// The task that spawned this one (a sub-agent's parent).
    pub parent_id: Option<TaskId>,
    /// The model of an agent task, if it names one.
    pub model: Option<ModelSpec>,
    pub agent: AgentOptions,
    pub acceptance: Vec<String>,
    /// What made the task when not a person or an automation (a trigger rule), in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// What a worker must offer to claim the task (labels, `host:<id>`, `shared:<dir>`); empty:
    /// any worker may.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
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
            worktree_of: spec.worktree_of,
            repository: spec.repository,
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
            parent_id: row.parent_id.map(TaskId),
            model: spec.model,
            agent: spec.agent,
            acceptance: spec.acceptance,
            origin: spec.origin,
            requires: spec.requires,
        })
    }
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

/// Which tasks `list_tasks` returns, newest first.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub state: Option<TaskState>,
    pub queue: Option<String>,
    pub limit: Option<u64>,
}

/// A page of tasks for the API and the dashboard, newest first: filters, and a keyset (`before`,
/// the last id of the previous page) instead of an offset, so a page costs the same however deep
/// it is and a task created meanwhile does not shift the next page.
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    pub state: Option<TaskState>,
    pub queue: Option<String>,
    /// Only the tasks this automation's slots created.
    pub automation: Option<i64>,
    /// Text the title contains, compared without regard to case (ASCII letters).
    pub title_contains: Option<String>,
    /// Only tasks older (smaller id) than this one.
    pub before: Option<TaskId>,
    pub limit: u64,
    /// Only tasks on this checkout: the one their workspace was cloned from, else their
    /// workspace (exactly; see [`Store::repositories`]).
    pub repository: Option<String>,
    /// Only tasks with a gate (of any attempt) that ended with this verdict.
    pub gate_verdict: Option<Verdict>,
}

/// Fewer rows than this passing a filter make it rare (see `Store::rare`).
const RARE: u64 = 2_000;

/// `text` as a LIKE pattern that matches it anywhere, lower-cased, with `%`, `_` and the escape
/// character itself escaped, so a search for `50%` finds "50%", not everything after "50".
fn contains_pattern(text: &str) -> String {
    let mut pattern = String::from("%");
    for c in text.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// `"state" = 'queued'` with the value inlined. The partial indexes are declared with a literal, and
/// a planner can only use them when the query's predicate is that same literal, not a parameter.
pub(crate) fn state_is(state: TaskState) -> Expr {
    Expr::cust(format!("\"state\" = '{}'", state.as_str()))
}

pub(crate) fn select_tasks() -> SelectStatement {
    Query::select()
        .columns(COLUMNS)
        .from(Tasks::Table)
        .to_owned()
}

/// Bumps the task's event counter unconditionally, for changes made on a user's behalf.
pub(crate) async fn next_seq(tx: &mut Tx, task: TaskId, now: i64) -> Result<i64> {
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
    crate::approvals::close_pending(tx, id, now).await?;
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

/// The tasks with the words they need added to their requirements: `repository` for a task on
/// a repository (a daemon that can make its workspace), and for a task on a workspace path, the
/// placement's host or shared directory (only a worker that sees the path may run it). Borrowed as
/// they are when nothing is added, which is always the case for tasks without a workspace or a
/// repository, and for paths without a placement (benchmarks, tests).
fn place<'a>(new: &'a [NewTask], placement: Option<&Placement>) -> Cow<'a, [NewTask]> {
    if !new
        .iter()
        .any(|task| added(task, placement) != [None, None])
    {
        return Cow::Borrowed(new);
    }
    Cow::Owned(
        new.iter()
            .map(|task| {
                let mut placed = task.clone();
                placed
                    .requires
                    .extend(added(task, placement).into_iter().flatten());
                placed
            })
            .collect(),
    )
}

/// The words [`place`] adds to one task.
fn added(task: &NewTask, placement: Option<&Placement>) -> [Option<String>; 2] {
    let has = |test: &dyn Fn(&str) -> bool| task.requires.iter().any(|w| test(w));
    let repository = (task.repository.is_some() && !has(&|w| w == placement::REPOSITORY_WORD))
        .then(|| placement::REPOSITORY_WORD.to_owned());
    let path = match (placement, task.workspace.as_deref()) {
        (Some(placement), Some(workspace))
            if !has(&|w| {
                w.starts_with(placement::HOST_PREFIX) || w.starts_with(placement::SHARED_PREFIX)
            }) =>
        {
            Some(placement.requirement_for(workspace))
        }
        _ => None,
    };
    [repository, path]
}

/// Inserts validated tasks in `tx`, each with its `created` event, and returns their ids in order.
/// Shared by `create_tasks` and by the scheduler's slot writes, which must create a slot's tasks in
/// the same transaction as the slot row.
pub(crate) async fn insert_tasks(
    tx: &mut Tx,
    new: &[NewTask],
    now: i64,
    origin: Option<TaskOrigin>,
    placement: Option<&Placement>,
) -> Result<Vec<TaskId>> {
    let placed = place(new, placement);
    let new: &[NewTask] = &placed;
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
                Tasks::ParentId,
                Tasks::Repository,
                Tasks::Requires,
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
                task.parent.map(|p| p.0).into(),
                task.repository
                    .as_ref()
                    .map(|r| r.url.clone())
                    .or_else(|| task.worktree_of.clone())
                    .or_else(|| task.workspace.clone())
                    .into(),
                placement::encode_words(task.requires.iter().map(String::as_str)).into(),
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
                    None => match &task.origin {
                        None => json!({ "title": task.title.trim(), "queue": task.queue, "gates": task.gates.len() }),
                        Some(made_by) => json!({ "title": task.title.trim(), "queue": task.queue, "gates": task.gates.len(), "origin": made_by }),
                    },
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
        let ids = insert_tasks(&mut tx, new, now, None, self.placement()).await?;
        tx.notify_task_available().await?;
        tx.commit().await?;
        self.wake.wake();
        Ok(ids)
    }

    /// Creates a task on behalf of the attempt that holds `lease` (a sub-agent, a task an agent
    /// made), in one transaction with the check that the lease still holds: a worker that lost its
    /// lease creates nothing.
    pub async fn create_task_under(&self, lease: &crate::Lease, new: &NewTask) -> Result<TaskId> {
        new.validate()?;
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        crate::leases::check_lease(&mut tx, lease, now).await?;
        let id = insert_tasks(
            &mut tx,
            std::slice::from_ref(new),
            now,
            None,
            self.placement(),
        )
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| Error::Migration("insert returned no id".into()))?;
        tx.notify_task_available().await?;
        tx.commit().await?;
        self.wake.wake();
        Ok(id)
    }

    /// Ties the task that `lease` holds to the machine of `requirement` (a `host:<id>` word):
    /// from now on only a worker offering it claims the task, because something of the task (its
    /// workspace, too large to checkpoint) exists only there. Fenced by the lease, with a
    /// `pinned` event saying why. Adding a word the task already requires changes nothing.
    pub async fn pin_task(
        &self,
        lease: &crate::Lease,
        requirement: &str,
        reason: &str,
    ) -> Result<()> {
        placement::validate_requirement(requirement)?;
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let seq = crate::leases::next_seq_fenced(&mut tx, lease, now)
            .await?
            .ok_or(Error::StaleLease {
                task: lease.task_id,
                epoch: lease.epoch,
            })?;
        let read = Query::select()
            .column(Tasks::Spec)
            .from(Tasks::Table)
            .and_where(Expr::col(Tasks::Id).eq(lease.task_id.0))
            .to_owned();
        let (spec,): (String,) = tx
            .fetch_optional(&read)
            .await?
            .ok_or(Error::TaskNotFound(lease.task_id))?;
        let mut spec: NewTask = serde_json::from_str(&spec).map_err(|e| Error::Corrupt {
            what: "tasks.spec",
            message: format!("task {}: {e}", lease.task_id),
        })?;
        if !spec.requires.iter().any(|w| w == requirement) {
            spec.requires.push(requirement.to_owned());
        }
        let text = serde_json::to_string(&spec).map_err(|e| Error::Corrupt {
            what: "task spec",
            message: e.to_string(),
        })?;
        let write = Query::update()
            .table(Tasks::Table)
            .value(Tasks::Spec, text)
            .value(
                Tasks::Requires,
                placement::encode_words(spec.requires.iter().map(String::as_str)),
            )
            .and_where(Expr::col(Tasks::Id).eq(lease.task_id.0))
            .to_owned();
        tx.execute(&write).await?;
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: lease.task_id.0,
                seq,
                at: now,
                kind: EventKind::Pinned,
                data: json!({ "requirement": requirement, "reason": reason }),
            }],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Pins the lease's task to this process's host (see [`Store::pin_task`]) when the handle
    /// knows its placement; a handle without one (tests, benchmarks) runs everything anywhere
    /// and pins nothing.
    pub async fn pin_to_this_host(&self, lease: &crate::Lease, reason: &str) -> Result<()> {
        let Some(placement) = self.placement() else {
            return Ok(());
        };
        let word = format!("{}{}", placement::HOST_PREFIX, placement.host);
        self.pin_task(lease, &word, reason).await
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
        self.fetch_tasks(&stmt).await
    }

    async fn fetch_tasks(&self, stmt: &SelectStatement) -> Result<Vec<Task>> {
        self.pool
            .fetch_all::<TaskRow, _>(stmt)
            .await?
            .into_iter()
            .map(Task::try_from)
            .collect()
    }

    /// Whether fewer than [`RARE`] rows answer `matches` (a select of anything, unlimited): then
    /// reading those few through an index is cheaper than walking the tasks newest first until a
    /// page is full, which is what a filter most tasks pass does well. Planners cannot tell the
    /// two apart from a parameter, so the store asks.
    async fn rare(&self, mut matches: SelectStatement) -> Result<bool> {
        matches.limit(RARE);
        let probe = Query::select()
            .expr(Expr::cust("count(*)"))
            .from_subquery(matches, sea_query::Alias::new("m"))
            .to_owned();
        let (found,): (i64,) = self.pool.fetch_optional(&probe).await?.unwrap_or((0,));
        Ok(found < RARE as i64)
    }

    /// The title filter: the lower-cased title contains `text`. On SQLite a rare text is found
    /// through the titles' trigram index (`tasks_title`), a common one by walking the tasks.
    async fn title_filter(&self, stmt: &mut SelectStatement, text: &str) -> Result<()> {
        stmt.and_where(
            Expr::expr(sea_query::Func::lower(Expr::col(Tasks::Title)))
                .like(sea_query::LikeExpr::new(contains_pattern(text)).escape('\\')),
        );
        // PostgreSQL's planner chooses between the pg_trgm index and a walk by id by itself, from
        // its statistics of the indexed expression (gathered by autovacuum's ANALYZE). A trigram
        // index knows nothing of texts shorter than a trigram.
        if self.backend() != crate::Backend::Sqlite || text.chars().count() < 3 {
            return Ok(());
        }
        let phrase = format!("\"{}\"", text.replace('"', "\"\""));
        let candidates = Query::select()
            .expr(Expr::cust("rowid"))
            .from(sea_query::Alias::new("tasks_title"))
            .and_where(Expr::cust_with_values(
                "tasks_title MATCH ?",
                [phrase.clone()],
            ))
            .to_owned();
        if self.rare(candidates).await? {
            // Only the few candidates the index names are read; the LIKE decides.
            stmt.and_where(Expr::cust_with_values(
                "\"id\" IN (SELECT rowid FROM tasks_title WHERE tasks_title MATCH ?)",
                [phrase],
            ));
        }
        Ok(())
    }

    /// The gate verdict filter: a task with a gate that ended so. A rare verdict is found through
    /// the gates' index by verdict, a common one by walking the tasks.
    async fn verdict_filter(&self, stmt: &mut SelectStatement, verdict: Verdict) -> Result<()> {
        use crate::gates::Gates;
        let with_verdict = Query::select()
            .column(Gates::TaskId)
            .from(Gates::Table)
            .and_where(Expr::col(Gates::Verdict).eq(verdict.as_str()))
            .to_owned();
        if self.rare(with_verdict.clone()).await? {
            stmt.and_where(Expr::col(Tasks::Id).in_subquery(with_verdict));
        } else {
            stmt.and_where(Expr::exists(
                Query::select()
                    .expr(Expr::val(1))
                    .from(Gates::Table)
                    .and_where(
                        Expr::col((Gates::Table, Gates::TaskId)).equals((Tasks::Table, Tasks::Id)),
                    )
                    .and_where(Expr::col((Gates::Table, Gates::Verdict)).eq(verdict.as_str()))
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// A page of tasks, newest first: see [`TaskPage`].
    pub async fn task_page(&self, page: &TaskPage) -> Result<Vec<Task>> {
        let mut stmt = select_tasks();
        if let Some(state) = page.state {
            stmt.and_where(state_is(state));
        }
        if let Some(queue) = &page.queue {
            stmt.and_where(Expr::col(Tasks::Queue).eq(queue.as_str()));
        }
        if let Some(automation) = page.automation {
            stmt.and_where(Expr::col(Tasks::AutomationId).eq(automation));
        }
        if let Some(text) = &page.title_contains {
            self.title_filter(&mut stmt, text).await?;
        }
        if let Some(repository) = &page.repository {
            stmt.and_where(Expr::col(Tasks::Repository).eq(repository.as_str()));
        }
        if let Some(verdict) = page.gate_verdict {
            self.verdict_filter(&mut stmt, verdict).await?;
        }
        if let Some(before) = page.before {
            stmt.and_where(Expr::col(Tasks::Id).lt(before.0));
        }
        stmt.order_by(Tasks::Id, Order::Desc)
            .limit(Ord::max(page.limit, 1));
        self.fetch_tasks(&stmt).await
    }

    /// The checkouts tasks work on, most recently used first, at most `limit`: what the
    /// repository filter offers.
    pub async fn repositories(&self, limit: u64) -> Result<Vec<String>> {
        let stmt = Query::select()
            .column(Tasks::Repository)
            .expr(Expr::col(Tasks::Id).max())
            .from(Tasks::Table)
            .and_where(Expr::col(Tasks::Repository).is_not_null())
            .group_by_col(Tasks::Repository)
            .order_by_expr(Expr::col(Tasks::Id).max(), Order::Desc)
            .limit(limit)
            .to_owned();
        let rows: Vec<(String, i64)> = self.pool.fetch_all(&stmt).await?;
        Ok(rows.into_iter().map(|(repository, _)| repository).collect())
    }

    /// Tasks that ended at or after `since` (Unix milliseconds), per final state: the overview's
    /// throughput and failures.
    pub async fn finished_since(&self, since: i64) -> Result<Vec<(TaskState, i64)>> {
        let stmt = Query::select()
            .column(Tasks::State)
            .expr(Expr::col(Tasks::Id).count())
            .from(Tasks::Table)
            .and_where(Expr::col(Tasks::FinishedAt).gte(since))
            .group_by_col(Tasks::State)
            .to_owned();
        let rows: Vec<(String, i64)> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter()
            .map(|(state, n)| {
                let state = state.parse::<TaskState>().map_err(|e| Error::Corrupt {
                    what: "tasks.state",
                    message: e.to_string(),
                })?;
                Ok((state, n))
            })
            .collect()
    }

    /// Queued tasks per queue, deepest first: the overview's queue depth.
    pub async fn queued_by_queue(&self) -> Result<Vec<(String, i64)>> {
        let stmt = Query::select()
            .column(Tasks::Queue)
            .expr(Expr::col(Tasks::Id).count())
            .from(Tasks::Table)
            .and_where(state_is(TaskState::Queued))
            .group_by_col(Tasks::Queue)
            .to_owned();
        let mut rows: Vec<(String, i64)> = self.pool.fetch_all(&stmt).await?;
        rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(rows)
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

    /// Cancels a task: a queued or waiting one at once, a running one by asking its worker (which
    /// kills the gate's process group and marks the task canceled). Finished tasks are refused.
    /// Its unfinished descendants (sub-agents) are canceled in the same transaction.
    pub async fn cancel_task(&self, id: TaskId) -> Result<CancelOutcome> {
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

    /// The children of a task (sub-agents it spawned), oldest first.
    pub async fn children(&self, parent: TaskId) -> Result<Vec<Task>> {
        let mut stmt = select_tasks();
        stmt.and_where(Expr::col(Tasks::ParentId).eq(parent.0))
            .order_by(Tasks::Id, Order::Asc);
        let rows: Vec<TaskRow> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter().map(Task::try_from).collect()
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
