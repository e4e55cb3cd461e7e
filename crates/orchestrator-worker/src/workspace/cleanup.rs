//! The cleaner: removes the workspaces this daemon made once their task has ended.
//!
//! It scans the daemon's workspaces directory, never the store's list of tasks, so it only ever
//! sees what this daemon made:
//! - `task-<id>`: a repository task's workspace;
//! - `.task-<id>.partial-*`: a clone a killed process left half made;
//! - `.task-<id>.removing-*`: a workspace taken out of its place to be removed (see
//!   [`super::discard`]) whose removal a killed process left unfinished: always removed;
//! - `.clones/task-<id>`: a record of a `worktree_of` clone this daemon made at the path the task
//!   named (written by the runner when it clones); the clone is removed only when the task's
//!   `workspace_prepared` events say it was cloned at exactly that path, and the task still names
//!   it as its workspace.
//!
//! Mirrors (`<home>/mirrors/*.git`) go when no preparation has used one for `keep_mirrors` (the
//! time of its lock file, which every preparation sets) and none holds its lock: a later task on
//! the repository clones it again.
//!
//! When: at once for a task that succeeded or was canceled; `keep_failed` after it ended for a
//! failed one, for a person to look at; never for a task that is queued, running or waiting (it
//! may run here again), nor for one the store does not know (this is not the store it belongs
//! to). Removal never follows a symbolic link (see [`super::remove_tree`]) and never leaves the
//! workspaces directory, but for the recorded clone paths.

use super::{WorkspaceSettings, discard, remove_tree};
use crate::{Error, Result};
use orchestrator_store::Store;
use orchestrator_types::BoxFuture;
use orchestrator_types::{EventKind, TaskId, TaskState, now_millis};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the cleaner looks by default.
pub const DEFAULT_CLEANUP_INTERVAL: Duration = Duration::from_secs(60);
/// How long a failed task's workspace is kept by default.
pub const DEFAULT_KEEP_FAILED: Duration = Duration::from_secs(3 * 24 * 60 * 60);
/// How long a mirror no task uses is kept by default.
pub const DEFAULT_KEEP_MIRRORS: Duration = Duration::from_secs(14 * 24 * 60 * 60);
/// The folder of the workspaces directory that records `worktree_of` clones.
pub const CLONES_DIR: &str = ".clones";

#[derive(Debug, Clone)]
pub struct CleanerConfig {
    pub interval: Duration,
    pub keep_failed: Duration,
    pub keep_mirrors: Duration,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            interval: DEFAULT_CLEANUP_INTERVAL,
            keep_failed: DEFAULT_KEEP_FAILED,
            keep_mirrors: DEFAULT_KEEP_MIRRORS,
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanupCounts {
    /// Workspaces (and half-made clones) removed.
    pub removed: u64,
    /// Workspaces of ended tasks kept because their time has not come (failed ones).
    pub kept: u64,
    /// Workspaces of tasks that may still run, or that the store does not know.
    pub active: u64,
    /// Removals that failed (logged; tried again next pass).
    pub errors: u64,
    /// Mirrors removed, unused for their keep time.
    pub mirrors_removed: u64,
}

#[derive(Debug)]
pub struct Cleaner {
    store: Store,
    settings: Arc<WorkspaceSettings>,
    config: CleanerConfig,
}

/// Records that this daemon cloned `workspace` for task `task` (a `worktree_of` clone), so the
/// cleaner may remove it when the task ends.
pub fn record_clone(dir: &Path, task: TaskId, workspace: &Path) -> std::io::Result<()> {
    let clones = dir.join(CLONES_DIR);
    std::fs::create_dir_all(&clones)?;
    std::fs::write(
        clones.join(format!("task-{}", task.0)),
        workspace.as_os_str().as_encoded_bytes(),
    )
}

/// What a name in the workspaces directory is.
enum Entry {
    Workspace(TaskId),
    Partial(TaskId),
    Removing,
}

fn parse(name: &str) -> Option<Entry> {
    if let Some(id) = name.strip_prefix("task-") {
        return id.parse().ok().map(|id| Entry::Workspace(TaskId(id)));
    }
    let rest = name.strip_prefix(".task-")?;
    if rest.contains(".removing-") {
        return Some(Entry::Removing);
    }
    let (id, _) = rest.split_once(".partial-")?;
    id.parse().ok().map(|id| Entry::Partial(TaskId(id)))
}

/// Whether a task in this state, ended at `finished_at`, has its workspace removed at `now`.
fn due(
    state: TaskState,
    finished_at: Option<i64>,
    now: i64,
    keep_failed: Duration,
) -> Option<bool> {
    match state {
        TaskState::Succeeded | TaskState::Canceled => Some(true),
        TaskState::Failed => {
            let keep = keep_failed.as_millis() as i64;
            Some(finished_at.is_none_or(|at| at + keep <= now))
        }
        _ => None,
    }
}

impl Cleaner {
    pub fn new(
        store: Store,
        settings: Arc<WorkspaceSettings>,
        config: CleanerConfig,
    ) -> Result<Self> {
        if config.interval.is_zero() {
            return Err(Error::Config(
                "the cleanup interval must be positive".into(),
            ));
        }
        if !settings.dir.is_absolute() {
            return Err(Error::Config(format!(
                "the workspaces directory {} must be an absolute path",
                settings.dir.display()
            )));
        }
        Ok(Cleaner {
            store,
            settings,
            config,
        })
    }

    /// One pass at time `now` (Unix milliseconds).
    pub async fn run_once(&self, now: i64) -> Result<CleanupCounts> {
        let mut counts = CleanupCounts::default();
        let dir = &self.settings.dir;
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(counts),
            Err(e) => {
                return Err(Error::Config(format!("cannot read {}: {e}", dir.display())));
            }
        };
        let mut found: Vec<(Entry, PathBuf)> = Vec::new();
        for entry in entries.flatten() {
            if let Some(kind) = parse(&entry.file_name().to_string_lossy()) {
                found.push((kind, entry.path()));
            }
        }
        for (kind, path) in found {
            let (task, partial) = match kind {
                Entry::Workspace(task) => (task, false),
                Entry::Partial(task) => (task, true),
                Entry::Removing => {
                    self.remove(&path, &mut counts);
                    continue;
                }
            };
            match self.verdict(task, now).await? {
                // Taken out of its place first, so a retry of the task claimed meanwhile never
                // finds its workspace half removed: it makes a new one.
                Some(true) if !partial => self.remove_by(discard, &path, &mut counts),
                // A half-made clone of a task that may still run is its clone in progress.
                Some(true) => self.remove(&path, &mut counts),
                Some(false) if partial => self.remove(&path, &mut counts),
                Some(false) => counts.kept += 1,
                None => counts.active += 1,
            }
        }
        self.clean_clones(now, &mut counts).await?;
        self.clean_mirrors(now, &mut counts).await;
        if counts.removed > 0 || counts.errors > 0 || counts.mirrors_removed > 0 {
            tracing::info!(
                removed = counts.removed,
                mirrors_removed = counts.mirrors_removed,
                kept = counts.kept,
                errors = counts.errors,
                "workspaces of ended tasks cleaned"
            );
        }
        Ok(counts)
    }

    /// `Some(true)`: remove now; `Some(false)`: ended but kept for now; `None`: may still run, or
    /// unknown here.
    async fn verdict(&self, task: TaskId, now: i64) -> Result<Option<bool>> {
        match self.store.get_task(task).await {
            Ok(t) => Ok(due(t.state, t.finished_at, now, self.config.keep_failed)),
            Err(orchestrator_store::Error::TaskNotFound(_)) => Ok(None),
            Err(e) => Err(Error::Store(e)),
        }
    }

    fn remove(&self, path: &Path, counts: &mut CleanupCounts) {
        self.remove_by(remove_tree, path, counts);
    }

    /// Removes `path` with `remove` (deleting it in place, or taking it aside first), counting.
    fn remove_by(
        &self,
        remove: fn(&Path) -> std::io::Result<()>,
        path: &Path,
        counts: &mut CleanupCounts,
    ) {
        match remove(path) {
            Ok(()) => counts.removed += 1,
            Err(e) => {
                counts.errors += 1;
                tracing::warn!(path = %path.display(), error = %e, "cannot remove a workspace");
            }
        }
    }

    /// Mirrors unused for their keep time that no preparation holds.
    async fn clean_mirrors(&self, now: i64, counts: &mut CleanupCounts) {
        let mirrors = self.settings.mirrors.clone();
        let keep = self.config.keep_mirrors.as_millis() as i64;
        let pass = tokio::task::spawn_blocking(move || {
            let mut removed = 0;
            let mut errors = 0;
            let Ok(entries) = std::fs::read_dir(&mirrors) else {
                return (removed, errors);
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let is_mirror = path.extension().is_some_and(|e| e == "git")
                    && entry.file_type().is_ok_and(|t| t.is_dir());
                // A mirror without a lock file was never used by a preparation: left alone.
                let idle = super::mirror::last_used(&path).is_some_and(|used| used + keep <= now);
                if !is_mirror || !idle {
                    continue;
                }
                // Held: a preparation is cloning, fetching or reading it right now.
                let Some(_lock) = super::mirror::try_lock(&path) else {
                    continue;
                };
                match remove_tree(&path) {
                    Ok(()) => removed += 1,
                    Err(e) => {
                        errors += 1;
                        tracing::warn!(path = %path.display(), error = %e, "cannot remove a mirror");
                    }
                }
            }
            (removed, errors)
        });
        if let Ok((removed, errors)) = pass.await {
            counts.mirrors_removed += removed;
            counts.errors += errors;
        }
    }

    /// The `worktree_of` clones recorded in `.clones/`.
    async fn clean_clones(&self, now: i64, counts: &mut CleanupCounts) -> Result<()> {
        let clones = self.settings.dir.join(CLONES_DIR);
        let Ok(entries) = std::fs::read_dir(&clones) else {
            return Ok(());
        };
        let records: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        for record in records {
            let Some(Entry::Workspace(task)) =
                record.file_name().and_then(|n| parse(&n.to_string_lossy()))
            else {
                continue;
            };
            let Ok(bytes) = std::fs::read(&record) else {
                continue;
            };
            let path = PathBuf::from(
                <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(bytes),
            );
            let t = match self.store.get_task(task).await {
                Ok(t) => t,
                Err(orchestrator_store::Error::TaskNotFound(_)) => {
                    counts.active += 1;
                    continue;
                }
                Err(e) => return Err(Error::Store(e)),
            };
            match due(t.state, t.finished_at, now, self.config.keep_failed) {
                None => {
                    counts.active += 1;
                    continue;
                }
                Some(false) => {
                    counts.kept += 1;
                    continue;
                }
                Some(true) => {}
            }
            let named = t.workspace.as_deref().map(Path::new) == Some(path.as_path());
            let cloned_there = self
                .store
                .events_of_kind(task, EventKind::WorkspacePrepared)
                .await
                .map_err(Error::Store)?
                .iter()
                .any(|e| {
                    e.data.get("outcome").and_then(|o| o.as_str()) == Some("cloned")
                        && e.data.get("workspace").and_then(|w| w.as_str()) == path.to_str()
                });
            if named && cloned_there && path.is_absolute() {
                self.remove(&path, counts);
            } else {
                tracing::warn!(
                    task = task.0,
                    path = %path.display(),
                    "a recorded clone does not match its task's events; it is left in place"
                );
            }
            let _ = std::fs::remove_file(&record);
        }
        Ok(())
    }

    /// Passes every `interval`, and whenever a task of this daemon ends, until `shutdown`.
    /// Failures are logged and the next pass retries.
    pub fn run(self, shutdown: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(self.run_unboxed(shutdown))
    }

    async fn run_unboxed(self, shutdown: CancellationToken) {
        loop {
            if let Err(e) = self.run_once(now_millis()).await {
                tracing::warn!(error = %e, "workspace cleanup pass failed; retrying");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.config.interval) => {}
                () = self.settings.task_ended.notified() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_due_times() {
        assert!(matches!(
            parse("task-12"),
            Some(Entry::Workspace(TaskId(12)))
        ));
        assert!(matches!(
            parse(".task-12.partial-99-0000abcd"),
            Some(Entry::Partial(TaskId(12)))
        ));
        assert!(matches!(
            parse(".task-12.removing-99-0000abcd"),
            Some(Entry::Removing)
        ));
        assert!(parse("task-x").is_none() && parse("notes").is_none());
        let day = Duration::from_secs(86_400);
        assert_eq!(due(TaskState::Succeeded, Some(0), 0, day), Some(true));
        assert_eq!(due(TaskState::Canceled, None, 0, day), Some(true));
        assert_eq!(due(TaskState::Failed, Some(0), 1000, day), Some(false));
        assert_eq!(due(TaskState::Failed, Some(0), 86_400_000, day), Some(true));
        for state in [TaskState::Queued, TaskState::Running, TaskState::Waiting] {
            assert_eq!(due(state, None, i64::MAX, day), None);
        }
    }
}
