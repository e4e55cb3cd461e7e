//! The command line: global flags, one module per subcommand, and `dispatch`.
//!
//! Flags are parsed by clap into plain args, then validated into what the library crates take, so
//! every error names the flag the user typed.

mod agent_flags;
mod approval;
mod artifact;
mod attempt;
mod automation;
mod completions;
mod demo;
mod doctor;
mod env;
mod follow;
mod github;
mod hooks;
mod man;
mod mcp;
mod mcp_servers;
mod notify;
mod run;
mod sandbox;
mod serve;
mod status;
mod task;
mod task_logs;
mod task_read;
mod tool;
mod views;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use orchestrator_sandbox::Sandbox;
use orchestrator_store::{Store, StoreOptions};
use std::path::PathBuf;
use std::process::ExitCode;

const AFTER_HELP: &str = "\
Examples:
  orchestrator serve                               run the daemon on the SQLite store in the home directory
  orchestrator task create --title 'tests' --gate 'cargo test' --workspace ~/src/app
  orchestrator task list --state running
  orchestrator task read 42 --json
  orchestrator task events 42 --follow
  orchestrator run --gate 'cargo test' --gate 'cargo clippy -- -D warnings'
  orchestrator run 'Fix the failing test in crates/parser' --gate 'cargo test' --model gpt-4.1
  orchestrator automation create --name nightly --schedule '0 3 * * 1-5' --tz Europe/Berlin --gate 'cargo test'
  orchestrator tool run read_file --workspace . --args '{\"path\": \"README.md\"}'
  orchestrator mcp --workspace .                   expose the tools to an MCP client over stdio
  orchestrator sandbox -- env                      a command as an agent's process runs it
  orchestrator approval list                       the agents' pending requests
  orchestrator approval approve 7
  orchestrator attempt record --task 12 --label 'cache in the parser'   a PR attempt from the worktree
  orchestrator attempt show 3 --patch | git apply
  orchestrator github issue acme/widgets#12        an issue as an agent reads it (GITHUB_TOKEN)
  orchestrator completions bash > ~/.local/share/bash-completion/completions/orchestrator
  orchestrator man --out ~/.local/share/man/man1   the manual pages, one per command
  orchestrator doctor                              check the setup, with a fix for each problem
  orchestrator notify test ops                     a sample notification to the sink `ops`

Exit codes: 0 success; 1 failure (or the task failed); 2 usage; 3 not found; 4 conflict with the
task's state (or a duplicate automation name); 5 store unavailable; 6 invalid input; 7 the task was
canceled.";

/// A durable task and automation orchestrator for coding agents.
#[derive(Debug, Parser)]
#[command(name = "orchestrator", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Directory for the SQLite store, the API token and other state.
    #[arg(
        long,
        global = true,
        env = "ORCHESTRATOR_HOME",
        value_name = "DIR",
        hide_env_values = true
    )]
    pub home: Option<PathBuf>,
    /// Store URL: postgres://USER@HOST/DB for a shared PostgreSQL, or sqlite://PATH. Defaults to
    /// orchestrator.db in the home directory.
    #[arg(
        long,
        global = true,
        env = "ORCHESTRATOR_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,
    /// The config file (default: config.toml in the home directory).
    #[arg(
        long,
        global = true,
        env = "ORCHESTRATOR_CONFIG",
        value_name = "FILE",
        hide_env_values = true
    )]
    pub config: Option<PathBuf>,
    /// More log output on stderr (-v info, -vv debug). ORCHESTRATOR_LOG takes a full filter.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: workers, the rescuer and the HTTP endpoint.
    Serve(serve::ServeArgs),
    /// Create a task and run it in the foreground in this process.
    Run(Box<run::RunArgs>),
    /// Create, inspect, cancel and retry tasks.
    #[command(subcommand)]
    Task(task::TaskCommand),
    /// Cron automations that create tasks: create, list, read, pause, run now, preview, apply files.
    #[command(subcommand)]
    Automation(automation::AutomationCommand),
    /// Answer the agents' requests: approve or deny guarded tool calls, answer questions.
    #[command(subcommand)]
    Approval(approval::ApprovalCommand),
    /// Read artifacts: gate logs and other kept output.
    #[command(subcommand)]
    Artifact(artifact::ArtifactCommand),
    /// PR attempts: record a worktree's changes as a patch with its gates, compare, check, select.
    #[command(subcommand)]
    Attempt(attempt::AttemptCommand),
    /// GitHub by hand: issue and PR context, a task's comment, a guarded close, the delivery ledger.
    #[command(subcommand)]
    Github(github::GithubCommand),
    /// List the agent tools or call one by hand in a workspace.
    Tool(tool::ToolArgs),
    /// Serve the agent tools to an MCP client over stdio.
    Mcp(mcp::McpArgs),
    /// The MCP servers agents can use: list the config's, or check that they start and answer.
    #[command(subcommand)]
    McpServers(mcp_servers::McpServersCommand),
    /// Run one command in an agent's sandbox, to see what a mode allows; --check for availability.
    Sandbox(sandbox::SandboxArgs),
    /// Print the completion script of a shell (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Print the manual page, or write one per command into a directory (--out DIR).
    Man(man::ManArgs),
    /// Check the setup: config, store, sandbox, git, model server, GitHub, MCP and language
    /// servers, each with its fix.
    Doctor(doctor::DoctorArgs),
    /// The person's hooks: list them, or feed one step's hooks a sample input (docs/hooks.md).
    #[command(subcommand)]
    Hooks(hooks::HooksCommand),
    /// This machine's cache of prepared repository environments (what setup phases left):
    /// list, show, drop.
    #[command(subcommand)]
    Env(env::EnvCommand),
    /// Notifications: the outbox `serve` sends from, and a test message to a sink.
    #[command(subcommand)]
    Notify(notify::NotifyCommand),
    /// The store at a glance: tasks by state, live workers, each model server's slots and waits.
    Status(status::StatusArgs),
    /// The GitHub flow on this machine, no account needed: a GitHub stand-in with a labelled
    /// issue, a scripted model and serve; the issue becomes a task, the task a pull request.
    Demo(demo::DemoArgs),
}

pub async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = cli.global;
    match cli.command {
        Command::Serve(args) => serve::run(&global, args).await,
        Command::Run(args) => run::run(&global, *args).await,
        Command::Task(command) => task::run(&global, command).await,
        Command::Automation(command) => automation::run(&global, command).await,
        Command::Approval(command) => approval::run(&global, command).await,
        Command::Artifact(command) => artifact::run(&global, command).await,
        Command::Attempt(command) => attempt::run(&global, command).await,
        Command::Github(command) => github::run(&global, command).await,
        Command::Tool(args) => tool::run(&global, args).await,
        Command::Mcp(args) => mcp::run(&global, args).await,
        Command::McpServers(command) => mcp_servers::run(&global, command).await,
        Command::Sandbox(args) => sandbox::run(&global, args).await,
        Command::Completions(args) => completions::run(&args),
        Command::Man(args) => man::run(&args),
        Command::Doctor(args) => doctor::run(&global, args).await,
        Command::Env(command) => env::run(&global, command).await,
        Command::Hooks(command) => hooks::run(&global, command).await,
        Command::Notify(command) => notify::run(&global, command).await,
        Command::Status(args) => status::run(&global, args).await,
        Command::Demo(args) => demo::run(&global, args).await,
    }
}

impl GlobalArgs {
    /// The home directory, created if missing, and private (see [`private_home`]).
    pub fn home(&self) -> anyhow::Result<PathBuf> {
        let home = match &self.home {
            Some(home) => home.clone(),
            None => dirs::data_dir()
                .map(|d| d.join("orchestrator"))
                .context("no home directory: set --home or ORCHESTRATOR_HOME")?,
        };
        private_home(&home)?;
        Ok(home)
    }

    /// The config file's contents (empty when the default file does not exist).
    pub fn config(&self) -> anyhow::Result<crate::config::Config> {
        crate::config::load(&self.home()?, self.config.as_ref())
    }

    /// The store URL to open, and a version of it safe to print.
    pub fn store_url(&self) -> anyhow::Result<String> {
        match &self.database_url {
            Some(url) => Ok(url.clone()),
            None => Ok(self.home()?.join("orchestrator.db").display().to_string()),
        }
    }

    /// The sandbox of agents' processes: the config's `[sandbox]`, with the home directory, the
    /// store file and the config file hidden, and the variables of the configured secrets named.
    pub fn sandbox(&self, config: &crate::config::Config) -> anyhow::Result<Sandbox> {
        let home = self.home()?;
        let mut hidden = vec![home.clone()];
        if let Some(file) = &self.config {
            hidden.push(file.clone());
        }
        let url = self.store_url()?;
        if !url.starts_with("postgres") {
            let file = url
                .trim_start_matches("sqlite://")
                .trim_start_matches("sqlite:")
                .split('?')
                .next()
                .unwrap_or_default()
                .to_owned();
            if !file.is_empty() && file != ":memory:" {
                for suffix in ["", "-wal", "-shm", "-journal"] {
                    hidden.push(PathBuf::from(format!("{file}{suffix}")));
                }
            }
        }
        let secret_env = [
            config.model.api_key_env.clone(),
            config.github.token_env.clone(),
            config.github.webhook_secret_env.clone(),
        ]
        .into_iter()
        .chain(config.repositories.values().map(|r| r.token_env.clone()))
        .flatten()
        .collect();
        Ok(Sandbox::new(config.sandbox.settings(hidden, secret_env)?))
    }

    /// The sandbox of a process that runs tasks (`serve`, `run`): it writes down the process
    /// group of every command it starts, after ending the groups that processes on this home
    /// killed before they could end them (a gate of a daemon that got SIGKILL would otherwise run
    /// on beside its own rerun). `who` names the process in what it prints.
    pub fn tracked_sandbox(
        &self,
        config: &crate::config::Config,
        who: &str,
    ) -> anyhow::Result<Sandbox> {
        let dir = self.home()?.join("process-groups");
        match orchestrator_sandbox::GroupLedger::reap(&dir) {
            Ok(reaped) => {
                let killed: Vec<String> = reaped
                    .iter()
                    .filter(|r| r.killed)
                    .map(|r| r.pgid.to_string())
                    .collect();
                if !killed.is_empty() {
                    eprintln!(
                        "{who}: ended {} process group{} that a killed orchestrator left running ({})",
                        killed.len(),
                        if killed.len() == 1 { "" } else { "s" },
                        killed.join(", ")
                    );
                }
            }
            Err(e) => eprintln!(
                "{who}: cannot look for process groups left running in {}: {e}",
                dir.display()
            ),
        }
        let sandbox = self.sandbox(config)?;
        let ledger = orchestrator_sandbox::GroupLedger::open(&dir).with_context(|| {
            format!(
                "cannot keep the list of running process groups in {}",
                dir.display()
            )
        })?;
        Ok(sandbox.with_ledger(ledger))
    }

    /// The tools' context for a session a person runs (`tool run`, `mcp`): everything allowed,
    /// processes in `mode` in the configured sandbox, output spilled under the home directory.
    pub fn tool_context(
        &self,
        workspace: &std::path::Path,
        mode: orchestrator_types::SandboxMode,
    ) -> anyhow::Result<orchestrator_tools::ToolContext> {
        let config = self.config()?;
        let sandbox = self.sandbox(&config)?;
        let policy = orchestrator_tools::Policy {
            sandbox: mode,
            ..orchestrator_tools::Policy::allow_all()
        };
        orchestrator_tools::ToolContext::new(workspace, self.home()?)
            .and_then(|c| c.with_policy(policy))
            .and_then(|c| c.with_sandbox(&sandbox))
            .map(|c| {
                c.with_web_search(config.web_search.clone().map(std::sync::Arc::new))
                    .with_lsp(config.lsp_servers())
            })
            .with_context(|| format!("opening the workspace {}", workspace.display()))
    }

    pub async fn open_store(&self) -> anyhow::Result<Store> {
        self.open_store_with(&StoreOptions::default()).await
    }

    pub async fn open_store_with(&self, options: &StoreOptions) -> anyhow::Result<Store> {
        let url = self.store_url()?;
        // Tasks this process creates on a workspace path are placed on this machine (or the
        // shared directory that holds the path), so another machine never takes them.
        let placement = self.config()?.worker.placement();
        Ok(Store::open(&url, options).await?.with_placement(placement))
    }
}

/// Creates the home directory readable by its owner only (0700; missing parents too), and makes an
/// existing one private if other users may enter or read it, with a warning saying so. It holds
/// the API token, the store and the config: a local user who can read them can approve an agent's
/// requests or rewrite its policy. Tightening is the safe default; a home that cannot be changed
/// (another user's directory) only gets the warning.
fn private_home(home: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(home)
        .with_context(|| format!("cannot create the home directory {}", home.display()))?;
    let mode = std::fs::metadata(home)
        .with_context(|| format!("cannot read the home directory {}", home.display()))?
        .permissions()
        .mode()
        & 0o7777;
    if mode & 0o077 == 0 {
        return Ok(());
    }
    let private = mode & 0o700;
    match std::fs::set_permissions(home, std::fs::Permissions::from_mode(private)) {
        Ok(()) => tracing::warn!(
            "the home directory {} was open to other users (mode {:o}); it is now {:o}, since it holds the API token and the store",
            home.display(),
            mode,
            private
        ),
        Err(e) => tracing::warn!(
            "the home directory {} is open to other users (mode {:o}) and could not be made private ({e}); it holds the API token and the store: run chmod 700 on it",
            home.display(),
            mode
        ),
    }
    Ok(())
}

/// The directory a task runs in: the given one, or the current directory, made absolute.
pub fn workspace_dir(given: Option<&PathBuf>) -> anyhow::Result<String> {
    let dir = match given {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let absolute = std::fs::canonicalize(&dir).map_err(|e| {
        crate::exit::CliError::Invalid(format!("workspace {} cannot be used: {e}", dir.display()))
    })?;
    if !absolute.is_dir() {
        return Err(crate::exit::CliError::Invalid(format!(
            "workspace {} is not a directory",
            dir.display()
        ))
        .into());
    }
    Ok(absolute.display().to_string())
}
