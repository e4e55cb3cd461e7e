//! The task's MCP servers' resources and prompts as four tools: mcp_resources and
//! mcp_resource_read, mcp_prompts and mcp_prompt_get. Each pair exists only when a ready server
//! offers resources (or prompts), names its server, reads nothing it is not asked to, and labels
//! what it returns as the server's, not verified.

use super::client::McpClient;
use super::manager::McpManager;
use crate::policy::ApprovalClass;
use crate::registry::ToolSpec;
use crate::result::{ToolFailure, ToolResult, refuse};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// The servers a tool reaches, with the deadline each has for a call.
type Servers = Arc<BTreeMap<String, (Arc<McpClient>, Duration)>>;

impl McpManager {
    /// The resource and prompt tools of the ready servers that offer them, sorted by name.
    pub fn resource_specs(&self) -> Vec<ToolSpec> {
        let pick = |want: fn((bool, bool)) -> bool| -> Servers {
            Arc::new(
                self.clients
                    .iter()
                    .filter(|(_, client)| want(client.offers()))
                    .filter_map(|(name, client)| {
                        let timeout = self.configs.get(name)?.tool_timeout();
                        Some((name.clone(), (client.clone(), timeout)))
                    })
                    .collect(),
            )
        };
        let with_resources = pick(|(resources, _)| resources);
        let with_prompts = pick(|(_, prompts)| prompts);
        let mut specs = Vec::new();
        if !with_resources.is_empty() {
            specs.push(list_resources(with_resources.clone()));
            specs.push(read_resource(with_resources));
        }
        if !with_prompts.is_empty() {
            specs.push(list_prompts(with_prompts.clone()));
            specs.push(get_prompt(with_prompts));
        }
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        specs
    }
}

fn tool(
    name: &str,
    description: String,
    properties: Value,
    required: &[&str],
    example: Value,
    handler: Arc<dyn crate::registry::ToolHandler>,
) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description,
        input_schema: json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        }),
        read_only: true,
        approval: ApprovalClass::Read,
        arg_aliases: Vec::new(),
        example,
        handler,
        precheck: None,
    }
}

fn names(servers: &Servers) -> String {
    servers.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// The servers `server` names (all of them when it names none).
fn chosen(servers: &Servers, server: Option<&str>) -> Result<Vec<String>, ToolFailure> {
    match server {
        None => Ok(servers.keys().cloned().collect()),
        Some(name) if servers.contains_key(name) => Ok(vec![name.to_owned()]),
        Some(name) => Err(refuse(format!(
            "no MCP server {name:?} of this task offers this; servers: {}",
            names(servers)
        ))),
    }
}

/// The one server a call reaches: the one it names, or the only one there is.
fn one_server(servers: &Servers, args: &Value, tool: &str) -> Result<String, ToolFailure> {
    match server_arg(args) {
        Some(name) => Ok(chosen(servers, Some(name))?.remove(0)),
        None if servers.len() == 1 => Ok(names(servers)),
        None => Err(refuse(format!(
            "{tool}: name the server ({})",
            names(servers)
        ))),
    }
}

fn server_arg(args: &Value) -> Option<&str> {
    args.get("server")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn required_str<'a>(args: &'a Value, key: &str, tool: &str) -> Result<&'a str, ToolFailure> {
    args.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| refuse(format!("{tool}: {key} is required")))
}

fn label(server: &str) -> String {
    format!("[from the MCP server {server}; not verified]")
}

fn list_resources(servers: Servers) -> ToolSpec {
    let description = format!(
        "List the resources (files, records, documents) the task's MCP servers offer, with their URIs; read one with mcp_resource_read. Servers: {}.",
        names(&servers)
    );
    let handler = move |args: Value, _ctx: crate::context::ToolContext| {
        let servers = servers.clone();
        async move {
            let mut out = String::new();
            for name in chosen(&servers, server_arg(&args))? {
                let (client, timeout) = &servers[&name];
                let _ = writeln!(out, "{}", label(&name));
                match client.resources(*timeout).await {
                    Ok(resources) if resources.is_empty() => out.push_str("(no resources)\n"),
                    Ok(resources) => {
                        for r in resources {
                            let _ = writeln!(
                                out,
                                "{}  {}{}{}",
                                r["uri"].as_str().unwrap_or(""),
                                r["name"].as_str().unwrap_or(""),
                                r["mimeType"]
                                    .as_str()
                                    .map(|m| format!(" ({m})"))
                                    .unwrap_or_default(),
                                r["description"]
                                    .as_str()
                                    .map(|d| format!(": {}", d.trim()))
                                    .unwrap_or_default(),
                            );
                        }
                    }
                    Err(e) => {
                        let _ = writeln!(out, "(failed: {e})");
                    }
                }
            }
            Ok(ToolResult::text(out.trim_end()))
        }
    };
    tool(
        "mcp_resources",
        description,
        json!({"server": {"type": "string", "description": "One server (default: all)."}}),
        &[],
        json!({}),
        Arc::new(handler),
    )
}

fn read_resource(servers: Servers) -> ToolSpec {
    let description = format!(
        "Read one resource of an MCP server by its URI (from mcp_resources). Servers: {}.",
        names(&servers)
    );
    let handler = move |args: Value, _ctx: crate::context::ToolContext| {
        let servers = servers.clone();
        async move {
            let uri = required_str(&args, "uri", "mcp_resource_read")?;
            let server = one_server(&servers, &args, "mcp_resource_read")?;
            let (client, timeout) = &servers[&server];
            let contents = client.read_resource(uri, *timeout).await.map_err(refuse)?;
            let mut out = format!("{}\n", label(&server));
            for c in contents {
                if let Some(text) = c["text"].as_str() {
                    out.push_str(text);
                    out.push('\n');
                } else if let Some(blob) = c["blob"].as_str() {
                    let _ = writeln!(
                        out,
                        "[binary content ({}), {} bytes of base64, not shown]",
                        c["mimeType"].as_str().unwrap_or("unknown type"),
                        blob.len()
                    );
                }
            }
            Ok(ToolResult::text(out.trim_end()))
        }
    };
    tool(
        "mcp_resource_read",
        description,
        json!({
            "server": {"type": "string", "description": "The server (needed when there are several)."},
            "uri": {"type": "string"}
        }),
        &["uri"],
        json!({"server": "docs", "uri": "file:///srv/docs/README.md"}),
        Arc::new(handler),
    )
}

fn list_prompts(servers: Servers) -> ToolSpec {
    let description = format!(
        "List the prompt templates the task's MCP servers offer, with their arguments; fill one with mcp_prompt_get. Servers: {}.",
        names(&servers)
    );
    let handler = move |args: Value, _ctx: crate::context::ToolContext| {
        let servers = servers.clone();
        async move {
            let mut out = String::new();
            for name in chosen(&servers, server_arg(&args))? {
                let (client, timeout) = &servers[&name];
                let _ = writeln!(out, "{}", label(&name));
                match client.prompts(*timeout).await {
                    Ok(prompts) if prompts.is_empty() => out.push_str("(no prompts)\n"),
                    Ok(prompts) => {
                        for p in prompts {
                            let arguments: Vec<String> = p["arguments"]
                                .as_array()
                                .map(|args| {
                                    args.iter()
                                        .map(|a| {
                                            format!(
                                                "{}{}",
                                                a["name"].as_str().unwrap_or("?"),
                                                if a["required"] == true { "" } else { "?" }
                                            )
                                        })
                                        .collect()
                                })
                                .unwrap_or_default();
                            let _ = writeln!(
                                out,
                                "{}({}){}",
                                p["name"].as_str().unwrap_or(""),
                                arguments.join(", "),
                                p["description"]
                                    .as_str()
                                    .map(|d| format!(": {}", d.trim()))
                                    .unwrap_or_default()
                            );
                        }
                    }
                    Err(e) => {
                        let _ = writeln!(out, "(failed: {e})");
                    }
                }
            }
            Ok(ToolResult::text(out.trim_end()))
        }
    };
    tool(
        "mcp_prompts",
        description,
        json!({"server": {"type": "string", "description": "One server (default: all)."}}),
        &[],
        json!({}),
        Arc::new(handler),
    )
}

fn get_prompt(servers: Servers) -> ToolSpec {
    let description = format!(
        "Fill one prompt template of an MCP server with its arguments and return its messages. Servers: {}.",
        names(&servers)
    );
    let handler = move |args: Value, _ctx: crate::context::ToolContext| {
        let servers = servers.clone();
        async move {
            let name = required_str(&args, "name", "mcp_prompt_get")?;
            let server = one_server(&servers, &args, "mcp_prompt_get")?;
            let arguments = match args.get("arguments") {
                None | Some(Value::Null) => None,
                Some(Value::Object(map)) => Some(
                    map.iter()
                        .map(|(k, v)| {
                            // Prompt arguments are strings on the wire.
                            let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                            (k.clone(), Value::String(v))
                        })
                        .collect(),
                ),
                Some(_) => return Err(refuse("mcp_prompt_get: arguments must be an object")),
            };
            let (client, timeout) = &servers[&server];
            let messages = client
                .prompt(name, arguments, *timeout)
                .await
                .map_err(refuse)?;
            let mut out = format!("{}\n", label(&server));
            for m in messages {
                let role = m["role"].as_str().unwrap_or("?");
                let content = &m["content"];
                let text = content["text"].as_str().map_or_else(
                    || {
                        format!(
                            "[{} content, not shown]",
                            content["type"].as_str().unwrap_or("other")
                        )
                    },
                    str::to_owned,
                );
                let _ = writeln!(out, "{role}: {text}");
            }
            Ok(ToolResult::text(out.trim_end()))
        }
    };
    tool(
        "mcp_prompt_get",
        description,
        json!({
            "server": {"type": "string", "description": "The server (needed when there are several)."},
            "name": {"type": "string"},
            "arguments": {"type": "object", "description": "The prompt's arguments, as strings."}
        }),
        &["name"],
        json!({"server": "docs", "name": "summarize", "arguments": {"topic": "the release notes"}}),
        Arc::new(handler),
    )
}
