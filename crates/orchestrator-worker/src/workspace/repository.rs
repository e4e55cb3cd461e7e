//! A repository task's workspace: `<workspaces dir>/task-<id>`, a clone of the local mirror at
//! the commit the task is to start from, made by the worker that claims the task.
//!
//! Which commit: the task's recorded base when an earlier attempt recorded one (the workspace of
//! a task that moved to this machine is made where the task started, so its checkpoint applies),
//! else the ref's commit in the freshly fetched mirror. The commit is checked out on a local
//! branch named after the task, `orchestrator/task-<id>`, so an agent's commits land on a branch
//! it can name and push, and HEAD is never detached under it.
//!
//! The clone is made beside its place under a scratch name and renamed into place (a killed
//! process leaves no half workspace), with `--no-hardlinks` (objects shared with the mirror
//! would let a sandboxed process change the mirror), and its `origin` is set to the public URL:
//! no credential is in its config, and nothing in it names the mirror.
//!
//! A workspace found in place (an earlier attempt on this machine made it) is answered as
//! [`Preparation::Found`] with no git run in it (it is the agent's, and its `.git` is untrusted);
//! the caller uses it only when its files are the task's latest checkpoint (the task may have run
//! elsewhere since), else it is discarded and made again. A directory in the place that is not a
//! checkout (a removal killed halfway) is discarded and the workspace made again.

use super::mirror::{self, MirrorError, MirrorState, Want};
use super::{WorkspaceSettings, git, remove_tree, task_dir};
use orchestrator_types::{RepositoryRef, TaskId};
use std::path::{Path, PathBuf};

/// How the workspace came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preparation {
    /// Cloned now at the ref's commit: a first start.
    Cloned,
    /// Cloned now at the base an earlier attempt recorded: the task started elsewhere (or its
    /// workspace was removed), so whatever it saved of its work (a checkpoint) is to be applied
    /// on top by the caller.
    ClonedAtRecordedBase,
    /// Found in place, made by an earlier attempt on this machine, with its work.
    Found,
}

impl Preparation {
    /// The `outcome` of the `workspace_prepared` event.
    pub fn outcome(self) -> &'static str {
        match self {
            Preparation::Cloned | Preparation::ClonedAtRecordedBase => "cloned",
            Preparation::Found => "found",
        }
    }
}

/// A prepared workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub path: PathBuf,
    /// The commit the workspace was made at: the task's base.
    pub base: String,
    pub preparation: Preparation,
    /// What the mirror needed; `None` when the workspace was found and the mirror not asked.
    pub mirror: Option<MirrorState>,
}

/// Why a workspace could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    /// The repository could not be reached or fetched, or the disk refused: trying again later may
    /// work. Retryable.
    #[error("{0}")]
    Retryable(String),
    /// The ref or the commit does not exist, or the place is taken by something else. Not
    /// retryable.
    #[error("{0}")]
    Final(String),
}

/// Makes (or finds) the workspace of task `task` on `repository`. `recorded_base` is the base an
/// earlier attempt recorded, if any.
pub async fn prepare(
    settings: &WorkspaceSettings,
    task: TaskId,
    repository: &RepositoryRef,
    recorded_base: Option<&str>,
) -> Result<Prepared, PrepareError> {
    let path = task_dir(&settings.dir, task);
    if path.join(".git").exists() {
        let base = match recorded_base {
            Some(base) => base.to_owned(),
            // Made by an attempt whose event was not written: read its HEAD, as the clone of a
            // checkout does (hooks and fsmonitor off).
            None => git(&path, &["rev-parse".as_ref(), "HEAD".as_ref()])
                .await
                .map(|out| out.trim().to_owned())
                .map_err(|e| {
                    PrepareError::Final(format!("reading the HEAD of {}: {e}", path.display()))
                })?,
        };
        return Ok(Prepared {
            path,
            base,
            preparation: Preparation::Found,
            mirror: None,
        });
    }
    // Not a checkout but not empty: what a removal killed halfway left (only this daemon makes
    // `task-<id>` in its workspaces directory, and only the lease holder uses it), so it goes and
    // the workspace is made again.
    if let Ok(mut entries) = std::fs::read_dir(&path)
        && entries.next().is_some()
    {
        tracing::warn!(%task, path = %path.display(), "a half-removed workspace is removed and made again");
        super::discard(&path).map_err(|e| {
            PrepareError::Retryable(format!(
                "{} is left half removed and cannot be removed: {e}",
                path.display()
            ))
        })?;
    }
    std::fs::create_dir_all(&settings.dir).map_err(|e| {
        PrepareError::Retryable(format!("cannot create {}: {e}", settings.dir.display()))
    })?;
    let mirror_dir = mirror::mirror_path(&settings.mirrors, &repository.url);
    let token = settings.token_for(repository);
    let want = Want {
        url: &repository.url,
        git_ref: repository.git_ref.as_deref(),
        base: recorded_base,
        token: token.as_deref(),
    };
    // Held until the workspace is cloned, so no fetch moves or prunes a ref under the clone.
    let _lock = mirror::lock(&mirror_dir)
        .await
        .map_err(PrepareError::Retryable)?;
    let (base, state) = mirror::ensure(&mirror_dir, &want)
        .await
        .map_err(|e| match e {
            MirrorError::Fetch(e) => PrepareError::Retryable(e),
            MirrorError::UnknownRef(e) => PrepareError::Final(e),
        })?;
    clone_at(&mirror_dir, &path, &repository.url, &base, task).await?;
    Ok(Prepared {
        path,
        base,
        preparation: if recorded_base.is_some() {
            Preparation::ClonedAtRecordedBase
        } else {
            Preparation::Cloned
        },
        mirror: Some(state),
    })
}

/// Clones the mirror into `path` (through a scratch name) at `base`, on the task's branch, with
/// `origin` set to `url`.
async fn clone_at(
    mirror: &Path,
    path: &Path,
    url: &str,
    base: &str,
    task: TaskId,
) -> Result<(), PrepareError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(PrepareError::Final(format!(
            "{} has no parent directory",
            path.display()
        )));
    };
    let name = name.to_string_lossy().into_owned();
    remove_leftovers(parent, &name);
    let scratch = parent.join(format!(
        ".{name}.partial-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let made = async {
        git(
            parent,
            &[
                "clone".as_ref(),
                "--quiet".as_ref(),
                "--no-hardlinks".as_ref(),
                "--no-checkout".as_ref(),
                "--".as_ref(),
                mirror.as_os_str(),
                scratch.as_os_str(),
            ],
        )
        .await
        .map_err(|e| PrepareError::Retryable(format!("cloning the mirror failed: {e}")))?;
        let object = format!("{base}^{{commit}}");
        if git(
            &scratch,
            &["cat-file".as_ref(), "-e".as_ref(), object.as_ref()],
        )
        .await
        .is_err()
        {
            // The base is in the mirror but on no ref (fetched by its id): ask for it by id, which
            // the mirror's upload-pack allows for this one call.
            git(
                &scratch,
                &[
                    "-c".as_ref(),
                    "uploadpack.allowAnySHA1InWant=true".as_ref(),
                    "fetch".as_ref(),
                    "--quiet".as_ref(),
                    "origin".as_ref(),
                    base.as_ref(),
                ],
            )
            .await
            .map_err(|e| {
                PrepareError::Final(format!("the commit {base} is not in the mirror: {e}"))
            })?;
        }
        let branch = format!("orchestrator/task-{}", task.0);
        git(
            &scratch,
            &[
                "checkout".as_ref(),
                "--quiet".as_ref(),
                "-B".as_ref(),
                branch.as_ref(),
                base.as_ref(),
                "--".as_ref(),
            ],
        )
        .await
        .map_err(|e| PrepareError::Retryable(format!("checking out {base} failed: {e}")))?;
        git(
            &scratch,
            &[
                "remote".as_ref(),
                "set-url".as_ref(),
                "origin".as_ref(),
                url.as_ref(),
            ],
        )
        .await
        .map_err(|e| PrepareError::Retryable(format!("setting the origin failed: {e}")))?;
        Ok::<(), PrepareError>(())
    }
    .await;
    if let Err(e) = made {
        let _ = remove_tree(&scratch);
        return Err(e);
    }
    // An empty directory in its place (a sandbox's bind mount) is replaced.
    if path.is_dir() {
        let _ = std::fs::remove_dir(path);
    }
    std::fs::rename(&scratch, path).map_err(|e| {
        let _ = remove_tree(&scratch);
        PrepareError::Retryable(format!(
            "cannot move the clone into {}: {e}",
            path.display()
        ))
    })
}

/// Scratch clones of this workspace that a killed process left behind. Only the task's lease
/// holder clones into its workspace, so none of them is in use.
fn remove_leftovers(parent: &Path, name: &str) {
    let prefix = format!(".{name}.partial-");
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = remove_tree(&entry.path());
        }
    }
}
