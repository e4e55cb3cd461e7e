//! The cases of the conformance suite. Each takes a fresh, migrated store.

use orchestrator_store::{
    CancelOutcome, Completion, CompletionResult, Error, GateRun, Lease, Outcome, Store,
    StoreOptions, TaskFilter,
};
use orchestrator_test_support::TestStore;
use orchestrator_types::{
    Captured, EventKind, GateEvidence, GateSummary, GitTree, NewTask, TaskId, TaskState, Verdict,
    now_millis,
};
use serde_json::json;
use std::collections::HashSet;

const LEASE: i64 = 30_000;

fn queues() -> Vec<String> {
    vec!["default".to_owned()]
}

async fn kinds(store: &Store, id: TaskId) -> Vec<String> {
    store
        .events(id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

pub async fn create_and_read(db: &TestStore) {
    let store = db.store.clone();
    let mut new = NewTask::new("  build the thing  ").with_gate("cargo test");
    new.priority = 5;
    new.workspace = Some("/tmp".into());
    let id = store.create_task(&new).await.unwrap();
    let task = store.get_task(id).await.unwrap();
    assert_eq!(task.title, "build the thing");
    assert_eq!(task.state, TaskState::Queued);
    assert_eq!(task.priority, 5);
    assert_eq!(task.attempt, 0);
    assert_eq!(task.epoch, 0);
    assert_eq!(task.gates.len(), 1);
    assert_eq!(task.gates[0].command, "cargo test");
    assert_eq!(task.workspace.as_deref(), Some("/tmp"));
    let events = store.events(id, 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].seq, 1);
    assert_eq!(events[0].kind, "created");
    assert!(matches!(
        store.get_task(TaskId(999_999)).await,
        Err(Error::TaskNotFound(TaskId(999_999)))
    ));
}

pub async fn invalid_input_changes_nothing(db: &TestStore) {
    let store = db.store.clone();
    let bad = [
        NewTask::new("t").with_gate(""),
        NewTask::new(""),
        {
            let mut t = NewTask::new("t");
            t.prompt = Some("fix it".into());
            t
        },
        {
            let mut t = NewTask::new("t");
            t.max_attempts = 0;
            t
        },
    ];
    for task in &bad {
        let err = store.create_task(task).await.unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
    }
    // A batch with one bad task inserts nothing.
    let batch = vec![NewTask::new("good"), NewTask::new("bad").with_gate(" ")];
    assert!(store.create_tasks(&batch).await.is_err());
    let all = store.list_tasks(&TaskFilter::default()).await.unwrap();
    assert!(all.is_empty(), "{all:?}");
}

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
        store.next_run_after(&queues()).await.unwrap(),
        None,
        "nothing is queued"
    );
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

fn evidence(verdict: Verdict) -> GateEvidence {
    GateEvidence {
        verdict,
        failure_kind: None,
        exit_code: Some(0),
        signal: None,
        duration_ms: 12,
        summary: GateSummary {
            text: "ok".into(),
            ..Default::default()
        },
        git: None,
        started_at: now_millis(),
        finished_at: now_millis(),
    }
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
        store.next_run_after(&queues()).await.unwrap(),
        Some(later + 1000)
    );
}

pub async fn cancel_and_retry(db: &TestStore) {
    let store = db.store.clone();
    let ids = store
        .create_tasks(&[NewTask::new("queued"), NewTask::new("running")])
        .await
        .unwrap();
    assert_eq!(
        store.cancel_task(ids[0]).await.unwrap(),
        CancelOutcome::Canceled
    );
    assert_eq!(
        store.cancel_task(ids[0]).await.unwrap(),
        CancelOutcome::AlreadyCanceled
    );
    let (_, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(lease.task_id, ids[1]);
    assert_eq!(
        store.cancel_task(ids[1]).await.unwrap(),
        CancelOutcome::Requested
    );
    assert_eq!(
        store.cancel_requests("w").await.unwrap(),
        std::slice::from_ref(&lease)
    );
    assert!(store.cancel_requests("other").await.unwrap().is_empty());
    store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Canceled,
            details: json!({}),
        }])
        .await
        .unwrap();
    assert_eq!(
        store.get_task(ids[1]).await.unwrap().state,
        TaskState::Canceled
    );
    assert!(matches!(
        store.cancel_task(TaskId(424_242)).await,
        Err(Error::TaskNotFound(_))
    ));

    // Retry brings both back; the running one keeps its attempt count and gains an attempt.
    let retried = store.retry_task(ids[1]).await.unwrap();
    assert_eq!(retried.state, TaskState::Queued);
    assert!(!retried.cancel_requested);
    assert!(retried.max_attempts > retried.attempt);
    assert!(matches!(
        store.retry_task(ids[1]).await,
        Err(Error::WrongState { .. })
    ));
    store.retry_task(ids[0]).await.unwrap();
    let (task, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(task.id, ids[0]);
    store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Succeeded,
            details: json!({}),
        }])
        .await
        .unwrap();
    let err = store.cancel_task(ids[0]).await.unwrap_err();
    assert!(matches!(err, Error::WrongState { .. }), "{err}");
    assert!(err.to_string().contains("cannot be canceled"));
}

pub async fn events_are_gap_free_through_a_lifecycle(db: &TestStore) {
    let store = db.store.clone();
    let id = store
        .create_task(&NewTask::new("t").with_gate("true"))
        .await
        .unwrap();
    let (_, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    for _ in 0..5 {
        store
            .append_event(&lease, EventKind::GateStarted, json!({"n": 1}))
            .await
            .unwrap();
    }
    store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Failed {
                error: "gate failed".into(),
            },
            details: json!({"gates": 1}),
        }])
        .await
        .unwrap();
    store.retry_task(id).await.unwrap();
    let events = store.events(id, 0, 100).await.unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as i64).collect::<Vec<_>>());
    assert_eq!(events.last().unwrap().kind, "retried");
    let failed = events.iter().find(|e| e.kind == "failed").unwrap();
    assert_eq!(failed.data["error"], "gate failed");
    assert_eq!(failed.data["gates"], 1);
    // Paging by `after`.
    let tail = store.events(id, 3, 2).await.unwrap();
    assert_eq!(tail.iter().map(|e| e.seq).collect::<Vec<_>>(), [4, 5]);
    assert_eq!(
        store.get_task(id).await.unwrap().event_seq,
        events.len() as i64
    );
}

pub async fn artifacts_round_trip_and_cap(db: &TestStore) {
    let store = db.store.clone();
    let small = Captured::from_bytes(b"hello\nworld\n", 1024);
    let id = store
        .put_artifact(None, "note", "text/plain", "a note", &small)
        .await
        .unwrap();
    let artifact = store.get_artifact(id).await.unwrap();
    assert_eq!(artifact.bytes, b"hello\nworld\n");
    assert_eq!(artifact.meta.cut_bytes, 0);
    assert_eq!(artifact.meta.original_bytes, 12);

    // 3 MB through a 64 KiB cap: head and tail kept, the cut named.
    let big: Vec<u8> = (0..3_000_000u32)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    let captured = Captured::from_bytes(&big, 64 * 1024);
    let id = store
        .put_artifact(None, "gate_log", "text/plain", "big", &captured)
        .await
        .unwrap();
    let artifact = store.get_artifact(id).await.unwrap();
    assert_eq!(artifact.meta.original_bytes, big.len() as i64);
    assert_eq!(artifact.meta.kept_bytes, 64 * 1024);
    assert_eq!(artifact.meta.cut_bytes, big.len() as i64 - 64 * 1024);
    assert!(artifact.bytes.starts_with(&big[..32 * 1024]));
    assert!(artifact.bytes.ends_with(&big[big.len() - 32 * 1024..]));
    let text = String::from_utf8_lossy(&artifact.bytes);
    assert!(text.contains(&format!("{} bytes cut", big.len() - 64 * 1024)));
    assert!(matches!(
        store
            .get_artifact(orchestrator_types::ArtifactId(987_654))
            .await,
        Err(Error::ArtifactNotFound(987_654))
    ));
}

pub async fn gates_are_recorded_with_evidence(db: &TestStore) {
    let store = db.store.clone();
    let id = store
        .create_task(
            &NewTask::new("t")
                .with_gate("cargo test")
                .with_gate("cargo clippy"),
        )
        .await
        .unwrap();
    let (task, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    let mut ev = evidence(Verdict::Failed);
    ev.exit_code = Some(101);
    ev.failure_kind = Some(orchestrator_types::FailureKind::Test);
    ev.summary.text = "3 passed, 1 failed (cargo-test)".into();
    ev.git = Some(GitTree {
        head: Some("abc123".into()),
        dirty: true,
        diff_hash: Some("feed".into()),
    });
    let log = Captured::from_bytes(b"test result: FAILED. 3 passed; 1 failed", 1024);
    let (gate_id, artifact) = store
        .record_gate(&GateRun {
            lease: &lease,
            attempt: task.attempt,
            position: 1,
            spec: &task.gates[1],
            evidence: &ev,
            log: &log,
        })
        .await
        .unwrap();
    let gates = store.gates(id).await.unwrap();
    assert_eq!(gates.len(), 1);
    let gate = &gates[0];
    assert_eq!(gate.id, gate_id);
    assert_eq!(gate.name, "cargo clippy");
    assert_eq!(gate.verdict, Verdict::Failed);
    assert_eq!(gate.exit_code, Some(101));
    assert_eq!(gate.duration_ms, 12);
    assert_eq!(gate.summary, "3 passed, 1 failed (cargo-test)");
    assert_eq!(gate.log_artifact, Some(artifact));
    assert_eq!(gate.git_head.as_deref(), Some("abc123"));
    assert_eq!(gate.git_dirty, Some(true));
    assert_eq!(gate.diff_hash.as_deref(), Some("feed"));
    let log = store.get_artifact(artifact).await.unwrap();
    assert_eq!(log.meta.task_id, Some(id));
    assert_eq!(log.bytes, b"test result: FAILED. 3 passed; 1 failed");
    let events = store.events(id, 0, 10).await.unwrap();
    let finished = events.iter().find(|e| e.kind == "gate_finished").unwrap();
    assert_eq!(finished.data["verdict"], "failed");
    assert_eq!(finished.data["log_artifact"], artifact.0);
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
    let lease = |i: usize| {
        claimed
            .iter()
            .find(|(t, _)| t.id == ids[i])
            .unwrap()
            .1
            .clone()
    };
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

async fn futures_like_join(store: &Store, ids: &[TaskId]) -> Vec<orchestrator_store::Task> {
    let mut out = Vec::new();
    for id in ids {
        out.push(store.get_task(*id).await.unwrap());
    }
    out
}

pub async fn counts_by_state(db: &TestStore) {
    let store = db.store.clone();
    let ids = store
        .create_tasks(&[NewTask::new("a"), NewTask::new("b"), NewTask::new("c")])
        .await
        .unwrap();
    store.cancel_task(ids[0]).await.unwrap();
    store.claim("w", &queues(), 1, LEASE).await.unwrap();
    let counts = store.count_by_state().await.unwrap();
    let get = |s: TaskState| counts.iter().find(|(state, _)| *state == s).unwrap().1;
    assert_eq!(get(TaskState::Queued), 1);
    assert_eq!(get(TaskState::Running), 1);
    assert_eq!(get(TaskState::Canceled), 1);
    assert_eq!(get(TaskState::Succeeded), 0);
    assert_eq!(counts.len(), TaskState::ALL.len());
    let running = store
        .list_tasks(&TaskFilter {
            state: Some(TaskState::Running),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].id, ids[1]);
}

pub async fn migrations_are_idempotent(db: &TestStore) {
    // Opening the same database again finds every migration applied and changes nothing.
    let id = db
        .store
        .create_task(&NewTask::new("survives"))
        .await
        .unwrap();
    let reopened = Store::open(&db.url, &StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(reopened.get_task(id).await.unwrap().title, "survives");
    assert_eq!(reopened.events(id, 0, 10).await.unwrap().len(), 1);
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

pub async fn orphaned_running_task_cancels_at_once(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&NewTask::new("t")).await.unwrap();
    // A lease of 1 ms: by the time of the cancel, nobody holds the task.
    let (_, lease) = store
        .claim("gone", &queues(), 1, 1)
        .await
        .unwrap()
        .remove(0);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(
        store.cancel_task(id).await.unwrap(),
        CancelOutcome::Canceled
    );
    let task = store.get_task(id).await.unwrap();
    assert_eq!(task.state, TaskState::Canceled);
    assert!(task.lease_owner.is_none());
    // The vanished worker, if it comes back, can no longer write.
    let late = store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Succeeded,
            details: json!({}),
        }])
        .await
        .unwrap();
    assert_eq!(late, [CompletionResult::Stale]);
    assert_eq!(store.get_task(id).await.unwrap().state, TaskState::Canceled);
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
    // Handed back (say the foreground process is interrupted), a daemon may then take it.
    store
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
    let claimed = store.claim("daemon", &queues(), 10, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].0.id, task.id);
    // Another queue's due task does not count as due for this queue.
    let mut other = NewTask::new("elsewhere");
    other.queue = "other".into();
    store.create_task(&other).await.unwrap();
    assert_eq!(store.next_run_after(&queues()).await.unwrap(), None);
    assert!(
        store
            .next_run_after(&["other".to_owned()])
            .await
            .unwrap()
            .is_some()
    );
}

pub async fn concurrent_retries_queue_a_task_once(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&NewTask::new("t")).await.unwrap();
    let (_, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Failed { error: "x".into() },
            details: json!({}),
        }])
        .await
        .unwrap();
    // Many users press retry at once: exactly one retry happens, the rest see the new state.
    let mut handles = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        handles.push(tokio::spawn(
            async move { store.retry_task(id).await.is_ok() },
        ));
    }
    let mut ok = 0;
    for handle in handles {
        ok += usize::from(handle.await.unwrap());
    }
    assert_eq!(ok, 1);
    let retried = kinds(&store, id)
        .await
        .iter()
        .filter(|k| *k == "retried")
        .count();
    assert_eq!(retried, 1);
}

fn automation_spec(name: &str) -> orchestrator_types::AutomationSpec {
    let mut spec = orchestrator_types::AutomationSpec::new(name, "0 3 * * *");
    spec.workspaces.push("/tmp".into());
    spec.template
        .gates
        .push(orchestrator_types::GateSpec::from_command("true"));
    spec
}

pub async fn automations_crud_and_unique_names(db: &TestStore) {
    use orchestrator_store::{NextFire, SOURCE_CLI};
    use orchestrator_types::AutomationStatus;
    let store = db.store.clone();
    let next = NextFire {
        slot_at: Some(1_000),
        fire_at: Some(1_500),
    };
    let created = store
        .create_automation(&automation_spec("nightly"), SOURCE_CLI, None, next)
        .await
        .unwrap();
    assert_eq!(created.status, AutomationStatus::Active);
    assert_eq!(created.next_fire_at, Some(1_500));
    let err = store
        .create_automation(&automation_spec("nightly"), SOURCE_CLI, None, next)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::DuplicateAutomation(ref n) if n == "nightly"),
        "{err}"
    );
    let mut bad = automation_spec("bad");
    bad.overlap = orchestrator_types::Overlap::Allow;
    bad.workspaces.clear();
    assert!(matches!(
        store.create_automation(&bad, SOURCE_CLI, None, next).await,
        Err(Error::Invalid(_))
    ));
    assert_eq!(store.list_automations().await.unwrap().len(), 1);

    assert_eq!(store.due_automations(1_499, 10).await.unwrap().len(), 0);
    assert_eq!(store.due_automations(1_500, 10).await.unwrap().len(), 1);
    let paused = store
        .set_automation_status("nightly", AutomationStatus::Paused, next)
        .await
        .unwrap();
    assert_eq!(paused.status, AutomationStatus::Paused);
    assert!(
        store
            .due_automations(i64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.next_automation_fire().await.unwrap(), None);

    let mut changed = automation_spec("nightly");
    changed.schedule = "0 4 * * *".into();
    let updated = store
        .update_automation("nightly", &changed, None, next)
        .await
        .unwrap();
    assert_eq!(updated.spec.schedule, "0 4 * * *");
    store.delete_automation("nightly").await.unwrap();
    assert!(matches!(
        store.automation("nightly").await,
        Err(Error::AutomationNotFound(_))
    ));
    assert!(matches!(
        store.delete_automation("nightly").await,
        Err(Error::AutomationNotFound(_))
    ));
}

pub async fn a_slot_is_recorded_once_with_its_tasks(db: &TestStore) {
    use orchestrator_store::{Advance, NextFire, SOURCE_CLI, SlotDecision, SlotPlan, SlotResult};
    use orchestrator_types::{Overlap, SlotKind, SlotStatus};
    let store = db.store.clone();
    let spec = automation_spec("slots");
    let next = NextFire {
        slot_at: Some(10_000),
        fire_at: Some(10_000),
    };
    let a = store
        .create_automation(&spec, SOURCE_CLI, None, next)
        .await
        .unwrap();
    let plan = |slot_at: i64| SlotPlan {
        automation_id: a.id,
        slot_at,
        kind: SlotKind::Scheduled,
        decision: SlotDecision::Fire {
            overlap: Overlap::Allow,
            tasks: vec![
                spec.task_for("/tmp", "x", None),
                spec.task_for("/var", "x", None),
            ],
        },
    };
    let advance = Advance {
        automation_id: a.id,
        through: 10_000,
        next_slot_at: Some(20_000),
        next_fire_at: Some(20_000),
    };
    let first = store
        .fire_slots(&[plan(10_000)], &[advance], "s1", now_millis())
        .await
        .unwrap();
    let SlotResult::Fired { tasks } = &first[0] else {
        panic!("{first:?}")
    };
    assert_eq!(tasks.len(), 2);
    for id in tasks {
        let task = store.get_task(*id).await.unwrap();
        assert_eq!(task.automation_id, Some(a.id));
        assert_eq!(task.slot_at, Some(10_000));
        assert_eq!(kinds(&store, *id).await, vec!["created"]);
    }
    // The same slot again, from another scheduler with a stale view: nothing happens, and the
    // automation does not move back.
    let stale = Advance {
        through: 10_000,
        next_slot_at: Some(15_000),
        ..advance
    };
    let again = store
        .fire_slots(&[plan(10_000)], &[stale], "s2", now_millis())
        .await
        .unwrap();
    assert_eq!(again, vec![SlotResult::AlreadyRecorded]);
    assert_eq!(
        store.automation("slots").await.unwrap().next_slot_at,
        Some(20_000)
    );
    assert_eq!(
        store
            .list_tasks(&TaskFilter::default())
            .await
            .unwrap()
            .len(),
        2
    );

    // A skipped slot keeps its reason; a plan with an invalid task writes nothing at all.
    let skip = SlotPlan {
        decision: SlotDecision::Skip {
            reason: "missed (catch-up skip)".into(),
        },
        ..plan(20_000)
    };
    store
        .fire_slots(&[skip], &[], "s1", now_millis())
        .await
        .unwrap();
    let mut bad = plan(30_000);
    if let SlotDecision::Fire { tasks, .. } = &mut bad.decision {
        tasks[0].gates[0].command = " ".into();
    }
    assert!(
        store
            .fire_slots(&[bad], &[], "s1", now_millis())
            .await
            .is_err()
    );
    let slots = store.slots(a.id, 10).await.unwrap();
    assert_eq!(slots.len(), 2, "{slots:?}");
    assert_eq!(slots[0].status, SlotStatus::Skipped);
    assert_eq!(slots[0].reason.as_deref(), Some("missed (catch-up skip)"));
    assert_eq!(slots[1].status, SlotStatus::Fired);
    assert_eq!(slots[1].scheduler, "s1");
    assert_eq!(slots[1].tasks.len(), 2);
}
