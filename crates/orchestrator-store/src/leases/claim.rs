//! Claims: the batched claim of queued tasks by a worker (by queue and by what it offers), the
//! claim of one task by id, and the foreground claim of `orchestrator run`, which creates its task
//! and claims it in one transaction. A claim is one statement on either backend (see
//! `claim_where`); the leases it grants are kept, ended and rescued in leases.rs.

use super::Lease;
use crate::events::{EVENT_COLUMNS, EventInsert, TaskEvents, insert_events};
use crate::exec::{Pool, Tx, postgres_change_mark, sqlite_change_mark};
use crate::tasks::{COLUMNS, Task, TaskRow, Tasks, state_is};
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{EventKind, NewTask, TaskId, TaskState, now_millis};
use sea_query::{Expr, ExprTrait, Order, Query};
use serde_json::json;

/// True for a task without requirements, or whose every requirement is among `offers`: each
/// offered `,word,` is removed from the stored `,a,b,` form, and what is left is `,` exactly when
/// nothing was missing. `replace` reads the same on SQLite and PostgreSQL. A task without
/// requirements (NULL) is decided by the first test alone.
pub(crate) fn requirements_met(offers: &[String]) -> Expr {
    if offers.is_empty() {
        return Expr::col(Tasks::Requires).is_null();
    }
    let mut left = Expr::col(Tasks::Requires);
    for offer in offers {
        let word = format!(",{},", orchestrator_types::placement::escape_word(offer));
        left = sea_query::Func::cust(sea_query::Alias::new("replace"))
            .arg(left)
            .arg(word)
            .arg(",")
            .into();
    }
    Expr::col(Tasks::Requires).is_null().or(left.eq(","))
}

impl Store {
    /// Claims up to `limit` queued tasks of `queues` whose `run_after` has passed, highest priority
    /// first and keys in turn within a priority (see tasks/fair.rs), for `owner` under a lease of `lease_ms`. Each claimed task gets a new epoch, its attempt
    /// counter bumped and a `claimed` event, all in one transaction. On PostgreSQL, `SKIP LOCKED` lets
    /// several processes claim side by side without waiting for each other or taking the same row.
    pub fn claim<'a>(
        &'a self,
        owner: &'a str,
        queues: &'a [String],
        limit: u64,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<Vec<(Task, Lease)>>> {
        Box::pin(self.claim_unboxed(owner, queues, limit, lease_ms))
    }

    async fn claim_unboxed(
        &self,
        owner: &str,
        queues: &[String],
        limit: u64,
        lease_ms: i64,
    ) -> Result<Vec<(Task, Lease)>> {
        self.claim_offering(owner, queues, &[], limit, lease_ms)
            .await
    }

    /// [`Store::claim`] by a worker that offers `offers` (its labels, host and shared directories,
    /// see `orchestrator_types::placement`): it takes tasks without requirements and those whose
    /// every requirement it offers, and leaves the rest for a worker that can run them.
    pub fn claim_offering<'a>(
        &'a self,
        owner: &'a str,
        queues: &'a [String],
        offers: &'a [String],
        limit: u64,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<Vec<(Task, Lease)>>> {
        Box::pin(self.claim_offering_unboxed(owner, queues, offers, limit, lease_ms))
    }

    async fn claim_offering_unboxed(
        &self,
        owner: &str,
        queues: &[String],
        offers: &[String],
        limit: u64,
        lease_ms: i64,
    ) -> Result<Vec<(Task, Lease)>> {
        if limit == 0 || queues.is_empty() {
            return Ok(Vec::new());
        }
        self.claim_where(owner, lease_ms, |now| {
            let mut candidates = Query::select()
                .column(Tasks::Id)
                .from(Tasks::Table)
                .and_where(state_is(TaskState::Queued))
                .and_where(Expr::col(Tasks::Queue).is_in(queues.iter().map(String::as_str)))
                .and_where(Expr::col(Tasks::RunAfter).lte(now))
                .and_where(requirements_met(offers))
                .order_by(Tasks::Priority, Order::Desc)
                // Keys take turns within a priority (see tasks/fair.rs).
                .order_by(Tasks::FairVt, Order::Asc)
                .order_by(Tasks::Id, Order::Asc)
                .limit(limit)
                .to_owned();
            candidates.lock_with_behavior(
                sea_query::LockType::Update,
                sea_query::LockBehavior::SkipLocked,
            );
            Expr::col(Tasks::Id).in_subquery(candidates)
        })
        .await
    }

    /// Claims one specific queued task, whatever its queue or `run_after`: `orchestrator run` uses it
    /// to run the task it just created in the foreground. `None` if the task is not queued.
    pub fn claim_task<'a>(
        &'a self,
        owner: &'a str,
        id: TaskId,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<Option<(Task, Lease)>>> {
        Box::pin(self.claim_task_unboxed(owner, id, lease_ms))
    }

    async fn claim_task_unboxed(
        &self,
        owner: &str,
        id: TaskId,
        lease_ms: i64,
    ) -> Result<Option<(Task, Lease)>> {
        Ok(self
            .claim_where(owner, lease_ms, |_| {
                Expr::col(Tasks::Id)
                    .eq(id.0)
                    .and(state_is(TaskState::Queued))
            })
            .await?
            .into_iter()
            .next())
    }

    /// Claims the rows `cond(now)` matches. On SQLite the time is read once it is the claim's turn
    /// to write, so a wait for the writer lock is not taken from the lease.
    ///
    /// The claim is one statement, a transaction of its own. On SQLite it runs on the claims'
    /// connection (see `claim_pool`) and a trigger of the same statement writes the `claimed`
    /// events (migration 0017); each statement is a round trip to the connection's thread, and a
    /// claim in a transaction was four of them (about 0.05 ms of an idle claim, in the queue
    /// bench). On PostgreSQL the events' insert rides in the statement's WITH clause
    /// (`claim_with_events`): there each statement is a round trip to the server.
    ///
    /// On SQLite the claim's commit does not wait for the disk (its connection has
    /// `synchronous=NORMAL`, see `claim_pool`); on PostgreSQL it does (see `claim_with_events`).
    async fn claim_where(
        &self,
        owner: &str,
        lease_ms: i64,
        cond: impl FnOnce(i64) -> Expr,
    ) -> Result<Vec<(Task, Lease)>> {
        if let Pool::Sqlite(..) = &self.claims {
            let rows: Vec<TaskRow> = self
                .claims
                .write_fetch_all_at(|now| {
                    claim_statement(owner, cond(now), lease_ms, now, sqlite_change_mark())
                })
                .await?;
            return claimed_from(rows);
        }
        // On PostgreSQL one statement too, its events written by a data-modifying WITH: a
        // transaction of the claim and the events' insert was four round trips to the server.
        let now = now_millis();
        let rows: Vec<TaskRow> = self
            .claims
            .fetch_all(&claim_with_events(owner, cond(now), lease_ms, now)?)
            .await?;
        claimed_from(rows)
    }
}

/// `run_after` of a task created for one process to run in the foreground: later than any daemon's
/// clock will reach, so `claim` never takes it, while `claim_task` (by id) does.
const FOREGROUND_RUN_AFTER: i64 = i64::MAX / 2;

impl Store {
    /// Creates a task and claims it for `owner`, so no daemon sharing the store can take it, then
    /// or after a retry: `orchestrator run` uses it to run its task in its own process.
    pub fn create_foreground<'a>(
        &'a self,
        new: &'a NewTask,
        owner: &'a str,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<(Task, Lease)>> {
        Box::pin(self.create_foreground_unboxed(new, owner, lease_ms))
    }

    async fn create_foreground_unboxed(
        &self,
        new: &NewTask,
        owner: &str,
        lease_ms: i64,
    ) -> Result<(Task, Lease)> {
        let mut hidden = new.clone();
        hidden.run_after = Some(FOREGROUND_RUN_AFTER);
        hidden.validate()?;
        // Its later attempts too (a retry, a hand-back) are this process's alone: no daemon
        // offers the word (a label has no `:`, and a task may not name it), and `claim_task`
        // takes the task by its id.
        hidden.requires.push(format!(
            "{}{owner}",
            orchestrator_types::placement::FOREGROUND_PREFIX
        ));
        let now = now_millis();
        // One transaction: a crash between creating and claiming would leave a queued task that no
        // daemon takes (its run_after is out of reach) and no foreground process runs.
        let mut tx = self.pool.begin().await?;
        let id = crate::tasks::insert_task(&mut tx, &hidden, now, self.placement()).await?;
        let cond = Expr::col(Tasks::Id)
            .eq(id.0)
            .and(state_is(TaskState::Queued));
        let claimed = claim_in(&mut tx, owner, cond, lease_ms, now)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Error::WrongState {
                task: id,
                state: "unknown".into(),
                message: "the task was taken before this process could start it".into(),
            })?;
        tx.commit().await?;
        Ok(claimed)
    }
}

/// Claims the queued rows `cond` matches, with their `claimed` events, inside `tx`. On SQLite
/// the events are the trigger's (migration 0017), on PostgreSQL a statement of their own: a row
/// trigger there is a PL/pgSQL call per claimed row, dearer than one insert of the whole batch.
async fn claim_in(
    tx: &mut Tx,
    owner: &str,
    cond: Expr,
    lease_ms: i64,
    now: i64,
) -> Result<Vec<(Task, Lease)>> {
    let stmt = claim_statement(owner, cond, lease_ms, now, tx.change_mark());
    let rows: Vec<TaskRow> = tx.fetch_all(&stmt).await?;
    let claimed = claimed_from(rows)?;
    if let Tx::Postgres(_) = tx {
        let events: Vec<EventInsert> = claimed
            .iter()
            .map(|(task, _)| EventInsert {
                task_id: task.id.0,
                seq: task.event_seq,
                at: now,
                kind: EventKind::Claimed,
                data: claimed_data(task.attempt, task.epoch, owner),
            })
            .collect();
        insert_events(tx, &events).await?;
    }
    Ok(claimed)
}

/// The `claimed` event's data. SQLite's trigger writes the same object (`json_object`), keys in
/// the same order; a test holds the two to the same text.
pub(crate) fn claimed_data(attempt: i64, epoch: i64, owner: &str) -> serde_json::Value {
    json!({ "attempt": attempt, "epoch": epoch, "worker": owner })
}

/// PostgreSQL's claim in one statement: the claim, and the insert of its rows' `claimed` events in a
/// WITH, their text built by the statement as `claimed_data` would write it (keys in the same
/// order, the worker's name as the store's own JSON text of it, bound).
///
/// Its commit waits for the server's sync, unlike SQLite's claim. PostgreSQL can lose an unsynced
/// commit in a crash of the server alone, while the worker that claimed keeps running its attempt;
/// the task, queued again at its old epoch, would be claimed next at the very epoch the lost claim
/// gave, and the two workers' writes would pass the same fence. On SQLite only the machine's
/// crash loses such a commit, and the workers with it. (Tried: one WAL sync less per claim, 12.4k
/// to 16.0k tasks/s before and 15.7k to 16.4k after in the queue bench.)
fn claim_with_events(
    owner: &str,
    cond: Expr,
    lease_ms: i64,
    now: i64,
) -> Result<sea_query::WithQuery> {
    let claimed = sea_query::Alias::new("claimed");
    let update = claim_statement(owner, cond, lease_ms, now, postgres_change_mark());
    let worker = serde_json::Value::from(owner).to_string();
    let data = Expr::cust_with_values(
        r#"'{"attempt":' || "attempt" || ',"epoch":' || "epoch" || ',"worker":' || $1 || '}'"#,
        [worker],
    );
    let events = Query::insert()
        .into_table(TaskEvents::Table)
        .columns(EVENT_COLUMNS)
        .select_from(
            Query::select()
                .column(Tasks::Id)
                .column(Tasks::EventSeq)
                .expr(Expr::val(now))
                .expr(Expr::val(EventKind::Claimed.as_str()))
                .expr(data)
                .from(claimed.clone())
                .to_owned(),
        )?
        .to_owned();
    Ok(sea_query::WithClause::new()
        .cte(
            sea_query::CommonTableExpression::new()
                .query(update)
                .table_name(claimed.clone())
                .to_owned(),
        )
        .cte(
            sea_query::CommonTableExpression::new()
                .query(events)
                .table_name(sea_query::Alias::new("claimed_events"))
                .to_owned(),
        )
        .to_owned()
        .query(Query::select().columns(COLUMNS).from(claimed).to_owned()))
}

/// The claim of the queued rows `cond` matches, at `now`, returning them whole.
fn claim_statement(
    owner: &str,
    cond: Expr,
    lease_ms: i64,
    now: i64,
    change_mark: Expr,
) -> sea_query::UpdateStatement {
    Query::update()
        .table(Tasks::Table)
        .value(Tasks::State, TaskState::Running.as_str())
        .value(Tasks::LeaseOwner, owner)
        .value(Tasks::LeaseExpiresAt, now + lease_ms)
        .value(Tasks::Epoch, Expr::col(Tasks::Epoch).add(1))
        .value(Tasks::Attempt, Expr::col(Tasks::Attempt).add(1))
        .value(Tasks::EventSeq, Expr::col(Tasks::EventSeq).add(1))
        .value(Tasks::ChangeId, change_mark)
        .value(Tasks::StartedAt, Expr::col(Tasks::StartedAt).if_null(now))
        // Foreground tasks are created with a run_after no daemon reaches (see
        // `create_foreground`); once claimed, the row should say when it really ran.
        .value(
            Tasks::RunAfter,
            Expr::case(Expr::col(Tasks::RunAfter).gt(now), now).finally(Expr::col(Tasks::RunAfter)),
        )
        .value(Tasks::UpdatedAt, now)
        .and_where(cond)
        .returning(Query::returning().columns(COLUMNS))
        .to_owned()
}

/// The claimed rows as tasks and their leases, highest priority first.
fn claimed_from(rows: Vec<TaskRow>) -> Result<Vec<(Task, Lease)>> {
    let mut claimed = rows
        .into_iter()
        .map(Task::try_from)
        .collect::<Result<Vec<_>>>()?;
    claimed.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
    Ok(claimed
        .into_iter()
        .map(|task| {
            let lease = Lease {
                task_id: task.id,
                epoch: task.epoch,
            };
            (task, lease)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::StoreOptions;
    use crate::fenced::tests::show_sync;
    use sea_query_sqlx::SqlxBinder;
    use sqlx::{Connection, PgConnection};

    /// A claim on PostgreSQL waits for the server's sync of its commit (see `claim_with_events`:
    /// a claim lost in a crash of the server alone would let two workers hold the same epoch):
    /// `synchronous_commit` inside its statement is the server's own setting.
    #[tokio::test]
    async fn a_claim_on_postgresql_waits_for_the_sync_of_its_commit() {
        if orchestrator_test_support::postgres_skipped() {
            return;
        }
        let url = orchestrator_test_support::fresh_postgres_url().await;
        let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
        let id = store.create_task(&NewTask::new("t")).await.unwrap();
        let mut conn = PgConnection::connect(&url).await.unwrap();
        let server = show_sync(&mut conn).await;
        assert_ne!(
            server, "off",
            "the test needs a server that syncs its commits"
        );
        let stmt =
            claim_with_events("w", Expr::col(Tasks::Id).eq(id.0), 60_000, now_millis()).unwrap();
        let (sql, values) = stmt.build_sqlx(sea_query::PostgresQueryBuilder);
        sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
        let rows = sqlx::query_with(sqlx::AssertSqlSafe(sql), values)
            .fetch_all(&mut conn)
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "the task is claimed");
        assert_eq!(show_sync(&mut conn).await, server, "inside the claim");
        sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
        assert_eq!(show_sync(&mut conn).await, server, "after the claim");

        // Through the store: the task is claimed with its event, on the store's own pool.
        let claimed = store
            .claim("w", &["default".to_owned()], 10, 60_000)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        let kinds: Vec<String> = store
            .events(id, 0, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(kinds, ["created", "claimed"]);
        store.close().await;
    }
}
