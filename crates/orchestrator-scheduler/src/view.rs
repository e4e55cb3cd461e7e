//! What an automation and its slots look like to a reader: the JSON `automation read --json`
//! prints, the durable automation tools return, and the API serves. Times are RFC 3339.

use orchestrator_store::{Automation, Slot};
use orchestrator_types::{AutomationStatus, CatchUp, GateSpec, Overlap, format_millis};
use serde::Serialize;

use crate::{DEFAULT_PREVIEW_COUNT, Result, jitter_offset_ms, schedule_of};

/// The next `count` times `automation` fires after `now` (Unix milliseconds, its jitter
/// included); none while it is paused.
pub fn next_fires(automation: &Automation, now: i64, count: usize) -> Result<Vec<i64>> {
    if automation.status == AutomationStatus::Paused {
        return Ok(Vec::new());
    }
    let schedule = schedule_of(&automation.spec)?;
    let jitter = jitter_offset_ms(&automation.spec.name, automation.spec.jitter_secs);
    Ok(schedule
        .upcoming(now, count)
        .into_iter()
        .map(|t| t + jitter)
        .collect())
}

/// An instant (Unix milliseconds) as the clock of `timezone` shows it: `2026-11-27 03:00:00 CET`.
/// An unknown zone shows UTC.
pub fn in_zone(instant: i64, timezone: &str) -> String {
    let Some(t) = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(instant) else {
        return format_millis(instant);
    };
    match crate::parse_timezone(timezone) {
        Ok(tz) => t
            .with_timezone(&tz)
            .format("%Y-%m-%d %H:%M:%S %Z")
            .to_string(),
        Err(_) => t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    }
}

/// An automation as readers see it.
#[derive(Debug, Serialize)]
pub struct AutomationView {
    pub id: i64,
    pub name: String,
    pub status: AutomationStatus,
    pub schedule: String,
    /// The schedule in plain English ("at 02:30, Monday to Friday").
    pub schedule_words: String,
    pub timezone: String,
    pub source: String,
    pub source_path: Option<String>,
    pub workspaces: Vec<String>,
    /// The repository the tasks work on, when they name no workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<orchestrator_types::RepositoryRef>,
    pub title: Option<String>,
    /// The agent's instructions, for an automation whose tasks are agent tasks.
    pub prompt: Option<String>,
    pub gates: Vec<GateSpec>,
    pub priority: i64,
    pub queue: String,
    pub max_attempts: i64,
    pub catch_up: CatchUp,
    pub catch_up_window_secs: u64,
    pub catch_up_cap: u64,
    pub overlap: Overlap,
    pub jitter_secs: u64,
    pub next_slot_at: Option<String>,
    pub next_fire_at: Option<String>,
    /// The next fire time on the automation's own clock (`2026-11-27 03:00:00 CET`).
    pub next_fire_local: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Why the scheduler parked it; `automation resume` clears it.
    pub last_error: Option<String>,
    /// What was said when it was last paused or resumed.
    pub status_note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_fires: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<Vec<SlotView>>,
}

#[derive(Debug, Serialize)]
pub struct SlotView {
    pub slot: String,
    pub kind: String,
    pub status: String,
    pub reason: Option<String>,
    pub scheduler: String,
    pub recorded_at: String,
    pub fired_at: Option<String>,
    pub tasks: Vec<SlotTaskView>,
}

#[derive(Debug, Serialize)]
pub struct SlotTaskView {
    pub id: i64,
    pub state: String,
}

impl AutomationView {
    /// The view with its next fire times after `now` (left out while paused) and `slots`, as a
    /// reader of one automation sees it.
    pub fn detailed(automation: &Automation, slots: &[Slot], now: i64) -> Result<Self> {
        let mut view = AutomationView::new(automation);
        if automation.status != AutomationStatus::Paused {
            let fires = next_fires(automation, now, DEFAULT_PREVIEW_COUNT)?;
            view.next_fires = Some(fires.into_iter().map(format_millis).collect());
        }
        view.slots = Some(slots.iter().map(SlotView::new).collect());
        Ok(view)
    }

    pub fn new(a: &Automation) -> Self {
        let spec = &a.spec;
        let paused = a.status == AutomationStatus::Paused;
        AutomationView {
            id: a.id,
            name: spec.name.clone(),
            status: a.status,
            schedule: spec.schedule.clone(),
            schedule_words: crate::describe(&spec.schedule),
            timezone: spec.timezone.clone(),
            source: a.source.clone(),
            source_path: a.source_path.clone(),
            workspaces: spec.workspaces.clone(),
            repository: spec.template.repository_ref(),
            title: spec.template.title.clone(),
            prompt: spec.template.prompt.clone(),
            gates: spec.template.gates.clone(),
            priority: spec.template.priority,
            queue: spec.template.queue.clone(),
            max_attempts: spec.template.max_attempts,
            catch_up: spec.catch_up,
            catch_up_window_secs: spec.catch_up_window_secs,
            catch_up_cap: spec.catch_up_cap,
            overlap: spec.overlap,
            jitter_secs: spec.jitter_secs,
            next_slot_at: a.next_slot_at.filter(|_| !paused).map(format_millis),
            next_fire_at: a.next_fire_at.filter(|_| !paused).map(format_millis),
            next_fire_local: a
                .next_fire_at
                .filter(|_| !paused)
                .map(|t| in_zone(t, &spec.timezone)),
            created_at: format_millis(a.created_at),
            updated_at: format_millis(a.updated_at),
            last_error: a.last_error.clone(),
            status_note: a.status_note.clone(),
            next_fires: None,
            slots: None,
        }
    }
}

impl SlotView {
    pub fn new(slot: &Slot) -> Self {
        SlotView {
            slot: format_millis(slot.slot_at),
            kind: slot.kind.to_string(),
            status: slot.status.to_string(),
            reason: slot.reason.clone(),
            scheduler: slot.scheduler.clone(),
            recorded_at: format_millis(slot.recorded_at),
            fired_at: slot.fired_at.map(format_millis),
            tasks: slot
                .tasks
                .iter()
                .map(|(id, state)| SlotTaskView {
                    id: id.0,
                    state: state.to_string(),
                })
                .collect(),
        }
    }
}
