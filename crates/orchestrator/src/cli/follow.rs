//! `task events --follow --server URL`: a task's events over the daemon's API, with the pieces of
//! the model's reply as they stream (which a follower reading the store never sees: they are not
//! stored). Stored events go to stdout as `task events` prints them; the reply's text goes to
//! stderr as it comes, as `orchestrator run` shows it. A dropped connection is resumed from the
//! last event printed (`Last-Event-ID`), so nothing is printed twice or lost.

use std::time::Duration;

use anyhow::Context;
use orchestrator_types::{TaskEvent, TaskId, TaskState};
use orchestrator_worker::model::{SseEvent, SseParser};

use super::GlobalArgs;
use super::views::{EventView, attempt_header, event_line};
use crate::output;

/// Connections tried in a row without getting an event before giving up.
const ATTEMPTS: u32 = 6;

/// The token for the daemon's API: `ORCHESTRATOR_API_TOKEN`, the config file's `api_token`, or the
/// `api-token` file `serve` wrote in the home directory.
fn api_token(global: &GlobalArgs) -> anyhow::Result<String> {
    if let Ok(token) = std::env::var("ORCHESTRATOR_API_TOKEN")
        && !token.trim().is_empty()
    {
        return Ok(token.trim().to_owned());
    }
    if let Some(token) = global.config()?.api_token.filter(|t| !t.trim().is_empty()) {
        return Ok(token.trim().to_owned());
    }
    let path = global.home()?.join("api-token");
    let token = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "no API token: set ORCHESTRATOR_API_TOKEN, or read it from the daemon's {}",
            path.display()
        )
    })?;
    Ok(token.trim().to_owned())
}

/// What one connection ended with.
enum Ended {
    /// The task ended in this state: every event was printed.
    Task(TaskState),
    /// The connection dropped (or the daemon said `error`): try again from the last event.
    Dropped(String),
}

/// Follows task `id` on the daemon at `server` until it ends; returns its final state.
pub async fn follow(
    global: &GlobalArgs,
    server: &str,
    id: TaskId,
    json: bool,
) -> anyhow::Result<TaskState> {
    let token = api_token(global)?;
    let base = server.trim_end_matches('/');
    let url = format!("{base}/api/v1/tasks/{}/events/stream", id.0);
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()?;
    let mut after = 0;
    let mut failures = 0;
    loop {
        let before = after;
        match connection(&client, &url, &token, &mut after, json).await? {
            Ended::Task(state) => return Ok(state),
            Ended::Dropped(why) => {
                failures = if after > before { 1 } else { failures + 1 };
                if failures >= ATTEMPTS {
                    anyhow::bail!("lost the daemon at {base}: {why}");
                }
                let wait = Duration::from_millis(250 << failures.min(5));
                eprintln!("(connection lost: {why}; again in {} ms)", wait.as_millis());
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// One connection: prints what it gets; `after` follows the events printed.
async fn connection(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    after: &mut i64,
    json: bool,
) -> anyhow::Result<Ended> {
    let response = client
        .get(url)
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .header("last-event-id", after.to_string())
        .send()
        .await;
    let mut response = match response {
        Ok(response) => response,
        Err(e) => return Ok(Ended::Dropped(e.to_string())),
    };
    let status = response.status();
    if !status.is_success() {
        // Refusals (no such task, a wrong token) do not get better by asking again.
        let body = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or(body);
        if status.is_server_error() {
            return Ok(Ended::Dropped(format!("{status}: {message}")));
        }
        anyhow::bail!("the daemon refused: {status}: {message}");
    }
    let mut parser = SseParser::default();
    let mut printer = Printer {
        after,
        json,
        mid_line: false,
    };
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => {
                let ended = parser
                    .finish_event()
                    .and_then(|event| printer.event(event).transpose())
                    .transpose()?;
                printer.end_line();
                return Ok(ended.unwrap_or(Ended::Dropped("the stream ended".into())));
            }
            Err(e) => {
                printer.end_line();
                return Ok(Ended::Dropped(e.to_string()));
            }
        };
        let events = parser.push_events(&chunk).map_err(anyhow::Error::msg)?;
        for event in events {
            if let Some(ended) = printer.event(event)? {
                printer.end_line();
                return Ok(ended);
            }
        }
    }
}

struct Printer<'a> {
    after: &'a mut i64,
    json: bool,
    /// Streamed text on stderr has not ended its line.
    mid_line: bool,
}

impl Printer<'_> {
    fn end_line(&mut self) {
        if std::mem::take(&mut self.mid_line) {
            eprintln!();
        }
    }

    /// Prints one event of the stream; `Some` when it ended the connection.
    fn event(&mut self, event: SseEvent) -> anyhow::Result<Option<Ended>> {
        match event.event.as_deref() {
            Some("end") => {
                let state = event
                    .data
                    .trim()
                    .parse::<TaskState>()
                    .map_err(|e| anyhow::anyhow!("the daemon ended the stream oddly: {e}"))?;
                Ok(Some(Ended::Task(state)))
            }
            Some("error") => Ok(Some(Ended::Dropped(event.data))),
            Some("delta") => {
                let piece: serde_json::Value =
                    serde_json::from_str(&event.data).unwrap_or_default();
                if let Some(text) = piece["content"].as_str() {
                    output::stream_piece(text);
                    self.mid_line = !text.ends_with('\n');
                }
                Ok(None)
            }
            Some("retrying") => {
                self.end_line();
                let piece: serde_json::Value =
                    serde_json::from_str(&event.data).unwrap_or_default();
                eprintln!(
                    "(the model failed: {}; asking again, attempt {})",
                    piece["error"].as_str().unwrap_or("?"),
                    piece["attempt"]
                );
                Ok(None)
            }
            _ => {
                let stored: TaskEvent = serde_json::from_str(&event.data)
                    .context("the daemon sent an event this version cannot read")?;
                if stored.seq <= *self.after {
                    return Ok(None);
                }
                *self.after = stored.seq;
                self.end_line();
                if self.json {
                    output::json_line(&EventView::new(&stored))?;
                } else {
                    if let Some(header) = attempt_header(&stored) {
                        println!("{header}");
                    }
                    println!("{}", event_line(&stored));
                }
                Ok(None)
            }
        }
    }
}
