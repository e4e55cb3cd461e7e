//! What the scripted server writes back: a reply as one JSON body or as an event stream in
//! OpenAI's chunk shapes, split over network writes; slow and cut-off streams.

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Reply, Request, ScriptedCall, Shape};

pub(super) async fn respond(request: &Request, reply: Reply, ignore_tools: bool) -> Response {
    let shape = match reply {
        Reply::Text(text) => Shape::text(&text),
        Reply::ToolCalls(calls) => Shape::calls(calls),
        Reply::TextAndToolCalls(text, calls) => Shape {
            calls,
            ..Shape::text(&text)
        },
        Reply::Shaped(shape) => shape,
        Reply::Status(status, body) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return json_response(status, body);
        }
        Reply::CutStream => return cut(request),
        Reply::Hang => std::future::pending().await,
        Reply::EmptyBody => {
            let kind = if request.is_streaming() {
                "text/event-stream"
            } else {
                "application/json"
            };
            return stream_response(kind, Vec::new());
        }
        Reply::Slow { pieces, every } => return slow(request, pieces, every).await,
    };
    let shape = if ignore_tools && !shape.calls.is_empty() {
        // The model never saw the tools: it writes what it would have called as prose.
        let text: Vec<String> = shape
            .calls
            .iter()
            .map(|c| format!("I would call {} with {}", c.name, c.arguments))
            .collect();
        Shape {
            calls: Vec::new(),
            ..Shape::text(&format!("{}{}", shape.text, text.join("; ")))
        }
    } else {
        shape
    };
    let reply = Answer::new(request, shape);
    if request.is_streaming() {
        let include_usage = request.body["stream_options"]["include_usage"] == true;
        event_stream(reply.chunks(include_usage), false)
    } else {
        json_response(StatusCode::OK, reply.completion().to_string())
    }
}

pub(super) fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A slow server's reply: a piece every `every`.
async fn slow(request: &Request, pieces: usize, every: std::time::Duration) -> Response {
    let text = "word ".repeat(pieces);
    let answer = Answer::new(request, Shape::text(&text));
    if !request.is_streaming() {
        tokio::time::sleep(every * pieces as u32).await;
        return json_response(StatusCode::OK, answer.completion().to_string());
    }
    let mut chunks = vec![answer.chunk(json!({"role": "assistant", "content": ""}), None)];
    for _ in 0..pieces {
        chunks.push(answer.chunk(json!({"content": "word "}), None));
    }
    chunks.push(answer.chunk(json!({}), Some("stop")));
    let events: Vec<Bytes> = chunks
        .iter()
        .map(|c| Bytes::from(format!("data: {c}\n\n")))
        .chain(std::iter::once(Bytes::from_static(b"data: [DONE]\n\n")))
        .collect();
    let stream = futures_util::stream::unfold(
        (events.into_iter(), true),
        move |(mut events, first)| async move {
            let event = events.next()?;
            if !first {
                tokio::time::sleep(every).await;
            }
            Some((Ok::<_, std::io::Error>(event), (events, false)))
        },
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn cut(request: &Request) -> Response {
    if request.is_streaming() {
        let answer = Answer::new(request, Shape::text(""));
        let chunks = vec![
            answer.chunk(json!({"role": "assistant", "content": ""}), None),
            answer.chunk(json!({"content": "This reply is cut "}), None),
            answer.chunk(json!({"content": "off here"}), None),
        ];
        event_stream(chunks, true)
    } else {
        let pieces = vec![
            Piece::Data(Bytes::from_static(
                br#"{"id":"chatcmpl-cut","object":"chat.completion","choices":[{"index":0,"#,
            )),
            Piece::Cut,
        ];
        stream_response("application/json", pieces)
    }
}

/// A chunk of the response body, or the point where the connection is dropped.
enum Piece {
    Data(Bytes),
    Cut,
}

/// Server-sent events, each split into two writes at its middle byte so the client sees events cut
/// across reads (and, for non-ASCII text, characters cut across reads).
fn event_stream(chunks: Vec<Value>, cut: bool) -> Response {
    let mut events: Vec<String> = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    if !cut {
        events.push("data: [DONE]\n\n".to_owned());
    }
    let mut pieces = Vec::new();
    for event in events {
        let bytes = Bytes::from(event);
        let middle = bytes.len() / 2;
        pieces.push(Piece::Data(bytes.slice(..middle)));
        pieces.push(Piece::Data(bytes.slice(middle..)));
    }
    if cut {
        pieces.push(Piece::Cut);
    }
    stream_response("text/event-stream", pieces)
}

fn stream_response(content_type: &'static str, pieces: Vec<Piece>) -> Response {
    let stream = futures_util::stream::unfold(pieces.into_iter(), |mut pieces| async move {
        let piece = pieces.next()?;
        // Yielding lets the server flush what it has, so the pieces leave as separate writes.
        tokio::task::yield_now().await;
        let item = match piece {
            Piece::Data(bytes) => Ok(bytes),
            // An error ends the body without its final chunk: the client sees the connection drop.
            Piece::Cut => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "scripted cut",
            )),
        };
        Some((item, pieces))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// One reply, rendered as chunks or as one completion.
struct Answer {
    id: String,
    model: String,
    index: usize,
    text: String,
    calls: Vec<ScriptedCall>,
    finish_reason: Option<String>,
    call_ids: bool,
    report_usage: bool,
    prompt_tokens: u64,
    cached_tokens: Option<u64>,
}

/// Fixed, so replies are the same on every run.
const CREATED: u64 = 1_700_000_000;
/// Content is streamed in pieces of this many characters.
const TEXT_PIECE_CHARS: usize = 5;
/// Tool call arguments are streamed in pieces of this many characters.
const ARGUMENT_PIECE_CHARS: usize = 7;

impl Answer {
    fn new(request: &Request, shape: Shape) -> Answer {
        Answer {
            id: format!("chatcmpl-{}", request.index),
            model: shape
                .model
                .unwrap_or_else(|| request.model().unwrap_or("scripted").to_owned()),
            index: request.index,
            text: shape.text,
            calls: shape.calls,
            finish_reason: shape.finish_reason,
            call_ids: shape.call_ids,
            report_usage: shape.usage,
            prompt_tokens: request
                .counted_tokens
                .unwrap_or(request.messages().len() as u64 * 10),
            cached_tokens: request.cached_tokens,
        }
    }

    /// The call's id, or JSON null for a server that sends none.
    fn call_id(&self, n: usize) -> Value {
        if self.call_ids {
            json!(format!("call_{}_{n}", self.index))
        } else {
            Value::Null
        }
    }

    fn finish_reason(&self) -> &str {
        match &self.finish_reason {
            Some(reason) => reason,
            None if self.calls.is_empty() => "stop",
            None => "tool_calls",
        }
    }

    fn usage(&self) -> Value {
        let written = self.text.len() + self.calls.iter().map(|c| c.arguments.len()).sum::<usize>();
        let completion = written as u64 / 4 + 1;
        let mut usage = json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        });
        if let Some(cached) = self.cached_tokens {
            usage["prompt_tokens_details"] = json!({"cached_tokens": cached});
        }
        usage
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": self.model,
            "system_fingerprint": "fp_scripted",
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        })
    }

    fn chunks(&self, include_usage: bool) -> Vec<Value> {
        let mut chunks = vec![self.chunk(json!({"role": "assistant", "content": ""}), None)];
        for piece in pieces(&self.text, TEXT_PIECE_CHARS) {
            chunks.push(self.chunk(json!({"content": piece}), None));
        }
        for (n, call) in self.calls.iter().enumerate() {
            chunks.push(self.chunk(
                json!({"tool_calls": [{
                    "index": n,
                    "id": self.call_id(n),
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }]}),
                None,
            ));
            for piece in pieces(&call.arguments, ARGUMENT_PIECE_CHARS) {
                chunks.push(self.chunk(
                    json!({"tool_calls": [{"index": n, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
        }
        chunks.push(self.chunk(json!({}), Some(self.finish_reason())));
        if include_usage && self.report_usage {
            // OpenAI sends `"usage": null` on every other chunk and the totals on a last chunk
            // without choices.
            for chunk in &mut chunks {
                chunk["usage"] = Value::Null;
            }
            chunks.push(json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": self.model,
                "system_fingerprint": "fp_scripted",
                "choices": [],
                "usage": self.usage(),
            }));
        }
        chunks
    }

    fn completion(&self) -> Value {
        let mut message = json!({
            "role": "assistant",
            "content": if self.text.is_empty() { Value::Null } else { json!(self.text) },
            "refusal": null,
        });
        if !self.calls.is_empty() {
            let calls: Vec<Value> = self
                .calls
                .iter()
                .enumerate()
                .map(|(n, call)| {
                    json!({
                        "id": self.call_id(n),
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    })
                })
                .collect();
            message["tool_calls"] = json!(calls);
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": CREATED,
            "model": self.model,
            "system_fingerprint": "fp_scripted",
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": self.finish_reason(),
            }],
            "usage": if self.report_usage { self.usage() } else { Value::Null },
        })
    }
}

/// `text` in pieces of at most `size` characters, never splitting a character.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_server::call;

    #[test]
    fn pieces_keep_characters_whole() {
        assert_eq!(pieces("héllo wörld", 4), ["héll", "o wö", "rld"]);
        assert!(pieces("", 4).is_empty());
    }

    #[test]
    fn streamed_tool_calls_split_their_arguments() {
        let request = Request {
            body: json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
            authorization: None,
            index: 3,
            counted_tokens: None,
            cached_tokens: None,
            arrived_at: std::time::Instant::now(),
        };
        let answer = Answer::new(
            &request,
            Shape::calls(vec![call("read", json!({"path": "src/main.rs"}))]),
        );
        let chunks = answer.chunks(true);
        let pieces: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
            .collect();
        assert_eq!(pieces[0]["id"], "call_3_0");
        assert!(pieces.len() > 2, "{pieces:?}");
        let arguments: String = pieces
            .iter()
            .map(|p| p["function"]["arguments"].as_str().unwrap())
            .collect();
        assert_eq!(arguments, r#"{"path":"src/main.rs"}"#);
        let last = chunks.last().unwrap();
        assert_eq!(last["usage"]["prompt_tokens"], 10);
        assert_eq!(
            chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
            "tool_calls"
        );
    }
}
