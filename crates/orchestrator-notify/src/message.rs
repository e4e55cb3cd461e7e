//! A notice in words: its title, a sentence a person reads, the dashboard's link to what it is
//! about, and how each sink carries it (the webhook's JSON, Slack's `{"text": ...}`, a mail's
//! subject and body).
//!
//! The facts a notice keeps (`notify_events.data`) are written by whoever found it (the collector,
//! the store's transaction that parked an automation); the words are made here, in one place.
//! What agents and strangers wrote (a question, a command, a title) passes
//! `orchestrator_types::visible`, so control and bidi characters arrive as escapes, and is
//! escaped again for Slack's markup.

use orchestrator_store::Notice;
use orchestrator_types::{NoticeKind, format_millis, visible};
use serde::Serialize;
use serde_json::Value;

/// One notice, ready for any sink. The webhook's body is this object as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Message {
    /// The idempotency key: the same on every try of this message to this sink.
    pub delivery: String,
    /// The notice's kind (`approval_waiting`, ...).
    pub event: String,
    pub task_id: Option<i64>,
    pub title: String,
    pub text: String,
    /// Where the dashboard shows it, if it shows it.
    pub link: Option<String>,
    /// When it happened, RFC 3339.
    pub at: String,
    /// The notice's facts, as stored.
    pub data: Value,
}

/// The message of `notice` for the sink `sink`, with links under `dashboard` (no trailing `/`).
pub fn compose(notice: &Notice, dashboard: &str, delivery: String) -> Message {
    let d = &notice.data;
    let text_of = |key: &str| visible(d[key].as_str().unwrap_or("")).into_owned();
    let task = notice.task_id.map(|t| t.0);
    let task_title = text_of("task_title");
    let kind = NoticeKind::parse(&notice.kind);
    let (title, text, path) = match kind {
        Some(NoticeKind::ApprovalWaiting) => {
            let tool = text_of("tool");
            (
                format!("Approval waiting: {tool} in task {}", task.unwrap_or(0)),
                format!(
                    "Task {} \"{task_title}\" waits for approval of {tool}: {} ({}).",
                    task.unwrap_or(0),
                    text_of("summary"),
                    text_of("reason"),
                ),
                Some(format!(
                    "/approvals#approval-{}",
                    d["approval"].as_i64().unwrap_or(0)
                )),
            )
        }
        Some(NoticeKind::QuestionWaiting) => {
            let options: Vec<String> = d["options"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|o| visible(o).into_owned())
                .collect();
            let choices = if options.is_empty() {
                String::new()
            } else {
                format!(" ({})", options.join(" / "))
            };
            (
                format!("Question waiting in task {}", task.unwrap_or(0)),
                format!(
                    "Task {} \"{task_title}\" asks: {}{choices}",
                    task.unwrap_or(0),
                    text_of("question"),
                ),
                Some(format!(
                    "/approvals#approval-{}",
                    d["approval"].as_i64().unwrap_or(0)
                )),
            )
        }
        Some(NoticeKind::TaskFailed) | Some(NoticeKind::TaskSucceeded) => {
            let failed = kind == Some(NoticeKind::TaskFailed);
            // The timeline's words for the ending ("failed: gate 1 (cargo test) failed"), or
            // the bare state.
            let said = match text_of("said") {
                said if said.is_empty() => if failed { "failed" } else { "succeeded" }.to_owned(),
                said => said,
            };
            let text = format!(
                "Task {} \"{task_title}\" {}.",
                task.unwrap_or(0),
                said.trim_end_matches('.')
            );
            (
                format!(
                    "Task {} {}: {task_title}",
                    task.unwrap_or(0),
                    if failed { "failed" } else { "succeeded" }
                ),
                text,
                task.map(|t| format!("/tasks/{t}")),
            )
        }
        Some(NoticeKind::AutomationParked) => {
            let name = text_of("automation");
            (
                format!("Automation {name} parked"),
                format!(
                    "Automation {name} was parked: its slot could not fire ({}). It stays paused until someone resumes it.",
                    text_of("error")
                ),
                Some(format!("/automations/{name}")),
            )
        }
        Some(NoticeKind::DeliveryFailed) => {
            let repo = text_of("repo");
            (
                format!("GitHub delivery {} failed", text_of("delivery")),
                format!(
                    "GitHub delivery {} ({}{}) failed and will not be tried again by itself: {}.",
                    text_of("delivery"),
                    text_of("event"),
                    if repo.is_empty() {
                        String::new()
                    } else {
                        format!(" on {repo}")
                    },
                    text_of("error"),
                ),
                None,
            )
        }
        Some(NoticeKind::Degraded) => (
            format!("Daemon {} started without a sandbox", text_of("worker")),
            format!(
                "Daemon {} started in a degraded mode: {}.",
                text_of("worker"),
                text_of("reason")
            ),
            None,
        ),
        None => (
            format!("{} notice", notice.kind),
            visible(&d.to_string()).into_owned(),
            None,
        ),
    };
    Message {
        delivery,
        event: notice.kind.clone(),
        task_id: task,
        title,
        text,
        link: path.map(|p| format!("{dashboard}{p}")),
        at: format_millis(notice.at),
        data: notice.data.clone(),
    }
}

impl Message {
    /// Slack's incoming-webhook body: the title in bold, the sentence, and the link. Slack reads
    /// `&`, `<` and `>` as markup, so they are escaped in what others wrote.
    pub fn slack(&self) -> Value {
        let mut text = format!(
            "*{}*\n{}",
            slack_escape(&self.title),
            slack_escape(&self.text)
        );
        if let Some(link) = &self.link {
            text.push_str(&format!("\n<{}|Open in the dashboard>", slack_escape(link)));
        }
        serde_json::json!({ "text": text })
    }

    /// A mail's subject.
    pub fn subject(&self) -> String {
        format!("[orchestrator] {}", self.title)
    }

    /// A mail's plain-text body.
    pub fn body(&self) -> String {
        let mut body = format!("{}\n", self.text);
        if let Some(link) = &self.link {
            body.push_str(&format!("\n{link}\n"));
        }
        body.push_str(&format!(
            "\nEvent: {}\nAt: {}\nDelivery: {}\n",
            self.event, self.at, self.delivery
        ));
        body
    }
}

fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A short form of a tool call's arguments: the command of a shell call, the path of a file
/// call, else the JSON clipped.
pub(crate) fn summarize_arguments(arguments: &Value) -> String {
    for key in ["command", "path", "url", "title"] {
        if let Some(text) = arguments[key].as_str() {
            return clip(text, 300);
        }
    }
    clip(&arguments.to_string(), 300)
}

pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orchestrator_types::TaskId;
    use serde_json::json;

    fn notice(kind: NoticeKind, task: Option<i64>, data: Value) -> Notice {
        Notice {
            id: 1,
            key: "k".into(),
            kind: kind.as_str().into(),
            task_id: task.map(TaskId),
            at: 0,
            data,
        }
    }

    #[test]
    fn each_kind_reads_as_a_sentence_with_its_link() {
        let base = "http://127.0.0.1:7411";
        let cases = [
            (
                notice(
                    NoticeKind::ApprovalWaiting,
                    Some(4),
                    json!({"approval": 9, "task_title": "fix", "tool": "exec_shell",
                           "summary": "rm -rf build", "reason": "shell commands ask"}),
                ),
                "Task 4 \"fix\" waits for approval of exec_shell: rm -rf build (shell commands ask).",
                Some("http://127.0.0.1:7411/approvals#approval-9"),
            ),
            (
                notice(
                    NoticeKind::QuestionWaiting,
                    Some(4),
                    json!({"approval": 10, "task_title": "fix", "question": "Which database?",
                           "options": ["sqlite", "postgres"]}),
                ),
                "Task 4 \"fix\" asks: Which database? (sqlite / postgres)",
                Some("http://127.0.0.1:7411/approvals#approval-10"),
            ),
            (
                notice(
                    NoticeKind::TaskFailed,
                    Some(5),
                    json!({"task_title": "tests", "said": "failed: gate 1 failed"}),
                ),
                "Task 5 \"tests\" failed: gate 1 failed.",
                Some("http://127.0.0.1:7411/tasks/5"),
            ),
            (
                notice(
                    NoticeKind::AutomationParked,
                    None,
                    json!({"automation": "nightly", "error": "no workspace"}),
                ),
                "Automation nightly was parked: its slot could not fire (no workspace). It stays paused until someone resumes it.",
                Some("http://127.0.0.1:7411/automations/nightly"),
            ),
            (
                notice(
                    NoticeKind::Degraded,
                    None,
                    json!({"worker": "w1", "reason": "bubblewrap is missing"}),
                ),
                "Daemon w1 started in a degraded mode: bubblewrap is missing.",
                None,
            ),
        ];
        for (notice, text, link) in cases {
            let message = compose(&notice, base, "key".into());
            assert_eq!(message.text, text);
            assert_eq!(message.link.as_deref(), link);
            assert_eq!(message.at, "1970-01-01T00:00:00.000Z");
        }
    }

    #[test]
    fn what_agents_wrote_is_escaped_for_slack_and_made_visible() {
        let message = compose(
            &notice(
                NoticeKind::QuestionWaiting,
                Some(1),
                json!({"approval": 1, "task_title": "t", "question": "<!channel> & \u{202e}evil"}),
            ),
            "http://h",
            "key".into(),
        );
        let slack = message.slack()["text"].as_str().unwrap().to_owned();
        assert!(slack.contains("&lt;!channel&gt; &amp;"), "{slack}");
        assert!(!slack.contains('\u{202e}'), "{slack}");
        assert!(slack.ends_with("<http://h/approvals#approval-1|Open in the dashboard>"));
    }
}
