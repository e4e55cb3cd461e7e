//! A claim's `claimed` events are written by SQL: on SQLite by a trigger (migration 0017), on
//! PostgreSQL by the claim's own statement. This holds that text to the store's own JSON text, not
//! only the same JSON value, so that a reader comparing text (an export, a diff of two timelines)
//! sees no difference; the conformance suite holds the values alike on both backends.

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
