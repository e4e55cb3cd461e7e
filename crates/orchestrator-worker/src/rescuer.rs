//! The rescuer: takes back tasks whose lease expired because their worker died or lost the database.
//!
//! Any `serve` process may run it; the store's fences make concurrent rescuers safe (on PostgreSQL
//! they skip each other's locked rows). A rescued task goes back to the queue with backoff, or fails
//! once its attempts are spent, or ends canceled if a cancel was pending.

use crate::backoff::Backoff;
use crate::metrics::Metrics;
use crate::{Error, Result};
use orchestrator_store::{RescueCounts, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::now_millis;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often to look for expired leases by default.
pub const DEFAULT_RESCUE_INTERVAL: Duration = Duration::from_secs(5);
/// Most tasks taken back per pass; the next pass takes the rest.
pub const DEFAULT_RESCUE_BATCH: u64 = 1000;

#[derive(Debug, Clone)]
pub struct RescuerConfig {
    pub interval: Duration,
    pub batch: u64,
    pub backoff: Backoff,
}

impl Default for RescuerConfig {
    fn default() -> Self {
        RescuerConfig {
            interval: DEFAULT_RESCUE_INTERVAL,
            batch: DEFAULT_RESCUE_BATCH,
            backoff: Backoff::default(),
        }
    }
}

#[derive(Debug)]
pub struct Rescuer {
    store: Store,
    config: RescuerConfig,
    metrics: Arc<Metrics>,
}

impl Rescuer {
    pub fn new(store: Store, config: RescuerConfig, metrics: Arc<Metrics>) -> Result<Self> {
        if config.interval.is_zero() || config.batch == 0 {
            return Err(Error::Config(
                "rescuer interval and batch must be positive".into(),
            ));
        }
        Ok(Rescuer {
            store,
            config,
            metrics,
        })
    }

    /// One pass at time `now`: expired leases are taken back, approvals and questions that
    /// nobody answered in time are denied (their tasks resume and the model is told), and on
    /// SQLite the titles of the tasks created since the last pass are written to the search index
    /// (`Store::index_titles`).
    pub async fn run_once(&self, now: i64) -> Result<RescueCounts> {
        let expired = self.store.expire_approvals(now, self.config.batch).await?;
        if expired > 0 {
            tracing::info!(expired, "approvals expired without an answer");
        }
        let backoff = self.config.backoff;
        let counts = self
            .store
            .rescue_expired(now, self.config.batch, |attempt| {
                backoff.delay_millis(attempt)
            })
            .await?;
        let total = counts.requeued + counts.failed + counts.canceled;
        if total > 0 {
            self.metrics.rescued.fetch_add(total, Ordering::Relaxed);
            tracing::info!(
                requeued = counts.requeued,
                failed = counts.failed,
                canceled = counts.canceled,
                "rescued tasks with expired leases"
            );
        }
        let woken = self.store.wake_settled_leads().await?;
        if woken > 0 {
            tracing::info!(woken, "best-of leads woken whose siblings all ended");
        }
        let indexed = self.store.index_titles().await?;
        if indexed > 0 {
            tracing::debug!(indexed, "titles indexed for search");
        }
        Ok(counts)
    }

    /// Passes every `interval` until `shutdown`. Store errors are logged and the next pass retries.
    pub fn run(self, shutdown: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(self.run_unboxed(shutdown))
    }

    async fn run_unboxed(self, shutdown: CancellationToken) {
        loop {
            match self.run_once(now_millis()).await {
                Ok(counts)
                    if counts.requeued + counts.failed + counts.canceled >= self.config.batch =>
                {
                    // A full batch: there may be more right now.
                    continue;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "rescuer pass failed; retrying"),
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.config.interval) => {}
            }
        }
    }
}
