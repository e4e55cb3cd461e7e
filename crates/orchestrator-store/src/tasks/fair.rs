//! Fairness between keys: among the queued tasks of one queue and priority, the claim takes keys
//! in turn, so one repository's 500 queued tasks do not starve another's 5. Priority keeps its
//! meaning above it: the claim orders by priority first.
//!
//! It is start-time fair queuing, decided when a task is made so the claim stays one walk of an
//! index. Each task gets a virtual time (`fair_vt`): one step after the last queued task of its key
//! of its priority (a step is [`STEP`] divided by the task's weight), or, when its key has none
//! queued, the priority's clock (the virtual time claims have reached; with nothing running, where
//! the queue's head is), so a key that was idle starts level with the others instead of ahead of
//! them by what it did not use. The claim takes the lowest virtual time, then the oldest task. A
//! task keeps its virtual time while it waits (a retry's backoff, a concurrency key's turn), so it
//! keeps its place.
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
pub(crate) fn fair_place(task: &NewTask, origin: Option<TaskOrigin>) -> (String, Expr) {
    let key = fair_key(task, origin);
    let place = virtual_time(&key, task.priority, step(task));
    (key, place)
}

/// The keys and virtual times of a batch's tasks, in order, read inside `tx` before the batch is
/// inserted: one read for each key and priority of the batch, and each later task of one of them
/// a step (its own) after the one before, as the insert of one task reads it. (Read by the insert,
/// each row would be a subquery of its own to plan: a batch of 500 was made 40 times slower.)
pub(crate) async fn fair_places(
    tx: &mut Tx,
    tasks: &[NewTask],
    origin: Option<TaskOrigin>,
) -> Result<Vec<(String, Expr)>> {
    let mut last: HashMap<(String, i64), i64> = HashMap::new();
    let mut places = Vec::with_capacity(tasks.len());
    for task in tasks {
        let key = fair_key(task, origin);
        let group = (key.clone(), task.priority);
        let at = match last.get(&group) {
            Some(before) => before + step(task),
            None => {
                let read = Query::select()
                    .expr(virtual_time(&key, task.priority, step(task)))
                    .to_owned();
                let (at,): (i64,) = tx.fetch_optional(&read).await?.unwrap_or((0,));
                at
            }
        };
        last.insert(group, at);
        places.push((key, Expr::val(at)));
    }
    Ok(places)
}

/// How far a task moves its key on: [`STEP`] divided by its weight.
fn step(task: &NewTask) -> i64 {
    STEP / i64::from(Ord::max(task.weight.unwrap_or(1), 1))
}

/// `max(tail + step, clock)`: one step after the last queued task of the key, or the priority's
/// clock, the highest virtual time among its running tasks (those claimed last), when that is
/// later (the key was idle) or the key has none queued. With none running (every worker stopped,
/// or every task waiting its turn at a model server), the clock is the queue's head, the lowest
/// virtual time queued: a key arriving then would otherwise start at 0, and take as many turns in
/// a row as the backlog's keys had had before they got one again. With nothing queued either, 0.
///
/// The clock is read from running tasks first, not from the queue's head: a queued task that no
/// worker can take (a label no one offers, a task of `orchestrator run`, a key whose turns are
/// taken) would hold a head back, and every key arriving after it would start that far behind the
/// rest. With none running, such a head holds the newcomer back no further than 0 did. The head is
/// read only when nothing runs and the key has nothing queued (`coalesce` stops at its first value
/// on both backends), so a busy queue, and a batch after its first task, pay nothing for it; when
/// it is read, it is a walk of the priority's queued tasks (on SQLite, about 26 ms for 200,000).
/// Virtual times are kept per priority, not per queue, so a claim of several queues compares
/// like with like.
fn virtual_time(key: &str, priority: i64, step: i64) -> Expr {
    let tail = of_state(TaskState::Queued, priority)
        .and_where(Expr::col((FairT, Tasks::FairKey)).eq(key))
        .to_owned();
    let clock = of_state(TaskState::Running, priority);
    let head = of_state(TaskState::Queued, priority)
        .clear_order_by()
        .order_by((FairT, Tasks::FairVt), Order::Asc)
        .to_owned();
    let scalar = |q: SelectStatement| Expr::SubQuery(None, Box::new(q.into()));
    let after_tail = || scalar(tail.clone()).add(step);
    // The head is read last, and only when nothing runs and the key has nothing queued: with a
    // tail, one step after it is never below the head.
    let level = Func::coalesce([scalar(clock), after_tail(), scalar(head), Expr::val(0i64)]);
    let after_tail = Func::coalesce([after_tail(), Expr::val(0i64)]);
    Expr::from(Func::greatest([Expr::from(after_tail), Expr::from(level)]))
}

/// The other rows of `tasks`, as the insert's reads name them.
#[derive(Iden, Clone, Copy)]
#[iden = "fair_t"]
struct FairT;

/// The highest virtual time of a task in `state` of `priority` (an index leads with both).
fn of_state(state: TaskState, priority: i64) -> SelectStatement {
    Query::select()
        .column((FairT, Tasks::FairVt))
        .from_as(Tasks::Table, FairT)
        // A literal, as in `state_is`: SQLite uses a partial index only for a term it can see
        // implies the index's own (a bound state would scan the table for every task made).
        .and_where(Expr::cust(format!(
            "\"fair_t\".\"state\" = '{}'",
            state.as_str()
        )))
        .and_where(Expr::col((FairT, Tasks::Priority)).eq(priority))
        .order_by((FairT, Tasks::FairVt), Order::Desc)
        .limit(1)
        .to_owned()
}
