//! The rules `git apply --check` uses to decide whether a patch applies to a tree, reproduced over
//! a parsed [`git2::Diff`] and the base tree's blobs, for [`crate::preflight`].
//!
//! Why not `Repository::apply_to_tree`: libgit2 (1.9) only tries each hunk at the exact line its
//! header names, while git searches up and down the file for the hunk's context (an "offset"). A
//! base that gained three lines at the top of a file is the everyday case for a PR attempt, and
//! libgit2 refuses it where `git apply` and `git am` succeed. So libgit2 parses the patch and reads
//! the blobs, and the placing follows git's `apply.c` (`find_pos` and `match_fragment`, with
//! the defaults: no fuzz, no whitespace fixing).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use git2::{Delta, Diff, ErrorCode, ObjectType, Patch, Repository, Tree};

use crate::error::Result;

/// The file type bits of a git mode (regular file, symlink, submodule).
const TYPE_MASK: u32 = 0o170000;

/// Checks every file of `diff` in order against `tree`, as `git apply --check` on a clean checkout
/// of `tree` would; returns the paths that do not apply (empty when the whole patch applies).
pub(crate) fn conflicts(
    repo: &Repository,
    tree: &Tree<'_>,
    diff: &Diff<'_>,
) -> Result<Vec<String>> {
    // Paths an earlier file of the patch deleted or renamed away, and paths it created: git applies
    // a patch's files in order against one table, so a later file sees what an earlier one did.
    let mut removed: HashSet<PathBuf> = HashSet::new();
    let mut created: HashSet<PathBuf> = HashSet::new();
    let mut conflicts = Vec::new();
    for (i, delta) in diff.deltas().enumerate() {
        let old_path = delta.old_file().path().map(Path::to_path_buf);
        let new_path = delta.new_file().path().map(Path::to_path_buf);
        let status = delta.status();
        let creates = matches!(status, Delta::Added | Delta::Renamed | Delta::Copied);
        let display = new_path
            .as_ref()
            .or(old_path.as_ref())
            .map_or_else(String::new, |p| p.to_string_lossy().into_owned());

        let ok = (|| -> Result<bool> {
            // The preimage: the file this change starts from must be in the base, as a file of the
            // same type, and not already deleted or renamed away by this patch.
            let preimage = if status == Delta::Added {
                None
            } else {
                let Some(old) = &old_path else {
                    return Ok(false);
                };
                if removed.contains(old) || created.contains(old) {
                    return Ok(false);
                }
                let entry = match tree.get_path(old) {
                    Ok(entry) => entry,
                    Err(e) if e.code() == ErrorCode::NotFound => return Ok(false),
                    Err(e) => return Err(e.into()),
                };
                let mode = u32::try_from(entry.filemode()).unwrap_or(0);
                let expected = u32::from(delta.old_file().mode());
                // A pure rename names no mode; then only the kind of object is checked.
                if entry.kind() != Some(ObjectType::Blob)
                    || (expected != 0 && mode & TYPE_MASK != expected & TYPE_MASK)
                {
                    return Ok(false);
                }
                Some(entry.id())
            };
            // The postimage path must be free, unless this patch freed it.
            if creates {
                let Some(new) = &new_path else {
                    return Ok(false);
                };
                let in_base = match tree.get_path(new) {
                    Ok(_) => true,
                    Err(e) if e.code() == ErrorCode::NotFound => false,
                    Err(e) => return Err(e.into()),
                };
                if (in_base && !removed.contains(new)) || created.contains(new) {
                    return Ok(false);
                }
            }
            if delta.flags().is_binary() {
                // git applies a binary hunk only to the exact blob it was made from, which the full
                // index line names.
                return Ok(match preimage {
                    None => true,
                    Some(id) => !delta.old_file().id().is_zero() && id == delta.old_file().id(),
                });
            }
            let Some(patch) = Patch::from_diff(diff, i)? else {
                return Ok(true);
            };
            let before = match preimage {
                Some(id) => repo.find_blob(id)?.content().to_vec(),
                None => Vec::new(),
            };
            Ok(match apply_hunks(&before, &patch)? {
                None => false,
                // A deletion must remove the file's whole content ("removal patch leaves file
                // contents").
                Some(after) => status != Delta::Deleted || after.is_empty(),
            })
        })()?;

        if !ok {
            conflicts.push(display);
        }
        if matches!(status, Delta::Deleted | Delta::Renamed) {
            removed.extend(old_path);
        }
        if creates {
            created.extend(new_path);
        }
    }
    Ok(conflicts)
}

/// One hunk as git places it: the lines it expects and the lines it leaves.
struct Hunk {
    /// The 1-based line the hunk starts at in the file as already patched by earlier hunks: git's
    /// first guess.
    new_start: usize,
    preimage: Vec<Vec<u8>>,
    postimage: Vec<Vec<u8>>,
    /// A hunk starting at line 0 or 1 must match at the top of the file.
    match_beginning: bool,
    /// A hunk without trailing context must match at the end of the file.
    match_end: bool,
}

/// Applies the text hunks of `patch` to `content`; None when a hunk's context is nowhere to be
/// found.
fn apply_hunks(content: &[u8], patch: &Patch<'_>) -> Result<Option<Vec<u8>>> {
    let mut image: Vec<Vec<u8>> = content
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    for h in 0..patch.num_hunks() {
        let hunk = read_hunk(patch, h)?;
        let Some(at) = find_pos(&image, &hunk) else {
            return Ok(None);
        };
        image.splice(at..at + hunk.preimage.len(), hunk.postimage);
    }
    Ok(Some(image.concat()))
}

fn read_hunk(patch: &Patch<'_>, h: usize) -> Result<Hunk> {
    let (header, lines) = patch.hunk(h)?;
    let mut preimage: Vec<Vec<u8>> = Vec::new();
    let mut postimage: Vec<Vec<u8>> = Vec::new();
    let mut trailing = 0;
    for l in 0..lines {
        let line = patch.line_in_hunk(h, l)?;
        let content = line.content().to_vec();
        match line.origin() {
            ' ' => {
                preimage.push(content.clone());
                postimage.push(content);
                trailing += 1;
            }
            '-' => {
                preimage.push(content);
                trailing = 0;
            }
            '+' => {
                postimage.push(content);
                trailing = 0;
            }
            // "\ No newline at end of file": the line before it ends without a newline.
            '=' => {
                strip_newline(preimage.last_mut());
                strip_newline(postimage.last_mut());
            }
            '<' => strip_newline(preimage.last_mut()),
            '>' => strip_newline(postimage.last_mut()),
            _ => {}
        }
    }
    Ok(Hunk {
        new_start: usize::try_from(header.new_start()).unwrap_or(usize::MAX),
        preimage,
        postimage,
        match_beginning: header.old_start() <= 1,
        match_end: trailing == 0,
    })
}

fn strip_newline(line: Option<&mut Vec<u8>>) {
    if let Some(line) = line
        && line.last() == Some(&b'\n')
    {
        line.pop();
    }
}

/// git's `find_pos`: try the hunk's own line, then one line further on, one line back, two further
/// on, and so on until both ends of the file are reached.
fn find_pos(image: &[Vec<u8>], hunk: &Hunk) -> Option<usize> {
    if hunk.preimage.len() > image.len() {
        return None;
    }
    let start = if hunk.match_beginning {
        0
    } else if hunk.match_end {
        image.len() - hunk.preimage.len()
    } else {
        hunk.new_start.saturating_sub(1).min(image.len())
    };
    let matches = |at: usize| {
        (!hunk.match_beginning || at == 0)
            && (!hunk.match_end || at + hunk.preimage.len() == image.len())
            && image.get(at..at + hunk.preimage.len()) == Some(&hunk.preimage[..])
    };
    if matches(start) {
        return Some(start);
    }
    let (mut back, mut forward) = (start, start);
    while back > 0 || forward < image.len() {
        if forward < image.len() {
            forward += 1;
            if matches(forward) {
                return Some(forward);
            }
        }
        if back > 0 {
            back -= 1;
            if matches(back) {
                return Some(back);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search order is git's: forward first, then back, widening by one line each time.
    #[test]
    fn find_pos_prefers_the_nearest_match_forward_first() {
        let image: Vec<Vec<u8>> = ["x\n", "a\n", "x\n", "a\n", "x\n"]
            .iter()
            .map(|l| l.as_bytes().to_vec())
            .collect();
        let hunk = |new_start| Hunk {
            new_start,
            preimage: vec![b"a\n".to_vec()],
            postimage: Vec::new(),
            match_beginning: false,
            match_end: false,
        };
        assert_eq!(find_pos(&image, &hunk(3)), Some(3));
        assert_eq!(find_pos(&image, &hunk(2)), Some(1));
        assert_eq!(find_pos(&image, &hunk(5)), Some(3));
        let missing = Hunk {
            preimage: vec![b"b\n".to_vec()],
            ..hunk(1)
        };
        assert_eq!(find_pos(&image, &missing), None);
    }
}
