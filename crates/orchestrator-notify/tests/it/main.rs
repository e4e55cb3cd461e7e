//! The notifier against a real store, on SQLite and on PostgreSQL, and a local HTTP receiver: what
//! happened is found once in the order of changes, fanned out to the sinks that want it, sent,
//! retried with backoff and marked failed; and only the lease holder sends.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use orchestrator_notify::{Notifier, NotifierConfig, NotifyConfig, PassCounts};
use orchestrator_store::{
    ApprovalDecision, Completion, NewApproval, Outcome, Store, approval_kind, notification_status,
};
use orchestrator_test_support::TestStore;
use orchestrator_types::{NewTask, TaskId, now_millis};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = orchestrator_test_support::sqlite_store().await;
                    super::$name(&db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(db) = orchestrator_test_support::postgres_store().await {
                        super::$name(&db).await;
                    }
                }
            )*
        }
    };
}

both_backends!(
    what_happened_is_told_once_to_the_sinks_that_want_it,
    a_receiver_that_fails_is_retried_then_given_up_on,
    only_the_lease_holder_sends,
    a_fast_sinks_message_is_marked_sent_while_a_slow_one_still_waits,
);

// PostgreSQL only: SQLite has one writer at a time, so nothing there commits past a held
// transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_held_open_on_the_server_delays_no_notice_on_postgres() {
    if let Some(db) = orchestrator_test_support::postgres_store().await {
        a_transaction_held_open_on_the_server_delays_no_notice(&db).await;
    }
}

/// A local receiver answering each POST with `status`, keeping the path, the event header and the
/// body of each.
struct Receiver {
    addr: std::net::SocketAddr,
    got: Arc<Mutex<Vec<(String, String, Value)>>>,
}

impl Receiver {
    async fn start(status: u16) -> Receiver {
        Receiver::start_hanging(status, 0).await
    }

    /// A receiver whose first `hang` requests get no answer for a minute (a sink that hangs).
    async fn start_hanging(status: u16, hang: usize) -> Receiver {
        let hung = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        use axum::body::Bytes;
        use axum::http::{HeaderMap, StatusCode, Uri};
        let got: Arc<Mutex<Vec<(String, String, Value)>>> = Arc::default();
        let keep = got.clone();
        let app = axum::Router::new().fallback(axum::routing::post(
            move |uri: Uri, headers: HeaderMap, body: Bytes| {
                let keep = keep.clone();
                let hung = hung.clone();
                async move {
                    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let event = headers
                        .get("x-orchestrator-event")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("?")
                        .to_owned();
                    keep.lock()
                        .unwrap()
                        .push((uri.path().to_owned(), event, body));
                    if hung.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < hang {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                    (StatusCode::from_u16(status).unwrap(), "answer")
                }
            },
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { addr, got }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn events_at(&self, path: &str) -> Vec<String> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _, _)| p == path)
            .map(|(_, event, _)| event.clone())
            .collect()
    }
}

fn config(sinks: Value) -> NotifyConfig {
    serde_json::from_value(json!({ "sinks": sinks })).unwrap()
}

fn notifier(store: &Store, holder: &str, notify: NotifyConfig) -> Notifier {
    let mut config = NotifierConfig::new(holder, notify, "http://dashboard.test");
    config.backoff_base = Duration::from_millis(50);
    config.backoff_cap = Duration::from_millis(200);
    Notifier::new(store.clone(), config).unwrap()
}

/// Passes until `done` holds for their summed counts (or a deadline), and the sum. On PostgreSQL
/// the order of changes is read below the oldest transaction open on the whole server, which
/// other test suites share, so what just committed may show a pass or a few later.
async fn passes_until(notifier: &Notifier, done: impl Fn(&PassCounts) -> bool) -> PassCounts {
    let mut sum = PassCounts::default();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let pass = notifier.run_once().await.unwrap();
        sum.leased = pass.leased;
        sum.collected += pass.collected;
        sum.queued += pass.queued;
        sum.sent += pass.sent;
        sum.retried += pass.retried;
        sum.failed += pass.failed;
        if done(&sum) || std::time::Instant::now() > deadline {
            return sum;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn claim_one(store: &Store, task: TaskId) -> orchestrator_store::Lease {
    let (claimed, lease) = store
        .claim("w", &["default".to_owned()], 1, 60_000)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(claimed.id, task);
    lease
}

async fn end(store: &Store, lease: orchestrator_store::Lease, outcome: Outcome) {
    store
        .complete(&[Completion {
            lease,
            outcome,
            details: json!({}),
        }])
        .await
        .unwrap();
}

/// A task waiting on one approval of `kind`; returns the approval's id.
async fn waiting(store: &Store, title: &str, kind: &'static str) -> i64 {
    let mut task = NewTask::agent(title, "work");
    task.workspace = Some("/tmp".into());
    let id = store.create_task(&task).await.unwrap();
    let lease = claim_one(store, id).await;
    let question = kind == approval_kind::QUESTION;
    let approval = store
        .request_approval(
            &lease,
            &NewApproval {
                call_id: format!("c-{title}"),
                kind,
                tool: if question { "ask_user" } else { "exec_shell" }.into(),
                arguments: if question {
                    json!({"question": "Which database?"})
                } else {
                    json!({"command": "rm -rf build"})
                },
                reason: "asks".into(),
                options: question.then(|| vec!["sqlite".to_owned(), "postgres".to_owned()]),
                expires_at: now_millis() + 3_600_000,
            },
        )
        .await
        .unwrap();
    end(
        store,
        lease,
        Outcome::Wait {
            reason: "waiting".into(),
        },
    )
    .await;
    approval.id
}

async fn ended(store: &Store, title: &str, outcome: Outcome) -> TaskId {
    let id = store
        .create_task(&NewTask::new(title).with_gate("true"))
        .await
        .unwrap();
    let lease = claim_one(store, id).await;
    end(store, lease, outcome).await;
    id
}

async fn what_happened_is_told_once_to_the_sinks_that_want_it(db: &TestStore) {
    let store = &db.store;
    let receiver = Receiver::start(200).await;
    let notifier = notifier(
        store,
        "d1",
        config(json!({
            "all": {"kind": "webhook", "url": receiver.url("/all"),
                    "events": ["approval_waiting", "question_waiting", "task_failed", "task_succeeded"]},
            "defaults": {"kind": "slack", "url": receiver.url("/defaults")},
        })),
    );
    // What happened before the first notifier of the store is not news.
    ended(
        store,
        "old",
        Outcome::Failed {
            error: "old".into(),
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let first = notifier.run_once().await.unwrap();
    assert!(first.leased);
    assert_eq!((first.collected, first.sent), (0, 0));

    let failed = ended(
        store,
        "breaks",
        Outcome::Failed {
            error: "gate 1 failed".into(),
        },
    )
    .await;
    ended(store, "works", Outcome::Succeeded).await;
    let approval = waiting(store, "cleans", approval_kind::TOOL).await;
    waiting(store, "asks", approval_kind::QUESTION).await;
    // Answered before any notifier looked: nobody waits, nothing to tell.
    let answered = waiting(store, "answered", approval_kind::TOOL).await;
    store
        .decide_approval(answered, &ApprovalDecision::Approve, "ann")
        .await
        .unwrap();

    let pass = passes_until(&notifier, |sum| sum.sent >= 7).await;
    // One more pass, for what a too-eager count would have left behind.
    let extra = notifier.run_once().await.unwrap();
    assert_eq!((extra.collected, extra.sent), (0, 0));
    assert_eq!(
        pass,
        PassCounts {
            leased: true,
            collected: 4,
            queued: 7,
            sent: 7,
            retried: 0,
            failed: 0
        }
    );
    let mut all = receiver.events_at("/all");
    all.sort();
    assert_eq!(
        all,
        [
            "approval_waiting",
            "question_waiting",
            "task_failed",
            "task_succeeded"
        ]
    );
    let mut defaults = receiver.events_at("/defaults");
    defaults.sort();
    assert_eq!(
        defaults,
        ["approval_waiting", "question_waiting", "task_failed"]
    );

    // Later passes, and the same changes again (the task retried and failed the same way is a
    // new end; a change to a row already told is not), tell nothing twice.
    for _ in 0..3 {
        let again = notifier.run_once().await.unwrap();
        assert_eq!((again.collected, again.queued, again.sent), (0, 0, 0));
    }
    store.retry_task(failed).await.unwrap();
    let lease = claim_one(store, failed).await;
    end(
        store,
        lease,
        Outcome::Failed {
            error: "still".into(),
        },
    )
    .await;
    let pass = passes_until(&notifier, |sum| sum.sent >= 2).await;
    assert_eq!((pass.collected, pass.sent), (1, 2));

    // The message as the webhook got it.
    let got = receiver.got.lock().unwrap().clone();
    let body = &got
        .iter()
        .find(|(p, _, b)| p == "/all" && b["event"] == "approval_waiting")
        .unwrap()
        .2;
    let slack = &got
        .iter()
        .find(|(p, e, _)| p == "/defaults" && e == "question_waiting")
        .unwrap()
        .2;
    assert!(
        slack["text"]
            .as_str()
            .unwrap()
            .contains("\"asks\" asks: Which database? (sqlite / postgres)"),
        "{slack}"
    );
    assert_eq!(
        body["link"],
        format!("http://dashboard.test/approvals#approval-{approval}")
    );
    assert_eq!(body["data"]["summary"], "rm -rf build");
    let rows = store.notifications(None, 100).await.unwrap();
    assert_eq!(rows.len(), 9);
    assert!(rows.iter().all(|r| r.status == notification_status::SENT));
    let keys: std::collections::HashSet<&str> =
        rows.iter().map(|r| r.delivery_key.as_str()).collect();
    assert_eq!(keys.len(), 9, "a key per message and sink");
}

async fn a_receiver_that_fails_is_retried_then_given_up_on(db: &TestStore) {
    let store = &db.store;
    let down = Receiver::start(503).await;
    let refuses = Receiver::start(404).await;
    let mut notify = config(json!({
        "down": {"kind": "webhook", "url": down.url("/x")},
        "refuses": {"kind": "webhook", "url": refuses.url("/x")},
    }));
    notify.max_attempts = Some(3);
    let notifier = notifier(store, "d1", notify);
    store
        .queue_notice(&orchestrator_notify::degraded(
            "d1",
            "bubblewrap is missing",
        ))
        .await
        .unwrap();
    let first = notifier.run_once().await.unwrap();
    assert_eq!((first.queued, first.retried, first.failed), (2, 1, 1));
    let refused = store
        .notifications(Some(notification_status::FAILED), 10)
        .await
        .unwrap();
    assert_eq!(refused.len(), 1, "a 404 is not tried again");
    assert_eq!(refused[0].sink, "refuses");
    assert!(
        refused[0]
            .last_error
            .as_deref()
            .unwrap()
            .contains("HTTP 404"),
        "{refused:?}"
    );
    // Not due yet: the next pass does not try it.
    assert_eq!(notifier.run_once().await.unwrap().retried, 0);
    let mut tries = 1;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(60)).await;
        let pass = notifier.run_once().await.unwrap();
        tries += pass.retried + pass.failed;
        if pass.failed > 0 {
            break;
        }
    }
    assert_eq!(tries, 3, "max_attempts tries in all");
    assert_eq!(down.events_at("/x").len(), 3);
    let failed = store
        .notifications(Some(notification_status::FAILED), 10)
        .await
        .unwrap();
    let gave_up = failed.iter().find(|n| n.sink == "down").unwrap();
    assert_eq!(gave_up.attempts, 3);
    assert!(gave_up.last_error.as_deref().unwrap().contains("HTTP 503"));
}

async fn only_the_lease_holder_sends(db: &TestStore) {
    let store = &db.store;
    let receiver = Receiver::start(200).await;
    let sinks = json!({"hook": {"kind": "webhook", "url": receiver.url("/hook")}});
    let mut one = config(sinks.clone());
    one.lease_secs = Some(1);
    let d1 = notifier(store, "d1", one);
    let d2 = notifier(store, "d2", config(sinks));
    assert!(d1.run_once().await.unwrap().leased);
    store
        .queue_notice(&orchestrator_notify::degraded("d1", "no sandbox"))
        .await
        .unwrap();
    let other = d2.run_once().await.unwrap();
    assert!(!other.leased);
    assert_eq!(other.sent, 0);
    // d1 stops passing (it died): its lease runs out and d2 takes over.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let taken = d2.run_once().await.unwrap();
    assert!(taken.leased);
    assert_eq!(taken.sent, 1);
    assert!(!d1.run_once().await.unwrap().leased);
    assert_eq!(receiver.events_at("/hook"), ["degraded"]);
}

/// A daemon killed while one sink hangs must not send again what another sink already took:
/// each message is marked sent as its own sink answers. Here the pass is cut off (as a SIGKILL
/// would) while the slow sink still waits; once the claim runs out, another daemon sends the slow
/// sink's message and nothing more to the fast one, which got it once.
async fn a_fast_sinks_message_is_marked_sent_while_a_slow_one_still_waits(db: &TestStore) {
    let store = &db.store;
    let fast = Receiver::start(200).await;
    let slow = Receiver::start_hanging(200, 1).await;
    let sinks = json!({
        "fast": {"kind": "webhook", "url": fast.url("/fast")},
        "slow": {"kind": "webhook", "url": slow.url("/slow"), "timeout_secs": 2},
    });
    let mut short = config(sinks.clone());
    short.lease_secs = Some(1);
    let d1 = Arc::new(notifier(store, "d1", short.clone()));
    assert!(d1.run_once().await.unwrap().leased);
    store
        .queue_notice(&orchestrator_notify::degraded("d1", "no sandbox"))
        .await
        .unwrap();
    let pass = tokio::spawn({
        let d1 = d1.clone();
        async move { passes_until(&d1, |c| c.sent + c.retried > 1).await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while slow.events_at("/slow").is_empty() || fast.events_at("/fast").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sinks were never tried"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The fast sink answered; its mark is one write away. Then the daemon dies mid-pass.
    let fast_row_sent = async {
        loop {
            let rows = store
                .notifications(Some(notification_status::SENT), 100)
                .await
                .unwrap();
            if rows
                .iter()
                .any(|r| r.sink == "fast" && r.status == notification_status::SENT)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(1), fast_row_sent)
        .await
        .expect("the fast sink's message is marked sent while the slow one still waits");
    pass.abort();
    let _ = pass.await;
    drop(d1);

    let d2 = notifier(store, "d2", short);
    let sum = passes_until(&d2, |c| c.sent >= 1).await;
    assert_eq!(sum.sent, 1, "{sum:?}");
    assert_eq!(
        fast.events_at("/fast"),
        ["degraded"],
        "sent to the fast sink once"
    );
    assert_eq!(
        slow.events_at("/slow").len(),
        2,
        "the slow sink's message was sent again"
    );
}

/// On PostgreSQL one transaction held open anywhere on the server (here one that took a
/// transaction id and sits `idle in transaction`) held every notice back until it ended. Now a
/// failure that commits meanwhile is told while the holder stays open, and told once when it ends.
async fn a_transaction_held_open_on_the_server_delays_no_notice(db: &TestStore) {
    use sqlx::Connection;
    let store = &db.store;
    let receiver = Receiver::start(200).await;
    let notifier = notifier(
        store,
        "d1",
        config(
            json!({"all": {"kind": "webhook", "url": receiver.url("/all"), "events": ["task_failed"]}}),
        ),
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    notifier.run_once().await.unwrap();

    let mut holder = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT pg_current_xact_id()")
        .execute(&mut holder)
        .await
        .unwrap();
    ended(
        store,
        "breaks while held",
        Outcome::Failed {
            error: "gate 1 failed".into(),
        },
    )
    .await;
    let pass = passes_until(&notifier, |sum| sum.sent >= 1).await;
    assert_eq!(
        (pass.collected, pass.sent),
        (1, 1),
        "the failure was told while the holder stays open"
    );
    assert_eq!(receiver.events_at("/all"), ["task_failed"]);

    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    // Its change comes again in the order of changes once the horizon passes it: told once.
    for _ in 0..5 {
        let again = notifier.run_once().await.unwrap();
        assert_eq!((again.collected, again.sent), (0, 0));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(receiver.events_at("/all"), ["task_failed"]);
}
