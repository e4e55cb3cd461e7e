//! The queue's hot path on PostgreSQL: a batch of successes ended in one statement.
//!
//! The completer ends attempts in batches (group commit). As a transaction, a batch was BEGIN, the
//! tasks' UPDATE, the approvals' close, the events' INSERT and COMMIT: five round trips to the
//! server, one after the other, while the claimer waited for the slots they free. PostgreSQL runs
//! data-modifying statements in a WITH clause, so a batch of successes alone is one statement, a
//! transaction of its own, as the claim is (`claim_with_events`):
//!
//! ```sql
//! WITH done AS (UPDATE tasks SET state = CASE WHEN cancel_requested ... END, ...
//!               FROM (SELECT ... FROM jsonb_array_elements($leases)) AS leases
//!               WHERE tasks.id = leases.held_id AND tasks.epoch = leases.held_epoch
//!                 AND state = 'running'
//!               RETURNING id, epoch, event_seq, state),
//!      closed AS (UPDATE approvals SET status = 'canceled', ...
//!                 WHERE task_id IN (SELECT id FROM done) AND status = 'pending'),
//!      events AS (INSERT INTO task_events (...)
//!                 SELECT done.id, done.event_seq, $now, CASE WHEN done.state = 'canceled' ...,
//!                        details.data
//!                 FROM done, (SELECT ... FROM jsonb_array_elements($details)) AS details
//!                 WHERE details.id = done.id)
//! SELECT id, event_seq, state FROM done
//! ```
//!
//! The leases and the details are each bound as one JSON list (batch_rows.rs), so the statement's
//! text is the same for a batch of any size. A stale lease matches no row of `done`, so nothing is
//! written for it. Any other batch (a failure, a requeue, a wait, one task twice, SQLite) is the
//! transaction of `Store::complete`.

use super::{Completion, CompletionResult, Outcome, SUCCESS_CHUNK, successes_update};
use crate::Backend;
use crate::approvals::{Approvals, close_pending_where};
use crate::batch_rows::{Column, json_rows};
use crate::events::{EVENT_COLUMNS, TaskEvents};
use crate::exec::{Pool, postgres_change_mark};
use crate::tasks::Tasks;
use crate::{Result, Store};
use orchestrator_types::{EventKind, TaskState};
use sea_query::{Alias, CommonTableExpression, Expr, ExprTrait, Query, WithClause, WithQuery};
use serde_json::json;
use std::collections::HashMap;

/// The name of the ended tasks inside the statement.
const DONE: &str = "done";
/// The name of the completions' details inside the statement.
const DETAILS: &str = "details";

impl Store {
    /// Ends `completions` in one statement where they are a batch of successes of distinct tasks
    /// on PostgreSQL (see the module's header); `None` otherwise, writing nothing.
    pub(super) async fn complete_successes(
        &self,
        completions: &[Completion],
        now: i64,
    ) -> Result<Option<Vec<CompletionResult>>> {
        if !matches!(self.pool, Pool::Postgres(_))
            || completions.len() > SUCCESS_CHUNK
            || completions.iter().any(|c| c.outcome != Outcome::Succeeded)
        {
            return Ok(None);
        }
        let index: HashMap<i64, usize> = completions
            .iter()
            .enumerate()
            .map(|(i, c)| (c.lease.task_id.0, i))
            .collect();
        if index.len() < completions.len() {
            // One task twice (an old attempt and the new one): the transaction tells them apart.
            return Ok(None);
        }
        let rows: Vec<(i64, i64, String)> = self
            .pool
            .fetch_all(&successes_with_events(completions, now)?)
            .await?;
        let mut results = vec![CompletionResult::Stale; completions.len()];
        for (id, _, _) in rows {
            if let Some(&i) = index.get(&id) {
                results[i] = CompletionResult::Applied;
            }
        }
        Ok(Some(results))
    }
}

/// The statement of the module's header.
fn successes_with_events(completions: &[Completion], now: i64) -> Result<WithQuery> {
    let done = Alias::new(DONE);
    let details = Alias::new(DETAILS);
    let update = successes_update(
        Backend::Postgres,
        completions.iter().map(|c| &c.lease),
        now,
        postgres_change_mark(),
    );
    let ended = Query::select()
        .column(Tasks::Id)
        .from(done.clone())
        .to_owned();
    let closed = close_pending_where(Expr::col(Approvals::TaskId).in_subquery(ended), now);
    let kind = Expr::case(
        Expr::col((done.clone(), Tasks::State)).eq(TaskState::Canceled.as_str()),
        EventKind::Canceled.as_str(),
    )
    .finally(EventKind::Succeeded.as_str());
    let source = Query::select()
        .column((done.clone(), Tasks::Id))
        .column((done.clone(), Tasks::EventSeq))
        .expr(Expr::val(now))
        .expr(kind)
        .expr(Expr::col((details.clone(), Alias::new("data"))))
        .from(done.clone())
        .from_subquery(
            json_rows(
                Backend::Postgres,
                &[Column::Int("id"), Column::Text("data")],
                completions
                    .iter()
                    .map(|c| json!([c.lease.task_id.0, c.details.to_string()]))
                    .collect(),
            ),
            details.clone(),
        )
        .and_where(Expr::col((details.clone(), Alias::new("id"))).equals((done.clone(), Tasks::Id)))
        .to_owned();
    let events = Query::insert()
        .into_table(TaskEvents::Table)
        .columns(EVENT_COLUMNS)
        .select_from(source)?
        .to_owned();
    let mut with = WithClause::new();
    for (name, query) in [
        (DONE, update.into()),
        ("closed", closed.into()),
        ("events", events.into()),
    ] {
        with.cte(
            CommonTableExpression::new()
                .query::<sea_query::SubQueryStatement>(query)
                .table_name(Alias::new(name))
                .to_owned(),
        );
    }
    Ok(with.query(
        Query::select()
            .columns([Tasks::Id, Tasks::EventSeq, Tasks::State])
            .from(done)
            .to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::StoreOptions;
    use crate::leases::Lease;
    use orchestrator_types::NewTask;
    use sqlx::{Connection, PgConnection};

    /// Records, for every row that the tasks' and approvals' updates and the events' inserts
    /// write, the table and the time its statement started: rows written by one statement share
    /// that time, and the statements of a transaction each have their own.
    async fn record_statements(url: &str) -> PgConnection {
        let mut conn = PgConnection::connect(url).await.unwrap();
        sqlx::raw_sql(
            "CREATE TABLE written (tbl text NOT NULL, stmt timestamptz NOT NULL);
             CREATE FUNCTION record_written() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO written VALUES (TG_TABLE_NAME, statement_timestamp());
             RETURN NULL; END $$;
             CREATE TRIGGER record_written AFTER UPDATE ON tasks
                 FOR EACH ROW EXECUTE FUNCTION record_written();
             CREATE TRIGGER record_written AFTER UPDATE ON approvals
                 FOR EACH ROW EXECUTE FUNCTION record_written();
             CREATE TRIGGER record_written AFTER INSERT ON task_events
                 FOR EACH ROW EXECUTE FUNCTION record_written();",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        conn
    }

    /// On PostgreSQL a batch of successes is ended by one statement: the tasks' rows, the pending
    /// approval's close and the events are written at one statement's start time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_of_successes_on_postgresql_is_one_statement() {
        if orchestrator_test_support::postgres_skipped() {
            return;
        }
        let url = orchestrator_test_support::fresh_postgres_url().await;
        let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
        let tasks: Vec<NewTask> = (0..3).map(|i| NewTask::new(format!("t{i}"))).collect();
        store.create_tasks(&tasks).await.unwrap();
        let claimed = store
            .claim("w", &["default".to_owned()], 3, 60_000)
            .await
            .unwrap();
        let leases: Vec<Lease> = claimed.into_iter().map(|(_, lease)| lease).collect();
        let ask = crate::NewApproval {
            call_id: "c1".into(),
            kind: crate::approval_kind::TOOL,
            tool: "exec_shell".into(),
            arguments: serde_json::json!({"command": "true"}),
            reason: "asked".into(),
            options: None,
            expires_at: orchestrator_types::now_millis() + 60_000,
        };
        store.request_approval(&leases[0], &ask).await.unwrap();
        let mut conn = record_statements(&url).await;

        let completions: Vec<Completion> = leases
            .into_iter()
            .map(|lease| Completion {
                lease,
                outcome: Outcome::Succeeded,
                details: serde_json::json!({}),
            })
            .collect();
        let results = store.complete(&completions).await.unwrap();
        assert_eq!(results, [CompletionResult::Applied; 3]);

        let written: Vec<(String, i64)> =
            sqlx::query_as("SELECT tbl, count(*) FROM written GROUP BY tbl ORDER BY tbl")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        assert_eq!(
            written,
            [
                ("approvals".to_owned(), 1),
                ("task_events".to_owned(), 3),
                ("tasks".to_owned(), 3)
            ]
        );
        let (statements,): (i64,) = sqlx::query_as("SELECT count(DISTINCT stmt) FROM written")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(statements, 1, "the batch was written by one statement");
        store.close().await;
    }
}
