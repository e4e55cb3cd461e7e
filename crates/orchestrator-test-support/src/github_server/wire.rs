//! GitHub's JSON shapes for users, issues, comments and pull requests, with the fields clients
//! read and `html_url`s that look like github.com's.

use serde_json::{Value, json};

use super::{
    CREATED_AT, FakeCheckRun, FakeComment, FakeIssue, FakeReview, FakeReviewComment, FakeStatus,
};

pub(super) fn user_json(login: &str) -> Value {
    let id = login
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
        % 1_000_000;
    let kind = if login.ends_with("[bot]") {
        "Bot"
    } else {
        "User"
    };
    json!({
        "login": login,
        "id": id,
        "node_id": format!("U_{id}"),
        "html_url": format!("https://github.com/{login}"),
        "type": kind,
        "site_admin": false,
    })
}

pub(super) fn issue_json(base: &str, repo: &str, issue: &FakeIssue) -> Value {
    let kind = if issue.pull.is_some() {
        "pull"
    } else {
        "issues"
    };
    let mut value = json!({
        "id": 500_000 + issue.number,
        "node_id": format!("I_{}", issue.number),
        "url": format!("{base}/repos/{repo}/issues/{}", issue.number),
        "html_url": format!("https://github.com/{repo}/{kind}/{}", issue.number),
        "number": issue.number,
        "title": issue.title,
        "body": issue.body,
        "state": issue.state,
        "state_reason": issue.state_reason,
        "user": user_json(&issue.author),
        "labels": issue.labels.iter().map(|l| json!({"name": l, "color": "ededed"})).collect::<Vec<_>>(),
        "comments": issue.comments.len(),
        "locked": false,
        "author_association": "CONTRIBUTOR",
        "created_at": CREATED_AT,
        "updated_at": CREATED_AT,
        "closed_at": if issue.state == "closed" { Value::from(CREATED_AT) } else { Value::Null },
    });
    if issue.pull.is_some() {
        value["pull_request"] = json!({
            "url": format!("{base}/repos/{repo}/pulls/{}", issue.number),
            "html_url": format!("https://github.com/{repo}/pull/{}", issue.number),
        });
    }
    value
}

pub(super) fn comment_json(repo: &str, number: u64, c: &FakeComment) -> Value {
    json!({
        "id": c.id,
        "node_id": format!("IC_{}", c.id),
        "html_url": format!("https://github.com/{repo}/issues/{number}#issuecomment-{}", c.id),
        "issue_url": format!("https://api.github.com/repos/{repo}/issues/{number}"),
        "body": c.body,
        "user": user_json(&c.author),
        "author_association": "CONTRIBUTOR",
        "created_at": c.created_at,
        "updated_at": c.created_at,
    })
}

pub(super) fn pull_json(base: &str, repo: &str, issue: &FakeIssue) -> Value {
    let pull = issue.pull.as_ref().unwrap();
    let head_repo = pull.head_repo.as_deref().unwrap_or(repo);
    let (additions, deletions) = pull.files.iter().fold((0, 0), |(a, d), (_, _, p)| {
        (
            a + p.lines().filter(|l| l.starts_with('+')).count(),
            d + p.lines().filter(|l| l.starts_with('-')).count(),
        )
    });
    json!({
        "id": 600_000 + issue.number,
        "number": issue.number,
        "url": format!("{base}/repos/{repo}/pulls/{}", issue.number),
        "html_url": format!("https://github.com/{repo}/pull/{}", issue.number),
        "title": issue.title,
        "body": issue.body,
        "state": issue.state,
        "draft": pull.draft,
        "merged": false,
        "user": user_json(&issue.author),
        "head": {
            "ref": pull.head_ref,
            "sha": pull.head_sha,
            "label": format!("{}:{}", head_repo.split('/').next().unwrap(), pull.head_ref),
            "repo": {"full_name": head_repo, "fork": pull.head_repo.is_some()},
        },
        "maintainer_can_modify": pull.maintainer_can_modify,
        "base": {"ref": pull.base_ref, "sha": pull.base_sha, "label": format!("{}:{}", repo.split('/').next().unwrap(), pull.base_ref)},
        "additions": additions,
        "deletions": deletions,
        "changed_files": pull.files.len(),
        "comments": issue.comments.len(),
        "created_at": CREATED_AT,
        "updated_at": CREATED_AT,
    })
}

pub(super) fn review_json(repo: &str, r: &FakeReview) -> Value {
    json!({
        "id": r.id,
        "node_id": format!("PRR_{}", r.id),
        "user": user_json(&r.author),
        "body": r.body,
        "state": r.state,
        "commit_id": r.commit,
        "html_url": format!("https://github.com/{repo}/pull/{}#pullrequestreview-{}", r.pull, r.id),
        "submitted_at": CREATED_AT,
        "author_association": "COLLABORATOR",
    })
}

pub(super) fn review_comment_json(repo: &str, c: &FakeReviewComment) -> Value {
    let mut value = json!({
        "id": c.id,
        "node_id": format!("PRRC_{}", c.id),
        "pull_request_review_id": c.review,
        "user": user_json(&c.author),
        "body": c.body,
        "path": c.path,
        "line": c.line,
        "original_line": c.line,
        "side": "RIGHT",
        "diff_hunk": c.diff_hunk,
        "commit_id": c.commit,
        "original_commit_id": c.commit,
        "html_url": format!("https://github.com/{repo}/pull/{}#discussion_r{}", c.pull, c.id),
        "created_at": CREATED_AT,
        "updated_at": CREATED_AT,
        "author_association": "COLLABORATOR",
    });
    if let Some(parent) = c.in_reply_to {
        value["in_reply_to_id"] = json!(parent);
    }
    value
}

pub(super) fn check_run_json(base: &str, repo: &str, c: &FakeCheckRun) -> Value {
    json!({
        "id": c.id,
        "name": c.name,
        "head_sha": c.head_sha,
        "status": "completed",
        "conclusion": c.conclusion,
        "html_url": format!("https://github.com/{repo}/actions/runs/{}/job/{}", c.run, c.id),
        "details_url": format!("https://github.com/{repo}/actions/runs/{}/job/{}", c.run, c.id),
        "url": format!("{base}/repos/{repo}/check-runs/{}", c.id),
        "output": {
            "title": c.title,
            "summary": c.summary,
            "text": null,
            "annotations_count": c.annotations.len(),
        },
        "app": {"slug": "github-actions", "name": "GitHub Actions"},
        "check_suite": {"id": c.run + 1},
        "started_at": CREATED_AT,
        "completed_at": CREATED_AT,
    })
}

pub(super) fn annotation_json(c: &FakeCheckRun) -> Vec<Value> {
    c.annotations
        .iter()
        .map(|(path, line, level, message)| {
            json!({
                "path": path,
                "start_line": line,
                "end_line": line,
                "annotation_level": level,
                "message": message,
                "title": null,
            })
        })
        .collect()
}

pub(super) fn status_json(s: &FakeStatus) -> Value {
    json!({
        "state": s.state,
        "context": s.context,
        "description": s.description,
        "target_url": null,
        "created_at": CREATED_AT,
    })
}
