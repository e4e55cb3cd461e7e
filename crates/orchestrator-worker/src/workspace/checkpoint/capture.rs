//! Capturing a checkpoint: the workspace's files as git would see them after `git add -A`, read
//! through `openat2` beneath the workspace, as a patch against the base; the `Capturer` keeps the
//! stat of the files it read so the next capture reads only what changed.

use super::*;

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
    cache: HashMap<Vec<u8>, (StatKey, Oid)>,
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
        let mut read_bytes: u64 = 0;
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
                            // Checked before the file is opened: its size as listed, and again as
                            // read (read_file stops past the cap), against what is left.
                            let size = u64::try_from(stat.st_size).unwrap_or(0);
                            let left = self.cap.saturating_sub(read_bytes);
                            if size > left {
                                return Err(self.too_large(&file.path, size, read_bytes));
                            }
                            let Some(bytes) = read_file(&root, &file.path, left)? else {
                                // Gone, or no longer a file, since the listing.
                                continue;
                            };
                            read_bytes += bytes.len() as u64;
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
impl Capturer {
    fn too_large(&self, path: &[u8], size: u64, read_before: u64) -> CheckpointError {
        CheckpointError::TooLarge(format!(
            "{} is {size} bytes, and a checkpoint reads at most {} bytes of changed files \
             ({read_before} read before it)",
            String::from_utf8_lossy(path),
            self.cap
        ))
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
