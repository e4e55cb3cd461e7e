//! The model client against what real OpenAI-compatible servers do (llama.cpp's `llama-server`,
//! llama-cpp-python): the scripted server switches their behaviours on, each one seen in the wild.

use std::time::Duration;

use orchestrator_test_support::model_server::{
    Quirks, Reply, ScriptedCall, ScriptedModel, Shape, call, error_body,
};
use orchestrator_types::{ChatMessage, ModelSettings, ModelSpec, Role, ToolCallRequest};
use orchestrator_worker::model::{ClientConfig, Delta, ModelClient, ModelError, ToolDefinition};
use serde_json::json;
use tokio::sync::mpsc;

fn fast() -> ClientConfig {
    ClientConfig {
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        idle_timeout: Duration::from_secs(60),
        ..ClientConfig::default()
    }
}

fn client_with(
    server: &ScriptedModel,
    settings: ModelSettings,
    config: ClientConfig,
) -> ModelClient {
    let spec = ModelSpec {
        base_url: server.base_url(),
        model: "local".into(),
        api_key_env: None,
        settings,
    };
    ModelClient::with_key(&spec, None, config).unwrap()
}

fn client(server: &ScriptedModel) -> ModelClient {
    client_with(server, ModelSettings::default(), fast())
}

fn tools() -> Vec<ToolDefinition> {
    vec![ToolDefinition::new(
        "read_file",
        "Read a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    )]
}

/// A conversation in its second turn: the model called a tool (and wrote no text), the tool
/// answered.
fn second_turn(arguments: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system("You are terse."),
        ChatMessage::user("Read a."),
        ChatMessage {
            role: Role::Assistant,
            content: None,
            tool_calls: vec![ToolCallRequest {
                id: "call_1".into(),
                name: "read_file".into(),
                arguments: arguments.into(),
            }],
            tool_call_id: None,
            images: Vec::new(),
        },
        ChatMessage::tool("call_1", "contents of a"),
    ]
}

#[tokio::test]
async fn a_tool_only_reply_goes_back_with_empty_content_not_null() {
    let server =
        ScriptedModel::start_with(Quirks::real_servers(), |_| Reply::Text("done".into())).await;
    let reply = client(&server)
        .complete(&second_turn(r#"{"path":"a"}"#), &tools(), None)
        .await
        .unwrap();
    assert_eq!(reply.message.content.as_deref(), Some("done"));
    let sent = &server.requests()[0]["messages"][2];
    assert_eq!(sent["content"], "", "{sent}");
}

#[tokio::test]
async fn tools_go_with_tool_choice_auto_and_the_models_settings_change_it() {
    let wants_a_call = |_: &orchestrator_test_support::model_server::Request| {
        Reply::ToolCalls(vec![call("read_file", json!({"path": "a"}))])
    };
    let server = ScriptedModel::start_with(Quirks::real_servers(), wants_a_call).await;
    let conversation = [ChatMessage::user("Read a.")];
    // By default the server sees tool_choice and the model calls the tool.
    let reply = client(&server)
        .complete(&conversation, &tools(), None)
        .await
        .unwrap();
    assert_eq!(reply.message.tool_calls.len(), 1, "{reply:?}");
    assert_eq!(server.requests()[0]["tool_choice"], "auto");
    // Without tools, no tool_choice either.
    client(&server)
        .complete(&conversation, &[], None)
        .await
        .unwrap();
    assert!(server.requests()[1].get("tool_choice").is_none());
    // `required` is sent as is; `omit` sends none, and this server then drops the tools.
    let required = ModelSettings {
        tool_choice: Some("required".into()),
        ..ModelSettings::default()
    };
    client_with(&server, required, fast())
        .complete(&conversation, &tools(), None)
        .await
        .unwrap();
    assert_eq!(server.requests()[2]["tool_choice"], "required");
    let omit = ModelSettings {
        tool_choice: Some("omit".into()),
        ..ModelSettings::default()
    };
    let ignored = client_with(&server, omit, fast())
        .complete(&conversation, &tools(), None)
        .await
        .unwrap();
    assert!(server.requests()[3].get("tool_choice").is_none());
    assert!(ignored.message.tool_calls.is_empty(), "{ignored:?}");
}

#[tokio::test]
async fn malformed_arguments_in_the_history_go_back_as_a_json_object() {
    let server =
        ScriptedModel::start_with(Quirks::real_servers(), |_| Reply::Text("ok".into())).await;
    for raw in [r#"{"path": "src/ma"#, "not json", r#"{"path": "a",}"#] {
        let reply = client(&server)
            .complete(&second_turn(raw), &tools(), None)
            .await;
        assert!(reply.is_ok(), "{raw:?}: {reply:?}");
    }
    let sent: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r["messages"][2]["tool_calls"][0]["function"]["arguments"].to_string())
        .collect();
    assert_eq!(sent, [r#""{}""#, r#""{}""#, r#""{\"path\":\"a\"}""#]);
}

/// A 200 with an empty body says nothing about why: a streamed one is asked again unstreamed (see
/// below), and an empty answer to that fails at once, as an empty reply, not as an overflow.
#[tokio::test]
async fn a_200_with_an_empty_body_fails_at_once_as_an_empty_reply() {
    for stream in [true, false] {
        let server = ScriptedModel::start(|_| Reply::EmptyBody).await;
        let config = ClientConfig { stream, ..fast() };
        let error = client_with(&server, ModelSettings::default(), config)
            .complete(&[ChatMessage::user("hi")], &[], None)
            .await
            .unwrap_err();
        assert!(matches!(error, ModelError::EmptyReply(_)), "{error:?}");
        assert_eq!(error.cause(), "empty_reply");
        let streamed: Vec<bool> = server.received().iter().map(|r| r.is_streaming()).collect();
        let expected: &[bool] = if stream { &[true, false] } else { &[false] };
        assert_eq!(
            streamed, expected,
            "asked again unstreamed only, not retried"
        );
    }
}

/// llama-cpp-python answers a streamed request that carries tools with 200 and an empty body, and
/// the same request unstreamed with its reply. The client asks again unstreamed at once, and every
/// client of the same configuration (one daemon) remembers it for that server.
#[tokio::test]
async fn an_empty_streamed_answer_is_asked_again_unstreamed_and_remembered_for_the_server() {
    let wants_a_call = |_: &orchestrator_test_support::model_server::Request| {
        Reply::ToolCalls(vec![call("read_file", json!({"path": "a"}))])
    };
    let server = ScriptedModel::start_with(Quirks::llama_cpp_python(), wants_a_call).await;
    let daemon = fast();
    let conversation = [ChatMessage::user("Read a.")];
    let (tx, mut rx) = mpsc::unbounded_channel();
    let reply = client_with(&server, ModelSettings::default(), daemon.clone())
        .complete(&conversation, &tools(), Some(&tx))
        .await
        .unwrap();
    assert_eq!(reply.message.tool_calls.len(), 1, "{reply:?}");
    assert_eq!(reply.message.tool_calls[0].name, "read_file");
    let mut pieces = Vec::new();
    while let Ok(piece) = rx.try_recv() {
        pieces.push(piece);
    }
    assert!(
        pieces.iter().any(|p| matches!(p, Delta::ToolCall { .. })),
        "the watcher sees the call: {pieces:?}"
    );
    let streamed = |server: &ScriptedModel| -> Vec<bool> {
        server.received().iter().map(|r| r.is_streaming()).collect()
    };
    assert_eq!(streamed(&server), [true, false]);
    // The next task's client (a new client of the same daemon) asks unstreamed straight away.
    client_with(&server, ModelSettings::default(), daemon.clone())
        .complete(&conversation, &tools(), None)
        .await
        .unwrap();
    assert_eq!(streamed(&server), [true, false, false]);
    // A request without tools still streams: that works on this server.
    client_with(&server, ModelSettings::default(), daemon.clone())
        .complete(&conversation, &[], None)
        .await
        .unwrap();
    assert_eq!(streamed(&server), [true, false, false, true]);
    // Another daemon has learnt nothing yet.
    client(&server)
        .complete(&conversation, &tools(), None)
        .await
        .unwrap();
    assert_eq!(streamed(&server), [true, false, false, true, true, false]);
}

/// An empty streamed answer may also be llama-cpp-python's overflow (it fails after the 200): the
/// unstreamed request then says so, and the overflow is diagnosed from those words.
#[tokio::test]
async fn an_overflow_is_diagnosed_from_the_answer_that_says_so() {
    let server = ScriptedModel::start(|request| {
        if request.is_streaming() {
            Reply::EmptyBody
        } else {
            Reply::Status(
                400,
                error_body(
                    "Requested tokens (5000) exceed context window of 4096",
                    "invalid_request_error",
                ),
            )
        }
    })
    .await;
    let error = client(&server)
        .complete(&[ChatMessage::user("hi")], &tools(), None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ModelError::ContextOverflow { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("exceed context window"),
        "{error}"
    );
    assert_eq!(server.request_count(), 2);
}

/// Ollama's `/api/show` is asked only of a server that answers `GET /api/version` as Ollama does,
/// and each server is asked once per daemon, however many tasks start.
#[tokio::test]
async fn ollama_endpoints_are_asked_only_of_ollama_and_once_per_server() {
    use orchestrator_worker::model::{Window, WindowSource};
    let daemon = fast();
    let hosted = ScriptedModel::start(|_| Reply::Text("ok".into())).await;
    for _ in 0..3 {
        let window = client_with(&hosted, ModelSettings::default(), daemon.clone())
            .window()
            .await;
        assert_eq!(window.source, WindowSource::Default);
    }
    let probes = hosted.probes();
    assert!(
        !probes.iter().any(|p| p.contains("/api/show")),
        "a server that is not Ollama gets no /api/show: {probes:?}"
    );
    assert!(
        probes.iter().filter(|p| p.contains("/api/")).count() <= 1,
        "it is asked whether it is Ollama once: {probes:?}"
    );

    let ollama = ScriptedModel::start_with(
        Quirks {
            ollama_num_ctx: Some(16_384),
            ..Quirks::default()
        },
        |_| Reply::Text("ok".into()),
    )
    .await;
    for _ in 0..3 {
        let window = client_with(&ollama, ModelSettings::default(), daemon.clone())
            .window()
            .await;
        assert_eq!(
            window,
            Window {
                tokens: 16_384,
                source: WindowSource::OllamaShow
            }
        );
    }
    let probes = ollama.probes();
    let count = |what: &str| probes.iter().filter(|p| *p == what).count();
    assert_eq!(count("GET /api/version"), 1, "{probes:?}");
    assert_eq!(count("POST /api/show"), 1, "{probes:?}");
}

#[tokio::test]
async fn deterministic_errors_fail_at_once_with_the_servers_words() {
    let parse_error = json!({"error": {"code": 500, "type": "server_error",
        "message": "[json.exception.parse_error.101] parse error at line 1, column 18"}})
    .to_string();
    let overflow = json!({"error": {"code": 400, "type": "exceed_context_size_error",
        "message": "the request exceeds the available context size, try increasing it"}})
    .to_string();
    let cases = [
        (
            Reply::Status(500, parse_error),
            "invalid_request",
            "parse error at line 1",
        ),
        (
            Reply::Status(400, overflow),
            "context_overflow",
            "exceeds the available context size",
        ),
    ];
    for (reply, cause, words) in cases {
        let server = ScriptedModel::scripted(vec![reply]).await;
        let error = client(&server)
            .complete(&[ChatMessage::user("hi")], &[], None)
            .await
            .unwrap_err();
        assert_eq!(error.cause(), cause, "{error:?}");
        assert!(error.to_string().contains(words), "{error}");
        assert_eq!(server.request_count(), 1, "{error}: not retried");
    }
    // A Python server's exception about the request's shape is not retried either.
    let same = ScriptedModel::start(|_| {
        Reply::Status(
            500,
            error_body("'NoneType' object is not iterable", "server_error"),
        )
    })
    .await;
    let error = client(&same)
        .complete(&[ChatMessage::user("hi")], &[], None)
        .await
        .unwrap_err();
    assert_eq!(error.cause(), "invalid_request", "{error:?}");
    assert_eq!(same.request_count(), 1);
    // OpenAI's own 500 says the same words every time and passes: it is retried.
    let generic = ScriptedModel::scripted(vec![
        Reply::Status(
            500,
            error_body(
                "The server had an error while processing your request",
                "server_error",
            ),
        ),
        Reply::Status(
            500,
            error_body(
                "The server had an error while processing your request",
                "server_error",
            ),
        ),
        Reply::Text("ok".into()),
    ])
    .await;
    let reply = client(&generic)
        .complete(&[ChatMessage::user("hi")], &[], None)
        .await
        .unwrap();
    assert_eq!(reply.attempts, 3);
}

#[tokio::test]
async fn every_retry_names_its_cause() {
    let server = ScriptedModel::scripted(vec![
        Reply::Status(503, error_body("Loading model", "unavailable_error")),
        Reply::Status(429, error_body("slow down", "rate_limit_error")),
        Reply::CutStream,
        Reply::Status(408, "{}".into()),
        Reply::Text("finally".into()),
    ])
    .await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let reply = client(&server)
        .complete(&[ChatMessage::user("hi")], &[], Some(&tx))
        .await
        .unwrap();
    drop(tx);
    assert_eq!(reply.attempts, 5);
    let mut causes = Vec::new();
    while let Some(delta) = rx.recv().await {
        if let Delta::Retrying { cause, .. } = delta {
            causes.push(cause);
        }
    }
    assert_eq!(
        causes,
        ["server_error", "rate_limited", "broken_stream", "timeout"]
    );
}

#[tokio::test]
async fn a_slow_server_that_keeps_writing_is_not_hung() {
    // Six pieces 150 ms apart: the reply takes about a second, far past the 400 ms idle timeout,
    // and no silence is longer than 150 ms.
    let server = ScriptedModel::start(|_| Reply::Slow {
        pieces: 6,
        every: Duration::from_millis(150),
    })
    .await;
    let config = ClientConfig {
        idle_timeout: Duration::from_millis(400),
        max_retries: 0,
        ..fast()
    };
    let reply = client_with(&server, ModelSettings::default(), config.clone())
        .complete(&[ChatMessage::user("hi")], &[], None)
        .await
        .unwrap();
    assert_eq!(reply.message.content.as_deref(), Some(&*"word ".repeat(6)));
    // Without streaming the whole reply is one silence, and the same server is too slow for it.
    let settings = ModelSettings {
        stream: Some(false),
        ..ModelSettings::default()
    };
    let error = client_with(&server, settings, config)
        .complete(&[ChatMessage::user("hi")], &[], None)
        .await
        .unwrap_err();
    assert!(matches!(error, ModelError::Timeout(_)), "{error:?}");
    assert!(error.to_string().contains("idle_timeout_secs"), "{error}");
}

#[tokio::test]
async fn the_models_settings_shape_the_request() {
    let server = ScriptedModel::start(|_| Reply::Text("ok".into())).await;
    let settings = ModelSettings {
        stream: Some(false),
        max_output_tokens: Some(256),
        ..ModelSettings::default()
    };
    client_with(&server, settings, fast())
        .complete(&[ChatMessage::user("hi")], &tools(), None)
        .await
        .unwrap();
    let sent = &server.requests()[0];
    assert!(sent.get("stream").is_none(), "{sent}");
    assert_eq!(sent["max_tokens"], 256);
    // Unset, the server's own limit applies.
    client(&server)
        .complete(&[ChatMessage::user("hi")], &tools(), None)
        .await
        .unwrap();
    assert!(server.requests()[1].get("max_tokens").is_none());
}

#[tokio::test]
async fn usage_not_sent_is_unknown_and_the_answering_model_is_named() {
    for stream in [true, false] {
        let server = ScriptedModel::start(|_| {
            Reply::Shaped(
                Shape::text("hello")
                    .without_usage()
                    .answered_by("qwen2.5-7b-instruct-q4"),
            )
        })
        .await;
        let config = ClientConfig { stream, ..fast() };
        let reply = client_with(&server, ModelSettings::default(), config)
            .complete(&[ChatMessage::user("hi")], &[], None)
            .await
            .unwrap();
        assert_eq!(reply.usage, None, "stream {stream}");
        assert_eq!(reply.model.as_deref(), Some("qwen2.5-7b-instruct-q4"));
    }
}

#[tokio::test]
async fn a_cut_reply_says_so_in_its_finish_reason() {
    let server = ScriptedModel::start(|_| {
        Reply::Shaped(
            Shape::calls(vec![ScriptedCall {
                name: "read_file".into(),
                arguments: r#"{"path": "src/ma"#.into(),
            }])
            .cut()
            .without_ids(),
        )
    })
    .await;
    let reply = client(&server)
        .complete(&[ChatMessage::user("hi")], &tools(), None)
        .await
        .unwrap();
    assert_eq!(reply.finish_reason.as_deref(), Some("length"));
    // The raw text is kept as the model wrote it; an id is made up for the call.
    assert_eq!(reply.message.tool_calls[0].arguments, r#"{"path": "src/ma"#);
    assert!(!reply.message.tool_calls[0].id.is_empty());
}
