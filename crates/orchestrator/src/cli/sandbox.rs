//! `orchestrator sandbox`: run one command the way an agent's command runs, so a person can see
//! what a mode allows; `--check` says whether this machine can sandbox at all.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use orchestrator_sandbox::{Availability, Confinement, ConnectionLog};
use orchestrator_types::SandboxMode;

use super::GlobalArgs;
use crate::exit::CliError;

const AFTER_HELP: &str = "\
Examples:
  orchestrator sandbox --check                              is bubblewrap usable here?
  orchestrator sandbox -- env                               what an agent's process sees
  orchestrator sandbox -- sh -c 'echo x > /etc/x'           refused: read-only file system
  orchestrator sandbox --mode read_only -- touch new-file   refused in read_only mode
  orchestrator sandbox --network -- curl -sI https://example.com
  orchestrator sandbox --network --network-host 127.0.0.1:8080 -- curl -s --noproxy '' http://127.0.0.1:8080/
  orchestrator sandbox --workspace ~/src/app -- cargo test --offline

The command runs with the sandbox and environment of an agent task in the given mode: writes only
to the workspace, a private /tmp and the config's writable roots (workspace_write); the
orchestrator's home, its store and the secret paths hidden; no network unless --network, and then
only through the sandbox's proxy (public addresses, and the --network-host ones), each connection
printed on stderr; no secrets in the environment. Its exit code is the command's. See
docs/security.md.";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct SandboxArgs {
    /// read_only, workspace_write or full (no sandbox; the environment is still scrubbed).
    #[arg(long, default_value = "workspace_write", value_parser = super::tool::parse_sandbox)]
    pub mode: SandboxMode,
    /// Let the command use the network, as a policy that allows the network class would.
    #[arg(long)]
    pub network: bool,
    /// A host (or host:port) the proxy lets the command reach although it is not public, as a
    /// policy's network_hosts does. Repeatable.
    #[arg(long = "network-host", value_name = "HOST", requires = "network")]
    pub network_hosts: Vec<String>,
    /// The workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Only say whether commands can be sandboxed on this machine (exit 0 if so, 1 if not).
    #[arg(long, conflicts_with = "command")]
    pub check: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub async fn run(global: &GlobalArgs, args: SandboxArgs) -> anyhow::Result<ExitCode> {
    let sandbox = global.sandbox(&global.config()?)?;
    if args.check {
        println!("{}", sandbox.describe());
        return Ok(match sandbox.availability() {
            Availability::Ready { .. } => ExitCode::SUCCESS,
            Availability::Missing { .. } => ExitCode::FAILURE,
        });
    }
    let Some((program, rest)) = args.command.split_first() else {
        return Err(CliError::Invalid(
            "give a command after --, for example: orchestrator sandbox -- env".into(),
        )
        .into());
    };
    let workspace = PathBuf::from(super::workspace_dir(args.workspace.as_ref())?);
    let jail = sandbox.agent_jail(Confinement {
        mode: args.mode,
        network: args.network,
        network_hosts: args.network_hosts.clone(),
        connections: Some(ConnectionLog::new(|c| {
            let verdict = match (&c.allowed, &c.reason) {
                (true, None) => "allowed".to_owned(),
                (true, Some(why)) => format!("allowed, failed: {why}"),
                (false, why) => format!("refused: {}", why.as_deref().unwrap_or("")),
            };
            let address = c.address.map(|a| format!(" ({a})")).unwrap_or_default();
            eprintln!("sandbox network: {}:{}{address} {verdict}", c.host, c.port);
        })),
        workspace: workspace.clone(),
        env: Vec::new(),
        secrets: Vec::new(),
        label: "sandbox-cli".into(),
    })?;
    let cwd = std::env::current_dir()
        .ok()
        .filter(|d| d.starts_with(&workspace))
        .unwrap_or(workspace);
    let mut command = jail.command(program, rest, &cwd)?;
    let status = command
        .status()
        .await
        .map_err(|e| CliError::Invalid(format!("{program} could not be started: {e}")))?;
    Ok(match status.code() {
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}
