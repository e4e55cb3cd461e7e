//! The `tasks` table: its columns, the row and the `Task` it reads as, and what the other
//! modules share (the state predicate, the event counter, the read that holds a row). Creation
//! and placement are in `create`, the reads, lists and pages in `read`, cancel and retry in
//! `cancel`. Claims, heartbeats, completion and rescue, everything that goes through a lease, live
//! in leases.rs (the claims in `leases/claim.rs`).
//!
//! Every state change appends its event to `task_events` in the same transaction, numbered from the
//! task's `event_seq` counter: the counter's row lock (PostgreSQL) or the write lock (SQLite) makes the
//! numbers gap-free and unique, and an event can never describe a change that did not commit.

use crate::events::{EventInsert, insert_events};
use crate::exec::{Pool, Tx};
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
    /// The key whose tasks take turns with other keys' (see tasks/fair.rs).
    FairKey,
    /// The task's place in its queue and priority among the keys' turns (see tasks/fair.rs).
    FairVt,
    /// The key of the daily token budget the task spends from (see budgets.rs).
    BudgetKey,
    SiblingOf,
}

pub(crate) const COLUMNS: [Tasks; 25] = [
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
    Tasks::FairKey,
];

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
    fair_key: String,
}

from_row!(TaskRow {
    id,
    title,
    prompt,
    spec,
    workspace,
    state,
    queue,
    priority,
    attempt,
    max_attempts,
    run_after,
    epoch,
    lease_owner,
    lease_expires_at,
    cancel_requested,
    event_seq,
    last_error,
    created_at,
    updated_at,
    started_at,
    finished_at,
    automation_id,
    slot_at,
    parent_id,
    fair_key
});

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
    /// The pull request the task works on, when it names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull: Option<orchestrator_types::PullTarget>,
    /// The issue or pull request whose progress comment follows the task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_on: Option<String>,
    /// Its concurrency key and how many tasks of the key may run at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<orchestrator_types::Concurrency>,
    /// The daily token budget it spends from, with the other tasks of the budget's key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<orchestrator_types::DailyBudget>,
    /// The key it takes turns under among queued tasks of its priority (see tasks/fair.rs);
    /// empty for the shared key of tasks with none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fair_key: String,
    /// Its key's share of the turns, when it weighs more than 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// The siblings that try its agent, when it is a best-of-N task's lead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_of: Option<Box<orchestrator_types::BestOf>>,
    /// Which of its parent's siblings it is (from 1), when it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sibling: Option<u32>,
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
            pull: spec.pull,
            progress_on: spec.progress_on,
            concurrency: spec.concurrency,
            budget: spec.budget,
            fair_key: row.fair_key,
            weight: spec.weight,
            best_of: spec.best_of,
            sibling: spec.sibling,
        })
    }
}

mod cancel;
mod create;
mod fair;
mod read;
mod titles;

pub use cancel::CancelOutcome;
pub(crate) use cancel::cancel_task_tx;
#[cfg(test)]
pub(crate) use create::created_data;
pub(crate) use create::{TaskOrigin, insert_task, insert_tasks};
pub use read::{HourOfEnds, HourOfWaits, TaskFilter, TaskPage};
pub use titles::{TRIGRAM_INDEX_SQL, TitleIndex, Trigrams};

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
