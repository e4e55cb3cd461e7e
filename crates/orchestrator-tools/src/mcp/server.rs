//! The registry as an MCP server over stdio, so that Claude Code, Codex and other MCP clients get
//! the same tools, with the same guarantees, as our own agent loop.
//!
//! The transport is MCP's stdio: one JSON-RPC message per line. The server answers `initialize`
//! (echoing the client's protocol version when it is one the specification has published, else
//! offering the latest), `ping`, `tools/list` and `tools/call`; any other request is "method not
//! found", as the specification asks. Each call runs as a task of its own, so a long call does not
//! hold up a `ping` or another call, and `notifications/cancelled` ends the call it names. When
//! the client closes stdin, calls still running are ended and the session's background jobs with
//! them.
//!
//! A refused call is a tool-level error (`isError: true` with the message as content), never a
//! protocol error: MCP clients show protocol errors opaquely, and the model must read why its call
//! failed. Only broken machinery (the spill store failing) becomes a JSON-RPC internal error, and
//! a line that is not JSON a parse error.

use orchestrator_types::BoxFuture;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::context::ToolContext;
use crate::error::{Error, Result};
use crate::registry::Registry;
use crate::result::{Content, ToolResult};

/// The protocol versions the specification has published, oldest first; the last is offered to a
/// client that asks for one not listed.
const PROTOCOL_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The longest line read as one message; a longer one ends the session.
const MAX_LINE: u64 = 64 << 20;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;

/// The MCP server: a registry and the context its calls run in (one per connection).
#[derive(Clone)]
pub struct McpServer {
    registry: Arc<Registry>,
    ctx: ToolContext,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    pub fn new(registry: Registry, ctx: ToolContext) -> Self {
        McpServer {
            registry: Arc::new(registry),
            ctx,
        }
    }

    /// The tools as MCP describes them, with read-only and destructive hints.
    pub fn tools(&self) -> Vec<Value> {
        self.registry
            .list()
            .into_iter()
            .map(|info| {
                let schema = match info.input_schema {
                    Value::Object(map) => Value::Object(map),
                    _ => json!({ "type": "object" }),
                };
                json!({
                    "name": info.name,
                    "description": info.description,
                    "inputSchema": schema,
                    "annotations": {
                        "readOnlyHint": info.read_only,
                        "destructiveHint": !info.read_only,
                    },
                })
            })
            .collect()
    }

    fn initialize(&self, params: &Value) -> Value {
        let asked = params.get("protocolVersion").and_then(Value::as_str);
        let version = match asked {
            Some(v) if PROTOCOL_VERSIONS.contains(&v) => v,
            _ => PROTOCOL_VERSIONS[PROTOCOL_VERSIONS.len() - 1],
        };
        json!({
            "protocolVersion": version,
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "orchestrator", "version": env!("CARGO_PKG_VERSION") },
            "instructions": format!(
                "Workspace tools of orchestrator, confined to {}. Paths are relative to that directory.",
                self.ctx.workspace().root().display()
            ),
        })
    }

    /// Runs `tools/call`: a tool's own failure is its result (`isError`), an error of the
    /// machinery a JSON-RPC error.
    async fn call(&self, params: Value) -> std::result::Result<Value, (i64, String)> {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Err((INVALID_PARAMS, "tools/call needs params.name".to_owned()));
        };
        let args = match params.get("arguments") {
            None | Some(Value::Null) => Value::Null,
            Some(Value::Object(map)) => Value::Object(map.clone()),
            Some(_) => {
                return Err((
                    INVALID_PARAMS,
                    "tools/call: params.arguments must be an object".to_owned(),
                ));
            }
        };
        match self.registry.call_value(name, args, &self.ctx).await {
            Ok(result) => Ok(to_mcp(result)),
            Err(e) => Err((INTERNAL_ERROR, e.to_string())),
        }
    }

    /// Reads messages from `input` and answers on `output` until `input` ends or a line cannot
    /// be read; then ends the calls still running.
    pub async fn serve<R, W>(self, input: R, output: W) -> Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (send, outgoing) = mpsc::unbounded_channel::<Value>();
        let writer = tokio::spawn(write_messages(output, outgoing));
        let running: Arc<Mutex<HashMap<String, AbortHandle>>> = Arc::default();
        let mut reader = BufReader::new(input);
        let mut line = Vec::new();
        let outcome = loop {
            line.clear();
            let read = (&mut reader)
                .take(MAX_LINE + 1)
                .read_until(b'\n', &mut line)
                .await;
            match read {
                Ok(0) => break Ok(()),
                Ok(n) if n as u64 > MAX_LINE => {
                    break Err(Error::Mcp(format!(
                        "a message longer than {MAX_LINE} bytes; the session ends"
                    )));
                }
                Ok(_) => {}
                Err(e) => break Err(Error::Mcp(format!("reading stdin: {e}"))),
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let message = match serde_json::from_slice::<Value>(&line) {
                Ok(Value::Object(message)) => message,
                Ok(_) => {
                    let _ = send.send(error(
                        Value::Null,
                        INVALID_REQUEST,
                        "not a JSON-RPC message",
                    ));
                    continue;
                }
                Err(e) => {
                    let _ = send.send(error(Value::Null, PARSE_ERROR, &format!("not JSON: {e}")));
                    continue;
                }
            };
            self.dispatch(message, &send, &running);
        };
        let calls: Vec<AbortHandle> = lock(&running).drain().map(|(_, h)| h).collect();
        for call in calls {
            call.abort();
        }
        drop(send);
        let _ = writer.await;
        outcome
    }

    fn dispatch(
        &self,
        mut message: Map<String, Value>,
        send: &mpsc::UnboundedSender<Value>,
        running: &Arc<Mutex<HashMap<String, AbortHandle>>>,
    ) {
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let params = message.remove("params").unwrap_or(Value::Null);
        let Some(id) = message.remove("id") else {
            // A notification: only a cancellation asks for anything.
            if method.as_deref() == Some("notifications/cancelled")
                && let Some(id) = params.get("requestId")
                && let Some(call) = lock(running).remove(&id.to_string())
            {
                call.abort();
            }
            return;
        };
        let Some(method) = method else {
            // An answer to a request of ours; this server sends none.
            return;
        };
        let answer = match method.as_str() {
            "initialize" => Ok(self.initialize(&params)),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": self.tools() })),
            "tools/call" => {
                let key = id.to_string();
                let server = self.clone();
                let send = send.clone();
                let calls = Arc::clone(running);
                let mut table = lock(running);
                let task = tokio::spawn(async move {
                    let answer = server.call(params).await;
                    lock(&calls).remove(&id.to_string());
                    let _ = send.send(response(id, answer));
                });
                table.insert(key, task.abort_handle());
                return;
            }
            other => Err((METHOD_NOT_FOUND, format!("method not found: {other}"))),
        };
        let _ = send.send(response(id, answer));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn response(id: Value, answer: std::result::Result<Value, (i64, String)>) -> Value {
    match answer {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err((code, message)) => error(id, code, &message),
    }
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// Writes each message as one line, until every sender is gone or the client stops reading.
async fn write_messages<W: AsyncWrite + Unpin>(
    mut output: W,
    mut messages: mpsc::UnboundedReceiver<Value>,
) {
    while let Some(message) = messages.recv().await {
        let mut line = message.to_string();
        line.push('\n');
        if output.write_all(line.as_bytes()).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
}

/// Converts a registry result into MCP's shape; the metadata travels in `_meta`.
pub fn to_mcp(result: ToolResult) -> Value {
    let content: Vec<Value> = result
        .content
        .into_iter()
        .map(|c| match c {
            Content::Text { text } => json!({ "type": "text", "text": text }),
            Content::Image { media_type, data } => {
                json!({ "type": "image", "data": data, "mimeType": media_type })
            }
        })
        .collect();
    let mut out = json!({ "content": content, "isError": result.is_error });
    if !result.metadata.is_empty() {
        out["_meta"] = Value::Object(result.metadata);
    }
    out
}

/// Serves `registry` over stdin and stdout until the client disconnects, then ends the session's
/// background jobs.
pub fn serve_stdio(registry: Registry, ctx: ToolContext) -> BoxFuture<'static, Result<()>> {
    Box::pin(serve_stdio_unboxed(registry, ctx))
}

async fn serve_stdio_unboxed(registry: Registry, ctx: ToolContext) -> Result<()> {
    let server = McpServer::new(registry, ctx.clone());
    let outcome = server.serve(tokio::io::stdin(), tokio::io::stdout()).await;
    ctx.shutdown().await;
    outcome
}
