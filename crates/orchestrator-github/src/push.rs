//! Adding a commit to an existing branch (a pull request's head) through the Git Data API, the
//! way a follow-up round on a pull request delivers its work: a new commit whose parent is the
//! head the work started on, never a new pull request, never a forced update.
//!
//! ```text
//!   blobs ─▶ tree on the head's tree ─▶ commit with the head as parent and fixed dates
//!         ─▶ PATCH git/refs/heads/B {sha, force: false}
//! ```
//!
//! Exactly once across a kill: the commit's author, committer and dates are fixed by the caller
//! before the first try, so making it again makes the very same object (git names objects by
//! their content), and the branch gets one commit, not two. Before anything is made, the branch's
//! head is read: at the start head, the commit is made and the branch moved forward; at a commit
//! of the work's tree whose parent is the start head, an earlier try got there (found); anywhere
//! else, someone else pushed meanwhile, and nothing is forced: the caller is told where the branch
//! is now. GitHub refuses a move that is not a fast-forward (422) when someone pushes between the
//! read and the move; that is told the same way.

use crate::BoxFuture;
use crate::client::{ApiError, ApiResult, GitHub, Method};
use crate::models::RepoRef;
use crate::pull::{CommitIdentity, GitCommit, PreparedTree};
use serde_json::json;

/// What to push where.
#[derive(Debug, Clone, Copy)]
pub struct PushSpec<'a> {
    pub repo: &'a RepoRef,
    /// The branch to move (without `refs/heads/`).
    pub branch: &'a str,
    pub message: &'a str,
    /// The commit's author and committer, with the date fixed before the first try.
    pub identity: CommitIdentity<'a>,
}

/// How a push ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Pushed {
    /// The branch moved forward to the new commit.
    Pushed { commit: String },
    /// An earlier try had pushed the same work: the branch's head is its commit.
    Found { commit: String },
    /// Someone else moved the branch since the work started: nothing was pushed.
    Moved { head: String },
}

impl GitHub {
    /// Adds `tree` (prepared on the head the work started on, its base) to `spec.branch` as one
    /// commit, only forward; see the module's comment.
    pub fn push_to_branch<'a>(
        &'a self,
        tree: &'a PreparedTree,
        spec: &'a PushSpec<'a>,
    ) -> BoxFuture<'a, ApiResult<Pushed>> {
        Box::pin(self.push_to_branch_unboxed(tree, spec))
    }

    async fn push_to_branch_unboxed(
        &self,
        tree: &PreparedTree,
        spec: &PushSpec<'_>,
    ) -> ApiResult<Pushed> {
        let repo = spec.repo;
        let what = format!("branch {} of {repo}", spec.branch);
        let Some(head) = self.branch_head(repo, spec.branch).await? else {
            return Err(ApiError::Refused {
                what,
                message: "it no longer exists (deleted, or the pull request was merged)".into(),
            });
        };
        if head != tree.base_commit {
            return self.settled(repo, tree, head).await;
        }
        let commit = self
            .upload_commit(tree, repo, spec.message, Some(&spec.identity))
            .await?;
        let moved: ApiResult<serde_json::Value> = self
            .write_json(
                Method::Patch,
                &format!("/repos/{repo}/git/refs/heads/{}", spec.branch),
                &format!("moving {what} to {commit}"),
                &json!({"sha": commit, "force": false}),
            )
            .await;
        match moved {
            Ok(_) => Ok(Pushed::Pushed { commit }),
            // Not a fast-forward (someone pushed since the head was read), or no answer: where
            // the branch is now says which.
            Err(e @ (ApiError::Invalid { .. } | ApiError::WriteUncertain { .. })) => {
                match self.branch_head(repo, spec.branch).await? {
                    Some(now) if now == commit => Ok(Pushed::Found { commit }),
                    Some(now) if now != tree.base_commit => self.settled(repo, tree, now).await,
                    _ => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The message of commit `sha` of `repo`.
    pub fn commit_message<'a>(
        &'a self,
        repo: &'a RepoRef,
        sha: &'a str,
    ) -> BoxFuture<'a, ApiResult<String>> {
        Box::pin(self.commit_message_unboxed(repo, sha))
    }

    async fn commit_message_unboxed(&self, repo: &RepoRef, sha: &str) -> ApiResult<String> {
        #[derive(serde::Deserialize)]
        struct Message {
            #[serde(default)]
            message: String,
        }
        let found: Message = self
            .get_json(
                &format!("/repos/{repo}/git/commits/{sha}"),
                &format!("commit {sha} of {repo}"),
            )
            .await?;
        Ok(found.message)
    }

    /// The branch is at `head`, not at the work's start: the work's own commit pushed by an
    /// earlier try, or someone else's.
    async fn settled(
        &self,
        repo: &RepoRef,
        tree: &PreparedTree,
        head: String,
    ) -> ApiResult<Pushed> {
        let found: GitCommit = self
            .get_json(
                &format!("/repos/{repo}/git/commits/{head}"),
                &format!("commit {head} of {repo}"),
            )
            .await?;
        let ours = found.tree.sha == tree.tree
            && found.parents.len() == 1
            && found.parents[0].sha == tree.base_commit;
        Ok(if ours {
            Pushed::Found { commit: head }
        } else {
            Pushed::Moved { head }
        })
    }
}
