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
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use tokio::sync::oneshot;

use crate::http_server;
pub use checks::{CheckRunSpec, FakeCheckRun, FakeStatus};
pub use reviews::{FakeReview, FakeReviewComment};

mod checks;
mod git;
mod page;
mod reviews;
mod routes;
mod wire;

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
    /// When it was made, RFC 3339, as GitHub dates it.
    pub created_at: String,
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
    pub draft: bool,
    /// The fork (`owner/name`) the head branch lives in; `None` for a branch of the repository.
    pub head_repo: Option<String>,
    /// Whether the fork's owner lets the repository's maintainers push to the branch.
    pub maintainer_can_modify: bool,
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
    check_runs: Vec<FakeCheckRun>,
    statuses: Vec<FakeStatus>,
    reviews: Vec<FakeReview>,
    review_comments: Vec<FakeReviewComment>,
    issues: BTreeMap<u64, FakeIssue>,
    permissions: BTreeMap<String, String>,
    events: Vec<FakeEvent>,
    git: git::GitObjects,
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
    /// A secondary rate limit as GitHub often sends it: 403 and a message, no `retry-after`.
    SecondaryLimitBare,
    /// Do the work, then hold the answer back until the test releases it.
    Hold(Arc<tokio::sync::Semaphore>),
    /// Answer with this redirect status and `Location`, doing nothing.
    Redirect(u16, String),
    /// Do nothing, and answer nothing until the test releases it (then 504): a request that
    /// reached GitHub and was lost, as when the client is killed while it waits.
    Stall(Arc<tokio::sync::Semaphore>),
}

/// An answer the fake holds back (see [`FakeGitHub::hold_next`]) until [`Held::release`].
#[derive(Debug, Clone)]
pub struct Held(Arc<tokio::sync::Semaphore>);

impl Held {
    /// Lets the held answer (and any later one held by the same call) go.
    pub fn release(&self) {
        self.0.add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }
}

#[derive(Debug)]
struct Inner {
    base_url: String,
    token: String,
    viewer: String,
    /// What `x-oauth-scopes` says on every answer, as GitHub says it to a classic token; `None`
    /// sends no such header, as for a fine-grained or an app's token.
    scopes: Option<String>,
    /// Repositories the token may read but not push to (`permissions.push` false).
    read_only: std::collections::BTreeSet<String>,
    repos: BTreeMap<String, FakeRepo>,
    next_id: u64,
    faults: Vec<Fault>,
    log: Vec<LoggedRequest>,
    /// Renamed repositories: the old name → the repository's id; its data lives under the new
    /// name in `repos`.
    renamed: BTreeMap<String, u64>,
    /// Repository ids GitHub's redirects point at (`/repositories/{id}/...`) → the current name.
    repo_ids: BTreeMap<u64, String>,
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
        http_server::spawn(listener, app, stop);
        fake
    }

    /// Starts on a thread with its own runtime, for tests that drive other processes.
    pub fn start_blocking() -> FakeGitHub {
        let (fake, listener, app, stop) = FakeGitHub::prepare();
        http_server::spawn_on_thread("fake-github", listener, app, stop);
        fake
    }

    fn prepare() -> (
        FakeGitHub,
        std::net::TcpListener,
        Router,
        oneshot::Receiver<()>,
    ) {
        let (listener, addr) = http_server::bind();
        let inner = Arc::new(Mutex::new(Inner {
            base_url: format!("http://{addr}"),
            token: FAKE_TOKEN.to_owned(),
            viewer: "orchestrator-bot".to_owned(),
            scopes: Some("repo, workflow".to_owned()),
            read_only: Default::default(),
            repos: BTreeMap::new(),
            next_id: 1000,
            faults: Vec::new(),
            log: Vec::new(),
            renamed: BTreeMap::new(),
            repo_ids: BTreeMap::new(),
        }));
        let app = Router::new()
            .fallback(routes::handle)
            .with_state(inner.clone());
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

    /// The token's scopes as `x-oauth-scopes` lists them (default `repo, workflow`), or `None`
    /// for a token whose scopes GitHub does not report (fine-grained, an app's).
    pub fn set_scopes(&self, scopes: Option<&str>) {
        self.with(|i| i.scopes = scopes.map(str::to_owned));
    }

    /// Makes the token read-only on `repo`: `GET /repos/{repo}` says `push: false`.
    pub fn set_read_only(&self, repo: &str) {
        self.with(|i| {
            i.read_only.insert(repo.to_owned());
        });
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
                draft: false,
                head_repo: None,
                maintainer_can_modify: false,
            });
        });
    }

    /// Makes the head of pull request `number` a branch of the fork `fork` (`owner/name`), which
    /// lets maintainers push to it or not.
    pub fn make_fork_pull(&self, repo: &str, number: u64, fork: &str, maintainer_can_modify: bool) {
        self.with(|i| {
            let pull = i
                .repos
                .get_mut(repo)
                .and_then(|r| r.issues.get_mut(&number))
                .and_then(|x| x.pull.as_mut())
                .expect("a pull request");
            pull.head_repo = Some(fork.to_owned());
            pull.maintainer_can_modify = maintainer_can_modify;
        });
    }

    /// Sets the body of an issue or pull request, as a person editing it on GitHub.
    pub fn set_body(&self, repo: &str, number: u64, body: &str) {
        self.with(|i| {
            if let Some(issue) = i
                .repos
                .get_mut(repo)
                .and_then(|r| r.issues.get_mut(&number))
            {
                issue.body = body.to_owned();
            }
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
                created_at: orchestrator_types::format_millis(orchestrator_types::now_millis()),
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

    /// The next `count` matching requests are answered with the redirect `status` to `location`,
    /// and change nothing.
    pub fn redirect_next(
        &self,
        method: &str,
        path_contains: &str,
        count: u32,
        status: u16,
        location: &str,
    ) {
        self.fault(
            method,
            path_contains,
            count,
            FaultKind::Redirect(status, location.to_owned()),
        );
    }

    /// Gives `repo` the history of the local repository at `dir` as the Git Data API serves it:
    /// HEAD's commit, tree and blobs, as the head of HEAD's branch, which becomes the default
    /// branch.
    pub fn seed_git(&self, repo: &str, dir: &std::path::Path) {
        self.with(|i| {
            i.repos.entry(repo.to_owned()).or_default().git.seed(dir);
        });
    }

    /// Every file on `branch` of `repo`: path → (mode, bytes); `None` when there is no such
    /// branch.
    pub fn branch_files(
        &self,
        repo: &str,
        branch: &str,
    ) -> Option<BTreeMap<String, (String, Vec<u8>)>> {
        self.with(|i| i.repos.get(repo)?.git.files(branch))
    }

    /// Makes `branch` of `repo` point where `to` does, as a push from elsewhere would.
    pub fn point_branch(&self, repo: &str, branch: &str, to: &str) {
        self.with(|i| {
            let git = &mut i.repos.get_mut(repo).expect("a seeded repository").git;
            let head = git.refs[&format!("heads/{to}")].clone();
            git.set_ref(&format!("heads/{branch}"), &head);
        });
    }

    /// Adds a commit on `branch` of `repo` holding its head's tree and `files` (path, content)
    /// besides, as someone else's push would; returns its id.
    pub fn push_to_branch(&self, repo: &str, branch: &str, files: &[(&str, &str)]) -> String {
        self.with(|i| {
            let git = &mut i.repos.get_mut(repo).expect("a seeded repository").git;
            let name = format!("heads/{branch}");
            let head = git.refs[&name].clone();
            let base_tree = git.commits[&head].tree.clone();
            let entries: Vec<serde_json::Value> = files
                .iter()
                .map(|(path, content)| {
                    let sha = git::blob_id(content.as_bytes());
                    git.blobs.insert(sha.clone(), content.as_bytes().to_vec());
                    serde_json::json!({"path": path, "mode": "100644", "type": "blob", "sha": sha})
                })
                .collect();
            let tree = git.build_tree(Some(&base_tree), &entries).expect("a tree");
            let commit = git::FakeCommit {
                tree,
                parents: vec![head],
                message: format!("someone else's push to {branch}"),
                date: "1767323046".to_owned(),
            };
            let sha = git::commit_id(&commit);
            git.commits.insert(sha.clone(), commit);
            git.set_ref(&name, &sha);
            sha
        })
    }

    /// The commits of `branch` of `repo`, newest first, by first parent; empty when there is no
    /// such branch.
    pub fn branch_commits(&self, repo: &str, branch: &str) -> Vec<String> {
        self.with(|i| {
            let Some(git) = i.repos.get(repo).map(|r| &r.git) else {
                return Vec::new();
            };
            let mut at = git.refs.get(&format!("heads/{branch}")).cloned();
            let mut chain = Vec::new();
            while let Some(sha) = at {
                at = git
                    .commits
                    .get(&sha)
                    .and_then(|c| c.parents.first().cloned());
                chain.push(sha);
            }
            chain
        })
    }

    /// The branches of `repo` (without `heads/`).
    pub fn branches(&self, repo: &str) -> Vec<String> {
        self.with(|i| {
            i.repos
                .get(repo)
                .map(|r| {
                    r.git
                        .refs
                        .keys()
                        .filter_map(|k| k.strip_prefix("heads/").map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// The pull requests of `repo`, oldest first.
    pub fn pulls(&self, repo: &str) -> Vec<FakeIssue> {
        self.with(|i| {
            i.repos
                .get(repo)
                .map(|r| {
                    r.issues
                        .values()
                        .filter(|x| x.pull.is_some())
                        .cloned()
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// Renames (or transfers) a repository as GitHub does: requests to the old name are
    /// redirected to `/repositories/{id}/...`, with 301 for a GET and 307 for other methods.
    pub fn rename_repo(&self, old: &str, new: &str) {
        self.with(|i| {
            let repo = i.repos.remove(old).unwrap_or_default();
            i.repos.insert(new.to_owned(), repo);
            i.next_id += 1;
            let id = i.next_id;
            i.renamed.insert(old.to_owned(), id);
            i.repo_ids.insert(id, new.to_owned());
        });
    }

    /// The next matching request is carried out, and its answer is held back until the returned
    /// handle is released: a test can then assert what happened while GitHub had not answered.
    pub fn hold_next(&self, method: &str, path_contains: &str) -> Held {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        self.fault(method, path_contains, 1, FaultKind::Hold(gate.clone()));
        Held(gate)
    }

    /// The next matching request is never carried out: it waits until the returned handle is
    /// released, then is answered 504 with nothing done. A test kills the client meanwhile, to
    /// stop it between two writes.
    pub fn stall_next(&self, method: &str, path_contains: &str) -> Held {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        self.fault(method, path_contains, 1, FaultKind::Stall(gate.clone()));
        Held(gate)
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

    /// The next `count` matching requests hit a secondary rate limit that names no wait.
    pub fn bare_secondary_limit_next(&self, method: &str, path_contains: &str, count: u32) {
        self.fault(method, path_contains, count, FaultKind::SecondaryLimitBare);
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

    /// Closes an issue or a pull request, as a person does on GitHub.
    pub fn close(&self, repo: &str, number: u64) {
        self.with(|i| {
            let issue = i
                .repos
                .get_mut(repo)
                .unwrap()
                .issues
                .get_mut(&number)
                .unwrap();
            issue.state = "closed".to_owned();
        });
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
