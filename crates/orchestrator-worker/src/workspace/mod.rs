//! Per-task workspaces.

pub mod checkpoint;
