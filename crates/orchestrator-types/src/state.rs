//! The task state machine. docs/state-machine.md draws it; each state says who moves a task out of it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Where a task is in its life. Terminal states are `Succeeded`, `Failed` and `Canceled`; only an
/// explicit retry moves a task out of `Failed` or `Canceled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Waiting to be claimed once `run_after` has passed. Moved out by a worker's claim (to
    /// `Running`) or by a cancel (to `Canceled`).
    Queued,
    /// Claimed by a worker under a lease. Moved out by that worker (to `Succeeded`, `Failed`,
    /// `Canceled`, `Waiting`, or back to `Queued` for a retryable failure or a graceful hand-back), or
    /// by the rescuer when the lease expires (to `Queued` with backoff, or `Failed` once
    /// `max_attempts` is spent, or `Canceled` when a cancel was requested).
    Running,
    /// Paused on a human: an approval or a question is pending. Moved out when it is answered or
    /// expires (to `Queued`, to resume), or by a cancel (to `Canceled`).
    Waiting,
    /// Every gate passed. Terminal.
    Succeeded,
    /// A gate did not pass, or attempts were exhausted. Moved out only by a retry (to `Queued`).
    Failed,
    /// Canceled by a user. Moved out only by a retry (to `Queued`).
    Canceled,
}

impl TaskState {
    pub const ALL: [TaskState; 6] = [
        TaskState::Queued,
        TaskState::Running,
        TaskState::Waiting,
        TaskState::Succeeded,
        TaskState::Failed,
        TaskState::Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::Waiting => "waiting",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Canceled => "canceled",
        }
    }

    /// A terminal task never changes again unless a user retries it.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Canceled
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskState {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        TaskState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| crate::Error::Unknown {
                what: "task state",
                value: s.to_owned(),
                expected: "queued, running, waiting, succeeded, failed, canceled",
            })
    }
}
