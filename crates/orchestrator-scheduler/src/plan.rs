//! What to do with an automation's due slots: the catch-up policy applied to a list of instants.
//! Pure: an automation, its schedule and "now" in; slot plans and the automation's next slot out.
//! The overlap policy is applied by the store, inside the transaction that owns the slot.

use crate::{Result, Schedule, jitter_offset_ms};
use orchestrator_store::{Advance, Automation, NextFire, SlotDecision, SlotPlan};
use orchestrator_types::{AutomationSpec, CatchUp, NewTask, SlotKind, format_millis};
use std::collections::VecDeque;

/// A slot whose fire time passed less than this long ago is on time and always fires; older ones
/// were missed (the daemon was down) and the catch-up policy decides.
pub const DEFAULT_MISFIRE_GRACE_MS: i64 = 60_000;
/// Most missed slots recorded as skipped after a downtime. A per-second schedule that was down for
/// three days has a quarter of a million; keeping the most recent ones tells the story without
/// flooding the table.
pub const MAX_MISSED_RECORDED: usize = 100;

/// The schedule of a spec, parsed.
pub fn schedule_of(spec: &AutomationSpec) -> Result<Schedule> {
    Schedule::parse(&spec.schedule, &spec.timezone)
}

/// The first slot strictly after `after`, and when it fires (with the stable jitter).
pub fn next_fire(spec: &AutomationSpec, after: i64) -> Result<NextFire> {
    let schedule = schedule_of(spec)?;
    let slot = schedule.next_after(after);
    let jitter = jitter_offset_ms(&spec.name, spec.jitter_secs);
    Ok(NextFire {
        slot_at: slot,
        fire_at: slot.map(|s| s + jitter),
    })
}

/// The tasks one slot creates: one per workspace (or one on the template's repository), titled
/// with the slot's local time.
pub fn slot_tasks(spec: &AutomationSpec, schedule: &Schedule, slot_at: i64) -> Vec<NewTask> {
    let label = schedule.local_label(slot_at);
    spec.slot_tasks(&label)
}

/// The slots of `automation` due at `now`, each with its decision, and how to move the automation
/// forward past them. `None` when nothing is due.
pub fn plan_due(
    automation: &Automation,
    schedule: &Schedule,
    now: i64,
    grace_ms: i64,
) -> Option<(Vec<SlotPlan>, Advance)> {
    let spec = &automation.spec;
    // The stored offset is the one `due_automations` selected on, so "due" here and there agree
    // even if the jitter rule ever changes; a fresh automation row always has both.
    let jitter = match (automation.next_slot_at, automation.next_fire_at) {
        (Some(slot), Some(fire)) => fire - slot,
        _ => jitter_offset_ms(&spec.name, spec.jitter_secs),
    };
    let keep = MAX_MISSED_RECORDED.max(spec.catch_up_cap as usize) + 1;
    let mut due: VecDeque<i64> = VecDeque::new();
    let mut dropped = 0u64;
    let mut cursor = automation.next_slot_at;
    while let Some(slot) = cursor {
        if slot + jitter > now {
            break;
        }
        due.push_back(slot);
        if due.len() > keep {
            due.pop_front();
            dropped += 1;
        }
        cursor = schedule.next_after(slot);
    }
    let through = *due.back()?;
    if dropped > 0 {
        tracing::warn!(
            automation = %spec.name,
            dropped,
            "missed slots older than the most recent {keep} are not recorded"
        );
    }
    let on_time = |slot: i64| now - (slot + jitter) <= grace_ms;
    let missed: Vec<i64> = due.iter().copied().filter(|s| !on_time(*s)).collect();
    let any_on_time = due.iter().any(|s| on_time(*s));
    let window_start = now - (spec.catch_up_window_secs as i64).saturating_mul(1000);
    // Missed slots that `all` fires: inside the window, the most recent `cap` of them.
    let in_window: Vec<i64> = missed
        .iter()
        .copied()
        .filter(|s| *s >= window_start)
        .collect();
    let cap = spec.catch_up_cap as usize;
    let fired_missed: Vec<i64> = in_window[in_window.len().saturating_sub(cap)..].to_vec();
    let latest_missed = missed.last().copied();

    let plans = due
        .iter()
        .map(|&slot| {
            let skip = |reason: String| SlotDecision::Skip { reason };
            let decision = if on_time(slot) {
                None
            } else {
                match spec.catch_up {
                    CatchUp::Skip => Some(skip("missed while no scheduler ran (catch-up skip)".into())),
                    CatchUp::Latest if any_on_time => Some(skip(
                        "missed while no scheduler ran; a later slot fired on time (catch-up latest)".into(),
                    )),
                    CatchUp::Latest if Some(slot) != latest_missed => Some(skip(format!(
                        "missed while no scheduler ran; only the latest missed slot ({}) fires (catch-up latest)",
                        latest_missed.map(format_millis).unwrap_or_default()
                    ))),
                    CatchUp::Latest => None,
                    CatchUp::All if slot < window_start => Some(skip(format!(
                        "missed more than {}s ago, outside the catch-up window (catch-up all)",
                        spec.catch_up_window_secs
                    ))),
                    CatchUp::All if !fired_missed.contains(&slot) => Some(skip(format!(
                        "missed; more than the cap of {cap} missed slots (catch-up all)"
                    ))),
                    CatchUp::All => None,
                }
            };
            SlotPlan {
                automation_id: automation.id,
                slot_at: slot,
                kind: SlotKind::Scheduled,
                decision: decision.unwrap_or_else(|| SlotDecision::Fire {
                    overlap: spec.overlap,
                    tasks: slot_tasks(spec, schedule, slot),
                }),
            }
        })
        .collect();
    let advance = Advance {
        automation_id: automation.id,
        through,
        next_slot_at: cursor,
        next_fire_at: cursor.map(|s| s + jitter),
    };
    Some((plans, advance))
}

#[cfg(test)]
mod tests {
    use super::*;
    use orchestrator_types::{AutomationStatus, GateSpec};

    const HOUR: i64 = 3_600_000;
    const T0: i64 = 1_800_000_000_000 - 1_800_000_000_000 % HOUR;

    fn automation(catch_up: CatchUp, cap: u64) -> (Automation, Schedule) {
        let mut spec = AutomationSpec::new("hourly", "0 * * * *");
        spec.workspaces.push("/tmp".into());
        spec.template.gates.push(GateSpec::from_command("true"));
        spec.catch_up = catch_up;
        spec.catch_up_cap = cap;
        let schedule = schedule_of(&spec).unwrap();
        (
            Automation {
                id: 1,
                spec,
                status: AutomationStatus::Active,
                source: "cli".into(),
                source_path: None,
                next_slot_at: Some(T0),
                next_fire_at: Some(T0),
                created_at: 0,
                updated_at: 0,
                last_error: None,
                status_note: None,
            },
            schedule,
        )
    }

    fn fired(plans: &[SlotPlan]) -> Vec<i64> {
        plans
            .iter()
            .filter(|p| matches!(p.decision, SlotDecision::Fire { .. }))
            .map(|p| (p.slot_at - T0) / HOUR)
            .collect()
    }

    #[test]
    fn three_days_down_then_catch_up() {
        // Down from just before T0 for three days; back at T0 + 72h + 30min.
        let now = T0 + 72 * HOUR + HOUR / 2;
        let cases: &[(CatchUp, u64, &[i64])] = &[
            (CatchUp::Latest, 10, &[72]),
            (CatchUp::Skip, 10, &[]),
            (CatchUp::All, 5, &[68, 69, 70, 71, 72]),
            // The default window is a day: never more than 24 hourly slots, whatever the cap.
            (CatchUp::All, 1000, &(49..=72).collect::<Vec<_>>()),
        ];
        for (policy, cap, expect) in cases {
            let (a, s) = automation(*policy, *cap);
            let (plans, advance) = plan_due(&a, &s, now, DEFAULT_MISFIRE_GRACE_MS).unwrap();
            assert_eq!(&fired(&plans), expect, "{policy} cap {cap}");
            assert_eq!(plans.len(), 73, "every slot is recorded, fired or skipped");
            assert_eq!(advance.next_slot_at, Some(T0 + 73 * HOUR));
            assert_eq!(advance.through, T0 + 72 * HOUR);
        }
    }

    #[test]
    fn on_time_slots_always_fire_and_nothing_is_due_early() {
        let (a, s) = automation(CatchUp::Skip, 10);
        assert!(plan_due(&a, &s, T0 - 1, DEFAULT_MISFIRE_GRACE_MS).is_none());
        let (plans, _) = plan_due(&a, &s, T0 + 5, DEFAULT_MISFIRE_GRACE_MS).unwrap();
        assert_eq!(fired(&plans), vec![0]);
    }

    #[test]
    fn jitter_delays_the_fire_not_the_slot() {
        let (mut a, s) = automation(CatchUp::Latest, 10);
        a.spec.jitter_secs = 600;
        let jitter = jitter_offset_ms("hourly", 600);
        a.next_fire_at = Some(T0 + jitter);
        assert!(jitter > 0);
        assert!(plan_due(&a, &s, T0 + jitter - 1, DEFAULT_MISFIRE_GRACE_MS).is_none());
        let (plans, advance) = plan_due(&a, &s, T0 + jitter, DEFAULT_MISFIRE_GRACE_MS).unwrap();
        assert_eq!(plans[0].slot_at, T0);
        assert_eq!(advance.next_fire_at, Some(T0 + HOUR + jitter));
    }
}
