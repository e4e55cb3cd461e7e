//! `orchestrator completions SHELL`: the shell's completion script for this command line, generated
//! from the same clap definition that parses it, so it never falls behind a new flag.

use clap::{Args, CommandFactory};
use clap_complete::Shell;
use std::process::ExitCode;

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  orchestrator completions bash > ~/.local/share/bash-completion/completions/orchestrator
  orchestrator completions zsh > ~/.zfunc/_orchestrator        (with fpath+=~/.zfunc before compinit)
  orchestrator completions fish > ~/.config/fish/completions/orchestrator.fish")]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut command = super::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "orchestrator", &mut out);
    crate::output::write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}
