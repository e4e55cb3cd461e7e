//! Checkpoints of a task's workspace: its files' difference from the task's base commit as a
//! byte-exact git patch, captured after the agent's turns and saved in the store, and restored
//! onto a fresh checkout of the base on whichever machine takes the task next.
//!
//! What a checkpoint holds: every file git would see with `git add -A` (tracked files as they are
//! on disk, untracked files that no ignore rule excludes, files tracked in the base or the index
//! even where an ignore rule matches), symlinks as links, the executable bit, and deletions. The
//! patch is `git diff --binary --full-index` of the base's tree against that state, so binary
//! files and any bytes (CR, NUL, invalid UTF-8) survive. What it does not hold: ignored files
//! (build output, `node_modules`), empty directories, other permission bits than the executable
//! one, the agent's commits as history (a commit's files are carried, its message and the
//! branch are not: after a restore HEAD is the base and every change reads as uncommitted), what
//! the agent had staged (the same), nested repositories that the base does not track, and a
//! submodule's contents (its entry stays at the base's commit).
//!
//! Byte-exact, whatever the repository says: files are read and written as raw bytes, never
//! through git's filters (`core.autocrlf`, `text`/`eol` attributes, `ident`, clean and smudge
//! drivers), so a file with CRLF in a `* text=auto` repository comes back with its CRLF.
//!
//! The workspace is hostile input (DESIGN.md, "Security"): an agent may have written anything into
//! its files and its `.git`. So:
//! - the repository is opened only where the daemon made it: `.git` must be a directory of the
//!   workspace itself (not a `gitdir:` file or a link), and `git_command::pin` must find no
//!   `commondir`, no other `core.worktree` and no object store outside;
//! - libgit2 does the git work (no hooks, no fsmonitor, no filter programs: it runs none), and the
//!   objects a capture or a restore makes are written to an in-memory object store, never into
//!   the workspace's `.git`;
//! - every file is read and written through `openat2` anchored at the workspace with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, so neither a symlink an agent planted (in its files
//!   or in the base) nor a directory swapped for one while a capture runs leads out of it;
//! - a patch to restore is checked before anything is written: every path it names must be
//!   relative, without `.`, `..` or empty components, and outside any `.git`.
//!
//! The base is a full commit id (the one the workspace was made at), never a name the workspace's
//! own refs could move.
//!
//! Here: the patch and its errors, and what capture and restore share (opening the repository and
//! the files beneath the workspace). The capture is in `capture`, the restore in `restore`, the
//! per-turn saver in `saver`.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use git2::{
    Delta, DiffFormat, DiffOptions, ObjectType, Oid, Repository, RepositoryOpenFlags, Tree,
};
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{FileStat, Mode, SFlag};
use orchestrator_store::{CheckpointSave, Lease, NewCheckpoint, Store};
use orchestrator_types::{EventKind, TaskId};
use serde_json::json;

mod capture;
mod restore;
mod saver;

pub use capture::{Capturer, capture, tree_of};
pub use restore::{Restored, RestoredInfo, restore, restore_latest, task_base};
pub use saver::{Saver, TurnCheckpoint};

/// Git's file modes.
const MODE_FILE: u32 = 0o100_644;
const MODE_EXEC: u32 = 0o100_755;
const MODE_LINK: u32 = 0o120_000;
const MODE_GITLINK: u32 = 0o160_000;
/// Why a checkpoint could not be captured or restored.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The workspace or the patch is not one the daemon reads or writes: a `.git` that is not the
    /// workspace's own, a path out of the workspace or into `.git`, a base that is not a commit id.
    /// Not retryable.
    #[error("refused: {0}")]
    Refused(String),
    /// libgit2 failed: a base the repository lacks, a patch that does not apply, a damaged object.
    /// Not retryable, except where the cause is (a full disk).
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    /// Reading or writing a file of the workspace failed. Retryable when the cause is.
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// The files written do not make the tree the checkpoint recorded. Not retryable.
    #[error(
        "the restored workspace does not match the checkpoint (tree {got}, expected {expected})"
    )]
    Mismatch { got: String, expected: String },
    /// The store failed. Retryable when the store error is.
    #[error(transparent)]
    Store(#[from] orchestrator_store::Error),
    /// The workspace's changed files are more than a checkpoint reads (the cap): the task stays
    /// on its machine. Not retryable until the files shrink.
    #[error("too large: {0}")]
    TooLarge(String),
    /// The blocking work did not finish (it panicked). Not retryable.
    #[error("the checkpoint work stopped unexpectedly: {0}")]
    Interrupted(String),
}
pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;
fn io_error(path: &[u8], source: impl Into<std::io::Error>) -> CheckpointError {
    CheckpointError::Io {
        path: String::from_utf8_lossy(path).into_owned(),
        source: source.into(),
    }
}
/// A captured difference of a workspace from its base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// The patch, as `git apply --binary` reads it.
    pub bytes: Vec<u8>,
    /// The git tree id of the captured state: equal trees, equal files.
    pub tree: String,
    /// How many files it adds, changes or deletes.
    pub files: usize,
}
/// What a capture found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Captured {
    /// The workspace holds the base exactly (its tree is the base's, `tree`).
    Clean {
        tree: String,
    },
    /// The workspace's tree is the one the caller named as the last it saved.
    Unchanged,
    Changed(Patch),
}
/// The patch from `from` to `to` in the form `git apply --binary` reads, and how many files it
/// touches. No rename detection: a move is a deletion and an addition, which applies anywhere the
/// base does.
fn diff_patch(repo: &Repository, from: &Tree<'_>, to: &Tree<'_>) -> Result<(Vec<u8>, usize)> {
    let mut options = DiffOptions::new();
    options.show_binary(true).id_abbrev(40);
    let diff = repo.diff_tree_to_tree(Some(from), Some(to), Some(&mut options))?;
    let mut patch = Vec::new();
    diff.print(DiffFormat::Patch, |_delta, _hunk, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            patch.push(line.origin() as u8);
        }
        patch.extend_from_slice(line.content());
        true
    })?;
    Ok((patch, diff.deltas().len()))
}
fn full_commit_id(base: &str) -> Result<Oid> {
    let base = base.trim();
    if base.len() != 40 || !base.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CheckpointError::Refused(format!(
            "the base {base:?} is not a full commit id; a checkpoint is taken against the commit the workspace was made at"
        )));
    }
    Ok(Oid::from_str(base)?)
}
/// Opens the workspace's own repository, refusing one that reaches outside it.
fn open_repository(workspace: &Path) -> Result<Repository> {
    let dot_git = workspace.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git)
        .map_err(|e| io_error(dot_git.as_os_str().as_bytes(), e))?;
    if !meta.is_dir() {
        return Err(CheckpointError::Refused(format!(
            "{} is not a directory: a checkpoint reads only a repository whose git directory is inside its workspace",
            dot_git.display()
        )));
    }
    // The files git reads to open the repository and list what it ignores: a FIFO among them
    // would stall the read for good, so each must be a plain file, or absent.
    for name in ["HEAD", "config", "index", "info/exclude", "commondir"] {
        let path = dot_git.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_file() => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            _ => {
                return Err(CheckpointError::Refused(format!(
                    "{} is not a plain file",
                    path.display()
                )));
            }
        }
    }
    let pinned =
        orchestrator_tools::git_command::pin(workspace).map_err(CheckpointError::Refused)?;
    let git_dir =
        std::fs::canonicalize(&dot_git).map_err(|e| io_error(dot_git.as_os_str().as_bytes(), e))?;
    if pinned.work_tree != workspace || pinned.git_dir != git_dir {
        return Err(CheckpointError::Refused(format!(
            "the repository found for {} is not its own",
            workspace.display()
        )));
    }
    let repo = Repository::open_ext(
        workspace,
        RepositoryOpenFlags::NO_SEARCH,
        std::iter::empty::<&OsStr>(),
    )?;
    if let Ok(excludes) = repo.config().and_then(|c| c.get_path("core.excludesFile"))
        && std::fs::metadata(&excludes).is_ok_and(|m| !m.is_file())
    {
        return Err(CheckpointError::Refused(format!(
            "core.excludesFile names {}, which is not a plain file",
            excludes.display()
        )));
    }
    if !repo
        .workdir()
        .is_some_and(|w| w.components().eq(workspace.components()))
    {
        return Err(CheckpointError::Refused(format!(
            "the repository at {} names another work tree",
            workspace.display()
        )));
    }
    Ok(repo)
}
/// `a/b` from `a` and `b` (`b` alone when `a` is empty); `a/` when `b` is empty.
fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = dir.to_vec();
    if !path.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}
/// The bytes of the regular file `path`, opened beneath the root; `None` when it is gone or no
/// longer a regular file. A file longer than `max` (it grew since it was listed) is refused
/// with [`CheckpointError::TooLarge`] once `max` bytes are read, never read whole.
fn read_file(root: &OwnedFd, path: &[u8], max: u64) -> Result<Option<Vec<u8>>> {
    let fd = match open_beneath(
        root,
        path,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(CheckpointError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let stat = nix::sys::stat::fstat(&fd).map_err(|e| io_error(path, e))?;
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Ok(None);
    }
    let file = std::fs::File::from(fd);
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    if bytes.len() as u64 > max {
        return Err(CheckpointError::TooLarge(format!(
            "{} grew past the {max} bytes a checkpoint may still read",
            String::from_utf8_lossy(path)
        )));
    }
    Ok(Some(bytes))
}
fn open_root(workspace: &Path) -> Result<OwnedFd> {
    nix::fcntl::open(
        workspace,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_error(workspace.as_os_str().as_bytes(), e))
}
/// Opens `rel` below `root` without following any symlink on the way, nor leaving `root`.
fn open_beneath(root: &OwnedFd, rel: &[u8], flags: OFlag, mode: Mode) -> Result<OwnedFd> {
    let path: &[u8] = if rel.is_empty() { b"." } else { rel };
    // openat2 refuses flags an O_PATH open does not take, O_NOCTTY among them.
    let extra = if flags.contains(OFlag::O_PATH) {
        OFlag::O_CLOEXEC
    } else {
        OFlag::O_CLOEXEC | OFlag::O_NOCTTY
    };
    let how = OpenHow::new().flags(flags | extra).mode(mode).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    );
    openat2(root.as_fd(), OsStr::from_bytes(path), how).map_err(|e| match e {
        Errno::ELOOP | Errno::EXDEV => CheckpointError::Refused(format!(
            "{} leads through a symlink or out of the workspace",
            String::from_utf8_lossy(rel)
        )),
        other => io_error(rel, other),
    })
}
