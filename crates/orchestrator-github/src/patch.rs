//! PR attempt patches: recording a worktree's changes against a base commit as a byte-exact git
//! patch, and checking ("preflight") that such a patch still applies to a base.
//!
//! Both operations are read-only as far as a person at the terminal can tell: they never move HEAD,
//! never write the index file and never touch a worktree file. The only writes are new objects
//! (blobs and trees) in the object database, which git ignores until something refers to them and
//! `git gc` prunes when nothing ever does.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use git2::{
    Delta, Diff, DiffFindOptions, DiffFormat, DiffOptions, Index, IndexAddOption, IndexTime, Oid,
    Repository,
};

use crate::apply;
use crate::error::{Error, Result};

/// A worktree's changes against a base commit, as a patch that `git apply --binary` reproduces
/// byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedPatch {
    /// The patch, in the format of `git diff --binary --full-index` (binary files as
    /// "GIT binary patch" hunks, renames as "rename from/to").
    pub patch: Vec<u8>,
    /// The full sha of the commit the patch is against.
    pub base_commit: String,
    /// The full sha of the tree the worktree held when recorded: the base with the patch applied.
    /// The gates that ran on this worktree ran on exactly this tree.
    pub tree_id: String,
    /// Every file the patch touches, in the patch's order.
    pub changed_files: Vec<ChangedFile>,
}

/// One file a patch touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedFile {
    /// The path after the change (for a deletion, the path that was deleted).
    pub path: PathBuf,
    pub status: FileStatus,
    /// Whether git treats either side as binary (the patch carries it as a binary hunk).
    pub binary: bool,
}

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileStatus {
    Added,
    Modified,
    Deleted,
    /// Moved from `from`, perhaps with edits (git's 50% similarity rule decides).
    Renamed {
        from: PathBuf,
    },
}

/// Whether a patch applies to a base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preflight {
    pub applies: bool,
    /// The paths whose changes do not apply (the path after the change; for a deletion, the path
    /// deleted); empty exactly when `applies` is true.
    pub conflicts: Vec<String>,
}

/// Records the staged, unstaged and untracked (not ignored) changes of the worktree at `repo_dir`
/// against `base`, any commit-ish (`HEAD`, a branch, a sha), leaving out the untracked files named
/// in `leave_out` (paths from the top of the worktree, as git names them; a tracked path there is
/// kept, since only untracked files are left out).
///
/// The worktree state becomes a tree through a copy of the index held in memory, so the repository's
/// own index file stays as it was; the patch is the diff from the base's tree to that tree.
pub fn record(repo_dir: &Path, base: &str, leave_out: &[String]) -> Result<RecordedPatch> {
    let repo = open_worktree(repo_dir)?;
    let base_commit = resolve_commit(&repo, base)?;
    let base_tree = repo.find_commit(base_commit)?.tree()?;
    let tree_id = worktree_tree(&repo, leave_out)?;
    let tree = repo.find_tree(tree_id)?;

    // Full ids in the index lines: `git apply` refuses a binary hunk without them, and they let
    // the preimage be checked exactly.
    let mut options = DiffOptions::new();
    options.show_binary(true).id_abbrev(40);
    let mut diff = repo.diff_tree_to_tree(Some(&base_tree), Some(&tree), Some(&mut options))?;
    diff.find_similar(Some(DiffFindOptions::new().renames(true)))?;

    let mut patch = Vec::new();
    diff.print(DiffFormat::Patch, |_delta, _hunk, line| {
        // Content and context lines come without their marker; headers, hunk headers, binary hunks
        // and "\ No newline at end of file" carry their whole text.
        if matches!(line.origin(), '+' | '-' | ' ') {
            patch.push(line.origin() as u8);
        }
        patch.extend_from_slice(line.content());
        true
    })?;

    // After printing, every delta's content has been loaded, so its binary flag is decided.
    let changed_files = diff.deltas().filter_map(changed_file).collect();
    Ok(RecordedPatch {
        patch,
        base_commit: base_commit.to_string(),
        tree_id: tree_id.to_string(),
        changed_files,
    })
}

/// Checks whether `patch` applies to the tree of `base` by the rules of `git apply --check` (hunks
/// may sit at an offset from their recorded lines; binary hunks need their exact preimage), without
/// touching any worktree or index: only the base's blobs are read.
pub fn preflight(repo_dir: &Path, patch: &[u8], base: &str) -> Result<Preflight> {
    let repo = Repository::open(repo_dir).map_err(|e| Error::NotAWorktree {
        path: repo_dir.to_owned(),
        reason: e.message().to_owned(),
    })?;
    let base_tree = repo.find_commit(resolve_commit(&repo, base)?)?.tree()?;
    let diff = Diff::from_buffer(patch).map_err(Error::MalformedPatch)?;
    // libgit2 reads text with no diff header as an empty patch; git calls it "No valid patches in
    // input". An empty buffer is the honest record of a clean worktree and applies anywhere.
    if diff.deltas().len() == 0 && !patch.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::MalformedPatch(git2::Error::from_str(
            "no file changes found in a non-empty patch",
        )));
    }
    let conflicts = apply::conflicts(&repo, &base_tree, &diff)?;
    Ok(Preflight {
        applies: conflicts.is_empty(),
        conflicts,
    })
}

fn open_worktree(repo_dir: &Path) -> Result<Repository> {
    let not_a_worktree = |reason: String| Error::NotAWorktree {
        path: repo_dir.to_owned(),
        reason,
    };
    let repo = Repository::open(repo_dir).map_err(|e| not_a_worktree(e.message().to_owned()))?;
    if repo.is_bare() {
        return Err(not_a_worktree("the repository is bare".to_owned()));
    }
    Ok(repo)
}

fn resolve_commit(repo: &Repository, base: &str) -> Result<Oid> {
    repo.revparse_single(base)
        .and_then(|object| object.peel_to_commit())
        .map(|commit| commit.id())
        .map_err(|cause| Error::UnknownBase {
            base: base.to_owned(),
            cause,
        })
}

/// Writes the worktree's current state (tracked files as they are on disk, untracked files that
/// .gitignore does not exclude, deletions) as a tree, the way `git add -A && git write-tree` would
/// with a scratch copy of the index.
fn worktree_tree(repo: &Repository, leave_out: &[String]) -> Result<Oid> {
    let real = repo.index()?;
    if real.has_conflicts() {
        return Err(Error::Unmerged);
    }
    // An entry whose mtime is not older than the index file is "racily clean": it may have been
    // edited in the same tick it was staged, with its size unchanged, so its stat data proves
    // nothing. git re-hashes such entries because it knows the index file's timestamp; an index in
    // memory has none, so libgit2 would trust the stat data. Clearing the entry's mtime makes the
    // comparison below hash the file instead.
    let index_written = std::fs::metadata(repo.path().join("index"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok());
    let tracked: std::collections::HashSet<Vec<u8>> = real.iter().map(|entry| entry.path).collect();
    let mut scratch = Index::new()?;
    for mut entry in real.iter() {
        let entry_time = (i64::from(entry.mtime.seconds()), entry.mtime.nanoseconds());
        let racy = index_written.is_none_or(|t| {
            let Ok(secs) = i64::try_from(t.as_secs()) else {
                return true;
            };
            entry_time >= (secs, t.subsec_nanos())
        });
        if racy {
            entry.mtime = IndexTime::new(0, 0);
        }
        scratch.add(&entry)?;
    }
    drop(real);

    // Attaching the scratch index to this handle (never to the file) is what lets it read the
    // worktree and the .gitignore rules; the handle is dropped when recording ends.
    repo.set_index(&mut scratch)?;
    // update_all drops entries whose files are gone and refreshes modified ones; add_all then adds
    // untracked files, honouring .gitignore (no FORCE), as `git add -A` does.
    scratch.update_all(["*"], None)?;
    scratch.add_all(["*"], IndexAddOption::DEFAULT, None)?;
    for path in leave_out {
        if !tracked.contains(path.as_bytes()) {
            scratch.remove_path(Path::new(path))?;
        }
    }
    Ok(scratch.write_tree_to(repo)?)
}

fn changed_file(delta: git2::DiffDelta<'_>) -> Option<ChangedFile> {
    let new_path = delta.new_file().path().map(Path::to_path_buf);
    let old_path = delta.old_file().path().map(Path::to_path_buf);
    let (path, status) = match delta.status() {
        Delta::Added => (new_path?, FileStatus::Added),
        Delta::Deleted => (old_path?, FileStatus::Deleted),
        Delta::Renamed => (new_path?, FileStatus::Renamed { from: old_path? }),
        // A copy only appears with copy detection, which is off; treat it as the addition it is.
        Delta::Copied => (new_path?, FileStatus::Added),
        Delta::Modified | Delta::Typechange => (new_path?, FileStatus::Modified),
        Delta::Unmodified
        | Delta::Ignored
        | Delta::Untracked
        | Delta::Unreadable
        | Delta::Conflicted => return None,
    };
    Some(ChangedFile {
        path,
        status,
        binary: delta.flags().is_binary(),
    })
}
