//! Claims tasks from the store and runs them: verification gates with evidence, leases kept alive by
//! heartbeats, and the rescuer that takes back tasks whose worker vanished.
//!
//! Architecture Invariant: the worker never writes SQL; every state change goes through the store and
//! carries the attempt's epoch, so a stale worker's writes are refused there.

pub mod gate;
