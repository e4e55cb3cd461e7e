//! `orchestrator task ...`: create, list, read, follow, cancel and retry tasks.

use super::GlobalArgs;
use super::views::{EventView, TaskView, attempt_header, event_line};
use crate::exit::CliError;
use crate::output;
use clap::{Args, Subcommand};
use orchestrator_store::{CancelOutcome, Store, TaskFilter};
use orchestrator_types::{
    GateSpec, NewTask, TaskId, TaskState, format_millis, now_millis, parse_time,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Create a task. Without a prompt it is a verification task: it succeeds when every gate passes.
    #[command(after_help = "\
Examples:
  orchestrator task create --title 'unit tests' --gate 'cargo test' --workspace ~/src/app
  orchestrator task create --title 'nightly' --gate 'make check' --run-after 2h --priority 5 --json
  orchestrator task create --title 'fix #7' --prompt 'Fix issue 7' --gate 'cargo test' \\
      --clone-from ~/src/app --workspace ~/clones/app-7
  orchestrator task create --title 'train' --gate 'make train' --require-label gpu
  orchestrator task create --title 'fix #8' --prompt 'Fix issue 8' --gate 'cargo test' \\
      --repository https://github.com/acme/widgets.git --ref main
  orchestrator task create --title 'lint' --gate 'make lint' --repository widgets   (a name in [repositories])
  orchestrator task create --title 'tests' --prompt 'Fix the flaky test' --gate 'npm test' \\
      --repository widgets --setup 'npm ci'   (setup with the network, then the agent without)
  orchestrator task create --title 'address the review' --prompt 'Rename foo to bar as asked' \
      --gate 'cargo test' --pull acme/widgets#34 --repository widgets
  orchestrator task create --title 'docs' --gate 'make docs' --concurrency-key docs --max-running 1
  orchestrator task create --title 'fix #7' --prompt 'Fix issue 7' --gate 'cargo test' \
      --repository widgets --best-of 3 --choose smallest_passing --open-pr acme/widgets --pr-issue 7

With --best-of N, the task makes N sibling tasks that try it at once, each in a clone of its own;
the task's gates run on each sibling's tree, which is kept as an attempt, and --choose keeps one.
`task read` shows the siblings side by side; `attempt select` changes the choice before a pull
request is opened (docs/best-of.md).

With --repository, the daemon that runs the task makes its workspace: a clone of its own mirror of
the repository at the ref's commit, in its workspaces directory. Such a task can run on any machine.

With --pull, the task works at the pull request's head and pushes one commit to its branch after
its gates pass. Someone else's push meanwhile is never overwritten: the task says so and a task like
it runs again on the new head (twice at most). --repository defaults to the [repositories] entry
whose URL names OWNER/NAME, else https://github.com/OWNER/NAME.git.

A task on a --workspace path runs only on this machine (config [worker] host), or on any daemon
that lists a [worker] shared_paths directory holding the path.")]
    Create(Box<CreateArgs>),
    /// List tasks, newest first.
    #[command(
        after_help = "Examples:\n  orchestrator task list\n  orchestrator task list --state failed --limit 10 --json"
    )]
    List(ListArgs),
    /// Show a task with its gates and their evidence; for an agent task also its checklist, turns,
    /// tool calls, shell jobs, children and the requests waiting for you.
    #[command(
        visible_alias = "show",
        after_help = "Examples:\n  orchestrator task read 42\n  orchestrator task read 42 --json | jq '.gates[].verdict'"
    )]
    Read(IdArgs),
    /// Print a task's events; with --follow, keep printing until the task finishes.
    #[command(
        after_help = "Examples:\n  orchestrator task events 42\n  orchestrator task events 42 --follow --json\n  orchestrator task events 42 --follow --server http://127.0.0.1:7411"
    )]
    Events(EventsArgs),
    /// Print a gate's, a shell job's, a terminal's or a background job's output: live while it
    /// runs (from any daemon), its recorded log once it ended; with --follow, keep printing until
    /// it ends, then print its verdict and exit with it.
    #[command(after_help = "\
Examples:
  orchestrator task logs 42                      the running gate, else the last that ran
  orchestrator task logs 42 --gate 'cargo test' --follow
  orchestrator task logs 42 --gate 1 --json | jq -r .text
  orchestrator task logs 42 --job 3 --follow     a shell job an agent started (task_shell_start)
  orchestrator task logs 42 --terminal pty-1 -f  a terminal the agent opened, raw to a pipe
  orchestrator task logs 42 --background job-2 -f
                                                 a background job of exec_shell (a dev server)

Exit status with --follow: 0 when the gate passed (a shell job's, a terminal's or a background
job's program exited 0); 1 when it failed, timed out or errored, exited otherwise, or was abandoned (the worker
running it stopped); 7 when it was canceled or killed; 3 when the task or the log does not
exist. Without --follow it is 0 whenever the log was read.")]
    Logs(super::task_logs::LogsArgs),
    /// Cancel a task: a queued one at once, a running one by killing its gate's process group.
    ///
    /// A running task is stopped by the worker running it; the command waits until it is
    /// canceled (at most --wait seconds), so a `task retry` right after finds it canceled.
    #[command(
        after_help = "Examples:\n  orchestrator task cancel 42\n  orchestrator task cancel 42 --wait 0      return as soon as the cancel is requested"
    )]
    Cancel(CancelArgs),
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
    /// Work in a clone of this git checkout, made in --workspace (absent or empty) when the task
    /// first runs and kept for its retries; the checkout itself is never edited. The daemon
    /// removes the clone once the task succeeds or is canceled (a failed one's after
    /// [workspaces] keep_failed_days).
    #[arg(long, value_name = "CHECKOUT", requires = "workspace")]
    pub clone_from: Option<PathBuf>,
    /// Work in a workspace the daemon makes from this repository: a URL git fetches (a path,
    /// file://, git://, https://, ssh://) or a name in the config's [repositories]. Never with a
    /// credential in the URL: the config's `token_env` names the variable that holds one.
    #[arg(long, value_name = "URL|NAME", conflicts_with_all = ["workspace", "clone_from"])]
    pub repository: Option<String>,
    /// The branch, tag, ref or commit of --repository (default: the config's default_ref for a
    /// name, else the repository's default branch).
    #[arg(long = "ref", value_name = "REF", requires = "repository")]
    pub git_ref: Option<String>,
    /// A setup command run before the agent (repeat for several), instead of the config's
    /// `setup` of the repository: with the network and --setup-env, then cached on the machine
    /// (docs/environments.md).
    #[arg(long = "setup", value_name = "CMD", requires = "repository")]
    pub setup: Vec<String>,
    /// A host setup may reach although it is not public (`host` or `host:port`; repeat).
    #[arg(long = "setup-network-host", value_name = "HOST", requires = "setup")]
    pub setup_network_hosts: Vec<String>,
    /// A variable of the daemon's that only setup receives (its name; repeat).
    #[arg(long = "setup-env", value_name = "VAR", requires = "setup")]
    pub setup_env: Vec<String>,
    /// Work on an existing pull request (OWNER/NAME#NUMBER): the workspace is the repository at
    /// the pull request's head, and once the gates pass on the result it is pushed to the pull
    /// request's branch as one new commit (never a new pull request, never forced). Only a branch
    /// this store opened is pushed to, unless --any-branch.
    #[arg(long, value_name = "OWNER/NAME#N", conflicts_with_all = ["workspace", "clone_from", "git_ref"])]
    pub pull: Option<String>,
    /// With --pull: push to the branch even though this store did not open it (your own branch
    /// in the repository, or a fork's whose owner lets maintainers push).
    #[arg(long, requires = "pull")]
    pub any_branch: bool,
    /// Instructions for an agent: the model works on them with the tools, then the gates decide.
    #[arg(long)]
    pub prompt: Option<String>,
    #[command(flatten)]
    pub agent: super::agent_flags::AgentFlags,
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
    /// A label the worker that runs the task must have (`serve --label gpu`); the task waits,
    /// saying so, while no live worker has it. Repeat for several.
    #[arg(long = "require-label", value_name = "LABEL")]
    pub require_labels: Vec<String>,
    /// At most --max-running tasks of this key run at once, on every daemon of the store; the
    /// others wait their turn in the queue, saying so.
    #[arg(long, value_name = "KEY", requires = "max_running")]
    pub concurrency_key: Option<String>,
    /// With --concurrency-key, or with --repository NAME (key `repository:NAME`): how many of
    /// the key's tasks may run at once. A repository's `max_running` in the config applies
    /// without it.
    #[arg(long, value_name = "N")]
    pub max_running: Option<u32>,
    /// The key whose queued tasks take turns with other keys' of the same priority (default:
    /// the task's repository, else its concurrency key).
    #[arg(long, value_name = "KEY")]
    pub fair_key: Option<String>,
    /// The key's share of the turns: a task of weight 2 takes two turns to another key's one
    /// (1 to 100; a repository's `weight` in the config applies without it).
    #[arg(long, value_name = "N")]
    pub weight: Option<u32>,
    /// N sibling agents try the task at once, each in a clone of its own, and the task's gates
    /// decide between them (2 to 8; needs --repository or --clone-from, and a --gate).
    #[arg(long, value_name = "N")]
    pub best_of: Option<u32>,
    /// With --best-of: first_passing (the first whose gates all pass; the others are stopped),
    /// smallest_passing (the default: the smallest passing change, once all ended) or judge (a
    /// model compares the passing diffs against --accept).
    #[arg(long, value_name = "HOW", requires = "best_of")]
    pub choose: Option<String>,
    /// With --best-of: the agent's budgets (--max-turns, --max-tokens, --max-seconds) are split
    /// between the siblings instead of each sibling's own.
    #[arg(long, requires = "best_of")]
    pub shared_budget: bool,
    /// With --best-of: open one pull request on OWNER/NAME from the chosen sibling (a draft
    /// unless --pr-ready). Without it, open it yourself: `attempt open-pr`.
    #[arg(long, value_name = "OWNER/NAME", requires = "best_of")]
    pub open_pr: Option<String>,
    /// With --open-pr: the issue the pull request fixes.
    #[arg(long, value_name = "N", requires = "open_pr")]
    pub pr_issue: Option<u64>,
    /// With --open-pr: ready for review rather than a draft.
    #[arg(long, requires = "open_pr")]
    pub pr_ready: bool,
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
pub struct CancelArgs {
    pub id: String,
    /// Seconds to wait for the worker of a running task to stop it; 0 returns at once.
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    pub wait: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    pub id: String,
    /// Keep printing new events until the task reaches a final state.
    #[arg(long, short)]
    pub follow: bool,
    /// Follow over the API of the daemon at this address instead of reading the store: the
    /// model's reply then streams on stderr as it is written (the token is ORCHESTRATOR_API_TOKEN,
    /// the config's api_token, or the home directory's api-token file).
    #[arg(
        long,
        env = "ORCHESTRATOR_SERVER",
        value_name = "URL",
        requires = "follow"
    )]
    pub server: Option<String>,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
}

/// For `--clone-from`: the checkout, absolute, after checking that it is one and that the workspace
/// can take its clone (absent, empty, or a clone made before); the workspace is made empty if
/// absent, so that it has an absolute path like any other.
fn prepare_clone_target(source: &Path, workspace: &Path) -> anyhow::Result<String> {
    let invalid = |message: String| anyhow::Error::from(CliError::Invalid(message));
    let source = std::fs::canonicalize(source)
        .map_err(|e| invalid(format!("--clone-from {}: {e}", source.display())))?;
    if !source.join(".git").exists() {
        return Err(invalid(format!(
            "--clone-from {} is not a git checkout",
            source.display()
        )));
    }
    if workspace.exists() {
        let reused = workspace.join(".git").exists();
        let empty = std::fs::read_dir(workspace).is_ok_and(|mut e| e.next().is_none());
        if !reused && !empty {
            return Err(invalid(format!(
                "--workspace {} is not empty and not a git checkout; the clone needs an empty or new directory",
                workspace.display()
            )));
        }
    } else {
        std::fs::create_dir_all(workspace)
            .map_err(|e| invalid(format!("--workspace {}: {e}", workspace.display())))?;
    }
    Ok(source.display().to_string())
}

pub fn parse_id(text: &str) -> anyhow::Result<TaskId> {
    Ok(text.parse::<TaskId>()?)
}

/// What `task create` and `run` share.
pub struct TaskFlags<'a> {
    pub title: &'a str,
    pub gates: &'a [String],
    pub gate_timeout: u64,
    pub workspace: Option<&'a PathBuf>,
    pub prompt: Option<&'a String>,
    pub agent: &'a super::agent_flags::AgentFlags,
}

/// Builds a task from the flags shared by `task create` and `run`.
pub fn build_task(
    flags: &TaskFlags<'_>,
    config: &crate::config::Config,
) -> anyhow::Result<NewTask> {
    let mut task = NewTask::new(flags.title);
    for command in flags.gates {
        let mut gate = GateSpec::from_command(command.clone());
        gate.timeout_secs = flags.gate_timeout;
        task.gates.push(gate);
    }
    // Check the cheap things first, so `--gate ''` is reported before a bad workspace.
    task.validate()?;
    match flags.prompt {
        Some(prompt) => {
            task.prompt = Some(prompt.clone());
            task.model = flags.agent.model_spec(config)?;
            if task.model.is_none() {
                return Err(CliError::Invalid(
                    "no model for the agent: pass --model NAME (with --base-url for a server other \
                     than OpenAI's), or set [model] in the config file"
                        .into(),
                )
                .into());
            }
            task.agent = flags
                .agent
                .options(orchestrator_tools::Policy::allow_all())?;
            task.acceptance = flags.agent.acceptance.clone();
        }
        None if flags.agent.any_besides_acceptance() => {
            return Err(CliError::Invalid(
                "agent flags (--model, --profile, --ask, ...) need a prompt".into(),
            )
            .into());
        }
        None if task.gates.is_empty() => {
            return Err(CliError::Invalid(
                "nothing to do: give a prompt or at least one --gate CMD".into(),
            )
            .into());
        }
        None => task.acceptance = flags.agent.acceptance.clone(),
    }
    task.workspace = Some(super::workspace_dir(flags.workspace)?);
    task.validate()?;
    if let Some(var) = task.model.as_ref().and_then(|m| m.api_key_env.as_deref()) {
        require_key(var)?;
    }
    Ok(task)
}

/// Refuses an agent task whose model key is not in this environment, before it is created: it
/// would otherwise be queued, claimed and failed. The process that runs it reads the same
/// variable, and is normally started from the same shell or service environment.
fn require_key(var: &str) -> anyhow::Result<()> {
    if std::env::var(var).is_ok_and(|v| !v.trim().is_empty()) {
        return Ok(());
    }
    Err(CliError::Invalid(format!(
        "the model's API key variable {var} is not set or is empty: export {var}=... here and \
         where the task runs (`serve`), or pass --api-key-env '' for a server that needs no key"
    ))
    .into())
}

pub async fn run(global: &GlobalArgs, command: TaskCommand) -> anyhow::Result<ExitCode> {
    match command {
        TaskCommand::Create(args) => create(global, *args).await,
        TaskCommand::List(args) => list(global, args).await,
        TaskCommand::Read(args) => read(global, args).await,
        TaskCommand::Events(args) => events(global, args).await,
        TaskCommand::Logs(args) => super::task_logs::run(global, args).await,
        TaskCommand::Cancel(args) => cancel(global, args).await,
        TaskCommand::Retry(args) => retry(global, args).await,
    }
}

async fn create(global: &GlobalArgs, args: CreateArgs) -> anyhow::Result<ExitCode> {
    let source = match (&args.clone_from, &args.workspace) {
        (Some(source), Some(workspace)) => Some(prepare_clone_target(source, workspace)?),
        _ => None,
    };
    let config = global.config()?;
    let mut task = build_task(
        &TaskFlags {
            title: &args.title,
            gates: &args.gates,
            gate_timeout: args.gate_timeout,
            workspace: args.workspace.as_ref(),
            prompt: args.prompt.as_ref(),
            agent: &args.agent,
        },
        &config,
    )?;
    task.worktree_of = source;
    if let Some(repository) = &args.repository {
        // The daemon that runs it makes the workspace; the current directory is not it.
        task.workspace = None;
        task.repository = Some(config.repository_ref(repository, args.git_ref.clone()));
    }
    if let Some(repository) = task.repository.as_mut()
        && !args.setup.is_empty()
    {
        let inherited = repository.environment.take().unwrap_or_default();
        repository.environment = Some(orchestrator_types::EnvironmentSpec {
            setup: args.setup.clone(),
            network_hosts: args.setup_network_hosts.clone(),
            env: args.setup_env.clone(),
            timeout_secs: if inherited.timeout_secs == 0 {
                orchestrator_types::DEFAULT_SETUP_TIMEOUT_SECS
            } else {
                inherited.timeout_secs
            },
            ..inherited
        });
    }
    if let Some(text) = &args.pull {
        let mut target = orchestrator_types::PullTarget::parse(text)
            .map_err(|e| CliError::Invalid(format!("--pull: {e}")))?;
        target.any_branch = args.any_branch;
        if task.repository.is_none() {
            task.workspace = None;
            task.repository = Some(config.repository_of_github(&target.repo));
        }
        task.progress_on = Some(target.to_string());
        task.pull = Some(target);
    }
    task.priority = args.priority;
    task.queue = args.queue;
    task.max_attempts = args.max_attempts;
    if let Some(text) = &args.run_after {
        task.run_after = Some(parse_time(text, now_millis())?);
    }
    for label in &args.require_labels {
        orchestrator_types::placement::validate_label(label)
            .map_err(|e| CliError::Invalid(format!("--require-label: {e}")))?;
    }
    task.requires = args.require_labels;
    // The daemon that runs it must hold the model's key variable (by name): see `refuse_keyless`.
    if let Some(var) = task
        .model
        .as_ref()
        .and_then(|m| m.api_key_env.as_deref())
        .map(str::trim)
        .filter(|v| config.announces_key(v))
    {
        task.requires
            .push(orchestrator_types::placement::key_word(var));
    }
    task.concurrency = concurrency_of(
        &args.concurrency_key,
        args.max_running,
        &args.repository,
        &config,
    )?;
    if let Some(n) = args.best_of {
        task.best_of = Some(Box::new(orchestrator_types::BestOf {
            n,
            choose: match &args.choose {
                Some(text) => orchestrator_types::Choose::parse(text)
                    .map_err(|e| CliError::Invalid(format!("--choose: {e}")))?,
                None => orchestrator_types::Choose::default(),
            },
            budget: if args.shared_budget {
                orchestrator_types::BudgetShare::Shared
            } else {
                orchestrator_types::BudgetShare::PerSibling
            },
            judge: None,
            pull_request: args
                .open_pr
                .clone()
                .map(|repo| orchestrator_types::BestOfPull {
                    repo,
                    issue: args.pr_issue,
                    base_branch: None,
                    title: None,
                    draft: !args.pr_ready,
                }),
        }));
    }
    task.fair_key = args.fair_key;
    task.weight = args.weight.or_else(|| {
        args.repository
            .as_ref()
            .and_then(|name| config.repositories.get(name))
            .and_then(|r| r.weight)
    });
    task.validate()?;
    let store = global.open_store().await?;
    if let (Some(target), Some(github)) = (&task.pull, config.github.client()?) {
        // Refused now rather than when a daemon starts it: a closed pull request, a branch this
        // store did not open, a fork's. GitHub out of reach here is the daemon's to find out.
        let identity = store.identity().await?;
        match orchestrator_worker::runner::check_pull(&github, &identity, target).await {
            Ok(_) => {}
            Err(orchestrator_worker::runner::RoundError::Refused(reason)) => {
                return Err(CliError::Invalid(format!("--pull: {reason}")).into());
            }
            Err(orchestrator_worker::runner::RoundError::Api(e)) => {
                eprintln!("warning: {target} could not be read here ({e}); the daemon checks it");
            }
        }
    }
    refuse_keyless(&store, &task).await?;
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

/// Refuses a task whose model key variable no live daemon holds while some daemon is live: the
/// key was exported in this terminal, not where `serve` runs (which reads its environment when
/// it starts). With no daemon live the task is made and waits for one that holds it, saying so.
async fn refuse_keyless(store: &orchestrator_store::Store, task: &NewTask) -> anyhow::Result<()> {
    let keys = task
        .requires
        .iter()
        .any(|w| w.starts_with(orchestrator_types::placement::KEY_PREFIX));
    if !keys
        || store
            .live_workers(orchestrator_types::now_millis())
            .await?
            .is_empty()
    {
        return Ok(());
    }
    match store.unmet_requirements(&task.requires).await? {
        Some(why) if why.contains("key variable") => Err(CliError::Invalid(format!(
            "{why}; or run the task in this terminal with `orchestrator run`"
        ))
        .into()),
        _ => Ok(()),
    }
}

/// The task's concurrency key: the one named, else its repository's (by its name in the
/// config) when a limit is given here or in the config's `[repositories.NAME] max_running`.
fn concurrency_of(
    key: &Option<String>,
    max_running: Option<u32>,
    repository: &Option<String>,
    config: &crate::config::Config,
) -> anyhow::Result<Option<orchestrator_types::Concurrency>> {
    let configured = repository
        .as_ref()
        .and_then(|name| config.repositories.get(name).map(|r| (name, r.max_running)));
    let concurrency = match (key, max_running, configured) {
        (Some(key), Some(max_running), _) => Some(orchestrator_types::Concurrency {
            key: key.clone(),
            max_running,
        }),
        (None, Some(max_running), Some((name, _))) => Some(orchestrator_types::Concurrency {
            key: format!("repository:{name}"),
            max_running,
        }),
        (None, Some(_), None) => {
            return Err(CliError::Invalid(
                "--max-running needs the key it limits: --concurrency-key KEY, or --repository \
                 NAME for a repository of the config"
                    .into(),
            )
            .into());
        }
        (None, None, Some((name, Some(max_running)))) => Some(orchestrator_types::Concurrency {
            key: format!("repository:{name}"),
            max_running,
        }),
        _ => None,
    };
    if let Some(concurrency) = &concurrency {
        concurrency
            .validate()
            .map_err(|e| CliError::Invalid(e.to_string()))?;
    }
    Ok(concurrency)
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

/// `task read` has grown sections for agent tasks; they live in task_read.rs.
async fn read(global: &GlobalArgs, args: IdArgs) -> anyhow::Result<ExitCode> {
    super::task_read::read(global, args).await
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
                if let Some(header) = attempt_header(event) {
                    println!("{header}");
                }
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
    if let Some(server) = &args.server {
        // The daemon may be on another machine: its API is all this needs.
        super::follow::follow(global, server, id, args.json).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let store = global.open_store().await?;
    store.get_task(id).await?;
    if args.follow {
        follow_events(&store, id, args.json).await?;
    } else {
        print_events(&store, id, 0, args.json).await?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn cancel(global: &GlobalArgs, args: CancelArgs) -> anyhow::Result<ExitCode> {
    let id = parse_id(&args.id)?;
    let store = global.open_store().await?;
    let outcome = store.cancel_task(id).await?;
    // A running task ends when its worker has stopped it: wait for that, so the next command
    // (a retry, a read) sees it ended.
    let mut state = None;
    if outcome == CancelOutcome::Requested && args.wait > 0 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(args.wait);
        loop {
            let task = store.get_task(id).await?;
            if task.state.is_terminal() || std::time::Instant::now() >= deadline {
                state = Some(task.state);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    if args.json {
        output::json(&serde_json::json!({ "id": id.0, "outcome": outcome, "state": state }))?;
    } else {
        match (outcome, state) {
            (CancelOutcome::Canceled, _) => println!("task {id} canceled"),
            (CancelOutcome::Requested, Some(state)) if state.is_terminal() => {
                println!("task {id} stopped by its worker: {state}")
            }
            (CancelOutcome::Requested, Some(_)) => println!(
                "task {id} is still stopping after {} s: its worker will mark it canceled",
                args.wait
            ),
            (CancelOutcome::Requested, None) => {
                println!("task {id} is running: its worker will stop it and mark it canceled")
            }
            (CancelOutcome::AlreadyCanceled, _) => println!("task {id} was already canceled"),
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
            "task {id} queued again: attempt {} of at most {} runs next",
            task.attempt + 1,
            task.max_attempts
        );
    }
    Ok(ExitCode::SUCCESS)
}
