//! One model call of the loop: its pieces sent live, its retries recorded, its time bounded by the
//! budget, and what its failure means for the task.

use std::time::Duration;

use orchestrator_types::{ChatMessage, EventKind};
use serde_json::json;
use tokio::sync::mpsc;

use super::budget::time_spent;
use super::{Agent, AgentEnd, Halt, LiveDelta};
use crate::model::{Delta, ModelError, ModelReply};

/// Why a model call gave no reply.
pub(super) enum Refusal {
    /// The request does not fit the server's context window.
    Overflow(String),
    End(AgentEnd),
}

impl Agent<'_> {
    /// One model call, with its pieces sent live and its retries recorded as events.
    pub(super) async fn ask_model(
        &self,
        conversation: &[ChatMessage],
        time_left: Option<Duration>,
    ) -> Result<Result<ModelReply, Refusal>, Halt> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Delta>();
        let live = self.ctx.agent.live.clone();
        let store = self.ctx.store.clone();
        let lease = self.lease.clone();
        let task = self.task.id;
        let forward = tokio::spawn(async move {
            while let Some(delta) = rx.recv().await {
                if let Delta::Retrying {
                    attempt,
                    cause,
                    error,
                } = &delta
                {
                    let _ = store
                        .append_event(
                            &lease,
                            EventKind::ModelRetry,
                            json!({"attempt": attempt, "cause": cause, "error": error}),
                        )
                        .await;
                }
                if let Some(live) = &live {
                    let _ = live.send(LiveDelta { task, delta });
                }
            }
        });
        // The time budget runs while the model works, not while the request waits for a paced
        // server's slot: the deadline moves by every wait the client reports meanwhile.
        let out_of_time = async {
            match time_left {
                Some(left) => {
                    let mut deadline = tokio::time::Instant::now() + left;
                    let mut counted = self.client.slot_wait_ms();
                    loop {
                        tokio::time::sleep_until(deadline).await;
                        let waited = self.client.slot_wait_ms();
                        if waited == counted {
                            break;
                        }
                        deadline += Duration::from_millis(waited - counted);
                        counted = waited;
                    }
                }
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            reply = self.client.complete(conversation, &self.definitions, Some(&tx)) => Ok(reply),
            () = self.stop.token().cancelled() => Err(AgentEnd::Stopped),
            () = out_of_time => Err(AgentEnd::Failed(format!(
                "{} while the model was writing its reply",
                time_spent(self.task.agent.max_seconds.unwrap_or_default())
            ))),
        };
        drop(tx);
        let _ = forward.await;
        Ok(match outcome {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e @ ModelError::ContextOverflow { .. })) => {
                Err(Refusal::Overflow(e.to_string()))
            }
            Ok(Err(e)) => Err(Refusal::End(model_failure(&e))),
            Err(end) => Err(Refusal::End(end)),
        })
    }
}

/// What a failed model call means for the task.
pub(super) fn model_failure(e: &ModelError) -> AgentEnd {
    let message = format!("model call failed ({}): {e}", e.cause());
    if e.is_retryable() {
        AgentEnd::Retryable(message)
    } else {
        AgentEnd::Failed(message)
    }
}
