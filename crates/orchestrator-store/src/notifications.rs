//! The notification outbox (migration 0013): `notify_events`, what a person should be told;
//! `notify_outbox`, one message per event and sink with its tries; `notify_cursors`, how far the
//! sending daemon has read the order of changes; and `notify_sender`, the lease that lets one
//! daemon at a time send.
//!
//! Exactly once into the outbox: an event's `key` is unique, so writing it again (a notifier that
//! re-reads changes after a crash, two daemons racing) finds the row and does nothing; the cursor
//! moves in the transaction that writes what it read, so a crash between the two is impossible.
//! An event becomes outbox rows in one transaction that also marks it `fanned_out`, and an
//! outbox row is unique per event and sink.
//!
//! At least once onto the wire: a row is claimed for a while (`claimed_until`) by one daemon, sent,
//! then marked sent. A daemon that dies between the send and the mark leaves a claimed row that
//! is tried again once the claim runs out, with the same `delivery_key`, which the receiver uses
//! to drop the second copy. A daemon that dies before it sent leaves nothing to drop.

use crate::changes::ChangeCursor;
use crate::exec::Tx;
use crate::{Backend, Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{NoticeKind, TaskId, now_millis};
use sea_query::{Expr, ExprTrait, Iden, OnConflict, Order, Query};
use serde::Serialize;

#[derive(Iden, Clone, Copy)]
enum NotifyEvents {
    Table,
    Id,
    Key,
    Kind,
    TaskId,
    At,
    Data,
    FannedOut,
}

#[derive(Iden, Clone, Copy)]
enum NotifyOutbox {
    Table,
    Id,
    EventId,
    Sink,
    SinkKind,
    DeliveryKey,
    Payload,
    Status,
    Attempts,
    NextAttemptAt,
    ClaimedBy,
    ClaimedUntil,
    CreatedAt,
    SentAt,
    LastError,
}

#[derive(Iden, Clone, Copy)]
enum NotifyCursors {
    Table,
    Name,
    ChangeId,
    RowId,
    StartedAt,
    UpdatedAt,
}

#[derive(Iden, Clone, Copy)]
enum NotifySender {
    Table,
    Id,
    Holder,
    ExpiresAt,
}

/// The states of an outbox row.
pub mod notification_status {
    /// Waiting for its next try (or for its first).
    pub const PENDING: &str = "pending";
    /// The sink accepted it.
    pub const SENT: &str = "sent";
    /// Every try failed; `last_error` says how the last one did.
    pub const FAILED: &str = "failed";
}

/// Something to tell, before it is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNotice {
    /// Names the event for good: the same event found again has the same key.
    pub key: String,
    pub kind: NoticeKind,
    pub task_id: Option<TaskId>,
    pub at: i64,
    /// What the message says: a title, a sentence, what the link points at.
    pub data: serde_json::Value,
}

/// A stored notice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notice {
    pub id: i64,
    pub key: String,
    pub kind: String,
    pub task_id: Option<TaskId>,
    pub at: i64,
    pub data: serde_json::Value,
}

/// One message to one sink, before it is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNotification {
    pub sink: String,
    pub sink_kind: String,
    pub delivery_key: String,
    pub payload: serde_json::Value,
    pub next_attempt_at: i64,
}

/// A row of the outbox.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notification {
    pub id: i64,
    pub event_id: i64,
    pub sink: String,
    pub sink_kind: String,
    pub delivery_key: String,
    pub payload: serde_json::Value,
    pub status: String,
    /// Tries started so far (a claim counts as one).
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub claimed_by: Option<String>,
    pub claimed_until: Option<i64>,
    pub created_at: i64,
    pub sent_at: Option<i64>,
    pub last_error: Option<String>,
}

struct NotificationRow {
    id: i64,
    event_id: i64,
    sink: String,
    sink_kind: String,
    delivery_key: String,
    payload: String,
    status: String,
    attempts: i64,
    next_attempt_at: i64,
    claimed_by: Option<String>,
    claimed_until: Option<i64>,
    created_at: i64,
    sent_at: Option<i64>,
    last_error: Option<String>,
}

from_row!(NotificationRow {
    id,
    event_id,
    sink,
    sink_kind,
    delivery_key,
    payload,
    status,
    attempts,
    next_attempt_at,
    claimed_by,
    claimed_until,
    created_at,
    sent_at,
    last_error
});

const OUTBOX_COLUMNS: [NotifyOutbox; 14] = [
    NotifyOutbox::Id,
    NotifyOutbox::EventId,
    NotifyOutbox::Sink,
    NotifyOutbox::SinkKind,
    NotifyOutbox::DeliveryKey,
    NotifyOutbox::Payload,
    NotifyOutbox::Status,
    NotifyOutbox::Attempts,
    NotifyOutbox::NextAttemptAt,
    NotifyOutbox::ClaimedBy,
    NotifyOutbox::ClaimedUntil,
    NotifyOutbox::CreatedAt,
    NotifyOutbox::SentAt,
    NotifyOutbox::LastError,
];

fn json_of(what: &'static str, text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt {
        what,
        message: e.to_string(),
    })
}

impl TryFrom<NotificationRow> for Notification {
    type Error = Error;
    fn try_from(row: NotificationRow) -> Result<Notification> {
        Ok(Notification {
            payload: json_of("notify_outbox.payload", &row.payload)?,
            id: row.id,
            event_id: row.event_id,
            sink: row.sink,
            sink_kind: row.sink_kind,
            delivery_key: row.delivery_key,
            status: row.status,
            attempts: row.attempts,
            next_attempt_at: row.next_attempt_at,
            claimed_by: row.claimed_by,
            claimed_until: row.claimed_until,
            created_at: row.created_at,
            sent_at: row.sent_at,
            last_error: row.last_error,
        })
    }
}

/// Writes a notice in the caller's transaction, unless one with its key is there. Returns whether
/// it was written.
pub(crate) async fn insert_notice(tx: &mut Tx, notice: &NewNotice) -> Result<bool> {
    let stmt = Query::insert()
        .into_table(NotifyEvents::Table)
        .columns([
            NotifyEvents::Key,
            NotifyEvents::Kind,
            NotifyEvents::TaskId,
            NotifyEvents::At,
            NotifyEvents::Data,
        ])
        .values([
            notice.key.clone().into(),
            notice.kind.as_str().into(),
            notice.task_id.map(|t| t.0).into(),
            notice.at.into(),
            notice.data.to_string().into(),
        ])?
        .on_conflict(
            OnConflict::column(NotifyEvents::Key)
                .do_nothing()
                .to_owned(),
        )
        .to_owned();
    Ok(tx.execute(&stmt).await? > 0)
}

impl Store {
    /// Stores a notice on its own (a daemon that started degraded). Returns whether it was new.
    pub fn queue_notice<'a>(&'a self, notice: &'a NewNotice) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.queue_notice_unboxed(notice))
    }

    async fn queue_notice_unboxed(&self, notice: &NewNotice) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let written = insert_notice(&mut tx, notice).await?;
        tx.commit().await?;
        Ok(written)
    }

    /// Where the notifier's reading of the order of changes named `name` stands, if it has begun,
    /// and when it began (Unix milliseconds).
    pub fn notify_cursor<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<(ChangeCursor, i64)>>> {
        Box::pin(self.notify_cursor_unboxed(name))
    }

    async fn notify_cursor_unboxed(&self, name: &str) -> Result<Option<(ChangeCursor, i64)>> {
        let stmt = Query::select()
            .columns([
                NotifyCursors::ChangeId,
                NotifyCursors::RowId,
                NotifyCursors::StartedAt,
            ])
            .from(NotifyCursors::Table)
            .and_where(Expr::col(NotifyCursors::Name).eq(name))
            .to_owned();
        let row: Option<(i64, i64, i64)> = self.pool.fetch_optional(&stmt).await?;
        Ok(row.map(|(change, id, started)| (ChangeCursor { change, id }, started)))
    }

    /// Stores `notices` (those whose key is new) and moves the cursor `name` to `cursor` (starting
    /// it now if it is new), in one transaction: what the notifier read is either all written with the cursor past it, or not
    /// at all with the cursor where it was. Returns how many notices were new.
    pub fn record_notices<'a>(
        &'a self,
        name: &'a str,
        cursor: ChangeCursor,
        notices: &'a [NewNotice],
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.record_notices_unboxed(name, cursor, notices))
    }

    async fn record_notices_unboxed(
        &self,
        name: &str,
        cursor: ChangeCursor,
        notices: &[NewNotice],
    ) -> Result<u64> {
        let mut tx = self.pool.begin().await?;
        let mut written = 0;
        for notice in notices {
            written += u64::from(insert_notice(&mut tx, notice).await?);
        }
        let stmt = Query::insert()
            .into_table(NotifyCursors::Table)
            .columns([
                NotifyCursors::Name,
                NotifyCursors::ChangeId,
                NotifyCursors::RowId,
                NotifyCursors::StartedAt,
                NotifyCursors::UpdatedAt,
            ])
            .values([
                name.into(),
                cursor.change.into(),
                cursor.id.into(),
                now_millis().into(),
                now_millis().into(),
            ])?
            .on_conflict(
                OnConflict::column(NotifyCursors::Name)
                    .update_columns([
                        NotifyCursors::ChangeId,
                        NotifyCursors::RowId,
                        NotifyCursors::UpdatedAt,
                    ])
                    .to_owned(),
            )
            .to_owned();
        tx.execute(&stmt).await?;
        tx.commit().await?;
        Ok(written)
    }

    /// Notices that have no outbox rows yet, oldest first, at most `limit`.
    pub fn notices_to_fan_out<'a>(&'a self, limit: u64) -> BoxFuture<'a, Result<Vec<Notice>>> {
        Box::pin(self.notices_to_fan_out_unboxed(limit))
    }

    async fn notices_to_fan_out_unboxed(&self, limit: u64) -> Result<Vec<Notice>> {
        let stmt = Query::select()
            .columns([
                NotifyEvents::Id,
                NotifyEvents::Key,
                NotifyEvents::Kind,
                NotifyEvents::TaskId,
                NotifyEvents::At,
                NotifyEvents::Data,
            ])
            .from(NotifyEvents::Table)
            .and_where(Expr::col(NotifyEvents::FannedOut).eq(false))
            .order_by(NotifyEvents::Id, Order::Asc)
            .limit(limit)
            .to_owned();
        let rows: Vec<(i64, String, String, Option<i64>, i64, String)> =
            self.pool.fetch_all(&stmt).await?;
        rows.into_iter()
            .map(|(id, key, kind, task_id, at, data)| {
                Ok(Notice {
                    id,
                    key,
                    kind,
                    task_id: task_id.map(TaskId),
                    at,
                    data: json_of("notify_events.data", &data)?,
                })
            })
            .collect()
    }

    /// Writes the outbox rows of a notice (one per sink that wants it, none if no sink does) and
    /// marks it fanned out, in one transaction. A row already there for a sink stays as it is.
    pub fn fan_out_notice<'a>(
        &'a self,
        event_id: i64,
        rows: &'a [NewNotification],
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.fan_out_notice_unboxed(event_id, rows))
    }

    async fn fan_out_notice_unboxed(&self, event_id: i64, rows: &[NewNotification]) -> Result<u64> {
        let mut tx = self.pool.begin().await?;
        let now = now_millis();
        let mut written = 0;
        for row in rows {
            let stmt = Query::insert()
                .into_table(NotifyOutbox::Table)
                .columns([
                    NotifyOutbox::EventId,
                    NotifyOutbox::Sink,
                    NotifyOutbox::SinkKind,
                    NotifyOutbox::DeliveryKey,
                    NotifyOutbox::Payload,
                    NotifyOutbox::Status,
                    NotifyOutbox::NextAttemptAt,
                    NotifyOutbox::CreatedAt,
                ])
                .values([
                    event_id.into(),
                    row.sink.clone().into(),
                    row.sink_kind.clone().into(),
                    row.delivery_key.clone().into(),
                    row.payload.to_string().into(),
                    notification_status::PENDING.into(),
                    row.next_attempt_at.into(),
                    now.into(),
                ])?
                .on_conflict(
                    OnConflict::columns([NotifyOutbox::EventId, NotifyOutbox::Sink])
                        .do_nothing()
                        .to_owned(),
                )
                .to_owned();
            written += tx.execute(&stmt).await?;
        }
        let mark = Query::update()
            .table(NotifyEvents::Table)
            .value(NotifyEvents::FannedOut, true)
            .and_where(Expr::col(NotifyEvents::Id).eq(event_id))
            .to_owned();
        tx.execute(&mark).await?;
        tx.commit().await?;
        Ok(written)
    }

    /// Takes or renews the sender's lease for `holder` until `ttl_ms` from now. Returns whether
    /// `holder` holds it: false while another daemon's lease runs.
    pub fn take_notify_sender<'a>(
        &'a self,
        holder: &'a str,
        ttl_ms: i64,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.take_notify_sender_unboxed(holder, ttl_ms))
    }

    async fn take_notify_sender_unboxed(&self, holder: &str, ttl_ms: i64) -> Result<bool> {
        let now = now_millis();
        // The condition is in the UPDATE itself, which PostgreSQL checks again after waiting for
        // a concurrent taker's row lock, so two daemons cannot both take an expired lease.
        let renew = Query::update()
            .table(NotifySender::Table)
            .value(NotifySender::Holder, holder)
            .value(NotifySender::ExpiresAt, now + ttl_ms)
            .and_where(Expr::col(NotifySender::Id).eq(1))
            .and_where(
                Expr::col(NotifySender::Holder)
                    .eq(holder)
                    .or(Expr::col(NotifySender::ExpiresAt).lt(now)),
            )
            .to_owned();
        if self.pool.write(&renew).await? > 0 {
            return Ok(true);
        }
        let take = Query::insert()
            .into_table(NotifySender::Table)
            .columns([
                NotifySender::Id,
                NotifySender::Holder,
                NotifySender::ExpiresAt,
            ])
            .values([1i64.into(), holder.into(), (now + ttl_ms).into()])?
            .on_conflict(OnConflict::column(NotifySender::Id).do_nothing().to_owned())
            .to_owned();
        Ok(self.pool.write(&take).await? > 0)
    }

    /// Gives the sender's lease up, if `holder` has it, so another daemon takes over at once.
    pub fn release_notify_sender<'a>(&'a self, holder: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.release_notify_sender_unboxed(holder))
    }

    async fn release_notify_sender_unboxed(&self, holder: &str) -> Result<()> {
        let stmt = Query::delete()
            .from_table(NotifySender::Table)
            .and_where(Expr::col(NotifySender::Holder).eq(holder))
            .to_owned();
        self.pool.write(&stmt).await?;
        Ok(())
    }

    /// Who holds the sender's lease, and until when.
    pub fn notify_sender<'a>(&'a self) -> BoxFuture<'a, Result<Option<(String, i64)>>> {
        Box::pin(self.notify_sender_unboxed())
    }

    async fn notify_sender_unboxed(&self) -> Result<Option<(String, i64)>> {
        let stmt = Query::select()
            .columns([NotifySender::Holder, NotifySender::ExpiresAt])
            .from(NotifySender::Table)
            .to_owned();
        self.pool.fetch_optional(&stmt).await
    }

    /// Claims up to `limit` outbox rows that are due for `holder` for `claim_ms`, counting a try
    /// for each: the oldest pending rows whose next try has come and that no daemon holds a
    /// running claim on. A row is claimed by one daemon at a time (`FOR UPDATE SKIP LOCKED` on
    /// PostgreSQL, the one writer on SQLite, and the same conditions in the UPDATE).
    pub fn claim_notifications<'a>(
        &'a self,
        holder: &'a str,
        limit: u64,
        claim_ms: i64,
    ) -> BoxFuture<'a, Result<Vec<Notification>>> {
        Box::pin(self.claim_notifications_unboxed(holder, limit, claim_ms))
    }

    async fn claim_notifications_unboxed(
        &self,
        holder: &str,
        limit: u64,
        claim_ms: i64,
    ) -> Result<Vec<Notification>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut tx = self.pool.begin().await?;
        let now = now_millis();
        let due = || {
            Expr::col(NotifyOutbox::Status)
                .eq(notification_status::PENDING)
                .and(Expr::col(NotifyOutbox::NextAttemptAt).lte(now))
                .and(
                    Expr::col(NotifyOutbox::ClaimedUntil)
                        .is_null()
                        .or(Expr::col(NotifyOutbox::ClaimedUntil).lt(now)),
                )
        };
        let mut candidates = Query::select()
            .column(NotifyOutbox::Id)
            .from(NotifyOutbox::Table)
            .and_where(due())
            .order_by(NotifyOutbox::Id, Order::Asc)
            .limit(limit)
            .to_owned();
        if self.backend() == Backend::Postgres {
            candidates.lock_with_behavior(
                sea_query::LockType::Update,
                sea_query::LockBehavior::SkipLocked,
            );
        }
        let stmt = Query::update()
            .table(NotifyOutbox::Table)
            .value(NotifyOutbox::ClaimedBy, holder)
            .value(NotifyOutbox::ClaimedUntil, now + claim_ms)
            .value(
                NotifyOutbox::Attempts,
                Expr::col(NotifyOutbox::Attempts).add(1),
            )
            .and_where(Expr::col(NotifyOutbox::Id).in_subquery(candidates))
            .and_where(due())
            .returning(Query::returning().columns(OUTBOX_COLUMNS))
            .to_owned();
        let rows: Vec<NotificationRow> = tx.fetch_all(&stmt).await?;
        tx.commit().await?;
        let mut claimed = rows
            .into_iter()
            .map(Notification::try_from)
            .collect::<Result<Vec<_>>>()?;
        claimed.sort_by_key(|n| n.id);
        Ok(claimed)
    }

    /// Marks a row `holder` claimed as sent. False if the claim was taken over meanwhile (the row
    /// may then be sent twice, under the same delivery key) or this try was already recorded.
    pub fn notification_sent<'a>(
        &'a self,
        id: i64,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.notification_sent_unboxed(id, holder))
    }

    async fn notification_sent_unboxed(&self, id: i64, holder: &str) -> Result<bool> {
        let stmt = Query::update()
            .table(NotifyOutbox::Table)
            .value(NotifyOutbox::Status, notification_status::SENT)
            .value(NotifyOutbox::SentAt, now_millis())
            .value(NotifyOutbox::ClaimedUntil, Option::<i64>::None)
            .value(NotifyOutbox::LastError, Option::<String>::None)
            .and_where(Expr::col(NotifyOutbox::Id).eq(id))
            .and_where(Expr::col(NotifyOutbox::ClaimedBy).eq(holder))
            .and_where(Expr::col(NotifyOutbox::ClaimedUntil).is_not_null())
            .and_where(Expr::col(NotifyOutbox::Status).eq(notification_status::PENDING))
            .to_owned();
        Ok(self.pool.write(&stmt).await? > 0)
    }

    /// Records a failed try of a row `holder` claimed: tried again at `retry_at`, or, with `None`,
    /// marked `failed` for good. False if the claim was taken over meanwhile.
    pub fn notification_failed<'a>(
        &'a self,
        id: i64,
        holder: &'a str,
        error: &'a str,
        retry_at: Option<i64>,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.notification_failed_unboxed(id, holder, error, retry_at))
    }

    async fn notification_failed_unboxed(
        &self,
        id: i64,
        holder: &str,
        error: &str,
        retry_at: Option<i64>,
    ) -> Result<bool> {
        let mut stmt = Query::update()
            .table(NotifyOutbox::Table)
            .value(NotifyOutbox::ClaimedUntil, Option::<i64>::None)
            .value(NotifyOutbox::LastError, error)
            .and_where(Expr::col(NotifyOutbox::Id).eq(id))
            .and_where(Expr::col(NotifyOutbox::ClaimedBy).eq(holder))
            .and_where(Expr::col(NotifyOutbox::ClaimedUntil).is_not_null())
            .and_where(Expr::col(NotifyOutbox::Status).eq(notification_status::PENDING))
            .to_owned();
        match retry_at {
            Some(at) => stmt.value(NotifyOutbox::NextAttemptAt, at),
            None => stmt.value(NotifyOutbox::Status, notification_status::FAILED),
        };
        Ok(self.pool.write(&stmt).await? > 0)
    }

    /// Outbox rows, newest first, at most `limit`; only those in `status` when given.
    pub fn notifications<'a>(
        &'a self,
        status: Option<&'a str>,
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<Notification>>> {
        Box::pin(self.notifications_unboxed(status, limit))
    }

    async fn notifications_unboxed(
        &self,
        status: Option<&str>,
        limit: u64,
    ) -> Result<Vec<Notification>> {
        let mut stmt = Query::select()
            .columns(OUTBOX_COLUMNS)
            .from(NotifyOutbox::Table)
            .order_by(NotifyOutbox::Id, Order::Desc)
            .limit(limit)
            .to_owned();
        if let Some(status) = status {
            stmt.and_where(Expr::col(NotifyOutbox::Status).eq(status));
        }
        let rows: Vec<NotificationRow> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter().map(Notification::try_from).collect()
    }
}
