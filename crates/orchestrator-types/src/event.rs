//! The timeline of a task: append-only events, numbered from 1 per task.

use crate::TaskId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What happened. Stored as its snake_case name, so old rows stay readable when kinds are added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Created,
    Claimed,
    GateStarted,
    GateFinished,
    Succeeded,
    Failed,
    CancelRequested,
    Canceled,
    /// Put back in the queue after a retryable failure, with a backoff.
    Requeued,
    /// The lease expired and the rescuer took the task back.
    Rescued,
    /// A user asked for another run of a failed or canceled task.
    Retried,
    /// A worker shutting down gave the task back without spending an attempt.
    HandedBack,
    /// The agent paused on a person: an approval or a question is pending.
    Waiting,
    /// A guarded tool call or a question asks for a person's answer.
    ApprovalRequested,
    /// An approval was approved, denied, answered or expired.
    ApprovalDecided,
    /// The model finished a message (text and the tool calls it asked for), with its token usage.
    Message,
    /// A tool call finished (or was found interrupted), with its status, duration and summary.
    ToolCall,
    /// The checklist changed.
    Checklist,
    /// The agent's plan changed.
    Plan,
    /// The agent left a note.
    Note,
    /// A model call failed in a way that is retried.
    ModelRetry,
    /// The agent spawned a sub-agent (a child task).
    ChildSpawned,
    /// The parent agent (or a person) sent this task's agent more input.
    Input,
    /// A write to GitHub on the task's behalf (a comment posted or edited, an issue closed); the
    /// data carries the URL GitHub returned, so the timeline links to what was written.
    GithubWrite,
    /// A candidate patch (a PR attempt) was recorded for the task.
    AttemptRecorded,
    /// One recorded attempt of a group was selected as the one to open a PR with.
    AttemptSelected,
    /// The task's own clone of a checkout was made (or found) as its workspace.
    WorkspacePrepared,
    /// An attempt learned its model's context window (tokens, where the number came from, and
    /// where compaction starts).
    ContextWindow,
    /// The conversation was compacted to fit the context window; its new messages start at
    /// `first_seq`.
    Compacted,
    /// An MCP server the task selected started (with its tools), failed (with the error) or is
    /// disabled in the config.
    McpServer,
    /// A connection a sandboxed process asked the jail's network proxy for: host, port, the
    /// address connected to, whether it was allowed and why not, and the bytes each way.
    NetworkConnection,
    /// The task was tied to the machine running it (its `requires` gained `host:<id>`), with the
    /// reason: its workspace cannot move to another machine.
    Pinned,
    /// A checkpoint of the workspace (its difference from the task's base) was saved after a
    /// turn: the turn, the patch's size and hash, never its bytes.
    CheckpointSaved,
    /// A checkpoint could not be saved (larger than the cap, or the workspace could not be read):
    /// the task's workspace exists only on this machine, so the task cannot move to another.
    CheckpointNotSaved,
    /// A rescued task's workspace was made again from its base and its last checkpoint.
    CheckpointRestored,
    /// Work on an existing pull request (`step`): its head resolved and checked (`started`), a
    /// push begun with its commit's date fixed (`pushing`), the commit on the branch (`pushed`),
    /// nothing to push (`unchanged`), or the branch moved by someone else (`moved`, with the
    /// task that runs again on the new head).
    PullRound,
    /// A repository task's environment (its setup phase): made by running setup, reused from this
    /// machine's cache (maintained when its commit moved), or failed, with the cache key, how long
    /// it took, its size and the artifact of its log.
    Environment,
    /// A hook of the person's config ran at a step of the agent's work (or its decision was
    /// replayed): the step, the hook, what it decided and why, its exit and bounded output.
    Hook,
    /// The repository's instructions (AGENTS.md and the like) the conversation opened with.
    Instructions,
    /// A best-of-N lead's step (`step`): its siblings made (`siblings`), a choice made by the
    /// gates, the size or a judge (`chosen`, with each candidate and why), none passing
    /// (`none_passed`), the choice overridden by a person (`overridden`), the pull request opened
    /// from the winner (`pull_opened`).
    BestOf,
}

impl EventKind {
    pub const ALL: [EventKind; 40] = [
        EventKind::Created,
        EventKind::Claimed,
        EventKind::GateStarted,
        EventKind::GateFinished,
        EventKind::Succeeded,
        EventKind::Failed,
        EventKind::CancelRequested,
        EventKind::Canceled,
        EventKind::Requeued,
        EventKind::Rescued,
        EventKind::Retried,
        EventKind::HandedBack,
        EventKind::Waiting,
        EventKind::ApprovalRequested,
        EventKind::ApprovalDecided,
        EventKind::Message,
        EventKind::ToolCall,
        EventKind::Checklist,
        EventKind::Plan,
        EventKind::Note,
        EventKind::ModelRetry,
        EventKind::ChildSpawned,
        EventKind::Input,
        EventKind::GithubWrite,
        EventKind::AttemptRecorded,
        EventKind::AttemptSelected,
        EventKind::WorkspacePrepared,
        EventKind::ContextWindow,
        EventKind::Compacted,
        EventKind::McpServer,
        EventKind::NetworkConnection,
        EventKind::Pinned,
        EventKind::CheckpointSaved,
        EventKind::CheckpointNotSaved,
        EventKind::CheckpointRestored,
        EventKind::PullRound,
        EventKind::Environment,
        EventKind::Hook,
        EventKind::Instructions,
        EventKind::BestOf,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Claimed => "claimed",
            EventKind::GateStarted => "gate_started",
            EventKind::GateFinished => "gate_finished",
            EventKind::Succeeded => "succeeded",
            EventKind::Failed => "failed",
            EventKind::CancelRequested => "cancel_requested",
            EventKind::Canceled => "canceled",
            EventKind::Requeued => "requeued",
            EventKind::Rescued => "rescued",
            EventKind::Retried => "retried",
            EventKind::HandedBack => "handed_back",
            EventKind::Waiting => "waiting",
            EventKind::ApprovalRequested => "approval_requested",
            EventKind::ApprovalDecided => "approval_decided",
            EventKind::Message => "message",
            EventKind::ToolCall => "tool_call",
            EventKind::Checklist => "checklist",
            EventKind::Plan => "plan",
            EventKind::Note => "note",
            EventKind::ModelRetry => "model_retry",
            EventKind::ChildSpawned => "child_spawned",
            EventKind::Input => "input",
            EventKind::GithubWrite => "github_write",
            EventKind::AttemptRecorded => "attempt_recorded",
            EventKind::AttemptSelected => "attempt_selected",
            EventKind::WorkspacePrepared => "workspace_prepared",
            EventKind::ContextWindow => "context_window",
            EventKind::McpServer => "mcp_server",
            EventKind::Compacted => "compacted",
            EventKind::NetworkConnection => "network_connection",
            EventKind::Pinned => "pinned",
            EventKind::CheckpointSaved => "checkpoint_saved",
            EventKind::CheckpointNotSaved => "checkpoint_not_saved",
            EventKind::CheckpointRestored => "checkpoint_restored",
            EventKind::PullRound => "pull_round",
            EventKind::Environment => "environment",
            EventKind::Hook => "hook",
            EventKind::Instructions => "instructions",
            EventKind::BestOf => "best_of",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a task's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEvent {
    pub task_id: TaskId,
    /// 1, 2, 3, ... per task, with no gaps and no repeats.
    pub seq: i64,
    /// Unix milliseconds; read also from the RFC 3339 string the API sends.
    #[serde(deserialize_with = "crate::time::millis_or_rfc3339")]
    pub at: i64,
    /// The kind's name; unknown kinds written by newer versions are kept as text.
    pub kind: String,
    /// Kind-specific details.
    pub data: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored name, serde's name and `parse` must agree, or rows written by one path would be
    /// unreadable by another.
    #[test]
    fn every_kind_round_trips_by_name() {
        for kind in EventKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).ok(),
                Some(serde_json::Value::String(kind.as_str().to_owned()))
            );
            assert_eq!(EventKind::parse(kind.as_str()), Some(kind));
        }
        let names: std::collections::HashSet<_> =
            EventKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), EventKind::ALL.len(), "ALL lists a kind twice");
        assert_eq!(
            EventKind::parse("github_write"),
            Some(EventKind::GithubWrite)
        );
    }

    /// The store's rows carry milliseconds and the API sends RFC 3339: both read as one instant.
    #[test]
    fn an_events_time_reads_from_milliseconds_or_rfc3339() {
        let stored = r#"{"task_id":1,"seq":1,"at":1764122400000,"kind":"created","data":{}}"#;
        let sent =
            r#"{"task_id":1,"seq":1,"at":"2025-11-26T02:00:00.000Z","kind":"created","data":{}}"#;
        let a: TaskEvent = serde_json::from_str(stored).unwrap();
        let b: TaskEvent = serde_json::from_str(sent).unwrap();
        assert_eq!(a.at, b.at);
        let bad = r#"{"task_id":1,"seq":1,"at":"yesterday","kind":"created","data":{}}"#;
        assert!(serde_json::from_str::<TaskEvent>(bad).is_err());
    }
}
