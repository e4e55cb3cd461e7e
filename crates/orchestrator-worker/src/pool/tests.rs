//! The worker pool's own tests: its slots, its futures' sizes, its wait for freed slots.

use super::*;

/// A saturated pool waits for the slots a completed batch frees together, and no longer: the
/// completer answers the whole batch at once, each slot gives its permit back when it next
/// runs, and the producer claims once they all have. On a paused clock, the wait takes no
/// time at all (a sleep of 1 ms was the whole wait before, on every claim of a saturated pool).
#[tokio::test(start_paused = true)]
async fn a_saturated_pool_gathers_the_slots_a_batch_frees_without_sleeping() {
    let slots = Arc::new(Semaphore::new(64));
    let mut answers = Vec::new();
    let mut held = JoinSet::new();
    for _ in 0..64 {
        let permit = slots.clone().try_acquire_owned().unwrap();
        let (answer, answered) = oneshot::channel::<()>();
        answers.push(answer);
        held.spawn(async move {
            let _ = answered.await;
            drop(permit);
        });
    }
    // Every slot is busy, waiting for the completer's answer, which comes for all at once.
    tokio::task::yield_now().await;
    assert_eq!(slots.available_permits(), 0);
    for answer in answers {
        answer.send(()).unwrap();
    }
    let before = tokio::time::Instant::now();
    gather_free_slots(&slots).await;
    assert_eq!(
        slots.available_permits(),
        64,
        "every slot of the batch is free before the claim"
    );
    assert_eq!(tokio::time::Instant::now(), before, "no time was slept");
    while held.join_next().await.is_some() {}
}

/// A no-op task claimed by `worker` in a fresh SQLite store under `dir`, with the run context
/// a pool of that worker would give its slots.
async fn claimed_noop(dir: &std::path::Path, worker: &str) -> (Task, Lease, Arc<RunContext>) {
    let store = Store::open_sqlite(&dir.join("o.db"), &Default::default())
        .await
        .unwrap();
    let id = store
        .create_task(&orchestrator_types::NewTask::new("no-op"))
        .await
        .unwrap();
    let (task, lease) = store.claim_task(worker, id, 60_000).await.unwrap().unwrap();
    let ctx = Arc::new(RunContext {
        store,
        metrics: Arc::new(Metrics::default()),
        backoff: Backoff::default(),
        log_cap_bytes: 1 << 20,
        worker_id: worker.into(),
        agent: crate::AgentConfig::default(),
        sandbox: crate::Sandbox::new(Default::default()),
    });
    (task, lease, ctx)
}

/// A slot is free for the next claim once its attempt's end is handed to the completer: the
/// attempt runs no more, and the producer need not wait for the end's commit (a round trip
/// that bounded a saturated pool to a slot count of tasks per claim and commit). The lease
/// stays among the active ones, kept alive by the keeper, until the end is written.
#[tokio::test]
async fn a_slot_is_free_once_its_end_is_handed_to_the_completer() {
    let dir = tempfile::tempdir().unwrap();
    let (task, lease, ctx) = claimed_noop(dir.path(), "w").await;
    let slots = Arc::new(Semaphore::new(1));
    let permit = slots.clone().try_acquire_owned().unwrap();
    let active: Active = Arc::default();
    let stop = Stop::default();
    let guard = track(&active, &lease, &stop, Instant::now());
    let (completions, mut ends) = mpsc::channel(1);
    let slot = tokio::spawn(slot(
        Slot {
            ctx,
            task: Box::new(task),
            lease: lease.clone(),
            stop,
            completions,
            on_start: None,
        },
        (permit, guard),
    ));

    let (end, answer) = ends.recv().await.unwrap();
    assert_eq!(end.outcome, Outcome::Succeeded);
    assert_eq!(
        slots.available_permits(),
        1,
        "the slot is free while its end is written"
    );
    assert!(
        lock(&active).contains_key(&(lease.task_id, lease.epoch)),
        "the lease is kept alive until its end is written"
    );
    answer.send(CompletionResult::Applied).unwrap();
    slot.await.unwrap();
    assert!(
        lock(&active).is_empty(),
        "the written end leaves the active leases"
    );
}

/// The most bytes the future spawned for a claimed task may take: it is moved into the runtime
/// on every claim.
const SLOT_FUTURE_CEILING: usize = 4096;

/// The most bytes the attempt's future in it may take, less than a store write's future (2.8 KB
/// in a test build): one awaited inline would pass it. It was 5.5 KB, made on the stack and
/// copied into a box of its own for every task, until the parts that only some tasks reach
/// (the gates, a worktree's preparation) were boxed when reached.
const ATTEMPT_FUTURE_CEILING: usize = 2048;

#[tokio::test]
async fn the_futures_made_per_claimed_task_are_small() {
    let dir = tempfile::tempdir().unwrap();
    let (task, lease, ctx) = claimed_noop(dir.path(), "sizer").await;
    let (completions, _ends) = mpsc::channel(1);
    let stop = Stop::default();

    let unused = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
    let attempt = run_slot(&ctx, &task, &lease, &stop, &completions, unused);
    let attempt_bytes = std::mem::size_of_val(&attempt);
    drop(attempt);

    let active: Active = Arc::default();
    let guard = track(&active, &lease, &stop, Instant::now());
    let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
    let spawned = slot(
        Slot {
            ctx,
            task: Box::new(task),
            lease,
            stop,
            completions,
            on_start: None,
        },
        (permit, guard),
    );
    let spawned_bytes = std::mem::size_of_val(&spawned);
    assert!(
        spawned_bytes <= SLOT_FUTURE_CEILING,
        "the slot's future is {spawned_bytes} bytes"
    );
    assert!(
        attempt_bytes <= ATTEMPT_FUTURE_CEILING,
        "the attempt's future is {attempt_bytes} bytes"
    );
}

/// One end the database refuses (a trigger here, as a broken row or a constraint would) costs
/// only its own task: the batch it came in is written again one end at a time, and the others'
/// ends stand. Before, the whole batch was answered stale, and every task in it ran again.
#[tokio::test]
async fn a_batch_of_ends_with_one_bad_end_loses_only_that_one() {
    let db = orchestrator_test_support::sqlite_store().await;
    let mut completions = Vec::new();
    for n in 0..3 {
        let id = db
            .store
            .create_task(&orchestrator_types::NewTask::new(format!("no-op {n}")))
            .await
            .unwrap();
        let (_, lease) = db.store.claim_task("w", id, 60_000).await.unwrap().unwrap();
        completions.push(Completion {
            lease,
            outcome: Outcome::Succeeded,
            details: serde_json::json!({}),
        });
    }
    let bad = completions[1].lease.task_id;
    db.raw_sql(&format!(
        "CREATE TRIGGER refuse_end BEFORE UPDATE ON tasks WHEN NEW.id = {} AND NEW.state = 'succeeded' \
         BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
        bad.0
    ))
    .await;
    let results = write_ends(&db.store, &completions, Duration::from_secs(1)).await;
    assert_eq!(
        results,
        [
            CompletionResult::Applied,
            CompletionResult::Stale,
            CompletionResult::Applied
        ]
    );
    for (completion, state) in completions.iter().zip([
        orchestrator_types::TaskState::Succeeded,
        orchestrator_types::TaskState::Running,
        orchestrator_types::TaskState::Succeeded,
    ]) {
        let task = db.store.get_task(completion.lease.task_id).await.unwrap();
        assert_eq!(task.state, state, "task {}", task.id);
    }
}
