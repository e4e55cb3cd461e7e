//! `task logs` and the gate log API through `serve`, with real processes: a gate that prints a
//! line at a time is followed while it runs, by the CLI (reading the store) and by another
//! daemon's API (which never ran the gate), each line arriving before the gate ends; the follow
//! ends with the verdict.

use crate::support::{Env, PATIENCE, wait_for};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Five lines, 0.6 s apart: long enough that a follower sees each before the next, short enough
/// for a test.
const GATE: &str =
    "for i in 1 2 3 4 5; do echo \"line $i\"; sleep 0.6; done; echo '\x1b[32mdone\x1b[0m'";

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Lines a reader thread saw, with the time each arrived.
type Seen = Arc<Mutex<Vec<(i64, String)>>>;

fn read_lines(from: impl Read + Send + 'static) -> Seen {
    let seen: Seen = Arc::default();
    let writer = seen.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            writer.lock().unwrap().push((now_ms(), line));
        }
    });
    seen
}

/// Opens a gate's log stream on a daemon's API over plain HTTP and reads its `data:` lines.
fn follow_api(addr: &str, token: &str, path: &str) -> Seen {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    read_lines(stream)
}

#[test]
fn a_gate_is_followed_line_by_line_while_it_runs_and_the_follow_ends_with_its_verdict() {
    let env = Env::sqlite();
    let ws = env.workspace();
    let serve = env.serve(&[]);
    // A second daemon on the same store that takes no work: its API shows what the first runs.
    let other = env.serve(&["--queue", "nobody-else"]);
    let id = env.create("prints slowly", &[GATE, "true"], &ws);
    let tail = id.to_string();

    let mut follower = env
        .cmd(&["task", "logs", &tail, "--gate", "0", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = read_lines(follower.stdout.take().unwrap());
    let mut err = String::new();
    let api = follow_api(
        &other.addr,
        &other.token(),
        &format!("/api/v1/tasks/{id}/gates/0/log/stream"),
    );

    let started = Instant::now();
    let status = loop {
        if let Some(status) = follower.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < PATIENCE, "the follow never ended");
        std::thread::sleep(Duration::from_millis(50));
    };
    follower
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status:?}: {err}\n{}", serve.log());

    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");
    let gate = &task["gates"][0];
    let finished_at = chrono_ms(gate["finished_at"].as_str().unwrap());
    let lines = out.lock().unwrap().clone();
    let texts: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(
        texts,
        [
            "line 1",
            "line 2",
            "line 3",
            "line 4",
            "line 5",
            "\x1b[32mdone\x1b[0m"
        ],
        "a pipe gets the bytes as printed"
    );
    // Every line but the last two (printed within the last flush of the gate's end) arrived
    // while the gate ran, and the lines did not come all at once.
    for (at, line) in &lines[..4] {
        assert!(
            *at < finished_at,
            "{line:?} came at {at}, after the gate ended at {finished_at}"
        );
    }
    assert!(
        lines[3].0 - lines[0].0 >= 1000,
        "the lines came together: {lines:?}"
    );
    assert!(
        err.contains("[gate") && err.contains("passed (exit 0)"),
        "the follow ends with the verdict: {err}"
    );

    // The other daemon's stream had them too, as they came, and ended with the verdict.
    wait_for(|| {
        api.lock()
            .unwrap()
            .iter()
            .any(|(_, l)| l.starts_with("event: end"))
    });
    let api = api.lock().unwrap().clone();
    let first = api
        .iter()
        .find(|(_, l)| l.contains("line 1"))
        .expect("the other daemon streamed line 1");
    assert!(
        first.0 < finished_at,
        "line 1 reached the other daemon's follower only at the end"
    );
    let end = api
        .iter()
        .skip_while(|(_, l)| !l.starts_with("event: end"))
        .find(|(_, l)| l.starts_with("data:"))
        .unwrap();
    assert!(end.1.contains(r#""verdict":"passed""#), "{}", end.1);

    // Read again once ended: the recorded log, whole, as JSON.
    let read = env.json(&["task", "logs", &tail, "--json"]);
    assert_eq!(
        read["gate"], "true",
        "without --gate: the last gate that ran"
    );
    // A gate's name is its command, shortened when long.
    let name = gate["name"].as_str().unwrap().to_owned();
    let first = env.json(&["task", "logs", &tail, "--gate", &name, "--json"]);
    assert_eq!(first["state"], "finished");
    assert_eq!(first["verdict"], "passed");
    assert!(
        first["text"]
            .as_str()
            .unwrap()
            .starts_with("line 1\nline 2\n")
    );

    // Bad ids and gate names are named.
    let out = env.run(&["task", "logs", &tail, "--gate", "nope"]);
    assert_eq!(out.status.code(), Some(3));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("no gate named \"nope\"") && said.contains("its gates:"),
        "{said}"
    );
    let out = env.run(&["task", "logs", "999999"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = env.run(&["task", "logs", "x"]);
    assert_ne!(out.status.code(), Some(0));
    drop(other);
}

/// An RFC 3339 time as Unix milliseconds.
fn chrono_ms(text: &str) -> i64 {
    orchestrator_types::parse_time(text, 0).unwrap()
}

/// Runs `task logs ID --follow` to its end: its exit code and what it said on stderr.
fn follow_to_end(env: &Env, id: i64) -> (Option<i32>, String) {
    let out = env
        .cmd(&["task", "logs", &id.to_string(), "--gate", "0", "--follow"])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_follow_exits_with_the_gates_verdict() {
    let env = Env::sqlite();
    let ws = env.workspace();
    let _serve = env.serve(&[]);
    let passes = env.create("passes", &["sleep 0.5; echo fine"], &ws);
    let fails = env.create("fails", &["sleep 0.5; echo boom; exit 3"], &ws);
    let (code, said) = follow_to_end(&env, passes);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("passed (exit 0)"), "{said}");
    let (code, said) = follow_to_end(&env, fails);
    assert_eq!(code, Some(1), "a failed gate: {said}");
    assert!(said.contains("failed (exit 3)"), "{said}");

    // A gate canceled while it is followed: the follow ends with the cancel's status.
    let sleep = crate::support::unique_sleep();
    let canceled = env.create("canceled", &[&format!("echo started; sleep {sleep}")], &ws);
    let mut follower = env
        .cmd(&[
            "task",
            "logs",
            &canceled.to_string(),
            "--gate",
            "0",
            "--follow",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = read_lines(follower.stdout.take().unwrap());
    wait_for(|| out.lock().unwrap().iter().any(|(_, l)| l == "started"));
    let cancel = env.run(&["task", "cancel", &canceled.to_string()]);
    assert!(
        cancel.status.success(),
        "{}",
        String::from_utf8_lossy(&cancel.stderr)
    );
    assert_eq!(
        wait_child(&mut follower),
        Some(7),
        "a canceled gate exits 7"
    );

    // Without --follow the read itself succeeded: 0, whatever the verdict.
    let out = env.run(&["task", "logs", &fails.to_string()]);
    assert_eq!(out.status.code(), Some(0));
    // The help says so.
    let help = env.run(&["task", "logs", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Exit status with --follow: 0 when the gate passed"),
        "{help}"
    );
}

/// Waits for a child to exit (at most `PATIENCE`) and returns its exit code.
fn wait_child(child: &mut std::process::Child) -> Option<i32> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            panic!("the follow never ended");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `serve` is killed with SIGKILL while a gate prints and a follower waits for more: nothing will
/// ever write that gate's live log again. When another daemon's rescuer takes the task back, it
/// ends the log ("the worker running this stopped"), and the follower ends, failing, instead of
/// waiting forever.
#[test]
fn a_follow_ends_when_the_worker_running_its_gate_was_killed_on_sqlite() {
    follow_past_a_killed_worker(&Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_ends_when_the_worker_running_its_gate_was_killed_on_postgres() {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || follow_past_a_killed_worker(&env))
        .await
        .unwrap();
}

fn follow_past_a_killed_worker(env: &Env) {
    let ws = env.workspace();
    let sleep = crate::support::unique_sleep();
    let gate = format!("echo started; sleep {sleep}");
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "dies with its daemon",
        "--gate",
        &gate,
        "--workspace",
        &ws.display().to_string(),
        "--max-attempts",
        "1",
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let serve = env.serve(&["--lease-seconds", "2"]);
    let mut follower = env
        .cmd(&["task", "logs", &id.to_string(), "--gate", "0", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = read_lines(follower.stdout.take().unwrap());
    let err = read_lines(follower.stderr.take().unwrap());
    wait_for(|| out.lock().unwrap().iter().any(|(_, l)| l == "started"));
    serve.signal(nix::sys::signal::Signal::SIGKILL);
    drop(serve);
    // Nobody rescues the task yet: the follower waits, as it should (the worker might be slow).
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        follower.try_wait().unwrap().is_none(),
        "the follow ended before anything said the worker stopped"
    );

    let _rescuer = env.serve(&["--lease-seconds", "2"]);
    let code = wait_child(&mut follower);
    let said: Vec<String> = err.lock().unwrap().iter().map(|(_, l)| l.clone()).collect();
    assert_eq!(
        code,
        Some(1),
        "an abandoned gate fails the follow: {said:?}"
    );
    assert!(
        said.iter()
            .any(|l| l.contains("was abandoned: the worker running this stopped")),
        "{said:?}"
    );
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "failed", "{task}");
    let log = env.json(&["task", "logs", &id.to_string(), "--json"]);
    assert_eq!(log["state"], "abandoned", "{log}");
    assert_eq!(
        log["end_reason"], "the worker running this stopped",
        "{log}"
    );
    assert_eq!(
        log["text"], "started\n",
        "what it printed before is kept: {log}"
    );
}

/// Ten lines, 0.2 s apart, then exit 3: a background job long enough to be watched.
const TICKS: &str =
    "for i in $(seq 1 10); do echo \"tick $i\"; sleep 0.2; done; echo bye >&2; exit 3";

/// A background job an agent starts with exec_shell is followed by `task logs --background`
/// through `serve` while it runs, line by line, and the follow ends with the program's exit; the
/// task's logs list it, and the API reads it.
#[test]
fn an_agents_background_job_is_followed_while_it_runs_on_sqlite() {
    follow_a_background_job(&Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_background_job_is_followed_while_it_runs_on_postgres() {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || follow_a_background_job(&env))
        .await
        .unwrap();
}

fn follow_a_background_job(env: &Env) {
    use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
    let model = ScriptedModel::start_blocking(move |request: &Request| {
        let step = |name: &str, args: serde_json::Value| Reply::ToolCalls(vec![call(name, args)]);
        match request.assistant_turns() {
            0 => step(
                "exec_shell",
                serde_json::json!({"command": TICKS, "background": true}),
            ),
            1 => step(
                "exec_shell_wait",
                serde_json::json!({"job_id": "job-1", "timeout": 60}),
            ),
            _ => Reply::Text("It ticked.".into()),
        }
    });
    let ws = env.workspace();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "ticks",
        "--prompt",
        "Run the ticker in the background.",
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--workspace",
        &ws.display().to_string(),
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let tail = id.to_string();
    let serve = env.serve(&[]);

    // The follower starts as soon as the job has a log, and reads it from its start.
    wait_for(|| {
        env.run(&["task", "logs", &tail, "--background", "job-1", "--json"])
            .status
            .success()
    });
    let mut follower = env
        .cmd(&["task", "logs", &tail, "--background", "job-1", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = read_lines(follower.stdout.take().unwrap());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = follower.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < PATIENCE, "the follow never ended");
        std::thread::sleep(Duration::from_millis(50));
    };
    let ended_at = now_ms();
    let mut err = String::new();
    follower
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "a program that exited 3 did not pass: {err}\n{}",
        serve.log()
    );
    assert!(
        err.contains("[background job job-1 finished: the program ended: exit code 3"),
        "the follow ends with the program's end: {err}"
    );
    let lines = out.lock().unwrap().clone();
    let texts: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    let expected: Vec<String> = (1..=10)
        .map(|i| format!("tick {i}"))
        .chain(["bye".to_owned()])
        .collect();
    assert_eq!(texts, expected, "stdout and stderr as they came");
    // The lines came while it ran, not all at once at its end.
    let first_late = lines.len() - 3;
    assert!(
        lines[first_late].0 - lines[0].0 >= 600,
        "the lines came together: {lines:?}"
    );
    assert!(lines[0].0 < ended_at - 600, "{lines:?} ended at {ended_at}");

    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");
    // Read once it ended: the whole output, its exit code; the task's logs list it.
    let read = env.json(&["task", "logs", &tail, "--background", "1", "--json"]);
    assert_eq!(
        (
            &read["kind"],
            &read["background_job"],
            &read["state"],
            &read["exit_code"]
        ),
        (
            &serde_json::json!("background_job"),
            &serde_json::json!("job-1"),
            &serde_json::json!("finished"),
            &serde_json::json!(3)
        ),
        "{read}"
    );
    assert_eq!(read["command"], TICKS);
    assert!(
        read["text"]
            .as_str()
            .unwrap()
            .starts_with("tick 1\ntick 2\n")
    );
    let (code, body) = crate::support::http_get(
        &serve.addr,
        &format!("/api/v1/tasks/{id}/logs"),
        Some(&serve.token()),
    );
    assert_eq!(code, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    let entry = listed["logs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "background_job")
        .unwrap_or_else(|| panic!("the job is listed: {listed}"));
    assert_eq!(entry["key"], "job-1");
    assert_eq!(entry["state"], "finished");
    let (code, body) = crate::support::http_get(
        &serve.addr,
        entry["log"].as_str().unwrap(),
        Some(&serve.token()),
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("tick 10"), "{body}");
    let missing = env.run(&["task", "logs", &tail, "--background", "job-9"]);
    assert_eq!(missing.status.code(), Some(3));
    let bad = env.run(&["task", "logs", &tail, "--background", "pty-1"]);
    assert_ne!(bad.status.code(), Some(0));
}
