//! The `checklist_items` table: the checklist an agent keeps for its task, which a user watches with
//! `task read` and `task events --follow`.
//!
//! The agent's tools read the list, change it in memory and write it back whole; the write is fenced
//! by the lease, and only the attempt holding the lease writes, so there is no lost update.

use crate::events::{EventInsert, insert_events};
use crate::leases::{Lease, next_seq_fenced};
use crate::{Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{EventKind, TaskId, now_millis};
use sea_query::{Expr, ExprTrait, Iden, Order, Query};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Iden, Clone, Copy)]
enum ChecklistItems {
    Table,
    TaskId,
    Position,
    Text,
    Status,
    UpdatedAt,
}

/// One item. `status` is `pending`, `in_progress`, `done` or `skipped` (the worker checks it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecklistItem {
    /// 1-based.
    pub position: i64,
    pub text: String,
    pub status: String,
    pub updated_at: i64,
}

from_row!(ChecklistItem {
    position,
    text,
    status,
    updated_at
});

impl Store {
    /// Replaces the checklist of the task held by `lease`, with a `checklist` event that carries the
    /// whole list and its completion.
    pub fn write_checklist<'a>(
        &'a self,
        lease: &'a Lease,
        items: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<Vec<ChecklistItem>>> {
        Box::pin(self.write_checklist_unboxed(lease, items))
    }

    async fn write_checklist_unboxed(
        &self,
        lease: &Lease,
        items: &[(String, String)],
    ) -> Result<Vec<ChecklistItem>> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let seq = next_seq_fenced(&mut tx, lease, now).await?;
        let delete = Query::delete()
            .from_table(ChecklistItems::Table)
            .and_where(Expr::col(ChecklistItems::TaskId).eq(lease.task_id.0))
            .to_owned();
        tx.execute(&delete).await?;
        let mut written = Vec::with_capacity(items.len());
        if !items.is_empty() {
            let mut insert = Query::insert()
                .into_table(ChecklistItems::Table)
                .columns([
                    ChecklistItems::TaskId,
                    ChecklistItems::Position,
                    ChecklistItems::Text,
                    ChecklistItems::Status,
                    ChecklistItems::UpdatedAt,
                ])
                .to_owned();
            for (i, (text, status)) in items.iter().enumerate() {
                let position = i as i64 + 1;
                insert.values([
                    lease.task_id.0.into(),
                    position.into(),
                    text.as_str().into(),
                    status.as_str().into(),
                    now.into(),
                ])?;
                written.push(ChecklistItem {
                    position,
                    text: text.clone(),
                    status: status.clone(),
                    updated_at: now,
                });
            }
            tx.execute(&insert).await?;
        }
        let done = written.iter().filter(|i| i.status == "done").count();
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: lease.task_id.0,
                seq,
                at: now,
                kind: EventKind::Checklist,
                data: json!({
                    "done": done,
                    "total": written.len(),
                    "items": written.iter().map(|i| json!({"text": i.text, "status": i.status})).collect::<Vec<_>>(),
                }),
            }],
        )
        .await?;
        tx.commit().await?;
        Ok(written)
    }

    /// The checklist of a task, in order.
    pub fn checklist<'a>(&'a self, task: TaskId) -> BoxFuture<'a, Result<Vec<ChecklistItem>>> {
        Box::pin(self.checklist_unboxed(task))
    }

    async fn checklist_unboxed(&self, task: TaskId) -> Result<Vec<ChecklistItem>> {
        let stmt = Query::select()
            .columns([
                ChecklistItems::Position,
                ChecklistItems::Text,
                ChecklistItems::Status,
                ChecklistItems::UpdatedAt,
            ])
            .from(ChecklistItems::Table)
            .and_where(Expr::col(ChecklistItems::TaskId).eq(task.0))
            .order_by(ChecklistItems::Position, Order::Asc)
            .to_owned();
        self.pool.fetch_all(&stmt).await
    }
}
