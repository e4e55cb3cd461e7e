//! What best of N costs in wall time: one attempt at a task against `best_of = 3` of the same
//! task, through the real worker pool with free capacity (four slots), against a scripted model
//! with a latency per request. The siblings get different patches: one fails the gate, two pass
//! with different sizes, and `smallest_passing` keeps the smaller. Each round starts from a new
//! store, the mirror made by a first task.
//!
//! Prints one JSON line: `single_ms` and `best_of_ms` (median, p90, runs) from the creation to
//! the task's success, their ratio (the target is 1.3 or less), and the model calls of each. No
//! assertions.

use crate::workspace::{figures, median};
use anyhow::{Context, Result};
use orchestrator_store::{Store, StoreOptions};
use orchestrator_test_support::model_server::{Quirks, Reply, Request, ScriptedModel, call};
use orchestrator_types::{
    BestOf, BudgetShare, Choose, ModelSpec, NewTask, RepositoryRef, TaskState,
};
use orchestrator_worker::workspace::WorkspaceSettings;
use orchestrator_worker::{Metrics, PoolConfig, WorkerPool, new_worker_id};
use serde_json::json;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub const DEFAULT_RUNS: usize = 3;
pub const DEFAULT_LATENCY_MS: u64 = 300;
const TIMEOUT: Duration = Duration::from_secs(300);
const GATE: &str = "grep -qx ok src/lib.rs";

#[derive(Debug, Clone)]
pub struct BestOfBenchConfig {
    pub runs: usize,
    pub latency_ms: u64,
}

/// The patch of a conversation's first answer.
#[derive(Debug, Clone, Copy)]
enum Try {
    Fails,
    Small,
    Big,
}

fn first_answer(t: Try) -> Reply {
    let write =
        |path: &str, content: &str| call("write_file", json!({"path": path, "content": content}));
    Reply::ToolCalls(match t {
        Try::Fails => vec![write("src/lib.rs", "nope\n")],
        Try::Small => vec![write("src/lib.rs", "ok\n")],
        Try::Big => vec![
            write("src/lib.rs", "ok\n"),
            write("src/extra.rs", "1\n2\n3\n4\n5\n"),
        ],
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let status = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.com",
        ])
        .args(args)
        .current_dir(dir)
        .status()
        .context("running git")?;
    anyhow::ensure!(status.success(), "git {args:?} failed");
    Ok(())
}

/// Runs the pool until every task of `store` ended; the wall time from `from` to then.
async fn run_until_done(
    store: &Store,
    spec: &ModelSpec,
    settings: &Arc<WorkspaceSettings>,
    from: Instant,
) -> Result<f64> {
    let mut config = PoolConfig::new(new_worker_id());
    config.slots = 4;
    config.agent.default_model = Some(spec.clone());
    config.agent.workspaces = Some(settings.clone());
    let pool = WorkerPool::new(store.clone(), config, Arc::new(Metrics::default()))
        .context("configuring the pool")?;
    let shutdown = CancellationToken::new();
    let join = tokio::spawn(pool.run(shutdown.clone()));
    let deadline = Instant::now() + TIMEOUT;
    let outcome = loop {
        let all = store.list_tasks(&Default::default()).await?;
        let roots: Vec<_> = all.iter().filter(|t| t.parent_id.is_none()).collect();
        if let Some(bad) = roots
            .iter()
            .find(|t| t.state.is_terminal() && t.state != TaskState::Succeeded)
        {
            break Err(anyhow::anyhow!(
                "task {} ended {}: {}",
                bad.id,
                bad.state,
                bad.last_error.clone().unwrap_or_default()
            ));
        }
        if roots.iter().all(|t| t.state == TaskState::Succeeded) {
            break Ok(from.elapsed().as_secs_f64() * 1000.0);
        }
        if Instant::now() >= deadline {
            break Err(anyhow::anyhow!("the tasks did not end within {TIMEOUT:?}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    shutdown.cancel();
    join.await
        .context("the pool panicked")?
        .context("the pool failed")?;
    outcome
}

pub async fn run(config: &BestOfBenchConfig, print: impl Fn(&str) -> Result<()>) -> Result<()> {
    let place = tempfile::tempdir().context("creating the benchmark's directory")?;
    let source = place.path().join("widgets");
    std::fs::create_dir_all(source.join("src"))?;
    std::fs::write(source.join("src/lib.rs"), "41\n")?;
    git(&source, &["init", "-q", "-b", "main"])?;
    git(&source, &["add", "."])?;
    git(&source, &["commit", "-qm", "widgets"])?;

    let tries: Arc<Mutex<VecDeque<Try>>> = Arc::new(Mutex::new(VecDeque::new()));
    let next = tries.clone();
    let model = ScriptedModel::start_with(
        Quirks {
            latency_ms: config.latency_ms,
            ..Quirks::default()
        },
        move |r: &Request| match r.assistant_turns() {
            0 => first_answer(lock(&next).pop_front().unwrap_or(Try::Small)),
            _ => Reply::Text("Done.".into()),
        },
    )
    .await;
    let spec = ModelSpec {
        base_url: model.base_url(),
        model: "scripted".into(),
        api_key_env: None,
        settings: Default::default(),
    };
    let task = |title: &str, best_of: Option<BestOf>| {
        let mut task = NewTask::agent(title, "Make src/lib.rs say ok.").with_gate(GATE);
        task.repository = Some(RepositoryRef::new(source.display().to_string()));
        task.best_of = best_of.map(Box::new);
        task
    };
    let (mut single, mut best, mut calls) = (Vec::new(), Vec::new(), (0, 0));
    for round in 0..config.runs.max(1) {
        let settings = Arc::new(WorkspaceSettings {
            dir: place.path().join(format!("workspaces-{round}")),
            mirrors: place.path().join(format!("mirrors-{round}")),
            repositories: Default::default(),
            budget: None,
            environment_cache_bytes: None,
            task_ended: Default::default(),
        });
        // A first task makes the mirror, so that neither measured run pays for it.
        let store = Store::open_sqlite(
            &place.path().join(format!("prime-{round}.db")),
            &StoreOptions::default(),
        )
        .await?;
        lock(&tries).extend([Try::Small]);
        store.create_task(&task("prime", None)).await?;
        run_until_done(&store, &spec, &settings, Instant::now()).await?;
        store.close().await;

        for (i, into) in [&mut single, &mut best].into_iter().enumerate() {
            let store = Store::open_sqlite(
                &place.path().join(format!("bench-{round}-{i}.db")),
                &StoreOptions::default(),
            )
            .await?;
            let before = model.request_count();
            let best_of = (i == 1).then_some(BestOf {
                n: 3,
                choose: Choose::SmallestPassing,
                budget: BudgetShare::PerSibling,
                judge: None,
                pull_request: None,
            });
            {
                let mut queue = lock(&tries);
                queue.clear();
                match i {
                    0 => queue.extend([Try::Small]),
                    _ => queue.extend([Try::Big, Try::Fails, Try::Small]),
                }
            }
            let from = Instant::now();
            store.create_task(&task("measured", best_of)).await?;
            into.push(run_until_done(&store, &spec, &settings, from).await?);
            let made = model.request_count() - before;
            if i == 0 {
                calls.0 = made;
            } else {
                calls.1 = made;
            }
            store.close().await;
        }
        eprintln!(
            "[best-of] round {}: one attempt {:.0} ms, best of 3 {:.0} ms",
            round + 1,
            single[round],
            best[round]
        );
    }
    let ratio = median(&best) / median(&single).max(0.001);
    print(
        &json!({
            "bench": "best_of",
            "latency_ms": config.latency_ms,
            "single_ms": figures(single),
            "best_of_ms": figures(best),
            "best_of_over_single": (ratio * 100.0).round() / 100.0,
            "model_calls": {"single": calls.0, "best_of": calls.1},
        })
        .to_string(),
    )
}
