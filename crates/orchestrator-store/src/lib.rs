//! All of orchestrator's SQL, behind one API that works the same on SQLite and PostgreSQL.
//!
//! Queries are built with sea-query and run with sqlx through [`exec`], one module per table. Every
//! write that a worker makes on behalf of an attempt names the attempt's lease epoch, and the store
//! refuses it when the epoch is no longer current: that is what makes a stale worker harmless.
//!
//! Each public call returns its body boxed (`BoxFuture`, made here in a private `*_unboxed`
//! `async fn`): the store's queries are compiled once, in this crate, instead of again in every
//! crate that awaits them (orchestrator_types' `boxed` module says why).
//!
//! Architecture Invariant: the store knows nothing of processes, models, tools or GitHub's API. It
//! keeps rows (GitHub's deliveries and PR attempts among them) and enforces the state machine's
//! fences; deciding what to do with a task, or with a delivery, is the caller's job.

/// Reads a struct from a row by column name, on both backends: what sqlx's `FromRow` derive does,
/// without building sqlx's macros (and with them a second sqlx and a second SQLite, compiled for
/// the compiler). `flatten` fields are structs read from the same row. The struct literal names
/// every field, so a field added to the struct and not here does not compile.
macro_rules! from_row {
    ($name:ident { $($field:ident),* $(,)? } $(flatten { $($flat:ident),* $(,)? })?) => {
        impl<'r> ::sqlx::FromRow<'r, ::sqlx::sqlite::SqliteRow> for $name {
            fn from_row(row: &'r ::sqlx::sqlite::SqliteRow) -> ::sqlx::Result<Self> {
                use ::sqlx::Row as _;
                Ok($name {
                    $($field: row.try_get(stringify!($field))?,)*
                    $($($flat: ::sqlx::FromRow::from_row(row)?,)*)?
                })
            }
        }
        impl<'r> ::sqlx::FromRow<'r, ::sqlx::postgres::PgRow> for $name {
            fn from_row(row: &'r ::sqlx::postgres::PgRow) -> ::sqlx::Result<Self> {
                use ::sqlx::Row as _;
                Ok($name {
                    $($field: row.try_get(stringify!($field))?,)*
                    $($($flat: ::sqlx::FromRow::from_row(row)?,)*)?
                })
            }
        }
    };
}

mod approvals;
mod artifacts;
mod attempts;
mod automations;
mod batch_rows;
mod best_of;
mod budgets;
mod changes;
mod checklist;
mod checkpoints;
mod connect;
mod conversation;
mod deliveries;
mod error;
#[cfg(test)]
mod event_text_tests;
mod events;
mod exec;
mod fenced;
mod flow_slots;
mod gates;
mod identity;
mod joins;
mod lease_line;
mod leases;
mod live_logs;
mod migrate;
mod model_slots;
mod notifications;
mod pulls;
mod shell_jobs;
mod slots;
mod sqlite_sql;
mod tasks;
mod wake;
mod workers;

pub use approvals::{
    Approval, ApprovalDecision, ApprovalFilter, NewApproval, approval_kind, approval_status,
};
pub use artifacts::{Artifact, ArtifactMeta, DEFAULT_ARTIFACT_CAP};
pub use attempts::{Attempt, NewAttempt};
pub use automations::{Automation, NextFire, SOURCE_AGENT, SOURCE_CLI, SOURCE_FILE};
pub use best_of::{BestOfBoard, SiblingColumn, changed_lines};
pub use budgets::{BudgetWait, day_start};
pub use changes::{AheadMark, ChangeCursor, OpenTransaction};
pub use checklist::ChecklistItem;
pub use checkpoints::{
    Checkpoint, CheckpointSave, DEFAULT_CHECKPOINT_CAP, NewCheckpoint, patch_sha256,
};
pub use connect::{Backend, SqliteSync, Store, StoreOptions, redact_url};
pub use conversation::{
    NewMessage, SavedMessage, ToolCallEnd, ToolCallRecord, ToolCallStart, call_status,
};
pub use deliveries::{
    Accepted, Delivery, DeliveryClaim, DeliveryInfo, DueDelivery, delivery_source, delivery_status,
};
pub use error::{Error, Result};
pub use flow_slots::{FlowTurn, FlowWait};
pub use gates::GateRun;
pub use leases::{Completion, CompletionResult, Lease, LeaseStatus, Outcome, RescueCounts};
pub use live_logs::{
    LiveLog, LiveLogHandle, LiveLogStart, Log, LogKind, WORKER_STOPPED, live_source, log_state,
};
pub use model_slots::{
    ModelServerState, ModelWait, SLOT_HELD_MS, ServerLimits, SlotEnd, SlotRequest, SlotTry,
    WaitCause,
};
pub use notifications::{NewNotice, NewNotification, Notice, Notification, notification_status};
pub use pulls::{PullChain, PullTask, pull_key, pull_role};
pub use shell_jobs::{ShellJob, job_status};
pub use slots::{Advance, Slot, SlotDecision, SlotPlan, SlotResult};
pub use tasks::{
    CancelOutcome, HourOfEnds, HourOfWaits, TRIGRAM_INDEX_SQL, Task, TaskFilter, TaskPage,
    TitleIndex, Trigrams,
};
pub use wake::Wakeup;
pub use workers::{LIVE_WITHIN_MS, WorkerRow, unmet};
