//! Flow control on a model server: limits shared by every daemon on the store, one wait for every
//! task when the server pushes back, a limit that finds a server's real capacity, and a wait that
//! says what it waits for. The model server is the scripted one, with parallel slots that answer
//! 429 past them and a latency per request; it counts what it saw in flight.

use crate::support::{Env, Serve, http_get, page_get, wait_for};
use orchestrator_test_support::model_server::{Quirks, Reply, Request, ScriptedModel, call};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Two turns per task: read a file, then answer.
fn two_turns(request: &Request) -> Reply {
    match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call("read_file", json!({"path": "notes.txt"}))]),
        _ => Reply::Text("read it".into()),
    }
}

fn model(quirks: Quirks) -> ScriptedModel {
    ScriptedModel::start_blocking_with(quirks, two_turns)
}

/// The config of a home whose tasks use `model`, paced as `limits` (TOML lines) say.
fn configure(env: &Env, model: &ScriptedModel, limits: &str) {
    std::fs::write(
        env.home().join("config.toml"),
        format!(
            "[model]\nbase_url = \"{}\"\nmodel = \"scripted\"\n\n\
             [model_servers.local]\nbase_url = \"{}/\"\n{limits}\n",
            model.base_url(),
            model.base_url()
        ),
    )
    .unwrap();
}

/// `n` agent tasks that read the workspace's notes.
fn create_tasks(env: &Env, n: usize) -> Vec<i64> {
    (0..n).map(|i| create_task(env, i, &[])).collect()
}

/// Agent task `i`, which reads the workspace's notes, with `extra` flags.
fn create_task(env: &Env, i: usize, extra: &[&str]) -> i64 {
    let ws = env.workspace();
    std::fs::write(ws.join("notes.txt"), "a note\n").unwrap();
    let ws = ws.display().to_string();
    let title = format!("reader {i}");
    let mut args = vec![
        "task",
        "create",
        "--title",
        &title,
        "--prompt",
        "Read the notes.",
        "--profile",
        "minimal",
        "--workspace",
        &ws,
        "--json",
    ];
    args.extend_from_slice(extra);
    env.json(&args)["id"].as_i64().unwrap()
}

fn all_succeed(env: &Env, ids: &[i64], serves: &[&Serve]) {
    for id in ids {
        let task = env.wait_finished(*id);
        let logs: Vec<String> = serves.iter().map(|s| s.log()).collect();
        assert_eq!(
            task["state"],
            "succeeded",
            "{task}\n{}",
            logs.join("\n---\n")
        );
    }
}

/// When each completion arrived at the server, refused or not, in order.
fn arrivals(model: &ScriptedModel) -> Vec<Instant> {
    let mut all: Vec<Instant> = model.received().iter().map(|r| r.arrived_at).collect();
    all.extend(model.refusals());
    all.sort();
    all
}

fn shared_limit_holds_across_daemons(env: Env) {
    let model = model(Quirks {
        latency_ms: 150,
        ..Quirks::default()
    });
    let other = env.sibling();
    for home in [&env, &other] {
        configure(home, &model, "max_in_flight = 2");
    }
    // Half the tasks for each daemon, so both send requests at once.
    let ids: Vec<i64> = (0..8)
        .map(|i| create_task(&env, i, &["--require-label", ["one", "two"][i % 2]]))
        .collect();
    let first = env.serve(&["--workers", "4", "--label", "one"]);
    let second = other.serve(&["--workers", "4", "--label", "two"]);
    all_succeed(&env, &ids, &[&first, &second]);
    assert_eq!(model.request_count(), 16);
    assert!(
        model.most_in_flight() <= 2,
        "the server saw {} requests at once, over the shared limit of 2",
        model.most_in_flight()
    );
}

#[test]
fn two_daemons_never_exceed_a_shared_in_flight_limit() {
    shared_limit_holds_across_daemons(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_never_exceed_a_shared_in_flight_limit_on_postgres() {
    on_postgres(shared_limit_holds_across_daemons).await;
}

fn retry_after_holds_every_task(env: Env) {
    // One real slot, two configured: of the first two requests one is refused, and the server
    // asks for two seconds.
    let model = model(Quirks {
        slots: Some(1),
        retry_after_secs: Some(2),
        latency_ms: 1500,
        ..Quirks::default()
    });
    configure(&env, &model, "max_in_flight = 2");
    let ids = create_tasks(&env, 3);
    let serve = env.serve(&["--workers", "3"]);
    all_succeed(&env, &ids, &[&serve]);
    let refusals = model.refusals();
    assert!(!refusals.is_empty(), "the server never pushed back");
    let first_refusal = refusals[0];
    // The request refused was the second of the two in flight; no request arrived after it
    // before its two seconds were up: every task waited them out, the refused one too.
    let early: Vec<Duration> = arrivals(&model)
        .into_iter()
        .filter(|at| *at > first_refusal)
        .map(|at| at - first_refusal)
        .filter(|after| *after < Duration::from_millis(1950))
        .collect();
    assert!(
        early.is_empty(),
        "requests arrived {early:?} after the 429 that asked for 2 s"
    );
    // Nothing failed for it, and the throttle is on record.
    let status = env.json(&["status", "--json"]);
    let server = status["model_servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["server"] == "local"))
        .unwrap_or_else(|| panic!("no model server in {status}"));
    assert!(server["throttled"].as_i64().unwrap() >= 1, "{server}");
}

#[test]
fn a_429_with_retry_after_holds_every_task_on_the_server() {
    retry_after_holds_every_task(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_holds_every_task_on_the_server_on_postgres() {
    on_postgres(retry_after_holds_every_task).await;
}

fn half_the_capacity_fails_nothing(env: Env) {
    // The server has half the slots the config says; it answers 429 without Retry-After.
    let model = model(Quirks {
        slots: Some(2),
        latency_ms: 200,
        ..Quirks::default()
    });
    configure(&env, &model, "max_in_flight = 4");
    let ids = create_tasks(&env, 8);
    let serve = env.serve(&["--workers", "8"]);
    all_succeed(&env, &ids, &[&serve]);
    assert!(!model.refusals().is_empty(), "the server never pushed back");
    // The limit came down from the configured 4 when the server pushed back; it is exported.
    let (status, metrics) = http_get(&serve.addr, "/metrics", Some(&serve.token()));
    assert_eq!(status, 200);
    let throttled = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("orchestrator_model_server_throttled_total{server=\"local\"} ")
        })
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no throttle counter in {metrics}"));
    assert!(throttled >= 1, "{metrics}");
    assert!(
        metrics.contains("orchestrator_model_server_limit{server=\"local\"} "),
        "{metrics}"
    );
}

#[test]
fn a_server_with_half_the_configured_capacity_fails_no_task() {
    half_the_capacity_fails_nothing(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_half_the_configured_capacity_fails_no_task_on_postgres() {
    on_postgres(half_the_capacity_fails_nothing).await;
}

fn a_wait_says_why(env: Env) {
    let model = model(Quirks {
        latency_ms: 2000,
        ..Quirks::default()
    });
    configure(&env, &model, "max_in_flight = 1");
    let ids = create_tasks(&env, 3);
    let serve = env.serve(&["--workers", "3"]);
    // The API names the wait of a task whose request waits behind another.
    let found = std::cell::RefCell::new(None::<(i64, Value)>);
    wait_for(|| {
        for id in &ids {
            let (status, body) = http_get(
                &serve.addr,
                &format!("/api/v1/tasks/{id}"),
                Some(&serve.token()),
            );
            assert_eq!(status, 200, "{body}");
            let task: Value = serde_json::from_str(&body).unwrap();
            if task["model_wait"]["ahead"] == 1 {
                *found.borrow_mut() = Some((*id, task));
                return true;
            }
        }
        false
    });
    let (id, task) = found.into_inner().unwrap();
    let why = task["waiting_for"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("waiting for the model server local: 1 of 1 slots in use, 1 request ahead"),
        "{task}"
    );
    // The CLI and the page say the same while it waits (the last in line waits two turns).
    let read = env.json(&["task", "read", &id.to_string(), "--json"]);
    if read["state"] == "running" && read["model_wait"].is_object() {
        assert_eq!(read["model_wait"]["server"], "local", "{read}");
        assert!(
            read["waiting_for"]
                .as_str()
                .unwrap_or_default()
                .starts_with("waiting for the model server local"),
            "{read}"
        );
    } else {
        panic!("the wait ended before the CLI read it: {read}");
    }
    let (status, page) = page_get(&serve, &format!("/tasks/{id}"));
    assert_eq!(status, 200);
    assert!(
        page.contains("waiting for the model server local"),
        "{page}"
    );
    all_succeed(&env, &ids, &[&serve]);
    assert_eq!(model.most_in_flight(), 1);
    // Its wait did not count as the model's time.
    for id in &ids {
        let turns = env.json(&["task", "read", &id.to_string(), "--json"])["turns"].clone();
        for turn in turns.as_array().unwrap() {
            let model_ms = turn["model_ms"].as_i64().unwrap();
            assert!(model_ms < 4000, "a turn counted its wait: {turn}");
        }
    }
}

#[test]
fn a_task_waiting_for_a_slot_says_why() {
    a_wait_says_why(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_a_slot_says_why_on_postgres() {
    on_postgres(a_wait_says_why).await;
}

#[test]
fn bad_model_server_limits_are_refused_at_start() {
    let env = Env::sqlite();
    for (limits, says) in [
        ("max_in_flight = 0", "a limit of 0"),
        ("max_in_flight = -1", "max_in_flight"),
        ("max_in_fligth = 2", "max_in_fligth"),
    ] {
        std::fs::write(
            env.home().join("config.toml"),
            format!("[model_servers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\n{limits}\n"),
        )
        .unwrap();
        let out = env.run(&["serve", "--listen", "127.0.0.1:0"]);
        assert!(!out.status.success(), "{limits} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{limits}: {err}");
    }
}

async fn on_postgres(body: fn(Env)) {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || body(env))
        .await
        .unwrap();
}

fn one_turn_at_a_time(env: Env) {
    let other = env.sibling();
    let ws = env.workspace();
    let ws_text = ws.display().to_string();
    // Each gate writes when it starts and ends into the shared workspace.
    let gate = "echo start >> runs.log; sleep 1; echo end >> runs.log";
    let ids: Vec<i64> = (0..4)
        .map(|i| {
            env.json(&[
                "task",
                "create",
                "--title",
                &format!("docs {i}"),
                "--gate",
                gate,
                "--workspace",
                &ws_text,
                "--concurrency-key",
                "docs",
                "--max-running",
                "1",
                "--json",
            ])["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let first = env.serve(&["--workers", "2"]);
    let second = other.serve(&["--workers", "2"]);
    // A task whose key's turn is taken says so while it waits in the queue.
    let waiting = std::cell::RefCell::new(String::new());
    wait_for(|| {
        ids.iter().any(|id| {
            let task = env.json(&["task", "read", &id.to_string(), "--json"]);
            let why = task["waiting_for"].as_str().unwrap_or_default().to_owned();
            let found = task["state"] == "queued" && why.starts_with("waiting for its turn");
            if found {
                *waiting.borrow_mut() = why;
            }
            found
        })
    });
    assert!(
        waiting
            .borrow()
            .starts_with("waiting for its turn: at most 1 task of docs runs at a time (task "),
        "{}",
        waiting.borrow()
    );
    // `status` names the key with the task running in its turn.
    wait_for(|| {
        let status = env.json(&["status", "--json"]);
        status["concurrency_keys"]
            .as_array()
            .is_some_and(|keys| keys.iter().any(|k| k["key"] == "docs" && k["running"] == 1))
    });
    all_succeed(&env, &ids, &[&first, &second]);
    // Never two at once, over two daemons: the gates' marks alternate.
    let log = std::fs::read_to_string(ws.join("runs.log")).unwrap();
    let marks: Vec<&str> = log.lines().collect();
    assert_eq!(marks.len(), 8, "{log}");
    for pair in marks.chunks(2) {
        assert_eq!(pair, ["start", "end"], "two ran at once:\n{log}");
    }
    // Waiting for a turn spent no attempt, and the timeline says why the task went back.
    let mut went_back = 0;
    for id in &ids {
        let task = env.task(*id);
        assert_eq!(task["attempt"], 1, "{task}");
        let out = env.run(&["task", "events", &id.to_string()]);
        let events = String::from_utf8_lossy(&out.stdout);
        went_back += events
            .matches("back in the queue, attempt not counted: waiting for its turn")
            .count();
    }
    assert!(went_back >= 1, "no task waited for its turn");
}

#[test]
fn a_key_with_max_running_1_runs_one_task_at_a_time_across_daemons() {
    one_turn_at_a_time(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_max_running_1_runs_one_task_at_a_time_across_daemons_on_postgres() {
    on_postgres(one_turn_at_a_time).await;
}

#[test]
fn max_running_without_a_key_is_refused_with_the_fix() {
    let env = Env::sqlite();
    let ws = env.workspace().display().to_string();
    let out = env.run(&[
        "task",
        "create",
        "--title",
        "t",
        "--gate",
        "true",
        "--workspace",
        &ws,
        "--max-running",
        "2",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--concurrency-key"), "{err}");
    let out = env.run(&[
        "task",
        "create",
        "--title",
        "t",
        "--gate",
        "true",
        "--workspace",
        &ws,
        "--concurrency-key",
        "k",
        "--max-running",
        "0",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("max_running must be at least 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(env.tasks().is_empty());
}

fn debounced_burst(env: Env) {
    use crate::github::{REPO, comment, deliver, serve};
    use orchestrator_test_support::github_server::FakeGitHub;
    std::fs::write(
        env.home().join("config.toml"),
        format!(
            "[github]\nbot_login = \"orchestrator-bot\"\n\n[[github.trigger]]\nname = \"ask\"\n\
             event = \"issue_comment.created\"\nrepos = [\"{REPO}\"]\ndebounce_secs = 600\n\
             singleton = true\ntask = {{ title = \"Asked on {{repo}}#{{number}}\" }}\n"
        ),
    )
    .unwrap();
    let fake = FakeGitHub::start_blocking();
    fake.add_issue(REPO, 5, "Crash", "", "alice");
    fake.set_permission(REPO, "alice", "write");
    let serve = serve(&env, &fake);
    let mut made = Vec::new();
    for i in 0..10 {
        let body = comment(5, &format!("@orchestrator-bot look again ({i})"), "alice");
        let (_, row) = deliver(
            &env,
            &serve,
            "issue_comment",
            &format!("d-burst-{i}"),
            &body,
        );
        assert_eq!(row["status"], "processed", "{row}");
        made.extend(
            row["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_i64().unwrap()),
        );
    }
    made.dedup();
    assert_eq!(made.len(), 1, "ten deliveries made {made:?}");
    assert_eq!(env.tasks().len(), 1);
    // Another issue is another task.
    fake.add_issue(REPO, 6, "Another", "", "alice");
    let (_, row) = deliver(
        &env,
        &serve,
        "issue_comment",
        "d-other",
        &comment(6, "@orchestrator-bot this too", "alice"),
    );
    assert_ne!(row["tasks"][0].as_i64(), Some(made[0]), "{row}");
    // The task waits out the window, and is one per issue at a time.
    let task = env.task(made[0]);
    assert_eq!(task["state"], "queued", "{task}");
    let stored = env.json(&["task", "read", &made[0].to_string(), "--json"]);
    assert_eq!(
        stored["concurrency"]["key"], "rule:ask:acme/widgets#5",
        "{stored}"
    );
    assert_eq!(stored["concurrency"]["max_running"], 1, "{stored}");
}

#[test]
fn a_debounced_burst_of_ten_deliveries_makes_one_task() {
    debounced_burst(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debounced_burst_of_ten_deliveries_makes_one_task_on_postgres() {
    on_postgres(debounced_burst).await;
}

fn canceled_gives_back(env: Env) {
    // One slot; the request that holds it takes long, and its task is canceled meanwhile.
    let model = model(Quirks {
        latency_ms: 4000,
        ..Quirks::default()
    });
    configure(&env, &model, "max_in_flight = 1");
    let ids = create_tasks(&env, 2);
    let serve = env.serve(&["--workers", "2"]);
    wait_for(|| model.request_count() == 1);
    // The task whose request is in flight is the one not waiting for the slot.
    let holder = std::cell::RefCell::new(None::<i64>);
    wait_for(|| {
        let waiting: Vec<bool> = ids
            .iter()
            .map(|id| {
                let (_, body) = http_get(
                    &serve.addr,
                    &format!("/api/v1/tasks/{id}"),
                    Some(&serve.token()),
                );
                serde_json::from_str::<Value>(&body).unwrap()["model_wait"].is_object()
            })
            .collect();
        if let [a, b] = waiting[..]
            && a != b
        {
            *holder.borrow_mut() = Some(if a { ids[1] } else { ids[0] });
            return true;
        }
        false
    });
    let canceled = holder.into_inner().unwrap();
    let out = env.run(&["task", "cancel", &canceled.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The other task gets the slot back and finishes: a canceled request does not keep it
    // (it would for 30 minutes, past this test's patience).
    let other = if canceled == ids[0] { ids[1] } else { ids[0] };
    let task = env.wait_finished(other);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    env.wait_task(canceled, "canceled", |t| t["state"] == "canceled");
}

#[test]
fn a_canceled_request_gives_its_slot_back() {
    canceled_gives_back(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_request_gives_its_slot_back_on_postgres() {
    on_postgres(canceled_gives_back).await;
}

fn spent_budget_waits(env: Env) {
    let model = model(Quirks::default());
    configure(&env, &model, "max_in_flight = 4");
    let ws = env.workspace();
    std::fs::write(ws.join("notes.txt"), "a note\n").unwrap();
    let ws = ws.display().to_string();
    // A budget of one token a day: the first task spends it, whatever it costs.
    env.json(&[
        "automation",
        "create",
        "--name",
        "budgeted",
        "--schedule",
        "0 3 * * *",
        "--tz",
        "UTC",
        "--prompt",
        "Read the notes.",
        "--profile",
        "minimal",
        "--workspace",
        &ws,
        "--daily-tokens",
        "1",
        "--json",
    ]);
    let fire = || {
        let out = env.json(&["automation", "run", "budgeted", "--force", "--json"]);
        out["result"]["tasks"][0]
            .as_i64()
            .unwrap_or_else(|| panic!("no task in {out}"))
    };
    // The budget is a UTC day's: a run that straddles midnight would find it spent no more.
    let day_ms = 86_400_000;
    let to_midnight = day_ms - orchestrator_types::now_millis().rem_euclid(day_ms);
    if to_midnight < 60_000 {
        std::thread::sleep(Duration::from_millis(to_midnight as u64 + 1_000));
    }
    let first = fire();
    let serve = env.serve(&["--workers", "2"]);
    all_succeed(&env, &[first], &[&serve]);
    let calls = model.request_count();
    assert_eq!(calls, 2, "the first task's two turns");

    // The next task waits for the next day, saying so everywhere, and spends nothing.
    let second = fire();
    // Read live, the budget says why as soon as the task is queued; the attempt that found it
    // spent hands the task back until the next day begins.
    let tomorrow = (orchestrator_types::now_millis() / day_ms + 1) * day_ms;
    let run_after_of = |task: &Value| {
        orchestrator_types::parse_time(task["run_after"].as_str().unwrap_or("now"), 0).unwrap()
    };
    let why = std::cell::RefCell::new(Value::Null);
    wait_for(|| {
        let task = env.json(&["task", "read", &second.to_string(), "--json"]);
        let waits = task["state"] == "queued"
            && run_after_of(&task) >= tomorrow
            && task["waiting_for"]
                .as_str()
                .is_some_and(|w| w.starts_with("waiting for the next day's token budget"));
        *why.borrow_mut() = task;
        waits
    });
    let task = why.borrow().clone();
    let text = task["waiting_for"].as_str().unwrap();
    assert!(
        text.contains("automation:budgeted spent ")
            && text.contains(" of its 1 tokens today (UTC)"),
        "{text}"
    );
    assert_eq!(task["attempt"], 0, "waiting spent no attempt: {task}");
    assert!(
        run_after_of(&task) < tomorrow + 61_000,
        "run_after {}, the next day begins at {tomorrow}",
        run_after_of(&task)
    );
    let (status, api) = http_get(
        &serve.addr,
        &format!("/api/v1/tasks/{second}"),
        Some(&serve.token()),
    );
    assert_eq!(status, 200, "{api}");
    let api: Value = serde_json::from_str(&api).unwrap();
    assert_eq!(api["waiting_for"], task["waiting_for"], "{api}");
    let (status, page) = page_get(&serve, &format!("/tasks/{second}"));
    assert_eq!(status, 200);
    assert!(page.contains("waiting for the next day"), "{page}");
    assert_eq!(
        model.request_count(),
        calls,
        "the waiting task called the model"
    );
}

#[test]
fn a_spent_daily_budget_holds_new_tasks_until_the_next_day() {
    spent_budget_waits(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_daily_budget_holds_new_tasks_until_the_next_day_on_postgres() {
    on_postgres(spent_budget_waits).await;
}
