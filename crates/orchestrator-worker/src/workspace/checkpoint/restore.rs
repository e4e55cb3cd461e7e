//! Restoring a checkpoint: its patch checked path by path, then applied onto a fresh checkout of
//! the base through `openat2` beneath the workspace; and the store's side of it (the latest
//! checkpoint of a task, the base it was taken at).

use super::*;

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
                write_sparse(std::fs::File::from(fd), blob.content())
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
/// Writes `bytes` to a new, empty file, leaving its runs of zeros (whole blocks) as holes: a file
/// the agent made sparse stays sparse, instead of taking its whole size on the disk of every
/// machine that restores it.
fn write_sparse(mut file: std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    const BLOCK: usize = 4096;
    for chunk in bytes.chunks(BLOCK) {
        if chunk.len() == BLOCK && chunk.iter().all(|b| *b == 0) {
            file.seek(SeekFrom::Current(BLOCK as i64))?;
        } else {
            file.write_all(chunk)?;
        }
    }
    // A file that ends in a hole gets its length.
    file.set_len(bytes.len() as u64)
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
