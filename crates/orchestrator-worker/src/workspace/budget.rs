//! The daemon's disk budget: the most its workspaces directory and its mirrors together may use.
//! While they use that much or more, the daemon takes no new repository task (they would make a
//! new workspace, and perhaps a new mirror); tasks it already runs go on, and tasks on a path are
//! not concerned. The cleaner frees space as tasks end, and claiming resumes.
//!
//! The rule is about what this daemon made, not the disk's free space: a budget is something a
//! person can size per daemon and reason about when several daemons share a disk.
//!
//! Measuring walks the trees (without following links), which takes time on large workspaces, so
//! it happens off the claim path: [`Budget::allows_new_repository_tasks`] answers from the last
//! measurement at once and starts a new one in the background when that is older than
//! [`REFRESH`]. The first answer, before any measurement, allows.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How old a measurement may be before the next question starts a new one.
pub const REFRESH: Duration = Duration::from_secs(5);

/// The budget and its last measurement; cheap to clone (one shared state).
#[derive(Debug, Clone)]
pub struct Budget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit_bytes: Option<u64>,
    dirs: Vec<PathBuf>,
    used: AtomicU64,
    measuring: AtomicBool,
    measured_at: Mutex<Option<Instant>>,
}

impl Budget {
    /// A budget of `limit_bytes` over `dirs` (the workspaces directory and the mirrors);
    /// `None` is no limit.
    pub fn new(limit_bytes: Option<u64>, dirs: Vec<PathBuf>) -> Self {
        Budget {
            inner: Arc::new(Inner {
                limit_bytes,
                dirs,
                used: AtomicU64::new(0),
                measuring: AtomicBool::new(false),
                measured_at: Mutex::new(None),
            }),
        }
    }

    pub fn limit_bytes(&self) -> Option<u64> {
        self.inner.limit_bytes
    }

    /// The bytes used at the last measurement.
    pub fn used_bytes(&self) -> u64 {
        self.inner.used.load(Ordering::Relaxed)
    }

    /// Whether this daemon may take a new repository task now. Never waits: it answers from the
    /// last measurement and, when that is stale, starts the next one on a blocking thread (one at
    /// a time). Called from inside a tokio runtime; outside one it measures in place.
    pub fn allows_new_repository_tasks(&self) -> bool {
        let Some(limit) = self.inner.limit_bytes else {
            return true;
        };
        let stale = self
            .inner
            .measured_at
            .lock()
            .map(|at| at.is_none_or(|at| at.elapsed() >= REFRESH))
            .unwrap_or(true);
        if stale && !self.inner.measuring.swap(true, Ordering::AcqRel) {
            let inner = self.inner.clone();
            let measure = move || {
                inner.used.store(usage(&inner.dirs), Ordering::Relaxed);
                if let Ok(mut at) = inner.measured_at.lock() {
                    *at = Some(Instant::now());
                }
                inner.measuring.store(false, Ordering::Release);
            };
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => drop(handle.spawn_blocking(measure)),
                Err(_) => measure(),
            }
        }
        self.used_bytes() < limit
    }

    /// Measures now and answers from that measurement (start-up, tests).
    pub async fn measure(&self) -> bool {
        let inner = self.inner.clone();
        let used = tokio::task::spawn_blocking(move || usage(&inner.dirs))
            .await
            .unwrap_or(0);
        self.inner.used.store(used, Ordering::Relaxed);
        if let Ok(mut at) = self.inner.measured_at.lock() {
            *at = Some(Instant::now());
        }
        self.inner.limit_bytes.is_none_or(|limit| used < limit)
    }
}

/// The bytes the trees under `dirs` take on disk (allocated blocks, so sparse files count what
/// they use), without following links; what cannot be read counts nothing.
pub fn usage(dirs: &[PathBuf]) -> u64 {
    dirs.iter().map(|d| tree_usage(d)).sum()
}

fn tree_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let own = meta.blocks() * 512;
    if !meta.is_dir() {
        return own;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return own;
    };
    own + entries
        .flatten()
        .map(|entry| tree_usage(&entry.path()))
        .sum::<u64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_budget_refuses_once_the_trees_reach_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("big"), vec![7u8; 256 * 1024]).unwrap();
        let unlimited = Budget::new(None, vec![dir.path().to_owned()]);
        assert!(unlimited.allows_new_repository_tasks());
        let small = Budget::new(Some(64 * 1024), vec![dir.path().to_owned()]);
        assert!(!small.measure().await);
        assert!(small.used_bytes() >= 256 * 1024);
        assert!(!small.allows_new_repository_tasks());
        let large = Budget::new(Some(64 * 1024 * 1024), vec![dir.path().to_owned()]);
        assert!(large.measure().await);
        // A link out of the trees is not followed.
        std::os::unix::fs::symlink("/usr", dir.path().join("usr")).unwrap();
        assert!(usage(&[dir.path().to_owned()]) < 1024 * 1024);
    }
}
