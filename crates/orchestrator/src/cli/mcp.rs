//! `orchestrator mcp`: the tool registry as an MCP server over stdio, for Claude Code, Codex and any
//! other MCP client. Stdout carries the protocol only; diagnostics go to stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use orchestrator_tools::{Profile, Registry};
use orchestrator_types::SandboxMode;

use super::GlobalArgs;

#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  orchestrator mcp --workspace .
  orchestrator mcp --workspace ~/src/project --profile minimal

Claude Code:  claude mcp add orchestrator -- orchestrator mcp --workspace /path/to/project
Codex:        [mcp_servers.orchestrator] command = \"orchestrator\", args = [\"mcp\", \"--workspace\", \"/path/to/project\"]")]
pub struct McpArgs {
    /// The workspace every tool is confined to.
    #[arg(long, default_value = ".")]
    pub workspace: PathBuf,
    /// Which tool set: minimal (read-only), coding or full.
    #[arg(long, default_value = "coding", value_parser = parse_profile)]
    pub profile: Profile,
    /// Where the tools' processes run: read_only, workspace_write or full (no sandbox).
    #[arg(long, default_value = "workspace_write", value_parser = super::tool::parse_sandbox)]
    pub sandbox: SandboxMode,
    /// Write the startup line to stderr as JSON instead of text (stdout is the protocol).
    #[arg(long)]
    pub json: bool,
}

fn parse_profile(s: &str) -> Result<Profile, String> {
    s.parse()
}

pub async fn run(global: &GlobalArgs, args: McpArgs) -> anyhow::Result<ExitCode> {
    let ctx = global.tool_context(&args.workspace, args.sandbox)?;
    let registry = Registry::new(args.profile);
    let root = ctx.workspace().root().display().to_string();
    let count = registry.list().len();
    if args.json {
        eprintln!(
            "{}",
            serde_json::json!({"event": "mcp_started", "workspace": root, "profile": args.profile, "tools": count})
        );
    } else {
        eprintln!("orchestrator mcp: serving {count} tools for {root} on stdio");
    }
    orchestrator_tools::serve_mcp_stdio(registry, ctx).await?;
    Ok(ExitCode::SUCCESS)
}
