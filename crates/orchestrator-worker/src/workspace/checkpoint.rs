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

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use git2::{
    Delta, DiffFormat, DiffOptions, Index, IndexEntry, IndexTime, ObjectType, Oid, Repository,
    RepositoryOpenFlags, Tree,
};
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{FileStat, Mode, SFlag};
use orchestrator_store::{CheckpointSave, Lease, NewCheckpoint, Store};
use orchestrator_types::{EventKind, TaskId};
use serde_json::json;

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

/// Captures `workspace`'s difference from `base` (a full commit id): `None` when the workspace
/// holds the base exactly. Blocking.
pub fn capture(workspace: &Path, base: &str) -> Result<Option<Patch>> {
    match Capturer::new(workspace, base)?.capture(None)? {
        Captured::Changed(patch) => Ok(Some(patch)),
        Captured::Clean { .. } | Captured::Unchanged => Ok(None),
    }
}

/// Identity of a file's content as far as its metadata tells: a file whose key is unchanged since
/// it was hashed is not read again (git's index does the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatKey {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    mode: u32,
}

impl StatKey {
    fn of(st: &FileStat) -> Self {
        StatKey {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            mode: st.st_mode,
        }
    }
}

/// Captures one workspace again and again, cheaply: a file whose metadata has not changed since it
/// was last read is not read again. Keep one per attempt; it holds no handle between captures.
#[derive(Debug)]
pub struct Capturer {
    workspace: PathBuf,
    base: Oid,
    cache: HashMap<Vec<u8>, (StatKey, Oid)>,
}

impl Capturer {
    /// Checks that `workspace` is a repository the daemon may read and `base` a full commit id.
    pub fn new(workspace: &Path, base: &str) -> Result<Self> {
        let base = full_commit_id(base)?;
        let workspace = std::fs::canonicalize(workspace)
            .map_err(|e| io_error(workspace.as_os_str().as_bytes(), e))?;
        drop(open_repository(&workspace)?);
        Ok(Capturer {
            workspace,
            base,
            cache: HashMap::new(),
        })
    }

    /// Captures the workspace; `Unchanged` when its tree is `last_tree` (the patch is then not
    /// made at all). Blocking.
    pub fn capture(&mut self, last_tree: Option<&str>) -> Result<Captured> {
        let repo = open_repository(&self.workspace)?;
        let odb = repo.odb()?;
        // Objects this capture makes (blobs of changed files, trees) stay in memory: the
        // workspace's object store is the agent's, and a daemon that wrote into it would write
        // wherever the agent's links lead.
        let _scratch = odb.add_new_mempack_backend(1000)?;
        let base_tree = repo.find_commit(self.base)?.tree()?;
        let started = SystemTime::now();
        let mut state = Index::new()?;
        let root = open_root(&self.workspace)?;
        let snapshot = Snapshot::read(&repo, &base_tree, &root)?;
        let mut seen = HashSet::new();
        for file in snapshot.files {
            let (oid, mode) = match file.kind {
                Kind::Gitlink(oid) => (oid, MODE_GITLINK),
                Kind::Link(target) => (repo.blob(&target)?, MODE_LINK),
                Kind::File { exec, stat } => {
                    let key = StatKey::of(&stat);
                    let base_oid = snapshot.base.get(&file.path).map(|(oid, _)| *oid);
                    let cached = self
                        .cache
                        .get(&file.path)
                        .filter(|(k, _)| *k == key)
                        .map(|(_, oid)| *oid);
                    let oid = match cached {
                        // Unchanged since the last read and equal to the base: the base's blob
                        // is in the repository already.
                        Some(oid) if Some(oid) == base_oid => oid,
                        _ => {
                            let Some(bytes) = read_file(&root, &file.path)? else {
                                // Gone, or no longer a file, since the listing.
                                continue;
                            };
                            let oid = Oid::hash_object(ObjectType::Blob, &bytes)?;
                            if Some(oid) != base_oid {
                                repo.blob(&bytes)?;
                            }
                            if !racy(&stat, started) {
                                self.cache.insert(file.path.clone(), (key, oid));
                            }
                            oid
                        }
                    };
                    (oid, if exec { MODE_EXEC } else { MODE_FILE })
                }
            };
            seen.insert(file.path.clone());
            state.add(&entry(file.path, oid, mode))?;
        }
        self.cache.retain(|path, _| seen.contains(path));
        let tree_id = state.write_tree_to(&repo)?;
        let tree_text = tree_id.to_string();
        if last_tree == Some(tree_text.as_str()) {
            return Ok(Captured::Unchanged);
        }
        if tree_id == base_tree.id() {
            return Ok(Captured::Clean { tree: tree_text });
        }
        let tree = repo.find_tree(tree_id)?;
        let (bytes, files) = diff_patch(&repo, &base_tree, &tree)?;
        Ok(Captured::Changed(Patch {
            bytes,
            tree: tree_text,
            files,
        }))
    }
}

/// A file hashed in the same second it was last changed may change again without its metadata
/// showing it (timestamps are coarse on some file systems): such a file is read again next time.
fn racy(stat: &FileStat, started: SystemTime) -> bool {
    let start = started
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(i64::MAX);
    stat.st_mtime >= start - 1 || stat.st_ctime >= start - 1
}

fn entry(path: Vec<u8>, id: Oid, mode: u32) -> IndexEntry {
    IndexEntry {
        ctime: IndexTime::new(0, 0),
        mtime: IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode,
        uid: 0,
        gid: 0,
        file_size: 0,
        id,
        flags: 0,
        flags_extended: 0,
        path,
    }
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

/// What one file of the workspace is.
enum Kind {
    File {
        exec: bool,
        stat: FileStat,
    },
    Link(Vec<u8>),
    /// A submodule the base tracks: kept at the base's commit.
    Gitlink(Oid),
}

struct FileAt {
    path: Vec<u8>,
    kind: Kind,
}

/// The files of a workspace that a checkpoint holds, opened through the workspace's descriptor.
struct Snapshot {
    /// The base's entries by path: blob id and mode.
    base: HashMap<Vec<u8>, (Oid, u32)>,
    files: Vec<FileAt>,
}

impl Snapshot {
    fn read(repo: &Repository, base_tree: &Tree<'_>, root: &OwnedFd) -> Result<Snapshot> {
        let mut base = HashMap::new();
        base_tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() != Some(ObjectType::Tree) {
                let mut path = dir.as_bytes().to_vec();
                path.extend_from_slice(entry.name_bytes());
                base.insert(path, (entry.id(), entry.filemode() as u32));
            }
            git2::TreeWalkResult::Ok
        })?;
        // Tracked paths are never ignored: the base's, and the index's (a file the agent added
        // with `git add -f`). An index that cannot be read counts as the base's.
        let mut tracked: HashSet<Vec<u8>> = base.keys().cloned().collect();
        if let Ok(index) = repo.index() {
            tracked.extend(index.iter().map(|e| e.path));
        }
        let mut tracked_dirs = HashSet::new();
        for path in &tracked {
            let mut at = path.as_slice();
            while let Some(slash) = at.iter().rposition(|b| *b == b'/') {
                at = &at[..slash];
                if !tracked_dirs.insert(at.to_vec()) {
                    break;
                }
            }
        }
        let mut walk = Walk {
            repo,
            root,
            base: &base,
            tracked: &tracked,
            tracked_dirs: &tracked_dirs,
            files: Vec::new(),
        };
        walk.dir(Vec::new())?;
        let files = walk.files;
        Ok(Snapshot { base, files })
    }
}

struct Walk<'a> {
    repo: &'a Repository,
    root: &'a OwnedFd,
    base: &'a HashMap<Vec<u8>, (Oid, u32)>,
    tracked: &'a HashSet<Vec<u8>>,
    tracked_dirs: &'a HashSet<Vec<u8>>,
    files: Vec<FileAt>,
}

impl Walk<'_> {
    fn ignored(&self, path: &[u8]) -> Result<bool> {
        Ok(self
            .repo
            .is_path_ignored(Path::new(OsStr::from_bytes(path)))?)
    }

    /// Adds the files below the directory `rel` ("" for the workspace).
    fn dir(&mut self, rel: Vec<u8>) -> Result<()> {
        let fd = open_beneath(
            self.root,
            &rel,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )?;
        let mut names: Vec<OsString> = Vec::new();
        let dir = nix::dir::Dir::from_fd(fd.try_clone().map_err(|e| io_error(&rel, e))?)
            .map_err(|e| io_error(&rel, e))?;
        for entry in dir.into_iter() {
            let entry = entry.map_err(|e| io_error(&rel, e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            names.push(OsString::from_vec(name.to_vec()));
        }
        names.sort();
        // libgit2 reads each directory's `.gitignore` to decide what is ignored: one that is not
        // a plain file (a FIFO would stall the read for good, a link would read another file)
        // is refused before anything asks.
        if names.iter().any(|n| n.as_bytes() == b".gitignore") {
            let stat = nix::sys::stat::fstatat(
                &fd,
                OsStr::new(".gitignore"),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(|e| io_error(&join(&rel, b".gitignore"), e))?;
            if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
                return Err(CheckpointError::Refused(format!(
                    "{} is not a plain file",
                    String::from_utf8_lossy(&join(&rel, b".gitignore"))
                )));
            }
        }
        for name in names {
            let name = name.as_bytes();
            // No `.git` at any depth: git refuses such paths, and it is a repository's own.
            if name.eq_ignore_ascii_case(b".git") {
                continue;
            }
            let path = join(&rel, name);
            let stat = match nix::sys::stat::fstatat(
                &fd,
                OsStr::from_bytes(name),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            ) {
                Ok(stat) => stat,
                // Gone since the listing (an agent's process removed it): not part of this state.
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(io_error(&path, e)),
            };
            let tracked = self.tracked.contains(&path);
            let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
            if kind == SFlag::S_IFDIR {
                if let Some((oid, MODE_GITLINK)) = self.base.get(&path) {
                    self.files.push(FileAt {
                        path,
                        kind: Kind::Gitlink(*oid),
                    });
                    continue;
                }
                // A repository of its own inside the workspace (not a submodule of the base):
                // its files are its own.
                if nix::sys::stat::fstatat(
                    &fd,
                    &*join(name, b".git"),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .is_ok()
                {
                    continue;
                }
                if !self.tracked_dirs.contains(&path) && self.ignored(&path)? {
                    continue;
                }
                self.dir(path)?;
                continue;
            }
            if !tracked && self.ignored(&path)? {
                continue;
            }
            if kind == SFlag::S_IFLNK {
                let target = nix::fcntl::readlinkat(&fd, OsStr::from_bytes(name))
                    .map_err(|e| io_error(&path, e))?;
                self.files.push(FileAt {
                    path,
                    kind: Kind::Link(target.into_vec()),
                });
            } else if kind == SFlag::S_IFREG {
                self.files.push(FileAt {
                    path,
                    kind: Kind::File {
                        exec: stat.st_mode & 0o100 != 0,
                        stat,
                    },
                });
            }
            // Sockets, pipes and devices are not files git keeps.
        }
        Ok(())
    }
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
/// longer a regular file.
fn read_file(root: &OwnedFd, path: &[u8]) -> Result<Option<Vec<u8>>> {
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
    let mut file = std::fs::File::from(fd);
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
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

/// What [`restore`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The tree the workspace now holds: the checkpoint's.
    pub tree: String,
    /// How many files were written or removed.
    pub files: usize,
}

/// Checks every path `patch` names: relative, no empty, `.` or `..` component, nothing in a
/// `.git`. A patch that fails is refused whole, before anything is written.
fn check_paths(diff: &git2::Diff<'_>) -> Result<()> {
    for delta in diff.deltas() {
        for file in [delta.old_file(), delta.new_file()] {
            let Some(path) = file.path_bytes() else {
                continue;
            };
            check_path(path)?;
        }
    }
    Ok(())
}

fn check_path(path: &[u8]) -> Result<()> {
    let bad = path.is_empty()
        || path.split(|b| *b == b'/').any(|part| {
            part.is_empty() || part == b"." || part == b".." || part.eq_ignore_ascii_case(b".git")
        });
    if bad {
        return Err(CheckpointError::Refused(format!(
            "the patch names {:?}, which is not a path inside the workspace (absolute, with . or .., or in .git)",
            String::from_utf8_lossy(path)
        )));
    }
    Ok(())
}

/// Restores `patch` (a checkpoint against `base`, a full commit id) onto `workspace`, a fresh
/// checkout of `base`: afterwards the workspace's files are byte for byte the captured ones,
/// which is checked by capturing it again. Blocking.
pub fn restore(workspace: &Path, base: &str, patch: &[u8]) -> Result<Restored> {
    let base_oid = full_commit_id(base)?;
    let workspace = std::fs::canonicalize(workspace)
        .map_err(|e| io_error(workspace.as_os_str().as_bytes(), e))?;
    let repo = open_repository(&workspace)?;
    let odb = repo.odb()?;
    let _scratch = odb.add_new_mempack_backend(1000)?;
    let base_tree = repo.find_commit(base_oid)?.tree()?;
    let diff = git2::Diff::from_buffer(patch)?;
    check_paths(&diff)?;
    let mut applied = repo.apply_to_tree(&base_tree, &diff, None)?;
    let target_id = applied.write_tree_to(&repo)?;
    let target = repo.find_tree(target_id)?;
    let changes = repo.diff_tree_to_tree(Some(&base_tree), Some(&target), None)?;
    let root = open_root(&workspace)?;
    let mut removed = Vec::new();
    let mut written = Vec::new();
    for delta in changes.deltas() {
        let old = delta.old_file();
        let new = delta.new_file();
        match delta.status() {
            Delta::Deleted => removed.push(path_of(&old)?),
            Delta::Added | Delta::Modified => {
                written.push((path_of(&new)?, new.id(), u32::from(new.mode())))
            }
            Delta::Typechange => {
                removed.push(path_of(&old)?);
                written.push((path_of(&new)?, new.id(), u32::from(new.mode())));
            }
            other => {
                return Err(CheckpointError::Refused(format!(
                    "the patch holds a change git calls {other:?}, which a checkpoint never makes"
                )));
            }
        }
    }
    for path in &removed {
        check_path(path)?;
        let (dir, name) = parent_of(&root, path, false)?;
        match nix::unistd::unlinkat(&dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(io_error(path, e)),
        }
        remove_empty_parents(&root, path);
    }
    for (path, id, mode) in &written {
        check_path(path)?;
        let (dir, name) = parent_of(&root, path, true)?;
        match nix::unistd::unlinkat(&dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(io_error(path, e)),
        }
        match *mode {
            MODE_GITLINK => {}
            MODE_LINK => {
                let blob = repo.find_blob(*id)?;
                nix::unistd::symlinkat(OsStr::from_bytes(blob.content()), &dir, name)
                    .map_err(|e| io_error(path, e))?;
            }
            _ => {
                let blob = repo.find_blob(*id)?;
                let perm = if *mode == MODE_EXEC { 0o777 } else { 0o666 };
                let fd = nix::fcntl::openat(
                    &dir,
                    name,
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(perm),
                )
                .map_err(|e| io_error(path, e))?;
                let mut file = std::fs::File::from(fd);
                file.write_all(blob.content())
                    .map_err(|e| io_error(path, e))?;
            }
        }
    }
    // The proof: the workspace read back makes the checkpoint's tree.
    match Capturer::new(&workspace, base)?.capture(None)? {
        Captured::Changed(p) if p.tree == target_id.to_string() => {}
        Captured::Clean { tree } if tree == target_id.to_string() => {}
        Captured::Changed(p) => {
            return Err(CheckpointError::Mismatch {
                got: p.tree,
                expected: target_id.to_string(),
            });
        }
        Captured::Clean { tree } => {
            return Err(CheckpointError::Mismatch {
                got: tree,
                expected: target_id.to_string(),
            });
        }
        Captured::Unchanged => {
            return Err(CheckpointError::Interrupted(
                "a capture with no last tree said unchanged".into(),
            ));
        }
    }
    Ok(Restored {
        tree: target_id.to_string(),
        files: removed.len() + written.len(),
    })
}

fn path_of(file: &git2::DiffFile<'_>) -> Result<Vec<u8>> {
    file.path_bytes()
        .map(<[u8]>::to_vec)
        .ok_or_else(|| CheckpointError::Refused("the patch has a change without a path".into()))
}

/// The directory holding `path` (opened beneath the root, made when `create`) and the last name.
fn parent_of<'p>(root: &OwnedFd, path: &'p [u8], create: bool) -> Result<(OwnedFd, &'p OsStr)> {
    let (dir, name) = match path.iter().rposition(|b| *b == b'/') {
        Some(slash) => (&path[..slash], &path[slash + 1..]),
        None => (&path[..0], path),
    };
    if create && !dir.is_empty() {
        let mut at = Vec::new();
        for part in dir.split(|b| *b == b'/') {
            let parent =
                open_beneath(root, &at, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty())?;
            match nix::sys::stat::mkdirat(
                &parent,
                OsStr::from_bytes(part),
                Mode::from_bits_truncate(0o777),
            ) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(io_error(&join(&at, part), e)),
            }
            at = join(&at, part);
        }
    }
    let fd = open_beneath(root, dir, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty())?;
    Ok((fd, OsStr::from_bytes(name)))
}

/// Removes the directories above `path` that its removal left empty, as git does; stops at the
/// first that is not empty.
fn remove_empty_parents(root: &OwnedFd, path: &[u8]) {
    let mut at = path;
    while let Some(slash) = at.iter().rposition(|b| *b == b'/') {
        at = &at[..slash];
        let Ok((dir, name)) = parent_of(root, at, false) else {
            return;
        };
        if nix::unistd::unlinkat(&dir, name, nix::unistd::UnlinkatFlags::RemoveDir).is_err() {
            return;
        }
    }
}

/// What [`restore_latest`] restored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredInfo {
    /// The turn after which the checkpoint was taken.
    pub turn: i64,
    /// The last conversation message saved when it was taken.
    pub after_seq: i64,
    /// The attempt and the worker that took it.
    pub attempt: i64,
    pub worker: String,
    /// Size of the patch, and how many files were written or removed.
    pub bytes: i64,
    pub files: usize,
    pub tree: String,
}

/// Restores the task's latest checkpoint onto `workspace`, a fresh checkout of `base` just made
/// for the attempt of `lease`, with a `checkpoint_restored` event. `None` when the task has no
/// checkpoint. A checkpoint taken against another base is refused: applied elsewhere, it would
/// not make the files the agent had.
pub async fn restore_latest(
    store: &Store,
    lease: &Lease,
    workspace: &Path,
    base: &str,
) -> Result<Option<RestoredInfo>> {
    let Some((checkpoint, patch)) = store.latest_checkpoint(lease.task_id).await? else {
        return Ok(None);
    };
    if !checkpoint.base.eq_ignore_ascii_case(base.trim()) {
        return Err(CheckpointError::Refused(format!(
            "the task's checkpoint was taken against {}, but the workspace was made at {base}",
            checkpoint.base
        )));
    }
    let started = Instant::now();
    let restored = tokio::task::spawn_blocking({
        let workspace = workspace.to_owned();
        let base = base.to_owned();
        move || restore(&workspace, &base, &patch)
    })
    .await
    .map_err(|e| CheckpointError::Interrupted(e.to_string()))??;
    let info = RestoredInfo {
        turn: checkpoint.turn,
        after_seq: checkpoint.after_seq,
        attempt: checkpoint.attempt,
        worker: checkpoint.worker,
        bytes: checkpoint.patch_bytes,
        files: restored.files,
        tree: restored.tree,
    };
    store
        .append_event(
            lease,
            EventKind::CheckpointRestored,
            json!({
                "turn": info.turn,
                "after_seq": info.after_seq,
                "bytes": info.bytes,
                "files": info.files,
                "tree": info.tree,
                "from_attempt": info.attempt,
                "from_worker": info.worker,
                "epoch": lease.epoch,
                "ms": started.elapsed().as_millis() as u64,
            }),
        )
        .await?;
    Ok(Some(info))
}

/// The base of a task's workspace, when it was made from a repository: the `base` of its last
/// `workspace_prepared` event. Tasks on a plain path have none, and take no checkpoints.
pub async fn task_base(store: &Store, task: TaskId) -> orchestrator_store::Result<Option<String>> {
    let events = store
        .events_of_kind(task, EventKind::WorkspacePrepared)
        .await?;
    Ok(events.iter().rev().find_map(|e| {
        e.data
            .get("base")
            .and_then(|b| b.as_str())
            .map(str::to_owned)
    }))
}

/// What one [`Saver::after_turn`] did, for the loop's logs and the bench.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnCheckpoint {
    /// The workspace's tree was the one saved last: nothing written.
    Unchanged,
    /// A checkpoint was saved.
    Saved { bytes: i64, files: usize },
    /// It was not saved (over the cap, or the workspace could not be read); an event says so.
    NotSaved(String),
}

/// The longest a capture may take before the attempt gives up on checkpoints.
const CAPTURE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Saves a checkpoint of an attempt's workspace after each turn that changed it. One per
/// attempt, made at its start.
#[derive(Debug)]
pub struct Saver {
    capturer: Option<Capturer>,
    base: String,
    /// The tree of the task's saved checkpoint (the base's when it was saved clean).
    last_tree: Option<String>,
    /// The last turn's save failed and said so: the next failure is not said again.
    refused: bool,
    cap: u64,
    worker: String,
}

impl Saver {
    /// A saver for the task's workspace, or `None` when the task has no base (its workspace is a
    /// plain path): then the turn path does no checkpoint work at all.
    pub async fn start(
        store: &Store,
        task: TaskId,
        workspace: &Path,
        cap: u64,
        worker: &str,
    ) -> orchestrator_store::Result<Option<Saver>> {
        let Some(base) = task_base(store, task).await? else {
            return Ok(None);
        };
        let last_tree = store
            .checkpoint_info(task)
            .await?
            .filter(|c| c.base.eq_ignore_ascii_case(&base))
            .map(|c| c.tree);
        let capturer = {
            let workspace = workspace.to_owned();
            let base = base.clone();
            tokio::task::spawn_blocking(move || Capturer::new(&workspace, &base))
                .await
                .map_err(|e| CheckpointError::Interrupted(e.to_string()))
                .and_then(|r| r)
        };
        Ok(Some(Saver {
            refused: false,
            capturer: capturer
                .inspect_err(|e| tracing::warn!(%task, "checkpoints are off for this attempt: {e}"))
                .ok(),
            base,
            last_tree,
            cap,
            worker: worker.to_owned(),
        }))
    }

    /// Captures the workspace after `turn` and saves it fenced by `lease` when it changed since
    /// the last save. A workspace that cannot be read, or a patch over the cap, is not saved, and
    /// an event says the task cannot move (once, until a save succeeds again). Only the store's
    /// errors are errors (a stale lease among them).
    pub async fn after_turn(
        &mut self,
        store: &Store,
        lease: &Lease,
        attempt: i64,
        turn: i64,
    ) -> orchestrator_store::Result<TurnCheckpoint> {
        let started = Instant::now();
        let captured = match self.capturer.take() {
            None => Err("the workspace is not a repository a checkpoint may read".to_owned()),
            Some(mut capturer) => {
                let last = self.last_tree.clone();
                let capture = tokio::task::spawn_blocking(move || {
                    let captured = capturer.capture(last.as_deref());
                    (capturer, captured)
                });
                // A capture that does not end (a file system that hangs) must not hold the agent:
                // the task goes on without checkpoints, and says so.
                match tokio::time::timeout(CAPTURE_TIMEOUT, capture).await {
                    Ok(Ok((capturer, captured))) => {
                        self.capturer = Some(capturer);
                        captured.map_err(|e| e.to_string())
                    }
                    Ok(Err(e)) => Err(format!("the capture stopped unexpectedly: {e}")),
                    Err(_) => Err(format!(
                        "the capture did not end within {} s",
                        CAPTURE_TIMEOUT.as_secs()
                    )),
                }
            }
        };
        let patch = match captured {
            Ok(Captured::Unchanged) => return Ok(TurnCheckpoint::Unchanged),
            // Back to the base with no checkpoint saved: nothing to restore either.
            Ok(Captured::Clean { .. }) if self.last_tree.is_none() => {
                return Ok(TurnCheckpoint::Unchanged);
            }
            Ok(Captured::Clean { tree }) => Patch {
                bytes: Vec::new(),
                tree,
                files: 0,
            },
            Ok(Captured::Changed(patch)) => patch,
            Err(reason) => return self.not_saved(store, lease, turn, reason).await,
        };
        if self.refused && patch.bytes.len() as u64 > self.cap {
            // Said already; the timeline gets one event, not one a turn.
            return Ok(TurnCheckpoint::NotSaved(format!(
                "{} bytes, over the cap of {}",
                patch.bytes.len(),
                self.cap
            )));
        }
        let capture_ms = started.elapsed().as_millis();
        let saved = store
            .save_checkpoint(
                lease,
                &NewCheckpoint {
                    base: &self.base,
                    turn,
                    tree: &patch.tree,
                    files: patch.files as i64,
                    patch: &patch.bytes,
                    attempt,
                    worker: &self.worker,
                },
                self.cap,
            )
            .await?;
        match saved {
            CheckpointSave::Saved(checkpoint) => {
                tracing::debug!(
                    task = %lease.task_id,
                    turn,
                    bytes = checkpoint.patch_bytes,
                    capture_ms,
                    total_ms = started.elapsed().as_millis(),
                    "checkpoint saved"
                );
                self.last_tree = Some(checkpoint.tree);
                self.refused = false;
                Ok(TurnCheckpoint::Saved {
                    bytes: checkpoint.patch_bytes,
                    files: patch.files,
                })
            }
            // The store said so in the task's timeline already.
            CheckpointSave::TooLarge { bytes, cap } => {
                self.refused = true;
                Ok(TurnCheckpoint::NotSaved(format!(
                    "{bytes} bytes, over the cap of {cap}"
                )))
            }
        }
    }

    async fn not_saved(
        &mut self,
        store: &Store,
        lease: &Lease,
        turn: i64,
        reason: String,
    ) -> orchestrator_store::Result<TurnCheckpoint> {
        if !self.refused {
            store
                .append_event(
                    lease,
                    EventKind::CheckpointNotSaved,
                    json!({"turn": turn, "reason": reason, "base": self.base}),
                )
                .await?;
            store.pin_to_this_host(lease, &reason).await?;
            self.refused = true;
        }
        Ok(TurnCheckpoint::NotSaved(reason))
    }
}
