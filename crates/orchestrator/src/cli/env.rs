//! `orchestrator env`: this machine's cache of prepared repository environments (what setup
//! phases left, see docs/environments.md): list, show and drop entries.

use super::GlobalArgs;
use crate::exit::CliError;
use crate::output;
use clap::{Args, Subcommand};
use orchestrator_types::format_millis;
use orchestrator_worker::workspace::environment::{self as env, Entry};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum EnvCommand {
    /// List the cached environments of this machine, the most recently used first.
    #[command(after_help = "Examples:\n  orchestrator env list\n  orchestrator env list --json")]
    List(ListArgs),
    /// Show one cached environment: its repository, setup, commit, size and use.
    #[command(
        visible_alias = "read",
        after_help = "Examples:\n  orchestrator env show 3f2a9c\n  orchestrator env show 3f2a9c --json"
    )]
    Show(KeyArgs),
    /// Drop a cached environment: the next task on its key runs setup again.
    #[command(
        after_help = "Examples:\n  orchestrator env drop 3f2a9c\n  orchestrator env drop --all"
    )]
    Drop(DropArgs),
}

#[derive(Debug, Args)]
pub struct Place {
    /// The workspaces directory whose cache to read (default: `[workspaces] dir` of the config,
    /// else `<home>-workspaces`, as `serve` uses).
    #[arg(long, value_name = "DIR")]
    pub workspaces: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub place: Place,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The entry's key, or its first characters.
    pub key: String,
    #[command(flatten)]
    pub place: Place,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DropArgs {
    /// The entry's key, or its first characters.
    #[arg(required_unless_present = "all")]
    pub key: Option<String>,
    /// Drop every entry.
    #[arg(long, conflicts_with = "key")]
    pub all: bool,
    #[command(flatten)]
    pub place: Place,
}

pub async fn run(global: &GlobalArgs, command: EnvCommand) -> anyhow::Result<ExitCode> {
    match command {
        EnvCommand::List(args) => {
            let entries = env::list(&root(global, &args.place)?);
            if args.json {
                output::json(&entries)?;
            } else if entries.is_empty() {
                println!(
                    "no cached environment: a repository with `setup` in its [repositories.NAME] \
                     makes one with its first task here"
                );
            } else {
                let rows = entries
                    .iter()
                    .map(|e| {
                        vec![
                            e.key[..12].to_owned(),
                            e.repository.clone(),
                            e.commit.get(..12).unwrap_or(&e.commit).to_owned(),
                            mib(e.bytes),
                            format_millis(e.last_used),
                        ]
                    })
                    .collect::<Vec<_>>();
                output::table(&["KEY", "REPOSITORY", "COMMIT", "SIZE", "LAST USED"], &rows)?;
            }
        }
        EnvCommand::Show(args) => {
            let entry = one(&root(global, &args.place)?, &args.key)?;
            if args.json {
                output::json(&entry)?;
            } else {
                println!("key         {}", entry.key);
                println!("repository  {}", entry.repository);
                println!("commit      {}", entry.commit);
                println!("setup       {}", entry.setup.join(" && "));
                println!(
                    "made        {} by task {}, setup took {}",
                    format_millis(entry.made_at),
                    entry.made_by_task,
                    orchestrator_types::format_duration(entry.setup_ms)
                );
                println!("last used   {}", format_millis(entry.last_used));
                println!("size        {}", mib(entry.bytes));
            }
        }
        EnvCommand::Drop(args) => {
            let root = root(global, &args.place)?;
            let keys: Vec<String> = match &args.key {
                Some(key) => vec![one(&root, key)?.key],
                None => env::list(&root).into_iter().map(|e| e.key).collect(),
            };
            for key in &keys {
                env::drop_entry(&root, key)?;
                println!("dropped {}", &key[..12]);
            }
            if keys.is_empty() {
                println!("no cached environment to drop");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn root(global: &GlobalArgs, place: &Place) -> anyhow::Result<PathBuf> {
    let config = global.config()?;
    let settings = config.workspace_settings(&global.home()?, place.workspaces.as_deref());
    Ok(env::cache_root(&settings.dir))
}

/// The one entry `prefix` names.
fn one(root: &std::path::Path, prefix: &str) -> anyhow::Result<Entry> {
    let mut found = env::matching(root, prefix);
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(CliError::NotFound(format!(
            "no cached environment's key starts with {prefix:?} (`orchestrator env list` lists them)"
        ))
        .into()),
        n => Err(CliError::Invalid(format!(
            "{n} cached environments' keys start with {prefix:?}: give more of the key"
        ))
        .into()),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
