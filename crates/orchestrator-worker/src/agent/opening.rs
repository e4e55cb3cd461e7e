//! The opening of a conversation: the system prompt and the task's prompt, saved as the first
//! messages (or a forked child's copy of its parent's conversation and its own task after it).

use orchestrator_store::{NewMessage, SavedMessage};
use orchestrator_types::{ChatMessage, EventKind};
use serde_json::json;

use super::{Agent, Halt, clip, prompt};

impl Agent<'_> {
    /// Saves the first messages of a conversation that has none and returns them.
    pub(super) async fn open_conversation(
        &self,
        prompt: &str,
        workspace: &str,
    ) -> Result<Vec<SavedMessage>, Halt> {
        let system = prompt::system_prompt(
            &self.task.gates,
            &self.task.acceptance,
            workspace,
            &self.registry,
            self.task.agent.role.as_ref(),
        );
        let user = prompt::user_prompt(self.task, prompt);
        // A forked child starts with its parent's conversation, byte for byte (a prompt cache
        // matches it), and its own task after it.
        let mut first: Vec<NewMessage> = match self.task.agent.fork {
            Some(fork) => self
                .ctx
                .store
                .messages(orchestrator_types::TaskId(fork.task))
                .await?
                .into_iter()
                .filter(|m| m.seq >= fork.from_seq && m.seq <= fork.through_seq)
                .map(|m| NewMessage {
                    turn: 0,
                    message: m.message,
                    usage: None,
                    model_ms: None,
                })
                .collect(),
            None => Vec::new(),
        };
        let opening = if first.is_empty() {
            first.push(NewMessage {
                turn: 0,
                message: ChatMessage::system(system),
                usage: None,
                model_ms: None,
            });
            user
        } else {
            prompt::forked_prompt(self.task, prompt)
        };
        first.push(NewMessage {
            turn: 0,
            message: ChatMessage::user(opening),
            usage: None,
            model_ms: None,
        });
        self.ctx
            .store
            .append_messages(
                self.lease,
                self.task.attempt,
                &first,
                (
                    EventKind::Message,
                    json!({"turn": 0, "role": "user", "text": clip(prompt)}),
                ),
            )
            .await?;
        Ok(self.ctx.store.messages(self.task.id).await?)
    }
}
