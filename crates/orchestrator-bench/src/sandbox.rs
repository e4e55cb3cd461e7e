//! The sandbox's cost: the time to start and finish `true` under each mode, against the same
//! command started without a sandbox, in one run on one machine.
//!
//! A confined jail starts its commands in a warm jail (one bubblewrap per jail, whose supervisor
//! starts each command inside it), so a task pays bubblewrap's namespaces and mounts once, with
//! its first command, and each command after that pays a message to the supervisor and a fork
//! and exec inside the jail. Each mode's line therefore has three figures beside the unconfined
//! one: the first start (a new jail's first command, the jail coming up), the per-command start
//! in the warm jail, with its ratio to unconfined against the target of 2, and a cold start (a
//! bubblewrap of its own per command, what every command paid before, and what a jail without
//! the helper program still pays).
//!
//! The network case is a confined command with the network granted: its jail's proxy is up (it
//! starts with the jail, once per task, outside the timing), and the warm jail's supervisor
//! offers it on the jail's loopback (a cold command starts behind the network bridge, which
//! listens and then becomes the command). The helper is the `orchestrator` binary beside this one
//! (`cargo build --release -p orchestrator` first); without it the network case is left out and
//! the others are cold only, saying so.

use anyhow::Context;
use orchestrator_sandbox::{
    Availability, Confinement, Jail, Sandbox, SandboxMode, SandboxSettings, Spawn,
};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

pub const DEFAULT_RUNS: usize = 200;
/// New jails started for the first-start figure (each is a bubblewrap coming up).
const FIRST_STARTS: usize = 20;
/// The target: a warm command at most this many times an unconfined one.
const TARGET_RATIO: f64 = 2.0;

/// Microseconds to start `true` in `jail` and wait for it.
async fn once(jail: &Jail, cwd: &Path) -> anyhow::Result<u64> {
    let started = Instant::now();
    let mut process = jail
        .spawn(Spawn::new("true", std::iter::empty::<&str>(), cwd))
        .await?;
    let status = process.wait().await?;
    anyhow::ensure!(status.success(), "`true` failed: {status}");
    Ok(started.elapsed().as_micros() as u64)
}

/// Microseconds to start `true` as a cold command (a bubblewrap of its own) and wait for it.
async fn once_cold(jail: &Jail, cwd: &Path) -> anyhow::Result<u64> {
    let started = Instant::now();
    let status = jail
        .command("true", std::iter::empty::<&str>(), cwd)?
        .status()
        .await?;
    anyhow::ensure!(status.success(), "`true` failed: {status}");
    Ok(started.elapsed().as_micros() as u64)
}

/// Median and 90th percentile.
fn spread(mut times: Vec<u64>) -> (u64, u64) {
    times.sort_unstable();
    (times[times.len() / 2], times[times.len() * 9 / 10])
}

fn ratio(a: u64, b: u64) -> f64 {
    (a as f64 / b.max(1) as f64 * 100.0).round() / 100.0
}

/// One line per mode: the first start, the warm and the cold per-command start (median and 90th
/// percentile in microseconds) beside the unconfined start, with their ratios to it.
pub async fn run(runs: usize, print: impl Fn(&str) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("a home to hide")?;
    let workspace = tempfile::tempdir().context("a workspace")?;
    let sandbox = Sandbox::new(SandboxSettings::hiding(home.path()));
    if let Availability::Missing { reason } = sandbox.availability() {
        anyhow::bail!("no sandbox on this machine: {reason}");
    }
    let helper = sandbox.net_bridge().map(|b| {
        b.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    });
    let jail = |mode, network| {
        sandbox.agent_jail(Confinement {
            mode,
            network,
            network_hosts: Vec::new(),
            connections: None,
            workspace: workspace.path().to_owned(),
            env: Vec::new(),
            secrets: Vec::new(),
            label: "bench".into(),
        })
    };
    let runs = runs.max(1);
    let cwd = workspace.path();

    let none = jail(SandboxMode::Full, false)?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        times.push(once(&none, cwd).await?);
    }
    let (base, base_p90) = spread(times);
    print(
        &json!({
            "bench": "sandbox_start",
            "mode": "none",
            "runs": runs,
            "median_us": base,
            "p90_us": base_p90,
        })
        .to_string(),
    )?;

    let cases = [
        ("read_only", SandboxMode::ReadOnly, false),
        ("workspace_write", SandboxMode::WorkspaceWrite, false),
        (
            "workspace_write+network (proxy + bridge)",
            SandboxMode::WorkspaceWrite,
            true,
        ),
    ];
    for (name, mode, network) in cases {
        if network && helper.is_none() {
            print(
                &json!({
                    "bench": "sandbox_start",
                    "mode": name,
                    "skipped": "no helper program: build the orchestrator binary beside this one",
                })
                .to_string(),
            )?;
            continue;
        }
        // The first command of a new jail each time: the jail comes up with it.
        let mut first = Vec::with_capacity(FIRST_STARTS);
        for _ in 0..FIRST_STARTS {
            let fresh = jail(mode, network)?;
            first.push(once(&fresh, cwd).await?);
        }
        let (first_median, _) = spread(first);
        // Then one jail, already up, for every command.
        let warm_jail = jail(mode, network)?;
        once(&warm_jail, cwd).await?;
        let warm = warm_jail.warm_pid().await.is_some();
        let mut warm_times = Vec::with_capacity(runs);
        for _ in 0..runs {
            warm_times.push(once(&warm_jail, cwd).await?);
        }
        let (warm_median, warm_p90) = spread(warm_times);
        let mut cold_times = Vec::with_capacity(runs);
        for _ in 0..runs {
            cold_times.push(once_cold(&warm_jail, cwd).await?);
        }
        let (cold_median, cold_p90) = spread(cold_times);
        let warm_ratio = ratio(warm_median, base);
        print(
            &json!({
                "bench": "sandbox_start",
                "mode": name,
                "runs": runs,
                "warm": warm,
                "first_start_us": first_median,
                "warm_median_us": warm_median,
                "warm_p90_us": warm_p90,
                "cold_median_us": cold_median,
                "cold_p90_us": cold_p90,
                "none_median_us": base,
                "warm_ratio_to_none": warm_ratio,
                "cold_ratio_to_none": ratio(cold_median, base),
                "first_ratio_to_none": ratio(first_median, base),
                "target_ratio": TARGET_RATIO,
                "warm_of_target": (warm_ratio / TARGET_RATIO * 100.0).round() / 100.0,
                "helper": helper.as_deref(),
            })
            .to_string(),
        )?;
    }
    Ok(())
}
