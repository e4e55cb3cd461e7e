//! A person's gate, `cargo test` on a small crate, confined (the default since person gates run
//! in the sandbox) against unconfined, side by side in one run: what the sandbox costs a real gate
//! rather than a trivial `true`.
//!
//! The crate is built once before timing (its first build is printed on its own), so the figures
//! are what a gate costs when the tree is already built: cargo's checks, the test binary, and the
//! sandbox's start-up.

use anyhow::Context;
use orchestrator_sandbox::{Availability, Sandbox, SandboxMode, SandboxSettings, Spawn};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

pub const DEFAULT_RUNS: usize = 5;

fn tiny_crate(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )?;
    std::fs::write(
        dir.join("src/lib.rs"),
        "#[test]\nfn adds() { assert_eq!(1 + 1, 2); }\n",
    )?;
    Ok(())
}

/// Median milliseconds of `runs` gate runs of `cargo test --offline -q` under `sandbox`'s
/// person-gate jail, after one untimed (first-build) run whose time is returned too.
async fn time_gate(sandbox: &Sandbox, workspace: &Path, runs: usize) -> anyhow::Result<(u64, u64)> {
    let jail = sandbox.person_gate_jail(workspace, &[])?;
    let once = || async {
        let started = Instant::now();
        // As the gate runner starts a gate: in the jail's warm jail when it is confined (the
        // first run brings the jail up).
        let status = jail
            .spawn(Spawn::shell("cargo test --offline -q", workspace, false))
            .await?
            .wait()
            .await?;
        anyhow::ensure!(status.success(), "cargo test failed: {status}");
        anyhow::Ok(started.elapsed().as_millis() as u64)
    };
    let first = once().await?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        times.push(once().await?);
    }
    times.sort_unstable();
    Ok((first, times[times.len() / 2]))
}

/// One line: the gate's median with no sandbox and in `workspace_write`, and their ratio.
pub async fn run(runs: usize, print: impl Fn(&str) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("a home to hide")?;
    let workspace = tempfile::tempdir().context("a workspace")?;
    tiny_crate(workspace.path())?;
    let settings = |mode| {
        let mut settings = SandboxSettings::hiding(home.path());
        settings.person_gates = mode;
        Sandbox::new(settings)
    };
    let confined = settings(SandboxMode::WorkspaceWrite);
    if let Availability::Missing { reason } = confined.availability() {
        anyhow::bail!("no sandbox on this machine: {reason}");
    }
    let (first_none, none) =
        time_gate(&settings(SandboxMode::Full), workspace.path(), runs).await?;
    let (first_confined, sandboxed) = time_gate(&confined, workspace.path(), runs).await?;
    print(
        &json!({
            "bench": "sandbox_gate_cargo_test",
            "runs": runs.max(1),
            "first_build_ms": first_none,
            "first_confined_ms": first_confined,
            "none_median_ms": none,
            "workspace_write_median_ms": sandboxed,
            "ratio_to_none": (sandboxed as f64 / none.max(1) as f64 * 100.0).round() / 100.0,
        })
        .to_string(),
    )
}
