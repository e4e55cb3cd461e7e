//! `orchestrator automation ...`: cron automations that create tasks, from the command line or
//! from schedules/*.toml files.

use super::GlobalArgs;
use crate::exit::CliError;
use crate::output;
use clap::{Args, Subcommand};
use orchestrator_scheduler::files::{self, ApplyReport};
use orchestrator_scheduler::manage;
use orchestrator_scheduler::{
    AutomationView, DEFAULT_PREVIEW_COUNT, Schedule, SlotView, jitter_offset_ms, run_now,
    schedule_of,
};
use orchestrator_store::{SOURCE_CLI, SlotResult, Store};
use orchestrator_types::{
    AutomationSpec, AutomationStatus, GateSpec, format_millis, now_millis, parse_time,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum AutomationCommand {
    /// Create an automation: a cron schedule in a time zone that creates a task per workspace.
    #[command(after_help = "\
Examples:
  orchestrator automation create --name nightly --schedule '0 3 * * 1-5' --tz Europe/Berlin \\
      --gate 'cargo test' --workspace ~/src/app
  orchestrator automation create --name lint --schedule '*/30 9-18 * * 1-5' --tz America/New_York \\
      --gate 'cargo clippy' --overlap cancel_previous --jitter 120 --json
  orchestrator automation create --name deps --schedule '0 6 * * 1' --tz UTC \\
      --repository widgets --ref main --prompt 'Update the dependencies' --gate 'cargo test'

Schedules are cron expressions: 5 fields (minute hour day-of-month month day-of-week), or 6/7 with
seconds first and a year last. Sunday is 0 or 7. Daylight-saving changes follow Vixie cron: a job at
a fixed time in a skipped hour runs right after it, once in a repeated hour.")]
    Create(Box<CreateArgs>),
    /// List automations with their next fire time.
    #[command(
        after_help = "Examples:\n  orchestrator automation list\n  orchestrator automation list --json"
    )]
    List(JsonArgs),
    /// Show an automation, its next fire times and its recent slots with their tasks' states.
    #[command(
        visible_alias = "show",
        after_help = "Examples:\n  orchestrator automation read nightly\n  orchestrator automation read nightly --slots 50 --json"
    )]
    Read(ReadArgs),
    /// Change an automation: only the flags given change. A new schedule starts from now.
    #[command(
        after_help = "Examples:\n  orchestrator automation update nightly --schedule '30 2 * * *'\n  orchestrator automation update nightly --overlap allow --json"
    )]
    Update(Box<UpdateArgs>),
    /// Stop firing an automation's slots. Slots that pass while paused are not caught up.
    #[command(after_help = "Example:\n  orchestrator automation pause nightly")]
    Pause(StatusArgs),
    /// Fire an automation's slots again, from the next one after now.
    #[command(
        after_help = "Examples:\n  orchestrator automation resume nightly\n  orchestrator automation resume nightly --note \"the freeze is over\""
    )]
    Resume(StatusArgs),
    /// Delete an automation and its slot history. The tasks it created stay.
    #[command(after_help = "Example:\n  orchestrator automation delete nightly")]
    Delete(NameArgs),
    /// Fire a manual slot now, outside the schedule, honouring the overlap policy unless --force.
    #[command(
        after_help = "Examples:\n  orchestrator automation run nightly\n  orchestrator automation run nightly --force --json"
    )]
    Run(RunArgs),
    /// Print the next fire times of an automation or of an expression, as RFC 3339 instants.
    #[command(after_help = "\
Examples:
  orchestrator automation preview nightly
  orchestrator automation preview --schedule '0 3 * * 1-5' --tz Europe/Berlin --count 10
  orchestrator automation preview --schedule '30 2 * * *' --tz Europe/Berlin --from 2026-03-28T00:00:00Z --json")]
    Preview(PreviewArgs),
    /// Make the store match a directory of schedules files (*.toml): create, update, remove the
    /// automations that came from files. Automations made on the command line are left alone.
    #[command(after_help = "\
Examples:
  orchestrator automation apply                    the schedules directory in the home directory
  orchestrator automation apply ./schedules --json

A file that does not parse is reported and skipped; the other files still apply.")]
    Apply(DirArgs),
    /// Check a directory of schedules files without touching the store.
    #[command(
        after_help = "Examples:\n  orchestrator automation validate ./schedules\n  orchestrator automation validate --json"
    )]
    Validate(DirArgs),
}

#[derive(Debug, Args)]
pub struct SpecFlags {
    /// IANA time zone of the schedule, such as Europe/Berlin.
    #[arg(long = "tz", value_name = "ZONE")]
    pub tz: Option<String>,
    /// Title of the tasks (default: the automation's name); the slot's local time is appended.
    #[arg(long)]
    pub title: Option<String>,
    /// Instructions for an agent. Without --ask/--policy granting them, an automation's agent may
    /// read and search but not write files, run commands or reach the network.
    #[arg(long)]
    pub prompt: Option<String>,
    #[command(flatten)]
    pub agent: super::agent_flags::AgentFlags,
    /// A verification command each task runs; repeat for several gates.
    #[arg(long = "gate", value_name = "CMD")]
    pub gates: Vec<String>,
    /// Seconds before a gate is killed with its whole process group.
    #[arg(long, value_name = "SECONDS")]
    pub gate_timeout: Option<u64>,
    /// A directory to run in; repeat for several (one task per workspace per slot).
    #[arg(long = "workspace", value_name = "DIR")]
    pub workspaces: Vec<PathBuf>,
    /// Work on a repository instead of a directory: each slot creates one task, whose workspace
    /// the daemon that runs it makes (a URL git fetches, or a name in the config's
    /// [repositories]; never with a credential in the URL).
    #[arg(long, value_name = "URL|NAME", conflicts_with = "workspaces")]
    pub repository: Option<String>,
    /// The branch, tag, ref or commit of --repository (default: the config's default_ref for a
    /// name, else the repository's default branch).
    #[arg(long = "ref", value_name = "REF", requires = "repository")]
    pub git_ref: Option<String>,
    /// Slots missed while no scheduler ran: skip, latest (the most recent one) or all.
    #[arg(long, value_name = "POLICY")]
    pub catch_up: Option<String>,
    /// With --catch-up all: how far back missed slots fire.
    #[arg(long, value_name = "SECONDS")]
    pub catch_up_window: Option<u64>,
    /// With --catch-up all: at most this many missed slots fire.
    #[arg(long, value_name = "N")]
    pub catch_up_cap: Option<u64>,
    /// While a previous run is unfinished: skip, buffer_one, allow or cancel_previous.
    #[arg(long, value_name = "POLICY")]
    pub overlap: Option<String>,
    /// Fire each slot a stable offset in [0, SECONDS) after its time, to spread load.
    #[arg(long, value_name = "SECONDS")]
    pub jitter: Option<u64>,
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i64>,
    #[arg(long)]
    pub queue: Option<String>,
    #[arg(long)]
    pub max_attempts: Option<i64>,
    /// At most this many of the automation's tasks run at once, on every daemon of the store;
    /// the others wait their turn in the queue.
    #[arg(long, value_name = "N")]
    pub max_running: Option<u32>,
    /// The most tokens the automation's tasks spend in a day (UTC); past it, their new attempts
    /// wait for the next day, saying so.
    #[arg(long, value_name = "TOKENS")]
    pub daily_tokens: Option<u64>,
    /// Each task is tried by N sibling agents at once and the gates keep one (2 to 8; the tasks
    /// need a repository and a gate). See docs/best-of.md.
    #[arg(long, value_name = "N")]
    pub best_of: Option<u32>,
    /// With --best-of: first_passing, smallest_passing (the default) or judge.
    #[arg(long, value_name = "HOW", requires = "best_of")]
    pub choose: Option<String>,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    #[arg(long)]
    pub name: String,
    /// Cron expression, such as '0 3 * * 1-5'.
    #[arg(long, value_name = "EXPR")]
    pub schedule: String,
    #[command(flatten)]
    pub flags: SpecFlags,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    pub name: String,
    #[arg(long, value_name = "EXPR")]
    pub schedule: Option<String>,
    #[command(flatten)]
    pub flags: SpecFlags,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct JsonArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct NameArgs {
    pub name: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    pub name: String,
    /// Why, kept beside the status until the next pause or resume (shown by `automation read`,
    /// the API and the dashboard).
    #[arg(long)]
    pub note: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReadArgs {
    pub name: String,
    /// How many recent slots to show.
    #[arg(long, default_value_t = 20)]
    pub slots: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    pub name: String,
    /// Fire even if a previous run is unfinished (ignore the overlap policy).
    #[arg(long)]
    pub force: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// An existing automation; or give --schedule.
    pub name: Option<String>,
    #[arg(long, value_name = "EXPR", conflicts_with = "name")]
    pub schedule: Option<String>,
    #[arg(long = "tz", value_name = "ZONE", conflicts_with = "name")]
    pub tz: Option<String>,
    /// Start after this time: RFC 3339, `now` (the default) or a delay such as 2h.
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,
    #[arg(long, default_value_t = DEFAULT_PREVIEW_COUNT)]
    pub count: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DirArgs {
    /// Directory of *.toml files (default: `schedules` in the home directory).
    pub dir: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

fn invalid(message: impl Into<String>) -> anyhow::Error {
    CliError::Invalid(message.into()).into()
}

/// Scheduler errors about input (a bad expression, an unknown zone) exit with "invalid input".
fn input_error(e: orchestrator_scheduler::Error) -> anyhow::Error {
    use orchestrator_scheduler::Error as E;
    match e {
        E::Store(e) => e.into(),
        E::Invalid(e) => e.into(),
        other => invalid(other.to_string()),
    }
}

/// Applies the flags that were given to `spec`.
fn apply_flags(
    spec: &mut AutomationSpec,
    flags: &SpecFlags,
    config: &crate::config::Config,
) -> anyhow::Result<()> {
    if flags.agent.any() || flags.prompt.is_some() {
        if let Some(model) = flags.agent.model_spec(config)? {
            spec.template.model = Some(model);
        }
        if flags.agent.any() {
            spec.template.agent = flags
                .agent
                .options(orchestrator_worker::agent::automation_default_policy())?;
        }
        if !flags.agent.acceptance.is_empty() {
            spec.template.acceptance = flags.agent.acceptance.clone();
        }
    }
    if let Some(tz) = &flags.tz {
        spec.timezone = tz.trim().to_owned();
    }
    if let Some(title) = &flags.title {
        spec.template.title = Some(title.clone());
    }
    if let Some(prompt) = &flags.prompt {
        spec.template.prompt = Some(prompt.clone());
    }
    if spec.template.prompt.is_some() && spec.template.model.is_none() {
        return Err(invalid(
            "no model for the agent: pass --model NAME (with --base-url for a server other than \
             OpenAI's), or set [model] in the config file",
        ));
    }
    if spec.template.prompt.is_none() && flags.agent.any() {
        return Err(invalid(
            "agent flags (--model, --profile, --ask, ...) need a prompt",
        ));
    }
    if !flags.gates.is_empty() {
        spec.template.gates = flags
            .gates
            .iter()
            .map(|c| GateSpec::from_command(c.clone()))
            .collect();
    }
    if let Some(timeout) = flags.gate_timeout {
        for gate in &mut spec.template.gates {
            gate.timeout_secs = timeout;
        }
    }
    if !flags.workspaces.is_empty() {
        spec.workspaces = flags
            .workspaces
            .iter()
            .map(|w| super::workspace_dir(Some(w)))
            .collect::<anyhow::Result<_>>()?;
        // Directories given: the tasks run in them, not on a repository.
        spec.template.repository = None;
        spec.template.git_ref = None;
    }
    if let Some(repository) = &flags.repository {
        spec.template.repository = Some(config.repository_ref(repository, flags.git_ref.clone()));
        spec.template.git_ref = None;
        spec.workspaces.clear();
    }
    if let Some(word) = &flags.catch_up {
        spec.catch_up = word.parse()?;
    }
    if let Some(window) = flags.catch_up_window {
        spec.catch_up_window_secs = window;
    }
    if let Some(cap) = flags.catch_up_cap {
        spec.catch_up_cap = cap;
    }
    if let Some(word) = &flags.overlap {
        spec.overlap = word.parse()?;
    }
    if let Some(jitter) = flags.jitter {
        spec.jitter_secs = jitter;
    }
    if let Some(priority) = flags.priority {
        spec.template.priority = priority;
    }
    if let Some(queue) = &flags.queue {
        spec.template.queue = queue.clone();
    }
    if let Some(max) = flags.max_attempts {
        spec.template.max_attempts = max;
    }
    if let Some(max_running) = flags.max_running {
        spec.template.max_running = Some(max_running);
    }
    if let Some(tokens) = flags.daily_tokens {
        spec.template.daily_tokens = Some(tokens);
    }
    if let Some(n) = flags.best_of {
        let mut best_of = spec
            .template
            .best_of
            .clone()
            .unwrap_or(orchestrator_types::BestOf {
                n,
                choose: orchestrator_types::Choose::default(),
                budget: orchestrator_types::BudgetShare::default(),
                judge: None,
                pull_request: None,
            });
        best_of.n = n;
        if let Some(text) = &flags.choose {
            best_of.choose = orchestrator_types::Choose::parse(text)
                .map_err(|e| CliError::Invalid(format!("--choose: {e}")))?;
        }
        best_of
            .validate()
            .map_err(|e| CliError::Invalid(format!("--best-of: {e}")))?;
        spec.template.best_of = Some(best_of);
    }
    Ok(())
}

pub async fn run(global: &GlobalArgs, command: AutomationCommand) -> anyhow::Result<ExitCode> {
    match command {
        AutomationCommand::Create(args) => create(global, *args).await,
        AutomationCommand::List(args) => list(global, args).await,
        AutomationCommand::Read(args) => read(global, args).await,
        AutomationCommand::Update(args) => update(global, *args).await,
        AutomationCommand::Pause(args) => set_status(global, args, AutomationStatus::Paused).await,
        AutomationCommand::Resume(args) => set_status(global, args, AutomationStatus::Active).await,
        AutomationCommand::Delete(args) => delete(global, args).await,
        AutomationCommand::Run(args) => run_slot(global, args).await,
        AutomationCommand::Preview(args) => preview(global, args).await,
        AutomationCommand::Apply(args) => apply(global, args).await,
        AutomationCommand::Validate(args) => validate(global, args).await,
    }
}

fn print_automation(view: &AutomationView, json: bool, verb: &str) -> anyhow::Result<()> {
    if json {
        output::json(view)?;
    } else {
        println!(
            "{verb} automation {} ({}, {} in {}; next {})",
            view.name,
            view.status,
            view.schedule,
            view.timezone,
            view.next_fire_local.as_deref().unwrap_or("never")
        );
    }
    Ok(())
}

async fn create(global: &GlobalArgs, args: CreateArgs) -> anyhow::Result<ExitCode> {
    let mut spec = AutomationSpec::new(args.name.trim(), args.schedule.trim());
    let defaults_to_cwd = args.flags.workspaces.is_empty() && args.flags.repository.is_none();
    apply_flags(&mut spec, &args.flags, &global.config()?)?;
    if defaults_to_cwd {
        spec.workspaces = vec![super::workspace_dir(None)?];
    }
    // Checked before the store is opened: a bad expression needs no database to be refused.
    files::validate_spec(&spec).map_err(input_error)?;
    let store = global.open_store().await?;
    let created = manage::create(&store, &spec, SOURCE_CLI, now_millis())
        .await
        .map_err(input_error)?;
    print_automation(&AutomationView::new(&created), args.json, "created")?;
    Ok(ExitCode::SUCCESS)
}

async fn list(global: &GlobalArgs, args: JsonArgs) -> anyhow::Result<ExitCode> {
    let store = global.open_store().await?;
    let all = store.list_automations().await?;
    let views: Vec<AutomationView> = all.iter().map(AutomationView::new).collect();
    if args.json {
        output::json(&views)?;
        return Ok(ExitCode::SUCCESS);
    }
    if views.is_empty() {
        println!("no automations");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                match &v.last_error {
                    Some(error) => format!("{} ({error})", v.status),
                    None => v.status.to_string(),
                },
                v.schedule.clone(),
                v.timezone.clone(),
                v.next_fire_local.clone().unwrap_or_else(|| "-".into()),
                v.overlap.to_string(),
                v.source.clone(),
            ]
        })
        .collect();
    output::table(
        &[
            "NAME", "STATUS", "SCHEDULE", "TZ", "NEXT", "OVERLAP", "SOURCE",
        ],
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}

async fn read(global: &GlobalArgs, args: ReadArgs) -> anyhow::Result<ExitCode> {
    let store = global.open_store().await?;
    let automation = store.automation(&args.name).await?;
    let schedule = schedule_of(&automation.spec).map_err(input_error)?;
    let mut view = AutomationView::new(&automation);
    // Fire times, so with the automation's jitter; the local label below shows the slot itself.
    let jitter = jitter_offset_ms(&automation.spec.name, automation.spec.jitter_secs);
    let fires: Vec<i64> = schedule
        .upcoming(now_millis(), DEFAULT_PREVIEW_COUNT)
        .into_iter()
        .map(|t| t + jitter)
        .collect();
    view.next_fires = Some(fires.iter().copied().map(format_millis).collect());
    let slots = store.slots(automation.id, args.slots).await?;
    view.slots = Some(slots.iter().map(SlotView::new).collect());
    if args.json {
        output::json(&view)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("automation {}  ({})", view.name, view.status);
    if let Some(error) = &view.last_error {
        println!(
            "error      {error}; fix the template, then `automation resume {}`",
            view.name
        );
    }
    println!(
        "schedule   {} ({}) in {}",
        view.schedule_words, view.schedule, view.timezone
    );
    if let Some(note) = &view.status_note {
        println!("note       {note}");
    }
    println!(
        "policies   catch-up {}, overlap {}, jitter {}s",
        view.catch_up, view.overlap, view.jitter_secs
    );
    println!(
        "source     {}{}",
        view.source,
        view.source_path
            .as_deref()
            .map(|p| format!(" ({p})"))
            .unwrap_or_default()
    );
    for workspace in &view.workspaces {
        println!("workspace  {workspace}");
    }
    if let Some(repository) = &view.repository {
        println!("repository {}", repository.describe());
    }
    for gate in &view.gates {
        println!("gate       {}", gate.command);
    }
    println!();
    println!("next fire times:");
    for t in &fires {
        println!(
            "  {}  ({}, slot {})",
            orchestrator_scheduler::in_zone(*t, &view.timezone),
            format_millis(*t),
            schedule.local_label(*t - jitter)
        );
    }
    if !slots.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = view
            .slots
            .iter()
            .flatten()
            .map(|s| {
                vec![
                    s.slot.clone(),
                    s.kind.clone(),
                    s.status.clone(),
                    s.tasks
                        .iter()
                        .map(|t| format!("{}:{}", t.id, t.state))
                        .collect::<Vec<_>>()
                        .join(" "),
                    s.reason.clone().unwrap_or_default(),
                ]
            })
            .collect();
        output::table(&["SLOT", "KIND", "STATUS", "TASKS", "REASON"], &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn update(global: &GlobalArgs, args: UpdateArgs) -> anyhow::Result<ExitCode> {
    let store = global.open_store().await?;
    let current = store.automation(&args.name).await?;
    let mut spec = current.spec.clone();
    if let Some(schedule) = &args.schedule {
        spec.schedule = schedule.trim().to_owned();
    }
    apply_flags(&mut spec, &args.flags, &global.config()?)?;
    let updated = manage::update(&store, &current, &spec, now_millis())
        .await
        .map_err(input_error)?;
    print_automation(&AutomationView::new(&updated), args.json, "updated")?;
    Ok(ExitCode::SUCCESS)
}

async fn set_status(
    global: &GlobalArgs,
    args: StatusArgs,
    status: AutomationStatus,
) -> anyhow::Result<ExitCode> {
    let store = global.open_store().await?;
    let updated = manage::set_status(
        &store,
        &args.name,
        status,
        args.note.as_deref(),
        "the command line",
        now_millis(),
    )
    .await
    .map_err(input_error)?;
    let verb = match status {
        AutomationStatus::Paused => "paused",
        AutomationStatus::Active => "resumed",
    };
    print_automation(&AutomationView::new(&updated), args.json, verb)?;
    Ok(ExitCode::SUCCESS)
}

async fn delete(global: &GlobalArgs, args: NameArgs) -> anyhow::Result<ExitCode> {
    let store = global.open_store().await?;
    store.delete_automation(&args.name).await?;
    if args.json {
        output::json(&serde_json::json!({ "name": args.name, "deleted": true }))?;
    } else {
        println!("deleted automation {}", args.name);
    }
    Ok(ExitCode::SUCCESS)
}

async fn run_slot(global: &GlobalArgs, args: RunArgs) -> anyhow::Result<ExitCode> {
    let store = global.open_store().await?;
    let automation = store.automation(&args.name).await?;
    let now = now_millis();
    let result = run_now(&store, &automation, args.force, "cli", now)
        .await
        .map_err(input_error)?;
    if args.json {
        output::json(&serde_json::json!({
            "name": args.name,
            "slot": format_millis(now),
            "result": result,
        }))?;
    } else {
        match &result {
            SlotResult::Fired { tasks } => println!(
                "fired a manual slot of {}: task{} {}",
                args.name,
                if tasks.len() == 1 { "" } else { "s" },
                tasks
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            SlotResult::Skipped { reason } => {
                println!("skipped: {reason}; use --force to run anyway")
            }
            SlotResult::Buffered => println!(
                "buffered: it fires when the unfinished run of {} finishes",
                args.name
            ),
            SlotResult::AlreadyRecorded => {
                println!("a slot at this instant already exists; try again")
            }
        }
    }
    // A skipped manual run did not do what was asked: say so in the exit code too.
    Ok(match result {
        SlotResult::Skipped { .. } => ExitCode::from(crate::exit::CONFLICT),
        _ => ExitCode::SUCCESS,
    })
}

async fn preview(global: &GlobalArgs, args: PreviewArgs) -> anyhow::Result<ExitCode> {
    let now = now_millis();
    let from = match &args.from {
        Some(text) => parse_time(text, now)?,
        None => now,
    };
    if args.count == 0 || args.count > 10_000 {
        return Err(invalid("--count must be between 1 and 10000"));
    }
    let (schedule, jitter): (Schedule, i64) = match (&args.name, &args.schedule) {
        (Some(name), _) => {
            let store = global.open_store().await?;
            let spec = store.automation(name).await?.spec;
            let jitter = jitter_offset_ms(&spec.name, spec.jitter_secs);
            (schedule_of(&spec).map_err(input_error)?, jitter)
        }
        (None, Some(expr)) => (
            Schedule::parse(expr, args.tz.as_deref().unwrap_or("UTC")).map_err(input_error)?,
            0,
        ),
        (None, None) => return Err(invalid("give an automation name or --schedule EXPR")),
    };
    let instants: Vec<i64> = schedule
        .upcoming(from - jitter, args.count)
        .into_iter()
        .map(|t| t + jitter)
        .collect();
    if args.json {
        let times: Vec<String> = instants.iter().map(|t| format_millis(*t)).collect();
        output::json(&times)?;
    } else {
        // Each time in UTC and, for a schedule in another zone, as the zone's clock reads it: the
        // time a person wrote the schedule in.
        let zone = schedule.timezone();
        for t in instants {
            if matches!(zone.name(), "UTC" | "Etc/UTC") {
                println!("{}", format_millis(t));
            } else {
                println!("{}  {} {zone}", format_millis(t), schedule.local_label(t));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn schedules_dir(global: &GlobalArgs, dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match dir {
        Some(dir) => Ok(dir),
        None => Ok(global.home()?.join("schedules")),
    }
}

/// Applies a schedules directory to the store (used by `automation apply` and by `serve` at start).
pub async fn apply_dir(
    store: &Store,
    dir: &Path,
    config: &crate::config::Config,
) -> anyhow::Result<ApplyReport> {
    let resolve = |name: &str, git_ref: Option<String>| config.repository_ref(name, git_ref);
    let load = files::load_dir_with(dir, &resolve).map_err(input_error)?;
    files::apply(store, &load, now_millis())
        .await
        .map_err(input_error)
}

fn print_report(report: &ApplyReport, json: bool) -> anyhow::Result<()> {
    if json {
        return output::json(report);
    }
    for (word, names) in [
        ("created", &report.created),
        ("updated", &report.updated),
        ("unchanged", &report.unchanged),
        ("removed", &report.removed),
    ] {
        for name in names {
            println!("{word:<10} {name}");
        }
    }
    for kept in &report.kept {
        eprintln!("kept: {kept}");
    }
    for error in &report.errors {
        eprintln!("error: {error}");
    }
    Ok(())
}

async fn apply(global: &GlobalArgs, args: DirArgs) -> anyhow::Result<ExitCode> {
    let dir = schedules_dir(global, args.dir)?;
    let store = global.open_store().await?;
    let report = apply_dir(&store, &dir, &global.config()?).await?;
    print_report(&report, args.json)?;
    Ok(if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::INVALID)
    })
}

async fn validate(global: &GlobalArgs, args: DirArgs) -> anyhow::Result<ExitCode> {
    let dir = schedules_dir(global, args.dir)?;
    let config = global.config()?;
    let resolve = |name: &str, git_ref: Option<String>| config.repository_ref(name, git_ref);
    let load = files::load_dir_with(&dir, &resolve).map_err(input_error)?;
    let errors: Vec<String> = load.errors.iter().map(ToString::to_string).collect();
    if args.json {
        output::json(&serde_json::json!({
            "valid": load.automations.iter().map(|a| serde_json::json!({
                "name": a.spec.name,
                "path": a.path,
            })).collect::<Vec<_>>(),
            "errors": errors,
        }))?;
    } else {
        for a in &load.automations {
            println!("ok     {}  ({})", a.spec.name, a.path.display());
        }
        for error in &errors {
            eprintln!("error: {error}");
        }
    }
    Ok(if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::INVALID)
    })
}
