//! The model client: one Chat Completions call to an OpenAI-compatible server, streamed or not,
//! with retries for the failures that pass on their own.
//!
//! The client speaks the conversation vocabulary of `orchestrator_types::chat` and maps it to the
//! wire format in `wire`; streamed replies are framed as server-sent events (`sse`) and assembled
//! here into one assistant message, while each piece is forwarded to an optional channel so a
//! watcher can show the reply as it is written.
//!
//! Retries are for what passes on its own: a transport error, a silent server, a stream that broke
//! off, 408, 429 and a 5xx that is not about the request. They wait with capped exponential backoff
//! and jitter (or the provider's `Retry-After`), and each names its cause. What sending the same
//! request again cannot fix fails at once with the server's own words: a wrong key, an unknown
//! model, a rejected request (whatever its status: llama.cpp answers 500 to a history it cannot
//! parse), a prompt that does not fit the context window, and a 200 with an empty body (how
//! llama-cpp-python reports an overflow). A retried stream starts from the beginning, so a watcher may see the deltas of the
//! cut attempt again after a `Delta::Retrying`.
//!
//! Time: no fixed limit on a whole reply, since a CPU server may write for many minutes; the idle
//! timeout bounds each silence instead (until the reply starts, and between two pieces).
//!
//! Secrets: the key is read from the environment variable the model spec names and lives only in
//! the Authorization header (marked sensitive) and in a redaction filter; no error, log line or
//! `Debug` output carries it, and provider messages that echo it are redacted.

mod error;
mod sse;
mod window;
mod wire;

pub use window::{DEFAULT_WINDOW, Window, WindowSource, known_window};

pub use error::ModelError;
use error::{is_about_the_request, is_overflow};

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
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
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
    /// From the start of the first attempt to the end of the last, backoff included.
    pub elapsed: Duration,
}

/// A client for one model. Cloning is cheap and clones share the connection pool.
#[derive(Clone)]
pub struct ModelClient {
    http: reqwest::Client,
    /// `{base_url}/chat/completions`.
    endpoint: String,
    base_url: String,
    model: String,
    key_env: Option<String>,
    /// Kept only to redact provider messages that echo it.
    key: Option<String>,
    /// `Bearer <key>`, marked sensitive so that reqwest's own `Debug` output hides it too.
    authorization: Option<HeaderValue>,
    config: ClientConfig,
    /// `prompt_cache_key` for providers that take it: one per task, so its requests share a cache.
    cache_key: Option<String>,
}

impl fmt::Debug for ModelClient {
    // By hand, so the key can never be printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelClient")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("api_key_env", &self.key_env)
            .field("has_key", &self.key.is_some())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Whether the provider at `base_url` takes `prompt_cache_key`: OpenAI's API does; servers that
/// do not know the field may refuse the request, so it is sent nowhere else.
pub fn takes_cache_key(base_url: &str) -> bool {
    reqwest::Url::parse(base_url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .is_some_and(|host| host == "api.openai.com")
}

/// A failed attempt, with the wait the server asked for.
struct Failure {
    error: ModelError,
    retry_after: Option<Duration>,
}

impl From<ModelError> for Failure {
    fn from(error: ModelError) -> Self {
        Failure {
            error,
            retry_after: None,
        }
    }
}

impl ModelClient {
    /// A client whose key is read now from the variable `spec.api_key_env` names; with no variable
    /// named, requests carry no Authorization header (local servers need none).
    pub fn new(spec: &ModelSpec, config: ClientConfig) -> Result<Self, ModelError> {
        let key = match &spec.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(value) if !value.trim().is_empty() => Some(value),
                _ => return Err(ModelError::MissingKey { var: var.clone() }),
            },
        };
        ModelClient::with_key(spec, key, config)
    }

    /// A client with the key given directly; `spec.api_key_env` then only names the variable in
    /// error messages.
    pub fn with_key(
        spec: &ModelSpec,
        key: Option<String>,
        config: ClientConfig,
    ) -> Result<Self, ModelError> {
        spec.validate()
            .map_err(|e| ModelError::Config(e.to_string()))?;
        let config = config.with_settings(&spec.settings);
        config.validate()?;
        // Keys pasted from files often end in a newline, which no header may hold.
        let key = key.map(|k| k.trim().to_owned()).filter(|k| !k.is_empty());
        let authorization = match &key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    ModelError::Config(
                        "the API key holds characters an HTTP header cannot carry".into(),
                    )
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("orchestrator/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ModelError::Config(format!("cannot build the HTTP client: {e}")))?;
        let base_url = spec.base_url.trim().trim_end_matches('/').to_owned();
        Ok(ModelClient {
            http,
            endpoint: format!("{base_url}/chat/completions"),
            base_url,
            model: spec.model.clone(),
            key_env: spec.api_key_env.clone(),
            key,
            authorization,
            config,
            cache_key: None,
        })
    }

    /// This client with a `prompt_cache_key`, sent where the provider takes one.
    pub fn with_cache_key(mut self, key: impl Into<String>) -> Self {
        self.cache_key = Some(key.into());
        self
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Asks the model for its next message. Pieces of the reply go to `deltas` as they arrive (a
    /// non-streamed reply sends its text and each tool call as one piece each); after a retry the
    /// pieces of the new attempt follow a `Delta::Retrying`, repeating what the cut attempt sent.
    pub async fn complete(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDefinition],
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<ModelReply, ModelError> {
        let body = self.request_body(messages, tools)?;
        let started = Instant::now();
        let mut attempt: u32 = 1;
        loop {
            let failure = match self.attempt(&body, deltas).await {
                Ok(mut reply) => {
                    reply.attempts = attempt;
                    reply.elapsed = started.elapsed();
                    return Ok(reply);
                }
                Err(failure) => failure,
            };
            if !failure.error.is_retryable() || attempt > self.config.max_retries {
                return Err(failure.error);
            }
            let delay = retry_delay(
                &self.config,
                attempt,
                failure.retry_after,
                rand::random::<f64>(),
            );
            tracing::warn!(
                model = %self.model,
                attempt,
                cause = failure.error.cause(),
                delay_ms = delay.as_millis() as u64,
                error = %failure.error,
                "model request failed; retrying"
            );
            attempt += 1;
            if let Some(deltas) = deltas {
                // Nobody watching is not a reason to stop.
                let _ = deltas.send(Delta::Retrying {
                    attempt,
                    cause: failure.error.cause(),
                    error: failure.error.to_string(),
                });
            }
            tokio::time::sleep(delay).await;
        }
    }

    fn request_body(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDefinition],
    ) -> Result<Vec<u8>, ModelError> {
        let request = wire::ChatRequest {
            model: &self.model,
            messages: messages.iter().map(wire::WireMessage::from_chat).collect(),
            tools: tools.iter().map(wire::WireTool::from_definition).collect(),
            tool_choice: if tools.is_empty() {
                None
            } else {
                self.config.tool_choice.as_deref()
            },
            max_tokens: self.config.max_output_tokens,
            stream: self.config.stream.then_some(true),
            stream_options: self.config.stream.then_some(wire::StreamOptions {
                include_usage: true,
            }),
            prompt_cache_key: self
                .cache_key
                .as_deref()
                .filter(|_| takes_cache_key(&self.base_url)),
        };
        // Serialised once and sent as is by every attempt.
        serde_json::to_vec(&request)
            .map_err(|e| ModelError::Config(format!("cannot encode the request: {e}")))
    }

    async fn attempt(
        &self,
        body: &[u8],
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<ModelReply, Failure> {
        let mut request = self
            .http
            .post(&self.endpoint)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let response = match tokio::time::timeout(self.config.idle_timeout, request.send()).await {
            Ok(sent) => sent.map_err(|e| send_error(&e))?,
            Err(_) => return Err(Failure::from(self.silence("the reply to start"))),
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let text = read_error_body(response).await;
            return Err(Failure {
                error: self.status_error(status, &text),
                retry_after,
            });
        }
        // A server that cannot stream may answer a streamed request with a plain completion.
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        if self.config.stream && !is_json {
            Ok(self.read_stream(response, deltas).await?)
        } else {
            let mut bytes = Vec::new();
            let mut body = response.bytes_stream();
            while let Some(piece) = self.next_piece(&mut body).await? {
                bytes.extend_from_slice(&piece);
            }
            Ok(self.parse_completion(&bytes, deltas)?)
        }
    }

    /// The next piece of a reply body, waiting at most the idle timeout for it.
    async fn next_piece<S, B>(&self, body: &mut S) -> Result<Option<B>, ModelError>
    where
        S: futures_util::Stream<Item = reqwest::Result<B>> + Unpin,
    {
        match tokio::time::timeout(self.config.idle_timeout, body.next()).await {
            Ok(Some(Ok(bytes))) => Ok(Some(bytes)),
            Ok(Some(Err(e))) => Err(ModelError::BrokenStream(error_chain(&e))),
            Ok(None) => Ok(None),
            Err(_) => Err(self.silence("the next piece of the reply")),
        }
    }

    fn silence(&self, waiting_for: &str) -> ModelError {
        ModelError::Timeout(format!(
            "the server sent nothing for {} s while we waited for {waiting_for} (the idle \
             timeout; raise it with idle_timeout_secs for a slow server)",
            self.config.idle_timeout.as_secs_f64()
        ))
    }

    /// `" of N tokens"` when the context window is known, for overflow errors.
    fn window_note(&self) -> String {
        match self.config.context_window {
            Some(n) => format!(" of {n} tokens"),
            None => String::new(),
        }
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<ModelReply, ModelError> {
        let mut parser = sse::SseParser::default();
        let mut reply = Assembler::default();
        let mut body = response.bytes_stream();
        let mut received = 0usize;
        loop {
            let (events, ended) = match self.next_piece(&mut body).await? {
                Some(bytes) => {
                    received += bytes.len();
                    (
                        parser.push(&bytes).map_err(ModelError::InvalidResponse)?,
                        false,
                    )
                }
                None => (parser.finish().into_iter().collect(), true),
            };
            for data in events {
                if self.stream_event(&data, &mut reply, deltas)? == Flow::Done {
                    return reply.finish();
                }
            }
            if ended {
                break;
            }
        }
        if received == 0 {
            return Err(ModelError::EmptyReply(self.window_note()));
        }
        // Some servers close without `[DONE]` after the last chunk; a finish reason shows the reply
        // was whole. Without either, the connection was cut mid-reply.
        if reply.finish_reason.is_none() {
            return Err(ModelError::BrokenStream(
                "the stream ended without a finish reason or [DONE]".into(),
            ));
        }
        reply.finish()
    }

    fn stream_event(
        &self,
        data: &str,
        reply: &mut Assembler,
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<Flow, ModelError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let chunk: wire::StreamChunk = serde_json::from_str(data).map_err(|e| {
            ModelError::InvalidResponse(format!(
                "a stream chunk is not a completion chunk ({e}): {}",
                shorten(data)
            ))
        })?;
        if let Some(error) = &chunk.error {
            return Err(self.in_band_error(error));
        }
        if let Some(usage) = chunk.usage.and_then(wire::WireUsage::known) {
            reply.usage = Some(usage);
        }
        if reply.model.is_none() {
            reply.model = chunk.model.filter(|m| !m.is_empty());
        }
        // We never ask for more than one choice; other indexes would belong to other replies.
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    reply.content.push_str(&text);
                    send(deltas, Delta::Content(text));
                }
                for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                    let index = call.index.unwrap_or(position);
                    let (name, arguments) = match call.function {
                        Some(f) => (f.name, f.arguments.unwrap_or_default()),
                        None => (None, String::new()),
                    };
                    let id = call.id.filter(|id| !id.is_empty());
                    let name = name.filter(|n| !n.is_empty());
                    let partial = reply.calls.entry(index).or_default();
                    if partial.id.is_none() {
                        partial.id.clone_from(&id);
                    }
                    if partial.name.is_none() {
                        partial.name.clone_from(&name);
                    }
                    partial.arguments.push_str(&arguments);
                    send(
                        deltas,
                        Delta::ToolCall {
                            index,
                            id,
                            name,
                            arguments,
                        },
                    );
                }
            }
            if choice.finish_reason.is_some() {
                reply.finish_reason = choice.finish_reason;
            }
        }
        Ok(Flow::More)
    }

    fn parse_completion(
        &self,
        bytes: &[u8],
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<ModelReply, ModelError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ModelError::EmptyReply(self.window_note()));
        }
        let completion: wire::Completion = serde_json::from_slice(bytes).map_err(|e| {
            ModelError::InvalidResponse(format!(
                "the reply is not a chat completion ({e}): {}",
                shorten(&String::from_utf8_lossy(bytes))
            ))
        })?;
        if let Some(error) = &completion.error {
            return Err(self.in_band_error(error));
        }
        let choice = completion
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| ModelError::InvalidResponse("the reply has no choices".into()))?;
        let message = choice.message.ok_or_else(|| {
            ModelError::InvalidResponse("the reply's choice has no message".into())
        })?;
        let mut reply = Assembler {
            content: message.content.unwrap_or_default(),
            finish_reason: choice.finish_reason,
            usage: completion.usage.and_then(wire::WireUsage::known),
            model: completion.model.filter(|m| !m.is_empty()),
            ..Assembler::default()
        };
        if !reply.content.is_empty() {
            send(deltas, Delta::Content(reply.content.clone()));
        }
        for (index, call) in message.tool_calls.into_iter().flatten().enumerate() {
            let (name, arguments) = match call.function {
                Some(f) => (f.name, wire::arguments_text(f.arguments)),
                None => (None, String::new()),
            };
            send(
                deltas,
                Delta::ToolCall {
                    index,
                    id: call.id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                },
            );
            reply.calls.insert(
                index,
                PartialCall {
                    id: call.id.filter(|id| !id.is_empty()),
                    name: name.filter(|n| !n.is_empty()),
                    arguments,
                },
            );
        }
        reply.finish()
    }

    /// The error for an HTTP status other than success, with the provider's own words.
    fn status_error(&self, status: StatusCode, body: &str) -> ModelError {
        let parsed = serde_json::from_str::<Value>(body).ok();
        // A JSON body without a message says nothing the status does not; other text (an HTML
        // page from a proxy, a plain sentence) may.
        let provider = match &parsed {
            Some(json) => wire::error_message(json).unwrap_or_default(),
            None => body.trim().to_owned(),
        };
        let provider = if provider.is_empty() {
            status
                .canonical_reason()
                .unwrap_or("no error message")
                .to_owned()
        } else {
            self.clean(&provider)
        };
        let code = parsed.as_ref().and_then(error_code).unwrap_or_default();
        self.classify(status.as_u16(), &code, provider)
    }

    /// The error for an error object sent with a 200: inside a stream or instead of a completion.
    /// Its status, when it names one, decides the kind; otherwise its type or code does, and an
    /// error we cannot place is treated as a broken stream, which a retry may get past.
    fn in_band_error(&self, error: &Value) -> ModelError {
        let message = self.clean(&wire::error_message(error).unwrap_or_else(|| error.to_string()));
        let inner = error.get("error").unwrap_or(error);
        let status = ["status", "code"]
            .iter()
            .filter_map(|key| inner.get(*key).and_then(Value::as_u64))
            .find(|s| (400..600).contains(s));
        let code = error_code(error).unwrap_or_default();
        let status = status.or_else(|| {
            let kind = code.to_ascii_lowercase();
            [
                ("rate_limit", 429),
                ("insufficient_quota", 429),
                ("invalid_request", 400),
                ("context_length", 400),
                ("authentication", 401),
                ("permission", 403),
                ("not_found", 404),
                ("overloaded", 503),
                ("server_error", 500),
            ]
            .iter()
            .find(|(word, _)| kind.contains(word))
            .map(|(_, status)| *status)
        });
        match status {
            Some(status) => self.classify(status as u16, &code, message),
            None => ModelError::BrokenStream(format!("the provider reported an error: {message}")),
        }
    }

    fn classify(&self, status: u16, code: &str, provider: String) -> ModelError {
        if (400..600).contains(&status) && is_overflow(code, &provider) {
            return ModelError::ContextOverflow {
                message: provider,
                window: self.window_note(),
            };
        }
        if (500..600).contains(&status) && is_about_the_request(code, &provider) {
            return ModelError::BadRequest {
                status,
                message: provider,
            };
        }
        match status {
            401 | 403 => ModelError::Unauthorized {
                status,
                message: format!("{provider}; {}", self.key_hint()),
            },
            404 => ModelError::UnknownModel {
                model: self.model.clone(),
                message: format!(
                    "{} answered 404 ({provider}); check the model name {:?} and the base URL {}",
                    self.endpoint, self.model, self.base_url
                ),
            },
            408 => ModelError::Timeout(format!("the server answered 408: {provider}")),
            // An exhausted quota comes as a 429 too, but no wait will refill it.
            429 if code.contains("insufficient_quota") => ModelError::BadRequest {
                status,
                message: provider,
            },
            429 => ModelError::RateLimited { message: provider },
            400..=499 => ModelError::BadRequest {
                status,
                message: provider,
            },
            500..=599 => ModelError::Server {
                status,
                message: provider,
            },
            _ => {
                ModelError::InvalidResponse(format!("unexpected HTTP status {status}: {provider}"))
            }
        }
    }

    fn key_hint(&self) -> String {
        match (&self.key_env, &self.key) {
            (Some(var), _) => format!("check the API key in environment variable {var}"),
            (None, Some(_)) => "check the API key given to the client".to_owned(),
            (None, None) => "no API key is configured for this model; set api_key_env to the \
                 environment variable that holds one"
                .to_owned(),
        }
    }

    /// A provider message fit for our errors: without the key (some providers quote the key they
    /// refused) and not longer than an event should hold.
    fn clean(&self, message: &str) -> String {
        let message = match &self.key {
            Some(key) => message.replace(key.as_str(), "[redacted]"),
            None => message.to_owned(),
        };
        shorten(&message)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Flow {
    More,
    Done,
}

/// A tool call being put together from stream pieces.
#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// The reply being put together from stream chunks.
#[derive(Debug, Default)]
struct Assembler {
    content: String,
    /// By index, which is the order the model wrote the calls in.
    calls: BTreeMap<usize, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
}

impl Assembler {
    fn finish(self) -> Result<ModelReply, ModelError> {
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
        })
    }
}

fn send(deltas: Option<&UnboundedSender<Delta>>, delta: Delta) {
    if let Some(deltas) = deltas {
        // A watcher that went away does not stop the task.
        let _ = deltas.send(delta);
    }
}

/// The wait before the retry that follows failed attempt `attempt` (1-based), for a random draw
/// in [0, 1). The server's `Retry-After` wins over our own backoff, since it knows when it will
/// take requests again, but neither may exceed `max_backoff`.
fn retry_delay(
    config: &ClientConfig,
    attempt: u32,
    retry_after: Option<Duration>,
    draw: f64,
) -> Duration {
    if let Some(wait) = retry_after {
        return wait.min(config.max_backoff);
    }
    let backoff = Backoff {
        base: config.initial_backoff,
        cap: config.max_backoff,
        jitter: BACKOFF_JITTER,
    };
    let millis = backoff.delay_with(i64::from(attempt), draw).max(0) as u64;
    // Jitter may push past the cap; the cap is a promise.
    Duration::from_millis(millis).min(config.max_backoff)
}

/// The wait a server asked for: `retry-after-ms` (OpenAI, Azure) or `Retry-After` in seconds. The
/// HTTP-date form of `Retry-After` is ignored; our own backoff applies then.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let value = headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    number(RETRY_AFTER.as_str()).map(Duration::from_secs_f64)
}

/// A provider's error type or code, lower-cased, for telling kinds of errors apart.
fn error_code(body: &Value) -> Option<String> {
    let error = body.get("error").unwrap_or(body);
    let text: Vec<&str> = ["code", "type"]
        .iter()
        .filter_map(|key| error.get(*key).and_then(Value::as_str))
        .collect();
    (!text.is_empty()).then(|| text.join(" ").to_ascii_lowercase())
}

async fn read_error_body(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            // The status already says what went wrong; a body we cannot read adds nothing.
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(MAX_ERROR_BODY_BYTES);
    String::from_utf8_lossy(&body).into_owned()
}

fn send_error(error: &reqwest::Error) -> Failure {
    let error = if error.is_timeout() && !error.is_connect() {
        ModelError::Timeout(error_chain(error))
    } else {
        ModelError::Connect(error_chain(error))
    };
    Failure::from(error)
}

/// An error with its causes, since reqwest's own message ("error sending request") hides the part
/// that helps (connection refused, certificate invalid, ...).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn shorten(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(MAX_PROVIDER_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;
