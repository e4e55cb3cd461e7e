//! A fenced write of an attempt in one statement, on PostgreSQL.
//!
//! A write made on behalf of an attempt (an agent's reply, a tool call's end, a progress event) is
//! fenced by its lease: it bumps the task's event counter where the task still runs at the lease's
//! epoch, and writes nothing otherwise. As a transaction that is BEGIN, the fence, a read of the
//! last message number, the inserts, COMMIT: six or seven round trips to the server, twice per
//! agent turn, and a round trip to a local server costs 0.1 to 0.2 ms on a loaded two-core machine.
//! PostgreSQL runs data-modifying statements in a WITH clause, so the whole write is one statement,
//! a transaction of its own:
//!
//! ```sql
//! WITH fence AS (UPDATE tasks SET event_seq = event_seq + 1 ... RETURNING event_seq),
//!      last AS (SELECT COALESCE(MAX(seq), 0) AS n FROM task_messages WHERE task_id = $1),
//!      m0 AS (INSERT INTO task_messages (...) SELECT $1, last.n + 1, ... FROM fence, last),
//!      e AS (INSERT INTO task_events (...) SELECT $1, fence.event_seq, ... FROM fence)
//! SELECT event_seq FROM fence
//! ```
//!
//! Every write selects from `fence` (or, for an update, requires a row in it), so a stale lease
//! writes nothing and the statement returns no row.
//!
//! One difference from the transaction: the whole statement reads with the snapshot it started
//! with. A write of the same task that commits while this one waits for the task row's lock (the
//! read-only calls of one reply end together) is not seen by `last`, and the message insert then
//! collides with its number: a unique violation of `task_messages_pkey`, which rolls the whole
//! statement back. [`Written::Collided`] says so, and the caller writes in a transaction instead,
//! whose read of the last number comes after the lock. The event's number comes from the fence's
//! own `RETURNING`, which PostgreSQL evaluates on the row as it is once the lock is granted.

use crate::conversation::{MESSAGE_COLUMNS, NewMessage, TaskMessages, last_seq_of, message_row};
use crate::events::{EVENT_COLUMNS, TaskEvents};
use crate::exec::Pool;
use crate::leases::{Lease, fence_statement};
use crate::{Error, Result};
use orchestrator_types::EventKind;
use sea_query::{
    Alias, CommonTableExpression, Expr, ExprTrait, Query, SelectStatement, SubQueryStatement,
    WithClause,
};

/// The name the fence's result goes by inside the statement.
pub(crate) const FENCE: &str = "fence";
/// The name of the last message number before the write.
const LAST: &str = "last";

/// What a one-statement write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// Written whole; the event's number.
    Event(i64),
    /// The lease no longer holds the running task: nothing was written.
    Stale,
    /// A concurrent write of the same task took the message number (see the module's header):
    /// nothing was written, and a transaction must write it.
    Collided,
}

/// Whether the write must be made again in a transaction: `false` once written, `StaleLease`
/// when the lease no longer holds.
pub(crate) fn collided(written: Written, lease: &Lease) -> Result<bool> {
    match written {
        Written::Event(_) => Ok(false),
        Written::Collided => Ok(true),
        Written::Stale => Err(Error::StaleLease {
            task: lease.task_id,
            epoch: lease.epoch,
        }),
    }
}

/// `SELECT 1 FROM fence`: for an update that must change nothing unless the fence held
/// (`EXISTS (...)`).
pub(crate) fn fence_held() -> SelectStatement {
    Query::select()
        .expr(Expr::val(1))
        .from(Alias::new(FENCE))
        .to_owned()
}

/// `SELECT <values> FROM fence`: the source of an insert that must insert nothing unless the fence
/// held.
pub(crate) fn from_fence(values: Vec<Expr>) -> SelectStatement {
    Query::select()
        .exprs(values)
        .from(Alias::new(FENCE))
        .to_owned()
}

/// One fenced write: `messages` of `attempt` (numbered after the task's last), the writes of
/// `also` (each conditioned on the fence by its builder, with [`fence_held`] or [`from_fence`]),
/// and one event. PostgreSQL only: SQLite allows no write inside a WITH clause.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn write(
    pool: &Pool,
    lease: &Lease,
    now: i64,
    attempt: i64,
    messages: &[NewMessage],
    also: Vec<SubQueryStatement>,
    kind: EventKind,
    data: &serde_json::Value,
) -> Result<Written> {
    let statement = statement(lease, now, attempt, messages, also, kind, data)?;
    match pool.fetch_optional::<(i64,), _>(&statement).await {
        Ok(Some((seq,))) => Ok(Written::Event(seq)),
        Ok(None) => Ok(Written::Stale),
        Err(Error::Database(sqlx::Error::Database(e)))
            if e.is_unique_violation() && e.constraint() == Some("task_messages_pkey") =>
        {
            Ok(Written::Collided)
        }
        Err(e) => Err(e),
    }
}

#[allow(clippy::too_many_arguments)]
fn statement(
    lease: &Lease,
    now: i64,
    attempt: i64,
    messages: &[NewMessage],
    also: Vec<SubQueryStatement>,
    kind: EventKind,
    data: &serde_json::Value,
) -> Result<sea_query::WithQuery> {
    let task = lease.task_id.0;
    let mut with = WithClause::new();
    with.cte(
        CommonTableExpression::new()
            .query(fence_statement(lease, now))
            .table_name(Alias::new(FENCE))
            .to_owned(),
    );
    if !messages.is_empty() {
        with.cte(
            CommonTableExpression::new()
                .query(last_seq_of(task))
                .table_name(Alias::new(LAST))
                .to_owned(),
        );
    }
    for (i, message) in messages.iter().enumerate() {
        let seq = Expr::col((Alias::new(LAST), Alias::new("n"))).add(1 + i as i64);
        let source = from_fence(message_row(task, seq, attempt, message, now)?)
            .from(Alias::new(LAST))
            .to_owned();
        let insert = Query::insert()
            .into_table(TaskMessages::Table)
            .columns(MESSAGE_COLUMNS)
            .select_from(source)?
            .to_owned();
        with.cte(
            CommonTableExpression::new()
                .query(insert)
                .table_name(Alias::new(format!("m{i}")))
                .to_owned(),
        );
    }
    for (i, write) in also.into_iter().enumerate() {
        with.cte(
            CommonTableExpression::new()
                .query(write)
                .table_name(Alias::new(format!("w{i}")))
                .to_owned(),
        );
    }
    let event = Query::insert()
        .into_table(TaskEvents::Table)
        .columns(EVENT_COLUMNS)
        .select_from(from_fence(vec![
            Expr::val(task),
            Expr::col((Alias::new(FENCE), crate::tasks::Tasks::EventSeq)),
            Expr::val(now),
            Expr::val(kind.as_str()),
            Expr::val(data.to_string()),
        ]))?
        .to_owned();
    with.cte(
        CommonTableExpression::new()
            .query(event)
            .table_name(Alias::new("e"))
            .to_owned(),
    );
    Ok(with.query(
        Query::select()
            .column(crate::tasks::Tasks::EventSeq)
            .from(Alias::new(FENCE))
            .to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::{Store, StoreOptions};
    use orchestrator_types::{ChatMessage, NewTask};
    use sqlx::Connection;
    use std::time::{Duration, Instant};

    fn message(turn: i64, text: &str) -> NewMessage {
        NewMessage {
            turn,
            message: ChatMessage::assistant(text),
            usage: None,
            model_ms: None,
        }
    }

    /// A write of the same task commits while the statement waits for the task row's lock: the
    /// statement's snapshot misses that write's message, collides with its number, and the write
    /// is made in a transaction after it, whole and numbered after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_that_loses_its_message_number_to_another_is_made_after_it() {
        if orchestrator_test_support::postgres_skipped() {
            return;
        }
        let url = orchestrator_test_support::fresh_postgres_url().await;
        let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
        let id = store.create_task(&NewTask::new("talks")).await.unwrap();
        let (_, lease) = store.claim_task("w", id, 600_000).await.unwrap().unwrap();
        store
            .append_messages(
                &lease,
                1,
                &[message(1, "first")],
                (EventKind::Message, json()),
            )
            .await
            .unwrap();

        // Another writer of the task takes its row's lock and the next message number.
        let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut other).await.unwrap();
        sqlx::query("UPDATE tasks SET updated_at = updated_at WHERE id = $1")
            .bind(id.0)
            .execute(&mut other)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO task_messages (task_id, seq, turn, role, message, attempt, created_at) \
             VALUES ($1, 2, 2, 'user', '{\"role\":\"user\",\"content\":\"other\"}', 1, 0)",
        )
        .bind(id.0)
        .execute(&mut other)
        .await
        .unwrap();
        let writer = store.clone();
        let write = tokio::spawn(async move {
            writer
                .append_messages(
                    &lease,
                    1,
                    &[message(3, "mine")],
                    (EventKind::Message, json()),
                )
                .await
        });
        // Once the statement waits for the lock, its snapshot is taken without the other's row.
        // Watched from a connection outside any transaction: inside one, PostgreSQL keeps the
        // first read of pg_stat_activity for the rest of the transaction.
        let mut watcher = sqlx::PgConnection::connect(&url).await.unwrap();
        let started = Instant::now();
        loop {
            let (waiting,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND query LIKE 'WITH \"fence\"%'",
            )
            .fetch_one(&mut watcher)
            .await
            .unwrap();
            // Only this test uses its database; other tests' statements wait in theirs.
            if waiting > 0 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the one-statement write never waited for the task's lock"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sqlx::query("COMMIT").execute(&mut other).await.unwrap();
        write.await.unwrap().expect("written after the other");

        let texts: Vec<(i64, Option<String>)> = store
            .messages(id)
            .await
            .unwrap()
            .into_iter()
            .map(|m| (m.seq, m.message.content))
            .collect();
        assert_eq!(
            texts,
            [
                (1, Some("first".into())),
                (2, Some("other".into())),
                (3, Some("mine".into()))
            ]
        );
        let events = store.events(id, 0, 100).await.unwrap();
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
        assert_eq!(events.iter().filter(|e| e.kind == "message").count(), 2);
        store.close().await;
    }

    fn json() -> serde_json::Value {
        serde_json::json!({"role": "assistant"})
    }
}
