//! A task on an existing pull request, end to end through `serve`, the scripted model and the
//! GitHub stand-in, whose git objects are written back into the repository tasks clone (as a
//! push to github.com is seen by the next fetch):
//! - the first round's pull request is opened by hand (`run`, `attempt record|select|open-pr`);
//! - `task create --pull` makes the next round: its workspace is the branch's head, and once its
//!   gate passes the work is one new commit whose parent is that head;
//! - someone else's push in the middle of a round: nothing is forced, the task says why, and a task
//!   like it runs again on the new head;
//! - SIGKILL of `serve` between the commit and the ref update: one commit after the rescue;
//! - a branch this store did not open, and a fork's, are refused with the reason.

use crate::support::{Env, Serve, wait_for};
use nix::sys::signal::Signal;
use orchestrator_test_support::git_repo;
use orchestrator_test_support::github_server::{CheckRunSpec, FAKE_TOKEN, FakeGitHub};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const REPO: &str = "acme/widgets";
const GATE: &str = "grep -qx 43 src/lib.rs";

/// A home and store with a pull request its first round opened.
struct Round {
    env: Env,
    fake: Arc<FakeGitHub>,
    _source_dir: tempfile::TempDir,
    source: PathBuf,
    workspaces: PathBuf,
    /// The pull request's number, branch and head after the first round.
    number: u64,
    branch: String,
    head: String,
}

fn github_env(fake: &FakeGitHub) -> Vec<(&'static str, String)> {
    vec![
        ("ORCHESTRATOR_GITHUB_API_URL", fake.url()),
        ("GITHUB_TOKEN", FAKE_TOKEN.to_owned()),
    ]
}

fn run_ok(env: &Env, fake: &FakeGitHub, args: &[&str]) -> Value {
    let out = env.cmd(args).envs(github_env(fake)).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The first round, as a person does it by hand: a fix in a clone, its gate, the attempt, the
/// pull request.
fn first_round(env: Env) -> Round {
    let (source_dir, source) = git_repo(&[("src/lib.rs", "41\n"), ("README.md", "# widgets\n")]);
    let fake = Arc::new(FakeGitHub::start_blocking());
    fake.seed_git(REPO, &source);
    let clone = env.workspace().join("round-1");
    orchestrator_test_support::git(
        &env.workspace(),
        &["clone", "-q", source.to_str().unwrap(), "round-1"],
    );
    std::fs::write(clone.join("src/lib.rs"), "42\n").unwrap();
    let clone_arg = clone.display().to_string();
    run_ok(
        &env,
        &fake,
        &[
            "run",
            "--title",
            "fix #7",
            "--gate",
            "grep -qx 42 src/lib.rs",
            "--workspace",
            &clone_arg,
        ],
    );
    run_ok(
        &env,
        &fake,
        &["attempt", "record", "--task", "1", "--label", "the answer"],
    );
    run_ok(&env, &fake, &["attempt", "select", "1"]);
    let opened = run_ok(
        &env,
        &fake,
        &["attempt", "open-pr", "1", "--repo", REPO, "--json"],
    );
    let number = opened["number"].as_u64().expect("a number");
    let branch = opened["branch"].as_str().expect("a branch").to_owned();
    let head = fake.branch_commits(REPO, &branch)[0].clone();
    let workspaces = env.workspace().join("workspaces");
    Round {
        env,
        fake,
        _source_dir: source_dir,
        source,
        workspaces,
        number,
        branch,
        head,
    }
}

impl Round {
    fn serve(&self) -> Serve {
        let envs = github_env(&self.fake);
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.env.serve_with_env(
            &[
                "--workers",
                "1",
                "--lease-seconds",
                "3",
                "--workspaces",
                self.workspaces.to_str().unwrap(),
            ],
            &envs,
        )
    }

    fn create_args(&self, model: &ScriptedModel) -> Vec<String> {
        let pull = format!("{REPO}#{}", self.number);
        [
            "task",
            "create",
            "--title",
            "make it 43, as the review asks",
            "--prompt",
            "The reviewer wants 43.",
            "--gate",
            GATE,
            "--pull",
            &pull,
            "--repository",
            self.source.to_str().unwrap(),
            "--model",
            "scripted",
            "--base-url",
            &model.base_url(),
            "--json",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }

    /// `task create --pull` for the pull request; returns the task's id.
    fn create(&self, model: &ScriptedModel) -> i64 {
        let args = self.create_args(model);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_ok(&self.env, &self.fake, &args)["id"].as_i64().unwrap()
    }

    fn finished(&self, id: i64, serve: &Serve) -> Value {
        let task = self.env.wait_task(id, "finished", |t| {
            ["succeeded", "failed", "canceled"].contains(&t["state"].as_str().unwrap_or(""))
        });
        assert!(task["state"].is_string(), "{}", serve.log());
        task
    }

    fn round_events(&self, id: i64) -> Vec<Value> {
        self.env
            .events(id)
            .into_iter()
            .filter(|e| e["kind"] == "pull_round")
            .collect()
    }

    /// The commit `sha` of the repository tasks clone: its parents, its tree and the content of
    /// src/lib.rs.
    fn commit(&self, sha: &str) -> (Vec<String>, String, String) {
        let git = |args: &[&str]| orchestrator_test_support::git(&self.source, args);
        let parents = git(&["rev-list", "--parents", "-n", "1", sha]);
        let tree = git(&["rev-parse", &format!("{sha}^{{tree}}")]);
        let content = git(&["show", &format!("{sha}:src/lib.rs")]);
        (
            parents
                .split_whitespace()
                .skip(1)
                .map(str::to_owned)
                .collect(),
            tree.trim().to_owned(),
            content,
        )
    }
}

/// The agent of a round: it makes the file say 43, and is done.
fn make_it_43(request: &Request) -> Reply {
    match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call(
            "write_file",
            json!({"path": "src/lib.rs", "content": "43\n"}),
        )]),
        _ => Reply::Text("It says 43 now.".into()),
    }
}

fn pushes_one_commit_on_the_head(env: Env) {
    let round = first_round(env);
    let model = ScriptedModel::start_blocking(make_it_43);
    let serve = round.serve();
    let id = round.create(&model);
    let task = round.finished(id, &serve);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());

    // One new commit on the branch, whose parent is the head the round started on.
    let commits = round.fake.branch_commits(REPO, &round.branch);
    assert_eq!(commits.len(), 3, "{commits:?}");
    assert_eq!(commits[1], round.head);
    let (parents, tree, content) = round.commit(&commits[0]);
    assert_eq!(parents, vec![round.head.clone()]);
    assert_eq!(content, "43");
    // The agent worked at the head: its first request said which pull request it was on.
    let first = serde_json::to_string(model.received()[0].messages()).unwrap();
    assert!(
        first.contains(&format!("pull request {REPO}#{}", round.number)),
        "{first}"
    );

    // The gate passed on exactly the pushed tree: the round's attempt records that run.
    let events = round.round_events(id);
    let steps: Vec<&str> = events
        .iter()
        .map(|e| e["data"]["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["started", "pushing", "pushed"], "{events:?}");
    assert_eq!(events[0]["data"]["head"], round.head.as_str());
    assert_eq!(events[1]["data"]["tree"], tree.as_str());
    assert_eq!(events[2]["data"]["commit"], commits[0].as_str());
    let attempt = events[1]["data"]["attempt"].as_i64().unwrap();
    let shown = round
        .env
        .json(&["attempt", "show", &attempt.to_string(), "--json"]);
    let gates = shown["gates"].as_array().unwrap();
    assert!(
        !gates.is_empty() && gates.iter().all(|g| g["verdict"] == "passed"),
        "{shown}"
    );
    // `task read` names the commit among the GitHub writes.
    let read = round.env.run(&["task", "read", &id.to_string()]);
    let text = String::from_utf8_lossy(&read.stdout);
    assert!(text.contains(&commits[0][..12]), "{text}");
    // No second pull request.
    assert_eq!(round.fake.pulls(REPO).len(), 1);
}

fn someone_elses_push_is_never_overwritten(env: Env) {
    let round = first_round(env);
    let fake = round.fake.clone();
    let branch = round.branch.clone();
    let pushed = Arc::new(AtomicBool::new(false));
    let once = pushed.clone();
    // While the first run works, a person pushes to the branch.
    let model = ScriptedModel::start_blocking(move |request: &Request| {
        if request.assistant_turns() == 0 && !once.swap(true, Ordering::SeqCst) {
            fake.push_to_branch(REPO, &branch, &[("NOTES.md", "a person's note\n")]);
        }
        make_it_43(request)
    });
    let serve = round.serve();
    let id = round.create(&model);
    let task = round.finished(id, &serve);
    assert_eq!(task["state"], "failed", "{task}");
    let error = task["last_error"].as_str().unwrap();
    assert!(error.contains("someone else pushed"), "{error}");
    assert!(error.contains("nothing was forced"), "{error}");
    let moved = round
        .round_events(id)
        .into_iter()
        .find(|e| e["data"]["step"] == "moved")
        .expect("a moved step");
    let rerun = moved["data"]["task"].as_i64().expect("the task made again");
    assert!(
        error.contains(&format!("task {rerun} runs again")),
        "{error}"
    );

    // The task made again starts at the person's commit and pushes on top of it.
    let again = round.finished(rerun, &serve);
    assert_eq!(again["state"], "succeeded", "{again}\n{}", serve.log());
    let commits = round.fake.branch_commits(REPO, &round.branch);
    assert_eq!(commits.len(), 4, "{commits:?}");
    let theirs = &commits[1];
    assert_eq!(commits[2], round.head);
    let (parents, _, content) = round.commit(&commits[0]);
    assert_eq!(parents, vec![theirs.clone()]);
    assert_eq!(content, "43");
    let files = round.fake.branch_files(REPO, &round.branch).unwrap();
    assert_eq!(files["NOTES.md"].1, b"a person's note\n");
    let started = round
        .round_events(rerun)
        .into_iter()
        .find(|e| e["data"]["step"] == "started")
        .unwrap();
    assert_eq!(started["data"]["head"], theirs.as_str());
    // One task was made again, not one per look.
    let made: Vec<Value> = round
        .env
        .tasks()
        .into_iter()
        .filter(|t| t["id"].as_i64() > Some(id))
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
}

fn a_kill_between_commit_and_ref_leaves_one_commit(env: Env) {
    let round = first_round(env);
    let model = ScriptedModel::start_blocking(make_it_43);
    // The ref update reaches GitHub and is never carried out; the daemon dies meanwhile.
    let stalled = round.fake.stall_next("PATCH", "/git/refs/heads/");
    let mut serve = round.serve();
    let id = round.create(&model);
    wait_for(|| {
        !round
            .fake
            .requests_to("PATCH", "/git/refs/heads/")
            .is_empty()
    });
    serve.signal(Signal::SIGKILL);
    serve.wait();
    stalled.release();
    assert_eq!(
        round.fake.branch_commits(REPO, &round.branch)[0],
        round.head
    );

    let serve = round.serve();
    let task = round.finished(id, &serve);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    let commits = round.fake.branch_commits(REPO, &round.branch);
    assert_eq!(commits.len(), 3, "one commit over the head: {commits:?}");
    assert_eq!(commits[1], round.head);
    // Both tries made the very same commit: the date was fixed before the first.
    let made: Vec<String> = round
        .fake
        .requests_to("POST", "/git/commits")
        .iter()
        .map(|r| r.body.clone())
        .collect();
    assert_eq!(
        made.len(),
        3,
        "the first round's and this round's two: {made:?}"
    );
    assert_eq!(made[1], made[2]);
    let steps: Vec<String> = round
        .round_events(id)
        .iter()
        .map(|e| e["data"]["step"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        steps.iter().filter(|s| *s == "pushing").count(),
        1,
        "{steps:?}"
    );
    assert_eq!(steps.last().map(String::as_str), Some("pushed"));
    // The pull request's one progress comment, across the kill.
    let progress = || {
        round
            .fake
            .comments(REPO, round.number)
            .into_iter()
            .filter(|c| c.body.contains("<!-- orchestrator:progress store:"))
            .collect::<Vec<_>>()
    };
    wait_for(|| progress().iter().any(|c| c.body.contains("✅ Done.")));
    assert_eq!(progress().len(), 1, "{:?}", progress());
}

fn closed_meanwhile_gets_no_commit(env: Env) {
    let round = first_round(env);
    let fake = round.fake.clone();
    let number = round.number;
    // A person closes the pull request while the round works.
    let model = ScriptedModel::start_blocking(move |request: &Request| {
        if request.assistant_turns() == 0 {
            fake.close(REPO, number);
        }
        make_it_43(request)
    });
    let serve = round.serve();
    let id = round.create(&model);
    let task = round.finished(id, &serve);
    assert_eq!(task["state"], "failed", "{task}");
    let error = task["last_error"].as_str().unwrap();
    assert!(error.contains("not pushed"), "{error}");
    assert!(error.contains("is closed"), "{error}");
    assert_eq!(
        round.fake.branch_commits(REPO, &round.branch)[0],
        round.head
    );
}

/// The check rule of docs/github-workflow.md as written, on this test's repository, gate and model,
/// with a short join window.
fn ci_config(round: &Round, model: &ScriptedModel) -> String {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/github-workflow.md"
    ))
    .unwrap();
    let from = doc
        .find("**Failing checks.**")
        .expect("the checks paragraph");
    let block = &doc[from..];
    let start = block.find("```toml\n").expect("its config") + "```toml\n".len();
    let rule = &block[start..start + block[start..].find("```").unwrap()];
    for expected in [
        "https://github.com/{repo}.git",
        "\"cargo test\"",
        "join_secs = 30",
    ] {
        assert!(
            rule.contains(expected),
            "the rule lost {expected:?}: {rule}"
        );
    }
    let rule = rule
        .replace(
            "https://github.com/{repo}.git",
            &round.source.display().to_string(),
        )
        .replace("\"cargo test\"", &format!("{GATE:?}"))
        .replace("join_secs = 30", "join_secs = 1");
    format!(
        "[model]\nbase_url = \"{}\"\nmodel = \"scripted\"\n\n[github]\nbot_login = \"orchestrator-bot\"\n\n{rule}",
        model.base_url()
    )
}

fn a_failing_check_makes_a_round_that_reads_its_log(env: Env) {
    let round = first_round(env);
    let model = ScriptedModel::start_blocking(make_it_43);
    std::fs::write(
        round.env.home().join("config.toml"),
        ci_config(&round, &model),
    )
    .unwrap();
    let serve = crate::github::serve(&round.env, &round.fake);
    let deliver = |id: &str, payload: &Value| {
        crate::github::deliver(&round.env, &serve, "check_run", id, payload).1
    };
    // A passing check asks for nothing.
    let check = |name, conclusion, summary, annotations, log| CheckRunSpec {
        name,
        conclusion,
        summary,
        annotations,
        log,
    };
    let green = round.fake.add_check_run(
        REPO,
        &round.head,
        &check("lint", "success", "fine", &[], "ok\n"),
    );
    let row = deliver("d-green", &round.fake.check_run_payload(REPO, green));
    assert_eq!(row["status"], "ignored", "{row}");
    assert!(
        row["detail"].as_str().unwrap().contains("asks for no fix"),
        "{row}"
    );
    // A failing job with a long log: the round reads its end.
    let mut log = String::new();
    for i in 0..2000 {
        log.push_str(&format!("running test {i} ... ok\n"));
    }
    log.push_str("test answer ... FAILED\nassertion failed: expected 43, got 42\n");
    let red = round.fake.add_check_run(
        REPO,
        &round.head,
        &check(
            "test (ubuntu)",
            "failure",
            "1 test failed",
            &[("src/lib.rs", 1, "expected 43")],
            &log,
        ),
    );
    let row = deliver("d-red", &round.fake.check_run_payload(REPO, red));
    assert_eq!(row["status"], "processed", "{row}");
    let id = row["tasks"][0].as_i64().unwrap();
    let task = round.finished(id, &serve);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    let first = serde_json::to_string(model.received()[0].messages()).unwrap();
    for part in [
        "test (ubuntu)",
        "1 test failed",
        "src/lib.rs:1 failure: expected 43",
        "assertion failed: expected 43, got 42",
        "running test 1999 ... ok",
    ] {
        assert!(first.contains(part), "{part:?} not in {first}");
    }
    assert!(
        !first.contains("running test 500 ... ok"),
        "the middle of the log is left out"
    );
    let commits = round.fake.branch_commits(REPO, &round.branch);
    assert_eq!(commits[1], round.head, "{commits:?}");
    let (_, _, content) = round.commit(&commits[0]);
    assert_eq!(content, "43");

    // A failing check on someone else's commit is theirs to fix.
    let theirs = round
        .fake
        .push_to_branch(REPO, &round.branch, &[("NOTES.md", "mine\n")]);
    let red = round.fake.add_check_run(
        REPO,
        &theirs,
        &check("test (ubuntu)", "failure", "broke", &[], "x\n"),
    );
    let row = deliver("d-theirs", &round.fake.check_run_payload(REPO, red));
    assert_eq!(row["status"], "ignored", "{row}");
    assert!(
        row["detail"]
            .as_str()
            .unwrap()
            .contains("was not pushed by the orchestrator"),
        "{row}"
    );
}

fn a_failing_status_makes_a_round(env: Env) {
    let round = first_round(env);
    let model = ScriptedModel::start_blocking(make_it_43);
    let config =
        ci_config(&round, &model).replace("event = \"check_run.completed\"", "event = \"status\"");
    assert!(config.contains("event = \"status\""), "{config}");
    std::fs::write(round.env.home().join("config.toml"), config).unwrap();
    let serve = crate::github::serve(&round.env, &round.fake);
    // An external CI's status names a commit only: the round is on the pull request it heads.
    let payload = round.fake.add_status(
        REPO,
        &round.head,
        "failure",
        "ci/arm64",
        "2 tests failed on arm64",
    );
    let (_, row) = crate::github::deliver(&round.env, &serve, "status", "d-status", &payload);
    assert_eq!(row["status"], "processed", "{row}");
    let id = row["tasks"][0].as_i64().unwrap();
    let task = round.finished(id, &serve);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    let first = serde_json::to_string(model.received()[0].messages()).unwrap();
    for part in [
        "status \\\"ci/arm64\\\": failure",
        "2 tests failed on arm64",
    ] {
        assert!(first.contains(part), "{part:?} not in {first}");
    }
    assert_eq!(
        round.fake.branch_commits(REPO, &round.branch)[1],
        round.head
    );
    // A status that passes asks for nothing.
    let green = round
        .fake
        .add_status(REPO, &round.head, "success", "ci/arm64", "fine");
    let (_, row) = crate::github::deliver(&round.env, &serve, "status", "d-green", &green);
    assert_eq!(row["status"], "ignored", "{row}");
}

/// A review rule that allows one round, and a mention rule on the pull request.
fn review_and_mention_config(round: &Round, model: &ScriptedModel) -> String {
    let task = format!(
        "task = {{ repository = \"{}\", prompt = \"Address the review.\", gates = [{GATE:?}], \
         agent = {{ policy = {{ default = \"allow\", classes = {{ network = \"deny\" }} }} }} }}",
        round.source.display()
    );
    format!(
        "[model]\nbase_url = \"{}\"\nmodel = \"scripted\"\n\n[github]\nbot_login = \"orchestrator-bot\"\n\n\
         [[github.trigger]]\nname = \"review\"\nevent = \"pull_request_review.submitted\"\n\
         repos = [\"{REPO}\"]\njoin_secs = 0\nmax_rounds = 1\n{task}\n\n\
         [[github.trigger]]\nname = \"ask\"\nevent = \"issue_comment.created\"\n\
         repos = [\"{REPO}\"]\njoin_secs = 0\nmax_rounds = 1\n{task}\n",
        model.base_url()
    )
}

fn a_mention_asks_again_after_the_last_round(env: Env) {
    let round = first_round(env);
    let model = ScriptedModel::start_blocking(make_it_43);
    std::fs::write(
        round.env.home().join("config.toml"),
        review_and_mention_config(&round, &model),
    )
    .unwrap();
    round.fake.set_permission(REPO, "alice", "write");
    let serve = crate::github::serve(&round.env, &round.fake);
    let review = |id: &str, text: &str| {
        let (made, _) =
            round
                .fake
                .add_review(REPO, round.number, "alice", "CHANGES_REQUESTED", text, &[]);
        let payload = round.fake.review_payload(REPO, round.number, made);
        crate::github::deliver(&round.env, &serve, "pull_request_review", id, &payload).1
    };
    // The one round allowed.
    let row = review("d-1", "Make it 43.");
    let first = row["tasks"][0].as_i64().expect("a round");
    assert_eq!(round.finished(first, &serve)["state"], "succeeded");
    // Past it: nothing, and a word that the agent stopped.
    let row = review("d-2", "And now?");
    assert_eq!(row["status"], "ignored", "{row}");
    // A writer asks again with a mention on the pull request: the count starts again. An older
    // mention, made before the last round started, was that round's to read.
    let asked = "@orchestrator-bot please also update the docs";
    let comment = round.fake.add_comment(REPO, round.number, "alice", asked);
    let mention = json!({
        "action": "created",
        "comment": {"id": comment, "body": asked,
                    "user": {"login": "alice"},
                    "html_url": format!("https://github.com/{REPO}/pull/{}#issuecomment-{comment}", round.number)},
        "issue": {"number": round.number, "title": "fix #7",
                  "html_url": format!("https://github.com/{REPO}/pull/{}", round.number),
                  "pull_request": {"url": "https://api.github.com/pulls"}},
        "repository": {"full_name": REPO},
        "sender": {"login": "alice"},
    });
    let (_, row) = crate::github::deliver(&round.env, &serve, "issue_comment", "d-ask", &mention);
    assert_eq!(row["status"], "processed", "{row}");
    let again = row["tasks"][0].as_i64().expect("a round again");
    assert_ne!(again, first);
    let task = round.finished(again, &serve);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    // The round was asked what the mention asks, as untrusted text; the first round was not.
    let asked_in =
        |request: &serde_json::Value| request.to_string().contains("also update the docs");
    let requests = model.requests();
    assert!(
        requests.iter().any(asked_in),
        "no request carried the mention"
    );
    assert!(
        !asked_in(&requests[0]),
        "the first round cannot have read a later comment"
    );
    let stopped = round
        .fake
        .comments(REPO, round.number)
        .into_iter()
        .filter(|c| c.body.contains("orchestrator:rounds-stopped"))
        .count();
    assert_eq!(stopped, 1);
}

fn branches_not_ours_are_refused(env: Env) {
    let round = first_round(env);
    let model = ScriptedModel::start_blocking(make_it_43);
    // A person's pull request from a branch of the repository, and one from a fork.
    round
        .fake
        .add_issue(REPO, 40, "a person's change", "Mine.", "carol");
    round.fake.make_pull(REPO, 40, &[], "");
    round
        .fake
        .add_issue(REPO, 41, "from a fork", "Theirs.", "mallory");
    round.fake.make_pull(REPO, 41, &[], "");
    round
        .fake
        .make_fork_pull(REPO, 41, "mallory/widgets", false);
    let source = round.source.to_str().unwrap().to_owned();
    let base_url = model.base_url();
    let create = |pull: &str, extra: &[&str], with_github: bool| {
        let mut args = vec![
            "task",
            "create",
            "--title",
            "not ours",
            "--prompt",
            "Change it.",
            "--gate",
            GATE,
            "--pull",
            pull,
            "--repository",
            &source,
            "--model",
            "scripted",
            "--base-url",
            &base_url,
            "--json",
        ];
        args.extend(extra);
        let mut cmd = round.env.cmd(&args);
        if with_github {
            cmd.envs(github_env(&round.fake));
        }
        cmd.output().unwrap()
    };
    let person = format!("{REPO}#40");
    let refused = create(&person, &[], true);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("was not opened by this store"), "{said}");
    assert!(said.contains("--any-branch"), "{said}");
    let fork = format!("{REPO}#41");
    let refused = create(&fork, &["--any-branch"], true);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("fork mallory/widgets"), "{said}");
    assert!(said.contains("does not let maintainers push"), "{said}");
    assert!(round.env.tasks().len() == 1, "only the first round's task");

    // Made where GitHub could not be asked, the daemon refuses it when the task starts.
    let made = create(&person, &[], false);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let id = serde_json::from_slice::<Value>(&made.stdout).unwrap()["id"]
        .as_i64()
        .unwrap();
    let serve = round.serve();
    let task = round.finished(id, &serve);
    assert_eq!(task["state"], "failed", "{task}");
    assert!(
        task["last_error"]
            .as_str()
            .unwrap()
            .contains("was not opened by this store"),
        "{task}"
    );
    assert!(model.received().is_empty(), "no agent ran");
    assert_eq!(
        round.fake.branch_commits(REPO, "feature-40"),
        Vec::<String>::new()
    );
}

#[test]
fn a_task_on_a_pull_request_pushes_one_commit_on_its_head() {
    pushes_one_commit_on_the_head(Env::sqlite());
}

#[test]
fn someone_elses_push_to_the_branch_is_never_overwritten() {
    someone_elses_push_is_never_overwritten(Env::sqlite());
}

#[test]
fn a_kill_between_the_commit_and_the_ref_update_leaves_one_commit() {
    a_kill_between_commit_and_ref_leaves_one_commit(Env::sqlite());
}

#[test]
fn a_failing_check_on_the_pushed_head_makes_a_round_that_reads_the_jobs_log() {
    a_failing_check_makes_a_round_that_reads_its_log(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_check_on_the_pushed_head_makes_a_round_that_reads_the_jobs_log_on_postgres() {
    on_postgres(a_failing_check_makes_a_round_that_reads_its_log).await;
}

#[test]
fn a_pull_request_closed_while_the_round_works_gets_no_commit() {
    closed_meanwhile_gets_no_commit(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_closed_while_the_round_works_gets_no_commit_on_postgres() {
    on_postgres(closed_meanwhile_gets_no_commit).await;
}

#[test]
fn a_failing_commit_status_on_the_pushed_head_makes_a_round() {
    a_failing_status_makes_a_round(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_commit_status_on_the_pushed_head_makes_a_round_on_postgres() {
    on_postgres(a_failing_status_makes_a_round).await;
}

#[test]
fn a_writers_mention_asks_again_after_the_last_round() {
    a_mention_asks_again_after_the_last_round(Env::sqlite());
}

#[test]
fn branches_this_store_did_not_open_are_refused_with_the_reason() {
    branches_not_ours_are_refused(Env::sqlite());
}

async fn on_postgres(body: fn(Env)) {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || body(env))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_on_a_pull_request_pushes_one_commit_on_its_head_on_postgres() {
    on_postgres(pushes_one_commit_on_the_head).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn someone_elses_push_to_the_branch_is_never_overwritten_on_postgres() {
    on_postgres(someone_elses_push_is_never_overwritten).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_the_commit_and_the_ref_update_leaves_one_commit_on_postgres() {
    on_postgres(a_kill_between_commit_and_ref_leaves_one_commit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branches_this_store_did_not_open_are_refused_with_the_reason_on_postgres() {
    on_postgres(branches_not_ours_are_refused).await;
}
