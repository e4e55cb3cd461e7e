//! The servers of one task (or of one `mcp-servers check`): started together, each within its own
//! deadline, each ending in a recorded state, and their tools turned into registry tools under
//! qualified names.
//!
//! Every server's outcome is a state, never an absence: a server that failed is listed with its
//! error, so a missing tool is explained where the person looks (the task's events, `mcp-servers
//! check`) instead of discovered by a model that cannot find it. The tool list is sorted by
//! qualified name, so a task sends the same bytes every turn and after a resume, which keeps a
//! server's prompt cache warm.

use super::client::{McpClient, McpTool};
use super::config::McpServerConfig;
use super::names::QualifiedTools;
use crate::policy::ApprovalClass;
use crate::registry::ToolSpec;
use crate::result::{Content, ToolResult};
use orchestrator_sandbox::Jail;
use orchestrator_types::BoxFuture;
use rmcp::model::{CallToolResult, RawContent};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// What became of one server.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerStatus {
    Ready { tools: Vec<String> },
    Failed { error: String },
    Disabled,
}

/// One server's state, as events and `mcp-servers check` show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerState {
    pub name: String,
    pub transport: &'static str,
    pub required: bool,
    #[serde(flatten)]
    pub status: ServerStatus,
    /// Time to start and list the tools, or to fail.
    pub elapsed_ms: u64,
    /// Tools the server lists that agents do not get (the config's filters, or a name that could
    /// not be given), with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
}

/// The running servers of a task and their tools.
#[derive(Debug, Default)]
pub struct McpManager {
    states: Vec<ServerState>,
    pub(super) clients: BTreeMap<String, Arc<McpClient>>,
    pub(super) configs: BTreeMap<String, McpServerConfig>,
    tools: Vec<(String, String, McpTool)>,
    names: QualifiedTools,
}

impl McpManager {
    /// Starts the `selected` servers of `servers` in parallel, in `jail`. A selected name that
    /// is not configured is a failed state.
    pub fn start<'a>(
        servers: &'a BTreeMap<String, McpServerConfig>,
        selected: &'a [String],
        jail: &'a Jail,
        workspace: &'a Path,
    ) -> BoxFuture<'a, McpManager> {
        Box::pin(Self::start_unboxed(servers, selected, jail, workspace))
    }

    async fn start_unboxed(
        servers: &BTreeMap<String, McpServerConfig>,
        selected: &[String],
        jail: &Jail,
        workspace: &Path,
    ) -> McpManager {
        let mut selected: Vec<&String> = selected.iter().collect();
        selected.sort();
        selected.dedup();
        let starts = selected.iter().map(|name| async move {
            let started = Instant::now();
            let Some(config) = servers.get(name.as_str()) else {
                return (
                    (*name).clone(),
                    None,
                    Err(format!("no [mcp_servers.{name}] in the config")),
                    started.elapsed(),
                );
            };
            if !config.enabled {
                return ((*name).clone(), Some(config), Ok(None), started.elapsed());
            }
            let connected = McpClient::connect(name, config, jail, workspace)
                .await
                .map(Some);
            ((*name).clone(), Some(config), connected, started.elapsed())
        });
        let outcomes = futures_util::future::join_all(starts).await;
        let mut manager = McpManager::default();
        for (name, config, outcome, elapsed) in outcomes {
            let transport = config
                .and_then(|c| c.validate(&name).ok())
                .map_or("unknown", |t| t.as_str());
            let required = config.is_some_and(|c| c.required);
            let elapsed_ms = elapsed.as_millis() as u64;
            let mut left_out = Vec::new();
            let status = match outcome {
                Ok(None) => ServerStatus::Disabled,
                Err(error) => ServerStatus::Failed { error },
                Ok(Some((client, listed))) => {
                    let config = config
                        .cloned()
                        .unwrap_or_else(|| McpServerConfig::stdio("", &[]));
                    let mut given = Vec::new();
                    let mut listed = listed;
                    listed.sort_by(|a, b| a.name.cmp(&b.name));
                    for tool in listed {
                        if !config.allows(&tool.name) {
                            left_out.push(format!("{}: filtered by the config", tool.name));
                            continue;
                        }
                        match manager.names.insert(&name, &tool.name) {
                            Ok(qualified) => {
                                given.push(qualified.clone());
                                manager.tools.push((qualified, name.clone(), tool));
                            }
                            Err(why) => left_out.push(why),
                        }
                    }
                    manager.clients.insert(name.clone(), Arc::new(client));
                    manager.configs.insert(name.clone(), config);
                    ServerStatus::Ready { tools: given }
                }
            };
            manager.states.push(ServerState {
                name,
                transport,
                required,
                status,
                elapsed_ms,
                left_out,
            });
        }
        manager.tools.sort_by(|a, b| a.0.cmp(&b.0));
        manager
    }

    pub fn states(&self) -> &[ServerState] {
        &self.states
    }

    /// The first required server that is not ready, with its error.
    pub fn required_failure(&self) -> Option<String> {
        self.states.iter().find_map(|s| match &s.status {
            ServerStatus::Failed { error } if s.required => Some(error.clone()),
            _ => None,
        })
    }

    /// Where a qualified tool name goes.
    pub fn route(&self, qualified: &str) -> Option<(&str, &str)> {
        self.names.route(qualified)
    }

    /// The servers' tools as registry tools, sorted by name. Each call goes to its server
    /// through the stored route, with the server's deadline; its output is labelled as coming
    /// from the server, which nobody here vouches for.
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .filter_map(|(qualified, server, tool)| {
                let client = self.clients.get(server)?.clone();
                let timeout = self.configs.get(server)?.tool_timeout();
                let remote = tool.name.clone();
                let server_name = server.clone();
                let handler = move |args: Value, _ctx: crate::context::ToolContext| {
                    let (client, remote, server_name) =
                        (client.clone(), remote.clone(), server_name.clone());
                    async move {
                        let cancel = CancellationToken::new();
                        match client.call(&remote, args, timeout, &cancel).await {
                            Ok(result) => Ok(to_tool_result(&server_name, result)),
                            Err(error) => Ok(ToolResult::error(error)),
                        }
                    }
                };
                let description = if tool.description.trim().is_empty() {
                    format!("Tool {} of the MCP server {server}.", tool.name)
                } else {
                    format!("{} (MCP server {server})", tool.description.trim())
                };
                Some(ToolSpec {
                    name: qualified.clone(),
                    description,
                    input_schema: schema_of(&tool.input_schema),
                    read_only: tool.read_only,
                    approval: if tool.read_only {
                        ApprovalClass::Read
                    } else {
                        ApprovalClass::Write
                    },
                    arg_aliases: Vec::new(),
                    example: json!({}),
                    handler: Arc::new(handler),
                    precheck: None,
                })
            })
            .collect()
    }

    /// The process groups of the running stdio servers.
    pub async fn process_groups(&self) -> Vec<i32> {
        let mut groups = Vec::new();
        for client in self.clients.values() {
            groups.extend(client.pgid().await);
        }
        groups
    }

    /// Ends every server.
    pub async fn shutdown(&self) {
        let ends = self.clients.values().map(|c| c.shutdown());
        futures_util::future::join_all(ends).await;
    }
}

/// The server's schema, with `type: object` made explicit (some servers leave it out).
fn schema_of(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Value::Object(map) = &mut schema {
        map.entry("type").or_insert_with(|| json!("object"));
        map.entry("properties").or_insert_with(|| json!({}));
    } else {
        schema = json!({"type": "object", "properties": {}});
    }
    schema
}

/// A server's answer as a tool result: its text parts, other parts named, `isError` kept, and a
/// first line saying where the text comes from.
fn to_tool_result(server: &str, result: CallToolResult) -> ToolResult {
    let mut parts = vec![format!("[output of the MCP server {server}; not verified]")];
    for content in &result.content {
        match &content.raw {
            RawContent::Text(text) => parts.push(text.text.clone()),
            RawContent::Image(image) => parts.push(format!(
                "[an image ({}), {} bytes of base64, not shown]",
                image.mime_type,
                image.data.len()
            )),
            RawContent::Audio(audio) => parts.push(format!(
                "[audio ({}), {} bytes of base64, not shown]",
                audio.mime_type,
                audio.data.len()
            )),
            RawContent::Resource(resource) => {
                parts.push(format!("[an embedded resource: {:?}]", resource.resource))
            }
            RawContent::ResourceLink(link) => parts.push(format!("[a resource: {}]", link.uri)),
        }
    }
    if let Some(structured) = &result.structured_content
        && result.content.is_empty()
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    let mut out = if result.is_error.unwrap_or(false) {
        ToolResult::error(text)
    } else {
        ToolResult {
            content: vec![Content::Text { text }],
            ..ToolResult::text("")
        }
    };
    out.metadata.insert("mcp_server".into(), json!(server));
    out.metadata.insert("untrusted".into(), json!(true));
    out
}
