//! The lease heartbeat's own connection under load: a heartbeat lands while every pooled
//! connection is held or writes queue ahead of it, and extends the lease from when it runs. Also:
//! a refused decision or retry leaves no row locked, and SQLite's plan for a batch of ends.

use super::*;
use crate::exec::Pool;
use orchestrator_types::NewTask;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// A task claimed for a minute: its id, the lease and when the claim said it expires.
async fn claimed(store: &Store) -> (TaskId, Lease, i64) {
    let id = store.create_task(&NewTask::new("kept")).await.unwrap();
    let (task, lease) = store
        .claim_task("keeper", id, 60_000)
        .await
        .unwrap()
        .unwrap();
    (id, lease, task.lease_expires_at.unwrap())
}

/// The task's lease expiry as a write of the pool's reads it inside its own transaction.
async fn expiry_in(tx: &mut Tx, id: TaskId) -> i64 {
    let stmt = Query::select()
        .column(Tasks::LeaseExpiresAt)
        .from(Tasks::Table)
        .and_where(Expr::col(Tasks::Id).eq(id.0))
        .to_owned();
    let (expires,): (i64,) = tx.fetch_optional(&stmt).await.unwrap().unwrap();
    expires
}

/// An ordinary write of the pool that, once its transaction has begun, holds it until
/// `release` lets it go, and says which lease expiry it saw there.
fn held_write(
    store: &Store,
    id: TaskId,
    release: &Arc<Semaphore>,
    begun: &tokio::sync::mpsc::UnboundedSender<()>,
) -> tokio::task::JoinHandle<i64> {
    let (store, release, begun) = (store.clone(), release.clone(), begun.clone());
    tokio::spawn(async move {
        let mut tx = store.pool.begin().await.unwrap();
        begun.send(()).unwrap();
        release.acquire().await.unwrap().forget();
        let seen = expiry_in(&mut tx, id).await;
        let touch = Query::update()
            .table(Tasks::Table)
            .value(Tasks::UpdatedAt, now_millis())
            .and_where(Expr::col(Tasks::Id).eq(id.0))
            .to_owned();
        tx.execute(&touch).await.unwrap();
        tx.commit().await.unwrap();
        seen
    })
}

/// On SQLite the writer queue is full of ordinary writes, one holding the turn and four
/// waiting, for as long as anyone cares to wait, and the pool has no connection left: a lease
/// heartbeat asked after all of them lands next after the write holding the turn, ahead of
/// the four that asked before it (each sees the extended lease in its own transaction), on a
/// connection of its own. Through the queue it came after all of them, and so after the
/// lease it was to keep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_goes_ahead_of_the_writes_waiting_in_the_writer_queue() {
    let dir = tempfile::tempdir().unwrap();
    let options = crate::StoreOptions {
        max_connections: 2,
        ..crate::StoreOptions::default()
    };
    let store = Store::open_sqlite(&dir.path().join("o.db"), &options)
        .await
        .unwrap();
    let Pool::Sqlite(pool, writer) = &store.pool else {
        unreachable!("an SQLite store")
    };
    let (id, lease, claimed_until) = claimed(&store).await;

    let release = Arc::new(Semaphore::new(0));
    let (begun, mut begun_rx) = tokio::sync::mpsc::unbounded_channel();
    let first = held_write(&store, id, &release, &begun);
    begun_rx.recv().await.unwrap();
    let queued: Vec<_> = (0..4)
        .map(|_| held_write(&store, id, &release, &begun))
        .collect();
    while writer.waiting() < 4 {
        tokio::task::yield_now().await;
    }
    // The pool's other connection is taken too, as by a long read.
    let reading = pool.acquire().await.unwrap();
    let heartbeat = tokio::spawn({
        let (store, lease) = (store.clone(), lease.clone());
        async move { store.heartbeat(&[lease], 600_000).await }
    });
    while writer.waiting() < 5 {
        tokio::task::yield_now().await;
    }
    release.add_permits(5);
    assert_eq!(first.await.unwrap(), claimed_until);
    let status = heartbeat.await.unwrap().unwrap();
    assert!(status[0].held, "{status:?}");
    for (n, write) in queued.into_iter().enumerate() {
        let seen = write.await.unwrap();
        assert!(
            seen > claimed_until,
            "write {n}, queued before the heartbeat, went before it (saw the lease at {seen}, \
             as claimed)"
        );
    }
    drop(reading);
}

/// On PostgreSQL every connection of the pool is held by a transaction that ends only after
/// the heartbeat: the heartbeat still extends the lease, on its connection of its own. Through
/// the pool it waited for a connection until the pool gave up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_lands_while_every_connection_of_the_pool_is_held() {
    if orchestrator_test_support::postgres_skipped() {
        return;
    }
    let url = orchestrator_test_support::fresh_postgres_url().await;
    let options = crate::StoreOptions {
        max_connections: 2,
        connect_timeout: std::time::Duration::from_secs(2),
        ..crate::StoreOptions::default()
    };
    let store = Store::open(&url, &options).await.unwrap();
    let (id, lease, claimed_until) = claimed(&store).await;

    let release = Arc::new(Semaphore::new(0));
    let (begun, mut begun_rx) = tokio::sync::mpsc::unbounded_channel();
    let holders: Vec<_> = (0..2)
        .map(|_| held_write(&store, id, &release, &begun))
        .collect();
    for _ in 0..2 {
        begun_rx.recv().await.unwrap();
    }
    let status = store.heartbeat(std::slice::from_ref(&lease), 600_000).await;
    release.add_permits(2);
    for holder in holders {
        holder.await.unwrap();
    }
    let status = status.expect("the heartbeat waited for the pool");
    assert!(status[0].held, "{status:?}");
    let task = store.get_task(id).await.unwrap();
    assert!(task.lease_expires_at.unwrap() > claimed_until);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_behind_a_long_write_extends_from_when_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(&dir.path().join("o.db"), &crate::StoreOptions::default())
        .await
        .unwrap();
    let id = store.create_task(&NewTask::new("kept")).await.unwrap();
    let (_, lease) = store.claim_task("keeper", id, 300).await.unwrap().unwrap();
    // Another writer of this process holds the write lock longer than the lease lasts.
    let holding = store.pool.begin().await.unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        holding.commit().await.unwrap();
    });
    let status = store
        .heartbeat(std::slice::from_ref(&lease), 300)
        .await
        .unwrap();
    release.await.unwrap();
    assert!(status[0].held);
    let task = store.get_task(id).await.unwrap();
    let expires = task.lease_expires_at.unwrap();
    assert!(
        expires > now_millis(),
        "the lease was extended to a moment already past ({} ms ago)",
        now_millis() - expires
    );
}

/// Whether another connection finds `id`'s row locked (`FOR UPDATE NOWAIT` refused).
async fn row_locked(other: &mut sqlx::PgConnection, id: TaskId) -> bool {
    sqlx::query("SELECT id FROM tasks WHERE id = $1 FOR UPDATE NOWAIT")
        .bind(id.0)
        .execute(&mut *other)
        .await
        .is_err()
}

/// A refused decision (the approval was decided already) and a refused retry (the task is
/// queued) end their transactions before they return. Dropped, a transaction is rolled back only
/// when the driver next uses its connection, and until then its lock on the task row made a claim
/// (`SKIP LOCKED`) pass over a queued task. On one runtime thread the check below runs before the
/// driver could do that.
#[tokio::test]
async fn a_refused_decision_or_retry_leaves_the_task_unlocked() {
    if orchestrator_test_support::postgres_skipped() {
        return;
    }
    use crate::{ApprovalDecision, NewApproval, approval_kind};
    use sqlx::Connection;
    let url = orchestrator_test_support::fresh_postgres_url().await;
    let store = Store::open(&url, &crate::StoreOptions::default())
        .await
        .unwrap();
    let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
    let id = store.create_task(&NewTask::new("asks")).await.unwrap();
    let (_, lease) = store.claim_task("w", id, 60_000).await.unwrap().unwrap();
    let approval = store
        .request_approval(
            &lease,
            &NewApproval {
                call_id: "c1".into(),
                kind: approval_kind::TOOL,
                tool: "exec_shell".into(),
                arguments: serde_json::json!({}),
                reason: "asked".into(),
                options: None,
                expires_at: now_millis() + 60_000,
            },
        )
        .await
        .unwrap();
    store
        .decide_approval(approval.id, &ApprovalDecision::Approve, "ann")
        .await
        .unwrap();
    assert!(!row_locked(&mut other, id).await);
    let refused = store
        .decide_approval(approval.id, &ApprovalDecision::Approve, "bob")
        .await;
    assert!(
        matches!(refused, Err(Error::ApprovalDecided { .. })),
        "{refused:?}"
    );
    assert!(
        !row_locked(&mut other, id).await,
        "the refused decision left the task row locked"
    );

    let queued = store.create_task(&NewTask::new("queued")).await.unwrap();
    let refused = store.retry_task(queued).await;
    assert!(
        matches!(refused, Err(Error::WrongState { .. })),
        "{refused:?}"
    );
    assert!(
        !row_locked(&mut other, queued).await,
        "the refused retry left the task row locked"
    );
    store.close().await;
}

/// SQLite's plan for a batch of ends: the batch's list leads and each of its rows finds its task
/// by id. Without the unary plus on the state's term (see `held_by`), SQLite walked the running
/// tasks through an index of the state (`tasks_by_state` then) and scanned the list for each, so
/// that ending a batch cost the batch's size times the running tasks: the queue ran at a third of
/// its rate, and every test still passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_ends_finds_its_tasks_by_id_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(&dir.path().join("o.db"), &crate::StoreOptions::default())
        .await
        .unwrap();
    let leases: Vec<Lease> = (1..=3)
        .map(|id| Lease {
            task_id: TaskId(id),
            epoch: 1,
        })
        .collect();
    let ends = successes_update(
        Backend::Sqlite,
        leases.iter(),
        1,
        crate::exec::sqlite_change_mark(),
    );
    let beats = {
        let mut stmt = Query::update()
            .table(Tasks::Table)
            .value(Tasks::LeaseExpiresAt, 2)
            .to_owned();
        held_by(&mut stmt, Backend::Sqlite, leases.iter());
        stmt
    };
    for (what, stmt) in [("the successes' update", ends), ("the heartbeat", beats)] {
        let steps = crate::sqlite_sql::query_plan(&store, &stmt).await;
        assert!(
            steps.first().is_some_and(|s| s.starts_with("SCAN batch")),
            "{what}: the list does not lead: {steps:?}"
        );
        assert!(
            steps
                .iter()
                .any(|s| s.starts_with("SEARCH tasks USING INTEGER PRIMARY KEY")),
            "{what}: the tasks are not found by id: {steps:?}"
        );
    }
    store.close().await;
}
