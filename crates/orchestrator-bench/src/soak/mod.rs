//! The chaos soak: several `serve` processes of the real binary on one store, a mixed workload,
//! and SIGKILL of a random daemon at a random moment, cycle after cycle; then a check of what
//! the store holds against what the workload made (see check.rs for each figure).
//!
//! Crash tests prove one fault at one chosen moment. Users meet faults at moments nobody chose,
//! while a delivery is half-processed, an approval is being decided and a slot is due, all at
//! once. The soak makes those moments by chance and counts what went wrong; every figure must be
//! zero. A short soak runs in the test suite on both backends (and once with an injected double
//! execution, which the checker must report); `just soak` runs a long one.
//!
//! The run, in order:
//! 1. A fresh store (a new SQLite file, or a new PostgreSQL database), a fake GitHub and a scripted
//!    model on 127.0.0.1, a trigger rule and a per-second automation.
//! 2. `daemons` daemons start. Each cycle (1.5 to 3.5 s) creates gate and agent tasks and posts
//!    deliveries at random ticks, kills a random daemon with SIGKILL at a random moment and
//!    restarts it after up to a second. A script approves every pending approval.
//! 3. The automation is paused, deliveries nobody acknowledged are redelivered, and the work
//!    drains: every task finished, every delivery settled, no approval pending.
//! 4. With `inject_double_execution`, one succeeded task is put back in the queue behind the
//!    store's back (inject.rs), as a broken store would, and runs again.
//! 5. The daemons get SIGTERM, and the soak's processes still alive are counted.

mod check;
pub(crate) mod daemon;
mod inject;
pub(crate) mod workload;

pub use check::{Figures, Seen};

use anyhow::{Context, Result, bail};
use daemon::{Daemon, DaemonSpec};
use orchestrator_store::{ApprovalFilter, Backend, Store, StoreOptions, TaskFilter};
use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
use orchestrator_test_support::model_server::ScriptedModel;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use workload::Ledger;

/// Daemons sharing the store.
pub const DEFAULT_DAEMONS: usize = 3;
/// Kill cycles of a long soak (`just soak`).
pub const DEFAULT_CYCLES: usize = 60;
/// The lease the daemons run with: short, so that work a killed daemon held is rescued within
/// the cycle after.
const LEASE_SECONDS: &str = "2";
/// Worker slots per daemon.
const WORKERS: &str = "4";
/// One tick of the workload: each tick may create work, kill or restart a daemon.
const TICK: Duration = Duration::from_millis(100);
/// The longest the work may take to drain once the kills stop. Not a performance bound: a drain
/// that needs longer has lost something, and the check then says what.
const DRAIN_PATIENCE: Duration = Duration::from_secs(240);
/// How long after a killed daemon's restart what it ran may still be dying.
const ORPHAN_GRACE: Duration = Duration::from_millis(1500);
/// How often the approval script looks for pending approvals.
const APPROVER_POLL: Duration = Duration::from_millis(200);

/// What a soak runs on and for how long.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// The `orchestrator` binary.
    pub bin: PathBuf,
    pub backend: Backend,
    /// For PostgreSQL: the server on which the soak creates (and afterwards drops) its database.
    pub postgres_url: String,
    pub daemons: usize,
    pub cycles: usize,
    pub seed: u64,
    /// Put one succeeded task back in the queue before the check, to show the checker finds it.
    pub inject_double_execution: bool,
    /// Keep the home (logs, SQLite file) and the PostgreSQL database for inspection.
    pub keep: bool,
}

impl SoakConfig {
    pub fn validate(&self) -> Result<()> {
        if !self.bin.is_file() {
            bail!(
                "{} is not a file: build the binary first (`cargo build --release -p orchestrator`) \
                 or give --bin",
                self.bin.display()
            );
        }
        if self.daemons == 0 || self.daemons > 8 {
            bail!("--daemons must be between 1 and 8");
        }
        if self.cycles == 0 {
            bail!("--cycles must be at least 1");
        }
        Ok(())
    }
}

/// What a soak did and found.
#[derive(Debug, Clone)]
pub struct SoakReport {
    pub backend: Backend,
    pub daemons: usize,
    pub cycles: usize,
    pub kills: usize,
    pub seed: u64,
    pub seconds: f64,
    pub figures: Figures,
    pub seen: Seen,
    /// Where the home was kept, with `keep`.
    pub kept: Option<String>,
}

impl SoakReport {
    pub fn passed(&self) -> bool {
        self.figures.all_zero()
    }

    /// One JSON object: the figures first, then what the soak saw, then the findings.
    pub fn to_json(&self) -> Value {
        json!({
            "bench": "soak",
            "backend": self.backend.as_str(),
            "daemons": self.daemons,
            "cycles": self.cycles,
            "kills": self.kills,
            "seed": self.seed,
            "seconds": (self.seconds * 10.0).round() / 10.0,
            "passed": self.passed(),
            "figures": self.figures.to_json(),
            "seen": self.seen.to_json(),
            "findings": self.figures.findings,
            "kept": self.kept,
        })
    }
}

/// Runs a soak. It makes its own async runtime: call it from plain (non-async) code.
pub fn run(config: &SoakConfig, progress: &dyn Fn(&str)) -> Result<SoakReport> {
    config.validate()?;
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut rng = StdRng::seed_from_u64(config.seed);
    let home = tempfile::Builder::new()
        .prefix("orch-soak-")
        .tempdir()
        .context("cannot create the soak's home")?;
    // Agents' workspaces live outside the home: the sandbox hides the daemon's home from the
    // processes it runs, as it hides its secrets.
    let workspaces = tempfile::Builder::new()
        .prefix("orch-soak-ws-")
        .tempdir()
        .context("cannot create the directory of the agents' workspaces")?;
    // Digits for the fraction of the gates' sleeps, which nobody else uses: the soak's gate
    // processes are found by them.
    let marker = format!("{:010}", rng.random_range(0..10_000_000_000u64));

    let database = match config.backend {
        Backend::Sqlite => None,
        Backend::Postgres => {
            Some(runtime.block_on(crate::queue::BenchDatabase::postgres(&config.postgres_url))?)
        }
    };
    let database_url = database.as_ref().map(|d| d.store_url());
    let github = FakeGitHub::start_blocking();
    github.set_permission(workload::REPO, workload::SENDER, "write");
    let model = ScriptedModel::start_blocking(workload::agent_model);
    let spec = DaemonSpec {
        bin: config.bin.clone(),
        home: home.path().to_owned(),
        database_url: database_url.clone(),
        env: vec![
            (
                "ORCHESTRATOR_GITHUB_WEBHOOK_SECRET".into(),
                workload::SECRET.into(),
            ),
            ("ORCHESTRATOR_GITHUB_API_URL".into(), github.url()),
            ("GITHUB_TOKEN".into(), FAKE_TOKEN.into()),
        ],
        args: vec![
            "--workers".into(),
            WORKERS.into(),
            "--lease-seconds".into(),
            LEASE_SECONDS.into(),
        ],
    };
    let gates = workload::gate_workspace(workspaces.path())?;
    workload::write_config(home.path(), &gates, &marker)?;
    workload::create_automation(&spec, &gates, &marker)?;
    let store_url = database_url
        .clone()
        .unwrap_or_else(|| home.path().join("orchestrator.db").display().to_string());
    let store = runtime
        .block_on(Store::open(&store_url, &StoreOptions::default()))
        .context("cannot open the soak's store")?;

    let places = Places {
        gates: &gates,
        workspaces: workspaces.path(),
        marker: &marker,
    };
    let outcome = drive(
        config, &runtime, &store, &spec, &model, &places, &mut rng, progress,
    );
    let (ledger, numbers, kills, left) = match outcome {
        Ok(done) => done,
        Err(e) => {
            let kept = home.keep();
            return Err(e.context(format!("the soak's home is kept at {}", kept.display())));
        }
    };
    progress("checking the store");
    let (figures, seen) = runtime.block_on(check::check(&store, &ledger, &numbers, &left))?;
    runtime.block_on(store.close());
    // Kept for a look when something went wrong; the injected double execution is expected.
    let unexpected = if config.inject_double_execution {
        figures.tasks_run_twice != 1
            || figures
                .values()
                .iter()
                .any(|(name, value)| *name != "tasks_run_twice" && *value != 0)
    } else {
        !figures.all_zero()
    };
    let kept = if config.keep || unexpected {
        let mut kept = home.keep().display().to_string();
        kept.push_str(&format!(" and {}", workspaces.keep().display()));
        if let Some(database) = database {
            kept.push_str(&format!(" and {}", database.keep()));
        }
        Some(kept)
    } else {
        if let Some(database) = database {
            runtime.block_on(database.remove())?;
        }
        None
    };
    Ok(SoakReport {
        backend: config.backend,
        daemons: config.daemons,
        cycles: config.cycles,
        kills,
        seed: config.seed,
        seconds: started.elapsed().as_secs_f64(),
        figures,
        seen,
        kept,
    })
}

/// What the drive leaves for the check: the ledger, each delivery's issue number, the kills, and
/// the soak's processes still alive at the end.
type Driven = (Ledger, HashMap<String, u64>, usize, Vec<String>);

/// Where the workload's tasks run, and the marker of their processes.
struct Places<'a> {
    gates: &'a std::path::Path,
    workspaces: &'a std::path::Path,
    marker: &'a str,
}

/// Steps 2 to 5 of the module's comment.
#[allow(clippy::too_many_arguments)]
fn drive(
    config: &SoakConfig,
    runtime: &tokio::runtime::Runtime,
    store: &Store,
    spec: &DaemonSpec,
    model: &ScriptedModel,
    places: &Places<'_>,
    rng: &mut StdRng,
    progress: &dyn Fn(&str),
) -> Result<Driven> {
    let (gates, workspaces, marker) = (places.gates, places.workspaces, places.marker);
    let mut ledger = Ledger::default();
    let mut numbers: HashMap<String, u64> = HashMap::new();
    let mut daemons: Vec<Option<Daemon>> = Vec::new();
    for index in 0..config.daemons {
        daemons.push(Some(spec.start(index)?));
    }
    let approved = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let approver = {
        let (store, spec, approved, stop) =
            (store.clone(), spec.clone(), approved.clone(), stop.clone());
        let handle = runtime.handle().clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let pending = handle
                    .block_on(store.list_approvals(&ApprovalFilter {
                        status: Some("pending".into()),
                        task: None,
                        limit: Some(100),
                    }))
                    .unwrap_or_default();
                let ids: Vec<i64> = pending.iter().map(|a| a.id).collect();
                let done = workload::approve(&spec, &ids);
                if let Ok(mut approved) = approved.lock() {
                    approved.extend(done);
                }
                std::thread::sleep(APPROVER_POLL);
            }
        })
    };

    let mut pending_deliveries: Vec<String> = Vec::new();
    let mut kills = 0;
    let mut counter = 0usize;
    let mut watched: Vec<(usize, Vec<(i32, u64)>)> = Vec::new();
    let mut orphans: Vec<String> = Vec::new();
    for cycle in 0..config.cycles {
        let ticks = rng.random_range(15..35usize);
        let kill_at = rng.random_range(3..ticks);
        let restart_after = rng.random_range(0..=10usize);
        let victim = rng.random_range(0..config.daemons);
        let mut restart_at = None;
        for tick in 0..ticks {
            counter += 1;
            // The first tick makes one of each kind, so that even a short soak has them all.
            let first = cycle == 0 && tick == 0;
            if first || rng.random_bool(0.12) {
                ledger
                    .gate_tasks
                    .push(workload::create_gate_task(spec, counter, gates, marker)?);
            }
            if first || rng.random_bool(0.04) {
                ledger.agent_tasks.push(workload::create_agent_task(
                    spec,
                    counter,
                    workspaces,
                    &model.base_url(),
                )?);
            }
            if first || rng.random_bool(0.08) {
                let id = format!("soak-{}-{counter}", config.seed);
                numbers.insert(id.clone(), counter as u64);
                pending_deliveries.push(id);
            }
            post_pending(
                &mut pending_deliveries,
                &daemons,
                &mut ledger,
                &numbers,
                rng,
            )?;
            if tick == kill_at
                && let Some(daemon) = daemons[victim].take()
            {
                // What the daemon ran when it died: none of it may outlive its restart.
                let family = daemon::descendants(daemon.pid());
                daemon.kill();
                kills += 1;
                restart_at = Some(tick + restart_after);
                watched.push((victim, family));
            }
            if restart_at.is_some_and(|at| tick >= at) && daemons[victim].is_none() {
                daemons[victim] = Some(spec.start(victim)?);
                restart_at = None;
            }
            std::thread::sleep(TICK);
        }
        if daemons[victim].is_none() {
            daemons[victim] = Some(spec.start(victim)?);
        }
        // A restarted daemon reaps what its predecessor left running as it starts; a moment for
        // the signals to land, then whatever still runs was left behind.
        std::thread::sleep(ORPHAN_GRACE);
        for (index, family) in watched.drain(..) {
            for (pid, start) in family {
                if let Some(process) = daemon::still_running(pid, start) {
                    orphans.push(format!(
                        "{process} outlived the SIGKILL of daemon {index} and its restart"
                    ));
                }
            }
        }
        progress(&format!(
            "cycle {}/{}: {} tasks, {} deliveries, {kills} kills",
            cycle + 1,
            config.cycles,
            ledger.gate_tasks.len() + ledger.agent_tasks.len(),
            ledger.deliveries.len() + pending_deliveries.len()
        ));
    }

    // Drain: no new slots, every delivery acknowledged, every task finished.
    spec.run(&["automation", "pause", workload::AUTOMATION])?;
    let start = Instant::now();
    while !pending_deliveries.is_empty() && start.elapsed() < DRAIN_PATIENCE {
        post_pending(
            &mut pending_deliveries,
            &daemons,
            &mut ledger,
            &numbers,
            rng,
        )?;
        std::thread::sleep(TICK);
    }
    progress("draining");
    let drained = wait_drained(runtime, store, &ledger)?;
    if !drained {
        progress("the work did not drain; checking what is there");
    }
    if config.inject_double_execution && drained {
        progress("injecting a double execution");
        inject::requeue_a_succeeded_task(runtime, store, &spec.home, spec.database_url.as_deref())?;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = approver.join();
    ledger.approved = approved.lock().map(|a| a.clone()).unwrap_or_default();

    let mut left = Vec::new();
    for daemon in daemons.into_iter().flatten() {
        let (index, pid) = (daemon.index, daemon.pid());
        if !daemon.stop() {
            left.push(format!("{pid}: daemon {index} did not exit after SIGTERM"));
        }
    }
    // Gates end with their daemon's shutdown; a moment for the last of them to be reaped.
    std::thread::sleep(Duration::from_millis(500));
    left.extend(orphans);
    left.extend(daemon::processes_with(marker));
    if !pending_deliveries.is_empty() {
        bail!("no daemon acknowledged deliveries {pending_deliveries:?} within {DRAIN_PATIENCE:?}");
    }
    Ok((ledger, numbers, kills, left))
}

/// Posts each unacknowledged delivery to a random live daemon; those acknowledged move to the
/// ledger.
fn post_pending(
    pending: &mut Vec<String>,
    daemons: &[Option<Daemon>],
    ledger: &mut Ledger,
    numbers: &HashMap<String, u64>,
    rng: &mut StdRng,
) -> Result<()> {
    let live: Vec<&Daemon> = daemons.iter().flatten().collect();
    if live.is_empty() {
        return Ok(());
    }
    let mut still = Vec::new();
    for id in pending.drain(..) {
        let daemon = live[rng.random_range(0..live.len())];
        let number = numbers.get(&id).copied().unwrap_or(0);
        if workload::post_delivery(&daemon.addr, &id, &workload::delivery_body(number))? {
            ledger.deliveries.push(id);
        } else {
            still.push(id);
        }
    }
    *pending = still;
    Ok(())
}

/// Waits until every task is finished, every acknowledged delivery settled and no approval is
/// pending. Returns whether that happened within [`DRAIN_PATIENCE`].
fn wait_drained(runtime: &tokio::runtime::Runtime, store: &Store, ledger: &Ledger) -> Result<bool> {
    let start = Instant::now();
    let mut settled = 0;
    while start.elapsed() < DRAIN_PATIENCE {
        let done = runtime.block_on(async {
            // Deliveries first: a delivery settles with the task it made, so the task list read
            // after it includes that task.
            for id in &ledger.deliveries {
                match store.delivery(id).await? {
                    Some(d) if ["processed", "ignored", "failed"].contains(&d.status.as_str()) => {}
                    _ => return anyhow::Ok(false),
                }
            }
            let pending = store
                .list_approvals(&ApprovalFilter {
                    status: Some("pending".into()),
                    task: None,
                    limit: Some(1),
                })
                .await?;
            if !pending.is_empty() {
                return Ok(false);
            }
            let tasks = store
                .list_tasks(&TaskFilter {
                    limit: Some(u64::MAX / 2),
                    ..TaskFilter::default()
                })
                .await?;
            Ok(tasks.iter().all(|t| t.state.is_terminal()))
        })?;
        // Twice in a row: a slot being fired as the automation was paused lands in between.
        settled = if done { settled + 1 } else { 0 };
        if settled >= 2 {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(false)
}
