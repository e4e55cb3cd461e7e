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

enum Kind {
    Read,
    Write,
}

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
    pub async fn viewer(&self) -> ApiResult<String> {
        if let Some(login) = self.viewer.get() {
            return Ok(login.clone());
        }
        let user: User = self.get_json("/user", "the token's user").await?;
        let _ = self.viewer.set(user.login.clone());
        Ok(user.login)
    }

    pub async fn issue(&self, issue: &IssueRef) -> ApiResult<Issue> {
        self.get_json(
            &format!("/repos/{}/issues/{}", issue.repo, issue.number),
            &format!("issue {issue}"),
        )
        .await
    }

    /// All comments of an issue or pull request, oldest first.
    pub async fn issue_comments(&self, issue: &IssueRef) -> ApiResult<Vec<Comment>> {
        self.get_list(
            &format!("/repos/{}/issues/{}/comments", issue.repo, issue.number),
            &format!("the comments of {issue}"),
        )
        .await
    }

    pub async fn pull(&self, pull: &IssueRef) -> ApiResult<PullRequest> {
        self.get_json(
            &format!("/repos/{}/pulls/{}", pull.repo, pull.number),
            &format!("pull request {pull}"),
        )
        .await
    }

    pub async fn pull_files(&self, pull: &IssueRef) -> ApiResult<Vec<PullFile>> {
        self.get_list(
            &format!("/repos/{}/pulls/{}/files", pull.repo, pull.number),
            &format!("the files of {pull}"),
        )
        .await
    }

    /// The pull request's whole diff, as `git diff` prints it.
    pub async fn pull_diff(&self, pull: &IssueRef) -> ApiResult<String> {
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
    pub async fn permission(&self, repo: &RepoRef, user: &str) -> ApiResult<String> {
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
    pub async fn repo_issue_events(
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
    pub async fn repo_comments(&self, repo: &RepoRef, after: u64) -> ApiResult<Vec<Comment>> {
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
    pub async fn repo_open_pulls(&self, repo: &RepoRef, after: u64) -> ApiResult<Vec<PullRequest>> {
        self.get_newer(
            &format!(
                "/repos/{repo}/pulls?state=open&sort=created&direction=desc&per_page={PER_PAGE}"
            ),
            &format!("the open pull requests of {repo}"),
            |p: &PullRequest| after == 0 || p.number <= after,
        )
        .await
    }

    /// Pages of a newest-first list until a page reaches what the caller has seen (`seen`), or
    /// [`POLL_PAGES`] pages: a burst between two polls is read whole, up to that bound.
    async fn get_newer<T: DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
        seen: impl Fn(&T) -> bool,
    ) -> ApiResult<Vec<T>> {
        let mut all = Vec::new();
        let mut next = Some(path.to_owned());
        let mut pages = 0;
        while let Some(url) = next.take() {
            pages += 1;
            let (body, headers) = self.send_read(&url, what, None).await?;
            let page: Vec<T> = decode(&body, what)?;
            let reached = page.iter().any(&seen);
            all.extend(page);
            if !reached && pages < POLL_PAGES {
                next = next_link(&headers);
            }
        }
        Ok(all)
    }

    /// Posts a comment. Sent once, never retried.
    pub async fn create_comment(&self, issue: &IssueRef, body: &str) -> ApiResult<Comment> {
        self.write_json(
            Method::Post,
            &format!("/repos/{}/issues/{}/comments", issue.repo, issue.number),
            &format!("posting a comment on {issue}"),
            &json!({ "body": body }),
        )
        .await
    }

    /// Replaces a comment's body. Sent once, never retried.
    pub async fn edit_comment(&self, repo: &RepoRef, id: u64, body: &str) -> ApiResult<Comment> {
        self.write_json(
            Method::Patch,
            &format!("/repos/{repo}/issues/comments/{id}"),
            &format!("editing comment {id} on {repo}"),
            &json!({ "body": body }),
        )
        .await
    }

    /// Closes an issue with a reason (`completed` or `not_planned`). Sent once, never retried.
    pub async fn close_issue(&self, issue: &IssueRef, state_reason: &str) -> ApiResult<Issue> {
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
    pub async fn upsert_marked_comment(
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
    pub async fn upsert_marked_comment_after(
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

    pub(crate) async fn get_json<T: DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> ApiResult<T> {
        let (body, _) = self.send_read(path, what, None).await?;
        decode(&body, what)
    }

    /// Follows `Link: rel="next"` through every page.
    pub(crate) async fn get_list<T: DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> ApiResult<Vec<T>> {
        let mut all = Vec::new();
        let separator = if path.contains('?') { '&' } else { '?' };
        let mut next = Some(format!("{path}{separator}per_page={PER_PAGE}"));
        let mut pages = 0;
        while let Some(url) = next.take() {
            pages += 1;
            let (body, headers) = self.send_read(&url, what, None).await?;
            let page: Vec<T> = decode(&body, what)?;
            all.extend(page);
            next = next_link(&headers);
            if next.is_some() && pages >= MAX_PAGES {
                // A cut list would be read as the whole (a marked comment on a later page would
                // be missed, and a second one posted): refuse instead.
                return Err(ApiError::Status {
                    what: what.to_owned(),
                    status: 200,
                    message: format!(
                        "more than {} items ({MAX_PAGES} pages); the list is too long to read whole",
                        MAX_PAGES * PER_PAGE
                    ),
                });
            }
        }
        Ok(all)
    }

    /// `request` with the token when `url` is on the API's own origin (scheme, host and port);
    /// anywhere else, a page a `Link` header names or a file GitHub redirects to, without it.
    fn authorized(&self, request: reqwest::RequestBuilder, url: &str) -> reqwest::RequestBuilder {
        match &self.config.token {
            Some(token) if origin(url).is_some() && origin(url) == origin(&self.absolute("/")) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .unwrap_or_else(|_| HeaderValue::from_static(""));
                value.set_sensitive(true);
                request.header(AUTHORIZATION, value)
            }
            _ => request,
        }
    }

    /// The absolute URL of `path` under the API base, joined as path segments (a base ending in
    /// `/re` keeps it before `/repos/...`).
    fn absolute(&self, path: &str) -> String {
        if path.starts_with("http://") || path.starts_with("https://") {
            return path.to_owned();
        }
        format!(
            "{}/{}",
            self.config.api_url.trim_end_matches('/'),
            path.trim_start_matches('/')
        )
    }

    async fn send_read(
        &self,
        path: &str,
        what: &str,
        accept: Option<&str>,
    ) -> ApiResult<(Vec<u8>, HeaderMap)> {
        match self.send_read_to(path, what, accept, false).await? {
            Read::Here(body, headers) => Ok((body, headers)),
            Read::Elsewhere(url) => Err(ApiError::Status {
                what: what.to_owned(),
                status: 302,
                message: format!("a redirect to {url}, which is not followed"),
            }),
        }
    }

    /// A read whose answer may be a redirect outside the API (a job's log, a release asset): the
    /// body when GitHub answers it, else where it sends the reader, never followed with the token.
    pub(crate) async fn read_or_redirect(&self, path: &str, what: &str) -> ApiResult<Read> {
        self.send_read_to(path, what, None, true).await
    }

    async fn send_read_to(
        &self,
        path: &str,
        what: &str,
        accept: Option<&str>,
        stop_elsewhere: bool,
    ) -> ApiResult<Read> {
        let mut waited = Duration::ZERO;
        let mut transport_tries = 0;
        let mut url = self.absolute(path);
        let mut redirects = 0;
        loop {
            let accept = HeaderValue::from_str(accept.unwrap_or("application/vnd.github+json"))
                .map_err(|e| ApiError::Config(e.to_string()))?;
            let sent = self
                .authorized(self.http.get(url.as_str()), &url)
                .header(ACCEPT, accept)
                .send()
                .await;
            let response = match sent {
                Ok(response) => response,
                Err(e) => {
                    transport_tries += 1;
                    if transport_tries < READ_TRIES {
                        tokio::time::sleep(backoff(transport_tries)).await;
                        continue;
                    }
                    return Err(ApiError::Transport {
                        what: what.to_owned(),
                        detail: describe(&e),
                    });
                }
            };
            let (status, headers, body) = self.collect(response, what, Kind::Read).await?;
            if (200..300).contains(&status) {
                return Ok(Read::Here(body, headers));
            }
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                if stop_elsewhere
                    && let Some(to) = location(&headers).filter(|to| to.contains("://"))
                    && origin(&to) != origin(&self.absolute("/"))
                {
                    return Ok(Read::Elsewhere(to));
                }
                url = self.redirect_target(&url, status, &headers, what, &mut redirects)?;
                continue;
            }
            if let Some(wait) =
                rate_limit_wait(status, &headers, &body, self.config.secondary_limit_wait)
            {
                if waited + wait <= self.config.max_rate_wait {
                    tracing::warn!(
                        what,
                        wait_secs = wait.as_secs(),
                        "GitHub rate limit; waiting"
                    );
                    tokio::time::sleep(wait).await;
                    waited += wait;
                    continue;
                }
                return Err(ApiError::RateLimited {
                    what: what.to_owned(),
                    wait_secs: wait.as_secs(),
                    message: error_message(&body),
                });
            }
            if matches!(status, 502..=504) {
                transport_tries += 1;
                if transport_tries < READ_TRIES {
                    tokio::time::sleep(backoff(transport_tries)).await;
                    continue;
                }
            }
            return Err(status_error(status, &headers, &body, what));
        }
    }

    pub(crate) async fn write_json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        what: &str,
        body: &serde_json::Value,
    ) -> ApiResult<T> {
        let mut url = self.absolute(path);
        let mut redirects = 0;
        loop {
            let request = match method {
                Method::Post => self.http.post(url.as_str()),
                Method::Patch => self.http.patch(url.as_str()),
            };
            let sent = self
                .authorized(request, &url)
                .header(ACCEPT, "application/vnd.github+json")
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string())
                .send()
                .await;
            let response = sent.map_err(|e| ApiError::WriteUncertain {
                what: what.to_owned(),
                detail: describe(&e),
            })?;
            let (status, headers, bytes) = self.collect(response, what, Kind::Write).await?;
            if (200..300).contains(&status) {
                return decode(&bytes, what);
            }
            if matches!(status, 307 | 308) {
                // The write was not carried out here; GitHub asks for it to be sent, as it is, to
                // the new place.
                url = self.redirect_target(&url, status, &headers, what, &mut redirects)?;
                continue;
            }
            if matches!(status, 301..=303) {
                let to = location(&headers).unwrap_or_default();
                return Err(ApiError::Status {
                    what: what.to_owned(),
                    status,
                    message: format!(
                        "GitHub moved it to {to}; a write follows only 307 and 308 redirects, which keep its method and body, so it was not sent again"
                    ),
                });
            }
            if let Some(wait) =
                rate_limit_wait(status, &headers, &bytes, self.config.secondary_limit_wait)
            {
                return Err(ApiError::RateLimited {
                    what: what.to_owned(),
                    wait_secs: wait.as_secs(),
                    message: error_message(&bytes),
                });
            }
            if status >= 500 {
                // A gateway error often comes after the write landed: say so, rather than let a
                // caller believe nothing happened and write again.
                return Err(ApiError::WriteUncertain {
                    what: what.to_owned(),
                    detail: format!("GitHub answered {status}: {}", error_message(&bytes)),
                });
            }
            return Err(status_error(status, &headers, &bytes, what));
        }
    }

    /// Where a redirect from `from` leads: its `Location`, resolved against `from`. Refused past
    /// [`MAX_REDIRECTS`], without a `Location`, or to another origin than the API's (the token
    /// would go with it).
    fn redirect_target(
        &self,
        from: &str,
        status: u16,
        headers: &HeaderMap,
        what: &str,
        redirects: &mut u32,
    ) -> ApiResult<String> {
        let refuse = |message: String| ApiError::Status {
            what: what.to_owned(),
            status,
            message,
        };
        *redirects += 1;
        if *redirects > MAX_REDIRECTS {
            return Err(refuse(format!(
                "more than {MAX_REDIRECTS} redirects in a row; not followed further"
            )));
        }
        let Some(to) = location(headers) else {
            return Err(refuse("a redirect without a Location header".to_owned()));
        };
        let target = if to.starts_with("http://") || to.starts_with("https://") {
            to
        } else if to.starts_with('/') {
            let uri: http::Uri = from
                .parse()
                .map_err(|_| refuse(format!("{from:?} is not a URL")))?;
            match (uri.scheme_str(), uri.authority()) {
                (Some(scheme), Some(authority)) => format!("{scheme}://{authority}{to}"),
                _ => return Err(refuse(format!("{from:?} is not an absolute URL"))),
            }
        } else {
            return Err(refuse(format!("a redirect to {to:?}, which is not a URL")));
        };
        let api = self.absolute("/");
        if origin(&target) != origin(&api) {
            return Err(refuse(format!(
                "a redirect to {target}, outside {}; not followed, so that the token is not sent there",
                origin(&api).unwrap_or_default()
            )));
        }
        tracing::debug!(
            what,
            from,
            to = target,
            status,
            "following GitHub's redirect"
        );
        Ok(target)
    }

    async fn collect(
        &self,
        response: reqwest::Response,
        what: &str,
        kind: Kind,
    ) -> ApiResult<(u16, HeaderMap, Vec<u8>)> {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.map_err(|e| match kind {
            Kind::Read => ApiError::Transport {
                what: what.to_owned(),
                detail: describe(&e),
            },
            Kind::Write => ApiError::WriteUncertain {
                what: what.to_owned(),
                detail: describe(&e),
            },
        })?;
        Ok((status, headers, bytes.to_vec()))
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Method {
    Post,
    Patch,
}

/// A response's `Location` header.
/// What a read came to: the body, or a redirect outside the API.
pub(crate) enum Read {
    Here(Vec<u8>, HeaderMap),
    Elsewhere(String),
}

fn location(headers: &HeaderMap) -> Option<String> {
    headers
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `scheme://host[:port]` of an absolute URL, lower-cased, with the scheme's default port made
/// explicit so that `https://api.github.com` and `https://api.github.com:443` are one origin.
fn origin(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    Some(format!("{scheme}://{host}:{port}"))
}

fn backoff(try_number: u32) -> Duration {
    Duration::from_millis(200 * u64::from(try_number))
}

fn decode<T: DeserializeOwned>(body: &[u8], what: &str) -> ApiResult<T> {
    serde_json::from_slice(body).map_err(|e| ApiError::Decode {
        what: what.to_owned(),
        detail: e.to_string(),
    })
}

/// GitHub's `message` field, or the start of the body.
/// GitHub's message with the details a 422 carries in `errors[]` ("body is too long (maximum is
/// 65536 characters)"), each a sentence of its own or a resource, field and code.
fn error_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Error {
        message: String,
        #[serde(default)]
        errors: Vec<serde_json::Value>,
    }
    let error = match serde_json::from_slice::<Error>(body) {
        Ok(e) => e,
        Err(_) => return String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    };
    let details: Vec<String> = error
        .errors
        .iter()
        .filter_map(|detail| {
            if let Some(text) = detail.as_str() {
                return Some(text.to_owned());
            }
            if let Some(text) = detail.get("message").and_then(|m| m.as_str()) {
                return Some(text.to_owned());
            }
            let part = |key: &str| detail.get(key).and_then(|v| v.as_str());
            let place = [part("resource"), part("field")]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(".");
            match (place.is_empty(), part("code")) {
                (true, None) => None,
                (_, code) => Some(
                    format!("{place} {}", code.unwrap_or("invalid"))
                        .trim()
                        .to_owned(),
                ),
            }
        })
        .collect();
    if details.is_empty() {
        error.message
    } else {
        format!("{}: {}", error.message, details.join("; "))
    }
}

/// How long to wait when the answer is a rate limit: `retry-after` (secondary limits, 429), until
/// `x-ratelimit-reset` when `x-ratelimit-remaining` is 0 (the primary limit), or `secondary` for a
/// secondary limit that names no wait (a 403 whose message says so).
fn rate_limit_wait(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    secondary: Duration,
) -> Option<Duration> {
    if status != 403 && status != 429 {
        return None;
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(secs) = header("retry-after").and_then(|v| v.trim().parse::<u64>().ok()) {
        return Some(Duration::from_secs(secs));
    }
    if header("x-ratelimit-remaining") == Some("0") {
        let reset = header("x-ratelimit-reset")?.trim().parse::<u64>().ok()?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        // One second of slack: the reset is in whole seconds.
        return Some(Duration::from_secs(reset.saturating_sub(now) + 1));
    }
    if status == 429 {
        return Some(Duration::from_secs(60));
    }
    let message = error_message(body).to_ascii_lowercase();
    if message.contains("secondary rate limit") || message.contains("abuse detection") {
        return Some(secondary);
    }
    None
}

fn status_error(status: u16, _headers: &HeaderMap, body: &[u8], what: &str) -> ApiError {
    let message = error_message(body);
    let what = what.to_owned();
    match status {
        401 => ApiError::Unauthorized(message),
        403 => ApiError::Forbidden { what, message },
        404 => ApiError::NotFound { what },
        422 => ApiError::Invalid { what, message },
        _ => ApiError::Status {
            what,
            status,
            message,
        },
    }
}

/// `Link: <url>; rel="next", ...` → the next URL.
fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get("link")?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"")
            .then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_owned()
            })
    })
}

/// An error with its sources, since a transport's own message says little ("error sending request").
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_details_and_bare_secondary_limits() {
        let body = br#"{"message":"Validation Failed","errors":[{"resource":"IssueComment","code":"custom","field":"body","message":"body is too long (maximum is 65536 characters)"},{"resource":"Issue","field":"title","code":"missing_field"}],"documentation_url":"https://docs.github.com/rest"}"#;
        assert_eq!(
            error_message(body),
            "Validation Failed: body is too long (maximum is 65536 characters); Issue.title missing_field"
        );
        let limited = br#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}"#;
        let headers = HeaderMap::new();
        assert_eq!(
            rate_limit_wait(403, &headers, limited, SECONDARY_LIMIT_WAIT),
            Some(SECONDARY_LIMIT_WAIT)
        );
        assert_eq!(
            rate_limit_wait(
                403,
                &headers,
                br#"{"message":"Resource not accessible by integration"}"#,
                SECONDARY_LIMIT_WAIT
            ),
            None
        );
    }

    #[test]
    fn next_links() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "link",
            HeaderValue::from_static(
                "<https://api.github.com/x?page=2>; rel=\"next\", <https://api.github.com/x?page=5>; rel=\"last\"",
            ),
        );
        assert_eq!(
            next_link(&headers).as_deref(),
            Some("https://api.github.com/x?page=2")
        );
        headers.insert(
            "link",
            HeaderValue::from_static("<https://api.github.com/x?page=1>; rel=\"prev\""),
        );
        assert_eq!(next_link(&headers), None);
    }

    #[test]
    fn rate_limits() {
        let mut headers = HeaderMap::new();
        assert_eq!(
            rate_limit_wait(403, &headers, b"{}", SECONDARY_LIMIT_WAIT),
            None,
            "a plain 403 is not a limit"
        );
        headers.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(
            rate_limit_wait(403, &headers, b"{}", SECONDARY_LIMIT_WAIT),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            rate_limit_wait(500, &headers, b"{}", SECONDARY_LIMIT_WAIT),
            None
        );
        let mut headers = HeaderMap::new();
        headers.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        headers.insert("x-ratelimit-reset", HeaderValue::from_static("0"));
        assert_eq!(
            rate_limit_wait(403, &headers, b"{}", SECONDARY_LIMIT_WAIT),
            Some(Duration::from_secs(1)),
            "a reset in the past waits the one second of slack"
        );
    }
}
