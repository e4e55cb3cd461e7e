//! The conversation of an agent task: messages, the tool calls a model asks for, token usage, and
//! which model a task talks to.
//!
//! These are the words the store saves turn by turn and the model client sends; the client maps them
//! to and from the Chat Completions wire format, so nothing here is tied to one provider.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One tool call a model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The model's id for the call; the tool's result message carries it back.
    pub id: String,
    pub name: String,
    /// The argument text exactly as the model sent it (it may not be valid JSON).
    pub arguments: String,
}

/// An image a message carries: what view_image returned, base64-encoded with its media type
/// (`image/png`, `image/jpeg`, `image/gif`, `image/webp`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePart {
    pub media_type: String,
    pub data: String,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    /// Text; an assistant message that only calls tools may have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    /// For a tool message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Images of a tool message (view_image). Chat Completions takes images only in user
    /// messages, so the client sends them in one after the reply's tool messages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePart>,
}

impl ChatMessage {
    pub fn system(text: impl Into<String>) -> Self {
        ChatMessage::text(Role::System, text)
    }

    pub fn user(text: impl Into<String>) -> Self {
        ChatMessage::text(Role::User, text)
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        ChatMessage::text(Role::Assistant, text)
    }

    /// The result of tool call `call_id`.
    pub fn tool(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        ChatMessage {
            tool_call_id: Some(call_id.into()),
            ..ChatMessage::text(Role::Tool, text)
        }
    }

    fn text(role: Role, text: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            images: Vec::new(),
        }
    }
}

/// Tokens a model call used, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Of the prompt's tokens, those the provider served from its prompt cache, when it says.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
        self.cached_tokens += other.cached_tokens;
    }
}

/// Environment variable read for the key when a model names none.
pub const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";
/// Base URL used when a model names none.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Which model a task talks to. The key itself is never stored: only the name of the environment
/// variable that holds it, read by the process that runs the task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// The API root, for example `https://api.openai.com/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// The model name sent in each request.
    pub model: String,
    /// The environment variable holding the API key; `None` sends no Authorization header (local
    /// servers such as llama.cpp or Ollama need none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// How to talk to this model; what is unset takes the worker's defaults.
    #[serde(default, skip_serializing_if = "ModelSettings::is_empty")]
    pub settings: ModelSettings,
}

/// What differs from one model server to the next: a CPU server that writes for minutes, a server
/// that cannot stream, a small context window. Every field is optional; unset means the default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Ask for a streamed reply (default on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Seconds of silence after which the server counts as hung: waiting for the reply to start,
    /// and between two pieces of a streamed reply (default 300). A reply may take any time as a
    /// whole while pieces keep coming. Without streaming the whole reply is one silence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_secs: Option<u64>,
    /// Attempts after the first for failures that pass on their own (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// The model's context window in tokens, when known: named in errors about a prompt that does
    /// not fit, and the bound of the conversation estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Most tokens one reply may have, sent as `max_tokens` (default: the server's own limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Compact the conversation when a request would be larger than this many tokens (default:
    /// the smaller of 80 % of the window and the window minus the reply's reserve and a margin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_at: Option<u64>,
    /// Compact the conversation when it nears the window, or when the server refuses it as too
    /// long (default on). Off, a task whose conversation outgrows the window fails there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compact: Option<bool>,
    /// `tool_choice` sent with the tools: `auto` (default), `required`, `none`, or `omit` to send
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<String>,
    /// The model takes images (view_image sends it png, jpeg, gif and webp files). Default off: a
    /// server without vision refuses such requests or ignores the images, so view_image refuses
    /// first and says how to turn this on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<bool>,
}

/// The values `ModelSettings::tool_choice` takes.
pub const TOOL_CHOICES: [&str; 4] = ["auto", "required", "none", "omit"];

impl ModelSettings {
    pub fn is_empty(&self) -> bool {
        *self == ModelSettings::default()
    }

    /// Each field of `over` that is set replaces this one's.
    pub fn merged(&self, over: &ModelSettings) -> ModelSettings {
        ModelSettings {
            stream: over.stream.or(self.stream),
            idle_timeout_secs: over.idle_timeout_secs.or(self.idle_timeout_secs),
            max_retries: over.max_retries.or(self.max_retries),
            context_window: over.context_window.or(self.context_window),
            max_output_tokens: over.max_output_tokens.or(self.max_output_tokens),
            compact_at: over.compact_at.or(self.compact_at),
            auto_compact: over.auto_compact.or(self.auto_compact),
            tool_choice: over
                .tool_choice
                .clone()
                .or_else(|| self.tool_choice.clone()),
            images: over.images.or(self.images),
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.idle_timeout_secs == Some(0) {
            return Err(Error::invalid(
                "idle_timeout_secs",
                "must be at least 1 second",
            ));
        }
        for (field, value) in [
            ("context_window", self.context_window),
            ("max_output_tokens", self.max_output_tokens),
            ("compact_at", self.compact_at),
        ] {
            if value == Some(0) {
                return Err(Error::invalid(field, "must be at least 1 token"));
            }
        }
        if let (Some(window), Some(at)) = (self.context_window, self.compact_at)
            && at >= window
        {
            return Err(Error::invalid(
                "compact_at",
                format!("{at} is not below the context window of {window}"),
            ));
        }
        if let (Some(window), Some(output)) = (self.context_window, self.max_output_tokens)
            && output >= window
        {
            return Err(Error::invalid(
                "max_output_tokens",
                format!("{output} leaves no room for the prompt in a context window of {window}"),
            ));
        }
        if let Some(choice) = &self.tool_choice
            && !TOOL_CHOICES.contains(&choice.as_str())
        {
            return Err(Error::invalid(
                "tool_choice",
                format!("{choice:?} is not one of {}", TOOL_CHOICES.join(", ")),
            ));
        }
        Ok(())
    }
}

impl ModelSpec {
    pub fn validate(&self) -> Result<()> {
        if self.model.trim().is_empty() {
            return Err(Error::invalid("model", "the model name is empty"));
        }
        let url = self.base_url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Error::invalid(
                "base_url",
                format!("{url:?} must start with http:// or https://"),
            ));
        }
        if let Some(var) = &self.api_key_env
            && (var.is_empty() || var.contains('=') || var.contains('\0'))
        {
            return Err(Error::invalid(
                "api_key_env",
                format!("{var:?} is not an environment variable name"),
            ));
        }
        self.settings.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_without_empty_fields() {
        let m = ChatMessage::tool("call_1", "ok");
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(
            text,
            r#"{"role":"tool","content":"ok","tool_call_id":"call_1"}"#
        );
        assert_eq!(serde_json::from_str::<ChatMessage>(&text).unwrap(), m);
    }

    #[test]
    fn model_spec_validation() {
        let mut spec = ModelSpec {
            base_url: "http://127.0.0.1:1/v1".into(),
            model: "m".into(),
            api_key_env: Some("KEY".into()),
            settings: ModelSettings::default(),
        };
        assert!(spec.validate().is_ok());
        // A spec saved before settings existed reads back with none.
        let old: ModelSpec =
            serde_json::from_str(r#"{"base_url":"http://h/v1","model":"m"}"#).unwrap();
        assert!(old.settings.is_empty());
        assert!(!serde_json::to_string(&old).unwrap().contains("settings"));
        spec.settings.tool_choice = Some("sometimes".into());
        assert!(spec.validate().is_err());
        spec.settings.tool_choice = Some("omit".into());
        spec.settings.context_window = Some(4096);
        spec.settings.max_output_tokens = Some(4096);
        assert!(spec.validate().is_err());
        spec.settings.max_output_tokens = Some(1024);
        assert!(spec.validate().is_ok());
        spec.base_url = "ftp://x".into();
        assert!(spec.validate().is_err());
        spec.base_url = "https://x".into();
        spec.model = " ".into();
        assert!(spec.validate().is_err());
    }
}
