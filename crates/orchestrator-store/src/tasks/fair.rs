//! Fairness between keys: among the queued tasks of one queue and priority, the claim takes keys
//! in turn, so one repository's 500 queued tasks do not starve another's 5. Priority keeps its
//! meaning above it: the claim orders by priority first.
//!
//! It is start-time fair queuing, decided when a task is made so the claim stays one walk of an
//! index. Each task gets a virtual time (`fair_vt`): one step after the last queued task of its key
//! (a step is [`STEP`] divided by the task's weight), or, when its key has none queued, the virtual
//! time of the queue's runnable head, so a key that was idle starts level with the others instead
//! of ahead of them by what it did not use. The claim takes the lowest virtual time, then the
//! oldest task. A task keeps its virtual time while it waits (a retry's backoff, a concurrency
//! key's turn), so it keeps its place.
//!
//! Two tasks of one key made at once by two daemons may share a virtual time; they then run in
//! the order they were made, which is what the queue did before.

use super::{TaskOrigin, Tasks};
use crate::Result;
use crate::exec::Tx;
use orchestrator_types::{NewTask, TaskState};
use sea_query::{Expr, ExprTrait, Func, Iden, Order, Query, SelectStatement};
use std::collections::HashMap;

/// One turn of a key of weight 1, in virtual time. Large, so a weight's step stays exact enough.
pub(crate) const STEP: i64 = 1_000_000;

/// The key a task takes turns under: the one it names, else its repository, else its
/// concurrency key, else the automation that made it, else the shared key of everything else.
pub(crate) fn fair_key(task: &NewTask, origin: Option<TaskOrigin>) -> String {
    if let Some(key) = &task.fair_key {
        return key.trim().to_owned();
    }
    if let Some(repository) = &task.repository {
        return format!("repository:{}", repository.url);
    }
    if let Some(concurrency) = &task.concurrency {
        return concurrency.key.trim().to_owned();
    }
    if let Some(origin) = origin {
        return format!("automation:{}", origin.automation_id);
    }
    String::new()
}

/// The key and virtual time of one task made by a statement of its own: the virtual time is
/// read by the insert itself.
pub(crate) fn fair_place(task: &NewTask, origin: Option<TaskOrigin>, now: i64) -> (String, Expr) {
    let key = fair_key(task, origin);
    let place = virtual_time(&key, &task.queue, task.priority, step(task), now);
    (key, place)
}

/// The keys and virtual times of a batch's tasks, in order, read inside `tx` before the batch is
/// inserted: one read for each key, queue and priority of the batch, and the batch's tasks of one
/// of them a step apart. (Read by the insert, each row would be a subquery of its own to plan:
/// a batch of 500 was made 40 times slower.)
pub(crate) async fn fair_places(
    tx: &mut Tx,
    tasks: &[NewTask],
    origin: Option<TaskOrigin>,
    now: i64,
) -> Result<Vec<(String, Expr)>> {
    let mut next: HashMap<(String, &str, i64), i64> = HashMap::new();
    let mut places = Vec::with_capacity(tasks.len());
    for task in tasks {
        let key = fair_key(task, origin);
        let group = (key.clone(), task.queue.as_str(), task.priority);
        let at = match next.get(&group) {
            Some(at) => *at,
            None => {
                let read = Query::select()
                    .expr(virtual_time(
                        &key,
                        &task.queue,
                        task.priority,
                        step(task),
                        now,
                    ))
                    .to_owned();
                let (at,): (i64,) = tx.fetch_optional(&read).await?.unwrap_or((0,));
                at
            }
        };
        next.insert(group, at + step(task));
        places.push((key, Expr::val(at)));
    }
    Ok(places)
}

/// How far a task moves its key on: [`STEP`] divided by its weight.
fn step(task: &NewTask) -> i64 {
    STEP / i64::from(Ord::max(task.weight.unwrap_or(1), 1))
}

/// `max(tail + step, head)`: the last queued task of the key one step on, or the
/// queue's runnable head (its lowest virtual time among tasks that may start now; with none, its
/// highest among those that wait, so a new task does not go ahead of them; with none queued, 0).
fn virtual_time(key: &str, queue: &str, priority: i64, step: i64, now: i64) -> Expr {
    let tail = queued(queue, priority)
        .and_where(Expr::col((FairT, Tasks::FairKey)).eq(key))
        .order_by((FairT, Tasks::FairVt), Order::Desc)
        .to_owned();
    let head = queued(queue, priority)
        .and_where(Expr::col((FairT, Tasks::RunAfter)).lte(now))
        .order_by((FairT, Tasks::FairVt), Order::Asc)
        .to_owned();
    let last_waiting = queued(queue, priority)
        .order_by((FairT, Tasks::FairVt), Order::Desc)
        .to_owned();
    let scalar = |q: SelectStatement| Expr::SubQuery(None, Box::new(q.into()));
    let after_tail = Func::coalesce([scalar(tail).add(step), Expr::val(0i64)]);
    let level = Func::coalesce([scalar(head), scalar(last_waiting), Expr::val(0i64)]);
    Expr::from(Func::greatest([Expr::from(after_tail), Expr::from(level)]))
}

/// The other rows of `tasks`, as the insert's reads name them.
#[derive(Iden, Clone, Copy)]
#[iden = "fair_t"]
struct FairT;

/// One virtual time of a queued task of `queue` and `priority` (the claim's index leads with
/// both, then the virtual time).
fn queued(queue: &str, priority: i64) -> SelectStatement {
    Query::select()
        .column((FairT, Tasks::FairVt))
        .from_as(Tasks::Table, FairT)
        // A literal, as in `state_is`: SQLite uses a partial index only for a term it can see
        // implies the index's own (a bound 'queued' would scan the table for every row made).
        .and_where(Expr::cust(format!(
            "\"fair_t\".\"state\" = '{}'",
            TaskState::Queued.as_str()
        )))
        .and_where(Expr::col((FairT, Tasks::Queue)).eq(queue))
        .and_where(Expr::col((FairT, Tasks::Priority)).eq(priority))
        .limit(1)
        .to_owned()
}
