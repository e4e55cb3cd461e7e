//! Capturing a checkpoint: the workspace's files as git would see them after `git add -A`, read
//! through `openat2` beneath the workspace, as a patch against the base. What a capture costs is
//! kept to what changed where it can be: the `Capturer` keeps the stat of the files it read so the
//! next capture reads only what changed, reads the base's tree once (a base never changes) and the
//! tracked paths again only when the index file changed, writes a tree only for a directory whose
//! entries are not the base's (every other one is the base's own tree, by id), and makes the patch
//! from the changed paths alone. After a file tool's call, a capture looks at the paths it named
//! (`Capturer::capture_paths`) instead of walking the workspace.

use super::*;

mod named;
mod trees;

use trees::{BaseTree, Changes, write_changed_tree};

/// Captures `workspace`'s difference from `base` (a full commit id): `None` when the workspace
/// holds the base exactly. Blocking.
pub fn capture(workspace: &Path, base: &str) -> Result<Option<Patch>> {
    match Capturer::new(workspace, base)?.capture(None)? {
        Captured::Changed(patch) => Ok(Some(patch)),
        Captured::Clean { .. } | Captured::Unchanged => Ok(None),
    }
}
/// The git tree of `workspace`'s files as a capture sees them, and whether that is the base's own
/// (`base`, a full commit id): what a workspace found on disk is compared with before it is used.
/// Blocking.
pub fn tree_of(workspace: &Path, base: &str) -> Result<(String, bool)> {
    match Capturer::new(workspace, base)?.capture(None)? {
        Captured::Changed(patch) => Ok((patch.tree, false)),
        Captured::Clean { tree } => Ok((tree, true)),
        Captured::Unchanged => Err(CheckpointError::Interrupted(
            "a capture with no last tree said unchanged".into(),
        )),
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
    /// Each file's stat and blob id when it was last hashed, and the last whole capture that
    /// found it (a file no longer there is forgotten).
    cache: HashMap<Vec<u8>, (StatKey, Oid, u64)>,
    /// Whole captures made: what the cache's entries are marked with.
    generation: u64,
    /// The base's files and directories, read at the first capture.
    base_tree: Option<BaseTree>,
    /// The tracked paths and the stat of the index file they were read with.
    tracked: Option<(Option<StatKey>, Tracked)>,
    /// The last capture's difference from the base, by path (`None`: deleted): where a capture
    /// of a few named paths starts from. `None` until a capture succeeds.
    changes: Option<Changes>,
    /// The most bytes of changed files one capture reads (each file's size is checked before it
    /// is opened): what an agent's files can make the daemon hold is bounded by this, whatever
    /// they are (a 200 MB log, a 1 GiB sparse file).
    cap: u64,
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
            generation: 0,
            base_tree: None,
            tracked: None,
            changes: None,
            cap: orchestrator_store::DEFAULT_CHECKPOINT_CAP,
        })
    }

    /// The most bytes of changed files a capture reads; past it, the capture is refused with
    /// [`CheckpointError::TooLarge`] before the file that would pass it is read.
    pub fn with_cap(mut self, cap: u64) -> Self {
        self.cap = cap;
        self
    }

    /// Captures the workspace; `Unchanged` when its tree is `last_tree` (the patch is then not
    /// made at all). Blocking.
    pub fn capture(&mut self, last_tree: Option<&str>) -> Result<Captured> {
        self.capture_with(last_tree, None)
    }

    /// Captures the workspace when only `paths` (relative to it, as the file system has them)
    /// may have changed since the last capture: they are looked at, not the whole workspace, so
    /// the cost follows what changed. Falls back to a whole capture when there is no last one,
    /// or a path is one this cannot settle alone (a directory, a `.gitignore`, a path through a
    /// link), or a changed file read again is not what it was. Blocking.
    pub fn capture_paths(
        &mut self,
        last_tree: Option<&str>,
        paths: &[Vec<u8>],
    ) -> Result<Captured> {
        self.capture_with(last_tree, Some(paths))
    }

    fn capture_with(
        &mut self,
        last_tree: Option<&str>,
        paths: Option<&[Vec<u8>]>,
    ) -> Result<Captured> {
        let repo = open_repository(&self.workspace)?;
        let odb = repo.odb()?;
        // Objects this capture makes (blobs of changed files, trees) stay in memory: the
        // workspace's object store is the agent's, and a daemon that wrote into it would write
        // wherever the agent's links lead.
        let _scratch = odb.add_new_mempack_backend(1000)?;
        let base_tree = repo.find_commit(self.base)?.tree()?;
        let started = SystemTime::now();
        let root = open_root(&self.workspace)?;
        if self.base_tree.is_none() {
            self.base_tree = Some(BaseTree::read(&base_tree)?);
        }
        let base = self.base_tree.take().unwrap_or_default();
        let last = self.changes.take();
        let changes = match (paths, last) {
            (Some(paths), Some(last)) => {
                match self.update(&repo, &base, &root, started, last, paths) {
                    Ok(Some(changes)) => Ok(changes),
                    Ok(None) => self.walk_changes(&repo, &base, &root, started),
                    Err(e) => Err(e),
                }
            }
            _ => self.walk_changes(&repo, &base, &root, started),
        };
        let written = changes.and_then(|changes| {
            let id = write_changed_tree(&repo, &base, &changes)?;
            // The patch is the diff of two trees that hold the changed paths only (as the base
            // has them, and as they are now): the same patch as the whole trees' diff, made
            // without walking every entry of both.
            let before: Changes = changes
                .keys()
                .map(|path| (path.clone(), base.files.get(path).copied()))
                .collect();
            let empty = BaseTree::default();
            let from = write_changed_tree(&repo, &empty, &before)?;
            let to = write_changed_tree(&repo, &empty, &changes)?;
            self.changes = Some(changes);
            Ok((id, from, to))
        });
        self.base_tree = Some(base);
        let (tree_id, from, to) = written?;
        let tree_text = tree_id.to_string();
        if last_tree == Some(tree_text.as_str()) {
            return Ok(Captured::Unchanged);
        }
        if tree_id == base_tree.id() {
            return Ok(Captured::Clean { tree: tree_text });
        }
        // The diff looks up each file's attributes (its diff driver), which reads the index when
        // the workspace has none: an empty one in memory instead, as the workspace's index (the
        // agent's staging) is not what a checkpoint holds, and reading it costs as much as the
        // repository is large.
        repo.set_index(&mut git2::Index::new()?)?;
        let (bytes, files) = diff_patch(&repo, &repo.find_tree(from)?, &repo.find_tree(to)?)?;
        Ok(Captured::Changed(Patch {
            bytes,
            tree: tree_text,
            files,
        }))
    }
}
impl Capturer {
    /// The workspace's difference from the base, from a walk of all of it: each file read
    /// through the cache of what was hashed before, each new or changed one hashed and its blob
    /// kept in the capture's in-memory store.
    fn walk_changes(
        &mut self,
        repo: &Repository,
        base: &BaseTree,
        root: &OwnedFd,
        started: SystemTime,
    ) -> Result<Changes> {
        let tracked = self.tracked(repo, base, root);
        let files = Walk::files(repo, root, base, &tracked.1);
        self.tracked = Some(tracked);
        let files = files?;
        self.generation += 1;
        let mut changes = Changes::new();
        let mut read_bytes: u64 = 0;
        let mut found_in_base = 0;
        let mut present = HashSet::with_capacity(files.len());
        for file in files {
            let Some(entry) = self.entry_of(repo, base, root, &file, started, &mut read_bytes)?
            else {
                continue;
            };
            let in_base = base.files.get(&file.path);
            if in_base.is_some() {
                found_in_base += 1;
            }
            if in_base != Some(&entry) {
                changes.insert(file.path.clone(), Some(entry));
            }
            present.insert(file.path);
        }
        let generation = self.generation;
        self.cache.retain(|_, (_, _, seen)| *seen == generation);
        // Deleted: the base's files the walk did not find (looked for only when some are gone).
        if found_in_base < base.files.len() {
            for path in base.files.keys() {
                if !present.contains(path) {
                    changes.insert(path.clone(), None);
                }
            }
        }
        Ok(changes)
    }

    /// The blob (or gitlink) id and mode of one file the walk or a named path found; `None` when
    /// it went away since it was listed.
    fn entry_of(
        &mut self,
        repo: &Repository,
        base: &BaseTree,
        root: &OwnedFd,
        file: &FileAt,
        started: SystemTime,
        read_bytes: &mut u64,
    ) -> Result<Option<(Oid, u32)>> {
        Ok(Some(match &file.kind {
            Kind::Gitlink(oid) => (*oid, MODE_GITLINK),
            Kind::Link(target) => (repo.blob(target)?, MODE_LINK),
            Kind::File { exec, stat } => {
                let key = StatKey::of(stat);
                let base_oid = base.files.get(&file.path).map(|(oid, _)| *oid);
                let generation = self.generation;
                let cached = self.cache.get_mut(&file.path).filter(|(k, _, _)| *k == key);
                let oid = match cached {
                    // Unchanged since the last read and equal to the base: the base's blob is in
                    // the repository already.
                    Some((_, oid, seen)) if Some(*oid) == base_oid => {
                        *seen = generation;
                        *oid
                    }
                    _ => {
                        let Some(oid) = self.read_blob(repo, root, &file.path, stat, read_bytes)?
                        else {
                            // Gone, or no longer a file, since the listing.
                            return Ok(None);
                        };
                        if !racy(stat, started) {
                            self.cache
                                .insert(file.path.clone(), (key, oid, self.generation));
                        }
                        oid
                    }
                };
                (oid, if *exec { MODE_EXEC } else { MODE_FILE })
            }
        }))
    }

    /// Reads the file at `path` (listed with `stat`) into the capture's store, counted against
    /// the cap; its blob id, or `None` when it is gone or no longer a file.
    fn read_blob(
        &self,
        repo: &Repository,
        root: &OwnedFd,
        path: &[u8],
        stat: &FileStat,
        read_bytes: &mut u64,
    ) -> Result<Option<Oid>> {
        // Checked before the file is opened: its size as listed, and again as read (read_file
        // stops past the cap), against what is left.
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        let left = self.cap.saturating_sub(*read_bytes);
        if size > left {
            return Err(self.too_large(path, size, *read_bytes));
        }
        let Some(bytes) = read_file(root, path, left)? else {
            return Ok(None);
        };
        *read_bytes += bytes.len() as u64;
        // Kept in the capture's in-memory store even when it is the base's: written or not,
        // the tree that names it and the patch find it.
        Ok(Some(repo.blob(&bytes)?))
    }

    /// The tracked paths: the base's, and the index's (a file the agent added with `git add -f`),
    /// read again only when the index file's stat changed. An index that cannot be read counts as
    /// the base's.
    fn tracked(
        &mut self,
        repo: &Repository,
        base: &BaseTree,
        root: &OwnedFd,
    ) -> (Option<StatKey>, Tracked) {
        let index_key = nix::sys::stat::fstatat(
            root,
            OsStr::new(".git/index"),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .ok()
        .map(|st| StatKey::of(&st));
        // `None` as the kept key: not to be trusted, read again.
        if let Some((key, tracked)) = self.tracked.take()
            && key.is_some()
            && key == index_key
        {
            return (key, tracked);
        }
        {
            let mut paths: HashSet<Vec<u8>> = base.files.keys().cloned().collect();
            if let Ok(index) = repo.index() {
                paths.extend(index.iter().map(|e| e.path));
            }
            let mut dirs = HashSet::new();
            for path in &paths {
                let mut at = path.as_slice();
                while let Some(slash) = at.iter().rposition(|b| *b == b'/') {
                    at = &at[..slash];
                    if !dirs.insert(at.to_vec()) {
                        break;
                    }
                }
            }
            // An index written just before it was read may be written again unseen by its stat
            // (see `racy`): such an index is read again next time.
            let key = index_key.filter(|_| {
                let index = nix::sys::stat::fstatat(
                    root,
                    OsStr::new(".git/index"),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                );
                index.is_ok_and(|st| !racy(&st, SystemTime::now()))
            });
            (key, Tracked { paths, dirs })
        }
    }

    fn too_large(&self, path: &[u8], size: u64, read_before: u64) -> CheckpointError {
        CheckpointError::TooLarge(format!(
            "{} is {size} bytes, and a checkpoint reads at most {} bytes of changed files \
             ({read_before} read before it)",
            String::from_utf8_lossy(path),
            self.cap
        ))
    }
}
/// A file hashed just after it was last changed may change again without its metadata showing it
/// (a file system stamps times from a coarse clock): such a file is read again next time. Times
/// with nanoseconds come from a clock of a few milliseconds at most, so a change more than
/// [`RACY_NS`] before the capture started is safe to trust; a file system that keeps whole
/// seconds only (no nanoseconds) gets the second before as well, as git does.
fn racy(stat: &FileStat, started: SystemTime) -> bool {
    let start = started
        .duration_since(UNIX_EPOCH)
        .map(|d| (d.as_secs() as i64, i64::from(d.subsec_nanos())))
        .unwrap_or((i64::MAX, 0));
    let late = |secs: i64, nanos: i64| {
        if nanos == 0 {
            secs >= start.0 - 1
        } else {
            (secs as i128) * 1_000_000_000 + nanos as i128
                >= (start.0 as i128) * 1_000_000_000 + start.1 as i128 - RACY_NS
        }
    };
    late(stat.st_mtime, stat.st_mtime_nsec) || late(stat.st_ctime, stat.st_ctime_nsec)
}
/// How close to a capture's start a change must be to count as racy (see [`racy`]).
const RACY_NS: i128 = 100_000_000;
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
/// The paths git tracks (never ignored), and the directories they are in.
#[derive(Debug)]
struct Tracked {
    paths: HashSet<Vec<u8>>,
    dirs: HashSet<Vec<u8>>,
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
    /// The files of the workspace that a checkpoint holds, opened through its descriptor.
    fn files(
        repo: &Repository,
        root: &OwnedFd,
        base: &BaseTree,
        tracked: &Tracked,
    ) -> Result<Vec<FileAt>> {
        let mut walk = Walk {
            repo,
            root,
            base: &base.files,
            tracked: &tracked.paths,
            tracked_dirs: &tracked.dirs,
            files: Vec::new(),
        };
        walk.dir(Vec::new())?;
        Ok(walk.files)
    }

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
