//! A capture of the paths a file tool named (`Capturer::capture_paths`): the last capture's
//! difference from the base brought up to date for those paths alone, or a word that a whole
//! capture must settle it.

use super::trees::{Changes, split_path};
use super::*;

/// A path a file tool named, and what it is now (`None`: not part of the state).
type NamedPath = (Vec<u8>, Option<FileAt>);
/// The target of the link at `path` beneath the workspace.
fn read_link_beneath(root: &OwnedFd, path: &[u8]) -> Result<Vec<u8>> {
    let (parent, name) = split_path(path);
    let dir = open_beneath(
        root,
        parent,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )?;
    nix::fcntl::readlinkat(&dir, OsStr::from_bytes(name))
        .map(OsString::into_vec)
        .map_err(|e| io_error(path, e))
}

/// The stat of `path` beneath the workspace, not following a link at its end; `None` when it or
/// a directory on its way does not exist. A link on the way is an error.
fn stat_beneath(root: &OwnedFd, path: &[u8]) -> Result<Option<FileStat>> {
    let (parent, name) = split_path(path);
    let dir = match open_beneath(
        root,
        parent,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    ) {
        Ok(dir) => dir,
        Err(CheckpointError::Io { source, .. })
            if matches!(
                source.raw_os_error().map(Errno::from_raw),
                Some(Errno::ENOENT | Errno::ENOTDIR)
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    match nix::sys::stat::fstatat(
        &dir,
        OsStr::from_bytes(name),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    ) {
        Ok(stat) => Ok(Some(stat)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(io_error(path, e)),
    }
}

impl Capturer {
    /// The last capture's difference from the base, `last`, brought up to date for `paths`, the
    /// only ones that may have changed since; `None` when a whole capture must settle it (see
    /// [`Capturer::capture_paths`]). Every other changed file is read again into this capture's
    /// store (the tree and the patch need its blob), and must be what it was.
    pub(super) fn update(
        &mut self,
        repo: &Repository,
        base: &BaseTree,
        root: &OwnedFd,
        started: SystemTime,
        mut changes: Changes,
        paths: &[Vec<u8>],
    ) -> Result<Option<Changes>> {
        let tracked = self.tracked(repo, base, root);
        let found = self.at_paths(repo, base, root, &tracked.1, paths);
        self.tracked = Some(tracked);
        let Some(found) = found? else {
            return Ok(None);
        };
        let mut read_bytes: u64 = 0;
        let mut fresh = HashSet::new();
        for (path, file) in found {
            let entry = match file {
                Some(file) => self.entry_of(repo, base, root, &file, started, &mut read_bytes)?,
                None => None,
            };
            if base.files.get(&path) == entry.as_ref() {
                changes.remove(&path);
            } else {
                changes.insert(path.clone(), entry);
            }
            fresh.insert(path);
        }
        for (path, entry) in &changes {
            let Some((oid, mode)) = entry else { continue };
            if fresh.contains(path) {
                continue;
            }
            let again = match *mode {
                MODE_FILE | MODE_EXEC => {
                    let stat = match stat_beneath(root, path)? {
                        Some(stat)
                            if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT
                                == SFlag::S_IFREG =>
                        {
                            stat
                        }
                        _ => return Ok(None),
                    };
                    self.read_blob(repo, root, path, &stat, &mut read_bytes)?
                }
                MODE_LINK => match read_link_beneath(root, path) {
                    Ok(target) => Some(repo.blob(&target)?),
                    Err(_) => return Ok(None),
                },
                _ => Some(*oid),
            };
            if again != Some(*oid) {
                // Changed since it was hashed, by something that did not say so.
                return Ok(None);
            }
        }
        Ok(Some(changes))
    }

    /// What each of `paths` is now (`None`: not part of the state: gone, ignored, inside a
    /// nested repository or a submodule), or `None` for all when one of them needs a whole
    /// capture: a path that is not plainly relative or names `.git`, a directory, a
    /// `.gitignore` (it changes what else is ignored), a path through a link.
    fn at_paths(
        &self,
        repo: &Repository,
        base: &BaseTree,
        root: &OwnedFd,
        tracked: &Tracked,
        paths: &[Vec<u8>],
    ) -> Result<Option<Vec<NamedPath>>> {
        let mut found = Vec::new();
        for path in paths {
            let parts: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
            let plain = parts.iter().all(|p| {
                !p.is_empty() && *p != b"." && *p != b".." && !p.eq_ignore_ascii_case(b".git")
            });
            if !plain || parts.last().is_some_and(|n| *n == b".gitignore") {
                return Ok(None);
            }
            let mut outside = false;
            for end in 1..parts.len() {
                let dir = parts[..end].join(&b'/');
                if matches!(base.files.get(&dir), Some((_, MODE_GITLINK))) {
                    outside = true;
                    break;
                }
                match stat_beneath(root, &join(&dir, b".git")) {
                    Ok(Some(_)) => {
                        outside = true;
                        break;
                    }
                    Ok(None) => {}
                    Err(_) => return Ok(None),
                }
                if !tracked.dirs.contains(&dir)
                    && repo.is_path_ignored(Path::new(OsStr::from_bytes(&dir)))?
                {
                    outside = true;
                    break;
                }
            }
            if outside {
                found.push((path.clone(), None));
                continue;
            }
            let stat = match stat_beneath(root, path) {
                Ok(stat) => stat,
                Err(_) => return Ok(None),
            };
            let Some(stat) = stat else {
                found.push((path.clone(), None));
                continue;
            };
            if !tracked.paths.contains(path)
                && repo.is_path_ignored(Path::new(OsStr::from_bytes(path)))?
            {
                found.push((path.clone(), None));
                continue;
            }
            let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
            let file = if kind == SFlag::S_IFREG {
                Some(FileAt {
                    path: path.clone(),
                    kind: Kind::File {
                        exec: stat.st_mode & 0o100 != 0,
                        stat,
                    },
                })
            } else if kind == SFlag::S_IFLNK {
                Some(FileAt {
                    path: path.clone(),
                    kind: Kind::Link(read_link_beneath(root, path)?),
                })
            } else if kind == SFlag::S_IFDIR {
                return Ok(None);
            } else {
                None
            };
            found.push((path.clone(), file));
        }
        Ok(Some(found))
    }
}
