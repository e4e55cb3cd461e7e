//! The `/api/v1` router served on a loopback port over a real SQLite store, reached over real
//! HTTP: every route and its refusals (no token, read-only, bad input), the OpenAPI document
//! against the router both ways, and each resource's behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::collections::BTreeSet;
use std::sync::Arc;

use orchestrator_store::{NewApproval, SOURCE_CLI, Store, approval_kind};
use orchestrator_types::{AutomationSpec, NewTask, now_millis};
use orchestrator_web::{ROUTES, Web};
use serde_json::{Value, json};

mod pages;

const TOKEN: &str = "t0ken-for-tests";

pub(crate) struct Api {
    base: String,
    client: reqwest::Client,
    _db: orchestrator_test_support::TestStore,
    store: Store,
    _ws: tempfile::TempDir,
    ws: String,
}

impl Api {
    pub(crate) async fn start(read_only: bool) -> Api {
        let db = orchestrator_test_support::sqlite_store().await;
        let store = db.store.clone();
        let app = orchestrator_web::app(Web::new(store.clone(), Arc::from(TOKEN), read_only));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let ws = tempfile::tempdir().unwrap();
        Api {
            base: format!("http://{addr}"),
            // Redirects are asserted, not followed.
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            _db: db,
            store,
            ws: ws.path().display().to_string(),
            _ws: ws,
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        token: bool,
    ) -> (u16, Value) {
        let mut request = self
            .client
            .request(method.parse().unwrap(), format!("{}{path}", self.base));
        if token {
            request = request.bearer_auth(TOKEN);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send("GET", path, None, true).await
    }

    async fn post(&self, path: &str, body: &str) -> (u16, Value) {
        self.send("POST", path, Some(body), true).await
    }

    pub(crate) async fn task(&self, title: &str) -> i64 {
        let mut new = NewTask::new(title).with_gate("true");
        new.workspace = Some(self.ws.clone());
        self.store.create_task(&new).await.unwrap().0
    }
}

fn code(value: &Value) -> &str {
    value["error"]["code"].as_str().unwrap_or_default()
}

/// A route's path with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{id}", "1").replace("{name}", "nightly")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_needs_the_token_and_read_only_refuses_every_write() {
    let api = Api::start(false).await;
    for (method, path) in ROUTES {
        let (status, body) = api.send(method, &concrete(path), None, false).await;
        assert_eq!(status, 401, "{method} {path}: {body}");
        assert_eq!(code(&body), "unauthorized", "{method} {path}: {body}");
    }
    let (status, body) = api
        .client
        .get(format!("{}/api/v1/health", api.base))
        .bearer_auth("wrong")
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .unwrap();
    assert_eq!(status, 401);
    assert_eq!(body.headers()["www-authenticate"], "Bearer");

    let api = Api::start(true).await;
    let id = api.task("look only").await;
    for (method, path) in ROUTES.iter().filter(|(m, _)| *m == "POST") {
        let (status, body) = api.send(method, &concrete(path), Some("{}"), true).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert_eq!(code(&body), "read_only", "{method} {path}: {body}");
    }
    let (status, body) = api.get(&format!("/api/v1/tasks/{id}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        api.store
            .get_task(orchestrator_types::TaskId(id))
            .await
            .unwrap()
            .state
            .as_str(),
        "queued"
    );
    let (_, health) = api.get("/api/v1/health").await;
    assert_eq!(health["read_only"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_names_exactly_the_routes_the_router_serves() {
    let api = Api::start(false).await;
    let (status, doc) = api.get("/api/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(|m| (m.to_uppercase(), path.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let routed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(documented, routed);
    // Each listed route is served: whatever it answers, it is not the router's "no such route"
    // or "wrong method".
    for (method, path) in ROUTES {
        let (status, body) = api.send(method, &concrete(path), None, true).await;
        assert!(
            !matches!(code(&body), "no_route" | "method_not_allowed") && status != 405,
            "{method} {path} is documented but not routed: {status} {body}"
        );
    }
    let (status, body) = api.get("/api/v1/nothing-here").await;
    assert_eq!((status, code(&body)), (404, "no_route"), "{body}");
    let (status, body) = api.send("DELETE", "/api/v1/tasks", None, true).await;
    assert_eq!((status, code(&body)), (405, "method_not_allowed"), "{body}");
    // Every error code a route can give is in the document.
    let codes =
        &doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"];
    for expected in [
        "unauthorized",
        "read_only",
        "not_found",
        "conflict",
        "unprocessable",
    ] {
        assert!(
            codes.as_array().unwrap().iter().any(|c| c == expected),
            "{expected}"
        );
    }
}

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
async fn approvals_are_listed_decided_and_decided_once() {
    let api = Api::start(false).await;
    let mut ids = Vec::new();
    for i in 0..2 {
        let mut new = NewTask::agent(format!("agent {i}"), "do it");
        new.workspace = Some(api.ws.clone());
        let id = api.store.create_task(&new).await.unwrap();
        let (_, lease) = api
            .store
            .claim_task("web-test", id, 60_000)
            .await
            .unwrap()
            .unwrap();
        let approval = api
            .store
            .request_approval(
                &lease,
                &NewApproval {
                    call_id: format!("call-{i}"),
                    kind: if i == 0 {
                        approval_kind::TOOL
                    } else {
                        approval_kind::QUESTION
                    },
                    tool: if i == 0 { "exec_shell" } else { "ask_user" }.into(),
                    arguments: json!({"command": "make deploy"}),
                    reason: "the policy asks".into(),
                    options: None,
                    expires_at: now_millis() + 3_600_000,
                },
            )
            .await
            .unwrap();
        ids.push(approval.id);
    }
    let (_, pending) = api.get("/api/v1/approvals").await;
    assert_eq!(
        pending["approvals"].as_array().unwrap().len(),
        2,
        "{pending}"
    );
    let (status, approved) = api
        .post(
            &format!("/api/v1/approvals/{}/approve", ids[0]),
            r#"{"by": "ann"}"#,
        )
        .await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(approved["status"], "approved");
    assert_eq!(approved["decided_by"], "api:ann");
    let (status, twice) = api
        .post(&format!("/api/v1/approvals/{}/deny", ids[0]), "")
        .await;
    assert_eq!((status, code(&twice)), (409, "conflict"), "{twice}");
    let (status, missing) = api
        .post(&format!("/api/v1/approvals/{}/answer", ids[1]), "")
        .await;
    assert_eq!(
        (status, code(&missing)),
        (422, "unprocessable"),
        "{missing}"
    );
    let (status, typo) = api
        .post(
            &format!("/api/v1/approvals/{}/answer", ids[1]),
            r#"{"answr": "yes"}"#,
        )
        .await;
    assert_eq!((status, code(&typo)), (422, "unprocessable"), "{typo}");
    let (status, answered) = api
        .post(
            &format!("/api/v1/approvals/{}/answer", ids[1]),
            r#"{"answer": "Friday"}"#,
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered["status"], "answered");
    let (_, pending) = api.get("/api/v1/approvals").await;
    assert_eq!(pending["approvals"], json!([]));
    let (_, all) = api.get("/api/v1/approvals?status=all").await;
    assert_eq!(all["approvals"].as_array().unwrap().len(), 2);
    let (status, bad) = api.get("/api/v1/approvals?status=maybe").await;
    assert_eq!((status, code(&bad)), (400, "bad_request"), "{bad}");
    let (_, one) = api.get(&format!("/api/v1/approvals/{}", ids[1])).await;
    assert_eq!(one["answer"], "Friday");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automations_are_read_paused_resumed_and_run_now() {
    let api = Api::start(false).await;
    let mut spec = AutomationSpec::new("nightly", "0 3 * * *");
    spec.timezone = "Europe/Berlin".into();
    spec.workspaces = vec![api.ws.clone()];
    spec.template.gates = vec![orchestrator_types::GateSpec::from_command("true")];
    orchestrator_scheduler::manage::create(&api.store, &spec, SOURCE_CLI, now_millis())
        .await
        .unwrap();
    let (_, list) = api.get("/api/v1/automations").await;
    assert_eq!(list["automations"][0]["name"], "nightly", "{list}");
    let (_, read) = api.get("/api/v1/automations/nightly").await;
    assert_eq!(read["timezone"], "Europe/Berlin");
    assert_eq!(read["next_fires"].as_array().unwrap().len(), 5, "{read}");
    assert_eq!(read["slots"], json!([]));

    let (status, run) = api.post("/api/v1/automations/nightly/run", "").await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["result"]["outcome"], "fired", "{run}");
    // Its task is unfinished, so the overlap policy skips the next one unless forced.
    let (status, skipped) = api.post("/api/v1/automations/nightly/run", "{}").await;
    assert_eq!((status, code(&skipped)), (409, "conflict"), "{skipped}");
    assert!(
        skipped["error"]["message"]
            .as_str()
            .unwrap()
            .contains("force")
    );
    let (status, forced) = api
        .post("/api/v1/automations/nightly/run", r#"{"force": true}"#)
        .await;
    assert_eq!(status, 200, "{forced}");
    let (_, read) = api.get("/api/v1/automations/nightly?slots=1").await;
    assert_eq!(read["slots"].as_array().unwrap().len(), 1);

    let (_, paused) = api.post("/api/v1/automations/nightly/pause", "").await;
    assert_eq!(paused["status"], "paused", "{paused}");
    let (_, read) = api.get("/api/v1/automations/nightly").await;
    assert!(
        read.get("next_fires").is_none(),
        "a paused automation fires never: {read}"
    );
    let (_, resumed) = api.post("/api/v1/automations/nightly/resume", "").await;
    assert_eq!(resumed["status"], "active");
    let (status, missing) = api.post("/api/v1/automations/weekly/pause", "").await;
    assert_eq!((status, code(&missing)), (404, "not_found"), "{missing}");
    let (status, typo) = api
        .post("/api/v1/automations/nightly/run", r#"{"forse": true}"#)
        .await;
    assert_eq!((status, code(&typo)), (422, "unprocessable"), "{typo}");
}

/// One Server-Sent Event: its id, its event name, its data.
type SseEvent = (Option<String>, String, String);

/// Reads events from an SSE response until `count` came or the stream ended.
async fn sse_events(
    body: &mut (impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    buffer: &mut String,
    count: usize,
) -> Vec<SseEvent> {
    use futures_util::StreamExt;
    let mut events = Vec::new();
    while events.len() < count {
        if let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let (mut id, mut name, mut data) = (None, "message".to_owned(), String::new());
            for line in block.lines() {
                if let Some(v) = line
                    .strip_prefix("id: ")
                    .or_else(|| line.strip_prefix("id:"))
                {
                    id = Some(v.to_owned());
                } else if let Some(v) = line
                    .strip_prefix("event: ")
                    .or_else(|| line.strip_prefix("event:"))
                {
                    name = v.to_owned();
                } else if let Some(v) = line
                    .strip_prefix("data: ")
                    .or_else(|| line.strip_prefix("data:"))
                {
                    data.push_str(v);
                }
            }
            if !data.is_empty() || id.is_some() {
                events.push((id, name, data));
            }
            continue;
        }
        let next = tokio::time::timeout(std::time::Duration::from_secs(30), body.next())
            .await
            .expect("the stream stalled");
        match next {
            Some(chunk) => buffer.push_str(&String::from_utf8_lossy(&chunk.unwrap())),
            None => break,
        }
    }
    events
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
        let mut request = api
            .client
            .get(format!("{}{path}", api.base))
            .bearer_auth(TOKEN);
        if let Some(value) = header {
            request = request.header("Last-Event-ID", value);
        }
        assert_eq!(request.send().await.unwrap().status(), status, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automations_are_created_replaced_and_previewed_over_the_api() {
    let api = Api::start(false).await;
    let body = json!({
        "name": "nightly",
        "schedule": "0 3 * * 1-5",
        "timezone": "Europe/Berlin",
        "workspaces": [api.ws],
        "task": {"title": "nightly check", "gates": ["true", {"command": "cargo test", "timeout_secs": 60}]},
        "overlap": "allow"
    });
    let (status, created) = api.post("/api/v1/automations", &body.to_string()).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["source"], "api");
    assert_eq!(created["overlap"], "allow");
    assert_eq!(created["gates"][1]["timeout_secs"], 60);
    assert!(created["next_fire_at"].is_string());
    let (status, again) = api.post("/api/v1/automations", &body.to_string()).await;
    assert_eq!((status, code(&again)), (409, "conflict"), "{again}");

    let replaced =
        json!({"schedule": "30 2 * * *", "workspaces": [api.ws], "task": {"gates": ["true"]}});
    let (status, updated) = api
        .send(
            "PUT",
            "/api/v1/automations/nightly",
            Some(&replaced.to_string()),
            true,
        )
        .await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["schedule"], "30 2 * * *");
    assert_eq!(
        updated["timezone"], "UTC",
        "a replace is whole: the zone went back to its default"
    );
    assert_eq!(updated["overlap"], "skip");

    for (method, path, body, status, expected) in [
        (
            "POST",
            "/api/v1/automations",
            json!({"name": "bad", "schedule": "61 * * * *", "workspaces": [api.ws], "task": {"gates": ["true"]}}),
            422,
            "unprocessable",
        ),
        (
            "POST",
            "/api/v1/automations",
            json!({"name": "bad", "schedule": "0 3 * * *", "timezone": "Mars/Olympus", "workspaces": [api.ws], "task": {"gates": ["true"]}}),
            422,
            "unprocessable",
        ),
        (
            "POST",
            "/api/v1/automations",
            json!({"name": "bad", "schedule": "0 3 * * *", "workspaces": ["relative"], "task": {"gates": ["true"]}}),
            422,
            "unprocessable",
        ),
        (
            "POST",
            "/api/v1/automations",
            json!({"name": "bad", "schedule": "0 3 * * *", "workspaces": [api.ws]}),
            422,
            "unprocessable",
        ),
        (
            "POST",
            "/api/v1/automations",
            json!({"schedule": "0 3 * * *", "workspaces": [api.ws], "task": {"gates": ["true"]}}),
            422,
            "unprocessable",
        ),
        (
            "PUT",
            "/api/v1/automations/nightly",
            json!({"name": "other", "schedule": "0 3 * * *", "workspaces": [api.ws], "task": {"gates": ["true"]}}),
            422,
            "unprocessable",
        ),
        (
            "PUT",
            "/api/v1/automations/weekly",
            json!({"schedule": "0 3 * * *", "workspaces": [api.ws], "task": {"gates": ["true"]}}),
            404,
            "not_found",
        ),
    ] {
        let (got, answer) = api.send(method, path, Some(&body.to_string()), true).await;
        assert_eq!((got, code(&answer)), (status, expected), "{body}: {answer}");
    }
    let (_, list) = api.get("/api/v1/automations").await;
    assert_eq!(
        list["automations"].as_array().unwrap().len(),
        1,
        "refused calls store nothing"
    );

    let (status, preview) = api
        .get("/api/v1/schedule-preview?schedule=30%202%20*%20*%20*&timezone=Europe/Berlin&count=3&from=2026-03-28T00:00:00Z")
        .await;
    assert_eq!(status, 200, "{preview}");
    // The night the clocks go forward in Berlin: 02:30 does not exist on the 29th and fires at
    // 03:00 local, as Vixie cron does.
    assert_eq!(
        preview["fires"],
        json!([
            "2026-03-28T01:30:00.000Z",
            "2026-03-29T01:00:00.000Z",
            "2026-03-30T00:30:00.000Z"
        ])
    );
    let (status, bad) = api.get("/api/v1/schedule-preview?schedule=nope").await;
    assert_eq!((status, code(&bad)), (422, "unprocessable"), "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_are_read_whole_by_range_and_by_tail() {
    let api = Api::start(false).await;
    let id = api.task("with a log").await;
    let bytes: Vec<u8> = (0..1000u32)
        .flat_map(|i| format!("line {i}\n").into_bytes())
        .collect();
    let artifact = api
        .store
        .put_artifact(
            Some(orchestrator_types::TaskId(id)),
            "gate_log",
            "text/plain; charset=utf-8",
            "a log",
            &orchestrator_types::Captured::from_bytes(&bytes, 1 << 20),
        )
        .await
        .unwrap();
    let (status, meta) = api.get(&format!("/api/v1/artifacts/{}", artifact.0)).await;
    assert_eq!(status, 200);
    assert_eq!(meta["kind"], "gate_log");
    assert_eq!(meta["original_bytes"], bytes.len());
    let url = format!("{}/api/v1/artifacts/{}/content", api.base, artifact.0);
    let whole = api
        .client
        .get(&url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.headers()["accept-ranges"], "bytes");
    assert_eq!(whole.bytes().await.unwrap().as_ref(), bytes.as_slice());
    let part = api
        .client
        .get(&url)
        .bearer_auth(TOKEN)
        .header("Range", "bytes=7-13")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(
        part.headers()["content-range"],
        format!("bytes 7-13/{}", bytes.len())
    );
    assert_eq!(part.bytes().await.unwrap().as_ref(), &bytes[7..14]);
    let suffix = api
        .client
        .get(&url)
        .bearer_auth(TOKEN)
        .header("Range", "bytes=-9")
        .send()
        .await
        .unwrap();
    assert_eq!(suffix.text().await.unwrap(), "line 999\n");
    let tail = api
        .client
        .get(format!("{url}?tail=18"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(tail.text().await.unwrap(), "line 998\nline 999\n");
    for range in ["bytes=99999-", "bytes=5-2", "lines=1-2", "bytes=0-1,4-5"] {
        let response = api
            .client
            .get(&url)
            .bearer_auth(TOKEN)
            .header("Range", range)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 416, "{range}");
    }
    let download = api
        .client
        .get(format!("{url}?download=1"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert!(
        download.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment")
    );
    let (status, missing) = api.get("/api/v1/artifacts/424242").await;
    assert_eq!((status, code(&missing)), (404, "not_found"));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_and_deliveries_are_read() {
    let api = Api::start(false).await;
    let (status, body) = api.get("/api/v1/attempts").await;
    assert_eq!((status, code(&body)), (400, "bad_request"), "{body}");
    let id = api.task("no attempts").await;
    let (_, none) = api.get(&format!("/api/v1/attempts?task={id}")).await;
    assert_eq!(none["attempts"], json!([]));
    let (status, missing) = api.get("/api/v1/attempts/77").await;
    assert_eq!((status, code(&missing)), (404, "not_found"), "{missing}");
    let accepted = api
        .store
        .accept_delivery(
            &orchestrator_store::DeliveryInfo {
                id: "d-1",
                source: "webhook",
                event: "issues",
                action: Some("labeled"),
                repo: Some("acme/widgets"),
            },
            r#"{"action": "labeled"}"#,
        )
        .await;
    assert!(accepted.is_ok(), "{accepted:?}");
    let (_, list) = api.get("/api/v1/deliveries").await;
    assert_eq!(list["deliveries"][0]["id"], "d-1", "{list}");
    let (_, one) = api.get("/api/v1/deliveries/d-1").await;
    assert_eq!(one["event"], "issues");
    let (status, missing) = api.get("/api/v1/deliveries/nope").await;
    assert_eq!((status, code(&missing)), (404, "not_found"));
}
