//! orchestrator-tools: the tools an agent works with, made so that a model rarely fails with them and
//! can never escape the workspace.
//!
//! The [`Registry`] holds each tool's name, description, JSON schema, read-only flag, approval class and
//! handler, and dispatches calls with the guarantees every tool gets: argument repair or a corrective
//! error ([`args`]), policy and approvals ([`policy`]), bounded results with the full output kept
//! through a [`ResultSink`] ([`output`]), paths confined to the [`Workspace`], read-only calls of a
//! batch run concurrently and mutating ones in order. The same registry serves the worker's agent loop,
//! MCP clients ([`mcp::serve_stdio`]) and `orchestrator tool run`.
//!
//! Architecture Invariant: this crate knows nothing of the store or GitHub. Spilled output goes through
//! the [`ResultSink`] trait, approvals through the [`Approver`] trait; the worker plugs in durable
//! implementations of both.
//!
//! Architecture Invariant: every git command the orchestrator runs on a work tree is built by
//! [`git_command`], here and in the worker alike, so that a repository's config runs nothing.

pub mod args;
pub mod beneath;
pub mod context;
pub mod docs;
pub mod error;
pub mod git_command;
pub mod lsp;
pub mod mcp;
pub mod output;
pub mod policy;
pub mod registry;
pub mod result;
mod server_process;
pub mod tools;
pub mod workspace;

pub use context::{Background, ModelImages, OutputRecorder, OutputTap, ToolContext};
pub use error::{Error, Result};
pub use mcp::serve_stdio as serve_mcp_stdio;
pub use output::{HomeDirSink, Limits, MemorySink, ResultSink};
pub use policy::{
    ApprovalAnswer, ApprovalClass, ApprovalRequest, Approver, CommandMatch, CommandRule, Decision,
    NoApprover, Policy, TaskScope,
};
pub use registry::{DeprecatedAlias, Profile, Registry, ToolCall, ToolHandler, ToolInfo, ToolSpec};
pub use result::{Content, ToolFailure, ToolOutcome, ToolResult, refuse};
pub use tools::web_search::WebSearchConfig;
pub use workspace::Workspace;
