//! The order of changes the live lists follow: walked page by page from a position, each change
//! once, whatever time its writer stamped and however late it committed.

use super::*;
use orchestrator_store::{
    Backend, ChangeCursor, NewApproval, Task, approval_kind, approval_status,
};

/// A connection of its own to the store's database, for what no store API writes: a row stamped
/// by a clock that is ahead, a transaction held open.
pub(crate) enum Raw {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl Raw {
    pub(crate) async fn connect(db: &TestStore) -> Raw {
        use sqlx::Connection;
        match db.store.backend() {
            Backend::Sqlite => Raw::Sqlite(
                sqlx::SqliteConnection::connect_with(
                    &sqlx::sqlite::SqliteConnectOptions::new()
                        .filename(&db.url)
                        .busy_timeout(std::time::Duration::from_secs(60)),
                )
                .await
                .unwrap(),
            ),
            Backend::Postgres => Raw::Postgres(sqlx::PgConnection::connect(&db.url).await.unwrap()),
        }
    }

    pub(crate) async fn run(&mut self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self {
            Raw::Sqlite(c) => {
                sqlx::raw_sql(sql).execute(&mut *c).await.unwrap();
            }
            Raw::Postgres(c) => {
                sqlx::raw_sql(sql).execute(&mut *c).await.unwrap();
            }
        }
    }
}

/// Every task changed after `from`, walking pages of `page`; moves `from` past them. Checks that
/// each page is in order and after the position.
async fn walk(store: &Store, from: &mut ChangeCursor, page: u64) -> Vec<(ChangeCursor, Task)> {
    let mut seen = Vec::new();
    loop {
        let found = store.tasks_changed_after(*from, page).await.unwrap();
        assert!(found.len() as u64 <= page);
        for (at, task) in &found {
            assert!(*at > *from, "{at:?} is after {from:?}");
            assert_eq!(at.id, task.id.0);
            *from = *at;
        }
        let full = found.len() as u64 == page;
        seen.extend(found);
        if !full {
            return seen;
        }
    }
}

/// Walks until `n` tasks were found. On PostgreSQL a change is read once every transaction older
/// than it has ended, on the whole server: other tests' transactions may hold it back a moment.
async fn walk_until(store: &Store, from: &mut ChangeCursor, page: u64, n: usize) -> Vec<Task> {
    let mut seen = Vec::new();
    for _ in 0..3_000 {
        seen.extend(walk(store, from, page).await.into_iter().map(|(_, t)| t));
        if seen.len() >= n {
            return seen;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("only {} of {n} changes found: {seen:?}", seen.len());
}

fn ids_and_titles(tasks: &[Task]) -> Vec<(TaskId, &str)> {
    tasks.iter().map(|t| (t.id, t.title.as_str())).collect()
}

/// The approvals changed after `from`, once `n` are found (see [`walk_until`]).
async fn approvals_until(
    store: &Store,
    from: ChangeCursor,
    n: usize,
) -> Vec<(ChangeCursor, orchestrator_store::Approval)> {
    for _ in 0..3_000 {
        let found = store.approvals_changed_after(from, 10).await.unwrap();
        if found.len() >= n {
            return found;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("fewer than {n} approvals changed");
}

fn ask(call_id: &str) -> NewApproval {
    NewApproval {
        call_id: call_id.into(),
        kind: approval_kind::TOOL,
        tool: "exec_shell".into(),
        arguments: json!({"command": "make deploy"}),
        reason: "the policy asks".into(),
        options: None,
        expires_at: now_millis() + 3_600_000,
    }
}

/// What the live lists follow: tasks in the order their changes committed, a page at a time from
/// a position, each once, at its latest change; a heartbeat is no change.
pub async fn changed_tasks_are_walked_in_commit_order(db: &TestStore) {
    let store = db.store.clone();
    // A fresh store: from the beginning. (The horizon, "now", may be a little before now on
    // PostgreSQL, where another test's transaction holds it back.)
    let mut from = ChangeCursor::before(0);
    let start = from;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            store
                .create_task(&NewTask::new(format!("t{i}")))
                .await
                .unwrap(),
        );
    }
    let seen = walk_until(&store, &mut from, 2, 5).await;
    assert_eq!(
        seen.iter().map(|t| t.id).collect::<Vec<_>>(),
        ids,
        "every task once, in the order they committed"
    );
    assert!(walk(&store, &mut from, 2).await.is_empty());

    // A change made later comes after the position reached; a task changed twice is found once.
    store.cancel_task(ids[3]).await.unwrap();
    store.retry_task(ids[3]).await.unwrap();
    store.cancel_task(ids[1]).await.unwrap();
    let after = walk_until(&store, &mut from, 10, 2).await;
    assert_eq!(
        after.iter().map(|t| t.id).collect::<Vec<_>>(),
        [ids[3], ids[1]]
    );
    let mut again = start;
    let again = walk(&store, &mut again, 10).await;
    assert_eq!(
        again.iter().map(|(_, t)| t.id).collect::<Vec<_>>(),
        [ids[0], ids[2], ids[4], ids[3], ids[1]],
        "from the start, each at its latest change"
    );
    assert_eq!(again[4].1.state, TaskState::Canceled);

    // A heartbeat only moves the lease's expiry: not a change.
    let (_, lease) = store.claim_task("w", ids[0], LEASE).await.unwrap().unwrap();
    assert_eq!(
        walk_until(&store, &mut from, 10, 1).await.len(),
        1,
        "the claim"
    );
    store.heartbeat(&[lease], LEASE).await.unwrap();
    let marker = store.create_task(&NewTask::new("marker")).await.unwrap();
    assert_eq!(
        ids_and_titles(&walk_until(&store, &mut from, 10, 1).await),
        [(marker, "marker")],
        "the heartbeat before it is not a change"
    );

    // A client that last got a change reads all of it again.
    let last = again[4].0;
    let resumed = store
        .tasks_changed_after(ChangeCursor::before(last.change), 10)
        .await
        .unwrap();
    assert!(resumed.iter().any(|(at, _)| *at == last));
}

/// A batch of tasks created together is one change, walked in id order after what came before
/// and before what comes after, on either backend: on SQLite its insert carries the change number
/// (0021), small batches and single tasks take theirs from the insert trigger.
pub async fn a_batch_created_together_is_one_change(db: &TestStore) {
    let store = db.store.clone();
    let mut from = ChangeCursor::before(0);
    let before = store.create_task(&NewTask::new("before")).await.unwrap();
    let batch: Vec<NewTask> = (0..700).map(|i| NewTask::new(format!("b{i}"))).collect();
    let ids = store.create_tasks(&batch).await.unwrap();
    let small: Vec<NewTask> = (0..3).map(|i| NewTask::new(format!("s{i}"))).collect();
    let small = store.create_tasks(&small).await.unwrap();
    let after = store.create_task(&NewTask::new("after")).await.unwrap();

    let mut seen = Vec::new();
    for _ in 0..3_000 {
        seen.extend(walk(&store, &mut from, 256).await);
        if seen.len() >= 705 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let order: Vec<TaskId> = seen.iter().map(|(_, t)| t.id).collect();
    let expected: Vec<TaskId> = std::iter::once(before)
        .chain(ids.iter().copied())
        .chain(small.iter().copied())
        .chain([after])
        .collect();
    assert_eq!(order, expected, "each task once, in the order of changes");
    let changes: std::collections::BTreeSet<i64> =
        seen[1..701].iter().map(|(at, _)| at.change).collect();
    assert_eq!(
        changes.len(),
        1,
        "the batch of 700 is one change: {changes:?}"
    );
    let batch_change = seen[1].0.change;
    assert!(seen[0].0.change < batch_change);
    assert!(seen[701..].iter().all(|(at, _)| at.change > batch_change));
}

/// What the live inbox follows: approvals asked and decided, in the order they committed.
pub async fn changed_approvals_are_walked_in_commit_order(db: &TestStore) {
    let store = db.store.clone();
    let mut task = NewTask::agent("asks", "do it");
    task.workspace = Some("/tmp".into());
    store.create_task(&task).await.unwrap();
    let (_, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    let from = ChangeCursor::before(0);
    let asked = store.request_approval(&lease, &ask("c1")).await.unwrap();
    let found = approvals_until(&store, from, 1).await;
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].1.id, found[0].0.id), (asked.id, asked.id));
    assert_eq!(found[0].1.status, approval_status::PENDING);
    let from = found[0].0;
    assert!(
        store
            .approvals_changed_after(from, 10)
            .await
            .unwrap()
            .is_empty(),
        "nothing changed after it was asked"
    );
    store
        .decide_approval(
            asked.id,
            &orchestrator_store::ApprovalDecision::Approve,
            "ann",
        )
        .await
        .unwrap();
    let decided = approvals_until(&store, from, 1).await;
    assert_eq!(decided.len(), 1, "the decision is a change");
    assert_eq!(decided[0].1.status, approval_status::APPROVED);
    assert!(decided[0].0 > from);
}

/// The regression the update time had: a writer whose clock is 60 s ahead, and a transaction
/// that stamps its time and commits after others (held open on PostgreSQL; on SQLite, where one
/// writer writes at a time, written after them with a time 10 s earlier). Walking from a position
/// reached before, every change is found once it has committed, and on PostgreSQL nothing after
/// an open transaction is passed while it is open.
pub async fn a_change_is_found_whatever_its_time_and_however_late_it_commits(db: &TestStore) {
    let store = db.store.clone();
    let early = store.create_task(&NewTask::new("early")).await.unwrap();
    let skewed = store.create_task(&NewTask::new("skewed")).await.unwrap();
    let mut from = ChangeCursor::before(0);
    walk_until(&store, &mut from, 10, 2).await;

    // A writer whose clock is ahead.
    let mut raw = Raw::connect(db).await;
    raw.run(&format!(
        "UPDATE tasks SET title = 'ahead', event_seq = event_seq + 1, updated_at = {} \
         WHERE id = {}",
        now_millis() + 60_000,
        skewed.0
    ))
    .await;
    let after_skew = store
        .create_task(&NewTask::new("after skew"))
        .await
        .unwrap();
    assert_eq!(
        ids_and_titles(&walk_until(&store, &mut from, 1, 2).await),
        [(skewed, "ahead"), (after_skew, "after skew")]
    );

    // A transaction stamped 10 s before it commits, and others committing meanwhile.
    let late = format!(
        "BEGIN; UPDATE tasks SET title = 'late', event_seq = event_seq + 1, updated_at = {} \
         WHERE id = {}",
        now_millis() - 10_000,
        early.0
    );
    let held = store.backend() == Backend::Postgres;
    if held {
        raw.run(&late).await;
    }
    let meanwhile = store.create_task(&NewTask::new("meanwhile")).await.unwrap();
    if held {
        assert!(
            walk(&store, &mut from, 1).await.is_empty(),
            "a change after an open transaction waits for it"
        );
    } else {
        raw.run(&late).await;
    }
    raw.run("COMMIT").await;
    let rest = walk_until(&store, &mut from, 1, 2).await;
    let rest = ids_and_titles(&rest);
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert!(rest.contains(&(early, "late")), "{rest:?}");
    assert!(rest.contains(&(meanwhile, "meanwhile")), "{rest:?}");
    assert!(walk(&store, &mut from, 1).await.is_empty());
}

/// A transaction held open holds back the horizon of the order of changes (on PostgreSQL): what
/// commits meanwhile is read ahead of it, each change once per mark, the holder is named with its
/// server process, and once it ends the ordered walk finds everything. On SQLite there is no
/// horizon: nothing is ahead, and nothing holds anything back.
pub async fn changes_ahead_of_a_transaction_held_open_are_read_at_once(db: &TestStore) {
    let store = &db.store;
    let held = store.create_task(&NewTask::new("held")).await.unwrap();
    let mut from = store.change_horizon().await.unwrap();
    from = ChangeCursor {
        change: from.change,
        id: 0,
    };
    walk(store, &mut from, 10).await;
    let mut mark = orchestrator_store::AheadMark::default();
    store.tasks_changed_ahead(&mut mark).await.unwrap();
    if store.backend() == Backend::Sqlite {
        let a = store.create_task(&NewTask::new("a")).await.unwrap();
        assert!(
            store
                .tasks_changed_ahead(&mut mark)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(store.open_transactions(10).await.unwrap().is_empty());
        let found = walk(store, &mut from, 10).await;
        assert!(found.iter().any(|(_, t)| t.id == a));
        return;
    }

    let mut holder = Raw::connect(db).await;
    holder
        .run(&format!(
            "BEGIN; UPDATE tasks SET title = 'held open', event_seq = event_seq + 1 WHERE id = {}",
            held.0
        ))
        .await;
    let Raw::Postgres(conn) = &mut holder else {
        unreachable!()
    };
    let (pid,): (i32,) = sqlx::query_as("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await
        .unwrap();

    let a = store.create_task(&NewTask::new("a")).await.unwrap();
    let b = store.create_task(&NewTask::new("b")).await.unwrap();
    // (Another test's transaction on the server may let `held`'s creation through.)
    let walked = walk(store, &mut from, 10).await;
    assert!(
        !walked.iter().any(|(_, t)| t.id == a || t.id == b),
        "the ordered walk waits for the holder: {walked:?}"
    );
    let ahead = store.tasks_changed_ahead(&mut mark).await.unwrap();
    let ids: Vec<TaskId> = ahead.iter().map(|(_, t)| t.id).collect();
    assert!(ids.contains(&a) && ids.contains(&b), "{ids:?}");
    assert!(
        !ids.contains(&held),
        "the holder's own change is not committed"
    );
    assert!(
        store
            .tasks_changed_ahead(&mut mark)
            .await
            .unwrap()
            .is_empty(),
        "a change read ahead is not read again from the same mark"
    );
    store.cancel_task(a).await.unwrap();
    let again = store.tasks_changed_ahead(&mut mark).await.unwrap();
    assert_eq!(
        again
            .iter()
            .map(|(_, t)| (t.id, t.state))
            .collect::<Vec<_>>(),
        [(a, orchestrator_types::TaskState::Canceled)]
    );

    // Other tests share the server: the holder is among the open transactions, if not the oldest.
    assert!(store.oldest_open_transaction().await.unwrap().is_some());
    let open = store.open_transactions(1000).await.unwrap();
    let holder_seen = open
        .iter()
        .find(|t| t.pid == Some(pid))
        .unwrap_or_else(|| panic!("the holder {pid} is not among {open:?}"));
    assert_eq!(holder_seen.state, "idle in transaction");
    assert!(
        holder_seen.to_string().contains(&pid.to_string()),
        "{holder_seen}"
    );

    holder.run("COMMIT").await;
    // Final once every older transaction on the server has ended (other tests share it): a
    // minute's guard, not a measure of speed.
    let mut seen: Vec<(TaskId, String)> = Vec::new();
    let guard = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let all_there = |seen: &[(TaskId, String)]| {
        seen.iter()
            .any(|(id, title)| *id == held && title == "held open")
            && [a, b]
                .iter()
                .all(|want| seen.iter().any(|(id, _)| id == want))
    };
    while !all_there(&seen) {
        assert!(
            std::time::Instant::now() < guard,
            "not all walked: {seen:?}"
        );
        seen.extend(
            walk(store, &mut from, 10)
                .await
                .into_iter()
                .map(|(_, t)| (t.id, t.title)),
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
