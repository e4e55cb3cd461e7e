//! What a newcomer meets in the first hour, each as the README and the docs promise it: the config
//! file the docs name is the one `serve` reads (and `serve` says which), a model key that is
//! missing is said at `task create`, errors say what to do (an unreachable database, a missing role
//! or database, a repository with no commit, a refused pull request or close, an MCP server the
//! sandbox cannot find), and shell completions and manual pages come from the command line.

use crate::support::{BIN, Env, PATIENCE};
use orchestrator_test_support::{Program, require};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel),
    )
    .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `serve` started with HOME set to `home` and no ORCHESTRATOR_HOME: what it printed up to the
/// line with its address.
fn serve_start_lines(home: &Path) -> String {
    let log = home.join("serve.log");
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("HOME", home)
        .env_remove("ORCHESTRATOR_HOME")
        .env_remove("ORCHESTRATOR_CONFIG")
        .env_remove("ORCHESTRATOR_DATABASE_URL")
        .env_remove("XDG_DATA_HOME")
        .env_remove("GITHUB_TOKEN")
        .env_remove("GH_TOKEN")
        .env_remove("ORCHESTRATOR_GITHUB_WEBHOOK_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("http://") {
            break text;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("serve exited ({status}): {text}");
        }
        assert!(started.elapsed() < PATIENCE, "serve did not start: {text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    text
}

#[test]
fn the_docs_name_the_config_file_serve_reads_and_serve_says_which_it_read() {
    require(Program::Bubblewrap);
    let path = "~/.local/share/orchestrator/config.toml";
    let workflow = repo_file("docs/github-workflow.md");
    let example = repo_file("examples/github-workflow.toml");
    for (name, text) in [
        ("docs/github-workflow.md", &workflow),
        ("examples/github-workflow.toml", &example),
    ] {
        assert!(text.contains(path), "{name} does not name {path}");
        assert!(
            !text.contains("~/.orchestrator"),
            "{name} names ~/.orchestrator, which nothing reads"
        );
    }

    // The example copied where the docs say, on a fresh machine's HOME.
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join(".local/share/orchestrator/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, &example).unwrap();
    let said = serve_start_lines(home.path());
    assert!(
        said.contains(&format!("config file {}", config.display())),
        "{said}"
    );

    let bare = tempfile::tempdir().unwrap();
    let said = serve_start_lines(bare.path());
    assert!(said.contains("no config file ("), "{said}");
    assert!(
        said.contains(
            &bare
                .path()
                .join(".local/share/orchestrator/config.toml")
                .display()
                .to_string()
        ),
        "{said}"
    );
}

#[test]
fn an_agent_task_whose_key_is_not_set_is_refused_when_it_is_created() {
    let env = Env::sqlite();
    let ws = env.workspace();
    let ws = ws.display().to_string();
    let out = env
        .cmd(&[
            "task",
            "create",
            "--title",
            "t",
            "--prompt",
            "p",
            "--workspace",
            &ws,
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--api-key-env",
            "ORCH_FIRST_HOUR_NO_KEY",
        ])
        .env_remove("ORCH_FIRST_HOUR_NO_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ORCH_FIRST_HOUR_NO_KEY is not set or is empty"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("--api-key-env ''"),
        "{}",
        stderr(&out)
    );
    assert_eq!(env.tasks().len(), 0, "nothing was created");
}

#[test]
fn a_server_named_on_the_command_line_does_not_inherit_the_configs_key() {
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        "[model]\nbase_url = \"https://api.example.com/v1\"\nmodel = \"big\"\napi_key_env = \"ORCH_FIRST_HOUR_HOSTED_KEY\"\n",
    )
    .unwrap();
    let ws = env.workspace().display().to_string();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "local",
        "--prompt",
        "p",
        "--workspace",
        &ws,
        "--model",
        "llama3",
        "--base-url",
        "http://127.0.0.1:8080/v1",
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let task = env.task(id);
    assert!(
        !task.to_string().contains("ORCH_FIRST_HOUR_HOSTED_KEY"),
        "the local server's task names the hosted key: {task}"
    );
}

#[test]
fn an_unreachable_database_is_not_called_a_bad_url() {
    let env = Env::sqlite();
    let out = env
        .cmd(&["task", "list"])
        .env(
            "ORCHESTRATOR_DATABASE_URL",
            "postgres://postgres@127.0.0.1:1/orchestrator",
        )
        .output()
        .unwrap();
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{said}");
    assert!(said.contains("cannot reach the database server"), "{said}");
    assert!(said.contains("is PostgreSQL running"), "{said}");
    assert!(!said.contains("bad database URL"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_role_or_database_is_named_with_the_command_that_makes_it() {
    if orchestrator_test_support::postgres_skipped() {
        eprintln!("ORCHESTRATOR_TEST_SKIP_POSTGRES=1: PostgreSQL half not run");
        return;
    }
    // A database of our own first, so the server is there (a private one when none is).
    let url = orchestrator_test_support::fresh_postgres_url().await;
    let (scheme_user, rest) = url.split_once('@').unwrap();
    let host = rest.split('/').next().unwrap();
    let user = scheme_user.trim_start_matches("postgres://");
    let user = user.split(':').next().unwrap();
    let env = Env::sqlite();
    for (target, needles) in [
        (
            format!("postgres://orch_no_such_role@{host}/postgres"),
            vec!["refused the connection", "orch_no_such_role", "createuser"],
        ),
        (
            format!("postgres://{user}@{host}/orch_no_such_database"),
            vec![
                "refused the connection",
                "orch_no_such_database",
                "createdb",
            ],
        ),
    ] {
        let out = env
            .cmd(&["task", "list"])
            .env("ORCHESTRATOR_DATABASE_URL", &target)
            .output()
            .unwrap();
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(5), "{said}");
        for needle in needles {
            assert!(said.contains(needle), "{needle:?} missing: {said}");
        }
        assert!(!said.contains(" at line "), "{said}");
    }
}

/// A git repository at `dir` (with one commit when `commit`).
fn git_repo(dir: &Path, commit: bool) {
    orchestrator_test_support::git(dir, &["init", "-q", "-b", "main"]);
    orchestrator_test_support::git(dir, &["config", "user.name", "T"]);
    orchestrator_test_support::git(dir, &["config", "user.email", "t@example.com"]);
    if commit {
        std::fs::write(dir.join("a.txt"), "one\n").unwrap();
        orchestrator_test_support::git(dir, &["add", "-A"]);
        orchestrator_test_support::git(dir, &["commit", "-q", "-m", "one"]);
    }
}

#[test]
fn attempt_errors_say_what_to_do_without_libgit2s_internals() {
    let env = Env::sqlite();
    let ws = env.workspace();
    git_repo(&ws, false);
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    let id = env.create("t", &["true"], &ws).to_string();
    let out = env.run(&["attempt", "record", "--task", &id, "--label", "first"]);
    let said = stderr(&out);
    assert!(!out.status.success(), "{said}");
    assert!(!said.contains("class="), "{said}");
    assert!(!said.contains("code="), "{said}");
    assert!(said.contains("no commit yet"), "{said}");
}

#[test]
fn refusals_to_a_person_name_the_commands_and_flags_a_person_has() {
    let env = Env::sqlite();
    let ws = env.workspace();
    git_repo(&ws, true);
    std::fs::write(ws.join("a.txt"), "two\n").unwrap();
    let ws_s = ws.display().to_string();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "fix",
        "--gate",
        "true",
        "--accept",
        "the tests pass",
        "--workspace",
        &ws_s,
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap().to_string();
    let github = |args: &[&str]| {
        env.cmd(args)
            .env("GITHUB_TOKEN", "ghp_first_hour")
            .env("ORCHESTRATOR_GITHUB_API_URL", "http://127.0.0.1:1")
            .output()
            .unwrap()
    };

    // A dirty tree: the flag that allows it is named.
    let out = github(&["github", "close", "acme/widgets#1", "--task", &id]);
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{said}");
    assert!(said.contains("--allow-dirty"), "{said}");

    // An attempt whose gates never ran on its tree: what a person runs, not an agent's tools.
    let recorded = env.json(&[
        "attempt", "record", "--task", &id, "--label", "a", "--group", "g", "--json",
    ]);
    let attempt = recorded["id"].as_i64().unwrap().to_string();
    env.json(&[
        "attempt", "record", "--task", &id, "--label", "b", "--group", "g", "--json",
    ]);
    for _ in 0..2 {
        let out = github(&["attempt", "open-pr", &attempt, "--repo", "acme/widgets"]);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(4), "{said}");
        for tool in ["pr_attempt_select", "task_gate_run", "pr_attempt_record"] {
            assert!(
                !said.contains(tool),
                "a person is told to use {tool}: {said}"
            );
        }
        assert!(
            said.contains("orchestrator attempt") || said.contains("orchestrator task"),
            "{said}"
        );
        env.json(&["attempt", "select", &attempt, "--json"]);
    }
}

#[test]
fn an_mcp_server_the_sandbox_cannot_find_gets_a_hint() {
    require(Program::Bubblewrap);
    let env = Env::sqlite();
    // A server program under the host's /tmp, which the sandbox replaces with its own: it is
    // bound in by the path the config gives, so it starts (and, being no MCP server, ends before
    // it answers); one named under /tmp that does not exist gets the hint that says so.
    let dir = tempfile::Builder::new()
        .prefix("orch-first-hour-")
        .tempdir_in("/tmp")
        .unwrap();
    let server = dir.path().join("server");
    std::fs::write(&server, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&server, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let gone = dir.path().join("gone");
    std::fs::write(
        env.home().join("config.toml"),
        format!(
            "[mcp_servers.missing]\ncommand = \"orch-first-hour-no-such-server\"\n\n[mcp_servers.intmp]\ncommand = \"{}\"\n\n[mcp_servers.gone]\ncommand = \"{}\"\n",
            server.display(),
            gone.display()
        ),
    )
    .unwrap();
    let out = env.run(&["mcp-servers", "check", "missing", "intmp", "gone"]);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("not on the sandbox's PATH"), "{said}");
    assert!(
        said.contains("bound by the paths the config gives"),
        "{said}"
    );
    assert!(
        !said.contains(&format!("{}: No such file", server.display())),
        "the server under /tmp was found: {said}"
    );
}

#[test]
fn completions_and_manual_pages_are_generated_from_the_command_line() {
    let run = |args: &[&str]| {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        out.stdout
    };
    let dir = tempfile::tempdir().unwrap();
    let bash = dir.path().join("orchestrator.bash");
    std::fs::write(&bash, run(&["completions", "bash"])).unwrap();
    let checked = Command::new("bash").arg("-n").arg(&bash).output().unwrap();
    assert!(checked.status.success(), "bash -n: {}", stderr(&checked));
    let text = std::fs::read_to_string(&bash).unwrap();
    for word in [
        "task",
        "automation",
        "approval",
        "--workspace",
        "completions",
    ] {
        assert!(text.contains(word), "the bash completion lacks {word}");
    }
    // Sourced, it registers a completion for the command.
    let sourced = Command::new("bash")
        .args([
            "-c",
            &format!("source {} && complete -p orchestrator", bash.display()),
        ])
        .output()
        .unwrap();
    assert!(sourced.status.success(), "{}", stderr(&sourced));
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(!run(&["completions", shell]).is_empty(), "{shell}");
    }

    let page = String::from_utf8(run(&["man"])).unwrap();
    assert!(page.contains(".TH orchestrator"), "{page}");
    assert!(page.contains("serve"), "{page}");
    let out = dir.path().join("man1");
    run(&["man", "--out", out.to_str().unwrap()]);
    for name in [
        "orchestrator.1",
        "orchestrator-task.1",
        "orchestrator-task-create.1",
    ] {
        let page =
            std::fs::read_to_string(out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            page.starts_with(".ie") || page.contains(".TH"),
            "{name}: {page}"
        );
    }
    // The README says how to install them.
    let readme = repo_file("README.md");
    assert!(readme.contains("orchestrator completions bash >"));
    assert!(readme.contains("orchestrator man --out"));
}

#[test]
fn the_model_variables_exported_for_agents_leave_gate_only_tasks_alone() {
    let env = Env::sqlite();
    let ws = env.workspace().display().to_string();
    let out = env
        .cmd(&[
            "task",
            "create",
            "--title",
            "t",
            "--gate",
            "true",
            "--workspace",
            &ws,
        ])
        .env("ORCHESTRATOR_MODEL", "llama3")
        .env("ORCHESTRATOR_BASE_URL", "http://127.0.0.1:8080/v1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // And an agent task takes them.
    let out = env
        .cmd(&[
            "task",
            "create",
            "--title",
            "a",
            "--prompt",
            "p",
            "--workspace",
            &ws,
            "--json",
        ])
        .env("ORCHESTRATOR_MODEL", "llama3")
        .env("ORCHESTRATOR_BASE_URL", "http://127.0.0.1:8080/v1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let id = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["id"]
        .as_i64()
        .unwrap();
    let task = env.task(id);
    assert_eq!(
        task["task"]["model"]["model"].as_str(),
        Some("llama3"),
        "{task}"
    );
}

/// A server named only through the environment, without a model, is refused with words that name
/// where each value can come from, not only the flags.
#[test]
fn a_server_without_a_model_names_the_variables_too() {
    let env = Env::sqlite();
    let out = env
        .cmd(&[
            "run",
            "say hello",
            "--workspace",
            &env.workspace().display().to_string(),
        ])
        .env_remove("ORCHESTRATOR_MODEL")
        .env("ORCHESTRATOR_BASE_URL", "http://127.0.0.1:8080/v1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = stderr(&out);
    for words in [
        "ORCHESTRATOR_BASE_URL",
        "--model NAME",
        "ORCHESTRATOR_MODEL",
        "[model]",
    ] {
        assert!(said.contains(words), "{words:?} in {said}");
    }
}

/// Without bubblewrap, `serve` says at start that a person's gates need it and how to get it,
/// `doctor` does not claim they run sandboxed, and a gate that cannot run fails its task on the
/// first attempt with that reason instead of being retried to no end.
#[test]
fn without_bubblewrap_serve_says_so_and_a_gate_fails_once_with_how_to_install_it() {
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        "[sandbox]\nbwrap = \"/nonexistent/bin/bwrap\"\n",
    )
    .unwrap();
    let ws = env.workspace().display().to_string();
    let id = env.json(&[
        "task",
        "create",
        "--title",
        "check",
        "--gate",
        "true",
        "--workspace",
        &ws,
        "--max-attempts",
        "3",
        "--json",
    ])["id"]
        .as_i64()
        .unwrap();
    let serve = env.serve(&["--workers", "1"]);
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "failed", "{task}");
    assert_eq!(
        task["attempt"], 1,
        "no retry for what no retry can fix: {task}"
    );
    let error = task["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("no retry can run it here") && error.contains("apt install bubblewrap"),
        "{error}"
    );
    let log = serve.log();
    assert!(
        log.contains("a person's gates need it too") && log.contains("apt install bubblewrap"),
        "{log}"
    );
    let doctor = env.run(&["doctor"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&doctor.stdout),
        String::from_utf8_lossy(&doctor.stderr)
    );
    assert!(
        !said.contains("a person's gates run in the workspace_write sandbox"),
        "{said}"
    );
}

/// The key trap between terminals: the key exported where tasks are made, not where `serve`
/// runs. A daemon says which key variables it holds (names only); a task made while no daemon is
/// live waits with the reason, `task create` refuses one that no live daemon could run and says
/// where the variable is missing, and a daemon that holds the key takes it.
#[test]
fn a_key_exported_only_where_tasks_are_made_is_named_not_failed_in_the_daemon() {
    const KEY: &str = "ORCH_TRAP_LOCAL_KEY";
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        format!(
            "[model]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"{KEY}\"\n"
        ),
    )
    .unwrap();
    let ws = env.workspace().display().to_string();
    let create = || {
        env.cmd(&[
            "task",
            "create",
            "--title",
            "t",
            "--prompt",
            "p",
            "--workspace",
            &ws,
            "--json",
        ])
        .env(KEY, "sk-terminal")
        .output()
        .unwrap()
    };
    // No daemon yet: the task is made, and waits for one that holds the key.
    let made = create();
    assert!(made.status.success(), "{}", stderr(&made));
    let first: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
    let first = first["id"].as_i64().unwrap();

    // A daemon without the key: it says which keys it holds, and does not take the task.
    let keyless = env.serve(&["--workers", "1"]);
    // The line of what a daemon offers comes after the address, which `serve` waits for.
    let offered = "runs tasks that require nothing or only";
    crate::support::wait_for(|| keyless.log().contains(offered));
    assert!(!keyless.log().contains(KEY), "{}", keyless.log());
    crate::support::wait_for(|| {
        let task = env.json(&["task", "read", &first.to_string(), "--json"]);
        task["state"] == "queued"
            && task["waiting_for"].as_str().is_some_and(|w| {
                w.contains(&format!(
                    "no live daemon has the model's key variable {KEY} set"
                ))
            })
    });
    let refused = create();
    assert!(!refused.status.success());
    let said = stderr(&refused);
    assert!(
        said.contains(&format!("export {KEY}=... where `orchestrator serve` runs"))
            && said.contains("orchestrator run"),
        "{said}"
    );
    assert_eq!(env.tasks().len(), 1, "the refused task was made");
    assert_eq!(
        env.task(first)["attempt"],
        0,
        "the keyless daemon took the task"
    );

    // A daemon that holds it: the task is accepted, and the waiting one is taken.
    let keyed = env
        .sibling()
        .serve_with_env(&["--workers", "1"], &[(KEY, "sk-daemon")]);
    crate::support::wait_for(|| keyed.log().contains(offered));
    assert!(
        keyed.log().contains(&format!(
            "a model key read from {KEY} (set here; names only)"
        )),
        "{}",
        keyed.log()
    );
    assert!(!keyed.log().contains("sk-daemon"), "{}", keyed.log());
    let accepted = create();
    assert!(accepted.status.success(), "{}", stderr(&accepted));
    crate::support::wait_for(|| env.task(first)["attempt"].as_i64().unwrap_or(0) >= 1);
    drop(keyless);
}

/// A task made where no key is checked (an automation's slot, a trigger rule, the API) and
/// claimed by a daemon without its model's key is handed back, its attempt not counted, and from
/// then on waits for a daemon that holds the key, saying which variable is missing, instead of
/// failing in the daemon that lacks it.
#[test]
fn a_task_claimed_where_its_key_is_missing_waits_for_a_daemon_that_holds_it() {
    const KEY: &str = "ORCH_TRAP_AUTOMATION_KEY";
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        format!(
            "[model]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"{KEY}\"\n"
        ),
    )
    .unwrap();
    let ws = env.workspace().display().to_string();
    let made = env
        .cmd(&[
            "automation",
            "create",
            "--name",
            "nightly",
            "--schedule",
            "0 3 * * *",
            "--prompt",
            "p",
            "--workspace",
            &ws,
        ])
        .env(KEY, "sk-terminal")
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));

    let keyless = env.serve(&["--workers", "1"]);
    let fired = env
        .cmd(&["automation", "run", "nightly"])
        .env(KEY, "sk-terminal")
        .output()
        .unwrap();
    assert!(fired.status.success(), "{}", stderr(&fired));
    crate::support::wait_for(|| !env.tasks().is_empty());
    let id = env.tasks()[0]["id"].as_i64().unwrap();
    let missing = format!("no live daemon has the model's key variable {KEY} set");
    crate::support::wait_for(|| {
        let task = env.task(id);
        task["state"] == "queued"
            && task["waiting_for"]
                .as_str()
                .is_some_and(|w| w.contains(&missing))
    });
    let task = env.task(id);
    assert_eq!(task["attempt"], 0, "the hand-back spent an attempt: {task}");
    assert!(
        task["requires"]
            .as_array()
            .is_some_and(|r| r.iter().any(|w| *w == format!("key:{KEY}"))),
        "{task}"
    );
    let events = env.events(id);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(
        kinds.contains(&"pinned") && kinds.contains(&"handed_back"),
        "{kinds:?}"
    );
    assert!(!kinds.contains(&"failed"), "{kinds:?}");
    let said = env.run(&["task", "events", &id.to_string()]);
    let said = String::from_utf8_lossy(&said.stdout);
    assert!(
        said.contains("attempt not counted")
            && said.contains(&format!("key variable {KEY} is not set where worker")),
        "{said}"
    );

    // A daemon that holds it takes the task.
    let _keyed = env
        .sibling()
        .serve_with_env(&["--workers", "1"], &[(KEY, "sk-daemon")]);
    crate::support::wait_for(|| env.task(id)["attempt"].as_i64().unwrap_or(0) >= 1);
    let claimed_by_keyless = env
        .events(id)
        .iter()
        .filter(|e| e["kind"] == "handed_back")
        .count();
    assert_eq!(claimed_by_keyless, 1, "the keyless daemon took it again");
    drop(keyless);
}

/// `--help` names the variables it reads without showing a value (it showed
/// `[env: ORCHESTRATOR_HOME=]`, as if set to empty), and `task retry` says which attempt runs next.
#[test]
fn help_names_variables_without_values_and_retry_says_which_attempt_runs_next() {
    let env = Env::sqlite();
    let help = env.run(&["--help"]);
    // Help wraps its lines: compare with the whitespace folded.
    let text = String::from_utf8_lossy(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for var in [
        "ORCHESTRATOR_HOME",
        "ORCHESTRATOR_CONFIG",
        "ORCHESTRATOR_DATABASE_URL",
    ] {
        assert!(text.contains(&format!("[env: {var}]")), "{text}");
        assert!(!text.contains(&format!("{var}=")), "{text}");
    }
    let ws = env.workspace();
    let id = env.create("retry me", &["true"], &ws);
    let canceled = env.run(&["task", "cancel", &id.to_string()]);
    assert!(canceled.status.success(), "{}", stderr(&canceled));
    let retried = env.run(&["task", "retry", &id.to_string()]);
    assert!(retried.status.success(), "{}", stderr(&retried));
    assert_eq!(
        String::from_utf8_lossy(&retried.stdout).trim(),
        format!("task {id} queued again: attempt 1 of at most 3 runs next")
    );
}
