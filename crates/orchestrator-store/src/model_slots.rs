//! Limits on a model server, shared by every daemon on the store: the requests in flight at once,
//! requests and tokens per minute, and one wait for every task when the server says it is
//! overloaded.
//!
//! A request takes a slot ([`Store::try_model_slot`]) before it is sent and releases it
//! ([`Store::release_model_slot`]) with how the server answered. The decision is made in one
//! transaction that holds the server's row (locked on PostgreSQL; SQLite's write transactions are
//! one at a time), so two daemons cannot both take the last slot.
//!
//! - In flight: slots not released, sent within [`SLOT_HELD_MS`], whose holder is not a worker
//!   known to have stopped or gone silent (a killed daemon's slots free themselves when its
//!   heartbeat ages out).
//! - The limit in flight starts at the configured ceiling. A 429 or an overload halves it (once per
//!   wait) and makes every task on the server wait: the server's `Retry-After`, else a wait that
//!   doubles with each throttle in a row. Each answer raises it by a thousandth of a slot per slot
//!   (one slot per limit's worth of answers), never above the ceiling: a server whose capacity is
//!   below the configured limit is found, and the limit comes back when it recovers.
//! - Per minute: the slots sent in the last minute, and their tokens (the prompt's estimate plus
//!   the reply's limit, settled with the usage the server reported).
//!
//! A request that must wait leaves a row in `model_waiters`, so the task can say what it waits for
//! and how many requests are ahead of it.

use crate::exec::Tx;
use crate::{Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{TaskId, now_millis};
use sea_query::{Expr, ExprTrait, Func, Iden, OnConflict, Order, Query};
use serde::Serialize;

/// A slot not released after this long is no longer counted (its holder lost it).
pub const SLOT_HELD_MS: i64 = 30 * 60_000;
/// A slot of a holder that is no registered worker (`orchestrator run`) counts this long at most:
/// no heartbeat says when such a process died.
const UNREGISTERED_SLOT_MS: i64 = 10 * 60_000;
/// A waiter whose process has not asked for this long is not counted ahead of anyone.
pub const WAITER_SEEN_MS: i64 = 30_000;
/// The window of the per-minute limits.
const MINUTE_MS: i64 = 60_000;
/// The first wait after a throttle without `Retry-After`; it doubles with each throttle in a row.
const FIRST_PAUSE_MS: i64 = 1_000;
/// Bounds of a pause, whatever the server's `Retry-After` says: a server cannot hold every task
/// of every daemon for longer than a minute at a time, nor make them hammer it at once.
const MIN_PAUSE_MS: i64 = 100;
const MAX_PAUSE_MS: i64 = 60_000;

#[derive(Iden, Clone, Copy)]
enum ModelServers {
    Table,
    Server,
    LimitMilli,
    PausedUntil,
    Streak,
    Throttled,
    LastThrottledAt,
    UpdatedAt,
}

#[derive(Iden, Clone, Copy)]
enum ModelSlots {
    Table,
    Id,
    Server,
    Holder,
    TaskId,
    Tokens,
    TakenAt,
    ReleasedAt,
}

#[derive(Iden, Clone, Copy)]
enum ModelWaiters {
    Table,
    Server,
    Ticket,
    Holder,
    TaskId,
    Since,
    SeenAt,
    Cause,
    UntilAt,
}

/// What a model server takes, as configured; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ServerLimits {
    pub max_in_flight: Option<u32>,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
}

/// One request asking for a slot.
#[derive(Debug, Clone, Copy)]
pub struct SlotRequest<'a> {
    /// The server's name (its `[model_servers]` name, else its base URL).
    pub server: &'a str,
    pub limits: ServerLimits,
    /// The process asking (its worker id).
    pub holder: &'a str,
    /// Unique to this request while it waits.
    pub ticket: &'a str,
    pub task: Option<TaskId>,
    /// The prompt's estimate plus the reply's limit.
    pub tokens: u64,
}

/// Why a request waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitCause {
    /// Every slot is in use.
    Slots,
    /// The server said 429 or overloaded: every task waits until `until`.
    Paused,
    /// The requests per minute are spent.
    Requests,
    /// The tokens per minute are spent.
    Tokens,
}

impl WaitCause {
    fn as_str(self) -> &'static str {
        match self {
            WaitCause::Slots => "slots",
            WaitCause::Paused => "paused",
            WaitCause::Requests => "requests",
            WaitCause::Tokens => "tokens",
        }
    }

    fn parse(text: &str) -> Option<WaitCause> {
        [
            WaitCause::Slots,
            WaitCause::Paused,
            WaitCause::Requests,
            WaitCause::Tokens,
        ]
        .into_iter()
        .find(|c| c.as_str() == text)
    }
}

/// A request waiting for its server, with what a person needs to know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelWait {
    pub server: String,
    pub cause: WaitCause,
    pub in_flight: i64,
    /// The limit in flight now (below the ceiling after the server pushed back).
    pub limit: Option<i64>,
    /// Requests waiting for this server that began waiting before this one.
    pub ahead: i64,
    /// When the wait ends at the latest, when that is known (a pause, a per-minute window).
    pub until: Option<i64>,
}

impl ModelWait {
    /// One line: "waiting for the model server llama-local: 4 of 4 slots in use, 17 tasks ahead".
    pub fn describe(&self, now: i64) -> String {
        let ahead = match self.ahead {
            0 => "first in line".to_owned(),
            1 => "1 request ahead".to_owned(),
            n => format!("{n} requests ahead"),
        };
        let secs = |until: Option<i64>| {
            until.map_or_else(String::new, |u| {
                format!(" for {:.1} s more", Ord::max(u - now, 0) as f64 / 1000.0)
            })
        };
        let what = match self.cause {
            WaitCause::Slots => format!(
                "{} of {} slots in use",
                self.in_flight,
                self.limit.unwrap_or(self.in_flight)
            ),
            WaitCause::Paused => format!(
                "the server asked to slow down (429 or overloaded), every task waits{}",
                secs(self.until)
            ),
            WaitCause::Requests => format!("its requests per minute are spent{}", secs(self.until)),
            WaitCause::Tokens => {
                format!("its tokens per minute are spent{}", secs(self.until))
            }
        };
        format!(
            "waiting for the model server {}: {what}, {ahead}",
            self.server
        )
    }
}

/// The answer to [`Store::try_model_slot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotTry {
    /// The request may be sent; release this slot when it is answered.
    Granted(i64),
    Wait(ModelWait),
}

/// How the server answered the request of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotEnd {
    /// It answered; `tokens` is the usage it reported, if it did.
    Answered { tokens: Option<u64> },
    /// 429 or overloaded: every task on the server waits, `retry_after_ms` if it said.
    Throttled { retry_after_ms: Option<i64> },
    /// Anything else (a cut stream, a refused request): only the slot is freed.
    Failed,
}

/// A server as the daemons see it together, for `status` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelServerState {
    pub server: String,
    pub in_flight: i64,
    /// The limit in flight now, in slots (fractions kept in thousandths).
    pub limit: f64,
    pub waiting: i64,
    pub requests_last_minute: i64,
    pub tokens_last_minute: i64,
    /// 429s and overloads so far.
    pub throttled: i64,
    pub last_throttled_at: Option<i64>,
    pub paused_until: Option<i64>,
}

/// The server's row, made with the configured ceiling the first time.
struct ServerRow {
    limit_milli: i64,
    paused_until: i64,
    streak: i64,
}

async fn server_row(
    tx: &mut Tx,
    server: &str,
    ceiling: Option<u32>,
    now: i64,
) -> Result<ServerRow> {
    let start = i64::from(ceiling.unwrap_or(0)) * 1000;
    let insert = Query::insert()
        .into_table(ModelServers::Table)
        .columns([
            ModelServers::Server,
            ModelServers::LimitMilli,
            ModelServers::PausedUntil,
            ModelServers::Streak,
            ModelServers::Throttled,
            ModelServers::UpdatedAt,
        ])
        .values_panic([
            server.into(),
            start.into(),
            0.into(),
            0.into(),
            0.into(),
            now.into(),
        ])
        .on_conflict(
            OnConflict::column(ModelServers::Server)
                .do_nothing()
                .to_owned(),
        )
        .to_owned();
    tx.execute(&insert).await?;
    let mut select = Query::select();
    select
        .columns([
            ModelServers::LimitMilli,
            ModelServers::PausedUntil,
            ModelServers::Streak,
        ])
        .from(ModelServers::Table)
        .and_where(Expr::col(ModelServers::Server).eq(server));
    if let Tx::Postgres(_) = tx {
        select.lock(sea_query::LockType::Update);
    }
    let (limit_milli, paused_until, streak): (i64, i64, i64) = tx
        .fetch_optional(&select)
        .await?
        .ok_or_else(|| crate::Error::Migration("the model server's row is gone".into()))?;
    // The ceiling is the configuration's, which may have changed since the row was made.
    let limit_milli = match ceiling {
        Some(c) => limit_milli.clamp(1000, i64::from(c) * 1000),
        None => 0,
    };
    Ok(ServerRow {
        limit_milli,
        paused_until,
        streak,
    })
}

/// The slots of `server` counted in flight at `now`.
fn in_flight_where(server: &str, now: i64) -> sea_query::SelectStatement {
    let gone = Query::select()
        .expr(Expr::val(1))
        .from(Workers::Table)
        .and_where(
            Expr::col((Workers::Table, Workers::Id))
                .equals((ModelSlots::Table, ModelSlots::Holder)),
        )
        .and_where(
            Expr::col((Workers::Table, Workers::StoppedAt))
                .is_not_null()
                .or(Expr::col((Workers::Table, Workers::HeartbeatAt))
                    .lt(now - crate::LIVE_WITHIN_MS)),
        )
        .to_owned();
    let registered = Query::select()
        .expr(Expr::val(1))
        .from(Workers::Table)
        .and_where(
            Expr::col((Workers::Table, Workers::Id))
                .equals((ModelSlots::Table, ModelSlots::Holder)),
        )
        .to_owned();
    Query::select()
        .expr(Func::count(Expr::col((ModelSlots::Table, ModelSlots::Id))))
        .from(ModelSlots::Table)
        .and_where(Expr::col((ModelSlots::Table, ModelSlots::Server)).eq(server))
        .and_where(Expr::col((ModelSlots::Table, ModelSlots::ReleasedAt)).is_null())
        .and_where(Expr::col((ModelSlots::Table, ModelSlots::TakenAt)).gt(now - SLOT_HELD_MS))
        .and_where(Expr::exists(gone).not())
        .and_where(
            Expr::exists(registered)
                .or(Expr::col((ModelSlots::Table, ModelSlots::TakenAt))
                    .gt(now - UNREGISTERED_SLOT_MS)),
        )
        .to_owned()
}

#[derive(Iden, Clone, Copy)]
enum Workers {
    Table,
    Id,
    StoppedAt,
    HeartbeatAt,
}

/// Requests sent to `server` in the last minute, their tokens, and the oldest of them.
async fn last_minute(tx: &mut Tx, server: &str, now: i64) -> Result<(i64, i64, Option<i64>)> {
    let stmt = Query::select()
        .expr(Func::count(Expr::col(ModelSlots::Id)))
        .expr(tokens_sum())
        .expr(Func::min(Expr::col(ModelSlots::TakenAt)))
        .from(ModelSlots::Table)
        .and_where(Expr::col(ModelSlots::Server).eq(server))
        .and_where(Expr::col(ModelSlots::TakenAt).gt(now - MINUTE_MS))
        .to_owned();
    let row: Option<(i64, i64, Option<i64>)> = tx.fetch_optional(&stmt).await?;
    Ok(row.unwrap_or((0, 0, None)))
}

/// The tokens of the slots selected, 0 for none, as a 64-bit integer on both backends
/// (PostgreSQL's SUM of a BIGINT is a NUMERIC).
fn tokens_sum() -> Expr {
    Expr::cust("CAST(COALESCE(SUM(\"tokens\"), 0) AS BIGINT)")
}

async fn count(tx: &mut Tx, stmt: &sea_query::SelectStatement) -> Result<i64> {
    let row: Option<(i64,)> = tx.fetch_optional(stmt).await?;
    Ok(row.map_or(0, |(n,)| n))
}

/// Waiters of `server` still asking, that began before `since`.
fn ahead_of(server: &str, since: i64, now: i64) -> sea_query::SelectStatement {
    Query::select()
        .expr(Func::count(Expr::col(ModelWaiters::Ticket)))
        .from(ModelWaiters::Table)
        .and_where(Expr::col(ModelWaiters::Server).eq(server))
        .and_where(Expr::col(ModelWaiters::Since).lt(since))
        .and_where(Expr::col(ModelWaiters::SeenAt).gt(now - WAITER_SEEN_MS))
        .to_owned()
}

impl Store {
    /// Takes a slot on the request's server if its limits allow one now; else records the
    /// request as waiting (once; later calls keep its place) and says why it waits.
    pub fn try_model_slot<'a>(
        &'a self,
        request: &'a SlotRequest<'a>,
    ) -> BoxFuture<'a, Result<SlotTry>> {
        Box::pin(self.try_model_slot_unboxed(request))
    }

    async fn try_model_slot_unboxed(&self, request: &SlotRequest<'_>) -> Result<SlotTry> {
        let now = now_millis();
        let server = request.server;
        let mut tx = self.pool.begin().await?;
        let row = server_row(&mut tx, server, request.limits.max_in_flight, now).await?;
        let in_flight = count(&mut tx, &in_flight_where(server, now)).await?;
        let (sent, tokens, oldest) = last_minute(&mut tx, server, now).await?;
        let window_ends = oldest.map(|t| t + MINUTE_MS);
        let limit = request
            .limits
            .max_in_flight
            .map(|_| Ord::max(row.limit_milli / 1000, 1));
        // Requests of other daemons that began waiting first go first: a daemon whose own
        // releases wake it at once must not take every freed slot from the others. A daemon's
        // place is its oldest waiting request's (its own line is first come first served).
        let since = holder_since(&mut tx, request, now).await?.unwrap_or(now);
        let others_first = count(&mut tx, &others_ahead(request, since, now)).await? > 0;
        let cause = if row.paused_until > now {
            Some((WaitCause::Paused, Some(row.paused_until)))
        } else if limit.is_some_and(|l| in_flight >= l) || others_first {
            Some((WaitCause::Slots, None))
        } else if request
            .limits
            .requests_per_minute
            .is_some_and(|r| sent >= i64::from(r))
        {
            Some((WaitCause::Requests, window_ends))
        } else if request.limits.tokens_per_minute.is_some_and(|t| {
            // A request larger than the whole budget goes alone rather than never.
            tokens > 0 && tokens.saturating_add(request.tokens as i64) > t as i64
        }) {
            Some((WaitCause::Tokens, window_ends))
        } else {
            None
        };
        let Some((cause, until)) = cause else {
            let insert = Query::insert()
                .into_table(ModelSlots::Table)
                .columns([
                    ModelSlots::Server,
                    ModelSlots::Holder,
                    ModelSlots::TaskId,
                    ModelSlots::Tokens,
                    ModelSlots::TakenAt,
                ])
                .values_panic([
                    server.into(),
                    request.holder.into(),
                    request.task.map(|t| t.0).into(),
                    (request.tokens as i64).into(),
                    now.into(),
                ])
                .returning_col(ModelSlots::Id)
                .to_owned();
            let (slot,): (i64,) = tx
                .fetch_optional(&insert)
                .await?
                .ok_or_else(|| crate::Error::Migration("the slot insert returned no id".into()))?;
            let done = Query::delete()
                .from_table(ModelWaiters::Table)
                .and_where(Expr::col(ModelWaiters::Server).eq(server))
                .and_where(Expr::col(ModelWaiters::Ticket).eq(request.ticket))
                .to_owned();
            tx.execute(&done).await?;
            prune(&mut tx, server, now).await?;
            tx.commit().await?;
            return Ok(SlotTry::Granted(slot));
        };
        let since = wait_in_line(&mut tx, request, now, Some((cause, until))).await?;
        let ahead = count(&mut tx, &ahead_of(server, since, now)).await?;
        tx.commit().await?;
        Ok(SlotTry::Wait(ModelWait {
            server: server.to_owned(),
            cause,
            in_flight,
            limit,
            ahead,
            until,
        }))
    }

    /// Frees a slot, and tells the server's row how the server answered.
    pub fn release_model_slot<'a>(
        &'a self,
        server: &'a str,
        limits: ServerLimits,
        slot: i64,
        end: SlotEnd,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.release_model_slot_unboxed(server, limits, slot, end))
    }

    async fn release_model_slot_unboxed(
        &self,
        server: &str,
        limits: ServerLimits,
        slot: i64,
        end: SlotEnd,
    ) -> Result<()> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let row = server_row(&mut tx, server, limits.max_in_flight, now).await?;
        let mut release = Query::update();
        release
            .table(ModelSlots::Table)
            .value(ModelSlots::ReleasedAt, now)
            .and_where(Expr::col(ModelSlots::Id).eq(slot));
        if let SlotEnd::Answered {
            tokens: Some(tokens),
        } = end
        {
            release.value(ModelSlots::Tokens, tokens as i64);
        }
        tx.execute(&release).await?;
        let ceiling = i64::from(limits.max_in_flight.unwrap_or(0)) * 1000;
        let mut update = Query::update();
        update
            .table(ModelServers::Table)
            .value(ModelServers::UpdatedAt, now)
            .and_where(Expr::col(ModelServers::Server).eq(server));
        match end {
            SlotEnd::Answered { .. } => {
                // Without a ceiling here (this daemon's config names none) the limit another
                // daemon keeps is left as it is.
                if ceiling > 0 {
                    let raised = Ord::min(
                        Ord::max(row.limit_milli, 1000)
                            + 1_000_000 / Ord::max(row.limit_milli, 1000),
                        ceiling,
                    );
                    update.value(ModelServers::LimitMilli, raised);
                }
                update.value(ModelServers::Streak, 0);
            }
            SlotEnd::Throttled { retry_after_ms } => {
                let backoff = Ord::min(
                    FIRST_PAUSE_MS.saturating_mul(1 << row.streak.clamp(0, 6)),
                    MAX_PAUSE_MS,
                );
                let pause = retry_after_ms
                    .unwrap_or(backoff)
                    .clamp(MIN_PAUSE_MS, MAX_PAUSE_MS);
                let until = now.saturating_add(pause);
                // One decrease per pause: the other requests that were in flight when the server
                // pushed back say the same thing again.
                if row.paused_until <= now {
                    if ceiling > 0 {
                        update.value(
                            ModelServers::LimitMilli,
                            Ord::max(row.limit_milli / 2, 1000),
                        );
                    }
                    update.value(ModelServers::Streak, row.streak + 1);
                }
                update
                    .value(ModelServers::PausedUntil, Ord::max(until, row.paused_until))
                    .value(
                        ModelServers::Throttled,
                        Expr::col(ModelServers::Throttled).add(1),
                    )
                    .value(ModelServers::LastThrottledAt, now);
            }
            SlotEnd::Failed => {}
        }
        tx.execute(&update).await?;
        tx.commit().await
    }

    /// Records a request as waiting for a slot on its server without asking for one (others of
    /// its process are ahead of it).
    pub fn join_model_queue<'a>(
        &'a self,
        request: &'a SlotRequest<'a>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.join_model_queue_unboxed(request))
    }

    async fn join_model_queue_unboxed(&self, request: &SlotRequest<'_>) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        wait_in_line(&mut tx, request, now_millis(), None).await?;
        tx.commit().await
    }

    /// Forgets a waiting request (its task stopped waiting).
    pub fn leave_model_queue<'a>(
        &'a self,
        server: &'a str,
        ticket: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.leave_model_queue_unboxed(server, ticket))
    }

    async fn leave_model_queue_unboxed(&self, server: &str, ticket: &str) -> Result<()> {
        let stmt = Query::delete()
            .from_table(ModelWaiters::Table)
            .and_where(Expr::col(ModelWaiters::Server).eq(server))
            .and_where(Expr::col(ModelWaiters::Ticket).eq(ticket))
            .to_owned();
        self.pool.write(&stmt).await?;
        Ok(())
    }

    /// What `task` waits for, when one of its requests waits for a model server.
    pub fn model_wait_of<'a>(&'a self, task: TaskId) -> BoxFuture<'a, Result<Option<ModelWait>>> {
        Box::pin(self.model_wait_of_unboxed(task))
    }

    async fn model_wait_of_unboxed(&self, task: TaskId) -> Result<Option<ModelWait>> {
        let now = now_millis();
        let waiting = Query::select()
            .columns([
                ModelWaiters::Server,
                ModelWaiters::Since,
                ModelWaiters::Cause,
                ModelWaiters::UntilAt,
            ])
            .from(ModelWaiters::Table)
            .and_where(Expr::col(ModelWaiters::TaskId).eq(task.0))
            .and_where(Expr::col(ModelWaiters::SeenAt).gt(now - WAITER_SEEN_MS))
            .order_by(ModelWaiters::Since, Order::Asc)
            .limit(1)
            .to_owned();
        let Some((server, since, cause, until)): Option<(String, i64, String, Option<i64>)> =
            self.pool.fetch_optional(&waiting).await?
        else {
            return Ok(None);
        };
        let state = self.model_server_state(&server).await?;
        let ahead: Option<(i64,)> = self
            .pool
            .fetch_optional(&ahead_of(&server, since, now))
            .await?;
        let Some(state) = state else {
            return Ok(None);
        };
        // The cause its last ask was told; a pause the server asked for since overrides it.
        let paused = state.paused_until.filter(|u| *u > now);
        let (cause, until) = match paused {
            Some(until) => (WaitCause::Paused, Some(until)),
            None => (
                WaitCause::parse(&cause).unwrap_or(WaitCause::Slots),
                until.filter(|u| *u > now),
            ),
        };
        Ok(Some(ModelWait {
            cause,
            server,
            in_flight: state.in_flight,
            limit: (state.limit > 0.0).then(|| Ord::max(state.limit as i64, 1)),
            ahead: ahead.map_or(0, |(n,)| n),
            until,
        }))
    }

    /// Every model server the daemons have sent requests to, as they see it together.
    pub fn model_servers<'a>(&'a self) -> BoxFuture<'a, Result<Vec<ModelServerState>>> {
        Box::pin(self.model_servers_unboxed())
    }

    async fn model_servers_unboxed(&self) -> Result<Vec<ModelServerState>> {
        let names = Query::select()
            .column(ModelServers::Server)
            .from(ModelServers::Table)
            .order_by(ModelServers::Server, Order::Asc)
            .to_owned();
        let names: Vec<(String,)> = self.pool.fetch_all(&names).await?;
        let mut servers = Vec::with_capacity(names.len());
        for (name,) in names {
            if let Some(state) = self.model_server_state(&name).await? {
                servers.push(state);
            }
        }
        Ok(servers)
    }

    async fn model_server_state(&self, server: &str) -> Result<Option<ModelServerState>> {
        let now = now_millis();
        let row = Query::select()
            .columns([
                ModelServers::LimitMilli,
                ModelServers::PausedUntil,
                ModelServers::Throttled,
                ModelServers::LastThrottledAt,
            ])
            .from(ModelServers::Table)
            .and_where(Expr::col(ModelServers::Server).eq(server))
            .to_owned();
        let Some((limit_milli, paused_until, throttled, last_throttled_at)): Option<(
            i64,
            i64,
            i64,
            Option<i64>,
        )> = self.pool.fetch_optional(&row).await?
        else {
            return Ok(None);
        };
        let in_flight: Option<(i64,)> = self
            .pool
            .fetch_optional(&in_flight_where(server, now))
            .await?;
        let waiting: Option<(i64,)> = self
            .pool
            .fetch_optional(&ahead_of(server, i64::MAX, now))
            .await?;
        let minute = Query::select()
            .expr(Func::count(Expr::col(ModelSlots::Id)))
            .expr(tokens_sum())
            .from(ModelSlots::Table)
            .and_where(Expr::col(ModelSlots::Server).eq(server))
            .and_where(Expr::col(ModelSlots::TakenAt).gt(now - MINUTE_MS))
            .to_owned();
        let (sent, tokens): (i64, i64) = self.pool.fetch_optional(&minute).await?.unwrap_or((0, 0));
        Ok(Some(ModelServerState {
            server: server.to_owned(),
            in_flight: in_flight.map_or(0, |(n,)| n),
            limit: limit_milli as f64 / 1000.0,
            waiting: waiting.map_or(0, |(n,)| n),
            requests_last_minute: sent,
            tokens_last_minute: tokens,
            throttled,
            last_throttled_at,
            paused_until: (paused_until > 0).then_some(paused_until),
        }))
    }
}

/// When the oldest request of the request's process still asking began waiting, if one waits.
async fn holder_since(tx: &mut Tx, request: &SlotRequest<'_>, now: i64) -> Result<Option<i64>> {
    let since = Query::select()
        .expr(Func::min(Expr::col(ModelWaiters::Since)))
        .from(ModelWaiters::Table)
        .and_where(Expr::col(ModelWaiters::Server).eq(request.server))
        .and_where(Expr::col(ModelWaiters::Holder).eq(request.holder))
        .and_where(Expr::col(ModelWaiters::SeenAt).gt(now - WAITER_SEEN_MS))
        .to_owned();
    let row: Option<(Option<i64>,)> = tx.fetch_optional(&since).await?;
    Ok(row.and_then(|(s,)| s))
}

/// Requests of other processes on the request's server still asking, that began waiting before
/// `since`.
fn others_ahead(request: &SlotRequest<'_>, since: i64, now: i64) -> sea_query::SelectStatement {
    let mut stmt = ahead_of(request.server, since, now);
    stmt.and_where(Expr::col(ModelWaiters::Holder).ne(request.holder));
    stmt
}

/// Records the request as waiting, keeping its place, with why it waits (`told`: the cause and
/// until when; `None` behind others of its process), and marks every waiter of its process on
/// the server as still asking (one of them polls for all). Returns when it began waiting.
async fn wait_in_line(
    tx: &mut Tx,
    request: &SlotRequest<'_>,
    now: i64,
    told: Option<(WaitCause, Option<i64>)>,
) -> Result<i64> {
    let (cause, until) = told.unwrap_or((WaitCause::Slots, None));
    let insert = Query::insert()
        .into_table(ModelWaiters::Table)
        .columns([
            ModelWaiters::Server,
            ModelWaiters::Ticket,
            ModelWaiters::Holder,
            ModelWaiters::TaskId,
            ModelWaiters::Since,
            ModelWaiters::SeenAt,
            ModelWaiters::Cause,
            ModelWaiters::UntilAt,
        ])
        .values_panic([
            request.server.into(),
            request.ticket.into(),
            request.holder.into(),
            request.task.map(|t| t.0).into(),
            now.into(),
            now.into(),
            cause.as_str().into(),
            until.into(),
        ])
        .on_conflict(
            OnConflict::columns([ModelWaiters::Server, ModelWaiters::Ticket])
                .update_columns([ModelWaiters::Cause, ModelWaiters::UntilAt])
                .to_owned(),
        )
        .to_owned();
    tx.execute(&insert).await?;
    // Only the process's first in line marks the others (`told` is set when it asks): two
    // transactions each updating the same rows in their own order would deadlock.
    if told.is_some() {
        let seen = Query::update()
            .table(ModelWaiters::Table)
            .value(ModelWaiters::SeenAt, now)
            .and_where(Expr::col(ModelWaiters::Server).eq(request.server))
            .and_where(Expr::col(ModelWaiters::Holder).eq(request.holder))
            .to_owned();
        tx.execute(&seen).await?;
    }
    let since = Query::select()
        .column(ModelWaiters::Since)
        .from(ModelWaiters::Table)
        .and_where(Expr::col(ModelWaiters::Server).eq(request.server))
        .and_where(Expr::col(ModelWaiters::Ticket).eq(request.ticket))
        .to_owned();
    let row: Option<(i64,)> = tx.fetch_optional(&since).await?;
    Ok(row.map_or(now, |(s,)| s))
}

/// Drops what no limit reads any more: released slots older than the minute's window, slots
/// past [`SLOT_HELD_MS`], waiters that stopped asking.
async fn prune(tx: &mut Tx, server: &str, now: i64) -> Result<()> {
    let slots = Query::delete()
        .from_table(ModelSlots::Table)
        .and_where(Expr::col(ModelSlots::Server).eq(server))
        .and_where(
            Expr::col(ModelSlots::TakenAt)
                .lt(now - SLOT_HELD_MS)
                .or(Expr::col(ModelSlots::ReleasedAt)
                    .is_not_null()
                    .and(Expr::col(ModelSlots::TakenAt).lt(now - MINUTE_MS))),
        )
        .to_owned();
    tx.execute(&slots).await?;
    let waiters = Query::delete()
        .from_table(ModelWaiters::Table)
        .and_where(Expr::col(ModelWaiters::Server).eq(server))
        .and_where(Expr::col(ModelWaiters::SeenAt).lt(now - WAITER_SEEN_MS))
        .to_owned();
    tx.execute(&waiters).await?;
    Ok(())
}
