//! The cases of the conformance suite, by concept. Each takes a fresh, migrated store.

use orchestrator_store::{
    CancelOutcome, Completion, CompletionResult, Error, GateRun, Lease, Outcome, Store,
    StoreOptions, TaskFilter,
};
use orchestrator_test_support::TestStore;
use orchestrator_types::{
    Captured, EventKind, GateEvidence, GateSummary, GitTree, NewTask, TaskId, TaskState, Verdict,
    now_millis,
};
use serde_json::json;
use std::collections::HashSet;

mod agent;
mod approvals;
mod automations;
mod best_of;
mod changes;
mod checkpoints;
mod flow;
mod github;
mod leases;
mod live_logs;
mod notifications;
mod placement;
mod records;
mod tasks;

pub use agent::*;
pub use approvals::*;
pub use automations::*;
pub use best_of::*;
pub use changes::*;
pub use checkpoints::*;
pub use flow::*;
pub use github::*;
pub use leases::*;
pub use live_logs::*;
pub use notifications::*;
pub use placement::*;
pub use records::*;
pub use tasks::*;

const LEASE: i64 = 30_000;

fn queues() -> Vec<String> {
    vec!["default".to_owned()]
}

/// The lease a claim gave on task `id`.
fn lease_of(claimed: &[(orchestrator_store::Task, Lease)], id: TaskId) -> Lease {
    claimed.iter().find(|(t, _)| t.id == id).unwrap().1.clone()
}

async fn kinds(store: &Store, id: TaskId) -> Vec<String> {
    store
        .events(id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

fn evidence(verdict: Verdict) -> GateEvidence {
    GateEvidence {
        verdict,
        failure_kind: None,
        exit_code: Some(0),
        signal: None,
        duration_ms: 12,
        summary: GateSummary {
            text: "ok".into(),
            ..Default::default()
        },
        git: None,
        byproducts: Default::default(),
        started_at: now_millis(),
        finished_at: now_millis(),
    }
}
