//! A person's retry of a task whose gates failed: the agent of the new attempt is told what failed
//! and works on, instead of handing the same answer to the same gates again.
//!
//! A conversation that ends with the model's final answer is, on its own, finished: an attempt
//! that resumes it (the daemon was killed before the gates ran, or they could not run) goes to
//! the gates without asking the model again. What tells the two apart is the gates' record: when
//! an attempt at or after the one that saved the answer ran the gates and they failed, the answer
//! was judged, and a later attempt can only come from a retry.
//!
//! Budgets count per run: from the task's first attempt, or from the attempt after its latest
//! retry (the `retried` event names the attempt it followed). Attempts the daemon makes by itself
//! (a model server that was down, a hand-back) share their run's budget.

use orchestrator_store::SavedMessage;
use orchestrator_types::{ChatMessage, EventKind, GateRecord, Verdict};
use serde_json::json;

use super::{Agent, Halt};

/// The most bytes of a failed gate's log shown to the model: its end, where the failure usually
/// is.
const LOG_TAIL_BYTES: usize = 4000;
/// The most lines of that tail.
const LOG_TAIL_LINES: usize = 60;

impl Agent<'_> {
    /// The last attempt before the task's latest retry by a person (0 when it was never retried):
    /// the budgets count what later attempts spent.
    pub(super) async fn run_start(&self) -> Result<i64, Halt> {
        let retries = self
            .ctx
            .store
            .events_of_kind(self.task.id, EventKind::Retried)
            .await?;
        Ok(retries
            .iter()
            .filter_map(|e| e.data["attempt"].as_i64())
            .max()
            .unwrap_or(0))
    }

    /// When the final answer `answer` was judged by gates that failed and this is a later attempt:
    /// saves a message telling the model what failed, and returns it. `None`: the answer was not
    /// judged yet, so the gates decide.
    pub(super) async fn gate_failures_since(
        &self,
        answer: &SavedMessage,
        turn: i64,
    ) -> Result<Option<ChatMessage>, Halt> {
        let gates = self.ctx.store.gates(self.task.id).await?;
        let Some(judged) = gates
            .iter()
            .map(|g| g.attempt)
            .filter(|a| *a >= answer.attempt && *a < self.task.attempt)
            .max()
        else {
            return Ok(None);
        };
        let failed: Vec<&GateRecord> = gates
            .iter()
            .filter(|g| g.attempt == judged)
            .filter(|g| matches!(g.verdict, Verdict::Failed | Verdict::TimedOut))
            .collect();
        if failed.is_empty() {
            // Gates that could not run (an error of the machine, not of the answer) or were
            // canceled: they run again on the same answer.
            return Ok(None);
        }
        let mut text = format!(
            "Your last answer was checked by the task's gates in attempt {judged}, and {} of \
             them failed, so the task failed. A person asked for another try (attempt {}). \
             What failed:\n",
            failed.len(),
            self.task.attempt
        );
        for gate in &failed {
            text.push_str(&self.describe(gate).await?);
        }
        text.push_str(
            "\nFind the cause, change what needs changing, check it yourself where you can, then \
             answer again; the same gates run on your next answer.",
        );
        let message = ChatMessage::user(text.clone());
        let failures: Vec<&String> = failed.iter().map(|g| &g.name).collect();
        self.save_user_message(turn, &message, &text, json!({"gate_failures": failures}))
            .await?;
        Ok(Some(message))
    }

    /// One failed gate, for the model: its command, verdict, exit code, summary and the end of its
    /// log.
    async fn describe(&self, gate: &GateRecord) -> Result<String, Halt> {
        let exit = gate
            .exit_code
            .map(|c| format!(", exit code {c}"))
            .unwrap_or_default();
        let mut out = format!(
            "\n## Gate {:?}: {}{exit}, after {:.1} s\nCommand: {}\nSummary: {}\n",
            gate.name,
            gate.verdict,
            gate.duration_ms as f64 / 1000.0,
            gate.command,
            gate.summary.trim()
        );
        let log = match gate.log_artifact {
            Some(id) => match self.ctx.store.get_artifact(id).await {
                Ok(artifact) => artifact.bytes,
                // The log is evidence kept apart; without it the summary still says what failed.
                Err(orchestrator_store::Error::ArtifactNotFound(_)) => Vec::new(),
                Err(e) => return Err(e.into()),
            },
            None => Vec::new(),
        };
        let tail = log_tail(&String::from_utf8_lossy(&log));
        if !tail.is_empty() {
            out.push_str(&format!("The end of its log:\n```\n{tail}\n```\n"));
        }
        Ok(out)
    }
}

/// The last [`LOG_TAIL_LINES`] lines of `log`, at most [`LOG_TAIL_BYTES`] bytes of them.
fn log_tail(log: &str) -> String {
    let log = log.trim_end();
    let mut start = log.len().saturating_sub(LOG_TAIL_BYTES);
    while !log.is_char_boundary(start) {
        start += 1;
    }
    let tail = &log[start..];
    // A cut line is dropped: it would start in the middle of a word.
    let tail = match (start > 0, tail.find('\n')) {
        (true, Some(at)) => &tail[at + 1..],
        _ => tail,
    };
    let lines: Vec<&str> = tail.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_tail_keeps_whole_lines_from_the_end() {
        let log: String = (1..=200).map(|n| format!("line {n}\n")).collect();
        let tail = log_tail(&log);
        assert!(tail.ends_with("line 200"), "{tail}");
        assert!(tail.starts_with("line 141\n"), "{tail}");
        assert_eq!(tail.lines().count(), LOG_TAIL_LINES);
        let long = "é".repeat(5000);
        let tail = log_tail(&long);
        assert!(tail.len() <= LOG_TAIL_BYTES, "{}", tail.len());
        assert_eq!(log_tail(""), "");
    }
}
