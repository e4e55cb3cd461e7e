//! The model client against the scripted model server: streamed and plain replies, the request it
//! sends, and which failures it retries.

use std::time::Duration;

use orchestrator_test_support::LatencyProxy;
use orchestrator_test_support::model_server::{Reply, ScriptedModel, call, error_body};
use orchestrator_types::{ChatMessage, ModelSpec, Role, ToolCallRequest, Usage};
use orchestrator_worker::model::{
    ClientConfig, Delta, ModelClient, ModelError, ModelReply, ToolDefinition,
};
use serde_json::json;
use tokio::sync::mpsc;

/// Retries without waiting long, and a timeout no test should reach unless it means to.
fn fast() -> ClientConfig {
    ClientConfig {
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        idle_timeout: Duration::from_secs(60),
        ..ClientConfig::default()
    }
}

fn spec(base_url: String, api_key_env: Option<&str>) -> ModelSpec {
    ModelSpec {
        base_url,
        model: "scripted-1".into(),
        api_key_env: api_key_env.map(String::from),
        settings: Default::default(),
    }
}

fn client(server: &ScriptedModel, config: ClientConfig) -> ModelClient {
    ModelClient::with_key(&spec(server.base_url(), None), None, config).unwrap()
}

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::system("You are terse."),
        ChatMessage::user("Say hello."),
    ]
}

/// Runs one call and returns its result with every delta it sent.
async fn complete_watched(
    client: &ModelClient,
    messages: &[ChatMessage],
    tools: &[ToolDefinition],
) -> (Result<ModelReply, ModelError>, Vec<Delta>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let result = client.complete(messages, tools, Some(&tx)).await;
    drop(tx);
    let mut deltas = Vec::new();
    while let Some(delta) = rx.recv().await {
        deltas.push(delta);
    }
    (result, deltas)
}

fn content_of(deltas: &[Delta]) -> String {
    deltas
        .iter()
        .filter_map(|d| match d {
            Delta::Content(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn retries_in(deltas: &[Delta]) -> Vec<(u32, String)> {
    deltas
        .iter()
        .filter_map(|d| match d {
            Delta::Retrying { attempt, error, .. } => Some((*attempt, error.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_streamed_text_reply_arrives_in_pieces_with_usage() {
    let text = "Hello, wörld! Streaming works — in pieces.";
    let server = ScriptedModel::scripted(vec![Reply::Text(text.into())]).await;
    let client = client(&server, fast());
    let (reply, deltas) = complete_watched(&client, &conversation(), &[]).await;
    let reply = reply.unwrap();
    assert_eq!(reply.message, ChatMessage::assistant(text));
    assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
    assert_eq!(reply.attempts, 1);
    let completion = text.len() as u64 / 4 + 1;
    assert_eq!(
        reply.usage,
        Some(Usage {
            prompt_tokens: 20,
            completion_tokens: completion,
            total_tokens: 20 + completion,
            cached_tokens: 0,
        })
    );
    assert_eq!(content_of(&deltas), text);
    assert!(deltas.len() > 3, "the text came in pieces: {deltas:?}");
}

#[tokio::test]
async fn streamed_tool_calls_are_assembled_by_index() {
    let read_arguments = json!({"path": "src/main.rs", "limit": 200}).to_string();
    let server = ScriptedModel::scripted(vec![Reply::TextAndToolCalls(
        "Reading two files.".into(),
        vec![
            call("read_file", json!({"path": "src/main.rs", "limit": 200})),
            // Malformed on purpose: the client passes argument text through untouched.
            orchestrator_test_support::model_server::ScriptedCall {
                name: "grep".into(),
                arguments: r#"{"pattern": "fn main", "#.into(),
            },
        ],
    )])
    .await;
    let client = client(&server, fast());
    let tools = [ToolDefinition::new(
        "read_file",
        "Reads a file.",
        json!({"type": "object"}),
    )];
    let (reply, deltas) = complete_watched(&client, &conversation(), &tools).await;
    let reply = reply.unwrap();
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(reply.message.content.as_deref(), Some("Reading two files."));
    assert_eq!(
        reply.message.tool_calls,
        [
            ToolCallRequest {
                id: "call_0_0".into(),
                name: "read_file".into(),
                arguments: read_arguments,
            },
            ToolCallRequest {
                id: "call_0_1".into(),
                name: "grep".into(),
                arguments: r#"{"pattern": "fn main", "#.into(),
            },
        ]
    );
    // The first piece of each call names it; the arguments come over several more pieces.
    let pieces: Vec<(usize, Option<String>, Option<String>, String)> = deltas
        .iter()
        .filter_map(|d| match d {
            Delta::ToolCall {
                index,
                id,
                name,
                arguments,
            } => Some((*index, id.clone(), name.clone(), arguments.clone())),
            _ => None,
        })
        .collect();
    let first = &pieces[0];
    assert_eq!(
        (first.0, first.1.as_deref(), first.2.as_deref()),
        (0, Some("call_0_0"), Some("read_file"))
    );
    let argument_pieces = pieces
        .iter()
        .filter(|p| p.0 == 0 && !p.3.is_empty())
        .count();
    assert!(argument_pieces > 2, "{pieces:?}");
    let grep_arguments: String = pieces
        .iter()
        .filter(|p| p.0 == 1)
        .map(|p| p.3.as_str())
        .collect();
    assert_eq!(grep_arguments, r#"{"pattern": "fn main", "#);
}

#[tokio::test]
async fn a_plain_reply_without_streaming() {
    let server = ScriptedModel::scripted(vec![
        Reply::Text("plain text".into()),
        Reply::ToolCalls(vec![call("run", json!({"cmd": "ls"}))]),
    ])
    .await;
    let client = client(
        &server,
        ClientConfig {
            stream: false,
            ..fast()
        },
    );
    let (reply, deltas) = complete_watched(&client, &conversation(), &[]).await;
    let reply = reply.unwrap();
    assert_eq!(reply.message, ChatMessage::assistant("plain text"));
    assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
    assert_eq!(reply.usage.map(|u| u.prompt_tokens), Some(20));
    assert_eq!(deltas, [Delta::Content("plain text".into())]);
    let body = &server.requests()[0];
    assert!(body.get("stream").is_none(), "{body}");
    assert!(body.get("stream_options").is_none(), "{body}");

    let reply = client.complete(&conversation(), &[], None).await.unwrap();
    assert_eq!(reply.message.content, None);
    assert_eq!(
        reply.message.tool_calls,
        [ToolCallRequest {
            id: "call_1_0".into(),
            name: "run".into(),
            arguments: r#"{"cmd":"ls"}"#.into(),
        }]
    );
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn the_request_has_the_wire_shape() {
    let server = ScriptedModel::scripted(vec![]).await;
    let keyed = ModelClient::with_key(
        &spec(format!("{}/", server.base_url()), Some("SCRIPTED_KEY")),
        Some("sk-test-key".into()),
        fast(),
    )
    .unwrap();
    let messages = vec![
        ChatMessage::system("sys"),
        ChatMessage::user("look"),
        ChatMessage {
            role: Role::Assistant,
            content: None,
            tool_calls: vec![ToolCallRequest {
                id: "call_a".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"a"}"#.into(),
            }],
            tool_call_id: None,
            images: Vec::new(),
        },
        ChatMessage::tool("call_a", "contents of a"),
    ];
    let tools = [ToolDefinition::new(
        "read_file",
        "Reads a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    )];
    let reply = keyed.complete(&messages, &tools, None).await.unwrap();
    assert_eq!(reply.message.content.as_deref(), Some("done"));
    let request = &server.received()[0];
    assert_eq!(request.authorization.as_deref(), Some("Bearer sk-test-key"));
    assert_eq!(
        request.body,
        json!({
            "model": "scripted-1",
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "look"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_a", "type": "function",
                     "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}
                ]},
                {"role": "tool", "content": "contents of a", "tool_call_id": "call_a"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "read_file",
                "description": "Reads a file.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }}],
            "tool_choice": "auto",
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    );

    // No key: no Authorization header; no tools: no `tools` field.
    let keyless = client(&server, fast());
    keyless.complete(&conversation(), &[], None).await.unwrap();
    let request = &server.received()[1];
    assert_eq!(request.authorization, None);
    assert!(request.body.get("tools").is_none(), "{}", request.body);
}

/// A scripted server, a proxy in front of it that counts the connections clients open, and a model
/// spec that goes through the proxy.
async fn behind_a_counting_proxy() -> (ScriptedModel, LatencyProxy, ModelSpec) {
    let server = ScriptedModel::scripted(vec![]).await;
    let proxy = LatencyProxy::start(server.addr(), Duration::ZERO).await;
    let spec = spec(format!("http://{}/v1", proxy.addr()), None);
    (server, proxy, spec)
}

/// A client's turns reuse one connection, streamed or not: a streamed reply's body is read to its
/// end after `[DONE]`, since a body dropped before its end closes the connection, and each turn
/// would open another (to a remote provider, with a TLS handshake of its own).
#[tokio::test]
async fn a_clients_turns_reuse_its_connection() {
    let (server, proxy, spec) = behind_a_counting_proxy().await;
    let config = fast();
    let client = ModelClient::new(&spec, config.clone()).unwrap();
    for turn in 0..3 {
        client.complete(&conversation(), &[], None).await.unwrap();
        assert_eq!(proxy.connections(), 1, "after streamed turn {turn}");
    }
    assert!(server.received().iter().all(|r| r.is_streaming()));
    let whole = ModelClient::new(
        &spec,
        ClientConfig {
            stream: false,
            ..config
        },
    )
    .unwrap();
    for turn in 0..3 {
        whole.complete(&conversation(), &[], None).await.unwrap();
        assert_eq!(proxy.connections(), 1, "after whole turn {turn}");
    }
}

/// The clients of one configuration (a daemon's tasks, each with its own client) share their
/// connections to a server: a task's first request reuses the connection an earlier task left
/// open instead of opening one (and, to a remote provider, shaking hands over TLS) of its own. A
/// configuration made anew (another daemon) has its own.
#[tokio::test]
async fn clients_of_one_configuration_share_their_connections() {
    let (server, proxy, spec) = behind_a_counting_proxy().await;
    let daemon = fast();
    for task in 0..3 {
        let client = ModelClient::new(&spec, daemon.clone()).unwrap();
        client.complete(&conversation(), &[], None).await.unwrap();
        assert_eq!(proxy.connections(), 1, "after task {task}");
    }
    let other = ModelClient::new(&spec, fast()).unwrap();
    other.complete(&conversation(), &[], None).await.unwrap();
    assert_eq!(proxy.connections(), 2, "another daemon's client");
    assert_eq!(server.received().len(), 4);
}

#[tokio::test]
async fn new_reads_the_key_from_the_named_variable() {
    let server = ScriptedModel::scripted(vec![]).await;
    // PATH is set wherever tests run, and setting a variable of our own would need `unsafe`.
    let path = std::env::var("PATH").unwrap();
    let client = ModelClient::new(&spec(server.base_url(), Some("PATH")), fast()).unwrap();
    client.complete(&conversation(), &[], None).await.unwrap();
    assert_eq!(
        server.received()[0].authorization,
        Some(format!("Bearer {path}"))
    );
    assert!(!format!("{client:?}").contains(&path));
}

#[tokio::test]
async fn a_missing_key_variable_is_named() {
    let var = "ORCHESTRATOR_TEST_SURELY_UNSET_MODEL_KEY";
    assert!(std::env::var_os(var).is_none());
    let error =
        ModelClient::new(&spec("http://127.0.0.1:9/v1".into(), Some(var)), fast()).unwrap_err();
    assert!(
        matches!(&error, ModelError::MissingKey { var: v } if v == var),
        "{error:?}"
    );
    assert!(error.to_string().contains(var));
    assert!(!error.is_retryable());
}

#[tokio::test]
async fn a_rate_limit_is_retried() {
    let server = ScriptedModel::scripted(vec![
        Reply::Status(429, error_body("Rate limit reached", "requests")),
        Reply::Text("after the wait".into()),
    ])
    .await;
    let client = client(&server, fast());
    let (reply, deltas) = complete_watched(&client, &conversation(), &[]).await;
    let reply = reply.unwrap();
    assert_eq!(reply.message.content.as_deref(), Some("after the wait"));
    assert_eq!(reply.attempts, 2);
    assert_eq!(server.request_count(), 2);
    let retries = retries_in(&deltas);
    assert_eq!(retries.len(), 1, "{deltas:?}");
    assert_eq!(retries[0].0, 2);
    assert!(retries[0].1.contains("Rate limit reached"), "{retries:?}");
}

#[tokio::test]
async fn server_errors_are_retried_until_one_succeeds() {
    let failure = || Reply::Status(500, error_body("The server had an error", "server_error"));
    let server = ScriptedModel::scripted(vec![
        failure(),
        failure(),
        failure(),
        Reply::Text("fine".into()),
    ])
    .await;
    let client = client(&server, fast());
    let (reply, deltas) = complete_watched(&client, &conversation(), &[]).await;
    assert_eq!(reply.unwrap().attempts, 4);
    assert_eq!(server.request_count(), 4);
    let attempts: Vec<u32> = retries_in(&deltas).into_iter().map(|r| r.0).collect();
    assert_eq!(attempts, [2, 3, 4]);

    // With fewer retries than failures the last error comes back.
    let server = ScriptedModel::scripted(vec![failure(), failure(), failure()]).await;
    let client = self::client(
        &server,
        ClientConfig {
            max_retries: 2,
            ..fast()
        },
    );
    let error = client
        .complete(&conversation(), &[], None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ModelError::Server { status: 500, .. }),
        "{error:?}"
    );
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn a_refused_key_is_not_retried_and_not_shown() {
    let key = "sk-live-do-not-print-4242";
    let server = ScriptedModel::scripted(vec![Reply::Status(
        401,
        error_body(
            &format!("Incorrect API key provided: {key}"),
            "invalid_request_error",
        ),
    )])
    .await;
    let client = ModelClient::with_key(
        &spec(server.base_url(), Some("SCRIPTED_KEY")),
        Some(key.into()),
        fast(),
    )
    .unwrap();
    let (result, deltas) = complete_watched(&client, &conversation(), &[]).await;
    let error = result.unwrap_err();
    assert!(
        matches!(error, ModelError::Unauthorized { status: 401, .. }),
        "{error:?}"
    );
    assert_eq!(server.request_count(), 1);
    assert!(retries_in(&deltas).is_empty());
    let text = error.to_string();
    assert!(text.contains("SCRIPTED_KEY"), "{text}");
    assert!(!text.contains(key), "{text}");
    assert!(!format!("{error:?}").contains(key));
    assert!(!format!("{client:?}").contains(key));
}

#[tokio::test]
async fn an_unknown_model_names_the_model_and_url() {
    let server = ScriptedModel::scripted(vec![Reply::Status(
        404,
        error_body(
            "The model `scripted-1` does not exist",
            "invalid_request_error",
        ),
    )])
    .await;
    let client = client(&server, fast());
    let error = client
        .complete(&conversation(), &[], None)
        .await
        .unwrap_err();
    match &error {
        ModelError::UnknownModel { model, message } => {
            assert_eq!(model, "scripted-1");
            assert!(message.contains(&server.base_url()), "{message}");
            assert!(message.contains("does not exist"), "{message}");
        }
        other => panic!("expected UnknownModel, got {other:?}"),
    }
    assert_eq!(server.request_count(), 1);

    // A base URL missing its `/v1` reaches the server's 404 too.
    let root = server.base_url().trim_end_matches("/v1").to_owned();
    let client = ModelClient::with_key(&spec(root, None), None, fast()).unwrap();
    let error = client
        .complete(&conversation(), &[], None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ModelError::UnknownModel { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_rejected_request_keeps_the_providers_words() {
    let server = ScriptedModel::scripted(vec![Reply::Status(
        400,
        error_body(
            "Invalid schema for function 'read_file'",
            "invalid_request_error",
        ),
    )])
    .await;
    let client = client(&server, fast());
    let error = client
        .complete(&conversation(), &[], None)
        .await
        .unwrap_err();
    match &error {
        ModelError::BadRequest { status, message } => {
            assert_eq!(*status, 400);
            assert_eq!(message, "Invalid schema for function 'read_file'");
        }
        other => panic!("expected BadRequest, got {other:?}"),
    }
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_cut_stream_is_retried_from_the_start() {
    let server =
        ScriptedModel::scripted(vec![Reply::CutStream, Reply::Text("whole reply".into())]).await;
    let client = client(&server, fast());
    let (reply, deltas) = complete_watched(&client, &conversation(), &[]).await;
    let reply = reply.unwrap();
    assert_eq!(reply.message.content.as_deref(), Some("whole reply"));
    assert_eq!(reply.attempts, 2);
    // What the cut attempt sent stays sent; the retry's text follows the Retrying marker.
    let marker = deltas
        .iter()
        .position(|d| matches!(d, Delta::Retrying { .. }))
        .unwrap();
    assert_eq!(content_of(&deltas[..marker]), "This reply is cut off here");
    assert_eq!(content_of(&deltas[marker..]), "whole reply");
}

#[tokio::test]
async fn a_cut_stream_without_retries_is_a_broken_stream() {
    for stream in [true, false] {
        let server = ScriptedModel::scripted(vec![Reply::CutStream]).await;
        let client = client(
            &server,
            ClientConfig {
                max_retries: 0,
                stream,
                ..fast()
            },
        );
        let error = client
            .complete(&conversation(), &[], None)
            .await
            .unwrap_err();
        assert!(
            matches!(error, ModelError::BrokenStream(_)),
            "stream {stream}: {error:?}"
        );
        assert!(error.is_retryable());
        assert_eq!(server.request_count(), 1);
    }
}

#[tokio::test]
async fn a_hanging_server_times_out() {
    let server = ScriptedModel::scripted(vec![Reply::Hang, Reply::Hang]).await;
    let client = client(
        &server,
        ClientConfig {
            idle_timeout: Duration::from_millis(200),
            max_retries: 1,
            ..fast()
        },
    );
    let (result, deltas) = complete_watched(&client, &conversation(), &[]).await;
    let error = result.unwrap_err();
    assert!(matches!(error, ModelError::Timeout(_)), "{error:?}");
    assert_eq!(server.request_count(), 2);
    assert_eq!(retries_in(&deltas).len(), 1);
}

#[tokio::test]
async fn a_server_that_is_down_fails_to_connect_after_retries() {
    // A port that was free a moment ago and has nobody listening now.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = ModelClient::with_key(
        &spec(format!("http://{addr}/v1"), None),
        None,
        ClientConfig {
            max_retries: 2,
            ..fast()
        },
    )
    .unwrap();
    let (result, deltas) = complete_watched(&client, &conversation(), &[]).await;
    let error = result.unwrap_err();
    assert!(matches!(error, ModelError::Connect(_)), "{error:?}");
    let attempts: Vec<u32> = retries_in(&deltas).into_iter().map(|r| r.0).collect();
    assert_eq!(attempts, [2, 3]);
}
