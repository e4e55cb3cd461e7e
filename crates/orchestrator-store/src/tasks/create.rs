//! Creating tasks: one, a batch, or one on behalf of an attempt (fenced by its lease), each with
//! its `created` event; where a task may run (placement), and pinning a task to one machine.

use super::fair;
use super::*;
use orchestrator_types::BoxFuture;

/// The slot a task was created for, kept on the task so `task read` can say where it came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskOrigin {
    pub automation_id: i64,
    pub slot_at: i64,
}

/// The tasks with the words they need added to their requirements: `repository` for a task on
/// a repository (a daemon that can make its workspace), and for a task on a workspace path or on
/// a repository given as a local path, the placement's host or shared directory (only a worker that sees the path may run it). Borrowed as
/// they are when nothing is added, which is always the case for tasks without a workspace or a
/// repository, and for paths without a placement (benchmarks, tests).
fn place<'a>(new: &'a [NewTask], placement: Option<&Placement>) -> Cow<'a, [NewTask]> {
    if !new
        .iter()
        .any(|task| added(task, placement) != [None, None])
    {
        return Cow::Borrowed(new);
    }
    Cow::Owned(
        new.iter()
            .map(|task| {
                let mut placed = task.clone();
                placed
                    .requires
                    .extend(added(task, placement).into_iter().flatten());
                placed
            })
            .collect(),
    )
}

/// The words [`place`] adds to one task.
fn added(task: &NewTask, placement: Option<&Placement>) -> [Option<String>; 2] {
    let has = |test: &dyn Fn(&str) -> bool| task.requires.iter().any(|w| test(w));
    let repository = (task.repository.is_some() && !has(&|w| w == placement::REPOSITORY_WORD))
        .then(|| placement::REPOSITORY_WORD.to_owned());
    // A repository given as a local path (or a `file://` URL) is a directory of this machine,
    // like a workspace path: another machine would spend its attempts failing to fetch it.
    let local = task
        .repository
        .as_ref()
        .and_then(|r| placement::local_repository_path(&r.url));
    let path = match (placement, task.workspace.as_deref().or(local)) {
        (Some(placement), Some(workspace))
            if !has(&|w| {
                w.starts_with(placement::HOST_PREFIX) || w.starts_with(placement::SHARED_PREFIX)
            }) =>
        {
            Some(placement.requirement_for(workspace))
        }
        _ => None,
    };
    [repository, path]
}

/// Most tasks in one insert: it keeps each statement under SQLite's limit of bound parameters.
const INSERT_CHUNK: usize = 500;

/// Fewest tasks that SQLite creates in a transaction whose insert sets the rows' change number
/// (migration 0021): the transaction's read of the number and its BEGIN and COMMIT are three more
/// round trips to the connection's thread than one insert alone, which the insert trigger's second
/// update of each row outweighs from a few dozen rows on.
const MARKED_BATCH: usize = 32;

/// The insert of validated, placed tasks, returning their ids; `places` are their fairness keys
/// and virtual times (see fair.rs), in order.
fn insert_statement(
    tasks: &[NewTask],
    places: Vec<(String, Expr)>,
    now: i64,
    origin: Option<TaskOrigin>,
    change: Option<i64>,
) -> Result<sea_query::InsertStatement> {
    let mut columns = vec![
        Tasks::Title,
        Tasks::Prompt,
        Tasks::Spec,
        Tasks::Workspace,
        Tasks::State,
        Tasks::Queue,
        Tasks::Priority,
        Tasks::MaxAttempts,
        Tasks::RunAfter,
        Tasks::EventSeq,
        Tasks::CreatedAt,
        Tasks::UpdatedAt,
        Tasks::AutomationId,
        Tasks::SlotAt,
        Tasks::ParentId,
        Tasks::Repository,
        Tasks::Requires,
        Tasks::FairKey,
        Tasks::FairVt,
        Tasks::BudgetKey,
        Tasks::SiblingOf,
    ];
    if change.is_some() {
        columns.push(Tasks::ChangeId);
    }
    let mut stmt = Query::insert()
        .into_table(Tasks::Table)
        .columns(columns)
        .returning_col(Tasks::Id)
        .to_owned();
    for (task, (fair_key, fair_vt)) in tasks.iter().zip(places) {
        let spec = serde_json::to_string(task).map_err(|e| Error::Corrupt {
            what: "task spec",
            message: e.to_string(),
        })?;
        let row: [Expr; 21] = [
            task.title.trim().into(),
            task.prompt.clone().into(),
            spec.into(),
            task.workspace.clone().into(),
            TaskState::Queued.as_str().into(),
            task.queue.clone().into(),
            task.priority.into(),
            task.max_attempts.into(),
            task.run_after.unwrap_or(now).into(),
            1i64.into(),
            now.into(),
            now.into(),
            origin.map(|o| o.automation_id).into(),
            origin.map(|o| o.slot_at).into(),
            task.parent.map(|p| p.0).into(),
            task.repository
                .as_ref()
                .map(|r| r.url.clone())
                .or_else(|| task.worktree_of.clone())
                .or_else(|| task.workspace.clone())
                .into(),
            placement::encode_words(task.requires.iter().map(String::as_str)).into(),
            fair_key.into(),
            fair_vt,
            task.budget.as_ref().map(|b| b.key.trim().to_owned()).into(),
            task.sibling.and(task.parent).map(|lead| lead.0).into(),
        ];
        match change {
            Some(change) => stmt.values(row.into_iter().chain([change.into()]))?,
            None => stmt.values(row)?,
        };
    }
    Ok(stmt)
}

/// The data of a task's `created` event. SQLite's trigger writes the same object (migration 0020),
/// keys in the same order; a test holds the two to the same text.
pub(crate) fn created_data(task: &NewTask, origin: Option<TaskOrigin>) -> serde_json::Value {
    match origin {
        None => match &task.origin {
            None => {
                json!({ "title": task.title.trim(), "queue": task.queue, "gates": task.gates.len() })
            }
            Some(made_by) => {
                json!({ "title": task.title.trim(), "queue": task.queue, "gates": task.gates.len(), "origin": made_by })
            }
        },
        Some(o) => json!({
            "title": task.title.trim(),
            "queue": task.queue,
            "gates": task.gates.len(),
            "automation_id": o.automation_id,
            "slot_at": o.slot_at,
        }),
    }
}

/// PostgreSQL's creation of one task in one statement: the task's insert, its `created` event's
/// and the wake-up of waiting claimers (`pg_notify`, sent at commit) in a WITH clause. As a
/// transaction it was five round trips to the server.
fn create_one_statement(
    task: &NewTask,
    now: i64,
    placement: Option<&Placement>,
) -> Result<sea_query::WithQuery> {
    let created = sea_query::Alias::new("created_task");
    let notified = sea_query::Alias::new("notified");
    let placed = place(std::slice::from_ref(task), placement);
    let insert = insert_statement(&placed, vec![fair::fair_place(task, None)], now, None, None)?;
    let event = Query::insert()
        .into_table(crate::events::TaskEvents::Table)
        .columns(crate::events::EVENT_COLUMNS)
        .select_from(
            Query::select()
                .column(Tasks::Id)
                .expr(Expr::val(1i64))
                .expr(Expr::val(now))
                .expr(Expr::val(EventKind::Created.as_str()))
                .expr(Expr::val(created_data(task, None).to_string()))
                .from(created.clone())
                .to_owned(),
        )?
        .to_owned();
    let cte = |name: &sea_query::Alias, query: sea_query::SubQueryStatement| {
        sea_query::CommonTableExpression::new()
            .query(query)
            .table_name(name.clone())
            .to_owned()
    };
    Ok(sea_query::WithClause::new()
        .cte(cte(&created, insert.into()))
        .cte(cte(&sea_query::Alias::new("created_event"), event.into()))
        // Referenced by the final select, so it runs (a WITH's SELECT that nothing reads does not).
        .cte(cte(
            &notified,
            Query::select()
                .expr(Expr::cust(crate::exec::NOTIFY_TASKS))
                .to_owned()
                .into(),
        ))
        .to_owned()
        .query(
            Query::select()
                .column((created, Tasks::Id))
                .from(sea_query::Alias::new("created_task"))
                .from(notified)
                .to_owned(),
        ))
}

/// Inserts one task inside `tx`, as `insert_tasks` does a batch, and returns its id.
pub(crate) async fn insert_task(
    tx: &mut Tx,
    new: &NewTask,
    now: i64,
    placement: Option<&Placement>,
) -> Result<TaskId> {
    insert_tasks(tx, std::slice::from_ref(new), now, None, placement)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| Error::Migration("insert returned no id".into()))
}

/// Inserts validated tasks in `tx`, each with its `created` event, and returns their ids in order.
/// Shared by `create_tasks` and by the scheduler's slot writes, which must create a slot's tasks in
/// the same transaction as the slot row.
pub(crate) async fn insert_tasks(
    tx: &mut Tx,
    new: &[NewTask],
    now: i64,
    origin: Option<TaskOrigin>,
    placement: Option<&Placement>,
) -> Result<Vec<TaskId>> {
    let placed = place(new, placement);
    let new: &[NewTask] = &placed;
    let mut ids = Vec::with_capacity(new.len());
    // On SQLite a batch's rows carry the transaction's change number from the insert (0021); a
    // few rows are left to the insert trigger, cheaper than the read of the number.
    let change = match tx {
        Tx::Sqlite(..) if new.len() >= MARKED_BATCH => {
            let mark = Query::select()
                .expr(crate::exec::sqlite_change_mark())
                .to_owned();
            let (mark,): (i64,) = tx
                .fetch_optional(&mark)
                .await?
                .ok_or_else(|| Error::Migration("the change number read no row".into()))?;
            Some(mark)
        }
        _ => None,
    };
    let mut places = fair::fair_places(tx, new, origin).await?.into_iter();
    for chunk in new.chunks(INSERT_CHUNK) {
        let chunk_places = places.by_ref().take(chunk.len()).collect();
        let stmt = insert_statement(chunk, chunk_places, now, origin, change)?;
        if let Tx::Sqlite(..) = tx {
            // The `created` events are the insert's own, written by its trigger (0020).
            ids.extend(sorted_ids(tx.fetch_all(&stmt).await?));
            continue;
        }
        let mut rows: Vec<(i64,)> = tx.fetch_all(&stmt).await?;
        // RETURNING follows insertion order on both backends, but sorting costs nothing and
        // makes the pairing with `chunk` independent of that.
        rows.sort_unstable();
        let events: Vec<EventInsert> = rows
            .iter()
            .zip(chunk)
            .map(|((id,), task)| EventInsert {
                task_id: *id,
                seq: 1,
                at: now,
                kind: EventKind::Created,
                data: created_data(task, origin),
            })
            .collect();
        insert_events(tx, &events).await?;
        ids.extend(rows.into_iter().map(|(id,)| TaskId(id)));
    }
    let rounds: Vec<(TaskId, &orchestrator_types::PullTarget)> = ids
        .iter()
        .zip(new)
        .filter_map(|(id, task)| task.pull.as_ref().map(|pull| (*id, pull)))
        .collect();
    if !rounds.is_empty() {
        crate::pulls::record_rounds(tx, &rounds, now).await?;
    }
    Ok(ids)
}

/// The ids an insert returned, in insertion order.
fn sorted_ids(mut rows: Vec<(i64,)>) -> Vec<TaskId> {
    rows.sort_unstable();
    rows.into_iter().map(|(id,)| TaskId(id)).collect()
}

impl Store {
    /// Creates one task in state `queued`, with its `created` event.
    pub fn create_task<'a>(&'a self, new: &'a NewTask) -> BoxFuture<'a, Result<TaskId>> {
        Box::pin(self.create_task_unboxed(new))
    }

    async fn create_task_unboxed(&self, new: &NewTask) -> Result<TaskId> {
        let ids = self.create_tasks(std::slice::from_ref(new)).await?;
        ids.into_iter()
            .next()
            .ok_or_else(|| Error::Migration("insert returned no id".into()))
    }

    /// Creates tasks in one transaction (one commit, one wake-up), in order.
    pub fn create_tasks<'a>(&'a self, new: &'a [NewTask]) -> BoxFuture<'a, Result<Vec<TaskId>>> {
        Box::pin(self.create_tasks_unboxed(new))
    }

    async fn create_tasks_unboxed(&self, new: &[NewTask]) -> Result<Vec<TaskId>> {
        if new.is_empty() {
            return Ok(Vec::new());
        }
        for task in new {
            task.validate()?;
        }
        let now = now_millis();
        if let (Pool::Postgres(_), [task]) = (&self.pool, new) {
            let stmt = create_one_statement(task, now, self.placement())?;
            let (id,): (i64,) = self
                .pool
                .fetch_optional(&stmt)
                .await?
                .ok_or_else(|| Error::Migration("insert returned no id".into()))?;
            self.wake.wake();
            return Ok(vec![TaskId(id)]);
        }
        if let (Pool::Sqlite(..), [task]) = (&self.pool, new) {
            // One statement, a transaction of its own, its `created` events written by its
            // trigger (0020): as a transaction it was four round trips to the connection's thread,
            // each on the way from the creation to the task's start. A batch is a transaction:
            // its tasks' virtual times are read before its insert (fair.rs), and from
            // MARKED_BATCH tasks on the insert carries the change number (0021, `insert_tasks`).
            let placed = place(new, self.placement());
            let places = vec![fair::fair_place(task, None)];
            let stmt = insert_statement(&placed, places, now, None, None)?;
            let rows: Vec<(i64,)> = self.pool.write_fetch_all_at(|_| stmt).await?;
            self.wake.wake();
            return Ok(sorted_ids(rows));
        }
        let mut tx = self.pool.begin().await?;
        let ids = insert_tasks(&mut tx, new, now, None, self.placement()).await?;
        tx.notify_task_available().await?;
        tx.commit().await?;
        self.wake.wake();
        Ok(ids)
    }

    /// Creates a task on behalf of the attempt that holds `lease` (a sub-agent, a task an agent
    /// made), in one transaction with the check that the lease still holds: a worker that lost its
    /// lease creates nothing.
    pub fn create_task_under<'a>(
        &'a self,
        lease: &'a crate::Lease,
        new: &'a NewTask,
    ) -> BoxFuture<'a, Result<TaskId>> {
        Box::pin(self.create_task_under_unboxed(lease, new))
    }

    async fn create_task_under_unboxed(
        &self,
        lease: &crate::Lease,
        new: &NewTask,
    ) -> Result<TaskId> {
        new.validate()?;
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        crate::leases::check_lease(&mut tx, lease, now).await?;
        let id = insert_task(&mut tx, new, now, self.placement()).await?;
        tx.notify_task_available().await?;
        tx.commit().await?;
        self.wake.wake();
        Ok(id)
    }

    /// Creates `new` on behalf of the attempt that holds `lease`, at most once for the task: an
    /// event of `kind` on the lease's task records the task made (`data` with `"task": id`), in
    /// the same transaction as the creation and the lease's check. When such an event exists
    /// already (an earlier try made the task and was killed before it could say so), nothing is
    /// made and that task's id is returned with `false`.
    pub fn create_task_once_under<'a>(
        &'a self,
        lease: &'a crate::Lease,
        new: &'a NewTask,
        kind: EventKind,
        data: serde_json::Value,
    ) -> BoxFuture<'a, Result<(TaskId, bool)>> {
        Box::pin(self.create_task_once_under_unboxed(lease, new, kind, data))
    }

    async fn create_task_once_under_unboxed(
        &self,
        lease: &crate::Lease,
        new: &NewTask,
        kind: EventKind,
        data: serde_json::Value,
    ) -> Result<(TaskId, bool)> {
        new.validate()?;
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let seq = crate::leases::next_seq_fenced(&mut tx, lease, now).await?;
        let earlier = Query::select()
            .column(crate::events::TaskEvents::Data)
            .from(crate::events::TaskEvents::Table)
            .and_where(Expr::col(crate::events::TaskEvents::TaskId).eq(lease.task_id.0))
            .and_where(Expr::col(crate::events::TaskEvents::Kind).eq(kind.as_str()))
            .to_owned();
        let rows: Vec<(String,)> = tx.fetch_all(&earlier).await?;
        let made = rows.iter().find_map(|(data,)| {
            serde_json::from_str::<serde_json::Value>(data)
                .ok()?
                .get("task")?
                .as_i64()
        });
        if let Some(made) = made {
            // The counter moved for nothing: the transaction is rolled back, so it did not. Now,
            // not when the driver next uses the connection: until then the task's row stays
            // locked (a rescue's `SKIP LOCKED` passes over it, a heartbeat waits).
            tx.rollback().await?;
            return Ok((TaskId(made), false));
        }
        let id = insert_task(&mut tx, new, now, self.placement()).await?;
        let mut data = data;
        if let Some(fields) = data.as_object_mut() {
            fields.insert("task".into(), json!(id.0));
        }
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: lease.task_id.0,
                seq,
                at: now,
                kind,
                data,
            }],
        )
        .await?;
        tx.notify_task_available().await?;
        tx.commit().await?;
        self.wake.wake();
        Ok((id, true))
    }

    /// Ties the task that `lease` holds to the machine of `requirement` (a `host:<id>` word):
    /// from now on only a worker offering it claims the task, because something of the task (its
    /// workspace, too large to checkpoint) exists only there. Fenced by the lease, with a
    /// `pinned` event saying why. Adding a word the task already requires changes nothing.
    pub fn pin_task<'a>(
        &'a self,
        lease: &'a crate::Lease,
        requirement: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.pin_task_unboxed(lease, requirement, reason))
    }

    async fn pin_task_unboxed(
        &self,
        lease: &crate::Lease,
        requirement: &str,
        reason: &str,
    ) -> Result<()> {
        placement::validate_requirement(requirement)?;
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let seq = crate::leases::next_seq_fenced(&mut tx, lease, now).await?;
        let read = Query::select()
            .column(Tasks::Spec)
            .from(Tasks::Table)
            .and_where(Expr::col(Tasks::Id).eq(lease.task_id.0))
            .to_owned();
        let (spec,): (String,) = tx
            .fetch_optional(&read)
            .await?
            .ok_or(Error::TaskNotFound(lease.task_id))?;
        let mut spec: NewTask = serde_json::from_str(&spec).map_err(|e| Error::Corrupt {
            what: "tasks.spec",
            message: format!("task {}: {e}", lease.task_id),
        })?;
        if !spec.requires.iter().any(|w| w == requirement) {
            spec.requires.push(requirement.to_owned());
        }
        let text = serde_json::to_string(&spec).map_err(|e| Error::Corrupt {
            what: "task spec",
            message: e.to_string(),
        })?;
        let write = Query::update()
            .table(Tasks::Table)
            .value(Tasks::Spec, text)
            .value(
                Tasks::Requires,
                placement::encode_words(spec.requires.iter().map(String::as_str)),
            )
            .and_where(Expr::col(Tasks::Id).eq(lease.task_id.0))
            .to_owned();
        tx.execute(&write).await?;
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: lease.task_id.0,
                seq,
                at: now,
                kind: EventKind::Pinned,
                data: json!({ "requirement": requirement, "reason": reason }),
            }],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Pins the lease's task to this process's host (see [`Store::pin_task`]) when the handle
    /// knows its placement; a handle without one (tests, benchmarks) runs everything anywhere
    /// and pins nothing.
    pub fn pin_to_this_host<'a>(
        &'a self,
        lease: &'a crate::Lease,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.pin_to_this_host_unboxed(lease, reason))
    }

    async fn pin_to_this_host_unboxed(&self, lease: &crate::Lease, reason: &str) -> Result<()> {
        let Some(placement) = self.placement() else {
            return Ok(());
        };
        let word = format!("{}{}", placement::HOST_PREFIX, placement.host);
        self.pin_task(lease, &word, reason).await
    }
}
