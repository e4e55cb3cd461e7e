//! The `/api/v1` router served on a loopback port over a real SQLite store, reached over real
//! HTTP: every route and its refusals (no token, read-only, bad input), the OpenAPI document
//! against the router both ways, and each resource's behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::sync::Arc;

use orchestrator_store::Store;
use orchestrator_types::NewTask;
use orchestrator_web::Web;
use serde_json::Value;

mod access;
mod automations;
mod change_streams;
mod live;
mod logs;
mod pages;
mod reading;
mod records;
mod tasks;

const TOKEN: &str = "t0ken-for-tests";

pub(crate) struct Api {
    base: String,
    client: reqwest::Client,
    _db: orchestrator_test_support::TestStore,
    store: Store,
    _ws: tempfile::TempDir,
    ws: String,
    sessions: orchestrator_web::Sessions,
    /// Where a worker of the daemon would send the pieces of replies as they stream.
    live: tokio::sync::broadcast::Sender<orchestrator_web::LivePiece>,
}

impl Api {
    pub(crate) async fn start(read_only: bool) -> Api {
        let db = orchestrator_test_support::sqlite_store().await;
        let store = db.store.clone();
        let sessions = orchestrator_web::Sessions::default();
        let web =
            Web::new(store.clone(), Arc::from(TOKEN), read_only).with_sessions(sessions.clone());
        let live = web.live();
        let app = orchestrator_web::app(web);
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
            sessions,
            live,
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
        // A list's stream never ends: its answer is its status.
        if response
            .headers()
            .get("content-type")
            .is_some_and(|t| t == "text/event-stream")
        {
            return (status, Value::String("(a stream)".into()));
        }
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

    /// An agent task in the workspace, claimed: its id and the lease to write for it.
    pub(crate) async fn running_agent(
        &self,
        title: &str,
    ) -> (orchestrator_types::TaskId, orchestrator_store::Lease) {
        let mut new = NewTask::agent(title, "do it");
        new.workspace = Some(self.ws.clone());
        let id = self.store.create_task(&new).await.unwrap();
        let (_, lease) = self
            .store
            .claim_task("web-test", id, 60_000)
            .await
            .unwrap()
            .unwrap();
        (id, lease)
    }

    /// The status a stream answers with the token and, if given, a `Last-Event-ID`.
    pub(crate) async fn stream_status(&self, path: &str, last_event_id: Option<&str>) -> u16 {
        let mut request = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(TOKEN);
        if let Some(value) = last_event_id {
            request = request.header("Last-Event-ID", value);
        }
        request.send().await.unwrap().status().as_u16()
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
    path.replace("{id}", "1")
        .replace("{name}", "nightly")
        .replace("{n}", "0")
        .replace("{job}", "1")
        .replace("{terminal}", "pty-1")
}

/// One Server-Sent Event: its id, its event name, its data.
pub(crate) type SseEvent = (Option<String>, String, String);

/// Reads events from an SSE response until `count` came or the stream ended.
pub(crate) async fn sse_events(
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
