//! A task's tree of its own: when a task names a checkout in `worktree_of`, its workspace is a clone
//! of that checkout, made once when the task first runs. Two tasks on one repository then never
//! edit, gate or record attempts in one tree.
//!
//! It is a clone, not a `git worktree`: a linked worktree keeps its git directory (index, HEAD,
//! hooks, config) inside the source's `.git`, so an agent sandboxed to its workspace would need
//! write access to the checkout's `.git` to commit, and anything it wrote there (a hook, a config
//! key) would run in the person's checkout. A clone is whole inside the workspace. Objects are
//! copied, not hard-linked: a hard link shares the file with the source, so a sandboxed process
//! that changed one would change the person's repository too.

use super::git;
use std::path::{Path, PathBuf};

/// What [`ensure`] found or made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The commit the workspace's HEAD is on.
    pub head: String,
    /// Whether this call made the clone (`false`: an earlier attempt had made it).
    pub cloned: bool,
}

/// Makes `workspace` a clone of the checkout `source` unless it already is a git checkout (an
/// earlier attempt of the task made it; its work is kept). The clone is made beside the workspace
/// under a scratch name and renamed into place, so a process killed mid-clone leaves no half
/// workspace that a later attempt would take for a finished one. The clone starts at the source's
/// HEAD; the source's uncommitted changes are not carried over.
pub async fn ensure(source: &Path, workspace: &Path) -> Result<Prepared, String> {
    if workspace.join(".git").exists() {
        let head = head_of(workspace).await?;
        return Ok(Prepared {
            head,
            cloned: false,
        });
    }
    if let Ok(mut entries) = std::fs::read_dir(workspace)
        && entries.next().is_some()
    {
        return Err(format!(
            "the workspace {} is not empty and not a git checkout, so it is not cloned over; \
             empty or remove it, or give the task another workspace",
            workspace.display()
        ));
    }
    if !source.join(".git").exists() {
        return Err(format!(
            "{} (the task's worktree_of) is not a git checkout",
            source.display()
        ));
    }
    let (parent, name) = match (workspace.parent(), workspace.file_name()) {
        (Some(parent), Some(name)) => (parent, name.to_string_lossy().into_owned()),
        _ => {
            return Err(format!(
                "the workspace {} has no parent directory to clone into",
                workspace.display()
            ));
        }
    };
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    remove_leftovers(parent, &name);
    let scratch = parent.join(format!(
        ".{name}.partial-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let cloned = git(
        parent,
        &[
            "clone".as_ref(),
            "--quiet".as_ref(),
            "--no-hardlinks".as_ref(),
            source.as_os_str(),
            scratch.as_os_str(),
        ],
    )
    .await;
    if let Err(e) = cloned {
        let _ = std::fs::remove_dir_all(&scratch);
        return Err(format!(
            "cloning {} into {} failed: {e}",
            source.display(),
            workspace.display()
        ));
    }
    // A clone does not carry the checkout's own config; the identity commits are made with does,
    // so that `git commit` in the clone works as it would in the checkout.
    for key in ["user.name", "user.email"] {
        if let Ok(value) = git(source, &["config".as_ref(), "--get".as_ref(), key.as_ref()]).await {
            let value = value.trim();
            if !value.is_empty() {
                let _ = git(&scratch, &["config".as_ref(), key.as_ref(), value.as_ref()]).await;
            }
        }
    }
    // An empty directory in its place (made by hand, or by a sandbox's bind mount) is replaced.
    if workspace.is_dir() {
        let _ = std::fs::remove_dir(workspace);
    }
    if let Err(e) = std::fs::rename(&scratch, workspace) {
        let _ = std::fs::remove_dir_all(&scratch);
        return Err(format!(
            "cannot move the clone into {}: {e}",
            workspace.display()
        ));
    }
    Ok(Prepared {
        head: head_of(workspace).await?,
        cloned: true,
    })
}

/// Scratch clones of this workspace that a killed process left behind. Only the task's lease
/// holder clones into its workspace, so none of them is in use.
fn remove_leftovers(parent: &Path, name: &str) {
    let prefix = format!(".{name}.partial-");
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let stale: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    for path in stale {
        let _ = std::fs::remove_dir_all(path);
    }
}

async fn head_of(workspace: &Path) -> Result<String, String> {
    git(workspace, &["rev-parse".as_ref(), "HEAD".as_ref()])
        .await
        .map(|out| out.trim().to_owned())
        .map_err(|e| format!("reading the HEAD of {}: {e}", workspace.display()))
}
