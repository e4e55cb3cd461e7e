//! Changing automations the way every front end must: the spec is validated against the clock
//! before anything is stored, and the next fire time is computed from now whenever the timing
//! changes. The CLI, the durable automation tools and the API all go through here, so an
//! automation made by any of them fires the same way.

use orchestrator_store::{Automation, NextFire, Store};
use orchestrator_types::{AutomationSpec, AutomationStatus};

use crate::Result;
use crate::files::validate_spec;
use crate::plan::next_fire;

/// Creates an active automation from `spec`, recorded as coming from `source`.
pub async fn create(
    store: &Store,
    spec: &AutomationSpec,
    source: &str,
    now: i64,
) -> Result<Automation> {
    validate_spec(spec)?;
    let next = next_fire(spec, now)?;
    Ok(store.create_automation(spec, source, None, next).await?)
}

/// Replaces `current`'s spec with `spec`. A new schedule, zone or jitter starts from the next slot
/// after `now`; otherwise the next fire time stays as it was.
pub async fn update(
    store: &Store,
    current: &Automation,
    spec: &AutomationSpec,
    now: i64,
) -> Result<Automation> {
    validate_spec(spec)?;
    let timing_changed = spec.schedule != current.spec.schedule
        || spec.timezone != current.spec.timezone
        || spec.jitter_secs != current.spec.jitter_secs;
    let next = if timing_changed {
        next_fire(spec, now)?
    } else {
        NextFire {
            slot_at: current.next_slot_at,
            fire_at: current.next_fire_at,
        }
    };
    Ok(store
        .update_automation(
            &current.spec.name,
            spec,
            current.source_path.as_deref(),
            next,
        )
        .await?)
}

/// Pauses or resumes the automation `name` for a person (or an agent), `by` saying through what
/// ("the command line", "the dashboard"). Resuming starts from the next slot after `now`: slots
/// that passed while it was paused are not caught up, which is what "paused" means. `note` is kept
/// beside the status until the next pause or resume; without one, the note says who decided.
/// Either way the decision stands over a schedules file's `paused` until someone changes it (see
/// `files::apply`).
pub async fn set_status(
    store: &Store,
    name: &str,
    status: AutomationStatus,
    note: Option<&str>,
    by: &str,
    now: i64,
) -> Result<Automation> {
    let current = store.automation(name).await?;
    let next = next_fire(&current.spec, now)?;
    let verb = match status {
        AutomationStatus::Paused => "paused",
        AutomationStatus::Active => "resumed",
    };
    let note = note
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{verb} from {by}"));
    Ok(store
        .set_automation_status(name, status, next, Some(&note))
        .await?)
}
