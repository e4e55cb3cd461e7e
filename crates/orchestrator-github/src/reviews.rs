//! A pull request's reviews and review comments (the inline ones, in threads), and replies in a
//! thread: what a follow-up round reads as its feedback and answers when its commit is pushed.

use crate::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::client::{ApiResult, GitHub, Method};
use crate::models::{IssueRef, User};

/// A submitted review.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Review {
    pub id: u64,
    #[serde(default)]
    pub user: Option<User>,
    #[serde(default)]
    pub body: Option<String>,
    /// `APPROVED`, `CHANGES_REQUESTED`, `COMMENTED`, `DISMISSED` or `PENDING`.
    pub state: String,
    /// The head commit the review was made on.
    #[serde(default)]
    pub commit_id: Option<String>,
    #[serde(default)]
    pub html_url: Option<String>,
}

/// A comment on a line of a pull request's diff, or a reply in such a comment's thread.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReviewComment {
    pub id: u64,
    #[serde(default)]
    pub pull_request_review_id: Option<u64>,
    #[serde(default)]
    pub user: Option<User>,
    #[serde(default)]
    pub body: Option<String>,
    pub path: String,
    /// The line of the diff's new side; `None` for a comment on a line the diff no longer has.
    #[serde(default)]
    pub line: Option<u64>,
    #[serde(default)]
    pub original_line: Option<u64>,
    #[serde(default)]
    pub diff_hunk: Option<String>,
    /// The comment whose thread this one answers; `None` for the first of a thread.
    #[serde(default)]
    pub in_reply_to_id: Option<u64>,
    #[serde(default)]
    pub commit_id: Option<String>,
    pub html_url: String,
}

impl ReviewComment {
    pub fn author(&self) -> &str {
        self.user.as_ref().map_or("", |u| u.login.as_str())
    }
}

impl GitHub {
    /// The pull request's reviews, oldest first.
    pub fn pull_reviews<'a>(&'a self, pull: &'a IssueRef) -> BoxFuture<'a, ApiResult<Vec<Review>>> {
        Box::pin(self.pull_reviews_unboxed(pull))
    }

    async fn pull_reviews_unboxed(&self, pull: &IssueRef) -> ApiResult<Vec<Review>> {
        self.get_list(
            &format!("/repos/{}/pulls/{}/reviews", pull.repo, pull.number),
            &format!("the reviews of {pull}"),
        )
        .await
    }

    /// The pull request's review comments, replies included, oldest first.
    pub fn review_comments<'a>(
        &'a self,
        pull: &'a IssueRef,
    ) -> BoxFuture<'a, ApiResult<Vec<ReviewComment>>> {
        Box::pin(self.review_comments_unboxed(pull))
    }

    async fn review_comments_unboxed(&self, pull: &IssueRef) -> ApiResult<Vec<ReviewComment>> {
        self.get_list(
            &format!("/repos/{}/pulls/{}/comments", pull.repo, pull.number),
            &format!("the review comments of {pull}"),
        )
        .await
    }

    /// Replies in the thread of review comment `comment` (the first of its thread). Sent once,
    /// never retried.
    pub fn reply_to_review_comment<'a>(
        &'a self,
        pull: &'a IssueRef,
        comment: u64,
        body: &'a str,
    ) -> BoxFuture<'a, ApiResult<ReviewComment>> {
        Box::pin(self.reply_to_review_comment_unboxed(pull, comment, body))
    }

    async fn reply_to_review_comment_unboxed(
        &self,
        pull: &IssueRef,
        comment: u64,
        body: &str,
    ) -> ApiResult<ReviewComment> {
        self.write_json(
            Method::Post,
            &format!(
                "/repos/{}/pulls/{}/comments/{comment}/replies",
                pull.repo, pull.number
            ),
            &format!("replying to review comment {comment} on {pull}"),
            &json!({ "body": body }),
        )
        .await
    }
}
