//! The gate-memory benchmark's gate, 1 GiB of output through `orchestrator run`, measured with no
//! one watching and with a follower (`task logs --follow`, another process reading the live log
//! from the store every 250 ms) attached: what following a gate costs the gate's throughput and
//! the runner's memory.
//!
//! Runs alternate (without, with, without, ...) on fresh homes so that the disk's and the
//! machine's drift falls on both; the figures are medians: the gate's own duration as its evidence
//! records it, its throughput, and the peak resident set of the `run` process.

use anyhow::Context;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const DEFAULT_RUNS: usize = 3;
pub const DEFAULT_BYTES: u64 = 1 << 30;

pub struct GateOutputConfig {
    /// The `orchestrator` binary.
    pub bin: PathBuf,
    pub bytes: u64,
    /// Runs of each kind.
    pub runs: usize,
}

/// What one run measured.
struct Measured {
    gate_ms: i64,
    peak_rss_kib: u64,
    follower_bytes: u64,
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
}

fn command(bin: &Path, home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env("ORCHESTRATOR_HOME", home)
        .env_remove("ORCHESTRATOR_DATABASE_URL")
        .env("ORCHESTRATOR_LOG", "warn")
        .stdin(Stdio::null());
    cmd
}

/// A follower that keeps trying until the task exists, then follows its first gate to the end;
/// returns the bytes it printed.
fn follower(bin: PathBuf, home: PathBuf) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        for _ in 0..400 {
            let out = command(
                &bin,
                &home,
                &["task", "logs", "1", "--gate", "0", "--follow"],
            )
            .stderr(Stdio::null())
            .output();
            match out {
                Ok(out) if out.status.success() => return out.stdout.len() as u64,
                _ => std::thread::sleep(Duration::from_millis(25)),
            }
        }
        0
    })
}

fn one_run(config: &GateOutputConfig, follow: bool) -> anyhow::Result<Measured> {
    let home = tempfile::tempdir().context("a home")?;
    let workspace = tempfile::tempdir().context("a workspace")?;
    let gate = format!(
        "echo FIRST-LINE; yes 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789 | head -c {}; echo; echo LAST-LINE",
        config.bytes
    );
    let ws = workspace.path().display().to_string();
    let mut child: Child = command(
        &config.bin,
        home.path(),
        &["run", "--gate", &gate, "--workspace", &ws],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .context("start `orchestrator run`")?;
    let watcher = follow.then(|| follower(config.bin.clone(), home.path().to_owned()));
    let pid = child.id();
    let mut peak = 0;
    let status = loop {
        if let Some(kib) = peak_rss_kib(pid) {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    anyhow::ensure!(status.success(), "the gate's run failed: {status}");
    let follower_bytes = watcher.map_or(0, |w| w.join().unwrap_or(0));
    let read = command(&config.bin, home.path(), &["task", "read", "1", "--json"]).output()?;
    let task: serde_json::Value = serde_json::from_slice(&read.stdout).context("task read")?;
    let gate_ms = task["gates"][0]["duration_ms"]
        .as_i64()
        .context("the gate's duration")?;
    Ok(Measured {
        gate_ms,
        peak_rss_kib: peak,
        follower_bytes,
    })
}

fn median(mut values: Vec<i64>) -> i64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// Prints one line per kind (without and with a follower) and one comparing them.
pub fn run(
    config: &GateOutputConfig,
    print: impl Fn(&str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut alone = Vec::new();
    let mut watched = Vec::new();
    for run in 0..config.runs.max(1) {
        eprintln!("gate_output: run {} of {}", run + 1, config.runs.max(1));
        alone.push(one_run(config, false)?);
        watched.push(one_run(config, true)?);
    }
    let mib = config.bytes as f64 / (1024.0 * 1024.0);
    let line = |kind: &str, runs: &[Measured]| {
        let gate_ms = median(runs.iter().map(|m| m.gate_ms).collect());
        json!({
            "bench": "gate_output",
            "follower": kind,
            "runs": runs.len(),
            "bytes": config.bytes,
            "gate_ms_median": gate_ms,
            "gate_ms": runs.iter().map(|m| m.gate_ms).collect::<Vec<_>>(),
            "mib_per_s": (mib / (gate_ms.max(1) as f64 / 1000.0) * 10.0).round() / 10.0,
            "peak_rss_mib_median": median(runs.iter().map(|m| m.peak_rss_kib as i64).collect()) / 1024,
            "follower_bytes": runs.iter().map(|m| m.follower_bytes).collect::<Vec<_>>(),
        })
    };
    let none = line("none", &alone);
    let one = line("task logs --follow", &watched);
    print(&none.to_string())?;
    print(&one.to_string())?;
    let ratio = one["gate_ms_median"].as_f64().unwrap_or(0.0)
        / none["gate_ms_median"].as_f64().unwrap_or(1.0).max(1.0);
    print(
        &json!({
            "bench": "gate_output",
            "followed_to_alone": (ratio * 1000.0).round() / 1000.0,
        })
        .to_string(),
    )
}
