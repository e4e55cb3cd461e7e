//! The listener and its limits, the webhook route and the old API routes, over real TCP.

use super::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// Long enough for a request on 127.0.0.1 to arrive whole, short enough for a test.
const SHORT: Duration = Duration::from_millis(300);
/// A guard against a hang: a server that never cuts the client off fails the test here.
const GUARD: Duration = Duration::from_secs(60);

struct Running {
    addr: std::net::SocketAddr,
    stop: CancellationToken,
    server: tokio::task::JoinHandle<()>,
    _db: orchestrator_test_support::TestStore,
}

async fn start() -> Running {
    start_with(ReadTimeouts {
        headers: SHORT,
        body: SHORT,
    })
    .await
}

async fn start_with(timeouts: ReadTimeouts) -> Running {
    start_limited(
        Limits {
            timeouts,
            ..Limits::default()
        },
        None,
    )
    .await
}

const WEBHOOK_SECRET: &[u8] = b"It's a Secret to Everybody";

/// A listener with `limits`, and webhooks under [`WEBHOOK_SECRET`] when `secret` is set.
async fn start_limited(limits: Limits, secret: Option<&[u8]>) -> Running {
    let db = orchestrator_test_support::sqlite_store().await;
    let webhooks = secret.map(|secret| Webhooks {
        secret: Some(Arc::from(secret)),
        triggers: Arc::new(crate::triggers::Triggers {
            store: db.store.clone(),
            rules: Vec::new(),
            github: None,
            bot_login: Some("bot".into()),
            mention: None,
            retry: crate::triggers::DeliveryRetry::default(),
        }),
        wake: Arc::new(tokio::sync::Notify::new()),
    });
    let app = router(HttpState {
        store: db.store.clone(),
        metrics: Arc::new(Metrics::default()),
        token: Arc::from("secret-token"),
        webhooks,
        read_only: false,
        sessions: Default::default(),
        live: None,
        limits,
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(serve(listener, app, limits, stop.clone()));
    Running {
        addr,
        stop,
        server,
        _db: db,
    }
}

/// Reads until the server closes the connection (or resets it), and returns what came.
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(GUARD, stream.read(&mut buf)).await {
            Err(_) => panic!(
                "the server kept the connection open: {}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0) | Err(_)) => return String::from_utf8_lossy(&got).into_owned(),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn a_client_that_sends_its_headers_byte_by_byte_is_cut_off() {
    let running = start().await;
    let stream = TcpStream::connect(running.addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    // A slowloris client: one byte at a time, each well within the timeout of the one before,
    // and never the blank line that ends the headers. Only a deadline for the whole head stops
    // it; a timeout between reads never fires.
    let trickle = tokio::spawn(async move {
        let head = format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: {}",
            "a".repeat(100_000)
        );
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        for byte in head.bytes() {
            tick.tick().await;
            if writer.write_all(&[byte]).await.is_err() {
                return true;
            }
        }
        false
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let closed = loop {
        match tokio::time::timeout(GUARD, reader.read(&mut buf)).await {
            Err(_) => break false,
            Ok(Ok(0) | Err(_)) => break true,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    };
    assert!(closed, "the server kept reading a head that never ends");
    let answer = String::from_utf8_lossy(&got);
    assert!(!answer.contains("200 OK"), "{answer}");
    trickle.abort();
    running.stop.cancel();
    running.server.await.unwrap();
}

#[tokio::test]
async fn a_client_that_never_finishes_its_body_gets_408_and_is_closed() {
    let running = start().await;
    let mut stream = TcpStream::connect(running.addr).await.unwrap();
    // The headers promise 100 bytes; 10 come, then nothing.
    stream
        .write_all(
            b"POST /api/approvals/1/approve HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret-token\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"reason\":",
        )
        .await
        .unwrap();
    let answer = read_to_close(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("the request body did not arrive"),
        "{answer}"
    );
    running.stop.cancel();
    running.server.await.unwrap();
}

#[tokio::test]
async fn requests_that_arrive_in_time_are_answered() {
    let running = start().await;
    let mut stream = TcpStream::connect(running.addr).await.unwrap();
    let body = br#"{"reason": "no"}"#;
    stream
        .write_all(
            format!(
                "POST /api/approvals/1/deny HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret-token\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    stream.write_all(body).await.unwrap();
    let answer = read_to_close(&mut stream).await;
    // The body was read and the route ran: approval 1 does not exist.
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(answer.contains("approval"), "{answer}");
    running.stop.cancel();
    running.server.await.unwrap();
}

/// Sends a POST of `size` bytes with `headers` (each line ending in CRLF) and returns the
/// answer; the server may answer (and close) before the whole body is sent.
async fn post_sized_with(
    addr: std::net::SocketAddr,
    path: &str,
    size: usize,
    headers: &str,
) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}Content-Length: {size}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b' '; 1 << 20];
    let mut sent = 0;
    while sent < size {
        let n = chunk.len().min(size - sent);
        if stream.write_all(&chunk[..n]).await.is_err() {
            break;
        }
        sent += n;
    }
    read_to_close(&mut stream).await
}

/// Any body GitHub could sign, in either content type and for any event, is answered 2xx or
/// 4xx, never 5xx (which GitHub would take for our failure and not redeliver by itself).
#[test]
fn a_signed_delivery_of_any_body_gets_no_5xx() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let secret: Arc<[u8]> = Arc::from(&b"It's a Secret to Everybody"[..]);
    let (running, _db) = runtime.block_on(async {
        let db = orchestrator_test_support::sqlite_store().await;
        let triggers = crate::triggers::Triggers {
            store: db.store.clone(),
            rules: Vec::new(),
            github: None,
            bot_login: Some("bot".into()),
            mention: None,
            retry: crate::triggers::DeliveryRetry::default(),
        };
        let app = router(HttpState {
            store: db.store.clone(),
            metrics: Arc::new(Metrics::default()),
            token: Arc::from("secret-token"),
            webhooks: Some(Webhooks {
                secret: Some(secret.clone()),
                triggers: Arc::new(triggers),
                wake: Arc::new(tokio::sync::Notify::new()),
            }),
            read_only: false,
            sessions: Default::default(),
            live: None,
            limits: Limits::default(),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let limits = Limits {
            timeouts: ReadTimeouts {
                headers: GUARD,
                body: GUARD,
            },
            ..Limits::default()
        };
        let server = tokio::spawn(serve(listener, app, limits, stop.clone()));
        ((addr, stop, server), db)
    });
    let json_ish = "[{}\\[\\]\":,.a-z0-9 \\\\-]{0,200}";
    let body = prop_oneof![
        json_ish.prop_map(String::into_bytes),
        "\\PC{0,200}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..200),
    ];
    let strategy = (
        body,
        prop::sample::select(vec![
            "issues",
            "issue_comment",
            "pull_request",
            "ping",
            "push",
        ]),
        prop::sample::select(vec![
            "application/json",
            "application/x-www-form-urlencoded",
            "text/plain",
        ]),
        "[a-z0-9-]{0,40}",
    );
    let mut runner = TestRunner::new(Config {
        // `PROPTEST_CASES` runs more (`just fuzz`).
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(64),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |(body, event, content_type, delivery)| {
            let signature = orchestrator_github::sign(&secret, &body);
            let head = format!(
                "POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n\
                 X-GitHub-Event: {event}\r\nX-GitHub-Delivery: {delivery}\r\n\
                 X-Hub-Signature-256: {signature}\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n",
                body.len()
            );
            let answer = runtime.block_on(async {
                let mut stream = TcpStream::connect(running.0).await.unwrap();
                stream.write_all(head.as_bytes()).await.unwrap();
                stream.write_all(&body).await.unwrap();
                read_to_close(&mut stream).await
            });
            let status: u16 = answer
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            prop_assert!((200..500).contains(&status), "{answer}");
            Ok(())
        })
        .unwrap();
    running.1.cancel();
    runtime.block_on(running.2).unwrap();
}

#[tokio::test]
async fn webhooks_take_githubs_25_mb_and_the_api_keeps_its_small_limit() {
    let limits = Limits {
        timeouts: ReadTimeouts {
            headers: SHORT,
            body: GUARD,
        },
        ..Limits::default()
    };
    let running = start_limited(limits, Some(WEBHOOK_SECRET)).await;
    // 3 MB reaches the webhook route: read whole, hashed, and refused for its signature.
    let signed = format!(
        "X-Hub-Signature-256: {}\r\nX-GitHub-Event: ping\r\nX-GitHub-Delivery: d1\r\n",
        orchestrator_github::sign(WEBHOOK_SECRET, b"something else")
    );
    let answer = post_sized_with(running.addr, WEBHOOK_PATH, 3 << 20, &signed).await;
    assert!(
        answer.starts_with("HTTP/1.1 401"),
        "{}",
        &answer[..answer.len().min(300)]
    );
    assert!(answer.contains("does not match"), "{answer}");
    // The same size is too large for the API, and the refusal is JSON like every error.
    let token = "Authorization: Bearer secret-token\r\n";
    let answer = post_sized_with(running.addr, "/api/approvals/1/deny", 3 << 20, token).await;
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "{}",
        &answer[..answer.len().min(300)]
    );
    assert!(answer.contains("application/json"), "{answer}");
    // Past GitHub's own cap, the webhook route refuses on the headers.
    let answer = post_sized_with(running.addr, WEBHOOK_PATH, MAX_WEBHOOK_BYTES + 1, &signed).await;
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "{}",
        &answer[..answer.len().min(300)]
    );
    assert!(answer.contains(&MAX_WEBHOOK_BYTES.to_string()), "{answer}");
    running.stop.cancel();
    running.server.await.unwrap();
}

/// Writes a request head, then reads the answer without sending any of the body it
/// promises: the answer must come from the head alone.
async fn answer_to_head(addr: std::net::SocketAddr, head: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    read_to_close(&mut stream).await
}

/// Without the token, an API route answers 401 on the headers and never waits for (or
/// holds) the body; a missing or malformed webhook signature is 401 the same way; no secret
/// configured is 404 the same way.
#[tokio::test]
async fn strangers_are_refused_on_their_headers_before_any_body_is_read() {
    let limits = Limits {
        timeouts: ReadTimeouts {
            headers: GUARD,
            body: GUARD,
        },
        ..Limits::default()
    };
    let running = start_limited(limits, Some(WEBHOOK_SECRET)).await;
    for (method, path) in [
        ("POST", "/api/approvals/1/approve"),
        ("POST", "/api/v1/tasks"),
        ("GET", "/metrics"),
    ] {
        let answer = answer_to_head(
            running.addr,
            &format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{path}: {answer}");
    }
    for signature in ["", "X-Hub-Signature-256: sha256=00\r\n"] {
        let answer = answer_to_head(
            running.addr,
            &format!("POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\n{signature}X-GitHub-Event: ping\r\nX-GitHub-Delivery: d\r\nContent-Length: 20000000\r\n\r\n"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(answer.contains("signature refused"), "{answer}");
    }
    running.stop.cancel();
    running.server.await.unwrap();

    let unconfigured = start_with(limits.timeouts).await;
    let answer = answer_to_head(
        unconfigured.addr,
        &format!("POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 20000000\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(answer.contains("not configured"), "{answer}");
    unconfigured.stop.cancel();
    unconfigured.server.await.unwrap();
}

/// A delivery whose body the shared budget for unverified deliveries cannot cover is 503 on
/// its headers (`Content-Length`) or at the chunk that passes it (chunked), while another
/// holds the budget; once that one is done, the budget is whole again and a signed delivery
/// goes through.
#[tokio::test]
async fn unverified_webhook_bodies_share_one_budget() {
    let limits = Limits {
        timeouts: ReadTimeouts {
            headers: GUARD,
            body: GUARD,
        },
        unverified_webhook_bytes: 1 << 20,
        ..Limits::default()
    };
    let running = start_limited(limits, Some(WEBHOOK_SECRET)).await;
    let signature = format!(
        "X-Hub-Signature-256: {}\r\n",
        orchestrator_github::sign(WEBHOOK_SECRET, b"{}")
    );
    let head = |length: &str| {
        format!(
            "POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\n{signature}X-GitHub-Event: ping\r\nX-GitHub-Delivery: d\r\n{length}\r\n"
        )
    };
    // Larger than the whole budget: refused on the headers.
    let answer = answer_to_head(running.addr, &head("Content-Length: 2000000\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    // One holds 700 KB of the budget, sending half of it and waiting.
    let mut holder = TcpStream::connect(running.addr).await.unwrap();
    holder
        .write_all(head("Content-Length: 700000\r\n").as_bytes())
        .await
        .unwrap();
    holder.write_all(&vec![b' '; 350_000]).await.unwrap();
    tokio::time::sleep(SHORT).await;
    let answer = answer_to_head(running.addr, &head("Content-Length: 500000\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    // A chunked one is refused at the chunk the budget cannot cover.
    let mut chunked = TcpStream::connect(running.addr).await.unwrap();
    chunked
        .write_all(head("Transfer-Encoding: chunked\r\n").as_bytes())
        .await
        .unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 100_000, " ".repeat(100_000));
    for _ in 0..5 {
        if chunked.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let answer = read_to_close(&mut chunked).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    // The holder finishes: its signature is wrong for its body, 401.
    holder.write_all(&vec![b' '; 350_000]).await.unwrap();
    let mut answer = vec![0u8; 1024];
    let n = tokio::time::timeout(GUARD, holder.read(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    drop(holder);
    // The budget is whole again: a signed delivery is answered.
    let mut stream = TcpStream::connect(running.addr).await.unwrap();
    stream
        .write_all(format!("{}{{}}", head("Content-Length: 2\r\nConnection: close\r\n")).as_bytes())
        .await
        .unwrap();
    let answer = read_to_close(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("pong"), "{answer}");
    running.stop.cancel();
    running.server.await.unwrap();
}

/// A route that takes a body without the token (the login form) reads at most 64 KiB of it,
/// and such bodies share one budget.
#[tokio::test]
async fn unauthenticated_bodies_are_small_and_share_one_budget() {
    let limits = Limits {
        timeouts: ReadTimeouts {
            headers: GUARD,
            body: GUARD,
        },
        unauthenticated_bytes: 100_000,
        ..Limits::default()
    };
    let running = start_limited(limits, None).await;
    let form = "Content-Type: application/x-www-form-urlencoded\r\n";
    let answer = answer_to_head(
        running.addr,
        &format!("POST /login HTTP/1.1\r\nHost: x\r\n{form}Content-Length: 1000000\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // One holds 60 KB of the 100 KB; a second of 60 KB must wait its turn.
    let mut holder = TcpStream::connect(running.addr).await.unwrap();
    holder
        .write_all(
            format!("POST /login HTTP/1.1\r\nHost: x\r\n{form}Content-Length: 60000\r\n\r\ntoken=")
                .as_bytes(),
        )
        .await
        .unwrap();
    tokio::time::sleep(SHORT).await;
    let answer = answer_to_head(
        running.addr,
        &format!("POST /login HTTP/1.1\r\nHost: x\r\n{form}Content-Length: 60000\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    drop(holder);
    running.stop.cancel();
    running.server.await.unwrap();
}

/// A connection that never sends a request is closed at the header deadline, so idle
/// sockets cannot keep the connection slots.
#[tokio::test]
async fn an_idle_connection_gives_its_slot_back_at_the_header_deadline() {
    let limits = Limits {
        timeouts: ReadTimeouts {
            headers: SHORT,
            body: SHORT,
        },
        max_connections: 1,
        ..Limits::default()
    };
    let running = start_limited(limits, None).await;
    let mut idle = TcpStream::connect(running.addr).await.unwrap();
    let answer = read_to_close(&mut idle).await;
    assert!(!answer.contains("200 OK"), "{answer}");
    let mut next = TcpStream::connect(running.addr).await.unwrap();
    next.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut next).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    running.stop.cancel();
    running.server.await.unwrap();
}

/// Over `max_connections`, a connection is answered 503 and closed at once, even when the
/// ones before it send nothing; when one of them goes, a new one is served.
#[tokio::test]
async fn connections_over_the_limit_are_refused_at_once() {
    let limits = Limits {
        timeouts: ReadTimeouts {
            headers: GUARD,
            body: GUARD,
        },
        max_connections: 2,
        ..Limits::default()
    };
    let running = start_limited(limits, None).await;
    let first = TcpStream::connect(running.addr).await.unwrap();
    let _second = TcpStream::connect(running.addr).await.unwrap();
    tokio::time::sleep(SHORT).await;
    let mut third = TcpStream::connect(running.addr).await.unwrap();
    let answer = read_to_close(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too many connections"), "{answer}");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(
        head.lines()
            .any(|l| l == format!("Content-Length: {}", body.len())),
        "the written answer's length is its body's: {answer}"
    );
    drop(first);
    tokio::time::sleep(SHORT).await;
    let mut fourth = TcpStream::connect(running.addr).await.unwrap();
    fourth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut fourth).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    running.stop.cancel();
    running.server.await.unwrap();
}
