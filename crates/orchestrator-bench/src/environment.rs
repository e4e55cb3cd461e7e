//! What a repository's setup phase costs a task, and what its cache saves: the time from the
//! attempt's start (the claim) to the first model request, through the real worker pool, for a
//! repository task with no setup (the yardstick), one whose setup runs (cold: the cache is
//! empty) and one that reuses the cache (warm), all with the mirror warm (a first task on the
//! repository made it). The default setup downloads a blob from a local stand-in on 127.0.0.1
//! (only setup may reach it, through the jail's proxy) and writes a tree of small files, as a
//! package manager does; `--setup` runs another (`cargo fetch`, given a registry it can reach).
//!
//! A fresh workspace gets its environment while the agent's first request goes out, and the agent
//! acts on the answer only once it is there; so the bench also gives how long the environment
//! step itself took in the cold and warm tasks (`cold_step_ms`, `warm_step_ms`, from their
//! `environment` events): the part of it the model's first answer hides.
//!
//! Prints one JSON line: `none_ms`, `cold_ms` and `warm_ms` (median, p90, runs), the ratio of warm
//! to none (the target is 1.5 or less), the steps' own times, and the cache entry's size. No
//! assertions.

use crate::workspace::{Marks, figures, lock, median, run_pool};
use anyhow::{Context, Result};
use orchestrator_store::{Store, StoreOptions};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel};
use orchestrator_types::{EnvironmentSpec, ModelSpec, NewTask, RepositoryRef};
use orchestrator_worker::workspace::WorkspaceSettings;
use serde_json::json;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub const DEFAULT_RUNS: usize = 3;
/// The stand-in package's size.
pub const DEFAULT_BLOB_MB: usize = 32;

#[derive(Debug, Clone)]
pub struct EnvironmentBenchConfig {
    pub repository: PathBuf,
    pub runs: usize,
    /// Setup commands; `None`: download the stand-in's blob and write 2,000 small files.
    pub setup: Option<Vec<String>>,
    pub blob_mb: usize,
    /// The orchestrator binary, whose hidden `__net-bridge` the jails' network goes through.
    pub bin: PathBuf,
}

/// Serves `size` bytes to every request on 127.0.0.1; its port.
fn blob_server(size: usize) -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let blob = vec![b'x'; size];
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let blob = blob.clone();
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    blob.len()
                );
                let _ = stream.write_all(&blob);
            });
        }
    });
    Ok(port)
}

pub async fn run(
    config: &EnvironmentBenchConfig,
    print: impl Fn(&str) -> Result<()>,
) -> Result<()> {
    let repository = std::fs::canonicalize(&config.repository)
        .with_context(|| format!("{} cannot be read", config.repository.display()))?;
    let port = blob_server(config.blob_mb << 20)?;
    let setup = config.setup.clone().unwrap_or_else(|| {
        vec![format!(
            "mkdir -p .bench-deps && curl -fsS --noproxy '' http://127.0.0.1:{port}/blob \
             -o .bench-deps/blob && for i in $(seq 2000); do echo $i > .bench-deps/f$i; done"
        )]
    });
    let environment = EnvironmentSpec {
        setup: setup.clone(),
        network_hosts: vec![format!("127.0.0.1:{port}")],
        timeout_secs: orchestrator_types::DEFAULT_SETUP_TIMEOUT_SECS,
        ..EnvironmentSpec::default()
    };
    let sandbox = orchestrator_sandbox::Sandbox::new(orchestrator_sandbox::SandboxSettings {
        net_bridge: Some(vec![config.bin.clone().into(), "__net-bridge".into()]),
        ..Default::default()
    });
    anyhow::ensure!(
        sandbox.net_bridge().is_some() && config.bin.exists(),
        "{} is not there: build it (cargo build --release -p orchestrator) or give --bin",
        config.bin.display()
    );
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
    let (mut none, mut cold, mut warm) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cold_step, mut warm_step) = (Vec::new(), Vec::new());
    let mut entry_bytes = 0;
    for round in 0..config.runs.max(1) {
        let settings = Arc::new(WorkspaceSettings {
            dir: place.path().join(format!("workspaces-{round}")),
            mirrors: place.path().join(format!("mirrors-{round}")),
            repositories: Default::default(),
            budget: None,
            environment_cache_bytes: None,
            task_ended: Default::default(),
        });
        // prime: makes the mirror; then none, cold, warm on a warm mirror.
        let titles = ["prime", "none", "cold", "warm"].map(|t| format!("{t}-{round}"));
        let store = Store::open_sqlite(
            &place.path().join(format!("bench-{round}.db")),
            &StoreOptions::default(),
        )
        .await?;
        for (i, title) in titles.iter().enumerate() {
            let mut task = NewTask::agent(title.clone(), format!("<{title}> Say done."));
            let mut reference = RepositoryRef::new(repository.display().to_string());
            if i >= 2 {
                reference.environment = Some(environment.clone());
            }
            task.repository = Some(reference);
            store.create_task(&task).await?;
        }
        run_pool(
            &store,
            &spec,
            &settings,
            &marks,
            titles.len(),
            Some(sandbox.clone()),
        )
        .await?;
        for (title, into) in titles[2..].iter().zip([&mut cold_step, &mut warm_step]) {
            into.push(step_ms(&store, title).await?);
        }
        store.close().await;
        let marks = lock(&marks);
        for (title, into) in titles[1..].iter().zip([&mut none, &mut cold, &mut warm]) {
            into.push(marks.first_request_ms(title)?);
        }
        let root = orchestrator_worker::workspace::environment::cache_root(&settings.dir);
        entry_bytes = orchestrator_worker::workspace::environment::list(&root)
            .first()
            .map_or(0, |e| e.bytes);
        eprintln!(
            "[environment] round {}: no setup {:.0} ms, setup ran {:.0} ms (step {:.0} ms), cache \
             hit {:.0} ms (step {:.0} ms)",
            round + 1,
            none[round],
            cold[round],
            cold_step[round],
            warm[round],
            warm_step[round]
        );
    }
    let ratio = median(&warm) / median(&none).max(0.001);
    print(
        &json!({
            "bench": "environment",
            "repository": repository,
            "setup": setup,
            "none_ms": figures(none),
            "cold_ms": figures(cold),
            "warm_ms": figures(warm),
            "cold_step_ms": figures(cold_step),
            "warm_step_ms": figures(warm_step),
            "warm_over_none": (ratio * 100.0).round() / 100.0,
            "entry_bytes": entry_bytes,
        })
        .to_string(),
    )
}

/// How long task `title`'s environment step took, from its `environment` event.
async fn step_ms(store: &Store, title: &str) -> Result<f64> {
    let tasks = store.list_tasks(&Default::default()).await?;
    let task = tasks
        .iter()
        .find(|t| t.title == title)
        .with_context(|| format!("task {title} is not in the store"))?;
    let events = store
        .events_of_kind(task.id, orchestrator_types::EventKind::Environment)
        .await?;
    events
        .iter()
        .rev()
        .find_map(|e| e.data["duration_ms"].as_f64())
        .with_context(|| format!("task {title} has no environment event with its duration"))
}
