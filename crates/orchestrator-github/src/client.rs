//! The GitHub REST client: plain HTTP (the workspace's reqwest, with rustls) against a configurable
//! base URI (api.github.com, a GitHub Enterprise server's `/api/v3`, or a local server in tests),
//! with our own small models so that a field GitHub adds or an Enterprise version lacks cannot
//! break a read. Redirects, retries and rate limits are this module's own, never the transport's.
//!
//! Reads and writes are treated differently, on purpose:
//! - A read that meets a rate limit waits for it (GitHub's `retry-after`, or `x-ratelimit-reset`
//!   when `x-ratelimit-remaining` is 0) and tries again, as long as the wait fits in
//!   [`ClientConfig::max_rate_wait`]; a read that fails in transit or with a 502/503/504 is tried
//!   again a few times. Reads change nothing, so repeating them is safe.
//! - Redirects are followed the way GitHub documents them (a renamed or transferred repository
//!   answers 301 to reads and 307 to writes): a read follows 301, 302, 303, 307 and 308; a write
//!   follows 307 and 308 only, with its method and body, since a 301 or 302 would turn it into a
//!   GET. Only to the API's own origin, so the token never goes elsewhere, and at most
//!   [`MAX_REDIRECTS`] in a row.
//! - A write is sent once. If no answer comes back (a timeout, a dropped connection), the write may
//!   or may not have happened, and the error says so ([`ApiError::WriteUncertain`]). Callers make
//!   their writes idempotent instead: [`GitHub::upsert_marked_comment`] finds its earlier comment by
//!   a hidden marker and edits it, so calling it again after a timeout never posts twice.

use crate::BoxFuture;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, USER_AGENT};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::models::{
    Comment, CommentAction, Issue, IssueEvent, IssueRef, PullFile, PullRequest, RepoRef, User,
};

/// api.github.com, the default base URI.
pub const DEFAULT_API_URL: &str = "https://api.github.com";

/// Where the client talks to and how patient it is.
#[derive(Clone)]
pub struct ClientConfig {
    /// The REST API's base URI.
    pub api_url: String,
    /// A personal access token or an installation token. `None` reaches public data only.
    pub token: Option<String>,
    /// How long a connection may stay silent (connecting, or between two reads) before its
    /// request counts as failed; a whole request may take four times as long.
    pub timeout: Duration,
    /// The longest a read waits for a rate limit to lift; beyond it the read fails with
    /// [`ApiError::RateLimited`] saying when to come back.
    pub max_rate_wait: Duration,
    /// The wait after a secondary rate limit that names none (a 403 without `retry-after`):
    /// GitHub asks for at least a minute.
    pub secondary_limit_wait: Duration,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("ClientConfig")
            .field("api_url", &self.api_url)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("timeout", &self.timeout)
            .field("max_rate_wait", &self.max_rate_wait)
            .field("secondary_limit_wait", &self.secondary_limit_wait)
            .finish()
    }
}

impl ClientConfig {
    pub fn new(api_url: impl Into<String>, token: Option<String>) -> ClientConfig {
        ClientConfig {
            api_url: api_url.into(),
            token,
            timeout: Duration::from_secs(30),
            max_rate_wait: Duration::from_secs(60),
            secondary_limit_wait: SECONDARY_LIMIT_WAIT,
        }
    }
}

/// GitHub's documented minimum wait after a secondary rate limit without `retry-after`.
pub const SECONDARY_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// A GitHub API call failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The client could not be built (a malformed base URI). Not retryable.
    #[error("GitHub client configuration: {0}")]
    Config(String),
    /// 401: the token is missing, wrong or expired. Not retryable until the token is fixed.
    #[error(
        "GitHub refused the credentials (401): {0}; set GITHUB_TOKEN or GH_TOKEN to a valid token"
    )]
    Unauthorized(String),
    /// 403 that is not a rate limit: the token lacks a permission.
    #[error("GitHub refused {what} (403): {message}")]
    Forbidden { what: String, message: String },
    /// 404: the repository, issue or comment does not exist, or the token cannot see it.
    #[error("{what} was not found on GitHub (404), or the token cannot see it")]
    NotFound { what: String },
    /// 422: GitHub refused the request's content.
    #[error("GitHub rejected {what} (422): {message}")]
    Invalid { what: String, message: String },
    /// A rate limit that lifts later than the client is willing to wait.
    #[error("GitHub's rate limit is spent for {what}; it lifts in {wait_secs} s: {message}")]
    RateLimited {
        what: String,
        wait_secs: u64,
        message: String,
    },
    /// Any other status.
    #[error("GitHub answered {status} to {what}: {message}")]
    Status {
        what: String,
        status: u16,
        message: String,
    },
    /// A read got no answer after its retries.
    #[error("GitHub did not answer {what}: {detail}")]
    Transport { what: String, detail: String },
    /// A write got no answer: it may or may not have happened. Writes are never retried
    /// automatically; look on GitHub, or repeat an idempotent write (a marked comment is edited,
    /// not posted twice).
    #[error(
        "no answer from GitHub to {what} ({detail}): it may or may not have happened; writes are not retried automatically"
    )]
    WriteUncertain { what: String, detail: String },
    /// The request was not made, or its result not used, because it would not do what was asked
    /// (a branch that holds other content, an object GitHub stored differently). Not retryable.
    #[error("{what} was refused: {message}")]
    Refused { what: String, message: String },
    /// GitHub's answer is not what the API documents.
    #[error("GitHub's answer to {what} cannot be read: {detail}")]
    Decode { what: String, detail: String },
}

impl ApiError {
    /// Whether the same call may succeed later without anyone changing anything.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ApiError::RateLimited { .. } | ApiError::Transport { .. }
        ) || matches!(self, ApiError::Status { status, .. } if *status >= 500)
    }
}

pub type ApiResult<T> = std::result::Result<T, ApiError>;

/// The GitHub REST client.
#[derive(Clone)]
pub struct GitHub {
    http: reqwest::Client,
    config: ClientConfig,
    viewer: std::sync::Arc<OnceLock<String>>,
}

impl std::fmt::Debug for GitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("GitHub")
            .field("api_url", &self.config.api_url)
            .field("authenticated", &self.config.token.is_some())
            .finish()
    }
}

/// How many times a read is tried in all when it fails in transit or with a 502/503/504.
const READ_TRIES: u32 = 3;
/// Items per page for lists.
const PER_PAGE: u32 = 100;
/// The most pages a list reads, so a runaway list cannot take the worker with it.
const MAX_PAGES: u32 = 50;
/// The most pages one poll of a repository's events (or comments, or pull requests) reads.
const POLL_PAGES: u32 = 10;

/// The most redirects one request follows.
pub const MAX_REDIRECTS: u32 = 5;

impl GitHub {
    /// Builds a client. It does not reach the network.
    pub fn new(config: ClientConfig) -> ApiResult<GitHub> {
        let base = config.api_url.trim_end_matches('/');
        match base.parse::<http::Uri>() {
            Ok(uri) if uri.scheme().is_some() && uri.authority().is_some() => {}
            _ => {
                return Err(ApiError::Config(format!(
                    "{:?} is not a base URI (expected http:// or https:// and a host)",
                    config.api_url
                )));
            }
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("orchestrator/", env!("CARGO_PKG_VERSION"))),
        );
        // The token goes with a request to the API's own origin only (see `authorized`), never in
        // the client's default headers: a `Link` to the next page elsewhere gets none.
        if let Some(token) = &config.token
            && HeaderValue::from_str(&format!("Bearer {token}")).is_err()
        {
            return Err(ApiError::Config(
                "the GitHub token holds a character a header cannot".to_owned(),
            ));
        }
        // Redirects are followed here, by rule (reads and writes differ, the token stays on the
        // API's origin), so the transport follows none. A connection silent for `timeout` fails,
        // and a whole request (a large log trickling in) may take four times as long.
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.timeout)
            .read_timeout(config.timeout)
            .timeout(config.timeout.saturating_mul(4))
            .build()
            .map_err(|e| ApiError::Config(describe(&e)))?;
        Ok(GitHub {
            http,
            config,
            viewer: std::sync::Arc::new(OnceLock::new()),
        })
    }

    pub fn api_url(&self) -> &str {
        &self.config.api_url
    }

    /// Names the token's account instead of asking GitHub: installation tokens (a GitHub App, an
    /// Actions `GITHUB_TOKEN`) cannot read `GET /user`, so their login comes from the config.
    pub fn with_viewer(self, login: impl Into<String>) -> GitHub {
        let _ = self.viewer.set(login.into());
        self
    }

    /// The login of the token's account (cached after the first call).
    pub fn viewer<'a>(&'a self) -> BoxFuture<'a, ApiResult<String>> {
        Box::pin(self.viewer_unboxed())
    }

    async fn viewer_unboxed(&self) -> ApiResult<String> {
        if let Some(login) = self.viewer.get() {
            return Ok(login.clone());
        }
        let user: User = self.get_json("/user", "the token's user").await?;
        let _ = self.viewer.set(user.login.clone());
        Ok(user.login)
    }

    pub fn issue<'a>(&'a self, issue: &'a IssueRef) -> BoxFuture<'a, ApiResult<Issue>> {
        Box::pin(self.issue_unboxed(issue))
    }

    async fn issue_unboxed(&self, issue: &IssueRef) -> ApiResult<Issue> {
        self.get_json(
            &format!("/repos/{}/issues/{}", issue.repo, issue.number),
            &format!("issue {issue}"),
        )
        .await
    }

    /// All comments of an issue or pull request, oldest first.
    pub fn issue_comments<'a>(
        &'a self,
        issue: &'a IssueRef,
    ) -> BoxFuture<'a, ApiResult<Vec<Comment>>> {
        Box::pin(self.issue_comments_unboxed(issue))
    }

    async fn issue_comments_unboxed(&self, issue: &IssueRef) -> ApiResult<Vec<Comment>> {
        self.get_list(
            &format!("/repos/{}/issues/{}/comments", issue.repo, issue.number),
            &format!("the comments of {issue}"),
        )
        .await
    }

    pub fn pull<'a>(&'a self, pull: &'a IssueRef) -> BoxFuture<'a, ApiResult<PullRequest>> {
        Box::pin(self.pull_unboxed(pull))
    }

    async fn pull_unboxed(&self, pull: &IssueRef) -> ApiResult<PullRequest> {
        self.get_json(
            &format!("/repos/{}/pulls/{}", pull.repo, pull.number),
            &format!("pull request {pull}"),
        )
        .await
    }

    pub fn pull_files<'a>(&'a self, pull: &'a IssueRef) -> BoxFuture<'a, ApiResult<Vec<PullFile>>> {
        Box::pin(self.pull_files_unboxed(pull))
    }

    async fn pull_files_unboxed(&self, pull: &IssueRef) -> ApiResult<Vec<PullFile>> {
        self.get_list(
            &format!("/repos/{}/pulls/{}/files", pull.repo, pull.number),
            &format!("the files of {pull}"),
        )
        .await
    }

    /// The pull request's whole diff, as `git diff` prints it.
    pub fn pull_diff<'a>(&'a self, pull: &'a IssueRef) -> BoxFuture<'a, ApiResult<String>> {
        Box::pin(self.pull_diff_unboxed(pull))
    }

    async fn pull_diff_unboxed(&self, pull: &IssueRef) -> ApiResult<String> {
        let what = format!("the diff of {pull}");
        let (body, _) = self
            .send_read(
                &format!("/repos/{}/pulls/{}", pull.repo, pull.number),
                &what,
                Some("application/vnd.github.diff"),
            )
            .await?;
        String::from_utf8(body).map_err(|e| ApiError::Decode {
            what,
            detail: e.to_string(),
        })
    }

    /// A user's permission on a repository: `admin`, `write`, `read` or `none`. GitHub folds
    /// `maintain` and custom roles built on write into `write`, and `triage` into `read`.
    pub fn permission<'a>(
        &'a self,
        repo: &'a RepoRef,
        user: &'a str,
    ) -> BoxFuture<'a, ApiResult<String>> {
        Box::pin(self.permission_unboxed(repo, user))
    }

    async fn permission_unboxed(&self, repo: &RepoRef, user: &str) -> ApiResult<String> {
        #[derive(Deserialize)]
        struct Permission {
            permission: String,
        }
        if !user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '[' | ']'))
        {
            return Err(ApiError::Invalid {
                what: format!("the permission of {user:?}"),
                message: "not a GitHub login".to_owned(),
            });
        }
        let found: Permission = self
            .get_json(
                &format!("/repos/{repo}/collaborators/{user}/permission"),
                &format!("{user}'s permission on {repo}"),
            )
            .await?;
        Ok(found.permission)
    }

    /// A repository's issue events newer than `after` (an event id), newest first, through as
    /// many pages as it takes (at most 10). `after = 0` reads the newest page only.
    pub fn repo_issue_events<'a>(
        &'a self,
        repo: &'a RepoRef,
        after: u64,
    ) -> BoxFuture<'a, ApiResult<Vec<IssueEvent>>> {
        Box::pin(self.repo_issue_events_unboxed(repo, after))
    }

    async fn repo_issue_events_unboxed(
        &self,
        repo: &RepoRef,
        after: u64,
    ) -> ApiResult<Vec<IssueEvent>> {
        self.get_newer(
            &format!("/repos/{repo}/issues/events?per_page={PER_PAGE}"),
            &format!("the issue events of {repo}"),
            |e: &IssueEvent| after == 0 || e.id <= after,
        )
        .await
    }

    /// A repository's issue comments newer than `after` (a comment id), newest first.
    pub fn repo_comments<'a>(
        &'a self,
        repo: &'a RepoRef,
        after: u64,
    ) -> BoxFuture<'a, ApiResult<Vec<Comment>>> {
        Box::pin(self.repo_comments_unboxed(repo, after))
    }

    async fn repo_comments_unboxed(&self, repo: &RepoRef, after: u64) -> ApiResult<Vec<Comment>> {
        self.get_newer(
            &format!(
                "/repos/{repo}/issues/comments?sort=created&direction=desc&per_page={PER_PAGE}"
            ),
            &format!("the issue comments of {repo}"),
            |c: &Comment| after == 0 || c.id <= after,
        )
        .await
    }

    /// A repository's open pull requests numbered above `after`, newest first.
    pub fn repo_open_pulls<'a>(
        &'a self,
        repo: &'a RepoRef,
        after: u64,
    ) -> BoxFuture<'a, ApiResult<Vec<PullRequest>>> {
        Box::pin(self.repo_open_pulls_unboxed(repo, after))
    }

    async fn repo_open_pulls_unboxed(
        &self,
        repo: &RepoRef,
        after: u64,
    ) -> ApiResult<Vec<PullRequest>> {
        self.get_newer(
            &format!(
                "/repos/{repo}/pulls?state=open&sort=created&direction=desc&per_page={PER_PAGE}"
            ),
            &format!("the open pull requests of {repo}"),
            |p: &PullRequest| after == 0 || p.number <= after,
        )
        .await
    }

    /// Posts a comment. Sent once, never retried.
    pub fn create_comment<'a>(
        &'a self,
        issue: &'a IssueRef,
        body: &'a str,
    ) -> BoxFuture<'a, ApiResult<Comment>> {
        Box::pin(self.create_comment_unboxed(issue, body))
    }

    async fn create_comment_unboxed(&self, issue: &IssueRef, body: &str) -> ApiResult<Comment> {
        self.write_json(
            Method::Post,
            &format!("/repos/{}/issues/{}/comments", issue.repo, issue.number),
            &format!("posting a comment on {issue}"),
            &json!({ "body": body }),
        )
        .await
    }

    /// Replaces a comment's body. Sent once, never retried.
    pub fn edit_comment<'a>(
        &'a self,
        repo: &'a RepoRef,
        id: u64,
        body: &'a str,
    ) -> BoxFuture<'a, ApiResult<Comment>> {
        Box::pin(self.edit_comment_unboxed(repo, id, body))
    }

    async fn edit_comment_unboxed(
        &self,
        repo: &RepoRef,
        id: u64,
        body: &str,
    ) -> ApiResult<Comment> {
        self.write_json(
            Method::Patch,
            &format!("/repos/{repo}/issues/comments/{id}"),
            &format!("editing comment {id} on {repo}"),
            &json!({ "body": body }),
        )
        .await
    }

    /// Closes an issue with a reason (`completed` or `not_planned`). Sent once, never retried.
    pub fn close_issue<'a>(
        &'a self,
        issue: &'a IssueRef,
        state_reason: &'a str,
    ) -> BoxFuture<'a, ApiResult<Issue>> {
        Box::pin(self.close_issue_unboxed(issue, state_reason))
    }

    async fn close_issue_unboxed(&self, issue: &IssueRef, state_reason: &str) -> ApiResult<Issue> {
        self.write_json(
            Method::Patch,
            &format!("/repos/{}/issues/{}", issue.repo, issue.number),
            &format!("closing {issue}"),
            &json!({ "state": "closed", "state_reason": state_reason }),
        )
        .await
    }

    /// Keeps one comment per `marker` on an issue: edits the comment of the token's account that
    /// holds the marker, or posts a new one. `body` must contain the marker, so that a call after an
    /// uncertain write finds the comment the first call may have posted.
    pub fn upsert_marked_comment<'a>(
        &'a self,
        issue: &'a IssueRef,
        marker: &'a str,
        body: &'a str,
    ) -> BoxFuture<'a, ApiResult<(Comment, CommentAction)>> {
        Box::pin(self.upsert_marked_comment_unboxed(issue, marker, body))
    }

    async fn upsert_marked_comment_unboxed(
        &self,
        issue: &IssueRef,
        marker: &str,
        body: &str,
    ) -> ApiResult<(Comment, CommentAction)> {
        self.upsert_marked_comment_after(issue, marker, body, None)
            .await
    }

    /// [`GitHub::upsert_marked_comment`] that also takes over a comment of an older marker
    /// (`legacy.0`, written before the marker named its store), but only one whose id is among
    /// `legacy.1`, the comments the caller's own records say it wrote: a comment of another store
    /// under the same old marker is never edited.
    pub fn upsert_marked_comment_after<'a>(
        &'a self,
        issue: &'a IssueRef,
        marker: &'a str,
        body: &'a str,
        legacy: Option<(&'a str, &'a [u64])>,
    ) -> BoxFuture<'a, ApiResult<(Comment, CommentAction)>> {
        Box::pin(self.upsert_marked_comment_after_unboxed(issue, marker, body, legacy))
    }

    async fn upsert_marked_comment_after_unboxed(
        &self,
        issue: &IssueRef,
        marker: &str,
        body: &str,
        legacy: Option<(&str, &[u64])>,
    ) -> ApiResult<(Comment, CommentAction)> {
        if !body.contains(marker) {
            return Err(ApiError::Invalid {
                what: format!("the comment for {issue}"),
                message: "the body must contain its marker".to_owned(),
            });
        }
        let viewer = self.viewer().await?;
        let comments = self.issue_comments(issue).await?;
        let ours = |c: &Comment| c.user.as_ref().is_some_and(|u| u.login == viewer);
        let marked = |c: &Comment, m: &str| c.body.as_deref().is_some_and(|b| b.contains(m));
        let mine = match comments.iter().position(|c| ours(c) && marked(c, marker)) {
            Some(at) => Some(comments[at].clone()),
            None => legacy.and_then(|(old, ids)| {
                comments
                    .iter()
                    .find(|c| ours(c) && marked(c, old) && ids.contains(&c.id))
                    .cloned()
            }),
        };
        match mine {
            Some(existing) if existing.body.as_deref() == Some(body) => {
                Ok((existing, CommentAction::Unchanged))
            }
            Some(existing) => {
                let edited = self.edit_comment(&issue.repo, existing.id, body).await?;
                Ok((edited, CommentAction::Edited))
            }
            None => {
                let created = self.create_comment(issue, body).await?;
                Ok((created, CommentAction::Created))
            }
        }
    }
}

mod transport;
use transport::describe;
pub(crate) use transport::{Method, Read};
