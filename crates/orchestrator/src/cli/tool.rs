//! `orchestrator tool list` and `orchestrator tool run`: the agent tools by hand.
//!
//! The same registry that serves the agent loop and MCP clients, so a person can see exactly what a
//! model sees: the descriptions and schemas, and the result of a call with its `is_error` flag. A tool
//! error is never printed as a success: it goes to stderr (or `is_error: true` in JSON) and the exit
//! code is 1.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use orchestrator_tools::{Content, Profile, Registry};
use orchestrator_types::SandboxMode;

use super::GlobalArgs;

/// Exit code of a call whose tool reported an error.
const EXIT_TOOL_ERROR: u8 = 1;

#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  orchestrator tool list
  orchestrator tool list --json
  orchestrator tool run read_file --workspace . --args '{\"path\": \"README.md\", \"limit\": 20}'
  orchestrator tool run grep_files --workspace . --args '{\"pattern\": \"fn main\", \"glob\": \"*.rs\"}' --json
  orchestrator tool run apply_patch --workspace . --args-file patch-args.json")]
pub struct ToolArgs {
    #[command(subcommand)]
    pub command: ToolCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ToolCommand {
    /// List the tools a model of a profile receives, with the tokens they cost in every request.
    #[command(
        after_help = "The list is exactly what an agent task of that profile sends to its model: the workspace
tools and the task's durable tools (checklist, gates, sub-agents, ...; these run only inside a
task), and the GitHub tools when the config has a GitHub. Token counts are estimates (four bytes
of the JSON the server receives to a token).

Examples:
  orchestrator tool list
  orchestrator tool list --profile minimal
  orchestrator tool list --json | jq '[.[].tokens] | add'"
    )]
    List(ListArgs),
    /// Call one tool in a workspace and print its result.
    #[command(after_help = "Examples:
  orchestrator tool run read_file --workspace . --args '{\"path\": \"Cargo.toml\"}'
  orchestrator tool run edit_file --workspace . --args '{\"path\": \"a.txt\", \"old_string\": \"x\", \"new_string\": \"y\"}'
  orchestrator tool run exec_shell --workspace . --args '{\"command\": \"cargo test\", \"timeout\": 300}' --json
  echo '{\"pattern\": \"TODO\"}' | orchestrator tool run grep_files --workspace . --args-file -

Exit codes: 0 the tool succeeded, 1 the tool reported an error (is_error), 2 bad command line.")]
    Run(RunArgs),
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Which tool set: minimal, coding (what tasks get by default) or full.
    #[arg(long, default_value = "coding", value_parser = parse_profile)]
    pub profile: Profile,
    /// Print a JSON array of {name, description, input_schema, read_only, approval, durable,
    /// tokens}.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The tool to call (see `orchestrator tool list`).
    pub name: String,
    /// The workspace the tool is confined to.
    #[arg(long, default_value = ".")]
    pub workspace: PathBuf,
    /// The arguments as a JSON object.
    #[arg(long, conflicts_with = "args_file")]
    pub args: Option<String>,
    /// Read the arguments from this file ("-" for stdin).
    #[arg(long)]
    pub args_file: Option<PathBuf>,
    /// Which tool set: minimal, coding or full.
    #[arg(long, default_value = "full", value_parser = parse_profile)]
    pub profile: Profile,
    /// Where the tools' processes run: read_only, workspace_write or full (no sandbox).
    #[arg(long, default_value = "workspace_write", value_parser = parse_sandbox)]
    pub sandbox: SandboxMode,
    /// Print the whole result as JSON: {content, is_error, metadata}.
    #[arg(long)]
    pub json: bool,
}

fn parse_profile(s: &str) -> Result<Profile, String> {
    s.parse()
}

pub(crate) fn parse_sandbox(s: &str) -> Result<SandboxMode, String> {
    s.parse()
        .map_err(|e: orchestrator_types::Error| e.to_string())
}

pub async fn run(global: &GlobalArgs, args: ToolArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ToolCommand::List(a) => list(global, a).await,
        ToolCommand::Run(a) => run_tool(global, a).await,
    }
}

async fn list(global: &GlobalArgs, args: ListArgs) -> anyhow::Result<ExitCode> {
    let github = global.config()?.github.client()?.is_some();
    let tools = orchestrator_worker::agent::tools::catalog(args.profile, github).await?;
    let workspace: Vec<String> = Registry::new(args.profile)
        .list()
        .into_iter()
        .map(|t| t.name)
        .collect();
    let sized: Vec<(u64, bool)> = tools
        .iter()
        .map(|t| {
            let definition = orchestrator_worker::model::ToolDefinition::new(
                &t.name,
                &t.description,
                t.input_schema.clone(),
            );
            (
                orchestrator_worker::model::tool_tokens(&definition),
                !workspace.contains(&t.name),
            )
        })
        .collect();
    let total: u64 = sized.iter().map(|(tokens, _)| tokens).sum();
    if args.json {
        let mut rows = Vec::with_capacity(tools.len());
        for (t, (tokens, durable)) in tools.iter().zip(&sized) {
            let mut row = serde_json::to_value(t)?;
            row["durable"] = (*durable).into();
            row["tokens"] = (*tokens).into();
            rows.push(row);
        }
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    let width = tools.iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
    println!(
        "{:<width$}  {:<9}  {:<8}  {:>6}  DESCRIPTION",
        "NAME", "MODE", "APPROVAL", "TOKENS"
    );
    for (t, (tokens, durable)) in tools.iter().zip(&sized) {
        let first = t
            .description
            .split(". ")
            .next()
            .unwrap_or("")
            .trim_end_matches('.');
        let approval = serde_json::to_value(t.approval)?
            .as_str()
            .unwrap_or("")
            .to_owned();
        println!(
            "{:<width$}  {:<9}  {:<8}  {tokens:>6}  {}{first}.",
            t.name,
            if t.read_only { "read-only" } else { "mutating" },
            approval,
            if *durable { "(in a task) " } else { "" },
        );
    }
    println!(
        "{} tools, about {total} tokens of definitions in every request (profile {}; GitHub tools {})",
        tools.len(),
        match args.profile {
            Profile::Minimal => "minimal",
            Profile::Coding => "coding",
            Profile::Full => "full",
        },
        if github {
            "included"
        } else {
            "left out: no GitHub is configured"
        }
    );
    Ok(ExitCode::SUCCESS)
}

async fn run_tool(global: &GlobalArgs, args: RunArgs) -> anyhow::Result<ExitCode> {
    let raw = match (&args.args, &args.args_file) {
        (Some(a), _) => a.clone(),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading the arguments from stdin")?;
            s
        }
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading the arguments from {}", f.display()))?,
        (None, None) => String::new(),
    };
    let registry = Registry::new(args.profile);
    let ctx = global.tool_context(&args.workspace, args.sandbox)?;
    let result = registry.call(&args.name, &raw, &ctx).await?;
    // Background jobs started by a one-off call cannot outlive this process anyway: end them cleanly.
    ctx.shutdown().await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        let mut text = String::new();
        for block in &result.content {
            match block {
                Content::Text { text: t } => text.push_str(t),
                Content::Image { media_type, data } => text.push_str(&format!(
                    "[image: {media_type}, {} bytes of base64; use --json to get the data]",
                    data.len()
                )),
            }
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
        if result.is_error {
            eprint!("error: {text}");
        } else {
            print!("{text}");
        }
    }
    Ok(if result.is_error {
        ExitCode::from(EXIT_TOOL_ERROR)
    } else {
        ExitCode::SUCCESS
    })
}
