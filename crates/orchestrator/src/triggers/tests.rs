//! The trigger rules, delivery ledger and poller against a fake GitHub on 127.0.0.1.

use super::poll::{Cursor, poll_once};
use super::process::STALE_PROCESSING;
use super::rules::ANY_REPO;
use super::*;
use orchestrator_tools::{Decision, TaskScope};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[test]
fn mentions_are_words() {
    assert!(mentions("hey @orchestrator please fix", "@orchestrator"));
    assert!(mentions("@Orchestrator, fix", "@orchestrator"));
    assert!(mentions("(@orchestrator)", "@orchestrator"));
    assert!(!mentions("@orchestrator-bot fix", "@orchestrator"));
    assert!(!mentions("mail me@orchestrator.dev", "@orchestrator"));
    assert!(!mentions("@orchestrators", "@orchestrator"));
    assert!(!mentions("nothing here", "@orchestrator"));
}

#[test]
fn the_bot_is_itself_with_or_without_its_suffix() {
    assert!(same_login("orchestrator-bot", "orchestrator-bot"));
    assert!(same_login("orchestrator[bot]", "Orchestrator[bot]"));
    assert!(same_login("orchestrator", "orchestrator[bot]"));
    assert!(!same_login("orchestrator", "alice"));
    assert!(!same_login("orchestrator", ""));
}

#[test]
fn rules_are_validated() {
    let mut rule: TriggerRule = toml::from_str(
        "name = \"fix\"\nevent = \"issues.labeled\"\nlabel = \"agent-fix\"\nrepos = [\"*\"]\n",
    )
    .unwrap();
    assert!(rule.validate().is_ok());
    rule.label = None;
    assert!(rule.validate().unwrap_err().contains("needs a label"));
    rule.event = "issues.opened".into();
    assert!(rule.validate().unwrap_err().contains("not one of"));
    let bad: Result<TriggerRule, _> =
        toml::from_str("name = \"x\"\nevent = \"issues.labeled\"\nlable = \"typo\"\n");
    assert!(bad.is_err(), "unknown keys are refused");
}

fn rule(toml_text: &str) -> TriggerRule {
    toml::from_str(toml_text).unwrap()
}

#[test]
fn a_rule_with_worktree_gives_each_delivery_a_clone_of_its_own() {
    let head =
        "name = \"fix\"\nevent = \"issues.labeled\"\nlabel = \"agent-fix\"\nrepos = [\"*\"]\n";
    let cloning = rule(&format!(
        "{head}workspace = \"/srv/widgets\"\nworktree = true\ntask = {{ prompt = \"Fix it\" }}\n"
    ));
    assert!(cloning.validate().is_ok());
    let vars = |delivery: &str| {
        let mut vars = BTreeMap::new();
        vars.insert("repo", "acme/widgets".to_owned());
        vars.insert("number", "7".to_owned());
        vars.insert("title", "Crash".to_owned());
        vars.insert("delivery", delivery.to_owned());
        vars
    };
    let first = task_of(&cloning, &vars("d-1"), None);
    assert_eq!(first.worktree_of.as_deref(), Some("/srv/widgets"));
    let workspace = first.workspace.clone().unwrap();
    assert!(
        workspace.starts_with("/srv/widgets.worktrees/acme-widgets-7-"),
        "{workspace}"
    );
    assert!(first.validate().is_ok(), "{:?}", first.validate());
    assert_eq!(
        task_of(&cloning, &vars("d-1"), None).workspace.unwrap(),
        workspace,
        "one delivery, one tree"
    );
    assert_ne!(
        task_of(&cloning, &vars("d-2"), None).workspace.unwrap(),
        workspace,
        "the issue labelled again gets a tree of its own"
    );

    let elsewhere = rule(&format!(
        "{head}workspace = \"/srv/widgets\"\nworktree = true\nworktrees_dir = \"/var/clones/\"\n"
    ));
    assert!(
        task_of(&elsewhere, &vars("d-1"), None)
            .workspace
            .unwrap()
            .starts_with("/var/clones/acme-widgets-7-")
    );
    let plain = rule(&format!("{head}workspace = \"/srv/widgets\"\n"));
    let task = task_of(&plain, &vars("d-1"), None);
    assert_eq!(task.workspace.as_deref(), Some("/srv/widgets"));
    assert_eq!(task.worktree_of, None);

    let refused = |text: &str| rule(&format!("{head}{text}")).validate().unwrap_err();
    assert!(refused("worktree = true\n").contains("none is set"));
    assert!(refused("workspace = \"widgets\"\nworktree = true\n").contains("absolute"));
    assert!(
        refused("workspace = \"/srv/widgets\"\nworktree = true\nworktrees_dir = \"/srv/widgets/clones\"\n")
            .contains("inside the workspace")
    );
    assert!(
        refused("workspace = \"/srv/widgets\"\nworktrees_dir = \"/tmp/x\"\n")
            .contains("worktree is off")
    );
}

#[test]
fn a_triggered_task_may_write_only_to_its_own_issue_unasked() {
    let rule = rule(
        "name = \"fix\"\nevent = \"issues.labeled\"\nlabel = \"agent-fix\"\nworkspace = \"/tmp\"\npre_approve = [\"github_comment\"]\ntask = { prompt = \"Fix {repo}#{number}: {title}\" }\n",
    );
    let mut vars = BTreeMap::new();
    vars.insert("repo", "acme/widgets".to_owned());
    vars.insert("number", "7".to_owned());
    vars.insert("title", "Crash".to_owned());
    let task = task_of(&rule, &vars, None);
    assert_eq!(task.prompt.as_deref(), Some("Fix acme/widgets#7: Crash"));
    let policy: orchestrator_tools::Policy =
        serde_json::from_value(task.agent.policy.clone().unwrap()).unwrap();
    assert_eq!(policy.github_targets, ["acme/widgets#7"]);
    assert_eq!(
        policy.github_repos,
        ["acme/widgets"],
        "its GitHub reads stay in the triggering repository"
    );
    let decide = |number: u64| {
        policy
            .decide(
                "github_comment",
                orchestrator_tools::ApprovalClass::GithubWrite,
                &json!({"repo": "acme/widgets", "number": number, "body": "x"}),
            )
            .0
    };
    assert_eq!(decide(7), Decision::Allow);
    assert_eq!(decide(8), Decision::Ask);
    assert_eq!(
        policy
            .decide(
                "write_file",
                orchestrator_tools::ApprovalClass::Write,
                &json!({})
            )
            .0,
        Decision::Deny,
        "a trigger's task gets an automation's read-only default"
    );
}

#[test]
fn a_rules_policy_may_widen_the_repositories_its_tasks_read() {
    let rule = rule(
        "name = \"fix\"\nevent = \"issues.labeled\"\nlabel = \"agent-fix\"\nworkspace = \"/tmp\"\ntask = { prompt = \"Fix it\", agent = { policy = { default = \"allow\", github_repos = [\"acme/widgets\", \"acme/docs\"] } } }\n",
    );
    let mut vars = BTreeMap::new();
    vars.insert("repo", "acme/widgets".to_owned());
    vars.insert("number", "7".to_owned());
    vars.insert("title", "Crash".to_owned());
    let task = task_of(&rule, &vars, None);
    let policy: orchestrator_tools::Policy =
        serde_json::from_value(task.agent.policy.clone().unwrap()).unwrap();
    assert_eq!(policy.github_repos, ["acme/widgets", "acme/docs"]);
}

fn labeled(number: u64) -> Value {
    json!({
        "action": "labeled",
        "label": {"name": "agent-fix"},
        "issue": {"number": number, "title": "t", "html_url": "u"},
        "repository": {"full_name": "acme/widgets"},
        "sender": {"login": "alice"},
    })
}

fn triggers(store: Store, github: Option<GitHub>, bot: Option<&str>) -> Triggers {
    Triggers {
        retry: DeliveryRetry::default(),
        store,
        rules: vec![rule(
            "name = \"fix\"\nevent = \"issues.labeled\"\nlabel = \"agent-fix\"\nrepos = [\"acme/widgets\"]\n",
        )],
        github,
        bot_login: bot.map(str::to_owned),
        mention: None,
    }
}

async fn fake_github() -> (orchestrator_test_support::github_server::FakeGitHub, GitHub) {
    use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
    let fake = FakeGitHub::start().await;
    fake.set_permission("acme/widgets", "alice", "write");
    let github = GitHub::new(orchestrator_github::ClientConfig::new(
        fake.url(),
        Some(FAKE_TOKEN.into()),
    ))
    .unwrap();
    (fake, github)
}

#[tokio::test]
async fn an_unknown_bot_login_fails_the_delivery_rather_than_trigger_on_its_own_events() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (fake, github) = fake_github().await;
    // GitHub does not say who the token is: the bot is unknown.
    fake.fail_next("GET", "/user", 401, 1);
    let t = triggers(db.store.clone(), Some(github.clone()), None);
    let err = t
        .deliver("d1", "webhook", "issues", &labeled(1))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("bot's login is unknown"), "{err}");
    let row = db.store.delivery("d1").await.unwrap().unwrap();
    assert_eq!(row.status, "failed");
    let t = triggers(db.store.clone(), Some(github), Some("orchestrator-bot"));
    let done = t
        .deliver("d1", "webhook", "issues", &labeled(1))
        .await
        .unwrap();
    assert!(
        matches!(done, Delivered::Processed { ref tasks, .. } if tasks.len() == 1),
        "{done:?}"
    );
}

#[tokio::test]
async fn the_poller_leaves_its_cursor_at_an_event_in_progress_and_retries_a_failed_one() {
    use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
    let db = orchestrator_test_support::sqlite_store().await;
    let fake = FakeGitHub::start().await;
    fake.add_issue("acme/widgets", 1, "t", "", "alice");
    fake.set_permission("acme/widgets", "alice", "write");
    let github = GitHub::new(orchestrator_github::ClientConfig::new(
        fake.url(),
        Some(FAKE_TOKEN.into()),
    ))
    .unwrap();
    let t = triggers(db.store.clone(), Some(github), Some("orchestrator-bot"));
    let repo = RepoRef::parse("acme/widgets").unwrap();
    assert_eq!(
        poll_once(&t, &repo).await.unwrap(),
        0,
        "the first poll only looks"
    );
    let event = fake.label_issue("acme/widgets", 1, "agent-fix", "alice");
    let id = format!("poll:acme/widgets:event:{event}");
    // Another daemon (or this one before a crash) is processing the event.
    let info = DeliveryInfo {
        id: &id,
        source: "poll",
        event: "issues",
        action: Some("labeled"),
        repo: Some("acme/widgets"),
        subject: None,
    };
    assert_eq!(
        db.store
            .claim_delivery(&info, STALE_PROCESSING.as_millis() as i64)
            .await
            .unwrap(),
        DeliveryClaim::Fresh
    );
    assert_eq!(poll_once(&t, &repo).await.unwrap(), 0);
    let cursor: Cursor =
        serde_json::from_str(&db.store.poll_cursor("acme/widgets").await.unwrap().unwrap())
            .unwrap();
    assert!(
        cursor.event < event,
        "the cursor stays before the busy event"
    );
    // That processing failed; the next poll processes the event again.
    db.store.fail_delivery(&id, 1, "died").await.unwrap();
    assert_eq!(poll_once(&t, &repo).await.unwrap(), 1);
    let row = db.store.delivery(&id).await.unwrap().unwrap();
    assert_eq!(row.status, "processed");
    assert_eq!(row.task_ids.len(), 1);
    assert_eq!(poll_once(&t, &repo).await.unwrap(), 0, "and only once");
}

#[tokio::test]
async fn the_poller_reads_a_burst_of_more_than_a_page_whole() {
    use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
    let db = orchestrator_test_support::sqlite_store().await;
    let fake = FakeGitHub::start().await;
    fake.add_issue("acme/widgets", 1, "t", "", "alice");
    fake.set_permission("acme/widgets", "alice", "write");
    for _ in 0..30 {
        fake.label_issue("acme/widgets", 1, "old", "alice");
    }
    let github = GitHub::new(orchestrator_github::ClientConfig::new(
        fake.url(),
        Some(FAKE_TOKEN.into()),
    ))
    .unwrap();
    let t = triggers(db.store.clone(), Some(github), Some("orchestrator-bot"));
    let repo = RepoRef::parse("acme/widgets").unwrap();
    assert_eq!(poll_once(&t, &repo).await.unwrap(), 0);
    // 250 events between two rounds: three pages of 100.
    for n in 0..250 {
        fake.label_issue("acme/widgets", 1, &format!("burst-{n}"), "alice");
    }
    assert_eq!(poll_once(&t, &repo).await.unwrap(), 250);
    let rows = db.store.deliveries(1000).await.unwrap();
    assert_eq!(
        rows.len(),
        250,
        "every event of the burst, none from before"
    );
    assert_eq!(
        fake.requests_to("GET", "/issues/events").len(),
        1 + 3,
        "the second round stops at the page that reaches the cursor"
    );
    assert_eq!(poll_once(&t, &repo).await.unwrap(), 0);
}

#[test]
fn a_triggered_task_reads_only_its_own_tree_unless_the_template_widens_it() {
    let mut vars = BTreeMap::new();
    vars.insert("repo", "acme/widgets".to_owned());
    vars.insert("number", "7".to_owned());
    vars.insert("title", "Crash".to_owned());
    let scope = |toml_text: &str| {
        let task = task_of(&rule(toml_text), &vars, None);
        let policy: orchestrator_tools::Policy =
            serde_json::from_value(task.agent.policy.unwrap()).unwrap();
        policy.task_scope
    };
    let head =
        "name = \"fix\"\nevent = \"issues.labeled\"\nlabel = \"agent-fix\"\nworkspace = \"/tmp\"\n";
    assert_eq!(
        scope(&format!("{head}task = {{ prompt = \"Fix it\" }}\n")),
        Some(TaskScope::Tree)
    );
    assert_eq!(
        scope(&format!(
            "{head}task = {{ prompt = \"Fix it\", agent = {{ policy = {{ default = \"allow\" }} }} }}\n"
        )),
        Some(TaskScope::Tree),
        "a template's policy that does not name a scope"
    );
    assert_eq!(
        scope(&format!(
            "{head}task = {{ prompt = \"Fix it\", agent = {{ policy = {{ default = \"allow\", task_scope = \"all\" }} }} }}\n"
        )),
        Some(TaskScope::All),
        "a person's template may widen it"
    );
}

#[tokio::test]
async fn the_poller_takes_a_label_only_from_someone_with_write_access() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (fake, github) = fake_github().await;
    fake.add_issue("acme/widgets", 1, "t", "", "alice");
    fake.set_permission("acme/widgets", "rita", "read");
    let t = triggers(db.store.clone(), Some(github), Some("orchestrator-bot"));
    let repo = RepoRef::parse("acme/widgets").unwrap();
    assert_eq!(poll_once(&t, &repo).await.unwrap(), 0);
    let by_rita = fake.label_issue("acme/widgets", 1, "agent-fix", "rita");
    let by_alice = fake.label_issue("acme/widgets", 1, "agent-fix", "alice");
    assert_eq!(poll_once(&t, &repo).await.unwrap(), 2, "both are delivered");
    let rita = db
        .store
        .delivery(&format!("poll:acme/widgets:event:{by_rita}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rita.status, "ignored");
    assert!(rita.task_ids.is_empty());
    assert_eq!(
        rita.detail.as_deref(),
        Some("fix: rita has read access, not write (any_author is off)")
    );
    let alice = db
        .store
        .delivery(&format!("poll:acme/widgets:event:{by_alice}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(alice.status, "processed");
    assert_eq!(alice.task_ids.len(), 1);
}

#[tokio::test]
async fn payloads_without_their_issue_or_number_are_ignored_with_the_reason() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (_fake, github) = fake_github().await;
    let t = triggers(db.store.clone(), Some(github), Some("orchestrator-bot"));
    let mut no_issue = labeled(1);
    no_issue.as_object_mut().unwrap().remove("issue");
    let mut text_number = labeled(1);
    text_number["issue"]["number"] = json!("7");
    let mut no_sender = labeled(1);
    no_sender.as_object_mut().unwrap().remove("sender");
    let cases = [
        (no_issue, "the payload has no issue"),
        (text_number, "issue.number is \"7\""),
        (no_sender, "no sender"),
    ];
    for (n, (payload, why)) in cases.into_iter().enumerate() {
        let done = t
            .deliver(&format!("bad-{n}"), "webhook", "issues", &payload)
            .await
            .unwrap();
        match done {
            Delivered::Processed { tasks, detail } => {
                assert!(tasks.is_empty(), "{detail}");
                assert!(
                    detail.contains("ignored") && detail.contains(why),
                    "{detail}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(
        db.store
            .list_tasks(&Default::default())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_delivery_whose_github_call_hangs_fails_at_the_deadline_and_is_tried_again() {
    // A processor stuck on GitHub used to hold its claim until the takeover window (then ten
    // minutes) ran out, and a delivery whose daemon died waited as long: the chaos soak found
    // one still `processing` when everything else had drained.
    let db = orchestrator_test_support::sqlite_store().await;
    let (fake, github) = fake_github().await;
    let held = fake.hold_next("GET", "/collaborators/alice/permission");
    let mut t = triggers(db.store.clone(), Some(github), Some("orchestrator-bot"));
    t.retry.deadline = Duration::from_millis(300);
    let err = t
        .deliver("d-hang", "webhook", "issues", &labeled(7))
        .await
        .unwrap_err();
    held.release();
    assert!(err.may_pass(), "{err}");
    assert!(err.to_string().contains("deadline"), "{err}");
    let row = db.store.delivery("d-hang").await.unwrap().unwrap();
    assert_eq!(row.status, "failed", "{row:?}");
    assert!(row.retry_at.is_some(), "a deadline may pass: {row:?}");
    assert!(row.detail.as_deref().unwrap_or("").contains("deadline"));
    // The next try, with GitHub answering, creates the task.
    let done = t
        .deliver("d-hang", "webhook", "issues", &labeled(7))
        .await
        .unwrap();
    assert!(
        matches!(done, Delivered::Processed { ref tasks, .. } if tasks.len() == 1),
        "{done:?}"
    );
}

#[test]
fn an_abandoned_claim_is_taken_over_soon_after_the_processing_deadline() {
    let retry = DeliveryRetry::default();
    // A live processor gives up at its deadline, so a claim older than twice that is abandoned;
    // waiting much longer only delays the tasks of a daemon that died mid-delivery.
    assert!(retry.stale_after > retry.deadline, "{retry:?}");
    assert!(retry.stale_after <= retry.deadline * 3, "{retry:?}");
    assert!(retry.stale_after <= Duration::from_secs(180), "{retry:?}");
}

/// A rule says which repositories it applies to: an absent or empty `repos` is refused when the
/// config is read, with the words to write for "any repository", since a delivery signed with the
/// secret may come from any repository the secret was ever given to.
#[test]
fn a_rule_must_name_its_repositories_or_say_any() {
    let head = "name = \"fix\"\nevent = \"issues.labeled\"\nlabel = \"agent-fix\"\n";
    for repos in ["", "repos = []\n"] {
        let err = rule(&format!("{head}{repos}")).validate().unwrap_err();
        assert!(err.contains("trigger \"fix\""), "{err}");
        assert!(err.contains("repos = [\"*\"]"), "{err}");
    }
    assert!(rule(&format!("{head}repos = [\"*\"]\n")).validate().is_ok());
    assert!(
        rule(&format!(
            "{head}repos = [\"acme/widgets\", \"acme/docs\"]\n"
        ))
        .validate()
        .is_ok()
    );
    let err = rule(&format!("{head}repos = [\"acme/*\"]\n"))
        .validate()
        .unwrap_err();
    assert!(err.contains("trigger \"fix\""), "{err}");
}

/// Which rules an event of a repository reaches: a listed repository, any repository under
/// `["*"]`, and never one a rule does not list; a rule built with no repositories (which a config
/// file cannot hold) matches none rather than all.
#[tokio::test]
async fn a_rule_triggers_only_on_the_repositories_it_lists() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (fake, github) = fake_github().await;
    fake.set_permission("acme/other", "alice", "write");
    let head = "event = \"issues.labeled\"\nlabel = \"agent-fix\"\n";
    let t = Triggers {
        retry: DeliveryRetry::default(),
        store: db.store.clone(),
        rules: vec![
            rule(&format!(
                "name = \"listed\"\n{head}repos = [\"acme/widgets\"]\n"
            )),
            rule(&format!("name = \"any\"\n{head}repos = [\"*\"]\n")),
            rule(&format!("name = \"none\"\n{head}repos = []\n")),
        ],
        github: Some(github),
        bot_login: Some("orchestrator-bot".into()),
        mention: None,
    };
    let titles = |tasks: &[NewTask]| -> Vec<String> {
        let mut titles: Vec<String> = tasks.iter().map(|t| t.title.clone()).collect();
        titles.sort();
        titles
    };
    let mut other = labeled(2);
    other["repository"]["full_name"] = json!("acme/other");
    let (tasks, _) = t.tasks_for("d-other", "issues", &other).await.unwrap();
    let found = titles(&tasks);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("any: "), "{found:?}");
    let (tasks, _) = t
        .tasks_for("d-listed", "issues", &labeled(1))
        .await
        .unwrap();
    let found = titles(&tasks);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().all(|t| !t.starts_with("none: ")), "{found:?}");
}

/// Makes every insert into `tasks` fail on the store at `url`, or lets them through again: a
/// transaction that fails at its very end, as a lost connection or a serialization failure would.
async fn refuse_task_inserts(url: &str, refuse: bool) {
    use sqlx::Connection;
    if url.starts_with("postgres") {
        let mut raw = sqlx::PgConnection::connect(url).await.unwrap();
        let sql = if refuse {
            "CREATE FUNCTION refuse_tasks() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$; \
             CREATE TRIGGER refuse_tasks BEFORE INSERT ON tasks FOR EACH ROW \
             EXECUTE FUNCTION refuse_tasks()"
        } else {
            "DROP TRIGGER refuse_tasks ON tasks"
        };
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut raw)
            .await
            .unwrap();
        raw.close().await.unwrap();
    } else {
        let mut raw = sqlx::SqliteConnection::connect(&format!("sqlite://{url}"))
            .await
            .unwrap();
        let sql = if refuse {
            "CREATE TRIGGER refuse_tasks BEFORE INSERT ON tasks \
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        } else {
            "DROP TRIGGER refuse_tasks"
        };
        sqlx::query(sql).execute(&mut raw).await.unwrap();
        raw.close().await.unwrap();
    }
}

/// A delivery whose tasks could not be written at the end (the last transaction failed) used to
/// rest `failed` with no retry time: GitHub already had its 202 and would not send it again, and
/// the background processor only looks at failures with a time. It is now tried again, and the
/// task is made once the store takes it.
async fn a_delivery_whose_last_write_fails_is_tried_again(
    db: orchestrator_test_support::TestStore,
) {
    let (_fake, github) = fake_github().await;
    let mut t = triggers(db.store.clone(), Some(github), Some("orchestrator-bot"));
    t.retry.first_wait = Duration::from_millis(50);
    refuse_task_inserts(&db.url, true).await;
    // Accepted as the webhook route accepts it: with its payload, for the background processor.
    let payload = labeled(11);
    let info = DeliveryInfo {
        id: "d-write",
        source: "webhook",
        event: "issues",
        action: Some("labeled"),
        repo: Some("acme/widgets"),
        subject: None,
    };
    db.store
        .accept_delivery(&info, &payload.to_string())
        .await
        .unwrap();
    let err = t
        .deliver("d-write", "webhook", "issues", &payload)
        .await
        .unwrap_err();
    assert!(err.may_pass(), "{err}");
    let row = db.store.delivery("d-write").await.unwrap().unwrap();
    assert_eq!(row.status, "failed", "{row:?}");
    assert!(
        row.retry_at.is_some(),
        "a failed write may pass, so it needs a retry time: {row:?}"
    );
    // The background processor finds it once it is due, and makes the task.
    refuse_task_inserts(&db.url, false).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let due = db.store.due_deliveries(60_000, 16).await.unwrap();
    assert!(due.iter().any(|d| d.id == "d-write"), "{due:?}");
    let done = t
        .deliver("d-write", "webhook", "issues", &labeled(11))
        .await
        .unwrap();
    assert!(
        matches!(done, Delivered::Processed { ref tasks, .. } if tasks.len() == 1),
        "{done:?}"
    );
}

#[tokio::test]
async fn a_delivery_whose_last_write_fails_is_tried_again_sqlite() {
    a_delivery_whose_last_write_fails_is_tried_again(
        orchestrator_test_support::sqlite_store().await,
    )
    .await;
}

#[tokio::test]
async fn a_delivery_whose_last_write_fails_is_tried_again_postgres() {
    let Some(db) = orchestrator_test_support::postgres_store().await else {
        return;
    };
    a_delivery_whose_last_write_fails_is_tried_again(db).await;
}

/// A template the store refuses fails the same way every time: it is failed visibly, with the
/// reason, and not tried again by itself.
#[tokio::test]
async fn a_delivery_whose_task_the_store_refuses_is_failed_for_good() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (_fake, github) = fake_github().await;
    let mut t = triggers(db.store.clone(), Some(github), Some("orchestrator-bot"));
    t.rules[0].task.title = Some("   ".into());
    let err = t
        .deliver("d-bad", "webhook", "issues", &labeled(12))
        .await
        .unwrap_err();
    assert!(!err.may_pass(), "{err}");
    let row = db.store.delivery("d-bad").await.unwrap().unwrap();
    assert_eq!(row.status, "failed", "{row:?}");
    assert!(row.retry_at.is_none(), "{row:?}");
    assert!(
        row.detail.as_deref().unwrap_or("").contains("title"),
        "{row:?}"
    );
}

/// A login or repository name no GitHub account or repository can have (a NUL, a space, a second
/// slash) is a payload made by hand: it is ignored with the reason, never failed (which a person
/// would retry) nor asked of GitHub.
#[tokio::test]
async fn names_no_github_account_can_have_are_ignored_with_the_reason() {
    for db in [
        Some(orchestrator_test_support::sqlite_store().await),
        orchestrator_test_support::postgres_store().await,
    ]
    .into_iter()
    .flatten()
    {
        let (_fake, github) = fake_github().await;
        let mut t = triggers(db.store.clone(), Some(github), Some("orchestrator-bot"));
        t.rules[0].repos = vec![ANY_REPO.to_owned()];
        let mut nul_login = labeled(1);
        nul_login["sender"]["login"] = json!("ali\u{0}ce");
        let mut nul_repo = labeled(2);
        nul_repo["repository"]["full_name"] = json!("acme/wid\u{0}gets");
        let mut two_slashes = labeled(3);
        two_slashes["repository"]["full_name"] = json!("acme/widgets/../x");
        let cases = [
            (nul_login, "sender"),
            (nul_repo, "repository"),
            (two_slashes, "repository"),
        ];
        for (n, (payload, why)) in cases.into_iter().enumerate() {
            let id = format!("odd-{n}");
            let done = t.deliver(&id, "webhook", "issues", &payload).await;
            let Ok(Delivered::Processed { tasks, detail }) = done else {
                panic!("{id}: {done:?}");
            };
            assert!(tasks.is_empty(), "{detail}");
            assert!(
                detail.contains("ignored") && detail.contains(why),
                "{detail}"
            );
            let row = db.store.delivery(&id).await.unwrap().unwrap();
            assert_eq!(row.status, "ignored", "{row:?}");
        }
    }
}

/// The background processor took deliveries one at a time: one whose GitHub call hung held up
/// every other until its deadline, even those that need no GitHub call. Now they run side by side,
/// except those about the same issue, which keep their order.
#[tokio::test]
async fn a_hung_github_call_holds_up_only_its_own_issue() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (fake, github) = fake_github().await;
    let held = fake.hold_next("GET", "/collaborators/alice/permission");
    let mut t = triggers(db.store.clone(), Some(github), Some("orchestrator-bot"));
    // Far past the guard below: the held delivery cannot end by its deadline during the test.
    t.retry.deadline = Duration::from_secs(600);
    let accept = |id: &'static str, payload: Value| {
        let store = db.store.clone();
        async move {
            let info = DeliveryInfo {
                id,
                source: "webhook",
                event: "issues",
                action: Some("labeled"),
                repo: Some("acme/widgets"),
                subject: None,
            };
            store
                .accept_delivery(&info, &payload.to_string())
                .await
                .unwrap();
        }
    };
    let other_label = |number: u64| {
        let mut payload = labeled(number);
        payload["label"]["name"] = json!("question");
        payload
    };
    // The first asks GitHub for alice's permission, which hangs; the others need no GitHub call.
    accept("hung", labeled(1)).await;
    accept("same-issue", other_label(1)).await;
    accept("other-issue", other_label(2)).await;
    let stop = CancellationToken::new();
    let wake = Arc::new(tokio::sync::Notify::new());
    let processor = tokio::spawn(process_loop(Arc::new(t), wake, stop.clone()));
    let status = |id: &'static str| {
        let store = db.store.clone();
        async move { store.delivery(id).await.unwrap().unwrap().status }
    };
    let guard = std::time::Instant::now() + Duration::from_secs(30);
    while status("other-issue").await != "ignored" {
        assert!(
            std::time::Instant::now() < guard,
            "a delivery needing no GitHub call waited behind a hung one"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status("hung").await, "processing");
    assert_eq!(
        status("same-issue").await,
        "queued",
        "a later delivery about the same issue waits for the one before it"
    );
    held.release();
    let guard = std::time::Instant::now() + Duration::from_secs(30);
    while status("same-issue").await != "ignored" || status("hung").await != "processed" {
        assert!(std::time::Instant::now() < guard, "never drained");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    processor.await.unwrap();
}

#[test]
fn a_rule_may_name_the_events_repository_instead_of_a_workspace() {
    let head =
        "name = \"fix\"\nevent = \"issues.labeled\"\nlabel = \"agent-fix\"\nrepos = [\"*\"]\n";
    let on_repo = rule(&format!(
        "{head}task = {{ prompt = \"Fix it\", repository = \"https://github.com/{{repo}}.git\", ref = \"main\" }}\n"
    ));
    assert!(on_repo.validate().is_ok(), "{:?}", on_repo.validate());
    let mut vars = BTreeMap::new();
    vars.insert("repo", "acme/widgets".to_owned());
    vars.insert("number", "7".to_owned());
    vars.insert("title", "Crash".to_owned());
    vars.insert("delivery", "d-1".to_owned());
    let task = task_of(&on_repo, &vars, None);
    assert_eq!(task.workspace, None);
    let repository = task.repository.clone().unwrap();
    assert_eq!(repository.url, "https://github.com/acme/widgets.git");
    assert_eq!(repository.git_ref.as_deref(), Some("main"));
    task.validate().unwrap();
    let both = rule(&format!(
        "{head}workspace = \"/srv/w\"\ntask = {{ prompt = \"Fix it\", repository = \"/srv/git/w\" }}\n"
    ));
    assert!(both.validate().unwrap_err().contains("names no workspace"));
}

/// A delivery that failed and waits for its retry held up nothing: a later one about the same
/// issue ran first, and another daemon on the same store never knew about the first at all. Now
/// the later one waits for the earlier one's retry or end, whichever daemon holds either.
#[tokio::test]
async fn a_later_delivery_about_an_issue_waits_for_the_earlier_ones_retry_on_every_daemon() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (fake, github) = fake_github().await;
    // The first delivery's permission check fails with an error that may pass (each of the
    // client's own tries of the read), once.
    fake.fail_next("GET", "/collaborators/alice/permission", 502, 3);
    let daemon = || {
        let mut t = triggers(
            db.store.clone(),
            Some(github.clone()),
            Some("orchestrator-bot"),
        );
        t.retry.first_wait = Duration::from_secs(2);
        Arc::new(t)
    };
    let accept = |id: &'static str, payload: Value| {
        let store = db.store.clone();
        async move {
            let subject = delivery_subject(&payload);
            let info = DeliveryInfo {
                id,
                source: "webhook",
                event: "issues",
                action: Some("labeled"),
                repo: Some("acme/widgets"),
                subject: subject.as_deref(),
            };
            store
                .accept_delivery(&info, &payload.to_string())
                .await
                .unwrap();
        }
    };
    let mut unlabeled = labeled(1);
    unlabeled["label"]["name"] = json!("question");
    accept("first", labeled(1)).await;
    accept("second", unlabeled).await;
    // Two daemons' processors on one store.
    let stop = CancellationToken::new();
    let processors: Vec<_> = (0..2)
        .map(|_| {
            let wake = Arc::new(tokio::sync::Notify::new());
            tokio::spawn(process_loop(daemon(), wake, stop.clone()))
        })
        .collect();
    let row = |id: &'static str| {
        let store = db.store.clone();
        async move { store.delivery(id).await.unwrap().unwrap() }
    };
    let mut saw_retry_wait = false;
    let guard = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (first, second) = (row("first").await, row("second").await);
        if first.status == "failed" && first.retry_at.is_some() {
            saw_retry_wait = true;
        }
        if second.status != "queued" {
            assert!(
                first.status == "processed",
                "the later delivery ran while the earlier one was {}: {first:?}",
                first.status
            );
        }
        if second.status == "ignored" {
            break;
        }
        assert!(
            std::time::Instant::now() < guard,
            "never drained: {first:?} {second:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        saw_retry_wait,
        "the first delivery never waited for a retry"
    );
    let first = row("first").await;
    assert_eq!((first.status.as_str(), first.attempts), ("processed", 2));
    stop.cancel();
    for p in processors {
        p.await.unwrap();
    }
}

/// Deliveries are ordered by what they are about: an issue or a pull request by its number, CI's
/// events by the pull request they name, else by their commit.
#[test]
fn a_deliverys_subject_is_its_issue_its_pull_request_or_its_commit() {
    let repo = json!({"full_name": "acme/widgets"});
    let sha = "a".repeat(40);
    let cases = [
        (
            json!({"repository": repo, "issue": {"number": 7}}),
            Some("acme/widgets#7".to_owned()),
        ),
        (
            json!({"repository": repo, "pull_request": {"number": 8}}),
            Some("acme/widgets#8".to_owned()),
        ),
        (
            json!({"repository": repo, "check_run": {"head_sha": sha, "pull_requests": [{"number": 9}]}}),
            Some("acme/widgets#9".to_owned()),
        ),
        (
            json!({"repository": repo, "check_run": {"head_sha": sha, "pull_requests": []}}),
            Some(format!("acme/widgets@{sha}")),
        ),
        (
            json!({"repository": repo, "sha": sha, "state": "failure", "context": "ci"}),
            Some(format!("acme/widgets@{sha}")),
        ),
        (json!({"repository": repo, "action": "created"}), None),
    ];
    for (payload, subject) in cases {
        assert_eq!(delivery_subject(&payload), subject, "{payload}");
    }
}

#[test]
fn pacing_settings_that_cannot_work_are_refused_with_the_reason() {
    let head = "name = \"ask\"\nevent = \"issue_comment.created\"\nrepos = [\"*\"]\n";
    let ok = rule(&format!("{head}debounce_secs = 30\nsingleton = true\n"));
    assert!(ok.validate().is_ok(), "{:?}", ok.validate());
    for (extra, says) in [
        ("debounce_secs = 0\n", "not between 1 s and a day"),
        ("debounce_secs = 90000\n", "not between 1 s and a day"),
        ("max_running = 0\n", "max_running is 0"),
        ("singleton = true\nmax_running = 2\n", "keep one"),
        ("daily_tokens = 0\n", "daily_tokens is 0"),
        ("weight = 0\n", "a weight is 1 to 100"),
        ("weight = 101\n", "a weight is 1 to 100"),
    ] {
        let bad = rule(&format!("{head}{extra}"));
        let err = bad.validate().unwrap_err();
        assert!(err.contains(says), "{extra}: {err}");
    }
    let round = rule(
        "name = \"review\"\nevent = \"pull_request_review.submitted\"\nrepos = [\"*\"]\n\
         debounce_secs = 30\ntask = { repository = \"https://github.com/{repo}.git\" }\n",
    );
    assert!(round.validate().unwrap_err().contains("join_secs"));
}

#[test]
fn a_rules_pacing_names_its_keys() {
    let mut vars = BTreeMap::new();
    vars.insert("repo", "Acme/Widgets".to_owned());
    vars.insert("number", "7".to_owned());
    vars.insert("title", "Crash".to_owned());
    let head = "name = \"ask\"\nevent = \"issue_comment.created\"\nrepos = [\"*\"]\n";
    let debounced = task_of(&rule(&format!("{head}debounce_secs = 30\n")), &vars, None);
    assert_eq!(
        debounced.join.as_deref(),
        Some("debounce:ask:acme/widgets#7")
    );
    assert!(debounced.run_after.unwrap() > orchestrator_types::now_millis() + 25_000);
    assert!(debounced.concurrency.is_none());
    let single = task_of(&rule(&format!("{head}singleton = true\n")), &vars, None);
    let key = single.concurrency.unwrap();
    assert_eq!(
        (key.key.as_str(), key.max_running),
        ("rule:ask:acme/widgets#7", 1)
    );
    assert_eq!(single.join.as_deref(), Some("singleton:ask:acme/widgets#7"));
    let bounded = task_of(&rule(&format!("{head}max_running = 3\n")), &vars, None);
    let key = bounded.concurrency.unwrap();
    assert_eq!((key.key.as_str(), key.max_running), ("rule:ask", 3));
    assert!(bounded.join.is_none());
    assert!(bounded.budget.is_none() && bounded.weight.is_none());
    let budgeted = task_of(
        &rule(&format!("{head}daily_tokens = 500000\nweight = 3\n")),
        &vars,
        None,
    );
    let budget = budgeted.budget.unwrap();
    assert_eq!(
        (budget.key.as_str(), budget.tokens_per_day),
        ("rule:ask", 500_000)
    );
    assert_eq!(budgeted.weight, Some(3));
}

#[test]
fn a_rules_best_of_fills_its_pull_request_from_the_delivery_and_a_round_has_none() {
    let head =
        "name = \"fix\"\nevent = \"issues.labeled\"\nlabel = \"agent-fix\"\nrepos = [\"*\"]\n";
    let vars = {
        let mut vars = BTreeMap::new();
        vars.insert("repo", "acme/widgets".to_owned());
        vars.insert("number", "7".to_owned());
        vars.insert("title", "Crash".to_owned());
        vars.insert("delivery", "d-1".to_owned());
        vars
    };
    let tabled = rule(&format!(
        "{head}task = {{ repository = \"https://github.com/{{repo}}.git\", prompt = \"Fix it\", \
         gates = [\"cargo test\"], best_of = {{ n = 3, choose = \"first_passing\", \
         pull_request = {{ repo = \"{{repo}}\", title = \"Fix #{{number}}\" }} }} }}\n"
    ));
    assert!(tabled.validate().is_ok());
    let task = task_of(&tabled, &vars, None);
    let best_of = task.best_of.clone().expect("the rule's best_of");
    assert_eq!(best_of.n, 3);
    assert_eq!(best_of.choose, orchestrator_types::Choose::FirstPassing);
    let pull = best_of.pull_request.unwrap();
    assert_eq!(pull.repo, "acme/widgets");
    assert_eq!(pull.title.as_deref(), Some("Fix #7"));
    assert_eq!(pull.issue, Some(7), "the triggering issue");
    assert!(pull.draft);
    assert!(task.validate().is_ok(), "{:?}", task.validate());

    // `best_of = 3` alone takes the defaults.
    let counted = rule(&format!(
        "{head}task = {{ repository = \"https://github.com/{{repo}}.git\", prompt = \"Fix it\", \
         gates = [\"cargo test\"], best_of = 3 }}\n"
    ));
    let best_of = task_of(&counted, &vars, None).best_of.unwrap();
    assert_eq!(
        (best_of.n, best_of.choose, best_of.pull_request),
        (3, orchestrator_types::Choose::SmallestPassing, None)
    );

    // A round on a pull request pushes one commit: no siblings.
    let pull = orchestrator_types::PullTarget::parse("acme/widgets#34").unwrap();
    assert!(task_of(&counted, &vars, Some(&pull)).best_of.is_none());

    // A best_of a task could never honour is refused when the task is made.
    let mut gateless = task_of(&counted, &vars, None);
    gateless.gates.clear();
    let err = gateless.validate().unwrap_err().to_string();
    assert!(err.contains("needs a gate"), "{err}");
}
