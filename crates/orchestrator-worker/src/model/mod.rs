//! The model client: one Chat Completions call to an OpenAI-compatible server, streamed or not,
//! with retries for the failures that pass on their own.
//!
//! The client speaks the conversation vocabulary of `orchestrator_types::chat` and maps it to the
//! wire format in `wire`; streamed replies are framed as server-sent events (`sse`) and assembled
//! (`stream`) into one assistant message, while each piece is forwarded to an optional channel so a
//! watcher can show the reply as it is written. `client` sends the requests and retries them;
//! `error` says why a call failed and how long to wait before the next try; `window` finds the
//! model's context window; `servers` keeps what the daemon learnt about each server. This file
//! holds the vocabulary they share.
//!
//! Retries are for what passes on its own: a transport error, a silent server, a stream that broke
//! off, 408, 429 and a 5xx that is not about the request. They wait with capped exponential backoff
//! and jitter (or the provider's `Retry-After`), and each names its cause. What sending the same
//! request again cannot fix fails at once with the server's own words: a wrong key, an unknown
//! model, a rejected request (whatever its status: llama.cpp answers 500 to a history it cannot
//! parse), a prompt that does not fit the context window, and a 200 with an empty body. A retried
//! stream starts from the beginning, so a watcher may see the deltas of the cut attempt again
//! after a `Delta::Retrying`.
//!
//! An empty 200 to a streamed request is asked again at once, unstreamed: llama-cpp-python
//! answers a streamed request that carries tools that way (and the same request unstreamed with
//! its reply), and also a prompt over its window, whose unstreamed answer then says so (a 400
//! about the context window, diagnosed as an overflow from those words). When the unstreamed
//! request is answered, the server is remembered (`servers`) and later requests of the daemon
//! go to it unstreamed; only an empty answer to an unstreamed request is an error.
//!
//! Time: no fixed limit on a whole reply, since a CPU server may write for many minutes; the idle
//! timeout bounds each silence instead (until the reply starts, and between two pieces).
//!
//! Secrets: the key is read from the environment variable the model spec names and lives only in
//! the Authorization header (marked sensitive) and in a redaction filter; no error, log line or
//! `Debug` output carries it, and provider messages that echo it are redacted.

mod client;
mod error;
mod sse;
pub use sse::{SseEvent, SseParser};
mod pacing;
mod servers;
mod stream;
mod window;
mod wire;

pub use window::{DEFAULT_WINDOW, Window, WindowSource, known_window};

pub use client::{ModelClient, takes_cache_key};
pub use error::ModelError;
#[allow(
    unused_imports,
    reason = "the submodules and the tests reach these through `super::*`"
)]
use error::*;
use error::{is_about_the_request, is_overflow};
pub use pacing::{PacedServer, Pacing, Permit};
pub use servers::KnownServers;
use stream::*;

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use orchestrator_types::{ChatMessage, ModelSettings, ModelSpec, ToolCallRequest, Usage};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use crate::backoff::Backoff;

/// A reply can take minutes to start when a slow server reads a long prompt; five minutes of silence
/// bounds a hung server without cutting off a slow honest one.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// A server that has not accepted a connection in ten seconds is down, not slow.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Five attempts in all ride out a provider's typical blip or rate-limit window.
pub const DEFAULT_MAX_RETRIES: u32 = 4;
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(500);
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(20);
/// Up to 20% either way, so workers that hit the same rate limit do not return in lockstep.
const BACKOFF_JITTER: f64 = 0.2;
/// How much of an error body is read: enough for any provider's error object, bounded so a server
/// that answers an error with an endless body cannot hold the worker.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// The reply's share of a paced request's tokens when the request names no `max_tokens`.
const DEFAULT_REPLY_ESTIMATE: u64 = 1024;
/// A paced server's pushbacks one request rides out (each a shared wait, doubling to a minute)
/// before it fails: about an hour of a server that keeps refusing.
const MAX_PACED_PUSHBACKS: u32 = 64;
/// Provider messages are cut to this many characters in our errors; they end up in task events.
const MAX_PROVIDER_MESSAGE_CHARS: usize = 2000;

/// How the client talks to the server. The defaults suit hosted providers.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// The longest silence of the server: until the reply starts, and between two of its pieces.
    pub idle_timeout: Duration,
    pub connect_timeout: Duration,
    /// Attempts after the first, for retryable failures only.
    pub max_retries: u32,
    /// The wait before the first retry; it doubles with each further retry.
    pub initial_backoff: Duration,
    /// No wait between attempts is longer, whatever the backoff or `Retry-After` says.
    pub max_backoff: Duration,
    /// Ask for a streamed reply (server-sent events) so deltas arrive as the model writes.
    pub stream: bool,
    /// `tool_choice` sent when tools are offered; `None` sends none. Without it some servers
    /// (llama-cpp-python) drop the tools without a word.
    pub tool_choice: Option<String>,
    /// `max_tokens` of each request; `None` leaves the server's own limit.
    pub max_output_tokens: Option<u64>,
    /// The model's context window, when known, for errors about prompts that do not fit.
    pub context_window: Option<u64>,
    /// Where the agent compacts its conversation, when the model's settings say.
    pub compact_at: Option<u64>,
    /// Whether the agent compacts at all (on unless the model's settings turn it off).
    pub auto_compact: bool,
    /// Whether the model takes images; without, images of tool results are never sent.
    pub images: bool,
    /// What the daemon learnt about the servers, shared by every clone of this configuration.
    pub servers: KnownServers,
    /// Limits on the configured servers, shared through the store with every daemon on it.
    pub pacing: Option<Pacing>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            stream: true,
            tool_choice: Some("auto".to_owned()),
            max_output_tokens: None,
            context_window: None,
            compact_at: None,
            auto_compact: true,
            images: false,
            servers: KnownServers::default(),
            pacing: None,
        }
    }
}

impl ClientConfig {
    /// This configuration with a model's own settings on top.
    pub fn with_settings(&self, settings: &ModelSettings) -> ClientConfig {
        let mut config = self.clone();
        if let Some(stream) = settings.stream {
            config.stream = stream;
        }
        if let Some(secs) = settings.idle_timeout_secs {
            config.idle_timeout = Duration::from_secs(secs);
        }
        if let Some(n) = settings.max_retries {
            config.max_retries = n;
        }
        if let Some(choice) = &settings.tool_choice {
            config.tool_choice = (choice != "omit").then(|| choice.clone());
        }
        config.max_output_tokens = settings.max_output_tokens.or(config.max_output_tokens);
        config.context_window = settings.context_window.or(config.context_window);
        config.compact_at = settings.compact_at.or(config.compact_at);
        config.auto_compact = settings.auto_compact.unwrap_or(config.auto_compact);
        config.images = settings.images.unwrap_or(config.images);
        config
    }

    fn validate(&self) -> Result<(), ModelError> {
        if self.idle_timeout.is_zero() {
            return Err(ModelError::Config("idle_timeout must be positive".into()));
        }
        if self.connect_timeout.is_zero() {
            return Err(ModelError::Config(
                "connect_timeout must be positive".into(),
            ));
        }
        if self.initial_backoff > self.max_backoff {
            return Err(ModelError::Config(format!(
                "initial_backoff ({:?}) is longer than max_backoff ({:?})",
                self.initial_backoff, self.max_backoff
            )));
        }
        Ok(())
    }
}

/// A tool the model may call; `parameters` is the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

impl ToolDefinition {
    /// A definition as the model gets it. Two keywords of a registry schema are left out, at its
    /// top level and in the object schemas nested in its properties and array items, since they
    /// cost tokens in every request and tell the model nothing it acts on:
    /// `additionalProperties: false` (the registry still refuses an unknown argument, with a
    /// message naming the ones it takes) and an empty `required`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        mut parameters: Value,
    ) -> Self {
        trim_schema(&mut parameters);
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// Leaves out `additionalProperties: false` and an empty `required` of `schema` and of the object
/// schemas under its `properties` and `items`.
fn trim_schema(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if object.get("additionalProperties") == Some(&Value::Bool(false)) {
        object.remove("additionalProperties");
    }
    if object
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        object.remove("required");
    }
    if let Some(properties) = object.get_mut("properties").and_then(Value::as_object_mut) {
        properties.values_mut().for_each(trim_schema);
    }
    if let Some(items) = object.get_mut("items") {
        trim_schema(items);
    }
}

/// Whether a daemon says it holds the key variable `name` (when set in its environment): the
/// variable its config's model names (`configured`), or any with a secret's name (`*_KEY`,
/// `*_TOKEN`, ...) but the orchestrator's own settings (`ORCHESTRATOR_HOME`, its database URL),
/// which are kept from agents like secrets but are no model's key. Names only: a value never
/// leaves the process. A worker hands a task whose key it lacks back for one that holds it only
/// when such a daemon would say so, so the task cannot wait for a word no daemon offers.
pub fn announced_key(name: &str, configured: Option<&str>) -> bool {
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid
        && (configured == Some(name)
            || (!name.starts_with("ORCHESTRATOR_")
                && orchestrator_sandbox::is_secret_name(name, &[])))
}

/// A rough count of the tokens in `bytes` of JSON text, for servers that report no usage and for
/// sizing what a request carries: four bytes to a token, the usual ratio for English and code.
pub fn estimate_tokens(bytes: usize) -> u64 {
    bytes.div_ceil(4) as u64
}

/// What a tool's definition costs in every request, estimated from the JSON the server receives.
pub fn tool_tokens(tool: &ToolDefinition) -> u64 {
    estimate_tokens(
        serde_json::to_vec(&wire::WireTool::from_definition(tool)).map_or(0, |v| v.len()),
    )
}

/// A piece of a reply as it arrives, for whoever watches the task.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    /// More text of the reply.
    Content(String),
    /// A piece of tool call `index` (0-based within the reply): `id` and `name` come with the
    /// first piece of each call, `arguments` are to be appended to what came before.
    ToolCall {
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    /// The attempt failed with a retryable error; attempt number `attempt` (2 for the first
    /// retry) starts after the backoff, from the beginning of the reply. `cause` is one word for
    /// the kind of failure (see [`ModelError::cause`]).
    Retrying {
        attempt: u32,
        cause: &'static str,
        error: String,
    },
}

/// The model's answer to one `complete` call.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    /// The assistant message: text, tool calls, or both.
    pub message: ChatMessage,
    /// Tokens of the successful attempt, when the server reported them; `None` is unknown (a server
    /// that reports all zeros reports nothing).
    pub usage: Option<Usage>,
    /// The model that answered, as the server names it.
    pub model: Option<String>,
    /// Why the model stopped: `stop`, `tool_calls`, `length`, ...
    pub finish_reason: Option<String>,
    /// Attempts made, 1 when the first one succeeded.
    pub attempts: u32,
    /// From the start of the first attempt to the end of the last, backoff included, the waits
    /// for a paced server's slot left out.
    pub elapsed: Duration,
    /// How long the request waited for a paced server's slot.
    pub waited: Duration,
}

#[cfg(test)]
mod tests;
