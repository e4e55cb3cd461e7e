//! The scheduler service: each pass fires the slots that are due into the store.
//!
//! A pass reads the active automations whose next fire time has come (an indexed range read),
//! plans their due slots (catch-up policy, see plan.rs) and hands a batch of plans to the store,
//! which writes each slot row and its tasks in one transaction and moves the automations forward.
//! Then it looks at buffered slots (overlap `buffer_one`) whose previous run has finished.
//!
//! Any number of schedulers may share one database: a slot row is unique on (automation, slot
//! time), so the second scheduler to reach a slot finds it recorded and does nothing. A crash
//! between two passes loses nothing either: the automation's next slot only moves forward in the
//! transaction that recorded the slots before it, so after a restart the same slots are planned
//! again and either find their rows (already fired) or fire now.

use crate::clock::Clock;
use crate::plan::{DEFAULT_MISFIRE_GRACE_MS, plan_due, schedule_of, slot_tasks};
use crate::{Error, Result};
use orchestrator_store::{Advance, Automation, SlotDecision, SlotPlan, SlotResult, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{AutomationStatus, SlotKind};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Most automations planned and written per transaction. Large enough that 100,000 slots due at
/// the same instant take a few hundred commits, small enough that one transaction stays short.
pub const DEFAULT_BATCH: u64 = 500;
/// Longest sleep between passes. Another process (the CLI, another `serve`) may create or change
/// an automation without a way to wake this one, so the scheduler looks again at least this often;
/// each look is one indexed `MIN(next_fire_at)`.
pub const DEFAULT_IDLE_POLL: Duration = Duration::from_secs(1);
/// How long to wait after a failed pass before trying again.
pub const DEFAULT_ERROR_BACKOFF: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Written on each slot this scheduler records, so the history says who fired it.
    pub id: String,
    pub batch: u64,
    pub idle_poll: Duration,
    /// See [`DEFAULT_MISFIRE_GRACE_MS`].
    pub misfire_grace: Duration,
}

impl SchedulerConfig {
    pub fn new(id: impl Into<String>) -> Self {
        SchedulerConfig {
            id: id.into(),
            batch: DEFAULT_BATCH,
            idle_poll: DEFAULT_IDLE_POLL,
            misfire_grace: Duration::from_millis(DEFAULT_MISFIRE_GRACE_MS as u64),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FireCounts {
    /// Slots whose tasks this pass created.
    pub fired: u64,
    /// Slots recorded as skipped by a catch-up or overlap policy.
    pub skipped: u64,
    /// Slots now waiting for a previous run (overlap `buffer_one`).
    pub buffered: u64,
    /// Slots another scheduler (or this one before a restart) had already recorded.
    pub already_recorded: u64,
    /// Tasks created.
    pub tasks: u64,
    /// Automations parked this pass (paused with the reason in `last_error`): a schedule that
    /// cannot be read, a template that fails at fire time, or a slot the store could not write.
    /// The others still fire.
    pub broken: u64,
}

impl FireCounts {
    fn add(&mut self, result: &SlotResult) {
        match result {
            SlotResult::Fired { tasks } => {
                self.fired += 1;
                self.tasks += tasks.len() as u64;
            }
            SlotResult::Skipped { .. } => self.skipped += 1,
            SlotResult::Buffered => self.buffered += 1,
            SlotResult::AlreadyRecorded => self.already_recorded += 1,
        }
    }
}

/// The first validation error of the tasks `plans` would create.
fn invalid_task(plans: &[orchestrator_store::SlotPlan]) -> Option<String> {
    plans.iter().find_map(|plan| match &plan.decision {
        orchestrator_store::SlotDecision::Fire { tasks, .. } => tasks
            .iter()
            .find_map(|t| t.validate().err().map(|e| e.to_string())),
        orchestrator_store::SlotDecision::Skip { .. } => None,
    })
}

#[derive(Debug)]
pub struct Scheduler {
    store: Store,
    config: SchedulerConfig,
    clock: Arc<dyn Clock>,
}

impl Scheduler {
    pub fn new(store: Store, config: SchedulerConfig, clock: Arc<dyn Clock>) -> Result<Self> {
        if config.batch == 0 || config.idle_poll.is_zero() || config.id.trim().is_empty() {
            return Err(Error::Config(
                "batch and idle poll must be positive and the id non-empty".into(),
            ));
        }
        Ok(Scheduler {
            store,
            config,
            clock,
        })
    }

    /// One pass at time `now`: every due slot is recorded (fired or skipped) before it returns.
    pub async fn run_once(&self, now: i64) -> Result<FireCounts> {
        let mut counts = FireCounts::default();
        let grace = self.config.misfire_grace.as_millis() as i64;
        loop {
            let due = self.store.due_automations(now, self.config.batch).await?;
            let full = due.len() as u64 >= self.config.batch;
            let mut plans = Vec::new();
            let mut advances = Vec::new();
            let mut parked = 0;
            for automation in &due {
                match schedule_of(&automation.spec) {
                    Ok(schedule) => {
                        if let Some((p, advance)) = plan_due(automation, &schedule, now, grace) {
                            // Checked here, one automation at a time: a template that fails at fire
                            // time (a title the slot label makes too long) parks its automation
                            // with the reason, instead of failing the whole batch on every pass.
                            if let Some(error) = invalid_task(&p) {
                                let reason = format!("parked: a slot's task is invalid: {error}");
                                self.park(automation, &reason, &mut counts).await?;
                                parked += 1;
                                continue;
                            }
                            plans.extend(p);
                            advances.push(advance);
                        }
                    }
                    Err(e) => {
                        // Validated at creation, so only a newer binary's syntax or a removed zone
                        // gets here. Parked with the reason, like a broken template: left active
                        // with no next fire time it would stop without a word.
                        let reason = format!("parked: cannot read its schedule: {e}");
                        self.park(automation, &reason, &mut counts).await?;
                        parked += 1;
                    }
                }
            }
            if !advances.is_empty() {
                parked += self.fire_batch(&plans, &advances, now, &mut counts).await?;
            }
            // A full batch may hide more due automations; look again, unless this one changed
            // nothing (which would find the same batch again).
            if !full || (advances.is_empty() && parked == 0) {
                break;
            }
        }
        self.fire_buffered(now, &mut counts).await?;
        if counts.fired + counts.skipped + counts.buffered + counts.broken > 0 {
            tracing::info!(
                fired = counts.fired,
                skipped = counts.skipped,
                buffered = counts.buffered,
                tasks = counts.tasks,
                broken = counts.broken,
                "scheduler pass"
            );
        }
        Ok(counts)
    }

    /// Pauses `automation` with `reason` shown beside it, so the others keep firing and whoever
    /// looks sees why this one stopped. Resuming it (after a fix) clears the reason.
    async fn park(
        &self,
        automation: &Automation,
        reason: &str,
        counts: &mut FireCounts,
    ) -> Result<()> {
        counts.broken += 1;
        tracing::error!(automation = %automation.spec.name, %reason, "automation parked");
        self.store.park_automation(automation.id, reason).await?;
        Ok(())
    }

    /// Writes one batch of slots and advances in one transaction. When that fails, it writes them
    /// again one automation at a time, so a slot that cannot be written (a broken row, a
    /// constraint, a bug) parks only its own automation and the others fire. The common path pays
    /// nothing for this: a batch is split only after it failed. A retryable failure (the database
    /// gone, contention) is the pass's error instead: every automation would meet it, and none
    /// of them is to blame. Returns how many automations it parked.
    async fn fire_batch(
        &self,
        plans: &[SlotPlan],
        advances: &[Advance],
        now: i64,
        counts: &mut FireCounts,
    ) -> Result<u64> {
        let error = match self
            .store
            .fire_slots(plans, advances, &self.config.id, now)
            .await
        {
            Ok(results) => {
                results.iter().for_each(|r| counts.add(r));
                return Ok(0);
            }
            Err(e) => e,
        };
        tracing::warn!(%error, automations = advances.len(), "a batch of slots failed; writing its automations one at a time");
        let mut parked = 0;
        for advance in advances {
            let own: Vec<SlotPlan> = plans
                .iter()
                .filter(|p| p.automation_id == advance.automation_id)
                .cloned()
                .collect();
            let written = self
                .store
                .fire_slots(&own, std::slice::from_ref(advance), &self.config.id, now)
                .await;
            match written {
                Ok(results) => results.iter().for_each(|r| counts.add(r)),
                Err(e) if e.is_retryable() => return Err(e.into()),
                Err(e) => {
                    let automation = self.store.automation_by_id(advance.automation_id).await?;
                    let reason = format!("parked: its slot could not be recorded: {e}");
                    self.park(&automation, &reason, counts).await?;
                    parked += 1;
                }
            }
        }
        Ok(parked)
    }

    /// Fires the buffered slots whose previous run has finished. A slot that cannot fire parks its
    /// automation, as in [`Scheduler::fire_batch`], and the later ones still fire.
    async fn fire_buffered(&self, now: i64, counts: &mut FireCounts) -> Result<()> {
        for slot in self.store.buffered_slots(self.config.batch).await? {
            let mut automation = match self.store.automation_by_id(slot.automation_id).await {
                Ok(a) => a,
                Err(orchestrator_store::Error::AutomationNotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            let mut tasks = Vec::new();
            if automation.status == AutomationStatus::Active {
                match schedule_of(&automation.spec) {
                    Ok(schedule) => tasks = slot_tasks(&automation.spec, &schedule, slot.slot_at),
                    Err(e) => {
                        let reason = format!("parked: cannot read its schedule: {e}");
                        self.park(&automation, &reason, counts).await?;
                        automation.status = AutomationStatus::Paused;
                    }
                }
            }
            // Without tasks (paused, or just parked) the store only settles the slot, under the
            // automation's lock: it is skipped if the automation is still not active.
            match self.store.fire_buffered(slot.id, &tasks, now).await {
                Ok(Some(ids)) => {
                    counts.fired += 1;
                    counts.tasks += ids.len() as u64;
                }
                Ok(None) => {}
                Err(e) if e.is_retryable() => return Err(e.into()),
                Err(e) if automation.status == AutomationStatus::Active => {
                    let reason = format!("parked: its buffered slot could not fire: {e}");
                    self.park(&automation, &reason, counts).await?;
                }
                Err(error) => {
                    // Settling a paused automation's slot failed: it stays buffered and is tried
                    // again next pass; the slots after it go on.
                    tracing::warn!(slot = slot.id, %error, "cannot settle a buffered slot");
                }
            }
        }
        Ok(())
    }

    /// Passes until `shutdown`, sleeping until the next fire time (at most `idle_poll`). Store
    /// errors are logged and the next pass retries.
    pub fn run(self, shutdown: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(self.run_unboxed(shutdown))
    }

    async fn run_unboxed(self, shutdown: CancellationToken) {
        loop {
            let now = self.clock.now_millis();
            let mut sleep = self.config.idle_poll;
            match self.run_once(now).await {
                Ok(_) => match self.store.next_automation_fire().await {
                    Ok(Some(next)) => {
                        let until = (next - self.clock.now_millis()).max(0) as u64;
                        sleep = sleep.min(Duration::from_millis(until));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "scheduler cannot read the next fire time")
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "scheduler pass failed; retrying");
                    sleep = DEFAULT_ERROR_BACKOFF;
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(sleep) => {}
            }
        }
    }
}

/// Fires a manual slot of `automation` at `now` (`automation run`), honouring its overlap policy
/// unless `force`. The slot is recorded like any other, with kind `manual`.
pub async fn run_now(
    store: &Store,
    automation: &Automation,
    force: bool,
    recorder: &str,
    now: i64,
) -> Result<SlotResult> {
    let schedule = schedule_of(&automation.spec)?;
    let overlap = if force {
        orchestrator_types::Overlap::Allow
    } else {
        automation.spec.overlap
    };
    let plan = SlotPlan {
        automation_id: automation.id,
        slot_at: now,
        kind: SlotKind::Manual,
        decision: SlotDecision::Fire {
            overlap,
            tasks: slot_tasks(&automation.spec, &schedule, now),
        },
    };
    let mut results = store.fire_slots(&[plan], &[], recorder, now).await?;
    Ok(results.pop().unwrap_or(SlotResult::AlreadyRecorded))
}
