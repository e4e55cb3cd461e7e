//! pr_open through the durable registry an agent gets: a real git repository, a real SQLite store,
//! real gate runs, and a fake GitHub on 127.0.0.1 whose Git Data API hashes blobs, trees and
//! commits as git does. The pushed branch is compared byte for byte, mode for mode, with the tree
//! the attempt recorded: a binary file, a deletion, a rename, an executable bit and a symlink.

use orchestrator_github::{ClientConfig as GithubConfig, GitHub};
use orchestrator_store::{Lease, Store, Task};
use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
use orchestrator_test_support::{git, git_repo};
use orchestrator_tools::{Decision, Policy, Registry, ToolContext, ToolResult};
use orchestrator_types::{EventKind, GateSpec, NewTask, TaskId};
use orchestrator_worker::agent::tools::durable_registry;
use orchestrator_worker::runner::RunContext;
use orchestrator_worker::{AgentConfig, Backoff, Metrics};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const REPO: &str = "acme/widgets";

/// Bytes git must treat as binary: a NUL, and bytes that are not UTF-8.
const LOGO: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x00\x01binary\x00tail";

struct Agent {
    registry: Registry,
    ctx: ToolContext,
    task: TaskId,
}

impl Agent {
    /// An agent task in `workspace` with the gate `check` its author wrote (`test -f src/lib.rs`
    /// unless `gate` says otherwise), claimed, with its durable tools talking to `github`.
    async fn start(
        store: &Store,
        workspace: &Path,
        home: &Path,
        github: &FakeGitHub,
        gate: &str,
        pre_approved: bool,
    ) -> Agent {
        let mut new = NewTask::agent("Make the answer 42", "x");
        new.workspace = Some(workspace.display().to_string());
        new.gates = vec![GateSpec {
            name: "check".into(),
            ..GateSpec::from_command(gate)
        }];
        // The policy the agent loop would run it under: GitHub writes ask a person unless named.
        let mut policy = Policy::allow_all();
        if pre_approved {
            policy.tools.insert("pr_open".into(), Decision::Allow);
        }
        new.agent.policy = Some(serde_json::to_value(&policy).unwrap());
        let id = store.create_task(&new).await.unwrap();
        let (task, lease): (Task, Lease) = store
            .claim("pulls-test", &["default".to_owned()], 1, 60_000)
            .await
            .unwrap()
            .remove(0);
        assert_eq!(task.id, id);
        let mut agent = AgentConfig::default();
        let mut config = GithubConfig::new(github.url(), Some(FAKE_TOKEN.into()));
        config.timeout = Duration::from_secs(2);
        agent.github = Some(GitHub::new(config).unwrap());
        let run = RunContext {
            store: store.clone(),
            metrics: Arc::new(Metrics::default()),
            backoff: Backoff::default(),
            log_cap_bytes: 1 << 20,
            worker_id: "pulls-test".into(),
            agent,
            sandbox: orchestrator_worker::Sandbox::new(Default::default()),
        };
        Agent {
            registry: durable_registry(&run, task, lease),
            ctx: ToolContext::new(workspace, home)
                .and_then(|c| c.with_policy(policy))
                .unwrap(),
            task: id,
        }
    }

    async fn call(&self, name: &str, args: Value) -> ToolResult {
        self.registry
            .call_value(name, args, &self.ctx)
            .await
            .unwrap()
    }

    async fn ok(&self, name: &str, args: Value) -> String {
        let result = self.call(name, args.clone()).await;
        let text = result.joined_text();
        assert!(!result.is_error, "{name} {args} failed: {text}");
        text
    }

    async fn refused(&self, name: &str, args: Value) -> String {
        let result = self.call(name, args.clone()).await;
        let text = result.joined_text();
        assert!(result.is_error, "{name} {args} was not refused: {text}");
        text
    }

    /// Runs the task's gate on the worktree as it is, records it, selects it; the attempt's id.
    async fn gated_attempt(&self, label: &str) -> i64 {
        let ran = self.ok("task_gate_run", json!({"gate": "check"})).await;
        assert!(ran.contains("passed"), "{ran}");
        let recorded = self.ok("pr_attempt_record", json!({"label": label})).await;
        let id: i64 = recorded
            .strip_prefix("Recorded attempt ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no attempt id in {recorded:?}"));
        self.ok("pr_attempt_select", json!({"attempt_id": id}))
            .await;
        id
    }
}

/// path → (mode, bytes) of every file git would commit from the worktree now (a symlink's bytes are
/// its target), read through a scratch index so the worktree's own index is left alone.
fn worktree_files(repo: &Path) -> BTreeMap<String, (String, Vec<u8>)> {
    let index = repo.join(".git/scratch-index");
    let env = [("GIT_INDEX_FILE", index.to_str().unwrap())];
    let run = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(repo)
            .envs(env)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        out.stdout
    };
    run(&["read-tree", "HEAD"]);
    run(&["add", "-A"]);
    let listing = String::from_utf8(run(&["ls-files", "-s", "-z"])).unwrap();
    let files = listing
        .split('\0')
        .filter(|l| !l.is_empty())
        .map(|line| {
            let (meta, path) = line.split_once('\t').unwrap();
            let fields: Vec<&str> = meta.split(' ').collect();
            let content = run(&["cat-file", "blob", fields[1]]);
            (path.to_owned(), (fields[0].to_owned(), content))
        })
        .collect();
    std::fs::remove_file(index).unwrap();
    files
}

fn branch_of(text: &str) -> String {
    text.split("branch ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no branch in {text:?}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_holds_the_attempts_tree_byte_for_byte() {
    let db = orchestrator_test_support::sqlite_store().await;
    let store = &db.store;
    let home = tempfile::tempdir().unwrap();
    let (_dir, repo) = git_repo(&[
        ("src/lib.rs", "pub fn answer() -> u32 {\n    41\n}\n"),
        ("old/name.txt", "moved, not changed\nline two\nline three\n"),
        ("gone.txt", "deleted by the attempt\n"),
        ("run.sh", "#!/bin/sh\necho run\n"),
        ("README.md", "# demo\n"),
    ]);
    let github = FakeGitHub::start().await;
    github.seed_git(REPO, &repo);
    let agent = Agent::start(
        store,
        &repo,
        home.path(),
        &github,
        "test -f src/lib.rs",
        true,
    )
    .await;

    // The attempt: a text change, a new binary file, a deletion, a rename, an executable bit and a
    // new symlink.
    std::fs::write(
        repo.join("src/lib.rs"),
        "pub fn answer() -> u32 {\n    42\n}\n",
    )
    .unwrap();
    std::fs::create_dir_all(repo.join("assets")).unwrap();
    std::fs::write(repo.join("assets/logo.bin"), LOGO).unwrap();
    std::fs::remove_file(repo.join("gone.txt")).unwrap();
    std::fs::create_dir_all(repo.join("new")).unwrap();
    std::fs::rename(repo.join("old/name.txt"), repo.join("new/name.txt")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(repo.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", repo.join("lib-link")).unwrap();
    let attempt = agent.gated_attempt("answer 42").await;

    let text = agent
        .ok(
            "pr_open",
            json!({"attempt_id": attempt, "repo": REPO, "issue": 7, "description": "The answer is 42 now."}),
        )
        .await;
    assert!(text.starts_with("Opened draft pull request #"), "{text}");
    let branch = branch_of(&text);
    let identity = store.identity().await.unwrap();
    assert_eq!(
        branch,
        format!(
            "orchestrator/task-{}-attempt-{attempt}-{}",
            agent.task,
            &identity[..8]
        )
    );

    // What GitHub holds on the branch is what the gates ran on, file for file and mode for mode.
    let expected = worktree_files(&repo);
    assert_eq!(expected["assets/logo.bin"].1, LOGO);
    assert_eq!(expected["run.sh"].0, "100755");
    assert_eq!(
        expected["lib-link"],
        ("120000".into(), b"src/lib.rs".to_vec())
    );
    assert!(!expected.contains_key("gone.txt") && !expected.contains_key("old/name.txt"));
    let pushed = github
        .branch_files(REPO, &branch)
        .expect("the branch exists");
    assert_eq!(pushed, expected, "the pushed tree is the attempt's tree");

    // One draft pull request from the branch into the default branch, its body carrying the
    // description, the issue it fixes, the gate's evidence and the marker.
    let pulls = github.pulls(REPO);
    assert_eq!(pulls.len(), 1);
    let pull = &pulls[0];
    let fake = pull.pull.as_ref().unwrap();
    assert!(fake.draft, "draft by default");
    assert_eq!(fake.head_ref, branch);
    assert_eq!(fake.base_ref, "main");
    assert_eq!(pull.title, "Make the answer 42", "the task's title");
    for needle in [
        "The answer is 42 now.",
        "Fixes #7",
        "| check | `test -f src/lib.rs` | passed |",
        &format!("<!-- orchestrator:pr-attempt-{attempt} store:{identity} -->"),
        &format!("task {}", agent.task),
    ] {
        assert!(pull.body.contains(needle), "{needle:?} in {}", pull.body);
    }

    // The write is an event with the pull request's URL.
    let events = store
        .events_of_kind(agent.task, EventKind::GithubWrite)
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    let event = &events[0].data;
    assert_eq!(event["action"], "pr_opened");
    assert_eq!(event["outcome"], "opened");
    assert_eq!(event["attempt"], attempt);
    assert_eq!(event["issue"], 7);
    assert!(
        event["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/pull/{}", pull.number)),
        "{event}"
    );

    // Calling again finds it: no second branch, no second pull request.
    let again = agent
        .ok(
            "pr_open",
            json!({"attempt_id": attempt, "repo": REPO, "issue": 7}),
        )
        .await;
    assert!(again.starts_with("Found the pull request"), "{again}");
    assert_eq!(github.pulls(REPO).len(), 1);
    assert_eq!(github.requests_to("POST", "/git/refs").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_lost_answer_finds_the_branch_and_the_pull_request() {
    let db = orchestrator_test_support::sqlite_store().await;
    let store = &db.store;
    let home = tempfile::tempdir().unwrap();
    let (_dir, repo) = git_repo(&[("src/lib.rs", "41\n")]);
    let github = FakeGitHub::start().await;
    github.seed_git(REPO, &repo);
    let agent = Agent::start(
        store,
        &repo,
        home.path(),
        &github,
        "test -f src/lib.rs",
        true,
    )
    .await;
    std::fs::write(repo.join("src/lib.rs"), "42\n").unwrap();
    let attempt = agent.gated_attempt("42").await;
    let args = json!({"attempt_id": attempt, "repo": REPO});

    // GitHub fails the pull request after the branch was made: the call fails, the branch stays.
    github.fail_next("POST", "/pulls", 502, 1);
    let text = agent.refused("pr_open", args.clone()).await;
    assert!(text.contains("502"), "{text}");
    assert_eq!(github.pulls(REPO).len(), 0);
    assert_eq!(github.branches(REPO).len(), 2, "main and the attempt's");

    // The retry reuses the branch, which holds exactly the attempt's tree, and opens one.
    let text = agent.ok("pr_open", args.clone()).await;
    assert!(
        text.contains("on the branch an earlier call had pushed"),
        "{text}"
    );
    assert_eq!(github.pulls(REPO).len(), 1);

    // A second attempt whose pull request's answer never comes back in time: GitHub made it, the
    // call learns so by the marker, and no second one is opened.
    std::fs::write(repo.join("src/lib.rs"), "forty-two\n").unwrap();
    let second = agent.gated_attempt("forty-two").await;
    github.delay_next("POST", "/pulls", Duration::from_secs(4));
    let text = agent
        .ok("pr_open", json!({"attempt_id": second, "repo": REPO}))
        .await;
    assert!(text.starts_with("Found the pull request"), "{text}");
    assert_eq!(github.pulls(REPO).len(), 2);
    let text = agent
        .ok("pr_open", json!({"attempt_id": second, "repo": REPO}))
        .await;
    assert!(text.starts_with("Found the pull request"), "{text}");
    assert_eq!(github.pulls(REPO).len(), 2, "still one per attempt");
    let opened: Vec<Value> = store
        .events_of_kind(agent.task, EventKind::GithubWrite)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.data)
        .collect();
    assert_eq!(
        opened
            .iter()
            .map(|e| e["outcome"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["branch_reused", "found", "found"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_requests_are_refused_without_the_evidence_or_over_other_content() {
    let db = orchestrator_test_support::sqlite_store().await;
    let store = &db.store;
    let home = tempfile::tempdir().unwrap();
    let (_dir, repo) = git_repo(&[("src/lib.rs", "41\n")]);
    let github = FakeGitHub::start().await;
    github.seed_git(REPO, &repo);
    // The task's gate passes only while the answer is 42.
    let agent = Agent::start(
        store,
        &repo,
        home.path(),
        &github,
        "grep -qx 42 src/lib.rs",
        true,
    )
    .await;

    // Not selected.
    std::fs::write(repo.join("src/lib.rs"), "42\n").unwrap();
    agent.ok("task_gate_run", json!({"gate": "check"})).await;
    let recorded = agent
        .ok("pr_attempt_record", json!({"label": "unselected"}))
        .await;
    let unselected: i64 = recorded.split_whitespace().nth(2).unwrap().parse().unwrap();
    let text = agent
        .refused("pr_open", json!({"attempt_id": unselected, "repo": REPO}))
        .await;
    assert!(text.contains("is not the selected attempt"), "{text}");

    // Selected, but the gate failed on its tree.
    std::fs::write(repo.join("src/lib.rs"), "43\n").unwrap();
    let failed = agent.call("task_gate_run", json!({"gate": "check"})).await;
    assert!(failed.joined_text().contains("failed"), "{failed:?}");
    let recorded = agent.ok("pr_attempt_record", json!({"label": "43"})).await;
    let red: i64 = recorded.split_whitespace().nth(2).unwrap().parse().unwrap();
    agent
        .ok("pr_attempt_select", json!({"attempt_id": red}))
        .await;
    let text = agent
        .refused("pr_open", json!({"attempt_id": red, "repo": REPO}))
        .await;
    assert!(
        text.contains("not every gate") && text.contains("\"check\" failed on it"),
        "{text}"
    );

    // Selected, never gated on its tree (the gate passed on another one).
    std::fs::write(repo.join("src/lib.rs"), "44\n").unwrap();
    let recorded = agent.ok("pr_attempt_record", json!({"label": "44"})).await;
    let ungated: i64 = recorded.split_whitespace().nth(2).unwrap().parse().unwrap();
    agent
        .ok("pr_attempt_select", json!({"attempt_id": ungated}))
        .await;
    let text = agent
        .refused("pr_open", json!({"attempt_id": ungated, "repo": REPO}))
        .await;
    assert!(text.contains("\"check\" did not run on it"), "{text}");
    assert!(
        github.requests_to("POST", "/git/").is_empty(),
        "nothing was sent"
    );

    // A branch of the attempt's name that holds something else is not overwritten.
    std::fs::write(repo.join("src/lib.rs"), "42\n").unwrap();
    let good = agent.gated_attempt("42 again").await;
    let branch = orchestrator_worker::pulls::branch_name(
        &store.attempt(good).await.unwrap(),
        &store.identity().await.unwrap(),
    );
    github.point_branch(REPO, &branch, "main");
    let text = agent
        .refused("pr_open", json!({"attempt_id": good, "repo": REPO}))
        .await;
    assert!(
        text.contains("already exists") && text.contains("not overwritten"),
        "{text}"
    );
    assert!(github.pulls(REPO).is_empty());

    // An attempt on a base GitHub does not have: the error says so.
    std::fs::write(repo.join("local.txt"), "only here\n").unwrap();
    git(&repo, &["add", "local.txt"]);
    git(&repo, &["commit", "-qm", "local only"]);
    std::fs::write(repo.join("src/lib.rs"), "42\n").unwrap();
    let unpushed = agent.gated_attempt("on an unpushed base").await;
    let text = agent
        .refused("pr_open", json!({"attempt_id": unpushed, "repo": REPO}))
        .await;
    assert!(
        text.contains("is the attempt's base commit") && text.contains("on acme/widgets"),
        "{text}"
    );
    assert!(github.pulls(REPO).is_empty());

    // Malformed arguments are refused before anything is read.
    let text = agent
        .refused("pr_open", json!({"attempt_id": good, "repo": "not a repo"}))
        .await;
    assert!(text.contains("owner/name"), "{text}");
    let text = agent
        .refused("pr_open", json!({"attempt_id": 999, "repo": REPO}))
        .await;
    assert!(text.contains("there is no attempt 999"), "{text}");

    // Without a policy or trigger that pre-approves it, opening a pull request waits for a
    // person; with no approver configured it is refused and nothing is sent.
    let asking = Agent::start(store, &repo, home.path(), &github, "true", false).await;
    let sent = github.requests_to("POST", "/git/").len();
    let attempt = asking.gated_attempt("needs consent").await;
    let text = asking
        .refused("pr_open", json!({"attempt_id": attempt, "repo": REPO}))
        .await;
    assert!(text.contains("needs approval"), "{text}");
    assert!(github.pulls(REPO).is_empty());
    assert_eq!(github.requests_to("POST", "/git/").len(), sent);
}

/// Two stores (staging and production) that work on one repository number their tasks and
/// attempts alike: each opens its own pull request, and neither takes the other's for its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_repository_do_not_find_each_others_pull_requests() {
    let staging = orchestrator_test_support::sqlite_store().await;
    let production = orchestrator_test_support::sqlite_store().await;
    let home = tempfile::tempdir().unwrap();
    let (_dir, repo) = git_repo(&[("src/lib.rs", "41\n")]);
    let github = FakeGitHub::start().await;
    github.seed_git(REPO, &repo);
    std::fs::write(repo.join("src/lib.rs"), "42\n").unwrap();
    let mut texts = Vec::new();
    for db in [&staging, &production] {
        let agent = Agent::start(
            &db.store,
            &repo,
            home.path(),
            &github,
            "test -f src/lib.rs",
            true,
        )
        .await;
        let attempt = agent.gated_attempt("42").await;
        assert_eq!((agent.task.0, attempt), (1, 1), "both stores number alike");
        texts.push(
            agent
                .ok("pr_open", json!({"attempt_id": attempt, "repo": REPO}))
                .await,
        );
    }
    for text in &texts {
        assert!(text.starts_with("Opened"), "{texts:?}");
    }
    let pulls = github.pulls(REPO);
    assert_eq!(pulls.len(), 2, "one pull request per store: {texts:?}");
    assert_ne!(branch_of(&texts[0]), branch_of(&texts[1]));
    assert_ne!(pulls[0].body, pulls[1].body, "their markers differ");
}

/// A pull request a person closed is reported as closed: not found as if open, not reopened, and
/// no second one is opened in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pull_request_is_reported_as_closed_and_nothing_is_opened_again() {
    let db = orchestrator_test_support::sqlite_store().await;
    let store = &db.store;
    let home = tempfile::tempdir().unwrap();
    let (_dir, repo) = git_repo(&[("src/lib.rs", "41\n")]);
    let github = FakeGitHub::start().await;
    github.seed_git(REPO, &repo);
    let agent = Agent::start(
        store,
        &repo,
        home.path(),
        &github,
        "test -f src/lib.rs",
        true,
    )
    .await;
    std::fs::write(repo.join("src/lib.rs"), "42\n").unwrap();
    let attempt = agent.gated_attempt("42").await;
    let args = json!({"attempt_id": attempt, "repo": REPO});
    let text = agent.ok("pr_open", args.clone()).await;
    assert!(text.starts_with("Opened"), "{text}");
    let number = github.pulls(REPO)[0].number;
    github.close(REPO, number);
    let writes = github.requests().len();

    let text = agent.refused("pr_open", args.clone()).await;
    assert!(
        text.contains(&format!("#{number}")) && text.contains("closed"),
        "{text}"
    );
    assert!(!text.contains("Found"), "{text}");
    let pulls = github.pulls(REPO);
    assert_eq!(pulls.len(), 1, "nothing opened in its place");
    assert_eq!(pulls[0].state, "closed", "nothing reopened");
    let written: Vec<_> = github.requests()[writes..]
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(written.is_empty(), "nothing was written: {written:?}");
}

/// A pull request an older version opened (its branch and marker name only the numbers) is found
/// again by the store whose events record opening it, and by no other store: a neighbour with the
/// same numbers opens its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_marker_is_ours_only_when_our_events_record_it() {
    let old = orchestrator_test_support::sqlite_store().await;
    let neighbour = orchestrator_test_support::sqlite_store().await;
    let home = tempfile::tempdir().unwrap();
    let (_dir, repo) = git_repo(&[("src/lib.rs", "41\n")]);
    let github = FakeGitHub::start().await;
    github.seed_git(REPO, &repo);
    std::fs::write(repo.join("src/lib.rs"), "42\n").unwrap();
    let client = {
        let mut config = GithubConfig::new(github.url(), Some(FAKE_TOKEN.into()));
        config.timeout = Duration::from_secs(2);
        GitHub::new(config).unwrap()
    };

    // What the older version did for attempt 1 of task 1: its branch, its marker, its event.
    let agent = Agent::start(
        &old.store,
        &repo,
        home.path(),
        &github,
        "test -f src/lib.rs",
        true,
    )
    .await;
    let attempt = agent.gated_attempt("42").await;
    let recorded = old.store.attempt(attempt).await.unwrap();
    let tree = orchestrator_worker::pulls::attempt_tree(&old.store, &recorded, &repo)
        .await
        .unwrap();
    let marker = format!("<!-- orchestrator:pr-attempt-{attempt} -->");
    let repo_ref = orchestrator_github::RepoRef::parse(REPO).unwrap();
    let legacy = client
        .open_pull(
            &tree,
            &orchestrator_github::PullSpec {
                repo: &repo_ref,
                branch: &format!("orchestrator/task-{}-attempt-{attempt}", agent.task),
                base_branch: None,
                title: "Make the answer 42",
                body: &format!("Opened by an older orchestrator.\n\n{marker}\n"),
                marker: &marker,
                draft: true,
                commit_message: "42",
                legacy: None,
            },
        )
        .await
        .unwrap();
    old.store
        .record_event(
            agent.task,
            EventKind::GithubWrite,
            json!({"action": "pr_opened", "outcome": "opened", "repo": REPO,
                   "number": legacy.number, "attempt": attempt}),
        )
        .await
        .unwrap();

    // The store that opened it finds it again after the upgrade.
    let text = agent
        .ok("pr_open", json!({"attempt_id": attempt, "repo": REPO}))
        .await;
    assert!(text.starts_with("Found the pull request"), "{text}");
    assert!(text.contains(&format!("#{}", legacy.number)), "{text}");
    assert_eq!(github.pulls(REPO).len(), 1);

    // A neighbour with the same numbers and no such record opens its own.
    let other = Agent::start(
        &neighbour.store,
        &repo,
        home.path(),
        &github,
        "test -f src/lib.rs",
        true,
    )
    .await;
    let same = other.gated_attempt("42").await;
    assert_eq!((other.task, same), (agent.task, attempt));
    let text = other
        .ok("pr_open", json!({"attempt_id": same, "repo": REPO}))
        .await;
    assert!(text.starts_with("Opened"), "{text}");
    assert_eq!(github.pulls(REPO).len(), 2);
}
