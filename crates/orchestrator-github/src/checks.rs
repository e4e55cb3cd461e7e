//! What CI says about a commit: its check runs (with their annotations, and the log of a GitHub
//! Actions job), its commit statuses, and the pull requests whose head it is. A follow-up round
//! reads them when a check failed on the head it pushed.

use crate::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::client::{ApiError, ApiResult, GitHub, Read};
use crate::models::{PullRequest, RepoRef};

/// A check run on a commit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckRun {
    pub id: u64,
    pub name: String,
    pub head_sha: String,
    pub status: String,
    /// `success`, `failure`, `timed_out`, `cancelled`, `neutral`, `skipped`, `action_required`,
    /// `startup_failure`, `stale`; `None` while it runs.
    #[serde(default)]
    pub conclusion: Option<String>,
    #[serde(default)]
    pub html_url: Option<String>,
    #[serde(default)]
    pub output: CheckOutput,
    #[serde(default)]
    pub app: Option<CheckApp>,
}

impl CheckRun {
    /// Whether it ended the way a fix is wanted for.
    pub fn failed(&self) -> bool {
        matches!(
            self.conclusion.as_deref(),
            Some("failure" | "timed_out" | "startup_failure")
        )
    }

    /// Whether GitHub Actions ran it: its id is then its job's, whose log can be read.
    pub fn is_actions_job(&self) -> bool {
        self.app
            .as_ref()
            .is_some_and(|a| a.slug == "github-actions")
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckOutput {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckApp {
    pub slug: String,
}

/// A line of a file a check run points at.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Annotation {
    pub path: String,
    #[serde(default)]
    pub start_line: Option<u64>,
    #[serde(default)]
    pub annotation_level: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// One commit status of a context, the newest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitStatus {
    pub state: String,
    pub context: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub target_url: Option<String>,
}

#[derive(Deserialize)]
struct CheckRuns {
    check_runs: Vec<CheckRun>,
}

#[derive(Deserialize)]
struct Combined {
    statuses: Vec<CommitStatus>,
}

impl GitHub {
    /// The check runs on `sha` (the newest of each, as GitHub lists them).
    pub fn check_runs<'a>(
        &'a self,
        repo: &'a RepoRef,
        sha: &'a str,
    ) -> BoxFuture<'a, ApiResult<Vec<CheckRun>>> {
        Box::pin(self.check_runs_unboxed(repo, sha))
    }

    async fn check_runs_unboxed(&self, repo: &RepoRef, sha: &str) -> ApiResult<Vec<CheckRun>> {
        let found: CheckRuns = self
            .get_json(
                &format!("/repos/{repo}/commits/{sha}/check-runs?per_page=100"),
                &format!("the check runs of {sha} on {repo}"),
            )
            .await?;
        Ok(found.check_runs)
    }

    pub fn check_annotations<'a>(
        &'a self,
        repo: &'a RepoRef,
        run: u64,
    ) -> BoxFuture<'a, ApiResult<Vec<Annotation>>> {
        Box::pin(self.check_annotations_unboxed(repo, run))
    }

    async fn check_annotations_unboxed(
        &self,
        repo: &RepoRef,
        run: u64,
    ) -> ApiResult<Vec<Annotation>> {
        self.get_list(
            &format!("/repos/{repo}/check-runs/{run}/annotations"),
            &format!("the annotations of check run {run} on {repo}"),
        )
        .await
    }

    /// The newest status of each context on `sha`.
    pub fn commit_statuses<'a>(
        &'a self,
        repo: &'a RepoRef,
        sha: &'a str,
    ) -> BoxFuture<'a, ApiResult<Vec<CommitStatus>>> {
        Box::pin(self.commit_statuses_unboxed(repo, sha))
    }

    async fn commit_statuses_unboxed(
        &self,
        repo: &RepoRef,
        sha: &str,
    ) -> ApiResult<Vec<CommitStatus>> {
        let found: Combined = self
            .get_json(
                &format!("/repos/{repo}/commits/{sha}/status"),
                &format!("the statuses of {sha} on {repo}"),
            )
            .await?;
        Ok(found.statuses)
    }

    /// The pull requests whose head (or merge) commit `sha` is.
    pub fn pulls_of_commit<'a>(
        &'a self,
        repo: &'a RepoRef,
        sha: &'a str,
    ) -> BoxFuture<'a, ApiResult<Vec<PullRequest>>> {
        Box::pin(self.pulls_of_commit_unboxed(repo, sha))
    }

    async fn pulls_of_commit_unboxed(
        &self,
        repo: &RepoRef,
        sha: &str,
    ) -> ApiResult<Vec<PullRequest>> {
        self.get_list(
            &format!("/repos/{repo}/commits/{sha}/pulls"),
            &format!("the pull requests of {sha} on {repo}"),
        )
        .await
    }

    /// The log of a GitHub Actions job, as plain text. GitHub answers with a redirect to a
    /// short-lived URL, which is read without the token when it is outside the API.
    pub fn job_log<'a>(&'a self, repo: &'a RepoRef, job: u64) -> BoxFuture<'a, ApiResult<Vec<u8>>> {
        Box::pin(self.job_log_unboxed(repo, job))
    }

    async fn job_log_unboxed(&self, repo: &RepoRef, job: u64) -> ApiResult<Vec<u8>> {
        let what = format!("the log of job {job} on {repo}");
        match self
            .read_or_redirect(&format!("/repos/{repo}/actions/jobs/{job}/logs"), &what)
            .await?
        {
            Read::Here(body, _) => Ok(body),
            Read::Elsewhere(url) => {
                let transport = |e: reqwest::Error| ApiError::Transport {
                    what: what.clone(),
                    detail: e.to_string(),
                };
                let answer = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::limited(3))
                    .timeout(std::time::Duration::from_secs(60))
                    .build()
                    .map_err(transport)?
                    .get(&url)
                    .send()
                    .await
                    .map_err(transport)?;
                let status = answer.status().as_u16();
                let body = answer.bytes().await.map_err(transport)?;
                if !(200..300).contains(&status) {
                    return Err(ApiError::Status {
                        what,
                        status,
                        message: String::from_utf8_lossy(&body).chars().take(200).collect(),
                    });
                }
                Ok(body.to_vec())
            }
        }
    }
}
