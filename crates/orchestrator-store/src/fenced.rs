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
//!      last AS (SELECT orchestrator_last_message_seq($1) AS n FROM fence),
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
//! read-only calls of one reply end together) is not in that snapshot. So the last message number
//! is not read by the statement itself but by `orchestrator_last_message_seq` (migration 0019), a
//! VOLATILE function, which PostgreSQL runs with a snapshot of its own, called from the fence's
//! row, so once the lock is granted. (Read with the statement's snapshot, the second call's number
//! was taken, the statement failed, and the write was made again as a transaction: about 2 ms per
//! extra call of such a reply in the agent benchmark.) The event's number comes from the fence's
//! own `RETURNING`, which PostgreSQL evaluates on the row as it is once the lock is granted.
//!
//! A message written without the task row's lock, which nothing in the store does, can still take
//! the number: the insert then fails on `task_messages_pkey`, [`Written::Collided`] says so, and the
//! caller writes in a transaction instead.

use crate::conversation::{MESSAGE_COLUMNS, NewMessage, TaskMessages, message_row};
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
    /// A write of the same task that did not lock its row took the message number (see the
    /// module's header): nothing was written, and a transaction must write it.
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
/// and one event, in a commit that waits for the server's sync like every other (a crash of the
/// server alone can lose an unsynced commit while the attempt runs on; see
/// `Store::append_reply`). PostgreSQL only: SQLite allows no write inside a WITH clause.
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

/// `SELECT orchestrator_last_message_seq(task) AS n FROM fence`: the task's last message number,
/// read once the fence holds the task row's lock, with a snapshot of its own (a VOLATILE function
/// takes one per query; migration 0019), so a write of the task that committed while this one
/// waited for the lock is seen.
fn last_seq_after_fence(task: i64) -> SelectStatement {
    Query::select()
        .expr_as(
            sea_query::Func::cust(Alias::new("orchestrator_last_message_seq")).arg(task),
            Alias::new("n"),
        )
        .from(Alias::new(FENCE))
        .to_owned()
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
                .query(last_seq_after_fence(task))
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
    let result = Query::select()
        .column(crate::tasks::Tasks::EventSeq)
        .from(Alias::new(FENCE))
        .to_owned();
    Ok(with.query(result))
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::{Store, StoreOptions};
    use orchestrator_types::{ChatMessage, NewTask, TaskId};
    use sqlx::{Connection, PgConnection};
    use std::time::{Duration, Instant};

    fn message(turn: i64, text: &str) -> NewMessage {
        NewMessage {
            turn,
            message: ChatMessage::assistant(text),
            usage: None,
            model_ms: None,
        }
    }

    fn json() -> serde_json::Value {
        serde_json::json!({"role": "assistant"})
    }

    /// A store on a fresh database with a claimed task whose first message is written.
    async fn task_with_a_message() -> (String, Store, TaskId, Lease) {
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
        (url, store, id, lease)
    }

    /// Another writer's open transaction, holding message number 2 of task `id` and, when
    /// `locks_task`, the task row's lock as the store's writers do.
    async fn other_writer(url: &str, id: TaskId, locks_task: bool) -> PgConnection {
        let mut other = PgConnection::connect(url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut other).await.unwrap();
        if locks_task {
            sqlx::query("UPDATE tasks SET updated_at = updated_at WHERE id = $1")
                .bind(id.0)
                .execute(&mut other)
                .await
                .unwrap();
        }
        sqlx::query(
            "INSERT INTO task_messages (task_id, seq, turn, role, message, attempt, created_at) \
             VALUES ($1, 2, 2, 'user', '{\"role\":\"user\",\"content\":\"other\"}', 1, 0)",
        )
        .bind(id.0)
        .execute(&mut other)
        .await
        .unwrap();
        other
    }

    /// Returns once a statement of `kind` (the start of its text) waits for a lock in this test's
    /// database. Watched from a connection outside any transaction: inside one, PostgreSQL keeps
    /// the first read of pg_stat_activity for the rest of the transaction.
    async fn until_waiting(url: &str, kind: &str) {
        let mut watcher = PgConnection::connect(url).await.unwrap();
        let started = Instant::now();
        loop {
            let (waiting,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND starts_with(query, $1)",
            )
            .bind(kind)
            .fetch_one(&mut watcher)
            .await
            .unwrap();
            // Only this test uses its database; other tests' statements wait in theirs.
            if waiting > 0 {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no {kind} statement ever waited for a lock"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn texts(store: &Store, id: TaskId) -> Vec<(i64, Option<String>)> {
        store
            .messages(id)
            .await
            .unwrap()
            .into_iter()
            .map(|m| (m.seq, m.message.content))
            .collect()
    }

    fn three() -> Vec<(i64, Option<String>)> {
        vec![
            (1, Some("first".into())),
            (2, Some("other".into())),
            (3, Some("mine".into())),
        ]
    }

    /// A write of the same task commits while the statement waits for the task row's lock (the
    /// read-only calls of one reply end together): the statement reads the last message number
    /// once it holds the lock, so it numbers its message after that write's, in one statement.
    /// Read with the statement's own snapshot, the number was taken and the write collided.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_waiting_for_the_task_numbers_its_message_after_the_one_before() {
        if orchestrator_test_support::postgres_skipped() {
            return;
        }
        let (url, store, id, lease) = task_with_a_message().await;
        let mut other = other_writer(&url, id, true).await;
        let pool = store.pool.clone();
        let write = tokio::spawn(async move {
            write(
                &pool,
                &lease,
                orchestrator_types::now_millis(),
                1,
                &[message(3, "mine")],
                Vec::new(),
                EventKind::Message,
                &json(),
            )
            .await
        });
        // Once the statement waits for the lock, its snapshot is taken without the other's row.
        until_waiting(&url, "WITH \"fence\"").await;
        sqlx::query("COMMIT").execute(&mut other).await.unwrap();
        let written = write.await.unwrap().unwrap();
        assert!(
            matches!(written, Written::Event(_)),
            "written in one statement, not {written:?}"
        );
        assert_eq!(texts(&store, id).await, three());
        let events = store.events(id, 0, 100).await.unwrap();
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
        assert_eq!(events.iter().filter(|e| e.kind == "message").count(), 2);
        store.close().await;
    }

    /// A message written without the task row's lock (nothing in the store does that) and
    /// committed after the statement read the last number: the statement collides with it, and
    /// the write is made in a transaction after it, whole and numbered after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_that_loses_its_message_number_to_another_is_made_after_it() {
        if orchestrator_test_support::postgres_skipped() {
            return;
        }
        let (url, store, id, lease) = task_with_a_message().await;
        let mut other = other_writer(&url, id, false).await;
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
        // The statement's insert of number 2 waits for the other's uncommitted one.
        until_waiting(&url, "WITH \"fence\"").await;
        sqlx::query("COMMIT").execute(&mut other).await.unwrap();
        write.await.unwrap().expect("written after the other");
        assert_eq!(texts(&store, id).await, three());
        let events = store.events(id, 0, 100).await.unwrap();
        assert_eq!(events.iter().filter(|e| e.kind == "message").count(), 2);
        store.close().await;
    }

    /// The connection's `synchronous_commit`, inside a transaction or out of one.
    pub(crate) async fn show_sync(conn: &mut PgConnection) -> String {
        let (setting,): (String,) = sqlx::query_as("SHOW synchronous_commit")
            .fetch_one(conn)
            .await
            .unwrap();
        setting
    }

    /// Records the `synchronous_commit` each commit that writes a task event runs with, read at
    /// the commit itself: a deferred trigger fires as the transaction commits, after every
    /// statement of it, so it sees a setting any of them made for the transaction.
    async fn record_commit_settings(url: &str) {
        let mut conn = PgConnection::connect(url).await.unwrap();
        for ddl in [
            "CREATE TABLE commit_settings (kind text NOT NULL, setting text NOT NULL)",
            "CREATE FUNCTION record_commit_setting() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN INSERT INTO commit_settings \
             VALUES (NEW.kind, current_setting('synchronous_commit')); RETURN NULL; END $$",
            "CREATE CONSTRAINT TRIGGER record_commit_setting AFTER INSERT ON task_events \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION record_commit_setting()",
        ] {
            sqlx::query(ddl).execute(&mut conn).await.unwrap();
        }
    }

    /// The commits' settings recorded so far, by the kind of event each wrote, in order.
    async fn commit_settings(url: &str) -> Vec<(String, String)> {
        let mut conn = PgConnection::connect(url).await.unwrap();
        sqlx::query_as("SELECT kind, setting FROM commit_settings ORDER BY ctid")
            .fetch_all(&mut conn)
            .await
            .unwrap()
    }

    /// Every write of an attempt on PostgreSQL waits for the server's sync of its commit, a
    /// model's reply too: a crash of the server alone can lose an unsynced commit while the
    /// attempt runs on, and its calls' ends, synced, would then be saved after a conversation that
    /// lacks the reply that asked for them (as a lost claim would give two workers one epoch).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_write_of_an_attempt_on_postgresql_waits_for_its_sync() {
        if orchestrator_test_support::postgres_skipped() {
            return;
        }
        let url = orchestrator_test_support::fresh_postgres_url().await;
        let mut conn = PgConnection::connect(&url).await.unwrap();
        let server = show_sync(&mut conn).await;
        assert_ne!(
            server, "off",
            "the test needs a server that syncs its commits"
        );
        let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
        record_commit_settings(&url).await;
        let id = store.create_task(&NewTask::new("talks")).await.unwrap();
        let (_, lease) = store.claim_task("w", id, 600_000).await.unwrap().unwrap();
        store
            .append_reply(
                &lease,
                1,
                &[message(1, "reply")],
                (EventKind::Message, json()),
            )
            .await
            .unwrap();
        store
            .append_messages(
                &lease,
                1,
                &[message(1, "result")],
                (EventKind::Message, json()),
            )
            .await
            .unwrap();
        store
            .append_event(&lease, EventKind::Note, json())
            .await
            .unwrap();
        let done = store
            .complete(&[crate::Completion {
                lease,
                outcome: crate::Outcome::Succeeded,
                details: serde_json::Value::Null,
            }])
            .await
            .unwrap();
        assert_eq!(done, [crate::CompletionResult::Applied]);

        let recorded = commit_settings(&url).await;
        let kinds: Vec<&str> = recorded.iter().map(|(kind, _)| kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "created",
                "claimed",
                "message",
                "message",
                "note",
                "succeeded"
            ],
            "each write's event is recorded at its commit"
        );
        for (kind, setting) in &recorded {
            assert_eq!(setting, &server, "the commit that wrote {kind}");
        }
        assert_eq!(
            texts(&store, id).await,
            [(1, Some("reply".into())), (2, Some("result".into()))]
        );
        store.close().await;
    }
}
