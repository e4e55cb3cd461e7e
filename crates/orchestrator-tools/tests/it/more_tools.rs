//! git_status, git_diff (and that a repository's config cannot make them run commands),
//! diagnostics and fetch_url (against a server on 127.0.0.1).

use std::process::Command;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use orchestrator_tools::Policy;

use crate::{Harness, assert_error, assert_ok};

fn git(dir: &std::path::Path, args: &[&str]) {
    orchestrator_test_support::require(orchestrator_test_support::Program::Git);
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

/// Arms a repository with every way its own config can make a git command run a program: an
/// fsmonitor hook, a hooks directory (post-index-change runs when status refreshes the index), an
/// external diff, a textconv driver and a clean filter (also one named so that `-c` could not
/// override it), each of which would create a file in `markers`.
fn arm_git_traps(repo: &std::path::Path, markers: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let script = |name: &str, body: &str| {
        let path = markers.join(format!("{name}.sh"));
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\ntouch '{}'\n{body}\n",
                markers.join(format!("{name}.ran")).display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    };
    let fsmonitor = script("fsmonitor", "");
    let hook = script("post-index-change", "");
    let external = script("external", "");
    let textconv = script("textconv", "cat \"$1\"");
    let clean = script("clean", "cat");
    let odd = script("odd-clean", "cat");
    std::fs::create_dir_all(repo.join(".git/hooks")).unwrap();
    std::fs::copy(&hook, repo.join(".git/hooks/post-index-change")).unwrap();
    git(repo, &["config", "core.fsmonitor", &fsmonitor]);
    git(repo, &["config", "diff.external", &external]);
    git(repo, &["config", "diff.trap.textconv", &textconv]);
    git(repo, &["config", "filter.trap.clean", &clean]);
    git(repo, &["config", "filter.a=b.c.clean", &odd]);
    std::fs::write(
        repo.join(".git/info/attributes"),
        "*.txt diff=trap filter=trap\n*.md filter=a=b.c\n",
    )
    .unwrap();
}

/// The programs [`arm_git_traps`] planted that ran.
fn traps_sprung(markers: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(markers)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ran"))
        .collect()
}

#[tokio::test]
async fn git_tools_run_nothing_a_repository_config_names() {
    let h = Harness::new();
    let markers = tempfile::tempdir().unwrap();
    git(h.ws.path(), &["init", "-q", "-b", "main"]);
    h.write("a.txt", "one\n");
    h.write("b.md", "# one\n");
    git(h.ws.path(), &["add", "."]);
    git(h.ws.path(), &["commit", "-q", "-m", "first"]);
    arm_git_traps(h.ws.path(), markers.path());
    // The traps work: git as a person runs it springs them.
    let plain = Command::new("git")
        .args(["diff"])
        .current_dir(h.ws.path())
        .output()
        .unwrap();
    assert!(!traps_sprung(markers.path()).is_empty(), "{plain:?}");
    for f in std::fs::read_dir(markers.path()).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "ran") {
            std::fs::remove_file(f).unwrap();
        }
    }
    h.write("a.txt", "two\n");
    h.write("b.md", "# two\n");
    let status = h.call("git_status", json!({})).await;
    let diff = h.call("git_diff", json!({})).await;
    let stat = h.call("git_diff", json!({"stat": true})).await;
    let base = h.call("git_diff", json!({"base": "HEAD"})).await;
    // Staging is the person's own git, with the traps defused.
    let staged = Command::new("git")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
        ])
        .args(["add", "a.txt"])
        .env("GIT_CONFIG_COUNT", "2")
        .env("GIT_CONFIG_KEY_0", "filter.trap.clean")
        .env("GIT_CONFIG_VALUE_0", "")
        .env("GIT_CONFIG_KEY_1", "filter.a=b.c.clean")
        .env("GIT_CONFIG_VALUE_1", "")
        .current_dir(h.ws.path())
        .status()
        .unwrap();
    assert!(staged.success());
    assert_eq!(traps_sprung(markers.path()), Vec::<String>::new());
    let staged = h.call("git_diff", json!({"staged": true})).await;
    assert_eq!(traps_sprung(markers.path()), Vec::<String>::new());
    let text = assert_ok(&status);
    assert!(text.contains("modified: a.txt"), "{text}");
    let text = assert_ok(&diff);
    assert!(
        text.contains("-one\n+two") && text.contains("+# two"),
        "{text}"
    );
    assert!(assert_ok(&stat).contains("2 files changed"));
    assert!(assert_ok(&base).contains("-one\n+two"));
    assert!(assert_ok(&staged).contains("-one\n+two"));
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

/// A harness whose policy lets fetch_url reach these hosts on private addresses.
fn listing(hosts: &[String]) -> Harness {
    let mut h = Harness::new();
    let mut policy = Policy::allow_all();
    policy.network_hosts = hosts.to_vec();
    h.ctx = h.ctx.clone().with_policy(policy).unwrap();
    h
}

/// A listener on 127.0.0.1 that nobody serves: whether anything connected to it shows whether a
/// refused fetch was refused before connecting.
fn silent_listener() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

#[track_caller]
fn assert_never_connected(listener: &std::net::TcpListener) {
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("something connected: {other:?}"),
    }
}

#[tokio::test]
async fn fetch_url_from_a_listed_local_server() {
    let html =
        "<html><body><h1>Title</h1><script>evil()</script><p>Hello &amp; welcome</p></body></html>";
    let port = serve(vec![
        "HTTP/1.1 302 Found\r\nLocation: /page\r\nContent-Length: 0\r\n\r\n".to_owned(),
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{html}", html.len()),
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n7\r\n{\"a\":1}\r\n0\r\n\r\n".to_owned(),
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nnope".to_owned(),
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n{}", "x".repeat(100)),
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 4\r\n\r\n\u{1}\u{2}\u{3}\u{4}".to_owned(),
    ])
    .await;
    let h = listing(&[format!("127.0.0.1:{port}")]);
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
    let r = h
        .call(
            "fetch_url",
            json!({"url": format!("http://127.0.0.1:{port}/big"), "max_bytes": 10}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(
        text.contains(&format!(
            "{}\n[... the body was cut at 10 bytes",
            "x".repeat(10)
        )),
        "{text}"
    );
    assert_eq!(r.metadata["http"]["truncated"], true);
    assert_error(
        &h.call(
            "fetch_url",
            json!({"url": format!("http://127.0.0.1:{port}/bin")}),
        )
        .await,
        &["binary"],
    );
    let port = serve(
        (0..6)
            .map(|i| {
                format!("HTTP/1.1 302 Found\r\nLocation: /hop{i}\r\nContent-Length: 0\r\n\r\n")
            })
            .collect(),
    )
    .await;
    let h = listing(&[format!("127.0.0.1:{port}")]);
    assert_error(
        &h.call(
            "fetch_url",
            json!({"url": format!("http://127.0.0.1:{port}/")}),
        )
        .await,
        &["more than 5 redirects", "/hop5"],
    );
}

#[tokio::test]
async fn fetch_url_speaks_tls_to_https_urls() {
    // A plain-http server answers a TLS handshake with garbage: the failure shows that https is
    // spoken, without leaving this machine.
    let port = serve(vec![
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi".to_owned(),
    ])
    .await;
    let h = listing(&[format!("127.0.0.1:{port}")]);
    let r = h
        .call(
            "fetch_url",
            json!({"url": format!("https://127.0.0.1:{port}/")}),
        )
        .await;
    assert_error(&r, &["fetch_url https://127.0.0.1"]);
    assert!(
        !r.joined_text().contains("http:// only"),
        "{}",
        r.joined_text()
    );
}

#[tokio::test]
async fn fetch_url_refuses_this_machine_unless_listed() {
    let (listener, port) = silent_listener();
    let h = Harness::new();
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://127.1:{port}/"),
        format!("http://2130706433:{port}/"),
        format!("http://[::1]:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://0.0.0.0:{port}/"),
    ] {
        let r = h.call("fetch_url", json!({"url": url})).await;
        assert_error(&r, &["is refused", "network_hosts"]);
    }
    // A name that resolves to this machine is refused after resolution.
    let r = h
        .call(
            "fetch_url",
            json!({"url": format!("http://localhost:{port}/")}),
        )
        .await;
    assert_error(
        &r,
        &[
            "localhost resolves to",
            "127.0.0.1",
            "loopback",
            "network_hosts",
        ],
    );
    assert_never_connected(&listener);
    // Listing another port of the host does not list this one.
    let h = listing(&[format!("127.0.0.1:{}", port.wrapping_add(1))]);
    let r = h
        .call(
            "fetch_url",
            json!({"url": format!("http://127.0.0.1:{port}/")}),
        )
        .await;
    assert_error(&r, &["is refused", "loopback"]);
    assert_never_connected(&listener);
    // Listing the name lets it through, on any port when none is given.
    let port = serve(vec![
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nlocal".to_owned(),
    ])
    .await;
    let h = listing(&["LOCALHOST".to_owned()]);
    let text = assert_ok(
        &h.call(
            "fetch_url",
            json!({"url": format!("http://localhost:{port}/")}),
        )
        .await,
    );
    assert!(text.contains("local"), "{text}");
}

#[tokio::test]
async fn fetch_url_refuses_metadata_and_private_addresses_before_connecting() {
    let h = Harness::new();
    for (url, why) in [
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://0251.0376.0251.0376/", "metadata"),
        ("http://[fd00:ec2::254]/", "private"),
        ("http://[fe80::1]/", "link-local"),
        ("http://10.1.2.3/", "private"),
        ("http://172.16.0.1/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://100.100.100.200/", "carrier-grade NAT"),
        ("http://224.0.0.1/", "multicast"),
        ("http://255.255.255.255/", "broadcast"),
        ("http://[64:ff9b::a9fe:a9fe]/", "metadata"),
        (
            "http://metadata.google.internal/computeMetadata/v1/",
            "metadata",
        ),
        ("http://METADATA.GOOGLE.INTERNAL./", "metadata"),
    ] {
        // The timeout is the shortest there is: a refusal must not wait on a connection.
        let r = h.call("fetch_url", json!({"url": url, "timeout": 1})).await;
        assert_error(&r, &["is refused", why, "network_hosts"]);
    }
}

#[tokio::test]
async fn fetch_url_checks_every_redirect() {
    let (listener, silent) = silent_listener();
    let port = serve(vec![
        format!("HTTP/1.1 302 Found\r\nLocation: http://localhost:{silent}/secret\r\nContent-Length: 0\r\n\r\n"),
        format!("HTTP/1.1 301 Moved\r\nLocation: http://127.0.0.1:{silent}/secret\r\nContent-Length: 0\r\n\r\n"),
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://169.254.169.254/latest/meta-data/\r\nContent-Length: 0\r\n\r\n".to_owned(),
        "HTTP/1.1 302 Found\r\nLocation: http://10.0.0.1/\r\nContent-Length: 0\r\n\r\n".to_owned(),
        "HTTP/1.1 302 Found\r\nLocation: gopher://127.0.0.1/\r\nContent-Length: 0\r\n\r\n".to_owned(),
    ])
    .await;
    let h = listing(&[format!("127.0.0.1:{port}")]);
    for why in [
        "localhost resolves to",
        "loopback",
        "metadata",
        "private",
        "http and https",
    ] {
        let r = h
            .call(
                "fetch_url",
                json!({"url": format!("http://127.0.0.1:{port}/start")}),
            )
            .await;
        assert_error(&r, &["redirect", why]);
    }
    assert_never_connected(&listener);
}

#[tokio::test]
async fn fetch_url_refuses_control_characters_and_bad_urls() {
    let h = Harness::new();
    for (url, why) in [
        ("http://example.com/a\r\nX-Injected: 1", "control character"),
        ("http://example.com/a\tb", "control character"),
        ("http://exa\u{0}mple.com/", "control character"),
        ("http://example.com/a b", "whitespace"),
        ("http://example.com/a\u{85}b", "control character"),
        ("ftp://example.com/", "http and https"),
        ("file:///etc/passwd", "http and https"),
        ("http://user:pass@example.com/", "credentials"),
        ("not a url", "whitespace"),
        ("example.com", "not a valid URL"),
    ] {
        let r = h.call("fetch_url", json!({"url": url})).await;
        assert_error(&r, &[why]);
    }
}

#[tokio::test]
async fn think_runs_nothing_and_refuses_nothing_to_say() {
    let h = Harness::new();
    let r = h
        .call(
            "think",
            json!({"thought": "Check the parser before the writer."}),
        )
        .await;
    assert!(!r.is_error);
    assert_eq!(r.joined_text(), "Noted.");
    assert_eq!(std::fs::read_dir(h.ws.path()).unwrap().count(), 0);
    assert_error(&h.call("think", json!({"thought": "  "})).await, &["empty"]);
}

#[tokio::test]
async fn insert_text_puts_lines_after_a_line_and_keeps_line_endings() {
    let h = Harness::new();
    h.write("a.txt", "one\r\ntwo\r\nthree");
    h.call("read_file", json!({"path": "a.txt"})).await;
    let r = h
        .call(
            "insert_text",
            json!({"path": "a.txt", "after_line": 1, "text": "one and a half"}),
        )
        .await;
    assert!(!r.is_error, "{}", r.joined_text());
    assert!(
        r.joined_text().contains("now lines 2 to 2"),
        "{}",
        r.joined_text()
    );
    assert_eq!(h.read("a.txt"), "one\r\none and a half\r\ntwo\r\nthree");
    // At the top, and after a last line without a newline.
    h.call(
        "insert_text",
        json!({"path": "a.txt", "after_line": 0, "text": "zero\n"}),
    )
    .await;
    let r = h
        .call(
            "insert_text",
            json!({"path": "a.txt", "after_line": 5, "text": "four\nfive\n"}),
        )
        .await;
    assert!(!r.is_error, "{}", r.joined_text());
    assert_eq!(
        h.read("a.txt"),
        "zero\r\none\r\none and a half\r\ntwo\r\nthree\r\nfour\r\nfive\r\n"
    );
    // Past the end, a stale file, a missing one: refused, nothing changed.
    let before = h.read("a.txt");
    assert_error(
        &h.call(
            "insert_text",
            json!({"path": "a.txt", "after_line": 99, "text": "x"}),
        )
        .await,
        &["has 7 lines", "between 0 and 7"],
    );
    std::fs::write(h.ws.path().join("a.txt"), "changed by someone\n").unwrap();
    assert_error(
        &h.call(
            "insert_text",
            json!({"path": "a.txt", "after_line": 1, "text": "x"}),
        )
        .await,
        &["changed since you last read it"],
    );
    assert_ne!(h.read("a.txt"), before);
    assert_eq!(h.read("a.txt"), "changed by someone\n");
    assert_error(
        &h.call(
            "insert_text",
            json!({"path": "nope.txt", "after_line": 0, "text": "x"}),
        )
        .await,
        &["nope.txt"],
    );
    assert_error(
        &h.call(
            "insert_text",
            json!({"path": "../escape.txt", "after_line": 0, "text": "x"}),
        )
        .await,
        &[],
    );
}

#[tokio::test]
async fn skills_are_listed_with_their_descriptions_and_read_by_name() {
    let h = Harness::new();
    let r = h.call("skill", json!({})).await;
    assert!(r.joined_text().contains("no skills"), "{}", r.joined_text());
    h.write(
        ".agents/skills/release.md",
        "---\nname: release\ndescription: How to cut a release\n---\n\n1. Bump the version.\n",
    );
    h.write(
        ".agents/skills/migrate.md",
        "# Adding a migration\n\nNever edit a landed one.\n",
    );
    h.write(".agents/skills/notes.txt", "not a skill\n");
    let r = h.call("skill", json!({})).await;
    let text = r.joined_text();
    assert!(
        text.starts_with("migrate: Adding a migration\nrelease: How to cut a release\n"),
        "{text}"
    );
    assert!(!text.contains("notes"), "{text}");
    let r = h.call("read_skill", json!({"name": "release"})).await;
    assert!(
        r.joined_text().contains("Bump the version."),
        "{}",
        r.joined_text()
    );
    assert_error(
        &h.call("read_skill", json!({"name": "deploy"})).await,
        &["no skill \"deploy\""],
    );
    assert_error(
        &h.call("read_skill", json!({"name": "../../etc/passwd"}))
            .await,
        &["not a skill name"],
    );
}

/// A 1x1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

#[tokio::test]
async fn view_image_shows_an_image_and_refuses_what_it_cannot_show() {
    let mut h = Harness::new();
    std::fs::write(h.ws.path().join("shot.png"), PNG).unwrap();
    let r = h.call("view_image", json!({"path": "shot.png"})).await;
    assert_eq!(
        assert_ok(&r).lines().next().unwrap(),
        "Image shot.png (image/png, 67 B); it follows."
    );
    match &r.content[1] {
        orchestrator_tools::Content::Image { media_type, data } => {
            assert_eq!(media_type, "image/png");
            assert!(data.starts_with("iVBORw0KGgo"), "{data}");
        }
        other => panic!("{other:?}"),
    }
    h.write("notes.txt", "not an image");
    let r = h.call("view_image", json!({"path": "notes.txt"})).await;
    assert_error(&r, &["not a png, jpeg, gif or webp image"]);
    let mut big = PNG.to_vec();
    big.resize(4 * 1024 * 1024 + 1, 0);
    std::fs::write(h.ws.path().join("big.png"), big).unwrap();
    let r = h.call("view_image", json!({"path": "big.png"})).await;
    assert_error(&r, &["over the 4.0 MB an image may have"]);
    let r = h.call("view_image", json!({"path": "../escape.png"})).await;
    assert!(r.is_error);
    // A model that does not take images is told so, and how a person says it does.
    h.ctx = h.ctx.clone().with_model_images("small-local", false);
    let r = h.call("view_image", json!({"path": "shot.png"})).await;
    assert_error(
        &r,
        &[
            "the model small-local does not take images",
            "`images = true` under [models.\"small-local\"]",
        ],
    );
}
