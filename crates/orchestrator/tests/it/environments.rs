//! Repository environments through `serve`: a setup phase that downloads a package from a local
//! stand-in only setup may reach, with a secret only setup receives; the cache that the next
//! task on the same key reuses; a new entry for a changed key file; maintenance for a moved
//! commit; a failing setup failing the attempt as the environment's failure, with its log.

use crate::containment::local_http;
use crate::support::Env;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_test_support::{GitDaemon, Program, git, git_repo, require};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

const SECRET: &str = "setup-s3cr3t-77c1";

fn environment_events(env: &Env, id: i64) -> Vec<Value> {
    env.events(id)
        .into_iter()
        .filter(|e| e["kind"] == "environment")
        .collect()
}

/// `serve` with one worker and a workspaces directory of its own, which it returns.
fn daemon(env: &Env) -> (crate::support::Serve, std::path::PathBuf) {
    let workspaces = env.workspace().join("daemon");
    let serve = env.serve(&[
        "--workspaces",
        workspaces.to_str().unwrap(),
        "--workers",
        "1",
    ]);
    (serve, workspaces)
}

fn artifact_text(env: &Env, id: i64) -> String {
    let out = env.run(&["artifact", "read", &id.to_string()]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn setup_runs_once_with_its_network_and_secret_and_the_agent_starts_from_its_cache() {
    require(Program::Bubblewrap);
    require(Program::Curl);
    let env = Env::sqlite();
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[
        ("Cargo.lock", "version 1\n"),
        (".gitignore", "vendor/\n"),
        ("README", "widgets\n"),
    ]);
    let commit = |msg: &str| {
        git(
            &source,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.com",
                "commit",
                "-qam",
                msg,
            ],
        )
    };
    // `lock2`: another Cargo.lock; `docs`: the same one at another commit.
    git(&source, &["checkout", "-q", "-b", "lock2"]);
    std::fs::write(source.join("Cargo.lock"), "version 2\n").unwrap();
    commit("lock 2");
    git(&source, &["checkout", "-q", "-b", "docs", "main"]);
    std::fs::write(source.join("README"), "widgets, documented\n").unwrap();
    commit("docs");
    git(&source, &["checkout", "-q", "main"]);
    let (_daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    let (port, hits) = local_http("PACKAGE-CONTENT");

    // The agent tries the package server and its environment, then reads what setup left.
    let model = ScriptedModel::start_blocking(move |request: &Request| {
        match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({"command": format!(
                    "curl -fs -m 5 --noproxy '' http://127.0.0.1:{port}/pkg || echo AGENT-BLOCKED; \
                     env | grep -c SETUP_TOKEN_FOR_TEST || true; cat vendor/pkg; echo; \
                     (grep -rlq \"setup-s3cr3t\"'-77c1' . && echo SECRET-IN-FILES || echo NO-SECRET-IN-FILES); \
                     echo CARGO_HOME=$CARGO_HOME"
                )}),
            )]),
            _ => Reply::Text("Done.".into()),
        }
    });
    let setup = format!(
        "mkdir -p vendor && curl -fsS --noproxy '' http://127.0.0.1:{port}/pkg -o vendor/pkg \
         && test \"$SETUP_TOKEN_FOR_TEST\" = {SECRET} && echo \"setup saw $SETUP_TOKEN_FOR_TEST\" \
         && mkdir -p \"$CARGO_HOME\" && echo fetched > \"$CARGO_HOME/registry-stand-in\""
    );
    std::fs::write(
        env.home().join("config.toml"),
        format!(
            r#"[model]
base_url = "{base}"
model = "m"

[repositories.widgets]
url = "{url}"
default_ref = "main"
setup = ["{setup}"]
setup_network_hosts = ["127.0.0.1:{port}"]
setup_env = ["SETUP_TOKEN_FOR_TEST"]
maintenance = "echo maintained > vendor/maintained"
cache_key_files = ["Cargo.lock"]

[repositories.broken]
url = "{url}"
default_ref = "main"
setup = ["echo about to fail", "exit 3"]
"#,
            base = model.base_url(),
            setup = setup.replace('\\', "\\\\").replace('"', "\\\""),
        ),
    )
    .unwrap();
    let workspaces = env.workspace().join("daemon");
    let _serve = env.serve_with_env(
        &[
            "--workspaces",
            workspaces.to_str().unwrap(),
            "--workers",
            "1",
        ],
        &[("SETUP_TOKEN_FOR_TEST", SECRET)],
    );
    // The gates run in the environment too, and without setup's secret.
    let gate = "test \"$(cat vendor/pkg)\" = PACKAGE-CONTENT \
                && test \"$(cat \"$CARGO_HOME/registry-stand-in\")\" = fetched \
                && test \"$(env | grep -c SETUP_TOKEN_FOR_TEST)\" = 0";
    let create = |repository: &str, git_ref: Option<&str>, prompt: bool| {
        let mut args = vec![
            "task",
            "create",
            "--title",
            "t",
            "--repository",
            repository,
            "--gate",
            gate,
            "--max-attempts",
            "1",
            "--json",
        ];
        if let Some(r) = git_ref {
            args.extend(["--ref", r]);
        }
        if prompt {
            args.extend([
                "--prompt",
                "look around",
                "--policy",
                r#"{"default": "allow"}"#,
            ]);
        }
        env.json(&args)["id"].as_i64().unwrap()
    };

    // 1. Setup runs: it reaches the stand-in, sees its secret; the agent reaches neither.
    let first = create("widgets", None, true);
    let done = env.wait_finished(first);
    assert_eq!(done["state"], "succeeded", "{}", done["last_error"]);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "setup downloaded, the agent did not"
    );
    let made = environment_events(&env, first);
    assert_eq!(made.len(), 1, "{made:#?}");
    assert_eq!(made[0]["data"]["how"], "made");
    let key = made[0]["data"]["key"].as_str().unwrap().to_owned();
    let said: Vec<String> = model
        .received()
        .last()
        .unwrap()
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    let said = said.join("\n");
    assert!(said.contains("AGENT-BLOCKED"), "{said}");
    assert!(said.contains("NO-SECRET-IN-FILES"), "{said}");
    assert!(
        said.contains("PACKAGE-CONTENT"),
        "setup's download is there: {said}"
    );
    assert!(
        said.contains("\n0\n"),
        "the agent's environment names no setup variable: {said}"
    );
    assert!(
        said.contains(&format!(
            "CARGO_HOME={}",
            workspaces
                .join(format!("task-{first}"))
                .join(".orchestrator-env/cargo")
                .display()
        )),
        "{said}"
    );
    let everything: String = model.requests().iter().map(Value::to_string).collect();
    assert!(
        !everything.contains(SECRET),
        "a model request holds setup's secret"
    );
    let events = serde_json::to_string(&env.events(first)).unwrap();
    assert!(!events.contains(SECRET), "an event holds setup's secret");
    // Setup's log is kept, with the secret redacted.
    let log_id = made[0]["data"]["artifacts"][0].as_i64().unwrap();
    let log = artifact_text(&env, log_id);
    assert!(log.contains("setup saw [redacted]"), "{log}");
    assert!(!log.contains(SECRET), "{log}");

    // 2. The same key: the cache, no setup, the package there with no download.
    let second = create("widgets", None, false);
    let done = env.wait_finished(second);
    assert_eq!(done["state"], "succeeded", "{}", done["last_error"]);
    let reused = environment_events(&env, second);
    assert_eq!(reused[0]["data"]["how"], "reused", "{reused:#?}");
    assert_eq!(reused[0]["data"]["key"], key.as_str());
    assert_eq!(hits.load(Ordering::SeqCst), 1, "no second download");

    // 3. A changed Cargo.lock: a new entry, setup again.
    let third = create("widgets", Some("lock2"), false);
    let done = env.wait_finished(third);
    assert_eq!(done["state"], "succeeded", "{}", done["last_error"]);
    let again = environment_events(&env, third);
    assert_eq!(again[0]["data"]["how"], "made", "{again:#?}");
    assert_ne!(again[0]["data"]["key"], key.as_str());
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // 4. The first key at another commit: reused, and maintenance runs.
    let fourth = env.json(&[
        "task",
        "create",
        "--title",
        "docs",
        "--repository",
        "widgets",
        "--ref",
        "docs",
        "--gate",
        "test \"$(cat vendor/maintained)\" = maintained && test -f vendor/pkg",
        "--max-attempts",
        "1",
        "--json",
    ])["id"]
        .as_i64()
        .unwrap();
    let done = env.wait_finished(fourth);
    assert_eq!(done["state"], "succeeded", "{}", done["last_error"]);
    let maintained = environment_events(&env, fourth);
    assert_eq!(
        maintained[0]["data"]["how"], "maintained",
        "{maintained:#?}"
    );
    assert_eq!(maintained[0]["data"]["key"], key.as_str());
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // What the cache holds, as a person reads it.
    let listed = env.json(&[
        "env",
        "list",
        "--workspaces",
        workspaces.to_str().unwrap(),
        "--json",
    ]);
    let keys: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["key"].as_str())
        .collect();
    assert_eq!(keys.len(), 2, "{listed}");
    assert!(keys.contains(&key.as_str()), "{listed}");
    let shown = env.json(&[
        "env",
        "show",
        &key[..12],
        "--workspaces",
        workspaces.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(shown["key"], key.as_str(), "{shown}");
    assert_eq!(shown["made_by_task"], first, "{shown}");
    assert!(shown["bytes"].as_u64().unwrap() > 0, "{shown}");
    let shown = env.run(&[
        "env",
        "show",
        &key[..12],
        "--workspaces",
        workspaces.to_str().unwrap(),
    ]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains(&url) && shown.contains("vendor"), "{shown}");
    let read = env.run(&["task", "read", &second.to_string()]);
    let read = String::from_utf8_lossy(&read.stdout);
    assert!(
        read.contains("environment") && read.contains("reused"),
        "{read}"
    );

    // 5. A failing setup fails the attempt as the environment's, with its log.
    let broken = create("broken", None, true);
    let done = env.wait_finished(broken);
    assert_eq!(done["state"], "failed");
    let error = done["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the environment failed, not the agent")
            && error.contains("`exit 3` exited 3"),
        "{error}"
    );
    let failed = environment_events(&env, broken);
    assert_eq!(failed[0]["data"]["how"], "failed", "{failed:#?}");
    let logs = failed[0]["data"]["artifacts"].as_array().unwrap();
    assert_eq!(logs.len(), 2, "one log per command run: {failed:#?}");
    assert!(artifact_text(&env, logs[0].as_i64().unwrap()).contains("about to fail"));
    assert!(
        !env.events(broken).iter().any(|e| e["kind"] == "tool_call"
            || (e["kind"] == "message" && e["data"]["role"] == "assistant")),
        "the agent never ran, and no answer of the model's was kept"
    );

    // Dropping an entry: the next task on its key runs setup again.
    let dropped = env.run(&[
        "env",
        "drop",
        &key[..12],
        "--workspaces",
        workspaces.to_str().unwrap(),
    ]);
    assert!(
        dropped.status.success(),
        "{}",
        String::from_utf8_lossy(&dropped.stderr)
    );
    let fifth = create("widgets", None, false);
    let done = env.wait_finished(fifth);
    assert_eq!(done["state"], "succeeded", "{}", done["last_error"]);
    assert_eq!(environment_events(&env, fifth)[0]["data"]["how"], "made");
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

/// `task create --setup` gives one task a setup of its own, kept in its spec for whichever daemon
/// runs it; a setup variable with a bad name is refused before anything is made.
#[test]
fn a_task_may_bring_its_own_setup() {
    let env = Env::sqlite();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "t",
        "--gate",
        "true",
        "--repository",
        "/srv/git/widgets",
        "--setup",
        "npm ci",
        "--setup",
        "npm run build",
        "--setup-env",
        "NPM_TOKEN",
        "--setup-network-host",
        "registry.internal:443",
        "--json",
    ]);
    let task = env.task(created["id"].as_i64().unwrap());
    let environment = &task["repository"]["environment"];
    assert_eq!(
        environment["setup"],
        json!(["npm ci", "npm run build"]),
        "{task}"
    );
    assert_eq!(environment["env"], json!(["NPM_TOKEN"]));
    assert_eq!(
        environment["network_hosts"],
        json!(["registry.internal:443"])
    );
    let read = env.run(&["task", "read", &created["id"].to_string()]);
    let read = String::from_utf8_lossy(&read.stdout);
    assert!(
        read.contains("environment not yet: setup `npm ci && npm run build` runs"),
        "{read}"
    );
    let refused = env
        .cmd(&[
            "task",
            "create",
            "--title",
            "t",
            "--gate",
            "true",
            "--repository",
            "/srv/git/w",
            "--setup",
            "x",
            "--setup-env",
            "NOT-A-NAME",
        ])
        .output()
        .unwrap();
    assert_eq!(
        refused.status.code(),
        Some(6),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(env.tasks().len(), 1);
}

/// A setup that failed leaves its workspace on the machine; the next attempt there makes the
/// workspace again and runs setup, rather than taking the half-prepared one for ready.
#[test]
fn an_attempt_after_a_failed_setup_runs_setup_again_on_a_fresh_clone() {
    require(Program::Bubblewrap);
    let env = Env::sqlite();
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[(".gitignore", "deps/\n"), ("README", "widgets\n")]);
    let (_daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    // A switch the jail sees (not /tmp, which each jail has its own of).
    let switch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let allow = switch.path().join("allow");
    std::fs::write(
        env.home().join("config.toml"),
        format!(
            "[repositories.widgets]\nurl = \"{url}\"\nsetup = \"mkdir -p deps && echo half > deps/half && test -f {}\"\n",
            allow.display()
        ),
    )
    .unwrap();
    let workspaces = env.workspace().join("daemon");
    let id = env.json(&[
        "task",
        "create",
        "--title",
        "t",
        "--repository",
        "widgets",
        "--gate",
        "test -f deps/half",
        "--max-attempts",
        "2",
        "--json",
    ])["id"]
        .as_i64()
        .unwrap();
    let _serve = env.serve(&[
        "--workspaces",
        workspaces.to_str().unwrap(),
        "--workers",
        "1",
    ]);
    crate::support::wait_for(|| {
        environment_events(&env, id)
            .iter()
            .any(|e| e["data"]["how"] == "failed")
    });
    std::fs::write(&allow, "").unwrap();
    let done = env.wait_finished(id);
    assert_eq!(done["state"], "succeeded", "{}", done["last_error"]);
    let hows: Vec<Value> = environment_events(&env, id)
        .into_iter()
        .map(|e| e["data"]["how"].clone())
        .collect();
    assert_eq!(hows, [json!("failed"), json!("made")]);
    let remade = env
        .events(id)
        .into_iter()
        .rfind(|e| e["kind"] == "workspace_prepared")
        .unwrap();
    assert!(
        remade["data"]["remade"]
            .as_str()
            .is_some_and(|r| r.contains("environment was never made")),
        "{remade}"
    );
}

/// The first model request goes out while setup still runs, and the agent acts on the answer
/// only once setup is done: here setup's download is held until the model has the first request
/// (bounded, so that a build that waits for setup first fails instead of hanging), and the
/// agent's first command sees what setup wrote.
#[test]
fn the_first_request_goes_out_while_setup_runs_and_the_agent_waits_for_it() {
    require(Program::Bubblewrap);
    require(Program::Curl);
    use std::io::{Read, Write};
    use std::sync::mpsc;
    let env = Env::sqlite();
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[(".gitignore", "vendor/\n"), ("README", "widgets\n")]);
    let (_daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    // The package stand-in answers once the model has been asked, or after 20 s; it says which.
    let (asked_tx, asked_rx) = mpsc::channel::<()>();
    let (held_tx, held_rx) = mpsc::channel::<bool>();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let asked_first = asked_rx
                .recv_timeout(std::time::Duration::from_secs(20))
                .is_ok();
            let _ = held_tx.send(asked_first);
            let body = "SLOW-PACKAGE";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let asked = std::sync::Mutex::new(Some(asked_tx));
    let model =
        ScriptedModel::start_blocking(move |request: &Request| match request.assistant_turns() {
            0 => {
                if let Some(tx) = asked.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                Reply::ToolCalls(vec![call(
                    "exec_shell",
                    json!({"command": "cat vendor/pkg; echo; ls vendor"}),
                )])
            }
            _ => Reply::Text("Done.".into()),
        });
    std::fs::write(
        env.home().join("config.toml"),
        format!(
            r#"[model]
base_url = "{base}"
model = "m"

[repositories.widgets]
url = "{url}"
setup = ["mkdir -p vendor && curl -fsS --noproxy '' http://127.0.0.1:{port}/pkg -o vendor/pkg && for i in 1 2 3; do echo $i > vendor/f$i; done"]
setup_network_hosts = ["127.0.0.1:{port}"]
"#,
            base = model.base_url(),
        ),
    )
    .unwrap();
    let (_serve, _) = daemon(&env);
    let id = env.json(&[
        "task",
        "create",
        "--title",
        "t",
        "--repository",
        "widgets",
        "--prompt",
        "look around",
        "--policy",
        r#"{"default": "allow"}"#,
        "--gate",
        "test -f vendor/f3",
        "--max-attempts",
        "1",
        "--json",
    ])["id"]
        .as_i64()
        .unwrap();
    let done = env.wait_finished(id);
    assert_eq!(done["state"], "succeeded", "{}", done["last_error"]);
    assert_eq!(
        held_rx.try_recv(),
        Ok(true),
        "setup's download was answered only after the model had the first request"
    );
    let said: String = model
        .received()
        .last()
        .unwrap()
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        said.contains("SLOW-PACKAGE") && said.contains("f3"),
        "the agent's first command ran on the whole environment: {said}"
    );
    // The timeline: the environment is made before the first answer is saved or acted on.
    let kinds: Vec<(String, Value)> = env
        .events(id)
        .into_iter()
        .map(|e| (e["kind"].as_str().unwrap().to_owned(), e["data"].clone()))
        .collect();
    let made = kinds
        .iter()
        .position(|(k, d)| k == "environment" && d["how"] == "made")
        .expect("an environment event");
    let answered = kinds
        .iter()
        .position(|(k, d)| k == "message" && d["role"] == "assistant")
        .expect("the model's answer");
    assert!(made < answered, "{kinds:#?}");
}

/// Entries past the cache's budget go, least recently used first, and never the one just made.
#[test]
fn the_cache_keeps_to_its_budget_by_dropping_the_least_recently_used() {
    require(Program::Bubblewrap);
    let env = Env::sqlite();
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("Cargo.lock", "version 1\n"), (".gitignore", "vendor/\n")]);
    git(&source, &["checkout", "-q", "-b", "two"]);
    std::fs::write(source.join("Cargo.lock"), "version 2\n").unwrap();
    git(
        &source,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-qam",
            "two",
        ],
    );
    git(&source, &["checkout", "-q", "main"]);
    let (_daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    // Each entry holds 700 KiB; the budget is 1 MiB, so two cannot both stay.
    std::fs::write(
        env.home().join("config.toml"),
        format!(
            r#"[workspaces]
environment_cache_mb = 1

[repositories.widgets]
url = "{url}"
setup = "mkdir -p vendor && head -c 716800 /dev/zero > vendor/blob"
cache_key_files = ["Cargo.lock"]
"#
        ),
    )
    .unwrap();
    let (_serve, workspaces) = daemon(&env);
    let run = |git_ref: &str| {
        let id = env.json(&[
            "task",
            "create",
            "--title",
            git_ref,
            "--repository",
            "widgets",
            "--ref",
            git_ref,
            "--gate",
            "test -s vendor/blob",
            "--max-attempts",
            "1",
            "--json",
        ])["id"]
            .as_i64()
            .unwrap();
        let done = env.wait_finished(id);
        assert_eq!(done["state"], "succeeded", "{}", done["last_error"]);
        environment_events(&env, id)[0]["data"].clone()
    };
    let listed = || -> Vec<String> {
        env.json(&[
            "env",
            "list",
            "--workspaces",
            workspaces.to_str().unwrap(),
            "--json",
        ])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["key"].as_str().unwrap().to_owned())
        .collect()
    };
    let first = run("main");
    assert_eq!(first["how"], "made");
    assert_eq!(listed(), [first["key"].as_str().unwrap()]);
    let second = run("two");
    assert_eq!(second["how"], "made");
    assert_ne!(second["key"], first["key"]);
    assert_eq!(
        listed(),
        [second["key"].as_str().unwrap()],
        "the older entry went to keep the budget"
    );
    // The first key's next task finds no entry and runs setup again.
    assert_eq!(run("main")["how"], "made");
}

/// A setup that fails while the first request is out ends the attempt at once, as the
/// environment's failure, without waiting for a model that does not answer.
#[test]
fn a_setup_failing_while_the_model_thinks_ends_the_attempt_at_once() {
    require(Program::Bubblewrap);
    let env = Env::sqlite();
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("README", "widgets\n")]);
    let (_daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    let model = ScriptedModel::start_blocking(|_: &Request| Reply::Hang);
    std::fs::write(
        env.home().join("config.toml"),
        format!(
            "[model]\nbase_url = \"{}\"\nmodel = \"m\"\n\n[repositories.widgets]\nurl = \"{url}\"\nsetup = \"sleep 1; echo no registry; exit 3\"\n",
            model.base_url()
        ),
    )
    .unwrap();
    let (_serve, _) = daemon(&env);
    let id = env.json(&[
        "task",
        "create",
        "--title",
        "t",
        "--repository",
        "widgets",
        "--prompt",
        "look around",
        "--gate",
        "true",
        "--max-attempts",
        "1",
        "--json",
    ])["id"]
        .as_i64()
        .unwrap();
    let done = env.wait_finished(id);
    assert_eq!(done["state"], "failed");
    let error = done["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the environment failed, not the agent") && error.contains("exited 3"),
        "{error}"
    );
    assert_eq!(model.received().len(), 1, "the request was out");
}
