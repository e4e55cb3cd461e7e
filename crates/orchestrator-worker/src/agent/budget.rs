//! What an agent's budgets have spent: tokens (the server's counts, estimated where it sends
//! none) and milliseconds of agent work, summed over the attempts of the task's run: every
//! attempt since it was created, or since a person last retried it (see `retry.rs`).

use orchestrator_store::SavedMessage;
use orchestrator_types::{ChatMessage, Role, Usage};

use crate::model::ToolDefinition;

/// What a budget has spent so far: tokens (with how many of them are estimates) and milliseconds
/// of agent work.
#[derive(Debug, Default)]
pub(super) struct Budget {
    pub(super) usage: Usage,
    estimated_tokens: u64,
    pub(super) work_ms: i64,
}

impl Budget {
    /// What the run's earlier attempts (those after `run_start`) spent: their replies' usage and
    /// model time, their calls' time.
    pub(super) fn of_saved(
        saved: &[SavedMessage],
        calls: &[orchestrator_store::ToolCallRecord],
        run_start: i64,
    ) -> Budget {
        let mut budget = Budget::default();
        for m in saved.iter().filter(|m| m.attempt > run_start) {
            if let Some(u) = m.usage {
                budget.usage.add(u);
            }
            budget.work_ms += m.model_ms.unwrap_or(0);
        }
        budget.work_ms += calls
            .iter()
            .filter(|c| c.attempt > run_start)
            .filter_map(|c| c.duration_ms)
            .sum::<i64>();
        budget
    }

    /// Adds an estimate for each saved reply of the run (after `run_start`) whose server reported
    /// no usage.
    /// `starts`: where each compaction's rows begin; a reply was asked with the rows of its own
    /// conversation, not with every row before it.
    pub(super) fn estimate_missing(
        &mut self,
        saved: &[SavedMessage],
        starts: &[i64],
        tools: &[ToolDefinition],
        run_start: i64,
    ) {
        // A compaction copies replies into its rows; a copy was no model call.
        let mut seen = std::collections::HashSet::new();
        for (at, m) in saved.iter().enumerate() {
            if m.message.role == Role::Assistant
                && !seen.insert(serde_json::to_string(&m.message).unwrap_or_default())
            {
                continue;
            }
            if m.message.role == Role::Assistant && m.usage.is_none() && m.attempt > run_start {
                let start = starts.iter().filter(|s| **s <= m.seq).max().copied();
                let before: Vec<ChatMessage> = saved[..at]
                    .iter()
                    .filter(|r| start.is_none_or(|s| r.seq >= s))
                    .map(|m| m.message.clone())
                    .collect();
                self.add_estimate(estimate_usage(&before, tools, &m.message));
            }
        }
    }

    pub(super) fn add_estimate(&mut self, guess: Usage) {
        self.usage.add(guess);
        self.estimated_tokens += guess.total_tokens;
    }

    pub(super) fn estimate_note(&self) -> String {
        if self.estimated_tokens == 0 {
            String::new()
        } else {
            format!(
                ", {} of them estimated because the model server did not report usage",
                self.estimated_tokens
            )
        }
    }
}

/// A rough count of the tokens of a request and its reply, for servers that report none: four
/// bytes of JSON to a token, the usual ratio for English and code.
pub(super) fn estimate_usage(
    conversation: &[ChatMessage],
    tools: &[ToolDefinition],
    reply: &ChatMessage,
) -> Usage {
    let bytes = |m: &ChatMessage| serde_json::to_vec(m).map_or(0, |v| v.len());
    let prompt: usize = conversation.iter().map(bytes).sum::<usize>()
        + tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
            .sum::<usize>();
    let prompt_tokens = crate::model::estimate_tokens(prompt);
    let completion_tokens = crate::model::estimate_tokens(bytes(reply));
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
        cached_tokens: 0,
    }
}

pub(super) fn time_spent(max: u64) -> String {
    format!("the time budget of {max} s of agent work (model and tool calls) is spent")
}
