//! The MCP servers of an agent task: started in the attempt's jail before the first turn, each
//! outcome recorded as an `mcp_server` event, the tools of those that are ready registered beside
//! the built-in ones.

use super::AgentEnd;
use crate::runner::RunContext;
use orchestrator_store::{Lease, Task};
use orchestrator_tools::Registry;
use orchestrator_types::EventKind;
use serde_json::json;

/// Starts the MCP servers `task` selects, records each one's state as an event and registers
/// the tools of those that are ready. `Err` ends the attempt (a required server failed, or the
/// store could not record it); the servers are shut down first.
pub(super) async fn start_servers(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    jail: &orchestrator_sandbox::Jail,
    workspace: &str,
    registry: &mut Registry,
) -> Result<Option<orchestrator_tools::mcp::McpManager>, AgentEnd> {
    if task.agent.mcp_servers.is_empty() {
        return Ok(None);
    }
    let manager = orchestrator_tools::mcp::McpManager::start(
        &ctx.agent.mcp_servers,
        &task.agent.mcp_servers,
        jail,
        std::path::Path::new(workspace),
    )
    .await;
    for state in manager.states() {
        let data = serde_json::to_value(state).unwrap_or_else(|_| json!({"name": state.name}));
        if let Err(e) = ctx
            .store
            .append_event(lease, EventKind::McpServer, data)
            .await
        {
            manager.shutdown().await;
            return Err(AgentEnd::Retryable(format!(
                "cannot record the MCP servers' states: {e}"
            )));
        }
    }
    if let Some(error) = manager.required_failure() {
        manager.shutdown().await;
        return Err(AgentEnd::Retryable(format!(
            "a required MCP server is not ready: {error}"
        )));
    }
    for spec in manager
        .tool_specs()
        .into_iter()
        .chain(manager.resource_specs())
    {
        if let Err(e) = registry.register(spec) {
            manager.shutdown().await;
            return Err(AgentEnd::Failed(format!(
                "an MCP tool cannot be registered: {e}"
            )));
        }
    }
    Ok(Some(manager))
}
