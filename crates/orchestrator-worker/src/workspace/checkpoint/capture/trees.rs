//! The trees a capture writes: the base's read once, a state's written as the base's with its
//! changes made, a tree only for a directory no longer the base's.

use super::*;

/// A directory's entries as a tree holds them: name, object id and mode.
pub(super) type TreeEntries = Vec<(Vec<u8>, Oid, u32)>;
/// Git's mode of a tree entry that is a directory.
pub(super) const MODE_TREE: u32 = 0o040_000;

/// The base's files, and each of its directories' tree id and entries, read once per capturer.
#[derive(Debug, Default)]
pub(super) struct BaseTree {
    /// Blob (or gitlink) id and mode by path.
    pub(super) files: HashMap<Vec<u8>, (Oid, u32)>,
    /// Each directory's tree id and entries sorted by name; `""` is the root.
    pub(super) dirs: HashMap<Vec<u8>, (Oid, TreeEntries)>,
}

impl BaseTree {
    pub(super) fn read(tree: &Tree<'_>) -> Result<BaseTree> {
        let mut files = HashMap::new();
        let mut dirs: HashMap<Vec<u8>, (Oid, TreeEntries)> = HashMap::new();
        dirs.insert(Vec::new(), (tree.id(), Vec::new()));
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            let dir = dir.as_bytes().strip_suffix(b"/").unwrap_or(dir.as_bytes());
            let mode = entry.filemode() as u32;
            let name = entry.name_bytes().to_vec();
            let path = join(dir, &name);
            if entry.kind() == Some(ObjectType::Tree) {
                dirs.insert(path, (entry.id(), Vec::new()));
            } else {
                files.insert(path, (entry.id(), mode));
            }
            if let Some((_, entries)) = dirs.get_mut(dir) {
                entries.push((name, entry.id(), mode));
            }
            git2::TreeWalkResult::Ok
        })?;
        for (_, entries) in dirs.values_mut() {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
        }
        Ok(BaseTree { files, dirs })
    }
}

/// A state's difference from the base by path: the new blob (or gitlink) id and mode, or `None`
/// for a file the base has and the state has not.
pub(super) type Changes = std::collections::BTreeMap<Vec<u8>, EntryChange>;

/// An entry as a change sets it: its id and mode, or `None` when it is gone.
pub(super) type EntryChange = Option<(Oid, u32)>;

/// `path`'s directory and name (`""` for a path at the root).
pub(super) fn split_path(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(slash) => (&path[..slash], &path[slash + 1..]),
        None => (b"", path),
    }
}

/// Writes a tree of `entries` (to the capture's in-memory store) as git formats one: each entry
/// as its octal mode, its name and its id, in git's order (a directory sorts as if its name ended
/// in `/`). Its entries' objects are known to exist (the base's, or written by this capture), so
/// none is looked up again, as a tree builder would for each.
pub(super) fn write_tree(repo: &Repository, entries: &TreeEntries) -> Result<Oid> {
    let mut sorted: Vec<&(Vec<u8>, Oid, u32)> = entries.iter().collect();
    let key = |(name, _, mode): &(Vec<u8>, Oid, u32)| {
        let mut key = name.clone();
        if *mode == MODE_TREE {
            key.push(b'/');
        }
        key
    };
    sorted.sort_by_cached_key(|e| key(e));
    let mut bytes = Vec::with_capacity(entries.len() * 40);
    for (name, oid, mode) in sorted {
        bytes.extend_from_slice(format!("{mode:o} ").as_bytes());
        bytes.extend_from_slice(name);
        bytes.push(0);
        bytes.extend_from_slice(oid.as_bytes());
    }
    Ok(repo.odb()?.write(ObjectType::Tree, &bytes)?)
}

/// The tree of the base with `changes` made: only the directories on the way to a changed path
/// are looked at, and of those only the ones whose entries are no longer the base's are written
/// (to the capture's in-memory store); every other one is the base's tree, by id. So the work
/// follows what changed, not the repository's size.
pub(super) fn write_changed_tree(
    repo: &Repository,
    base: &BaseTree,
    changes: &Changes,
) -> Result<Oid> {
    let root_id = base.dirs.get(&Vec::new()).map(|(id, _)| *id);
    if changes.is_empty()
        && let Some(id) = root_id
    {
        return Ok(id);
    }
    // The changed files of each directory on the way, by directory.
    let mut files: HashMap<Vec<u8>, Vec<(&[u8], EntryChange)>> = HashMap::new();
    files.insert(Vec::new(), Vec::new());
    for (path, entry) in changes {
        let (dir, name) = split_path(path);
        files.entry(dir.to_vec()).or_default().push((name, *entry));
        let mut at = dir;
        while !at.is_empty() {
            at = split_path(at).0;
            if files.contains_key(at) {
                break;
            }
            files.insert(at.to_vec(), Vec::new());
        }
    }
    // Deepest first: a directory's subdirectories have their ids when it is written.
    let mut order: Vec<Vec<u8>> = files.keys().cloned().collect();
    order.sort_by_key(|d| {
        std::cmp::Reverse(if d.is_empty() {
            0
        } else {
            1 + d.iter().filter(|b| **b == b'/').count()
        })
    });
    // Each directory's subdirectories done so far: name, and tree id (`None`: empty, gone).
    type Done = Vec<(Vec<u8>, Option<Oid>)>;
    let mut subdirs: HashMap<Vec<u8>, Done> = HashMap::new();
    for dir in order {
        let mut entries = base
            .dirs
            .get(&dir)
            .map(|(_, entries)| entries.clone())
            .unwrap_or_default();
        for (name, entry) in files.remove(&dir).unwrap_or_default() {
            entries.retain(|(n, _, _)| n.as_slice() != name);
            if let Some((oid, mode)) = entry {
                entries.push((name.to_vec(), oid, mode));
            }
        }
        for (name, id) in subdirs.remove(&dir).unwrap_or_default() {
            match id {
                Some(id) => {
                    entries.retain(|(n, _, _)| *n != name);
                    entries.push((name, id, MODE_TREE));
                }
                // Empty now: gone, unless a file of that name took its place.
                None => entries.retain(|(n, _, mode)| !(*n == name && *mode == MODE_TREE)),
            }
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let id = match base.dirs.get(&dir) {
            Some((id, same)) if *same == entries => Some(*id),
            _ if entries.is_empty() && !dir.is_empty() => None,
            _ => Some(write_tree(repo, &entries)?),
        };
        if dir.is_empty() {
            return id.ok_or_else(|| {
                CheckpointError::Interrupted("the state's root tree was not written".into())
            });
        }
        let (parent, name) = split_path(&dir);
        subdirs
            .entry(parent.to_vec())
            .or_default()
            .push((name.to_vec(), id));
    }
    Err(CheckpointError::Interrupted(
        "the state's root tree was never written".into(),
    ))
}
