//! Where tasks run when several daemons share one store: a task on a workspace path is claimed
//! only by a daemon of the machine that sees the path, and a task requiring a label waits,
//! saying so, until a daemon with the label runs it.

use crate::support::{Env, claimed_by, configure, worker_id};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_task_is_never_claimed_by_a_daemon_that_does_not_see_the_path() {
    let Some(a) = Env::postgres().await else {
        return;
    };
    let b = a.sibling();
    configure(&a, "[worker]\nhost = \"machine-a\"\n");
    configure(&b, "[worker]\nhost = \"machine-b\"\n");

    // Created on machine a, on a path of machine a, before anything of machine b.
    let on_a = a.create("on a's disk", &["true"], &a.workspace());
    assert_eq!(
        a.task(on_a)["requires"],
        serde_json::json!(["host:machine-a"])
    );

    // Machine b's daemon runs b's own task, created after a's: it skipped a's.
    let serve_b = b.serve(&["--workers", "2", "--lease-seconds", "2"]);
    let on_b = b.create("on b's disk", &["true"], &b.workspace());
    let done = b.wait_finished(on_b);
    assert_eq!(done["state"], "succeeded", "{done}");
    let waiting = a.task(on_a);
    assert_eq!(waiting["state"], "queued", "{waiting}");
    let why = waiting["waiting_for"].as_str().unwrap_or_default();
    assert!(why.contains("host machine-a"), "{waiting}");
    // The person reading it sees the same.
    let text = String::from_utf8(a.run(&["task", "read", &on_a.to_string()]).stdout).unwrap();
    assert!(
        text.contains("runs on    a worker with host machine-a"),
        "{text}"
    );
    assert!(
        text.contains("waiting    no live worker with host machine-a"),
        "{text}"
    );

    // Machine a's daemon runs it.
    let serve_a = a.serve(&["--workers", "2", "--lease-seconds", "2"]);
    let done = a.wait_finished(on_a);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(claimed_by(&a, on_a), worker_id(&serve_a));
    assert_eq!(claimed_by(&b, on_b), worker_id(&serve_b));
    assert!(done.get("waiting_for").is_none(), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_under_a_shared_directory_runs_on_any_daemon_that_lists_it() {
    let a = Env::sqlite();
    let b = a.sibling();
    // Both "machines" list the same directory as shared (here a directory both can read).
    let shared = a.workspace();
    let config = |host: &str| {
        format!(
            "[worker]\nhost = \"{host}\"\nshared_paths = [{:?}]\n",
            shared.display().to_string()
        )
    };
    configure(&a, &config("machine-a"));
    configure(&b, &config("machine-b"));
    let dir = shared.join("app");
    std::fs::create_dir_all(&dir).unwrap();
    let id = a.create("on the shared mount", &["true"], &dir);
    let task = a.task(id);
    assert_eq!(
        task["requires"],
        serde_json::json!([format!("shared:{}", shared.display())])
    );
    let serve_b = b.serve(&["--workers", "1"]);
    let done = b.wait_finished(id);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(claimed_by(&b, id), worker_id(&serve_b));
}

#[test]
fn a_task_requiring_a_label_waits_until_a_worker_with_it_starts() {
    let env = Env::sqlite();
    let ws = env.workspace().display().to_string();
    let created: Value = env.json(&[
        "task",
        "create",
        "--title",
        "needs a gpu",
        "--gate",
        "true",
        "--workspace",
        &ws,
        "--require-label",
        "gpu",
        "--json",
    ]);
    let gpu_task = created["id"].as_i64().unwrap();

    // A daemon without the label runs a later task and leaves this one waiting, saying why.
    let plain = env.serve(&["--workers", "2"]);
    let later = env.create("anything", &["true"], &env.workspace());
    assert_eq!(env.wait_finished(later)["state"], "succeeded");
    let waiting = env.task(gpu_task);
    assert_eq!(waiting["state"], "queued", "{waiting}");
    assert_eq!(
        waiting["waiting_for"], "no live worker with label gpu",
        "{waiting}"
    );
    drop(plain);

    // Bad labels are refused with the rule.
    let out = env.run(&["serve", "--label", "a b"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a label is letters"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let serve = env.serve(&["--workers", "2", "--label", "gpu"]);
    let done = env.wait_finished(gpu_task);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert!(
        serve.log().contains("only: label gpu"),
        "the start says what it offers: {}",
        serve.log()
    );
    assert_eq!(claimed_by(&env, gpu_task), worker_id(&serve));
}
