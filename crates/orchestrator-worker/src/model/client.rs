//! The client: builds a Chat Completions request, sends it with retries and backoff, reads the
//! answer (streamed through stream.rs, or whole) and turns what went wrong into a [`ModelError`].

use super::*;
use orchestrator_types::BoxFuture;

/// A client for one model. Cloning is cheap; clones, and every client made from clones of one
/// [`ClientConfig`], share the connection pool (see `KnownServers::http`).
#[derive(Clone)]
pub struct ModelClient {
    pub(super) http: reqwest::Client,
    /// `{base_url}/chat/completions`.
    pub(super) endpoint: String,
    pub(super) base_url: String,
    pub(super) model: String,
    pub(super) key_env: Option<String>,
    /// Kept only to redact provider messages that echo it.
    pub(super) key: Option<String>,
    /// `Bearer <key>`, marked sensitive so that reqwest's own `Debug` output hides it too.
    pub(super) authorization: Option<HeaderValue>,
    pub(super) config: ClientConfig,
    /// `prompt_cache_key` for providers that take it: one per task, so its requests share a cache.
    pub(super) cache_key: Option<String>,
    /// The task the requests are for, named where they wait for a paced server.
    pub(super) task: Option<orchestrator_types::TaskId>,
    /// Milliseconds this client's requests have waited for a paced server's slots, counted as
    /// the waits go on; shared by its clones.
    pub(super) slot_wait: std::sync::Arc<std::sync::atomic::AtomicU64>,
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

/// Longest wait for the end of a streamed body once `[DONE]` has been read.
const FINISH_BODY: Duration = Duration::from_millis(100);

/// Reads what is left of a streamed reply's body after `[DONE]`: the end of its chunked encoding,
/// usually sent with it or just after. A body dropped before its end closes its connection, and
/// the next request, the next turn's, would open another (to a remote provider, with a TLS
/// handshake of its own). A server that keeps the stream open after `[DONE]` costs the turn at
/// most [`FINISH_BODY`] and its connection, as a dropped body did.
async fn finish_body<S, B>(mut body: S)
where
    S: futures_util::Stream<Item = reqwest::Result<B>> + Unpin,
{
    let rest = async { while let Some(Ok(_)) = body.next().await {} };
    let _ = tokio::time::timeout(FINISH_BODY, rest).await;
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
        let http = config
            .servers
            .http(config.connect_timeout)
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
            task: None,
            slot_wait: Default::default(),
        })
    }

    /// This client with a `prompt_cache_key`, sent where the provider takes one.
    pub fn with_cache_key(mut self, key: impl Into<String>) -> Self {
        self.cache_key = Some(key.into());
        self
    }

    /// Milliseconds its requests have waited for a paced server's slots so far, growing while a
    /// wait goes on: a time budget leaves them out.
    pub fn slot_wait_ms(&self) -> u64 {
        self.slot_wait.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// This client for `task`'s requests: a paced server's line names it.
    pub fn for_task(mut self, task: orchestrator_types::TaskId) -> Self {
        self.task = Some(task);
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

    /// Whether a request that carries tools is still asked for a streamed reply: false when the
    /// configuration turns streaming off, and once the server answered such a request with an
    /// empty body and the same request unstreamed with its reply (llama-cpp-python does), which
    /// every client sharing this configuration then remembers.
    pub fn streams_tools(&self) -> bool {
        self.config.stream && self.config.servers.streams(&self.base_url, true)
    }

    /// Asks the model for its next message. Pieces of the reply go to `deltas` as they arrive (a
    /// non-streamed reply sends its text and each tool call as one piece each); after a retry the
    /// pieces of the new attempt follow a `Delta::Retrying`, repeating what the cut attempt sent.
    pub fn complete<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        tools: &'a [ToolDefinition],
        deltas: Option<&'a UnboundedSender<Delta>>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.complete_unboxed(messages, tools, deltas))
    }

    async fn complete_unboxed(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDefinition],
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<ModelReply, ModelError> {
        let with_tools = !tools.is_empty();
        let servers = &self.config.servers;
        let mut stream = self.config.stream && servers.streams(&self.base_url, with_tools);
        let mut body = self.request_body(messages, tools, stream)?;
        // Set when an empty streamed answer made us ask unstreamed; a reply then teaches the daemon
        // to ask this server unstreamed from now on.
        let mut unstreamed_after_empty = false;
        let started = Instant::now();
        let mut attempt: u32 = 1;
        // Waits for a paced server's slot are not the model's time, and its pushbacks are shared
        // waits rather than retries of this request.
        let paced = self
            .config
            .pacing
            .as_ref()
            .and_then(|p| p.server(&self.base_url).map(|s| (p, s)));
        let mut waited = Duration::ZERO;
        let mut throttled: u32 = 0;
        loop {
            let permit = match paced {
                Some((pacing, server)) => {
                    let tokens = (body.len() as u64).div_ceil(4)
                        + self
                            .config
                            .max_output_tokens
                            .unwrap_or(DEFAULT_REPLY_ESTIMATE);
                    let model = &self.model;
                    let permit = pacing
                        .acquire(server, self.task, tokens, &self.slot_wait, |wait| {
                            tracing::info!(
                                model = %model,
                                "{}",
                                wait.describe(orchestrator_types::now_millis())
                            );
                        })
                        .await
                        .map_err(|e| {
                            ModelError::Connect(format!(
                                "cannot take a slot of the model server {} from the store: {e}",
                                server.name
                            ))
                        })?;
                    waited += permit.waited;
                    Some(permit)
                }
                None => None,
            };
            let answer = self.attempt(&body, stream, deltas).await;
            if let (Some((pacing, server)), Some(mut permit)) = (paced, permit) {
                let end = match &answer {
                    Ok(reply) => orchestrator_store::SlotEnd::Answered {
                        tokens: reply.usage.map(|u| u.prompt_tokens + u.completion_tokens),
                    },
                    Err(failure) if failure.error.is_pushback() => {
                        orchestrator_store::SlotEnd::Throttled {
                            // The store bounds it: no server holds every task for longer than
                            // a minute at a time.
                            retry_after_ms: failure
                                .retry_after
                                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
                        }
                    }
                    Err(_) => orchestrator_store::SlotEnd::Failed,
                };
                pacing.release(server, &mut permit, end).await;
            }
            let failure = match answer {
                Ok(mut reply) => {
                    if unstreamed_after_empty {
                        servers.stop_streaming(&self.base_url, with_tools);
                        tracing::info!(
                            model = %self.model,
                            base_url = %self.base_url,
                            with_tools,
                            "the server answers streamed requests with an empty body and \
                             unstreamed ones in full; it is asked unstreamed from now on"
                        );
                    }
                    reply.attempts = attempt;
                    reply.elapsed = started.elapsed().saturating_sub(waited);
                    reply.waited = waited;
                    return Ok(reply);
                }
                Err(failure) => failure,
            };
            if stream && matches!(failure.error, ModelError::EmptyReply(_)) {
                // Not a failure that needs a wait: llama-cpp-python answers a streamed request
                // that carries tools this way, and a prompt over its window too (its unstreamed
                // answer then says so). The same request unstreamed tells the two apart.
                stream = false;
                unstreamed_after_empty = true;
                body = self.request_body(messages, tools, false)?;
                attempt += 1;
                continue;
            }
            let failure = match failure.error {
                ModelError::EmptyReply(_) if unstreamed_after_empty => Failure::from(
                    ModelError::EmptyReply(" to a streamed request and again unstreamed".into()),
                ),
                _ => failure,
            };
            if paced.is_some() && failure.error.is_pushback() && throttled < MAX_PACED_PUSHBACKS {
                // The server's pushback is every task's wait on it, which the next slot waits
                // out; it is not this request's failure.
                throttled += 1;
                attempt += 1;
                continue;
            }
            if !failure.error.is_retryable() || attempt > self.config.max_retries + throttled {
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

    pub(super) fn request_body(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDefinition],
        stream: bool,
    ) -> Result<Vec<u8>, ModelError> {
        let request = wire::ChatRequest {
            model: &self.model,
            messages: wire::wire_messages(messages, self.config.images),
            tools: tools.iter().map(wire::WireTool::from_definition).collect(),
            tool_choice: if tools.is_empty() {
                None
            } else {
                self.config.tool_choice.as_deref()
            },
            max_tokens: self.config.max_output_tokens,
            stream: stream.then_some(true),
            stream_options: stream.then_some(wire::StreamOptions {
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

    pub(super) async fn attempt(
        &self,
        body: &[u8],
        stream: bool,
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
        if stream && !is_json {
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
    pub(super) async fn next_piece<S, B>(&self, body: &mut S) -> Result<Option<B>, ModelError>
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

    pub(super) fn silence(&self, waiting_for: &str) -> ModelError {
        ModelError::Timeout(format!(
            "the server sent nothing for {} s while we waited for {waiting_for} (the idle \
             timeout; raise it with idle_timeout_secs for a slow server)",
            self.config.idle_timeout.as_secs_f64()
        ))
    }

    /// `" of N tokens"` when the context window is known, for overflow errors.
    pub(super) fn window_note(&self) -> String {
        match self.config.context_window {
            Some(n) => format!(" of {n} tokens"),
            None => String::new(),
        }
    }

    pub(super) async fn read_stream(
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
                    finish_body(body).await;
                    return reply.finish();
                }
            }
            if ended {
                break;
            }
        }
        if received == 0 {
            return Err(ModelError::EmptyReply(" to a streamed request".into()));
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

    pub(super) fn stream_event(
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

    pub(super) fn parse_completion(
        &self,
        bytes: &[u8],
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<ModelReply, ModelError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ModelError::EmptyReply(" to an unstreamed request".into()));
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
    pub(super) fn status_error(&self, status: StatusCode, body: &str) -> ModelError {
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
    pub(super) fn in_band_error(&self, error: &Value) -> ModelError {
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

    pub(super) fn classify(&self, status: u16, code: &str, provider: String) -> ModelError {
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

    pub(super) fn key_hint(&self) -> String {
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
    pub(super) fn clean(&self, message: &str) -> String {
        let message = match &self.key {
            Some(key) => message.replace(key.as_str(), "[redacted]"),
            None => message.to_owned(),
        };
        shorten(&message)
    }
}
