//! `orchestrator`: parses the command line, wires the world together and maps errors to exit codes.
//! The work lives in the library crates; this binary is glue.

mod cli;
mod config;
mod exit;
mod http;
mod output;
mod serve;
mod triggers;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_tracing(cli.global.verbose);
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

fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn,orchestrator=info,orchestrator_worker=info",
        1 => "info",
        _ => "debug",
    };
    let text = std::env::var("ORCHESTRATOR_LOG").unwrap_or_else(|_| default.to_owned());
    let mut filter = EnvFilter::try_new(&text).unwrap_or_else(|_| EnvFilter::new(default));
    // octocrab logs every failed attempt as an ERROR, also the 502 that a retry then got past; the
    // GitHub client reports the outcome itself, so octocrab's own lines show only with -vv or a
    // filter that names it.
    if verbose < 2
        && !text.contains("octocrab")
        && let Ok(quiet) = "octocrab=off".parse()
    {
        filter = filter.add_directive(quiet);
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
