//! The opening of a conversation: the system prompt and the task's prompt, saved as the first
//! messages (or a forked child's copy of its parent's conversation and its own task after it).

use orchestrator_store::{NewMessage, SavedMessage};
use orchestrator_types::{ChatMessage, EventKind};
use serde_json::json;

use super::hooks::{HookEvent, HookStep};
use super::{Agent, Halt, clip, instructions, prompt};
use std::path::Path;

impl Agent<'_> {
    /// Saves the first messages of a conversation that has none and returns them.
    pub(super) async fn open_conversation(
        &mut self,
        prompt: &str,
        workspace: &str,
    ) -> Result<Vec<SavedMessage>, Halt> {
        let mut system = prompt::system_prompt(
            &self.task.gates,
            &self.task.acceptance,
            workspace,
            &self.registry,
            self.task.agent.role.as_ref(),
        );
        // The repository's instructions end the system prompt, which every compaction keeps.
        let found = instructions::gather(Path::new(workspace), &self.ctx.agent.instructions);
        system.push_str(&instructions::section(&found));
        let mut user = prompt::user_prompt(self.task, prompt);
        // What the person's SessionStart hooks say goes with the task's prompt. They run in the
        // workspace's environment, so they wait for it when it is still being made.
        let session_start = HookStep {
            ctx: self.ctx,
            session: &self.session,
            workspace: Path::new(workspace),
        }
        .any(HookEvent::SessionStart, None);
        if session_start {
            self.environment_ready().await?;
        }
        let step = HookStep {
            ctx: self.ctx,
            session: &self.session,
            workspace: Path::new(workspace),
        };
        if session_start {
            let decision = step
                .run(
                    HookEvent::SessionStart,
                    None,
                    "session",
                    json!({"source": "startup"}),
                )
                .await?;
            for context in decision.context {
                user.push_str(&format!(
                    "\n\n(From a SessionStart hook of the person's config:)\n{context}"
                ));
            }
        }
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
        if !found.is_empty() && self.task.agent.fork.is_none() {
            self.ctx
                .store
                .append_event(
                    self.lease,
                    EventKind::Instructions,
                    json!({
                        "files": found
                            .iter()
                            .map(|f| json!({"path": f.path, "bytes": f.bytes, "cut": f.cut}))
                            .collect::<Vec<_>>(),
                    }),
                )
                .await?;
        }
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
