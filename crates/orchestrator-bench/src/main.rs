//! `orchestrator-bench`: parses the command line, runs the chosen benchmark and maps its outcome to
//! an exit code. The measurements live in the library (src/queue/, src/agent/); this file is glue.
//!
//! Exit codes: 0 when every backend was measured (for the soak: when every figure was zero), or when PostgreSQL was merely unreachable (its
//! line then carries the error, and SQLite's figures still stand); 1 when a measurement failed; 2
//! for bad flags. A closed stdout (`| head -1`) is not an error.

mod cli;

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

const FAILURE: u8 = 1;
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if let Some(path) = &cli.previous {
        match orchestrator_bench::previous::Previous::load(path) {
            Ok(previous) => {
                let _ = PREVIOUS.set(previous);
            }
            Err(e) => {
                eprintln!("error: --previous: {e:#}");
                return ExitCode::from(USAGE);
            }
        }
    }
    let parsed = match cli.command {
        cli::Command::Queue(args) => args.into_config().map(Bench::Queue),
        cli::Command::Agent(args) => args.into_config().map(Bench::Agent),
        cli::Command::Flow(args) => args.into_config().map(Bench::Flow),
        cli::Command::Sandbox(args) => Ok(Bench::Sandbox(args.runs)),
        cli::Command::Soak(args) => return soak(args),
        cli::Command::Drain(args) => return drain(args),
        cli::Command::Workspace(args) => args.into_config().map(Bench::Workspace),
        cli::Command::Environment(args) => args.into_config().map(Bench::Environment),
        cli::Command::BestOf(args) => Ok(Bench::BestOf(
            orchestrator_bench::best_of::BestOfBenchConfig {
                runs: args.runs.max(1),
                latency_ms: args.latency_ms,
            },
        )),
        cli::Command::Checkpoint(args) => args.into_config().map(Bench::Checkpoint),
        cli::Command::GateOutput(args) => return gate_output(args),
        cli::Command::Context(args) => Ok(Bench::Context(
            orchestrator_bench::context::ContextBenchConfig {
                turns: args.turns.max(1),
                window: args.window.max(1024),
            },
        )),
    };
    let bench = match parsed {
        Ok(bench) => bench,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(FAILURE);
        }
    };
    let result = runtime.block_on(async {
        match &bench {
            Bench::Queue(config) => orchestrator_bench::queue::run(config, print_line).await,
            Bench::Agent(config) => orchestrator_bench::agent::run(config, print_line).await,
            Bench::Flow(config) => orchestrator_bench::flow::run(config, print_line).await,
            Bench::Context(config) => orchestrator_bench::context::run(config, print_line)
                .await
                .map(|()| orchestrator_bench::queue::Summary {
                    measured: 1,
                    unreachable: 0,
                    failed: 0,
                }),
            Bench::Workspace(config) => orchestrator_bench::workspace::run(config, print_line)
                .await
                .map(|()| orchestrator_bench::queue::Summary {
                    measured: 1,
                    unreachable: 0,
                    failed: 0,
                }),
            Bench::BestOf(config) => orchestrator_bench::best_of::run(config, print_line)
                .await
                .map(|()| orchestrator_bench::queue::Summary {
                    measured: 1,
                    unreachable: 0,
                    failed: 0,
                }),
            Bench::Environment(config) => orchestrator_bench::environment::run(config, print_line)
                .await
                .map(|()| orchestrator_bench::queue::Summary {
                    measured: 1,
                    unreachable: 0,
                    failed: 0,
                }),
            Bench::Checkpoint(config) => orchestrator_bench::checkpoint::run(config, print_line)
                .await
                .map(|()| orchestrator_bench::queue::Summary {
                    measured: 1,
                    unreachable: 0,
                    failed: 0,
                }),
            Bench::Sandbox(runs) => async {
                orchestrator_bench::sandbox::run(*runs, print_line).await?;
                orchestrator_bench::sandbox_gate::run(
                    orchestrator_bench::sandbox_gate::DEFAULT_RUNS,
                    print_line,
                )
                .await
            }
            .await
            .map(|()| orchestrator_bench::queue::Summary {
                measured: 1,
                unreachable: 0,
                failed: 0,
            }),
        }
    });
    // apalis workers that were aborted may leave tasks behind; do not wait for them.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(summary) if summary.failed == 0 => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(FAILURE),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(FAILURE)
        }
    }
}

/// The soak drives processes and makes its own runtime, so it runs outside the one the other
/// benchmarks share. One JSON line per backend; exit code 1 when a figure is not zero.
fn gate_output(args: cli::GateOutputArgs) -> ExitCode {
    let config = match args.into_config() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(USAGE);
        }
    };
    match orchestrator_bench::gate_output::run(&config, print_line) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(FAILURE)
        }
    }
}

fn soak(args: cli::SoakArgs) -> ExitCode {
    let configs = match args.into_configs() {
        Ok(configs) => configs,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(USAGE);
        }
    };
    let mut code = ExitCode::SUCCESS;
    for config in &configs {
        let progress = |line: &str| eprintln!("soak {}: {line}", config.backend.as_str());
        match orchestrator_bench::soak::run(config, &progress) {
            Ok(report) => {
                if !report.passed() {
                    code = ExitCode::from(FAILURE);
                }
                if let Err(e) = print_line(&report.to_json().to_string()) {
                    if is_broken_pipe(&e) {
                        return code;
                    }
                    eprintln!("error: {e:#}");
                    return ExitCode::from(FAILURE);
                }
            }
            Err(e) => {
                eprintln!("error: soak on {}: {e:#}", config.backend.as_str());
                code = ExitCode::from(FAILURE);
            }
        }
    }
    code
}

/// The drain drives a `serve` process and makes its own runtime, like the soak.
fn drain(args: cli::DrainArgs) -> ExitCode {
    let config = match args.into_config() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(USAGE);
        }
    };
    let progress = |line: &str| eprintln!("drain: {line}");
    match orchestrator_bench::drain::run(&config, &progress) {
        Ok(report) => match print_line(&report.to_string()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(FAILURE)
            }
        },
        Err(e) => {
            eprintln!("error: drain: {e:#}");
            ExitCode::from(FAILURE)
        }
    }
}

/// The benchmark chosen on the command line, with its validated configuration.
enum Bench {
    Queue(orchestrator_bench::queue::QueueConfig),
    Agent(orchestrator_bench::agent::AgentBenchConfig),
    Flow(orchestrator_bench::flow::FlowConfig),
    Sandbox(usize),
    Context(orchestrator_bench::context::ContextBenchConfig),
    Workspace(orchestrator_bench::workspace::WorkspaceBenchConfig),
    Environment(orchestrator_bench::environment::EnvironmentBenchConfig),
    BestOf(orchestrator_bench::best_of::BestOfBenchConfig),
    Checkpoint(orchestrator_bench::checkpoint::CheckpointBenchConfig),
}

/// Prints one JSON line and flushes it, so that a reader sees each backend as soon as it is done.
/// The earlier run given by `--previous`, which every printed line is set beside.
static PREVIOUS: std::sync::OnceLock<orchestrator_bench::previous::Previous> =
    std::sync::OnceLock::new();

fn print_line(line: &str) -> anyhow::Result<()> {
    let line = match PREVIOUS.get() {
        Some(previous) => std::borrow::Cow::Owned(previous.annotate(line)),
        None => std::borrow::Cow::Borrowed(line),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
