//! The `workers` table: which processes are (or were) working, for `status` displays and for
//! operators asking "who holds this lease". Leases themselves live on the tasks.

use crate::{Result, Store};
use orchestrator_types::now_millis;
use sea_query::{Expr, ExprTrait, Iden, OnConflict, Order, Query};
use serde::Serialize;

#[derive(Iden, Clone, Copy)]
enum Workers {
    Table,
    Id,
    Hostname,
    Pid,
    Slots,
    StartedAt,
    HeartbeatAt,
    StoppedAt,
}

/// A worker process as registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct WorkerRow {
    pub id: String,
    pub hostname: String,
    pub pid: i64,
    pub slots: i64,
    pub started_at: i64,
    pub heartbeat_at: i64,
    pub stopped_at: Option<i64>,
}

impl Store {
    pub async fn register_worker(
        &self,
        id: &str,
        hostname: &str,
        pid: u32,
        slots: u32,
    ) -> Result<()> {
        let now = now_millis();
        let stmt = Query::insert()
            .into_table(Workers::Table)
            .columns([
                Workers::Id,
                Workers::Hostname,
                Workers::Pid,
                Workers::Slots,
                Workers::StartedAt,
                Workers::HeartbeatAt,
            ])
            .values([
                id.into(),
                hostname.into(),
                i64::from(pid).into(),
                i64::from(slots).into(),
                now.into(),
                now.into(),
            ])?
            .on_conflict(
                OnConflict::column(Workers::Id)
                    .update_columns([Workers::HeartbeatAt])
                    .to_owned(),
            )
            .to_owned();
        self.pool.write(&stmt).await?;
        Ok(())
    }

    pub async fn worker_heartbeat(&self, id: &str) -> Result<()> {
        let stmt = Query::update()
            .table(Workers::Table)
            .value(Workers::HeartbeatAt, now_millis())
            .and_where(Expr::col(Workers::Id).eq(id))
            .to_owned();
        self.pool.write(&stmt).await?;
        Ok(())
    }

    pub async fn worker_stopped(&self, id: &str) -> Result<()> {
        let stmt = Query::update()
            .table(Workers::Table)
            .value(Workers::StoppedAt, now_millis())
            .and_where(Expr::col(Workers::Id).eq(id))
            .to_owned();
        self.pool.write(&stmt).await?;
        Ok(())
    }

    /// Workers, most recently started first.
    pub async fn workers(&self, limit: u64) -> Result<Vec<WorkerRow>> {
        let stmt = Query::select()
            .columns([
                Workers::Id,
                Workers::Hostname,
                Workers::Pid,
                Workers::Slots,
                Workers::StartedAt,
                Workers::HeartbeatAt,
                Workers::StoppedAt,
            ])
            .from(Workers::Table)
            .order_by(Workers::StartedAt, Order::Desc)
            .limit(limit)
            .to_owned();
        self.pool.fetch_all(&stmt).await
    }
}
