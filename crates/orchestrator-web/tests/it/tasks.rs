//! Tasks over the API: keyset pages and filters, create, read, cancel, retry, bulk actions, and the
//! live event stream.

use crate::{Api, TOKEN, code, sse_events};
use orchestrator_store::SOURCE_CLI;
use orchestrator_types::{AutomationSpec, now_millis};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_listed_a_page_at_a_time_with_filters() {
    let api = Api::start(false).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(api.task(&format!("Task {i} of the parser")).await);
    }
    let other = api.task("unrelated").await;
    // Three at a time, newest first, every task once.
    let mut seen = Vec::new();
    let mut path = "/api/v1/tasks?limit=3".to_owned();
    loop {
        let (status, page) = api.get(&path).await;
        assert_eq!(status, 200, "{page}");
        let tasks = page["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 3);
        seen.extend(tasks.iter().map(|t| t["id"].as_i64().unwrap()));
        match page["next_before"].as_i64() {
            Some(before) => path = format!("/api/v1/tasks?limit=3&before={before}"),
            None => break,
        }
    }
    let mut expected: Vec<i64> = ids.iter().chain([&other]).copied().collect();
    expected.reverse();
    assert_eq!(seen, expected);

    let (_, found) = api.get("/api/v1/tasks?q=PARSER&limit=50").await;
    assert_eq!(found["tasks"].as_array().unwrap().len(), 7, "{found}");
    api.store
        .cancel_task(orchestrator_types::TaskId(ids[2]))
        .await
        .unwrap();
    let (_, canceled) = api.get("/api/v1/tasks?state=canceled").await;
    let canceled: Vec<i64> = canceled["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    assert_eq!(canceled, [ids[2]]);
    let (_, counts) = api.get("/api/v1/counts").await;
    assert_eq!(counts["counts"]["queued"], 7);
    assert_eq!(counts["counts"]["canceled"], 1);

    // An automation's tasks.
    let mut spec = AutomationSpec::new("nightly", "0 3 * * *");
    spec.workspaces = vec![api.ws.clone()];
    spec.template.gates = vec![orchestrator_types::GateSpec::from_command("true")];
    let automation =
        orchestrator_scheduler::manage::create(&api.store, &spec, SOURCE_CLI, now_millis())
            .await
            .unwrap();
    orchestrator_scheduler::run_now(&api.store, &automation, false, "test", now_millis())
        .await
        .unwrap();
    let (_, mine) = api.get("/api/v1/tasks?automation=nightly").await;
    let mine = mine["tasks"].as_array().unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["automation_id"], automation.id);

    for (path, status, expected) in [
        ("/api/v1/tasks?state=sleeping", 400, "bad_request"),
        ("/api/v1/tasks?limit=ten", 400, "bad_request"),
        ("/api/v1/tasks?colour=red", 400, "bad_request"),
        ("/api/v1/tasks?automation=weekly", 404, "not_found"),
        ("/api/v1/tasks/0", 400, "bad_request"),
        ("/api/v1/tasks/99999", 404, "not_found"),
        ("/api/v1/tasks/99999/events", 404, "not_found"),
    ] {
        let (got, body) = api.get(path).await;
        assert_eq!((got, code(&body)), (status, expected), "{path}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_created_read_canceled_and_retried() {
    let api = Api::start(false).await;
    let body = json!({"title": "from the api", "gates": ["true", {"command": "echo hi", "name": "hello"}], "workspace": api.ws, "priority": 3}).to_string();
    let (status, created) = api.post("/api/v1/tasks", &body).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_i64().unwrap();
    assert_eq!(created["state"], "queued");
    assert_eq!(created["gates"][1]["name"], "hello");
    let (_, read) = api.get(&format!("/api/v1/tasks/{id}")).await;
    assert_eq!(read["title"], "from the api");
    assert_eq!(read["priority"], 3);
    let (_, events) = api.get(&format!("/api/v1/tasks/{id}/events")).await;
    assert_eq!(events["events"][0]["kind"], "created", "{events}");
    assert_eq!(events["next_after"], 1);
    let (_, later) = api.get(&format!("/api/v1/tasks/{id}/events?after=1")).await;
    assert_eq!(later["events"], json!([]));

    let (status, retried) = api.post(&format!("/api/v1/tasks/{id}/retry"), "").await;
    assert_eq!(
        (status, code(&retried)),
        (409, "conflict"),
        "a queued task is not retried: {retried}"
    );
    let (status, canceled) = api.post(&format!("/api/v1/tasks/{id}/cancel"), "").await;
    assert_eq!(status, 200, "{canceled}");
    assert_eq!(canceled["outcome"], "canceled");
    assert_eq!(canceled["task"]["state"], "canceled");
    let (_, again) = api.post(&format!("/api/v1/tasks/{id}/cancel"), "").await;
    assert_eq!(again["outcome"], "already_canceled");
    let (status, retried) = api.post(&format!("/api/v1/tasks/{id}/retry"), "").await;
    assert_eq!(status, 200, "{retried}");
    assert_eq!(retried["state"], "queued");

    let before = api.store.count_by_state().await.unwrap();
    for (body, status, expected) in [
        ("{not json".to_owned(), 400, "bad_request"),
        (
            json!({"workspace": api.ws}).to_string(),
            422,
            "unprocessable",
        ),
        (
            json!({"title": "t", "workspace": "relative/dir"}).to_string(),
            422,
            "unprocessable",
        ),
        (
            json!({"title": "t", "workspace": "/nonexistent/dir"}).to_string(),
            422,
            "unprocessable",
        ),
        (
            json!({"title": "t", "workspace": api.ws, "colour": "red"}).to_string(),
            422,
            "unprocessable",
        ),
        (
            json!({"title": "  ", "workspace": api.ws}).to_string(),
            422,
            "unprocessable",
        ),
        (
            json!({"title": "t", "workspace": api.ws, "max_attempts": 0}).to_string(),
            422,
            "unprocessable",
        ),
    ] {
        let (got, answer) = api.post("/api/v1/tasks", &body).await;
        assert_eq!((got, code(&answer)), (status, expected), "{body}: {answer}");
    }
    assert_eq!(
        api.store.count_by_state().await.unwrap(),
        before,
        "a refused create stores nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_events_stream_live_end_with_the_task_and_resume_from_last_event_id() {
    let api = Api::start(false).await;
    let id = api.task("streamed").await;
    let url = format!("{}/api/v1/tasks/{id}/events/stream", api.base);
    let response = api
        .client
        .get(&url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = Box::pin(response.bytes_stream());
    let mut buffer = String::new();
    let first = sse_events(&mut body, &mut buffer, 1).await;
    assert_eq!(first[0].0.as_deref(), Some("1"));
    assert_eq!(first[0].1, "created");
    let data: Value = serde_json::from_str(&first[0].2).unwrap();
    assert_eq!(data["seq"], 1);

    // Written after the stream opened: it arrives live, then the end.
    let (_, lease) = api
        .store
        .claim_task("stream-test", orchestrator_types::TaskId(id), 60_000)
        .await
        .unwrap()
        .unwrap();
    let live = sse_events(&mut body, &mut buffer, 1).await;
    assert_eq!(
        (live[0].0.as_deref(), live[0].1.as_str()),
        (Some("2"), "claimed")
    );
    api.store
        .complete(&[orchestrator_store::Completion {
            lease,
            outcome: orchestrator_store::Outcome::Succeeded,
            details: json!({}),
        }])
        .await
        .unwrap();
    let rest = sse_events(&mut body, &mut buffer, 10).await;
    let names: Vec<&str> = rest.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(names, ["succeeded", "end"], "{rest:?}");
    assert_eq!(rest[1].2, "succeeded");

    // A client that reconnects with the last id it got resumes right after it.
    let response = api
        .client
        .get(&url)
        .bearer_auth(TOKEN)
        .header("Last-Event-ID", "1")
        .send()
        .await
        .unwrap();
    let mut body = Box::pin(response.bytes_stream());
    let mut buffer = String::new();
    let resumed = sse_events(&mut body, &mut buffer, 10).await;
    let ids: Vec<Option<&str>> = resumed.iter().map(|e| e.0.as_deref()).collect();
    assert_eq!(ids, [Some("2"), Some("3"), None], "{resumed:?}");

    for (path, header, status) in [
        (format!("/api/v1/tasks/{id}/events/stream"), Some("x"), 400),
        ("/api/v1/tasks/99999/events/stream".to_owned(), None, 404),
    ] {
        assert_eq!(api.stream_status(&path, header).await, status, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_actions_preview_then_change_only_what_the_filter_matches() {
    let api = Api::start(false).await;
    let mut flaky = Vec::new();
    for i in 0..5 {
        flaky.push(api.task(&format!("flaky {i}")).await);
    }
    let steady = api.task("steady").await;
    let (status, refused) = api
        .post("/api/v1/tasks/bulk", r#"{"action": "cancel"}"#)
        .await;
    assert_eq!(
        (status, code(&refused)),
        (422, "unprocessable"),
        "no filter, no bulk: {refused}"
    );
    let (status, preview) = api
        .post(
            "/api/v1/tasks/bulk",
            r#"{"action": "cancel", "q": "flaky", "preview": true}"#,
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        (preview["matched"].as_u64(), preview["changed"].as_u64()),
        (Some(5), Some(0))
    );
    assert_eq!(
        api.store
            .count_by_state()
            .await
            .unwrap()
            .iter()
            .find(|(s, _)| s.as_str() == "canceled")
            .unwrap()
            .1,
        0,
        "a preview changes nothing"
    );
    let (_, done) = api
        .post(
            "/api/v1/tasks/bulk",
            r#"{"action": "cancel", "q": "flaky"}"#,
        )
        .await;
    assert_eq!(done["changed"], 5, "{done}");
    for id in &flaky {
        assert_eq!(
            api.store
                .get_task(orchestrator_types::TaskId(*id))
                .await
                .unwrap()
                .state
                .as_str(),
            "canceled"
        );
    }
    assert_eq!(
        api.store
            .get_task(orchestrator_types::TaskId(steady))
            .await
            .unwrap()
            .state
            .as_str(),
        "queued"
    );
    let (_, retried) = api
        .post(
            "/api/v1/tasks/bulk",
            r#"{"action": "retry", "state": "canceled"}"#,
        )
        .await;
    assert_eq!(retried["changed"], 5, "{retried}");
    let (status, bad) = api
        .post("/api/v1/tasks/bulk", r#"{"action": "explode", "q": "x"}"#)
        .await;
    assert_eq!((status, code(&bad)), (422, "unprocessable"), "{bad}");
}

/// The repository and gate verdict filters, in the list and in a bulk preview, and an agent's
/// turns with their tool calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_filtered_by_repository_and_verdict_and_their_turns_are_read() {
    use orchestrator_store::{GateRun, NewMessage, ToolCallEnd, call_status};
    use orchestrator_types::{
        ChatMessage, EventKind, GateEvidence, GateSummary, NewTask, Role, ToolCallRequest, Usage,
        Verdict,
    };
    let api = Api::start(false).await;
    let mut agent = NewTask::agent("agent on a clone", "read a");
    agent.workspace = Some(api.ws.clone());
    agent.worktree_of = Some("/src/project".into());
    agent.gates = vec![orchestrator_types::GateSpec::from_command("cargo test")];
    let agent = api.store.create_task(&agent).await.unwrap();
    let plain = api.task("plain").await;
    let ids = |page: &Value| -> Vec<i64> {
        page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_i64().unwrap())
            .collect()
    };
    let (_, found) = api.get("/api/v1/tasks?repository=/src/project").await;
    assert_eq!(ids(&found), [agent.0], "{found}");
    let (_, found) = api
        .get(&format!("/api/v1/tasks?repository={}", api.ws))
        .await;
    assert_eq!(ids(&found), [plain], "{found}");

    let (_, lease) = api
        .store
        .claim_task("web-test", agent, 60_000)
        .await
        .unwrap()
        .unwrap();
    let reply = ChatMessage {
        role: Role::Assistant,
        content: Some("Reading a first.".into()),
        tool_calls: vec![ToolCallRequest {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"a"}"#.into(),
        }],
        tool_call_id: None,
        images: Vec::new(),
    };
    api.store
        .append_messages(
            &lease,
            1,
            &[
                NewMessage {
                    turn: 0,
                    message: ChatMessage::user("read a"),
                    usage: None,
                    model_ms: None,
                },
                NewMessage {
                    turn: 1,
                    message: reply,
                    usage: Some(Usage {
                        prompt_tokens: 120,
                        completion_tokens: 8,
                        total_tokens: 128,
                        cached_tokens: 0,
                    }),
                    model_ms: Some(42),
                },
            ],
            (EventKind::Message, json!({"role": "assistant"})),
        )
        .await
        .unwrap();
    api.store
        .tool_call_started(&lease, 1, 1, 0, "c1", "read_file", r#"{"path":"a"}"#)
        .await
        .unwrap();
    api.store
        .tool_call_finished(
            &lease,
            1,
            &ToolCallEnd {
                call_id: "c1".into(),
                turn: 1,
                status: call_status::SUCCEEDED,
                summary: "3 lines".into(),
                artifact_id: None,
                duration_ms: 4,
                message: ChatMessage::tool("c1", "one\ntwo\nthree"),
                usage: None,
                event: json!({"call_id": "c1"}),
                unrecorded_start: None,
            },
        )
        .await
        .unwrap();
    let task = api.store.get_task(agent).await.unwrap();
    api.store
        .record_gate(&GateRun {
            lease: &lease,
            attempt: task.attempt,
            position: 0,
            spec: &task.gates[0],
            evidence: &GateEvidence {
                verdict: Verdict::TimedOut,
                failure_kind: None,
                exit_code: None,
                signal: None,
                duration_ms: 60_000,
                summary: GateSummary::default(),
                git: None,
                byproducts: Default::default(),
                started_at: now_millis() - 60_000,
                finished_at: now_millis(),
            },
            log: &orchestrator_types::Captured::from_bytes(b"...", 1024),
        })
        .await
        .unwrap();

    let (_, timed_out) = api.get("/api/v1/tasks?verdict=timed_out").await;
    assert_eq!(ids(&timed_out), [agent.0], "{timed_out}");
    let (_, passed) = api.get("/api/v1/tasks?verdict=passed").await;
    assert_eq!(ids(&passed), Vec::<i64>::new());
    let (status, bad) = api.get("/api/v1/tasks?verdict=green").await;
    assert_eq!((status, code(&bad)), (400, "bad_request"), "{bad}");
    let (status, preview) = api
        .post(
            "/api/v1/tasks/bulk",
            r#"{"action": "cancel", "preview": true, "verdict": "timed_out"}"#,
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["ids"], json!([agent.0]));
    let (status, bad) = api
        .post(
            "/api/v1/tasks/bulk",
            r#"{"action": "cancel", "preview": true, "verdict": "green"}"#,
        )
        .await;
    assert_eq!((status, code(&bad)), (422, "unprocessable"), "{bad}");

    let (status, turns) = api.get(&format!("/api/v1/tasks/{}/turns", agent.0)).await;
    assert_eq!(status, 200, "{turns}");
    assert_eq!(
        turns["total"], 1,
        "a person's message is not a turn: {turns}"
    );
    let turn = &turns["turns"][0];
    assert_eq!(turn["turn"], 1);
    assert_eq!(turn["text"], "Reading a first.");
    assert_eq!(turn["usage"]["prompt_tokens"], 120);
    assert_eq!(turn["model_ms"], 42);
    assert_eq!(turn["tool_calls"][0]["name"], "read_file");
    assert_eq!(turn["tool_calls"][0]["status"], "succeeded");
    assert_eq!(turn["tool_calls"][0]["summary"], "3 lines");
    let (_, none) = api
        .get(&format!("/api/v1/tasks/{}/turns?last=0", agent.0))
        .await;
    assert_eq!(
        (none["total"].clone(), none["turns"].clone()),
        (json!(1), json!([]))
    );
    let (status, _) = api.get("/api/v1/tasks/99999/turns").await;
    assert_eq!(status, 404);
}
