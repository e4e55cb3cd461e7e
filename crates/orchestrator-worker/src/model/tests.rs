//! The model client's own rules, without a server: backoff, `Retry-After`, which failures are
//! retried, and how statuses and in-band errors map to kinds.

use super::*;

fn config() -> ClientConfig {
    ClientConfig {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        ..ClientConfig::default()
    }
}

#[test]
fn backoff_doubles_is_capped_and_yields_to_retry_after() {
    let c = config();
    let delays: Vec<u128> = (1..=6)
        .map(|a| retry_delay(&c, a, None, 0.5).as_millis())
        .collect();
    assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
    // Jitter never pushes a delay past the cap.
    assert_eq!(retry_delay(&c, 10, None, 1.0), Duration::from_secs(1));
    assert_eq!(retry_delay(&c, 1, None, 0.0), Duration::from_millis(80));
    assert_eq!(
        retry_delay(&c, 1, Some(Duration::from_millis(300)), 0.5),
        Duration::from_millis(300)
    );
    assert_eq!(
        retry_delay(&c, 1, Some(Duration::from_secs(60)), 0.5),
        Duration::from_secs(1)
    );
}

#[test]
fn retry_after_headers() {
    let mut headers = HeaderMap::new();
    assert_eq!(retry_after(&headers), None);
    headers.insert(RETRY_AFTER, HeaderValue::from_static("2"));
    assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
    headers.insert(
        RETRY_AFTER,
        HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
    );
    assert_eq!(retry_after(&headers), None);
    headers.insert("retry-after-ms", HeaderValue::from_static("250"));
    assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
}

#[test]
fn retryable_kinds() {
    let cases = [
        (ModelError::MissingKey { var: "K".into() }, false),
        (
            ModelError::Unauthorized {
                status: 401,
                message: String::new(),
            },
            false,
        ),
        (
            ModelError::UnknownModel {
                model: "m".into(),
                message: String::new(),
            },
            false,
        ),
        (
            ModelError::BadRequest {
                status: 400,
                message: String::new(),
            },
            false,
        ),
        (
            ModelError::RateLimited {
                message: String::new(),
            },
            true,
        ),
        (
            ModelError::Server {
                status: 503,
                message: String::new(),
            },
            true,
        ),
        (ModelError::Connect(String::new()), true),
        (ModelError::Timeout(String::new()), true),
        (
            ModelError::ContextOverflow {
                message: String::new(),
                window: String::new(),
            },
            false,
        ),
        (ModelError::EmptyReply(String::new()), false),
        (ModelError::BrokenStream(String::new()), true),
        (ModelError::InvalidResponse(String::new()), false),
        (ModelError::Config(String::new()), false),
    ];
    for (error, retryable) in cases {
        assert_eq!(error.is_retryable(), retryable, "{error:?}");
    }
}

fn client(key: Option<&str>) -> ModelClient {
    let spec = ModelSpec {
        base_url: "https://example.invalid/v1/".into(),
        model: "m".into(),
        api_key_env: Some("SOME_KEY".into()),
        settings: Default::default(),
    };
    ModelClient::with_key(&spec, key.map(String::from), config()).unwrap()
}

#[test]
fn debug_output_hides_the_key() {
    let client = client(Some("sk-secret-123"));
    let text = format!("{client:?}");
    assert!(!text.contains("sk-secret-123"), "{text}");
    assert!(text.contains("SOME_KEY"), "{text}");
    assert_eq!(
        client.endpoint(),
        "https://example.invalid/v1/chat/completions"
    );
}

#[test]
fn statuses_map_to_kinds() {
    let client = client(Some("sk-secret-123"));
    let body = r#"{"error":{"message":"Incorrect API key provided: sk-secret-123","type":"invalid_request_error"}}"#;
    let error = client.status_error(StatusCode::UNAUTHORIZED, body);
    let text = error.to_string();
    assert!(matches!(
        error,
        ModelError::Unauthorized { status: 401, .. }
    ));
    assert!(!text.contains("sk-secret-123"), "{text}");
    assert!(text.contains("SOME_KEY"), "{text}");
    let cases = [
        (422, "{}", "BadRequest"),
        (408, "", "Timeout"),
        (429, r#"{"error":{"message":"slow down"}}"#, "RateLimited"),
        (
            429,
            r#"{"error":{"message":"pay","code":"insufficient_quota"}}"#,
            "BadRequest",
        ),
        (502, "<html>bad gateway</html>", "Server"),
        // llama.cpp answers 500 to a history it cannot parse: about the request, not a blip.
        (
            500,
            r#"{"error":{"code":500,"message":"[json.exception.parse_error.101] parse error at line 1","type":"server_error"}}"#,
            "BadRequest",
        ),
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
            "ContextOverflow",
        ),
        (
            500,
            r#"{"error":{"message":"Requested tokens (9000) exceed context window of 8192"}}"#,
            "ContextOverflow",
        ),
        (503, r#"{"error":{"message":"Loading model"}}"#, "Server"),
    ];
    for (status, body, kind) in cases {
        let error = client.status_error(StatusCode::from_u16(status).unwrap(), body);
        assert!(
            format!("{error:?}").starts_with(kind),
            "{status}: {error:?}"
        );
    }
}

#[test]
fn in_band_errors_are_classified() {
    let client = client(None);
    let cases = [
        (
            r#"{"error":{"message":"m","type":"rate_limit_exceeded"}}"#,
            "RateLimited",
        ),
        (r#"{"error":{"message":"m","code":400}}"#, "BadRequest"),
        (
            r#"{"error":{"message":"m","type":"server_error"}}"#,
            "Server",
        ),
        (r#"{"error":{"message":"m"}}"#, "BrokenStream"),
        (
            r#"{"error":{"message":"request (9000 tokens) exceeds the available context size (8192 tokens)","code":400}}"#,
            "ContextOverflow",
        ),
    ];
    for (body, kind) in cases {
        let value: Value = serde_json::from_str(body).unwrap();
        let error = client.in_band_error(&value);
        assert!(format!("{error:?}").starts_with(kind), "{body}: {error:?}");
    }
}

#[test]
fn the_cache_key_goes_only_to_providers_that_take_it() {
    let spec = |base_url: &str| ModelSpec {
        base_url: base_url.to_owned(),
        model: "m".into(),
        api_key_env: None,
        settings: ModelSettings::default(),
    };
    let body = |base_url: &str| -> Value {
        let client = ModelClient::with_key(&spec(base_url), None, config())
            .unwrap()
            .with_cache_key("orchestrator-task-7");
        let bytes = client
            .request_body(&[ChatMessage::user("hi")], &[], true)
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    };
    assert_eq!(
        body("https://api.openai.com/v1")["prompt_cache_key"],
        "orchestrator-task-7"
    );
    assert!(
        body("http://127.0.0.1:8080/v1")
            .get("prompt_cache_key")
            .is_none()
    );
    assert!(
        body("https://api.deepseek.com")
            .get("prompt_cache_key")
            .is_none()
    );
}
