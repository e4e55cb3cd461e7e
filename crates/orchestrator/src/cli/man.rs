//! `orchestrator man`: the manual pages, generated from the same clap definition that parses the
//! command line: `orchestrator.1` on stdout, or with `--out DIR` one page per command
//! (`orchestrator-task-create.1`, ...) written into DIR.

use anyhow::Context;
use clap::{Args, CommandFactory};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  orchestrator man | man -l -                                   read it now
  orchestrator man --out ~/.local/share/man/man1                install every page; then `man orchestrator-task`")]
pub struct ManArgs {
    /// Write a page for the program and for each of its commands into this directory (created if
    /// missing) instead of printing the program's page.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(args: &ManArgs) -> anyhow::Result<ExitCode> {
    let command = super::Cli::command();
    match &args.out {
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(command).render(&mut out)?;
            crate::output::write_stdout(&out)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("cannot write the manual pages into {}", dir.display()))?;
            eprintln!("orchestrator man: pages written to {}", dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
