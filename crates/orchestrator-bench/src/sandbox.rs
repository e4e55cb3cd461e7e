//! The sandbox's cost: the time to start and finish `true` under each mode, against the same
//! command started without a sandbox, in one run on one machine.
//!
//! Every command an agent runs pays this once (bubblewrap sets up its namespaces and mounts, then
//! the command runs), so the figure to read is the difference in milliseconds next to the
//! length of the commands agents run, and the ratio says how much of a trivial command is the
//! sandbox.
//!
//! The network case is a confined command with the network granted: its jail's proxy is up (it
//! starts with the jail, once per task, outside the timing), and every command starts behind the
//! network bridge, which listens on the jail's loopback and then becomes the command. The bridge
//! is the `orchestrator` binary beside this one (`cargo build --release -p orchestrator` first);
//! without it the case is left out, saying so.

use anyhow::Context;
use orchestrator_sandbox::{Availability, Confinement, Sandbox, SandboxMode, SandboxSettings};
use serde_json::json;
use std::time::Instant;

pub const DEFAULT_RUNS: usize = 200;

/// One line per mode: median and 90th percentile in microseconds, and the median's ratio to the
/// unsandboxed start.
pub async fn run(runs: usize, print: impl Fn(&str) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("a home to hide")?;
    let workspace = tempfile::tempdir().context("a workspace")?;
    let sandbox = Sandbox::new(SandboxSettings::hiding(home.path()));
    if let Availability::Missing { reason } = sandbox.availability() {
        anyhow::bail!("no sandbox on this machine: {reason}");
    }
    let bridge = sandbox.net_bridge().map(|b| {
        b.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    });
    let cases = [
        ("none", SandboxMode::Full, false),
        ("read_only", SandboxMode::ReadOnly, false),
        ("workspace_write", SandboxMode::WorkspaceWrite, false),
        (
            "workspace_write+network (proxy + bridge)",
            SandboxMode::WorkspaceWrite,
            true,
        ),
    ];
    let mut baseline = None;
    for (name, mode, network) in cases {
        if network && bridge.is_none() {
            print(
                &json!({
                    "bench": "sandbox_start",
                    "mode": name,
                    "skipped": "no network bridge: build the orchestrator binary beside this one",
                })
                .to_string(),
            )?;
            continue;
        }
        let jail = sandbox.agent_jail(Confinement {
            mode,
            network,
            network_hosts: Vec::new(),
            connections: None,
            workspace: workspace.path().to_owned(),
            env: Vec::new(),
            secrets: Vec::new(),
            label: "bench".into(),
        })?;
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs.max(1) {
            let started = Instant::now();
            let status = jail
                .command("true", std::iter::empty::<&str>(), workspace.path())?
                .status()
                .await?;
            anyhow::ensure!(status.success(), "`true` failed under {name}: {status}");
            times.push(started.elapsed().as_micros() as u64);
        }
        times.sort_unstable();
        let median = times[times.len() / 2];
        let p90 = times[times.len() * 9 / 10];
        let base = *baseline.get_or_insert(median);
        print(
            &json!({
                "bench": "sandbox_start",
                "mode": name,
                "runs": times.len(),
                "median_us": median,
                "p90_us": p90,
                "ratio_to_none": (median as f64 / base.max(1) as f64 * 100.0).round() / 100.0,
                "bridge": if network { bridge.as_deref() } else { None },
            })
            .to_string(),
        )?;
    }
    Ok(())
}
