//! Claims tasks from the store and runs them: verification gates with evidence, leases kept alive by
//! heartbeats, group-committed completions, and the rescuer that takes back tasks whose worker
//! vanished.
//!
//! Architecture Invariant: the worker never writes SQL; every state change goes through the store and
//! carries the attempt's epoch, so a stale worker's writes are refused there.

pub mod agent;
pub mod attempts;
pub mod backoff;
pub mod containment;
mod error;
pub mod feedback;
pub mod gate;
pub mod github;
pub mod metrics;
pub mod model;
pub mod pool;
pub mod pulls;
pub mod rescuer;
pub mod runner;
pub mod workspace;

pub use agent::{AgentConfig, LiveDelta};
pub use backoff::Backoff;
pub use error::{Error, Result};
pub use metrics::Metrics;
pub use orchestrator_sandbox::{Sandbox, SandboxSettings};
pub use pool::{PoolConfig, StartHook, WorkerPool, new_worker_id, run_claimed};
pub use rescuer::{Rescuer, RescuerConfig};
pub use runner::{Stop, StopReason};
