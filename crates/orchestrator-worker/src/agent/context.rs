//! Keeping the conversation inside the model's context window.
//!
//! The request's size is the server's own count for the last reply (`prompt_tokens` plus
//! `completion_tokens`) plus an estimate of what was appended since, at three bytes of JSON to a
//! token. Against OpenAI's o200k tokenizer that over-counts (+37 % on Rust source, +33 % on prose,
//! +21 % on the JSON of an agent's request; `orchestrator-bench context` measures it), and published
//! measurements put dense tool output near the other end (about 2.9 bytes per token), so the
//! estimate errs on the side of compacting early. With no count from the server the whole request
//! is estimated.
//!
//! When the next request would pass the trigger, the conversation is compacted, cheapest first:
//! 1. the outputs of old tool calls (all but the last two turns) are cleared, their calls kept;
//! 2. if that is not enough, the span between the task's prompt and the last two turns is
//!    summarised by the model into a structured summary.
//!
//! What always survives word for word: the system prompt, the task's prompt, every message from a
//! person (a parent's input, answers to `ask_user`), and the last two turns with their tool calls
//! and results in pairs. What the store knows (the checklist, the gates' verdicts) is re-injected
//! from the store rather than left to the summary. The compacted conversation is written as new
//! message rows with a `compacted` event in one transaction, so a resumed attempt continues from
//! it and a crash during a compaction leaves either the old conversation or the new one, never
//! half of one or two summaries.

use orchestrator_types::{ChatMessage, Role};
use serde_json::json;

use crate::model::{ToolDefinition, Window};

/// Bytes of request JSON per estimated token.
pub const BYTES_PER_TOKEN: usize = 3;
/// The least a tool result may show, however full the window: below this a result says too little
/// to act on, and the next compaction makes room.
pub const MIN_RESULT_BYTES: usize = 2048;
/// Tool outputs shorter than this are kept when old outputs are cleared: clearing them frees
/// little and their stubs would be as long.
const CLEAR_AT_LEAST: usize = 400;
/// How a parent's input to its child starts: the only user messages after the task's prompt that
/// a person wrote (the rest are the orchestrator's own: earlier summaries, requests to go on).
pub(crate) const PERSON_INPUT_PREFIX: &str = "Input from the parent task (event ";
/// The tool whose results are a person's answers, kept verbatim.
const ASK_USER: &str = "ask_user";
/// Compactions allowed within [`STALL_TURNS`] turns before the task stops as stalled.
pub const STALL_COMPACTIONS: usize = 3;
pub const STALL_TURNS: i64 = 20;
/// A compaction that frees less than this share of the request stops the task as stalled.
pub const STALL_FREED_PERCENT: u64 = 5;
/// Reads of one file after compactions that followed its first read, beyond which the task stops.
pub const STALL_REREADS: usize = 3;

/// Where compaction starts, for a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub window: Window,
    /// Tokens kept free for the reply: `max_output_tokens`, else an eighth of the window (at most
    /// 8192).
    pub reserve: u64,
    /// Compact when the next request would be larger than this.
    pub trigger: u64,
    /// After clearing tool outputs, summarise as well unless the request is at most this.
    pub target: u64,
}

impl Limits {
    /// The smaller of 80 % of the window and the window minus the reply's reserve and a margin
    /// (a tenth of the window, at most 16k), unless `compact_at` sets the trigger.
    pub fn new(window: Window, max_output_tokens: Option<u64>, compact_at: Option<u64>) -> Limits {
        let tokens = window.tokens;
        let reserve = max_output_tokens.unwrap_or((tokens / 8).min(8192));
        let margin = (tokens / 10).min(16_000);
        let trigger = compact_at
            .unwrap_or_else(|| (tokens * 8 / 10).min(tokens.saturating_sub(reserve + margin)));
        Limits {
            window,
            reserve,
            trigger: trigger.max(1),
            target: (trigger * 6 / 10).max(1),
        }
    }
}

/// Estimated tokens of some JSON bytes.
pub fn tokens_of_bytes(bytes: usize) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN) as u64
}

fn message_bytes(message: &ChatMessage) -> usize {
    serde_json::to_vec(message).map_or(0, |v| v.len())
}

/// Estimated tokens of the tool definitions sent with every request.
pub fn tools_tokens(tools: &[ToolDefinition]) -> u64 {
    tokens_of_bytes(
        tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len() + 64)
            .sum(),
    )
}

/// The size of a request made of `conversation` and `tools`: the server's count for the last reply
/// whose usage is known (`counted`: its index and its prompt plus completion tokens), plus an
/// estimate of the messages after it; or all of it estimated.
pub fn request_tokens(
    conversation: &[ChatMessage],
    tools: &[ToolDefinition],
    counted: Option<(usize, u64)>,
) -> u64 {
    match counted {
        Some((at, tokens)) if at < conversation.len() => {
            tokens
                + conversation[at + 1..]
                    .iter()
                    .map(|m| tokens_of_bytes(message_bytes(m)))
                    .sum::<u64>()
        }
        _ => {
            tools_tokens(tools)
                + conversation
                    .iter()
                    .map(|m| tokens_of_bytes(message_bytes(m)))
                    .sum::<u64>()
        }
    }
}

/// Where the last two turns start: the second-to-last assistant message, so that every tool
/// result after it keeps its call. `None` when there is nothing before it to compact (the system
/// prompt and the task's prompt are the first two messages).
pub fn tail_start(conversation: &[ChatMessage]) -> Option<usize> {
    let replies: Vec<usize> = conversation
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Assistant)
        .map(|(i, _)| i)
        .collect();
    let start = match replies.len() {
        0 => return None,
        1 => replies[0],
        n => replies[n - 2],
    };
    // Something to compact: a turn of the model's before the tail, not only earlier summaries.
    let span = conversation.get(2..start)?;
    span.iter()
        .any(|m| matches!(m.role, Role::Assistant | Role::Tool))
        .then_some(start)
}

/// The names of the calls, by call id, that `conversation` made.
fn call_names(conversation: &[ChatMessage]) -> std::collections::HashMap<String, String> {
    conversation
        .iter()
        .flat_map(|m| m.tool_calls.iter())
        .map(|c| (c.id.clone(), c.name.clone()))
        .collect()
}

/// Step 1: the conversation with the outputs of tool calls before `tail` cleared, except a
/// person's answers and outputs too short to matter. The calls stay, so the model still sees what
/// it did. Returns the new conversation and how many outputs were cleared.
pub fn clear_old_outputs(
    conversation: &[ChatMessage],
    tail: usize,
    compaction: u32,
) -> (Vec<ChatMessage>, usize) {
    let names = call_names(conversation);
    let mut cleared = 0;
    let out = conversation
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut m = m.clone();
            let name = m.tool_call_id.as_ref().and_then(|id| names.get(id));
            let length = m.content.as_deref().map_or(0, str::len);
            if i < tail
                && m.role == Role::Tool
                && name.is_some_and(|n| n != ASK_USER)
                && length >= CLEAR_AT_LEAST
            {
                m.content = Some(format!(
                    "[{length} bytes of output cleared at compaction {compaction} to fit the \
                     context window; the task's records keep what it established (checklist, \
                     gates, notes). Call the tool again only if you need this output itself.]"
                ));
                cleared += 1;
            }
            m
        })
        .collect();
    (out, cleared)
}

/// What a person said in the span being summarised, word for word: their messages (a parent's
/// input) stay messages; answers to `ask_user` are quoted in the summary.
pub struct PersonWords {
    pub messages: Vec<ChatMessage>,
    pub answers: Vec<String>,
}

pub fn person_words(conversation: &[ChatMessage], from: usize, to: usize) -> PersonWords {
    let names = call_names(conversation);
    let mut words = PersonWords {
        messages: Vec::new(),
        answers: Vec::new(),
    };
    for m in &conversation[from..to] {
        match m.role {
            Role::User
                if m.content
                    .as_deref()
                    .is_some_and(|c| c.starts_with(PERSON_INPUT_PREFIX)) =>
            {
                words.messages.push(m.clone())
            }
            Role::Tool
                if m.tool_call_id
                    .as_ref()
                    .and_then(|id| names.get(id))
                    .is_some_and(|n| n == ASK_USER) =>
            {
                words.answers.push(m.content.clone().unwrap_or_default());
            }
            _ => {}
        }
    }
    words
}

/// The instruction of the summary request, sent after the conversation as it stands.
pub const SUMMARY_INSTRUCTION: &str = "\
The conversation is about to be compacted to fit the model's context window. Write a summary of \
the work so far for yourself to continue from; the turns it replaces will no longer be visible. \
Do not call tools. Use exactly these sections, writing (none) where a section is empty:

## Goal
## Constraints
(The user's and people's instructions that still apply, quoted word for word.)
## Done
## In progress
## Blocked
## Decisions
## Next step
(One concrete action.)
## Files
(Each file read or changed, and what matters about it.)
## Artifacts
(Ids of artifacts and tool results worth retrieving again.)";

/// Step 2: the new conversation after a summary. `head` is the system prompt and the task's
/// prompt; `state` is what the store knows now (checklist, gates), re-injected rather than
/// remembered.
pub fn summarized(
    conversation: &[ChatMessage],
    tail: usize,
    compaction: u32,
    summary: &str,
    state: &str,
) -> Vec<ChatMessage> {
    let words = person_words(conversation, 2, tail);
    let mut out: Vec<ChatMessage> = conversation[..2].to_vec();
    out.extend(words.messages);
    let mut text = format!(
        "[Compaction {compaction}: the turns between the task's prompt and the last two turns \
         were replaced by this summary, which the model wrote of them. The task's prompt and \
         every message from a person are kept word for word.]\n\n{}\n",
        summary.trim()
    );
    if !words.answers.is_empty() {
        text.push_str("\n## Answers from people (word for word)\n");
        for answer in &words.answers {
            text.push_str(&format!("\n{answer}\n"));
        }
    }
    if !state.trim().is_empty() {
        text.push_str(&format!(
            "\n## From the task's records (current)\n{}\n",
            state.trim()
        ));
    }
    out.push(ChatMessage::user(text));
    out.extend(conversation[tail..].iter().cloned());
    out
}

/// The files a tool call read or edited, by the paths its arguments name.
pub fn touched_files(tool: &str, arguments: &str) -> Vec<(String, &'static str)> {
    let Ok(args) = serde_json::from_str::<serde_json::Value>(arguments) else {
        return Vec::new();
    };
    let path = || {
        args["path"]
            .as_str()
            .map(|p| p.trim().trim_start_matches("./").to_owned())
            .filter(|p| !p.is_empty())
    };
    match tool {
        "read_file" => path().map(|p| vec![(p, "read")]).unwrap_or_default(),
        "edit_file" | "write_file" | "multi_edit" => {
            path().map(|p| vec![(p, "edited")]).unwrap_or_default()
        }
        "apply_patch" => {
            let patch = args["patch"]
                .as_str()
                .or_else(|| args["input"].as_str())
                .unwrap_or("");
            patch
                .lines()
                .filter_map(|line| {
                    ["*** Update File: ", "*** Add File: ", "*** Delete File: "]
                        .iter()
                        .find_map(|prefix| line.strip_prefix(prefix))
                })
                .map(|p| (p.trim().to_owned(), "edited"))
                .collect()
        }
        _ => Vec::new(),
    }
}

/// The data of a `compacted` event.
#[allow(clippy::too_many_arguments)]
pub fn event(
    compaction: u32,
    kind: &str,
    turn: i64,
    first_seq: i64,
    limits: &Limits,
    before: u64,
    after: u64,
    cleared: usize,
    reason: &str,
) -> serde_json::Value {
    json!({
        "compaction": compaction,
        "kind": kind,
        "turn": turn,
        "first_seq": first_seq,
        "window": limits.window.tokens,
        "window_source": limits.window.source.as_str(),
        "trigger": limits.trigger,
        "tokens_before": before,
        "tokens_after": after,
        "cleared_outputs": cleared,
        "reason": reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WindowSource;
    use orchestrator_types::ToolCallRequest;

    fn call(id: &str, name: &str) -> ChatMessage {
        let mut m = ChatMessage::assistant("");
        m.content = None;
        m.tool_calls = vec![ToolCallRequest {
            id: id.into(),
            name: name.into(),
            arguments: "{}".into(),
        }];
        m
    }

    fn conversation() -> Vec<ChatMessage> {
        vec![
            ChatMessage::system("system"),
            ChatMessage::user("Fix the bug. Never touch vendor/."),
            call("a", "read_file"),
            ChatMessage::tool("a", "x".repeat(5000)),
            call("b", "ask_user"),
            ChatMessage::tool("b", format!("Use the {} approach.", "simple ".repeat(80))),
            ChatMessage::user("Input from the parent task (event 9):\nalso run the linter"),
            ChatMessage::user("[Compaction 1: an earlier summary]"),
            call("c", "read_file"),
            ChatMessage::tool("c", "y".repeat(5000)),
            call("d", "read_file"),
            ChatMessage::tool("d", "z".repeat(5000)),
        ]
    }

    #[test]
    fn limits_leave_room_for_the_reply() {
        let window = |tokens| Window {
            tokens,
            source: WindowSource::Config,
        };
        let small = Limits::new(window(8192), None, None);
        assert_eq!(small.reserve, 1024);
        assert_eq!(small.trigger, 8192 - 1024 - 819);
        let large = Limits::new(window(200_000), Some(32_000), None);
        assert_eq!(large.trigger, 200_000 - 32_000 - 16_000);
        assert_eq!(
            Limits::new(window(200_000), None, Some(50_000)).trigger,
            50_000
        );
    }

    #[test]
    fn clearing_keeps_the_last_two_turns_the_calls_and_the_answers() {
        let conversation = conversation();
        let tail = tail_start(&conversation).unwrap();
        assert_eq!(tail, 8, "the second-to-last reply");
        let (cleared, n) = clear_old_outputs(&conversation, tail, 1);
        assert_eq!(n, 1, "only the first read_file output");
        assert!(
            cleared[3]
                .content
                .as_deref()
                .unwrap()
                .contains("5000 bytes of output cleared")
        );
        assert_eq!(cleared[5], conversation[5], "a person's answer stays");
        assert_eq!(cleared[8..], conversation[8..], "the last two turns stay");
        assert_eq!(cleared[2], conversation[2], "the call stays");
        assert!(request_tokens(&cleared, &[], None) < request_tokens(&conversation, &[], None));
    }

    #[test]
    fn a_summary_keeps_the_prompt_the_peoples_words_and_the_tail_in_pairs() {
        let conversation = conversation();
        let tail = tail_start(&conversation).unwrap();
        let out = summarized(
            &conversation,
            tail,
            2,
            "## Goal\nfix it",
            "Checklist: 1 done",
        );
        assert_eq!(out[..2], conversation[..2]);
        assert_eq!(out[2], conversation[6], "the parent's input, as it was");
        let summary = out[3].content.as_deref().unwrap();
        assert!(
            !out.iter()
                .any(|m| m.content.as_deref() == Some("[Compaction 1: an earlier summary]")),
            "an earlier summary is not kept beside the new one"
        );
        assert!(summary.contains("## Goal\nfix it"));
        assert!(summary.contains(conversation[5].content.as_deref().unwrap()));
        assert!(summary.contains("Checklist: 1 done"));
        assert_eq!(out[4..], conversation[tail..]);
        assert_eq!(
            out[4].role,
            Role::Assistant,
            "the tail starts with its call"
        );
    }

    #[test]
    fn a_conversation_with_only_its_last_turns_has_nothing_to_compact() {
        let conversation = conversation();
        assert_eq!(tail_start(&conversation[..4]), None);
        assert_eq!(tail_start(&conversation[..2]), None);
        // After a compaction: the prompt, a summary, then the last two turns.
        let mut compacted = conversation[..2].to_vec();
        compacted.push(ChatMessage::user("[Compaction 1: summary]"));
        compacted.extend(conversation[7..].iter().cloned());
        assert_eq!(
            tail_start(&compacted),
            None,
            "only a summary before the tail"
        );
    }

    #[test]
    fn the_files_a_call_touches_come_from_its_arguments() {
        assert_eq!(
            touched_files("read_file", r#"{"path": "./src/a.rs"}"#),
            [("src/a.rs".to_owned(), "read")]
        );
        assert_eq!(
            touched_files("edit_file", r#"{"path": "b.rs", "old": "x", "new": "y"}"#),
            [("b.rs".to_owned(), "edited")]
        );
        let patch = json!({"patch": "*** Begin Patch\n*** Update File: c.rs\n@@\n-a\n+b\n*** Add File: d.rs\n+x\n*** End Patch\n"});
        assert_eq!(
            touched_files("apply_patch", &patch.to_string()),
            [("c.rs".to_owned(), "edited"), ("d.rs".to_owned(), "edited")]
        );
        assert!(touched_files("grep_files", r#"{"pattern": "x"}"#).is_empty());
        assert!(touched_files("read_file", "not json").is_empty());
    }

    #[test]
    fn the_servers_count_anchors_the_estimate() {
        let conversation = conversation();
        let appended = request_tokens(&conversation[9..], &[], None);
        assert_eq!(
            request_tokens(&conversation, &[], Some((8, 1000))),
            1000 + appended
        );
    }
}
