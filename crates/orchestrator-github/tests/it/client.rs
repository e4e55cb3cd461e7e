//! The REST client against a local server that speaks GitHub's wire format: context reads with
//! pagination, rate limits on reads, writes sent once, and the marked comment that a retry edits.

use std::time::Duration;

use orchestrator_github::{ApiError, ClientConfig, CommentAction, GitHub, IssueRef, RepoRef};
use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};

const REPO: &str = "acme/widgets";

fn client(fake: &FakeGitHub) -> GitHub {
    let mut config = ClientConfig::new(fake.url(), Some(FAKE_TOKEN.to_owned()));
    config.timeout = Duration::from_secs(2);
    config.max_rate_wait = Duration::from_secs(5);
    GitHub::new(config).unwrap()
}

fn issue(number: u64) -> IssueRef {
    IssueRef::parse(&format!("{REPO}#{number}")).unwrap()
}

#[tokio::test]
async fn reads_an_issue_and_every_page_of_its_comments() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 7, "Crash on empty input", "Steps: run it", "alice");
    for n in 0..130 {
        fake.add_comment(REPO, 7, "bob", &format!("comment {n}"));
    }
    let github = client(&fake);
    let found = github.issue(&issue(7)).await.unwrap();
    assert_eq!(found.title, "Crash on empty input");
    assert_eq!(found.state, "open");
    assert_eq!(found.user.unwrap().login, "alice");
    let comments = github.issue_comments(&issue(7)).await.unwrap();
    assert_eq!(comments.len(), 130, "both pages are read");
    assert_eq!(comments[0].body.as_deref(), Some("comment 0"));
    assert_eq!(comments[129].body.as_deref(), Some("comment 129"));
    assert_eq!(comments[5].issue_number(), Some(7));
    let pages = fake.requests_to("GET", "/issues/7/comments");
    assert_eq!(pages.len(), 2);
    assert!(pages[1].query.contains("page=2"), "{:?}", pages[1]);
    for request in fake.requests() {
        assert_eq!(
            request.authorization.as_deref(),
            Some(format!("Bearer {FAKE_TOKEN}").as_str()),
            "every request carries the token"
        );
    }
}

#[tokio::test]
async fn reads_a_pull_request_its_files_and_its_diff() {
    let fake = FakeGitHub::start().await;
    let diff = "diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1 +1 @@\n-old\n+new\n";
    fake.add_issue(REPO, 9, "Fix the crash", "Closes #7", "carol");
    fake.make_pull(
        REPO,
        9,
        &[
            ("src/lib.rs", "modified", "@@ -1 +1 @@\n-old\n+new"),
            ("logo.png", "added", ""),
        ],
        diff,
    );
    let github = client(&fake);
    let pull = github.pull(&issue(9)).await.unwrap();
    assert_eq!(pull.head.name, "feature-9");
    assert_eq!(pull.base.name, "main");
    assert_eq!(pull.changed_files, Some(2));
    let files = github.pull_files(&issue(9)).await.unwrap();
    let names: Vec<&str> = files.iter().map(|f| f.filename.as_str()).collect();
    assert_eq!(names, ["src/lib.rs", "logo.png"]);
    assert_eq!(github.pull_diff(&issue(9)).await.unwrap(), diff);
    let diff_request = fake.requests_to("GET", "/pulls/9").pop().unwrap();
    assert_eq!(
        diff_request.accept.as_deref(),
        Some("application/vnd.github.diff")
    );
    // An issue is not a pull request.
    fake.add_issue(REPO, 10, "Just an issue", "", "dave");
    let err = github.pull(&issue(10)).await.unwrap_err();
    assert!(matches!(err, ApiError::NotFound { .. }), "{err}");
}

#[tokio::test]
async fn a_bad_token_and_a_missing_issue_are_clear_errors() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 1, "t", "b", "alice");
    let bad = GitHub::new(ClientConfig::new(fake.url(), Some("ghp_wrong".into()))).unwrap();
    let err = bad.issue(&issue(1)).await.unwrap_err();
    assert!(matches!(err, ApiError::Unauthorized(_)), "{err}");
    assert!(err.to_string().contains("GITHUB_TOKEN"), "{err}");
    assert!(
        !err.to_string().contains("ghp_wrong"),
        "the token is never echoed"
    );
    let err = client(&fake).issue(&issue(404)).await.unwrap_err();
    assert!(matches!(err, ApiError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("acme/widgets#404"), "{err}");
    assert!(!format!("{:?}", client(&fake)).contains(FAKE_TOKEN));
    let config = ClientConfig::new(fake.url(), Some(FAKE_TOKEN.into()));
    assert!(!format!("{config:?}").contains(FAKE_TOKEN), "{config:?}");
}

#[tokio::test]
async fn reads_wait_out_a_rate_limit_and_give_up_on_a_long_one() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 1, "t", "b", "alice");
    let github = client(&fake);
    // A primary limit that resets in a second, then a secondary one with retry-after.
    fake.rate_limit_next("GET", "/issues/1", 1, 1);
    fake.secondary_limit_next("GET", "/issues/1", 1, 1);
    let found = github.issue(&issue(1)).await.unwrap();
    assert_eq!(found.number, 1);
    assert_eq!(fake.requests_to("GET", "/issues/1").len(), 3);
    // A reset an hour away is longer than the client waits: it says so at once.
    fake.rate_limit_next("GET", "/issues/1", 1, 3600);
    let err = github.issue(&issue(1)).await.unwrap_err();
    match &err {
        ApiError::RateLimited { wait_secs, .. } => assert!(*wait_secs > 3000, "{err}"),
        other => panic!("expected a rate limit, got {other}"),
    }
    assert!(err.is_retryable());
    // A 502 on a read is tried again.
    fake.fail_next("GET", "/issues/1", 502, 1);
    assert_eq!(github.issue(&issue(1)).await.unwrap().number, 1);
}

#[tokio::test]
async fn a_secondary_limit_without_retry_after_is_waited_out_not_taken_for_a_refusal() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 1, "t", "b", "alice");
    let mut config = ClientConfig::new(fake.url(), Some(FAKE_TOKEN.to_owned()));
    config.secondary_limit_wait = Duration::from_millis(300);
    let github = GitHub::new(config).unwrap();
    fake.bare_secondary_limit_next("GET", "/issues/1", 1);
    assert_eq!(github.issue(&issue(1)).await.unwrap().number, 1);
    assert_eq!(fake.requests_to("GET", "/issues/1").len(), 2);
    // A write is still sent once: the caller learns to come back later, not that it lacks rights.
    fake.bare_secondary_limit_next("POST", "/issues/1/comments", 1);
    let err = github.create_comment(&issue(1), "hello").await.unwrap_err();
    assert!(matches!(err, ApiError::RateLimited { .. }), "{err}");
    assert!(err.is_retryable());
    // With the documented default, the wait is at least a minute.
    let mut config = ClientConfig::new(fake.url(), Some(FAKE_TOKEN.to_owned()));
    config.max_rate_wait = Duration::from_secs(5);
    let github = GitHub::new(config).unwrap();
    fake.bare_secondary_limit_next("GET", "/issues/1", 1);
    match github.issue(&issue(1)).await.unwrap_err() {
        ApiError::RateLimited { wait_secs, .. } => assert!(wait_secs >= 60, "{wait_secs}"),
        other => panic!("expected a rate limit, got {other}"),
    }
}

#[tokio::test]
async fn a_rejected_write_shows_githubs_details() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 1, "t", "b", "alice");
    let github = client(&fake);
    let err = github
        .create_comment(&issue(1), &"x".repeat(70_000))
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Invalid { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("body is too long (maximum is 65536 characters)"),
        "{text}"
    );
}

#[tokio::test]
async fn writes_are_sent_once_even_when_they_fail() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 1, "t", "b", "alice");
    let github = client(&fake);
    fake.fail_next("POST", "/issues/1/comments", 502, 1);
    let err = github.create_comment(&issue(1), "hello").await.unwrap_err();
    assert!(
        matches!(err, ApiError::WriteUncertain { .. }),
        "a 502 on a write may follow a write that landed: {err}"
    );
    fake.secondary_limit_next("POST", "/issues/1/comments", 1, 1);
    let err = github.create_comment(&issue(1), "hello").await.unwrap_err();
    assert!(matches!(err, ApiError::RateLimited { .. }), "{err}");
    assert_eq!(
        fake.requests_to("POST", "/issues/1/comments").len(),
        2,
        "one request per call: writes are never retried"
    );
    assert!(fake.comments(REPO, 1).is_empty());
}

#[tokio::test]
async fn a_marked_comment_retried_after_a_timeout_is_edited_not_posted_twice() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 3, "t", "b", "alice");
    // Someone else's comment quoting the marker must not be taken for ours.
    let marker = "<!-- orchestrator:task-42 -->";
    fake.add_comment(REPO, 3, "mallory", &format!("look: {marker}"));
    let github = client(&fake);
    // GitHub posts the comment but the answer comes after the client's timeout.
    fake.delay_next("POST", "/issues/3/comments", Duration::from_secs(5));
    let first = format!("{marker}\nWorking on it.");
    let err = github
        .upsert_marked_comment(&issue(3), marker, &first)
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::WriteUncertain { .. }), "{err}");
    assert!(err.to_string().contains("may or may not"), "{err}");
    assert_eq!(
        fake.comments(REPO, 3).len(),
        2,
        "the first write did happen"
    );

    let second = format!("{marker}\nDone: all gates pass.");
    let (comment, action) = github
        .upsert_marked_comment(&issue(3), marker, &second)
        .await
        .unwrap();
    assert_eq!(action, CommentAction::Edited);
    let comments = fake.comments(REPO, 3);
    assert_eq!(comments.len(), 2, "no second comment: {comments:?}");
    assert_eq!(comments[1].body, second);
    assert!(comments[1].updated);
    assert_eq!(
        comments[0].body,
        format!("look: {marker}"),
        "mallory's is untouched"
    );
    assert!(
        comment.html_url.contains("#issuecomment-"),
        "{}",
        comment.html_url
    );
    // The same text again sends nothing.
    let posts_before =
        fake.requests_to("POST", "/comments").len() + fake.requests_to("PATCH", "/comments").len();
    let (_, action) = github
        .upsert_marked_comment(&issue(3), marker, &second)
        .await
        .unwrap();
    assert_eq!(action, CommentAction::Unchanged);
    let posts_after =
        fake.requests_to("POST", "/comments").len() + fake.requests_to("PATCH", "/comments").len();
    assert_eq!(posts_before, posts_after);
    // A body without its marker is refused before anything is sent.
    let err = github
        .upsert_marked_comment(&issue(3), marker, "no marker")
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Invalid { .. }), "{err}");
}

#[tokio::test]
async fn a_configured_bot_login_stands_in_for_get_user() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 4, "t", "b", "alice");
    fake.set_viewer("orchestrator[bot]");
    // Installation tokens get 403 from GET /user.
    fake.fail_next("GET", "/user", 403, 100);
    let marker = "<!-- orchestrator:task-9 -->";
    let err = client(&fake)
        .upsert_marked_comment(&issue(4), marker, &format!("a {marker}"))
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Forbidden { .. }), "{err}");
    let github = client(&fake).with_viewer("orchestrator[bot]");
    github
        .upsert_marked_comment(&issue(4), marker, &format!("a {marker}"))
        .await
        .unwrap();
    let (_, action) = github
        .upsert_marked_comment(&issue(4), marker, &format!("b {marker}"))
        .await
        .unwrap();
    assert_eq!(action, CommentAction::Edited);
    assert_eq!(fake.comments(REPO, 4).len(), 1);
}

/// A comment under an older marker is taken over only when the caller's records name it: one
/// that is not among them (another store's, under the marker both used before) stays, and a new
/// comment is posted; one that is among them is edited to carry the new marker.
#[tokio::test]
async fn a_comment_of_an_older_marker_is_taken_over_only_when_recorded() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 6, "t", "b", "alice");
    fake.set_viewer("orchestrator-bot");
    let old = "<!-- orchestrator:task-3 -->";
    let new = "<!-- orchestrator:task-3 store:abc -->";
    let neighbours = fake.add_comment(REPO, 6, "orchestrator-bot", &format!("theirs {old}"));
    let github = client(&fake);
    let (made, action) = github
        .upsert_marked_comment_after(&issue(6), new, &format!("ours {new}"), Some((old, &[])))
        .await
        .unwrap();
    assert_eq!(action, CommentAction::Created);
    assert_ne!(made.id, neighbours);
    // On another issue, a comment under the older marker that the records name: edited.
    fake.add_issue(REPO, 7, "t", "b", "alice");
    let ours_before = fake.add_comment(REPO, 7, "orchestrator-bot", &format!("before {old}"));
    let (edited, action) = github
        .upsert_marked_comment_after(
            &issue(7),
            new,
            &format!("now {new}"),
            Some((old, &[ours_before])),
        )
        .await
        .unwrap();
    assert_eq!(action, CommentAction::Edited);
    assert_eq!(edited.id, ours_before);
    assert_eq!(fake.comments(REPO, 7).len(), 1);
    let bodies: Vec<String> = fake.comments(REPO, 6).into_iter().map(|c| c.body).collect();
    assert!(bodies.contains(&format!("theirs {old}")), "{bodies:?}");
}

#[tokio::test]
async fn closes_an_issue_with_a_reason_and_reads_permissions() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 5, "t", "b", "alice");
    fake.set_permission(REPO, "alice", "write");
    let github = client(&fake);
    let closed = github.close_issue(&issue(5), "completed").await.unwrap();
    assert_eq!(closed.state, "closed");
    assert_eq!(closed.state_reason.as_deref(), Some("completed"));
    assert_eq!(fake.issue(REPO, 5).state, "closed");
    let err = github.close_issue(&issue(5), "because").await.unwrap_err();
    assert!(matches!(err, ApiError::Invalid { .. }), "{err}");
    let repo = RepoRef::parse(REPO).unwrap();
    assert_eq!(github.permission(&repo, "alice").await.unwrap(), "write");
    fake.set_permission(REPO, "mona", "maintain");
    fake.set_permission(REPO, "tri", "triage");
    fake.set_permission(REPO, "rel", "release-manager");
    assert_eq!(github.permission(&repo, "mona").await.unwrap(), "write");
    assert_eq!(github.permission(&repo, "tri").await.unwrap(), "read");
    assert_eq!(
        github.permission(&repo, "rel").await.unwrap(),
        "write",
        "a custom role built on write"
    );
    assert_eq!(github.permission(&repo, "eve").await.unwrap(), "none");
    assert!(github.permission(&repo, "../x").await.is_err());
}

#[tokio::test]
async fn a_github_enterprise_base_keeps_its_path() {
    // GitHub Enterprise serves the API under /api/v3; the fake serves at the root, so a base
    // with a path must reach `{base}/repos/...`, which the fake answers with 404.
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 1, "t", "b", "alice");
    let github = GitHub::new(ClientConfig::new(
        format!("{}/api/v3", fake.url()),
        Some(FAKE_TOKEN.into()),
    ))
    .unwrap();
    let err = github.issue(&issue(1)).await.unwrap_err();
    assert!(matches!(err, ApiError::NotFound { .. }), "{err}");
    let request = fake.requests().pop().unwrap();
    assert_eq!(request.path, "/api/v3/repos/acme/widgets/issues/1");
}

#[tokio::test]
async fn a_base_path_that_prefixes_a_route_is_kept() {
    // A base whose path is a string prefix of the routes (`/re` of `/repos`, `/u` of `/user`)
    // must still be joined as a path segment.
    let fake = FakeGitHub::start().await;
    for base in ["/re", "/u", "/repos"] {
        let github = GitHub::new(ClientConfig::new(
            format!("{}{base}", fake.url()),
            Some(FAKE_TOKEN.into()),
        ))
        .unwrap();
        let _ = github.issue(&issue(1)).await;
        let request = fake.requests().pop().unwrap();
        assert_eq!(
            request.path,
            format!("{base}/repos/acme/widgets/issues/1"),
            "base {base}"
        );
    }
}

#[tokio::test]
async fn a_renamed_repository_is_followed_for_reads_and_for_writes_github_redirects_with_307() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 3, "Crash", "body", "alice");
    for n in 0..120 {
        fake.add_comment(REPO, 3, "bob", &format!("comment {n}"));
    }
    fake.rename_repo(REPO, "acme/gadgets");
    let github = client(&fake);
    // Reads by the old name: GitHub answers 301 to /repositories/{id}/..., pages included.
    assert_eq!(github.issue(&issue(3)).await.unwrap().title, "Crash");
    assert_eq!(github.issue_comments(&issue(3)).await.unwrap().len(), 120);
    // A write by the old name: GitHub answers 307, and the same POST with the same body goes on.
    let posted = github.create_comment(&issue(3), "on it").await.unwrap();
    assert_eq!(posted.body.as_deref(), Some("on it"));
    let comments = fake.comments("acme/gadgets", 3);
    assert_eq!(comments.last().unwrap().body, "on it");
    assert_eq!(comments.len(), 121, "posted once");
    let posts = fake.requests_to("POST", "/comments");
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert!(posts[0].path.starts_with("/repos/acme/widgets/"));
    assert!(posts[1].path.starts_with("/repositories/"));
    assert_eq!(posts[1].body, posts[0].body);
    // An edit (PATCH) is redirected the same way.
    let id = posted.id;
    github
        .edit_comment(&RepoRef::parse(REPO).unwrap(), id, "done")
        .await
        .unwrap();
    assert_eq!(
        fake.comments("acme/gadgets", 3).last().unwrap().body,
        "done"
    );
}

#[tokio::test]
async fn redirects_that_would_change_a_write_or_leave_github_are_not_followed() {
    let fake = FakeGitHub::start().await;
    fake.add_issue(REPO, 4, "Crash", "body", "alice");
    let github = client(&fake);
    // A 301 to a write would turn it into a GET elsewhere: refused, saying where it moved.
    let moved = format!("{}/repositories/9/issues/4/comments", fake.url());
    fake.redirect_next("POST", "/issues/4/comments", 1, 301, &moved);
    let err = github.create_comment(&issue(4), "x").await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("301") && text.contains(&moved), "{text}");
    assert!(fake.comments(REPO, 4).is_empty());
    assert_eq!(
        fake.requests_to("POST", "/comments").len(),
        1,
        "not sent again"
    );
    // Another origin never gets the token.
    fake.redirect_next(
        "GET",
        "/issues/4",
        1,
        301,
        "http://127.0.0.1:9/repos/acme/widgets/issues/4",
    );
    let err = github.issue(&issue(4)).await.unwrap_err().to_string();
    assert!(err.contains("token is not sent there"), "{err}");
    // A loop ends.
    let here = format!("{}/repos/{REPO}/issues/4", fake.url());
    fake.redirect_next("GET", "/issues/4", 20, 302, &here);
    let err = github.issue(&issue(4)).await.unwrap_err().to_string();
    assert!(err.contains("more than 5 redirects"), "{err}");
    // A relative Location is taken against the API's origin.
    let fake2 = FakeGitHub::start().await;
    fake2.add_issue(REPO, 4, "Relative", "", "alice");
    fake2.redirect_next(
        "GET",
        "/repos/acme/widgets/issues/4",
        1,
        307,
        "/repos/acme/widgets/issues/4?moved=1",
    );
    assert_eq!(
        client(&fake2).issue(&issue(4)).await.unwrap().title,
        "Relative"
    );
}

/// One HTTP/1.1 answer per connection from a listener on 127.0.0.1: `answer` makes it from the
/// request's head, and each head received is kept.
fn raw_server(
    answer: impl Fn(&str) -> String + Send + 'static,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = heads.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let body = answer(&head);
            kept.lock().unwrap().push(head);
            let _ = stream.write_all(body.as_bytes());
        }
    });
    (url, heads)
}

/// The token goes to the API's own origin only: a `Link` to the next page on another origin is
/// read without it (octocrab attached it by origin; the client must too).
#[tokio::test]
async fn the_token_never_goes_to_another_origin_a_link_names() {
    let (elsewhere, seen_elsewhere) = raw_server(|_| {
        let body = r#"[{"id": 2, "body": "second page", "html_url": "https://github.com/acme/widgets/issues/7#issuecomment-2", "user": {"login": "bob"}}]"#;
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    });
    let next = format!("{elsewhere}/repos/{REPO}/issues/7/comments?page=2");
    let (api, seen_api) = raw_server(move |_| {
        let body = r#"[{"id": 1, "body": "first page", "html_url": "https://github.com/acme/widgets/issues/7#issuecomment-1", "user": {"login": "ann"}}]"#;
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nlink: <{next}>; rel=\"next\"\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    });
    let mut config = ClientConfig::new(api, Some(FAKE_TOKEN.to_owned()));
    config.timeout = Duration::from_secs(5);
    let github = GitHub::new(config).unwrap();
    let comments = github.issue_comments(&issue(7)).await.unwrap();
    assert_eq!(comments.len(), 2, "both pages are read");
    let api_heads = seen_api.lock().unwrap().clone();
    assert!(
        api_heads[0].to_ascii_lowercase().contains(&format!(
            "authorization: bearer {}",
            FAKE_TOKEN.to_ascii_lowercase()
        )),
        "{api_heads:?}"
    );
    let other_heads = seen_elsewhere.lock().unwrap().clone();
    assert!(!other_heads.is_empty(), "the next page was read");
    assert!(
        other_heads
            .iter()
            .all(|h| !h.to_ascii_lowercase().contains("authorization")),
        "{other_heads:?}"
    );
}
