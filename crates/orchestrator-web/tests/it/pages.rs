//! The dashboard's pages over real HTTP: the login and its session cookie, the security headers,
//! what each page shows, CSRF refusing a form without the session's token, read-only refusing
//! writes, and each action doing what it says.

use crate::{Api, TOKEN};
use orchestrator_store::{NewApproval, SOURCE_CLI, approval_kind};
use orchestrator_types::{AutomationSpec, GateSpec, NewTask, TaskId, now_millis};
use serde_json::json;

/// A logged-in browser: its cookie and the CSRF token its pages carry.
pub(crate) struct Browser<'a> {
    api: &'a Api,
    cookie: String,
}

impl<'a> Browser<'a> {
    pub(crate) async fn login(api: &'a Api) -> Browser<'a> {
        let response = api
            .client
            .post(format!("{}/login", api.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 303);
        assert_eq!(response.headers()["location"], "/");
        let set = response.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        let cookie = set.split(';').next().unwrap().to_owned();
        Browser { api, cookie }
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, String, reqwest::header::HeaderMap) {
        let response = self
            .api
            .client
            .get(format!("{}{path}", self.api.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, response.text().await.unwrap(), headers)
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> (u16, String, Option<String>) {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let response = self
            .api
            .client
            .post(format!("{}{path}", self.api.base))
            .header("cookie", &self.cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let location = response
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().to_owned());
        (status, response.text().await.unwrap(), location)
    }

    /// The CSRF token in a page's forms.
    async fn csrf(&self) -> String {
        let (_, page, _) = self.get("/approvals").await;
        let needle = "name=\"csrf\" value=\"";
        let at = page.find(needle).expect("a form with a csrf field") + needle.len();
        page[at..at + 64].to_owned()
    }
}

/// A form posted from another site's page is refused before its session or CSRF token is looked
/// at, the login form included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_from_another_origin_are_refused() {
    let api = Api::start(false).await;
    let response = api
        .client
        .post(format!("{}/login", api.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", "http://127.0.0.1:1")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert!(response.headers().get("set-cookie").is_none());
    let page = response.text().await.unwrap();
    assert!(page.contains("another site"), "{page}");

    let browser = Browser::login(&api).await;
    let csrf = browser.csrf().await;
    let response = api
        .client
        .post(format!("{}/logout", api.base))
        .header("cookie", &browser.cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("referer", "http://evil.example/")
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    // The session is still there; the same form from the daemon's own page logs out.
    let (status, _, _) = browser.get("/approvals").await;
    assert_eq!(status, 200);
    let response = api
        .client
        .post(format!("{}/logout", api.base))
        .header("cookie", &browser.cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", &api.base)
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_need_a_login_and_send_a_strict_policy() {
    let api = Api::start(false).await;
    for path in ["/", "/approvals", "/automations", "/tasks/1"] {
        let response = api
            .client
            .get(format!("{}{path}", api.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 303, "{path}");
        // Logging in then lands on the page that was asked for.
        let expected = if path == "/" {
            "/login".to_owned()
        } else {
            format!("/login?next={}", path.replace('/', "%2F"))
        };
        assert_eq!(response.headers()["location"], expected.as_str(), "{path}");
    }
    let response = api
        .client
        .post(format!("{}/login", api.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert!(response.headers().get("set-cookie").is_none());
    // A made-up cookie is no session.
    let response = api
        .client
        .get(format!("{}/", api.base))
        .header("cookie", "orchestrator_session=0000")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);

    let browser = Browser::login(&api).await;
    let (status, page, headers) = browser.get("/").await;
    assert_eq!(status, 200, "{page}");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(
        !page.contains("<script>") && page.contains("<script src=\"/assets/app.js\">"),
        "no inline script"
    );
    let (status, script, _) = browser.get("/assets/app.js").await;
    assert_eq!(status, 200);
    assert!(script.contains("EventSource"));
    let (_, robots, _) = browser.get("/robots.txt").await;
    assert!(robots.contains("Disallow: /"));
    // The session reads the API (the page's script reads the event stream this way), never writes.
    let (status, _, _) = browser.get("/api/v1/tasks").await;
    assert_eq!(status, 200);
    let response = api
        .client
        .post(format!("{}/api/v1/tasks", api.base))
        .header("cookie", &browser.cookie)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        401,
        "a cookie never writes through the API"
    );

    let csrf = browser.csrf().await;
    let (status, _, location) = browser.post("/logout", &[("csrf", &csrf)]).await;
    assert_eq!((status, location.as_deref()), (303, Some("/login")));
    let (status, _, _) = browser.get("/").await;
    assert_eq!(status, 303, "logged out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_page_filters_in_the_url_and_pages_by_keyset() {
    let api = Api::start(false).await;
    let mut ids = Vec::new();
    for i in 0..55 {
        ids.push(
            api.task(&format!("build <script>alert({i})</script>"))
                .await,
        );
    }
    let flaky = api.task("flaky test").await;
    api.store.cancel_task(TaskId(flaky)).await.unwrap();
    let browser = Browser::login(&api).await;
    let (status, page, _) = browser.get("/").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("data-count=\"queued\">55<"),
        "counts per state"
    );
    assert!(page.contains("data-count=\"canceled\">1<"));
    // Titles are escaped, never markup.
    assert!(!page.contains("<script>alert"), "escaped");
    assert!(page.contains("&lt;script&gt;alert(54)&lt;/script&gt;"));
    assert_eq!(page.matches("data-task=").count(), 50);
    let needle = "rel=\"next\" href=\"";
    let at = page.find(needle).unwrap() + needle.len();
    let next = &page[at..at + page[at..].find('"').unwrap()];
    let next = next.replace("&amp;", "&");
    let (_, older, _) = browser.get(&next).await;
    assert_eq!(older.matches("data-task=").count(), 6, "{next}");
    let (_, canceled, _) = browser.get("/?state=canceled").await;
    assert_eq!(canceled.matches("data-task=").count(), 1);
    assert!(canceled.contains(&format!("data-task=\"{flaky}\"")));
    let (_, found, _) = browser.get("/?q=FLAKY").await;
    assert_eq!(found.matches("data-task=").count(), 1);
    let (status, _, _) = browser.get("/?state=sleeping").await;
    assert_eq!(status, 400);
    // The repositories tasks work on are offered, and one filters; a verdict that cannot be is
    // refused.
    assert!(
        page.contains(&format!("<option value=\"{}\">", api.ws)),
        "the repository filter offers the workspace"
    );
    let (_, none, _) = browser.get("/?repository=/elsewhere").await;
    assert_eq!(none.matches("data-task=").count(), 0);
    assert!(
        none.contains("<option value=\"/elsewhere\" selected>"),
        "kept selected"
    );
    let (_, failed, _) = browser.get("/?verdict=failed").await;
    assert_eq!(
        failed.matches("data-task=").count(),
        0,
        "no gate has failed"
    );
    let (status, _, _) = browser.get("/?verdict=green").await;
    assert_eq!(status, 400);
    // The newest page follows the store; an older one stays as it was read.
    assert!(page.contains("data-live-toggle") && page.contains("data-row-state=\"queued\""));
    assert!(!browser.get(&next).await.1.contains("data-live-toggle"));
}

/// An agent's turns on its page: the reply's text (escaped), its tokens, and its tool calls; the
/// box the streamed reply fills while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_page_shows_its_turns_and_tool_calls() {
    use orchestrator_store::NewMessage;
    use orchestrator_types::{ChatMessage, EventKind, Role, ToolCallRequest, Usage};
    let api = Api::start(false).await;
    let (id, lease) = api.running_agent("agent").await;
    let reply = ChatMessage {
        role: Role::Assistant,
        content: Some("Looking at <b>main.rs</b>.".into()),
        tool_calls: vec![ToolCallRequest {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"main.rs"}"#.into(),
        }],
        tool_call_id: None,
        images: Vec::new(),
    };
    api.store
        .append_messages(
            &lease,
            1,
            &[NewMessage {
                turn: 1,
                message: reply,
                usage: Some(Usage {
                    prompt_tokens: 900,
                    completion_tokens: 12,
                    total_tokens: 912,
                    cached_tokens: 0,
                }),
                model_ms: Some(250),
            }],
            (EventKind::Message, serde_json::json!({"role": "assistant"})),
        )
        .await
        .unwrap();
    api.store
        .tool_call_started(&lease, 1, 1, 0, "c1", "read_file", r#"{"path":"main.rs"}"#)
        .await
        .unwrap();
    let browser = Browser::login(&api).await;
    let (status, page, _) = browser.get(&format!("/tasks/{}", id.0)).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("data-turn=\"1\""), "{page}");
    assert!(
        page.contains("Looking at &lt;b&gt;main.rs&lt;/b&gt;."),
        "escaped"
    );
    assert!(page.contains("900 in / 12 out tokens") && page.contains("model 250 ms"));
    assert!(page.contains("data-call=\"c1\"") && page.contains("status-started"));
    assert!(
        page.contains("data-live-reply"),
        "the box for the streamed reply"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_page_shows_its_evidence_and_cancels_after_confirmation_with_csrf() {
    let api = Api::start(false).await;
    let id = api.task("watched").await;
    let browser = Browser::login(&api).await;
    let (status, page, _) = browser.get(&format!("/tasks/{id}")).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("data-state=\"queued\""));
    assert!(page.contains("id=\"event-1\""), "the timeline");
    assert!(page.contains(&format!(
        "data-task-events=\"/api/v1/tasks/{id}/events/stream?after=1\""
    )));
    assert!(page.contains("data-live=\"true\""));
    let (status, confirm, _) = browser.get(&format!("/tasks/{id}/cancel")).await;
    assert_eq!(status, 200);
    assert!(confirm.contains("Cancel task"), "{confirm}");
    // Without the session's token, nothing happens.
    let (status, _, _) = browser
        .post(&format!("/tasks/{id}/cancel"), &[("csrf", "forged")])
        .await;
    assert_eq!(status, 403);
    let (status, _, _) = browser.post(&format!("/tasks/{id}/cancel"), &[]).await;
    assert_eq!(status, 403);
    assert_eq!(
        api.store.get_task(TaskId(id)).await.unwrap().state.as_str(),
        "queued"
    );
    let csrf = browser.csrf().await;
    let (status, _, location) = browser
        .post(&format!("/tasks/{id}/cancel"), &[("csrf", &csrf)])
        .await;
    assert_eq!((status, location), (303, Some(format!("/tasks/{id}"))));
    assert_eq!(
        api.store.get_task(TaskId(id)).await.unwrap().state.as_str(),
        "canceled"
    );
    let (_, page, _) = browser.get(&format!("/tasks/{id}")).await;
    assert!(page.contains("data-live=\"false\"") && page.contains("Retry…"));
    let (status, _, _) = browser
        .post(&format!("/tasks/{id}/retry"), &[("csrf", &csrf)])
        .await;
    assert_eq!(status, 303);
    assert_eq!(
        api.store.get_task(TaskId(id)).await.unwrap().state.as_str(),
        "queued"
    );
    let (status, _, _) = browser.get("/tasks/99999").await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_decides_approvals_and_read_only_shows_no_forms_and_refuses_posts() {
    for read_only in [false, true] {
        let api = Api::start(read_only).await;
        let mut new = NewTask::agent("asks", "do it");
        new.workspace = Some(api.ws.clone());
        let id = api.store.create_task(&new).await.unwrap();
        let (_, lease) = api
            .store
            .claim_task("pages", id, 60_000)
            .await
            .unwrap()
            .unwrap();
        api.store
            .write_checklist(
                &lease,
                &[
                    ("read the code".to_owned(), "completed".to_owned()),
                    ("deploy <prod>".to_owned(), "pending".to_owned()),
                ],
            )
            .await
            .unwrap();
        let approval = api
            .store
            .request_approval(
                &lease,
                &NewApproval {
                    call_id: "c1".into(),
                    kind: approval_kind::TOOL,
                    tool: "exec_shell".into(),
                    arguments: json!({"command": "make <deploy>"}),
                    reason: "the policy asks before commands".into(),
                    options: None,
                    expires_at: now_millis() + 3_600_000,
                },
            )
            .await
            .unwrap();
        let browser = Browser::login(&api).await;
        let (_, task_page, _) = browser.get(&format!("/tasks/{}", id.0)).await;
        assert!(
            task_page.contains("data-item-status=\"completed\""),
            "{task_page}"
        );
        assert!(
            task_page.contains("deploy &lt;prod&gt;"),
            "the checklist, escaped"
        );
        let (_, page, _) = browser.get("/approvals").await;
        assert!(page.contains(&format!("data-approval=\"{}\"", approval.id)));
        assert!(
            page.contains("make &lt;deploy&gt;"),
            "the evidence, escaped"
        );
        assert!(page.contains("data-pending=\"1\""), "the badge");
        let csrf = browser.csrf().await;
        let (status, _, _) = browser
            .post(
                &format!("/approvals/{}/deny", approval.id),
                &[("csrf", &csrf), ("reason", "not today")],
            )
            .await;
        if read_only {
            assert!(
                !page.contains("action=\"/approvals/"),
                "no forms when read-only"
            );
            assert_eq!(status, 403);
            assert_eq!(
                api.store.get_approval(approval.id).await.unwrap().status,
                "pending"
            );
        } else {
            assert_eq!(status, 303);
            let decided = api.store.get_approval(approval.id).await.unwrap();
            assert_eq!(decided.status, "denied");
            assert_eq!(decided.answer.as_deref(), Some("not today"));
            assert_eq!(decided.decided_by.as_deref(), Some("dashboard"));
            let (_, page, _) = browser.get("/approvals").await;
            assert!(page.contains("Nothing waits for a decision."));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automations_run_now_pause_and_resume_from_their_page() {
    let api = Api::start(false).await;
    let mut spec = AutomationSpec::new("nightly", "0 3 * * *");
    spec.workspaces = vec![api.ws.clone()];
    spec.template.gates = vec![GateSpec::from_command("true")];
    orchestrator_scheduler::manage::create(&api.store, &spec, SOURCE_CLI, now_millis())
        .await
        .unwrap();
    let browser = Browser::login(&api).await;
    let (_, page, _) = browser.get("/automations").await;
    assert!(page.contains("data-automation=\"nightly\"") && page.contains("0 3 * * *"));
    assert!(
        page.contains("<span data-words>every day at 03:00</span>"),
        "the schedule in words: {page}"
    );
    let csrf = browser.csrf().await;
    let slots = |api: &'_ Api| {
        let store = api.store.clone();
        async move {
            let automation = store.automation("nightly").await.unwrap();
            store.slots(automation.id, 100).await.unwrap().len()
        }
    };
    // Run now asks first, without the script: the list's form posts without `confirmed`, and
    // lands on a page that says what will run, with the button that runs it.
    assert!(
        page.contains(r#"data-confirm-field="confirmed""#),
        "the script's dialog adds the field: {page}"
    );
    let (status, confirm, location) = browser
        .post("/automations/nightly/run", &[("csrf", &csrf)])
        .await;
    assert_eq!((status, location), (200, None), "{confirm}");
    assert_eq!(slots(&api).await, 0, "nothing ran before the confirmation");
    for page in [confirm, browser.get("/automations/nightly/run").await.1] {
        assert!(page.contains("Run nightly now?"), "{page}");
        assert!(
            page.contains("<p data-template-gate>gate <code>true</code></p>"),
            "its template: {page}"
        );
        assert!(page.contains(&api.ws), "its workspace: {page}");
        assert!(page.contains(r#"data-running-slot="none""#), "{page}");
        assert!(
            page.contains(r#"<input type="hidden" name="confirmed" value="yes">"#)
                && page.contains(r#"action="/automations/nightly/run""#)
                && page.contains(&format!(r#"name="csrf" value="{csrf}""#)),
            "a post button with the session's token: {page}"
        );
    }
    // The confirmed post still needs the session's CSRF token.
    let (status, _, _) = browser
        .post("/automations/nightly/run", &[("confirmed", "yes")])
        .await;
    assert_eq!(status, 403);
    assert_eq!(slots(&api).await, 0);
    let (status, _, location) = browser
        .post(
            "/automations/nightly/run",
            &[("csrf", &csrf), ("confirmed", "yes")],
        )
        .await;
    assert_eq!(status, 303);
    let task = location.unwrap();
    assert!(task.starts_with("/tasks/"), "to the task it made: {task}");
    // Now a slot of it has not ended: the page says so, and what the overlap policy will do.
    let (_, page, _) = browser.get("/automations/nightly/run").await;
    assert!(page.contains(r#"data-running-slot="1""#), "{page}");
    assert!(page.contains(&format!(r#"href="{task}""#)), "{page}");
    assert!(
        page.contains("<code>skip</code>, so this run will be skipped"),
        "{page}"
    );
    let (status, page, _) = browser
        .post(
            "/automations/nightly/run",
            &[("csrf", &csrf), ("confirmed", "yes")],
        )
        .await;
    assert_eq!(status, 409, "the overlap policy skips it: {page}");
    // Without a session the confirmation page is behind the login, and comes back after it.
    let response = api
        .client
        .get(format!("{}/automations/nightly/run", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 303);
    assert_eq!(
        response.headers()["location"],
        "/login?next=%2Fautomations%2Fnightly%2Frun"
    );
    let (status, _, _) = browser
        .post(
            "/automations/nightly/pause",
            &[("csrf", &csrf), ("note", "waiting for <the> fix")],
        )
        .await;
    assert_eq!(status, 303);
    assert_eq!(
        api.store
            .automation("nightly")
            .await
            .unwrap()
            .status
            .to_string(),
        "paused"
    );
    let (_, page, _) = browser.get("/automations").await;
    assert!(page.contains(">Resume<"));
    let (_, detail, _) = browser.get("/automations/nightly").await;
    assert!(detail.contains("data-status=\"paused\""), "{detail}");
    assert!(
        detail.contains("Paused: “waiting for &lt;the&gt; fix”"),
        "the note, escaped: {detail}"
    );
    assert!(
        detail.contains("action=\"/automations/nightly/resume\"")
            && detail.contains("action=\"/automations/nightly/run\""),
        "its own page runs and resumes it: {detail}"
    );
    assert!(
        detail.matches("data-slot").count() >= 1 && detail.contains("manual"),
        "the manual slots: {detail}"
    );
    assert_eq!(
        detail.matches("data-fire").count(),
        0,
        "a paused automation fires never"
    );
    let (status, _, _) = browser
        .post("/automations/nightly/resume", &[("csrf", &csrf)])
        .await;
    assert_eq!(status, 303);
    assert_eq!(
        api.store
            .automation("nightly")
            .await
            .unwrap()
            .status
            .to_string(),
        "active"
    );
    let (_, detail, _) = browser.get("/automations/nightly").await;
    assert_eq!(detail.matches("data-fire").count(), 5, "{detail}");
    let (status, _, _) = browser.get("/automations/weekly").await;
    assert_eq!(status, 404);
    let (status, _, _) = browser
        .post("/automations/nightly/explode", &[("csrf", &csrf)])
        .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_counts_and_a_bulk_cancel_previews_then_acts() {
    let api = Api::start(false).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(api.task(&format!("nightly {i}")).await);
    }
    api.task("keep me").await;
    api.store.cancel_task(TaskId(ids[0])).await.unwrap();
    let mut spec = AutomationSpec::new("soonest", "0 3 * * *");
    spec.workspaces = vec![api.ws.clone()];
    spec.template.gates = vec![GateSpec::from_command("true")];
    orchestrator_scheduler::manage::create(&api.store, &spec, SOURCE_CLI, now_millis())
        .await
        .unwrap();
    let browser = Browser::login(&api).await;
    let (status, page, _) = browser.get("/overview").await;
    assert_eq!(status, 200);
    assert!(page.contains("data-count=\"queued\">3<"), "{page}");
    assert!(page.contains("data-ended=\"canceled\">1<"), "{page}");
    assert!(page.contains("data-queue=\"default\""));
    assert!(page.contains("data-next-automation=\"soonest\""));

    let (_, list, _) = browser.get("/?q=nightly").await;
    assert!(list.contains("Cancel matching…"));
    let (status, confirm, _) = browser.get("/bulk?action=cancel&q=nightly").await;
    assert_eq!(status, 200);
    assert!(
        confirm.contains("data-matched=\"2\""),
        "two are still under way: {confirm}"
    );
    assert_eq!(
        api.store
            .get_task(TaskId(ids[1]))
            .await
            .unwrap()
            .state
            .as_str(),
        "queued",
        "a preview changes nothing"
    );
    let csrf = browser.csrf().await;
    let (status, _, _) = browser
        .post("/bulk", &[("action", "cancel"), ("q", "nightly")])
        .await;
    assert_eq!(status, 403, "without the form's token");
    let (status, _, location) = browser
        .post(
            "/bulk",
            &[("csrf", &csrf), ("action", "cancel"), ("q", "nightly")],
        )
        .await;
    assert_eq!((status, location.as_deref()), (303, Some("/?q=nightly")));
    for id in &ids {
        assert_eq!(
            api.store
                .get_task(TaskId(*id))
                .await
                .unwrap()
                .state
                .as_str(),
            "canceled"
        );
    }
    let (status, refused, _) = browser.get("/bulk?action=cancel").await;
    assert_eq!(status, 422, "no filter, no bulk: {refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_time_link_logs_in_once() {
    let api = Api::start(false).await;
    let code = api.sessions.one_time_code();
    let follow = |code: String| {
        let api = &api;
        async move {
            api.client
                .get(format!("{}/login?once={code}", api.base))
                .send()
                .await
                .unwrap()
        }
    };
    let first = follow(code.clone()).await;
    assert_eq!(first.status(), 303);
    let cookie = first.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = api
        .client
        .get(format!("{}/", api.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200, "the link's session sees the pages");
    assert_eq!(follow(code).await.status(), 401, "a link works once");
    assert_eq!(
        follow("f".repeat(64)).await.status(),
        401,
        "a made-up code is no link"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_pr_attempts_show_on_its_page_and_in_the_api() {
    let api = Api::start(false).await;
    let id = api.task("fix the parser").await;
    let attempt = api
        .store
        .record_attempt(&orchestrator_store::NewAttempt {
            task: TaskId(id),
            group: "parser",
            label: "bounds check <first>",
            base: "0123456789abcdef0123456789abcdef01234567",
            head: None,
            diff_hash: None,
            patch: b"diff --git a/src/lib.rs b/src/lib.rs\n",
            files: json!(["src/lib.rs"]),
            gates: json!([]),
            left_out: Default::default(),
        })
        .await
        .unwrap();
    // The agent's preflight of it, and the pull request opened from it (and one whose address
    // is not a web address, which is shown but never linked).
    let (_, lease) = api
        .store
        .claim_task("web-test", TaskId(id), 60_000)
        .await
        .unwrap()
        .unwrap();
    let args = json!({"attempt_id": attempt.id, "onto": "origin/main"}).to_string();
    api.store
        .tool_call_started(&lease, 1, 1, 0, "p1", "pr_attempt_preflight", &args)
        .await
        .unwrap();
    api.store
        .tool_call_finished(
            &lease,
            1,
            &orchestrator_store::ToolCallEnd {
                call_id: "p1".into(),
                turn: 1,
                status: orchestrator_store::call_status::SUCCEEDED,
                summary: "applies cleanly".into(),
                artifact_id: None,
                duration_ms: 9,
                message: orchestrator_types::ChatMessage::tool("p1", "applies"),
                usage: None,
                event: json!({"call_id": "p1"}),
                unrecorded_start: None,
            },
        )
        .await
        .unwrap();
    for (number, url) in [
        (7, "https://github.com/acme/widgets/pull/7"),
        (8, "javascript:alert(1)"),
    ] {
        api.store
            .record_event(
                TaskId(id),
                orchestrator_types::EventKind::GithubWrite,
                json!({"action": "pr_opened", "attempt": attempt.id, "number": number, "url": url}),
            )
            .await
            .unwrap();
    }
    let log = api
        .store
        .put_artifact(
            Some(TaskId(id)),
            "tool_output",
            "text/plain",
            "the parser's output",
            &orchestrator_types::Captured::from_bytes(b"parsed 3 files\n", 1024),
        )
        .await
        .unwrap();
    let browser = Browser::login(&api).await;
    let (_, page, _) = browser.get(&format!("/tasks/{id}")).await;
    assert!(
        page.contains(&format!("data-attempt=\"{}\"", attempt.id)),
        "{page}"
    );
    assert!(
        page.contains("applies cleanly") && page.contains("onto <code>origin/main</code>"),
        "the last preflight: {page}"
    );
    assert!(page.contains(
        "<a data-pull href=\"https://github.com/acme/widgets/pull/7\" rel=\"noreferrer\">#7</a>"
    ));
    assert!(
        !page.contains("href=\"javascript:"),
        "never a link that runs script"
    );
    assert!(page.contains(&format!("data-artifact=\"{}\"", log.0)));
    assert!(page.contains("the parser&#39;s output") || page.contains("the parser's output"));
    let (status, listed, _) = browser.get(&format!("/api/v1/tasks/{id}/artifacts")).await;
    assert_eq!(status, 200);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["artifacts"][0]["kind"], "tool_output", "{listed}");
    assert_eq!(listed["artifacts"][0]["original_bytes"], 15);
    assert!(
        listed["artifacts"][0].get("bytes").is_none(),
        "no bytes in the list"
    );
    assert!(page.contains("bounds check &lt;first&gt;"), "escaped");
    assert!(page.contains("0123456789ab<"), "the base, shortened");
    let (status, listed, _) = browser.get(&format!("/api/v1/attempts?task={id}")).await;
    assert_eq!(status, 200);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["attempts"][0]["label"], "bounds check <first>");
    assert_eq!(listed["attempts"][0]["patch_bytes"], 37);
}

/// Bidi controls and terminal escapes in what a model wrote are shown as escapes on the pages
/// (the template engine escapes HTML, not these), in the inbox and on the task's page; the API
/// keeps the exact text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidi_and_control_characters_are_shown_as_escapes_on_the_pages() {
    let api = Api::start(false).await;
    let (id, lease) = api.running_agent("title \u{202e}gnp.exe").await;
    api.store
        .write_checklist(
            &lease,
            &[("tidy\u{1b}[2J up".to_owned(), "pending".to_owned())],
        )
        .await
        .unwrap();
    let command = "ls \u{202e}fr- mr\u{2066} \u{1b}[8m";
    let approval = api
        .store
        .request_approval(
            &lease,
            &NewApproval {
                call_id: "c1".into(),
                kind: approval_kind::TOOL,
                tool: "exec_shell".into(),
                arguments: json!({ "command": command }),
                reason: format!("asks before {command}"),
                options: None,
                expires_at: now_millis() + 3_600_000,
            },
        )
        .await
        .unwrap();
    let raw = |page: &str| {
        page.chars()
            .any(|c| matches!(c, '\u{1b}' | '\u{202e}' | '\u{2066}'))
    };
    let browser = Browser::login(&api).await;
    let (_, page, _) = browser.get("/approvals").await;
    assert!(!raw(&page), "{page}");
    assert!(
        page.contains("asks before ls \\u{202e}fr- mr\\u{2066} \\x1b[8m"),
        "{page}"
    );
    let (_, page, _) = browser.get(&format!("/tasks/{}", id.0)).await;
    assert!(!raw(&page), "{page}");
    assert!(page.contains("title \\u{202e}gnp.exe"), "{page}");
    assert!(page.contains("tidy\\x1b[2J up"), "{page}");
    let (_, page, _) = browser.get("/").await;
    assert!(!raw(&page), "{page}");
    let (status, body) = api.get(&format!("/api/v1/approvals/{}", approval.id)).await;
    assert_eq!(status, 200);
    assert_eq!(body["arguments"]["command"], command);
}
