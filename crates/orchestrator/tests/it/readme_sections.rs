//! The README's other sections and the reference pages it points to run as written, each on a
//! fresh home as the tour is (see readme_tour.rs: the same one bash fed a line at a time, this
//! build's `orchestrator` first on PATH, no ORCHESTRATOR_* variable of this machine): the
//! README's "Containment", docs/github.md (both blocks), docs/automations.md with its schedule
//! file, docs/notifications.md's commands, the README's shell completions and manual pages, the
//! config examples of docs/agents.md and the README's "Containment", and docs/github-workflow.md's
//! ledger command.
//!
//! What is changed, and why, is all here:
//! - A model is the scripted stand-in, named the way the Settings table says:
//!   `ORCHESTRATOR_MODEL=gpt-4.1` and `ORCHESTRATOR_BASE_URL` at the stand-in.
//! - GitHub is the local stand-in: `GITHUB_TOKEN` is its token and `ORCHESTRATOR_GITHUB_API_URL`
//!   (the Settings table's way to another GitHub) its address. What the GitHub section assumes is
//!   made first: acme/widgets (a small crate) with issue 12 and pull request 31 on the stand-in,
//!   `~/widgets` a clone of it with the fix made and not committed.
//! - `~/src/app` is made by `cargo new`, as the tour's first line makes it; "Containment" runs in
//!   it (as "Agent tasks" leaves a person, after `cd ~/src/app`).
//! - There is no internet here: `curl -sI https://example.com` through the sandbox's proxy must
//!   fail the way it does without one (curl's exit 56 on the proxy's 502, the proxy saying so on
//!   stderr), and `notify test ops` must exit 1 saying it cannot reach the receiver.
//! - "Automations" runs with `serve` running (it fires them); after `automation run` the test
//!   waits for the task it made to end, as a person would.
//! - Not run: the README's first block (a release build of `serve`, and `scripts/test`, which is
//!   this whole test suite) and "Benchmarks" (minutes of release builds and load each).

use crate::readme_tour::{REMOVED, Shell, commands_between, fresh_home, start_serve};
use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_test_support::{Program, require};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::PATIENCE;

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel),
    )
    .unwrap()
}

/// The `toml` blocks between two headings, each whole.
fn toml_between(doc: &str, from: &str, to: &str) -> Vec<String> {
    let start = doc.find(from).unwrap_or_else(|| panic!("no {from:?}"));
    let end = start + doc[start..].find(to).unwrap_or_else(|| panic!("no {to:?}"));
    doc[start..end]
        .split("```toml\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_owned())
        .collect()
}

/// `cargo new -q --lib ~/src/app`, as the tour's first line.
fn project(home: &Path, env: &[(String, String)]) -> PathBuf {
    let app = home.join("src/app");
    let status = std::process::Command::new("cargo")
        .args(["new", "-q", "--lib"])
        .arg(&app)
        .env_clear()
        .envs(env.iter().cloned())
        .status()
        .unwrap();
    assert!(status.success());
    app
}

/// Runs `line` and checks its exit status; returns what it printed on stdout.
fn expect(shell: &mut Shell, line: &str, code: i32) -> String {
    let (got, out) = shell.run(line);
    assert_eq!(
        got,
        code,
        "`{line}` exited {got}: {out}\nstderr: {}",
        shell.stderr_text()
    );
    out
}

#[test]
fn the_readmes_containment_commands_run_as_written() {
    require(Program::Bubblewrap);
    require(Program::Curl);
    let readme = repo_file("README.md");
    let commands = commands_between(&readme, "### Containment", "## Reference");
    assert_eq!(commands.len(), 4, "{commands:?}");

    // The agent of `run "..."` tries to write, which read_only refuses; what it was told is kept.
    let told = Arc::new(Mutex::new(String::new()));
    let seen = told.clone();
    let model = ScriptedModel::start_blocking(move |request: &Request| {
        if request.assistant_turns() == 0 {
            Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({"command": "touch made-by-the-agent"}),
            )])
        } else {
            *seen.lock().unwrap() = format!("{:?}", request.messages());
            Reply::Text("Done.".into())
        }
    });

    let base = tempfile::tempdir().unwrap();
    let (home, mut env) = fresh_home(base.path());
    let app = project(&home, &env);
    env.push(("ORCHESTRATOR_MODEL".to_owned(), "gpt-4.1".to_owned()));
    env.push(("ORCHESTRATOR_BASE_URL".to_owned(), model.base_url()));
    let mut shell = Shell::start(&env, &REMOVED, &app, base.path().join("shell.err"));

    let out = expect(&mut shell, &commands[0], 0);
    assert!(out.contains("sandbox: available"), "{out}");

    // The agent's environment: none of the daemon's own variables.
    let out = expect(&mut shell, &commands[1], 0);
    assert!(out.contains("PATH="), "{out}");
    assert!(!out.contains("ORCHESTRATOR_"), "{out}");

    assert!(commands[2].contains("curl -sI https://example.com"));
    let out = expect(&mut shell, &commands[2], 56);
    assert!(out.contains("502"), "{out}");
    assert!(
        shell
            .stderr_text()
            .contains("sandbox network: example.com:443"),
        "{}",
        shell.stderr_text()
    );

    expect(&mut shell, &commands[3], 0);
    assert!(!app.join("made-by-the-agent").exists());
    let told = told.lock().unwrap().clone();
    assert!(told.contains("Read-only file system"), "{told}");
}

/// The GitHub section's two blocks, in order, on one home.
#[test]
fn the_readmes_github_commands_run_as_written() {
    require(Program::Bubblewrap);
    require(Program::Git);
    let doc = repo_file("docs/github.md");
    let github = commands_between(&doc, "# GitHub", "`pr_open` (or");
    let attempts = commands_between(&doc, "PR attempts keep alternative", "Triggers turn");
    assert_eq!(github.len(), 6, "{github:?}");
    assert_eq!(attempts.len(), 7, "{attempts:?}");

    let base = tempfile::tempdir().unwrap();
    let (home, mut env) = fresh_home(base.path());

    // acme/widgets as GitHub has it, and `~/widgets` a clone of it with the fix not committed.
    let upstream = base.path().join("acme-widgets");
    std::fs::create_dir_all(upstream.join("src")).unwrap();
    std::fs::write(
        upstream.join("Cargo.toml"),
        "[package]\nname = \"widgets\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(upstream.join(".gitignore"), "/target\n/Cargo.lock\n").unwrap();
    let lib = |answer: u32| {
        format!(
            "pub fn answer() -> u32 {{\n    {answer}\n}}\n\n#[test]\nfn it_answers() {{\n    assert!(answer() > 0);\n}}\n"
        )
    };
    std::fs::write(upstream.join("src/lib.rs"), lib(41)).unwrap();
    let git = |dir: &Path, args: &[&str]| orchestrator_test_support::git(dir, args);
    git(&upstream, &["init", "-q", "-b", "main"]);
    git(&upstream, &["add", "-A"]);
    git(
        &upstream,
        &[
            "-c",
            "user.name=T",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "-m",
            "widgets",
        ],
    );
    let widgets = home.join("widgets");
    git(
        base.path(),
        &[
            "clone",
            "-q",
            upstream.to_str().unwrap(),
            widgets.to_str().unwrap(),
        ],
    );
    std::fs::write(widgets.join("src/lib.rs"), lib(42)).unwrap();

    let fake = FakeGitHub::start_blocking();
    fake.set_viewer("orchestrator-bot");
    fake.seed_git("acme/widgets", &upstream);
    fake.add_issue(
        "acme/widgets",
        12,
        "The answer is wrong",
        "It says 41.",
        "carol",
    );
    fake.add_issue(
        "acme/widgets",
        31,
        "Document the answer",
        "Adds a line.",
        "dave",
    );
    fake.make_pull(
        "acme/widgets",
        31,
        &[("README.md", "added", "+The answer.")],
        "diff --git a/README.md b/README.md\n+The answer.\n",
    );

    env.push(("GITHUB_TOKEN".to_owned(), FAKE_TOKEN.to_owned()));
    env.push(("ORCHESTRATOR_GITHUB_API_URL".to_owned(), fake.url()));
    let mut shell = Shell::start(&env, &REMOVED, &home, base.path().join("shell.err"));

    let out = expect(&mut shell, &github[0], 0);
    assert!(out.contains("The answer is wrong"), "{out}");
    let out = expect(&mut shell, &github[1], 0);
    assert!(out.contains("+The answer."), "{out}");
    assert!(github[2].starts_with("orchestrator run "));
    expect(&mut shell, &github[2], 0);
    expect(&mut shell, &github[3], 0);
    assert_eq!(fake.comments("acme/widgets", 12).len(), 1);
    // The close is refused by its guard: the fix is not committed.
    expect(&mut shell, &github[4], 4);
    assert!(
        shell.stderr_text().contains("uncommitted"),
        "{}",
        shell.stderr_text()
    );
    assert_eq!(fake.issue("acme/widgets", 12).state, "open");
    let out = expect(&mut shell, &github[5], 0);
    assert!(
        out.contains("DELIVERY") || out.contains("no deliveries yet"),
        "{out}"
    );

    let out = expect(&mut shell, &attempts[0], 0);
    assert!(out.contains("attempt 1"), "{out}");
    let out = expect(&mut shell, &attempts[1], 0);
    assert!(out.contains("parser fix, approach A"), "{out}");
    expect(&mut shell, &attempts[2], 0);
    expect(&mut shell, &attempts[3], 0);
    assert_eq!(
        std::fs::read_to_string(home.join("widgets-b/src/lib.rs")).unwrap(),
        lib(42),
        "the patch applied in the clean clone"
    );
    let out = expect(&mut shell, &attempts[4], 0);
    assert!(out.contains("applies to origin/main"), "{out}");
    expect(&mut shell, &attempts[5], 0);
    expect(&mut shell, &attempts[6], 0);
    let pulls = fake.pulls("acme/widgets");
    let opened: Vec<_> = pulls.iter().filter(|p| p.number != 31).collect();
    assert_eq!(opened.len(), 1, "{pulls:?}");
    assert!(opened[0].body.contains("Fixes #12"), "{}", opened[0].body);
    let branch = fake
        .branches("acme/widgets")
        .into_iter()
        .find(|b| b.starts_with("orchestrator/task-1-attempt-1-"))
        .unwrap();
    let files = fake.branch_files("acme/widgets", &branch).unwrap();
    assert_eq!(files["src/lib.rs"].1, lib(42).into_bytes());
}

/// The Automations section's commands with `serve` running, then its schedule file as the
/// section says to keep it: in `schedules` in the home directory, checked and applied.
#[test]
fn the_readmes_automation_commands_run_as_written() {
    require(Program::Bubblewrap);
    let doc = repo_file("docs/automations.md");
    let commands = commands_between(&doc, "# Automations", "Schedules: 5 fields");
    assert_eq!(commands.len(), 8, "{commands:?}");

    let base = tempfile::tempdir().unwrap();
    let (home, env) = fresh_home(base.path());
    project(&home, &env);
    let serve = start_serve(&home, &env, &base.path().join("serve.log"));
    let mut shell = Shell::start(&env, &REMOVED, &home, base.path().join("shell.err"));
    let mut outputs = Vec::new();
    for line in &commands {
        outputs.push(expect(&mut shell, line, 0));
        if line.starts_with("orchestrator automation run ") {
            // As a person would: wait for the slot's task to end.
            let started = Instant::now();
            loop {
                let out = expect(&mut shell, "orchestrator task read 1 --json", 0);
                let task: Value = serde_json::from_str(&out).unwrap();
                let state = task["task"]["state"].as_str().unwrap().to_owned();
                if state == "succeeded" {
                    assert!(task["task"]["automation_id"].is_number(), "{task}");
                    break;
                }
                assert!(
                    ["queued", "running"].contains(&state.as_str()),
                    "task 1 is {state}: {task}"
                );
                assert!(started.elapsed() < PATIENCE, "task 1 did not end: {task}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    assert!(
        outputs[0].contains("created automation nightly"),
        "{}",
        outputs[0]
    );
    assert_eq!(outputs[1].lines().count(), 5, "{}", outputs[1]);
    assert!(outputs[2].contains("nightly"), "{}", outputs[2]);
    assert!(outputs[3].contains("Monday to Friday"), "{}", outputs[3]);
    assert!(outputs[4].contains("task 1"), "{}", outputs[4]);
    assert!(outputs[5].contains("paused"), "{}", outputs[5]);
    assert!(
        outputs[6].contains("updated automation nightly"),
        "{}",
        outputs[6]
    );
    assert!(
        outputs[7].contains("deleted automation nightly"),
        "{}",
        outputs[7]
    );
    let out = expect(&mut shell, "orchestrator automation list", 0);
    assert!(out.contains("no automations"), "{out}");

    // The file, in `schedules` in the home directory.
    let file = toml_between(
        &doc,
        "Declarative automations",
        "`orchestrator automation validate",
    );
    assert_eq!(file.len(), 1);
    let schedules = home.join(".local/share/orchestrator/schedules");
    std::fs::create_dir_all(&schedules).unwrap();
    std::fs::write(schedules.join("nightly-tests.toml"), &file[0]).unwrap();
    expect(&mut shell, "orchestrator automation validate", 0);
    expect(&mut shell, "orchestrator automation apply", 0);
    let out = expect(&mut shell, "orchestrator automation read nightly-tests", 0);
    assert!(out.contains("Europe/Berlin"), "{out}");
    assert!(out.contains("cargo clippy"), "{out}");
    drop(serve);
}

/// docs/notifications.md's commands with its config where the page says the config is,
/// and the variable its webhook sink names set.
#[test]
fn the_readmes_notification_commands_run_as_written() {
    let doc = repo_file("docs/notifications.md");
    let commands = commands_between(
        &doc,
        "# Notifications",
        "Notifications are kept in the store",
    );
    assert_eq!(commands.len(), 3, "{commands:?}");
    let config = toml_between(
        &doc,
        "# Notifications",
        "Notifications are kept in the store",
    );
    assert_eq!(config.len(), 1);

    let base = tempfile::tempdir().unwrap();
    let (home, mut env) = fresh_home(base.path());
    let dir = home.join(".local/share/orchestrator");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), &config[0]).unwrap();
    env.push(("ORCH_NOTIFY_SECRET".to_owned(), "s3cret".to_owned()));
    let mut shell = Shell::start(&env, &REMOVED, &home, base.path().join("shell.err"));

    // No internet here: the sink's example.com cannot be reached, and it says so.
    expect(&mut shell, &commands[0], 1);
    let said = shell.stderr_text();
    assert!(said.contains("ops: cannot reach the receiver"), "{said}");
    let out = expect(&mut shell, &commands[1], 0);
    assert!(out.contains("no notifications"), "{out}");
    let out = expect(&mut shell, &commands[2], 0);
    assert_eq!(out.trim(), "[]");
}

#[test]
fn the_readmes_completion_and_manual_commands_run_as_written() {
    let readme = repo_file("README.md");
    let commands = commands_between(
        &readme,
        "### Shell completions and manual pages",
        "## Benchmarks",
    );
    assert_eq!(commands.len(), 4, "{commands:?}");
    let base = tempfile::tempdir().unwrap();
    let (home, env) = fresh_home(base.path());
    let mut shell = Shell::start(&env, &REMOVED, &home, base.path().join("shell.err"));
    for line in &commands {
        expect(&mut shell, line, 0);
    }
    let completions =
        std::fs::read_to_string(home.join(".local/share/bash-completion/completions/orchestrator"))
            .unwrap();
    assert!(completions.contains("automation"), "{completions}");
    let man = home.join(".local/share/man/man1");
    assert!(man.join("orchestrator.1").exists());
    assert!(man.join("orchestrator-task-create.1").exists());
    // The shell that ran the block finds the pages without `~/.local/bin` on PATH.
    let out = expect(&mut shell, "printenv MANPATH", 0);
    assert!(
        out.trim()
            .starts_with(&home.join(".local/share/man").display().to_string()),
        "{out}"
    );
}

/// The config examples of "Agent tasks" (MCP and language servers) and "Containment", and
/// docs/security.md's, each as the whole `config.toml` of a fresh home: read by the commands that
/// use them.
#[test]
fn the_readmes_config_examples_load_as_written() {
    require(Program::Bubblewrap);
    let readme = repo_file("README.md");
    let agent = toml_between(
        &repo_file("docs/agents.md"),
        "# Agent tasks",
        "A server starts on demand in the task's sandbox",
    );
    assert_eq!(agent.len(), 3, "[model], [mcp_servers], [lsp_servers]");
    let sandbox = toml_between(&readme, "### Containment", "## Reference");
    assert_eq!(sandbox.len(), 1);
    let security = toml_between(
        &repo_file("docs/security.md"),
        "### Builds and caches",
        "### The network of a sandbox",
    );
    assert_eq!(security.len(), 1);

    let base = tempfile::tempdir().unwrap();
    let (home, mut env) = fresh_home(base.path());
    env.push((
        "CARGO_TARGET_DIR".to_owned(),
        "/tmp/agents-target".to_owned(),
    ));
    let config = home.join(".local/share/orchestrator/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let mut shell = Shell::start(&env, &REMOVED, &home, base.path().join("shell.err"));

    std::fs::write(&config, &agent[1]).unwrap();
    let out = expect(&mut shell, "orchestrator mcp-servers list", 0);
    assert!(out.contains("docs"), "{out}");
    assert!(out.contains("mcp-server-filesystem"), "{out}");

    std::fs::write(&config, &agent[2]).unwrap();
    // A missing language server is a warning (exit 0); each is checked by name.
    let out = expect(&mut shell, "orchestrator doctor --json", 0);
    let report: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"lsp rust-analyzer"), "{names:?}");
    assert!(names.contains(&"lsp zls"), "{names:?}");

    // `agent_env` passes CARGO_TARGET_DIR into agents' processes.
    for example in [&sandbox[0], &security[0]] {
        std::fs::write(&config, example).unwrap();
        let out = expect(&mut shell, "orchestrator sandbox -- env", 0);
        assert!(out.contains("CARGO_TARGET_DIR=/tmp/agents-target"), "{out}");
    }
}

/// docs/github-workflow.md's ledger command on a fresh home: the ledger, empty.
#[test]
fn the_github_workflows_ledger_command_runs_as_written() {
    let doc = repo_file("docs/github-workflow.md");
    let commands = commands_between(&doc, "## What happens", "## By hand");
    assert_eq!(commands, vec!["orchestrator github deliveries"]);
    let base = tempfile::tempdir().unwrap();
    let (home, env) = fresh_home(base.path());
    let mut shell = Shell::start(&env, &REMOVED, &home, base.path().join("shell.err"));
    let out = expect(&mut shell, &commands[0], 0);
    assert!(out.starts_with("no deliveries yet"), "{out}");
    assert!(out.contains("ORCHESTRATOR_GITHUB_WEBHOOK_SECRET"), "{out}");
}

/// The README's demo block on a fresh home, with `--exit` added so that it ends once the pull
/// request is open (as written it waits for Ctrl-C, for a person to look around): the labelled
/// issue becomes a task, the task a draft pull request, and nothing of the person's home is used.
#[test]
fn the_readmes_demo_runs_as_written_and_opens_a_pull_request() {
    require(Program::Bubblewrap);
    require(Program::Git);
    let readme = repo_file("README.md");
    let commands = commands_between(&readme, "To see the GitHub flow", "## A short tour");
    assert_eq!(commands, ["orchestrator demo"], "{commands:?}");
    let base = tempfile::tempdir().unwrap();
    let (home, env) = fresh_home(base.path());
    let mut shell = Shell::start(&env, &REMOVED, &home, base.path().join("shell.err"));
    let (code, out) = shell.run(&format!("{} --exit", commands[0]));
    let said = shell.stderr_text();
    assert_eq!(code, 0, "{out}\n{said}");
    for expected in [
        "GitHub stand-in  http://127.0.0.1:",
        "dashboard        http://127.0.0.1:",
        "/login?once=",
        "serve answered 202",
        ": succeeded",
        "pull request #",
        "issue #7 has a comment linking it",
        "on the stand-in  http://127.0.0.1:",
    ] {
        assert!(
            out.contains(expected),
            "{expected:?} missing from:\n{out}\n{said}"
        );
    }
    // The demo's home was its own: nothing was made in the person's.
    assert!(
        !home.join(".local/share/orchestrator").exists(),
        "the demo used the person's home"
    );
}
