//! Where a task's files come from and where they go: the daemon's workspaces directory, the bare
//! mirrors of the repositories tasks name, the per-task workspaces cloned from them, and their
//! removal when the task ends.
//!
//! - [`worktree`]: a task's clone of a person's checkout (`worktree_of`), made at the path the
//!   task names.
//! - [`mirror`]: one bare mirror per repository URL under `<home>/mirrors`, cloned once and
//!   fetched on each claim that needs a moving ref, under a lock file.
//! - [`repository`]: a repository task's workspace `<workspaces dir>/task-<id>`, cloned from the
//!   mirror at the ref's commit (or at the task's recorded base, when an earlier attempt recorded
//!   one), with `origin` set to the public URL.
//! - [`cleanup`]: the background service that removes the workspaces this daemon made once their
//!   task has ended (failed ones after `keep_failed_days`).
//! - [`checkpoint`]: the difference of a repository task's workspace from its base, saved after
//!   each call and turn that changed it and restored when another machine takes the task over.
//! - [`environment`]: a repository's setup phase, and this machine's cache of prepared
//!   environments.
//! - [`budget`]: whether the workspaces and mirrors are within the daemon's disk budget, asked
//!   before a repository task is claimed.
//!
//! Architecture Invariant: the credential of a repository (a token named by the config) is given
//! only to the git processes that fetch into the mirror, through their environment, never on a
//! command line, in a file, in a workspace, in an event or in an agent's environment.

pub mod budget;
pub mod checkpoint;
pub mod cleanup;
pub mod environment;
pub mod mirror;
pub mod repository;
pub mod worktree;

pub use budget::Budget;
pub use cleanup::{Cleaner, CleanerConfig, CleanupCounts};
pub use repository::{Preparation, PrepareError, Prepared, prepare};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

/// Where this daemon's workspaces made from repositories go, when the config names no directory:
/// a sibling of the home (`<home>-workspaces`), not inside it, because agents' sandboxes hide the
/// home and its files.
pub fn default_dir(home: &Path) -> PathBuf {
    let name = home
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "orchestrator".to_owned());
    home.with_file_name(format!("{name}-workspaces"))
}

/// The directory that holds one workspace of a repository task.
pub fn task_dir(dir: &Path, task: orchestrator_types::TaskId) -> PathBuf {
    dir.join(format!("task-{}", task.0))
}

/// What the cache of prepared environments keeps when the config says nothing: 10 GiB.
pub const DEFAULT_ENVIRONMENT_CACHE_BYTES: u64 = 10 << 30;

/// The daemon's places and the credentials of its repositories.
#[derive(Debug, Clone, Default)]
pub struct WorkspaceSettings {
    /// Where repository tasks' workspaces are made (`task-<id>`), and where the cleaner keeps its
    /// record of the `worktree_of` clones this daemon made (`.clones/`).
    pub dir: PathBuf,
    /// Where the bare mirrors live (`<home>/mirrors`).
    pub mirrors: PathBuf,
    /// The config's repositories by name: their URL and the variable that holds their token.
    pub repositories: BTreeMap<String, RepositoryAccess>,
    /// The disk budget of `dir` and `mirrors`, which the claim asks before taking a repository
    /// task; `None` is no budget.
    pub budget: Option<Budget>,
    /// The most bytes the cache of prepared environments (`<dir>/.environments`) keeps, the
    /// least recently used entries going first; `None`: [`DEFAULT_ENVIRONMENT_CACHE_BYTES`].
    pub environment_cache_bytes: Option<u64>,
    /// Woken when a task that ran here ends, so the cleaner removes its workspace at once
    /// instead of at its next pass.
    pub task_ended: Arc<tokio::sync::Notify>,
}

/// What the daemon's own git needs to fetch a configured repository.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RepositoryAccess {
    pub url: String,
    /// The environment variable holding a token, sent as an `http.extraHeader` by the fetches
    /// into the mirror. The token is read when a fetch starts, so a rotated token is used at once.
    pub token_env: Option<String>,
}

impl WorkspaceSettings {
    /// The token for a repository: by the name the task kept, else by its URL.
    pub(crate) fn token_for(
        &self,
        repository: &orchestrator_types::RepositoryRef,
    ) -> Option<String> {
        let access = repository
            .name
            .as_ref()
            .and_then(|n| self.repositories.get(n))
            .filter(|a| a.url == repository.url)
            .or_else(|| self.repositories.values().find(|a| a.url == repository.url))?;
        let var = access.token_env.as_deref()?;
        std::env::var(var).ok().filter(|t| !t.trim().is_empty())
    }
}

/// Runs git with no prompt, no hooks and no inherited repository variables; its stdout, or its
/// stderr as the error.
pub(crate) async fn git(dir: &Path, args: &[&std::ffi::OsStr]) -> Result<String, String> {
    git_with(dir, args, &[]).await
}

/// [`git`] with configuration given through the environment (`GIT_CONFIG_COUNT`): what is given
/// this way is neither written to a config file nor shown in the process list, which every user
/// of the machine reads, as a `-c` argument would be.
pub(crate) async fn git_with(
    dir: &Path,
    args: &[&std::ffi::OsStr],
    config: &[(&str, &str)],
) -> Result<String, String> {
    let mut command = tokio::process::Command::new("git");
    command
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            // The automatic gc (and maintenance) a fetch may start run in the fetch itself, not
            // detached behind it: a detached one went on removing objects after the mirror's
            // lock was released, under a workspace's clone of it.
            "-c",
            "gc.autoDetach=false",
            "-c",
            "maintenance.autoDetach=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES")
        .env_remove("GIT_CONFIG_PARAMETERS")
        .env("GIT_CONFIG_COUNT", config.len().to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if std::env::var_os("GIT_SSH_COMMAND").is_none() && std::env::var_os("GIT_SSH").is_none() {
        // ssh must not ask either (a host key, a passphrase): it fails, and the error says why.
        command.env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes");
    }
    for (i, (key, value)) in config.iter().enumerate() {
        command
            .env(format!("GIT_CONFIG_KEY_{i}"), key)
            .env(format!("GIT_CONFIG_VALUE_{i}"), value);
    }
    let output = command
        .output()
        .await
        .map_err(|e| format!("git could not be started: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let mut text = match stderr.trim() {
            "" => format!("git exited with {}", output.status),
            text => text.to_owned(),
        };
        // Git does not print the headers it sends, but a message is never the place to find out.
        for (_, value) in config {
            if !value.is_empty() {
                text = text.replace(value, "***");
            }
        }
        Err(text)
    }
}

/// Removes a directory tree without following a symbolic link anywhere in it: a link an agent
/// planted is removed as a link, and what it points to is left alone. `std::fs::remove_dir_all`
/// opens each level relative to its parent and never follows links (see its documentation); a
/// link in the place of the directory itself is unlinked.
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                // An agent may leave a directory without write permission (`chmod -w`): give the
                // owner write access back everywhere below, then remove again.
                make_writable(path);
                std::fs::remove_dir_all(path)
            }
            other => other,
        },
        Ok(_) => std::fs::remove_file(path),
    }
}

/// Takes a workspace out of its place at once, then removes it: it is renamed to
/// `.<name>.removing-<pid>-<random>` beside it (one atomic step), so no attempt that comes for
/// the place meanwhile ever finds it half removed, and a removal a killed process left unfinished
/// is finished by the cleaner, which removes every `.removing-` name it sees.
pub fn discard(path: &Path) -> std::io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return remove_tree(path);
    };
    let aside = parent.join(format!(
        ".{}.removing-{}-{:08x}",
        name.to_string_lossy(),
        std::process::id(),
        rand::random::<u32>()
    ));
    match std::fs::rename(path, &aside) {
        Ok(()) => remove_tree(&aside),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Gives the owner read, write and search permission on every directory below `path`, without
/// following links.
fn make_writable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode() | 0o700;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                make_writable(&entry.path());
            }
        }
    }
}
