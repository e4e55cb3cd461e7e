//! Best of N through `serve`, the scripted model and the git-backed GitHub stand-in: three
//! siblings try the task with different patches (one fails the gate, two pass with different
//! sizes), and
//! - `smallest_passing` keeps the smaller passing patch, opens one pull request from it and keeps
//!   the other two as attempts; a person cannot move the choice once it is opened;
//! - `first_passing` stops the others once one passes;
//! - none passing fails the task with every sibling's evidence;
//! - `judge` keeps the sibling a model names, with its reason;
//! - a person's `attempt select` before opening changes the pull request's content;
//! - SIGKILL of the daemon running the siblings: they are rescued and resumed, and one pull
//!   request comes out;
//! - canceling the task cancels every sibling;
//! - a lead whose daemon has no GitHub waits, with its choice kept, for a daemon that has it.

use crate::support::{Env, Serve, page_get, wait_for};
use nix::sys::signal::Signal;
use orchestrator_test_support::git_repo;
use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

const REPO: &str = "acme/widgets";
const GATE: &str = "grep -qx ok src/lib.rs";

/// What a sibling's agent does: the model's first answer of each conversation takes the next.
#[derive(Debug, Clone, Copy)]
enum Try {
    /// Writes a value the gate refuses.
    Fails,
    /// Makes the gate pass with one file.
    Small,
    /// Makes the gate pass, and adds a second file.
    Big,
    /// Sleeps `secs` in a command first, then does what `Small` does.
    Slow(u64),
}

const SLOW_MARK: &str = "slow-sibling-sleeps";

fn first_calls(t: Try) -> Reply {
    let write = |content: &str| {
        call(
            "write_file",
            json!({"path": "src/lib.rs", "content": content}),
        )
    };
    match t {
        Try::Fails => Reply::ToolCalls(vec![write("nope\n")]),
        Try::Small => Reply::ToolCalls(vec![write("ok\n")]),
        Try::Big => Reply::ToolCalls(vec![
            write("ok\n"),
            call(
                "write_file",
                json!({"path": "src/extra.rs", "content": "1\n2\n3\n4\n5\n"}),
            ),
        ]),
        Try::Slow(secs) => Reply::ToolCalls(vec![call(
            "exec_shell",
            json!({"command": format!("echo {SLOW_MARK}; sleep {secs}")}),
        )]),
    }
}

/// The siblings' model: each conversation's first answer is the next of `tries`; a slow one
/// writes after its sleep; then each says it is done. A request without tools is the judge's:
/// it names the sibling whose diff adds src/extra.rs.
fn siblings_model(tries: Vec<Try>) -> ScriptedModel {
    let tries = Arc::new(Mutex::new(VecDeque::from(tries)));
    ScriptedModel::start_blocking(move |request: &Request| {
        if request.tool_names().is_empty() {
            return judge(request);
        }
        let said = serde_json::to_string(request.messages()).unwrap_or_default();
        match request.assistant_turns() {
            0 => {
                let next = tries.lock().unwrap().pop_front().unwrap_or(Try::Fails);
                first_calls(next)
            }
            1 if said.contains(SLOW_MARK) => first_calls(Try::Small),
            _ => Reply::Text("Done.".into()),
        }
    })
}

fn judge(request: &Request) -> Reply {
    let prompt = request.last_user_text().unwrap_or_default();
    let chosen = prompt
        .split(" sibling ")
        .skip(1)
        .find(|part| part.contains("src/extra.rs"))
        .and_then(|part| part.split_whitespace().next())
        .unwrap_or("0")
        .to_owned();
    Reply::Text(format!(
        "{{\"choice\": {chosen}, \"reason\": \"it also adds the extra module the criteria ask for\"}}"
    ))
}

struct World {
    env: Env,
    fake: Arc<FakeGitHub>,
    _source_dir: tempfile::TempDir,
    source: PathBuf,
    workspaces: PathBuf,
}

fn world() -> World {
    let env = Env::sqlite();
    let (source_dir, source) = git_repo(&[("src/lib.rs", "41\n"), ("README.md", "# widgets\n")]);
    let fake = Arc::new(FakeGitHub::start_blocking());
    fake.seed_git(REPO, &source);
    let workspaces = env.workspace().join("workspaces");
    World {
        env,
        fake,
        _source_dir: source_dir,
        source,
        workspaces,
    }
}

impl World {
    fn github_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("ORCHESTRATOR_GITHUB_API_URL", self.fake.url()),
            ("GITHUB_TOKEN", FAKE_TOKEN.to_owned()),
        ]
    }

    fn serve(&self, workers: &str) -> Serve {
        let envs = self.github_env();
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.env.serve_with_env(
            &[
                "--workers",
                workers,
                "--lease-seconds",
                "3",
                "--workspaces",
                self.workspaces.to_str().unwrap(),
            ],
            &envs,
        )
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        self.env.cmd(args).envs(self.github_env()).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> Value {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }

    /// `task create --best-of 3` with `extra` flags; the lead's id.
    fn create(&self, model: &ScriptedModel, extra: &[&str]) -> i64 {
        let base = model.base_url();
        let mut args = vec![
            "task",
            "create",
            "--title",
            "make it ok",
            "--prompt",
            "Make src/lib.rs say ok.",
            "--accept",
            "src/lib.rs says ok",
            "--gate",
            GATE,
            "--repository",
            self.source.to_str().unwrap(),
            "--model",
            "scripted",
            "--base-url",
            &base,
            "--api-key-env",
            "",
            "--best-of",
            "3",
            "--json",
        ];
        args.extend_from_slice(extra);
        self.ok(&args)["id"].as_i64().unwrap()
    }

    fn finished(&self, id: i64, serve: &Serve) -> Value {
        let task = self.env.wait_task(id, "finished", |t| {
            ["succeeded", "failed", "canceled"].contains(&t["state"].as_str().unwrap_or(""))
        });
        assert!(task["state"].is_string(), "{}", serve.log());
        task
    }

    fn steps(&self, lead: i64) -> Vec<Value> {
        self.env
            .events(lead)
            .into_iter()
            .filter(|e| e["kind"] == "best_of")
            .map(|e| e["data"].clone())
            .collect()
    }

    /// The lead's first `best_of` step named `name`.
    fn step(&self, lead: i64, name: &str) -> Option<Value> {
        self.steps(lead).into_iter().find(|s| s["step"] == name)
    }

    fn siblings(&self, lead: i64) -> Vec<Value> {
        let steps = self.steps(lead);
        let made = steps
            .iter()
            .find(|s| s["step"] == "siblings")
            .expect("the siblings were made");
        made["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| self.env.task(id.as_i64().unwrap()))
            .collect()
    }

    /// Each sibling's attempts in the best-of group.
    fn attempts(&self, lead: i64) -> Vec<Value> {
        self.siblings(lead)
            .iter()
            .flat_map(|s| {
                let id = s["id"].as_i64().unwrap().to_string();
                self.ok(&[
                    "attempt", "list", "--task", &id, "--group", "best-of", "--json",
                ])
                .as_array()
                .cloned()
                .unwrap_or_default()
            })
            .collect()
    }

    fn patch(&self, attempt: i64) -> String {
        let out = self.cli(&["attempt", "show", &attempt.to_string(), "--patch"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

#[test]
fn smallest_passing_opens_one_pull_request_from_the_smaller_passing_patch() {
    let w = world();
    let model = siblings_model(vec![Try::Big, Try::Fails, Try::Small]);
    let serve = w.serve("4");
    let lead = w.create(&model, &["--choose", "smallest_passing", "--open-pr", REPO]);
    let task = w.finished(lead, &serve);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());

    // Three siblings, each with its own workspace and conversation; one failed its gate.
    let siblings = w.siblings(lead);
    assert_eq!(siblings.len(), 3);
    let states: Vec<&str> = siblings
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states.iter().filter(|s| **s == "succeeded").count(),
        2,
        "{states:?}"
    );
    assert_eq!(states.iter().filter(|s| **s == "failed").count(), 1);
    for s in &siblings {
        assert_eq!(s["task"]["parent_id"].as_i64(), Some(lead), "{s}");
    }

    // All three are kept as attempts (the failing one too), and the chosen one is selected.
    let attempts = w.attempts(lead);
    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    let chosen = w.step(lead, "chosen").expect("a choice");
    assert_eq!(chosen["choose"], "smallest_passing");
    let winner = chosen["attempt"].as_i64().unwrap();
    let patch = w.patch(winner);
    assert!(patch.contains("+ok"), "{patch}");
    assert!(!patch.contains("extra.rs"), "the bigger patch won: {patch}");
    assert!(
        chosen["why"].as_str().unwrap().contains("smallest passing"),
        "{chosen}"
    );
    let selected: Vec<i64> = attempts
        .iter()
        .filter(|a| a["selected"] == true)
        .map(|a| a["id"].as_i64().unwrap())
        .collect();
    assert_eq!(selected, vec![winner]);

    // One pull request, from the winner's tree.
    let pulls = w.fake.pulls(REPO);
    assert_eq!(pulls.len(), 1, "one pull request per task");
    let opened = w
        .step(lead, "pull_opened")
        .expect("the pull request is recorded");
    let branch = w
        .env
        .events(lead)
        .into_iter()
        .find(|e| e["kind"] == "github_write")
        .map(|e| e["data"]["branch"].as_str().unwrap().to_owned())
        .unwrap();
    let files = w.fake.branch_files(REPO, &branch).unwrap();
    assert_eq!(files["src/lib.rs"].1, b"ok\n");
    assert!(!files.contains_key("src/extra.rs"), "{files:?}");
    assert_eq!(opened["attempt"].as_i64(), Some(winner));

    // Once it is opened, the choice no longer moves.
    let other = attempts
        .iter()
        .map(|a| a["id"].as_i64().unwrap())
        .find(|id| *id != winner && w.patch(*id).contains("extra.rs"))
        .unwrap();
    let out = w.cli(&["attempt", "select", &other.to_string()]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("opened"), "{said}");

    // `task read` shows the siblings side by side, with the winner and why.
    let read = String::from_utf8_lossy(&w.env.run(&["task", "read", &lead.to_string()]).stdout)
        .into_owned();
    assert!(read.contains("Siblings"), "{read}");
    assert!(read.contains("chosen"), "{read}");
    let json = w.env.json(&["task", "read", &lead.to_string(), "--json"]);
    assert_eq!(
        json["best_of"]["siblings"].as_array().unwrap().len(),
        3,
        "{json}"
    );

    // So does the task's page: a column per sibling, the winner marked, and why.
    let (status, page) = page_get(&serve, &format!("/tasks/{lead}"));
    assert_eq!(status, 200);
    assert!(page.contains("data-siblings=\"3\""), "{page}");
    let winner_sibling = chosen["sibling"].as_u64().unwrap();
    assert!(
        page.contains(&format!("data-sibling=\"{winner_sibling}\" class=\"won\"")),
        "{page}"
    );
    assert!(page.contains("smallest passing change"), "{page}");
    assert!(page.contains(opened["url"].as_str().unwrap()), "{page}");
}

#[test]
fn none_passing_fails_the_task_with_every_siblings_evidence() {
    let w = world();
    let model = siblings_model(vec![Try::Fails, Try::Fails, Try::Fails]);
    let serve = w.serve("4");
    let lead = w.create(&model, &["--open-pr", REPO]);
    let task = w.finished(lead, &serve);
    assert_eq!(task["state"], "failed", "{task}");
    let error = task["last_error"].as_str().unwrap();
    assert!(error.contains("none of the 3 siblings passed"), "{error}");
    let none = w.step(lead, "none_passed").expect("a none_passed step");
    let candidates = none["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 3);
    for c in candidates {
        assert_eq!(c["passed"], false);
        assert!(c["attempt"].is_i64(), "each sibling's tree is kept: {c}");
        assert_eq!(c["gates"][0]["verdict"], "failed", "{c}");
    }
    assert!(
        w.fake.pulls(REPO).is_empty(),
        "no pull request without a pass"
    );
}

#[test]
fn first_passing_stops_the_others_after_the_first_pass() {
    let w = world();
    let model = siblings_model(vec![Try::Slow(60), Try::Small, Try::Slow(60)]);
    let serve = w.serve("4");
    let lead = w.create(&model, &["--choose", "first_passing"]);
    let task = w.finished(lead, &serve);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    let siblings = w.siblings(lead);
    wait_for(|| {
        w.siblings(lead)
            .iter()
            .all(|s| s["state"] != "running" && s["state"] != "queued")
    });
    let siblings_now = w.siblings(lead);
    let states: Vec<&str> = siblings_now
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states.iter().filter(|s| **s == "succeeded").count(),
        1,
        "{states:?}"
    );
    assert_eq!(
        states.iter().filter(|s| **s == "canceled").count(),
        2,
        "{states:?}"
    );
    let chosen = w.step(lead, "chosen").unwrap();
    assert_eq!(chosen["choose"], "first_passing");
    assert_eq!(chosen["stopped"].as_array().unwrap().len(), 2, "{chosen}");
    let winner = siblings.iter().find(|s| s["id"] == chosen["task"]).unwrap();
    assert_eq!(
        w.env.task(winner["id"].as_i64().unwrap())["state"],
        "succeeded"
    );
}

#[test]
fn a_judge_chooses_with_its_reason_recorded() {
    let w = world();
    let model = siblings_model(vec![Try::Small, Try::Big, Try::Fails]);
    let serve = w.serve("4");
    let lead = w.create(&model, &["--choose", "judge"]);
    let task = w.finished(lead, &serve);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    let chosen = w.step(lead, "chosen").unwrap();
    assert_eq!(chosen["choose"], "judge");
    let why = chosen["why"].as_str().unwrap();
    assert!(why.contains("extra module"), "{why}");
    // The judge named the bigger one, and was followed although it is not the smallest.
    let patch = w.patch(chosen["attempt"].as_i64().unwrap());
    assert!(patch.contains("extra.rs"), "{patch}");
    // It saw only passing siblings' diffs: the failing one's never reached it.
    let judged = model
        .received()
        .into_iter()
        .find(|r| r.tool_names().is_empty())
        .expect("the judge was asked");
    let prompt = judged.last_user_text().unwrap();
    assert!(!prompt.contains("+nope"), "{prompt}");
}

#[test]
fn a_persons_select_before_opening_changes_the_pull_requests_content() {
    let w = world();
    let model = siblings_model(vec![Try::Small, Try::Big, Try::Fails]);
    let serve = w.serve("4");
    let lead = w.create(&model, &[]);
    let task = w.finished(lead, &serve);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    let chosen = w.step(lead, "chosen").unwrap();
    let attempts = w.attempts(lead);
    let bigger = attempts
        .iter()
        .map(|a| a["id"].as_i64().unwrap())
        .find(|id| w.patch(*id).contains("extra.rs"))
        .unwrap();
    assert_ne!(chosen["attempt"].as_i64(), Some(bigger));
    assert!(
        w.fake.pulls(REPO).is_empty(),
        "no pull request was asked for"
    );

    // The two passing siblings' diffs, compared: the extra file is only the bigger one's.
    let smaller = chosen["attempt"].as_i64().unwrap().to_string();
    let compared = w.ok(&[
        "attempt",
        "compare",
        &smaller,
        &bigger.to_string(),
        "--json",
    ]);
    let files = compared["files"].as_array().unwrap();
    let extra = files.iter().find(|f| f["path"] == "src/extra.rs").unwrap();
    assert!(
        extra["a"].is_null() && extra["b"].as_str().unwrap().contains("+5"),
        "{compared}"
    );
    let lib = files.iter().find(|f| f["path"] == "src/lib.rs").unwrap();
    assert_eq!(lib["same"], true, "{compared}");
    assert!(compared["b"]["lines"].as_u64() > compared["a"]["lines"].as_u64());
    let text = String::from_utf8_lossy(
        &w.cli(&["attempt", "compare", &smaller, &bigger.to_string()])
            .stdout,
    )
    .into_owned();
    assert!(
        text.contains(&format!("only in attempt {bigger}: src/extra.rs")),
        "{text}"
    );
    assert!(text.contains("changed alike: src/lib.rs"), "{text}");

    // The person prefers the bigger change: their choice is recorded on the task.
    w.ok(&["attempt", "select", &bigger.to_string(), "--json"]);
    let overridden = w
        .step(lead, "overridden")
        .expect("the override is recorded on the task");
    assert_eq!(overridden["attempt"].as_i64(), Some(bigger));
    let selected: Vec<i64> = w
        .attempts(lead)
        .iter()
        .filter(|a| a["selected"] == true)
        .map(|a| a["id"].as_i64().unwrap())
        .collect();
    assert_eq!(selected, vec![bigger], "one selected among the siblings");

    let source = w.source.to_str().unwrap().to_owned();
    let opened = w.ok(&[
        "attempt",
        "open-pr",
        &bigger.to_string(),
        "--repo",
        REPO,
        "--workspace",
        &source,
        "--json",
    ]);
    let branch = opened["branch"].as_str().unwrap();
    let files = w.fake.branch_files(REPO, branch).unwrap();
    assert!(files.contains_key("src/extra.rs"), "{files:?}");

    // One pull request per task: the lead's own choice cannot open a second.
    let first = chosen["attempt"].as_i64().unwrap();
    let out = w.cli(&[
        "attempt",
        "open-pr",
        &first.to_string(),
        "--repo",
        REPO,
        "--workspace",
        &source,
    ]);
    assert!(!out.status.success(), "a second pull request was opened");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("one pull request per task"), "{said}");
    assert_eq!(w.fake.pulls(REPO).len(), 1);
}

#[test]
fn a_killed_daemon_running_the_siblings_is_rescued_and_one_pull_request_comes_out() {
    let w = world();
    // Each sibling sleeps in a command first: the daemon is killed while they all run.
    let model = siblings_model(vec![Try::Slow(4), Try::Slow(4), Try::Slow(4)]);
    let mut serve = w.serve("4");
    let lead = w.create(&model, &["--open-pr", REPO]);
    wait_for(|| {
        w.steps(lead).iter().any(|s| s["step"] == "siblings")
            && w.siblings(lead)
                .iter()
                .filter(|s| s["state"] == "running")
                .count()
                == 3
            && model.request_count() >= 3
    });
    serve.signal(Signal::SIGKILL);
    serve.wait();
    let serve = w.serve("4");
    let task = w.finished(lead, &serve);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    for s in w.siblings(lead) {
        assert_eq!(s["state"], "succeeded", "{s}");
        let id = s["id"].as_i64().unwrap();
        let rescued = w.env.events(id).iter().any(|e| e["kind"] == "rescued");
        assert!(rescued, "sibling {id} was rescued");
    }
    assert_eq!(w.fake.pulls(REPO).len(), 1, "one pull request");
    let chosen: Vec<Value> = w
        .steps(lead)
        .into_iter()
        .filter(|s| s["step"] == "chosen")
        .collect();
    assert_eq!(chosen.len(), 1, "chosen once");
}

#[test]
fn canceling_the_task_cancels_every_sibling() {
    let w = world();
    let model = siblings_model(vec![Try::Slow(60), Try::Slow(60), Try::Slow(60)]);
    let serve = w.serve("4");
    let lead = w.create(&model, &[]);
    wait_for(|| {
        w.steps(lead).iter().any(|s| s["step"] == "siblings")
            && w.siblings(lead).iter().any(|s| s["state"] == "running")
    });
    w.ok(&["task", "cancel", &lead.to_string()]);
    let task = w.finished(lead, &serve);
    assert_eq!(task["state"], "canceled");
    wait_for(|| w.siblings(lead).iter().all(|s| s["state"] == "canceled"));
}

/// A lead whose pull request is to be opened by a daemon without GitHub is not failed: it is
/// handed back with its choice kept and its attempt not counted, and waits, saying why, for a
/// daemon that has GitHub, which opens the one pull request.
#[test]
fn a_lead_where_github_is_missing_waits_for_a_daemon_that_has_it() {
    let w = world();
    let model = siblings_model(vec![Try::Small, Try::Small, Try::Small]);
    let without = w.env.serve(&[
        "--workers",
        "4",
        "--lease-seconds",
        "3",
        "--workspaces",
        w.workspaces.to_str().unwrap(),
    ]);
    let lead = w.create(&model, &["--open-pr", REPO]);
    wait_for(|| {
        let task = w.env.task(lead);
        task["state"] == "queued"
            && task["waiting_for"]
                .as_str()
                .is_some_and(|why| why.contains("no live daemon has GitHub configured"))
    });
    let chosen = w
        .step(lead, "chosen")
        .expect("the choice is made where GitHub is missing");
    assert!(w.fake.pulls(REPO).is_empty());
    let task = w.env.task(lead);
    assert!(
        task["requires"]
            .as_array()
            .is_some_and(|r| r.iter().any(|word| word == "github")),
        "{task}"
    );
    let kinds: Vec<String> = w
        .env
        .events(lead)
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_owned))
        .collect();
    assert!(
        kinds.iter().any(|k| k == "pinned") && kinds.iter().any(|k| k == "handed_back"),
        "{kinds:?}"
    );
    assert!(!kinds.iter().any(|k| k == "failed"), "{kinds:?}");
    let said = String::from_utf8_lossy(&w.env.run(&["task", "events", &lead.to_string()]).stdout)
        .into_owned();
    assert!(
        said.contains("GitHub is not configured where worker"),
        "{said}"
    );
    drop(without);

    let serve = w.serve("4");
    let task = w.finished(lead, &serve);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    assert_eq!(w.fake.pulls(REPO).len(), 1, "one pull request");
    let opened = w
        .step(lead, "pull_opened")
        .expect("the pull request is recorded");
    assert_eq!(opened["attempt"], chosen["attempt"], "the choice moved");
    let chosen_again = w
        .steps(lead)
        .into_iter()
        .filter(|s| s["step"] == "chosen")
        .count();
    assert_eq!(chosen_again, 1, "chosen once");
}
