//! The notification outbox: notices written once by key with the cursor that found them, fanned
//! out once per sink, claimed by one sender at a time, retried, marked sent or failed; the
//! sender's lease; and the notices that the transactions of a parked automation and of a delivery
//! given up on write themselves.

use super::*;
use orchestrator_store::{
    ChangeCursor, NewNotice, NewNotification, Notification, notification_status,
};
use orchestrator_types::NoticeKind;

fn notice(key: &str) -> NewNotice {
    NewNotice {
        key: key.to_owned(),
        kind: NoticeKind::TaskFailed,
        task_id: None,
        at: now_millis(),
        data: json!({"task_title": "t"}),
    }
}

fn row(sink: &str, key: &str, at: i64) -> NewNotification {
    NewNotification {
        sink: sink.to_owned(),
        sink_kind: "webhook".to_owned(),
        delivery_key: format!("{key}.{sink}"),
        payload: json!({"event": "task_failed", "delivery": format!("{key}.{sink}")}),
        next_attempt_at: at,
    }
}

/// Writes `n` notices and fans each out to the sink `ops`, due now. Returns their event ids.
async fn queued(store: &Store, prefix: &str, n: usize) -> Vec<i64> {
    let notices: Vec<NewNotice> = (0..n).map(|i| notice(&format!("{prefix}:{i}"))).collect();
    store
        .record_notices("test", ChangeCursor { change: 0, id: 0 }, &notices)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for found in store.notices_to_fan_out(10_000).await.unwrap() {
        store
            .fan_out_notice(found.id, &[row("ops", &found.key, 0)])
            .await
            .unwrap();
        ids.push(found.id);
    }
    ids
}

pub async fn notices_are_written_once_with_the_cursor_that_found_them(db: &TestStore) {
    let store = &db.store;
    assert_eq!(store.notify_cursor("tasks").await.unwrap(), None);
    let first = ChangeCursor { change: 7, id: 3 };
    let written = store
        .record_notices(
            "tasks",
            first,
            &[notice("task_failed:1:10"), notice("task_failed:2:11")],
        )
        .await
        .unwrap();
    assert_eq!(written, 2);
    let (at, started) = store.notify_cursor("tasks").await.unwrap().unwrap();
    assert_eq!(at, first);
    assert!(started <= now_millis());
    // The same page read again (a crash after the commit, another daemon): nothing new, and the
    // cursor moves on.
    let second = ChangeCursor { change: 9, id: 1 };
    let written = store
        .record_notices(
            "tasks",
            second,
            &[notice("task_failed:2:11"), notice("task_failed:3:12")],
        )
        .await
        .unwrap();
    assert_eq!(written, 1);
    assert_eq!(
        store.notify_cursor("tasks").await.unwrap(),
        Some((second, started)),
        "the cursor moved; its start stays"
    );
    assert_eq!(store.notify_cursor("approvals").await.unwrap(), None);
    let keys: Vec<String> = store
        .notices_to_fan_out(100)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.key)
        .collect();
    assert_eq!(
        keys,
        ["task_failed:1:10", "task_failed:2:11", "task_failed:3:12"]
    );
    assert!(
        !store
            .queue_notice(&notice("task_failed:1:10"))
            .await
            .unwrap(),
        "a key is written once"
    );
    assert!(store.queue_notice(&notice("degraded:w1")).await.unwrap());
}

pub async fn a_notice_is_fanned_out_once_per_sink(db: &TestStore) {
    let store = &db.store;
    store.queue_notice(&notice("approval:1")).await.unwrap();
    let found = store.notices_to_fan_out(100).await.unwrap();
    assert_eq!(found.len(), 1);
    let rows = [row("ops", "approval:1", 0), row("team", "approval:1", 0)];
    assert_eq!(store.fan_out_notice(found[0].id, &rows).await.unwrap(), 2);
    assert!(store.notices_to_fan_out(100).await.unwrap().is_empty());
    // Fanned out again (a sender that died before it knew): no second row per sink.
    assert_eq!(store.fan_out_notice(found[0].id, &rows).await.unwrap(), 0);
    let listed = store.notifications(None, 100).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(
        listed
            .iter()
            .all(|n| n.status == notification_status::PENDING && n.attempts == 0)
    );
    // A notice no sink wants is fanned out into nothing and not found again.
    store.queue_notice(&notice("approval:2")).await.unwrap();
    let found = store.notices_to_fan_out(100).await.unwrap();
    store.fan_out_notice(found[0].id, &[]).await.unwrap();
    assert!(store.notices_to_fan_out(100).await.unwrap().is_empty());
    assert_eq!(store.notifications(None, 100).await.unwrap().len(), 2);
}

pub async fn outbox_rows_are_claimed_retried_and_ended(db: &TestStore) {
    let store = &db.store;
    queued(store, "n", 2).await;
    let claimed = store.claim_notifications("a", 10, 60_000).await.unwrap();
    assert_eq!(claimed.len(), 2);
    assert!(
        claimed
            .iter()
            .all(|n| n.attempts == 1 && n.claimed_by.as_deref() == Some("a"))
    );
    assert!(
        store
            .claim_notifications("b", 10, 60_000)
            .await
            .unwrap()
            .is_empty(),
        "a running claim is the claimer's"
    );
    let (sent, retried) = (&claimed[0], &claimed[1]);
    assert!(
        !store.notification_sent(sent.id, "b").await.unwrap(),
        "b has no claim"
    );
    assert!(store.notification_sent(sent.id, "a").await.unwrap());
    assert!(
        !store.notification_sent(sent.id, "a").await.unwrap(),
        "sent once"
    );

    // A failed try waits for its next one, then is claimed again with the same key.
    let soon = now_millis() + 200;
    assert!(
        store
            .notification_failed(retried.id, "a", "HTTP 502", Some(soon))
            .await
            .unwrap()
    );
    assert!(
        !store
            .notification_failed(retried.id, "a", "HTTP 503", Some(0))
            .await
            .unwrap(),
        "a try is recorded once: a's claim ended with it"
    );
    let waiting = only(store, retried.id).await;
    assert_eq!(waiting.status, notification_status::PENDING);
    assert_eq!(waiting.next_attempt_at, soon);
    assert_eq!(waiting.last_error.as_deref(), Some("HTTP 502"));
    assert!(
        store
            .claim_notifications("b", 10, 60_000)
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    let again = store.claim_notifications("b", 10, 60_000).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, retried.id);
    assert_eq!(again[0].attempts, 2);
    assert_eq!(again[0].delivery_key, retried.delivery_key);
    assert!(store.notification_sent(retried.id, "b").await.unwrap());

    // Its last try fails: failed for good, never claimed again.
    store.queue_notice(&notice("last")).await.unwrap();
    let found = store.notices_to_fan_out(100).await.unwrap();
    store
        .fan_out_notice(found[0].id, &[row("ops", "last", 0)])
        .await
        .unwrap();
    let last = store.claim_notifications("a", 10, 60_000).await.unwrap();
    assert_eq!(last.len(), 1);
    store
        .notification_failed(last[0].id, "a", "HTTP 404: no such hook", None)
        .await
        .unwrap();
    let failed = only(store, last[0].id).await;
    assert_eq!(failed.status, notification_status::FAILED);
    assert_eq!(
        store
            .notifications(Some(notification_status::FAILED), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    let sent_row = only(store, sent.id).await;
    assert_eq!(sent_row.status, notification_status::SENT);
    assert!(sent_row.sent_at.is_some());
}

async fn only(store: &Store, id: i64) -> Notification {
    store
        .notifications(None, 1000)
        .await
        .unwrap()
        .into_iter()
        .find(|n| n.id == id)
        .unwrap()
}

pub async fn a_claim_that_ran_out_is_taken_over(db: &TestStore) {
    let store = &db.store;
    queued(store, "n", 1).await;
    let first = store.claim_notifications("a", 10, 1).await.unwrap();
    assert_eq!(first.len(), 1);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let second = store.claim_notifications("b", 10, 60_000).await.unwrap();
    assert_eq!(second.len(), 1, "a died: its claim ran out");
    assert_eq!(second[0].attempts, 2);
    assert_eq!(second[0].delivery_key, first[0].delivery_key);
    assert!(!store.notification_sent(first[0].id, "a").await.unwrap());
    assert!(store.notification_sent(first[0].id, "b").await.unwrap());
}

pub async fn concurrent_senders_never_claim_the_same_row(db: &TestStore) {
    let store = &db.store;
    let n = 60;
    queued(store, "c", n).await;
    let claim = |holder: &'static str| {
        let store = store.clone();
        async move {
            let mut mine = Vec::new();
            loop {
                let got = store.claim_notifications(holder, 4, 60_000).await.unwrap();
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|n| n.id));
            }
        }
    };
    let (a, b) = tokio::join!(tokio::spawn(claim("a")), tokio::spawn(claim("b")));
    let (a, b) = (a.unwrap(), b.unwrap());
    let all: HashSet<i64> = a.iter().chain(&b).copied().collect();
    assert_eq!(a.len() + b.len(), n, "a row was claimed twice: {a:?} {b:?}");
    assert_eq!(all.len(), n);
}

pub async fn one_sender_holds_the_lease_until_it_ends(db: &TestStore) {
    let store = &db.store;
    assert!(store.take_notify_sender("a", 60_000).await.unwrap());
    assert!(!store.take_notify_sender("b", 60_000).await.unwrap());
    assert!(
        store.take_notify_sender("a", 60_000).await.unwrap(),
        "renewed"
    );
    assert_eq!(store.notify_sender().await.unwrap().unwrap().0, "a");
    store.release_notify_sender("b").await.unwrap();
    assert!(
        !store.take_notify_sender("b", 60_000).await.unwrap(),
        "b cannot release a's"
    );
    store.release_notify_sender("a").await.unwrap();
    assert!(
        store.take_notify_sender("b", 1).await.unwrap(),
        "a gave it up"
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(
        store.take_notify_sender("a", 60_000).await.unwrap(),
        "b's ran out"
    );
    // Two daemons racing for a lease that ran out: one wins.
    store.release_notify_sender("a").await.unwrap();
    let (x, y) = tokio::join!(
        store.take_notify_sender("x", 60_000),
        store.take_notify_sender("y", 60_000)
    );
    assert!(x.unwrap() ^ y.unwrap());
}

pub async fn a_parked_automation_and_a_delivery_given_up_on_are_noticed(db: &TestStore) {
    use orchestrator_store::{NextFire, SOURCE_CLI};
    use orchestrator_types::AutomationSpec;
    let store = &db.store;
    let mut spec = AutomationSpec::new("nightly", "0 3 * * *");
    spec.workspaces.push("/tmp".into());
    spec.template
        .gates
        .push(orchestrator_types::GateSpec::from_command("true"));
    let automation = store
        .create_automation(&spec, SOURCE_CLI, None, NextFire::default())
        .await
        .unwrap();
    store
        .park_automation(automation.id, "the workspace is gone")
        .await
        .unwrap();
    let found = store.notices_to_fan_out(100).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, "automation_parked");
    assert_eq!(found[0].data["automation"], "nightly");
    assert_eq!(found[0].data["error"], "the workspace is gone");
    store.fan_out_notice(found[0].id, &[]).await.unwrap();

    // A delivery that will be tried again is not news; one given up on is.
    for id in ["d-1", "d-2"] {
        let info = orchestrator_store::DeliveryInfo {
            id,
            source: orchestrator_store::delivery_source::WEBHOOK,
            event: "issues",
            action: Some("labeled"),
            repo: Some("acme/widgets"),
            subject: None,
        };
        assert_eq!(
            store.claim_delivery(&info, 120_000).await.unwrap(),
            orchestrator_store::DeliveryClaim::Fresh
        );
    }
    store
        .fail_delivery_until("d-1", 1, "GitHub answered 502", Some(now_millis() + 60_000))
        .await
        .unwrap();
    assert!(store.notices_to_fan_out(100).await.unwrap().is_empty());
    store
        .fail_delivery_until("d-2", 1, "the rule's template is invalid", None)
        .await
        .unwrap();
    let found = store.notices_to_fan_out(100).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, "delivery_failed");
    assert_eq!(found[0].data["delivery"], "d-2");
    assert_eq!(found[0].data["repo"], "acme/widgets");
    assert_eq!(found[0].data["error"], "the rule's template is invalid");
}
