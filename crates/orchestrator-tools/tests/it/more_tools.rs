//! git_status, git_diff (and that a repository's config cannot make them run commands),
//! diagnostics and fetch_url (against a server on 127.0.0.1).

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
