//! What a person reads on the pages: the timeline in words grouped per attempt, times that say
//! how long ago with the exact time on hover, lists that say what a task is, where it works, what
//! made it and what it waits for, the inbox with the agent's last words and the command in full,
//! and a login that returns to the page asked for.

use crate::pages::Browser;
use crate::{Api, TOKEN};
use orchestrator_store::{Completion, NewApproval, Outcome, SOURCE_CLI, approval_kind};
use orchestrator_types::{AutomationSpec, EventKind, GateSpec, NewTask, now_millis};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_says_what_happened_in_words_attempt_by_attempt() {
    let api = Api::start(false).await;
    let (id, lease) = api.running_agent("reads in words").await;
    api.store
        .append_event(
            &lease,
            EventKind::ToolCall,
            json!({"turn": 1, "call_id": "c1", "name": "read_file", "status": "succeeded",
                   "duration_ms": 12, "summary": "40 lines",
                   "arguments": "{\"path\":\"src/main.rs\"}"}),
        )
        .await
        .unwrap();
    api.store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Requeue {
                error: Some("model server unreachable".into()),
                run_after: now_millis(),
                refund: false,
            },
            details: json!({}),
        }])
        .await
        .unwrap();
    let browser = Browser::login(&api).await;
    let (status, page, _) = browser.get(&format!("/tasks/{}", id.0)).await;
    assert_eq!(status, 200, "{page}");
    for words in [
        "created &quot;reads in words&quot;",
        "attempt 1 started on worker web-test",
        "read_file(path=src/main.rs) succeeded in 12 ms: 40 lines",
        "queued again after: model server unreachable",
    ] {
        assert!(page.contains(words), "the timeline says {words:?}: {page}");
    }
    assert!(
        page.contains(
            "<tr class=\"attempt\" data-attempt=\"1\"><td colspan=\"4\">Attempt 1<span class=\"muted\"> · "
        ),
        "a row opens each attempt: {page}"
    );
    assert!(page.contains("data-tone=\"wait\""), "tones: {page}");
    // No event's raw JSON on the page.
    assert!(!page.contains("{&quot;turn&quot;"), "{page}");
    // Times say how long ago, with the exact UTC time on hover.
    assert!(page.contains("<time datetime=\""), "{page}");
    assert!(page.contains(" UTC\" data-at=\""), "{page}");
    assert!(page.contains(">just now</time>"), "{page}");

    // The API and the stream carry the same words.
    let (status, body) = api.get(&format!("/api/v1/tasks/{}/events", id.0)).await;
    assert_eq!(status, 200);
    let texts: Vec<&str> = body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert!(
        texts.contains(&"read_file(path=src/main.rs) succeeded in 12 ms: 40 lines"),
        "{texts:?}"
    );
    assert!(body["events"][0]["tone"].is_string(), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_list_says_kind_origin_failure_and_what_a_task_waits_for() {
    let api = Api::start(false).await;
    // A gate task that failed, with a long error whose first line is what the row shows.
    let mut gates = NewTask::new("checks");
    gates.gates = vec![GateSpec::from_command("cargo test")];
    gates.workspace = Some(api.ws.clone());
    let failed = api.store.create_task(&gates).await.unwrap();
    let (_, lease) = api
        .store
        .claim_task("web-test", failed, 60_000)
        .await
        .unwrap()
        .unwrap();
    api.store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Failed {
                error: "\ngate cargo test failed: 2 tests failed\nthread main panicked".into(),
            },
            details: json!({}),
        }])
        .await
        .unwrap();
    // An agent task waiting on a command a person must approve.
    let (waiting, lease) = api.running_agent("deploys").await;
    api.store
        .request_approval(
            &lease,
            &NewApproval {
                call_id: "c1".into(),
                kind: approval_kind::TOOL,
                tool: "exec_shell".into(),
                arguments: json!({"command": "make deploy"}),
                reason: "the policy asks before commands".into(),
                options: None,
                expires_at: now_millis() + 3_600_000,
            },
        )
        .await
        .unwrap();
    api.store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Wait {
                reason: "approval".into(),
            },
            details: json!({"approval": 1}),
        }])
        .await
        .unwrap();
    // A task an automation made.
    let mut spec = AutomationSpec::new("nightly", "0 3 * * *");
    spec.workspaces = vec![api.ws.clone()];
    spec.template.gates = vec![GateSpec::from_command("true")];
    orchestrator_scheduler::manage::create(&api.store, &spec, SOURCE_CLI, now_millis())
        .await
        .unwrap();
    let automation = api.store.automation("nightly").await.unwrap();
    orchestrator_scheduler::run_now(&api.store, &automation, false, "test", now_millis())
        .await
        .unwrap();

    let browser = Browser::login(&api).await;
    let (status, page, _) = browser.get("/").await;
    assert_eq!(status, 200, "{page}");
    let row = |id: i64| {
        let start = page
            .find(&format!("<tr data-task=\"{id}\">"))
            .unwrap_or_else(|| panic!("row {id}: {page}"));
        let end = page[start..].find("</tr>").unwrap() + start;
        page[start..end].to_owned()
    };
    let failed_row = row(failed.0);
    assert!(failed_row.contains("<td>gates</td>"), "{failed_row}");
    assert!(
        failed_row.contains("gate cargo test failed: 2 tests failed</div>"),
        "the first line of the failure: {failed_row}"
    );
    assert!(failed_row.contains(&api.ws), "where it works: {failed_row}");
    assert!(!failed_row.contains("panicked"), "{failed_row}");
    let waiting_row = row(waiting.0);
    assert!(waiting_row.contains("<td>agent</td>"), "{waiting_row}");
    assert!(
        waiting_row.contains("waits for approval of exec_shell `make deploy`"),
        "what it waits for: {waiting_row}"
    );
    let made = api
        .store
        .task_page(&orchestrator_store::TaskPage {
            automation: Some(automation.id),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let made_row = row(made[0].id.0);
    assert!(made_row.contains("automation nightly"), "{made_row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_shows_what_the_agent_said_before_asking_and_the_command_in_full() {
    let api = Api::start(false).await;
    let (id, lease) = api.running_agent("asks with context").await;
    api.store
        .append_event(
            &lease,
            EventKind::Message,
            json!({"turn": 1, "role": "assistant", "text": "The build is green; I will deploy to staging now."}),
        )
        .await
        .unwrap();
    let command =
        "kubectl apply -f deploy/staging.yaml && kubectl rollout status deploy/web --timeout=300s";
    api.store
        .request_approval(
            &lease,
            &NewApproval {
                call_id: "c1".into(),
                kind: approval_kind::TOOL,
                tool: "exec_shell".into(),
                arguments: json!({"command": command}),
                reason: "the policy asks before commands".into(),
                options: None,
                expires_at: now_millis() + 3_600_000,
            },
        )
        .await
        .unwrap();
    let browser = Browser::login(&api).await;
    let (status, inbox, _) = browser.get("/approvals").await;
    assert_eq!(status, 200, "{inbox}");
    assert!(
        inbox.contains("The build is green; I will deploy to staging now."),
        "the agent's last words: {inbox}"
    );
    assert!(
        inbox.contains(&format!(
            "<pre class=\"command\" data-command>{}</pre>",
            command.replace('&', "&amp;")
        )),
        "the command in full: {inbox}"
    );
    let (_, task_page, _) = browser.get(&format!("/tasks/{}", id.0)).await;
    assert!(
        task_page.contains(&format!(
            "<pre class=\"command\">{}</pre>",
            command.replace('&', "&amp;")
        )),
        "the task page's approval row shows the command: {task_page}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logging_in_returns_to_the_page_that_was_asked_for_and_never_leaves_the_site() {
    let api = Api::start(false).await;
    let response = api
        .client
        .get(format!("{}/tasks/1?x=2", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(
        response.headers()["location"],
        "/login?next=%2Ftasks%2F1%3Fx%3D2"
    );
    let (status, form) = api.get("/login?next=%2Ftasks%2F1%3Fx%3D2").await;
    assert_eq!(status, 200);
    let form = form.as_str().unwrap().to_owned();
    assert!(
        form.contains("name=\"next\" value=\"/tasks/1?x=2\""),
        "{form}"
    );
    let login = |next: &'static str| {
        let api = &api;
        async move {
            let body = form_urlencoded::Serializer::new(String::new())
                .append_pair("token", TOKEN)
                .append_pair("next", next)
                .finish();
            let response = api
                .client
                .post(format!("{}/login", api.base))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 303);
            response.headers()["location"].to_str().unwrap().to_owned()
        }
    };
    assert_eq!(login("/tasks/1?x=2").await, "/tasks/1?x=2");
    // Anywhere else is the tasks list: another host, a scheme, a backslash trick.
    for elsewhere in [
        "//evil.example/",
        "https://evil.example/",
        "/\\evil.example",
        "tasks/1",
    ] {
        assert_eq!(login(elsewhere).await, "/", "{elsewhere}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automations_show_their_next_fires_on_their_own_clock() {
    let api = Api::start(false).await;
    let mut spec = AutomationSpec::new("berlin", "0 3 * * *");
    spec.timezone = "Europe/Berlin".into();
    spec.workspaces = vec![api.ws.clone()];
    spec.template.gates = vec![GateSpec::from_command("true")];
    orchestrator_scheduler::manage::create(&api.store, &spec, SOURCE_CLI, now_millis())
        .await
        .unwrap();
    let browser = Browser::login(&api).await;
    let (_, list, _) = browser.get("/automations").await;
    assert!(
        list.contains(" 03:00:00 CET") || list.contains(" 03:00:00 CEST"),
        "03:00 in Berlin, not in UTC: {list}"
    );
    let (_, page, _) = browser.get("/automations/berlin").await;
    let fires = page.matches("03:00:00 CE").count();
    assert!(fires >= 3, "each next fire on Berlin's clock: {page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_sends_every_time_as_rfc3339() {
    let api = Api::start(false).await;
    let (id, lease) = api.running_agent("times").await;
    api.store
        .request_approval(
            &lease,
            &NewApproval {
                call_id: "c1".into(),
                kind: approval_kind::QUESTION,
                tool: "ask".into(),
                arguments: json!({"question": "which?", "expires_at": 5}),
                reason: "which?".into(),
                options: None,
                expires_at: now_millis() + 3_600_000,
            },
        )
        .await
        .unwrap();
    let rfc3339 = |v: &serde_json::Value, what: &str| {
        let text = v
            .as_str()
            .unwrap_or_else(|| panic!("{what} is not a string: {v}"));
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap_or_else(|e| panic!("{what} = {text:?}: {e}"));
        assert!(text.ends_with('Z'), "{what} in UTC: {text}");
    };
    let (_, list) = api.get("/api/v1/tasks").await;
    let task = &list["tasks"][0];
    for key in [
        "created_at",
        "updated_at",
        "started_at",
        "run_after",
        "lease_expires_at",
    ] {
        rfc3339(&task[key], key);
    }
    let (_, read) = api.get(&format!("/api/v1/tasks/{}", id.0)).await;
    rfc3339(&read["created_at"], "a read's created_at");
    let (_, events) = api.get(&format!("/api/v1/tasks/{}/events", id.0)).await;
    rfc3339(&events["events"][0]["at"], "an event's at");
    let (_, approvals) = api.get("/api/v1/approvals").await;
    let approval = &approvals["approvals"][0];
    rfc3339(&approval["requested_at"], "requested_at");
    rfc3339(&approval["expires_at"], "expires_at");
    assert!(approval["decided_at"].is_null());
    // What the agent wrote is sent as it wrote it.
    assert_eq!(approval["arguments"]["expires_at"], 5);
}
