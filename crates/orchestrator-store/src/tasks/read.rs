//! Reading tasks: one, the lists and keyset pages of the API and the dashboard (filters, title
//! search), the counts, the repositories, and a task's children.

use super::*;
use orchestrator_types::BoxFuture;

/// Which tasks `list_tasks` returns, newest first.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub state: Option<TaskState>,
    pub queue: Option<String>,
    pub limit: Option<u64>,
}

/// A page of tasks for the API and the dashboard, newest first: filters, and a keyset (`before`,
/// the last id of the previous page) instead of an offset, so a page costs the same however deep
/// it is and a task created meanwhile does not shift the next page.
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    pub state: Option<TaskState>,
    pub queue: Option<String>,
    /// Only the tasks this automation's slots created.
    pub automation: Option<i64>,
    /// Text the title contains, compared without regard to case (ASCII letters).
    pub title_contains: Option<String>,
    /// Only tasks older (smaller id) than this one.
    pub before: Option<TaskId>,
    pub limit: u64,
    /// Only tasks on this checkout: the one their workspace was cloned from, else their
    /// workspace (exactly; see [`Store::repositories`]).
    pub repository: Option<String>,
    /// Only tasks with a gate (of any attempt) that ended with this verdict.
    pub gate_verdict: Option<Verdict>,
}

/// An hour in milliseconds: the overview's charts count per hour.
const HOUR_MS: i64 = 3_600_000;

/// Tasks that ended in one hour, by how.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HourOfEnds {
    /// The hour's start, Unix milliseconds.
    pub hour: i64,
    pub succeeded: i64,
    pub failed: i64,
}

/// How long the tasks that first started in one hour waited for it, from their creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HourOfWaits {
    /// The hour's start, Unix milliseconds.
    pub hour: i64,
    pub started: i64,
    pub mean_ms: i64,
    pub max_ms: i64,
}

/// Fewer rows than this passing a filter make it rare (see `Store::rare`).
const RARE: u64 = 2_000;

/// `text` as a LIKE pattern that matches it anywhere, lower-cased, with `%`, `_` and the escape
/// character itself escaped, so a search for `50%` finds "50%", not everything after "50".
fn contains_pattern(text: &str) -> String {
    let mut pattern = String::from("%");
    for c in text.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// On SQLite, the tasks whose titles are not in the title index yet (migration 0023).
fn not_yet_indexed() -> SelectStatement {
    Query::select()
        .column(Tasks::Id)
        .from(Tasks::Table)
        .and_where(Expr::cust("\"id\" > (SELECT id FROM tasks_title_upto)"))
        .to_owned()
}

/// The ids of the tasks in `state`, read from its partial index, for the states that have one
/// ordered otherwise than by id (queued: `tasks_claimable`; running: `tasks_leased`).
fn in_hot_state(state: TaskState) -> Option<SelectStatement> {
    matches!(state, TaskState::Queued | TaskState::Running).then(|| {
        Query::select()
            .column(Tasks::Id)
            .from(Tasks::Table)
            .and_where(state_is(state))
            .to_owned()
    })
}

/// The terms of a list's filter by `state`; `few` when few tasks are in it (see
/// `Store::state_filter`).
fn state_terms(state: TaskState, few: bool) -> Vec<Expr> {
    let mut terms = vec![state_is(state)];
    if few && let Some(ids) = in_hot_state(state) {
        terms.push(Expr::col(Tasks::Id).in_subquery(ids));
    }
    terms
}

/// The counts of `Store::count_by_state` in one statement, so that they are of one moment: every
/// task, then the queued, running, waiting, failed and canceled ones, each counted from its
/// state's partial index (migration 0024); the succeeded are the rest. A count grouped by state
/// read an index of every task's state, which each claim and each end had to keep up.
fn count_by_state_statement() -> SelectStatement {
    let count = |state: Option<TaskState>| {
        let mut select = Query::select();
        select.expr(Expr::cust("COUNT(*)")).from(Tasks::Table);
        if let Some(state) = state {
            select.and_where(state_is(state));
        }
        Expr::SubQuery(None, Box::new(select.to_owned().into()))
    };
    let mut stmt = Query::select();
    stmt.expr(count(None));
    for state in [
        TaskState::Queued,
        TaskState::Running,
        TaskState::Waiting,
        TaskState::Failed,
        TaskState::Canceled,
    ] {
        stmt.expr(count(Some(state)));
    }
    stmt.to_owned()
}

impl Store {
    pub fn get_task<'a>(&'a self, id: TaskId) -> BoxFuture<'a, Result<Task>> {
        Box::pin(self.get_task_unboxed(id))
    }

    async fn get_task_unboxed(&self, id: TaskId) -> Result<Task> {
        let mut stmt = select_tasks();
        stmt.and_where(Expr::col(Tasks::Id).eq(id.0));
        self.pool
            .fetch_optional::<TaskRow, _>(&stmt)
            .await?
            .ok_or(Error::TaskNotFound(id))?
            .try_into()
    }

    /// Tasks matching `filter`, newest first.
    pub fn list_tasks<'a>(&'a self, filter: &'a TaskFilter) -> BoxFuture<'a, Result<Vec<Task>>> {
        Box::pin(self.list_tasks_unboxed(filter))
    }

    async fn list_tasks_unboxed(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        let mut stmt = select_tasks();
        if let Some(state) = filter.state {
            self.state_filter(&mut stmt, state).await?;
        }
        if let Some(queue) = &filter.queue {
            stmt.and_where(Expr::col(Tasks::Queue).eq(queue.as_str()));
        }
        stmt.order_by(Tasks::Id, Order::Desc)
            .limit(filter.limit.unwrap_or(100));
        self.fetch_tasks(&stmt).await
    }

    async fn fetch_tasks(&self, stmt: &SelectStatement) -> Result<Vec<Task>> {
        self.pool
            .fetch_all::<TaskRow, _>(stmt)
            .await?
            .into_iter()
            .map(Task::try_from)
            .collect()
    }

    /// Whether fewer than [`RARE`] rows answer `matches` (a select of anything, unlimited): then
    /// reading those few through an index is cheaper than walking the tasks newest first until a
    /// page is full, which is what a filter most tasks pass does well. Planners cannot tell the
    /// two apart from a parameter, so the store asks.
    async fn rare(&self, mut matches: SelectStatement) -> Result<bool> {
        matches.limit(RARE);
        let probe = Query::select()
            .expr(Expr::cust("count(*)"))
            .from_subquery(matches, sea_query::Alias::new("m"))
            .to_owned();
        let (found,): (i64,) = self.pool.fetch_optional(&probe).await?.unwrap_or((0,));
        Ok(found < RARE as i64)
    }

    /// The state filter of a list (migration 0024). Waiting, failed and canceled tasks have an
    /// index of their own (`tasks_settled`), which `state = '...'` reaches. Succeeded tasks are
    /// most of the table, found by walking the tasks newest first. Queued and running tasks are
    /// in the claim's and the rescuer's partial indexes, which are not ordered by id: when few
    /// tasks are in the state, their ids are read from that index as a list, which SQLite walks
    /// newest first (without it, SQLite walked every task to find a page of running ones);
    /// when many are, walking the tasks finds a page soon.
    async fn state_filter(&self, stmt: &mut SelectStatement, state: TaskState) -> Result<()> {
        let few = match in_hot_state(state) {
            Some(ids) => self.rare(ids).await?,
            None => false,
        };
        for term in state_terms(state, few) {
            stmt.and_where(term);
        }
        Ok(())
    }

    /// The title filter: the lower-cased title contains `text`. A rare text is found through the
    /// titles' trigram index, which each backend keeps in a table of its own, never written at a
    /// task's claim or end: SQLite's `tasks_title` (FTS5, migrations 0007, 0022 and 0023),
    /// written after the task's creation (`Store::index_titles`), so the tasks created since are
    /// candidates too, and PostgreSQL's `task_titles` (pg_trgm, migration 0018), written with the
    /// task. A common text is found by walking the tasks. Either way the LIKE on `tasks` decides;
    /// the index only names candidates. A trigram index knows nothing of texts shorter than a
    /// trigram.
    async fn title_filter(&self, stmt: &mut SelectStatement, text: &str) -> Result<()> {
        let pattern = contains_pattern(text);
        stmt.and_where(
            Expr::expr(sea_query::Func::lower(Expr::col(Tasks::Title)))
                .like(sea_query::LikeExpr::new(pattern.clone()).escape('\\')),
        );
        if text.chars().count() < 3 {
            return Ok(());
        }
        match self.backend() {
            crate::Backend::Sqlite => {
                let phrase = format!("\"{}\"", text.replace('"', "\"\""));
                let candidates = Query::select()
                    .expr(Expr::cust("rowid"))
                    .from(sea_query::Alias::new("tasks_title"))
                    .and_where(Expr::cust_with_values("tasks_title MATCH ?", [phrase]))
                    .union(sea_query::UnionType::All, not_yet_indexed())
                    .to_owned();
                if self.rare(candidates.clone()).await? {
                    // Only the few candidates the index names, and the tasks it has not seen yet,
                    // are read; the LIKE decides. One list of both: with an OR of the two in its
                    // place, SQLite scans every task.
                    stmt.and_where(Expr::col(Tasks::Id).in_subquery(candidates));
                }
            }
            crate::Backend::Postgres => {
                // The candidates themselves, not their count: the index is read once. They go
                // back as one array, so the page's statement has one shape whatever their number
                // (a list of values would be a statement per count in each connection's cache). A
                // subquery in their place was planned well only when the text was rare, since
                // `tasks` has no statistics of its lower-cased titles since 0018.
                let titles = Query::select()
                    .column(sea_query::Alias::new("task_id"))
                    .from(sea_query::Alias::new("task_titles"))
                    .and_where(
                        Expr::col(sea_query::Alias::new("title"))
                            .like(sea_query::LikeExpr::new(pattern).escape('\\')),
                    )
                    .limit(RARE)
                    .to_owned();
                let candidates: Vec<(i64,)> = self.pool.fetch_all(&titles).await?;
                if candidates.len() < RARE as usize {
                    let ids: Vec<String> = candidates.iter().map(|(id,)| id.to_string()).collect();
                    stmt.and_where(Expr::cust_with_values(
                        "\"id\" = ANY(CAST($1 AS BIGINT[]))",
                        [format!("{{{}}}", ids.join(","))],
                    ));
                }
            }
        }
        Ok(())
    }

    /// The gate verdict filter: a task with a gate that ended so. A rare verdict is found through
    /// the gates' index by verdict, a common one by walking the tasks.
    async fn verdict_filter(&self, stmt: &mut SelectStatement, verdict: Verdict) -> Result<()> {
        use crate::gates::Gates;
        let with_verdict = Query::select()
            .column(Gates::TaskId)
            .from(Gates::Table)
            .and_where(Expr::col(Gates::Verdict).eq(verdict.as_str()))
            .to_owned();
        if self.rare(with_verdict.clone()).await? {
            stmt.and_where(Expr::col(Tasks::Id).in_subquery(with_verdict));
        } else {
            stmt.and_where(Expr::exists(
                Query::select()
                    .expr(Expr::val(1))
                    .from(Gates::Table)
                    .and_where(
                        Expr::col((Gates::Table, Gates::TaskId)).equals((Tasks::Table, Tasks::Id)),
                    )
                    .and_where(Expr::col((Gates::Table, Gates::Verdict)).eq(verdict.as_str()))
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// A page of tasks, newest first: see [`TaskPage`].
    pub fn task_page<'a>(&'a self, page: &'a TaskPage) -> BoxFuture<'a, Result<Vec<Task>>> {
        Box::pin(self.task_page_unboxed(page))
    }

    async fn task_page_unboxed(&self, page: &TaskPage) -> Result<Vec<Task>> {
        let mut stmt = select_tasks();
        if let Some(state) = page.state {
            self.state_filter(&mut stmt, state).await?;
        }
        if let Some(queue) = &page.queue {
            stmt.and_where(Expr::col(Tasks::Queue).eq(queue.as_str()));
        }
        if let Some(automation) = page.automation {
            stmt.and_where(Expr::col(Tasks::AutomationId).eq(automation));
        }
        if let Some(text) = &page.title_contains {
            self.title_filter(&mut stmt, text).await?;
        }
        if let Some(repository) = &page.repository {
            stmt.and_where(Expr::col(Tasks::Repository).eq(repository.as_str()));
        }
        if let Some(verdict) = page.gate_verdict {
            self.verdict_filter(&mut stmt, verdict).await?;
        }
        if let Some(before) = page.before {
            stmt.and_where(Expr::col(Tasks::Id).lt(before.0));
        }
        stmt.order_by(Tasks::Id, Order::Desc)
            .limit(Ord::max(page.limit, 1));
        self.fetch_tasks(&stmt).await
    }

    /// The checkouts tasks work on, most recently used first, at most `limit`: what the
    /// repository filter offers.
    pub fn repositories<'a>(&'a self, limit: u64) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(self.repositories_unboxed(limit))
    }

    async fn repositories_unboxed(&self, limit: u64) -> Result<Vec<String>> {
        let stmt = Query::select()
            .column(Tasks::Repository)
            .expr(Expr::col(Tasks::Id).max())
            .from(Tasks::Table)
            .and_where(Expr::col(Tasks::Repository).is_not_null())
            .group_by_col(Tasks::Repository)
            .order_by_expr(Expr::col(Tasks::Id).max(), Order::Desc)
            .limit(limit)
            .to_owned();
        let rows: Vec<(String, i64)> = self.pool.fetch_all(&stmt).await?;
        Ok(rows.into_iter().map(|(repository, _)| repository).collect())
    }

    /// Tasks that ended at or after `since` (Unix milliseconds), per final state: the overview's
    /// throughput and failures.
    pub fn finished_since<'a>(
        &'a self,
        since: i64,
    ) -> BoxFuture<'a, Result<Vec<(TaskState, i64)>>> {
        Box::pin(self.finished_since_unboxed(since))
    }

    async fn finished_since_unboxed(&self, since: i64) -> Result<Vec<(TaskState, i64)>> {
        let stmt = Query::select()
            .column(Tasks::State)
            .expr(Expr::col(Tasks::Id).count())
            .from(Tasks::Table)
            .and_where(Expr::col(Tasks::FinishedAt).gte(since))
            .group_by_col(Tasks::State)
            .to_owned();
        let rows: Vec<(String, i64)> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter()
            .map(|(state, n)| {
                let state = state.parse::<TaskState>().map_err(|e| Error::Corrupt {
                    what: "tasks.state",
                    message: e.to_string(),
                })?;
                Ok((state, n))
            })
            .collect()
    }

    /// Per hour (its start, Unix milliseconds) since `since`: how many tasks ended succeeded and
    /// how many failed in it, the hours with none left out, oldest first. The overview's chart.
    pub fn ended_per_hour<'a>(&'a self, since: i64) -> BoxFuture<'a, Result<Vec<HourOfEnds>>> {
        Box::pin(self.ended_per_hour_unboxed(since))
    }

    async fn ended_per_hour_unboxed(&self, since: i64) -> Result<Vec<HourOfEnds>> {
        let hour = || Expr::cust(format!("(\"finished_at\" / {HOUR_MS})"));
        let stmt = Query::select()
            .expr(hour())
            .column(Tasks::State)
            .expr(Expr::col(Tasks::Id).count())
            .from(Tasks::Table)
            .and_where(Expr::col(Tasks::FinishedAt).gte(since))
            .and_where(
                Expr::col(Tasks::State)
                    .is_in([TaskState::Succeeded.as_str(), TaskState::Failed.as_str()]),
            )
            .add_group_by([hour(), Expr::col(Tasks::State)])
            .to_owned();
        let rows: Vec<(i64, String, i64)> = self.pool.fetch_all(&stmt).await?;
        let mut hours: Vec<HourOfEnds> = Vec::new();
        for (hour, state, n) in rows {
            let at = hour * HOUR_MS;
            let index = match hours.iter().position(|h| h.hour == at) {
                Some(index) => index,
                None => {
                    hours.push(HourOfEnds {
                        hour: at,
                        ..HourOfEnds::default()
                    });
                    hours.len() - 1
                }
            };
            if state == TaskState::Succeeded.as_str() {
                hours[index].succeeded = n;
            } else {
                hours[index].failed = n;
            }
        }
        hours.sort_by_key(|h| h.hour);
        Ok(hours)
    }

    /// Per hour since `since`: of the tasks that first started in it, the mean and the longest
    /// wait from their creation to that start, the hours with none left out, oldest first. The
    /// overview's queue latency.
    pub fn start_waits_per_hour<'a>(
        &'a self,
        since: i64,
    ) -> BoxFuture<'a, Result<Vec<HourOfWaits>>> {
        Box::pin(self.start_waits_per_hour_unboxed(since))
    }

    async fn start_waits_per_hour_unboxed(&self, since: i64) -> Result<Vec<HourOfWaits>> {
        let hour = || Expr::cust(format!("(\"started_at\" / {HOUR_MS})"));
        let stmt = Query::select()
            .expr(hour())
            .expr(Expr::col(Tasks::Id).count())
            // Integer division on both backends (AVG rounds on one and truncates on the other;
            // PostgreSQL's SUM of bigints is numeric, cast back).
            .expr(Expr::cust(
                "CAST(SUM(\"started_at\" - \"created_at\") AS BIGINT) / COUNT(*)",
            ))
            .expr(Expr::cust("MAX(\"started_at\" - \"created_at\")"))
            .from(Tasks::Table)
            .and_where(Expr::col(Tasks::StartedAt).gte(since))
            .add_group_by([hour()])
            .to_owned();
        let rows: Vec<(i64, i64, i64, i64)> = self.pool.fetch_all(&stmt).await?;
        let mut hours: Vec<HourOfWaits> = rows
            .into_iter()
            .map(|(hour, started, mean_ms, max_ms)| HourOfWaits {
                hour: hour * HOUR_MS,
                started,
                mean_ms,
                max_ms,
            })
            .collect();
        hours.sort_by_key(|h| h.hour);
        Ok(hours)
    }

    /// Queued tasks per queue, deepest first: the overview's queue depth.
    pub fn queued_by_queue<'a>(&'a self) -> BoxFuture<'a, Result<Vec<(String, i64)>>> {
        Box::pin(self.queued_by_queue_unboxed())
    }

    async fn queued_by_queue_unboxed(&self) -> Result<Vec<(String, i64)>> {
        let stmt = Query::select()
            .column(Tasks::Queue)
            .expr(Expr::col(Tasks::Id).count())
            .from(Tasks::Table)
            .and_where(state_is(TaskState::Queued))
            .group_by_col(Tasks::Queue)
            .to_owned();
        let mut rows: Vec<(String, i64)> = self.pool.fetch_all(&stmt).await?;
        rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(rows)
    }

    /// Number of tasks in each state; states without tasks are listed with 0.
    pub fn count_by_state<'a>(&'a self) -> BoxFuture<'a, Result<Vec<(TaskState, i64)>>> {
        Box::pin(self.count_by_state_unboxed())
    }

    async fn count_by_state_unboxed(&self) -> Result<Vec<(TaskState, i64)>> {
        let (all, queued, running, waiting, failed, canceled): (i64, i64, i64, i64, i64, i64) =
            self.pool
                .fetch_optional(&count_by_state_statement())
                .await?
                .unwrap_or_default();
        let succeeded = all - queued - running - waiting - failed - canceled;
        Ok(TaskState::ALL
            .into_iter()
            .map(|state| {
                let n = match state {
                    TaskState::Queued => queued,
                    TaskState::Running => running,
                    TaskState::Waiting => waiting,
                    TaskState::Succeeded => succeeded,
                    TaskState::Failed => failed,
                    TaskState::Canceled => canceled,
                };
                (state, n)
            })
            .collect())
    }

    /// The children of a task (sub-agents it spawned), oldest first.
    pub fn children<'a>(&'a self, parent: TaskId) -> BoxFuture<'a, Result<Vec<Task>>> {
        Box::pin(self.children_unboxed(parent))
    }

    async fn children_unboxed(&self, parent: TaskId) -> Result<Vec<Task>> {
        let mut stmt = select_tasks();
        stmt.and_where(Expr::col(Tasks::ParentId).eq(parent.0))
            .order_by(Tasks::Id, Order::Asc);
        let rows: Vec<TaskRow> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter().map(Task::try_from).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::sqlite_sql::query_plan as plan;

    /// With no index of every task's state (migration 0024), the counts and the lists by state
    /// must still read the tasks in that state through an index, not walk every task: a count
    /// of a large store on every dashboard change, or a page of the few running tasks found by
    /// reading all the others. Succeeded tasks, most of the table, are the one state a list
    /// walks. Plans on PostgreSQL follow its statistics; this holds SQLite's, which has none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn counts_and_lists_by_state_read_an_index_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_sqlite(&dir.path().join("o.db"), &crate::StoreOptions::default())
            .await
            .unwrap();
        let walks = |steps: &[String]| steps.iter().any(|s| s == "SCAN tasks");
        let counts = plan(&store, &count_by_state_statement()).await;
        assert!(!walks(&counts), "the counts walk the tasks: {counts:?}");
        // Each state through one of the partial indexes of its rows: queued tasks are in
        // tasks_claimable and tasks_fair_tail (migration 0030), running ones in tasks_leased
        // and tasks_fair_clock; SQLite takes the narrowest.
        for indexes in [
            &["tasks_claimable", "tasks_fair_tail"][..],
            &["tasks_leased", "tasks_fair_clock"],
            &["tasks_settled"],
        ] {
            assert!(
                counts
                    .iter()
                    .any(|s| indexes.iter().any(|index| s.contains(index))),
                "the counts read none of {indexes:?}: {counts:?}"
            );
        }
        for (state, indexes) in [
            (
                TaskState::Queued,
                &["tasks_claimable", "tasks_fair_tail"][..],
            ),
            (TaskState::Running, &["tasks_leased", "tasks_fair_clock"]),
            (TaskState::Waiting, &["tasks_settled"]),
            (TaskState::Failed, &["tasks_settled"]),
            (TaskState::Canceled, &["tasks_settled"]),
        ] {
            let mut list = select_tasks();
            for term in state_terms(state, true) {
                list.and_where(term);
            }
            list.order_by(Tasks::Id, Order::Desc).limit(50);
            let steps = plan(&store, &list).await;
            assert!(
                !walks(&steps),
                "{state:?}: the list walks the tasks: {steps:?}"
            );
            assert!(
                steps
                    .iter()
                    .any(|s| indexes.iter().any(|index| s.contains(index))),
                "{state:?}: the list reads none of {indexes:?}: {steps:?}"
            );
        }
        store.close().await;
    }
}
