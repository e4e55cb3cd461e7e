//! What strangers can make `serve` hold, measured on the daemon itself: many clients sending large
//! bodies nobody authenticated (unsigned webhook deliveries, API requests without the token) at
//! once, while the test reads the serve process's resident memory from /proc. The bodies sent add
//! up to half a gigabyte; what the daemon holds must stay near its budgets, and it must still take
//! a signed delivery afterwards and refuse a badly signed one.

use crate::support::Env;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const SECRET: &str = "a webhook secret for the limits test";
const MIB: u64 = 1024 * 1024;
/// GitHub's largest delivery, which each client claims to send.
const BODY: usize = 25 * 1024 * 1024;
const CLIENTS: usize = 20;

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

/// Sends `head`, then up to `size` bytes of body a MiB at a time with a pause between (chunked
/// framing when `chunked`), stopping when the daemon stops reading; returns its answer.
fn send_slowly(addr: &str, head: &str, size: usize, chunked: bool) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    if stream.write_all(head.as_bytes()).is_err() {
        return read_answer(&mut stream);
    }
    let piece = vec![b' '; MIB as usize];
    let mut sent = 0;
    while sent < size {
        let n = piece.len().min(size - sent);
        let wrote = if chunked {
            stream
                .write_all(format!("{n:x}\r\n").as_bytes())
                .and_then(|()| stream.write_all(&piece[..n]))
                .and_then(|()| stream.write_all(b"\r\n"))
        } else {
            stream.write_all(&piece[..n])
        };
        if wrote.is_err() {
            break;
        }
        sent += n;
        std::thread::sleep(Duration::from_millis(20));
    }
    if chunked && sent == size {
        let _ = stream.write_all(b"0\r\n\r\n");
    }
    read_answer(&mut stream)
}

/// What the daemon answered, up to the end of the connection or of the first answer.
fn read_answer(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok());
            if length.is_some_and(|n| body.len() >= n) {
                break;
            }
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn strangers_sending_large_bodies_at_once_hold_the_daemon_to_its_budgets() {
    let env = Env::sqlite();
    let serve = env.serve_with_env(&[], &[("ORCHESTRATOR_GITHUB_WEBHOOK_SECRET", SECRET)]);
    let pid = serve.child.id();
    let addr = serve.addr.clone();
    // Warm: the first requests allocate what every later one reuses.
    let (code, _) = crate::support::http_get(&addr, "/healthz", None);
    assert_eq!(code, 200);
    let before = rss(pid);

    let peak = Arc::new(AtomicU64::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = std::thread::spawn({
        let (peak, done) = (peak.clone(), done.clone());
        move || {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(rss(pid), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });

    // Unsigned (wrongly signed) deliveries, half with a Content-Length, half chunked; and API
    // requests without the token, each claiming 2 MiB.
    let wrong = orchestrator_github::sign(b"not the secret", b"{}");
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let addr = addr.clone();
            let wrong = wrong.clone();
            std::thread::spawn(move || {
                let chunked = i % 2 == 1;
                let length = if chunked {
                    "Transfer-Encoding: chunked\r\n".to_owned()
                } else {
                    format!("Content-Length: {BODY}\r\n")
                };
                let head = format!(
                    "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                     X-GitHub-Event: issues\r\nX-GitHub-Delivery: flood-{i}\r\n\
                     X-Hub-Signature-256: {wrong}\r\n{length}Connection: close\r\n\r\n"
                );
                send_slowly(&addr, &head, BODY, chunked)
            })
        })
        .chain((0..CLIENTS).map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let head = format!(
                    "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n",
                    2 * MIB
                );
                send_slowly(&addr, &head, 2 * MIB as usize, false)
            })
        }))
        .collect();
    let answers: Vec<String> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();

    let grown = peak.load(Ordering::SeqCst).saturating_sub(before);
    let sent = (CLIENTS * BODY) as u64;
    eprintln!(
        "serve's RSS: {} MiB before, grew by at most {} MiB while {} MiB of bodies were offered",
        before / MIB,
        grown / MIB,
        sent / MIB
    );
    // The budget for unverified deliveries is 64 MiB; unauthenticated API bodies are not read.
    // Twice the budget leaves room for the allocator and the runtime, and is still a small part
    // of what was offered (without the bounds, the daemon grew past 500 MiB).
    assert!(
        grown < 160 * MIB,
        "serve grew by {} MiB while strangers offered {} MiB",
        grown / MIB,
        sent / MIB
    );

    let (webhooks, api) = answers.split_at(CLIENTS);
    for answer in webhooks {
        // Refused for want of room (503) or read whole and refused for the signature (401);
        // some connections are cut before the answer is read (0).
        assert!(
            matches!(status(answer), 401 | 503 | 0),
            "{}",
            &answer[..answer.len().min(300)]
        );
    }
    assert!(
        webhooks.iter().any(|a| status(a) == 503),
        "the budget refused some deliveries"
    );
    for answer in api {
        assert!(matches!(status(answer), 401 | 0), "{answer}");
    }
    assert!(api.iter().any(|a| status(a) == 401));

    // Afterwards, a signed delivery is still taken and a badly signed one still refused.
    let signed = |body: &str, secret: &[u8]| {
        format!(
            "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             X-GitHub-Event: ping\r\nX-GitHub-Delivery: after\r\nX-Hub-Signature-256: {}\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            orchestrator_github::sign(secret, body.as_bytes()),
            body.len()
        )
    };
    let answer = send_slowly(&addr, &signed("{}", SECRET.as_bytes()), 0, false);
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(answer.contains("pong"), "{answer}");
    let answer = send_slowly(&addr, &signed("{}", b"wrong"), 0, false);
    assert_eq!(status(&answer), 401, "{answer}");
}
