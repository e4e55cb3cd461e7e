//! The `automation_slots` table: one row per slot an automation fired, skipped or buffered.
//!
//! Exactly once: a slot row is unique on (automation_id, slot_at), and it is inserted first in the
//! transaction that creates its tasks, with `ON CONFLICT DO NOTHING`. A scheduler whose insert finds
//! the row already there (another scheduler on the same PostgreSQL, or this one before a crash and
//! restart) does nothing more for that slot; on PostgreSQL the second insert waits for the first
//! transaction and then sees its row, so two schedulers can never both win. Because the row is
//! written before the overlap policy is looked at, the policy's effects (a cancel of the previous
//! run, the new tasks) happen only in the transaction that owns the slot.

use crate::automations::Automations;
use crate::exec::Tx;
use crate::tasks::{TaskOrigin, Tasks, cancel_task_tx, insert_tasks};
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{
    AutomationStatus, NewTask, Overlap, SlotKind, SlotStatus, TaskId, TaskState,
};
use sea_query::{Expr, ExprTrait, Iden, OnConflict, Order, Query};
use serde::Serialize;

#[derive(Iden, Clone, Copy)]
pub(crate) enum AutomationSlots {
    Table,
    Id,
    AutomationId,
    SlotAt,
    Kind,
    Status,
    Reason,
    Scheduler,
    RecordedAt,
    FiredAt,
}

/// What the scheduler decided for one slot before the store looked at overlap.
#[derive(Debug, Clone)]
pub enum SlotDecision {
    /// Fire, unless the overlap policy says otherwise; `tasks` are the slot's tasks.
    Fire {
        overlap: Overlap,
        tasks: Vec<NewTask>,
    },
    /// Record the slot as skipped with this reason (a catch-up policy, for instance).
    Skip { reason: String },
}

/// One slot to record.
#[derive(Debug, Clone)]
pub struct SlotPlan {
    pub automation_id: i64,
    pub slot_at: i64,
    pub kind: SlotKind,
    pub decision: SlotDecision,
}

/// Moves an automation's next slot forward once the slots up to `through` are recorded. Applied
/// only if the stored next slot is at or before `through`, so a scheduler that lagged behind
/// another can never move it back.
#[derive(Debug, Clone, Copy)]
pub struct Advance {
    pub automation_id: i64,
    pub through: i64,
    pub next_slot_at: Option<i64>,
    pub next_fire_at: Option<i64>,
}

/// What became of one planned slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SlotResult {
    Fired {
        tasks: Vec<TaskId>,
    },
    Skipped {
        reason: String,
    },
    Buffered,
    /// The slot had been recorded before (by another scheduler, or before a restart): nothing done.
    AlreadyRecorded,
}

/// A slot as stored, with the states of the tasks it created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Slot {
    pub id: i64,
    pub automation_id: i64,
    pub slot_at: i64,
    pub kind: SlotKind,
    pub status: SlotStatus,
    pub reason: Option<String>,
    /// Who recorded it: a scheduler's id, or `cli`.
    pub scheduler: String,
    pub recorded_at: i64,
    pub fired_at: Option<i64>,
    pub tasks: Vec<(TaskId, TaskState)>,
}

type SlotRow = (
    i64,
    i64,
    i64,
    String,
    String,
    Option<String>,
    String,
    i64,
    Option<i64>,
);

const SLOT_COLUMNS: [AutomationSlots; 9] = [
    AutomationSlots::Id,
    AutomationSlots::AutomationId,
    AutomationSlots::SlotAt,
    AutomationSlots::Kind,
    AutomationSlots::Status,
    AutomationSlots::Reason,
    AutomationSlots::Scheduler,
    AutomationSlots::RecordedAt,
    AutomationSlots::FiredAt,
];

fn slot_from_row(row: SlotRow) -> Result<Slot> {
    let (id, automation_id, slot_at, kind, status, reason, scheduler, recorded_at, fired_at) = row;
    let corrupt = |what: &'static str, e: orchestrator_types::Error| Error::Corrupt {
        what,
        message: format!("slot {id}: {e}"),
    };
    Ok(Slot {
        id,
        automation_id,
        slot_at,
        kind: kind
            .parse()
            .map_err(|e| corrupt("automation_slots.kind", e))?,
        status: status
            .parse()
            .map_err(|e| corrupt("automation_slots.status", e))?,
        reason,
        scheduler,
        recorded_at,
        fired_at,
        tasks: Vec::new(),
    })
}

/// `"state" IN ('queued', 'running', 'waiting')`, inlined for the same reason as tasks.rs's
/// `state_is`.
fn unfinished() -> Expr {
    let states: Vec<String> = TaskState::ALL
        .into_iter()
        .filter(|s| !s.is_terminal())
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    Expr::cust(format!("\"state\" IN ({})", states.join(", ")))
}

/// Unfinished tasks of an automation (its previous runs that are still going), at most `limit`.
async fn unfinished_tasks(
    tx: &mut Tx,
    automation_id: i64,
    limit: Option<u64>,
) -> Result<Vec<TaskId>> {
    let mut stmt = Query::select()
        .column(Tasks::Id)
        .from(Tasks::Table)
        .and_where(Expr::col(Tasks::AutomationId).eq(automation_id))
        .and_where(unfinished())
        .order_by(Tasks::Id, Order::Asc)
        .to_owned();
    if let Some(limit) = limit {
        stmt.limit(limit);
    }
    let rows: Vec<(i64,)> = tx.fetch_all(&stmt).await?;
    Ok(rows.into_iter().map(|(id,)| TaskId(id)).collect())
}

async fn has_buffered(tx: &mut Tx, automation_id: i64, except: i64) -> Result<bool> {
    let stmt = Query::select()
        .column(AutomationSlots::Id)
        .from(AutomationSlots::Table)
        .and_where(Expr::col(AutomationSlots::AutomationId).eq(automation_id))
        .and_where(Expr::cust(format!(
            "\"status\" = '{}'",
            SlotStatus::Buffered.as_str()
        )))
        .and_where(Expr::col(AutomationSlots::Id).ne(except))
        .limit(1)
        .to_owned();
    Ok(tx.fetch_optional::<(i64,), _>(&stmt).await?.is_some())
}

async fn set_slot_status(
    tx: &mut Tx,
    slot_id: i64,
    status: SlotStatus,
    reason: Option<String>,
    fired_at: Option<i64>,
) -> Result<()> {
    let stmt = Query::update()
        .table(AutomationSlots::Table)
        .value(AutomationSlots::Status, status.as_str())
        .value(AutomationSlots::Reason, reason)
        .value(AutomationSlots::FiredAt, fired_at)
        .and_where(Expr::col(AutomationSlots::Id).eq(slot_id))
        .to_owned();
    tx.execute(&stmt).await?;
    Ok(())
}

/// Locks an automation's row until `tx` ends and returns its status (`None` if it was deleted).
///
/// Two schedulers (or a manual run, or a buffered slot firing) starting runs of one automation at
/// once would each see the other's tasks as not there yet under PostgreSQL's READ COMMITTED, and
/// both start one. The automation's row, locked first by every path that looks for unfinished
/// runs, puts them in line; the second then sees the first's tasks, and a pause committed before
/// the lock is seen too. NO KEY UPDATE, since the slot row's foreign key takes a KEY SHARE on it.
/// SQLite's single writer already puts them in line (the builder leaves the clause out there).
async fn lock_automation(tx: &mut Tx, automation_id: i64) -> Result<Option<AutomationStatus>> {
    let lock = Query::select()
        .column(Automations::Status)
        .from(Automations::Table)
        .and_where(Expr::col(Automations::Id).eq(automation_id))
        .lock(sea_query::LockType::NoKeyUpdate)
        .to_owned();
    let Some((status,)) = tx.fetch_optional::<(String,), _>(&lock).await? else {
        return Ok(None);
    };
    let status = status.parse().map_err(|e| Error::Corrupt {
        what: "automations.status",
        message: format!("automation {automation_id}: {e}"),
    })?;
    Ok(Some(status))
}

/// Records one slot in `tx`: the row first (the claim), then the overlap decision and the tasks.
async fn record_slot(
    tx: &mut Tx,
    plan: &SlotPlan,
    scheduler: &str,
    now: i64,
    placement: Option<&orchestrator_types::Placement>,
) -> Result<SlotResult> {
    let (status, reason) = match &plan.decision {
        SlotDecision::Fire { .. } => (SlotStatus::Fired, None),
        SlotDecision::Skip { reason } => (SlotStatus::Skipped, Some(reason.clone())),
    };
    // A scheduled slot fires only for an automation that is active as this transaction sees it
    // under the automation row's lock: a pause that commits while the scheduler's pass planned
    // the slot either committed before the lock (then the slot is skipped, as paused) or waits
    // for this transaction (then the slot fired before the pause, in that order). The planner's
    // read of the status is older than both. A manual run is a person's (or an agent's) explicit
    // ask, paused or not.
    let scheduled = plan.kind != SlotKind::Manual;
    let mut paused = None;
    if let SlotDecision::Fire { overlap, .. } = &plan.decision
        && (*overlap != Overlap::Allow || scheduled)
    {
        let status = lock_automation(tx, plan.automation_id).await?;
        if scheduled && status.is_some_and(|s| s != AutomationStatus::Active) {
            paused = status;
        }
    }
    let (status, reason) = match paused {
        Some(now_status) => (
            SlotStatus::Skipped,
            Some(format!(
                "the automation was {} while this slot was being fired",
                now_status.as_str()
            )),
        ),
        None => (status, reason),
    };
    let insert = Query::insert()
        .into_table(AutomationSlots::Table)
        .columns([
            AutomationSlots::AutomationId,
            AutomationSlots::SlotAt,
            AutomationSlots::Kind,
            AutomationSlots::Status,
            AutomationSlots::Reason,
            AutomationSlots::Scheduler,
            AutomationSlots::RecordedAt,
            AutomationSlots::FiredAt,
        ])
        .values([
            plan.automation_id.into(),
            plan.slot_at.into(),
            plan.kind.as_str().into(),
            status.as_str().into(),
            reason.clone().into(),
            scheduler.into(),
            now.into(),
            (status == SlotStatus::Fired).then_some(now).into(),
        ])?
        .on_conflict(
            OnConflict::columns([AutomationSlots::AutomationId, AutomationSlots::SlotAt])
                .do_nothing()
                .to_owned(),
        )
        .returning_col(AutomationSlots::Id)
        .to_owned();
    let Some((slot_id,)) = tx.fetch_optional::<(i64,), _>(&insert).await? else {
        return Ok(SlotResult::AlreadyRecorded);
    };
    let SlotDecision::Fire { overlap, tasks } = &plan.decision else {
        return Ok(SlotResult::Skipped {
            reason: reason.unwrap_or_default(),
        });
    };
    if paused.is_some() {
        return Ok(SlotResult::Skipped {
            reason: reason.unwrap_or_default(),
        });
    }
    // `allow` never looks (an automation that allows overlap may have thousands of runs going);
    // `cancel_previous` needs every one; the others only need to know and to name a few.
    let running = match overlap {
        Overlap::Allow => Vec::new(),
        Overlap::CancelPrevious => unfinished_tasks(tx, plan.automation_id, None).await?,
        Overlap::Skip | Overlap::BufferOne => {
            unfinished_tasks(tx, plan.automation_id, Some(5)).await?
        }
    };
    if !running.is_empty() {
        let ids: Vec<String> = running.iter().map(ToString::to_string).collect();
        let busy = format!(
            "overlap: task{} {} of a previous run unfinished",
            if ids.len() == 1 { "" } else { "s" },
            ids.join(", ")
        );
        match overlap {
            Overlap::Allow => {}
            Overlap::Skip => {
                let reason = format!("{busy} (policy skip)");
                set_slot_status(tx, slot_id, SlotStatus::Skipped, Some(reason.clone()), None)
                    .await?;
                return Ok(SlotResult::Skipped { reason });
            }
            Overlap::BufferOne => {
                if has_buffered(tx, plan.automation_id, slot_id).await? {
                    let reason =
                        format!("{busy} and a slot is already buffered (policy buffer_one)");
                    set_slot_status(tx, slot_id, SlotStatus::Skipped, Some(reason.clone()), None)
                        .await?;
                    return Ok(SlotResult::Skipped { reason });
                }
                set_slot_status(tx, slot_id, SlotStatus::Buffered, Some(busy), None).await?;
                return Ok(SlotResult::Buffered);
            }
            Overlap::CancelPrevious => {
                for id in running {
                    cancel_task_tx(tx, id, now).await?;
                }
            }
        }
    }
    let origin = TaskOrigin {
        automation_id: plan.automation_id,
        slot_at: plan.slot_at,
    };
    let ids = insert_tasks(tx, tasks, now, Some(origin), placement).await?;
    Ok(SlotResult::Fired { tasks: ids })
}

impl Store {
    /// Records slots and moves automations forward, all in one transaction: each slot row with its
    /// tasks (and their `created` events), or with the reason it was skipped. Slots recorded
    /// before are reported as `AlreadyRecorded` and left alone. Results are in the order of `plans`.
    pub fn fire_slots<'a>(
        &'a self,
        plans: &'a [SlotPlan],
        advances: &'a [Advance],
        scheduler: &'a str,
        now: i64,
    ) -> BoxFuture<'a, Result<Vec<SlotResult>>> {
        Box::pin(self.fire_slots_unboxed(plans, advances, scheduler, now))
    }

    async fn fire_slots_unboxed(
        &self,
        plans: &[SlotPlan],
        advances: &[Advance],
        scheduler: &str,
        now: i64,
    ) -> Result<Vec<SlotResult>> {
        for plan in plans {
            if let SlotDecision::Fire { tasks, .. } = &plan.decision {
                for task in tasks {
                    task.validate()?;
                }
            }
        }
        let mut tx = self.pool.begin().await?;
        // A manual run an agent asked for is fenced by its task's lease (see `Store::fenced`).
        self.check_fence(&mut tx, now).await?;
        let mut results = Vec::with_capacity(plans.len());
        for plan in plans {
            results.push(record_slot(&mut tx, plan, scheduler, now, self.placement()).await?);
        }
        for advance in advances {
            let stmt = Query::update()
                .table(Automations::Table)
                .value(Automations::NextSlotAt, advance.next_slot_at)
                .value(Automations::NextFireAt, advance.next_fire_at)
                .value(Automations::UpdatedAt, now)
                .and_where(Expr::col(Automations::Id).eq(advance.automation_id))
                .and_where(Expr::col(Automations::NextSlotAt).lte(advance.through))
                .to_owned();
            tx.execute(&stmt).await?;
        }
        let fired = results
            .iter()
            .any(|r| matches!(r, SlotResult::Fired { tasks } if !tasks.is_empty()));
        if fired {
            tx.notify_task_available().await?;
        }
        tx.commit().await?;
        if fired {
            self.wake.wake();
        }
        Ok(results)
    }

    /// Fires a buffered slot once its automation has no unfinished task left. Returns `None` when
    /// it must wait longer, when another scheduler fired it first, or when its automation is no
    /// longer active (the slot is then recorded as skipped). Without `tasks` (the caller could
    /// not build them: it saw the automation paused, or its schedule unreadable) it fires nothing,
    /// even if the automation was resumed meanwhile, and only settles a paused automation's slot.
    pub fn fire_buffered<'a>(
        &'a self,
        slot_id: i64,
        tasks: &'a [NewTask],
        now: i64,
    ) -> BoxFuture<'a, Result<Option<Vec<TaskId>>>> {
        Box::pin(self.fire_buffered_unboxed(slot_id, tasks, now))
    }

    async fn fire_buffered_unboxed(
        &self,
        slot_id: i64,
        tasks: &[NewTask],
        now: i64,
    ) -> Result<Option<Vec<TaskId>>> {
        for task in tasks {
            task.validate()?;
        }
        let mut tx = self.pool.begin().await?;
        let stmt = Query::select()
            .columns(SLOT_COLUMNS)
            .from(AutomationSlots::Table)
            .and_where(Expr::col(AutomationSlots::Id).eq(slot_id))
            .to_owned();
        let Some(row) = tx.fetch_optional::<SlotRow, _>(&stmt).await? else {
            tx.rollback().await?;
            return Ok(None);
        };
        let slot = slot_from_row(row)?;
        if slot.status != SlotStatus::Buffered {
            tx.rollback().await?;
            return Ok(None);
        }
        // Locked before looking for unfinished runs, as a new slot of the same automation does:
        // otherwise both could find none and start one each. A slot buffered before its
        // automation was paused does not fire: paused means no new run, and a resume does not
        // catch up what passed meanwhile either.
        let status = lock_automation(&mut tx, slot.automation_id).await?;
        if status != Some(AutomationStatus::Active) {
            let reason = "the automation was paused before its previous run finished".to_owned();
            let skip = Query::update()
                .table(AutomationSlots::Table)
                .value(AutomationSlots::Status, SlotStatus::Skipped.as_str())
                .value(AutomationSlots::Reason, reason)
                .and_where(Expr::col(AutomationSlots::Id).eq(slot_id))
                .and_where(Expr::cust(format!(
                    "\"status\" = '{}'",
                    SlotStatus::Buffered.as_str()
                )))
                .to_owned();
            tx.execute(&skip).await?;
            tx.commit().await?;
            return Ok(None);
        }
        if tasks.is_empty()
            || !unfinished_tasks(&mut tx, slot.automation_id, Some(1))
                .await?
                .is_empty()
        {
            // The automation's row is let go now, not when the connection is next used.
            tx.rollback().await?;
            return Ok(None);
        }
        // The status check and this update are one guarded step: a second scheduler's update finds
        // no buffered row and its transaction creates nothing.
        let update = Query::update()
            .table(AutomationSlots::Table)
            .value(AutomationSlots::Status, SlotStatus::Fired.as_str())
            .value(AutomationSlots::FiredAt, now)
            .and_where(Expr::col(AutomationSlots::Id).eq(slot_id))
            .and_where(Expr::cust(format!(
                "\"status\" = '{}'",
                SlotStatus::Buffered.as_str()
            )))
            .to_owned();
        if tx.execute(&update).await? == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        let origin = TaskOrigin {
            automation_id: slot.automation_id,
            slot_at: slot.slot_at,
        };
        let ids = insert_tasks(&mut tx, tasks, now, Some(origin), self.placement()).await?;
        tx.notify_task_available().await?;
        tx.commit().await?;
        self.wake.wake();
        Ok(Some(ids))
    }

    /// Buffered slots, by automation. The scheduler asks every pass, so this must cost nothing
    /// when there are none: ordering by the partial index's column lets SQLite read only that
    /// index (ordering by `id` alone made it scan every slot ever recorded).
    pub fn buffered_slots<'a>(&'a self, limit: u64) -> BoxFuture<'a, Result<Vec<Slot>>> {
        Box::pin(self.buffered_slots_unboxed(limit))
    }

    async fn buffered_slots_unboxed(&self, limit: u64) -> Result<Vec<Slot>> {
        let stmt = Query::select()
            .columns(SLOT_COLUMNS)
            .from(AutomationSlots::Table)
            .and_where(Expr::cust(format!(
                "\"status\" = '{}'",
                SlotStatus::Buffered.as_str()
            )))
            .order_by(AutomationSlots::AutomationId, Order::Asc)
            .order_by(AutomationSlots::Id, Order::Asc)
            .limit(limit)
            .to_owned();
        let rows: Vec<SlotRow> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter().map(slot_from_row).collect()
    }

    /// An automation's slots, newest first, with the states of their tasks.
    pub fn slots<'a>(&'a self, automation_id: i64, limit: u64) -> BoxFuture<'a, Result<Vec<Slot>>> {
        Box::pin(self.slots_unboxed(automation_id, limit))
    }

    async fn slots_unboxed(&self, automation_id: i64, limit: u64) -> Result<Vec<Slot>> {
        let stmt = Query::select()
            .columns(SLOT_COLUMNS)
            .from(AutomationSlots::Table)
            .and_where(Expr::col(AutomationSlots::AutomationId).eq(automation_id))
            .order_by(AutomationSlots::SlotAt, Order::Desc)
            .order_by(AutomationSlots::Id, Order::Desc)
            .limit(limit)
            .to_owned();
        let rows: Vec<SlotRow> = self.pool.fetch_all(&stmt).await?;
        let mut slots: Vec<Slot> = rows.into_iter().map(slot_from_row).collect::<Result<_>>()?;
        if let (Some(oldest), Some(newest)) = (slots.last(), slots.first()) {
            let tasks = Query::select()
                .columns([Tasks::Id, Tasks::SlotAt, Tasks::State])
                .from(Tasks::Table)
                .and_where(Expr::col(Tasks::AutomationId).eq(automation_id))
                .and_where(Expr::col(Tasks::SlotAt).gte(oldest.slot_at))
                .and_where(Expr::col(Tasks::SlotAt).lte(newest.slot_at))
                .order_by(Tasks::Id, Order::Asc)
                .to_owned();
            let rows: Vec<(i64, i64, String)> = self.pool.fetch_all(&tasks).await?;
            for (id, slot_at, state) in rows {
                let state = state.parse::<TaskState>().map_err(|e| Error::Corrupt {
                    what: "tasks.state",
                    message: format!("task {id}: {e}"),
                })?;
                if let Some(slot) = slots.iter_mut().find(|s| s.slot_at == slot_at) {
                    slot.tasks.push((TaskId(id), state));
                }
            }
        }
        Ok(slots)
    }

    /// Number of slots recorded for an automation (all statuses).
    pub fn count_slots<'a>(&'a self, automation_id: i64) -> BoxFuture<'a, Result<i64>> {
        Box::pin(self.count_slots_unboxed(automation_id))
    }

    async fn count_slots_unboxed(&self, automation_id: i64) -> Result<i64> {
        let stmt = Query::select()
            .expr(Expr::col(AutomationSlots::Id).count())
            .from(AutomationSlots::Table)
            .and_where(Expr::col(AutomationSlots::AutomationId).eq(automation_id))
            .to_owned();
        Ok(self
            .pool
            .fetch_optional::<(i64,), _>(&stmt)
            .await?
            .map(|(n,)| n)
            .unwrap_or(0))
    }
}
