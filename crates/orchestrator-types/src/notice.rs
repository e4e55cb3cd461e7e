//! What a person can be told without asking: the kinds of notices the daemon sends to the sinks of
//! the config (a webhook, a Slack channel, a mailbox), in the words the config and the CLI use.
//!
//! A notice is not a timeline event: it is something that happened to a task, an automation, a
//! GitHub delivery or the daemon that someone should hear about now, named by a key that stays the
//! same however often it is found again (see orchestrator-notify and the store's `notify_events`).

use std::fmt;

/// The kind of a notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NoticeKind {
    /// A guarded tool call waits for a person's approval.
    ApprovalWaiting,
    /// An agent's question (`ask_user`) waits for an answer.
    QuestionWaiting,
    /// A task ended failed.
    TaskFailed,
    /// A task ended succeeded; opt-in, since most are.
    TaskSucceeded,
    /// An automation was parked: its slot could not fire and it is paused until a person resumes it.
    AutomationParked,
    /// A GitHub delivery failed and will not be tried again by itself.
    DeliveryFailed,
    /// A daemon started without a sandbox for agents' processes.
    Degraded,
}

impl NoticeKind {
    pub const ALL: [NoticeKind; 7] = [
        NoticeKind::ApprovalWaiting,
        NoticeKind::QuestionWaiting,
        NoticeKind::TaskFailed,
        NoticeKind::TaskSucceeded,
        NoticeKind::AutomationParked,
        NoticeKind::DeliveryFailed,
        NoticeKind::Degraded,
    ];

    /// What a sink gets when its config names no events: everything but `task_succeeded`.
    pub const DEFAULT: [NoticeKind; 6] = [
        NoticeKind::ApprovalWaiting,
        NoticeKind::QuestionWaiting,
        NoticeKind::TaskFailed,
        NoticeKind::AutomationParked,
        NoticeKind::DeliveryFailed,
        NoticeKind::Degraded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::ApprovalWaiting => "approval_waiting",
            NoticeKind::QuestionWaiting => "question_waiting",
            NoticeKind::TaskFailed => "task_failed",
            NoticeKind::TaskSucceeded => "task_succeeded",
            NoticeKind::AutomationParked => "automation_parked",
            NoticeKind::DeliveryFailed => "delivery_failed",
            NoticeKind::Degraded => "degraded",
        }
    }

    pub fn parse(text: &str) -> Option<NoticeKind> {
        NoticeKind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

impl fmt::Display for NoticeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_and_only_success_is_opt_in() {
        for kind in NoticeKind::ALL {
            assert_eq!(NoticeKind::parse(kind.as_str()), Some(kind));
            assert_eq!(
                NoticeKind::DEFAULT.contains(&kind),
                kind != NoticeKind::TaskSucceeded
            );
        }
        assert_eq!(NoticeKind::parse("task_done"), None);
    }
}
