//! Events written by SQL: a claim's `claimed` events, on SQLite by a trigger (migration 0017) and
//! on PostgreSQL by the claim's own statement; a task's `created` event, on SQLite by a trigger
//! (migration 0020). This holds that text to the store's own JSON text, not only the same JSON
//! value, so that a reader comparing text (an export, a diff of two timelines) sees no difference;
//! the conformance suite holds the values alike on both backends.

use crate::exec::Pool;
use crate::{Store, StoreOptions};
use orchestrator_types::{NewTask, TaskId};

async fn sqlite_store(dir: &tempfile::TempDir) -> Store {
    Store::open_sqlite(&dir.path().join("s.db"), &StoreOptions::default())
        .await
        .unwrap()
}

async fn event_text(store: &Store, id: TaskId, kind: &str) -> String {
    match &store.pool {
        Pool::Sqlite(pool, _) => {
            sqlx::query_scalar("SELECT data FROM task_events WHERE task_id = ? AND kind = ?")
                .bind(id.0)
                .bind(kind)
                .fetch_one(pool)
                .await
                .unwrap()
        }
        Pool::Postgres(pool) => {
            sqlx::query_scalar("SELECT data FROM task_events WHERE task_id = $1 AND kind = $2")
                .bind(id.0)
                .bind(kind)
                .fetch_one(pool)
                .await
                .unwrap()
        }
    }
}

/// Text that JSON must escape, and text it must not.
const AWKWARD: &str = "  a \"quoted\" \\ back\tslash\n, é, 日本, \u{1}\u{1f}\u{7f} end  ";

#[tokio::test]
async fn the_claimed_events_text_on_sqlite_is_what_the_store_writes_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(&dir).await;
    let id = store.create_task(&NewTask::new("t")).await.unwrap();
    let (task, _) = store
        .claim(AWKWARD, &["default".to_owned()], 1, 60_000)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(
        event_text(&store, id, "claimed").await,
        crate::leases::claimed_data(task.attempt, task.epoch, AWKWARD).to_string()
    );
}

#[tokio::test]
async fn the_claimed_events_text_on_postgresql_is_what_the_store_writes_elsewhere() {
    if orchestrator_test_support::postgres_skipped() {
        return;
    }
    let url = orchestrator_test_support::fresh_postgres_url().await;
    let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
    let id = store.create_task(&NewTask::new("t")).await.unwrap();
    let (task, _) = store
        .claim(AWKWARD, &["default".to_owned()], 1, 60_000)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(
        event_text(&store, id, "claimed").await,
        crate::leases::claimed_data(task.attempt, task.epoch, AWKWARD).to_string()
    );
    store.close().await;
}

/// The `created` event's text, for each shape of its data: a task a person made, one something
/// else made (`origin`, in words), and an automation's (its slot), with gates and without.
async fn created_events_text_is_the_stores_own(store: &Store) {
    use crate::tasks::TaskOrigin;
    let mut plain = NewTask::new(AWKWARD);
    plain.queue = "a \"queue\"".into();
    let mut made = NewTask::new("made");
    made.origin = Some(format!("trigger {AWKWARD}"));
    made.gates = vec![
        orchestrator_types::GateSpec::from_command("true"),
        orchestrator_types::GateSpec::from_command("false"),
    ];
    let mut expected = Vec::new();
    for task in [&plain, &made] {
        let id = store.create_task(task).await.unwrap();
        expected.push((id, crate::tasks::created_data(task, None).to_string()));
    }
    // A batch, as an import or a trigger's several tasks are made.
    let batch = store
        .create_tasks(&[made.clone(), plain.clone()])
        .await
        .unwrap();
    expected.push((
        batch[0],
        crate::tasks::created_data(&made, None).to_string(),
    ));
    expected.push((
        batch[1],
        crate::tasks::created_data(&plain, None).to_string(),
    ));

    let mut spec = orchestrator_types::AutomationSpec::new("nightly", "0 3 * * *");
    spec.workspaces.push("/tmp".into());
    spec.template
        .gates
        .push(orchestrator_types::GateSpec::from_command("true"));
    let next = crate::NextFire {
        slot_at: Some(10_000),
        fire_at: Some(10_000),
    };
    let automation = store
        .create_automation(&spec, crate::SOURCE_CLI, None, next)
        .await
        .unwrap();
    let fired = spec.task_for("/tmp", "x", None);
    let plan = crate::SlotPlan {
        automation_id: automation.id,
        slot_at: 10_000,
        kind: orchestrator_types::SlotKind::Scheduled,
        decision: crate::SlotDecision::Fire {
            overlap: orchestrator_types::Overlap::Allow,
            tasks: vec![fired.clone()],
        },
    };
    let results = store
        .fire_slots(&[plan], &[], "s1", orchestrator_types::now_millis())
        .await
        .unwrap();
    let crate::SlotResult::Fired { tasks } = &results[0] else {
        panic!("{results:?}")
    };
    let origin = TaskOrigin {
        automation_id: automation.id,
        slot_at: 10_000,
    };
    expected.push((
        tasks[0],
        crate::tasks::created_data(&fired, Some(origin)).to_string(),
    ));

    for (id, text) in expected {
        assert_eq!(event_text(store, id, "created").await, text, "task {id}");
    }
}

#[tokio::test]
async fn the_created_events_text_on_sqlite_is_what_the_store_writes_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(&dir).await;
    created_events_text_is_the_stores_own(&store).await;
}
