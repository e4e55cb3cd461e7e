//! Routing: each request logged, its token checked, a scripted fault applied, then the endpoint
//! answered from the in-memory repositories in GitHub's shapes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::git::{FakeCommit, GitObjects, blob_id, commit_id};
use super::wire::{self, comment_json, issue_json, pull_json, user_json};
use super::{CREATED_AT, FakeComment, FakeIssue, FakePull, FaultKind, Inner, LoggedRequest};

mod git_data;

use git_data::{git_route, open_pull};

/// What the routing decided, computed under the lock and answered after it.
struct Answer {
    status: StatusCode,
    body: Body,
    headers: Vec<(String, String)>,
    delay: Option<Duration>,
    hold: Option<Arc<tokio::sync::Semaphore>>,
}

impl Answer {
    fn json(status: StatusCode, value: Value) -> Answer {
        Answer {
            status,
            body: Body::from(value.to_string()),
            headers: vec![(
                "content-type".into(),
                "application/json; charset=utf-8".into(),
            )],
            delay: None,
            hold: None,
        }
    }

    fn error(status: StatusCode, message: &str) -> Answer {
        Answer::json(
            status,
            json!({
                "message": message,
                "documentation_url": "https://docs.github.com/rest",
                "status": status.as_u16().to_string(),
            }),
        )
    }
}

/// GitHub's limit on a comment's body.
const MAX_COMMENT_CHARS: usize = 65536;

/// The 422 GitHub answers to a body over its limit, with the detail in `errors[]`.
fn too_long(resource: &str) -> Answer {
    Answer::json(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({
            "message": "Validation Failed",
            "errors": [{
                "resource": resource,
                "code": "custom",
                "field": "body",
                "message": format!("body is too long (maximum is {MAX_COMMENT_CHARS} characters)"),
            }],
            "documentation_url": "https://docs.github.com/rest/issues/comments#create-an-issue-comment",
            "status": "422",
        }),
    )
}

pub(super) async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let answer = {
        let mut inner = inner.lock().unwrap();
        answer(&mut inner, &method, &uri, &headers, &body)
    };
    if let Some(delay) = answer.delay {
        tokio::time::sleep(delay).await;
    }
    if let Some(gate) = &answer.hold {
        let _ = gate.acquire().await;
    }
    let mut response = Response::builder().status(answer.status);
    response = response
        .header("x-ratelimit-limit", "5000")
        .header("x-github-media-type", "github.v3; format=json");
    for (name, value) in answer.headers {
        response = response.header(name, value);
    }
    response.body(answer.body).unwrap()
}

fn answer(
    inner: &mut Inner,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Answer {
    let path = uri.path().to_owned();
    let query = uri.query().unwrap_or("").to_owned();
    let header_str = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    inner.log.push(LoggedRequest {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        authorization: header_str(header::AUTHORIZATION),
        accept: header_str(header::ACCEPT),
        body: String::from_utf8_lossy(body).into_owned(),
    });
    // The page for a person's browser, which sends no token.
    if method == Method::GET && path == "/" {
        return Answer {
            status: StatusCode::OK,
            body: Body::from(super::page::render(inner)),
            headers: vec![("content-type".into(), "text/html; charset=utf-8".into())],
            delay: None,
            hold: None,
        };
    }
    let expected = format!("Bearer {}", inner.token);
    let token_ok = header_str(header::AUTHORIZATION).is_some_and(|a| a == expected);
    // A job's log is served from a signed URL, which needs no token.
    if !token_ok && !path.starts_with("/_fake/job-logs/") {
        return Answer::error(StatusCode::UNAUTHORIZED, "Bad credentials");
    }
    // A renamed repository: its old name redirects to its id, which is served under its new name.
    let segments: Vec<&str> = path.trim_start_matches('/').splitn(4, '/').collect();
    if let ["repos", owner, name, ..] = segments.as_slice()
        && let Some(id) = inner.renamed.get(&format!("{owner}/{name}"))
    {
        let rest = segments.get(3).map(|r| format!("/{r}")).unwrap_or_default();
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        let location = format!("{}/repositories/{id}{rest}{query}", inner.base_url);
        let status = if method == Method::GET {
            StatusCode::MOVED_PERMANENTLY
        } else {
            StatusCode::TEMPORARY_REDIRECT
        };
        let mut a = Answer::json(
            status,
            json!({
                "message": if status == StatusCode::MOVED_PERMANENTLY { "Moved Permanently" } else { "Temporary Redirect" },
                "url": location,
                "documentation_url": "https://docs.github.com/rest/guides/best-practices-for-using-the-rest-api#follow-redirects",
            }),
        );
        a.headers.push(("location".into(), location));
        return a;
    }
    let path = match path.trim_start_matches('/').split_once('/') {
        Some(("repositories", rest)) => {
            let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
            match id.parse().ok().and_then(|id: u64| inner.repo_ids.get(&id)) {
                Some(name) => format!("/repos/{name}/{tail}"),
                None => return Answer::error(StatusCode::NOT_FOUND, "Not Found"),
            }
        }
        _ => path,
    };
    let mut delay = None;
    let mut hold = None;
    if let Some(fault) = inner
        .faults
        .iter_mut()
        .find(|f| f.remaining > 0 && f.method == method.as_str() && path.contains(&f.path_contains))
    {
        fault.remaining -= 1;
        match fault.kind {
            FaultKind::Status(status) => {
                let status = StatusCode::from_u16(status).unwrap();
                return Answer::error(status, "scripted failure");
            }
            FaultKind::DelayAfter(d) => delay = Some(d),
            FaultKind::Hold(ref gate) => hold = Some(gate.clone()),
            FaultKind::Stall(ref gate) => {
                let mut a =
                    Answer::error(StatusCode::GATEWAY_TIMEOUT, "stalled, never carried out");
                a.hold = Some(gate.clone());
                return a;
            }
            FaultKind::Redirect(status, ref location) => {
                let mut a = Answer::error(StatusCode::from_u16(status).unwrap(), "Moved");
                a.headers.push(("location".into(), location.clone()));
                return a;
            }
            FaultKind::PrimaryLimit { reset_in } => {
                let reset = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
                    + reset_in;
                let mut a = Answer::error(
                    StatusCode::FORBIDDEN,
                    "API rate limit exceeded for user ID 1.",
                );
                a.headers.push(("x-ratelimit-remaining".into(), "0".into()));
                a.headers
                    .push(("x-ratelimit-reset".into(), reset.to_string()));
                return a;
            }
            FaultKind::SecondaryLimit { retry_after } => {
                let mut a = Answer::error(
                    StatusCode::FORBIDDEN,
                    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                );
                a.headers
                    .push(("retry-after".into(), retry_after.to_string()));
                return a;
            }
            FaultKind::SecondaryLimitBare => {
                return Answer::error(
                    StatusCode::FORBIDDEN,
                    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID.",
                );
            }
        }
    }
    let mut a = route(inner, method, &path, &query, headers, body);
    a.delay = delay;
    a.hold = hold;
    a.headers
        .push(("x-ratelimit-remaining".into(), "4999".into()));
    if let Some(scopes) = &inner.scopes {
        a.headers.push(("x-oauth-scopes".into(), scopes.clone()));
    }
    a
}

fn route(
    inner: &mut Inner,
    method: &Method,
    path: &str,
    query: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Answer {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let base = inner.base_url.clone();
    let params = parse_query(query);
    let body_json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    for repo in inner.repos.values_mut() {
        follow_heads(repo);
    }
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["user"]) => Answer::json(StatusCode::OK, user_json(&inner.viewer)),
        ("GET", ["repos", owner, name, "issues", "events"]) => {
            let repo = format!("{owner}/{name}");
            let Some(r) = inner.repos.get(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let all: Vec<Value> = r
                .events
                .iter()
                .rev()
                .map(|e| {
                    let issue = &r.issues[&e.issue];
                    json!({
                        "id": e.id,
                        "node_id": format!("LE_{}", e.id),
                        "event": e.event,
                        "actor": user_json(&e.actor),
                        "label": e.label.as_ref().map(|l| json!({"name": l, "color": "ededed"})),
                        "created_at": CREATED_AT,
                        "issue": issue_json(&base, &repo, issue),
                    })
                })
                .collect();
            paginate(&base, path, &params, all)
        }
        ("GET", ["repos", owner, name, "issues", "comments"]) => {
            let repo = format!("{owner}/{name}");
            let Some(r) = inner.repos.get(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let mut all: Vec<(u64, Value)> = r
                .issues
                .values()
                .flat_map(|i| {
                    i.comments
                        .iter()
                        .map(|c| (c.id, comment_json(&repo, i.number, c)))
                })
                .collect();
            all.sort_by_key(|(id, _)| *id);
            if params.get("direction").is_some_and(|d| d == "desc") {
                all.reverse();
            }
            paginate(
                &base,
                path,
                &params,
                all.into_iter().map(|(_, v)| v).collect(),
            )
        }
        ("GET", ["repos", owner, name, "issues", number]) => {
            let repo = format!("{owner}/{name}");
            match find_issue(inner, &repo, number) {
                Some(issue) => Answer::json(StatusCode::OK, issue_json(&base, &repo, issue)),
                None => Answer::error(StatusCode::NOT_FOUND, "Not Found"),
            }
        }
        ("PATCH", ["repos", owner, name, "issues", number]) => {
            let repo = format!("{owner}/{name}");
            let Some(issue) = find_issue_mut(inner, &repo, number) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            if let Some(state) = body_json.get("state").and_then(Value::as_str) {
                issue.state = state.to_owned();
            }
            if let Some(reason) = body_json.get("state_reason").and_then(Value::as_str) {
                if !["completed", "not_planned", "reopened", "duplicate"].contains(&reason) {
                    return Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "Validation Failed");
                }
                issue.state_reason = Some(reason.to_owned());
            }
            let issue = issue.clone();
            Answer::json(StatusCode::OK, issue_json(&base, &repo, &issue))
        }
        ("GET", ["repos", owner, name, "issues", number, "comments"]) => {
            let repo = format!("{owner}/{name}");
            let Some(issue) = find_issue(inner, &repo, number) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let all: Vec<Value> = issue
                .comments
                .iter()
                .map(|c| comment_json(&repo, issue.number, c))
                .collect();
            paginate(&base, path, &params, all)
        }
        ("POST", ["repos", owner, name, "issues", number, "comments"]) => {
            let repo = format!("{owner}/{name}");
            let Some(text) = body_json.get("body").and_then(Value::as_str) else {
                return Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "Validation Failed");
            };
            if text.chars().count() > MAX_COMMENT_CHARS {
                return too_long("IssueComment");
            }
            inner.next_id += 1;
            let id = inner.next_id;
            let viewer = inner.viewer.clone();
            let Some(issue) = find_issue_mut(inner, &repo, number) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let comment = FakeComment {
                id,
                author: viewer,
                body: text.to_owned(),
                updated: false,
                created_at: orchestrator_types::format_millis(orchestrator_types::now_millis()),
            };
            issue.comments.push(comment.clone());
            let number = issue.number;
            Answer::json(StatusCode::CREATED, comment_json(&repo, number, &comment))
        }
        ("PATCH", ["repos", owner, name, "issues", "comments", id]) => {
            let repo = format!("{owner}/{name}");
            let Some(text) = body_json.get("body").and_then(Value::as_str) else {
                return Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "Validation Failed");
            };
            let viewer = inner.viewer.clone();
            let Some(r) = inner.repos.get_mut(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            for issue in r.issues.values_mut() {
                let number = issue.number;
                if let Some(c) = issue.comments.iter_mut().find(|c| c.id.to_string() == *id) {
                    if c.author != viewer {
                        return Answer::error(
                            StatusCode::FORBIDDEN,
                            "Resource not accessible by integration",
                        );
                    }
                    c.body = text.to_owned();
                    c.updated = true;
                    let c = c.clone();
                    return Answer::json(StatusCode::OK, comment_json(&repo, number, &c));
                }
            }
            Answer::error(StatusCode::NOT_FOUND, "Not Found")
        }
        ("GET", ["repos", owner, name, "pulls"]) => {
            let repo = format!("{owner}/{name}");
            let Some(r) = inner.repos.get(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            // Newest first (GitHub's `sort=created&direction=desc`); `state` open by default, or
            // closed or all; `head` as `owner:branch`.
            let state = params.get("state").map_or("open", String::as_str);
            let head = params.get("head").map(|h| h.replace("%3A", ":"));
            let all: Vec<Value> = r
                .issues
                .values()
                .rev()
                .filter(|i| i.pull.is_some() && (state == "all" || i.state == state))
                .filter(|i| {
                    head.as_deref().is_none_or(|h| {
                        h == format!("{owner}:{}", i.pull.as_ref().unwrap().head_ref)
                    })
                })
                .map(|i| pull_json(&base, &repo, i))
                .collect();
            paginate(&base, path, &params, all)
        }
        ("POST", ["repos", owner, name, "pulls"]) => {
            let repo = format!("{owner}/{name}");
            open_pull(inner, &base, &repo, owner, &body_json)
        }
        ("GET", ["repos", owner, name]) => {
            let repo = format!("{owner}/{name}");
            let Some(r) = inner.repos.get(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            Answer::json(
                StatusCode::OK,
                json!({
                    "id": 700_000,
                    "name": name,
                    "full_name": repo,
                    "private": false,
                    "html_url": format!("https://github.com/{repo}"),
                    "default_branch": r.git.default_branch.clone().unwrap_or_else(|| "main".to_owned()),
                    "permissions": {
                        "admin": false,
                        "maintain": false,
                        "push": !inner.read_only.contains(&repo),
                        "triage": !inner.read_only.contains(&repo),
                        "pull": true,
                    },
                }),
            )
        }
        (_, ["repos", owner, name, "git", rest @ ..]) => {
            let repo = format!("{owner}/{name}");
            let Some(r) = inner.repos.get_mut(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            git_route(&mut r.git, method.as_str(), &base, &repo, rest, &body_json)
        }
        ("GET", ["repos", owner, name, "pulls", number]) => {
            let repo = format!("{owner}/{name}");
            let Some(issue) = find_issue(inner, &repo, number).filter(|i| i.pull.is_some()) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let wants_diff = headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a.contains("application/vnd.github.diff"));
            let pull = issue.pull.as_ref().unwrap();
            if wants_diff {
                return Answer {
                    status: StatusCode::OK,
                    body: Body::from(pull.diff.clone()),
                    headers: vec![(
                        "content-type".into(),
                        "application/vnd.github.diff; charset=utf-8".into(),
                    )],
                    delay: None,
                    hold: None,
                };
            }
            Answer::json(StatusCode::OK, pull_json(&base, &repo, issue))
        }
        ("GET", ["repos", owner, name, "commits", sha, "check-runs"]) => {
            let repo = format!("{owner}/{name}");
            let Some(r) = inner.repos.get(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let runs: Vec<Value> = r
                .check_runs
                .iter()
                .filter(|c| c.head_sha == *sha)
                .map(|c| wire::check_run_json(&base, &repo, c))
                .collect();
            Answer::json(
                StatusCode::OK,
                json!({"total_count": runs.len(), "check_runs": runs}),
            )
        }
        ("GET", ["repos", owner, name, "check-runs", id, "annotations"]) => {
            let repo = format!("{owner}/{name}");
            match inner
                .repos
                .get(&repo)
                .and_then(|r| r.check_runs.iter().find(|c| c.id.to_string() == *id))
            {
                Some(run) => paginate(&base, path, &params, wire::annotation_json(run)),
                None => Answer::error(StatusCode::NOT_FOUND, "Not Found"),
            }
        }
        // GitHub answers a job's logs with a redirect to a short-lived URL of the plain text.
        ("GET", ["repos", owner, name, "actions", "jobs", id, "logs"]) => {
            let repo = format!("{owner}/{name}");
            let known = inner
                .repos
                .get(&repo)
                .is_some_and(|r| r.check_runs.iter().any(|c| c.id.to_string() == *id));
            if !known {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            }
            let mut a = Answer::json(StatusCode::FOUND, json!({}));
            a.headers.push((
                "location".into(),
                format!("{base}/_fake/job-logs/{owner}/{name}/{id}"),
            ));
            a
        }
        ("GET", ["_fake", "job-logs", owner, name, id]) => {
            let repo = format!("{owner}/{name}");
            match inner
                .repos
                .get(&repo)
                .and_then(|r| r.check_runs.iter().find(|c| c.id.to_string() == *id))
            {
                Some(run) => Answer {
                    status: StatusCode::OK,
                    body: Body::from(run.log.clone()),
                    headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())],
                    delay: None,
                    hold: None,
                },
                None => Answer::error(StatusCode::NOT_FOUND, "Not Found"),
            }
        }
        ("GET", ["repos", owner, name, "commits", sha, "status"]) => {
            let repo = format!("{owner}/{name}");
            let Some(r) = inner.repos.get(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            // The newest status of each context counts.
            let mut newest: BTreeMap<&str, &super::FakeStatus> = BTreeMap::new();
            for status in r.statuses.iter().filter(|x| x.sha == *sha) {
                newest.insert(&status.context, status);
            }
            let statuses: Vec<Value> = newest.values().map(|x| wire::status_json(x)).collect();
            let state = if newest
                .values()
                .any(|x| x.state == "failure" || x.state == "error")
            {
                "failure"
            } else if newest.values().all(|x| x.state == "success") {
                "success"
            } else {
                "pending"
            };
            Answer::json(
                StatusCode::OK,
                json!({"state": state, "sha": sha, "total_count": statuses.len(), "statuses": statuses}),
            )
        }
        ("GET", ["repos", owner, name, "commits", sha, "pulls"]) => {
            let repo = format!("{owner}/{name}");
            let Some(r) = inner.repos.get(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let all: Vec<Value> = r
                .issues
                .values()
                .filter(|x| x.pull.as_ref().is_some_and(|p| p.head_sha == *sha))
                .map(|x| pull_json(&base, &repo, x))
                .collect();
            paginate(&base, path, &params, all)
        }
        ("GET", ["repos", owner, name, "pulls", number, "reviews"]) => {
            let repo = format!("{owner}/{name}");
            let Some(r) = inner.repos.get(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let all: Vec<Value> = r
                .reviews
                .iter()
                .filter(|x| x.pull.to_string() == *number)
                .map(|x| wire::review_json(&repo, x))
                .collect();
            paginate(&base, path, &params, all)
        }
        ("GET", ["repos", owner, name, "pulls", number, "comments"]) => {
            let repo = format!("{owner}/{name}");
            let Some(r) = inner.repos.get(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let all: Vec<Value> = r
                .review_comments
                .iter()
                .filter(|c| c.pull.to_string() == *number)
                .map(|c| wire::review_comment_json(&repo, c))
                .collect();
            paginate(&base, path, &params, all)
        }
        // A reply in a review comment's thread; GitHub refuses a reply to a reply (422).
        (
            "POST",
            [
                "repos",
                owner,
                name,
                "pulls",
                number,
                "comments",
                id,
                "replies",
            ],
        ) => {
            let repo = format!("{owner}/{name}");
            let Some(text) = body_json.get("body").and_then(Value::as_str) else {
                return Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "Validation Failed");
            };
            if text.chars().count() > MAX_COMMENT_CHARS {
                return too_long("PullRequestReviewComment");
            }
            inner.next_id += 1;
            let new_id = inner.next_id;
            let viewer = inner.viewer.clone();
            let Some(r) = inner.repos.get_mut(&repo) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let Some(parent) = r
                .review_comments
                .iter()
                .find(|c| c.id.to_string() == *id && c.pull.to_string() == *number)
                .cloned()
            else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            if parent.in_reply_to.is_some() {
                return invalid("PullRequestReviewComment", "in_reply_to_id is a reply");
            }
            let reply = super::FakeReviewComment {
                id: new_id,
                review: None,
                author: viewer,
                body: text.to_owned(),
                in_reply_to: Some(parent.id),
                ..parent
            };
            r.review_comments.push(reply.clone());
            Answer::json(
                StatusCode::CREATED,
                wire::review_comment_json(&repo, &reply),
            )
        }
        ("GET", ["repos", owner, name, "pulls", number, "files"]) => {
            let repo = format!("{owner}/{name}");
            let Some(pull) = find_issue(inner, &repo, number).and_then(|i| i.pull.clone()) else {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let all: Vec<Value> = pull
                .files
                .iter()
                .map(|(filename, status, patch)| {
                    let additions = patch.lines().filter(|l| l.starts_with('+')).count();
                    let deletions = patch.lines().filter(|l| l.starts_with('-')).count();
                    json!({
                        "sha": "c".repeat(40),
                        "filename": filename,
                        "status": status,
                        "additions": additions,
                        "deletions": deletions,
                        "changes": additions + deletions,
                        "patch": patch,
                    })
                })
                .collect();
            paginate(&base, path, &params, all)
        }
        ("GET", ["repos", owner, name, "collaborators", user, "permission"]) => {
            let repo = format!("{owner}/{name}");
            // An app's bot is no user GitHub can name a collaborator.
            if user.ends_with("[bot]") {
                return Answer::error(StatusCode::NOT_FOUND, "Not Found");
            }
            // The role as set (admin, maintain, write, triage, read, or a custom role's name);
            // `permission` folds it the way GitHub does: maintain and custom roles built on write
            // into write, triage into read.
            let role = inner
                .repos
                .get(&repo)
                .and_then(|r| r.permissions.get(*user))
                .cloned()
                .unwrap_or_else(|| "none".to_owned());
            let permission = match role.as_str() {
                "admin" => "admin",
                "maintain" | "write" => "write",
                "triage" | "read" => "read",
                "none" => "none",
                _ => "write",
            };
            Answer::json(
                StatusCode::OK,
                json!({"permission": permission, "role_name": role, "user": user_json(user)}),
            )
        }
        _ => Answer::error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

/// A pull request's head is wherever its branch is now, as on GitHub: a push to the branch
/// moves it. A fork's branch lives in another repository, which the fake does not follow.
fn follow_heads(repo: &mut super::FakeRepo) {
    for issue in repo.issues.values_mut() {
        if let Some(pull) = issue.pull.as_mut().filter(|p| p.head_repo.is_none())
            && let Some(sha) = repo.git.refs.get(&format!("heads/{}", pull.head_ref))
        {
            pull.head_sha = sha.clone();
        }
    }
}

fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once('=')?;
            Some((k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// GitHub's page-number pagination: `per_page` (default 30, at most 100), `page`, and a `Link`
/// header with `next` and `last` while there are more.
fn paginate(base: &str, path: &str, params: &BTreeMap<String, String>, all: Vec<Value>) -> Answer {
    let per_page: usize = params
        .get("per_page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(30)
        .clamp(1, 100);
    let page: usize = params
        .get("page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(1)
        .max(1);
    let last = all.len().div_ceil(per_page).max(1);
    let items: Vec<Value> = all
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    let mut answer = Answer::json(StatusCode::OK, Value::Array(items));
    if page < last {
        let mut others: Vec<String> = params
            .iter()
            .filter(|(k, _)| *k != "page" && *k != "per_page")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        others.push(format!("per_page={per_page}"));
        let rest = others.join("&");
        let link = format!(
            "<{base}{path}?{rest}&page={}>; rel=\"next\", <{base}{path}?{rest}&page={last}>; rel=\"last\"",
            page + 1
        );
        answer.headers.push(("link".into(), link));
    }
    answer
}

fn find_issue<'a>(inner: &'a Inner, repo: &str, number: &str) -> Option<&'a FakeIssue> {
    let number: u64 = number.parse().ok()?;
    inner.repos.get(repo)?.issues.get(&number)
}

fn find_issue_mut<'a>(inner: &'a mut Inner, repo: &str, number: &str) -> Option<&'a mut FakeIssue> {
    let number: u64 = number.parse().ok()?;
    inner.repos.get_mut(repo)?.issues.get_mut(&number)
}

/// GitHub's 422 with one detail in `errors[]`.
fn invalid(resource: &str, message: &str) -> Answer {
    Answer::json(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({
            "message": "Validation Failed",
            "errors": [{"resource": resource, "code": "custom", "message": message}],
            "documentation_url": "https://docs.github.com/rest",
            "status": "422",
        }),
    )
}
