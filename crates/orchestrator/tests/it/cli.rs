//! The CLI's contract: JSON shapes, exit codes, and bad input that gets a clear error and changes
//! nothing.

use crate::support::Env;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let env = Env::sqlite();
    let ws = env.workspace().display().to_string();
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &[
                "task",
                "create",
                "--title",
                "t",
                "--gate",
                "",
                "--workspace",
                &ws,
            ],
            6,
            "command is empty",
        ),
        (
            &[
                "task",
                "create",
                "--title",
                "t",
                "--gate",
                "   ",
                "--workspace",
                &ws,
            ],
            6,
            "command is empty",
        ),
        (
            &["task", "create", "--title", "t", "--workspace", &ws],
            6,
            "give a prompt or at least one --gate",
        ),
        (
            &[
                "task",
                "create",
                "--title",
                "",
                "--gate",
                "true",
                "--workspace",
                &ws,
            ],
            6,
            "title is empty",
        ),
        (
            &[
                "task",
                "create",
                "--title",
                "t",
                "--gate",
                "true",
                "--run-after",
                "next tuesday",
                "--workspace",
                &ws,
            ],
            6,
            "is not a time",
        ),
        (
            &[
                "task",
                "create",
                "--title",
                "t",
                "--gate",
                "true",
                "--workspace",
                "/nonexistent/dir",
            ],
            6,
            "workspace /nonexistent/dir cannot be used",
        ),
        (
            &[
                "task",
                "create",
                "--title",
                "t",
                "--gate",
                "true",
                "--prompt",
                "fix the bug",
                "--workspace",
                &ws,
            ],
            6,
            "no model for the agent",
        ),
        (
            &["run", "fix the bug", "--gate", "true", "--workspace", &ws],
            6,
            "no model for the agent",
        ),
        (
            &[
                "task",
                "create",
                "--title",
                "t",
                "--gate",
                "true",
                "--model",
                "m",
                "--workspace",
                &ws,
            ],
            6,
            "need a prompt",
        ),
        (
            &[
                "task",
                "create",
                "--title",
                "t",
                "--prompt",
                "fix it",
                "--model",
                "m",
                "--base-url",
                "ftp://x",
                "--workspace",
                &ws,
            ],
            6,
            "base_url",
        ),
        (
            &[
                "task",
                "create",
                "--title",
                "t",
                "--prompt",
                "fix it",
                "--model",
                "m",
                "--max-turns",
                "0",
                "--workspace",
                &ws,
            ],
            6,
            "max_turns",
        ),
        (
            &[
                "task",
                "create",
                "--title",
                "t",
                "--gate",
                "true",
                "--max-attempts",
                "0",
                "--workspace",
                &ws,
            ],
            6,
            "max_attempts",
        ),
        (&["task", "read", "424242"], 3, "task 424242 not found"),
        (&["task", "cancel", "424242"], 3, "task 424242 not found"),
        (&["task", "retry", "424242"], 3, "task 424242 not found"),
        (&["task", "events", "424242"], 3, "task 424242 not found"),
        (&["task", "read", "abc"], 6, "not an id"),
        (&["artifact", "show", "999"], 3, "artifact 999 not found"),
        (
            &["task", "list", "--state", "sleeping"],
            6,
            "unknown task state",
        ),
    ];
    for (args, code, message) in cases {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
    assert!(env.tasks().is_empty(), "bad input created a task");
}

#[test]
fn unreachable_or_malformed_database_urls_are_reported() {
    let env = Env::sqlite();
    let cases: &[(&str, &str)] = &[
        (
            "postgres://nobody@127.0.0.1:1/none",
            "cannot reach the database server",
        ),
        ("postgres://[not-a-host/x", "bad database URL"),
        ("mysql://root@127.0.0.1/x", "unsupported scheme"),
        ("sqlite:///nonexistent-dir/x.db", "does not exist"),
    ];
    for (url, message) in cases {
        let out = env.run(&["--database-url", url, "task", "list"]);
        assert_eq!(out.status.code(), Some(5), "{url}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{url}: {}", stderr(&out));
    }
    // The password of a URL is never printed.
    let out = env.run(&[
        "--database-url",
        "postgres://bob:hunter2@127.0.0.1:1/x",
        "task",
        "list",
    ]);
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
}

#[test]
fn run_exits_by_outcome_and_records_evidence() {
    let env = Env::sqlite();
    let (_repo, path) = orchestrator_test_support::git_repo(&[("README", "hi\n")]);
    let ws = path.display().to_string();
    let out = env.run(&[
        "run",
        "--gate",
        "echo out; echo err >&2",
        "--workspace",
        &ws,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("gate_finished"), "{printed}");
    assert!(printed.contains("succeeded"), "{printed}");

    let out = env.run(&[
        "run",
        "--gate",
        "true",
        "--gate",
        "exit 3",
        "--workspace",
        &ws,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));

    let tasks = env.tasks();
    assert_eq!(tasks.len(), 2);
    let ok = env.task(tasks[1]["id"].as_i64().unwrap());
    assert_eq!(ok["state"], "succeeded");
    assert_eq!(ok["attempt"], 1);
    let gate = &ok["gates"][0];
    assert_eq!(gate["name"], "echo out; echo err >&2");
    assert_eq!(gate["command"], "echo out; echo err >&2");
    assert_eq!(gate["verdict"], "passed");
    assert_eq!(gate["exit_code"], 0);
    assert!(gate["duration_ms"].as_i64().unwrap() >= 0);
    assert!(gate["summary"].is_string());
    let head = orchestrator_test_support::git(&path, &["rev-parse", "HEAD"]);
    assert_eq!(gate["git_head"], head.as_str());
    assert_eq!(gate["git_dirty"], false);
    let log = gate["log_artifact"].as_i64().unwrap().to_string();
    let shown = env.run(&["artifact", "show", &log]);
    assert_eq!(String::from_utf8_lossy(&shown.stdout), "out\nerr\n");
    let tail = env.run(&["artifact", "show", &log, "--tail", "1"]);
    assert_eq!(String::from_utf8_lossy(&tail.stdout), "err\n");

    let failed = env.task(tasks[0]["id"].as_i64().unwrap());
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["gates"][0]["verdict"], "passed");
    assert_eq!(failed["gates"][1]["verdict"], "failed");
    assert_eq!(failed["gates"][1]["exit_code"], 3);
    assert!(failed["last_error"].as_str().unwrap().contains("exit 3"));

    // A dirty tree is recorded as such, with a hash of the difference.
    std::fs::write(path.join("README"), "changed\n").unwrap();
    let out = env.run(&["run", "--gate", "true", "--workspace", &ws, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap()
        .to_owned();
    let task: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(task["gates"][0]["git_dirty"], true);
    assert_eq!(task["gates"][0]["diff_hash"].as_str().unwrap().len(), 64);
}

#[test]
fn events_are_numbered_and_retry_requeues() {
    let env = Env::sqlite();
    let ws = env.workspace().display().to_string();
    let out = env.run(&["run", "--gate", "false", "--workspace", &ws]);
    assert_eq!(out.status.code(), Some(1));
    let id = env.tasks()[0]["id"].as_i64().unwrap();
    let events = env.events(id);
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "created",
            "claimed",
            "gate_started",
            "gate_finished",
            "failed"
        ]
    );
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], i as i64 + 1);
        assert_eq!(event["task_id"], id);
    }
    // Without --json, each event says what happened in words, attempt by attempt.
    let out = env.run(&["task", "events", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines[1], "-- attempt 1 --", "{printed}");
    for words in [
        "created \"false\"",
        "attempt 1 started on worker",
        "gate started: false",
        "gate \"false\" failed (",
        "exit 1",
        "failed: ",
    ] {
        assert!(printed.contains(words), "{words:?} in {printed}");
    }
    let retried = env.json(&["task", "retry", &id.to_string(), "--json"]);
    assert_eq!(retried["state"], "queued");
    // Retrying a queued task is a conflict with its state.
    let out = env.run(&["task", "retry", &id.to_string()]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let canceled = env.json(&["task", "cancel", &id.to_string(), "--json"]);
    assert_eq!(canceled["outcome"], "canceled");
    assert_eq!(env.task(id)["state"], "canceled");
    assert_eq!(env.events(id).last().unwrap()["kind"], "canceled");
}

#[test]
fn create_list_and_human_output() {
    let env = Env::sqlite();
    let ws = env.workspace().display().to_string();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "later",
        "--gate",
        "true",
        "--workspace",
        &ws,
        "--run-after",
        "2h",
        "--priority",
        "7",
        "--queue",
        "nightly",
        "--max-attempts",
        "5",
        "--json",
    ]);
    assert!(created["id"].as_i64().unwrap() > 0);
    assert_eq!(created["state"], "queued");
    assert_eq!(created["priority"], 7);
    assert_eq!(created["queue"], "nightly");
    assert_eq!(created["max_attempts"], 5);
    assert_eq!(created["gates"][0]["verdict"], serde_json::Value::Null);
    let out = env.run(&["task", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().unwrap();
    assert!(header.starts_with("ID  STATE"), "{text}");
    assert!(text.contains("later"), "{text}");
    let queued = env.json(&["task", "list", "--state", "queued", "--json"]);
    assert_eq!(queued.as_array().unwrap().len(), 1);
    let none = env.json(&["task", "list", "--state", "running", "--json"]);
    assert!(none.as_array().unwrap().is_empty());
    let help = env.run(&["task", "create", "--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("Examples:"));
}

#[test]
fn ctrl_c_cancels_a_foreground_run_and_its_gate() {
    let env = Env::sqlite();
    let ws = env.workspace().display().to_string();
    let marker = crate::support::unique_sleep();
    let gate = format!("sleep {marker} & sleep {marker}");
    let child = env
        .cmd(&["run", "--gate", &gate, "--workspace", &ws])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The `run` process's own command line holds the marker too: wait for the gate's `sleep`.
    crate::support::wait_for(|| {
        crate::support::processes_with(&format!("sleep {marker}"))
            .iter()
            .any(|p| p.contains(": sleep "))
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let id = env.tasks()[0]["id"].as_i64().unwrap();
    let task = env.task(id);
    assert_eq!(task["state"], "canceled");
    assert_eq!(task["gates"][0]["verdict"], "canceled");
    crate::support::assert_no_process_with(&format!("sleep {marker}"));
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_fresh_home_is_private_and_so_is_its_store() {
    let env = Env::sqlite();
    // A home that does not exist yet, below a directory that does not either.
    let home = env.home().join("data").join("orchestrator");
    let out = env
        .cmd(&["task", "list", "--json"])
        .env("ORCHESTRATOR_HOME", &home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        mode(&home),
        0o700,
        "the home holds the API token and the store"
    );
    assert_eq!(mode(&home.join("orchestrator.db")), 0o600);
    assert!(
        out.stderr.is_empty(),
        "nothing to warn about: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_existing_home_open_to_others_is_made_private_with_a_warning() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::sqlite();
    std::fs::set_permissions(env.home(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = env.run(&["task", "list", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(env.home()), 0o700);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("was open to other users (mode 755)") && said.contains("now 700"),
        "{said}"
    );
    let again = env.run(&["task", "list", "--json"]);
    assert!(
        again.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}
