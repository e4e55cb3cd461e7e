//! The vocabulary of orchestrator: ids, task states, task and gate specs, verdicts and events.
//!
//! Architecture Invariant: this crate does no IO. It knows nothing of databases, processes or HTTP;
//! every other crate speaks in its words, so a change here is a change of the language.

mod ansi;
mod automation;
pub mod best_of;
mod boxed;
mod capture;
mod chat;
mod describe;
mod environment;
mod error;
mod event;
mod gate;
mod id;
mod log_slice;
mod notice;
pub mod placement;
mod sandbox;
mod spec;
mod state;
mod time;
mod visible;

pub use ansi::{Style, keep_colours, styled};
pub use automation::{
    AutomationSpec, AutomationStatus, CatchUp, DEFAULT_CATCH_UP_CAP, DEFAULT_CATCH_UP_WINDOW_SECS,
    MAX_JITTER_SECS, Overlap, SlotKind, SlotStatus, TaskTemplate, gates_or_commands, validate_name,
};
pub use best_of::{BEST_OF_GROUP, BestOf, BestOfPull, BudgetShare, Choose, MAX_BEST_OF};
pub use boxed::BoxFuture;
pub use capture::{Capture, Captured};
pub use chat::{
    ChatMessage, DEFAULT_API_KEY_ENV, DEFAULT_BASE_URL, ImagePart, ModelSettings, ModelSpec, Role,
    TOOL_CHOICES, ToolCallRequest, Usage,
};
pub use describe::{Described, Tone, describe, format_duration, format_relative};
pub use environment::{DEFAULT_SETUP_TIMEOUT_SECS, EnvironmentSpec, MAX_SETUP_TIMEOUT_SECS};
pub use error::{Error, Result};
pub use event::{EventKind, TaskEvent};
pub use gate::{
    Byproducts, CreatedFile, FailureKind, GateEvidence, GateRecord, GateSummary, GitTree, Verdict,
};
pub use id::{ArtifactId, TaskId};
pub use log_slice::{LogSlice, slice_after};
pub use notice::NoticeKind;
pub use placement::Placement;
pub use sandbox::SandboxMode;
pub use spec::{
    AgentOptions, AgentRole, Concurrency, DEFAULT_APPROVAL_TIMEOUT_SECS, DEFAULT_GATE_TIMEOUT_SECS,
    DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_CHILDREN, DEFAULT_MAX_TURNS, DEFAULT_QUEUE, DailyBudget,
    ForkPoint, GateSpec, MAX_CHILDREN, MAX_DEPTH, MAX_PULL_RERUNS, MAX_TURNS, MAX_WEIGHT, NewTask,
    PullTarget, RepositoryRef,
};
pub use state::TaskState;
pub use time::{format_millis, now_millis, parse_time};
pub use visible::{needs_escape, visible};
