//! web_search against a local server that answers in each backend's real response shape (SearXNG's
//! JSON API, Brave Search's, Tavily's), checking what the tool sends (path, query, key header) and
//! what it makes of the answers, errors included.

use crate::{Harness, assert_error};
use orchestrator_tools::WebSearchConfig;
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serves one JSON body per connection (with `status`), recording each request's head and body.
async fn backend(status: u16, body: serde_json::Value) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            // Head, then the body its Content-Length announces.
            loop {
                let n = stream.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
            }
            record
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&request).into_owned());
            let payload = body.to_string();
            let reply = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
                payload.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
        }
    });
    (port, seen)
}

fn with_backend(config: WebSearchConfig) -> Harness {
    let mut h = Harness::new();
    h.ctx = h.ctx.clone().with_web_search(Some(Arc::new(config)));
    h
}

#[tokio::test]
async fn searxng_results_are_ranked_with_ref_ids() {
    let (port, seen) = backend(
        200,
        json!({"query": "tokio", "number_of_results": 2, "results": [
            {"url": "https://tokio.rs/", "title": "Tokio", "content": "An asynchronous   runtime", "engine": "duckduckgo", "score": 2.0},
            {"url": "https://docs.rs/tokio", "title": "tokio - Rust", "content": "API docs", "engine": "bing", "score": 1.0},
            {"title": "no url"}
        ], "answers": [], "suggestions": []}),
    )
    .await;
    let h = with_backend(WebSearchConfig {
        backend: "searxng".into(),
        url: Some(format!("http://127.0.0.1:{port}/")),
        api_key_env: None,
    });
    let r = h
        .call("web_search", json!({"query": "tokio runtime"}))
        .await;
    assert!(!r.is_error, "{}", r.joined_text());
    let text = r.joined_text();
    assert!(
        text.starts_with(
            "[1] Tokio\n    https://tokio.rs/\n    An asynchronous runtime\n[2] tokio - Rust"
        ),
        "{text}"
    );
    assert!(!text.contains("no url"), "{text}");
    assert_eq!(r.metadata["results"][1]["ref_id"], "[2]");
    let request = seen.lock().unwrap()[0].clone();
    assert!(
        request.starts_with("GET /search?q=tokio+runtime&format=json "),
        "{request}"
    );
}

#[tokio::test]
async fn brave_and_tavily_get_their_keys_and_their_shapes_are_read() {
    // The key comes from the variable the config names (cargo sets this one for tests).
    let (port, seen) = backend(
        200,
        json!({"type": "search", "query": {"original": "rust"}, "web": {"type": "search", "results": [
            {"title": "Rust", "url": "https://www.rust-lang.org/", "description": "A language empowering everyone", "language": "en"}
        ]}}),
    )
    .await;
    let h = with_backend(WebSearchConfig {
        backend: "brave".into(),
        url: Some(format!("http://127.0.0.1:{port}/res/v1/web/search")),
        api_key_env: Some("CARGO_PKG_NAME".into()),
    });
    let r = h
        .call("web_search", json!({"query": "rust", "max_results": 3}))
        .await;
    assert!(
        r.joined_text()
            .contains("[1] Rust\n    https://www.rust-lang.org/"),
        "{}",
        r.joined_text()
    );
    let request = seen.lock().unwrap()[0].to_ascii_lowercase();
    assert!(
        request.starts_with("get /res/v1/web/search?q=rust&count=3 "),
        "{request}"
    );
    assert!(
        request.contains("x-subscription-token: orchestrator-tools"),
        "{request}"
    );

    let (port, seen) = backend(
        200,
        json!({"query": "rust", "answer": null, "images": [], "response_time": 0.5, "results": [
            {"title": "Rust Book", "url": "https://doc.rust-lang.org/book/", "content": "The book", "score": 0.98, "raw_content": null}
        ]}),
    )
    .await;
    let h = with_backend(WebSearchConfig {
        backend: "tavily".into(),
        url: Some(format!("http://127.0.0.1:{port}/search")),
        api_key_env: Some("CARGO_PKG_NAME".into()),
    });
    let r = h.call("web_search", json!({"query": "rust book"})).await;
    assert!(
        r.joined_text().contains("[1] Rust Book"),
        "{}",
        r.joined_text()
    );
    let request = seen.lock().unwrap()[0].clone();
    assert!(request.starts_with("POST /search "), "{request}");
    assert!(
        request
            .to_ascii_lowercase()
            .contains("authorization: bearer orchestrator-tools"),
        "{request}"
    );
    assert!(
        request.ends_with(r#"{"max_results":8,"query":"rust book"}"#),
        "{request}"
    );
}

#[tokio::test]
async fn search_failures_are_clear_errors() {
    let h = Harness::new();
    assert_error(
        &h.call("web_search", json!({"query": "x"})).await,
        &["no search backend is configured", "[web_search]"],
    );
    let (port, _) = backend(429, json!({"error": "rate limited"})).await;
    let h = with_backend(WebSearchConfig {
        backend: "searxng".into(),
        url: Some(format!("http://127.0.0.1:{port}")),
        api_key_env: None,
    });
    assert_error(
        &h.call("web_search", json!({"query": "x"})).await,
        &["answered 429", "rate limited"],
    );
    let h = with_backend(WebSearchConfig {
        backend: "brave".into(),
        url: Some(format!("http://127.0.0.1:{port}")),
        api_key_env: Some("ORCHESTRATOR_TEST_NO_SUCH_KEY_VARIABLE".into()),
    });
    assert_error(
        &h.call("web_search", json!({"query": "x"})).await,
        &["ORCHESTRATOR_TEST_NO_SUCH_KEY_VARIABLE", "not set"],
    );
    for (config, says) in [
        (json!({"backend": "google"}), "not one of"),
        (json!({"backend": "searxng"}), "needs url"),
        (json!({"backend": "tavily"}), "needs api_key_env"),
        (
            json!({"backend": "searxng", "url": "file:///etc"}),
            "not an http",
        ),
    ] {
        let config: WebSearchConfig = serde_json::from_value(config).unwrap();
        assert!(config.validate().unwrap_err().contains(says), "{says}");
    }
}
