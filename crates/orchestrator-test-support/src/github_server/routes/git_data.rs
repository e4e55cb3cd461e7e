//! The Git Data API (blobs, trees, commits, refs) over each repository's in-memory objects, and
//! opening a pull request: what a PR attempt's push and its pull request go through.

use super::*;

pub(super) fn git_route(
    git: &mut GitObjects,
    method: &str,
    base: &str,
    repo: &str,
    rest: &[&str],
    body: &Value,
) -> Answer {
    let url = |kind: &str, sha: &str| format!("{base}/repos/{repo}/git/{kind}/{sha}");
    match (method, rest) {
        ("POST", ["blobs"]) => {
            let (Some(content), encoding) = (
                body["content"].as_str(),
                body["encoding"].as_str().unwrap_or("utf-8"),
            ) else {
                return invalid("Blob", "content is missing");
            };
            let Some(bytes) = GitObjects::decode_blob(content, encoding) else {
                return invalid(
                    "Blob",
                    "encoding is not utf-8 or base64, or the content is not",
                );
            };
            let sha = blob_id(&bytes);
            git.blobs.insert(sha.clone(), bytes);
            Answer::json(
                StatusCode::CREATED,
                json!({"sha": sha, "url": url("blobs", &sha)}),
            )
        }
        ("POST", ["trees"]) => {
            let entries = body["tree"].as_array().cloned().unwrap_or_default();
            match git.build_tree(body["base_tree"].as_str(), &entries) {
                Ok(sha) => {
                    let mut tree = git.tree_json(&sha).unwrap();
                    tree["url"] = Value::from(url("trees", &sha));
                    Answer::json(StatusCode::CREATED, tree)
                }
                Err(message) => Answer::error(StatusCode::UNPROCESSABLE_ENTITY, &message),
            }
        }
        ("GET", ["trees", sha]) => match git.tree_json(sha) {
            Some(tree) => Answer::json(StatusCode::OK, tree),
            None => Answer::error(StatusCode::NOT_FOUND, "Not Found"),
        },
        ("POST", ["commits"]) => {
            let Some(tree) = body["tree"].as_str().filter(|t| git.trees.contains_key(*t)) else {
                return Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "Tree SHA does not exist");
            };
            let parents: Vec<String> = body["parents"]
                .as_array()
                .map(|p| {
                    p.iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if parents.iter().any(|p| !git.commits.contains_key(p)) {
                return Answer::error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Parent SHA does not exist or is not a commit object",
                );
            }
            // GitHub takes ISO 8601 and keeps seconds, as git does.
            let date = match body["author"]["date"].as_str() {
                Some(given) => match orchestrator_types::parse_time(given, 0) {
                    Ok(millis) => millis.div_euclid(1000).to_string(),
                    Err(_) => return invalid("Commit", "author.date is not an ISO 8601 time"),
                },
                None => std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
                    .to_string(),
            };
            let commit = FakeCommit {
                tree: tree.to_owned(),
                parents,
                message: body["message"].as_str().unwrap_or("").to_owned(),
                date,
            };
            let sha = commit_id(&commit);
            let answer = commit_json(&url("commits", &sha), &sha, &commit);
            git.commits.insert(sha, commit);
            Answer::json(StatusCode::CREATED, answer)
        }
        ("GET", ["commits", sha]) => match git.commits.get(*sha) {
            Some(commit) => Answer::json(
                StatusCode::OK,
                commit_json(&url("commits", sha), sha, commit),
            ),
            None => Answer::error(StatusCode::NOT_FOUND, "Not Found"),
        },
        ("GET", ["ref", name @ ..]) => {
            let name = name.join("/");
            match git.refs.get(&name) {
                Some(sha) => Answer::json(
                    StatusCode::OK,
                    json!({"ref": format!("refs/{name}"), "object": {"sha": sha, "type": "commit", "url": url("commits", sha)}}),
                ),
                None => Answer::error(StatusCode::NOT_FOUND, "Not Found"),
            }
        }
        // A branch moved to another commit: with `force` false (GitHub's default) only forward,
        // to a commit that has the branch's head among its ancestors; else GitHub's 422.
        ("PATCH", ["refs", "heads", branch @ ..]) => {
            let name = format!("heads/{}", branch.join("/"));
            let Some(sha) = body["sha"].as_str() else {
                return Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "sha is required");
            };
            let Some(head) = git.refs.get(&name).cloned() else {
                return Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "Reference does not exist");
            };
            if !git.commits.contains_key(sha) {
                return Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "Object does not exist");
            }
            let force = body["force"].as_bool().unwrap_or(false);
            if !force && !git.descends_from(sha, &head) {
                return Answer::error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Update is not a fast forward",
                );
            }
            git.set_ref(&name, sha);
            Answer::json(
                StatusCode::OK,
                json!({"ref": format!("refs/{name}"), "object": {"sha": sha, "type": "commit", "url": url("commits", sha)}}),
            )
        }
        ("POST", ["refs"]) => {
            let (Some(full), Some(sha)) = (body["ref"].as_str(), body["sha"].as_str()) else {
                return Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "ref and sha are required");
            };
            let Some(name) = full
                .strip_prefix("refs/")
                .filter(|n| n.starts_with("heads/"))
            else {
                return Answer::error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Reference name must start with 'refs/heads/'",
                );
            };
            if !git.commits.contains_key(sha) {
                return Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "Object does not exist");
            }
            if git.refs.contains_key(name) {
                return Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "Reference already exists");
            }
            git.set_ref(name, sha);
            Answer::json(
                StatusCode::CREATED,
                json!({"ref": full, "object": {"sha": sha, "type": "commit"}}),
            )
        }
        _ => Answer::error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

fn commit_json(url: &str, sha: &str, commit: &FakeCommit) -> Value {
    json!({
        "sha": sha,
        "url": url,
        "message": commit.message,
        "tree": {"sha": commit.tree},
        "parents": commit.parents.iter().map(|p| json!({"sha": p})).collect::<Vec<_>>(),
        "author": {"name": "Fake GitHub", "email": "fake@github.invalid", "date": CREATED_AT},
    })
}

/// `POST /repos/{repo}/pulls`: both branches must exist, and one open pull request per head and
/// base, as GitHub enforces.
pub(super) fn open_pull(
    inner: &mut Inner,
    base_url: &str,
    repo: &str,
    owner: &str,
    body: &Value,
) -> Answer {
    let viewer = inner.viewer.clone();
    let Some(r) = inner.repos.get_mut(repo) else {
        return Answer::error(StatusCode::NOT_FOUND, "Not Found");
    };
    let (Some(title), Some(head), Some(base)) = (
        body["title"].as_str(),
        body["head"].as_str(),
        body["base"].as_str(),
    ) else {
        return invalid("PullRequest", "title, head and base are required");
    };
    let head = head.strip_prefix(&format!("{owner}:")).unwrap_or(head);
    let (Some(head_sha), Some(base_sha)) = (
        r.git.refs.get(&format!("heads/{head}")).cloned(),
        r.git.refs.get(&format!("heads/{base}")).cloned(),
    ) else {
        return Answer::json(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "field": if r.git.refs.contains_key(&format!("heads/{head}")) { "base" } else { "head" }, "code": "invalid"}], "status": "422"}),
        );
    };
    let exists = r.issues.values().any(|i| {
        i.state == "open"
            && i.pull
                .as_ref()
                .is_some_and(|p| p.head_ref == head && p.base_ref == base)
    });
    if exists {
        return invalid(
            "PullRequest",
            &format!("A pull request already exists for {owner}:{head}."),
        );
    }
    let number = r.issues.keys().max().copied().unwrap_or(0) + 1;
    let issue = FakeIssue {
        number,
        title: title.to_owned(),
        body: body["body"].as_str().unwrap_or("").to_owned(),
        author: viewer,
        state: "open".to_owned(),
        state_reason: None,
        labels: Vec::new(),
        comments: Vec::new(),
        pull: Some(FakePull {
            head_ref: head.to_owned(),
            head_sha,
            base_ref: base.to_owned(),
            base_sha,
            files: Vec::new(),
            diff: String::new(),
            draft: body["draft"].as_bool().unwrap_or(false),
            head_repo: None,
            maintainer_can_modify: false,
        }),
    };
    let answer = pull_json(base_url, repo, &issue);
    r.issues.insert(number, issue);
    Answer::json(StatusCode::CREATED, answer)
}
