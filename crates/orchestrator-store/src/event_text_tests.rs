//! On SQLite a claim's `claimed` events are written by a trigger (migration 0017), on PostgreSQL by
//! the store. This holds SQLite's text to the store's own, not only the same JSON value, so that a
//! reader comparing text (an export, a diff of two timelines) sees no difference between the
//! backends; the conformance suite holds the values alike on both.

use crate::exec::Pool;
use crate::{Store, StoreOptions};
use orchestrator_types::{NewTask, TaskId};

async fn sqlite_store(dir: &tempfile::TempDir) -> Store {
    Store::open_sqlite(&dir.path().join("s.db"), &StoreOptions::default())
        .await
        .unwrap()
}

async fn event_text(store: &Store, id: TaskId, kind: &str) -> String {
    let Pool::Sqlite(pool, _) = &store.pool else {
        panic!("not SQLite")
    };
    sqlx::query_scalar("SELECT data FROM task_events WHERE task_id = ? AND kind = ?")
        .bind(id.0)
        .bind(kind)
        .fetch_one(pool)
        .await
        .unwrap()
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
