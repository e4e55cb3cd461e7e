//! Cases of GitHub work: PR attempts (byte-exact patches, selection within a group) and the
//! delivery ledger that creates a webhook's or a poll's tasks exactly once.

use super::*;
use orchestrator_store::{Accepted, DeliveryClaim, DeliveryInfo, NewAttempt, delivery_status};

fn new_attempt<'a>(
    task: TaskId,
    group: &'a str,
    label: &'a str,
    patch: &'a [u8],
) -> NewAttempt<'a> {
    NewAttempt {
        task,
        group,
        label,
        base: "0123456789abcdef0123456789abcdef01234567",
        head: Some("89abcdef0123456789abcdef0123456789abcdef"),
        diff_hash: Some("tree:1f2e3d"),
        patch,
        files: json!(["src/lib.rs", "README.md"]),
        gates: json!([{"name": "test", "verdict": "passed"}]),
        left_out: Default::default(),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

pub(super) fn webhook(id: &str) -> DeliveryInfo<'_> {
    DeliveryInfo {
        id,
        source: "webhook",
        event: "issues",
        action: Some("labeled"),
        repo: Some("acme/widgets"),
        subject: None,
    }
}

/// Long enough that a claim in the same test never finds another's `processing` stale.
pub(super) const STALE: i64 = 60_000;

pub(super) async fn task_count(store: &Store) -> usize {
    store
        .list_tasks(&TaskFilter {
            limit: Some(1000),
            ..Default::default()
        })
        .await
        .unwrap()
        .len()
}

pub async fn attempt_patches_round_trip_exactly(db: &TestStore) {
    let store = db.store.clone();
    let task = store.create_task(&NewTask::new("fix")).await.unwrap();
    // Non-UTF-8 bytes, CRLF line ends, a NUL, and no final newline: all must survive as they are.
    let odd: Vec<u8> =
        b"--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-\xff\xfe old\r\n+new\x00\x80\x81".to_vec();
    let big: Vec<u8> = (0..1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let empty: Vec<u8> = Vec::new();
    for (label, patch) in [("odd", &odd), ("big", &big), ("empty", &empty)] {
        let recorded = store
            .record_attempt(&new_attempt(task, "g", label, patch))
            .await
            .unwrap();
        assert_eq!(recorded.patch_bytes, patch.len() as i64, "{label}");
        assert_eq!(recorded.patch_sha256, sha256_hex(patch), "{label}");
        assert!(!recorded.selected);
        let read = store.attempt(recorded.id).await.unwrap();
        assert_eq!(read.patch_bytes, recorded.patch_bytes);
        assert_eq!(read.patch_sha256, recorded.patch_sha256);
        assert_eq!(read.label, label);
        assert_eq!(read.group, "g");
        assert_eq!(read.task_id, task);
        assert_eq!(read.base, "0123456789abcdef0123456789abcdef01234567");
        assert_eq!(
            read.head.as_deref(),
            Some("89abcdef0123456789abcdef0123456789abcdef")
        );
        assert_eq!(read.diff_hash.as_deref(), Some("tree:1f2e3d"));
        assert_eq!(read.files, json!(["src/lib.rs", "README.md"]));
        assert_eq!(read.gates, json!([{"name": "test", "verdict": "passed"}]));
        assert_eq!(read.created_at, recorded.created_at);
        assert_eq!(read.selected_at, None);
        let bytes = store.attempt_patch(recorded.id).await.unwrap();
        assert!(
            bytes == *patch,
            "{label}: the patch changed on its way through the store"
        );
    }
    // Nullable evidence stays null.
    let bare = store
        .record_attempt(&NewAttempt {
            head: None,
            diff_hash: None,
            ..new_attempt(task, "g", "bare", b"x")
        })
        .await
        .unwrap();
    let bare = store.attempt(bare.id).await.unwrap();
    assert_eq!((bare.head, bare.diff_hash), (None, None));
}

pub async fn attempts_are_listed_and_selected_within_their_group(db: &TestStore) {
    let store = db.store.clone();
    let task = store.create_task(&NewTask::new("fix")).await.unwrap();
    let other = store.create_task(&NewTask::new("other")).await.unwrap();
    let a1 = store
        .record_attempt(&new_attempt(task, "g1", "first", b"1"))
        .await
        .unwrap();
    let b1 = store
        .record_attempt(&new_attempt(task, "g2", "elsewhere", b"2"))
        .await
        .unwrap();
    let a2 = store
        .record_attempt(&new_attempt(task, "g1", "second", b"3"))
        .await
        .unwrap();
    let c1 = store
        .record_attempt(&new_attempt(other, "g1", "other task", b"4"))
        .await
        .unwrap();
    let ids = |attempts: Vec<orchestrator_store::Attempt>| -> Vec<i64> {
        attempts.into_iter().map(|a| a.id).collect()
    };
    assert_eq!(
        ids(store.attempts(None, None).await.unwrap()),
        [a1.id, b1.id, a2.id, c1.id]
    );
    assert_eq!(
        ids(store.attempts(Some(task), None).await.unwrap()),
        [a1.id, b1.id, a2.id]
    );
    assert_eq!(
        ids(store.attempts(Some(task), Some("g1")).await.unwrap()),
        [a1.id, a2.id]
    );
    assert_eq!(
        ids(store.attempts(None, Some("g1")).await.unwrap()),
        [a1.id, a2.id, c1.id]
    );
    assert!(
        store
            .attempts(Some(task), Some("none"))
            .await
            .unwrap()
            .is_empty()
    );

    for id in [a1.id, b1.id, c1.id] {
        let selected = store.select_attempt(id).await.unwrap();
        assert!(selected.selected);
        assert!(selected.selected_at.is_some());
    }
    // Selecting a2 takes the selection from a1 (its group), not from b1 (another group) nor from
    // c1 (another task's group of the same name).
    let selected = store.select_attempt(a2.id).await.unwrap();
    assert!(selected.selected);
    let state = |a: &orchestrator_store::Attempt| (a.id, a.selected, a.selected_at.is_some());
    let all: Vec<_> = store
        .attempts(None, None)
        .await
        .unwrap()
        .iter()
        .map(state)
        .collect();
    assert_eq!(
        all,
        [
            (a1.id, false, false),
            (b1.id, true, true),
            (a2.id, true, true),
            (c1.id, true, true),
        ]
    );
    // Selecting the selected one again changes nothing and appends no event.
    let events_before = store.events(task, 0, 1000).await.unwrap().len();
    let again = store.select_attempt(a2.id).await.unwrap();
    assert_eq!(again.selected_at, selected.selected_at);
    assert_eq!(
        store.events(task, 0, 1000).await.unwrap().len(),
        events_before
    );

    assert_eq!(
        kinds(&store, task).await,
        [
            "created",
            "attempt_recorded",
            "attempt_recorded",
            "attempt_recorded",
            "attempt_selected",
            "attempt_selected",
            "attempt_selected",
        ]
    );
    let events = store.events(task, 0, 1000).await.unwrap();
    assert_eq!(
        events[1].data,
        json!({"attempt": a1.id, "group": "g1", "label": "first", "files": 2, "patch_bytes": 1})
    );
    let last = events.last().unwrap();
    assert_eq!(last.data["attempt"], json!(a2.id));
    assert_eq!(last.data["group"], json!("g1"));
    assert_eq!(last.data["unselected"], json!([a1.id]));
    assert_eq!(
        store.get_task(task).await.unwrap().event_seq,
        events.len() as i64,
        "the event counter and the timeline agree"
    );
    assert_eq!(
        kinds(&store, other).await,
        ["created", "attempt_recorded", "attempt_selected"]
    );
}

pub async fn unknown_attempts_and_bad_input_are_refused(db: &TestStore) {
    let store = db.store.clone();
    assert!(matches!(
        store.attempt(999).await,
        Err(Error::AttemptNotFound(999))
    ));
    assert!(matches!(
        store.attempt_patch(999).await,
        Err(Error::AttemptNotFound(999))
    ));
    assert!(matches!(
        store.select_attempt(999).await,
        Err(Error::AttemptNotFound(999))
    ));
    let missing = TaskId(424_242);
    assert!(matches!(
        store
            .record_attempt(&new_attempt(missing, "g", "l", b"p"))
            .await,
        Err(Error::TaskNotFound(t)) if t == missing
    ));
    let task = store.create_task(&NewTask::new("t")).await.unwrap();
    let not_a_list = NewAttempt {
        files: json!({"src/lib.rs": 1}),
        ..new_attempt(task, "g", "l", b"p")
    };
    assert!(matches!(
        store.record_attempt(&not_a_list).await,
        Err(Error::Invalid(_))
    ));
    assert!(store.attempts(None, None).await.unwrap().is_empty());
    assert_eq!(kinds(&store, task).await, ["created"]);
}

pub async fn a_delivery_creates_its_tasks_once(db: &TestStore) {
    let store = db.store.clone();
    let info = webhook("d-1");
    assert_eq!(
        store.claim_delivery(&info, STALE).await.unwrap(),
        DeliveryClaim::Fresh
    );
    let row = store.delivery("d-1").await.unwrap().unwrap();
    assert_eq!(row.status, delivery_status::PROCESSING);
    assert_eq!(row.attempts, 1);
    assert_eq!(
        (row.source.as_str(), row.event.as_str()),
        ("webhook", "issues")
    );
    assert_eq!(row.action.as_deref(), Some("labeled"));
    assert_eq!(row.repo.as_deref(), Some("acme/widgets"));
    assert!(row.task_ids.is_empty());

    let ids = store
        .complete_delivery("d-1", 1, &[NewTask::new("from issue #7")])
        .await
        .unwrap();
    assert_eq!(ids.len(), 1);
    assert_eq!(
        store.get_task(ids[0]).await.unwrap().state,
        TaskState::Queued
    );
    assert_eq!(kinds(&store, ids[0]).await, ["created"]);
    let row = store.delivery("d-1").await.unwrap().unwrap();
    assert_eq!(row.status, delivery_status::PROCESSED);
    assert_eq!(row.task_ids, ids);
    assert_eq!(row.detail, None);

    // A redelivery, even one that finds the row "stale", does nothing.
    for stale in [STALE, 0] {
        assert_eq!(
            store.claim_delivery(&info, stale).await.unwrap(),
            DeliveryClaim::Done {
                status: delivery_status::PROCESSED.into(),
                task_ids: ids.clone(),
            }
        );
    }
    assert_eq!(task_count(&store).await, 1);
    // Finishing it again is refused and changes nothing.
    assert!(matches!(
        store.complete_delivery("d-1", 1, &[NewTask::new("again")]).await,
        Err(Error::DeliveryNotClaimed { ref status, .. }) if status == "processed"
    ));
    assert!(matches!(
        store.fail_delivery("d-1", 1, "late error").await,
        Err(Error::DeliveryNotClaimed { .. })
    ));
    assert!(matches!(
        store.complete_delivery("never-seen", 1, &[]).await,
        Err(Error::DeliveryNotClaimed { ref status, .. }) if status == "unrecorded"
    ));
    assert_eq!(task_count(&store).await, 1);
    let row = store.delivery("d-1").await.unwrap().unwrap();
    assert_eq!(row.status, delivery_status::PROCESSED);
    assert_eq!(row.attempts, 1);
    assert!(store.delivery("never-seen").await.unwrap().is_none());
}

pub async fn a_failed_delivery_is_processed_again(db: &TestStore) {
    let store = db.store.clone();
    let info = webhook("d-2");
    assert_eq!(
        store.claim_delivery(&info, STALE).await.unwrap(),
        DeliveryClaim::Fresh
    );
    store
        .fail_delivery("d-2", 1, "GitHub answered 502")
        .await
        .unwrap();
    let row = store.delivery("d-2").await.unwrap().unwrap();
    assert_eq!(row.status, delivery_status::FAILED);
    assert_eq!(row.detail.as_deref(), Some("GitHub answered 502"));
    assert_eq!(task_count(&store).await, 0);

    let retry = store.claim_delivery(&info, STALE).await.unwrap();
    assert_eq!(retry, DeliveryClaim::Retry { attempts: 2 });
    assert_eq!(retry.token(), Some(2));
    // While the retry runs, another redelivery is busy, not a third attempt.
    assert_eq!(
        store.claim_delivery(&info, STALE).await.unwrap(),
        DeliveryClaim::Busy
    );
    let ids = store
        .complete_delivery("d-2", 2, &[NewTask::new("from the retry")])
        .await
        .unwrap();
    assert_eq!(ids.len(), 1);
    assert_eq!(task_count(&store).await, 1);
    let row = store.delivery("d-2").await.unwrap().unwrap();
    assert_eq!(
        (row.status.as_str(), row.attempts, row.detail),
        (delivery_status::PROCESSED, 2, None)
    );
    assert_eq!(
        store.claim_delivery(&info, STALE).await.unwrap(),
        DeliveryClaim::Done {
            status: delivery_status::PROCESSED.into(),
            task_ids: ids,
        }
    );
}

pub async fn a_stale_claim_is_taken_over(db: &TestStore) {
    let store = db.store.clone();
    let info = webhook("d-3");
    assert_eq!(
        store.claim_delivery(&info, STALE).await.unwrap(),
        DeliveryClaim::Fresh
    );
    // A concurrent redelivery while the first is fresh: busy.
    assert_eq!(
        store.claim_delivery(&info, STALE).await.unwrap(),
        DeliveryClaim::Busy
    );
    // The first processor died: with nothing counted fresh, the next claim takes over.
    assert_eq!(
        store.claim_delivery(&info, 0).await.unwrap(),
        DeliveryClaim::Retry { attempts: 2 }
    );
    // The first processor was only slow after all: while the new claim works, its failure and
    // its completion are refused, and neither touches the new claim.
    assert!(matches!(
        store.fail_delivery("d-3", 1, "slow and late").await,
        Err(Error::DeliveryNotClaimed { .. })
    ));
    assert!(matches!(
        store.complete_delivery("d-3", 1, &[NewTask::new("a")]).await,
        Err(Error::DeliveryNotClaimed { ref status, .. }) if status.contains("newer claim")
    ));
    assert_eq!(
        store.delivery("d-3").await.unwrap().unwrap().status,
        delivery_status::PROCESSING
    );
    let ids = store
        .complete_delivery("d-3", 2, &[NewTask::new("a"), NewTask::new("b")])
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
    assert!(matches!(
        store
            .complete_delivery("d-3", 1, &[NewTask::new("a")])
            .await,
        Err(Error::DeliveryNotClaimed { .. })
    ));
    assert_eq!(task_count(&store).await, 2);
    assert_eq!(store.delivery("d-3").await.unwrap().unwrap().task_ids, ids);
}

pub async fn a_delivery_without_tasks_is_ignored(db: &TestStore) {
    let store = db.store.clone();
    let info = webhook("d-4");
    assert_eq!(
        store.claim_delivery(&info, STALE).await.unwrap(),
        DeliveryClaim::Fresh
    );
    assert!(
        store
            .complete_delivery("d-4", 1, &[])
            .await
            .unwrap()
            .is_empty()
    );
    let row = store.delivery("d-4").await.unwrap().unwrap();
    assert_eq!(row.status, delivery_status::IGNORED);
    assert_eq!(row.detail.as_deref(), Some("no rule matched"));
    assert_eq!(
        store.claim_delivery(&info, 0).await.unwrap(),
        DeliveryClaim::Done {
            status: delivery_status::IGNORED.into(),
            task_ids: Vec::new(),
        }
    );

    let poll = DeliveryInfo {
        id: "poll:acme/widgets:issue_comment:99",
        source: "poll",
        event: "issue_comment",
        action: None,
        repo: None,
        subject: None,
    };
    assert_eq!(
        store.claim_delivery(&poll, STALE).await.unwrap(),
        DeliveryClaim::Fresh
    );
    store
        .ignore_delivery(poll.id, 1, "the comment is the bot's own")
        .await
        .unwrap();
    let row = store.delivery(poll.id).await.unwrap().unwrap();
    assert_eq!(
        (row.status.as_str(), row.detail.as_deref()),
        (
            delivery_status::IGNORED,
            Some("the comment is the bot's own")
        )
    );
    assert_eq!((row.action, row.repo), (None, None));
    assert_eq!(
        store.claim_delivery(&poll, STALE).await.unwrap(),
        DeliveryClaim::Done {
            status: delivery_status::IGNORED.into(),
            task_ids: Vec::new(),
        }
    );
    assert_eq!(task_count(&store).await, 0);

    // Newest first.
    let listed: Vec<String> = store
        .deliveries(10)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(listed.contains(&"d-4".to_owned()));
    assert_eq!(store.deliveries(1).await.unwrap().len(), 1);
}

pub async fn concurrent_claims_of_a_delivery_have_one_winner(db: &TestStore) {
    let store = db.store.clone();
    for round in 0..3 {
        let id = format!("race-{round}");
        let claims: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                let id = id.clone();
                tokio::spawn(async move { store.claim_delivery(&webhook(&id), STALE).await })
            })
            .collect();
        let mut fresh = 0;
        for claim in claims {
            match claim.await.unwrap().unwrap() {
                DeliveryClaim::Fresh => fresh += 1,
                DeliveryClaim::Busy => {}
                other => panic!("unexpected claim {other:?}"),
            }
        }
        assert_eq!(fresh, 1, "round {round}");
        // The same race over a failed delivery: exactly one retry.
        store.fail_delivery(&id, 1, "boom").await.unwrap();
        let claims: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                let id = id.clone();
                tokio::spawn(async move { store.claim_delivery(&webhook(&id), STALE).await })
            })
            .collect();
        let mut retries = 0;
        for claim in claims {
            match claim.await.unwrap().unwrap() {
                DeliveryClaim::Retry { attempts } => {
                    assert_eq!(attempts, 2);
                    retries += 1;
                }
                DeliveryClaim::Busy => {}
                other => panic!("unexpected claim {other:?}"),
            }
        }
        assert_eq!(retries, 1, "round {round}");
    }
}

pub async fn poll_cursors_are_upserted(db: &TestStore) {
    let store = db.store.clone();
    assert_eq!(store.poll_cursor("acme/widgets").await.unwrap(), None);
    store
        .set_poll_cursor("acme/widgets", "2026-01-01T00:00:00Z")
        .await
        .unwrap();
    store
        .set_poll_cursor("acme/gadgets", "etag-1")
        .await
        .unwrap();
    store
        .set_poll_cursor("acme/widgets", "2026-01-02T00:00:00Z")
        .await
        .unwrap();
    assert_eq!(
        store.poll_cursor("acme/widgets").await.unwrap().as_deref(),
        Some("2026-01-02T00:00:00Z")
    );
    assert_eq!(
        store.poll_cursor("acme/gadgets").await.unwrap().as_deref(),
        Some("etag-1")
    );
    assert_eq!(store.poll_cursor("acme/other").await.unwrap(), None);
}

pub async fn accepted_deliveries_are_queued_with_their_payload_until_processed(db: &TestStore) {
    let store = db.store.clone();
    let payload = r#"{"action":"labeled","issue":{"number":7}}"#;
    assert_eq!(
        store
            .accept_delivery(&webhook("q-1"), payload)
            .await
            .unwrap(),
        Accepted::New
    );
    assert_eq!(
        store
            .accept_delivery(&webhook("q-1"), payload)
            .await
            .unwrap(),
        Accepted::InHand,
        "a redelivery while it is queued changes nothing"
    );
    let row = store.delivery("q-1").await.unwrap().unwrap();
    assert_eq!(row.status, delivery_status::QUEUED);
    assert_eq!(row.attempts, 0);
    let due = store.due_deliveries(STALE, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(
        (due[0].id.as_str(), due[0].payload.as_str()),
        ("q-1", payload)
    );
    assert_eq!(due[0].event, "issues");

    // The processor claims it like any delivery; while it holds it, it is not due.
    let claim = store.claim_delivery(&webhook("q-1"), STALE).await.unwrap();
    assert_eq!(claim, DeliveryClaim::Retry { attempts: 1 });
    assert!(store.due_deliveries(STALE, 10).await.unwrap().is_empty());
    assert_eq!(
        store
            .accept_delivery(&webhook("q-1"), payload)
            .await
            .unwrap(),
        Accepted::InHand
    );
    // A `processing` row whose process died is due again once stale.
    assert_eq!(store.due_deliveries(0, 10).await.unwrap().len(), 1);

    // Failed with a retry time: due when it comes, not before.
    let later = orchestrator_types::now_millis() + 3_600_000;
    store
        .fail_delivery_until("q-1", 1, "GitHub answered 502", Some(later))
        .await
        .unwrap();
    let row = store.delivery("q-1").await.unwrap().unwrap();
    assert_eq!((row.status.as_str(), row.retry_at), ("failed", Some(later)));
    assert!(store.due_deliveries(STALE, 10).await.unwrap().is_empty());
    // GitHub's "Redeliver" (or `github deliveries --retry`) queues it now.
    assert!(store.retry_delivery("q-1").await.unwrap());
    assert!(
        !store.retry_delivery("q-1").await.unwrap(),
        "only a failed one"
    );
    assert_eq!(store.due_deliveries(STALE, 10).await.unwrap().len(), 1);
    let claim = store.claim_delivery(&webhook("q-1"), STALE).await.unwrap();
    assert_eq!(claim, DeliveryClaim::Retry { attempts: 2 });
    store
        .fail_delivery_until("q-1", 2, "forbidden", None)
        .await
        .unwrap();
    assert_eq!(
        store
            .accept_delivery(&webhook("q-1"), payload)
            .await
            .unwrap(),
        Accepted::Requeued,
        "a redelivery of a failed delivery queues it again"
    );
    let claim = store.claim_delivery(&webhook("q-1"), STALE).await.unwrap();
    let ids = store
        .complete_delivery("q-1", claim.token().unwrap(), &[NewTask::new("fix #7")])
        .await
        .unwrap();
    assert_eq!(ids.len(), 1);
    assert!(store.due_deliveries(0, 10).await.unwrap().is_empty());
    assert_eq!(
        store
            .accept_delivery(&webhook("q-1"), payload)
            .await
            .unwrap(),
        Accepted::Done {
            status: delivery_status::PROCESSED.to_owned(),
            task_ids: ids
        }
    );
    let row = store.delivery("q-1").await.unwrap().unwrap();
    assert_eq!((row.attempts, row.retry_at), (3, None));

    // A polled event keeps no payload: the processor leaves it to the poller.
    let poll = DeliveryInfo {
        source: "poll",
        ..webhook("poll:acme/widgets:event:1")
    };
    store.claim_delivery(&poll, STALE).await.unwrap();
    store
        .fail_delivery_until(poll.id, 1, "boom", Some(0))
        .await
        .unwrap();
    assert!(store.due_deliveries(0, 10).await.unwrap().is_empty());
    assert!(!store.retry_delivery(poll.id).await.unwrap());
}

/// Deliveries about one issue are processed in the order they came, whichever daemon holds them:
/// a later one is not due, and cannot be claimed, while an earlier one is queued, being processed
/// or failed with a retry to come; it comes due when that one ends or is given up on.
pub async fn deliveries_about_one_issue_wait_for_the_earlier_ones_retry_or_end(db: &TestStore) {
    let store = db.store.clone();
    let about = |id: &'static str, subject: &'static str| DeliveryInfo {
        subject: Some(subject),
        ..webhook(id)
    };
    let payload = r#"{"action":"labeled","issue":{"number":7}}"#;
    for (id, subject) in [
        ("s-1", "acme/widgets#7"),
        ("s-2", "acme/widgets#7"),
        ("s-3", "acme/widgets#8"),
    ] {
        store
            .accept_delivery(&about(id, subject), payload)
            .await
            .unwrap();
    }
    let due_ids = |due: Vec<orchestrator_store::DueDelivery>| {
        due.into_iter().map(|d| d.id).collect::<Vec<_>>()
    };
    assert_eq!(
        due_ids(store.due_deliveries(STALE, 10).await.unwrap()),
        ["s-1", "s-3"],
        "the second delivery about #7 waits for the first"
    );
    assert_eq!(
        store
            .delivery("s-2")
            .await
            .unwrap()
            .unwrap()
            .subject
            .as_deref(),
        Some("acme/widgets#7")
    );

    // The first fails and waits for its retry: the second still waits, on every daemon (a claim
    // of it, as another daemon's processor or a redelivery would make, is refused).
    let first = store
        .claim_delivery(&about("s-1", "acme/widgets#7"), STALE)
        .await
        .unwrap();
    let later = orchestrator_types::now_millis() + 3_600_000;
    store
        .fail_delivery_until(
            "s-1",
            first.token().unwrap(),
            "GitHub answered 502",
            Some(later),
        )
        .await
        .unwrap();
    assert_eq!(
        due_ids(store.due_deliveries(STALE, 10).await.unwrap()),
        ["s-3"]
    );
    assert_eq!(
        store
            .claim_delivery(&about("s-2", "acme/widgets#7"), STALE)
            .await
            .unwrap(),
        DeliveryClaim::Behind {
            earlier: "s-1".to_owned()
        }
    );
    // A polled event about the same issue waits too, and is not recorded until it may run.
    let polled = DeliveryInfo {
        source: "poll",
        ..about("poll:acme/widgets:event:9", "acme/widgets#7")
    };
    assert!(matches!(
        store.claim_delivery(&polled, STALE).await.unwrap(),
        DeliveryClaim::Behind { .. }
    ));
    assert!(store.delivery(polled.id).await.unwrap().is_none());
    assert_eq!(
        store.delivery("s-2").await.unwrap().unwrap().status,
        delivery_status::QUEUED
    );

    // Its retry comes and ends it: the second comes due.
    assert!(store.retry_delivery("s-1").await.unwrap());
    let retry = store
        .claim_delivery(&about("s-1", "acme/widgets#7"), STALE)
        .await
        .unwrap();
    store
        .ignore_delivery("s-1", retry.token().unwrap(), "no rule matched")
        .await
        .unwrap();
    assert_eq!(
        due_ids(store.due_deliveries(STALE, 10).await.unwrap()),
        ["s-2", "s-3"]
    );

    // One given up on (failed with no retry to come) holds nothing back.
    let second = store
        .claim_delivery(&about("s-2", "acme/widgets#7"), STALE)
        .await
        .unwrap();
    store
        .fail_delivery_until("s-2", second.token().unwrap(), "forbidden", None)
        .await
        .unwrap();
    assert!(matches!(
        store.claim_delivery(&polled, STALE).await.unwrap(),
        DeliveryClaim::Fresh
    ));
}
