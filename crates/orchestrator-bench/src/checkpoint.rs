//! What checkpoints cost an agent's turns on a real repository (by default the checkout this runs
//! in, or one generated with `--files N`). A task's workspace is cloned at the repository's HEAD,
//! its base; then turns act on it the way an agent does, in a cycle of four kinds, and after each
//! one the agent loop's own [`Saver`] captures the workspace and saves the checkpoint in a real
//! SQLite store, fenced by the task's lease:
//!
//! - `reads`: only read-only calls; the loop tells the saver nothing, and nothing is read;
//! - `one_file`: one tracked file edited by a file tool, which names it: only it is looked at;
//! - `command`: a command that changed nothing (the saver must look: the whole workspace);
//! - `mixed`: a line changed, a file added or deleted now and then, by a command (the whole
//!   workspace again).
//!
//! A checkpoint is the whole difference from the base, so it grows with the turns. Last, the
//! latest checkpoint is restored onto a fresh clone, as a rescuing machine does.
//!
//! Prints one JSON line: each turn's kind, bytes, files and time (capture and write), the median
//! and p90 per kind, and the restore's time. No assertions: a figure to read.

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
    /// The repository to clone; ignored with `generate`.
    pub repository: PathBuf,
    pub turns: usize,
    /// Generate a repository of this many files instead (100 per directory).
    pub generate: Option<usize>,
}

/// What one turn of the bench does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnKind {
    Reads,
    OneFile,
    Command,
    Mixed,
}

impl TurnKind {
    const ALL: [TurnKind; 4] = [
        TurnKind::OneFile,
        TurnKind::Reads,
        TurnKind::Command,
        TurnKind::Mixed,
    ];

    fn name(self) -> &'static str {
        match self {
            TurnKind::Reads => "reads",
            TurnKind::OneFile => "one_file",
            TurnKind::Command => "command",
            TurnKind::Mixed => "mixed",
        }
    }
}

/// A repository of `files` small source files, 100 per directory, committed once, in `dir`.
fn generate(dir: &Path, files: usize) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    git(dir, &["init", "-q"])?;
    for n in 0..files {
        let sub = dir.join(format!("src/m{:04}", n / 100));
        if n % 100 == 0 {
            std::fs::create_dir_all(&sub)?;
        }
        std::fs::write(
            sub.join(format!("f{n}.rs")),
            format!("// file {n}\npub fn f{n}() -> u64 {{\n    {n}\n}}\n"),
        )?;
    }
    std::fs::write(dir.join(".gitignore"), "target/\n")?;
    git(dir, &["add", "-A"])?;
    git(
        dir,
        &[
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@localhost",
            "commit",
            "-q",
            "-m",
            "generated",
        ],
    )?;
    Ok(())
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
    let mut changed = path.exists();
    if turn % 5 == 4 && path.exists() {
        std::fs::remove_file(&path)?;
    } else if path.exists() {
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str(&format!("\n// changed in turn {turn}\n"));
        std::fs::write(&path, text)?;
    }
    if turn.is_multiple_of(3) {
        changed = true;
        let dir = workspace.join("notes");
        std::fs::create_dir_all(&dir)?;
        let body: String = (0..100)
            .map(|line| format!("turn {turn}, line {line}: what the agent found out\n"))
            .collect();
        std::fs::write(dir.join(format!("turn-{turn}.md")), body)?;
    }
    Ok(changed)
}

/// The tracked file turn `turn` of the `one_file` kind edits, relative to the workspace.
fn edited_path(files: &[PathBuf], turn: usize) -> String {
    files[turn % files.len()].display().to_string()
}

/// Appends a line to one tracked file, as an edit call does.
fn edit_one(workspace: &Path, files: &[PathBuf], turn: usize) -> Result<()> {
    let path = workspace.join(edited_path(files, turn));
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    text.push_str(&format!("\n// edited in turn {turn}\n"));
    std::fs::write(&path, text)?;
    Ok(())
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
    let place = tempfile::tempdir().context("creating the benchmark's directory")?;
    let repository = match config.generate {
        Some(files) => {
            let dir = place.path().join("generated");
            let started = Instant::now();
            generate(&dir, files)?;
            eprintln!(
                "[checkpoint] generated a repository of {files} files in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            dir
        }
        None => std::fs::canonicalize(&config.repository)
            .with_context(|| format!("{} cannot be read", config.repository.display()))?,
    };
    let base = git(&repository, &["rev-parse", "HEAD"])?;
    let workspace = place.path().join("workspace");
    clone_at(&repository, &base, &workspace)?;
    let tracked_files = git(&workspace, &["ls-files"])?.lines().count();
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
    let mut by_kind: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let mut last_bytes = 0;
    // The first capture of an attempt reads every file (nothing is known yet): timed apart.
    let started = Instant::now();
    saver.after_turn(&store, &lease, 1, 0).await?;
    let first_ms = started.elapsed().as_secs_f64() * 1000.0;
    for turn in 1..=config.turns {
        let kind = TurnKind::ALL[(turn - 1) % TurnKind::ALL.len()];
        let changed = match kind {
            TurnKind::Reads => false,
            TurnKind::OneFile => {
                edit_one(&workspace, &files, turn)?;
                true
            }
            TurnKind::Command => false,
            TurnKind::Mixed => edit(&workspace, &files, turn)?,
        };
        let started = Instant::now();
        // What the agent loop tells the saver: a file tool names what it wrote; a command (or
        // any other call that may change files) says only that it ran.
        match kind {
            TurnKind::Reads => {}
            TurnKind::OneFile => saver.wrote([edited_path(&files, turn)]),
            TurnKind::Command | TurnKind::Mixed => saver.touched(),
        }
        let saved = saver.after_turn(&store, &lease, 1, turn as i64).await?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let (bytes, files) = match &saved {
            TurnCheckpoint::Saved { bytes, files } => (Some(*bytes), Some(*files)),
            TurnCheckpoint::Unchanged => (None, None),
            TurnCheckpoint::NotSaved(why) => anyhow::bail!("turn {turn} was not saved: {why}"),
        };
        if let Some(bytes) = bytes {
            last_bytes = bytes;
        }
        by_kind.entry(kind.name()).or_default().push(ms);
        eprintln!(
            "[checkpoint] turn {turn} ({}): {} in {ms:.2} ms",
            kind.name(),
            match (changed, bytes, files) {
                (_, Some(bytes), Some(files)) => format!("{bytes} bytes, {files} files"),
                _ => "unchanged, nothing saved".to_owned(),
            }
        );
        turns.push(json!({
            "turn": turn,
            "kind": kind.name(),
            "changed": changed,
            "bytes": bytes,
            "files": files,
            "ms": (ms * 100.0).round() / 100.0,
        }));
    }
    let per_kind: serde_json::Map<String, serde_json::Value> = by_kind
        .into_iter()
        .map(|(kind, values)| (format!("{kind}_ms"), figures(values)))
        .collect();

    let rescue = place.path().join("rescue");
    clone_at(&repository, &base, &rescue)?;
    let started = Instant::now();
    let restored = restore_latest(&store, &lease, &rescue, &base)
        .await?
        .context("no checkpoint to restore")?;
    let restore_ms = started.elapsed().as_secs_f64() * 1000.0;
    store.close().await;
    print(
        &json!({
            "bench": "checkpoint",
            "repository": if config.generate.is_some() { json!("generated") } else { json!(repository) },
            "tracked_files": tracked_files,
            "first_capture_ms": (first_ms * 100.0).round() / 100.0,
            "per_kind": per_kind,
            "target_reads_ms": 5.0,
            "turns": turns,
            "last_bytes": last_bytes,
            "restore_ms": (restore_ms * 100.0).round() / 100.0,
            "restored_files": restored.files,
        })
        .to_string(),
    )
}
