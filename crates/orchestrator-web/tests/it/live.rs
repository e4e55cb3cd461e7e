//! The live streams: changes to the lists of tasks and approvals (resumable), the pieces of a
//! model's reply in a task's stream, and a task's turns.

use std::pin::Pin;

use crate::{Api, SseEvent, TOKEN, sse_events};
use orchestrator_store::{NewApproval, approval_kind};
use orchestrator_types::{NewTask, TaskId, now_millis};
use serde_json::{Value, json};

type Body = Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// An open stream of the API.
pub(crate) struct Stream {
    body: Body,
    buffer: String,
}

impl Stream {
    async fn open(api: &Api, path: &str, last_event_id: Option<&str>) -> Stream {
        Stream::open_at(&api.client, &api.base, path, last_event_id).await
    }

    /// Opens `path` of the API served at `base`.
    pub(crate) async fn open_at(
        client: &reqwest::Client,
        base: &str,
        path: &str,
        last_event_id: Option<&str>,
    ) -> Stream {
        let mut request = client.get(format!("{base}{path}")).bearer_auth(TOKEN);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Stream {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    pub(crate) async fn next(&mut self) -> SseEvent {
        sse_events(&mut self.body, &mut self.buffer, 1)
            .await
            .pop()
            .expect("the stream ended")
    }

    /// Reads events until one satisfies `wanted`; returns it and every event before it. Fails
    /// (rather than waiting on keep-alives for ever) when none came in a minute.
    #[track_caller]
    fn until(
        &mut self,
        wanted: impl Fn(&SseEvent) -> bool,
    ) -> impl std::future::Future<Output = (SseEvent, Vec<SseEvent>)> {
        let caller = std::panic::Location::caller();
        self.until_at(caller, wanted)
    }

    async fn until_at(
        &mut self,
        caller: &'static std::panic::Location<'static>,
        wanted: impl Fn(&SseEvent) -> bool,
    ) -> (SseEvent, Vec<SseEvent>) {
        let mut before = Vec::new();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let Ok(event) = tokio::time::timeout_at(deadline, self.next()).await else {
                panic!("the awaited event never came; came instead: {before:?} at {caller}");
            };
            if wanted(&event) {
                return (event, before);
            }
            before.push(event);
        }
    }
}

pub(crate) fn data(event: &SseEvent) -> Value {
    serde_json::from_str(&event.2).unwrap()
}

/// A `task` event about task `id` in `state`.
fn task_in(id: i64, state: &'static str) -> impl Fn(&SseEvent) -> bool {
    move |e| e.1 == "task" && data(e)["id"] == id && data(e)["state"] == state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_stream_tells_each_change_and_the_counts_and_resumes_after_a_reconnection() {
    let api = Api::start(false).await;
    let first = api.task("before the stream").await;
    let mut stream = Stream::open(&api, "/api/v1/tasks/stream", None).await;
    // The counts come first, as they are now.
    let counts = stream.next().await;
    assert_eq!(counts.1, "counts", "{counts:?}");
    assert_eq!(data(&counts)["counts"]["queued"], 1);

    let second = api.task("after the stream").await;
    let (created, before) = stream.until(task_in(second, "queued")).await;
    let at = created.0.clone().expect("a change has an id");
    assert!(
        at.parse::<i64>().unwrap() > 0,
        "the id is the change's number: {at}"
    );
    // The counts follow; when the task was created while the watcher counted, they may come
    // just before it instead.
    let two_queued = |e: &SseEvent| e.1 == "counts" && data(e)["counts"]["queued"] == 2;
    if !before.iter().any(two_queued) {
        stream.until(two_queued).await;
    }

    api.store.cancel_task(TaskId(first)).await.unwrap();
    let (canceled, before) = stream.until(task_in(first, "canceled")).await;
    assert_eq!(data(&canceled)["title"], "before the stream");
    let one_canceled = |e: &SseEvent| e.1 == "counts" && data(e)["counts"]["canceled"] == 1;
    if !before.iter().any(one_canceled) {
        stream.until(one_canceled).await;
    }

    // A change made while nobody listened is told first to a client that reconnects with the
    // last id it got.
    drop(stream);
    api.store.cancel_task(TaskId(second)).await.unwrap();
    let mut resumed = Stream::open(&api, "/api/v1/tasks/stream", Some(&at)).await;
    assert_eq!(resumed.next().await.1, "counts");
    resumed.until(task_in(second, "canceled")).await;

    // `after` does the same for a first connection; a bad id is refused before the stream.
    let mut after = Stream::open(&api, &format!("/api/v1/tasks/stream?after={at}"), None).await;
    after.until(task_in(second, "canceled")).await;
    for (path, header) in [
        ("/api/v1/tasks/stream", Some("soon")),
        ("/api/v1/tasks/stream?after=x", None),
        ("/api/v1/approvals/stream", Some("-3")),
    ] {
        assert_eq!(api.stream_status(path, header).await, 400, "{path}");
    }
    let anonymous = api
        .client
        .get(format!("{}/api/v1/tasks/stream", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
}

/// The tasks list page says where in the order of changes its rows were read (`data-after`,
/// taken before them), and its script opens the change stream from there. A change that commits
/// between the page's read and the stream's start (a claim, an end) then still reaches the page;
/// opened from "now", the stream never told it, and the row kept its old state until the task
/// changed again, which for a task that ended is never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_between_the_list_pages_read_and_its_stream_reaches_the_page() {
    let api = Api::start(false).await;
    let id = api.task("listed").await;
    let browser = crate::pages::Browser::login(&api).await;
    let (status, html, _) = browser.get("/").await;
    assert_eq!(status, 200);
    assert!(html.contains(&format!("data-task=\"{id}\"")), "{html}");
    let after = html
        .split("data-after=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the list page says where its rows were read");
    after.parse::<i64>().expect("a change's number");

    // The task ends after the page was read, before its script opens the stream.
    api.store.cancel_task(TaskId(id)).await.unwrap();
    let mut stream = Stream::open(&api, &format!("/api/v1/tasks/stream?after={after}"), None).await;
    stream.until(task_in(id, "canceled")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approvals_stream_tells_what_is_asked_and_decided_and_how_many_wait() {
    let api = Api::start(false).await;
    let mut stream = Stream::open(&api, "/api/v1/approvals/stream", None).await;
    let pending = stream.next().await;
    assert_eq!(
        (pending.1.as_str(), data(&pending)["pending"].clone()),
        ("pending", json!(0))
    );

    let (_, lease) = api.running_agent("deploys").await;
    let approval = api
        .store
        .request_approval(
            &lease,
            &NewApproval {
                call_id: "call-1".into(),
                kind: approval_kind::TOOL,
                tool: "exec_shell".into(),
                arguments: json!({"command": "make deploy"}),
                reason: "the policy asks".into(),
                options: None,
                expires_at: now_millis() + 3_600_000,
            },
        )
        .await
        .unwrap();
    let (asked, _) = stream
        .until(|e| e.1 == "approval" && data(e)["status"] == "pending")
        .await;
    assert_eq!(data(&asked)["id"], approval.id);
    assert_eq!(data(&asked)["tool"], "exec_shell");
    stream
        .until(|e| e.1 == "pending" && data(e)["pending"] == 1)
        .await;

    let (status, _) = api
        .post(
            &format!("/api/v1/approvals/{}/deny", approval.id),
            r#"{"reason": "not today"}"#,
        )
        .await;
    assert_eq!(status, 200);
    let (denied, _) = stream
        .until(|e| e.1 == "approval" && data(e)["status"] == "denied")
        .await;
    assert_eq!(data(&denied)["id"], approval.id);
    stream
        .until(|e| e.1 == "pending" && data(e)["pending"] == 0)
        .await;
    // Resumed from before the decision, the decision is told again.
    let before = asked.0.unwrap();
    let mut resumed = Stream::open(&api, "/api/v1/approvals/stream", Some(&before)).await;
    resumed
        .until(|e| e.1 == "approval" && data(e)["status"] == "denied")
        .await;
}

/// The pieces of a reply a worker of the daemon streams reach the task's stream as `delta`
/// events, with no id (they are not stored, so a reconnection does not replay them), and only
/// the stream of their own task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_stream_carries_the_pieces_of_the_reply_as_it_streams() {
    let api = Api::start(false).await;
    let mut new = NewTask::agent("streams", "say hello");
    new.workspace = Some(api.ws.clone());
    let id = api.store.create_task(&new).await.unwrap();
    let other = api.task("another").await;
    let mut stream =
        Stream::open(&api, &format!("/api/v1/tasks/{}/events/stream", id.0), None).await;
    assert_eq!(stream.next().await.1, "created");
    let mut others =
        Stream::open(&api, &format!("/api/v1/tasks/{other}/events/stream"), None).await;
    assert_eq!(others.next().await.1, "created");
    for (task, text) in [(id, "Hel"), (TaskId(other), "not yours"), (id, "lo")] {
        api.live
            .send(orchestrator_web::LivePiece {
                task,
                kind: "delta",
                data: json!({ "content": text }),
            })
            .unwrap();
    }
    let pieces = [stream.next().await, stream.next().await];
    for (piece, text) in pieces.iter().zip(["Hel", "lo"]) {
        assert_eq!((piece.0.as_deref(), piece.1.as_str()), (None, "delta"));
        assert_eq!(data(piece)["content"], text);
    }
    let theirs = others.next().await;
    assert_eq!(data(&theirs)["content"], "not yours");
    // Stored events still come, numbered, after the pieces.
    api.store.claim_task("web-test", id, 60_000).await.unwrap();
    let claimed = stream.next().await;
    assert_eq!(
        (claimed.0.as_deref(), claimed.1.as_str()),
        (Some("2"), "claimed")
    );
}
