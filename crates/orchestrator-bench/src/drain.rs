//! How fast a backlog of webhook deliveries drains when GitHub is slow: the real `serve` binary
//! with a trigger rule whose deliveries each need one GitHub call (the sender's permission), a
//! GitHub stand-in behind a delay line that makes each call take `github_ms`, and `deliveries`
//! signed deliveries posted at once. The figure is deliveries processed per second, from the first
//! post to the last delivery settled in the store, against the target (100/s with a 100 ms
//! GitHub) and against the figure of one delivery at a time (1000 / `github_ms` per second, about
//! 9/s measured before deliveries were processed concurrently).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use orchestrator_store::Store;
use orchestrator_test_support::LatencyProxy;
use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
use serde_json::json;

use crate::soak::daemon::DaemonSpec;
use crate::soak::workload::{self, LABEL, REPO, SECRET, SENDER};

/// The target: deliveries per second drained with a 100 ms GitHub.
pub const TARGET_PER_S: f64 = 100.0;
pub const DEFAULT_DELIVERIES: usize = 400;
pub const DEFAULT_GITHUB_MS: u64 = 100;
/// How many clients post the backlog at once.
const POSTERS: usize = 8;
/// How long the backlog may take to drain before the run is called failed (a guard, not a measure).
const PATIENCE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub struct DrainConfig {
    /// The `orchestrator` binary.
    pub bin: PathBuf,
    pub deliveries: usize,
    /// How long one GitHub call takes (half of it each way through the delay line).
    pub github_ms: u64,
}

/// Runs the benchmark and returns its JSON line.
pub fn run(config: &DrainConfig, progress: &dyn Fn(&str)) -> Result<serde_json::Value> {
    if !config.bin.is_file() {
        bail!(
            "{} is not a file: build the binary first (`cargo build --release -p orchestrator`) \
             or give --bin",
            config.bin.display()
        );
    }
    if config.deliveries == 0 {
        bail!("--deliveries must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let github = FakeGitHub::start_blocking();
    github.set_permission(REPO, SENDER, "write");
    let upstream = github
        .url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .context("the GitHub stand-in's address")?;
    let half = Duration::from_millis(config.github_ms / 2);
    let proxy = runtime.block_on(LatencyProxy::start(upstream, half));

    let home = tempfile::tempdir()?;
    let workspace = home.path().join("workspace");
    std::fs::create_dir_all(&workspace)?;
    write_config(home.path(), &workspace)?;
    let spec = DaemonSpec {
        bin: config.bin.clone(),
        home: home.path().to_path_buf(),
        database_url: None,
        env: vec![
            ("ORCHESTRATOR_GITHUB_WEBHOOK_SECRET".into(), SECRET.into()),
            (
                "ORCHESTRATOR_GITHUB_API_URL".into(),
                format!("http://{}", proxy.addr()),
            ),
            ("GITHUB_TOKEN".into(), FAKE_TOKEN.into()),
        ],
        args: vec!["--workers".into(), "2".into()],
    };
    let daemon = spec.start(0)?;
    progress(&format!(
        "serve is up at {}; posting {} deliveries with a {} ms GitHub",
        daemon.addr, config.deliveries, config.github_ms
    ));

    let started = Instant::now();
    let addr = daemon.addr.clone();
    let posters: Vec<_> = (0..POSTERS)
        .map(|poster| {
            let addr = addr.clone();
            let count = config.deliveries;
            std::thread::spawn(move || -> Result<()> {
                for number in (poster..count).step_by(POSTERS) {
                    // One issue per delivery: nothing orders them behind each other.
                    let body = workload::delivery_body(number as u64 + 1);
                    if !workload::post_delivery(&addr, &format!("drain-{number}"), &body)? {
                        bail!("the daemon did not take delivery {number}");
                    }
                }
                Ok(())
            })
        })
        .collect();
    for poster in posters {
        poster
            .join()
            .map_err(|_| anyhow::anyhow!("a poster panicked"))??;
    }
    let posted = started.elapsed();
    progress(&format!(
        "posted in {posted:?}; waiting for the backlog to drain"
    ));

    let store = runtime.block_on(Store::open(&sqlite_url(home.path()), &Default::default()))?;
    let settled = loop {
        let deliveries = runtime.block_on(store.deliveries(config.deliveries as u64 + 10))?;
        let pending = deliveries
            .iter()
            .filter(|d| matches!(d.status.as_str(), "queued" | "processing"))
            .count();
        let failed = deliveries.iter().filter(|d| d.status == "failed").count();
        if deliveries.len() >= config.deliveries && pending == 0 {
            break (started.elapsed(), failed);
        }
        if started.elapsed() > PATIENCE {
            bail!(
                "{} of {} deliveries still pending after {PATIENCE:?}",
                pending + config.deliveries.saturating_sub(deliveries.len()),
                config.deliveries
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (elapsed, failed) = settled;
    let calls = github.requests_to("GET", "/permission").len();
    let _ = daemon.stop();
    drop(proxy);
    let per_s = config.deliveries as f64 / elapsed.as_secs_f64();
    let one_at_a_time = 1000.0 / config.github_ms.max(1) as f64;
    Ok(json!({
        "bench": "drain",
        "deliveries": config.deliveries,
        "github_ms": config.github_ms,
        "failed": failed,
        "github_calls": calls,
        "posted_ms": posted.as_millis() as u64,
        "drain_ms": elapsed.as_millis() as u64,
        "drained_per_s": (per_s * 10.0).round() / 10.0,
        "target_per_s": TARGET_PER_S,
        "ratio_to_target": (per_s / TARGET_PER_S * 100.0).round() / 100.0,
        "one_at_a_time_per_s": (one_at_a_time * 10.0).round() / 10.0,
        "ratio_to_one_at_a_time": (per_s / one_at_a_time * 10.0).round() / 10.0,
    }))
}

fn sqlite_url(home: &Path) -> String {
    home.join("orchestrator.db").display().to_string()
}

/// A trigger rule on labelled issues whose sender's permission is asked of GitHub (one call per
/// delivery); its tasks run one quick gate.
fn write_config(home: &Path, workspace: &Path) -> Result<()> {
    let config = format!(
        r#"[github]
bot_login = "drain-bot"

[[github.trigger]]
name = "drain"
event = "issues.labeled"
label = "{LABEL}"
repos = ["{REPO}"]
workspace = "{workspace}"
task = {{ title = "Drain {{repo}}#{{number}}", gates = ["true"] }}
"#,
        workspace = workspace.display()
    );
    let path = home.join("config.toml");
    std::fs::write(&path, config).with_context(|| format!("cannot write {}", path.display()))
}
