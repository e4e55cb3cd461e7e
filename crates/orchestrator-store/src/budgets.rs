//! Daily token budgets: the tasks of one key (an automation, a trigger rule) spend at most so many
//! tokens in a day, counted in UTC. An attempt of a task with a budget reads what its key spent
//! today before it does anything else; past the budget, the task goes back to the queue until the
//! next day begins, saying so, instead of spending without bound.
//!
//! What a key spent is read from the conversations: the usage the model server reported on each
//! reply saved today, of the key's tasks that had not finished before the day began. Nothing is
//! counted twice and nothing is written on the way to a turn. An attempt that starts under the
//! budget runs to its end: the budget decides which attempts start, not where one stops.

use crate::tasks::Tasks;
use crate::{Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::DailyBudget;
use sea_query::{Expr, ExprTrait, Query};

/// A day, in milliseconds.
const DAY_MS: i64 = 86_400_000;

/// The start of the UTC day that holds `at` (milliseconds since the epoch).
pub fn day_start(at: i64) -> i64 {
    at.div_euclid(DAY_MS) * DAY_MS
}

/// Why a task with a budget waits: its key spent the day's budget.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BudgetWait {
    pub key: String,
    pub tokens_per_day: u64,
    pub spent: u64,
    /// When the next day begins and the task may start again.
    pub until: i64,
}

impl BudgetWait {
    /// "waiting for the next day's token budget: automation:nightly spent 2013442 of its 2000000
    /// tokens today (UTC); it starts again at 2026-11-30T00:00:00.000Z"
    pub fn describe(&self) -> String {
        format!(
            "waiting for the next day's token budget: {} spent {} of its {} tokens today (UTC); it \
             starts again at {}",
            self.key,
            self.spent,
            self.tokens_per_day,
            orchestrator_types::format_millis(self.until),
        )
    }
}

impl Store {
    /// The tokens the tasks of budget key `key` spent since `since`: the prompt and completion
    /// tokens of the replies saved since then.
    pub fn tokens_spent<'a>(&'a self, key: &'a str, since: i64) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.tokens_spent_unboxed(key, since))
    }

    async fn tokens_spent_unboxed(&self, key: &str, since: i64) -> Result<u64> {
        let spent = Expr::cust_with_values(
            "CAST(COALESCE(SUM(COALESCE(m.prompt_tokens, 0) + COALESCE(m.completion_tokens, 0)), 0) \
             AS BIGINT)",
            Vec::<sea_query::Value>::new(),
        );
        let stmt = Query::select()
            .expr(spent)
            .from_as(
                crate::conversation::TaskMessages::Table,
                sea_query::Alias::new("m"),
            )
            .inner_join(
                Tasks::Table,
                Expr::col((Tasks::Table, Tasks::Id)).equals((
                    sea_query::Alias::new("m"),
                    crate::conversation::TaskMessages::TaskId,
                )),
            )
            .and_where(Expr::col((Tasks::Table, Tasks::BudgetKey)).eq(key.trim()))
            .and_where(
                Expr::col((Tasks::Table, Tasks::FinishedAt))
                    .is_null()
                    .or(Expr::col((Tasks::Table, Tasks::FinishedAt)).gte(since)),
            )
            .and_where(
                Expr::col((
                    sea_query::Alias::new("m"),
                    crate::conversation::TaskMessages::CreatedAt,
                ))
                .gte(since),
            )
            .to_owned();
        let (spent,): (i64,) = self.pool.fetch_optional(&stmt).await?.unwrap_or((0,));
        Ok(u64::try_from(spent).unwrap_or(0))
    }

    /// Whether a task spending from `budget` must wait at `now`: `Some` once its key spent the
    /// day's budget, with when the next day begins.
    pub fn budget_wait<'a>(
        &'a self,
        budget: &'a DailyBudget,
        now: i64,
    ) -> BoxFuture<'a, Result<Option<BudgetWait>>> {
        Box::pin(self.budget_wait_unboxed(budget, now))
    }

    async fn budget_wait_unboxed(
        &self,
        budget: &DailyBudget,
        now: i64,
    ) -> Result<Option<BudgetWait>> {
        let today = day_start(now);
        let spent = self.tokens_spent(&budget.key, today).await?;
        Ok((spent >= budget.tokens_per_day).then(|| BudgetWait {
            key: budget.key.trim().to_owned(),
            tokens_per_day: budget.tokens_per_day,
            spent,
            until: today + DAY_MS,
        }))
    }
}

impl Store {
    /// Why a queued task waits, said for a person, when something other than its `run_after`
    /// keeps it: what no live worker offers, its key's spent budget, its key's taken turns.
    pub fn why_queued<'a>(
        &'a self,
        task: &'a crate::Task,
    ) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(self.why_queued_unboxed(task))
    }

    async fn why_queued_unboxed(&self, task: &crate::Task) -> Result<Option<String>> {
        if let Some(unmet) = self.unmet_requirements(&task.requires).await? {
            return Ok(Some(unmet));
        }
        if let Some(budget) = &task.budget
            && let Some(wait) = self
                .budget_wait(budget, orchestrator_types::now_millis())
                .await?
        {
            return Ok(Some(wait.describe()));
        }
        if let Some(c) = &task.concurrency
            && let Some(wait) = self.flow_wait_of(task.id, &c.key, c.max_running).await?
        {
            return Ok(Some(wait.describe()));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_starts_at_midnight_utc() {
        // 2026-11-29T10:24:52Z
        let at = 1_795_947_892_000;
        assert_eq!(day_start(at), 1_795_910_400_000);
        assert_eq!(day_start(day_start(at)), day_start(at));
        assert_eq!(day_start(day_start(at) - 1), day_start(at) - DAY_MS);
    }
}
