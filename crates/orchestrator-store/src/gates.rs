//! The `gates` table: one row per gate run, with its verdict, its evidence and its log artifact.
//!
//! A gate is recorded in one transaction with its log artifact and its `gate_finished` event, fenced
//! by the attempt's lease: a stale worker's evidence never lands.

use crate::artifacts::{ArtifactInsert, compress, insert_artifact};
use crate::events::{EventInsert, insert_events};
use crate::leases::{Lease, next_seq_fenced};
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{
    ArtifactId, Byproducts, Captured, EventKind, FailureKind, GateEvidence, GateRecord, GateSpec,
    TaskId, Verdict, now_millis,
};
use sea_query::{Expr, ExprTrait, Iden, Order, Query};
use serde_json::json;

#[derive(Iden, Clone, Copy)]
pub(crate) enum Gates {
    Table,
    Id,
    TaskId,
    Attempt,
    Epoch,
    Position,
    Name,
    Command,
    Verdict,
    FailureKind,
    ExitCode,
    Signal,
    DurationMs,
    Summary,
    Details,
    LogArtifactId,
    GitHead,
    GitDirty,
    DiffHash,
    Byproducts,
    StartedAt,
    FinishedAt,
}

struct GateRow {
    id: i64,
    attempt: i64,
    position: i64,
    name: String,
    command: String,
    verdict: String,
    failure_kind: Option<String>,
    exit_code: Option<i64>,
    duration_ms: i64,
    summary: String,
    log_artifact_id: Option<i64>,
    git_head: Option<String>,
    git_dirty: Option<bool>,
    diff_hash: Option<String>,
    byproducts: Option<String>,
    started_at: i64,
    finished_at: i64,
}

from_row!(GateRow {
    id,
    attempt,
    position,
    name,
    command,
    verdict,
    failure_kind,
    exit_code,
    duration_ms,
    summary,
    log_artifact_id,
    git_head,
    git_dirty,
    diff_hash,
    byproducts,
    started_at,
    finished_at
});

/// A gate run to record.
#[derive(Debug)]
pub struct GateRun<'a> {
    pub lease: &'a Lease,
    pub attempt: i64,
    pub position: i64,
    pub spec: &'a GateSpec,
    pub evidence: &'a GateEvidence,
    pub log: &'a Captured,
}

impl Store {
    /// Records a finished gate with its log, fenced by `run.lease`.
    pub fn record_gate<'a>(
        &'a self,
        run: &'a GateRun<'a>,
    ) -> BoxFuture<'a, Result<(i64, ArtifactId)>> {
        Box::pin(self.record_gate_unboxed(run))
    }

    async fn record_gate_unboxed(&self, run: &GateRun<'_>) -> Result<(i64, ArtifactId)> {
        let evidence = run.evidence;
        let compressed = compress(run.log)?;
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let summary = format!(
            "gate {:?} {}: {}",
            run.spec.name, evidence.verdict, evidence.summary.text
        );
        let artifact = insert_artifact(
            &mut tx,
            &ArtifactInsert {
                task_id: Some(run.lease.task_id),
                kind: "gate_log",
                media_type: "text/plain",
                summary: &summary,
                captured: run.log,
            },
            compressed,
        )
        .await?;
        let git = evidence.git.clone().unwrap_or_default();
        let details = serde_json::to_string(&evidence.summary).map_err(|e| Error::Corrupt {
            what: "gate summary",
            message: e.to_string(),
        })?;
        let byproducts = byproducts_json(&evidence.byproducts)?;
        let stmt = Query::insert()
            .into_table(Gates::Table)
            .columns([
                Gates::TaskId,
                Gates::Attempt,
                Gates::Epoch,
                Gates::Position,
                Gates::Name,
                Gates::Command,
                Gates::Verdict,
                Gates::FailureKind,
                Gates::ExitCode,
                Gates::Signal,
                Gates::DurationMs,
                Gates::Summary,
                Gates::Details,
                Gates::LogArtifactId,
                Gates::GitHead,
                Gates::GitDirty,
                Gates::DiffHash,
                Gates::Byproducts,
                Gates::StartedAt,
                Gates::FinishedAt,
            ])
            .values([
                run.lease.task_id.0.into(),
                run.attempt.into(),
                run.lease.epoch.into(),
                run.position.into(),
                run.spec.name.clone().into(),
                run.spec.command.clone().into(),
                evidence.verdict.as_str().into(),
                evidence.failure_kind.map(|k| k.as_str()).into(),
                evidence.exit_code.map(i64::from).into(),
                evidence.signal.map(i64::from).into(),
                evidence.duration_ms.into(),
                evidence.summary.text.clone().into(),
                details.into(),
                artifact.0.into(),
                git.head.clone().into(),
                evidence.git.as_ref().map(|g| g.dirty).into(),
                git.diff_hash.clone().into(),
                byproducts.into(),
                evidence.started_at.into(),
                evidence.finished_at.into(),
            ])?
            .returning_col(Gates::Id)
            .to_owned();
        let (gate_id,): (i64,) = tx
            .fetch_optional(&stmt)
            .await?
            .ok_or_else(|| Error::Migration("gate insert returned no id".into()))?;
        // The fence comes last, just before the event that needs its number: on PostgreSQL it
        // locks the task's row until the commit, and the lease's heartbeat waits for that lock. A
        // fence taken first would hold it through the log's and the gate's inserts, which on a
        // slow link is long enough for the lease to lapse under a healthy worker. A stale lease
        // still writes nothing: the transaction is dropped with its inserts.
        // The final log replaces the live one: a reader finds one or the other, never both.
        crate::live_logs::delete_live_log(
            &mut tx,
            run.lease.task_id,
            crate::live_source::GATE,
            run.position,
        )
        .await?;
        let seq = next_seq_fenced(&mut tx, run.lease, now).await?;
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: run.lease.task_id.0,
                seq,
                at: now,
                kind: EventKind::GateFinished,
                data: json!({
                    "gate": run.spec.name,
                    "position": run.position,
                    "verdict": evidence.verdict,
                    "failure_kind": evidence.failure_kind,
                    "exit_code": evidence.exit_code,
                    "duration_ms": evidence.duration_ms,
                    "summary": evidence.summary.text,
                    "log_artifact": artifact.0,
                    "git_head": git.head,
                    "git_dirty": evidence.git.as_ref().map(|g| g.dirty),
                }),
            }],
        )
        .await?;
        tx.commit().await?;
        Ok((gate_id, artifact))
    }

    /// Every gate run of a task, oldest attempt first, in spec order.
    pub fn gates<'a>(&'a self, task: TaskId) -> BoxFuture<'a, Result<Vec<GateRecord>>> {
        Box::pin(self.gates_unboxed(task))
    }

    async fn gates_unboxed(&self, task: TaskId) -> Result<Vec<GateRecord>> {
        let stmt = Query::select()
            .columns([
                Gates::Id,
                Gates::Attempt,
                Gates::Position,
                Gates::Name,
                Gates::Command,
                Gates::Verdict,
                Gates::FailureKind,
                Gates::ExitCode,
                Gates::DurationMs,
                Gates::Summary,
                Gates::LogArtifactId,
                Gates::GitHead,
                Gates::GitDirty,
                Gates::DiffHash,
                Gates::Byproducts,
                Gates::StartedAt,
                Gates::FinishedAt,
            ])
            .from(Gates::Table)
            .and_where(Expr::col(Gates::TaskId).eq(task.0))
            .order_by(Gates::Attempt, Order::Asc)
            .order_by(Gates::Position, Order::Asc)
            .order_by(Gates::Id, Order::Asc)
            .to_owned();
        let rows: Vec<GateRow> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter()
            .map(|row| {
                let corrupt = |e: orchestrator_types::Error| Error::Corrupt {
                    what: "gates",
                    message: format!("gate {}: {e}", row.id),
                };
                Ok(GateRecord {
                    id: row.id,
                    attempt: row.attempt,
                    position: row.position,
                    name: row.name.clone(),
                    command: row.command.clone(),
                    verdict: row.verdict.parse::<Verdict>().map_err(corrupt)?,
                    failure_kind: row
                        .failure_kind
                        .as_deref()
                        .map(str::parse::<FailureKind>)
                        .transpose()
                        .map_err(corrupt)?,
                    exit_code: row.exit_code.and_then(|c| i32::try_from(c).ok()),
                    duration_ms: row.duration_ms,
                    summary: row.summary.clone(),
                    log_artifact: row.log_artifact_id.map(ArtifactId),
                    git_head: row.git_head.clone(),
                    git_dirty: row.git_dirty,
                    diff_hash: row.diff_hash.clone(),
                    byproducts: parse_byproducts(row.byproducts.as_deref()).map_err(|e| {
                        Error::Corrupt {
                            what: "gates",
                            message: format!("gate {}: byproducts: {e}", row.id),
                        }
                    })?,
                    started_at: row.started_at,
                    finished_at: row.finished_at,
                })
            })
            .collect()
    }
}

/// The byproducts column: `NULL` for none, else their JSON.
pub(crate) fn byproducts_json(byproducts: &Byproducts) -> Result<Option<String>> {
    if byproducts.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(byproducts)
        .map(Some)
        .map_err(|e| Error::Corrupt {
            what: "gate byproducts",
            message: e.to_string(),
        })
}

pub(crate) fn parse_byproducts(text: Option<&str>) -> serde_json::Result<Byproducts> {
    text.map_or(Ok(Byproducts::default()), serde_json::from_str)
}
