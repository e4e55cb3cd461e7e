//! Opening, writing and removing files through the workspace's directory descriptor, so that no
//! path is ever followed out of the workspace, whatever an agent's processes do meanwhile.
//!
//! [`Workspace::resolve`](crate::Workspace::resolve) checks a path when a tool is called, but an
//! agent's sandboxed command can swap a directory for a symlink (`renameat2(RENAME_EXCHANGE)`)
//! between that check and the open; reopening by name would then read the daemon's API token or
//! write into its home. So every open here is `openat2` relative to a descriptor of the workspace
//! root with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`: the kernel refuses, at the moment of the
//! open, any resolution that leaves the root (an absolute symlink, a `..` that climbs out, a
//! `/proc/self/fd` magic link). A refused open is an `EXDEV` error, reported as a path that leads
//! outside the workspace.
//!
//! Writes open the parent directory the same way and then work with `*at` calls relative to that
//! descriptor (`openat(O_CREAT | O_EXCL | O_NOFOLLOW)`, `renameat`, `unlinkat`, `mkdirat`), which
//! never follow the last component. A directory that an agent moves elsewhere after it was opened
//! can only be somewhere the agent could already write.

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::Mode;

/// A directory descriptor that every path below is opened relative to.
#[derive(Debug)]
pub(crate) struct Anchor {
    root: OwnedFd,
}

/// One entry of a directory read through its descriptor.
#[derive(Debug, Clone)]
pub struct DirEntry {
    pub name: std::ffi::OsString,
    /// `None` when the file system does not say and a `stat` of the entry failed.
    pub kind: Option<EntryKind>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

fn resolve_flags() -> ResolveFlag {
    ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS
}

fn errno(e: Errno) -> io::Error {
    match e {
        Errno::EXDEV => io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the path leads outside the workspace (through a symlink or a moved directory)",
        ),
        Errno::ELOOP => io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the path goes through a symlink loop or a magic link",
        ),
        Errno::ENOSYS => io::Error::other(
            "this kernel has no openat2 (Linux 5.6 or later is needed to confine file tools)",
        ),
        other => io::Error::from(other),
    }
}

/// `rel` as a path relative to the anchor: "." for the root, never absolute, never `..`.
fn relative(path: &Path) -> io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a confined path must be relative, without '..'",
                ));
            }
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    Ok(out)
}

impl Anchor {
    /// Opens `dir` (an absolute, canonical directory) as the anchor.
    pub(crate) fn open(dir: &Path) -> io::Result<Self> {
        let root = nix::fcntl::open(
            dir,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io::Error::from)?;
        Ok(Anchor { root })
    }

    fn open_at(&self, rel: &Path, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
        let path = relative(rel)?;
        // openat2 refuses flags an O_PATH open does not take (EINVAL), O_NOCTTY among them.
        let extra = if flags.contains(OFlag::O_PATH) {
            OFlag::O_CLOEXEC
        } else {
            OFlag::O_CLOEXEC | OFlag::O_NOCTTY
        };
        let how = OpenHow::new()
            .flags(flags | extra)
            .mode(mode)
            .resolve(resolve_flags());
        openat2(self.root.as_fd(), &path, how).map_err(errno)
    }

    /// Opens a regular file below the root for reading. Opening does not block on a pipe, and
    /// anything but a regular file (a directory, a pipe, a device) is refused on the descriptor
    /// itself, so what was checked is what is read.
    pub(crate) fn open_read(&self, rel: &Path) -> io::Result<File> {
        let fd = self.open_at(rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Mode::empty())?;
        let file = File::from(fd);
        let kind = file.metadata()?.file_type();
        if kind.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "it is a directory",
            ));
        }
        if !kind.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file (a device, socket or pipe)",
            ));
        }
        // Back to blocking reads for a regular file; O_NONBLOCK only kept the open from hanging.
        nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(OFlag::empty()))
            .map_err(io::Error::from)?;
        Ok(file)
    }

    /// The metadata of what `rel` names (following symlinks that stay below the root).
    pub(crate) fn metadata(&self, rel: &Path) -> io::Result<Metadata> {
        File::from(self.open_at(rel, OFlag::O_PATH, Mode::empty())?).metadata()
    }

    /// Whether `rel` names something below the root now (the last component itself, not what a
    /// symlink there points at).
    pub(crate) fn is_beneath(&self, rel: &Path) -> bool {
        self.open_at(rel, OFlag::O_PATH | OFlag::O_NOFOLLOW, Mode::empty())
            .is_ok()
    }

    /// The whole content of a file below the root.
    pub(crate) fn read(&self, rel: &Path) -> io::Result<Vec<u8>> {
        let mut file = self.open_read(rel)?;
        let mut out = Vec::new();
        io::Read::read_to_end(&mut file, &mut out)?;
        Ok(out)
    }

    /// The entries of a directory below the root, without `.` and `..`.
    pub(crate) fn read_dir(&self, rel: &Path) -> io::Result<Vec<DirEntry>> {
        let fd = self.open_at(rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty())?;
        let mut dir = nix::dir::Dir::from_fd(fd).map_err(io::Error::from)?;
        let dir_fd = dir.as_fd().try_clone_to_owned()?;
        let mut out = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(io::Error::from)?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
            if name == "." || name == ".." {
                continue;
            }
            let kind = match entry.file_type() {
                Some(nix::dir::Type::File) => Some(EntryKind::File),
                Some(nix::dir::Type::Directory) => Some(EntryKind::Dir),
                Some(nix::dir::Type::Symlink) => Some(EntryKind::Symlink),
                Some(_) => Some(EntryKind::Other),
                None => stat_kind(dir_fd.as_fd(), &name),
            };
            out.push(DirEntry { name, kind });
        }
        Ok(out)
    }

    /// The parent directory of `rel`, created (each missing level with `mkdirat` in the level
    /// above, opened beneath the root) when `create` is true, and the last component's name.
    fn parent(&self, rel: &Path, create: bool) -> io::Result<(OwnedFd, std::ffi::OsString)> {
        let path = relative(rel)?;
        let name = path
            .file_name()
            .filter(|n| *n != ".")
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path has no name"))?
            .to_owned();
        let parent = path.parent().unwrap_or(Path::new(""));
        let mut prefix = PathBuf::new();
        let mut fd = self.open_at(
            Path::new("."),
            OFlag::O_PATH | OFlag::O_DIRECTORY,
            Mode::empty(),
        )?;
        for component in parent.components() {
            prefix.push(component);
            match self.open_at(&prefix, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()) {
                Ok(next) => fd = next,
                Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
                    match nix::sys::stat::mkdirat(
                        fd.as_fd(),
                        component.as_os_str(),
                        Mode::from_bits_truncate(0o777),
                    ) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(errno(e)),
                    }
                    fd =
                        self.open_at(&prefix, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty())?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok((fd, name))
    }

    /// Writes `bytes` to `rel` atomically: a temporary file created with `O_EXCL` in the parent
    /// directory's descriptor, flushed, then renamed over the target in that same directory. The
    /// permissions of an existing file are kept; a new one gets 0666 less the umask; missing
    /// parent directories are created.
    pub(crate) fn write_atomic(&self, rel: &Path, bytes: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let (dir, name) = self.parent(rel, true)?;
        let existing = self.metadata(rel).ok().filter(Metadata::is_file);
        let (tmp_name, mut file) = create_temp(dir.as_fd())?;
        let written = (|| {
            file.write_all(bytes)?;
            if let Some(meta) = &existing {
                file.set_permissions(std::fs::Permissions::from_mode(
                    meta.permissions().mode() & 0o7777,
                ))?;
            }
            file.sync_all()?;
            nix::fcntl::renameat(
                dir.as_fd(),
                tmp_name.as_os_str(),
                dir.as_fd(),
                name.as_os_str(),
            )
            .map_err(errno)
        })();
        if written.is_err() {
            let _ = nix::unistd::unlinkat(
                dir.as_fd(),
                tmp_name.as_os_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
        written
    }

    /// Removes the file (or symlink) `rel` names, never what a symlink points at.
    pub(crate) fn remove_file(&self, rel: &Path) -> io::Result<()> {
        let (dir, name) = self.parent(rel, false)?;
        nix::unistd::unlinkat(
            dir.as_fd(),
            name.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
        .map_err(errno)
    }

    /// Removes the directory `rel` names if it is empty.
    pub(crate) fn remove_empty_dir(&self, rel: &Path) -> io::Result<()> {
        let (dir, name) = self.parent(rel, false)?;
        nix::unistd::unlinkat(
            dir.as_fd(),
            name.as_os_str(),
            nix::unistd::UnlinkatFlags::RemoveDir,
        )
        .map_err(errno)
    }
}

fn stat_kind(dir: BorrowedFd<'_>, name: &OsStr) -> Option<EntryKind> {
    let stat = nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    let kind =
        nix::sys::stat::SFlag::from_bits_truncate(stat.st_mode) & nix::sys::stat::SFlag::S_IFMT;
    Some(match kind {
        nix::sys::stat::SFlag::S_IFREG => EntryKind::File,
        nix::sys::stat::SFlag::S_IFDIR => EntryKind::Dir,
        nix::sys::stat::SFlag::S_IFLNK => EntryKind::Symlink,
        _ => EntryKind::Other,
    })
}

/// A new file with a random name in `dir`, created exclusively and without following a symlink,
/// so a name an agent planted is never opened.
fn create_temp(dir: BorrowedFd<'_>) -> io::Result<(std::ffi::OsString, File)> {
    use rand_name::random_suffix;
    for _ in 0..16 {
        let name = std::ffi::OsString::from(format!(".orchestrator-write-{}", random_suffix()));
        match nix::fcntl::openat(
            dir,
            name.as_os_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o666),
        ) {
            Ok(fd) => return Ok((name, File::from(fd))),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(errno(e)),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free temporary name in the directory",
    ))
}

mod rand_name {
    //! Random enough names for temporary files: collisions only cost a retry, since creation is
    //! exclusive.
    use std::sync::atomic::{AtomicU64, Ordering};

    static COUNTER: AtomicU64 = AtomicU64::new(0);

    pub(super) fn random_suffix() -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        format!("{:x}{:x}{n:x}", std::process::id(), nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_below_and_refuses_what_leads_out() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("token"), "secret").unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join("src")).unwrap();
        std::fs::write(ws.path().join("src/a.txt"), "inside").unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("out")).unwrap();
        std::os::unix::fs::symlink("src", ws.path().join("in")).unwrap();
        let anchor = Anchor::open(ws.path()).unwrap();
        assert_eq!(anchor.read(Path::new("src/a.txt")).unwrap(), b"inside");
        assert_eq!(anchor.read(Path::new("in/a.txt")).unwrap(), b"inside");
        let err = anchor.read(Path::new("out/token")).unwrap_err();
        assert!(err.to_string().contains("outside the workspace"), "{err}");
        assert!(anchor.write_atomic(Path::new("out/new"), b"x").is_err());
        assert!(!outside.path().join("new").exists());
        anchor
            .write_atomic(Path::new("deep/er/b.txt"), b"made")
            .unwrap();
        assert_eq!(
            std::fs::read(ws.path().join("deep/er/b.txt")).unwrap(),
            b"made"
        );
        let names: Vec<_> = anchor
            .read_dir(Path::new("src"))
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.kind))
            .collect();
        assert_eq!(names, [("a.txt".into(), Some(EntryKind::File))]);
        assert!(anchor.read_dir(Path::new("out")).is_err());
        anchor.remove_file(Path::new("in")).unwrap();
        assert!(
            ws.path().join("src/a.txt").exists(),
            "the link, not its target"
        );
        assert!(relative(Path::new("../x")).is_err());
        assert!(relative(Path::new("/etc")).is_err());
    }
}
