//! A task with a concurrency key (`NewTask::concurrency`) takes its key's turn before its attempt
//! does anything else. Without one, the attempt hands the task back to the queue at once, its
//! attempt refunded, saying which tasks hold the key, and the task is claimed again a little
//! later: it holds no worker while it waits.
//!
//! A task with a daily token budget (`NewTask::budget`) first reads what its key spent today;
//! past the budget, the task goes back to the queue until the next day (UTC) begins.

use orchestrator_store::{FlowTurn, FlowWait, Lease, Outcome, Task};
use orchestrator_types::now_millis;
use serde_json::json;

use super::{AttemptEnd, RunContext, with_retries};
use crate::{Error, Result};

/// How long a task whose key is taken waits before it is claimed again, at least; up to as much
/// again is added at random, so that the waiting tasks of one key do not come back together.
const TURN_WAIT_MS: i64 = 2_000;

/// Tasks that waited for the next day's budget come back over this long after it begins, at
/// random, so they do not all come back together.
const BUDGET_SPREAD_MS: f64 = 60_000.0;

/// `None` when the attempt may go on; else how it ends.
pub(super) async fn take_turn(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
) -> Option<Result<AttemptEnd>> {
    if let Some(budget) = &task.budget {
        match with_retries(|| ctx.store.budget_wait(budget, now_millis())).await {
            Ok(None) => {}
            Ok(Some(wait)) => {
                let jitter = (rand::random::<f64>() * BUDGET_SPREAD_MS) as i64;
                return Some(Ok(AttemptEnd {
                    outcome: Some(Outcome::Requeue {
                        run_after: wait.until + jitter,
                        error: Some(wait.describe()),
                        refund: true,
                    }),
                    details: json!({ "waiting_for": wait }),
                }));
            }
            Err(e) => return Some(Err(Error::Store(e))),
        }
    }
    let concurrency = task.concurrency.as_ref()?;
    let turn = with_retries(|| {
        ctx.store.take_flow_turn(
            &concurrency.key,
            concurrency.max_running,
            task.id,
            lease.epoch,
        )
    })
    .await;
    match turn {
        Ok(FlowTurn::Granted) => None,
        Ok(FlowTurn::Busy { running }) => {
            let wait = FlowWait {
                key: concurrency.key.clone(),
                max_running: concurrency.max_running,
                running,
            };
            let jitter = (rand::random::<f64>() * TURN_WAIT_MS as f64) as i64;
            Some(Ok(AttemptEnd {
                outcome: Some(Outcome::Requeue {
                    run_after: now_millis() + TURN_WAIT_MS + jitter,
                    error: Some(wait.describe()),
                    refund: true,
                }),
                details: json!({ "waiting_for": wait }),
            }))
        }
        Err(e) => Some(Err(Error::Store(e))),
    }
}
