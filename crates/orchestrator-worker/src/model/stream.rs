//! Stream assembly: the pieces of a streamed reply (text, tool-call fragments by index, usage,
//! the finish reason) put back together into one reply, and each piece passed on to whoever
//! watches the task live.

use super::*;

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Flow {
    More,
    Done,
}

/// A tool call being put together from stream pieces.
#[derive(Debug, Default)]
pub(super) struct PartialCall {
    pub(super) id: Option<String>,
    pub(super) name: Option<String>,
    pub(super) arguments: String,
}

/// The reply being put together from stream chunks.
#[derive(Debug, Default)]
pub(super) struct Assembler {
    pub(super) content: String,
    /// By index, which is the order the model wrote the calls in.
    pub(super) calls: BTreeMap<usize, PartialCall>,
    pub(super) finish_reason: Option<String>,
    pub(super) usage: Option<Usage>,
    pub(super) model: Option<String>,
}

impl Assembler {
    pub(super) fn finish(self) -> Result<ModelReply, ModelError> {
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (index, call) in self.calls {
            let name = call.name.ok_or_else(|| {
                ModelError::InvalidResponse(format!("tool call {index} of the reply has no name"))
            })?;
            tool_calls.push(ToolCallRequest {
                // A call without an id still needs one for its result to refer to.
                id: call.id.unwrap_or_else(|| format!("call_{index}")),
                name,
                arguments: call.arguments,
            });
        }
        Ok(ModelReply {
            message: wire::assistant_message(Some(self.content), tool_calls),
            usage: self.usage,
            model: self.model,
            finish_reason: self.finish_reason,
            attempts: 0,
            elapsed: Duration::ZERO,
            waited: Duration::ZERO,
        })
    }
}

pub(super) fn send(deltas: Option<&UnboundedSender<Delta>>, delta: Delta) {
    if let Some(deltas) = deltas {
        // A watcher that went away does not stop the task.
        let _ = deltas.send(delta);
    }
}
