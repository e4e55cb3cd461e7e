//! `orchestrator task ...`: create, list, read, follow, cancel and retry tasks.

use super::GlobalArgs;
use super::views::{EventView, TaskView, event_line};
use crate::exit::CliError;
use crate::output;
use clap::{Args, Subcommand};
use orchestrator_store::{CancelOutcome, Store, TaskFilter};
use orchestrator_types::{
    GateSpec, NewTask, TaskId, TaskState, format_millis, now_millis, parse_time,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Create a task. Without a prompt it is a verification task: it succeeds when every gate passes.
    #[command(after_help = "\
Examples:
  orchestrator task create --title 'unit tests' --gate 'cargo test' --workspace ~/src/app
  orchestrator task create --title 'nightly' --gate 'make check' --run-after 2h --priority 5 --json")]
    Create(CreateArgs),
    /// List tasks, newest first.
    #[command(
        after_help = "Examples:\n  orchestrator task list\n  orchestrator task list --state failed --limit 10 --json"
    )]
    List(ListArgs),
    /// Show a task with its gates and their evidence.
    #[command(
        after_help = "Examples:\n  orchestrator task read 42\n  orchestrator task read 42 --json | jq '.gates[].verdict'"
    )]
    Read(IdArgs),
    /// Print a task's events; with --follow, keep printing until the task finishes.
    #[command(
        after_help = "Examples:\n  orchestrator task events 42\n  orchestrator task events 42 --follow --json"
    )]
    Events(EventsArgs),
    /// Cancel a task: a queued one at once, a running one by killing its gate's process group.
    #[command(after_help = "Example:\n  orchestrator task cancel 42")]
    Cancel(IdArgs),
    /// Queue a failed or canceled task again.
    #[command(after_help = "Example:\n  orchestrator task retry 42")]
    Retry(IdArgs),
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// What the task is, in a few words.
    #[arg(long)]
    pub title: String,
    /// A verification command (run by `sh -c` in the workspace); repeat for several gates.
    #[arg(long = "gate", value_name = "CMD")]
    pub gates: Vec<String>,
    /// Seconds before a gate is killed with its whole process group.
    #[arg(long, value_name = "SECONDS", default_value_t = orchestrator_types::DEFAULT_GATE_TIMEOUT_SECS)]
    pub gate_timeout: u64,
    /// Directory the gates run in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Instructions for an agent. Not available in this version: refused with an explanation.
    #[arg(long)]
    pub prompt: Option<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    #[arg(long, default_value = orchestrator_types::DEFAULT_QUEUE)]
    pub queue: String,
    /// Attempts before the task fails for good (lost leases and infrastructure errors retry).
    #[arg(long, default_value_t = orchestrator_types::DEFAULT_MAX_ATTEMPTS)]
    pub max_attempts: i64,
    /// Not before this time: RFC 3339 (2026-11-22T03:00:00Z), `now`, or a delay (90s, 15m, 2h, 1d).
    #[arg(long, value_name = "TIME")]
    pub run_after: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long, value_name = "STATE")]
    pub state: Option<String>,
    #[arg(long)]
    pub queue: Option<String>,
    #[arg(long, default_value_t = 50)]
    pub limit: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct IdArgs {
    pub id: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    pub id: String,
    /// Keep printing new events until the task reaches a final state.
    #[arg(long, short)]
    pub follow: bool,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
}

pub fn parse_id(text: &str) -> anyhow::Result<TaskId> {
    Ok(text.parse::<TaskId>()?)
}

/// Builds a task from the flags shared by `task create` and `run`.
pub fn build_task(
    title: &str,
    gates: &[String],
    gate_timeout: u64,
    workspace: Option<&PathBuf>,
    prompt: Option<&String>,
) -> anyhow::Result<NewTask> {
    let mut task = NewTask::new(title);
    task.prompt = prompt.cloned();
    for command in gates {
        let mut gate = GateSpec::from_command(command.clone());
        gate.timeout_secs = gate_timeout;
        task.gates.push(gate);
    }
    // Check the cheap things first, so `--gate ''` is reported before a bad workspace.
    task.validate()?;
    if task.gates.is_empty() {
        return Err(CliError::Invalid("nothing to do: give at least one --gate CMD".into()).into());
    }
    task.workspace = Some(super::workspace_dir(workspace)?);
    Ok(task)
}

pub async fn run(global: &GlobalArgs, command: TaskCommand) -> anyhow::Result<ExitCode> {
    match command {
        TaskCommand::Create(args) => create(global, args).await,
        TaskCommand::List(args) => list(global, args).await,
        TaskCommand::Read(args) => read(global, args).await,
        TaskCommand::Events(args) => events(global, args).await,
        TaskCommand::Cancel(args) => cancel(global, args).await,
        TaskCommand::Retry(args) => retry(global, args).await,
    }
}

async fn create(global: &GlobalArgs, args: CreateArgs) -> anyhow::Result<ExitCode> {
    let mut task = build_task(
        &args.title,
        &args.gates,
        args.gate_timeout,
        args.workspace.as_ref(),
        args.prompt.as_ref(),
    )?;
    task.priority = args.priority;
    task.queue = args.queue;
    task.max_attempts = args.max_attempts;
    if let Some(text) = &args.run_after {
        task.run_after = Some(parse_time(text, now_millis())?);
    }
    task.validate()?;
    let store = global.open_store().await?;
    let id = store.create_task(&task).await?;
    let created = store.get_task(id).await?;
    if args.json {
        output::json(&TaskView::summary(&created))?;
    } else {
        println!(
            "created task {id} ({}, {} gate{}, runs after {})",
            created.state,
            created.gates.len(),
            if created.gates.len() == 1 { "" } else { "s" },
            format_millis(created.run_after)
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(global: &GlobalArgs, args: ListArgs) -> anyhow::Result<ExitCode> {
    let state = args
        .state
        .as_deref()
        .map(str::parse::<TaskState>)
        .transpose()?;
    let store = global.open_store().await?;
    let tasks = store
        .list_tasks(&TaskFilter {
            state,
            queue: args.queue,
            limit: Some(args.limit),
        })
        .await?;
    if args.json {
        let views: Vec<TaskView> = tasks.iter().map(TaskView::summary).collect();
        output::json(&views)?;
        return Ok(ExitCode::SUCCESS);
    }
    if tasks.is_empty() {
        println!("no tasks");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            vec![
                t.id.to_string(),
                t.state.to_string(),
                format!("{}/{}", t.attempt, t.max_attempts),
                t.queue.clone(),
                t.priority.to_string(),
                format_millis(t.updated_at),
                output::clip(&t.title, 60),
            ]
        })
        .collect();
    output::table(
        &[
            "ID", "STATE", "ATTEMPT", "QUEUE", "PRIO", "UPDATED", "TITLE",
        ],
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}

async fn read(global: &GlobalArgs, args: IdArgs) -> anyhow::Result<ExitCode> {
    let id = parse_id(&args.id)?;
    let store = global.open_store().await?;
    let task = store.get_task(id).await?;
    let view = TaskView::full(&store, &task).await?;
    if args.json {
        output::json(&view)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("task {}  {}", view.id, view.title);
    println!(
        "state      {}{}",
        view.state,
        if view.cancel_requested {
            " (cancel requested)"
        } else {
            ""
        }
    );
    println!("attempt    {} of {}", view.attempt, view.max_attempts);
    println!("queue      {} (priority {})", view.queue, view.priority);
    if let Some(ws) = &view.workspace {
        println!("workspace  {ws}");
    }
    println!("created    {}", view.created_at);
    if let Some(t) = &view.finished_at {
        println!("finished   {t}");
    }
    if let Some(owner) = &view.lease_owner {
        println!(
            "lease      {owner} until {}",
            view.lease_expires_at.as_deref().unwrap_or("?")
        );
    }
    if let Some(error) = &view.last_error {
        println!("error      {error}");
    }
    if !view.gates.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = view
            .gates
            .iter()
            .map(|g| {
                vec![
                    g.name.clone(),
                    g.verdict.clone().unwrap_or_else(|| "-".into()),
                    g.exit_code
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "-".into()),
                    g.duration_ms
                        .map(output::duration)
                        .unwrap_or_else(|| "-".into()),
                    g.log_artifact
                        .map(|a| a.to_string())
                        .unwrap_or_else(|| "-".into()),
                    g.summary.clone().unwrap_or_default(),
                ]
            })
            .collect();
        output::table(
            &["GATE", "VERDICT", "EXIT", "TIME", "LOG", "SUMMARY"],
            &rows,
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints events after `after`, returning the last number printed.
pub async fn print_events(
    store: &Store,
    id: TaskId,
    mut after: i64,
    json: bool,
) -> anyhow::Result<i64> {
    loop {
        let batch = store.events(id, after, 500).await?;
        let Some(last) = batch.last() else {
            return Ok(after);
        };
        after = last.seq;
        for event in &batch {
            if json {
                output::json_line(&EventView::new(event))?;
            } else {
                println!("{}", event_line(event));
            }
        }
    }
}

/// Prints events until the task is final and every event is printed. Returns the final state.
pub async fn follow_events(store: &Store, id: TaskId, json: bool) -> anyhow::Result<TaskState> {
    let mut after = 0;
    loop {
        // Read the state before the events: if it is final, the events read next include the last.
        let state = store.get_task(id).await?.state;
        after = print_events(store, id, after, json).await?;
        if state.is_terminal() {
            return Ok(state);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn events(global: &GlobalArgs, args: EventsArgs) -> anyhow::Result<ExitCode> {
    let id = parse_id(&args.id)?;
    let store = global.open_store().await?;
    store.get_task(id).await?;
    if args.follow {
        follow_events(&store, id, args.json).await?;
    } else {
        print_events(&store, id, 0, args.json).await?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn cancel(global: &GlobalArgs, args: IdArgs) -> anyhow::Result<ExitCode> {
    let id = parse_id(&args.id)?;
    let store = global.open_store().await?;
    let outcome = store.cancel_task(id).await?;
    if args.json {
        output::json(&serde_json::json!({ "id": id.0, "outcome": outcome }))?;
    } else {
        match outcome {
            CancelOutcome::Canceled => println!("task {id} canceled"),
            CancelOutcome::Requested => {
                println!("task {id} is running: its worker will stop it and mark it canceled")
            }
            CancelOutcome::AlreadyCanceled => println!("task {id} was already canceled"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn retry(global: &GlobalArgs, args: IdArgs) -> anyhow::Result<ExitCode> {
    let id = parse_id(&args.id)?;
    let store = global.open_store().await?;
    let task = store.retry_task(id).await?;
    if args.json {
        output::json(&TaskView::summary(&task))?;
    } else {
        println!(
            "task {id} queued again (attempt {} of at most {} so far)",
            task.attempt, task.max_attempts
        );
    }
    Ok(ExitCode::SUCCESS)
}
