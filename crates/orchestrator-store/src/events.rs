//! The `task_events` table: each task's append-only timeline, numbered 1, 2, 3, ...
//!
//! Events are only inserted in the transaction that makes the change they describe (see tasks.rs);
//! this module reads them and offers a fenced append for progress that changes no state.

use crate::batch_rows::{Column, json_rows};
use crate::exec::{Pool, Tx};
use crate::fenced::{self, Written};
use crate::leases::{Lease, next_seq_fenced};
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{EventKind, TaskEvent, TaskId, TaskState, now_millis};
use sea_query::{Expr, ExprTrait, Iden, Order, Query};
use serde_json::json;

#[derive(Iden, Clone, Copy)]
pub(crate) enum TaskEvents {
    Table,
    TaskId,
    Seq,
    At,
    Kind,
    Data,
}

pub(crate) struct EventInsert {
    pub task_id: i64,
    pub seq: i64,
    pub at: i64,
    pub kind: EventKind,
    pub data: serde_json::Value,
}

/// The columns of an event's row, in the order its inserts give them and its reads take them.
pub(crate) const EVENT_COLUMNS: [TaskEvents; 5] = [
    TaskEvents::TaskId,
    TaskEvents::Seq,
    TaskEvents::At,
    TaskEvents::Kind,
    TaskEvents::Data,
];

/// The columns of [`EVENT_COLUMNS`] as an insert's list of rows reads them.
const EVENT_ROW: [Column; 5] = [
    Column::Int("task_id"),
    Column::Int("seq"),
    Column::Int("at"),
    Column::Text("kind"),
    Column::Text("data"),
];

/// Inserts events with one statement, whose text is the same for any number of them (see
/// batch_rows.rs): the completer and the rescuer write a batch's events at once.
pub(crate) async fn insert_events(tx: &mut Tx, events: &[EventInsert]) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let rows = events
        .iter()
        .map(|event| {
            json!([
                event.task_id,
                event.seq,
                event.at,
                event.kind.as_str(),
                event.data.to_string()
            ])
        })
        .collect();
    let stmt = Query::insert()
        .into_table(TaskEvents::Table)
        .columns(EVENT_COLUMNS)
        .select_from(json_rows(tx.backend(), &EVENT_ROW, rows))?
        .to_owned();
    tx.execute(&stmt).await?;
    Ok(())
}

impl Store {
    /// Events of a task with `seq > after`, oldest first, at most `limit`.
    pub fn events<'a>(
        &'a self,
        task: TaskId,
        after: i64,
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<TaskEvent>>> {
        Box::pin(self.events_unboxed(task, after, limit))
    }

    async fn events_unboxed(&self, task: TaskId, after: i64, limit: u64) -> Result<Vec<TaskEvent>> {
        self.select_events(task, after, None, limit).await
    }

    /// Every event of one kind of a task, oldest first: its GitHub writes, say, without reading
    /// the turns between them.
    pub fn events_of_kind<'a>(
        &'a self,
        task: TaskId,
        kind: EventKind,
    ) -> BoxFuture<'a, Result<Vec<TaskEvent>>> {
        Box::pin(self.events_of_kind_unboxed(task, kind))
    }

    async fn events_of_kind_unboxed(
        &self,
        task: TaskId,
        kind: EventKind,
    ) -> Result<Vec<TaskEvent>> {
        self.select_events(task, 0, Some(kind), u64::MAX >> 1).await
    }

    async fn select_events(
        &self,
        task: TaskId,
        after: i64,
        kind: Option<EventKind>,
        limit: u64,
    ) -> Result<Vec<TaskEvent>> {
        let mut stmt = Query::select()
            .columns(EVENT_COLUMNS)
            .from(TaskEvents::Table)
            .and_where(Expr::col(TaskEvents::TaskId).eq(task.0))
            .and_where(Expr::col(TaskEvents::Seq).gt(after))
            .order_by(TaskEvents::Seq, Order::Asc)
            .limit(limit)
            .to_owned();
        if let Some(kind) = kind {
            stmt.and_where(Expr::col(TaskEvents::Kind).eq(kind.as_str()));
        }
        let rows: Vec<(i64, i64, i64, String, String)> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter()
            .map(|(task_id, seq, at, kind, data)| {
                Ok(TaskEvent {
                    task_id: TaskId(task_id),
                    seq,
                    at,
                    kind,
                    data: serde_json::from_str(&data).map_err(|e| Error::Corrupt {
                        what: "task_events.data",
                        message: e.to_string(),
                    })?,
                })
            })
            .collect()
    }

    /// Appends an `input` event (more instructions for the task's agent, read between its turns)
    /// to a task that has not finished. Returns the event's number.
    pub fn post_input<'a>(&'a self, task: TaskId, text: &'a str) -> BoxFuture<'a, Result<i64>> {
        Box::pin(self.post_input_unboxed(task, text))
    }

    async fn post_input_unboxed(&self, task: TaskId, text: &str) -> Result<i64> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        // A parent agent's input is fenced by the parent's lease (a fenced handle); a person's is
        // not.
        self.check_fence(&mut tx, now).await?;
        let stmt = Query::update()
            .table(crate::tasks::Tasks::Table)
            .value(
                crate::tasks::Tasks::EventSeq,
                Expr::col(crate::tasks::Tasks::EventSeq).add(1),
            )
            .value(crate::tasks::Tasks::UpdatedAt, now)
            .and_where(Expr::col(crate::tasks::Tasks::Id).eq(task.0))
            .and_where(Expr::col(crate::tasks::Tasks::State).is_in([
                TaskState::Queued.as_str(),
                TaskState::Running.as_str(),
                TaskState::Waiting.as_str(),
            ]))
            .returning_col(crate::tasks::Tasks::EventSeq)
            .to_owned();
        let Some((seq,)) = tx.fetch_optional::<(i64,), _>(&stmt).await? else {
            let state = self.get_task(task).await?.state;
            return Err(Error::WrongState {
                task,
                state: state.to_string(),
                message: "a finished task takes no more input".into(),
            });
        };
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: task.0,
                seq,
                at: now,
                kind: EventKind::Input,
                data: serde_json::json!({ "text": text }),
            }],
        )
        .await?;
        tx.commit().await?;
        Ok(seq)
    }

    /// Appends an event to a task in any state, for what a person does to it from outside an
    /// attempt (a GitHub write made with `orchestrator github`, recorded on the task it was for).
    pub fn record_event<'a>(
        &'a self,
        task: TaskId,
        kind: EventKind,
        data: serde_json::Value,
    ) -> BoxFuture<'a, Result<i64>> {
        Box::pin(self.record_event_unboxed(task, kind, data))
    }

    async fn record_event_unboxed(
        &self,
        task: TaskId,
        kind: EventKind,
        data: serde_json::Value,
    ) -> Result<i64> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let seq = crate::tasks::next_seq(&mut tx, task, now).await?;
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: task.0,
                seq,
                at: now,
                kind,
                data,
            }],
        )
        .await?;
        tx.commit().await?;
        Ok(seq)
    }

    /// Appends an event for a running attempt, refused with `StaleLease` once the lease is gone.
    pub fn append_event<'a>(
        &'a self,
        lease: &'a Lease,
        kind: EventKind,
        data: serde_json::Value,
    ) -> BoxFuture<'a, Result<i64>> {
        Box::pin(self.append_event_unboxed(lease, kind, data))
    }

    async fn append_event_unboxed(
        &self,
        lease: &Lease,
        kind: EventKind,
        data: serde_json::Value,
    ) -> Result<i64> {
        let now = now_millis();
        if let Pool::Postgres(_) = &self.pool {
            let written =
                fenced::write(&self.pool, lease, now, 0, &[], Vec::new(), kind, &data).await?;
            if let Written::Event(seq) = written {
                return Ok(seq);
            }
            // Stale; a collision needs a message, and would be written below.
            fenced::collided(written, lease)?;
        }
        let mut tx = self.pool.begin().await?;
        let seq = next_seq_fenced(&mut tx, lease, now).await?;
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
        tx.commit().await?;
        Ok(seq)
    }
}
