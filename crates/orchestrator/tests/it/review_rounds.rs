//! The review loop end to end, with the config of docs/github-workflow.md: a labelled issue, the
//! agent's pull request, then a writer's review with two inline comments (three deliveries) makes
//! one round, which pushes one commit on the pull request's head and answers each comment in its
//! own thread; a triager's review and the bot's own comment start nothing, and a redelivery
//! changes nothing.

use crate::github::{REPO, deliver, example_config, labeled, serve};
use crate::support::Env;
use orchestrator_test_support::git_repo;
use orchestrator_test_support::github_server::FakeGitHub;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The text of the first user message of a request: which task is asking.
fn first_user_text(request: &Request) -> String {
    request
        .messages()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The agent that fixes the issue and opens the pull request, as the workflow's test drives it.
fn fix(request: &Request, attempt: &AtomicI64) -> Reply {
    let last = request.last_tool_results().join("\n");
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
            attempt.store(id, Ordering::SeqCst);
            Reply::ToolCalls(vec![call("pr_attempt_select", json!({"attempt_id": id}))])
        }
        4 => Reply::ToolCalls(vec![call(
            "pr_open",
            json!({"attempt_id": attempt.load(Ordering::SeqCst), "repo": REPO, "issue": 7}),
        )]),
        _ => Reply::Text("Opened the pull request; 42 it is.".into()),
    }
}

/// The example config with the review rounds' gate wanting 43 and a short join window.
fn config(source: &std::path::Path, model_url: &str) -> String {
    let text = example_config(source, model_url)
        .replace(
            "https://github.com/{repo}.git",
            &source.display().to_string(),
        )
        .replace("join_secs = 60", "join_secs = 3")
        .replace("max_rounds = 3", "max_rounds = 1");
    let at = text.find("name = \"review\"").expect("the review rules");
    let (fix, review) = text.split_at(at);
    format!(
        "{fix}{}",
        review.replace("grep -qx 42 src/lib.rs", "grep -qx 43 src/lib.rs")
    )
}

#[test]
fn a_review_with_two_inline_comments_makes_one_round_that_pushes_and_answers_each() {
    review_loop(Env::sqlite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_with_two_inline_comments_makes_one_round_that_pushes_and_answers_each_on_postgres()
 {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || review_loop(env))
        .await
        .unwrap();
}

fn review_loop(env: Env) {
    let fake = Arc::new(FakeGitHub::start_blocking());
    let declined = Arc::new(AtomicU64::new(0));
    let attempt = Arc::new(AtomicI64::new(0));
    let (seen_declined, seen_attempt) = (declined.clone(), attempt.clone());
    let model = ScriptedModel::start_blocking(move |request: &Request| {
        if !first_user_text(request).contains("Address the review") {
            return fix(request, &seen_attempt);
        }
        match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![
                call(
                    "pr_review_decline",
                    json!({"comment_id": seen_declined.load(Ordering::SeqCst),
                           "reason": "The project keeps its name."}),
                ),
                call(
                    "write_file",
                    json!({"path": "src/lib.rs", "content": "43\n"}),
                ),
            ]),
            _ => Reply::Text("Made it 43; the name stays.".into()),
        }
    });
    let (_dir, source) = git_repo(&[("src/lib.rs", "41\n"), ("README.md", "# widgets\n")]);
    fake.seed_git(REPO, &source);
    fake.add_issue(REPO, 7, "The answer is wrong", "It says 41.", "carol");
    fake.set_permission(REPO, "alice", "write");
    fake.set_permission(REPO, "trish", "triage");
    std::fs::write(
        env.home().join("config.toml"),
        config(&source, &model.base_url()),
    )
    .unwrap();
    let serve = serve(&env, &fake);

    // The first round: the labelled issue's task opens the pull request.
    let (_, row) = deliver(
        &env,
        &serve,
        "issues",
        "d-label",
        &labeled(7, "agent-fix", "alice"),
    );
    let first = row["tasks"][0].as_i64().unwrap();
    let task = env.wait_finished(first);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    let pulls = fake.pulls(REPO);
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    let number = pulls[0].number;
    let branch = pulls[0].pull.as_ref().unwrap().head_ref.clone();
    let head = fake.branch_commits(REPO, &branch)[0].clone();

    // The issue's one progress comment follows the task to its end, edited in place.
    let progress = |number: u64| -> Vec<orchestrator_test_support::github_server::FakeComment> {
        fake.comments(REPO, number)
            .into_iter()
            .filter(|c| c.body.contains("<!-- orchestrator:progress store:"))
            .collect()
    };
    let pull_url = format!("https://github.com/{REPO}/pull/{number}");
    crate::support::wait_for(|| {
        progress(7)
            .first()
            .is_some_and(|c| c.body.contains("✅ Done.") && c.body.contains(&pull_url))
    });
    let told = progress(7);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].body.contains("Gates: `test` passed;\n"),
        "{}",
        told[0].body
    );

    // A writer's review with two inline comments: three deliveries, one round.
    let (review, comments) = fake.add_review(
        REPO,
        number,
        "alice",
        "CHANGES_REQUESTED",
        "Close, but the answer is 43.",
        &[
            ("src/lib.rs", 1, "43, not 42."),
            ("README.md", 1, "Rename the project to gadgets."),
        ],
    );
    declined.store(comments[1], Ordering::SeqCst);
    // A review bot's comment (GitHub names no permission of an app's bot) is no writer's; a
    // stranger's reply that copies the bot's marker does not close a thread.
    let (_, bot_comments) = fake.add_review(
        REPO,
        number,
        "coderabbit[bot]",
        "COMMENTED",
        "",
        &[("src/lib.rs", 1, "Consider 4200.")],
    );
    let marker = fake
        .comments(REPO, 7)
        .iter()
        .find_map(|c| {
            let at = c.body.find("<!-- orchestrator:progress store:")?;
            let id = &c.body[at + "<!-- orchestrator:progress store:".len()..];
            Some(format!("<!-- orchestrator:reply store:{} -->", &id[..32]))
        })
        .expect("the store's identity, from the issue's progress comment");
    fake.reply_in_thread(
        REPO,
        number,
        comments[1],
        "mallory",
        &format!("done {marker}"),
    );
    let mut rounds = Vec::new();
    let (_, row) = deliver(
        &env,
        &serve,
        "pull_request_review",
        "d-review",
        &fake.review_payload(REPO, number, review),
    );
    assert_eq!(row["status"], "processed", "{row}");
    rounds.push(row["tasks"][0].as_i64().unwrap());
    for (i, comment) in comments.iter().enumerate() {
        let (_, row) = deliver(
            &env,
            &serve,
            "pull_request_review_comment",
            &format!("d-comment-{i}"),
            &fake.review_comment_payload(REPO, number, *comment),
        );
        assert_eq!(row["status"], "processed", "{row}");
        rounds.push(row["tasks"][0].as_i64().unwrap());
    }
    assert!(
        rounds.iter().all(|t| *t == rounds[0]),
        "one round: {rounds:?}"
    );
    let round = rounds[0];

    // A triager's review is ignored with the reason.
    let (trish, _) = fake.add_review(REPO, number, "trish", "COMMENTED", "Nit: 44?", &[]);
    let (_, row) = deliver(
        &env,
        &serve,
        "pull_request_review",
        "d-triager",
        &fake.review_payload(REPO, number, trish),
    );
    assert_eq!(row["status"], "ignored", "{row}");
    assert!(
        row["detail"]
            .as_str()
            .unwrap_or("")
            .contains("trish has read access, not write"),
        "{row}"
    );

    let task = env.wait_finished(round);
    assert_eq!(task["state"], "succeeded", "{task}\n{}", serve.log());
    // The round read the review, both comments, the issue and what the first round said.
    let asked = model
        .received()
        .into_iter()
        .find(|r| first_user_text(r).contains("Address the review"))
        .map(|r| first_user_text(&r))
        .expect("the round asked the model");
    for part in [
        "Close, but the answer is 43.",
        "43, not 42.",
        "Rename the project to gadgets.",
        "It says 41.",
        "Opened the pull request; 42 it is.",
        &format!("comment {} by alice on src/lib.rs line 1", comments[0]),
    ] {
        assert!(asked.contains(part), "{part:?} not in {asked}");
    }
    assert!(
        !asked.contains("Nit: 44?"),
        "a triager's review is not feedback"
    );
    assert!(
        !asked.contains("Consider 4200."),
        "a bot's comment is not feedback"
    );

    // One commit on the head, whose tree the gate passed on.
    let commits = fake.branch_commits(REPO, &branch);
    assert_eq!(commits[1], head, "{commits:?}");
    assert_eq!(commits.len(), 3, "{commits:?}");
    let files = fake.branch_files(REPO, &branch).unwrap();
    assert_eq!(files["src/lib.rs"].1, b"43\n");
    // The pull request's progress comment says what the round pushed.
    let short_head = &commits[0][..12];
    // The comment is edited as the round goes: first with the push, then as the task ends.
    crate::support::wait_for(|| {
        progress(number).first().is_some_and(|c| {
            c.body.contains(&format!("Pushed {short_head}")) && c.body.contains("✅ Done.")
        })
    });
    let told = progress(number);
    assert_eq!(told.len(), 1, "{told:?}");
    // Posted while the round waited for its review's comments, edited as it ended.
    assert!(told[0].updated, "{told:?}");
    assert!(told[0].body.contains("✅ Done."), "{}", told[0].body);
    assert!(
        !fake
            .review_comments(REPO, number)
            .iter()
            .any(|c| c.in_reply_to == Some(bot_comments[0])),
        "a bot's comment is not answered"
    );
    // Each comment answered in its own thread, the declined one with the reason.
    let replies: Vec<_> = fake
        .review_comments(REPO, number)
        .into_iter()
        .filter(|c| c.author == "orchestrator-bot")
        .collect();
    assert_eq!(replies.len(), 2, "{replies:?}");
    let short = &commits[0][..12];
    let to = |id: u64| replies.iter().find(|r| r.in_reply_to == Some(id)).unwrap();
    assert!(
        to(comments[0])
            .body
            .starts_with(&format!("Addressed in {short}.")),
        "{:?}",
        to(comments[0])
    );
    assert!(
        to(comments[1]).body.starts_with(&format!(
            "Not changed in {short}: The project keeps its name."
        )),
        "{:?}",
        to(comments[1])
    );

    // The bot's own reply triggers nothing; a redelivery changes nothing.
    let before = env.tasks().len();
    let own = to(comments[0]).id;
    let (_, row) = deliver(
        &env,
        &serve,
        "pull_request_review_comment",
        "d-own",
        &fake.review_comment_payload(REPO, number, own),
    );
    assert_eq!(row["status"], "ignored", "{row}");
    assert!(
        row["detail"]
            .as_str()
            .unwrap_or("")
            .contains("the bot's own"),
        "{row}"
    );
    let (_, again) = deliver(
        &env,
        &serve,
        "pull_request_review_comment",
        "d-comment-0",
        &fake.review_comment_payload(REPO, number, comments[0]),
    );
    assert_ne!(again["status"], "accepted", "{again}");
    assert_eq!(env.tasks().len(), before);
    assert_eq!(fake.pulls(REPO).len(), 1);
    let read: Value = env.json(&["task", "read", &round.to_string(), "--json"]);
    assert_eq!(read["state"], "succeeded");
    // The round names the review that started it, with its link.
    let origin = read["origin"].as_str().unwrap_or_default();
    assert!(
        origin.contains(&format!("pullrequestreview-{review}")),
        "{origin}"
    );
    // The pull request's tasks are listed together on each of them: the task that opened it,
    // then the round, in the CLI and on the page, which links the others.
    let pull_key = format!("{}#{number}", REPO.to_ascii_lowercase());
    for id in [first, round] {
        let read: Value = env.json(&["task", "read", &id.to_string(), "--json"]);
        let chain = &read["pull_chains"][0];
        assert_eq!(chain["pull"], pull_key.as_str(), "{read}");
        let listed: Vec<(i64, &str)> = chain["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["id"].as_i64().unwrap(), t["role"].as_str().unwrap()))
            .collect();
        assert_eq!(listed, [(first, "opened"), (round, "round")], "{read}");
    }
    let out = env.run(&["task", "read", &first.to_string()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("tasks on pull request {pull_key}: 2")),
        "{text}"
    );
    let (status, page) = crate::support::page_get(&serve, &format!("/tasks/{first}"));
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(&format!("data-pull-chain=\"{pull_key}\"")),
        "{page}"
    );
    assert!(page.contains(&format!("href=\"/tasks/{round}\"")), "{page}");

    // Past the last round allowed: one comment says the agent stopped, and no task is made, for
    // this review and the next.
    for (i, text) in ["Still not right.", "Hello?"].iter().enumerate() {
        let (again, _) = fake.add_review(REPO, number, "alice", "CHANGES_REQUESTED", text, &[]);
        let (_, row) = deliver(
            &env,
            &serve,
            "pull_request_review",
            &format!("d-past-{i}"),
            &fake.review_payload(REPO, number, again),
        );
        assert_eq!(row["status"], "ignored", "{row}");
        assert!(
            row["detail"]
                .as_str()
                .unwrap_or("")
                .contains("had 1 rounds, the most"),
            "{row}"
        );
    }
    assert_eq!(env.tasks().len(), before);
    let stopped: Vec<_> = fake
        .comments(REPO, number)
        .into_iter()
        .filter(|c| c.body.contains("orchestrator:rounds-stopped"))
        .collect();
    assert_eq!(stopped.len(), 1, "{stopped:?}");
    assert!(
        stopped[0].body.contains("a person takes it from here"),
        "{stopped:?}"
    );
}
