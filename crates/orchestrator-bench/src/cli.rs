//! The command line: flags as clap parses them, then validated into the library's configuration
//! (ripgrep's split between low-level and high-level arguments).

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};
use orchestrator_bench::agent::{self, AgentBenchConfig};
use orchestrator_bench::queue::{
    self, DEFAULT_POSTGRES_URL, POSTGRES_URL_VARS, PeerSettings, QueueConfig,
};
use orchestrator_store::Backend;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "orchestrator-bench",
    about = "Benchmarks of orchestrator, printed as one JSON object per line (progress goes to stderr)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// An earlier run's standard output (its JSON lines): each line printed now gains `previous`,
    /// the earlier line's figures for the same measurement (bench, backend, shape...), and
    /// `ratio_to_previous`, this run's figure over that one (above 1 is more: better for a rate,
    /// worse for a time). Example: `orchestrator-bench queue > before.json`, then after a change
    /// `orchestrator-bench queue --previous before.json`.
    #[arg(long, global = true, value_name = "FILE")]
    pub previous: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// No-op tasks through the real worker path, against raw batched SQL and apalis, on SQLite and
    /// PostgreSQL: tasks_per_s, raw_batched_per_s, ratio, start_p50_ms, start_p99_ms,
    /// peer_tasks_per_s, ratio_to_peer, and cpu_us_per_task (this process's CPU time per task in
    /// the concurrent phase, steadier than the rate on a shared machine).
    Queue(QueueArgs),
    /// Many agent tasks against one model server with fewer slots than workers, paced by the
    /// store's shared limits, on one daemon (SQLite, PostgreSQL) and several (PostgreSQL):
    /// most_in_flight (never above --slots), refused (429s), failed (0), busy_share, each
    /// repository's share of completions while all had work and share_spread, first_request_ms
    /// (p50, p99) per repository, peak_rss_mib.
    ///
    /// Example: `cargo build --release -p orchestrator-bench && orchestrator-bench flow --tasks 1000`
    Flow(FlowArgs),
    /// The agent loop's own overhead against a model server that answers at once, on SQLite and
    /// PostgreSQL: turn_overhead_ms (p50, p90, p99), tool_call_overhead_ms, payload_bytes_per_turn,
    /// file_bytes_per_turn, ratio_to_target (2 ms at p50).
    Agent(AgentArgs),
    /// The time to start `true` in each sandbox mode against no sandbox: median_us, p90_us,
    /// ratio_to_none; then a person's `cargo test` gate on a small crate, confined against not.
    Sandbox(SandboxArgs),
    /// A long agent run against a server with a small context window, with compaction and
    /// without: tokens_per_request, compactions, oversized, cached_prefix_share, turns_ratio.
    Context(ContextArgs),
    /// The gate-memory benchmark's gate (1 GiB of output) through `orchestrator run`, alone and
    /// followed by `task logs --follow`, alternating: gate_ms_median, mib_per_s,
    /// peak_rss_mib_median per kind, and followed_to_alone.
    ///
    /// Example: `cargo build --release -p orchestrator && orchestrator-bench gate-output`
    GateOutput(GateOutputArgs),
    /// The chaos soak: several `serve` processes of the real binary on one store, a mixed workload
    /// (gate and agent tasks, approvals, a per-second automation, signed webhook deliveries) and
    /// SIGKILL of a random daemon at a random moment, cycle after cycle. Prints, per backend:
    /// tasks_lost, tasks_failed, tasks_run_twice, slots_missed, slots_fired_twice, event_gaps,
    /// event_duplicates, approvals_lost, deliveries_processed_twice, processes_left; every figure
    /// must be 0, and the exit code is 1 otherwise.
    ///
    /// Example: `cargo build --release -p orchestrator && orchestrator-bench soak --cycles 100`
    Soak(SoakArgs),
    /// A backlog of signed webhook deliveries, each needing one GitHub call, drained by the real
    /// `serve` against a GitHub that answers in --github-ms: drained_per_s, ratio_to_target (100/s
    /// with a 100 ms GitHub), ratio_to_one_at_a_time.
    ///
    /// Example: `cargo build --release -p orchestrator -p orchestrator-bench && orchestrator-bench drain`
    Drain(DrainArgs),
    /// A task on a repository, from its claim to its first model request: with the mirror cold
    /// (cloned first), warm (fetched), and a plain directory as the yardstick: cold_ms, warm_ms,
    /// path_ms (median, p90, runs), mirror_bytes.
    ///
    /// Example: `orchestrator-bench workspace --repository . --runs 5`
    Workspace(WorkspaceArgs),
    /// A repository task's claim to its first model request with no setup, with its setup run
    /// (cold cache) and with the cache reused (warm), the mirror warm in all three: none_ms,
    /// cold_ms, warm_ms (median, p90, runs), warm_over_none (target 1.5 or less), entry_bytes.
    /// The default setup downloads a blob from a stand-in on 127.0.0.1 and writes 2,000 files.
    ///
    /// Example: `orchestrator-bench environment --runs 3`
    ///
    /// Example: `orchestrator-bench environment --setup 'cargo fetch'`
    Environment(EnvironmentArgs),
    /// One attempt at a task against best_of = 3 of it (one sibling fails the gate, two pass
    /// with different sizes), through the worker pool with four slots and a scripted model with a
    /// latency: single_ms, best_of_ms (median, p90, runs), best_of_over_single (target 1.3 or
    /// less), and the model calls of each.
    ///
    /// Example: `orchestrator-bench best-of --runs 3 --latency-ms 300`
    BestOf(BestOfArgs),
    /// Checkpoints of a task's workspace on a real repository (or a generated one of --files N),
    /// after each of a series of turns of four kinds (reads only, one file edited, a command that
    /// changed nothing, mixed edits): each turn's bytes, files and save time (capture and write to
    /// SQLite), per_kind (median, p90 of each kind's ms), first_capture_ms, last_bytes, and
    /// restore_ms onto a fresh clone. A turn of reads only should take under 5 ms on any size.
    ///
    /// Example: `orchestrator-bench checkpoint --repository . --turns 20`
    ///
    /// Example: `orchestrator-bench checkpoint --files 100000 --turns 20`
    Checkpoint(CheckpointArgs),
}

#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// The repository the workspace is cloned from (default: the checkout this runs in).
    #[arg(long)]
    pub repository: Option<std::path::PathBuf>,
    /// Turns of edits, each followed by a checkpoint.
    #[arg(long, default_value_t = orchestrator_bench::checkpoint::DEFAULT_TURNS)]
    pub turns: usize,
    /// Generate a repository of this many files (100 per directory) instead of cloning one.
    #[arg(long, conflicts_with = "repository")]
    pub files: Option<usize>,
}

impl CheckpointArgs {
    pub fn into_config(self) -> Result<orchestrator_bench::checkpoint::CheckpointBenchConfig> {
        let repository = match self.repository {
            Some(path) => path,
            None => orchestrator_bench::workspace::current_repository()?,
        };
        Ok(orchestrator_bench::checkpoint::CheckpointBenchConfig {
            repository,
            turns: self.turns.max(1),
            generate: self.files.filter(|n| *n > 0),
        })
    }
}

#[derive(Debug, Args)]
pub struct BestOfArgs {
    /// Rounds; each with new stores and a new mirror.
    #[arg(long, default_value_t = orchestrator_bench::best_of::DEFAULT_RUNS)]
    pub runs: usize,
    /// How long the scripted model takes to answer each request.
    #[arg(long, default_value_t = orchestrator_bench::best_of::DEFAULT_LATENCY_MS)]
    pub latency_ms: u64,
}

#[derive(Debug, Args)]
pub struct EnvironmentArgs {
    /// The repository the tasks name (default: the checkout this runs in).
    #[arg(long)]
    pub repository: Option<std::path::PathBuf>,
    /// Rounds; each with an empty cache and a new mirror.
    #[arg(long, default_value_t = orchestrator_bench::environment::DEFAULT_RUNS)]
    pub runs: usize,
    /// A setup command (repeat for several) instead of the stand-in download.
    #[arg(long)]
    pub setup: Vec<String>,
    /// The stand-in blob's size in MiB.
    #[arg(long, default_value_t = orchestrator_bench::environment::DEFAULT_BLOB_MB)]
    pub blob_mb: usize,
    /// The `orchestrator` binary (default: the one next to this program).
    #[arg(long)]
    pub bin: Option<std::path::PathBuf>,
}

impl EnvironmentArgs {
    pub fn into_config(self) -> Result<orchestrator_bench::environment::EnvironmentBenchConfig> {
        let repository = match self.repository {
            Some(path) => path,
            None => orchestrator_bench::workspace::current_repository()?,
        };
        let bin = match self.bin {
            Some(bin) => bin,
            None => sibling_orchestrator()?,
        };
        Ok(orchestrator_bench::environment::EnvironmentBenchConfig {
            repository,
            runs: self.runs.max(1),
            setup: (!self.setup.is_empty()).then_some(self.setup),
            blob_mb: self.blob_mb,
            bin,
        })
    }
}

#[derive(Debug, Args)]
pub struct WorkspaceArgs {
    /// The repository the tasks name (default: the checkout this runs in).
    #[arg(long)]
    pub repository: Option<std::path::PathBuf>,
    /// Rounds; each makes a new mirror.
    #[arg(long, default_value_t = orchestrator_bench::workspace::DEFAULT_RUNS)]
    pub runs: usize,
}

impl WorkspaceArgs {
    pub fn into_config(self) -> Result<orchestrator_bench::workspace::WorkspaceBenchConfig> {
        let repository = match self.repository {
            Some(path) => path,
            None => orchestrator_bench::workspace::current_repository()?,
        };
        Ok(orchestrator_bench::workspace::WorkspaceBenchConfig {
            repository,
            runs: self.runs.max(1),
        })
    }
}

#[derive(Debug, Args)]
pub struct DrainArgs {
    /// Deliveries posted at once.
    #[arg(long, default_value_t = orchestrator_bench::drain::DEFAULT_DELIVERIES)]
    pub deliveries: usize,
    /// How long each GitHub call takes, in milliseconds.
    #[arg(long, default_value_t = orchestrator_bench::drain::DEFAULT_GITHUB_MS)]
    pub github_ms: u64,
    /// The `orchestrator` binary (default: the one next to this program).
    #[arg(long)]
    pub bin: Option<std::path::PathBuf>,
}

impl DrainArgs {
    pub fn into_config(self) -> Result<orchestrator_bench::drain::DrainConfig> {
        let bin = match self.bin {
            Some(bin) => bin,
            None => sibling_orchestrator()?,
        };
        Ok(orchestrator_bench::drain::DrainConfig {
            bin,
            deliveries: self.deliveries,
            github_ms: self.github_ms,
        })
    }
}

#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Kill cycles (each 1.5 to 3.5 s, one SIGKILL each).
    #[arg(long, default_value_t = orchestrator_bench::soak::DEFAULT_CYCLES)]
    pub cycles: usize,
    /// Daemons sharing the store.
    #[arg(long, default_value_t = orchestrator_bench::soak::DEFAULT_DAEMONS)]
    pub daemons: usize,
    /// Which stores to soak.
    #[arg(long, value_enum, default_value_t = BackendArg::All)]
    pub backend: BackendArg,
    /// PostgreSQL server on which the soak creates and drops a database. Default: the
    /// environment's ORCHESTRATOR_BENCH_DATABASE_URL, then ORCHESTRATOR_TEST_DATABASE_URL, then
    /// postgres://postgres@127.0.0.1:5432/test.
    #[arg(long)]
    pub database_url: Option<String>,
    /// The `orchestrator` binary (default: the one next to this program, as `cargo build` puts
    /// them).
    #[arg(long)]
    pub bin: Option<std::path::PathBuf>,
    /// Seed of the random choices (default: the clock); the report prints it, to replay a run.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Put one succeeded task back in the queue before the check, to see the checker report it.
    #[arg(long)]
    pub inject_double_execution: bool,
    /// Keep the soak's home (daemon logs, SQLite file) and PostgreSQL database (they are kept
    /// anyway when a figure is not zero).
    #[arg(long)]
    pub keep: bool,
}

impl SoakArgs {
    pub fn into_configs(self) -> Result<Vec<orchestrator_bench::soak::SoakConfig>> {
        let bin = match self.bin {
            Some(bin) => bin,
            None => sibling_orchestrator()?,
        };
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        let postgres_url = postgres_url(self.database_url);
        let configs: Vec<_> = self
            .backend
            .backends()
            .into_iter()
            .map(|backend| orchestrator_bench::soak::SoakConfig {
                bin: bin.clone(),
                backend,
                postgres_url: postgres_url.clone(),
                daemons: self.daemons,
                cycles: self.cycles,
                seed,
                inject_double_execution: self.inject_double_execution,
                keep: self.keep,
            })
            .collect();
        for config in &configs {
            config.validate()?;
        }
        Ok(configs)
    }
}

#[derive(Debug, Args)]
pub struct GateOutputArgs {
    /// Bytes the gate prints.
    #[arg(long, default_value_t = orchestrator_bench::gate_output::DEFAULT_BYTES)]
    pub bytes: u64,
    /// Runs of each kind (alone, followed), alternating.
    #[arg(long, default_value_t = orchestrator_bench::gate_output::DEFAULT_RUNS)]
    pub runs: usize,
    /// The `orchestrator` binary (default: the one next to this program).
    #[arg(long)]
    pub bin: Option<std::path::PathBuf>,
}

impl GateOutputArgs {
    pub fn into_config(self) -> Result<orchestrator_bench::gate_output::GateOutputConfig> {
        let bin = match self.bin {
            Some(bin) => bin,
            None => sibling_orchestrator()?,
        };
        anyhow::ensure!(bin.exists(), "no orchestrator binary at {}", bin.display());
        Ok(orchestrator_bench::gate_output::GateOutputConfig {
            bin,
            bytes: self.bytes,
            runs: self.runs.max(1),
        })
    }
}

#[derive(Debug, Args)]
pub struct ContextArgs {
    /// Reads the agent is scripted to make.
    #[arg(long, default_value_t = 200)]
    pub turns: usize,
    /// The server's context window, in tokens.
    #[arg(long, default_value_t = 16_384)]
    pub window: u64,
}

#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Starts per mode.
    #[arg(long, default_value_t = orchestrator_bench::sandbox::DEFAULT_RUNS)]
    pub runs: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Sqlite,
    Postgres,
    All,
}

impl BackendArg {
    fn backends(self) -> Vec<Backend> {
        match self {
            BackendArg::Sqlite => vec![Backend::Sqlite],
            BackendArg::Postgres => vec![Backend::Postgres],
            BackendArg::All => vec![Backend::Sqlite, Backend::Postgres],
        }
    }
}

/// The PostgreSQL server: the flag, then the environment, then the default.
fn postgres_url(flag: Option<String>) -> String {
    flag.or_else(|| {
        POSTGRES_URL_VARS
            .iter()
            .find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
    })
    .unwrap_or_else(|| DEFAULT_POSTGRES_URL.to_owned())
}

#[derive(Debug, Args)]
pub struct QueueArgs {
    /// No-op tasks per throughput phase (and jobs for the raw baseline and the peer).
    #[arg(long, default_value_t = queue::DEFAULT_TASKS)]
    pub tasks: u64,
    /// Worker slots of the pool.
    #[arg(long, default_value_t = queue::DEFAULT_SLOTS)]
    pub slots: usize,
    /// Most tasks the pool claims in one transaction.
    #[arg(long, default_value_t = queue::DEFAULT_CLAIM_BATCH)]
    pub claim_batch: usize,
    /// Tasks per create_tasks call (and jobs per push for the peer).
    #[arg(long, default_value_t = queue::DEFAULT_ENQUEUE_BATCH)]
    pub enqueue_batch: usize,
    /// Jobs per transaction of the raw SQL baseline.
    #[arg(long, default_value_t = queue::DEFAULT_RAW_BATCH)]
    pub raw_batch: usize,
    /// Tasks enqueued one at a time for the enqueue-to-start latency.
    #[arg(long, default_value_t = queue::DEFAULT_LATENCY_TASKS)]
    pub latency_tasks: usize,
    /// Pause between latency samples, in milliseconds.
    #[arg(long, default_value_t = queue::DEFAULT_LATENCY_INTERVAL.as_secs_f64() * 1000.0)]
    pub latency_interval_ms: f64,
    /// Repeat every measurement and report medians.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Which databases to measure.
    #[arg(long, value_enum, default_value_t = BackendArg::All)]
    pub backend: BackendArg,
    /// PostgreSQL server on which each run creates and drops a database. Default: the environment's
    /// ORCHESTRATOR_BENCH_DATABASE_URL, then ORCHESTRATOR_TEST_DATABASE_URL, then
    /// postgres://postgres@127.0.0.1:5432/test.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Connections in the store's pool (default: the store's own default).
    #[arg(long)]
    pub store_connections: Option<u32>,
    /// Keep each run's SQLite files or PostgreSQL database for inspection instead of removing them.
    #[arg(long)]
    pub keep_databases: bool,
    /// Skip apalis.
    #[arg(long)]
    pub no_peer: bool,
    /// apalis workers on the shared queue.
    #[arg(long, default_value_t = queue::DEFAULT_PEER_WORKERS)]
    pub peer_workers: usize,
    /// Seconds after which apalis' partial throughput is reported.
    #[arg(long, default_value_t = queue::DEFAULT_PEER_TIMEOUT.as_secs())]
    pub peer_timeout_s: u64,
}

impl QueueArgs {
    pub fn into_config(self) -> Result<QueueConfig> {
        anyhow::ensure!(
            self.latency_interval_ms.is_finite() && self.latency_interval_ms >= 0.0,
            "--latency-interval-ms must be a non-negative number"
        );
        let postgres_url = postgres_url(self.database_url);
        let backends = self.backend.backends();
        let config = QueueConfig {
            tasks: self.tasks,
            slots: self.slots,
            claim_batch: self.claim_batch,
            enqueue_batch: self.enqueue_batch,
            raw_batch: self.raw_batch,
            latency_tasks: self.latency_tasks,
            latency_interval: Duration::from_secs_f64(self.latency_interval_ms / 1000.0),
            runs: self.runs,
            backends,
            postgres_url,
            peer: (!self.no_peer).then_some(PeerSettings {
                workers: self.peer_workers,
                timeout: Duration::from_secs(self.peer_timeout_s),
            }),
            keep_databases: self.keep_databases,
            store_connections: self.store_connections,
        };
        config.validate()?;
        Ok(config)
    }
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Agent tasks per phase (a warm-up task runs first, outside the figures).
    #[arg(long, default_value_t = agent::DEFAULT_TASKS)]
    pub tasks: usize,
    /// Turns per task: every turn but the last calls read_file, the last answers with text.
    #[arg(long, default_value_t = agent::DEFAULT_TURNS)]
    pub turns: usize,
    /// Worker slots of the pool; 1 times each turn alone.
    #[arg(long, default_value_t = agent::DEFAULT_SLOTS)]
    pub slots: usize,
    /// Which databases to measure.
    #[arg(long, value_enum, default_value_t = BackendArg::All)]
    pub backend: BackendArg,
    /// PostgreSQL server on which each phase creates and drops a database. Default: the
    /// environment's ORCHESTRATOR_BENCH_DATABASE_URL, then ORCHESTRATOR_TEST_DATABASE_URL, then
    /// postgres://postgres@127.0.0.1:5432/test.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Keep each phase's SQLite files or PostgreSQL database for inspection.
    #[arg(long)]
    pub keep_databases: bool,
}

#[derive(Debug, Args)]
pub struct FlowArgs {
    /// Agent tasks: 70% from one repository, 10% from each of three others.
    #[arg(long, default_value_t = 1000)]
    pub tasks: usize,
    /// The model server's parallel slots; it answers 429 past them.
    #[arg(long, default_value_t = 4)]
    pub slots: usize,
    /// The model server's time over each request.
    #[arg(long, default_value_t = 300)]
    pub latency_ms: u64,
    /// Turns per task: every turn but the last reads a file, the last answers with text.
    #[arg(long, default_value_t = 3)]
    pub turns: usize,
    /// Workers of each daemon.
    #[arg(long, default_value_t = 64)]
    pub workers: usize,
    /// Daemons sharing the store on PostgreSQL (SQLite is measured with one).
    #[arg(long, default_value_t = 3)]
    pub daemons: usize,
    /// Which databases to measure.
    #[arg(long, value_enum, default_value_t = BackendArg::All)]
    pub backend: BackendArg,
    /// PostgreSQL server on which each run creates and drops a database (default as for queue).
    #[arg(long)]
    pub database_url: Option<String>,
    /// Give each repository's tasks a concurrency key with this max_running (without it, no
    /// key: the claim takes the oldest task first).
    #[arg(long, value_name = "N")]
    pub per_repository: Option<u32>,
}

impl FlowArgs {
    pub fn into_config(self) -> Result<orchestrator_bench::flow::FlowConfig> {
        anyhow::ensure!(
            self.tasks >= 10,
            "--tasks must be at least 10 (four repositories)"
        );
        anyhow::ensure!(self.slots >= 1, "--slots must be at least 1");
        anyhow::ensure!(self.turns >= 1, "--turns must be at least 1");
        anyhow::ensure!(self.workers >= 1, "--workers must be at least 1");
        anyhow::ensure!(self.daemons >= 1, "--daemons must be at least 1");
        let mut daemons = vec![1];
        if self.daemons > 1 {
            daemons.push(self.daemons);
        }
        Ok(orchestrator_bench::flow::FlowConfig {
            tasks: self.tasks,
            slots: self.slots,
            latency_ms: self.latency_ms,
            turns: self.turns,
            workers: self.workers,
            daemons,
            backends: self.backend.backends(),
            postgres_url: postgres_url(self.database_url),
            per_repository: self.per_repository,
        })
    }
}

impl AgentArgs {
    pub fn into_config(self) -> Result<AgentBenchConfig> {
        let config = AgentBenchConfig {
            tasks: self.tasks,
            turns: self.turns,
            slots: self.slots,
            backends: self.backend.backends(),
            postgres_url: postgres_url(self.database_url),
            keep_databases: self.keep_databases,
        };
        config.validate()?;
        Ok(config)
    }
}

/// The `orchestrator` binary next to this program, where `cargo build` puts both.
fn sibling_orchestrator() -> Result<std::path::PathBuf> {
    std::env::current_exe()?
        .parent()
        .map(|dir| dir.join("orchestrator"))
        .ok_or_else(|| anyhow::anyhow!("cannot tell where this program is"))
}
