//! Cases of leases: claims, fencing by epoch, heartbeats, completion, rescue, foreground claims.

use super::agent::{agent_task, ask};
use super::*;
use orchestrator_store::approval_status;

pub async fn claim_order_queues_and_run_after(db: &TestStore) {
    let store = db.store.clone();
    let now = now_millis();
    let mut low = NewTask::new("low");
    low.priority = -1;
    let mut high = NewTask::new("high");
    high.priority = 10;
    let mut other = NewTask::new("other queue");
    other.queue = "gpu".into();
    other.priority = 100;
    let mut later = NewTask::new("later");
    later.priority = 100;
    later.run_after = Some(now + 3_600_000);
    let ids = store
        .create_tasks(&[
            low,
            NewTask::new("first"),
            high,
            NewTask::new("second"),
            other,
            later,
        ])
        .await
        .unwrap();
    let claimed = store.claim("w1", &queues(), 10, LEASE).await.unwrap();
    let titles: Vec<&str> = claimed.iter().map(|(t, _)| t.title.as_str()).collect();
    assert_eq!(titles, ["high", "first", "second", "low"]);
    for (task, lease) in &claimed {
        assert_eq!(task.state, TaskState::Running);
        assert_eq!(task.attempt, 1);
        assert_eq!(lease.epoch, 1);
        assert_eq!(task.lease_owner.as_deref(), Some("w1"));
        assert!(task.lease_expires_at.unwrap() >= now + LEASE);
    }
    // The other queue is claimed only by a worker of that queue.
    let gpu = store
        .claim("w2", &["gpu".to_owned()], 10, LEASE)
        .await
        .unwrap();
    assert_eq!(gpu.len(), 1);
    assert_eq!(gpu[0].0.id, ids[4]);
    assert!(
        store
            .claim("w1", &queues(), 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    // A specific task can be claimed whatever its run_after, once.
    let fg = store.claim_task("fg", ids[5], LEASE).await.unwrap();
    assert_eq!(fg.unwrap().0.title, "later");
    assert!(
        store
            .claim_task("fg", ids[5], LEASE)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store.next_run_after(&queues(), &[]).await.unwrap(),
        None,
        "nothing is queued"
    );
}

/// Every claim writes one `claimed` event with the attempt, the epoch and the worker, at the
/// claim's time, numbered after the task's last event: a batch claim, a claim again after a
/// requeue, and a foreground claim alike (SQLite writes it by a trigger, PostgreSQL by a statement).
pub async fn each_claim_writes_one_claimed_event_with_its_attempt_epoch_and_worker(db: &TestStore) {
    let store = db.store.clone();
    let owner = "worker \"one\" \\ ünïcode";
    let ids = store
        .create_tasks(&[NewTask::new("a"), NewTask::new("b"), NewTask::new("c")])
        .await
        .unwrap();
    let before = now_millis();
    let claimed = store.claim(owner, &queues(), 10, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 3);
    for (task, _) in &claimed {
        let events = store.events(task.id, 0, 100).await.unwrap();
        let names: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(names, ["created", "claimed"]);
        assert_eq!(events[0].seq, 1);
        assert_eq!(events[0].at, task.created_at);
        assert_eq!(
            events[0].data,
            json!({ "title": task.title, "queue": "default", "gates": 0 })
        );
        let event = &events[1];
        assert_eq!(event.seq, 2);
        assert_eq!(task.event_seq, 2);
        assert_eq!(event.at, task.lease_expires_at.unwrap() - LEASE);
        assert!(event.at >= before);
        assert_eq!(
            event.data,
            json!({ "attempt": 1, "epoch": 1, "worker": owner })
        );
    }

    // Requeued and claimed again: the next attempt and epoch, the next number.
    let (task, lease) = claimed[0].clone();
    let done = store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Requeue {
                run_after: 0,
                error: Some("again".into()),
                refund: false,
            },
            details: json!({}),
        }])
        .await
        .unwrap();
    assert_eq!(done, [CompletionResult::Applied]);
    let again = store
        .claim_task("w2", task.id, LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.0.attempt, again.1.epoch), (2, 2));
    let events = store.events(task.id, 0, 100).await.unwrap();
    let names: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(names, ["created", "claimed", "requeued", "claimed"]);
    assert_eq!(events[3].seq, again.0.event_seq);
    assert_eq!(
        events[3].data,
        json!({ "attempt": 2, "epoch": 2, "worker": "w2" })
    );

    // A foreground task is created and claimed in one transaction, with one `claimed` event.
    let (fg, _) = store
        .create_foreground(&NewTask::new("fg"), "fg-owner", LEASE)
        .await
        .unwrap();
    assert_eq!(kinds(&store, fg.id).await, ["created", "claimed"]);
    assert!(ids.contains(&task.id));
}

pub async fn concurrent_claims_are_exclusive(db: &TestStore) {
    let store = db.store.clone();
    const N: usize = 300;
    let tasks: Vec<NewTask> = (0..N).map(|i| NewTask::new(format!("t{i}"))).collect();
    store.create_tasks(&tasks).await.unwrap();
    let mut handles = Vec::new();
    for w in 0..6 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let claimed = store
                    .claim(&format!("w{w}"), &["default".to_owned()], 7, LEASE)
                    .await
                    .unwrap();
                if claimed.is_empty() {
                    return mine;
                }
                mine.extend(claimed.into_iter().map(|(t, _)| t.id));
            }
        }));
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    for handle in handles {
        for id in handle.await.unwrap() {
            total += 1;
            assert!(seen.insert(id), "task {id} claimed twice");
        }
    }
    assert_eq!(total, N);
}

pub async fn stale_epoch_is_fenced_everywhere(db: &TestStore) {
    let store = db.store.clone();
    let id = store
        .create_task(&NewTask::new("t").with_gate("true"))
        .await
        .unwrap();
    let (task, old) = store
        .claim("w1", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    // The lease expires (simulated by rescuing "in the future") and another worker claims it.
    let counts = store
        .rescue_expired(now_millis() + 10 * LEASE, 100, |_| 0)
        .await
        .unwrap();
    assert_eq!(counts.requeued, 1);
    // The rescue computed run_after from its (future) clock, so claim this task by id.
    let (_, new) = store.claim_task("w2", id, LEASE).await.unwrap().unwrap();
    assert_eq!(new.epoch, old.epoch + 1);

    // Every write of the stale worker is refused.
    let done = store
        .complete(&[Completion {
            lease: old.clone(),
            outcome: Outcome::Succeeded,
            details: json!({}),
        }])
        .await
        .unwrap();
    assert_eq!(done, [CompletionResult::Stale]);
    assert!(matches!(
        store
            .append_event(&old, EventKind::GateStarted, json!({}))
            .await,
        Err(Error::StaleLease { .. })
    ));
    let log = Captured::from_bytes(b"log", 100);
    let spec = &task.gates[0];
    let ev = evidence(Verdict::Passed);
    let stale_gate = store
        .record_gate(&GateRun {
            lease: &old,
            attempt: 1,
            position: 0,
            spec,
            evidence: &ev,
            log: &log,
        })
        .await;
    assert!(matches!(stale_gate, Err(Error::StaleLease { .. })));
    assert!(store.gates(id).await.unwrap().is_empty());
    let beat = store
        .heartbeat(&[old.clone(), new.clone()], LEASE)
        .await
        .unwrap();
    assert!(!beat[0].held);
    assert!(beat[1].held);

    // The current worker's writes land.
    store
        .append_event(&new, EventKind::GateStarted, json!({}))
        .await
        .unwrap();
    let done = store
        .complete(&[Completion {
            lease: new,
            outcome: Outcome::Succeeded,
            details: json!({}),
        }])
        .await
        .unwrap();
    assert_eq!(done, [CompletionResult::Applied]);
    let task = store.get_task(id).await.unwrap();
    assert_eq!(task.state, TaskState::Succeeded);
    assert_eq!(task.attempt, 2);
    assert!(task.finished_at.is_some());
    assert_eq!(
        kinds(&store, id).await,
        [
            "created",
            "claimed",
            "rescued",
            "claimed",
            "gate_started",
            "succeeded"
        ]
    );
}

/// One task can end twice in one batch: an attempt that lost its lease and the attempt that took the
/// task over, both in one worker. The batch applies the current attempt's end, with its own
/// details, and reports the stale one stale, in whichever order they come; a heartbeat of both
/// holds only the current one.
pub async fn a_batch_ending_one_task_twice_applies_the_current_attempt(db: &TestStore) {
    let store = db.store.clone();
    let ids = store
        .create_tasks(&[NewTask::new("taken over"), NewTask::new("beside it")])
        .await
        .unwrap();
    let claimed = store.claim("w", &queues(), 2, LEASE).await.unwrap();
    let old = lease_of(&claimed, ids[0]);
    let beside = lease_of(&claimed, ids[1]);
    let counts = store
        .rescue_expired(now_millis() + 10 * LEASE, 100, |_| 0)
        .await
        .unwrap();
    assert_eq!(counts.requeued, 2);
    let (_, new) = store.claim_task("w", ids[0], LEASE).await.unwrap().unwrap();
    let (_, beside_now) = store.claim_task("w", ids[1], LEASE).await.unwrap().unwrap();
    assert_eq!(new.epoch, old.epoch + 1);

    let beat = store
        .heartbeat(
            &[old.clone(), new.clone(), beside.clone(), beside_now.clone()],
            LEASE,
        )
        .await
        .unwrap();
    let held: Vec<bool> = beat.iter().map(|s| s.held).collect();
    assert_eq!(held, [false, true, false, true]);

    let end = |lease: &Lease, which: &str| Completion {
        lease: lease.clone(),
        outcome: Outcome::Succeeded,
        details: json!({"attempt": which}),
    };
    let results = store
        .complete(&[
            end(&old, "stale"),
            end(&new, "current"),
            end(&beside_now, "current"),
            end(&beside, "stale"),
        ])
        .await
        .unwrap();
    use CompletionResult::*;
    assert_eq!(results, [Stale, Applied, Applied, Stale]);
    for id in ids {
        let events = store.events(id, 0, 100).await.unwrap();
        let ended: Vec<_> = events.iter().filter(|e| e.kind == "succeeded").collect();
        assert_eq!(ended.len(), 1, "task {id}: {events:?}");
        assert_eq!(ended[0].data, json!({"attempt": "current"}), "task {id}");
        assert_eq!(
            store.get_task(id).await.unwrap().state,
            TaskState::Succeeded
        );
    }
}

pub async fn rescue_requeues_fails_and_cancels(db: &TestStore) {
    let store = db.store.clone();
    let mut once = NewTask::new("one attempt");
    once.max_attempts = 1;
    let ids = store
        .create_tasks(&[NewTask::new("retryable"), once, NewTask::new("to cancel")])
        .await
        .unwrap();
    let claimed = store.claim("w", &queues(), 10, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 3);
    assert_eq!(
        store.cancel_task(ids[2]).await.unwrap(),
        CancelOutcome::Requested
    );
    // Nothing has expired yet.
    let none = store
        .rescue_expired(now_millis(), 100, |_| 0)
        .await
        .unwrap();
    assert_eq!(none.requeued + none.failed + none.canceled, 0);
    let later = now_millis() + 2 * LEASE;
    let counts = store
        .rescue_expired(later, 100, |attempt| 1000 * attempt)
        .await
        .unwrap();
    assert_eq!((counts.requeued, counts.failed, counts.canceled), (1, 1, 1));
    let retryable = store.get_task(ids[0]).await.unwrap();
    assert_eq!(retryable.state, TaskState::Queued);
    assert_eq!(retryable.run_after, later + 1000);
    assert!(retryable.lease_owner.is_none());
    let failed = store.get_task(ids[1]).await.unwrap();
    assert_eq!(failed.state, TaskState::Failed);
    assert!(failed.last_error.unwrap().contains("no attempts left"));
    assert_eq!(
        store.get_task(ids[2]).await.unwrap().state,
        TaskState::Canceled
    );
    // Backoff holds the task back from ordinary claims.
    assert!(
        store
            .claim("w", &queues(), 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.next_run_after(&queues(), &[]).await.unwrap(),
        Some(later + 1000)
    );
}

pub async fn heartbeat_extends_and_reports_cancel(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&NewTask::new("t")).await.unwrap();
    let (task, lease) = store
        .claim("w", &queues(), 1, 1_000)
        .await
        .unwrap()
        .remove(0);
    let first_expiry = task.lease_expires_at.unwrap();
    let status = store
        .heartbeat(std::slice::from_ref(&lease), 60_000)
        .await
        .unwrap();
    assert!(status[0].held);
    assert!(!status[0].cancel_requested);
    let extended = store.get_task(id).await.unwrap().lease_expires_at.unwrap();
    assert!(extended >= first_expiry + 59_000);
    store.cancel_task(id).await.unwrap();
    let status = store.heartbeat(&[lease], 60_000).await.unwrap();
    assert!(status[0].held);
    assert!(status[0].cancel_requested);
    // A lease for a task that does not exist is simply not held.
    let ghost = Lease {
        task_id: TaskId(55_555),
        epoch: 1,
    };
    assert!(!store.heartbeat(&[ghost], 1_000).await.unwrap()[0].held);
}

pub async fn batch_completion_mixed_outcomes(db: &TestStore) {
    let store = db.store.clone();
    let tasks: Vec<NewTask> = (0..6).map(|i| NewTask::new(format!("t{i}"))).collect();
    let ids = store.create_tasks(&tasks).await.unwrap();
    let claimed = store.claim("w", &queues(), 6, LEASE).await.unwrap();
    let lease = |i: usize| lease_of(&claimed, ids[i]);
    let later = now_millis() + 60_000;
    let stale = Lease {
        task_id: ids[5],
        epoch: 99,
    };
    let completions = vec![
        Completion {
            lease: lease(0),
            outcome: Outcome::Succeeded,
            details: json!({}),
        },
        Completion {
            lease: lease(1),
            outcome: Outcome::Succeeded,
            details: json!({}),
        },
        Completion {
            lease: lease(2),
            outcome: Outcome::Failed {
                error: "boom".into(),
            },
            details: json!({}),
        },
        Completion {
            lease: lease(3),
            outcome: Outcome::Requeue {
                run_after: later,
                error: Some("infra".into()),
                refund: false,
            },
            details: json!({}),
        },
        Completion {
            lease: lease(4),
            outcome: Outcome::Requeue {
                run_after: 0,
                error: None,
                refund: true,
            },
            details: json!({}),
        },
        Completion {
            lease: stale,
            outcome: Outcome::Succeeded,
            details: json!({}),
        },
    ];
    let results = store.complete(&completions).await.unwrap();
    use CompletionResult::*;
    assert_eq!(
        results,
        [Applied, Applied, Applied, Applied, Applied, Stale]
    );
    let state = |t: &orchestrator_store::Task| t.state;
    let t: Vec<_> = futures_like_join(&store, &ids).await;
    assert_eq!(state(&t[0]), TaskState::Succeeded);
    assert_eq!(state(&t[1]), TaskState::Succeeded);
    assert_eq!(state(&t[2]), TaskState::Failed);
    assert_eq!(t[2].last_error.as_deref(), Some("boom"));
    assert_eq!(state(&t[3]), TaskState::Queued);
    assert_eq!(t[3].run_after, later);
    assert_eq!(t[3].attempt, 1);
    assert_eq!(state(&t[4]), TaskState::Queued);
    assert_eq!(t[4].attempt, 0, "a hand-back refunds the attempt");
    assert_eq!(state(&t[5]), TaskState::Running);
    assert_eq!(kinds(&store, ids[4]).await.last().unwrap(), "handed_back");
    assert_eq!(kinds(&store, ids[3]).await.last().unwrap(), "requeued");
}

/// A batch of successes alone (the queue's hot path, one statement on PostgreSQL) ends each task
/// with its own event and details: a pending approval is closed, a cancel requested while the
/// attempt finished wins, and a stale lease writes nothing.
pub async fn a_batch_of_successes_ends_each_task_with_its_own_event(db: &TestStore) {
    let store = db.store.clone();
    let tasks: Vec<NewTask> = (0..4).map(|i| agent_task(&format!("s{i}"))).collect();
    let ids = store.create_tasks(&tasks).await.unwrap();
    let claimed = store.claim("w", &queues(), 4, LEASE).await.unwrap();
    let lease = |i: usize| lease_of(&claimed, ids[i]);
    let pending = store
        .request_approval(&lease(0), &ask("c1", now_millis() + 60_000))
        .await
        .unwrap();
    assert_eq!(
        store.cancel_task(ids[1]).await.unwrap(),
        orchestrator_store::CancelOutcome::Requested
    );
    let stale = Lease {
        task_id: ids[2],
        epoch: lease(2).epoch + 7,
    };
    let details = |i: usize| json!({"summary": format!("done {i}"), "n": i});
    let completions: Vec<Completion> = [lease(0), lease(1), stale, lease(3)]
        .into_iter()
        .enumerate()
        .map(|(i, lease)| Completion {
            lease,
            outcome: Outcome::Succeeded,
            details: details(i),
        })
        .collect();
    let results = store.complete(&completions).await.unwrap();
    use CompletionResult::*;
    assert_eq!(results, [Applied, Applied, Stale, Applied]);

    let ended = [
        (0, TaskState::Succeeded),
        (1, TaskState::Canceled),
        (3, TaskState::Succeeded),
    ];
    for (i, state) in ended {
        let task = store.get_task(ids[i]).await.unwrap();
        assert_eq!(task.state, state, "task {i}");
        assert_eq!(task.lease_owner, None, "task {i}");
        let events = store.events(ids[i], 0, 100).await.unwrap();
        let last = events.last().unwrap();
        assert_eq!(last.kind, state.as_str(), "task {i}'s last event");
        assert_eq!(
            last.data,
            details(i),
            "task {i}'s event carries its own details"
        );
        assert_eq!(last.seq, task.event_seq, "task {i}");
        assert_eq!(
            events.iter().filter(|e| e.kind == state.as_str()).count(),
            1,
            "task {i}"
        );
    }
    let untouched = store.get_task(ids[2]).await.unwrap();
    assert_eq!(untouched.state, TaskState::Running);
    assert_eq!(kinds(&store, ids[2]).await, ["created", "claimed"]);
    assert_eq!(
        store.get_approval(pending.id).await.unwrap().status,
        approval_status::CANCELED
    );
}

async fn futures_like_join(store: &Store, ids: &[TaskId]) -> Vec<orchestrator_store::Task> {
    let mut out = Vec::new();
    for id in ids {
        out.push(store.get_task(*id).await.unwrap());
    }
    out
}

pub async fn cancel_is_not_lost_in_a_requeue(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&NewTask::new("t")).await.unwrap();
    let (_, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        store.cancel_task(id).await.unwrap(),
        CancelOutcome::Requested
    );
    // The worker hands the task back (shutdown) before it saw the cancel.
    let results = store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Requeue {
                run_after: now_millis(),
                error: None,
                refund: true,
            },
            details: json!({}),
        }])
        .await
        .unwrap();
    assert_eq!(results, [CompletionResult::Applied]);
    let task = store.get_task(id).await.unwrap();
    assert_eq!(task.state, TaskState::Canceled);
    assert!(task.finished_at.is_some());
    assert_eq!(kinds(&store, id).await.last().unwrap(), "canceled");
    assert!(
        store
            .claim("w", &queues(), 1, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn foreground_tasks_are_invisible_to_claims(db: &TestStore) {
    let store = db.store.clone();
    let (task, lease) = store
        .create_foreground(&NewTask::new("mine"), "fg", LEASE)
        .await
        .unwrap();
    assert_eq!(task.state, TaskState::Running);
    assert_eq!(task.lease_owner.as_deref(), Some("fg"));
    assert!(
        task.run_after <= now_millis(),
        "run_after shows when it ran"
    );
    // Handed back for a retry, it is still the foreground process's: no daemon takes it,
    // whatever it offers, and it says why it waits; its process takes it again by its id.
    store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Requeue {
                run_after: now_millis(),
                error: None,
                refund: false,
            },
            details: json!({}),
        }])
        .await
        .unwrap();
    let offers = [
        "gpu".to_owned(),
        orchestrator_types::placement::REPOSITORY_WORD.to_owned(),
    ];
    assert!(
        store
            .claim_offering("daemon", &queues(), &offers, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.next_run_after(&queues(), &offers).await.unwrap(),
        None,
        "an idle daemon does not wait for it"
    );
    let waiting = store.get_task(task.id).await.unwrap();
    let why = store
        .why_queued(&waiting)
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(
        why.contains("only the `orchestrator run` process that made it runs it (worker fg)"),
        "{why}"
    );
    let (again, _) = store
        .claim_task("fg", task.id, LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.id, again.attempt), (task.id, 2));
    // Another queue's due task does not count as due for this queue.
    let mut other = NewTask::new("elsewhere");
    other.queue = "other".into();
    store.create_task(&other).await.unwrap();
    assert_eq!(store.next_run_after(&queues(), &[]).await.unwrap(), None);
    assert!(
        store
            .next_run_after(&["other".to_owned()], &[])
            .await
            .unwrap()
            .is_some()
    );
}
