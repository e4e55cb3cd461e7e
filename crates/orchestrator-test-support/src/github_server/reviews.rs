//! The fake's reviews of pull requests and their comments in threads, as tests make them and as
//! GitHub's webhooks carry them.

use super::{FakeGitHub, wire};

/// A review of a pull request, as submitted.
#[derive(Debug, Clone)]
pub struct FakeReview {
    pub id: u64,
    pub pull: u64,
    pub author: String,
    /// `APPROVED`, `CHANGES_REQUESTED` or `COMMENTED`.
    pub state: String,
    pub body: String,
    /// The head commit the review was made on.
    pub commit: String,
}

/// A review comment: on a line of a pull request's diff, or a reply in another's thread.
#[derive(Debug, Clone)]
pub struct FakeReviewComment {
    pub id: u64,
    pub pull: u64,
    pub review: Option<u64>,
    pub author: String,
    pub path: String,
    pub line: u64,
    pub diff_hunk: String,
    pub body: String,
    /// The comment whose thread this one answers.
    pub in_reply_to: Option<u64>,
    pub commit: String,
}

impl FakeGitHub {
    /// Submits a review of pull request `number` as `author` with `state` (`CHANGES_REQUESTED`,
    /// `COMMENTED`, `APPROVED`), its body and its inline comments (path, line, body), on the pull
    /// request's head; returns the review's id and its comments' ids.
    pub fn add_review(
        &self,
        repo: &str,
        number: u64,
        author: &str,
        state: &str,
        body: &str,
        comments: &[(&str, u64, &str)],
    ) -> (u64, Vec<u64>) {
        self.with(|i| {
            i.next_id += 1;
            let review = i.next_id;
            let mut ids = Vec::new();
            for _ in comments {
                i.next_id += 1;
                ids.push(i.next_id);
            }
            let r = i.repos.get_mut(repo).expect("a repository");
            let commit = r.issues[&number]
                .pull
                .as_ref()
                .expect("a pull request")
                .head_sha
                .clone();
            r.reviews.push(FakeReview {
                id: review,
                pull: number,
                author: author.to_owned(),
                state: state.to_owned(),
                body: body.to_owned(),
                commit: commit.clone(),
            });
            for (id, (path, line, text)) in ids.iter().zip(comments) {
                r.review_comments.push(FakeReviewComment {
                    id: *id,
                    pull: number,
                    review: Some(review),
                    author: author.to_owned(),
                    path: (*path).to_owned(),
                    line: *line,
                    diff_hunk: format!("@@ -{line},1 +{line},1 @@\n-41\n+42"),
                    body: (*text).to_owned(),
                    in_reply_to: None,
                    commit: commit.clone(),
                });
            }
            (review, ids)
        })
    }

    /// Replies as `author` in the thread of review comment `to` on pull request `number`;
    /// returns the reply's id.
    pub fn reply_in_thread(
        &self,
        repo: &str,
        number: u64,
        to: u64,
        author: &str,
        body: &str,
    ) -> u64 {
        self.with(|i| {
            i.next_id += 1;
            let id = i.next_id;
            let r = i.repos.get_mut(repo).expect("a repository");
            let parent = r
                .review_comments
                .iter()
                .find(|c| c.id == to && c.pull == number)
                .cloned()
                .expect("a review comment");
            r.review_comments.push(FakeReviewComment {
                id,
                review: None,
                author: author.to_owned(),
                body: body.to_owned(),
                in_reply_to: Some(to),
                ..parent
            });
            id
        })
    }

    /// The review comments of pull request `number`, oldest first (replies included).
    pub fn review_comments(&self, repo: &str, number: u64) -> Vec<FakeReviewComment> {
        self.with(|i| {
            i.repos
                .get(repo)
                .map(|r| {
                    r.review_comments
                        .iter()
                        .filter(|c| c.pull == number)
                        .cloned()
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// The webhook payload GitHub sends for a review comment (`pull_request_review_comment`,
    /// `created`), as the fake holds it.
    pub fn review_comment_payload(
        &self,
        repo: &str,
        number: u64,
        comment: u64,
    ) -> serde_json::Value {
        self.with(|i| {
            let r = &i.repos[repo];
            let c = r
                .review_comments
                .iter()
                .find(|c| c.id == comment)
                .expect("a review comment");
            serde_json::json!({
                "action": "created",
                "comment": wire::review_comment_json(repo, c),
                "pull_request": wire::pull_json(&i.base_url, repo, &r.issues[&number]),
                "repository": {"full_name": repo},
                "sender": wire::user_json(&c.author),
            })
        })
    }

    /// The webhook payload GitHub sends for a submitted review (`pull_request_review`,
    /// `submitted`).
    pub fn review_payload(&self, repo: &str, number: u64, review: u64) -> serde_json::Value {
        self.with(|i| {
            let r = &i.repos[repo];
            let found = r.reviews.iter().find(|x| x.id == review).expect("a review");
            serde_json::json!({
                "action": "submitted",
                "review": wire::review_json(repo, found),
                "pull_request": wire::pull_json(&i.base_url, repo, &r.issues[&number]),
                "repository": {"full_name": repo},
                "sender": wire::user_json(&found.author),
            })
        })
    }
}
