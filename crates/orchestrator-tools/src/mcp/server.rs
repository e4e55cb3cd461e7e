//! The registry as an MCP server over stdio (rmcp), so that Claude Code, Codex and other MCP clients
//! get the same tools, with the same guarantees, as our own agent loop.
//!
//! A refused call is a tool-level error (`isError: true` with the message as content), never a protocol
//! error: MCP clients show protocol errors opaquely, and the model must read why its call failed. Only a
//! broken machinery (the spill store failing) becomes a JSON-RPC internal error.

use orchestrator_types::BoxFuture;
use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, Content as McpContent, Implementation, ListToolsResult,
    Meta, PaginatedRequestParams, ServerCapabilities, ServerInfo, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

use crate::context::ToolContext;
use crate::error::{Error, Result};
use crate::registry::Registry;
use crate::result::{Content, ToolResult};

/// The MCP server: a registry and the context its calls run in (one per connection).
#[derive(Clone)]
pub struct McpServer {
    registry: Arc<Registry>,
    ctx: ToolContext,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    pub fn new(registry: Registry, ctx: ToolContext) -> Self {
        McpServer {
            registry: Arc::new(registry),
            ctx,
        }
    }

    /// The tools as MCP describes them, with read-only and destructive hints.
    pub fn tools(&self) -> Vec<Tool> {
        self.registry
            .list()
            .into_iter()
            .map(|info| {
                let schema = match info.input_schema {
                    Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                let mut tool = Tool::new(info.name, info.description, Arc::new(schema));
                tool.annotations = Some(
                    ToolAnnotations::new()
                        .read_only(info.read_only)
                        .destructive(!info.read_only),
                );
                tool
            })
            .collect()
    }
}

/// Converts a registry result into MCP's shape; the metadata travels in `_meta`.
pub fn to_mcp(result: ToolResult) -> CallToolResult {
    let content: Vec<McpContent> = result
        .content
        .into_iter()
        .map(|c| match c {
            Content::Text { text } => McpContent::text(text),
            Content::Image { media_type, data } => McpContent::image(data, media_type),
        })
        .collect();
    let mut out = if result.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    if !result.metadata.is_empty() {
        out.meta = Some(Meta(result.metadata));
    }
    out
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerInfo {
        ServerInfo::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("orchestrator", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Workspace tools of orchestrator, confined to {}. Paths are relative to that directory.",
                self.ctx.workspace().root().display()
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, rmcp::ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResult, rmcp::ErrorData> {
        let args = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        match self
            .registry
            .call_value(&request.name, args, &self.ctx)
            .await
        {
            Ok(result) => Ok(to_mcp(result)),
            Err(e) => Err(rmcp::ErrorData::internal_error(e.to_string(), None)),
        }
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools().into_iter().find(|t| t.name == name)
    }
}

/// Serves `registry` over stdin and stdout until the client disconnects, then ends the session's
/// background jobs.
pub fn serve_stdio(registry: Registry, ctx: ToolContext) -> BoxFuture<'static, Result<()>> {
    Box::pin(serve_stdio_unboxed(registry, ctx))
}

async fn serve_stdio_unboxed(registry: Registry, ctx: ToolContext) -> Result<()> {
    let server = McpServer::new(registry, ctx.clone());
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| Error::Mcp(e.to_string()))?;
    let outcome = running
        .waiting()
        .await
        .map_err(|e| Error::Mcp(e.to_string()));
    ctx.shutdown().await;
    outcome.map(|_| ())
}
