//! `serve` as a daemon: HTTP endpoints, cancel of a running task, graceful shutdown that hands work
//! back, and several daemons sharing one database without running an attempt twice.

use crate::support::{Env, Serve, assert_no_process_with, http_get, http_post, unique_sleep};
use nix::sys::signal::Signal;
use serde_json::Value;
use std::collections::HashMap;

#[test]
fn healthz_is_open_and_metrics_need_the_token() {
    let env = Env::sqlite();
    let serve = env.serve(&["--workers", "1"]);
    let id = env.create("quick", &["true"], &env.workspace());
    env.wait_task(id, "succeeded", |t| t["state"] == "succeeded");
    let (status, body) = http_get(&serve.addr, "/healthz", None);
    assert_eq!(status, 200);
    assert!(body.contains("\"ok\""), "{body}");
    let (status, _) = http_get(&serve.addr, "/metrics", None);
    assert_eq!(status, 401);
    let (status, _) = http_get(&serve.addr, "/metrics", Some("wrong-token"));
    assert_eq!(status, 401);
    let (status, body) = http_get(&serve.addr, "/metrics", Some(&serve.token()));
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("orchestrator_tasks{state=\"succeeded\"} 1"),
        "{body}"
    );
    assert!(body.contains("orchestrator_claims_total 1"), "{body}");
    assert!(
        body.contains("orchestrator_gate_duration_seconds_count 1"),
        "{body}"
    );
}

#[test]
fn cancel_kills_a_running_gate_and_its_children() {
    let env = Env::sqlite();
    let _serve = env.serve(&["--workers", "2"]);
    let marker = unique_sleep();
    let gate = format!("sleep {marker} & sleep {marker}");
    let id = env.create("long", &[&gate], &env.workspace());
    env.wait_task(id, "running", |t| t["state"] == "running");
    // Wait until the gate has really started its processes.
    crate::support::wait_for(|| {
        !crate::support::processes_with(&format!("sleep {marker}")).is_empty()
    });
    let out = env.run(&["task", "cancel", &id.to_string()]);
    assert!(out.status.success());
    // The cancel returns once the worker has stopped the task, so a retry right after works.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("stopped by its worker: canceled"), "{said}");
    let task = env.task(id);
    assert_eq!(task["state"], "canceled", "{task}");
    assert_eq!(task["gates"][0]["verdict"], "canceled");
    assert_no_process_with(&format!("sleep {marker}"));
    let kinds: Vec<String> = env
        .events(id)
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(kinds.contains(&"cancel_requested".to_owned()), "{kinds:?}");
    assert_eq!(kinds.last().unwrap(), "canceled");
}

#[test]
fn sigterm_hands_running_work_back_after_the_grace_period() {
    let env = Env::sqlite();
    let mut serve = env.serve(&["--workers", "1", "--shutdown-grace-seconds", "1"]);
    let marker = unique_sleep();
    let id = env.create("long", &[&format!("sleep {marker}")], &env.workspace());
    env.wait_task(id, "running", |t| t["state"] == "running");
    serve.signal(Signal::SIGTERM);
    assert_eq!(serve.wait(), Some(0), "{}", serve.log());
    let task = env.task(id);
    assert_eq!(task["state"], "queued", "{task}");
    assert_eq!(task["attempt"], 0, "a hand-back does not spend an attempt");
    assert_eq!(env.events(id).last().unwrap()["kind"], "handed_back");
    assert_no_process_with(&format!("sleep {marker}"));

    // A gate that finishes within the grace period is allowed to finish.
    let mut serve = env.serve(&["--workers", "1", "--shutdown-grace-seconds", "60"]);
    env.json(&["task", "cancel", &id.to_string(), "--json"]);
    let quick = env.create("quick", &["sleep 1; echo finished"], &env.workspace());
    env.wait_task(quick, "running", |t| t["state"] == "running");
    serve.signal(Signal::SIGINT);
    assert_eq!(serve.wait(), Some(0), "{}", serve.log());
    assert_eq!(env.task(quick)["state"], "succeeded");
}

/// Runs `tasks` quick gate tasks on `daemons` serve processes sharing `env`'s store, and checks
/// that each task succeeded on its first attempt with exactly one gate run.
fn shared_store_runs_each_attempt_once(env: &Env, daemons: usize, tasks: usize) {
    let ids: Vec<i64> = (0..tasks)
        .map(|i| env.create(&format!("t{i}"), &["echo $PPID"], &env.workspace()))
        .collect();
    let serves: Vec<Serve> = (0..daemons)
        .map(|_| env.serve(&["--workers", "4"]))
        .collect();
    for id in &ids {
        env.wait_task(*id, "finished", |t| {
            t["state"] == "succeeded" || t["state"] == "failed"
        });
    }
    let mut workers: HashMap<String, usize> = HashMap::new();
    for id in &ids {
        let task = env.task(*id);
        assert_eq!(task["state"], "succeeded", "{task}");
        assert_eq!(task["attempt"], 1, "{task}");
        let runs = task["gate_runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "an attempt ran twice: {task}");
        let claimed: Vec<Value> = env
            .events(*id)
            .into_iter()
            .filter(|e| e["kind"] == "claimed")
            .collect();
        assert_eq!(claimed.len(), 1, "{claimed:?}");
        *workers
            .entry(claimed[0]["data"]["worker"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    drop(serves);
    assert!(!workers.is_empty());
}

#[test]
fn several_daemons_share_a_sqlite_file() {
    let env = Env::sqlite();
    shared_store_runs_each_attempt_once(&env, 3, 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_daemons_share_postgres() {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || shared_store_runs_each_attempt_once(&env, 3, 60))
        .await
        .unwrap();
}

/// `serve` answers the versioned API beside the old routes, and `--read-only` refuses writes on
/// both, while reads go on.
#[test]
fn serve_answers_api_v1_and_read_only_refuses_writes_everywhere() {
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let id = env.create("listed", &["true"], ws.path());
    // Workers on another queue: the task stays queued, whatever the API is asked.
    let serve = env.serve(&["--queue", "elsewhere", "--read-only"]);
    let token = serve.token();
    let (status, body) = http_get(&serve.addr, "/api/v1/tasks?limit=5", Some(&token));
    assert_eq!(status, 200, "{body}");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["tasks"][0]["id"], id, "{page}");
    let (status, body) = http_get(&serve.addr, "/api/v1/openapi.json", Some(&token));
    assert_eq!(status, 200);
    assert!(body.contains("\"/api/v1/tasks/{id}/cancel\""), "{body}");
    let (status, _) = http_get(&serve.addr, "/api/v1/tasks", None);
    assert_eq!(status, 401);

    let auth = format!("Bearer {token}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    let (status, body) = http_post(
        &serve.addr,
        &format!("/api/v1/tasks/{id}/cancel"),
        &headers,
        b"",
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("\"read_only\""), "{body}");
    let (status, body) = http_post(&serve.addr, "/api/approvals/1/approve", &headers, b"");
    assert_eq!(status, 403, "the old route is read-only too: {body}");
    assert_eq!(env.task(id)["state"], "queued", "nothing was changed");

    // The one-time login link `serve` printed logs in once (a session may look even read-only).
    let log = serve.log();
    let at = log
        .find("/login?once=")
        .expect("serve prints a one-time link")
        + "/login?once=".len();
    let code: String = log[at..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    assert_eq!(code.len(), 64, "{log}");
    let link = format!("/login?once={code}");
    let (status, _) = http_get(&serve.addr, &link, None);
    assert_eq!(status, 303, "the link logs in");
    let (status, _) = http_get(&serve.addr, &link, None);
    assert_eq!(status, 401, "once");
}

/// An `api-token` file left empty (a first start killed between creating and writing it, a
/// truncation) is never a token: serve writes a new one in its place, an empty login or bearer
/// token gets nothing, and a token a person gives that is too short is refused at start.
#[test]
fn an_empty_token_file_is_replaced_and_an_empty_token_opens_nothing() {
    let env = Env::sqlite();
    std::fs::write(env.home().join("api-token"), "").unwrap();
    let serve = env.serve(&["--workers", "1"]);
    let token = serve.token();
    assert!(token.len() >= 16, "the file holds {token:?}");
    assert!(
        serve.log().contains("a new token replaces it"),
        "serve says the file was replaced: {}",
        serve.log()
    );
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    for body in ["token=", "token=+", "next=%2F", ""] {
        let (status, page) = http_post(&serve.addr, "/login", &form, body.as_bytes());
        assert_eq!(status, 401, "{body:?} signed in: {page}");
    }
    let (status, _) = http_post(
        &serve.addr,
        "/login",
        &form,
        format!("token={token}").as_bytes(),
    );
    assert_eq!(status, 303, "the real token signs in");
    let (status, _) = http_get(&serve.addr, "/api/v1/tasks", Some(""));
    assert_eq!(status, 401);
    drop(serve);

    // Short tokens from the environment or the config file: serve does not start.
    let out = env
        .cmd(&["serve", "--listen", "127.0.0.1:0"])
        .env("ORCHESTRATOR_API_TOKEN", "short")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("refuses a token shorter than"), "{said}");
    crate::support::configure(&env, "api_token = \"abc\"\n");
    let out = env
        .cmd(&["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("api_token"), "{said}");
}

/// The daemon already there is named: by `doctor`, by a second `serve` on the same home, and by
/// one that wants the same address (refused, exit 4, naming who holds it). With two on one home,
/// doctor names both, and the first one stopping leaves the second named.
#[test]
fn a_daemon_already_there_is_named_by_doctor_and_a_second_serve() {
    let env = Env::sqlite();
    let doctor = |env: &Env| -> serde_json::Value {
        let out = env.run(&["doctor", "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "daemon")
            .cloned()
            .unwrap_or_else(|| panic!("no daemon check: {report}"))
    };
    let none = doctor(&env);
    assert_eq!(none["status"], "warn", "{none}");
    assert!(
        none["fix"].as_str().unwrap().contains("orchestrator serve"),
        "{none}"
    );

    let first = env.serve(&["--workers", "1"]);
    let live = doctor(&env);
    assert_eq!(live["status"], "ok", "{live}");
    let detail = live["detail"].as_str().unwrap();
    assert!(detail.contains(&first.addr), "{live}");
    assert!(
        detail.contains(&format!("pid {}", first.child.id())),
        "{live}"
    );

    // Another home on the same store sees it as a daemon of the store.
    let sibling = env.sibling();
    let elsewhere = doctor(&sibling);
    assert_eq!(elsewhere["status"], "ok", "{elsewhere}");
    assert!(
        elsewhere["detail"].as_str().unwrap().contains("1 daemon"),
        "{elsewhere}"
    );

    // The same address: refused, naming this home's daemon.
    let out = env.run(&["serve", "--listen", &first.addr]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(4), "{said}");
    assert!(
        said.contains("this home's daemon already listens there"),
        "{said}"
    );
    assert!(
        said.contains(&format!("pid {}", first.child.id())),
        "{said}"
    );

    // The same home on another address: it starts, and says who else is there.
    let second = env.serve(&["--workers", "1"]);
    let expected = format!("another daemon serves this home (pid {}", first.child.id());
    let started = std::time::Instant::now();
    while !second.log().contains(&expected) {
        assert!(
            started.elapsed() < crate::support::PATIENCE,
            "{}",
            second.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // doctor names both.
    let both = doctor(&env);
    assert_eq!(both["status"], "ok", "{both}");
    let detail = both["detail"].as_str().unwrap();
    assert!(detail.contains("2 daemons serve this home"), "{both}");
    for pid in [first.child.id(), second.child.id()] {
        assert!(detail.contains(&format!("pid {pid}")), "{both}");
    }
    // Each daemon's record is its own: the first one stopping leaves the second named.
    let (first_pid, second_pid) = (first.child.id(), second.child.id());
    drop(first);
    let after = doctor(&env);
    assert_eq!(after["status"], "ok", "{after}");
    let detail = after["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("pid {second_pid}")), "{after}");
    assert!(!detail.contains(&format!("pid {first_pid}")), "{after}");
}
