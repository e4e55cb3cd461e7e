//! The `github_deliveries` and `github_poll_cursors` tables: the ledger that makes GitHub events
//! create their tasks exactly once, and where each polled repository's listing left off.
//!
//! GitHub redelivers webhooks (on a timeout, or when someone presses "Redeliver"), and a poller can
//! see an event the webhook already brought. Every delivery is therefore claimed first:
//!
//! ```text
//!   (none) ──accept──▶ queued ──claim──▶ processing ──complete──▶ processed | ignored   (final)
//!   (none) ──────────────claim─────────▶     │  ▲
//!                                      fail  │  │ claim (at `retry_at`, a redelivery), or a claim
//!                                            ▼  │ after `stale_after_ms` when the process that
//!                                           failed  held it died mid-way
//! ```
//!
//! A webhook delivery is *accepted* (stored `queued` with its payload, answered at once) and
//! processed from the ledger in the background, so GitHub's 10-second deadline never waits on
//! GitHub's own API; a daemon that restarts finds what it had accepted in [`Store::due_deliveries`].
//! The poller claims directly: it holds the event itself and lists it again if processing fails.
//!
//! A delivery's tasks are inserted in the transaction that marks it processed, so a crash leaves
//! either both or neither. Claims are conditional writes (an insert that does nothing on conflict,
//! an update guarded by the status it expects), never a read followed by a write, so two concurrent
//! claims of one delivery on PostgreSQL cannot both win.
//!
//! This file holds the claim lifecycle (claim, complete, ignore, fail) and the reads; `queue.rs`
//! the webhook queue (accept, retry, what is due); `cursors.rs` the poll cursors.

use crate::exec::Tx;
use crate::tasks::insert_tasks;
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{NewTask, TaskId, now_millis};
use sea_query::{
    Cond, Expr, ExprTrait, Iden, InsertStatement, OnConflict, Order, Query, SelectStatement,
};
use serde::Serialize;

mod cursors;
mod queue;

#[derive(Iden, Clone, Copy)]
enum GithubDeliveries {
    Table,
    DeliveryId,
    Source,
    Event,
    Action,
    Repo,
    Status,
    Attempts,
    TaskIds,
    Detail,
    ReceivedAt,
    UpdatedAt,
    Payload,
    RetryAt,
    Subject,
}

/// Where a delivery came from.
pub mod delivery_source {
    /// Pushed by GitHub to the webhook endpoint; the id is GitHub's `X-GitHub-Delivery`.
    pub const WEBHOOK: &str = "webhook";
    /// Found by the poller; the id is derived from the event it listed.
    pub const POLL: &str = "poll";
}

/// Delivery states.
pub mod delivery_status {
    /// Accepted from a webhook with its payload; the background processor claims it.
    pub const QUEUED: &str = "queued";
    /// Claimed by a process that is deciding what to do with it.
    pub const PROCESSING: &str = "processing";
    /// Its tasks were created. Final.
    pub const PROCESSED: &str = "processed";
    /// Nothing was to be done (no rule matched, an event we do not handle). Final.
    pub const IGNORED: &str = "ignored";
    /// Processing broke; the next claim (a redelivery, the next poll) processes it again.
    pub const FAILED: &str = "failed";
}

/// Why a delivery that created no task was ignored, unless the caller said otherwise.
const NO_RULE_MATCHED: &str = "no rule matched";
/// A delivery whose tasks all found their join key past its limit (another daemon made the last
/// round allowed meanwhile).
const PAST_JOIN_LIMIT: &str = "its rounds reached the rule's max_rounds";

/// A delivery being claimed.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryInfo<'a> {
    pub id: &'a str,
    /// `webhook` or `poll` (see [`delivery_source`]).
    pub source: &'a str,
    /// GitHub's event name: `issues`, `issue_comment`, `pull_request`, ...
    pub event: &'a str,
    pub action: Option<&'a str>,
    /// `owner/name`.
    pub repo: Option<&'a str>,
    /// The issue or pull request it is about (`owner/name#number`), when it names one: deliveries
    /// about one subject are processed one at a time, in the order they were received.
    pub subject: Option<&'a str>,
}

/// What a claim found, and so what the caller should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryClaim {
    /// First sight of this delivery: process it.
    Fresh,
    /// It failed before, or its processor died: process it again. `attempts` counts this one.
    Retry { attempts: i64 },
    /// Already processed or ignored: do nothing (answer GitHub with success).
    Done {
        status: String,
        task_ids: Vec<TaskId>,
    },
    /// Another process is on it right now (a concurrent redelivery): do nothing.
    Busy,
    /// An earlier delivery about the same issue or pull request is not done yet (queued, being
    /// processed, or failed with a retry to come): nothing was claimed; try again after it.
    Behind { earlier: String },
}

impl DeliveryClaim {
    /// The token of a claim to process (its attempt number), which completing, ignoring or
    /// failing the delivery must name: a processor whose claim was taken over (it was slow, not
    /// dead) is then refused instead of overwriting the newer claim's work. `None` when there is
    /// nothing to process.
    pub fn token(&self) -> Option<i64> {
        match self {
            DeliveryClaim::Fresh => Some(1),
            DeliveryClaim::Retry { attempts } => Some(*attempts),
            DeliveryClaim::Done { .. } | DeliveryClaim::Busy | DeliveryClaim::Behind { .. } => None,
        }
    }
}

/// What accepting a webhook delivery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// First sight: queued for processing.
    New,
    /// It had failed; this redelivery queued it again with the payload it carries.
    Requeued,
    /// Queued or being processed already: nothing to do.
    InHand,
    /// Processed or ignored before: a duplicate.
    Done {
        status: String,
        task_ids: Vec<TaskId>,
    },
}

/// A delivery the background processor should process now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueDelivery {
    pub id: String,
    pub source: String,
    pub event: String,
    /// The payload's JSON as accepted.
    pub payload: String,
}

/// A delivery as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delivery {
    pub id: String,
    pub source: String,
    pub event: String,
    pub action: Option<String>,
    pub repo: Option<String>,
    /// The issue or pull request it is about (`owner/name#number`), when it names one.
    pub subject: Option<String>,
    pub status: String,
    /// Claims that processed it (1 unless it failed or its processor died).
    pub attempts: i64,
    pub task_ids: Vec<TaskId>,
    /// The error of a failed delivery, or why it was ignored.
    pub detail: Option<String>,
    pub received_at: i64,
    pub updated_at: i64,
    /// When a failed delivery is tried again by itself; `None` when it is final, or waits for a
    /// redelivery (`github deliveries --retry`, or GitHub's "Redeliver").
    pub retry_at: Option<i64>,
}

struct DeliveryRow {
    delivery_id: String,
    source: String,
    event: String,
    action: Option<String>,
    repo: Option<String>,
    subject: Option<String>,
    status: String,
    attempts: i64,
    task_ids: String,
    detail: Option<String>,
    received_at: i64,
    updated_at: i64,
    retry_at: Option<i64>,
}

from_row!(DeliveryRow {
    delivery_id,
    source,
    event,
    action,
    repo,
    subject,
    status,
    attempts,
    task_ids,
    detail,
    received_at,
    updated_at,
    retry_at
});

fn parse_task_ids(id: &str, text: &str) -> Result<Vec<TaskId>> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt {
        what: "github_deliveries.task_ids",
        message: format!("delivery {id}: {e}"),
    })
}

fn task_ids_json(ids: &[TaskId]) -> String {
    let ids: Vec<i64> = ids.iter().map(|t| t.0).collect();
    serde_json::Value::from(ids).to_string()
}

impl TryFrom<DeliveryRow> for Delivery {
    type Error = Error;
    fn try_from(row: DeliveryRow) -> Result<Delivery> {
        Ok(Delivery {
            task_ids: parse_task_ids(&row.delivery_id, &row.task_ids)?,
            id: row.delivery_id,
            source: row.source,
            event: row.event,
            action: row.action,
            repo: row.repo,
            subject: row.subject,
            status: row.status,
            attempts: row.attempts,
            detail: row.detail,
            received_at: row.received_at,
            updated_at: row.updated_at,
            retry_at: row.retry_at,
        })
    }
}

fn select_deliveries() -> SelectStatement {
    Query::select()
        .columns([
            GithubDeliveries::DeliveryId,
            GithubDeliveries::Source,
            GithubDeliveries::Event,
            GithubDeliveries::Action,
            GithubDeliveries::Repo,
            GithubDeliveries::Subject,
            GithubDeliveries::Status,
            GithubDeliveries::Attempts,
            GithubDeliveries::TaskIds,
            GithubDeliveries::Detail,
            GithubDeliveries::ReceivedAt,
            GithubDeliveries::UpdatedAt,
            GithubDeliveries::RetryAt,
        ])
        .from(GithubDeliveries::Table)
        .to_owned()
}

/// The insert of a delivery seen for the first time, which does nothing when its id is stored
/// already: in `status` with `attempts` tries counted, received `now`, about no task yet. A
/// webhook's `payload` is kept with it, due at once for the background processor.
pub(crate) fn insert_new(
    info: &DeliveryInfo<'_>,
    status: &str,
    attempts: i64,
    now: i64,
    payload: Option<&str>,
) -> Result<InsertStatement> {
    let mut columns = vec![
        GithubDeliveries::DeliveryId,
        GithubDeliveries::Source,
        GithubDeliveries::Event,
        GithubDeliveries::Action,
        GithubDeliveries::Repo,
        GithubDeliveries::Status,
        GithubDeliveries::Attempts,
        GithubDeliveries::TaskIds,
        GithubDeliveries::ReceivedAt,
        GithubDeliveries::UpdatedAt,
        GithubDeliveries::Subject,
    ];
    let mut values: Vec<Expr> = vec![
        info.id.into(),
        info.source.into(),
        info.event.into(),
        info.action.into(),
        info.repo.into(),
        status.into(),
        attempts.into(),
        "[]".into(),
        now.into(),
        now.into(),
        info.subject.into(),
    ];
    if let Some(payload) = payload {
        columns.extend([GithubDeliveries::Payload, GithubDeliveries::RetryAt]);
        values.extend([payload.into(), now.into()]);
    }
    Ok(Query::insert()
        .into_table(GithubDeliveries::Table)
        .columns(columns)
        .values(values)?
        .on_conflict(
            OnConflict::column(GithubDeliveries::DeliveryId)
                .do_nothing()
                .to_owned(),
        )
        .to_owned())
}

/// The SQL condition on a row `e` of `github_deliveries` that holds back a later delivery about
/// the same subject, received after it: `e` is not done (queued; being processed by a process that
/// may be alive, or with a payload that the background processor takes over once stale; failed
/// with a retry to come). A stale claim of a polled event (no payload) holds nothing back: only
/// the poller lists it again, and it may never.
fn pending_condition(stale_before: i64) -> String {
    format!(
        "(e.status = '{queued}' \
          OR (e.status = '{processing}' AND (e.payload IS NOT NULL OR e.updated_at > {stale_before})) \
          OR (e.status = '{failed}' AND e.retry_at IS NOT NULL))",
        queued = delivery_status::QUEUED,
        processing = delivery_status::PROCESSING,
        failed = delivery_status::FAILED,
    )
}

/// The earliest delivery that holds `info` back: about the same subject, received before it (by
/// time, then id), and not done ([`pending_condition`]). Read in the claim's transaction; a
/// delivery recorded already is placed by its own `received_at`, a new one by `now`.
async fn earlier_pending(
    tx: &mut Tx,
    info: &DeliveryInfo<'_>,
    now: i64,
    stale_after_ms: i64,
) -> Result<Option<String>> {
    let own = Query::select()
        .columns([GithubDeliveries::ReceivedAt, GithubDeliveries::Subject])
        .from(GithubDeliveries::Table)
        .and_where(Expr::col(GithubDeliveries::DeliveryId).eq(info.id))
        .to_owned();
    let (received_at, subject) = match tx.fetch_optional::<(i64, Option<String>), _>(&own).await? {
        Some((at, stored)) => (at, stored.or_else(|| info.subject.map(str::to_owned))),
        None => (now, info.subject.map(str::to_owned)),
    };
    let Some(subject) = subject else {
        return Ok(None);
    };
    let e = sea_query::Alias::new("e");
    let col = |c: GithubDeliveries| Expr::col((e.clone(), c));
    let stmt = Query::select()
        .expr(col(GithubDeliveries::DeliveryId))
        .from_as(GithubDeliveries::Table, e.clone())
        .and_where(col(GithubDeliveries::Subject).eq(subject))
        .cond_where(
            Cond::any()
                .add(col(GithubDeliveries::ReceivedAt).lt(received_at))
                .add(
                    Cond::all()
                        .add(col(GithubDeliveries::ReceivedAt).eq(received_at))
                        .add(col(GithubDeliveries::DeliveryId).lt(info.id)),
                ),
        )
        .and_where(Expr::cust(pending_condition(
            now.saturating_sub(stale_after_ms),
        )))
        .order_by((e.clone(), GithubDeliveries::ReceivedAt), Order::Asc)
        .order_by((e, GithubDeliveries::DeliveryId), Order::Asc)
        .limit(1)
        .to_owned();
    Ok(tx
        .fetch_optional::<(String,), _>(&stmt)
        .await?
        .map(|(id,)| id))
}

/// How many times a claim looks again when the row changed between its statements (a claim saw
/// `processing`, then found `failed` before it could read it). Each pass is a few statements; the
/// race needs another process to fail the delivery in that window, so twice more is plenty.
const CLAIM_PASSES: usize = 3;

impl Store {
    /// Claims a delivery for processing; see [`DeliveryClaim`] for what each answer asks of the
    /// caller. A `processing` row untouched for `stale_after_ms` is taken over: the process that
    /// claimed it is presumed dead.
    pub fn claim_delivery<'a>(
        &'a self,
        info: &'a DeliveryInfo<'a>,
        stale_after_ms: i64,
    ) -> BoxFuture<'a, Result<DeliveryClaim>> {
        Box::pin(self.claim_delivery_unboxed(info, stale_after_ms))
    }

    async fn claim_delivery_unboxed(
        &self,
        info: &DeliveryInfo<'_>,
        stale_after_ms: i64,
    ) -> Result<DeliveryClaim> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        if let Some(earlier) = earlier_pending(&mut tx, info, now, stale_after_ms).await? {
            tx.commit().await?;
            return Ok(DeliveryClaim::Behind { earlier });
        }
        for _ in 0..CLAIM_PASSES {
            let insert = insert_new(info, delivery_status::PROCESSING, 1, now, None)?;
            if tx.execute(&insert).await? > 0 {
                tx.commit().await?;
                return Ok(DeliveryClaim::Fresh);
            }
            // The status in the WHERE clause is what makes this safe: PostgreSQL re-checks it
            // after waiting for a concurrent claim's row lock, so only one of them matches.
            let retry = Query::update()
                .table(GithubDeliveries::Table)
                .value(GithubDeliveries::Status, delivery_status::PROCESSING)
                .value(
                    GithubDeliveries::Attempts,
                    Expr::col(GithubDeliveries::Attempts).add(1),
                )
                .value(GithubDeliveries::UpdatedAt, now)
                .and_where(Expr::col(GithubDeliveries::DeliveryId).eq(info.id))
                .cond_where(
                    Cond::any()
                        .add(Expr::col(GithubDeliveries::Status).eq(delivery_status::FAILED))
                        .add(Expr::col(GithubDeliveries::Status).eq(delivery_status::QUEUED))
                        .add(
                            Cond::all()
                                .add(
                                    Expr::col(GithubDeliveries::Status)
                                        .eq(delivery_status::PROCESSING),
                                )
                                .add(
                                    Expr::col(GithubDeliveries::UpdatedAt)
                                        .lte(now.saturating_sub(stale_after_ms)),
                                ),
                        ),
                )
                .returning_col(GithubDeliveries::Attempts)
                .to_owned();
            if let Some((attempts,)) = tx.fetch_optional::<(i64,), _>(&retry).await? {
                tx.commit().await?;
                return Ok(DeliveryClaim::Retry { attempts });
            }
            let read = Query::select()
                .columns([GithubDeliveries::Status, GithubDeliveries::TaskIds])
                .from(GithubDeliveries::Table)
                .and_where(Expr::col(GithubDeliveries::DeliveryId).eq(info.id))
                .to_owned();
            let Some((status, task_ids)) = tx.fetch_optional::<(String, String), _>(&read).await?
            else {
                continue;
            };
            match status.as_str() {
                delivery_status::PROCESSED | delivery_status::IGNORED => {
                    tx.commit().await?;
                    let task_ids = parse_task_ids(info.id, &task_ids)?;
                    return Ok(DeliveryClaim::Done { status, task_ids });
                }
                delivery_status::PROCESSING => {
                    tx.commit().await?;
                    return Ok(DeliveryClaim::Busy);
                }
                // Failed or queued after our update looked: look again.
                delivery_status::FAILED | delivery_status::QUEUED => continue,
                other => {
                    return Err(Error::Corrupt {
                        what: "github_deliveries.status",
                        message: format!("delivery {}: unknown status {other:?}", info.id),
                    });
                }
            }
        }
        tx.commit().await?;
        Ok(DeliveryClaim::Busy)
    }

    /// Creates a claimed delivery's tasks and marks it `processed` in one transaction, or marks it
    /// `ignored` ("no rule matched") when `tasks` is empty. Refused with `DeliveryNotClaimed`, and
    /// creating nothing, when the delivery is not `processing` under the claim `token` (another
    /// claim finished it, or took it over).
    pub fn complete_delivery<'a>(
        &'a self,
        id: &'a str,
        token: i64,
        tasks: &'a [NewTask],
    ) -> BoxFuture<'a, Result<Vec<TaskId>>> {
        Box::pin(self.complete_delivery_unboxed(id, token, tasks))
    }

    async fn complete_delivery_unboxed(
        &self,
        id: &str,
        token: i64,
        tasks: &[NewTask],
    ) -> Result<Vec<TaskId>> {
        for task in tasks {
            task.validate()?;
        }
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        // Held until commit: a claim that took the delivery over meanwhile waits, then finds it
        // processed.
        let lock = Query::select()
            .columns([GithubDeliveries::Status, GithubDeliveries::Attempts])
            .from(GithubDeliveries::Table)
            .and_where(Expr::col(GithubDeliveries::DeliveryId).eq(id))
            .lock(sea_query::LockType::Update)
            .to_owned();
        let status: Option<(String, i64)> = tx.fetch_optional(&lock).await?;
        match status {
            Some((status, attempts))
                if status == delivery_status::PROCESSING && attempts == token => {}
            Some((status, _)) if status == delivery_status::PROCESSING => {
                return Err(Error::DeliveryNotClaimed {
                    id: id.to_owned(),
                    status: "processing under a newer claim".to_owned(),
                });
            }
            other => {
                return Err(Error::DeliveryNotClaimed {
                    id: id.to_owned(),
                    status: other.map_or_else(|| "unrecorded".to_owned(), |(s, _)| s),
                });
            }
        }
        let (joining, fresh): (Vec<&NewTask>, Vec<&NewTask>) =
            tasks.iter().partition(|t| t.join.is_some());
        let fresh: Vec<NewTask> = fresh.into_iter().cloned().collect();
        let mut ids = if fresh.is_empty() {
            Vec::new()
        } else {
            insert_tasks(&mut tx, &fresh, now, None, self.placement()).await?
        };
        let mut past_limit = 0;
        for task in joining {
            match crate::joins::join_or_insert(&mut tx, task, now, self.placement()).await? {
                Some(id) => ids.push(id),
                None => past_limit += 1,
            }
        }
        let (status, detail) = if ids.is_empty() && past_limit > 0 {
            (delivery_status::IGNORED, Some(PAST_JOIN_LIMIT))
        } else if ids.is_empty() {
            (delivery_status::IGNORED, Some(NO_RULE_MATCHED))
        } else {
            (delivery_status::PROCESSED, None)
        };
        let mark = Query::update()
            .table(GithubDeliveries::Table)
            .value(GithubDeliveries::Status, status)
            .value(GithubDeliveries::TaskIds, task_ids_json(&ids))
            .value(GithubDeliveries::Detail, detail)
            .value(GithubDeliveries::UpdatedAt, now)
            .value(GithubDeliveries::Payload, Option::<String>::None)
            .value(GithubDeliveries::RetryAt, Option::<i64>::None)
            .and_where(Expr::col(GithubDeliveries::DeliveryId).eq(id))
            .to_owned();
        tx.execute(&mark).await?;
        if !ids.is_empty() {
            tx.notify_task_available().await?;
        }
        tx.commit().await?;
        if !ids.is_empty() {
            self.wake.wake();
        }
        Ok(ids)
    }

    /// Marks a claimed delivery `ignored`, saying why. Final: redeliveries are `Done`.
    pub fn ignore_delivery<'a>(
        &'a self,
        id: &'a str,
        token: i64,
        why: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.ignore_delivery_unboxed(id, token, why))
    }

    async fn ignore_delivery_unboxed(&self, id: &str, token: i64, why: &str) -> Result<()> {
        self.finish_delivery(id, token, delivery_status::IGNORED, why, None)
            .await
    }

    /// Marks a claimed delivery `failed` with its error; the next claim (a redelivery, the next
    /// poll) processes it again.
    pub fn fail_delivery<'a>(
        &'a self,
        id: &'a str,
        token: i64,
        error: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.fail_delivery_unboxed(id, token, error))
    }

    async fn fail_delivery_unboxed(&self, id: &str, token: i64, error: &str) -> Result<()> {
        self.finish_delivery(id, token, delivery_status::FAILED, error, None)
            .await
    }

    /// Like [`Store::fail_delivery`], and the background processor tries it again by itself at
    /// `retry_at` (Unix milliseconds) when the delivery has its payload; `None` leaves it to a
    /// redelivery.
    pub fn fail_delivery_until<'a>(
        &'a self,
        id: &'a str,
        token: i64,
        error: &'a str,
        retry_at: Option<i64>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.fail_delivery_until_unboxed(id, token, error, retry_at))
    }

    async fn fail_delivery_until_unboxed(
        &self,
        id: &str,
        token: i64,
        error: &str,
        retry_at: Option<i64>,
    ) -> Result<()> {
        self.finish_delivery(id, token, delivery_status::FAILED, error, retry_at)
            .await
    }

    /// Moves a `processing` delivery to `status`. Only from `processing`: failing a delivery that
    /// another claim processed meanwhile would let the next redelivery create its tasks again.
    async fn finish_delivery(
        &self,
        id: &str,
        token: i64,
        status: &str,
        detail: &str,
        retry_at: Option<i64>,
    ) -> Result<()> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let mut stmt = Query::update();
        stmt.table(GithubDeliveries::Table)
            .value(GithubDeliveries::Status, status)
            .value(GithubDeliveries::Detail, detail)
            .value(GithubDeliveries::UpdatedAt, now)
            .value(GithubDeliveries::RetryAt, retry_at);
        if status != delivery_status::FAILED {
            // Final: the payload is no longer needed.
            stmt.value(GithubDeliveries::Payload, Option::<String>::None);
        }
        let stmt = stmt
            .and_where(Expr::col(GithubDeliveries::DeliveryId).eq(id))
            .and_where(Expr::col(GithubDeliveries::Status).eq(delivery_status::PROCESSING))
            .and_where(Expr::col(GithubDeliveries::Attempts).eq(token))
            .returning(
                Query::returning().columns([GithubDeliveries::Event, GithubDeliveries::Repo]),
            )
            .to_owned();
        let Some((event, repo)) = tx
            .fetch_optional::<(String, Option<String>), _>(&stmt)
            .await?
        else {
            tx.rollback().await?;
            let status = self
                .delivery(id)
                .await?
                .map_or_else(|| "unrecorded".to_owned(), |d| d.status);
            return Err(Error::DeliveryNotClaimed {
                id: id.to_owned(),
                status,
            });
        };
        if status == delivery_status::FAILED && retry_at.is_none() {
            // Nothing tries it again by itself: a person should hear of it (orchestrator-notify),
            // told by the transaction that gave up on it, so the notice is never lost.
            crate::notifications::insert_notice(
                &mut tx,
                &crate::NewNotice {
                    key: format!("delivery_failed:{id}:{token}"),
                    kind: orchestrator_types::NoticeKind::DeliveryFailed,
                    task_id: None,
                    at: now,
                    data: serde_json::json!({
                        "delivery": id, "event": event, "repo": repo, "error": detail,
                    }),
                },
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub fn delivery<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Delivery>>> {
        Box::pin(self.delivery_unboxed(id))
    }

    async fn delivery_unboxed(&self, id: &str) -> Result<Option<Delivery>> {
        let mut stmt = select_deliveries();
        stmt.and_where(Expr::col(GithubDeliveries::DeliveryId).eq(id));
        self.pool
            .fetch_optional::<DeliveryRow, _>(&stmt)
            .await?
            .map(Delivery::try_from)
            .transpose()
    }

    /// The latest deliveries, newest first.
    pub fn deliveries<'a>(&'a self, limit: u64) -> BoxFuture<'a, Result<Vec<Delivery>>> {
        Box::pin(self.deliveries_unboxed(limit))
    }

    async fn deliveries_unboxed(&self, limit: u64) -> Result<Vec<Delivery>> {
        let mut stmt = select_deliveries();
        stmt.order_by(GithubDeliveries::ReceivedAt, Order::Desc)
            .order_by(GithubDeliveries::DeliveryId, Order::Desc)
            .limit(limit);
        self.pool
            .fetch_all::<DeliveryRow, _>(&stmt)
            .await?
            .into_iter()
            .map(Delivery::try_from)
            .collect()
    }
}
