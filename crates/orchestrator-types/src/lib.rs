//! The vocabulary of orchestrator: ids, task states, task and gate specs, verdicts and events.
//!
//! Architecture Invariant: this crate does no IO. It knows nothing of databases, processes or HTTP;
//! every other crate speaks in its words, so a change here is a change of the language.

mod capture;
mod error;
mod event;
mod gate;
mod id;
mod spec;
mod state;
mod time;

pub use capture::{Capture, Captured};
pub use error::{Error, Result};
pub use event::{EventKind, TaskEvent};
pub use gate::{FailureKind, GateEvidence, GateRecord, GateSummary, GitTree, Verdict};
pub use id::{ArtifactId, TaskId};
pub use spec::{GateSpec, NewTask, DEFAULT_GATE_TIMEOUT_SECS, DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE};
pub use state::TaskState;
pub use time::{format_millis, now_millis, parse_time};
