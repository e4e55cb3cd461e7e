//! A gate's log over the API and the log view: read by offset while it runs, followed as
//! Server-Sent Events until it ends with its verdict, and shown with line numbers and colours.

use crate::live::{Stream, data};
use crate::pages::Browser;
use crate::{Api, code};
use orchestrator_store::{GateRun, LiveLogStart, live_source};
use orchestrator_types::{
    Captured, GateEvidence, GateSummary, NewTask, TaskId, Verdict, now_millis,
};

async fn running_gate(
    api: &Api,
    gate: &str,
) -> (TaskId, orchestrator_store::Task, orchestrator_store::Lease) {
    let mut new = NewTask::new("watched").with_gate(gate);
    new.workspace = Some(api.ws.clone());
    let id = api.store.create_task(&new).await.unwrap();
    let (task, lease) = api
        .store
        .claim_task("web-test", id, 60_000)
        .await
        .unwrap()
        .unwrap();
    (id, task, lease)
}

fn evidence(verdict: Verdict, failing: &[&str]) -> GateEvidence {
    GateEvidence {
        verdict,
        failure_kind: None,
        exit_code: Some(if verdict == Verdict::Passed { 0 } else { 101 }),
        signal: None,
        duration_ms: 1200,
        summary: GateSummary {
            text: "2 passed, 1 failed (cargo-test)".into(),
            failing_tests: failing.iter().map(|t| (*t).to_owned()).collect(),
            ..GateSummary::default()
        },
        git: None,
        byproducts: Default::default(),
        started_at: now_millis(),
        finished_at: now_millis(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_gate_is_read_by_offset_and_followed_until_its_verdict() {
    let api = Api::start(false).await;
    let (id, task, lease) = running_gate(&api, "slow").await;
    let log = api
        .store
        .live_log_start(&LiveLogStart {
            lease: &lease,
            source: live_source::GATE,
            key: 0,
            attempt: task.attempt,
            name: "slow",
            head_cap: 1 << 20,
            tail_cap: 1 << 20,
        })
        .await
        .unwrap();
    let path = format!("/api/v1/tasks/{}/gates/0/log", id.0);
    let (status, empty) = api.get(&path).await;
    assert_eq!(status, 200, "{empty}");
    assert_eq!(
        (empty["state"].as_str(), empty["text"].as_str()),
        (Some("running"), Some(""))
    );

    // A follower joins, then lines arrive one by one while the gate runs.
    let mut stream = Stream::open_at(&api.client, &api.base, &format!("{path}/stream"), None).await;
    let mut offset = 0u64;
    for n in 1..=3 {
        let line = format!("line {n}\n");
        assert!(
            api.store
                .live_log_append(
                    &log,
                    &[(offset, line.as_bytes())],
                    offset + line.len() as u64
                )
                .await
                .unwrap()
        );
        offset += line.len() as u64;
        let event = stream.next().await;
        assert_eq!(event.1, "log", "{event:?}");
        let piece = data(&event);
        assert_eq!(piece["text"], line.as_str());
        assert_eq!(piece["state"], "running");
        assert_eq!(
            event.0.as_deref(),
            Some(offset.to_string().as_str()),
            "the id is the offset"
        );
    }
    // A read from an offset gives what follows it.
    let (_, after) = api.get(&format!("{path}?after=7")).await;
    assert_eq!(after["text"], "line 2\nline 3\n");
    assert_eq!(after["next"], offset);

    // The gate ends: the recorded log replaces the live one; the follower gets the rest and the
    // verdict, and the stream closes.
    let whole = b"line 1\nline 2\nline 3\n\x1b[31mtest b ... FAILED\x1b[0m\n";
    api.store
        .record_gate(&GateRun {
            lease: &lease,
            attempt: task.attempt,
            position: 0,
            spec: &task.gates[0],
            evidence: &evidence(Verdict::Failed, &["test b"]),
            log: &Captured::from_bytes(whole, 1 << 20),
        })
        .await
        .unwrap();
    let rest = stream.next().await;
    assert_eq!(rest.1, "log");
    assert_eq!(
        data(&rest)["text"],
        "\u{1b}[31mtest b ... FAILED\u{1b}[0m\n"
    );
    let end = stream.next().await;
    assert_eq!(end.1, "end", "{end:?}");
    let end = data(&end);
    assert_eq!(end["verdict"], "failed");
    assert_eq!(end["state"], "finished");
    assert_eq!(end["first_failure"], "test b");
    assert!(end.get("text").is_none(), "{end}");

    // A reconnection after the end, with the last offset, gets the end at once.
    let mut again = Stream::open_at(
        &api.client,
        &api.base,
        &format!("{path}/stream"),
        Some(&whole.len().to_string()),
    )
    .await;
    assert_eq!(again.next().await.1, "end");

    let (status, finished) = api.get(&path).await;
    assert_eq!(status, 200);
    assert_eq!(finished["text"], String::from_utf8_lossy(whole).as_ref());
    assert!(finished["log_artifact"].as_i64().is_some());

    // Bad addresses are named.
    let (status, body) = api
        .get(&format!("/api/v1/tasks/{}/gates/5/log", id.0))
        .await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");
    let (status, body) = api
        .get(&format!("/api/v1/tasks/{}/gates/x/log", id.0))
        .await;
    assert_eq!((status, code(&body)), (400, "bad_request"), "{body}");
    let (status, _) = api.get("/api/v1/tasks/999/gates/0/log").await;
    assert_eq!(status, 404);
    assert_eq!(
        api.stream_status("/api/v1/tasks/999/gates/0/log/stream", None)
            .await,
        404
    );
    let (status, body) = api.get(&format!("/api/v1/tasks/{}/jobs/3/log", id.0)).await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_view_numbers_lines_colours_them_and_links_the_first_failure() {
    let api = Api::start(false).await;
    let (id, task, lease) = running_gate(&api, "cargo test").await;
    let whole =
        b"running 3 tests\ntest a ... ok\n\x1b[31mtest b ... FAILED\x1b[0m\n<b>not markup</b>\n";
    api.store
        .record_gate(&GateRun {
            lease: &lease,
            attempt: task.attempt,
            position: 0,
            spec: &task.gates[0],
            evidence: &evidence(Verdict::Failed, &["test b"]),
            log: &Captured::from_bytes(whole, 1 << 20),
        })
        .await
        .unwrap();
    let browser = Browser::login(&api).await;
    let (status, page, _) = browser.get(&format!("/tasks/{}/gates/0/log", id.0)).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(r##"<a class="ln" href="#L3">3</a>"##),
        "{page}"
    );
    assert!(
        page.contains(r#"<span class="fg-1">test b ... FAILED</span>"#),
        "{page}"
    );
    assert!(page.contains("&lt;b&gt;not markup&lt;/b&gt;"), "{page}");
    assert!(page.contains(r##"data-log-failure href="#L3""##), "{page}");
    assert!(page.contains("data-log-search"), "{page}");
    assert!(
        page.contains("?download=1"),
        "the raw download stays: {page}"
    );
    // The task page links each gate to its log view.
    let (_, task_page, _) = browser.get(&format!("/tasks/{}", id.0)).await;
    assert!(
        task_page.contains(&format!("/tasks/{}/gates/0/log", id.0)),
        "{task_page}"
    );
    // An unknown gate is a page that says so.
    let (status, _, _) = browser.get(&format!("/tasks/{}/gates/9/log", id.0)).await;
    assert_eq!(status, 404);
}

/// An agent task: claimed, with a shell job and a terminal session that print.
async fn agent_with_commands(
    api: &Api,
) -> (
    TaskId,
    orchestrator_store::Task,
    orchestrator_store::Lease,
    i64,
) {
    let mut new = NewTask::agent("works", "build it");
    new.workspace = Some(api.ws.clone());
    let id = api.store.create_task(&new).await.unwrap();
    let (task, lease) = api
        .store
        .claim_task("web-test", id, 60_000)
        .await
        .unwrap()
        .unwrap();
    let job = api
        .store
        .shell_job_started(&lease, "web-test", "make all", ".")
        .await
        .unwrap();
    (id, task, lease, job)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_is_followed_like_a_gate_and_listed_with_the_jobs_on_the_task_page() {
    let api = Api::start(false).await;
    let (id, task, lease, job) = agent_with_commands(&api).await;
    let start = |source, key, name| LiveLogStart {
        lease: &lease,
        source,
        key,
        attempt: task.attempt,
        name,
        head_cap: 1 << 20,
        tail_cap: 1 << 20,
    };
    let job_log = api
        .store
        .live_log_start(&start(live_source::SHELL_JOB, job, "make all"))
        .await
        .unwrap();
    api.store
        .live_log_append(&job_log, &[(0, b"cc main.c\n")], 10)
        .await
        .unwrap();
    let pty = api
        .store
        .live_log_start(&start(live_source::TERMINAL, 1, "python3 -q"))
        .await
        .unwrap();
    let drawn = b">>> \x1b[1;32m42\x1b[0m\x1b[2K\r\n<b>\r\n";
    api.store
        .live_log_append(&pty, &[(0, drawn)], drawn.len() as u64)
        .await
        .unwrap();

    // Read by offset, as `pty-1` or `1`, with escape sequences as drawn.
    let path = format!("/api/v1/tasks/{}/terminals/pty-1/log", id.0);
    let (status, read) = api.get(&path).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(
        (
            read["kind"].as_str(),
            read["terminal"].as_str(),
            read["state"].as_str()
        ),
        (Some("terminal"), Some("pty-1"), Some("running"))
    );
    assert_eq!(read["text"], String::from_utf8_lossy(drawn).as_ref());
    let (_, same) = api
        .get(&format!("/api/v1/tasks/{}/terminals/1/log?after=4", id.0))
        .await;
    assert_eq!(same["from"], 4);
    let (status, body) = api
        .get(&format!("/api/v1/tasks/{}/terminals/pty-2/log", id.0))
        .await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");
    let (status, body) = api
        .get(&format!("/api/v1/tasks/{}/terminals/tty/log", id.0))
        .await;
    assert_eq!((status, code(&body)), (400, "bad_request"), "{body}");
    let (status, body) = api
        .get(&format!("/api/v1/tasks/{}/windows/1/log", id.0))
        .await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");

    // The list names both, running, with where to follow them.
    let (status, list) = api.get(&format!("/api/v1/tasks/{}/logs", id.0)).await;
    assert_eq!(status, 200, "{list}");
    let logs = list["logs"].as_array().unwrap();
    let terminal = logs.iter().find(|l| l["kind"] == "terminal").unwrap();
    assert_eq!(terminal["key"], "pty-1");
    assert_eq!(terminal["state"], "running");
    assert_eq!(
        terminal["stream"],
        format!("/api/v1/tasks/{}/terminals/pty-1/log/stream", id.0)
    );
    let listed_job = logs.iter().find(|l| l["kind"] == "shell_job").unwrap();
    assert_eq!(
        (listed_job["key"].as_i64(), listed_job["state"].as_str()),
        (Some(job), Some("running"))
    );

    // The task page lists the job and the terminal, with a live panel each and a log view link.
    let browser = Browser::login(&api).await;
    let (_, page, _) = browser.get(&format!("/tasks/{}", id.0)).await;
    for path in [format!("jobs/{job}"), "terminals/pty-1".to_owned()] {
        assert!(
            page.contains(&format!(r#"data-log-panel="{path}""#)),
            "a live panel for {path}: {page}"
        );
        assert!(
            page.contains(&format!(r#"href="/tasks/{}/{path}/log""#, id.0)),
            "a link to {path}'s log view: {page}"
        );
        assert!(
            page.contains(&format!(
                r#"data-stream="/api/v1/tasks/{}/{path}/log/stream""#,
                id.0
            )),
            "{page}"
        );
    }
    assert!(page.contains("<code>make all</code>") && page.contains("<code>python3 -q</code>"));

    // The log view shows the terminal's colours as classes, its text escaped, its cursor moves
    // and carriage returns gone.
    let (status, view, _) = browser
        .get(&format!("/tasks/{}/terminals/pty-1/log", id.0))
        .await;
    assert_eq!(status, 200, "{view}");
    assert!(view.contains("terminal pty-1"), "{view}");
    assert!(
        view.contains(r#"<span class="fg-2 b">42</span>"#),
        "colours as classes: {view}"
    );
    assert!(view.contains("&lt;b&gt;"), "text escaped: {view}");
    assert!(
        !view.contains("\\x1b") && !view.contains("\\x0d"),
        "no escape sequence or carriage return is left: {view}"
    );
    assert!(view.contains(r#"data-terminal="true""#), "{view}");

    // A follower joins; the program exits: the rest, then the end with its exit.
    let mut stream = Stream::open_at(
        &api.client,
        &api.base,
        &format!("{path}/stream"),
        Some(&drawn.len().to_string()),
    )
    .await;
    let total = drawn.len() as u64 + 4;
    assert!(
        api.store
            .live_log_end(
                &pty,
                &[(drawn.len() as u64, b">>> ")],
                total,
                "the program ended: exit code 0 after 1.0 s",
                Some(0)
            )
            .await
            .unwrap()
    );
    let rest = stream.next().await;
    assert_eq!(
        (rest.1.as_str(), data(&rest)["text"].as_str()),
        ("log", Some(">>> "))
    );
    let end = stream.next().await;
    assert_eq!(end.1, "end", "{end:?}");
    let end = data(&end);
    assert_eq!(
        (end["state"].as_str(), end["exit_code"].as_i64()),
        (Some("finished"), Some(0))
    );
    assert_eq!(
        end["end_reason"],
        "the program ended: exit code 0 after 1.0 s"
    );

    // The job ends: its record replaces its live log; the job's log view says how it ended.
    api.store
        .shell_job_finished(
            job,
            id,
            orchestrator_store::job_status::EXITED,
            Some(2),
            "failed (exit 2)",
            &Captured::from_bytes(b"cc main.c\nerror\n", 1 << 20),
        )
        .await
        .unwrap();
    let (_, job_read) = api
        .get(&format!("/api/v1/tasks/{}/jobs/{job}/log", id.0))
        .await;
    assert_eq!(
        (
            job_read["state"].as_str(),
            job_read["job_status"].as_str(),
            job_read["exit_code"].as_i64()
        ),
        (Some("finished"), Some("exited"), Some(2))
    );
    let (_, view, _) = browser
        .get(&format!("/tasks/{}/jobs/{job}/log", id.0))
        .await;
    assert!(view.contains(r#"data-job-status="exited""#), "{view}");
    assert!(view.contains("error"), "{view}");
    let (_, page, _) = browser.get(&format!("/tasks/{}", id.0)).await;
    assert!(
        !page.contains("data-log-panel=\"jobs/") && !page.contains("data-log-panel=\"terminals/"),
        "no panel for what ended: {page}"
    );
    assert!(page.contains(r#"data-log-state="finished""#), "{page}");
}

/// A background job of exec_shell (`job-N`) is read, followed, listed and shown like a terminal,
/// as plain output (no screen to redraw), and ends with its program's exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_job_is_followed_like_a_terminal_and_listed_on_the_task_page() {
    let api = Api::start(false).await;
    let (id, task, lease, _job) = agent_with_commands(&api).await;
    let log = api
        .store
        .live_log_start(&LiveLogStart {
            lease: &lease,
            source: live_source::BACKGROUND_JOB,
            key: 2,
            attempt: task.attempt,
            name: "npm run dev",
            head_cap: 1 << 20,
            tail_cap: 1 << 20,
        })
        .await
        .unwrap();
    let printed = b"ready on :3000\n";
    api.store
        .live_log_append(&log, &[(0, printed)], printed.len() as u64)
        .await
        .unwrap();

    let path = format!("/api/v1/tasks/{}/background-jobs/job-2/log", id.0);
    let (status, read) = api.get(&path).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(
        (
            read["kind"].as_str(),
            read["background_job"].as_str(),
            read["command"].as_str(),
            read["state"].as_str(),
            read["text"].as_str()
        ),
        (
            Some("background_job"),
            Some("job-2"),
            Some("npm run dev"),
            Some("running"),
            Some("ready on :3000\n")
        )
    );
    let (_, same) = api
        .get(&format!(
            "/api/v1/tasks/{}/background-jobs/2/log?after=6",
            id.0
        ))
        .await;
    assert_eq!(same["text"], "on :3000\n");
    let (status, body) = api
        .get(&format!("/api/v1/tasks/{}/background-jobs/job-3/log", id.0))
        .await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");
    let (status, body) = api
        .get(&format!("/api/v1/tasks/{}/background-jobs/pty-2/log", id.0))
        .await;
    assert_eq!((status, code(&body)), (400, "bad_request"), "{body}");

    let (_, list) = api.get(&format!("/api/v1/tasks/{}/logs", id.0)).await;
    let entry = list["logs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["kind"] == "background_job")
        .unwrap_or_else(|| panic!("listed: {list}"));
    assert_eq!(
        (entry["key"].as_str(), entry["state"].as_str()),
        (Some("job-2"), Some("running"))
    );
    assert_eq!(entry["stream"], format!("{path}/stream"));
    assert_eq!(
        entry["page"],
        format!("/tasks/{}/background-jobs/job-2/log", id.0)
    );

    // The task page: a live panel and a link; the log view, without a terminal's redrawing.
    let browser = Browser::login(&api).await;
    let (_, page, _) = browser.get(&format!("/tasks/{}", id.0)).await;
    assert!(
        page.contains(r#"data-log-panel="background-jobs/job-2""#),
        "a live panel: {page}"
    );
    assert!(
        page.contains(&format!(
            r#"href="/tasks/{}/background-jobs/job-2/log""#,
            id.0
        )),
        "{page}"
    );
    assert!(page.contains("Background job"), "{page}");
    let (status, view, _) = browser
        .get(&format!("/tasks/{}/background-jobs/job-2/log", id.0))
        .await;
    assert_eq!(status, 200, "{view}");
    assert!(view.contains("background job job-2"), "{view}");
    assert!(!view.contains(r#"data-terminal="true""#), "{view}");

    // A follower joins; the program exits 1: the rest, then the end with its exit.
    let mut stream = Stream::open_at(
        &api.client,
        &api.base,
        &format!("{path}/stream"),
        Some(&printed.len().to_string()),
    )
    .await;
    let total = printed.len() as u64 + 5;
    assert!(
        api.store
            .live_log_end(
                &log,
                &[(printed.len() as u64, b"oops\n")],
                total,
                "the program ended: exit code 1 after 2.0 s",
                Some(1)
            )
            .await
            .unwrap()
    );
    let rest = stream.next().await;
    assert_eq!(
        (rest.1.as_str(), data(&rest)["text"].as_str()),
        ("log", Some("oops\n"))
    );
    let end = stream.next().await;
    assert_eq!(end.1, "end", "{end:?}");
    let end = data(&end);
    assert_eq!(
        (end["state"].as_str(), end["exit_code"].as_i64()),
        (Some("finished"), Some(1))
    );
    let (_, page, _) = browser.get(&format!("/tasks/{}", id.0)).await;
    assert!(
        !page.contains(r#"data-log-panel="background-jobs/"#),
        "no panel for what ended: {page}"
    );

    // The OpenAPI document has both paths.
    let (_, doc) = api.get("/api/v1/openapi.json").await;
    for path in [
        "/api/v1/tasks/{id}/background-jobs/{background_job}/log",
        "/api/v1/tasks/{id}/background-jobs/{background_job}/log/stream",
    ] {
        assert!(
            doc["paths"][path]["get"].is_object(),
            "{path} in the document"
        );
    }
}
