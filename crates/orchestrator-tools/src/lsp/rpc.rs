//! The JSON-RPC 2.0 connection to a language server over its stdio, as the Language Server
//! Protocol frames it: each message a `Content-Length` header, a blank line and that many bytes of
//! JSON. Requests are matched to their answers by id; what the server sends of its own accord
//! (notifications, and requests a client must answer) goes to a [`Pushes`] handler.
//!
//! The server is a stranger's program: a header that is not one, a length past
//! [`MAX_MESSAGE`] or a body that is not JSON ends the connection (every request waiting fails
//! with the reason) rather than being read on; a message of a kind the protocol does not have is
//! skipped.

use super::protocol::{Notification, Request};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};
use tokio::sync::{mpsc, oneshot};

/// The largest message read from a server: a workspace's symbols or a large file's diagnostics
/// fit many times over; a length past it is a broken or hostile server.
pub const MAX_MESSAGE: usize = 64 << 20;
/// The protocol's error codes a client retries on: the server's state moved under the request
/// (`ContentModified`), or it cancelled the request itself (`ServerCancelled`).
pub const CONTENT_MODIFIED: i64 = -32801;
pub const SERVER_CANCELLED: i64 = -32802;

/// Why a request or a notification got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// The server answered with an error.
    #[error("{message} (code {code})")]
    Response { code: i64, message: String },
    /// The connection ended (the server exited, closed its output, or sent what is not a
    /// message); the reason.
    #[error("the connection to the server ended: {0}")]
    Closed(String),
    /// The server's answer is not what the protocol says the request returns.
    #[error("the answer could not be read: {0}")]
    Decode(String),
}

/// What the server sends of its own accord.
pub trait Pushes: Send + 'static {
    /// A notification: `method` and its params.
    fn notification(&mut self, method: &str, params: Value);
    /// A request the client must answer; the result sent back.
    fn request(&mut self, method: &str, params: &Value) -> Value;
}

type Waiting = Arc<Mutex<Waiters>>;

/// The requests sent and not answered, by id; `closed` once the connection has ended, with why.
#[derive(Debug, Default)]
struct Waiters {
    by_id: HashMap<i64, oneshot::Sender<Result<Value, RpcError>>>,
    closed: Option<String>,
}

fn lock(waiting: &Waiting) -> std::sync::MutexGuard<'_, Waiters> {
    waiting
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One connection: requests and notifications out, answers in. Dropping it stops sending; the
/// reading and writing tasks end with [`Connection::close`] or when the server closes its pipes.
#[derive(Debug)]
pub struct Connection {
    outgoing: mpsc::UnboundedSender<Vec<u8>>,
    waiting: Waiting,
    next_id: AtomicI64,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Connection {
    /// Starts reading `input` (the server's stdout) and writing to `output` (its stdin).
    pub fn start<R, W>(input: R, output: W, pushes: impl Pushes) -> Connection
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (outgoing, frames) = mpsc::unbounded_channel();
        let waiting = Waiting::default();
        let reader = tokio::spawn(read_loop(
            tokio::io::BufReader::new(input),
            outgoing.clone(),
            waiting.clone(),
            Box::new(pushes),
        ));
        let writer = tokio::spawn(write_loop(output, frames, waiting.clone()));
        Connection {
            outgoing,
            waiting,
            next_id: AtomicI64::new(1),
            tasks: Mutex::new(vec![reader, writer]),
        }
    }

    /// Sends request `R` and waits for its answer.
    pub async fn request<R>(&self, params: Value) -> Result<R::Result, RpcError>
    where
        R: Request,
    {
        let result = self.call(R::METHOD, params).await?;
        serde_json::from_value(result).map_err(|e| RpcError::Decode(format!("{}: {e}", R::METHOD)))
    }

    /// Sends notification `N`.
    pub fn notify<N>(&self, params: Value) -> Result<(), RpcError>
    where
        N: Notification,
    {
        self.send(message(None, N::METHOD, params))
    }

    /// Sends `method` with `params` as a request and waits for the answer's result.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        {
            let mut waiting = lock(&self.waiting);
            if let Some(why) = &waiting.closed {
                return Err(RpcError::Closed(why.clone()));
            }
            waiting.by_id.insert(id, answer);
        }
        // Forgets the request if this future is dropped (a deadline passed) before its answer.
        let forget = Forget {
            waiting: &self.waiting,
            id,
        };
        self.send(message(Some(id), method, params))?;
        let answer = answered.await;
        drop(forget);
        answer.unwrap_or_else(|_| Err(RpcError::Closed("the connection was dropped".into())))
    }

    fn send(&self, message: Value) -> Result<(), RpcError> {
        self.outgoing.send(frame(&message)).map_err(|_| {
            RpcError::Closed(
                lock(&self.waiting)
                    .closed
                    .clone()
                    .unwrap_or_else(|| "the server no longer reads".into()),
            )
        })
    }

    /// Stops reading and writing; every request waiting fails.
    pub fn close(&self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
        fail_all(&self.waiting, "the client closed it".into());
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
    }
}

struct Forget<'a> {
    waiting: &'a Waiting,
    id: i64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock(self.waiting).by_id.remove(&self.id);
    }
}

/// A request (with `id`) or a notification. Params that are `null` are left out, as JSON-RPC
/// wants params to be an array or an object when present.
fn message(id: Option<i64>, method: &str, params: Value) -> Value {
    let mut message = Map::new();
    message.insert("jsonrpc".into(), "2.0".into());
    if let Some(id) = id {
        message.insert("id".into(), id.into());
    }
    message.insert("method".into(), method.into());
    if !params.is_null() {
        message.insert("params".into(), params);
    }
    Value::Object(message)
}

/// `message` framed: its header and its JSON.
fn frame(message: &Value) -> Vec<u8> {
    let body = message.to_string();
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    frame.extend_from_slice(body.as_bytes());
    frame
}

fn fail_all(waiting: &Waiting, why: String) {
    let mut waiting = lock(waiting);
    if waiting.closed.is_none() {
        waiting.closed = Some(why.clone());
    }
    for (_, answer) in waiting.by_id.drain() {
        let _ = answer.send(Err(RpcError::Closed(why.clone())));
    }
}

async fn write_loop(
    mut output: impl AsyncWrite + Unpin,
    mut frames: mpsc::UnboundedReceiver<Vec<u8>>,
    waiting: Waiting,
) {
    while let Some(frame) = frames.recv().await {
        let written = async {
            output.write_all(&frame).await?;
            output.flush().await
        };
        if let Err(e) = written.await {
            fail_all(&waiting, format!("writing to the server failed: {e}"));
            return;
        }
    }
}

async fn read_loop(
    mut input: impl AsyncBufRead + Unpin,
    outgoing: mpsc::UnboundedSender<Vec<u8>>,
    waiting: Waiting,
    mut pushes: Box<dyn Pushes>,
) {
    let why = loop {
        let body = match read_message(&mut input).await {
            Ok(Some(body)) => body,
            Ok(None) => break "the server closed its output".to_owned(),
            Err(why) => break why,
        };
        let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(&body) else {
            break "the server sent a message that is not a JSON object".to_owned();
        };
        let method = message.remove("method");
        let id = message.remove("id");
        match (method, id) {
            // An answer to one of ours.
            (None, Some(id)) => {
                let Some(id) = id.as_i64() else { continue };
                let Some(answer) = lock(&waiting).by_id.remove(&id) else {
                    continue;
                };
                let result = match message.remove("error") {
                    Some(error) => Err(RpcError::Response {
                        code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                        message: error
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("no message")
                            .to_owned(),
                    }),
                    None => Ok(message.remove("result").unwrap_or(Value::Null)),
                };
                let _ = answer.send(result);
            }
            // A request of the server's: answered at once.
            (Some(Value::String(method)), Some(id)) => {
                let params = message.remove("params").unwrap_or(Value::Null);
                let result = pushes.request(&method, &params);
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
                if outgoing.send(frame(&answer)).is_err() {
                    break "the connection was dropped".to_owned();
                }
            }
            (Some(Value::String(method)), None) => {
                pushes.notification(&method, message.remove("params").unwrap_or(Value::Null));
            }
            _ => {}
        }
    };
    fail_all(&waiting, why);
}

/// Reads one message's body: `None` at the end of the input before a header begins.
async fn read_message(input: &mut (impl AsyncBufRead + Unpin)) -> Result<Option<Vec<u8>>, String> {
    let mut length = None;
    let mut line = Vec::new();
    let mut first = true;
    loop {
        line.clear();
        // A header line longer than this is not a header.
        let read = (&mut *input)
            .take(1024)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|e| format!("reading from the server failed: {e}"))?;
        if read == 0 {
            return if first {
                Ok(None)
            } else {
                Err("the server's output ended inside a header".into())
            };
        }
        first = false;
        if line.last() != Some(&b'\n') {
            return Err("the server sent a header line that does not end".into());
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        let Some((name, value)) = text.split_once(':') else {
            return Err(format!("the server sent {text:?} where a header belongs"));
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            let value = value.trim();
            length = Some(value.parse::<usize>().map_err(|_| {
                format!("the server sent Content-Length {value:?}, which is not a length")
            })?);
        }
    }
    let length = length.ok_or("the server sent a message without a Content-Length")?;
    if length > MAX_MESSAGE {
        return Err(format!(
            "the server sent a message of {length} bytes, past the {MAX_MESSAGE} a client reads"
        ));
    }
    let mut body = vec![0; length];
    input
        .read_exact(&mut body)
        .await
        .map_err(|e| format!("the server's output ended inside a message: {e}"))?;
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, BufReader, duplex};

    #[derive(Default)]
    struct Seen(Arc<Mutex<Vec<(String, Value)>>>);

    impl Pushes for Seen {
        fn notification(&mut self, method: &str, params: Value) {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((method.to_owned(), params));
        }
        fn request(&mut self, method: &str, _params: &Value) -> Value {
            json!({"answered": method})
        }
    }

    /// Reads one framed message the client wrote.
    async fn next(from: &mut (impl AsyncBufRead + Unpin)) -> Value {
        let body = read_message(from).await.ok().flatten().unwrap_or_default();
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    }

    async fn send(to: &mut (impl AsyncWrite + Unpin), message: &str) {
        let framed = format!("Content-Length: {}\r\n\r\n{message}", message.len());
        to.write_all(framed.as_bytes()).await.ok();
    }

    #[tokio::test]
    async fn answers_meet_their_requests_and_pushes_reach_the_handler() {
        let (client_out, server_in) = duplex(1 << 16);
        let (mut server_out, client_in) = duplex(1 << 16);
        let seen = Seen::default();
        let log = seen.0.clone();
        let connection = Connection::start(client_in, client_out, seen);
        let mut server_in = BufReader::new(server_in);

        let asking = connection.call("textDocument/hover", json!({"x": 1}));
        let serving = async {
            let request = next(&mut server_in).await;
            assert_eq!(request["method"], "textDocument/hover");
            assert_eq!(request["params"], json!({"x": 1}));
            // A notification and a request of the server's come before the answer.
            send(
                &mut server_out,
                r#"{"jsonrpc":"2.0","method":"window/logMessage","params":{"m":1}}"#,
            )
            .await;
            send(
                &mut server_out,
                r#"{"jsonrpc":"2.0","id":"s1","method":"workspace/configuration","params":{}}"#,
            )
            .await;
            let answer = next(&mut server_in).await;
            assert_eq!(answer["id"], "s1");
            assert_eq!(
                answer["result"],
                json!({"answered": "workspace/configuration"})
            );
            let reply = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"ok":true}}}}"#,
                request["id"]
            );
            send(&mut server_out, &reply).await;
            let second = next(&mut server_in).await;
            let error = format!(
                r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32801,"message":"content modified"}}}}"#,
                second["id"]
            );
            send(&mut server_out, &error).await;
        };
        let (answer, ()) = tokio::join!(
            async {
                let first = asking.await;
                let second = connection
                    .call("textDocument/definition", Value::Null)
                    .await;
                (first, second)
            },
            serving
        );
        assert_eq!(answer.0, Ok(json!({"ok": true})));
        assert_eq!(
            answer.1,
            Err(RpcError::Response {
                code: CONTENT_MODIFIED,
                message: "content modified".into()
            })
        );
        let log = log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        assert_eq!(log, vec![("window/logMessage".to_owned(), json!({"m": 1}))]);
    }

    #[tokio::test]
    async fn a_server_that_sends_garbage_or_leaves_fails_what_waits_with_why() {
        for (sent, why) in [
            ("Content-Length: 99999999999\r\n\r\n", "past the"),
            ("Content-Length: x\r\n\r\n", "not a length"),
            ("hello\r\n\r\n", "where a header belongs"),
            ("Content-Length: 4\r\n\r\nnull", "not a JSON object"),
            ("", "closed its output"),
        ] {
            let (client_out, server_in) = duplex(1 << 16);
            let (mut server_out, client_in) = duplex(1 << 16);
            let connection = Connection::start(client_in, client_out, Seen::default());
            let mut server_in = BufReader::new(server_in);
            let asking = connection.call("initialize", json!({}));
            let serving = async {
                let mut line = String::new();
                server_in.read_line(&mut line).await.ok();
                server_out.write_all(sent.as_bytes()).await.ok();
                drop(server_out);
            };
            let (answer, ()) = tokio::join!(asking, serving);
            match answer {
                Err(RpcError::Closed(reason)) => {
                    assert!(reason.contains(why), "{sent:?}: {reason}")
                }
                other => panic!("{sent:?}: {other:?}"),
            }
            // Later requests fail at once, with the same reason.
            match connection.call("shutdown", Value::Null).await {
                Err(RpcError::Closed(reason)) => assert!(reason.contains(why), "{reason}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
