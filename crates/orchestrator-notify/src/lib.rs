//! Notifications: telling a person what needs them or what went wrong (an approval or a question
//! waiting, a task failed or, opt-in, succeeded, an automation parked, a GitHub delivery given up
//! on, a daemon started without a sandbox) through the sinks of the config: a webhook (JSON
//! signed with HMAC-SHA256, like GitHub's), a Slack-compatible incoming webhook, and mail over
//! SMTP.
//!
//! What to tell is kept in the store as an outbox (the store's notifications.rs): notices found
//! in the order of changes or written by the transaction of the change itself, then one row per
//! notice and sink, sent by the one daemon that holds the sender's lease, with retries and
//! backoff. So a crash neither loses a notice nor makes a second one; a message is sent at least
//! once, with an idempotency key that stays the same on every try.
//!
//! Architecture Invariant: the notifier knows the store and the vocabulary, not the worker, the
//! scheduler or GitHub; the daemon drives it (`Notifier::run`), and every address it sends to
//! comes from the config, never from what an agent wrote.

mod collect;
pub mod config;
mod error;
pub mod message;
pub mod send;
mod service;

pub use config::{NotifyConfig, SinkConfig, SinkKind};
pub use error::{Error, Result};
pub use message::{Message, compose};
pub use service::{
    DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_CAP, DEFAULT_BATCH, DEFAULT_INTERVAL, DEFAULT_MAX_AGE,
    Notifier, NotifierConfig, PassCounts, backoff_millis,
};

use orchestrator_store::{NewNotice, Notice};
use orchestrator_types::{NoticeKind, TaskId, now_millis};

/// The notice of a daemon that started without a sandbox for agents' processes.
pub fn degraded(worker: &str, reason: &str) -> NewNotice {
    NewNotice {
        key: format!("degraded:{worker}"),
        kind: NoticeKind::Degraded,
        task_id: None,
        at: now_millis(),
        data: serde_json::json!({ "worker": worker, "reason": reason }),
    }
}

/// The sample `orchestrator notify test` sends: an approval waiting, as a real one reads, marked
/// as a test in its title and its delivery key.
pub fn sample(dashboard_url: &str) -> Message {
    let at = now_millis();
    let notice = Notice {
        id: 0,
        key: format!("test:{at}"),
        kind: NoticeKind::ApprovalWaiting.as_str().to_owned(),
        task_id: Some(TaskId(0)),
        at,
        data: serde_json::json!({
            "approval": 0,
            "task_title": "a test of this sink",
            "tool": "exec_shell",
            "summary": "echo hello",
            "reason": "orchestrator notify test",
            "test": true,
        }),
    };
    let mut message = compose(
        &notice,
        dashboard_url.trim_end_matches('/'),
        format!("test.{at}.{:08x}", rand::random::<u32>()),
    );
    message.title = format!("Test: {}", message.title);
    message
}
