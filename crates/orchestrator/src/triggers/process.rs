//! The background processor of the delivery ledger: accepted deliveries, failures that may pass
//! (tried again with a growing wait), and claims a dead daemon left behind.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use orchestrator_store::DeliveryInfo;
use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{Delivered, DeliveryError, Triggers};

/// The longest one delivery's processing (its GitHub calls, its tasks' insertion) may take before
/// it fails with an error that may pass, and is tried again.
const PROCESSING_DEADLINE: Duration = Duration::from_secs(60);
/// A `processing` delivery untouched for this long belongs to a process that died: the
/// background processor, or a redelivery, takes it over. Twice the deadline, because a live
/// processor has given up by then; a slow one that outlives it anyway is refused by the claim
/// token, so the window decides only how long a dead daemon's delivery waits.
pub(super) const STALE_PROCESSING: Duration =
    Duration::from_secs(2 * PROCESSING_DEADLINE.as_secs());

/// How the background processor tries a failed webhook delivery again, and when a `processing`
/// one counts as abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryRetry {
    /// The wait before the second try; it doubles for each try after, up to [`MAX_RETRY_WAIT`].
    pub first_wait: Duration,
    /// Tries in all, the first included, for a failure that may pass.
    pub tries: i64,
    /// A delivery `processing` for longer than this belongs to a process that died: another
    /// takes it over.
    pub stale_after: Duration,
    /// The longest one try may take; past it the try fails with an error that may pass.
    pub deadline: Duration,
}

/// The longest wait between two tries of a delivery.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(3600);

impl Default for DeliveryRetry {
    fn default() -> Self {
        DeliveryRetry {
            first_wait: Duration::from_secs(30),
            tries: 6,
            stale_after: STALE_PROCESSING,
            deadline: PROCESSING_DEADLINE,
        }
    }
}

impl DeliveryRetry {
    /// When the failure of try `tried` (1 for the first) is tried again, in Unix milliseconds;
    /// `None` when it is not tried again by itself.
    pub(super) fn next(&self, tried: i64, error: &DeliveryError, now: i64) -> Option<i64> {
        if !error.may_pass() || tried >= self.tries {
            return None;
        }
        let doublings = u32::try_from(tried.saturating_sub(1).clamp(0, 20)).unwrap_or(20);
        let wait = self
            .first_wait
            .saturating_mul(1u32 << doublings)
            .min(MAX_RETRY_WAIT);
        Some(now.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)))
    }
}

/// How often the background processor looks for due deliveries when nothing wakes it: retries
/// coming due, abandoned claims, and deliveries another daemon on the same store accepted.
const PROCESS_TICK: Duration = Duration::from_secs(1);
/// Deliveries processed at once: one whose GitHub call hangs until its deadline holds up only
/// itself and those about the same issue.
const PROCESS_CONCURRENCY: usize = 16;
/// Deliveries read per look: more than run at once, so that deliveries waiting behind another about
/// the same issue do not hide the rest.
const PROCESS_BATCH: u64 = 64;

/// Processes accepted webhook deliveries from the ledger until `stop`: at once when `wake` is
/// notified (the webhook route just accepted one), else every [`PROCESS_TICK`]. Deliveries a
/// previous run accepted and never finished are found the same way, so a restart loses none.
///
/// Up to [`PROCESS_CONCURRENCY`] are processed at once. Those about one issue or pull request are
/// processed one at a time, in the order they were accepted: a label and the comment after it must
/// not be seen the other way round. A stop aborts those in flight; each stays `processing` in the
/// ledger and is taken over once stale, as after a crash.
pub async fn process_loop(
    triggers: Arc<Triggers>,
    wake: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
) {
    let stale_ms = i64::try_from(triggers.retry.stale_after.as_millis()).unwrap_or(i64::MAX);
    let mut running: JoinSet<()> = JoinSet::new();
    // Each running delivery's id and the issue or pull request it is about.
    let mut in_flight: HashMap<tokio::task::Id, (String, Option<String>)> = HashMap::new();
    loop {
        if running.len() < PROCESS_CONCURRENCY {
            let due = match triggers.store.due_deliveries(stale_ms, PROCESS_BATCH).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "reading due GitHub deliveries failed; trying again");
                    Vec::new()
                }
            };
            for delivery in due {
                if running.len() >= PROCESS_CONCURRENCY {
                    break;
                }
                let subject = subject_of(&delivery);
                let busy = in_flight.values().any(|(id, about)| {
                    *id == delivery.id || (subject.is_some() && *about == subject)
                });
                if busy {
                    continue;
                }
                let id = delivery.id.clone();
                let triggers = triggers.clone();
                let task = running.spawn(async move { process_one(&triggers, delivery).await });
                in_flight.insert(task.id(), (id, subject));
            }
        }
        tokio::select! {
            () = stop.cancelled() => {
                running.shutdown().await;
                return;
            }
            () = wake.notified() => {}
            () = tokio::time::sleep(PROCESS_TICK) => {}
            Some(done) = running.join_next_with_id(), if !running.is_empty() => {
                let task = match done {
                    Ok((task, ())) => task,
                    Err(e) => {
                        tracing::warn!(error = %e, "processing a GitHub delivery panicked; it is taken over once stale");
                        e.id()
                    }
                };
                in_flight.remove(&task);
            }
        }
        // Whatever else finished meanwhile frees its place too.
        while let Some(done) = running.try_join_next_with_id() {
            let task = match done {
                Ok((task, ())) => task,
                Err(e) => e.id(),
            };
            in_flight.remove(&task);
        }
    }
}

/// `owner/repo#number`: the issue or pull request a delivery is about, when it names one.
fn subject_of(delivery: &orchestrator_store::DueDelivery) -> Option<String> {
    let payload: Value = serde_json::from_str(&delivery.payload).ok()?;
    super::delivery_subject(&payload)
}

async fn process_one(triggers: &Triggers, delivery: orchestrator_store::DueDelivery) {
    let id = delivery.id.as_str();
    let payload: Value = match serde_json::from_str(&delivery.payload) {
        Ok(payload) => payload,
        Err(e) => {
            // Accepted payloads were parsed first; a row that cannot be read is failed for good.
            if let Ok(claim) = triggers
                .store
                .claim_delivery(
                    &DeliveryInfo {
                        id,
                        source: &delivery.source,
                        event: &delivery.event,
                        action: None,
                        repo: None,
                        subject: None,
                    },
                    i64::try_from(triggers.retry.stale_after.as_millis()).unwrap_or(i64::MAX),
                )
                .await
                && let Some(token) = claim.token()
            {
                let _ = triggers
                    .store
                    .fail_delivery(id, token, &format!("the stored payload is not JSON: {e}"))
                    .await;
            }
            return;
        }
    };
    match triggers
        .deliver(id, &delivery.source, &delivery.event, &payload)
        .await
    {
        Ok(Delivered::Processed { tasks, detail }) => {
            tracing::info!(
                delivery = id,
                tasks = tasks.len(),
                detail,
                "GitHub delivery processed"
            );
        }
        Ok(_) => {}
        Err(e) => {
            let retry_at = triggers
                .store
                .delivery(id)
                .await
                .ok()
                .flatten()
                .and_then(|d| d.retry_at);
            match retry_at {
                Some(at) => {
                    tracing::warn!(delivery = id, error = %e, retry_at = at, "GitHub delivery failed; it will be tried again")
                }
                None => {
                    tracing::warn!(delivery = id, error = %e, "GitHub delivery failed; a redelivery (or `github deliveries --retry`) processes it again")
                }
            }
        }
    }
}
