//! The notifier: the daemon's background service that turns what happened into messages and
//! sends them, one daemon of a store at a time.
//!
//! Each pass (`run_once`):
//! 1. takes or renews the sender's lease (`notify_sender`); a daemon without it does nothing more,
//!    and takes over once the holder's lease ran out (it died) or was given up (it stopped);
//! 2. collects notices from the order of changes (collect.rs);
//! 3. fans each new notice out into one outbox row per sink that wants it, with the message as it
//!    will be sent (a notice older than a day, found by a daemon that was stopped that long or
//!    configured after it, gets none);
//! 4. claims the rows that are due and sends them, all at once, each bounded by its sink's
//!    timeout, and marks each sent, or schedules its next try with capped exponential backoff and
//!    jitter, or marks it failed after the last try.
//!
//! Each row is marked the moment its own sink answers: the pass's other sinks, slow or hung, hold
//! up neither the mark nor each other (each try is bounded by its own sink's timeout).
//!
//! A daemon killed after a row was claimed and before it was sent leaves a claim that runs out
//! after `claim` (the sender's lease, `lease_secs`, or the slowest sink's timeout and a margin
//! when that is longer), and the row is sent then. A daemon killed after the receiver took a
//! message and before the row was marked sent sends it again after the claim runs out, with the
//! same delivery key: the one duplicate at-least-once leaves, for the receiver to drop. That
//! window is the one round trip of the mark, no longer the wait for the pass's slowest sink.

use crate::collect::collect;
use crate::config::NotifyConfig;
use crate::message::{Message, compose};
use crate::send::send;
use crate::{Error, Result};
use orchestrator_store::{NewNotification, Notification, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{NoticeKind, now_millis};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often a pass runs while nothing wakes it.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(500);
/// Rows of the order of changes read per table and pass, and outbox rows sent per pass.
pub const DEFAULT_BATCH: u64 = 100;
/// A notice older than this when it is fanned out is not sent (it would be news to nobody).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// The first retry after about this long, doubling up to [`DEFAULT_BACKOFF_CAP`].
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(2);
pub const DEFAULT_BACKOFF_CAP: Duration = Duration::from_secs(600);

/// What the notifier needs, validated by [`Notifier::new`].
#[derive(Debug, Clone)]
pub struct NotifierConfig {
    /// This daemon's name in the lease and in claims (the worker id).
    pub holder: String,
    pub notify: Arc<NotifyConfig>,
    /// The links' base, without a trailing `/`.
    pub dashboard_url: String,
    pub interval: Duration,
    pub claim: Duration,
    pub batch: u64,
    pub max_age: Duration,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
}

impl NotifierConfig {
    pub fn new(holder: impl Into<String>, notify: NotifyConfig, dashboard_url: &str) -> Self {
        let dashboard_url = notify
            .dashboard_url
            .clone()
            .unwrap_or_else(|| dashboard_url.to_owned())
            .trim_end_matches('/')
            .to_owned();
        let claim = claim_for(&notify);
        NotifierConfig {
            holder: holder.into(),
            notify: Arc::new(notify),
            dashboard_url,
            interval: DEFAULT_INTERVAL,
            claim,
            batch: DEFAULT_BATCH,
            max_age: DEFAULT_MAX_AGE,
            backoff_base: DEFAULT_BACKOFF_BASE,
            backoff_cap: DEFAULT_BACKOFF_CAP,
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassCounts {
    /// Whether this daemon holds the sender's lease (nothing else happens without it).
    pub leased: bool,
    pub collected: u64,
    /// Outbox rows made.
    pub queued: u64,
    pub sent: u64,
    /// Tries that failed and will be tried again.
    pub retried: u64,
    /// Rows that failed for good.
    pub failed: u64,
}

/// What one try of a message came to, once recorded.
enum Tried {
    Sent,
    Retried,
    Failed,
}

pub struct Notifier {
    store: Store,
    config: NotifierConfig,
    client: reqwest::Client,
    /// Until when (Unix milliseconds) this daemon's lease is surely its own without renewing
    /// it: half the lease after the last renewal. Renewing every pass would be a write (and on
    /// SQLite a sync) twice a second for nothing.
    held_until: std::sync::Mutex<i64>,
    /// Where this daemon's passes read ahead of the order of changes' horizon (PostgreSQL).
    ahead: tokio::sync::Mutex<crate::collect::Ahead>,
}

impl Notifier {
    pub fn new(store: Store, config: NotifierConfig) -> Result<Notifier> {
        config.notify.validate()?;
        if config.holder.is_empty() {
            return Err(Error::Config("the notifier needs a holder name".into()));
        }
        if config.interval.is_zero() || config.claim.is_zero() || config.batch == 0 {
            return Err(Error::Config(
                "the notifier's interval, claim and batch must be positive".into(),
            ));
        }
        Ok(Notifier {
            store,
            config,
            client: crate::send::http_client()?,
            held_until: std::sync::Mutex::new(0),
            ahead: tokio::sync::Mutex::new(crate::collect::Ahead::default()),
        })
    }

    /// One pass; see the module's comment.
    pub async fn run_once(&self) -> Result<PassCounts> {
        let mut counts = PassCounts {
            leased: self.lease().await?,
            ..PassCounts::default()
        };
        if !counts.leased {
            return Ok(counts);
        }
        let wanted = NoticeKind::ALL
            .into_iter()
            .filter(|k| self.config.notify.sinks.values().any(|s| s.wants(*k)))
            .collect();
        counts.collected = {
            let mut ahead = self.ahead.lock().await;
            collect(&self.store, self.config.batch, &wanted, &mut ahead).await?
        };
        counts.queued = self.fan_out().await?;
        self.send_due(&mut counts).await?;
        Ok(counts)
    }

    /// Runs passes until `shutdown`, then gives the lease up so another daemon takes over at
    /// once. A pass that fails (the store is away) is logged and the next one tries again.
    pub fn run(self, shutdown: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(self.run_unboxed(shutdown))
    }

    async fn run_unboxed(self, shutdown: CancellationToken) {
        loop {
            match self.run_once().await {
                Ok(counts) if counts.sent + counts.retried + counts.failed > 0 => {
                    tracing::info!(?counts, "notifications")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "notification pass failed"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(self.config.interval) => {}
            }
        }
        if let Err(e) = self.store.release_notify_sender(&self.config.holder).await {
            tracing::warn!(error = %e, "cannot give the notification lease up");
        }
    }

    /// Takes or renews the sender's lease when less than half of it is left.
    async fn lease(&self) -> Result<bool> {
        let ttl = i64::try_from(self.config.notify.lease().as_millis()).unwrap_or(i64::MAX);
        let now = now_millis();
        let held_until = *self
            .held_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if now < held_until {
            return Ok(true);
        }
        let leased = self
            .store
            .take_notify_sender(&self.config.holder, ttl)
            .await?;
        *self
            .held_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            if leased { now + ttl / 2 } else { 0 };
        Ok(leased)
    }

    async fn fan_out(&self) -> Result<u64> {
        let now = now_millis();
        let max_age = i64::try_from(self.config.max_age.as_millis()).unwrap_or(i64::MAX);
        let delay = i64::try_from(self.config.notify.delay().as_millis()).unwrap_or(0);
        let identity = self.store.identity().await?;
        let mut queued = 0;
        for notice in self.store.notices_to_fan_out(self.config.batch).await? {
            let kind = NoticeKind::parse(&notice.kind);
            let mut rows = Vec::new();
            if now.saturating_sub(notice.at) <= max_age {
                for (name, sink) in &self.config.notify.sinks {
                    if !kind.is_some_and(|k| sink.wants(k)) {
                        continue;
                    }
                    let delivery = format!(
                        "{}.{}.{name}",
                        &identity[..12.min(identity.len())],
                        notice.key
                    );
                    let message = compose(&notice, &self.config.dashboard_url, delivery.clone());
                    rows.push(NewNotification {
                        sink: name.clone(),
                        sink_kind: sink.kind.as_str().to_owned(),
                        delivery_key: delivery,
                        payload: serde_json::to_value(&message)
                            .map_err(|e| Error::Config(format!("cannot write the message: {e}")))?,
                        next_attempt_at: now + delay,
                    });
                }
            }
            queued += self.store.fan_out_notice(notice.id, &rows).await?;
        }
        Ok(queued)
    }

    async fn send_due(&self, counts: &mut PassCounts) -> Result<()> {
        let claim = i64::try_from(self.config.claim.as_millis()).unwrap_or(i64::MAX);
        let due = self
            .store
            .claim_notifications(&self.config.holder, self.config.batch, claim)
            .await?;
        // Each message is marked the moment its own sink answers, not when the slowest of the
        // pass has: a daemon killed while one sink is slow must not send again what a fast sink
        // (Slack, which has no key to drop a repeat) already took.
        let mut tries: futures_util::stream::FuturesUnordered<_> = due
            .iter()
            .map(|row| async move {
                let result = self.try_one(row).await;
                (row, self.record(row, result).await)
            })
            .collect();
        let mut first_error = None;
        while let Some((row, recorded)) = futures_util::StreamExt::next(&mut tries).await {
            match recorded {
                Ok(Tried::Sent) => counts.sent += 1,
                Ok(Tried::Retried) => counts.retried += 1,
                Ok(Tried::Failed) => counts.failed += 1,
                // The store is away: the row stays claimed and is tried again when the claim
                // runs out; the others of the pass are still recorded.
                Err(e) => {
                    tracing::warn!(id = row.id, error = %e, "a notification's outcome could not be recorded");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Records what one try of `row` did, at once.
    async fn record(&self, row: &Notification, result: Result<String>) -> Result<Tried> {
        match result {
            Ok(answer) => {
                tracing::debug!(id = row.id, sink = %row.sink, %answer, "notification sent");
                self.store
                    .notification_sent(row.id, &self.config.holder)
                    .await?;
                Ok(Tried::Sent)
            }
            Err(e) => {
                let last = row.attempts >= self.config.notify.max_attempts();
                let retry_at = (!last && e.retryable())
                    .then(|| now_millis() + self.backoff_millis(row.attempts));
                tracing::warn!(id = row.id, sink = %row.sink, attempt = row.attempts,
                    error = %e, will_retry = retry_at.is_some(), "notification not sent");
                self.store
                    .notification_failed(row.id, &self.config.holder, &e.to_string(), retry_at)
                    .await?;
                Ok(if retry_at.is_some() {
                    Tried::Retried
                } else {
                    Tried::Failed
                })
            }
        }
    }

    async fn try_one(&self, row: &Notification) -> Result<String> {
        let sink = self.config.notify.sink(&row.sink)?;
        let message: Message = serde_json::from_value(row.payload.clone())
            .map_err(|e| Error::Config(format!("outbox row {} is not a message: {e}", row.id)))?;
        send(&self.client, &row.sink, sink, &message).await
    }

    /// `base * 2^(attempt-1)`, capped, scaled by a random factor in 0.8..1.2 so that messages
    /// that failed together do not all come back together.
    fn backoff_millis(&self, attempt: i64) -> i64 {
        backoff_millis(
            self.config.backoff_base,
            self.config.backoff_cap,
            attempt,
            rand::random::<f64>(),
        )
    }
}

/// How long a claimed message stays the claimer's: the sender's lease, but never shorter than
/// the slowest sink's timeout and a margin (a claim that ran out while its try still waited for
/// an answer would let another daemon send the message beside it).
pub fn claim_for(notify: &NotifyConfig) -> Duration {
    let slowest = notify
        .sinks
        .values()
        .map(|s| s.timeout())
        .max()
        .unwrap_or_default();
    notify.lease().max(slowest + Duration::from_secs(5))
}

/// The wait before the try after `attempt` (1-based), for a random draw in [0, 1).
pub fn backoff_millis(base: Duration, cap: Duration, attempt: i64, draw: f64) -> i64 {
    let exponent = attempt.saturating_sub(1).clamp(0, 30) as u32;
    let grown = base.as_millis() as f64 * f64::from(2u32.saturating_pow(exponent));
    let capped = grown.min(cap.as_millis() as f64);
    (capped * (0.8 + 0.4 * draw.clamp(0.0, 1.0))).round() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_then_caps_with_jitter_around_it() {
        let (base, cap) = (Duration::from_secs(2), Duration::from_secs(60));
        let middle: Vec<i64> = (1..=7).map(|a| backoff_millis(base, cap, a, 0.5)).collect();
        assert_eq!(
            middle,
            [2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
        );
        assert_eq!(backoff_millis(base, cap, 1, 0.0), 1_600);
        assert_eq!(backoff_millis(base, cap, 1, 1.0), 2_400);
    }
}
