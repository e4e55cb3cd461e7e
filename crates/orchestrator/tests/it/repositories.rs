//! Tasks on a repository through the binary: `task create --repository` with a URL or a config
//! name, a URL with a credential refused, and `serve` making the workspace in its `--workspaces`
//! directory from a repository served by `git daemon`, with the configured token in no file, no
//! event and no gate's environment.

use crate::support::Env;
use orchestrator_test_support::{GitDaemon, git, git_repo};
use std::path::{Path, PathBuf};

const TOKEN: &str = "tok-5f3a9c1e-never-to-be-seen";

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files.extend(files_under(&entry.path()));
        } else if kind.is_file() {
            files.push(entry.path());
        }
    }
    files
}

#[test]
fn a_url_with_a_credential_is_refused_at_creation() {
    let env = Env::sqlite();
    let out = env.run(&[
        "task",
        "create",
        "--title",
        "leaky",
        "--gate",
        "true",
        "--repository",
        "https://me:hunter2@example.com/acme/widgets.git",
    ]);
    assert_eq!(out.status.code(), Some(6));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("credential") && stderr.contains("token_env"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
    let out = env.run(&[
        "task",
        "create",
        "--title",
        "both",
        "--gate",
        "true",
        "--repository",
        "/srv/x",
        "--workspace",
        "/tmp",
    ]);
    assert!(
        !out.status.success(),
        "a repository and a workspace are one too many"
    );
}

#[test]
fn serve_makes_the_workspace_from_the_repository_and_keeps_the_token_to_itself() {
    let env = Env::sqlite();
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("answer.txt", "42\n")]);
    let commit = git(&source, &["rev-parse", "HEAD"]).trim().to_owned();
    let (daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    std::fs::write(
        env.home().join("config.toml"),
        format!(
            "[repositories.widgets]\nurl = \"{url}\"\ndefault_ref = \"main\"\ntoken_env = \"WIDGETS_TOKEN\"\n"
        ),
    )
    .unwrap();

    // Inside the gate's jail: neither its environment nor the workspace's git holds the token
    // (a part of it is named here, so the command itself does not hold it), and the origin is
    // the public URL.
    let gate = format!(
        "test \"$(cat answer.txt)\" = 42 && ! env | grep -q 5f3a9c1e-never \
         && ! grep -rq 5f3a9c1e-never .git && test \"$(git remote get-url origin)\" = '{url}'"
    );
    // By name: the URL and the default ref come from the config, the name is kept.
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "on widgets",
        "--repository",
        "widgets",
        "--gate",
        &gate,
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let task = env.task(id);
    assert_eq!(task["repository"]["url"], url);
    assert_eq!(task["repository"]["ref"], "main");
    assert_eq!(task["repository"]["name"], "widgets");
    assert!(task["repository"]["base"].is_null(), "{task}");
    assert!(task["workspace"].is_null(), "{task}");
    // By URL, with an explicit ref.
    let by_url = env.json(&[
        "task",
        "create",
        "--title",
        "by url",
        "--repository",
        &url,
        "--ref",
        &commit,
        "--gate",
        "test -f answer.txt",
        "--json",
    ]);
    let by_url = by_url["id"].as_i64().unwrap();

    let workspaces = env.workspace().join("daemon");
    // One slot: the tasks run in the order they were made, the first making the mirror.
    let mut serve = env.serve_with_env(
        &[
            "--workspaces",
            workspaces.to_str().unwrap(),
            "--workers",
            "1",
        ],
        &[("WIDGETS_TOKEN", TOKEN)],
    );
    let done = env.wait_finished(id);
    let other = env.wait_finished(by_url);
    serve.signal(nix::sys::signal::Signal::SIGTERM);
    serve.wait();
    assert_eq!(done["state"], "succeeded", "{done}\n{}", serve.log());
    assert_eq!(other["state"], "succeeded", "{other}");
    assert_eq!(done["repository"]["base"], commit);
    let ws = workspaces.join(format!("task-{id}"));
    assert_eq!(done["repository"]["workspace"], ws.display().to_string());

    // Whatever is left of the workspaces (the cleaner removes a succeeded task's), and the
    // mirrors, hold no token either.
    for file in files_under(&workspaces)
        .into_iter()
        .chain(files_under(&env.home().join("mirrors")))
    {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(TOKEN),
            "{} holds the token",
            file.display()
        );
    }
    let events = env.events(id);
    let text = serde_json::to_string(&events).unwrap();
    assert!(!text.contains(TOKEN));
    let prepared = events
        .iter()
        .find(|e| e["kind"] == "workspace_prepared")
        .unwrap();
    assert_eq!(prepared["data"]["mirror"], "created");
    let prepared = env
        .events(by_url)
        .into_iter()
        .find(|e| e["kind"] == "workspace_prepared")
        .unwrap();
    assert_eq!(
        prepared["data"]["mirror"], "warm",
        "the second task on the repository found its commit in the mirror"
    );
    assert_eq!(
        daemon.fetches("widgets.git"),
        1,
        "one clone, no second download"
    );
    let human = env.run(&["task", "read", &id.to_string()]);
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(
        human.contains(&format!("repository {url} (widgets) at main")),
        "{human}"
    );
    assert!(human.contains(&format!("base       {commit}")), "{human}");
}

#[test]
fn an_automation_on_a_repository_creates_one_task_a_slot_on_it() {
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        "[repositories.widgets]\nurl = \"git://127.0.0.1:9/widgets.git\"\ndefault_ref = \"main\"\n",
    )
    .unwrap();
    let created = env.json(&[
        "automation",
        "create",
        "--name",
        "deps",
        "--schedule",
        "0 6 * * 1",
        "--tz",
        "UTC",
        "--repository",
        "widgets",
        "--ref",
        "release",
        "--gate",
        "true",
        "--json",
    ]);
    assert_eq!(
        created["repository"],
        serde_json::json!({"url": "git://127.0.0.1:9/widgets.git", "ref": "release", "name": "widgets"})
    );
    assert_eq!(created["workspaces"], serde_json::json!([]), "{created}");
    let human = env.run(&["automation", "read", "deps"]);
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(
        human.contains("repository git://127.0.0.1:9/widgets.git (widgets) at release"),
        "{human}"
    );

    let run = env.json(&["automation", "run", "deps", "--json"]);
    let tasks = run["result"]["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{run}");
    let task = env.task(tasks[0].as_i64().unwrap());
    assert_eq!(task["repository"]["url"], "git://127.0.0.1:9/widgets.git");
    assert_eq!(task["repository"]["ref"], "release");
    assert!(task["workspace"].is_null(), "{task}");
    assert_eq!(
        task["requires"],
        serde_json::json!(["repository"]),
        "{task}"
    );

    // Moved to a directory, the repository goes; a credential in a URL is refused, saying how.
    let ws = env.workspace().display().to_string();
    let moved = env.json(&["automation", "update", "deps", "--workspace", &ws, "--json"]);
    assert!(moved.get("repository").is_none(), "{moved}");
    assert_eq!(moved["workspaces"], serde_json::json!([ws]));
    let out = env.run(&[
        "automation",
        "create",
        "--name",
        "leaky",
        "--schedule",
        "0 6 * * 1",
        "--repository",
        "https://me:hunter2@example.com/acme/widgets.git",
        "--gate",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(6));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("token_env"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    let out = env.run(&[
        "automation",
        "create",
        "--name",
        "both",
        "--schedule",
        "0 6 * * 1",
        "--repository",
        "widgets",
        "--workspace",
        &ws,
        "--gate",
        "true",
    ]);
    assert!(
        !out.status.success(),
        "a repository and a workspace are one too many"
    );
}

/// The workspaces directory is hidden from every jail but for the jail's own workspace, wherever
/// it is: here under /var/tmp (not the home, not /tmp, which jails see private anyway), where
/// another task's workspace holds a private file. The gate (a person's, in its jail) reads its own
/// files and a file beside the workspaces directory, but nothing of the other task's.
#[test]
fn a_jail_sees_its_own_workspace_and_no_other_tasks() {
    let env = Env::sqlite();
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("answer.txt", "42\n")]);
    let (_daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    let place = tempfile::Builder::new()
        .prefix("orchestrator-test-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let workspaces = place.path().join("workspaces");
    let other = workspaces.join("task-999");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("secret.txt"), "private\n").unwrap();
    std::fs::write(place.path().join("visible.txt"), "seen\n").unwrap();
    let gate = format!(
        "test \"$(cat '{place}/visible.txt')\" = seen && test \"$(cat answer.txt)\" = 42 \
         && ! test -e '{ws}/task-999' && ! cat '{ws}/task-999/secret.txt' \
         && ! ls -A '{ws}' 2>/dev/null | grep -q task-999",
        place = place.path().display(),
        ws = workspaces.display()
    );
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "nosy",
        "--repository",
        &url,
        "--ref",
        "main",
        "--gate",
        &gate,
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let _serve = env.serve(&[
        "--workspaces",
        workspaces.to_str().unwrap(),
        "--workers",
        "1",
    ]);
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{}", task["last_error"]);
    assert!(
        other.join("secret.txt").exists(),
        "the other task's files stay"
    );
}
