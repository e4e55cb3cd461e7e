//! Automations end to end: the CLI's answers and exit codes, schedules files, and a `serve` killed
//! with SIGKILL while it fires a per-second schedule, which must neither lose nor repeat a slot.

use crate::support::Env;
use nix::sys::signal::Signal;
use serde_json::Value;
use std::collections::HashSet;
use std::time::{Duration, Instant};

fn code(env: &Env, args: &[&str]) -> (i32, String) {
    let out = env.run(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_input_is_refused_clearly_and_changes_nothing() {
    let env = Env::sqlite();
    let ws = env.workspace().display().to_string();
    let base = ["automation", "create", "--workspace", &ws, "--gate", "true"];
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["--name", "a", "--schedule", "0 3 * *"],
            6,
            "4 fields given",
        ),
        (
            &["--name", "a", "--schedule", "61 * * * *"],
            6,
            "invalid schedule",
        ),
        (
            &[
                "--name",
                "a",
                "--schedule",
                "0 3 * * *",
                "--tz",
                "Europe/Berlinn",
            ],
            6,
            "unknown time zone \"Europe/Berlinn\"",
        ),
        (
            &[
                "--name",
                "a",
                "--schedule",
                "0 3 * * *",
                "--overlap",
                "sometimes",
            ],
            6,
            "unknown overlap policy \"sometimes\"",
        ),
        (
            &[
                "--name",
                "a",
                "--schedule",
                "0 3 * * *",
                "--catch-up",
                "never",
            ],
            6,
            "unknown catch-up policy",
        ),
        (
            &["--name", "a b", "--schedule", "0 3 * * *"],
            6,
            "invalid name",
        ),
        (
            &[
                "--name",
                "a",
                "--schedule",
                "0 3 * * *",
                "--prompt",
                "fix it",
            ],
            6,
            "no model for the agent",
        ),
    ];
    for (extra, expect_code, word) in cases {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let (got, stderr) = code(&env, &args);
        assert_eq!(got, *expect_code, "{extra:?}: {stderr}");
        assert!(stderr.contains(word), "{extra:?}: {stderr}");
    }
    assert_eq!(
        env.json(&["automation", "list", "--json"]),
        serde_json::json!([])
    );

    let mut args = base.to_vec();
    args.extend([
        "--name",
        "nightly",
        "--schedule",
        "0 3 * * 1-5",
        "--tz",
        "Europe/Berlin",
        "--json",
    ]);
    let created = env.json(&args);
    assert_eq!(created["name"], "nightly");
    assert_eq!(created["status"], "active");
    let (dup, stderr) = code(&env, &args);
    assert_eq!(dup, 4, "{stderr}");
    assert!(stderr.contains("already exists"), "{stderr}");
    assert_eq!(
        env.json(&["automation", "list", "--json"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let (missing, stderr) = code(&env, &["automation", "read", "nope"]);
    assert_eq!(missing, 3, "{stderr}");
}

#[test]
fn the_life_of_an_automation_through_the_cli() {
    let env = Env::sqlite();
    let ws = env.workspace().display().to_string();
    env.json(&[
        "automation",
        "create",
        "--name",
        "nightly",
        "--schedule",
        "0 3 * * 1-5",
        "--tz",
        "Europe/Berlin",
        "--gate",
        "true",
        "--workspace",
        &ws,
        "--json",
    ]);
    // Preview of an expression across Berlin's spring gap: 02:30 runs at 03:00 CEST (01:00Z).
    let times = env.json(&[
        "automation",
        "preview",
        "--schedule",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2026-03-28T00:00:00Z",
        "--count",
        "3",
        "--json",
    ]);
    assert_eq!(
        times,
        serde_json::json!([
            "2026-03-28T01:30:00.000Z",
            "2026-03-29T01:00:00.000Z",
            "2026-03-30T00:30:00.000Z"
        ])
    );
    // As text, each time also as the zone's clock reads it.
    let out = env.run(&[
        "automation",
        "preview",
        "--schedule",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2026-03-28T00:00:00Z",
        "--count",
        "2",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "2026-03-28T01:30:00.000Z  2026-03-28T02:30:00+01:00 Europe/Berlin",
            "2026-03-29T01:00:00.000Z  2026-03-29T03:00:00+02:00 Europe/Berlin"
        ],
        "{text}"
    );
    let preview = env.json(&["automation", "preview", "nightly", "--count", "2", "--json"]);
    assert_eq!(preview.as_array().unwrap().len(), 2);

    let read = env.json(&["automation", "read", "nightly", "--json"]);
    assert_eq!(read["next_fires"].as_array().unwrap().len(), 5);
    assert_eq!(read["slots"], serde_json::json!([]));

    let paused = env.json(&["automation", "pause", "nightly", "--json"]);
    assert_eq!(paused["status"], "paused");
    assert_eq!(paused["next_fire_at"], Value::Null);
    let resumed = env.json(&["automation", "resume", "nightly", "--json"]);
    assert_eq!(resumed["status"], "active");

    // Run now: a manual slot with one task that knows where it came from.
    let run = env.json(&["automation", "run", "nightly", "--json"]);
    assert_eq!(run["result"]["outcome"], "fired", "{run}");
    let task_id = run["result"]["tasks"][0].as_i64().unwrap();
    let task = env.task(task_id);
    assert_eq!(task["automation_id"], read["id"]);
    assert_eq!(task["slot"], run["slot"]);
    assert!(
        task["title"].as_str().unwrap().starts_with("nightly @ "),
        "{task}"
    );
    // The run is unfinished, so overlap "skip" refuses a second one (exit 4); --force fires.
    let (skipped, _) = code(&env, &["automation", "run", "nightly"]);
    assert_eq!(skipped, 4);
    let forced = env.json(&["automation", "run", "nightly", "--force", "--json"]);
    assert_eq!(forced["result"]["outcome"], "fired");

    let read = env.json(&["automation", "read", "nightly", "--json"]);
    let statuses: Vec<&str> = read["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["fired", "skipped", "fired"]);
    assert_eq!(read["slots"][2]["tasks"][0]["state"], "queued");

    let updated = env.json(&[
        "automation",
        "update",
        "nightly",
        "--overlap",
        "allow",
        "--json",
    ]);
    assert_eq!(updated["overlap"], "allow");
    env.json(&["automation", "delete", "nightly", "--json"]);
    assert_eq!(code(&env, &["automation", "delete", "nightly"]).0, 3);
    // The tasks stay.
    assert_eq!(env.task(task_id)["automation_id"], read["id"]);
}

#[test]
fn schedules_files_validate_and_apply_despite_a_broken_one() {
    let env = Env::sqlite();
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schedules");
    let valid = env.json(&["automation", "validate", shipped, "--json"]);
    assert_eq!(valid["errors"], serde_json::json!([]), "{valid}");
    assert!(valid["valid"].as_array().unwrap().len() >= 2);

    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(shipped).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    std::fs::write(dir.path().join("broken.toml"), "schedule = [oops").unwrap();
    let d = dir.path().display().to_string();
    let (got, stderr) = code(&env, &["automation", "validate", &d]);
    assert_eq!(got, 6);
    assert!(stderr.contains("broken.toml"), "{stderr}");
    assert!(
        env.json(&["automation", "list", "--json"])
            .as_array()
            .unwrap()
            .is_empty()
    );

    let out = env.run(&["automation", "apply", &d, "--json"]);
    assert_eq!(out.status.code(), Some(6));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["created"].as_array().unwrap().len(),
        valid["valid"].as_array().unwrap().len()
    );
    assert!(
        report["errors"][0]
            .as_str()
            .unwrap()
            .contains("broken.toml")
    );
    let list = env.json(&["automation", "list", "--json"]);
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|a| a["source"] == "file")
    );
}

/// A per-second automation under `serve`; the daemon is killed with SIGKILL while it fires, then
/// restarted. Every second between the first and the last slot has exactly one slot row and one
/// task: nothing lost in the downtime (it is shorter than the misfire grace, so the slots it
/// missed fire on restart) and nothing fired twice.
fn killed_serve_neither_loses_nor_repeats_a_slot(env: &Env) {
    let ws = env.workspace().display().to_string();
    env.json(&[
        "automation",
        "create",
        "--name",
        "tick",
        "--schedule",
        "* * * * * *",
        "--gate",
        "true",
        "--workspace",
        &ws,
        "--overlap",
        "allow",
        "--json",
    ]);
    let slots = |env: &Env| -> Vec<Value> {
        env.json(&["automation", "read", "tick", "--slots", "100000", "--json"])["slots"]
            .as_array()
            .unwrap()
            .clone()
    };
    for round in 0..2 {
        let serve = env.serve(&["--workers", "2"]);
        let start = Instant::now();
        let before = slots(env).len();
        while slots(env).len() < before + 3 {
            assert!(start.elapsed() < crate::support::PATIENCE, "no slots fired");
            std::thread::sleep(Duration::from_millis(200));
        }
        serve.signal(Signal::SIGKILL);
        drop(serve);
        if round == 0 {
            // Down long enough that slots pass while nobody fires them.
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    let mut serve = env.serve(&["--workers", "2"]);
    std::thread::sleep(Duration::from_millis(1500));
    serve.signal(Signal::SIGTERM);
    serve.wait();

    let slots = slots(env);
    let mut times: Vec<i64> = slots
        .iter()
        .map(|s| chrono_millis(s["slot"].as_str().unwrap()))
        .collect();
    times.sort_unstable();
    let unique: HashSet<i64> = times.iter().copied().collect();
    assert_eq!(unique.len(), times.len(), "a slot was recorded twice");
    let (first, last) = (times[0], *times.last().unwrap());
    let expected: HashSet<i64> = (0..=(last - first) / 1000)
        .map(|i| first + i * 1000)
        .collect();
    assert_eq!(
        unique, expected,
        "a second between the first and last slot has no slot"
    );
    for slot in &slots {
        assert_eq!(slot["status"], "fired", "{slot}");
        assert_eq!(slot["tasks"].as_array().unwrap().len(), 1, "{slot}");
    }
    let tasks = env.tasks();
    assert_eq!(tasks.len(), slots.len(), "one task per slot");
}

fn chrono_millis(rfc3339: &str) -> i64 {
    orchestrator_types::parse_time(rfc3339, 0).unwrap()
}

#[test]
fn killed_serve_neither_loses_nor_repeats_a_slot_sqlite() {
    killed_serve_neither_loses_nor_repeats_a_slot(&Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_serve_neither_loses_nor_repeats_a_slot_postgres() {
    if let Some(env) = Env::postgres().await {
        tokio::task::spawn_blocking(move || killed_serve_neither_loses_nor_repeats_a_slot(&env))
            .await
            .unwrap();
    }
}

/// `serve --schedules DIR` applies the files at start: a broken file is reported in the log and the
/// others fire.
#[test]
fn serve_applies_its_schedules_directory_at_start() {
    let env = Env::sqlite();
    let dir = tempfile::tempdir().unwrap();
    let ws = env.workspace().display().to_string();
    std::fs::write(
        dir.path().join("tick.toml"),
        format!(
            "schedule = \"* * * * * *\"\nworkspaces = [{ws:?}]\noverlap = \"allow\"\n[task]\ngates = [\"true\"]\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("broken.toml"),
        "schedule = \"0 3 * * *\"\nwat",
    )
    .unwrap();
    let d = dir.path().display().to_string();
    let mut serve = env.serve(&["--schedules", &d]);
    crate::support::wait_for(|| {
        env.json(&["automation", "read", "tick", "--json"])["slots"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    });
    serve.signal(Signal::SIGTERM);
    serve.wait();
    let log = serve.log();
    assert!(log.contains("broken.toml"), "{log}");
    assert!(log.contains("1 created"), "{log}");
    let list = env.json(&["automation", "list", "--json"]);
    assert_eq!(list[0]["source"], "file");
}

/// A person's pause of a file's automation outlasts `serve`'s start, which says so; and a second
/// `serve` that cannot have its port writes nothing before it fails (its schedules are not applied).
#[test]
fn a_persons_pause_outlasts_serve_and_a_serve_that_fails_writes_nothing() {
    let stderr = |out: &std::process::Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let env = Env::sqlite();
    let dir = tempfile::tempdir().unwrap();
    let ws = env.workspace().display().to_string();
    let file = |name: &str| {
        std::fs::write(
            dir.path().join(format!("{name}.toml")),
            format!(
                "schedule = \"0 3 * * *\"\nworkspaces = [{ws:?}]\n[task]\ngates = [\"true\"]\n"
            ),
        )
        .unwrap();
    };
    file("nightly");
    let d = dir.path().display().to_string();
    let out = env.run(&["automation", "apply", &d]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = env.run(&["automation", "pause", "nightly"]);
    assert!(out.status.success(), "{}", stderr(&out));

    let mut serve = env.serve(&["--schedules", &d]);
    crate::support::wait_for(|| serve.log().contains("schedules in"));
    let read = env.json(&["automation", "read", "nightly", "--json"]);
    assert_eq!(read["status"], "paused", "{}", serve.log());
    assert_eq!(read["status_note"], "paused from the command line");
    assert!(
        serve.log().contains("kept: nightly: paused by a person"),
        "{}",
        serve.log()
    );

    // A second daemon on the same address fails, and applies nothing first.
    file("weekly");
    let taken = serve.addr.clone();
    let out = env.run(&["serve", "--listen", &taken, "--schedules", &d]);
    assert!(!out.status.success(), "the port is taken");
    assert!(
        stderr(&out).contains("cannot listen on"),
        "{}",
        stderr(&out)
    );
    let list = env.json(&["automation", "list", "--json"]);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nightly"], "nothing written by the failed start");
    serve.signal(Signal::SIGTERM);
    serve.wait();
}
