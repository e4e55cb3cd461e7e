//! Opening a pull request from a PR attempt through GitHub's Git Data API: no clone, no push
//! credentials, no git transport, only the REST token.
//!
//! [`prepare_tree`] applies the attempt's patch to its base commit in the local repository (objects
//! only: no worktree, index or ref is touched) and lists what the new tree changes: each path with
//! its mode and blob, a deletion as a path without one. [`GitHub::open_pull`] then makes GitHub hold
//! the same tree, object by object:
//!
//! ```text
//!   blobs (POST git/blobs, base64) ─▶ tree on the base's tree (POST git/trees) ─▶ commit with the
//!   base as parent (POST git/commits) ─▶ branch (POST git/refs) ─▶ pull request (POST pulls)
//! ```
//!
//! Git names objects by their content, so every id GitHub answers is checked against the id the
//! local repository computed: a blob or a tree GitHub stored differently (a lost byte, a mode
//! dropped) stops the work before a pull request shows it. Binary files, deletions, renames (a
//! deletion and an addition), executable bits and symlinks come through byte for byte.
//!
//! A retry after a timeout must not open a second pull request. The branch name is derived from the
//! attempt and the store, and the body carries a hidden marker naming both: a pull request from the
//! branch whose body holds the marker is the one opened before, and a branch that already holds
//! exactly the attempt's tree is reused. A branch holding anything else is refused, never
//! overwritten. A marked pull request that was closed is reported as closed: it is not reopened,
//! and no other is opened in its place, since a person closed it for a reason only a person can
//! take back.

use crate::BoxFuture;
use std::path::Path;

use base64::Engine;
use git2::{Delta, DiffOptions, FileMode, ObjectType, Repository};
use serde::Deserialize;
use serde_json::json;

use crate::client::{ApiError, ApiResult, GitHub, Method};
use crate::error::{Error, Result};
use crate::models::{PullRequest, RepoRef};

/// One path of the new tree that differs from the base's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeChange {
    /// Slash-separated, from the repository's top.
    pub path: String,
    /// Git's mode as GitHub writes it: `100644`, `100755`, `120000` (a symlink) or `160000` (a
    /// submodule).
    pub mode: String,
    /// The blob (or, for a submodule, the commit) the path holds; `None` when it is deleted.
    pub sha: Option<String>,
}

impl TreeChange {
    fn kind(&self) -> &'static str {
        if self.mode == "160000" {
            "commit"
        } else {
            "blob"
        }
    }
}

/// The tree an attempt makes of its base, computed locally.
#[derive(Debug, Clone)]
pub struct PreparedTree {
    pub base_commit: String,
    pub base_tree: String,
    /// The id of the base's tree with the patch applied.
    pub tree: String,
    /// What differs from the base, in path order.
    pub changes: Vec<TreeChange>,
    /// The content of every blob the changes name, by id.
    pub blobs: Vec<(String, Vec<u8>)>,
}

/// Applies `patch` to the tree of `base_commit` in the repository at `repo_dir` and lists the
/// changes. Writes objects only (the new blobs and trees), never a worktree file, the index or a
/// ref.
pub fn prepare_tree(repo_dir: &Path, base_commit: &str, patch: &[u8]) -> Result<PreparedTree> {
    let repo = Repository::discover(repo_dir).map_err(|e| Error::NotAWorktree {
        path: repo_dir.to_owned(),
        reason: e.message().to_owned(),
    })?;
    let base = repo
        .revparse_single(base_commit)
        .and_then(|o| o.peel_to_commit())
        .map_err(|cause| Error::UnknownBase {
            base: base_commit.to_owned(),
            cause,
        })?;
    let base_tree = base.tree()?;
    let diff = git2::Diff::from_buffer(patch).map_err(Error::MalformedPatch)?;
    let mut index = repo.apply_to_tree(&base_tree, &diff, None)?;
    let tree_id = index.write_tree_to(&repo)?;
    let tree = repo.find_tree(tree_id)?;
    let mut options = DiffOptions::new();
    // A file that became a symlink is one entry with a new mode, not a deletion and an addition of
    // one path.
    options.include_typechange(true);
    let changed = repo.diff_tree_to_tree(Some(&base_tree), Some(&tree), Some(&mut options))?;
    let mut changes = Vec::new();
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    for delta in changed.deltas() {
        let (file, deleted) = match delta.status() {
            Delta::Deleted => (delta.old_file(), true),
            _ => (delta.new_file(), false),
        };
        let path = file
            .path()
            .and_then(Path::to_str)
            .ok_or_else(|| {
                Error::Git(git2::Error::from_str(
                    "a changed path is not UTF-8, which GitHub's API cannot name",
                ))
            })?
            .to_owned();
        let mode = format!("{:o}", u32::from(file.mode()));
        let sha = (!deleted).then(|| file.id().to_string());
        if !deleted && file.mode() != FileMode::Commit {
            let id = file.id();
            if !blobs.iter().any(|(b, _)| *b == id.to_string()) {
                let blob = repo.find_blob(id)?;
                blobs.push((id.to_string(), blob.content().to_vec()));
            }
        }
        changes.push(TreeChange { path, mode, sha });
    }
    Ok(PreparedTree {
        base_commit: base.id().to_string(),
        base_tree: base_tree.id().to_string(),
        tree: tree_id.to_string(),
        changes,
        blobs,
    })
}

/// The git object id of `content` as a blob: what GitHub must answer for it.
pub fn blob_id(content: &[u8]) -> Result<String> {
    Ok(git2::Oid::hash_object(ObjectType::Blob, content)?.to_string())
}

/// What [`GitHub::open_pull`] is asked to open.
#[derive(Debug, Clone)]
pub struct PullSpec<'a> {
    pub repo: &'a RepoRef,
    /// The branch to create in `repo` (without `refs/heads/`).
    pub branch: &'a str,
    /// The branch to merge into; `None` for the repository's default branch.
    pub base_branch: Option<&'a str>,
    pub title: &'a str,
    /// Must contain `marker`.
    pub body: &'a str,
    /// A hidden marker that only this pull request's body holds.
    pub marker: &'a str,
    pub draft: bool,
    pub commit_message: &'a str,
    /// How an older version marked the same attempt's pull request, if it may have opened one.
    pub legacy: Option<LegacyMarker<'a>>,
}

/// The branch and marker of an older version, which named only the attempt's number: another
/// store's attempt of the same number carries the same, so a pull request that holds them counts
/// as this attempt's only when its number is one the caller knows it opened (the store's record of
/// its own writes).
#[derive(Debug, Clone)]
pub struct LegacyMarker<'a> {
    pub branch: &'a str,
    pub marker: &'a str,
    /// The pull requests the caller's records say it opened for the attempt with this marker.
    pub numbers: &'a [u64],
}

/// How the pull request came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PullOutcome {
    /// The branch and the pull request were created now.
    Opened,
    /// The branch held the attempt's tree already (an earlier call that got no answer); the pull
    /// request was created now.
    BranchReused,
    /// A pull request with the marker existed already: nothing was written.
    Found,
    /// A pull request with the marker existed and is closed (or merged): nothing was written, and
    /// it is neither reopened nor opened again.
    Closed,
}

/// An opened (or found) pull request.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OpenedPull {
    pub number: u64,
    pub url: String,
    pub branch: String,
    pub base_branch: String,
    pub commit: String,
    pub tree: String,
    pub draft: bool,
    /// Whether it was merged (only a closed one can be).
    pub merged: bool,
    pub outcome: PullOutcome,
}

#[derive(Deserialize)]
pub(crate) struct Sha {
    pub(crate) sha: String,
}

#[derive(Deserialize)]
struct GitRef {
    object: Sha,
}

#[derive(Deserialize)]
pub(crate) struct GitCommit {
    pub(crate) sha: String,
    pub(crate) tree: Sha,
    #[serde(default)]
    pub(crate) parents: Vec<Sha>,
}

/// Who a commit names as its author and committer, and when (RFC 3339).
#[derive(Debug, Clone, Copy)]
pub struct CommitIdentity<'a> {
    pub name: &'a str,
    pub email: &'a str,
    pub date: &'a str,
}

#[derive(Deserialize)]
struct Repo {
    default_branch: String,
}

impl GitHub {
    /// The repository's default branch (`main`, `master`, ...).
    pub fn default_branch<'a>(&'a self, repo: &'a RepoRef) -> BoxFuture<'a, ApiResult<String>> {
        Box::pin(self.default_branch_unboxed(repo))
    }

    async fn default_branch_unboxed(&self, repo: &RepoRef) -> ApiResult<String> {
        let found: Repo = self
            .get_json(&format!("/repos/{repo}"), &format!("repository {repo}"))
            .await?;
        Ok(found.default_branch)
    }

    /// Makes `repo` hold `tree` on a new branch and opens a pull request from it; see the module
    /// documentation for the steps and for why calling it again after an error is safe.
    pub fn open_pull<'a>(
        &'a self,
        tree: &'a PreparedTree,
        spec: &'a PullSpec<'a>,
    ) -> BoxFuture<'a, ApiResult<OpenedPull>> {
        Box::pin(self.open_pull_unboxed(tree, spec))
    }

    async fn open_pull_unboxed(
        &self,
        tree: &PreparedTree,
        spec: &PullSpec<'_>,
    ) -> ApiResult<OpenedPull> {
        let repo = spec.repo;
        if !spec.body.contains(spec.marker) {
            return Err(ApiError::Invalid {
                what: format!("the pull request for {repo}"),
                message: "the body must contain its marker".to_owned(),
            });
        }
        let what = format!("the pull request from {} on {repo}", spec.branch);
        if let Some(found) = self.marked_pull(spec).await? {
            return Ok(found_again(found, tree, spec));
        }
        let base_branch = match spec.base_branch {
            Some(b) => b.to_owned(),
            None => self.default_branch(repo).await?,
        };
        let (commit, outcome) = match self.branch_head(repo, spec.branch).await? {
            Some(head) => {
                let existing: GitCommit = self
                    .get_json(
                        &format!("/repos/{repo}/git/commits/{head}"),
                        &format!("commit {head} of {repo}"),
                    )
                    .await?;
                if existing.tree.sha != tree.tree {
                    return Err(ApiError::Refused {
                        what,
                        message: format!(
                            "branch {} already exists on {repo} with other content (tree {}, not the attempt's {}); it is not overwritten: delete it, or open the pull request from another attempt",
                            spec.branch, existing.tree.sha, tree.tree
                        ),
                    });
                }
                (existing.sha, PullOutcome::BranchReused)
            }
            None => (self.push_tree(tree, spec).await?, PullOutcome::Opened),
        };
        let created: ApiResult<PullRequest> = self
            .write_json(
                Method::Post,
                &format!("/repos/{repo}/pulls"),
                &format!("opening {what}"),
                &json!({
                    "title": spec.title,
                    "head": spec.branch,
                    "base": base_branch,
                    "body": spec.body,
                    "draft": spec.draft,
                    "maintainer_can_modify": false,
                }),
            )
            .await;
        match created {
            Ok(pull) => {
                let mut done = opened(pull, tree, spec, outcome);
                done.commit = commit;
                Ok(done)
            }
            // "A pull request already exists for owner:branch", or no answer: made by an earlier
            // call (or this one) if a pull request from the branch carries the marker.
            Err(e @ (ApiError::Invalid { .. } | ApiError::WriteUncertain { .. })) => {
                match self.marked_pull(spec).await {
                    Ok(Some(found)) => Ok(found_again(found, tree, spec)),
                    _ => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The attempt's pull request, open or closed: one from `spec.branch` whose body holds the
    /// marker, else one an older version opened (see [`LegacyMarker`]). An open one wins over a
    /// closed one, should a person have opened another from the same branch.
    async fn marked_pull(&self, spec: &PullSpec<'_>) -> ApiResult<Option<PullRequest>> {
        let found = self
            .pull_from(spec.repo, spec.branch, |p| body_holds(p, spec.marker))
            .await?;
        match (&found, &spec.legacy) {
            (None, Some(legacy)) if !legacy.numbers.is_empty() => {
                self.pull_from(spec.repo, legacy.branch, |p| {
                    legacy.numbers.contains(&p.number) && body_holds(p, legacy.marker)
                })
                .await
            }
            _ => Ok(found),
        }
    }

    /// A pull request from `branch` that `wanted` accepts, open ones first.
    async fn pull_from(
        &self,
        repo: &RepoRef,
        branch: &str,
        wanted: impl Fn(&PullRequest) -> bool,
    ) -> ApiResult<Option<PullRequest>> {
        let pulls: Vec<PullRequest> = self
            .get_list(
                &format!(
                    "/repos/{repo}/pulls?state=all&head={}:{}",
                    repo.owner, branch
                ),
                &format!("the pull requests from {branch} on {repo}"),
            )
            .await?;
        let mut ours = pulls
            .into_iter()
            .filter(|p| p.head.name == branch && wanted(p));
        let first = ours.next();
        Ok(match first {
            Some(p) if p.state != "open" => Some(ours.find(|p| p.state == "open").unwrap_or(p)),
            other => other,
        })
    }

    /// The commit a branch points at, or `None` when there is no such branch.
    pub(crate) async fn branch_head(
        &self,
        repo: &RepoRef,
        branch: &str,
    ) -> ApiResult<Option<String>> {
        match self
            .get_json::<GitRef>(
                &format!("/repos/{repo}/git/ref/heads/{branch}"),
                &format!("branch {branch} of {repo}"),
            )
            .await
        {
            Ok(found) => Ok(Some(found.object.sha)),
            Err(ApiError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Uploads the blobs, the tree and the commit, checking each id, and creates the branch;
    /// returns the commit.
    async fn push_tree(&self, tree: &PreparedTree, spec: &PullSpec<'_>) -> ApiResult<String> {
        let repo = spec.repo;
        let commit = self
            .upload_commit(tree, repo, spec.commit_message, None)
            .await?;
        let created: ApiResult<serde_json::Value> = self
            .write_json(
                Method::Post,
                &format!("/repos/{repo}/git/refs"),
                &format!("creating branch {} on {repo}", spec.branch),
                &json!({"ref": format!("refs/heads/{}", spec.branch), "sha": commit}),
            )
            .await;
        match created {
            Ok(_) => Ok(commit),
            // Made by an earlier call whose answer was lost: fine if it points at this commit.
            Err(e) => match self.branch_head(repo, spec.branch).await {
                Ok(Some(head)) if head == commit => Ok(commit),
                _ => Err(e),
            },
        }
    }

    /// Uploads `tree`'s blobs and tree and a commit of it on its base, checking each id GitHub
    /// answers against the one computed here; returns the commit. `date` (RFC 3339) fixes the
    /// commit's author and committer date: the same commit made again is then the very same
    /// object, which a try again after a kill relies on. Without it GitHub uses the time of the
    /// request.
    pub(crate) async fn upload_commit(
        &self,
        tree: &PreparedTree,
        repo: &RepoRef,
        message: &str,
        date: Option<&CommitIdentity<'_>>,
    ) -> ApiResult<String> {
        for (sha, content) in &tree.blobs {
            let what = format!("uploading blob {sha} to {repo}");
            let stored: Sha = self
                .write_json(
                    Method::Post,
                    &format!("/repos/{repo}/git/blobs"),
                    &what,
                    &json!({
                        "content": base64::engine::general_purpose::STANDARD.encode(content),
                        "encoding": "base64",
                    }),
                )
                .await?;
            if stored.sha != *sha {
                return Err(ApiError::Refused {
                    what,
                    message: format!("GitHub stored it as {}, so its bytes differ", stored.sha),
                });
            }
        }
        let entries: Vec<serde_json::Value> = tree
            .changes
            .iter()
            .map(|c| json!({"path": c.path, "mode": c.mode, "type": c.kind(), "sha": c.sha}))
            .collect();
        let what = format!("creating the attempt's tree on {repo}");
        let made: Sha = self
            .write_json(
                Method::Post,
                &format!("/repos/{repo}/git/trees"),
                &what,
                &json!({"base_tree": tree.base_tree, "tree": entries}),
            )
            .await
            .map_err(|e| base_missing(e, tree, repo))?;
        if made.sha != tree.tree {
            return Err(ApiError::Refused {
                what,
                message: format!(
                    "GitHub's tree is {}, not the attempt's {}: the pull request would not hold what the gates checked",
                    made.sha, tree.tree
                ),
            });
        }
        let mut body = json!({
            "message": message,
            "tree": tree.tree,
            "parents": [tree.base_commit],
        });
        if let Some(who) = date {
            let person = json!({"name": who.name, "email": who.email, "date": who.date});
            body["author"] = person.clone();
            body["committer"] = person;
        }
        let commit: GitCommit = self
            .write_json(
                Method::Post,
                &format!("/repos/{repo}/git/commits"),
                &format!("creating the attempt's commit on {repo}"),
                &body,
            )
            .await
            .map_err(|e| base_missing(e, tree, repo))?;
        if commit.tree.sha != tree.tree {
            return Err(ApiError::Refused {
                what: format!("the commit {} on {repo}", commit.sha),
                message: format!("it holds tree {}, not {}", commit.tree.sha, tree.tree),
            });
        }
        Ok(commit.sha)
    }
}

/// A 404 or 422 on the tree or the commit most often means GitHub lacks the attempt's base.
fn base_missing(e: ApiError, tree: &PreparedTree, repo: &RepoRef) -> ApiError {
    let hint = format!(
        "is the attempt's base commit {} on {repo}? Push it, or record the attempt against a commit GitHub has",
        tree.base_commit
    );
    match e {
        ApiError::Invalid { what, message } => ApiError::Invalid {
            what,
            message: format!("{message}; {hint}"),
        },
        ApiError::NotFound { what } => ApiError::Invalid {
            what,
            message: format!("not found; {hint}"),
        },
        other => other,
    }
}

fn body_holds(pull: &PullRequest, marker: &str) -> bool {
    pull.body.as_deref().is_some_and(|b| b.contains(marker))
}

/// A pull request found by its marker: found if open, closed otherwise.
fn found_again(pull: PullRequest, tree: &PreparedTree, spec: &PullSpec<'_>) -> OpenedPull {
    let outcome = if pull.state == "open" {
        PullOutcome::Found
    } else {
        PullOutcome::Closed
    };
    opened(pull, tree, spec, outcome)
}

fn opened(
    pull: PullRequest,
    tree: &PreparedTree,
    spec: &PullSpec<'_>,
    outcome: PullOutcome,
) -> OpenedPull {
    OpenedPull {
        number: pull.number,
        url: pull.html_url,
        // The pull request's own branch: an older version's, when it was found by its marker.
        branch: pull.head.name,
        base_branch: pull.base.name,
        commit: pull.head.sha,
        tree: tree.tree.clone(),
        draft: pull.draft.unwrap_or(spec.draft),
        merged: pull.merged.unwrap_or(false) || pull.merged_at.is_some(),
        outcome,
    }
}
