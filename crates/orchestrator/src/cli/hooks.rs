//! `orchestrator hooks`: the hooks of the config, and a dry run of one step's hooks on a sample
//! input, for writing them (docs/hooks.md).

use super::GlobalArgs;
use crate::exit::CliError;
use crate::output;
use clap::{Args, Subcommand};
use orchestrator_worker::agent::hooks::{self, HookEvent, interpret, run_hook};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum HooksCommand {
    /// List the config's hooks by step, with their matchers and what they may do.
    #[command(
        after_help = "Examples:\n  orchestrator hooks list\n  orchestrator hooks list --json"
    )]
    List(ListArgs),
    /// Feed a sample input to the hooks of one step and print what each decided, without a task:
    /// in the same jail, with the same protocol, as when an agent's work reaches that step.
    #[command(after_help = "\
Examples:
  orchestrator hooks test PreToolUse --tool Bash --input '{\"command\": \"rm -rf build\"}'
  orchestrator hooks test PostToolUse --tool write_file --input '{\"path\": \"src/lib.rs\"}' \\
      --workspace ~/src/app
  orchestrator hooks test Stop --json

Exit status: 0 when the hooks let the step go on, 2 when one blocks (as a hook's own exit 2).")]
    Test(TestArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The step: PreToolUse, PostToolUse, SessionStart, Stop, PreCompact or Notification.
    pub event: String,
    /// The tool of a PreToolUse or PostToolUse step: ours (exec_shell) or Claude Code's (Bash).
    #[arg(long, value_name = "NAME")]
    pub tool: Option<String>,
    /// The tool's input as JSON (default `{}`).
    #[arg(long, value_name = "JSON")]
    pub input: Option<String>,
    /// The workspace the hooks run on (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

/// Our tool for a name given either way.
fn our_tool(name: &str) -> String {
    const CLAUDE: &[(&str, &str)] = &[
        ("Bash", "exec_shell"),
        ("Read", "read_file"),
        ("Write", "write_file"),
        ("Edit", "edit_file"),
        ("MultiEdit", "multi_edit"),
        ("Glob", "glob"),
        ("Grep", "grep_files"),
        ("LS", "list_dir"),
    ];
    CLAUDE
        .iter()
        .find(|(claude, _)| *claude == name)
        .map_or(name, |(_, ours)| ours)
        .to_owned()
}

pub async fn run(global: &GlobalArgs, command: HooksCommand) -> anyhow::Result<ExitCode> {
    let config = global.config()?;
    match command {
        HooksCommand::List(args) => {
            if args.json {
                output::json(&config.hooks)?;
            } else if config.hooks.is_empty() {
                println!(
                    "no hooks: add [[hooks.PreToolUse]] (or another step) to the config; see \
                     docs/hooks.md"
                );
            } else {
                let mut rows = Vec::new();
                for (event, specs) in &config.hooks {
                    for spec in specs {
                        let mut may = Vec::new();
                        if spec.write {
                            may.push("write");
                        }
                        if spec.network {
                            may.push("network");
                        }
                        rows.push(vec![
                            event.clone(),
                            spec.matcher.clone().unwrap_or_else(|| "*".into()),
                            spec.command.clone(),
                            format!("{} s", spec.timeout),
                            if may.is_empty() {
                                "read".into()
                            } else {
                                may.join(", ")
                            },
                        ]);
                    }
                }
                output::table(&["STEP", "MATCHER", "COMMAND", "TIMEOUT", "MAY"], &rows)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        HooksCommand::Test(args) => test(global, &config, args).await,
    }
}

async fn test(
    global: &GlobalArgs,
    config: &crate::config::Config,
    args: TestArgs,
) -> anyhow::Result<ExitCode> {
    let event = HookEvent::parse(&args.event).ok_or_else(|| {
        CliError::Invalid(format!(
            "{:?} is not a hook step; the steps are {}",
            args.event,
            HookEvent::ALL.map(HookEvent::as_str).join(", ")
        ))
    })?;
    let all = config.hooks().map_err(CliError::Invalid)?;
    let tool = args.tool.as_deref().map(our_tool);
    let matching = all.matching(event, tool.as_deref());
    let workspace = match &args.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir()?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .map_err(|e| CliError::Invalid(format!("--workspace {}: {e}", workspace.display())))?;
    let tool_input: Value = match &args.input {
        Some(text) => serde_json::from_str(text)
            .map_err(|e| CliError::Invalid(format!("--input is not JSON: {e}")))?,
        None => json!({}),
    };
    let mut input = json!({
        "session_id": "hooks-test",
        "cwd": workspace.display().to_string(),
        "hook_event_name": event.as_str(),
        "permission_mode": "default",
    });
    if let Some(fields) = input.as_object_mut() {
        match event {
            HookEvent::PreToolUse | HookEvent::PostToolUse => {
                let tool = tool.clone().unwrap_or_else(|| "exec_shell".into());
                fields.insert("tool_name".into(), hooks::claude_name(&tool).into());
                fields.insert("tool_input".into(), tool_input);
                if event == HookEvent::PostToolUse {
                    fields.insert(
                        "tool_response".into(),
                        json!({"output": "(a sample result)", "success": true}),
                    );
                }
            }
            HookEvent::Stop => {
                fields.insert("stop_hook_active".into(), false.into());
                fields.insert("last_assistant_message".into(), "Done.".into());
            }
            HookEvent::SessionStart => {
                fields.insert("source".into(), "startup".into());
            }
            HookEvent::PreCompact => {
                fields.insert("trigger".into(), "manual".into());
            }
            HookEvent::Notification => {
                fields.insert("message".into(), "Task 1 needs your approval".into());
            }
        }
    }
    if matching.is_empty() {
        println!(
            "no hook of {} matches{}",
            event.as_str(),
            tool.map(|t| format!(" tool {t}")).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let sandbox = global.sandbox(config)?;
    let secrets: Vec<String> = config.model.api_key_env.iter().cloned().collect();
    let mut blocked = false;
    let mut reports = Vec::new();
    for (index, spec) in matching {
        let result = run_hook(
            &sandbox,
            spec,
            &workspace,
            input.clone(),
            &secrets,
            &[],
            Some(b""),
        )
        .await;
        let (verdict, reason, updated, context) = interpret(event, spec, &result);
        blocked |= verdict == hooks::Verdict::Block;
        let report = json!({
            "hook": index,
            "command": spec.command,
            "verdict": verdict,
            "reason": reason,
            "updated_input": updated,
            "context": context,
            "exit_code": result.exit_code,
            "error": result.error,
            "duration_ms": result.duration_ms,
            "stdout": result.stdout,
            "stderr": result.stderr,
        });
        if !args.json {
            println!(
                "{} hook #{} `{}`: {}{} (exit {}, {} ms)",
                event.as_str(),
                index + 1,
                spec.command,
                report["verdict"].as_str().unwrap_or("?"),
                reason.map(|r| format!(": {r}")).unwrap_or_default(),
                result.exit_code.map_or_else(
                    || result.error.clone().unwrap_or_default(),
                    |c| c.to_string()
                ),
                result.duration_ms
            );
            if let Some(updated) = &updated {
                println!("  changed the input to {updated}");
            }
        }
        reports.push(report);
        if blocked {
            break;
        }
    }
    if args.json {
        output::json(&json!({"event": event.as_str(), "input": input, "hooks": reports}))?;
    }
    Ok(if blocked {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
