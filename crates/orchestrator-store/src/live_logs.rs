//! The `live_logs` and `live_log_chunks` tables: what a gate or a shell job has printed so far,
//! while it runs, readable from any node by byte offset.
//!
//! The runner writes a command's output in chunks, a few times a second at most (never per line),
//! each chunk at its offset in the output. The head (the first `head_cap` bytes) is kept whole and
//! so are the chunks of the last `tail_cap` bytes; older chunks between them are deleted as new
//! ones come, so a running command holds at most about what its final artifact will: the same
//! head-and-tail rule. A follower asks for what lies after the last byte it saw
//! ([`orchestrator_types::slice_after`]); bytes it missed because they were deleted (or never
//! written, when the command printed faster than a flush may carry) come as the artifact's marker.
//!
//! When the command's final log is recorded (`record_gate`, `shell_job_finished`), its live log is
//! deleted in the same transaction, so a reader finds exactly one of the two. A live log whose
//! attempt ended without recording its gate (the worker died) is `abandoned`: it stays until the
//! same gate starts again.

use crate::exec::Tx;
use crate::gates::Gates;
use crate::leases::{Lease, check_lease};
use crate::{Error, Result, Store};
use orchestrator_types::{
    Captured, GateRecord, GateSummary, LogSlice, TaskId, TaskState, now_millis, slice_after,
};
use sea_query::{Expr, ExprTrait, Iden, Order, Query};
use serde::Serialize;

/// Bytes of output one chunk row holds at most.
const CHUNK_BYTES: usize = 256 * 1024;

/// What a live log is the output of.
pub mod live_source {
    /// A gate; the key is its position.
    pub const GATE: &str = "gate";
    /// A shell job an agent started; the key is the job's id.
    pub const SHELL_JOB: &str = "shell_job";
}

/// How a gate's log reads now.
pub mod log_state {
    /// The gate is in the task's spec but has not started (in this attempt, or ever).
    pub const PENDING: &str = "pending";
    /// It runs: the log is its live output so far.
    pub const RUNNING: &str = "running";
    /// It ended: the log is its recorded artifact, and the gate record has the verdict.
    pub const FINISHED: &str = "finished";
    /// Its attempt ended without recording it (the worker stopped): the output so far, no verdict.
    pub const ABANDONED: &str = "abandoned";
}

#[derive(Iden, Clone, Copy)]
enum LiveLogs {
    Table,
    Id,
    TaskId,
    Source,
    SourceKey,
    Attempt,
    Name,
    HeadCap,
    TailCap,
    TotalBytes,
    StartedAt,
    UpdatedAt,
}

#[derive(Iden, Clone, Copy)]
enum LiveLogChunks {
    Table,
    LiveLogId,
    StartOffset,
    EndOffset,
    Data,
}

/// A live log to start for the attempt of `lease`.
#[derive(Debug)]
pub struct LiveLogStart<'a> {
    pub lease: &'a Lease,
    /// One of [`live_source`].
    pub source: &'a str,
    pub key: i64,
    pub attempt: i64,
    pub name: &'a str,
    pub head_cap: u64,
    pub tail_cap: u64,
}

/// Where a runner writes a live log's chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveLogHandle {
    pub id: i64,
    pub head_cap: u64,
    pub tail_cap: u64,
}

/// A live log, without its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct LiveLog {
    pub id: i64,
    pub task_id: i64,
    pub source: String,
    pub source_key: i64,
    pub attempt: i64,
    pub name: String,
    pub head_cap: i64,
    pub tail_cap: i64,
    pub total_bytes: i64,
    pub started_at: i64,
    pub updated_at: i64,
}

const COLUMNS: [LiveLogs; 11] = [
    LiveLogs::Id,
    LiveLogs::TaskId,
    LiveLogs::Source,
    LiveLogs::SourceKey,
    LiveLogs::Attempt,
    LiveLogs::Name,
    LiveLogs::HeadCap,
    LiveLogs::TailCap,
    LiveLogs::TotalBytes,
    LiveLogs::StartedAt,
    LiveLogs::UpdatedAt,
];

/// A gate's log as it reads now: live while it runs, its artifact once it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateLog {
    pub task_id: TaskId,
    pub position: i64,
    pub name: String,
    /// One of [`log_state`].
    pub state: &'static str,
    /// The attempt the log is of; `None` while pending.
    pub attempt: Option<i64>,
    /// Bytes the gate has printed so far (all of them once it ended), kept or not.
    pub total_bytes: u64,
    /// What the reader asked for: the bytes after its offset.
    pub slice: LogSlice,
    /// The record, with the verdict, once it ended.
    pub gate: Option<GateRecord>,
    /// What the gate's summary names as its first failure (a failing test), for a reader to find.
    pub first_failure: Option<String>,
    /// When the live log was last written; `None` unless running or abandoned.
    pub updated_at: Option<i64>,
}

/// A shell job's log as it reads now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLog {
    pub job: crate::ShellJob,
    /// `running` with the live output, or the job's own status with its recorded log.
    pub state: String,
    pub total_bytes: u64,
    pub slice: LogSlice,
}

/// Deletes the live log of one command, in the transaction that records its final log.
pub(crate) async fn delete_live_log(
    tx: &mut Tx,
    task: TaskId,
    source: &str,
    key: i64,
) -> Result<()> {
    let stmt = Query::delete()
        .from_table(LiveLogs::Table)
        .and_where(Expr::col(LiveLogs::TaskId).eq(task.0))
        .and_where(Expr::col(LiveLogs::Source).eq(source))
        .and_where(Expr::col(LiveLogs::SourceKey).eq(key))
        .to_owned();
    // The chunks go with it (ON DELETE CASCADE; SQLite's foreign keys are on).
    tx.execute(&stmt).await?;
    Ok(())
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

impl Store {
    /// Starts the live log of a command about to run for the attempt of `lease`, replacing any
    /// earlier one of the same source (an earlier attempt's, or an abandoned one).
    pub async fn live_log_start(&self, start: &LiveLogStart<'_>) -> Result<LiveLogHandle> {
        let now = now_millis();
        let task = start.lease.task_id;
        let mut tx = self.pool.begin().await?;
        // A worker that lost its lease may not write in the task's name.
        check_lease(&mut tx, start.lease, now).await?;
        delete_live_log(&mut tx, task, start.source, start.key).await?;
        let stmt = Query::insert()
            .into_table(LiveLogs::Table)
            .columns([
                LiveLogs::TaskId,
                LiveLogs::Source,
                LiveLogs::SourceKey,
                LiveLogs::Attempt,
                LiveLogs::Name,
                LiveLogs::HeadCap,
                LiveLogs::TailCap,
                LiveLogs::TotalBytes,
                LiveLogs::StartedAt,
                LiveLogs::UpdatedAt,
            ])
            .values([
                task.0.into(),
                start.source.into(),
                start.key.into(),
                start.attempt.into(),
                start.name.into(),
                to_i64(start.head_cap).into(),
                to_i64(start.tail_cap).into(),
                0i64.into(),
                now.into(),
                now.into(),
            ])?
            .returning_col(LiveLogs::Id)
            .to_owned();
        let (id,): (i64,) = tx
            .fetch_optional(&stmt)
            .await?
            .ok_or_else(|| Error::Migration("live log insert returned no id".into()))?;
        tx.commit().await?;
        Ok(LiveLogHandle {
            id,
            head_cap: start.head_cap,
            tail_cap: start.tail_cap,
        })
    }

    /// Adds the chunks a runner gathered since its last write (each at its offset in the output;
    /// in order) and the output's length so far, then deletes the chunks that left the tail
    /// window. `false` when the live log is gone (its final log was recorded, or another attempt
    /// replaced it): the runner stops writing.
    pub async fn live_log_append(
        &self,
        log: &LiveLogHandle,
        pieces: &[(u64, &[u8])],
        total: u64,
    ) -> Result<bool> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        // The row first: it locks the log against its deletion until this commits, and says
        // whether there is a log to write to at all.
        let touch = Query::update()
            .table(LiveLogs::Table)
            .value(LiveLogs::TotalBytes, to_i64(total))
            .value(LiveLogs::UpdatedAt, now)
            .and_where(Expr::col(LiveLogs::Id).eq(log.id))
            .to_owned();
        if tx.execute(&touch).await? == 0 {
            return Ok(false);
        }
        // One statement per chunk of at most CHUNK_BYTES: a statement copies its values (into
        // the query's arguments, then the driver's), so a big write made in one statement would
        // cost a running gate's process several times its size in memory at once.
        for (offset, bytes) in pieces {
            for (i, chunk) in bytes.chunks(CHUNK_BYTES).enumerate() {
                let start = offset + (i * CHUNK_BYTES) as u64;
                let insert = Query::insert()
                    .into_table(LiveLogChunks::Table)
                    .columns([
                        LiveLogChunks::LiveLogId,
                        LiveLogChunks::StartOffset,
                        LiveLogChunks::EndOffset,
                        LiveLogChunks::Data,
                    ])
                    .values([
                        log.id.into(),
                        to_i64(start).into(),
                        to_i64(start + chunk.len() as u64).into(),
                        chunk.to_vec().into(),
                    ])?
                    .to_owned();
                tx.execute(&insert).await?;
            }
        }
        if let Some(window_start) = total.checked_sub(log.tail_cap) {
            let trim = Query::delete()
                .from_table(LiveLogChunks::Table)
                .and_where(Expr::col(LiveLogChunks::LiveLogId).eq(log.id))
                .and_where(Expr::col(LiveLogChunks::StartOffset).gte(to_i64(log.head_cap)))
                .and_where(Expr::col(LiveLogChunks::EndOffset).lte(to_i64(window_start)))
                .to_owned();
            tx.execute(&trim).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// The live logs of a task, oldest first.
    pub async fn live_logs(&self, task: TaskId) -> Result<Vec<LiveLog>> {
        let stmt = Query::select()
            .columns(COLUMNS)
            .from(LiveLogs::Table)
            .and_where(Expr::col(LiveLogs::TaskId).eq(task.0))
            .order_by(LiveLogs::Id, Order::Asc)
            .to_owned();
        self.pool.fetch_all(&stmt).await
    }

    /// The live log of one command of a task, if it has one.
    pub async fn live_log(&self, task: TaskId, source: &str, key: i64) -> Result<Option<LiveLog>> {
        let stmt = Query::select()
            .columns(COLUMNS)
            .from(LiveLogs::Table)
            .and_where(Expr::col(LiveLogs::TaskId).eq(task.0))
            .and_where(Expr::col(LiveLogs::Source).eq(source))
            .and_where(Expr::col(LiveLogs::SourceKey).eq(key))
            .to_owned();
        self.pool.fetch_optional(&stmt).await
    }

    /// The bytes of a live log after `from`, at most `limit` of them; the output's length so far.
    pub async fn live_log_read(
        &self,
        log: &LiveLog,
        from: u64,
        limit: usize,
    ) -> Result<(LogSlice, u64)> {
        let stmt = Query::select()
            .columns([LiveLogChunks::StartOffset, LiveLogChunks::Data])
            .from(LiveLogChunks::Table)
            .and_where(Expr::col(LiveLogChunks::LiveLogId).eq(log.id))
            .and_where(Expr::col(LiveLogChunks::EndOffset).gt(to_i64(from)))
            .order_by(LiveLogChunks::StartOffset, Order::Asc)
            .to_owned();
        let chunks: Vec<(i64, Vec<u8>)> = self.pool.fetch_all(&stmt).await?;
        // Chunks written after the row was read count too.
        let written = chunks
            .last()
            .map_or(0, |(start, data)| to_u64(*start) + data.len() as u64);
        let total = Ord::max(written, to_u64(log.total_bytes));
        let pieces = chunks
            .iter()
            .map(|(start, data)| (to_u64(*start), data.as_slice()));
        Ok((slice_after(pieces, total, from, limit, false), total))
    }

    /// The log of the gate at `position` of a task: its live output while it runs, its recorded
    /// log once it ended (the newest attempt's), from byte `from`, at most `limit` bytes.
    /// `GateNotFound` when the task has no such gate at all.
    pub async fn gate_log(
        &self,
        task: TaskId,
        position: i64,
        from: u64,
        limit: usize,
    ) -> Result<GateLog> {
        let spec = self.get_task(task).await?;
        if let Some(live) = self.live_log(task, live_source::GATE, position).await? {
            let (slice, total) = self.live_log_read(&live, from, limit).await?;
            // The gate may have ended since the row was read; its record then tells.
            let current = self.get_task(task).await?;
            let ours = current.state == TaskState::Running && current.attempt == live.attempt;
            let gone = !ours
                && self
                    .live_log(task, live_source::GATE, position)
                    .await?
                    .is_none();
            if !gone {
                return Ok(GateLog {
                    task_id: task,
                    position,
                    name: live.name.clone(),
                    state: if ours {
                        log_state::RUNNING
                    } else {
                        log_state::ABANDONED
                    },
                    attempt: Some(live.attempt),
                    total_bytes: total,
                    slice,
                    gate: None,
                    first_failure: None,
                    updated_at: Some(live.updated_at),
                });
            }
        }
        let recorded = self
            .gates(task)
            .await?
            .into_iter()
            .filter(|g| g.position == position)
            .max_by_key(|g| (g.attempt, g.id));
        if let Some(gate) = recorded {
            let (captured, total) = match gate.log_artifact {
                Some(id) => {
                    let artifact = self.get_artifact(id).await?;
                    let original = to_u64(artifact.meta.original_bytes);
                    let cut = to_u64(artifact.meta.cut_bytes);
                    let captured = Captured::from_kept(&artifact.bytes, original, cut)
                        .unwrap_or_else(|| Captured {
                            // Not a capture's shape: show what is stored, whole.
                            head: artifact.bytes.clone(),
                            tail: Vec::new(),
                            cut: 0,
                        });
                    let total = captured.original_len();
                    (captured, total)
                }
                None => (Captured::default(), 0),
            };
            let slice = slice_after(captured.pieces(), total, from, limit, true);
            let first_failure = self.first_failure(gate.id, &gate).await?;
            return Ok(GateLog {
                task_id: task,
                position,
                name: gate.name.clone(),
                state: log_state::FINISHED,
                attempt: Some(gate.attempt),
                total_bytes: total,
                slice,
                gate: Some(gate),
                first_failure,
                updated_at: None,
            });
        }
        let Some(spec_gate) = usize::try_from(position)
            .ok()
            .and_then(|p| spec.gates.get(p))
        else {
            return Err(Error::GateNotFound { task, position });
        };
        Ok(GateLog {
            task_id: task,
            position,
            name: spec_gate.name.clone(),
            state: log_state::PENDING,
            attempt: None,
            total_bytes: 0,
            slice: LogSlice::default(),
            gate: None,
            first_failure: None,
            updated_at: None,
        })
    }

    /// The first failing test a failed gate's summary names; else, for a gate that did not pass,
    /// its summary line (a runner nobody parses ends its summary with its last meaningful line).
    async fn first_failure(&self, gate_id: i64, gate: &GateRecord) -> Result<Option<String>> {
        if gate.verdict == orchestrator_types::Verdict::Passed {
            return Ok(None);
        }
        let stmt = Query::select()
            .column(Gates::Details)
            .from(Gates::Table)
            .and_where(Expr::col(Gates::Id).eq(gate_id))
            .to_owned();
        let details: Option<(Option<String>,)> = self.pool.fetch_optional(&stmt).await?;
        let summary = details
            .and_then(|(d,)| d)
            .and_then(|d| serde_json::from_str::<GateSummary>(&d).ok());
        Ok(summary
            .and_then(|s| s.failing_tests.into_iter().next())
            .or_else(|| (!gate.summary.is_empty()).then(|| gate.summary.clone())))
    }

    /// The log of a task's shell job: live while it runs, its recorded log once it ended.
    pub async fn job_log(&self, task: TaskId, job: i64, from: u64, limit: usize) -> Result<JobLog> {
        let record = self
            .shell_job(job)
            .await?
            .filter(|j| j.task_id == task.0)
            .ok_or(Error::ShellJobNotFound { task, job })?;
        if let Some(live) = self.live_log(task, live_source::SHELL_JOB, job).await? {
            let (slice, total) = self.live_log_read(&live, from, limit).await?;
            return Ok(JobLog {
                job: record,
                state: crate::job_status::RUNNING.to_owned(),
                total_bytes: total,
                slice,
            });
        }
        // Read again: it may have ended since the first read.
        let record = self
            .shell_job(job)
            .await?
            .ok_or(Error::ShellJobNotFound { task, job })?;
        let captured = match record.log_artifact_id {
            Some(id) => {
                let artifact = self
                    .get_artifact(orchestrator_types::ArtifactId(id))
                    .await?;
                Captured::from_kept(
                    &artifact.bytes,
                    to_u64(artifact.meta.original_bytes),
                    to_u64(artifact.meta.cut_bytes),
                )
                .unwrap_or(Captured {
                    head: artifact.bytes,
                    tail: Vec::new(),
                    cut: 0,
                })
            }
            None => Captured::default(),
        };
        let total = captured.original_len();
        let ended = record.status != crate::job_status::RUNNING;
        Ok(JobLog {
            state: record.status.clone(),
            job: record,
            total_bytes: total,
            slice: slice_after(captured.pieces(), total, from, limit, ended),
        })
    }
}
