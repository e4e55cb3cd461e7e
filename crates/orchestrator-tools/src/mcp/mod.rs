//! MCP both ways: the registry served to other agents (server.rs, `orchestrator mcp`), and other
//! servers' tools brought to ours (the client side: config.rs, names.rs, client.rs, http.rs,
//! manager.rs).
//!
//! The client side follows what hurt the users of the agents that did it first: tool names are
//! qualified and cut to what model APIs accept and routed through a stored map, never by splitting
//! the name (names.rs); servers start in parallel with a deadline each, and a failed one is a
//! recorded state rather than a silently missing tool (manager.rs); a stdio server is a process
//! group of our own, built by the task's jail and written down in the daemon's process ledger, so
//! it is confined like any command an agent runs and outlives neither its task nor a killed daemon
//! (client.rs); every call has a deadline and sends `notifications/cancelled` when it is given up.

mod client;
mod config;
mod http;
mod manager;
mod names;
mod resources;
mod server;

pub use client::{McpClient, McpTool};
pub use config::{McpServerConfig, McpTransport, validate_server_name};
pub use manager::{McpManager, ServerState, ServerStatus};
pub use names::{MAX_TOOL_NAME, QualifiedTools, qualify};
pub use server::{McpServer, serve_stdio};
