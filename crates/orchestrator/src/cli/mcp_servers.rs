//! `orchestrator mcp-servers`: the MCP servers of the config, as written (`list`) and as they
//! answer (`check`: each one started in an agent's sandbox, its tools listed, then shut down).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use orchestrator_tools::mcp::{McpManager, ServerStatus};
use orchestrator_types::SandboxMode;
use serde_json::json;

use super::GlobalArgs;
use crate::exit::CliError;

const AFTER_HELP: &str = "\
Examples:
  orchestrator mcp-servers list                 the [mcp_servers] of the config
  orchestrator mcp-servers check                start each enabled server, list its tools, stop it
  orchestrator mcp-servers check docs --json    one server, as JSON
  orchestrator task create --title t --prompt '...' --mcp docs --workspace ~/src/app

Servers run as an agent's processes do: in the sandbox (workspace_write unless --sandbox says
otherwise), with the scrubbed environment plus the server's env and env_vars. Tools reach the
model as mcp__SERVER__TOOL. `check` exits 1 when an enabled server fails.";

#[derive(Debug, Subcommand)]
pub enum McpServersCommand {
    /// The configured servers: transport, command or URL, enabled, required, deadlines.
    #[command(after_help = AFTER_HELP)]
    List(ListArgs),
    /// Start the enabled servers (or those named), list their tools and stop them again.
    #[command(after_help = AFTER_HELP)]
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Servers to check (default: every enabled one).
    pub servers: Vec<String>,
    /// The workspace the servers start in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// read_only, workspace_write or full, as an agent's policy would give.
    #[arg(long, default_value = "workspace_write", value_parser = super::tool::parse_sandbox)]
    pub sandbox: SandboxMode,
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, command: McpServersCommand) -> anyhow::Result<ExitCode> {
    let config = global.config()?;
    match command {
        McpServersCommand::List(args) => {
            let rows: Vec<serde_json::Value> = config
                .mcp_servers
                .iter()
                .map(|(name, server)| {
                    let transport = server
                        .validate(name)
                        .map(|t| t.as_str())
                        .unwrap_or("invalid");
                    json!({
                        "name": name,
                        "transport": transport,
                        "target": server.url.clone().unwrap_or_else(|| {
                            std::iter::once(server.command.clone().unwrap_or_default())
                                .chain(server.args.iter().cloned())
                                .collect::<Vec<_>>()
                                .join(" ")
                        }),
                        "enabled": server.enabled,
                        "required": server.required,
                        "startup_timeout_sec": server.startup_timeout_sec,
                        "tool_timeout_sec": server.tool_timeout_sec,
                    })
                })
                .collect();
            if args.json {
                println!("{}", serde_json::Value::Array(rows));
            } else if rows.is_empty() {
                println!("no [mcp_servers] in the config");
            } else {
                println!("NAME  TRANSPORT  ENABLED  REQUIRED  TARGET");
                for row in rows {
                    println!(
                        "{}  {}  {}  {}  {}",
                        row["name"].as_str().unwrap_or_default(),
                        row["transport"].as_str().unwrap_or_default(),
                        row["enabled"],
                        row["required"],
                        row["target"].as_str().unwrap_or_default()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        McpServersCommand::Check(args) => {
            for name in &args.servers {
                if !config.mcp_servers.contains_key(name) {
                    return Err(CliError::Invalid(format!(
                        "no [mcp_servers.{name}] in the config (`orchestrator mcp-servers list`)"
                    ))
                    .into());
                }
            }
            let names: Vec<String> = if args.servers.is_empty() {
                config
                    .mcp_servers
                    .iter()
                    .filter(|(_, s)| s.enabled)
                    .map(|(name, _)| name.clone())
                    .collect()
            } else {
                args.servers.clone()
            };
            let workspace = match &args.workspace {
                Some(dir) => dir.clone(),
                None => std::env::current_dir()?,
            };
            let ctx = global.tool_context(&workspace, args.sandbox)?;
            let manager =
                McpManager::start(&config.mcp_servers, &names, ctx.jail(), &workspace).await;
            manager.shutdown().await;
            let failed = manager
                .states()
                .iter()
                .any(|s| matches!(s.status, ServerStatus::Failed { .. }));
            if args.json {
                println!("{}", serde_json::to_string(manager.states())?);
            } else {
                for state in manager.states() {
                    match &state.status {
                        ServerStatus::Ready { tools } => {
                            println!(
                                "{}: ready ({}, {} ms), {} tool{}",
                                state.name,
                                state.transport,
                                state.elapsed_ms,
                                tools.len(),
                                if tools.len() == 1 { "" } else { "s" }
                            );
                            for tool in tools {
                                println!("  {tool}");
                            }
                        }
                        ServerStatus::Failed { error } => {
                            println!(
                                "{}: FAILED after {} ms: {error}",
                                state.name, state.elapsed_ms
                            )
                        }
                        ServerStatus::Disabled => println!("{}: disabled", state.name),
                    }
                    for why in &state.left_out {
                        println!("  left out: {why}");
                    }
                }
            }
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}
