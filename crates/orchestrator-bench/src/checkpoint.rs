//! What checkpoints cost an agent's turns on a real repository (by default the checkout this runs
//! in). A task's workspace is cloned at the repository's HEAD, its base; then turns edit it the way
//! an agent does (a line changed in a tracked file, a new file, a deleted file, now and then a turn
//! that changes nothing), and after each one the agent loop's own [`Saver`] captures the workspace
//! and saves the checkpoint in a real SQLite store, fenced by the task's lease. A checkpoint is the
//! whole difference from the base, so it grows with the turns. Last, the latest checkpoint is
//! restored onto a fresh clone, as a rescuing machine does.
//!
//! Prints one JSON line: each turn's bytes, files and save time (capture and write), the median
//! and p90 of the save times, and the restore's time. No assertions: a figure to read.

use anyhow::{Context, Result};
use orchestrator_store::{Store, StoreOptions};
use orchestrator_types::{EventKind, NewTask};
use orchestrator_worker::workspace::checkpoint::{Saver, TurnCheckpoint, restore_latest};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Turns unless told otherwise.
pub const DEFAULT_TURNS: usize = 20;
/// The cap the daemon uses by default.
const CAP: u64 = 32 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct CheckpointBenchConfig {
    pub repository: PathBuf,
    pub turns: usize,
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .context("running git")?;
    anyhow::ensure!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A clone of `repository` at `base` in `dir`.
fn clone_at(repository: &Path, base: &str, dir: &Path) -> Result<()> {
    let parent = dir.parent().context("a clone needs a parent directory")?;
    git(
        parent,
        &[
            "clone",
            "-q",
            "--no-checkout",
            &repository.display().to_string(),
            &dir.display().to_string(),
        ],
    )?;
    git(dir, &["checkout", "-q", "--detach", base])?;
    Ok(())
}

/// What turn `turn` does to the workspace, given its tracked text files (largest first); `false`
/// when it changes nothing.
fn edit(workspace: &Path, files: &[PathBuf], turn: usize) -> Result<bool> {
    if turn % 7 == 6 {
        return Ok(false);
    }
    let file = &files[turn % files.len()];
    let path = workspace.join(file);
    if turn % 5 == 4 && path.exists() {
        std::fs::remove_file(&path)?;
    } else if path.exists() {
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str(&format!("\n// changed in turn {turn}\n"));
        std::fs::write(&path, text)?;
    }
    if turn.is_multiple_of(3) {
        let dir = workspace.join("notes");
        std::fs::create_dir_all(&dir)?;
        let body: String = (0..100)
            .map(|line| format!("turn {turn}, line {line}: what the agent found out\n"))
            .collect();
        std::fs::write(dir.join(format!("turn-{turn}.md")), body)?;
    }
    Ok(true)
}

fn figures(mut values: Vec<f64>) -> serde_json::Value {
    values.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let i = ((values.len() as f64 - 1.0) * p).round() as usize;
        values.get(i).map(|v| (v * 100.0).round() / 100.0)
    };
    json!({ "median": at(0.5), "p90": at(0.9) })
}

pub async fn run(
    config: &CheckpointBenchConfig,
    mut print: impl FnMut(&str) -> Result<()>,
) -> Result<()> {
    let repository = std::fs::canonicalize(&config.repository)
        .with_context(|| format!("{} cannot be read", config.repository.display()))?;
    let base = git(&repository, &["rev-parse", "HEAD"])?;
    let place = tempfile::tempdir().context("creating the benchmark's directory")?;
    let workspace = place.path().join("workspace");
    clone_at(&repository, &base, &workspace)?;
    // Text files the turns change: the largest tracked ones, as an agent's edits land in the big
    // source files more often than in the small ones.
    let mut files: Vec<(u64, PathBuf)> = git(&workspace, &["ls-files"])?
        .lines()
        .map(PathBuf::from)
        .filter(|f| {
            f.extension()
                .is_some_and(|e| e == "rs" || e == "md" || e == "toml")
        })
        .filter_map(|f| {
            let meta = std::fs::symlink_metadata(workspace.join(&f)).ok()?;
            meta.is_file().then_some((meta.len(), f))
        })
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    let files: Vec<PathBuf> = files.into_iter().take(40).map(|(_, f)| f).collect();
    anyhow::ensure!(
        !files.is_empty(),
        "the repository has no text files to edit"
    );

    let store =
        Store::open_sqlite(&place.path().join("bench.db"), &StoreOptions::default()).await?;
    let mut task = NewTask::agent("checkpoints", "edit");
    task.workspace = Some(workspace.display().to_string());
    let id = store.create_task(&task).await?;
    store
        .record_event(
            id,
            EventKind::WorkspacePrepared,
            json!({"workspace": workspace.display().to_string(), "base": base, "repository": repository}),
        )
        .await?;
    let (_, lease) = store
        .claim_task("bench", id, 600_000)
        .await?
        .context("the task could not be claimed")?;
    let mut saver = Saver::start(&store, id, &workspace, CAP, "bench")
        .await?
        .context("the task has no base")?;

    let mut turns = Vec::new();
    let mut saves = Vec::new();
    let mut last_bytes = 0;
    for turn in 0..config.turns {
        let changed = edit(&workspace, &files, turn)?;
        let started = Instant::now();
        let saved = saver.after_turn(&store, &lease, 1, turn as i64).await?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let (bytes, files) = match &saved {
            TurnCheckpoint::Saved { bytes, files } => (Some(*bytes), Some(*files)),
            TurnCheckpoint::Unchanged => (None, None),
            TurnCheckpoint::NotSaved(why) => anyhow::bail!("turn {turn} was not saved: {why}"),
        };
        if let Some(bytes) = bytes {
            last_bytes = bytes;
            saves.push(ms);
        }
        eprintln!(
            "[checkpoint] turn {turn}: {} in {ms:.1} ms",
            match (changed, bytes, files) {
                (_, Some(bytes), Some(files)) => format!("{bytes} bytes, {files} files"),
                _ => "unchanged, nothing saved".to_owned(),
            }
        );
        turns.push(json!({
            "turn": turn,
            "changed": changed,
            "bytes": bytes,
            "files": files,
            "ms": (ms * 100.0).round() / 100.0,
        }));
    }

    let rescue = place.path().join("rescue");
    clone_at(&repository, &base, &rescue)?;
    let started = Instant::now();
    let restored = restore_latest(&store, &lease, &rescue, &base)
        .await?
        .context("no checkpoint to restore")?;
    let restore_ms = started.elapsed().as_secs_f64() * 1000.0;
    let tracked = files.len();
    store.close().await;
    print(
        &json!({
            "bench": "checkpoint",
            "repository": repository,
            "tracked_files_edited_from": tracked,
            "turns": turns,
            "save_ms": figures(saves),
            "last_bytes": last_bytes,
            "restore_ms": (restore_ms * 100.0).round() / 100.0,
            "restored_files": restored.files,
        })
        .to_string(),
    )
}
