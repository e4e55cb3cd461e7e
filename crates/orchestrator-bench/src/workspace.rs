//! What a task on a repository costs before its agent starts: the time from the attempt's start
//! (the claim) to the first model request, through the real worker pool, with the mirror cold (a
//! fresh mirrors directory: `git clone --mirror`, then the workspace's clone) and warm (the same
//! repository again: a fetch of an unchanged repository, then the clone). The repository is a
//! local one (by default the checkout this runs in), so the figures are git's and the disk's,
//! without a network. The same agent task on a plain directory is the yardstick.
//!
//! Prints one JSON line: `cold_ms`, `warm_ms` and `path_ms`, each the median, p90 and every run,
//! and the repository's size. No assertions: a figure to read, not a target.

use anyhow::{Context, Result};
use orchestrator_store::{Store, StoreOptions};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel};
use orchestrator_types::{ModelSpec, NewTask, RepositoryRef, TaskState};
use orchestrator_worker::workspace::WorkspaceSettings;
use orchestrator_worker::{Metrics, PoolConfig, StartHook, WorkerPool, new_worker_id};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Runs of each kind unless told otherwise.
pub const DEFAULT_RUNS: usize = 5;
const TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone)]
pub struct WorkspaceBenchConfig {
    /// A git repository (a checkout or a bare one) the tasks name.
    pub repository: PathBuf,
    pub runs: usize,
}

/// When each task's attempt started, and when its first model request arrived, by task title.
#[derive(Default)]
pub(crate) struct Marks {
    pub(crate) started: HashMap<String, Instant>,
    /// The last user text of each request, with its arrival.
    pub(crate) requests: Vec<(String, Instant)>,
}

impl Marks {
    /// Milliseconds from task `title`'s start to the first model request that names it.
    pub(crate) fn first_request_ms(&self, title: &str) -> Result<f64> {
        let marker = format!("<{title}>");
        let first = self
            .requests
            .iter()
            .find(|(text, _)| text.contains(&marker))
            .map(|(_, at)| at);
        let (Some(start), Some(first)) = (self.started.get(title), first) else {
            anyhow::bail!("task {title} has no start or no model request");
        };
        Ok(first.duration_since(*start).as_secs_f64() * 1000.0)
    }
}

pub(crate) fn lock(marks: &Mutex<Marks>) -> std::sync::MutexGuard<'_, Marks> {
    marks.lock().unwrap_or_else(|e| e.into_inner())
}

pub async fn run(config: &WorkspaceBenchConfig, print: impl Fn(&str) -> Result<()>) -> Result<()> {
    let repository = std::fs::canonicalize(&config.repository)
        .with_context(|| format!("{} cannot be read", config.repository.display()))?;
    let marks = Arc::new(Mutex::new(Marks::default()));
    let seen = marks.clone();
    let model = ScriptedModel::start(move |r: &Request| {
        if let Some(text) = r.last_user_text() {
            lock(&seen).requests.push((text.to_owned(), Instant::now()));
        }
        Reply::Text("Done.".into())
    })
    .await;
    let spec = ModelSpec {
        base_url: model.base_url(),
        model: "scripted".into(),
        api_key_env: None,
        settings: Default::default(),
    };
    let place = tempfile::tempdir().context("creating the benchmark's directory")?;
    let (mut cold, mut warm, mut path) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..config.runs.max(1) {
        // A new mirrors directory each round: the first task finds none (cold), the second the
        // one the first made (warm).
        let settings = Arc::new(WorkspaceSettings {
            dir: place.path().join(format!("workspaces-{round}")),
            mirrors: place.path().join(format!("mirrors-{round}")),
            repositories: Default::default(),
            budget: None,
            environment_cache_bytes: None,
            task_ended: Default::default(),
        });
        let plain = place.path().join(format!("plain-{round}"));
        std::fs::create_dir_all(&plain)?;
        let titles = [
            format!("cold-{round}"),
            format!("warm-{round}"),
            format!("path-{round}"),
        ];
        let store = Store::open_sqlite(
            &place.path().join(format!("bench-{round}.db")),
            &StoreOptions::default(),
        )
        .await?;
        for (i, title) in titles.iter().enumerate() {
            let mut task = NewTask::agent(title.clone(), format!("<{title}> Say done."));
            if i < 2 {
                task.repository = Some(RepositoryRef::new(repository.display().to_string()));
            } else {
                task.workspace = Some(plain.display().to_string());
            }
            store.create_task(&task).await?;
        }
        run_pool(&store, &spec, &settings, &marks, titles.len(), None).await?;
        store.close().await;
        let marks = lock(&marks);
        for (title, into) in titles.iter().zip([&mut cold, &mut warm, &mut path]) {
            into.push(marks.first_request_ms(title)?);
        }
        eprintln!(
            "[workspace] round {}: cold {:.0} ms, warm {:.0} ms, plain directory {:.0} ms",
            round + 1,
            cold[round],
            warm[round],
            path[round]
        );
    }
    let size = orchestrator_worker::workspace::budget::usage(&[place.path().join("mirrors-0")]);
    print(
        &json!({
            "bench": "workspace",
            "repository": repository,
            "mirror_bytes": size,
            "cold_ms": figures(cold),
            "warm_ms": figures(warm),
            "path_ms": figures(path),
        })
        .to_string(),
    )
}

/// One slot, so the tasks run in the order they were made.
pub(crate) async fn run_pool(
    store: &Store,
    spec: &ModelSpec,
    settings: &Arc<WorkspaceSettings>,
    marks: &Arc<Mutex<Marks>>,
    tasks: usize,
    sandbox: Option<orchestrator_sandbox::Sandbox>,
) -> Result<()> {
    let mut config = PoolConfig::new(new_worker_id());
    config.slots = 1;
    if let Some(sandbox) = sandbox {
        config.sandbox = sandbox;
    }
    config.agent.default_model = Some(spec.clone());
    config.agent.workspaces = Some(settings.clone());
    let started = marks.clone();
    config.on_start = Some(StartHook(Arc::new(move |task| {
        lock(&started)
            .started
            .entry(task.title.clone())
            .or_insert_with(Instant::now);
    })));
    let metrics = Arc::new(Metrics::default());
    let pool = WorkerPool::new(store.clone(), config, metrics).context("configuring the pool")?;
    let shutdown = CancellationToken::new();
    let join = tokio::spawn(pool.run(shutdown.clone()));
    let deadline = Instant::now() + TIMEOUT;
    let outcome = loop {
        let all = store.list_tasks(&Default::default()).await?;
        if let Some(bad) = all
            .iter()
            .find(|t| t.state.is_terminal() && t.state != TaskState::Succeeded)
        {
            break Err(anyhow::anyhow!(
                "task {} ({}) ended {}: {}",
                bad.id,
                bad.title,
                bad.state,
                bad.last_error.clone().unwrap_or_default()
            ));
        }
        if all.len() == tasks && all.iter().all(|t| t.state == TaskState::Succeeded) {
            break Ok(());
        }
        if Instant::now() >= deadline {
            break Err(anyhow::anyhow!("the tasks did not end within {TIMEOUT:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    shutdown.cancel();
    join.await
        .context("the pool panicked")?
        .context("the pool failed")?;
    outcome
}

/// The middle value of `values` (the upper one of an even count).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn figures(mut values: Vec<f64>) -> Value {
    values.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let i = ((values.len() as f64 - 1.0) * p).round() as usize;
        values.get(i).map(|v| (v * 10.0).round() / 10.0)
    };
    json!({ "median": at(0.5), "p90": at(0.9), "runs": values })
}

/// The checkout this runs in, for the default repository.
pub fn current_repository() -> Result<PathBuf> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .output()
        .context("running git")?;
    anyhow::ensure!(
        out.status.success(),
        "not in a git checkout: give --repository PATH"
    );
    Ok(Path::new(String::from_utf8_lossy(&out.stdout).trim()).to_owned())
}
