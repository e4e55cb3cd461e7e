//! `orchestrator`: parses the command line, wires the world together and maps errors to exit codes.
//! The work lives in the library crates; this binary is glue.

mod cli;
mod config;
mod daemon_file;
mod exit;
mod http;
mod output;
mod progress;
mod serve;
mod triggers;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The hidden `__net-bridge` subcommand: the network bridge a sandbox starts inside a jail
    // granted the network (orchestrator-sandbox's bridge.rs). It is taken before clap, logging and
    // the runtime: its arguments (a `--` and the jailed program's own) pass through untouched, it
    // starts in every sandboxed command with the network so it should start fast, and on success
    // it never returns (it becomes the program).
    let mut argv = std::env::args_os();
    let argv0 = argv.next();
    if argv
        .next()
        .is_some_and(|a| a == orchestrator_sandbox::BRIDGE_SUBCOMMAND)
    {
        let this: Vec<std::ffi::OsString> = std::env::current_exe()
            .map(std::path::PathBuf::into_os_string)
            .ok()
            .or(argv0)
            .into_iter()
            .chain([orchestrator_sandbox::BRIDGE_SUBCOMMAND.into()])
            .collect();
        let code = orchestrator_sandbox::bridge::run(&this, argv.collect());
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = cli::Cli::parse();
    // `run` prints its task's events, a model's retries among them (`model_retry`): the client's
    // own log line of each would say it a second time.
    let quiet = match &cli.command {
        cli::Command::Run(_) => &["orchestrator_worker::model::client=error"][..],
        _ => &[],
    };
    init_tracing(cli.global.verbose, quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let result = runtime.block_on(cli::dispatch(cli));
    // Gates and followers may still hold blocking threads; do not wait for them on exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(code) => code,
        Err(error) => exit::report(&error),
    }
}

/// Logging to stderr: `ORCHESTRATOR_LOG`, else a default by `-v`, with `quiet`'s directives added
/// unless `-vv` or the filter names their targets.
fn init_tracing(verbose: u8, quiet: &[&str]) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn,orchestrator=info,orchestrator_worker=info",
        1 => "info",
        _ => "debug",
    };
    let text = std::env::var("ORCHESTRATOR_LOG").unwrap_or_else(|_| default.to_owned());
    let mut filter = EnvFilter::try_new(&text).unwrap_or_else(|_| EnvFilter::new(default));
    // Unless -vv asks for everything, or the filter names the target itself.
    if verbose < 2 {
        for directive in quiet {
            let target = directive.split('=').next().unwrap_or_default();
            if !text.contains(target)
                && let Ok(directive) = directive.parse()
            {
                filter = filter.add_directive(directive);
            }
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
