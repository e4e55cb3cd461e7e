//! GitHub triggers end to end: `serve` with a webhook secret and trigger rules, deliveries posted
//! to /webhooks/github over real HTTP, and a fake GitHub on 127.0.0.1 for the calls the daemon
//! makes (permissions, the bot's login, polling).

use crate::support::{Env, Serve, http_post, wait_for};
use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
use serde_json::{Value, json};

pub(crate) const SECRET: &str = "It's a Secret to Everybody";
pub(crate) const REPO: &str = "acme/widgets";

fn write_config(env: &Env, extra: &str) {
    let config = format!(
        r#"
[github]
bot_login = "orchestrator-bot"
{extra}

[[github.trigger]]
name = "agent-fix"
event = "issues.labeled"
label = "agent-fix"
repos = ["{REPO}"]
task = {{ title = "Fix {{repo}}#{{number}}: {{title}}" }}

[[github.trigger]]
name = "review"
event = "pull_request.opened"
repos = ["{REPO}"]
task = {{ title = "Review {{repo}}#{{number}}" }}

[[github.trigger]]
name = "mention"
event = "issue_comment.created"
repos = ["{REPO}"]
task = {{ title = "Asked on {{repo}}#{{number}} by {{sender}}" }}
"#
    );
    std::fs::write(env.home().join("config.toml"), config).unwrap();
}

pub(crate) fn serve(env: &Env, fake: &FakeGitHub) -> Serve {
    let url = fake.url();
    env.serve_with_env(
        &["--workers", "1"],
        &[
            ("ORCHESTRATOR_GITHUB_WEBHOOK_SECRET", SECRET),
            ("ORCHESTRATOR_GITHUB_API_URL", url.as_str()),
            ("GITHUB_TOKEN", FAKE_TOKEN),
        ],
    )
}

/// The ledger's row of a delivery, once it is no longer queued or being processed.
fn settled(env: &Env, delivery: &str) -> Value {
    let row = std::cell::RefCell::new(Value::Null);
    wait_for(|| {
        let ledger = env.json(&["github", "deliveries", "--json"]);
        let found = ledger
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == delivery)
            .cloned()
            .unwrap_or(Value::Null);
        let done =
            ["processed", "ignored", "failed"].contains(&found["status"].as_str().unwrap_or(""));
        *row.borrow_mut() = found;
        done
    });
    let mut row = row.into_inner();
    row["tasks"] = row["task_ids"].clone();
    row
}

/// Posts a delivery. The daemon answers 202 once it is recorded and processes it in the
/// background; this waits for the ledger to say what it came to and returns that row's status,
/// tasks and detail (a duplicate is answered at once, and returned as answered).
pub(crate) fn deliver(
    env: &Env,
    serve: &Serve,
    event: &str,
    delivery: &str,
    body: &Value,
) -> (u16, Value) {
    let (status, answer) = post_delivery(serve, event, delivery, body);
    if answer["status"] != "accepted" {
        return (status, answer);
    }
    assert_eq!(status, 202, "{answer}");
    (status, settled(env, delivery))
}

fn post_delivery(serve: &Serve, event: &str, delivery: &str, body: &Value) -> (u16, Value) {
    let bytes = body.to_string().into_bytes();
    let signature = orchestrator_github::sign(SECRET.as_bytes(), &bytes);
    let (status, text) = http_post(
        &serve.addr,
        "/webhooks/github",
        &[
            ("X-GitHub-Event", event),
            ("X-GitHub-Delivery", delivery),
            ("X-Hub-Signature-256", &signature),
        ],
        &bytes,
    );
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A delivery as GitHub sends it by default: `application/x-www-form-urlencoded`, the JSON in the
/// `payload` field, the signature over the encoded body.
fn deliver_form(
    env: &Env,
    serve: &Serve,
    event: &str,
    delivery: &str,
    body: &Value,
) -> (u16, Value) {
    let mut bytes = b"payload=".to_vec();
    for byte in body.to_string().bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => bytes.push(byte),
            b' ' => bytes.push(b'+'),
            other => bytes.extend_from_slice(format!("%{other:02X}").as_bytes()),
        }
    }
    let signature = orchestrator_github::sign(SECRET.as_bytes(), &bytes);
    let (status, text) = http_post(
        &serve.addr,
        "/webhooks/github",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("X-GitHub-Event", event),
            ("X-GitHub-Delivery", delivery),
            ("X-Hub-Signature-256", &signature),
        ],
        &bytes,
    );
    let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if answer["status"] != "accepted" {
        return (status, answer);
    }
    (status, settled(env, delivery))
}

#[test]
fn a_form_encoded_delivery_is_taken_like_a_json_one() {
    let env = Env::sqlite();
    write_config(&env, "");
    let fake = FakeGitHub::start_blocking();
    fake.set_permission(REPO, "alice", "write");
    let serve = serve(&env, &fake);
    // serve names its GitHub setup at start, as it names its notification sinks.
    wait_for(|| serve.log().contains("GitHub at "));
    let log = serve.log();
    let line = log
        .lines()
        .find(|l| l.contains("GitHub at "))
        .unwrap_or_default();
    for expected in [
        format!("GitHub at {} as orchestrator-bot", fake.url()),
        format!("trigger rules agent-fix (issues.labeled agent-fix on {REPO})"),
        format!("review (pull_request.opened on {REPO})"),
        format!("webhooks at http://{}/webhooks/github", serve.addr),
    ] {
        assert!(line.contains(&expected), "{expected:?} missing from {line}");
    }
    let (status, answer) = deliver_form(
        &env,
        &serve,
        "issues",
        "d-form",
        &labeled(9, "agent-fix", "alice"),
    );
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["status"], "processed", "{answer}");
    assert_eq!(answer["tasks"].as_array().unwrap().len(), 1, "{answer}");
    // A form without the payload field is refused with the reason, as JSON.
    let bytes = b"other=1".to_vec();
    let signature = orchestrator_github::sign(SECRET.as_bytes(), &bytes);
    let (status, text) = http_post(
        &serve.addr,
        "/webhooks/github",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("X-GitHub-Event", "issues"),
            ("X-GitHub-Delivery", "d-form-2"),
            ("X-Hub-Signature-256", &signature),
        ],
        &bytes,
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("payload"), "{text}");
}

pub(crate) fn labeled(number: u64, label: &str, sender: &str) -> Value {
    json!({
        "action": "labeled",
        "label": {"name": label},
        "issue": {"number": number, "title": "Crash on empty input", "html_url": format!("https://github.com/{REPO}/issues/{number}")},
        "repository": {"full_name": REPO},
        "sender": {"login": sender},
    })
}

pub(crate) fn comment(number: u64, body: &str, sender: &str) -> Value {
    json!({
        "action": "created",
        "comment": {"id": 77, "body": body, "user": {"login": sender}},
        "issue": {"number": number, "title": "Crash", "html_url": format!("https://github.com/{REPO}/issues/{number}")},
        "repository": {"full_name": REPO},
        "sender": {"login": sender},
    })
}

#[test]
fn webhook_signatures_are_checked_over_the_raw_body() {
    let env = Env::sqlite();
    write_config(&env, "");
    let fake = FakeGitHub::start_blocking();
    let serve = serve(&env, &fake);
    // GitHub's published test vector.
    let body = b"Hello, World!";
    let vector = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let post = |body: &[u8], signature: Option<&str>| {
        let mut headers = vec![("X-GitHub-Event", "ping"), ("X-GitHub-Delivery", "d-ping")];
        if let Some(s) = signature {
            headers.push(("X-Hub-Signature-256", s));
        }
        http_post(&serve.addr, "/webhooks/github", &headers, body)
    };
    let (status, text) = post(body, Some(vector));
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("pong"), "{text}");
    let (status, text) = post(b"Hello, World?", Some(vector));
    assert_eq!(status, 401, "one changed byte: {text}");
    assert!(text.contains("does not match"), "{text}");
    let wrong = orchestrator_github::sign(b"another secret", body);
    assert_eq!(post(body, Some(&wrong)).0, 401, "a wrong secret");
    let (status, text) = post(body, None);
    assert_eq!(status, 401, "no header");
    assert!(text.contains("missing"), "{text}");
    assert_eq!(post(body, Some("sha1=abc")).0, 401, "a malformed header");
    // The route needs no bearer token, but nothing else changed: the API still does.
    let (status, _) = crate::support::http_get(&serve.addr, "/api/approvals", None);
    assert_eq!(status, 401);
}

#[test]
fn a_delivery_sent_twice_creates_one_task_and_the_bots_own_events_none() {
    let env = Env::sqlite();
    write_config(&env, "");
    let fake = FakeGitHub::start_blocking();
    fake.set_permission(REPO, "alice", "write");
    let serve = serve(&env, &fake);
    let (status, first) = deliver(
        &env,
        &serve,
        "issues",
        "d-1",
        &labeled(7, "agent-fix", "alice"),
    );
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["status"], "processed", "{first}");
    let created = first["tasks"].as_array().unwrap().clone();
    assert_eq!(created.len(), 1, "{first}");
    let (status, again) = deliver(
        &env,
        &serve,
        "issues",
        "d-1",
        &labeled(7, "agent-fix", "alice"),
    );
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["status"], "duplicate", "{again}");
    assert_eq!(again["tasks"], Value::Array(created.clone()));
    let tasks = env.tasks();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert_eq!(
        tasks[0]["title"],
        "Fix acme/widgets#7: Crash on empty input"
    );

    // Another label, the bot's own labeling, and an unknown event create nothing.
    let (_, other) = deliver(
        &env,
        &serve,
        "issues",
        "d-2",
        &labeled(7, "question", "alice"),
    );
    assert_eq!(other["tasks"], json!([]), "{other}");
    let (_, own) = deliver(
        &env,
        &serve,
        "issues",
        "d-3",
        &labeled(8, "agent-fix", "orchestrator-bot"),
    );
    assert_eq!(own["tasks"], json!([]), "{own}");
    assert!(own["detail"].as_str().unwrap().contains("bot"), "{own}");
    assert_eq!(env.tasks().len(), 1);

    // A pull request opened on the repository the review rule names.
    let opened = json!({
        "action": "opened",
        "pull_request": {"number": 31, "title": "Fix", "html_url": format!("https://github.com/{REPO}/pull/31")},
        "repository": {"full_name": REPO},
        "sender": {"login": "carol"},
    });
    // From someone without write access (a fork's pull request), it triggers nothing.
    let (_, untrusted) = deliver(&env, &serve, "pull_request", "d-4", &opened);
    assert_eq!(untrusted["tasks"], json!([]), "{untrusted}");
    assert!(
        untrusted["detail"].as_str().unwrap().contains("not write"),
        "{untrusted}"
    );
    fake.set_permission(REPO, "carol", "write");
    let mut trusted = opened.clone();
    trusted["pull_request"]["number"] = json!(32);
    let (_, review) = deliver(&env, &serve, "pull_request", "d-4b", &trusted);
    assert_eq!(review["tasks"].as_array().unwrap().len(), 1, "{review}");
    let mut elsewhere = opened.clone();
    elsewhere["repository"]["full_name"] = json!("acme/other");
    let (_, other_repo) = deliver(&env, &serve, "pull_request", "d-5", &elsewhere);
    assert_eq!(other_repo["tasks"], json!([]), "{other_repo}");
    let titles: Vec<String> = env
        .tasks()
        .iter()
        .map(|t| t["title"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        titles.contains(&"Review acme/widgets#32".to_owned()),
        "{titles:?}"
    );

    let ledger = env.json(&["github", "deliveries", "--json"]);
    let rows = ledger.as_array().unwrap();
    assert_eq!(rows.len(), 6, "{ledger}");
    let first_row = rows.iter().find(|r| r["id"] == "d-1").unwrap();
    assert_eq!(first_row["status"], "processed");
    let own_row = rows.iter().find(|r| r["id"] == "d-3").unwrap();
    assert_eq!(own_row["status"], "ignored");
}

#[test]
fn a_label_counts_only_from_someone_with_write_access_unless_the_rule_says_any_author() {
    let env = Env::sqlite();
    write_config(
        &env,
        r#"
[[github.trigger]]
name = "triage"
event = "issues.labeled"
label = "triage"
repos = ["*"]
any_author = true
task = { title = "Triage {repo}#{number} for {sender}" }
"#,
    );
    let fake = FakeGitHub::start_blocking();
    fake.set_permission(REPO, "admin-ann", "admin");
    fake.set_permission(REPO, "maintainer-max", "maintain");
    fake.set_permission(REPO, "triager-tom", "triage");
    fake.set_permission(REPO, "reader-rita", "read");
    let serve = serve(&env, &fake);
    let mut created = 0;
    for (n, sender, triggers) in [
        (1, "admin-ann", true),
        (2, "maintainer-max", true),
        (3, "triager-tom", false),
        (4, "reader-rita", false),
        (5, "stranger-sam", false),
    ] {
        let delivery = format!("d-label-{n}");
        let (status, answer) = deliver(
            &env,
            &serve,
            "issues",
            &delivery,
            &labeled(n, "agent-fix", sender),
        );
        assert_eq!(status, 202, "{answer}");
        let tasks = answer["tasks"].as_array().unwrap().len();
        if triggers {
            assert_eq!(tasks, 1, "{sender}: {answer}");
            created += 1;
        } else {
            assert_eq!(tasks, 0, "{sender} has no write access: {answer}");
            let ledger = env.json(&["github", "deliveries", "--json"]);
            let row = ledger
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == delivery.as_str())
                .unwrap()
                .clone();
            assert_eq!(row["status"], "ignored", "{row}");
            let detail = row["detail"].as_str().unwrap();
            assert!(
                detail.contains(&format!("{sender} has")) && detail.contains("not write"),
                "the ledger says why: {detail}"
            );
        }
        assert_eq!(env.tasks().len(), created);
    }
    // The rule that says any_author takes a reader's label.
    let (_, triage) = deliver(
        &env,
        &serve,
        "issues",
        "d-label-6",
        &labeled(6, "triage", "reader-rita"),
    );
    assert_eq!(triage["tasks"].as_array().unwrap().len(), 1, "{triage}");
    assert_eq!(env.tasks().len(), created + 1);
    assert_eq!(
        fake.requests_to("GET", "/collaborators/reader-rita/permission")
            .len(),
        1,
        "any_author does not ask GitHub"
    );
}

#[test]
fn a_failed_delivery_is_processed_again_on_redelivery() {
    let env = Env::sqlite();
    write_config(&env, "");
    let fake = FakeGitHub::start_blocking();
    fake.add_issue(REPO, 5, "Crash", "", "alice");
    fake.set_permission(REPO, "alice", "write");
    fake.set_permission(REPO, "eve", "read");
    let serve = serve(&env, &fake);
    // GitHub cannot say what alice may do: the delivery fails, and is recorded as failed.
    fake.fail_next("GET", "/permission", 500, 1);
    let body = comment(5, "@orchestrator-bot please fix this", "alice");
    let (status, failed) = deliver(&env, &serve, "issue_comment", "d-10", &body);
    assert_eq!(status, 202, "{failed}");
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(
        failed["detail"].as_str().unwrap().contains("500"),
        "the ledger says why: {failed}"
    );
    assert!(
        failed["retry_at"].as_i64().is_some(),
        "a 5xx may pass, so it is tried again by itself: {failed}"
    );
    assert!(env.tasks().is_empty());
    let (status, retried) = deliver(&env, &serve, "issue_comment", "d-10", &body);
    assert_eq!(status, 202, "{retried}");
    assert_eq!(retried["tasks"].as_array().unwrap().len(), 1, "{retried}");
    let (_, duplicate) = deliver(&env, &serve, "issue_comment", "d-10", &body);
    assert_eq!(duplicate["status"], "duplicate");
    assert_eq!(env.tasks().len(), 1);
    let ledger = env.json(&["github", "deliveries", "--json"]);
    let row = &ledger.as_array().unwrap()[0];
    assert_eq!(row["attempts"], 2, "{row}");

    // A mention by someone without write access, and no mention at all, trigger nothing.
    let (_, read_only) = deliver(
        &env,
        &serve,
        "issue_comment",
        "d-11",
        &comment(5, "@orchestrator-bot do it", "eve"),
    );
    assert_eq!(read_only["tasks"], json!([]), "{read_only}");
    let (_, unmentioned) = deliver(
        &env,
        &serve,
        "issue_comment",
        "d-12",
        &comment(5, "thanks @orchestrator-botany", "alice"),
    );
    assert_eq!(unmentioned["tasks"], json!([]), "{unmentioned}");
    assert_eq!(env.tasks().len(), 1);
}

#[test]
fn the_poller_triggers_on_new_labels_and_pull_requests_only_and_once() {
    let env = Env::sqlite();
    write_config(
        &env,
        &format!("poll = [\"{REPO}\"]\npoll_interval_secs = 1"),
    );
    let fake = FakeGitHub::start_blocking();
    fake.add_issue(REPO, 3, "Old issue", "", "alice");
    // Labeled before the poller ever looked: history, not a trigger.
    fake.label_issue(REPO, 3, "agent-fix", "alice");
    fake.set_permission(REPO, "alice", "write");
    fake.set_permission(REPO, "carol", "write");
    fake.add_issue(REPO, 10, "Old pull request", "", "carol");
    fake.make_pull(REPO, 10, &[], "");
    let serve = serve(&env, &fake);
    wait_for(|| fake.requests_to("GET", "/issues/events").len() >= 2);
    assert!(env.tasks().is_empty(), "{}", serve.log());
    fake.add_issue(REPO, 4, "New issue", "", "alice");
    fake.label_issue(REPO, 4, "agent-fix", "alice");
    // The same label from someone who may only read: no task.
    fake.add_issue(REPO, 5, "Another new issue", "", "eve");
    fake.label_issue(REPO, 5, "agent-fix", "eve");
    fake.add_issue(REPO, 11, "New pull request", "", "carol");
    fake.make_pull(REPO, 11, &[], "");
    wait_for(|| env.tasks().len() >= 2);
    // Several more polls see the same event again; the ledger keeps it at one task.
    let seen = fake.requests_to("GET", "/issues/events").len();
    wait_for(|| fake.requests_to("GET", "/issues/events").len() >= seen + 2);
    let mut titles: Vec<String> = env
        .tasks()
        .iter()
        .map(|t| t["title"].as_str().unwrap().to_owned())
        .collect();
    titles.sort();
    assert_eq!(
        titles,
        ["Fix acme/widgets#4: New issue", "Review acme/widgets#11"],
        "{}",
        serve.log()
    );
    let ledger = env.json(&["github", "deliveries", "--json"]);
    assert!(
        ledger
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["status"] == "ignored"
                && r["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("eve has none access, not write"))),
        "eve's label is in the ledger with the reason: {ledger}"
    );
    drop(serve);
}

/// `orchestrator ...` with the fake GitHub's URL and token in its environment.
fn gh(env: &Env, fake: &FakeGitHub, args: &[&str]) -> std::process::Output {
    env.cmd(args)
        .env("ORCHESTRATOR_GITHUB_API_URL", fake.url())
        .env("GITHUB_TOKEN", FAKE_TOKEN)
        .output()
        .unwrap()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_github_cli_reads_comments_once_per_task_and_closes_only_with_evidence() {
    let env = Env::sqlite();
    let fake = FakeGitHub::start_blocking();
    fake.add_issue(
        REPO,
        12,
        "Crash\u{1b}[2J",
        "Steps <!-- hidden instructions --> to reproduce",
        "alice",
    );
    fake.add_comment(REPO, 12, "bob", "Me too");

    // Reading: sanitized for people too, with --json as GitHub returned it.
    let out = gh(&env, &fake, &["github", "issue", "acme/widgets#12"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("Steps  to reproduce") && text.contains("Me too"),
        "{text}"
    );
    assert!(
        !text.contains("hidden") && !text.contains('\u{1b}'),
        "{text}"
    );
    // A read that fails once in transit and then succeeds prints its result, and nothing of the
    // attempt that failed.
    fake.fail_next("GET", "/issues/12", 502, 1);
    let out = gh(&env, &fake, &["github", "issue", "acme/widgets#12"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("ERROR") && !stderr(&out).contains("502"),
        "{}",
        stderr(&out)
    );
    let out = gh(
        &env,
        &fake,
        &["github", "issue", "acme/widgets#12", "--json"],
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["comments"].as_array().unwrap().len(), 1);
    let out = gh(&env, &fake, &["github", "issue", "acme/widgets#404"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let out = gh(&env, &fake, &["github", "issue", "not-an-issue"]);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    let out = env.run(&["github", "issue", "acme/widgets#12"]);
    assert_eq!(out.status.code(), Some(6), "no token: {}", stderr(&out));
    assert!(stderr(&out).contains("GITHUB_TOKEN"), "{}", stderr(&out));

    // A task in a real repository, whose gate passes on its committed tree.
    let (_dir, repo) = orchestrator_test_support::git_repo(&[("src.txt", "v1\n")]);
    let ws = repo.display().to_string();
    let run = env.run(&[
        "run",
        "--gate",
        "true",
        "--workspace",
        &ws,
        "--accept",
        "the check passes",
        "--json",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let task = env.tasks()[0]["id"].as_i64().unwrap().to_string();
    let bare = env.json(&[
        "task",
        "create",
        "--title",
        "no criteria",
        "--gate",
        "true",
        "--workspace",
        &ws,
        "--json",
    ])["id"]
        .as_i64()
        .unwrap()
        .to_string();

    // The task's comment: posted once, then edited.
    for body in ["Working on it.", "Fixed."] {
        let out = gh(
            &env,
            &fake,
            &[
                "github",
                "comment",
                "acme/widgets#12",
                "--task",
                &task,
                "--body",
                body,
                "--json",
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let comments = fake.comments(REPO, 12);
    assert_eq!(comments.len(), 2, "bob's and the task's one: {comments:?}");
    assert!(comments[1].body.starts_with("Fixed."));

    // Close: refused without criteria, on a dirty tree, with a bad reason; then done.
    let out = gh(
        &env,
        &fake,
        &["github", "close", "acme/widgets#12", "--task", &bare],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("acceptance criteria"),
        "{}",
        stderr(&out)
    );
    std::fs::write(repo.join("src.txt"), "v2\n").unwrap();
    let out = gh(
        &env,
        &fake,
        &["github", "close", "acme/widgets#12", "--task", &task],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("uncommitted changes"),
        "{}",
        stderr(&out)
    );
    let out = gh(
        &env,
        &fake,
        &[
            "github",
            "close",
            "acme/widgets#12",
            "--task",
            &task,
            "--allow-dirty",
        ],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("passed on the current tree")
            && stderr(&out).contains("\"true\" last ran on HEAD"),
        "{}",
        stderr(&out)
    );
    std::fs::write(repo.join("src.txt"), "v1\n").unwrap();
    let out = gh(
        &env,
        &fake,
        &[
            "github",
            "close",
            "acme/widgets#12",
            "--task",
            &task,
            "--reason",
            "because",
        ],
    );
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert_eq!(fake.issue(REPO, 12).state, "open");
    let out = gh(
        &env,
        &fake,
        &[
            "github",
            "close",
            "acme/widgets#12",
            "--task",
            &task,
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let closed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(closed["url"], "https://github.com/acme/widgets/issues/12");
    assert_eq!(closed["gates"][0]["name"], "true", "{closed}");
    assert_eq!(
        fake.issue(REPO, 12).state_reason.as_deref(),
        Some("completed")
    );

    let writes: Vec<Value> = env
        .events(task.parse().unwrap())
        .into_iter()
        .filter(|e| e["kind"] == "github_write")
        .collect();
    let actions: Vec<&str> = writes
        .iter()
        .filter_map(|e| e["data"]["action"].as_str())
        .collect();
    assert_eq!(
        actions,
        ["comment_created", "comment_edited", "issue_closed"],
        "{writes:?}"
    );
}

/// The ledger row of `delivery` as it is now.
fn ledger_row(env: &Env, delivery: &str) -> Value {
    env.json(&["github", "deliveries", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == delivery)
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn a_delivery_is_answered_before_githubs_permission_call_returns() {
    let env = Env::sqlite();
    write_config(&env, "");
    let fake = FakeGitHub::start_blocking();
    fake.set_permission(REPO, "alice", "write");
    let held = fake.hold_next("GET", "/collaborators/alice/permission");
    let serve = serve(&env, &fake);
    let (status, answer) = post_delivery(
        &serve,
        "issues",
        "d-slow",
        &labeled(3, "agent-fix", "alice"),
    );
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["status"], "accepted", "{answer}");
    // The answer came while GitHub still holds the permission call: the daemon asked it (in the
    // background), and nothing was decided yet.
    wait_for(|| {
        !fake
            .requests_to("GET", "/collaborators/alice/permission")
            .is_empty()
    });
    let row = ledger_row(&env, "d-slow");
    assert_eq!(row["status"], "processing", "{row}");
    assert!(env.tasks().is_empty());
    held.release();
    let row = settled(&env, "d-slow");
    assert_eq!(row["status"], "processed", "{row}");
    assert_eq!(env.tasks().len(), 1);
    // GitHub's redelivery of it now is a duplicate, answered at once.
    let (status, again) = post_delivery(
        &serve,
        "issues",
        "d-slow",
        &labeled(3, "agent-fix", "alice"),
    );
    assert_eq!((status, again["status"].as_str()), (200, Some("duplicate")));
}

#[test]
fn failures_that_may_pass_are_tried_again_by_themselves_and_others_wait_for_a_retry() {
    let env = Env::sqlite();
    write_config(&env, "delivery_retry_secs = 1");
    let fake = FakeGitHub::start_blocking();
    fake.set_permission(REPO, "alice", "write");
    // GitHub is down for the first try (its three 502s), then answers.
    fake.fail_next("GET", "/permission", 502, 3);
    let serve = serve(&env, &fake);
    let (status, answer) =
        post_delivery(&serve, "issues", "d-502", &labeled(4, "agent-fix", "alice"));
    assert_eq!(status, 202, "{answer}");
    wait_for(|| ledger_row(&env, "d-502")["status"] == "processed");
    let row = ledger_row(&env, "d-502");
    assert_eq!(row["attempts"], 2, "{row}");
    assert_eq!(row["task_ids"].as_array().unwrap().len(), 1, "{row}");
    assert!(row["retry_at"].is_null(), "{row}");

    // A 403 will not pass by itself: the delivery waits, saying why, until someone retries it.
    fake.fail_next("GET", "/permission", 403, 1);
    let (_, failed) = deliver(
        &env,
        &serve,
        "issues",
        "d-403",
        &labeled(5, "agent-fix", "alice"),
    );
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(failed["retry_at"].is_null(), "{failed}");
    assert!(
        failed["detail"].as_str().unwrap().contains("403"),
        "{failed}"
    );
    let table = stdout(&env.run(&["github", "deliveries"]));
    assert!(
        table.contains("NEXT TRY") && table.contains("d-403"),
        "{table}"
    );
    let out = stdout(&env.run(&["github", "deliveries", "--retry", "d-403"]));
    assert!(out.contains("queued"), "{out}");
    wait_for(|| ledger_row(&env, "d-403")["status"] == "processed");
    assert_eq!(env.tasks().len(), 2);
    // Retrying what is not failed, or not recorded, says so.
    let refused = env.run(&["github", "deliveries", "--retry", "d-403"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("processed, not failed"),
        "{}",
        stderr(&refused)
    );
    let missing = env.run(&["github", "deliveries", "--retry", "nope"]);
    assert!(
        stderr(&missing).contains("no delivery nope"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn a_daemon_killed_mid_delivery_leaves_it_to_the_next_start() {
    let env = Env::sqlite();
    write_config(&env, "delivery_stale_secs = 1");
    let fake = FakeGitHub::start_blocking();
    fake.set_permission(REPO, "alice", "write");
    let _held = fake.hold_next("GET", "/collaborators/alice/permission");
    let mut first = serve(&env, &fake);
    let (status, _) = post_delivery(
        &first,
        "issues",
        "d-kill",
        &labeled(6, "agent-fix", "alice"),
    );
    assert_eq!(status, 202);
    wait_for(|| !fake.requests_to("GET", "/permission").is_empty());
    first.signal(nix::sys::signal::Signal::SIGKILL);
    first.wait();
    assert_eq!(ledger_row(&env, "d-kill")["status"], "processing");
    assert!(env.tasks().is_empty());
    // The next daemon finds the abandoned delivery in the ledger and processes it, once.
    let _second = serve(&env, &fake);
    let row = settled(&env, "d-kill");
    assert_eq!(row["status"], "processed", "{row}");
    assert_eq!(row["attempts"], 2, "{row}");
    assert_eq!(env.tasks().len(), 1);
}

/// path → (mode, bytes) of every file in a repository's index.
fn indexed_files(repo: &std::path::Path) -> std::collections::BTreeMap<String, (String, Vec<u8>)> {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(repo)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        out.stdout
    };
    String::from_utf8(git(&["ls-files", "-s", "-z"]))
        .unwrap()
        .split('\0')
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (meta, path) = line.split_once('\t').unwrap();
            let fields: Vec<&str> = meta.split(' ').collect();
            let bytes = git(&["cat-file", "blob", fields[1]]);
            (path.to_owned(), (fields[0].to_owned(), bytes))
        })
        .collect()
}

/// The example config of docs/github-workflow.md, pointed at this test's checkout, model and gate.
pub(crate) fn example_config(source: &std::path::Path, model_url: &str) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/github-workflow.toml"
    );
    let example = std::fs::read_to_string(path).unwrap();
    for expected in [
        "http://127.0.0.1:8080/v1",
        "/srv/checkouts/widgets",
        "command = \"cargo test\"",
    ] {
        assert!(example.contains(expected), "the example lost {expected:?}");
    }
    example
        .replace("http://127.0.0.1:8080/v1", model_url)
        .replace("/srv/checkouts/widgets", &source.display().to_string())
        .replace(
            "command = \"cargo test\"",
            "command = \"grep -qx 42 src/lib.rs\"",
        )
}

#[test]
fn a_labelled_issue_becomes_a_draft_pull_request_with_its_evidence() {
    use orchestrator_test_support::git_repo;
    use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
    use std::sync::atomic::{AtomicI64, Ordering};

    // The agent as a model would drive it: fix, gate, record, select, open, tell the issue.
    let attempt = std::sync::Arc::new(AtomicI64::new(0));
    let seen = attempt.clone();
    let model = ScriptedModel::start_blocking(move |request: &Request| {
        let last = request.last_tool_results().join("\n");
        let id = seen.load(Ordering::SeqCst);
        match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "src/lib.rs", "content": "42\n"}),
            )]),
            1 => Reply::ToolCalls(vec![call("task_gate_run", json!({"gate": "test"}))]),
            2 => Reply::ToolCalls(vec![call(
                "pr_attempt_record",
                json!({"label": "the answer", "group": "fix-7"}),
            )]),
            3 => {
                let id: i64 = last
                    .strip_prefix("Recorded attempt ")
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(-1);
                seen.store(id, Ordering::SeqCst);
                Reply::ToolCalls(vec![call("pr_attempt_select", json!({"attempt_id": id}))])
            }
            4 => Reply::ToolCalls(vec![call(
                "pr_open",
                json!({"attempt_id": id, "repo": REPO, "issue": 7, "description": "The answer is 42 now."}),
            )]),
            5 => {
                let url = last
                    .split_whitespace()
                    .find(|w| w.starts_with("http"))
                    .unwrap_or("(no URL)")
                    .to_owned();
                Reply::ToolCalls(vec![call(
                    "github_comment",
                    json!({"repo": REPO, "number": 7, "body": format!("Opened {url}; the test gate passes.")}),
                )])
            }
            _ => Reply::Text(format!("done: {last}")),
        }
    });
    let (_dir, source) = git_repo(&[("src/lib.rs", "41\n"), ("README.md", "# widgets\n")]);
    let fake = FakeGitHub::start_blocking();
    fake.seed_git(REPO, &source);
    fake.add_issue(REPO, 7, "The answer is wrong", "It says 41.", "carol");
    fake.set_permission(REPO, "alice", "write");
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        example_config(&source, &model.base_url()),
    )
    .unwrap();
    let serve = serve(&env, &fake);

    let (status, row) = deliver(
        &env,
        &serve,
        "issues",
        "d-e2e",
        &labeled(7, "agent-fix", "alice"),
    );
    assert_eq!(status, 202);
    assert_eq!(row["status"], "processed", "{row}");
    let id = row["tasks"][0].as_i64().unwrap();
    let task = env.wait_task(id, "finished", |t| {
        ["succeeded", "failed", "canceled", "waiting"].contains(&t["state"].as_str().unwrap_or(""))
    });
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());

    // The task worked in a clone of its own; the person's checkout is as it was.
    let workspace = task["workspace"].as_str().unwrap().to_owned();
    assert!(
        workspace.starts_with(&format!("{}.worktrees/acme-widgets-7-", source.display())),
        "{workspace}"
    );
    // The clone goes as the task succeeds (its change lives on in the attempt and the pull
    // request, checked below).
    wait_for(|| !std::path::Path::new(&workspace).exists());
    assert_eq!(
        std::fs::read_to_string(source.join("src/lib.rs")).unwrap(),
        "41\n"
    );

    // One draft pull request whose branch is the base with exactly the agent's change.
    let attempt = attempt.load(Ordering::SeqCst);
    assert!(
        attempt > 0,
        "{}",
        String::from_utf8_lossy(&env.run(&["task", "read", &id.to_string(), "--json"]).stdout)
    );
    let pulls = fake.pulls(REPO);
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    let pull = &pulls[0];
    let head = pull.pull.as_ref().unwrap();
    assert!(head.draft);
    assert_eq!(head.base_ref, "main");
    // The branch and the marker name the store too (its identity's digits follow).
    assert!(
        head.head_ref
            .starts_with(&format!("orchestrator/task-{id}-attempt-{attempt}-")),
        "{}",
        head.head_ref
    );
    // The attempt's recorded patch, applied by git to its base in a fresh clone, gives exactly the
    // files of the pull request's branch, modes included.
    let patch = env
        .cmd(&["attempt", "show", &attempt.to_string(), "--patch"])
        .output()
        .unwrap();
    assert!(patch.status.success());
    let scratch = tempfile::tempdir().unwrap();
    let rebuilt = scratch.path().join("rebuilt");
    orchestrator_test_support::git(
        scratch.path(),
        &["clone", "-q", source.to_str().unwrap(), "rebuilt"],
    );
    let mut apply = std::process::Command::new("git")
        .args(["apply", "--index", "-"])
        .current_dir(&rebuilt)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut apply.stdin.take().unwrap(), &patch.stdout).unwrap();
    assert!(apply.wait().unwrap().success());
    let branch = fake.branch_files(REPO, &head.head_ref).unwrap();
    assert_eq!(branch, indexed_files(&rebuilt));
    assert_eq!(branch["src/lib.rs"].1, b"42\n");
    for part in [
        "The answer is 42 now.",
        "Fixes #7",
        "| test | `grep -qx 42 src/lib.rs` | passed |",
        &format!("<!-- orchestrator:pr-attempt-{attempt} store:"),
    ] {
        assert!(pull.body.contains(part), "{part:?} not in {}", pull.body);
    }

    // One comment on the issue, linking the pull request; nobody was asked.
    // (Besides the daemon's progress comment, which review_rounds.rs follows.)
    let comments: Vec<_> = fake
        .comments(REPO, 7)
        .into_iter()
        .filter(|c| !c.body.contains("<!-- orchestrator:progress store:"))
        .collect();
    assert_eq!(comments.len(), 1, "{comments:?}");
    let url = format!("/{REPO}/pull/{}", pull.number);
    assert!(comments[0].body.contains(&url), "{}", comments[0].body);
    let approvals = env.json(&["approval", "list", "--all", "--json"]);
    assert_eq!(approvals.as_array().unwrap().len(), 0, "{approvals}");

    // Each step is on the record, and `task read` shows where the pull request is.
    let kinds: Vec<String> = env
        .events(id)
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    let position = |kind: &str| {
        kinds
            .iter()
            .position(|k| k == kind)
            .unwrap_or_else(|| panic!("no {kind} in {kinds:?}"))
    };
    assert!(position("workspace_prepared") < position("gate_finished"));
    assert!(position("gate_finished") < position("attempt_recorded"));
    assert!(position("attempt_selected") < position("github_write"));
    let read = env.task(id);
    let writes: Vec<&str> = read["github_writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["action"].as_str().unwrap())
        .collect();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert_eq!(writes[0], "pr_opened");
    let text = String::from_utf8(env.run(&["task", "read", &id.to_string()]).stdout).unwrap();
    assert!(text.contains("GitHub writes: 2"), "{text}");
    assert!(text.contains(&url), "{text}");
}
