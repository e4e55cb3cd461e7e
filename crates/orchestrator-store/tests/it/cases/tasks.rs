//! Cases of the task row itself: creation, validation, cancel, retry, events, counts, migrations.

use super::*;

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

/// Each state is counted and listed, newest first, whichever index holds it (migration 0024:
/// queued and running in the claim's and the rescuer's partial indexes, waiting, failed and
/// canceled in `tasks_settled`, succeeded as the rest).
pub async fn every_state_is_counted_and_listed(db: &TestStore) {
    let store = db.store.clone();
    let titles = [
        "canceled",
        "succeeded",
        "failed",
        "waiting",
        "running",
        "queued",
    ];
    let ids = store
        .create_tasks(&titles.map(super::agent::agent_task))
        .await
        .unwrap();
    store.cancel_task(ids[0]).await.unwrap();
    let claimed = store.claim("w", &queues(), 4, LEASE).await.unwrap();
    let lease = |title: &str| {
        claimed
            .iter()
            .find(|(task, _)| task.title == title)
            .map(|(_, lease)| lease.clone())
            .unwrap()
    };
    let approval = store
        .request_approval(
            &lease("waiting"),
            &super::agent::ask("c1", now_millis() + 60_000),
        )
        .await
        .unwrap();
    let ends = [
        ("succeeded", Outcome::Succeeded),
        ("failed", Outcome::Failed { error: "no".into() }),
        (
            "waiting",
            Outcome::Wait {
                reason: "approval".into(),
            },
        ),
    ];
    for (title, outcome) in ends {
        let results = store
            .complete(&[Completion {
                lease: lease(title),
                outcome,
                details: json!({"approval": approval.id}),
            }])
            .await
            .unwrap();
        assert_eq!(results, [CompletionResult::Applied], "{title}");
    }
    let counts = store.count_by_state().await.unwrap();
    assert_eq!(counts.len(), TaskState::ALL.len());
    for (state, n) in counts {
        assert_eq!(n, 1, "{state:?}");
        let listed = store
            .list_tasks(&TaskFilter {
                state: Some(state),
                ..Default::default()
            })
            .await
            .unwrap();
        let page = store
            .task_page(&orchestrator_store::TaskPage {
                state: Some(state),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        for tasks in [listed, page] {
            let found: Vec<&str> = tasks.iter().map(|t| t.title.as_str()).collect();
            assert_eq!(found, [state.as_str()], "{state:?}");
        }
    }
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

pub async fn a_store_has_one_identity_for_life(db: &TestStore) {
    // Made by the migration: 32 hex digits, the same for every process that opens the store.
    let id = db.store.identity().await.unwrap();
    assert_eq!(id.len(), 32, "{id}");
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    let reopened = Store::open(&db.url, &StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(reopened.identity().await.unwrap(), id);
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

/// A page of tasks: newest first, filtered, and the keyset walks every task exactly once; a title
/// search ignores case and takes `%` and `_` literally.
pub async fn task_pages_filter_and_walk_by_keyset(db: &TestStore) {
    let store = db.store.clone();
    let titles = [
        "Fix the parser",
        "fix THE lexer",
        "50% off",
        "500 offers",
        "a_b",
        "axb",
        "unrelated",
    ];
    let mut ids = Vec::new();
    for (i, title) in titles.iter().enumerate() {
        let mut new = NewTask::new(*title);
        new.queue = if i % 2 == 0 { "default" } else { "slow" }.into();
        ids.push(store.create_task(&new).await.unwrap());
    }
    // Walk three at a time.
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .task_page(&orchestrator_store::TaskPage {
                before,
                limit: 3,
                ..Default::default()
            })
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        assert!(
            page.windows(2).all(|w| w[0].id.0 > w[1].id.0),
            "newest first"
        );
        before = page.last().map(|t| t.id);
        seen.extend(page.into_iter().map(|t| t.id));
    }
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(seen, expected, "every task once, newest first");

    let titles_of = |page: Vec<orchestrator_store::Task>| -> Vec<String> {
        page.into_iter().map(|t| t.title).collect()
    };
    let search = |text: &str| orchestrator_store::TaskPage {
        title_contains: Some(text.to_owned()),
        limit: 50,
        ..Default::default()
    };
    assert_eq!(
        titles_of(store.task_page(&search("fix the")).await.unwrap()),
        ["fix THE lexer", "Fix the parser"]
    );
    assert_eq!(
        titles_of(store.task_page(&search("50%")).await.unwrap()),
        ["50% off"]
    );
    assert_eq!(
        titles_of(store.task_page(&search("a_b")).await.unwrap()),
        ["a_b"]
    );
    let slow = store
        .task_page(&orchestrator_store::TaskPage {
            queue: Some("slow".into()),
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(slow.len(), 3);
    assert!(slow.iter().all(|t| t.queue == "slow"));
    store.cancel_task(ids[0]).await.unwrap();
    let canceled = store
        .task_page(&orchestrator_store::TaskPage {
            state: Some(TaskState::Canceled),
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(canceled.iter().map(|t| t.id).collect::<Vec<_>>(), [ids[0]]);
    let none = store
        .task_page(&orchestrator_store::TaskPage {
            automation: Some(12345),
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(none.is_empty());
}

/// What the overview counts: tasks that ended since a time, per state, and queued tasks per queue.
pub async fn overview_counts_what_ended_and_what_waits(db: &TestStore) {
    let store = db.store.clone();
    let before = now_millis();
    let mut ids = Vec::new();
    for queue in ["default", "default", "slow"] {
        let mut new = NewTask::new("t");
        new.queue = queue.into();
        ids.push(store.create_task(&new).await.unwrap());
    }
    assert_eq!(
        store.queued_by_queue().await.unwrap(),
        [("default".to_owned(), 2), ("slow".to_owned(), 1)]
    );
    assert!(store.finished_since(before).await.unwrap().is_empty());
    store.cancel_task(ids[2]).await.unwrap();
    assert_eq!(
        store.finished_since(before).await.unwrap(),
        [(TaskState::Canceled, 1)]
    );
    assert!(
        store
            .finished_since(now_millis() + 60_000)
            .await
            .unwrap()
            .is_empty(),
        "nothing ended in the future"
    );
    assert_eq!(
        store.queued_by_queue().await.unwrap(),
        [("default".to_owned(), 2)]
    );
}

/// The repository filter (the checkout a workspace was cloned from, else the workspace), the
/// repositories it offers, and the gate verdict filter.
pub async fn task_pages_filter_by_repository_and_gate_verdict(db: &TestStore) {
    let store = db.store.clone();
    let mut on_a = NewTask::new("on a").with_gate("true");
    on_a.workspace = Some("/src/a".into());
    let on_a = store.create_task(&on_a).await.unwrap();
    let mut cloned = NewTask::new("a clone of b").with_gate("true");
    cloned.workspace = Some("/work/clone-1".into());
    cloned.worktree_of = Some("/src/b".into());
    let cloned = store.create_task(&cloned).await.unwrap();
    let nowhere = store
        .create_task(&NewTask::new("no workspace"))
        .await
        .unwrap();
    let page = |repository: Option<&str>, verdict: Option<Verdict>| orchestrator_store::TaskPage {
        repository: repository.map(str::to_owned),
        gate_verdict: verdict,
        limit: 50,
        ..Default::default()
    };
    let ids =
        |tasks: Vec<orchestrator_store::Task>| tasks.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.task_page(&page(Some("/src/a"), None)).await.unwrap()),
        [on_a]
    );
    assert_eq!(
        ids(store.task_page(&page(Some("/src/b"), None)).await.unwrap()),
        [cloned]
    );
    assert!(
        store
            .task_page(&page(Some("/work/clone-1"), None))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.repositories(10).await.unwrap(),
        ["/src/b", "/src/a"],
        "most recently used first"
    );
    assert_eq!(store.repositories(1).await.unwrap(), ["/src/b"]);

    // A failed gate on the first task claimed (`on a`).
    let (task, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(task.id, on_a);
    store
        .record_gate(&GateRun {
            lease: &lease,
            attempt: task.attempt,
            position: 0,
            spec: &task.gates[0],
            evidence: &evidence(Verdict::Failed),
            log: &Captured::from_bytes(b"no", 1024),
        })
        .await
        .unwrap();
    assert_eq!(
        ids(store
            .task_page(&page(None, Some(Verdict::Failed)))
            .await
            .unwrap()),
        [on_a]
    );
    assert!(
        store
            .task_page(&page(None, Some(Verdict::Passed)))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .task_page(&page(Some("/src/b"), Some(Verdict::Failed)))
            .await
            .unwrap()
            .is_empty(),
        "filters combine"
    );
    let _ = nowhere;
}

/// A title search finds the same tasks whether the text is common (the newest are walked until a
/// page is full) or rare (on SQLite, only the candidates of the trigram index are read, with the
/// tasks created since it was last written), quotes and all.
pub async fn title_search_is_the_same_for_common_and_rare_texts(db: &TestStore) {
    let store = db.store.clone();
    let many: Vec<NewTask> = (0..2_100)
        .map(|i| NewTask::new(format!("Common chore {i}")))
        .collect();
    store.create_tasks(&many).await.unwrap();
    let quoted = store
        .create_task(&NewTask::new(r#"say "hi" to the parser"#))
        .await
        .unwrap();
    // SQLite's index is written after the creations (the rescuer's pass does it); before that,
    // 2,101 tasks not yet indexed make every text common there.
    let indexed = store.index_titles().await.unwrap();
    match store.backend() {
        orchestrator_store::Backend::Sqlite => assert_eq!(indexed, 2_101),
        orchestrator_store::Backend::Postgres => {
            assert_eq!(indexed, 0, "PostgreSQL indexes with the creation")
        }
    }
    let search = |text: &str, limit: u64| orchestrator_store::TaskPage {
        title_contains: Some(text.to_owned()),
        limit,
        ..Default::default()
    };
    let titles = |tasks: Vec<orchestrator_store::Task>| -> Vec<String> {
        tasks.into_iter().map(|t| t.title).collect()
    };
    let common = titles(store.task_page(&search("common CHORE", 3)).await.unwrap());
    assert_eq!(
        common,
        [
            "Common chore 2099",
            "Common chore 2098",
            "Common chore 2097"
        ]
    );
    assert_eq!(
        titles(store.task_page(&search("chore 2099", 50)).await.unwrap()),
        ["Common chore 2099"]
    );
    assert_eq!(
        titles(store.task_page(&search("hore 104", 50)).await.unwrap()),
        [
            "Common chore 1049",
            "Common chore 1048",
            "Common chore 1047",
            "Common chore 1046",
            "Common chore 1045",
            "Common chore 1044",
            "Common chore 1043",
            "Common chore 1042",
            "Common chore 1041",
            "Common chore 1040",
            "Common chore 104"
        ]
    );
    let found = store.task_page(&search(r#""HI" to"#, 50)).await.unwrap();
    assert_eq!(found.iter().map(|t| t.id).collect::<Vec<_>>(), [quoted]);
    // Every way a task is created feeds the index: a foreground run's task, and a task an
    // attempt creates under its own (a rare text is found only through the index's candidates),
    // found alike before their titles are indexed and after.
    let (_, lease) = store
        .create_foreground(&NewTask::new("Foreground Errand"), "cli", 30_000)
        .await
        .unwrap();
    let child = store
        .create_task_under(&lease, &NewTask::new("child ERRAND of the run"))
        .await
        .unwrap();
    for pass in ["before indexing", "after indexing"] {
        assert_eq!(
            titles(store.task_page(&search("errand", 50)).await.unwrap()),
            ["child ERRAND of the run", "Foreground Errand"],
            "{pass}"
        );
        assert_eq!(
            store.task_page(&search("ERRAND of", 50)).await.unwrap()[0].id,
            child,
            "{pass}"
        );
        store.index_titles().await.unwrap();
    }
    assert!(
        store
            .task_page(&search("no such title", 50))
            .await
            .unwrap()
            .is_empty()
    );
    // Filters and the keyset apply to a rare text as to a common one.
    let older = store
        .task_page(&orchestrator_store::TaskPage {
            before: Some(quoted),
            ..search("chore 2099", 50)
        })
        .await
        .unwrap();
    assert_eq!(titles(older), ["Common chore 2099"]);
    let canceled_only = store
        .task_page(&orchestrator_store::TaskPage {
            state: Some(TaskState::Canceled),
            ..search("chore 2099", 50)
        })
        .await
        .unwrap();
    assert!(canceled_only.is_empty());
}

/// Every task created gets one `created` event, numbered 1 and dated at its creation, whether it was
/// made alone, in a batch of one insert or in a batch of several (more than 500 tasks); on SQLite
/// the event is the insert's trigger's (migration 0020), on PostgreSQL the store's own insert. The
/// ids come back in the order of the tasks given.
pub async fn each_creation_writes_one_created_event(db: &TestStore) {
    let store = db.store.clone();
    let mut made = NewTask::new("  made by a trigger  ").with_gate("true");
    made.origin = Some("trigger triage on octo/widgets#12".into());
    let alone = store.create_task(&made).await.unwrap();
    let small: Vec<NewTask> = (0..3).map(|i| NewTask::new(format!("small {i}"))).collect();
    let large: Vec<NewTask> = (0..1_201)
        .map(|i| NewTask::new(format!("large {i}")))
        .collect();
    let mut ids = vec![alone];
    ids.extend(store.create_tasks(&small).await.unwrap());
    ids.extend(store.create_tasks(&large).await.unwrap());
    assert_eq!(ids.len(), 1 + 3 + 1_201);
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, ids, "ids are returned in creation order");
    let titles: Vec<String> = std::iter::once(made.title.trim().to_owned())
        .chain(small.iter().chain(&large).map(|t| t.title.clone()))
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let task = store.get_task(*id).await.unwrap();
        assert_eq!(
            task.title, titles[i],
            "the ids pair with the tasks in order"
        );
        let events = store.events(*id, 0, 10).await.unwrap();
        assert_eq!(events.len(), 1, "task {i}: {events:?}");
        let event = &events[0];
        assert_eq!(
            (event.kind.as_str(), event.seq, event.at),
            ("created", 1, task.created_at)
        );
        assert_eq!(task.event_seq, 1);
        let expected = match i {
            0 => json!({
                "title": "made by a trigger",
                "queue": "default",
                "gates": 1,
                "origin": "trigger triage on octo/widgets#12",
            }),
            _ => json!({ "title": task.title, "queue": "default", "gates": 0 }),
        };
        assert_eq!(event.data, expected, "task {i}");
    }
}

/// The overview's charts: per hour, the tasks that ended succeeded and failed (canceled ones are
/// not counted), and of the tasks that first started in it, the mean and longest wait from their
/// creation; hours before the window are left out.
pub async fn the_overview_counts_per_hour(db: &TestStore) {
    const HOUR: i64 = 3_600_000;
    let store = db.store.clone();
    let h0 = (now_millis() / HOUR - 5) * HOUR;
    let h1 = h0 + HOUR;
    let mut ids = Vec::new();
    for title in ["a", "b", "c", "d", "old"] {
        ids.push(store.create_task(&NewTask::new(title)).await.unwrap());
    }
    // (state, created, started, finished) as a worker would have left them.
    let rows = [
        ("succeeded", h0, h0 + 1_000, h0 + 600_000),
        ("failed", h0, h0 + 3_000, h0 + 1_200_000),
        ("succeeded", h1, h1 + 500, h1 + 300_000),
        ("canceled", h1, h1 + 100, h1 + 400_000),
        ("succeeded", h0 - 3 * HOUR, h0 - 3 * HOUR, h0 - 2 * HOUR),
    ];
    let mut raw = super::changes::Raw::connect(db).await;
    for (id, (state, created, started, finished)) in ids.iter().zip(rows) {
        raw.run(&format!(
            "UPDATE tasks SET state = '{state}', created_at = {created}, started_at = {started}, \
             finished_at = {finished} WHERE id = {}",
            id.0
        ))
        .await;
    }
    let since = h0 - HOUR / 2;
    assert_eq!(
        store.ended_per_hour(since).await.unwrap(),
        [
            orchestrator_store::HourOfEnds {
                hour: h0,
                succeeded: 1,
                failed: 1
            },
            orchestrator_store::HourOfEnds {
                hour: h1,
                succeeded: 1,
                failed: 0
            },
        ]
    );
    assert_eq!(
        store.start_waits_per_hour(since).await.unwrap(),
        [
            orchestrator_store::HourOfWaits {
                hour: h0,
                started: 2,
                mean_ms: 2_000,
                max_ms: 3_000
            },
            orchestrator_store::HourOfWaits {
                hour: h1,
                started: 2,
                mean_ms: 300,
                max_ms: 500
            },
        ]
    );
    assert!(
        store
            .ended_per_hour(now_millis() + HOUR)
            .await
            .unwrap()
            .is_empty()
    );
}
