//! The webhook queue of the ledger: a delivery accepted (stored `queued` with its payload and
//! answered at once), queued again when it failed and GitHub or a person asks again, and the
//! deliveries due for the background processor, which claims them like any other.

use super::{
    Accepted, DeliveryInfo, DueDelivery, GithubDeliveries, delivery_status, insert_new,
    parse_task_ids, pending_condition,
};
use crate::exec::Tx;
use crate::{Result, Store};
use orchestrator_types::{BoxFuture, now_millis};
use sea_query::{Cond, Expr, ExprTrait, Order, Query};

impl Store {
    /// Stores a webhook delivery as `queued`, with its payload, for the background processor; see
    /// [`Accepted`]. A failed delivery is queued again (GitHub's "Redeliver" means: try again),
    /// with the payload it came with this time.
    pub fn accept_delivery<'a>(
        &'a self,
        info: &'a DeliveryInfo<'a>,
        payload: &'a str,
    ) -> BoxFuture<'a, Result<Accepted>> {
        Box::pin(self.accept_delivery_unboxed(info, payload))
    }

    async fn accept_delivery_unboxed(
        &self,
        info: &DeliveryInfo<'_>,
        payload: &str,
    ) -> Result<Accepted> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let insert = insert_new(info, delivery_status::QUEUED, 0, now, Some(payload))?;
        if tx.execute(&insert).await? > 0 {
            tx.commit().await?;
            return Ok(Accepted::New);
        }
        if requeue(&mut tx, info.id, Some(payload), now).await? {
            tx.commit().await?;
            return Ok(Accepted::Requeued);
        }
        let read = Query::select()
            .columns([GithubDeliveries::Status, GithubDeliveries::TaskIds])
            .from(GithubDeliveries::Table)
            .and_where(Expr::col(GithubDeliveries::DeliveryId).eq(info.id))
            .to_owned();
        let found = tx.fetch_optional::<(String, String), _>(&read).await?;
        tx.commit().await?;
        match found {
            Some((status, task_ids))
                if status == delivery_status::PROCESSED || status == delivery_status::IGNORED =>
            {
                let task_ids = parse_task_ids(info.id, &task_ids)?;
                Ok(Accepted::Done { status, task_ids })
            }
            _ => Ok(Accepted::InHand),
        }
    }

    /// Queues a failed delivery that kept its payload for the background processor now (`github
    /// deliveries --retry`). `false` when it is not failed or has no payload to process (a polled
    /// event: the poller lists it again by itself).
    pub fn retry_delivery<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.retry_delivery_unboxed(id))
    }

    async fn retry_delivery_unboxed(&self, id: &str) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let queued = requeue(&mut tx, id, None, now_millis()).await?;
        tx.commit().await?;
        Ok(queued)
    }

    /// Deliveries to process now, oldest first: queued ones, failed ones whose `retry_at` has
    /// come, and `processing` ones untouched for `stale_after_ms` (their process died). Only those
    /// with a payload: a polled event is the poller's to list again. A delivery behind an earlier
    /// one about the same issue or pull request that is not done yet is not among them, whichever
    /// daemon holds that one: it comes due when that one ends or gives up.
    pub fn due_deliveries<'a>(
        &'a self,
        stale_after_ms: i64,
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<DueDelivery>>> {
        Box::pin(self.due_deliveries_unboxed(stale_after_ms, limit))
    }

    async fn due_deliveries_unboxed(
        &self,
        stale_after_ms: i64,
        limit: u64,
    ) -> Result<Vec<DueDelivery>> {
        let now = now_millis();
        let stmt = Query::select()
            .columns([
                GithubDeliveries::DeliveryId,
                GithubDeliveries::Source,
                GithubDeliveries::Event,
                GithubDeliveries::Payload,
            ])
            .from(GithubDeliveries::Table)
            .and_where(Expr::col(GithubDeliveries::Payload).is_not_null())
            .cond_where(
                Cond::any()
                    .add(
                        Cond::all()
                            .add(
                                Expr::col(GithubDeliveries::Status)
                                    .is_in([delivery_status::QUEUED, delivery_status::FAILED]),
                            )
                            .add(Expr::col(GithubDeliveries::RetryAt).lte(now)),
                    )
                    .add(
                        Cond::all()
                            .add(
                                Expr::col(GithubDeliveries::Status).eq(delivery_status::PROCESSING),
                            )
                            .add(
                                Expr::col(GithubDeliveries::UpdatedAt)
                                    .lte(now.saturating_sub(stale_after_ms)),
                            ),
                    ),
            )
            .and_where(Expr::cust(format!(
                "NOT EXISTS (SELECT 1 FROM github_deliveries e \
                 WHERE e.subject = github_deliveries.subject \
                 AND (e.received_at < github_deliveries.received_at \
                      OR (e.received_at = github_deliveries.received_at \
                          AND e.delivery_id < github_deliveries.delivery_id)) \
                 AND {})",
                pending_condition(now.saturating_sub(stale_after_ms))
            )))
            .order_by(GithubDeliveries::ReceivedAt, Order::Asc)
            .order_by(GithubDeliveries::DeliveryId, Order::Asc)
            .limit(limit)
            .to_owned();
        Ok(self
            .pool
            .fetch_all::<(String, String, String, String), _>(&stmt)
            .await?
            .into_iter()
            .map(|(id, source, event, payload)| DueDelivery {
                id,
                source,
                event,
                payload,
            })
            .collect())
    }
}

/// Moves a failed delivery that has a payload back to `queued`, due now; `payload`, when given,
/// replaces the stored one (a redelivery carries its own). `false` when the delivery is not
/// failed or has nothing to process.
async fn requeue(tx: &mut Tx, id: &str, payload: Option<&str>, now: i64) -> Result<bool> {
    let mut stmt = Query::update();
    stmt.table(GithubDeliveries::Table)
        .value(GithubDeliveries::Status, delivery_status::QUEUED)
        .value(GithubDeliveries::RetryAt, now)
        .value(GithubDeliveries::UpdatedAt, now)
        .and_where(Expr::col(GithubDeliveries::DeliveryId).eq(id))
        .and_where(Expr::col(GithubDeliveries::Status).eq(delivery_status::FAILED));
    match payload {
        Some(payload) => {
            stmt.value(GithubDeliveries::Payload, payload);
        }
        None => {
            stmt.and_where(Expr::col(GithubDeliveries::Payload).is_not_null());
        }
    }
    Ok(tx.execute(&stmt).await? > 0)
}
