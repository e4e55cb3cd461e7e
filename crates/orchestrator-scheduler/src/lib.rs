//! Automations: cron math in real time zones, and the loop that fires each slot into the store
//! exactly once.
//!
//! `cron` is pure (a schedule and a zone in, instants out). `clock` is where time comes from, so
//! tests drive a manual clock through a simulated week. `scheduler` is the service `serve` runs:
//! each pass finds the automations that are due, decides per slot what the catch-up and overlap
//! policies say, and hands the decisions to the store, which writes each slot row together with
//! its tasks in one transaction (unique on automation and slot time, so a slot fires at most once
//! however many schedulers share the database). `files` reads declarative automations from
//! schedules/*.toml.
//!
//! Architecture Invariant: the scheduler knows nothing of workers or GitHub. It creates tasks;
//! running them is someone else's job.

mod clock;
mod cron;
mod error;
pub mod files;
pub mod manage;
mod plan;
mod scheduler;
mod view;
mod words;

pub use clock::{Clock, ManualClock, SystemClock};
pub use cron::{DEFAULT_PREVIEW_COUNT, Schedule, jitter_offset_ms, parse_timezone};
pub use error::{Error, Result};
pub use plan::{
    DEFAULT_MISFIRE_GRACE_MS, MAX_MISSED_RECORDED, next_fire, plan_due, schedule_of, slot_tasks,
};
pub use scheduler::{
    DEFAULT_BATCH, DEFAULT_ERROR_BACKOFF, DEFAULT_IDLE_POLL, FireCounts, Scheduler,
    SchedulerConfig, run_now,
};
pub use view::{AutomationView, SlotTaskView, SlotView, in_zone, next_fires};
pub use words::describe;
