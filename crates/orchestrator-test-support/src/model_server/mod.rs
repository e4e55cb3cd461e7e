//! A scripted model server: a real HTTP server on 127.0.0.1 that speaks the Chat Completions wire
//! format, streamed and not, and answers each request with whatever a test scripted.
//!
//! It sends what OpenAI sends, down to the chunk shapes (`chat.completion.chunk` objects, tool call
//! arguments split over several chunks, a finish chunk, a usage chunk, `[DONE]`), and splits every
//! event over two network writes so clients must reassemble them. Everything it makes up is
//! deterministic: tool call ids are `call_{request index}_{n}`, usage is counted from the request,
//! timestamps are fixed. So a test can restart the client (or a whole `serve` process) and the
//! handler, deciding from the request alone, continues the conversation where it was.
//!
//! The server lives as long as its `ScriptedModel`: `start` runs it on the caller's tokio runtime,
//! `start_blocking` on a thread of its own for tests without one.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::http_server;

mod wire;

use wire::{json_response, respond};

/// What the server answers to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A text reply, finish reason `stop`.
    Text(String),
    /// Tool calls, finish reason `tool_calls`.
    ToolCalls(Vec<ScriptedCall>),
    /// Text first, then tool calls, as models that explain themselves do.
    TextAndToolCalls(String, Vec<ScriptedCall>),
    /// An HTTP error: the status and the JSON body, for example [`error_body`]'s.
    Status(u16, String),
    /// Sends the role chunk and part of the content, then drops the connection without `[DONE]`.
    /// A non-streamed request gets half a JSON body before the drop.
    CutStream,
    /// Never answers, for timeouts.
    Hang,
    /// A 200 with an empty body, as llama-cpp-python answers a prompt over its context window.
    EmptyBody,
    /// A reply shaped by hand: finish reason, ids, usage and model as real servers vary them.
    Shaped(Shape),
    /// Streams `pieces` text pieces, one every `every`, then finishes: a slow server that keeps
    /// writing. A non-streamed request gets the whole text after the same total time.
    Slow {
        pieces: usize,
        every: std::time::Duration,
    },
}

/// A reply with the details real servers differ on.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub text: String,
    pub calls: Vec<ScriptedCall>,
    /// `None` picks `stop` or `tool_calls` as OpenAI does.
    pub finish_reason: Option<String>,
    /// Whether tool calls carry ids (llama.cpp's older servers send none).
    pub call_ids: bool,
    /// Whether usage is reported (llama-cpp-python's streams report none).
    pub usage: bool,
    /// The model the server says answered (default: the one asked for).
    pub model: Option<String>,
}

impl Shape {
    pub fn text(text: &str) -> Shape {
        Shape {
            text: text.to_owned(),
            calls: Vec::new(),
            finish_reason: None,
            call_ids: true,
            usage: true,
            model: None,
        }
    }

    pub fn calls(calls: Vec<ScriptedCall>) -> Shape {
        Shape {
            calls,
            ..Shape::text("")
        }
    }

    /// Cut by the output token limit: finish reason `length`.
    pub fn cut(mut self) -> Shape {
        self.finish_reason = Some("length".into());
        self
    }

    pub fn without_ids(mut self) -> Shape {
        self.call_ids = false;
        self
    }

    pub fn without_usage(mut self) -> Shape {
        self.usage = false;
        self
    }

    pub fn answered_by(mut self, model: &str) -> Shape {
        self.model = Some(model.to_owned());
        self
    }
}

/// Behaviours of real OpenAI-compatible servers that a test may switch on, each seen in the wild.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quirks {
    /// llama-cpp-python: 500 to a message whose `content` is `null` or missing.
    pub refuse_null_content: bool,
    /// llama-cpp-python: tools offered without `tool_choice` are ignored; the model writes its
    /// call as plain text instead.
    pub ignore_tools_without_tool_choice: bool,
    /// llama-server: 500 to a history whose tool call arguments are not a JSON object.
    pub refuse_malformed_history: bool,
    /// llama-server started with `--ctx-size N`: a request over N tokens (counted here as four
    /// bytes of its messages' and tools' JSON to a token) gets llama.cpp's 400
    /// `exceed_context_size_error`, usage reports that count, and `GET /props` says N.
    pub context_window: Option<u64>,
    /// llama-cpp-python (0.3.36 with `chatml-function-calling`): a streamed request that carries
    /// tools gets 200 and an empty body; the same request unstreamed gets its reply.
    pub empty_streamed_tools: bool,
    /// Ollama with a model file that sets `num_ctx N`: `GET /api/version` answers Ollama's
    /// version, and `POST /api/show` the model's parameters with `num_ctx N`.
    pub ollama_num_ctx: Option<u64>,
    /// A server with this many parallel slots that answers 429 to a completion past them, as a
    /// hosted API's concurrency limit and vLLM with a bounded queue do. A refused request never
    /// reaches the handler; [`ScriptedModel::refusals`] counts it.
    pub slots: Option<usize>,
    /// The `Retry-After` (seconds) of those 429s; without it they carry none.
    pub retry_after_secs: Option<u64>,
    /// How long the server works over each completion before it answers, holding its slot.
    pub latency_ms: u64,
}

impl Quirks {
    /// Every quirk on: a client that works against this works against the real servers.
    pub fn real_servers() -> Quirks {
        Quirks {
            refuse_null_content: true,
            ignore_tools_without_tool_choice: true,
            refuse_malformed_history: true,
            context_window: None,
            empty_streamed_tools: false,
            ollama_num_ctx: None,
            slots: None,
            retry_after_secs: None,
            latency_ms: 0,
        }
    }

    /// llama-cpp-python's server as it runs out of the box: every quirk of [`Quirks::real_servers`]
    /// and the empty answer to a streamed request with tools.
    pub fn llama_cpp_python() -> Quirks {
        Quirks {
            empty_streamed_tools: true,
            ..Quirks::real_servers()
        }
    }
}

/// A tool call the scripted model makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedCall {
    pub name: String,
    /// Sent as is; it may be malformed JSON on purpose.
    pub arguments: String,
}

/// A tool call with JSON arguments.
pub fn call(name: &str, arguments: Value) -> ScriptedCall {
    ScriptedCall {
        name: name.to_owned(),
        arguments: arguments.to_string(),
    }
}

/// An error body in OpenAI's shape, for [`Reply::Status`].
pub fn error_body(message: &str, kind: &str) -> String {
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}}).to_string()
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Request {
    /// The JSON body as sent.
    pub body: Value,
    /// The Authorization header, if any.
    pub authorization: Option<String>,
    /// 0-based arrival order.
    pub index: usize,
    /// The request's tokens as a server with a `context_window` counts them.
    pub counted_tokens: Option<u64>,
    /// Of those, the tokens of the prefix it shares with the request before it (the tools and
    /// the messages both have, byte for byte), which such a server reports as cached.
    pub cached_tokens: Option<u64>,
    /// When the server began to handle it: its body read, its JSON not yet parsed.
    pub arrived_at: std::time::Instant,
}

impl Request {
    /// Four bytes of the JSON of the messages and the tools to a token.
    pub fn size_tokens(&self) -> u64 {
        let bytes = self.body["messages"].to_string().len()
            + self.body.get("tools").map_or(0, |t| t.to_string().len());
        bytes.div_ceil(4) as u64
    }

    pub fn messages(&self) -> &[Value] {
        self.body["messages"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Assistant messages in the conversation so far: how many replies the model already gave.
    pub fn assistant_turns(&self) -> usize {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count()
    }

    /// The contents of the tool messages after the last assistant message.
    pub fn last_tool_results(&self) -> Vec<String> {
        let mut results: Vec<String> = self
            .messages()
            .iter()
            .rev()
            .take_while(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
            .collect();
        results.reverse();
        results
    }

    /// The text of the last user message.
    pub fn last_user_text(&self) -> Option<String> {
        self.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .map(str::to_owned)
    }

    /// Names of the tools the request offers.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
            .collect()
    }

    pub fn model(&self) -> Option<&str> {
        self.body["model"].as_str()
    }

    pub fn is_streaming(&self) -> bool {
        self.body["stream"] == true
    }
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

struct Shared {
    handler: Box<Handler>,
    quirks: Quirks,
    /// Shared, not copied: a copy of each request's JSON was the server's largest cost per request.
    received: Mutex<Vec<Arc<Request>>>,
    /// How long the server took over each completion request, by its index: from its arrival to
    /// its answer being handed to the HTTP layer. A scripted reply's pieces are made by then; the
    /// later pieces of a `Reply::Slow` stream are not counted.
    handling: Mutex<Vec<Option<std::time::Duration>>>,
    /// Requests refused because they did not fit the `context_window` quirk.
    oversized: std::sync::atomic::AtomicUsize,
    /// `METHOD /path` of every request to another path than the completions endpoint.
    probes: Mutex<Vec<String>>,
    /// The models `GET /v1/models` lists; `None` answers it 404, as before it was set.
    models: Mutex<Option<Vec<String>>>,
    /// Completions being worked on now, and the most there ever were at once.
    in_flight: std::sync::atomic::AtomicUsize,
    most_in_flight: std::sync::atomic::AtomicUsize,
    /// When each completion refused for want of a slot arrived.
    refusals: Mutex<Vec<std::time::Instant>>,
}

/// The tokens of the prefix `request` shares with `previous`: the tools when they are the same
/// bytes, then the messages both start with. Four bytes to a token, as `size_tokens` counts.
fn shared_prefix_tokens(previous: &Request, request: &Request) -> u64 {
    let tools = request.body.get("tools").map(Value::to_string);
    if tools != previous.body.get("tools").map(Value::to_string) {
        return 0;
    }
    let same = request
        .messages()
        .iter()
        .zip(previous.messages())
        .take_while(|(a, b)| a == b)
        .map(|(m, _)| m.to_string().len() + 1)
        .sum::<usize>();
    (tools.map_or(0, |t| t.len()) + same).div_ceil(4) as u64
}

/// A running scripted model server; it stops when this is dropped.
pub struct ScriptedModel {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Dropping it stops the server.
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("addr", &self.addr)
            .field("requests", &self.request_count())
            .finish()
    }
}

impl ScriptedModel {
    /// Starts a server on the current tokio runtime whose `handler` picks each reply.
    pub async fn start(
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> ScriptedModel {
        ScriptedModel::start_with(Quirks::default(), handler).await
    }

    /// `start`, with real servers' `quirks`.
    pub async fn start_with(
        quirks: Quirks,
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> ScriptedModel {
        let (model, listener, app, stop) = ScriptedModel::prepare(quirks, Box::new(handler));
        http_server::spawn(listener, app, stop);
        model
    }

    /// Starts a server on a thread with its own runtime, for tests that have none; it keeps
    /// answering while the test blocks on other processes.
    pub fn start_blocking(
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> ScriptedModel {
        ScriptedModel::start_blocking_with(Quirks::default(), handler)
    }

    /// `start_blocking`, with real servers' `quirks`.
    pub fn start_blocking_with(
        quirks: Quirks,
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> ScriptedModel {
        let (model, listener, app, stop) = ScriptedModel::prepare(quirks, Box::new(handler));
        http_server::spawn_on_thread("scripted-model", listener, app, stop);
        model
    }

    /// A server that gives `replies` in order of arrival, then `Text("done")` to anything more.
    pub async fn scripted(replies: Vec<Reply>) -> ScriptedModel {
        ScriptedModel::start(in_order(replies)).await
    }

    /// `scripted` on a thread of its own, like `start_blocking`.
    pub fn scripted_blocking(replies: Vec<Reply>) -> ScriptedModel {
        ScriptedModel::start_blocking(in_order(replies))
    }

    fn prepare(
        quirks: Quirks,
        handler: Box<Handler>,
    ) -> (
        ScriptedModel,
        std::net::TcpListener,
        Router,
        oneshot::Receiver<()>,
    ) {
        // Bound here, synchronously, so the address is known before the server task runs.
        let (listener, addr) = http_server::bind();
        let shared = Arc::new(Shared {
            handler,
            quirks,
            received: Mutex::new(Vec::new()),
            handling: Mutex::new(Vec::new()),
            oversized: std::sync::atomic::AtomicUsize::new(0),
            probes: Mutex::new(Vec::new()),
            models: Mutex::new(None),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            most_in_flight: std::sync::atomic::AtomicUsize::new(0),
            refusals: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/v1/models", axum::routing::get(list_models))
            .route("/props", axum::routing::get(props))
            .route("/api/version", axum::routing::get(ollama_version))
            .route("/api/show", post(ollama_show))
            .fallback(not_found)
            .layer(axum::middleware::from_fn_with_state(
                shared.clone(),
                record_probe,
            ))
            .with_state(shared.clone());
        let (stop_tx, stop_rx) = oneshot::channel();
        let model = ScriptedModel {
            addr,
            shared,
            _stop: stop_tx,
        };
        (model, listener, app, stop_rx)
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL a model spec takes.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request body received, in order of arrival.
    pub fn requests(&self) -> Vec<Value> {
        self.received().into_iter().map(|r| r.body).collect()
    }

    /// Every request received, with its headers of interest.
    pub fn received(&self) -> Vec<Request> {
        let received = self.shared.received.lock().unwrap();
        received.iter().map(|r| Request::clone(r)).collect()
    }

    /// The server's own time over the completion request of arrival `index` (see
    /// [`Request::index`]): parsing it, keeping it, asking the handler and making the answer.
    /// `None` while it is being handled, or if it never was.
    pub fn handling_time(&self, index: usize) -> Option<std::time::Duration> {
        self.shared
            .handling
            .lock()
            .unwrap()
            .get(index)
            .copied()
            .flatten()
    }

    /// How many requests were refused as too long for the `context_window` quirk.
    pub fn oversized(&self) -> usize {
        self.shared
            .oversized
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn request_count(&self) -> usize {
        self.shared.received.lock().unwrap().len()
    }

    /// Makes `GET /v1/models` list these models, as OpenAI, llama.cpp and vLLM do (without it the
    /// server answers that path 404, as a server that lists nothing does).
    pub fn list_models(&self, models: &[&str]) {
        *self.shared.models.lock().unwrap() =
            Some(models.iter().map(|m| (*m).to_owned()).collect());
    }

    /// The most completions the server ever worked on at once (refused ones not counted).
    pub fn most_in_flight(&self) -> usize {
        self.shared
            .most_in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// When each completion refused with 429 for want of a slot arrived (the `slots` quirk).
    pub fn refusals(&self) -> Vec<std::time::Instant> {
        self.shared.refusals.lock().unwrap().clone()
    }

    /// `METHOD /path` of every request to another path than `/v1/chat/completions` (discovery of
    /// the context window, Ollama's endpoints, ...), in order of arrival.
    pub fn probes(&self) -> Vec<String> {
        self.shared.probes.lock().unwrap().clone()
    }
}

/// Notes every request that is not a completion, for [`ScriptedModel::probes`].
async fn record_probe(
    State(shared): State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path().to_owned();
    if path != "/v1/chat/completions" {
        shared
            .probes
            .lock()
            .unwrap()
            .push(format!("{} {path}", request.method()));
    }
    next.run(request).await
}

fn in_order(replies: Vec<Reply>) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    move |request: &Request| {
        replies
            .get(request.index)
            .cloned()
            .unwrap_or_else(|| Reply::Text("done".into()))
    }
}

async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        error_body(
            "The scripted model serves only /v1/chat/completions",
            "invalid_request_error",
        ),
    )
}

/// `GET /v1/models` in OpenAI's shape, when [`ScriptedModel::list_models`] gave the list.
async fn list_models(State(shared): State<Arc<Shared>>) -> Response {
    let models = shared.models.lock().unwrap().clone();
    match models {
        Some(models) => {
            let data: Vec<Value> = models
                .iter()
                .map(|id| json!({"id": id, "object": "model", "created": 1_700_000_000u64, "owned_by": "scripted"}))
                .collect();
            json_response(
                StatusCode::OK,
                json!({"object": "list", "data": data}).to_string(),
            )
        }
        None => not_found().await,
    }
}

/// llama.cpp's `GET /props`, when the server has a `context_window`.
async fn props(State(shared): State<Arc<Shared>>) -> Response {
    match shared.quirks.context_window {
        Some(n_ctx) => json_response(
            StatusCode::OK,
            json!({"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1}).to_string(),
        ),
        None => not_found().await,
    }
}

/// Ollama's `GET /api/version`, when the server answers as Ollama.
async fn ollama_version(State(shared): State<Arc<Shared>>) -> Response {
    match shared.quirks.ollama_num_ctx {
        Some(_) => json_response(StatusCode::OK, json!({"version": "0.6.2"}).to_string()),
        None => not_found().await,
    }
}

/// Ollama's `POST /api/show`: the model file's parameters, `num_ctx` among them.
async fn ollama_show(State(shared): State<Arc<Shared>>) -> Response {
    match shared.quirks.ollama_num_ctx {
        Some(num_ctx) => json_response(
            StatusCode::OK,
            json!({
                "parameters": format!("temperature 0.2\nnum_ctx {num_ctx}"),
                "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768},
            })
            .to_string(),
        ),
        None => not_found().await,
    }
}

async fn completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    use std::sync::atomic::Ordering::SeqCst;
    let arrived_at = std::time::Instant::now();
    let now = shared.in_flight.fetch_add(1, SeqCst) + 1;
    // Held until the answer is made, however the handler ends.
    struct Leaving<'a>(&'a std::sync::atomic::AtomicUsize);
    impl Drop for Leaving<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let _leaving = Leaving(&shared.in_flight);
    if shared.quirks.slots.is_some_and(|slots| now > slots) {
        shared.refusals.lock().unwrap().push(arrived_at);
        let mut response = json_response(
            StatusCode::TOO_MANY_REQUESTS,
            error_body("all slots are busy, try again later", "rate_limit_exceeded"),
        );
        if let Some(secs) = shared.quirks.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, secs.to_string().parse().unwrap());
        }
        return response;
    }
    shared.most_in_flight.fetch_max(now, SeqCst);
    if shared.quirks.latency_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(shared.quirks.latency_ms)).await;
    }
    let (index, response) = complete(&shared, &headers, &body, arrived_at).await;
    if let Some(index) = index {
        let mut handling = shared.handling.lock().unwrap();
        if handling.len() <= index {
            handling.resize(index + 1, None);
        }
        handling[index] = Some(arrived_at.elapsed());
    }
    response
}

/// A completion request's answer, and the request's index once it is numbered.
async fn complete(
    shared: &Shared,
    headers: &HeaderMap,
    body: &[u8],
    arrived_at: std::time::Instant,
) -> (Option<usize>, Response) {
    let body: Value = match serde_json::from_slice(body) {
        Ok(body) => body,
        Err(e) => {
            return (
                None,
                json_response(
                    StatusCode::BAD_REQUEST,
                    error_body(
                        &format!("the body is not JSON: {e}"),
                        "invalid_request_error",
                    ),
                ),
            );
        }
    };
    let request = {
        let mut received = shared.received.lock().unwrap();
        let mut request = Request {
            body,
            authorization: headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            index: received.len(),
            counted_tokens: None,
            cached_tokens: None,
            arrived_at,
        };
        if shared.quirks.context_window.is_some() {
            let size = request.size_tokens();
            request.counted_tokens = Some(size);
            request.cached_tokens = Some(
                received
                    .last()
                    .map_or(0, |previous| shared_prefix_tokens(previous, &request))
                    .min(size),
            );
        }
        let request = Arc::new(request);
        received.push(request.clone());
        request
    };
    let index = Some(request.index);
    if let (Some(n_ctx), Some(tokens)) = (shared.quirks.context_window, request.counted_tokens)
        && tokens > n_ctx
    {
        shared
            .oversized
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        return (index, json_response(
            StatusCode::BAD_REQUEST,
            json!({"error": {
                "code": 400,
                "message": format!("request ({tokens} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"),
                "type": "exceed_context_size_error",
                "n_prompt_tokens": tokens,
                "n_ctx": n_ctx,
            }})
            .to_string(),
        ));
    }
    if let Some(refusal) = refuse(shared.quirks, &request) {
        return (index, refusal);
    }
    if shared.quirks.empty_streamed_tools
        && request.is_streaming()
        && !request.tool_names().is_empty()
    {
        return (index, respond(&request, Reply::EmptyBody, false).await);
    }
    let reply = (shared.handler)(&request);
    let ignore_tools =
        shared.quirks.ignore_tools_without_tool_choice && request.body.get("tool_choice").is_none();
    (index, respond(&request, reply, ignore_tools).await)
}

/// The 500 a real server gives to a request it cannot take, when its quirk is on.
fn refuse(quirks: Quirks, request: &Request) -> Option<Response> {
    let server_error = |message: String| {
        json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": {"code": 500, "message": message, "type": "server_error"}}).to_string(),
        )
    };
    for (n, message) in request.messages().iter().enumerate() {
        if quirks.refuse_null_content && message.get("content").is_none_or(Value::is_null) {
            return Some(server_error(format!(
                "Internal Server Error: TypeError: can only concatenate str (not \"NoneType\") to \
                 str (message {n})"
            )));
        }
        if quirks.refuse_malformed_history {
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
                if !matches!(
                    serde_json::from_str::<Value>(arguments),
                    Ok(Value::Object(_))
                ) {
                    return Some(server_error(format!(
                        "[json.exception.parse_error.101] parse error at line 1: syntax error \
                         while parsing value; last read: '{arguments}'"
                    )));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A completion request with `body`, over a plain socket (no runtime in the caller); the
    /// whole answer, head and body.
    fn post(model: &ScriptedModel, body: &str) -> String {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(model.addr()).unwrap();
        write!(
            stream,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }

    #[test]
    fn a_blocking_server_answers_without_a_runtime_in_the_caller() {
        let model = ScriptedModel::scripted_blocking(vec![Reply::Text("hello".into())]);
        let answer = post(&model, r#"{"model":"m","messages":[]}"#);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(r#""content":"hello""#), "{answer}");
        assert_eq!(model.request_count(), 1);
    }

    /// The server's own time over a request is kept by its number, and is part of what the client
    /// waited for; a request that never came has none.
    #[test]
    fn the_server_keeps_its_own_time_over_each_request() {
        let model = ScriptedModel::scripted_blocking(vec![Reply::Text("hello".into())]);
        let asked = std::time::Instant::now();
        let answer = post(
            &model,
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        );
        let waited = asked.elapsed();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let handled = model.handling_time(0).expect("the request's handling time");
        assert!(handled <= waited, "{handled:?} of {waited:?}");
        assert!(model.received()[0].arrived_at >= asked);
        assert_eq!(model.handling_time(1), None);
    }
}
