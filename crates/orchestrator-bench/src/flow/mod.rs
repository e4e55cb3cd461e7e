//! The flow benchmark: many agent tasks against one model server with fewer slots than workers,
//! paced by the store's shared limits (`[model_servers]`), on one daemon and on several sharing
//! the store.
//!
//! The model server is the scripted one with `slots` parallel slots that answers 429 past them
//! and takes `latency_ms` over each request. The tasks come from four repositories, one with 70%
//! of them and three with 10% each; each has `turns` turns (a file read, then an answer). The
//! daemons are worker pools in this process, each with its own store handle and worker id, as
//! separate processes would have.
//!
//! Printed per backend and daemon count: `most_in_flight` (never above `slots`), `refused` (429s
//! the server sent), `failed` (tasks that did not succeed: 0), `busy_share` (the server's slots
//! busy over the run), each repository's `share` of the completions while all four had work and
//! `share_spread` (the largest distance from an equal share), enqueue to first model request
//! `first_request_ms` (p50 and p99) per repository, `peak_rss_mib` of this process (daemons
//! and model server together), and `turn_overhead_ms`: the daemon's own time between a reply and
//! the next request, idle and under the load (see probe.rs).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use orchestrator_store::{Backend, ServerLimits, Store, StoreOptions};
use orchestrator_test_support::model_server::{Quirks, Reply, Request, ScriptedModel, call};
use orchestrator_types::{ModelSpec, NewTask, TaskState};
use orchestrator_worker::model::{ClientConfig, PacedServer, Pacing};
use orchestrator_worker::{Metrics, PoolConfig, WorkerPool, new_worker_id};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::queue::BenchDatabase;

mod probe;

/// The four repositories and their shares of the tasks, in tenths.
const REPOSITORIES: [(&str, usize); 4] = [("big", 7), ("a", 1), ("b", 1), ("c", 1)];
/// The longest a run may take before it is reported as stuck.
const RUN_TIMEOUT: Duration = Duration::from_secs(3600);
const FILE: &str = "notes.txt";

#[derive(Debug, Clone)]
pub struct FlowConfig {
    pub tasks: usize,
    pub slots: usize,
    pub latency_ms: u64,
    pub turns: usize,
    /// Workers of each daemon.
    pub workers: usize,
    /// Daemon counts to measure, each on a fresh database (several only on PostgreSQL).
    pub daemons: Vec<usize>,
    pub backends: Vec<Backend>,
    pub postgres_url: String,
    /// A concurrency key per repository with this `max_running`, or none.
    pub per_repository: Option<u32>,
}

/// One run's figures.
struct Figures {
    most_in_flight: usize,
    refused: usize,
    failed: usize,
    wall: Duration,
    busy_share: f64,
    shares: BTreeMap<&'static str, f64>,
    first_request_ms: BTreeMap<&'static str, (f64, f64)>,
    peak_rss_mib: Option<f64>,
    /// Between a reply and the next request of a probe task: p50 and p99 idle, then under load.
    turn_overhead_ms: [f64; 4],
}

pub async fn run(
    config: &FlowConfig,
    mut emit: impl FnMut(&str) -> Result<()>,
) -> Result<crate::queue::Summary> {
    let mut summary = crate::queue::Summary::default();
    for backend in &config.backends {
        for daemons in &config.daemons {
            if *backend == Backend::Sqlite && *daemons > 1 {
                continue;
            }
            eprintln!(
                "[flow] {backend:?}: {} tasks x {} turns, {daemons} daemon(s) x {} workers, {} slots, {} ms",
                config.tasks, config.turns, config.workers, config.slots, config.latency_ms
            );
            let measured = measure(*backend, *daemons, config).await;
            let line = summary.line_for(
                *backend,
                measured
                    .as_ref()
                    .err()
                    .map(|(unreachable, e)| (*unreachable, anyhow::anyhow!("{e:#}"))),
                || match &measured {
                    Ok(f) => figures_json(*backend, *daemons, config, f),
                    Err(_) => String::new(),
                },
                |error| {
                    json!({"bench": "flow", "backend": format!("{backend:?}").to_lowercase(),
                           "daemons": daemons, "error": error})
                    .to_string()
                },
            );
            emit(&line)?;
        }
    }
    Ok(summary)
}

fn figures_json(backend: Backend, daemons: usize, config: &FlowConfig, f: &Figures) -> String {
    let spread = f
        .shares
        .values()
        .map(|s| (s - 0.25).abs())
        .fold(0.0_f64, f64::max);
    json!({
        "bench": "flow",
        "backend": format!("{backend:?}").to_lowercase(),
        "daemons": daemons,
        "tasks": config.tasks,
        "turns": config.turns,
        "slots": config.slots,
        "latency_ms": config.latency_ms,
        "workers_per_daemon": config.workers,
        "max_running_per_repository": config.per_repository,
        "most_in_flight": f.most_in_flight,
        "refused": f.refused,
        "failed": f.failed,
        "wall_s": (f.wall.as_secs_f64() * 10.0).round() / 10.0,
        "busy_share": (f.busy_share * 1000.0).round() / 1000.0,
        "share": f.shares.iter().map(|(k, v)| (k.to_string(), json!((v * 1000.0).round() / 1000.0))).collect::<serde_json::Map<_, _>>(),
        "share_spread": (spread * 1000.0).round() / 1000.0,
        "first_request_ms": f.first_request_ms.iter().map(|(k, (p50, p99))| (k.to_string(), json!({"p50": p50.round(), "p99": p99.round()}))).collect::<serde_json::Map<_, _>>(),
        "peak_rss_mib": f.peak_rss_mib.map(|m| m.round()),
        "turn_overhead_ms": {
            "idle": {"p50": round2(f.turn_overhead_ms[0]), "p99": round2(f.turn_overhead_ms[1])},
            "load": {"p50": round2(f.turn_overhead_ms[2]), "p99": round2(f.turn_overhead_ms[3])},
            "p99_ratio": round2(f.turn_overhead_ms[3] / f.turn_overhead_ms[1].max(f64::MIN_POSITIVE)),
        },
    })
    .to_string()
}

async fn measure(
    backend: Backend,
    daemons: usize,
    config: &FlowConfig,
) -> std::result::Result<Figures, (bool, anyhow::Error)> {
    let db = match backend {
        Backend::Sqlite => BenchDatabase::sqlite(),
        Backend::Postgres => BenchDatabase::postgres(&config.postgres_url).await,
    }
    .map_err(|e| (true, e))?;
    let measured = measure_on(&db, daemons, config).await;
    if let Err(e) = db.remove().await {
        eprintln!("warning: {e:#}");
    }
    measured.map_err(|e| (false, e))
}

/// The repository a request is for, from the task's prompt.
fn repository_of(request: &Request) -> Option<&'static str> {
    let text = request.body["messages"].to_string();
    REPOSITORIES
        .iter()
        .map(|(name, _)| *name)
        .find(|name| text.contains(&format!("repository {name},")))
}

async fn measure_on(db: &BenchDatabase, daemons: usize, config: &FlowConfig) -> Result<Figures> {
    let workspace = tempfile::tempdir().context("creating the workspace")?;
    std::fs::write(workspace.path().join(FILE), "a note\n")?;
    let turns = config.turns;
    let model = Arc::new(
        ScriptedModel::start_with(
            Quirks {
                slots: Some(config.slots),
                latency_ms: config.latency_ms,
                ..Quirks::default()
            },
            {
                let turns = config.turns;
                move |request: &Request| {
                    if request.assistant_turns() + 1 < turns {
                        Reply::ToolCalls(vec![call("read_file", json!({ "path": FILE }))])
                    } else {
                        Reply::Text("Done.".into())
                    }
                }
            },
        )
        .await,
    );
    let spec = ModelSpec {
        base_url: model.base_url(),
        model: "scripted".into(),
        api_key_env: None,
        settings: Default::default(),
    };
    let store = Store::open(&db.store_url(), &StoreOptions::default())
        .await
        .context("opening the store")?;
    // The tasks: 70% from one repository, 10% from each of three, interleaved as they would
    // arrive from their triggers.
    let mut tasks = Vec::with_capacity(config.tasks);
    let mut repository_of_task = Vec::with_capacity(config.tasks);
    for i in 0..config.tasks {
        let name = match i % 10 {
            7 => "a",
            8 => "b",
            9 => "c",
            _ => "big",
        };
        let mut task = NewTask::agent(
            format!("flow {name} {i}"),
            format!(
                "Flow benchmark, repository {name}, task {i}: read {FILE}, then say you are done."
            ),
        );
        task.workspace = Some(workspace.path().display().to_string());
        task.agent.max_turns = task.agent.max_turns.max(turns as u32);
        // As a task on the repository would take turns by default (tasks/fair.rs).
        task.fair_key = Some(format!("repository:{name}"));
        task.concurrency =
            config
                .per_repository
                .map(|max_running| orchestrator_types::Concurrency {
                    key: format!("repository:{name}"),
                    max_running,
                });
        tasks.push(task);
        repository_of_task.push(name);
    }
    let shutdown = CancellationToken::new();
    let mut joins = Vec::new();
    let mut stores = Vec::new();
    for _ in 0..daemons {
        let daemon_store = Store::open(&db.store_url(), &StoreOptions::default()).await?;
        let mut pool_config = PoolConfig::new(new_worker_id());
        pool_config.slots = config.workers;
        pool_config.agent.default_model = Some(spec.clone());
        pool_config.agent.client = ClientConfig {
            pacing: Some(Pacing::new(
                daemon_store.clone(),
                pool_config.worker_id.clone(),
                vec![PacedServer {
                    name: "bench".into(),
                    base_url: model.base_url(),
                    limits: ServerLimits {
                        max_in_flight: Some(config.slots as u32),
                        ..ServerLimits::default()
                    },
                }],
            )),
            ..ClientConfig::default()
        };
        let metrics = Arc::new(Metrics::default());
        let pool = WorkerPool::new(daemon_store.clone(), pool_config, metrics)
            .context("configuring the worker pool")?;
        joins.push(tokio::spawn(pool.run(shutdown.clone())));
        stores.push(daemon_store);
    }
    // The turn overhead on the idle daemons, then the load, then the overhead under it once the
    // server is busy.
    let probe = probe::Probe::start().await;
    let idle = probe.measure(&store, "idle", workspace.path()).await?;
    let enqueued = Instant::now();
    let ids = store.create_tasks(&tasks).await?;
    while model.received().len() < config.slots * 2 && enqueued.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let loaded = probe.measure(&store, "load", workspace.path()).await?;
    let mut peak: Option<f64> = None;
    let deadline = Instant::now() + RUN_TIMEOUT;
    loop {
        let states = store.count_by_state().await?;
        let open = states
            .iter()
            .filter(|(s, _)| !s.is_terminal())
            .map(|(_, n)| *n)
            .sum::<i64>();
        peak = peak_rss_mib().or(peak);
        if open == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{open} tasks still open after {RUN_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let wall = enqueued.elapsed();
    shutdown.cancel();
    for join in joins {
        join.await.context("a worker pool panicked")??;
    }
    for s in stores {
        s.close().await;
    }
    // Completions by repository while all four had work.
    let mut finished: Vec<(i64, &'static str)> = Vec::new();
    let mut failed = 0;
    for (id, name) in ids.iter().zip(&repository_of_task) {
        let task = store.get_task(*id).await?;
        if task.state != TaskState::Succeeded {
            failed += 1;
        }
        if let Some(at) = task.finished_at {
            finished.push((at, name));
        }
    }
    finished.sort();
    let window_end = REPOSITORIES
        .iter()
        .filter_map(|(name, _)| {
            finished
                .iter()
                .rev()
                .find(|(_, n)| n == name)
                .map(|(at, _)| *at)
        })
        .min()
        .unwrap_or(i64::MAX);
    let in_window: Vec<&(i64, &str)> = finished
        .iter()
        .filter(|(at, _)| *at <= window_end)
        .collect();
    let shares = REPOSITORIES
        .iter()
        .map(|(name, _)| {
            let n = in_window.iter().filter(|(_, r)| r == name).count();
            (*name, n as f64 / in_window.len().max(1) as f64)
        })
        .collect();
    // Enqueue to first request, by repository.
    let received = model.received();
    let mut by_repo: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for request in &received {
        if request.assistant_turns() != 0 {
            continue;
        }
        if let Some(name) = repository_of(request) {
            by_repo
                .entry(name)
                .or_default()
                .push((request.arrived_at - enqueued).as_secs_f64() * 1000.0);
        }
    }
    let first_request_ms = by_repo
        .into_iter()
        .map(|(name, mut ms)| {
            ms.sort_by(f64::total_cmp);
            (name, (quantile(&ms, 0.5), quantile(&ms, 0.99)))
        })
        .collect();
    let busy = received.len() as f64 * config.latency_ms as f64 / 1000.0;
    let figures = Figures {
        most_in_flight: model.most_in_flight(),
        refused: model.refusals().len(),
        failed,
        wall,
        busy_share: busy / (config.slots as f64 * wall.as_secs_f64()),
        shares,
        first_request_ms,
        peak_rss_mib: peak,
        turn_overhead_ms: [
            quantile(&idle, 0.5),
            quantile(&idle, 0.99),
            quantile(&loaded, 0.5),
            quantile(&loaded, 0.99),
        ],
    };
    store.close().await;
    Ok(figures)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// This process's peak resident memory (VmHWM), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
