//! A fake GitHub: a real HTTP server on 127.0.0.1 that speaks the REST API's wire format for the
//! endpoints orchestrator uses, backed by an in-memory set of repositories.
//!
//! It answers the way api.github.com does where a client can tell the difference: JSON shapes with
//! the fields clients read (and `html_url`s that look like github.com's), `Link` headers for
//! pagination, `x-ratelimit-*` headers, 401 for a missing or wrong token, 404 with GitHub's error
//! body, `application/vnd.github.diff` for a pull request's diff. Tests script trouble on top:
//! the next N requests to a route fail with a status, a reply is held back after the write is
//! done (so the client times out on a write that happened), or the rate limit is spent.
//!
//! Every request is logged, so a test can assert what reached GitHub, and the state can be read
//! back (comments, an issue's state), so a test asserts what GitHub would show.

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// The token the fake accepts unless a test sets another.
pub const FAKE_TOKEN: &str = "ghp_faketoken0123456789";

/// Fixed timestamps: the fake's answers depend on the script only.
const CREATED_AT: &str = "2026-01-02T03:04:05Z";

#[derive(Debug, Clone)]
pub struct FakeComment {
    pub id: u64,
    pub author: String,
    pub body: String,
    pub updated: bool,
}

#[derive(Debug, Clone)]
pub struct FakeIssue {
    pub number: u64,
    pub title: String,
    pub body: String,
    pub author: String,
    pub state: String,
    pub state_reason: Option<String>,
    pub labels: Vec<String>,
    pub comments: Vec<FakeComment>,
    pub pull: Option<FakePull>,
}

#[derive(Debug, Clone)]
pub struct FakePull {
    pub head_ref: String,
    pub head_sha: String,
    pub base_ref: String,
    pub base_sha: String,
    /// (filename, status, patch)
    pub files: Vec<(String, String, String)>,
    pub diff: String,
}

#[derive(Debug, Clone)]
struct FakeEvent {
    id: u64,
    event: String,
    actor: String,
    label: Option<String>,
    issue: u64,
}

#[derive(Debug, Default)]
struct FakeRepo {
    issues: BTreeMap<u64, FakeIssue>,
    permissions: BTreeMap<String, String>,
    events: Vec<FakeEvent>,
}

/// One request as it reached the fake.
#[derive(Debug, Clone)]
pub struct LoggedRequest {
    pub method: String,
    pub path: String,
    pub query: String,
    pub authorization: Option<String>,
    pub accept: Option<String>,
    pub body: String,
}

#[derive(Debug, Clone)]
struct Fault {
    method: String,
    path_contains: String,
    remaining: u32,
    kind: FaultKind,
}

#[derive(Debug, Clone)]
enum FaultKind {
    /// Answer with this status and GitHub's error body, doing nothing.
    Status(u16),
    /// Do the work, then hold the answer back this long.
    DelayAfter(Duration),
    /// A primary rate limit: 403, `x-ratelimit-remaining: 0`, reset this many seconds from now.
    PrimaryLimit { reset_in: u64 },
    /// A secondary rate limit: 403 with `retry-after`.
    SecondaryLimit { retry_after: u64 },
}

#[derive(Debug)]
struct Inner {
    base_url: String,
    token: String,
    viewer: String,
    repos: BTreeMap<String, FakeRepo>,
    next_id: u64,
    faults: Vec<Fault>,
    log: Vec<LoggedRequest>,
}

/// The server; it stops when dropped.
pub struct FakeGitHub {
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    _stop: oneshot::Sender<()>,
}

impl FakeGitHub {
    /// Starts on the current tokio runtime.
    pub async fn start() -> FakeGitHub {
        let (fake, listener, app, stop) = FakeGitHub::prepare();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        tokio::spawn(serve(listener, app, stop));
        fake
    }

    /// Starts on a thread with its own runtime, for tests that drive other processes.
    pub fn start_blocking() -> FakeGitHub {
        let (fake, listener, app, stop) = FakeGitHub::prepare();
        std::thread::Builder::new()
            .name("fake-github".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    serve(listener, app, stop).await;
                });
            })
            .unwrap();
        fake
    }

    fn prepare() -> (
        FakeGitHub,
        std::net::TcpListener,
        Router,
        oneshot::Receiver<()>,
    ) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let inner = Arc::new(Mutex::new(Inner {
            base_url: format!("http://{addr}"),
            token: FAKE_TOKEN.to_owned(),
            viewer: "orchestrator-bot".to_owned(),
            repos: BTreeMap::new(),
            next_id: 1000,
            faults: Vec::new(),
            log: Vec::new(),
        }));
        let app = Router::new().fallback(handle).with_state(inner.clone());
        let (stop_tx, stop_rx) = oneshot::channel();
        let fake = FakeGitHub {
            addr,
            inner,
            _stop: stop_tx,
        };
        (fake, listener, app, stop_rx)
    }

    /// The API base URL (what `ORCHESTRATOR_GITHUB_API_URL` takes).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap())
    }

    /// The login of the token's user (the bot).
    pub fn set_viewer(&self, login: &str) {
        self.with(|i| i.viewer = login.to_owned());
    }

    /// Adds an open issue.
    pub fn add_issue(&self, repo: &str, number: u64, title: &str, body: &str, author: &str) {
        self.with(|i| {
            i.repos.entry(repo.to_owned()).or_default().issues.insert(
                number,
                FakeIssue {
                    number,
                    title: title.to_owned(),
                    body: body.to_owned(),
                    author: author.to_owned(),
                    state: "open".to_owned(),
                    state_reason: None,
                    labels: Vec::new(),
                    comments: Vec::new(),
                    pull: None,
                },
            );
        });
    }

    /// Makes an issue added with [`FakeGitHub::add_issue`] a pull request (on GitHub a pull
    /// request is an issue with a pull part), with its files (filename, status, patch) and diff.
    pub fn make_pull(&self, repo: &str, number: u64, files: &[(&str, &str, &str)], diff: &str) {
        self.with(|i| {
            let issue = i
                .repos
                .get_mut(repo)
                .unwrap()
                .issues
                .get_mut(&number)
                .unwrap();
            issue.pull = Some(FakePull {
                head_ref: format!("feature-{number}"),
                head_sha: "a".repeat(40),
                base_ref: "main".to_owned(),
                base_sha: "b".repeat(40),
                files: files
                    .iter()
                    .map(|(f, s, p)| ((*f).to_owned(), (*s).to_owned(), (*p).to_owned()))
                    .collect(),
                diff: diff.to_owned(),
            });
        });
    }

    /// Adds a comment as `author`, returning its id.
    pub fn add_comment(&self, repo: &str, number: u64, author: &str, body: &str) -> u64 {
        self.with(|i| {
            i.next_id += 1;
            let id = i.next_id;
            let issue = i
                .repos
                .get_mut(repo)
                .unwrap()
                .issues
                .get_mut(&number)
                .unwrap();
            issue.comments.push(FakeComment {
                id,
                author: author.to_owned(),
                body: body.to_owned(),
                updated: false,
            });
            id
        })
    }

    /// Adds a label to an issue and the repository's `labeled` issue event, returning the event id.
    pub fn label_issue(&self, repo: &str, number: u64, label: &str, actor: &str) -> u64 {
        self.with(|i| {
            i.next_id += 1;
            let id = i.next_id;
            let repo = i.repos.get_mut(repo).unwrap();
            repo.issues
                .get_mut(&number)
                .unwrap()
                .labels
                .push(label.to_owned());
            repo.events.push(FakeEvent {
                id,
                event: "labeled".to_owned(),
                actor: actor.to_owned(),
                label: Some(label.to_owned()),
                issue: number,
            });
            id
        })
    }

    /// Sets a user's role on a repository (`admin`, `maintain`, `write`, `triage`, `read`, or a
    /// custom role's name, which the fake treats as built on write).
    pub fn set_permission(&self, repo: &str, user: &str, permission: &str) {
        self.with(|i| {
            i.repos
                .entry(repo.to_owned())
                .or_default()
                .permissions
                .insert(user.to_owned(), permission.to_owned());
        });
    }

    /// The next `count` requests whose method is `method` and whose path contains `path_contains`
    /// get `status` and GitHub's error body, and change nothing.
    pub fn fail_next(&self, method: &str, path_contains: &str, status: u16, count: u32) {
        self.fault(method, path_contains, count, FaultKind::Status(status));
    }

    /// The next matching request is carried out, then its answer is held back for `delay`.
    pub fn delay_next(&self, method: &str, path_contains: &str, delay: Duration) {
        self.fault(method, path_contains, 1, FaultKind::DelayAfter(delay));
    }

    /// The next `count` matching requests hit the primary rate limit, which resets `reset_in`
    /// seconds later.
    pub fn rate_limit_next(&self, method: &str, path_contains: &str, count: u32, reset_in: u64) {
        self.fault(
            method,
            path_contains,
            count,
            FaultKind::PrimaryLimit { reset_in },
        );
    }

    /// The next `count` matching requests hit a secondary rate limit with `retry-after`.
    pub fn secondary_limit_next(
        &self,
        method: &str,
        path_contains: &str,
        count: u32,
        retry_after: u64,
    ) {
        self.fault(
            method,
            path_contains,
            count,
            FaultKind::SecondaryLimit { retry_after },
        );
    }

    fn fault(&self, method: &str, path_contains: &str, count: u32, kind: FaultKind) {
        self.with(|i| {
            i.faults.push(Fault {
                method: method.to_owned(),
                path_contains: path_contains.to_owned(),
                remaining: count,
                kind,
            })
        });
    }

    /// An issue as GitHub holds it now.
    pub fn issue(&self, repo: &str, number: u64) -> FakeIssue {
        self.with(|i| i.repos[repo].issues[&number].clone())
    }

    /// The comments of an issue, oldest first.
    pub fn comments(&self, repo: &str, number: u64) -> Vec<FakeComment> {
        self.issue(repo, number).comments
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.with(|i| i.log.clone())
    }

    /// The requests with this method whose path contains `path_contains`.
    pub fn requests_to(&self, method: &str, path_contains: &str) -> Vec<LoggedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.contains(path_contains))
            .collect()
    }
}

async fn serve(listener: tokio::net::TcpListener, app: Router, stop: oneshot::Receiver<()>) {
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::select! {
        result = axum::serve(listener, app).into_future() => result.unwrap(),
        _ = stop => {}
    }
}

/// What the routing decided, computed under the lock and answered after it.
struct Answer {
    status: StatusCode,
    body: Body,
    headers: Vec<(String, String)>,
    delay: Option<Duration>,
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

async fn handle(
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
    let expected = format!("Bearer {}", inner.token);
    let token_ok = header_str(header::AUTHORIZATION).is_some_and(|a| a == expected);
    if !token_ok {
        return Answer::error(StatusCode::UNAUTHORIZED, "Bad credentials");
    }
    let mut delay = None;
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
        }
    }
    let mut a = route(inner, method, &path, &query, headers, body);
    a.delay = delay;
    a.headers
        .push(("x-ratelimit-remaining".into(), "4999".into()));
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
            // Open pull requests, newest first (GitHub's `sort=created&direction=desc`).
            let all: Vec<Value> = r
                .issues
                .values()
                .rev()
                .filter(|i| i.pull.is_some() && i.state == "open")
                .map(|i| pull_json(&base, &repo, i))
                .collect();
            paginate(&base, path, &params, all)
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
                };
            }
            Answer::json(StatusCode::OK, pull_json(&base, &repo, issue))
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

fn user_json(login: &str) -> Value {
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

fn issue_json(base: &str, repo: &str, issue: &FakeIssue) -> Value {
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

fn comment_json(repo: &str, number: u64, c: &FakeComment) -> Value {
    json!({
        "id": c.id,
        "node_id": format!("IC_{}", c.id),
        "html_url": format!("https://github.com/{repo}/issues/{number}#issuecomment-{}", c.id),
        "issue_url": format!("https://api.github.com/repos/{repo}/issues/{number}"),
        "body": c.body,
        "user": user_json(&c.author),
        "author_association": "CONTRIBUTOR",
        "created_at": CREATED_AT,
        "updated_at": CREATED_AT,
    })
}

fn pull_json(base: &str, repo: &str, issue: &FakeIssue) -> Value {
    let pull = issue.pull.as_ref().unwrap();
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
        "draft": false,
        "merged": false,
        "user": user_json(&issue.author),
        "head": {"ref": pull.head_ref, "sha": pull.head_sha, "label": format!("{}:{}", repo.split('/').next().unwrap(), pull.head_ref)},
        "base": {"ref": pull.base_ref, "sha": pull.base_sha, "label": format!("{}:{}", repo.split('/').next().unwrap(), pull.base_ref)},
        "additions": additions,
        "deletions": deletions,
        "changed_files": pull.files.len(),
        "comments": issue.comments.len(),
        "created_at": CREATED_AT,
        "updated_at": CREATED_AT,
    })
}
