//! The JSON of the Chat Completions API as providers send and accept it, and the mapping between it
//! and the conversation vocabulary of `orchestrator_types::chat`.
//!
//! Requests are written exactly; replies are read leniently. OpenAI-compatible servers (vLLM,
//! llama.cpp, Ollama, hosted gateways) differ in what they leave out, so every field we read is
//! optional or defaulted, and fields we do not know are ignored.

use std::borrow::Cow;

use orchestrator_types::{ChatMessage, Role, ToolCallRequest, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ToolDefinition;

#[derive(Debug, Serialize)]
pub(crate) struct ChatRequest<'a> {
    pub model: &'a str,
    pub messages: Vec<WireMessage<'a>>,
    /// Omitted when empty: some servers reject an empty `tools` array.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<WireTool<'a>>,
    /// `auto` whenever tools are offered (unless the model's settings say otherwise):
    /// llama-cpp-python ignores tools offered without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Routes requests with the same key to the same prompt cache (OpenAI); sent only to providers
    /// that take it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<&'a str>,
}

#[derive(Debug, Serialize)]
pub(crate) struct StreamOptions {
    /// Asks for a last chunk with the token usage, which a stream otherwise lacks.
    pub include_usage: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct WireMessage<'a> {
    pub role: &'static str,
    /// A string, `""` for an assistant message that only calls tools: llama-cpp-python answers
    /// 500 to `null` and to a missing field, and every server takes `""`. Parts only for the user
    /// message that carries tool results' images.
    pub content: WireContent<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<&'a str>,
}

#[derive(Debug, Serialize)]
pub(crate) struct WireToolCall<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: WireFunctionCall<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct WireFunctionCall<'a> {
    pub name: &'a str,
    /// Always one JSON object (see [`sendable_arguments`]).
    pub arguments: Cow<'a, str>,
}

#[derive(Debug, Serialize)]
pub(crate) struct WireTool<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: WireFunction<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct WireFunction<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub parameters: &'a Value,
}

/// A message's content: text, or text and images.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum WireContent<'a> {
    Text(&'a str),
    Parts(Vec<WirePart>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum WirePart {
    Text { text: String },
    ImageUrl { image_url: WireImageUrl },
}

#[derive(Debug, Serialize)]
pub(crate) struct WireImageUrl {
    /// A `data:` URL.
    pub url: String,
}

/// The messages of a request. The images of a reply's tool messages (view_image) go in one user
/// message after the last of them, since Chat Completions takes images only from the user and no
/// message may come between an assistant's tool calls and their results. A model that does not
/// take images gets none.
pub(crate) fn wire_messages(messages: &[ChatMessage], images: bool) -> Vec<WireMessage<'_>> {
    let mut out = Vec::with_capacity(messages.len());
    let mut pending: Vec<(&str, &orchestrator_types::ImagePart)> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        out.push(WireMessage::from_chat(message));
        if images && message.role == orchestrator_types::Role::Tool {
            let call = message.tool_call_id.as_deref().unwrap_or("");
            pending.extend(message.images.iter().map(|image| (call, image)));
        }
        let run_ends = messages
            .get(i + 1)
            .is_none_or(|next| next.role != orchestrator_types::Role::Tool);
        if run_ends && !pending.is_empty() {
            let mut calls: Vec<&str> = pending.iter().map(|(call, _)| *call).collect();
            calls.dedup();
            let mut parts = vec![WirePart::Text {
                text: format!(
                    "The image{} returned by tool call{} {}:",
                    if pending.len() == 1 { "" } else { "s" },
                    if calls.len() == 1 { "" } else { "s" },
                    calls.join(", ")
                ),
            }];
            for (_, image) in pending.drain(..) {
                parts.push(WirePart::ImageUrl {
                    image_url: WireImageUrl {
                        url: format!("data:{};base64,{}", image.media_type, image.data),
                    },
                });
            }
            out.push(WireMessage {
                role: "user",
                content: WireContent::Parts(parts),
                tool_calls: Vec::new(),
                tool_call_id: None,
            });
        }
    }
    out
}

impl<'a> WireMessage<'a> {
    pub(crate) fn from_chat(message: &'a ChatMessage) -> Self {
        WireMessage {
            role: message.role.as_str(),
            content: WireContent::Text(message.content.as_deref().unwrap_or("")),
            tool_calls: message
                .tool_calls
                .iter()
                .map(|call| WireToolCall {
                    id: &call.id,
                    kind: "function",
                    function: WireFunctionCall {
                        name: &call.name,
                        arguments: sendable_arguments(&call.arguments),
                    },
                })
                .collect(),
            tool_call_id: message.tool_call_id.as_deref(),
        }
    }
}

impl<'a> WireTool<'a> {
    pub(crate) fn from_definition(tool: &'a ToolDefinition) -> Self {
        WireTool {
            kind: "function",
            function: WireFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        }
    }
}

/// A tool call's arguments as they may go back to a server: one JSON object, whatever the model
/// wrote. The saved conversation keeps the model's own text as evidence, but llama.cpp answers 500
/// to every later request whose history holds arguments it cannot parse. Text the tool layer can
/// repair (a code fence, trailing commas, an object sent as a string) goes as repaired; anything
/// else as `{}`, and the call's result tells the model what was wrong.
pub(crate) fn sendable_arguments(raw: &str) -> Cow<'_, str> {
    if matches!(serde_json::from_str::<Value>(raw), Ok(Value::Object(_))) {
        return Cow::Borrowed(raw);
    }
    match orchestrator_tools::args::parse_raw(raw) {
        Ok((map, _repairs)) => Cow::Owned(Value::Object(map).to_string()),
        Err(_) => Cow::Borrowed("{}"),
    }
}

/// Token counts as providers report them; some leave out `total_tokens`. Prompt cache hits come as
/// `prompt_tokens_details.cached_tokens` (OpenAI, vLLM, llama.cpp) or `prompt_cache_hit_tokens`
/// (DeepSeek).
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    #[serde(default)]
    pub prompt_tokens_details: Option<WirePromptDetails>,
    #[serde(default)]
    pub prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(crate) struct WirePromptDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

impl WireUsage {
    /// The usage, unless the server reported none of it: some servers send zeros for what they do
    /// not count, and zero would make token budgets think nothing was spent.
    pub(crate) fn known(self) -> Option<Usage> {
        (self.prompt_tokens > 0 || self.completion_tokens > 0 || self.total_tokens > 0)
            .then(|| self.into())
    }
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        let total = if u.total_tokens == 0 {
            u.prompt_tokens + u.completion_tokens
        } else {
            u.total_tokens
        };
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: total,
            cached_tokens: u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .or(u.prompt_cache_hit_tokens)
                .unwrap_or(0),
        }
    }
}

/// A non-streamed reply (`chat.completion`).
#[derive(Debug, Deserialize)]
pub(crate) struct Completion {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub choices: Vec<CompletionChoice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
    /// Some servers answer 200 with an error object instead of a completion.
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct CompletionChoice {
    #[serde(default)]
    pub message: Option<ReplyMessage>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ReplyMessage {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ReplyToolCall>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ReplyToolCall {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<ReplyFunction>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ReplyFunction {
    #[serde(default)]
    pub name: Option<String>,
    /// Normally a JSON text in a string; a few servers send the object itself.
    #[serde(default)]
    pub arguments: Option<Value>,
}

/// One chunk of a streamed reply (`chat.completion.chunk`).
#[derive(Debug, Deserialize)]
pub(crate) struct StreamChunk {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    /// Sent in the last chunk when `stream_options.include_usage` is on; `null` before it.
    #[serde(default)]
    pub usage: Option<WireUsage>,
    /// A provider that fails mid-stream sends `{"error": {...}}` as an event.
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChunkChoice {
    #[serde(default)]
    pub index: usize,
    #[serde(default)]
    pub delta: Option<ChunkDelta>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChunkDelta {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ChunkToolCall>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChunkToolCall {
    /// Which call this piece belongs to. A few servers leave it out; the position in the array
    /// stands in for it then.
    #[serde(default)]
    pub index: Option<usize>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<ChunkFunction>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChunkFunction {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<String>,
}

/// Argument text from a non-streamed reply: a string as is, anything else as its JSON text.
pub(crate) fn arguments_text(arguments: Option<Value>) -> String {
    match arguments {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text,
        Some(other) => other.to_string(),
    }
}

/// The human part of a provider's error object, in the shapes seen in the wild:
/// `{"error": {"message": ..}}`, `{"error": ".."}`, `{"message": ..}` and `{"detail": ..}`.
pub(crate) fn error_message(body: &Value) -> Option<String> {
    let error = body.get("error").unwrap_or(body);
    if let Some(text) = error.as_str() {
        return Some(text.to_owned());
    }
    for key in ["message", "detail"] {
        match error.get(key) {
            Some(Value::String(text)) => return Some(text.clone()),
            Some(other) if !other.is_null() => return Some(other.to_string()),
            _ => {}
        }
    }
    None
}

/// Builds the assistant message of a finished reply.
pub(crate) fn assistant_message(
    content: Option<String>,
    tool_calls: Vec<ToolCallRequest>,
) -> ChatMessage {
    ChatMessage {
        role: Role::Assistant,
        content: content.filter(|text| !text.is_empty()),
        tool_calls,
        tool_call_id: None,
        images: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_images_follow_the_results_in_one_user_message_and_only_for_a_model_that_takes_them() {
        let image = |data: &str| orchestrator_types::ImagePart {
            media_type: "image/png".into(),
            data: data.into(),
        };
        let mut first = ChatMessage::tool("call_1", "Image a.png; it follows.");
        first.images = vec![image("QUFB")];
        let second = ChatMessage::tool("call_2", "text only");
        let mut third = ChatMessage::tool("call_3", "Image b.png; it follows.");
        third.images = vec![image("QkJC")];
        let conversation = vec![
            ChatMessage::user("look"),
            assistant_message(None, Vec::new()),
            first,
            second,
            third,
            ChatMessage::assistant("seen"),
        ];
        let wire = serde_json::to_value(wire_messages(&conversation, true)).unwrap();
        let roles: Vec<&str> = wire
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            [
                "user",
                "assistant",
                "tool",
                "tool",
                "tool",
                "user",
                "assistant"
            ]
        );
        assert_eq!(
            wire[5]["content"],
            json!([
                {"type": "text", "text": "The images returned by tool calls call_1, call_3:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUFB"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,QkJC"}},
            ])
        );
        // Text content stays a string.
        assert_eq!(wire[2]["content"], "Image a.png; it follows.");
        let without = serde_json::to_value(wire_messages(&conversation, false)).unwrap();
        assert_eq!(without.as_array().unwrap().len(), conversation.len());
        assert!(!without.to_string().contains("image_url"));
    }

    #[test]
    fn messages_map_to_the_wire() {
        let calls = ChatMessage {
            role: Role::Assistant,
            content: None,
            tool_calls: vec![ToolCallRequest {
                id: "call_1".into(),
                name: "read".into(),
                arguments: "{\"path\":\"a\"}".into(),
            }],
            tool_call_id: None,
            images: Vec::new(),
        };
        let wire = serde_json::to_value(WireMessage::from_chat(&calls)).unwrap();
        assert_eq!(
            wire,
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]})
        );
        let result = ChatMessage::tool("call_1", "text");
        assert_eq!(
            serde_json::to_value(WireMessage::from_chat(&result)).unwrap(),
            json!({"role": "tool", "content": "text", "tool_call_id": "call_1"})
        );
        let empty = ChatMessage {
            content: None,
            ..ChatMessage::user("x")
        };
        assert_eq!(
            serde_json::to_value(WireMessage::from_chat(&empty)).unwrap(),
            json!({"role": "user", "content": ""})
        );
    }

    #[test]
    fn arguments_sent_back_are_always_one_json_object() {
        let cases = [
            (r#"{"path":"a"}"#, r#"{"path":"a"}"#),
            ("", "{}"),
            ("{\"path\": \"a\",}", r#"{"path":"a"}"#),
            (r#"{"path": "src/ma"#, "{}"),
            ("[1, 2]", "{}"),
            ("not json at all", "{}"),
        ];
        for (raw, sent) in cases {
            assert_eq!(sendable_arguments(raw), sent, "{raw:?}");
        }
        let call = ChatMessage {
            role: Role::Assistant,
            content: None,
            tool_calls: vec![ToolCallRequest {
                id: "c".into(),
                name: "read".into(),
                arguments: r#"{"path": "src/ma"#.into(),
            }],
            tool_call_id: None,
            images: Vec::new(),
        };
        let wire = serde_json::to_value(WireMessage::from_chat(&call)).unwrap();
        assert_eq!(wire["tool_calls"][0]["function"]["arguments"], "{}");
    }

    #[test]
    fn usage_of_zeros_is_unknown() {
        let zeros: WireUsage = serde_json::from_value(json!({"prompt_tokens": 0})).unwrap();
        assert_eq!(zeros.known(), None);
        let some: WireUsage = serde_json::from_value(json!({"completion_tokens": 2})).unwrap();
        assert_eq!(some.known().unwrap().total_tokens, 2);
    }

    #[test]
    fn error_messages_in_several_shapes() {
        let cases = [
            (
                json!({"error": {"message": "bad", "type": "x"}}),
                Some("bad"),
            ),
            (json!({"error": "plain"}), Some("plain")),
            (json!({"message": "top"}), Some("top")),
            (json!({"detail": "Not Found"}), Some("Not Found")),
            (json!({"other": 1}), None),
        ];
        for (body, expected) in cases {
            assert_eq!(error_message(&body).as_deref(), expected, "{body}");
        }
    }

    #[test]
    fn usage_without_a_total_is_summed() {
        let usage: WireUsage =
            serde_json::from_value(json!({"prompt_tokens": 3, "completion_tokens": 4})).unwrap();
        assert_eq!(Usage::from(usage).total_tokens, 7);
    }
}
