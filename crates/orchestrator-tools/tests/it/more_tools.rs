//! git_status, git_diff, diagnostics and fetch_url (against a server on 127.0.0.1).

use std::process::Command;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Harness, assert_error, assert_ok};

fn git(dir: &std::path::Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git is required");
    assert!(ok.success(), "git {args:?}");
}

#[tokio::test]
async fn git_status_and_diff() {
    let h = Harness::new();
    assert_error(
        &h.call("git_status", json!({})).await,
        &["not a git repository"],
    );
    git(h.ws.path(), &["init", "-q", "-b", "main"]);
    h.write("a.txt", "one\n");
    git(h.ws.path(), &["add", "."]);
    git(h.ws.path(), &["commit", "-q", "-m", "first"]);
    h.write("a.txt", "two\n");
    h.write("new.txt", "n\n");
    let text = assert_ok(&h.call("git_status", json!({})).await);
    assert!(
        text.contains("Branch: main")
            && text.contains("Unstaged (1):\n  modified: a.txt")
            && text.contains("Untracked (1):\n  new.txt"),
        "{text}"
    );
    let diff = assert_ok(&h.call("git_diff", json!({})).await);
    assert!(diff.contains("-one\n+two"), "{diff}");
    let staged = assert_ok(&h.call("git_diff", json!({"staged": true})).await);
    assert!(staged.starts_with("No staged changes"), "{staged}");
    assert_error(
        &h.call("git_diff", json!({"base": "--output=/tmp/x"})).await,
        &["not a valid revision"],
    );
    let stat = assert_ok(
        &h.call("git_diff", json!({"base": "HEAD", "stat": true}))
            .await,
    );
    assert!(
        stat.contains("a.txt") && stat.contains("1 file changed"),
        "{stat}"
    );
}

#[tokio::test]
async fn diagnostics_counts_python_errors() {
    let h = Harness::new();
    h.write("ok.py", "x = 1\n");
    h.write("bad.py", "def f(:\n    pass\n");
    let r = h.call("diagnostics", json!({})).await;
    let text = assert_ok(&r);
    assert_eq!(r.metadata["diagnostics"]["kind"], "python", "{text}");
    assert!(
        r.metadata["diagnostics"]["errors"].as_u64().unwrap() >= 1,
        "{text}"
    );
    let empty = Harness::new();
    assert_error(
        &empty.call("diagnostics", json!({})).await,
        &["no project found"],
    );
}

/// Serves a few canned responses, one per connection, then stops.
async fn serve(responses: Vec<String>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        for resp in responses {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let mut buf = vec![0u8; 4096];
            let _ = sock.read(&mut buf).await;
            let _ = sock.write_all(resp.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
    });
    port
}

#[tokio::test]
async fn fetch_url_from_a_local_server() {
    let h = Harness::new();
    let html =
        "<html><body><h1>Title</h1><script>evil()</script><p>Hello &amp; welcome</p></body></html>";
    let port = serve(vec![
        "HTTP/1.1 302 Found\r\nLocation: /page\r\nContent-Length: 0\r\n\r\n".to_owned(),
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{html}", html.len()),
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n7\r\n{\"a\":1}\r\n0\r\n\r\n".to_owned(),
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nnope".to_owned(),
    ])
    .await;
    let r = h
        .call(
            "fetch_url",
            json!({"url": format!("http://127.0.0.1:{port}/start")}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(
        text.contains("Hello & welcome") && text.contains("Title") && !text.contains("evil"),
        "{text}"
    );
    assert!(
        r.metadata["http"]["url"]
            .as_str()
            .unwrap()
            .ends_with("/page")
    );
    let text = assert_ok(
        &h.call(
            "fetch_url",
            json!({"url": format!("http://127.0.0.1:{port}/json")}),
        )
        .await,
    );
    assert!(text.contains("{\"a\":1}"), "{text}");
    assert_error(
        &h.call(
            "fetch_url",
            json!({"url": format!("http://127.0.0.1:{port}/missing")}),
        )
        .await,
        &["HTTP 404", "nope"],
    );
    assert_error(
        &h.call("fetch_url", json!({"url": "https://example.com/"}))
            .await,
        &["http:// only", "curl"],
    );
}
