//! The benchmarks behind DESIGN.md's "Targets" section, run by the `orchestrator-bench` binary:
//! the queue (src/queue/), the agent loop's own overhead (agent.rs), the sandbox's start-up cost
//! (sandbox.rs), compaction over a long run (context.rs), a gigabyte gate watched and not
//! (gate_output.rs), the drain of a webhook backlog against a slow GitHub (drain.rs), and the chaos
//! soak (src/soak/), which counts what random SIGKILLs of several daemons lost or repeated, and
//! the time from claim to first turn of a task on a repository, mirror cold and warm (workspace.rs).
//! Any of them can be set beside an earlier run's output (`--previous`, previous.rs).
//!
//! Each benchmark measures orchestrator through the same code a deployment runs (the store, the
//! worker pool) and, in the same run and on the same disk, the two yardsticks that make its
//! figure mean something: the raw SQL the queue cannot beat, and the Rust peer it should beat. A
//! figure alone says little on a machine whose fsync time nobody remembers; a ratio to a baseline
//! measured a second earlier on the same disk says whether the code is in the way. The agent
//! benchmark's yardstick is the same kind: a bare model client replaying the very requests the
//! agent sent, which says how much of a turn is the HTTP round trip and how much is orchestrator.
//!
//! The measurements live in this library, not in `main.rs`, so that the crate's test can run them at
//! tiny sizes and check that they still work end to end. Errors are `anyhow`: this crate is a tool,
//! and no other crate depends on it.
//!
//! Architecture Invariant: this crate holds the only SQL outside the store crate, on purpose, and
//! never for orchestrator's own tables: the raw baseline's table (queue/raw.rs), the peer's tables
//! (queue/peer.rs counts apalis' finished jobs), the run's database itself (queue/database.rs) and
//! its size on disk (agent.rs: a WAL checkpoint and `pg_database_size`). The one exception writes
//! orchestrator's tables to break them: the soak's injected double execution (soak/inject.rs).
//! A baseline written with the store's own query builder would inherit whatever the store gets wrong.

pub mod agent;
pub mod best_of;
pub mod checkpoint;
pub mod context;
pub mod drain;
pub mod environment;
pub mod flow;
pub mod gate_output;
pub mod previous;
pub mod queue;
pub mod sandbox;
pub mod sandbox_gate;
pub mod soak;
pub mod workspace;
