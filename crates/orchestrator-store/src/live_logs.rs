//! The `live_logs` and `live_log_chunks` tables: what a gate, a shell job, a terminal or a
//! background job of exec_shell has printed so far, while it runs, readable from any node by
//! byte offset.
//!
//! The runner writes a command's output in chunks, a few times a second at most (never per line),
//! each chunk at its offset in the output. The head (the first `head_cap` bytes) is kept whole and
//! so are the chunks of the last `tail_cap` bytes; older chunks between them are deleted as new
//! ones come, so a running command holds at most about what its final artifact will: the same
//! head-and-tail rule. A follower asks for what lies after the last byte it saw
//! ([`orchestrator_types::slice_after`]); bytes it missed because they were deleted (or never
//! written, when the command printed faster than a flush may carry) come as the artifact's marker.
//!
//! When a gate's or a job's final log is recorded (`record_gate`, `shell_job_finished`), its live
//! log is deleted in the same transaction, so a reader finds exactly one of the two. A terminal
//! and a background job of exec_shell have no other record: their live log is kept, and ended
//! (`live_log_end`) with the program's exit.
//! A live log whose worker died is ended by the rescuer that takes the task back, or by a cancel
//! that finds no worker ([`end_abandoned`]), "the worker running this stopped", so followers end
//! instead of waiting; it reads `abandoned` and stays until the same command starts again.
//!
//! [`Store::log`] is the one reader: any [`LogKind`] of a task, live or recorded, from an offset.

use crate::exec::Tx;
use crate::gates::Gates;
use crate::leases::{Lease, check_lease};
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
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
    /// A terminal session an agent opened (pty_open); the key is N of its id `pty-N`.
    pub const TERMINAL: &str = "terminal";
    /// A background job an agent started with exec_shell (background=true); the key is N of its
    /// id `job-N`.
    pub const BACKGROUND_JOB: &str = "background_job";
}

/// Why a live log ended when its worker did not end it.
pub const WORKER_STOPPED: &str = "the worker running this stopped";

/// How a log reads now.
pub mod log_state {
    /// The gate is in the task's spec but has not started (in this attempt, or ever).
    pub const PENDING: &str = "pending";
    /// It runs: the log is its live output so far.
    pub const RUNNING: &str = "running";
    /// It ended: a gate's or a job's recorded log (with the verdict or the job's status), or a
    /// terminal's or a background job's whole output once its program exited.
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
    EndedAt,
    EndReason,
    ExitCode,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    /// When it ended without being replaced by a recorded log (a terminal's exit, a worker gone).
    pub ended_at: Option<i64>,
    pub end_reason: Option<String>,
    pub exit_code: Option<i64>,
}

from_row!(LiveLog {
    id,
    task_id,
    source,
    source_key,
    attempt,
    name,
    head_cap,
    tail_cap,
    total_bytes,
    started_at,
    updated_at,
    ended_at,
    end_reason,
    exit_code
});

const COLUMNS: [LiveLogs; 14] = [
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
    LiveLogs::EndedAt,
    LiveLogs::EndReason,
    LiveLogs::ExitCode,
];

/// Which log of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogKind {
    /// A gate, by its position (from 0 in the spec; 1000 and up for an agent's own checks).
    Gate(i64),
    /// A shell job an agent started (task_shell_start), by its id.
    Job(i64),
    /// A terminal session an agent opened (pty_open), by N of its id `pty-N`.
    Terminal(i64),
    /// A background job an agent started with exec_shell (background=true), by N of its id
    /// `job-N`.
    Background(i64),
}

impl LogKind {
    /// The `live_logs.source` of this kind.
    pub fn source(self) -> &'static str {
        match self {
            LogKind::Gate(_) => live_source::GATE,
            LogKind::Job(_) => live_source::SHELL_JOB,
            LogKind::Terminal(_) => live_source::TERMINAL,
            LogKind::Background(_) => live_source::BACKGROUND_JOB,
        }
    }

    /// The `live_logs.source_key`: the position, the job's id, the terminal's or the background
    /// job's number.
    pub fn key(self) -> i64 {
        match self {
            LogKind::Gate(k) | LogKind::Job(k) | LogKind::Terminal(k) | LogKind::Background(k) => k,
        }
    }

    /// The kind of a live log's row.
    pub fn of(log: &LiveLog) -> Option<LogKind> {
        match log.source.as_str() {
            live_source::GATE => Some(LogKind::Gate(log.source_key)),
            live_source::SHELL_JOB => Some(LogKind::Job(log.source_key)),
            live_source::TERMINAL => Some(LogKind::Terminal(log.source_key)),
            live_source::BACKGROUND_JOB => Some(LogKind::Background(log.source_key)),
            _ => None,
        }
    }
}

/// A log as it reads now: live while its command runs, its record once it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    pub task_id: TaskId,
    pub kind: LogKind,
    /// The gate's name, the job's or the terminal's command.
    pub name: String,
    /// One of [`log_state`].
    pub state: &'static str,
    /// The attempt the log is of; `None` while pending.
    pub attempt: Option<i64>,
    /// Bytes the command has printed so far (all of them once it ended), kept or not.
    pub total_bytes: u64,
    /// What the reader asked for: the bytes after its offset.
    pub slice: LogSlice,
    /// A gate's record, with the verdict, once it ended.
    pub gate: Option<GateRecord>,
    /// What a gate's summary names as its first failure (a failing test), for a reader to find.
    pub first_failure: Option<String>,
    /// A job's row (its status: running, exited, killed, timed_out, stale).
    pub job: Option<crate::ShellJob>,
    /// Why it ended, in words, when it ended without a verdict: a terminal's exit, a stopped worker.
    pub end_reason: Option<String>,
    /// The exit code of a job's or a terminal's program, once it exited.
    pub exit_code: Option<i64>,
    /// When the live log was last written; `None` unless running or abandoned.
    pub updated_at: Option<i64>,
}

impl Log {
    /// Whether nothing more will come after what was read: it ended and all of it was read.
    /// A pending gate of a task that is over never starts: the caller passes `task_over`.
    pub fn ended(&self, task_over: bool) -> bool {
        match self.state {
            log_state::FINISHED | log_state::ABANDONED => self.slice.next >= self.total_bytes,
            log_state::PENDING => task_over,
            _ => false,
        }
    }

    /// Whether it ended well: a gate that passed, a job, a terminal or a background job whose
    /// program exited 0.
    /// `None` while it may still change.
    pub fn passed(&self) -> Option<bool> {
        match self.state {
            log_state::FINISHED => Some(match self.kind {
                LogKind::Gate(_) => self
                    .gate
                    .as_ref()
                    .is_some_and(|g| g.verdict == orchestrator_types::Verdict::Passed),
                LogKind::Job(_) => {
                    self.job
                        .as_ref()
                        .is_some_and(|j| j.status == crate::job_status::EXITED)
                        && self.exit_code == Some(0)
                }
                LogKind::Terminal(_) | LogKind::Background(_) => self.exit_code == Some(0),
            }),
            log_state::ABANDONED => Some(false),
            _ => None,
        }
    }
}

impl LiveLog {
    /// How a job's, a terminal's or a background job's live log reads while the task's attempt is `task_attempt`:
    /// ended by its worker (a terminal's program exited) is finished; ended by the rescuer, or
    /// left by an attempt a newer one replaced, is abandoned; else it runs.
    pub fn state(&self, task_attempt: i64) -> &'static str {
        match self.end_reason.as_deref() {
            Some(WORKER_STOPPED) => log_state::ABANDONED,
            Some(_) => log_state::FINISHED,
            None if task_attempt > self.attempt => log_state::ABANDONED,
            None => log_state::RUNNING,
        }
    }
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

/// Ends the live logs of `tasks` that are still open, and marks their running shell jobs stale:
/// their worker stopped (the rescuer took the tasks back, or a cancel found no worker), so
/// nothing will write to them again. Runs in the transaction that takes the tasks.
pub(crate) async fn end_abandoned(tx: &mut Tx, tasks: &[i64], now: i64) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let logs = Query::update()
        .table(LiveLogs::Table)
        .value(LiveLogs::EndedAt, now)
        .value(LiveLogs::EndReason, WORKER_STOPPED)
        .and_where(Expr::col(LiveLogs::TaskId).is_in(tasks.iter().copied()))
        .and_where(Expr::col(LiveLogs::EndedAt).is_null())
        .to_owned();
    tx.execute(&logs).await?;
    crate::shell_jobs::stale_of(tx, tasks, now).await?;
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
    pub fn live_log_start<'a>(
        &'a self,
        start: &'a LiveLogStart<'a>,
    ) -> BoxFuture<'a, Result<LiveLogHandle>> {
        Box::pin(self.live_log_start_unboxed(start))
    }

    async fn live_log_start_unboxed(&self, start: &LiveLogStart<'_>) -> Result<LiveLogHandle> {
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
    /// window. `false` when the live log is gone or ended (its final log was recorded, another
    /// attempt replaced it, or the rescuer ended it): the runner stops writing.
    pub fn live_log_append<'a>(
        &'a self,
        log: &'a LiveLogHandle,
        pieces: &'a [(u64, &'a [u8])],
        total: u64,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.live_log_append_unboxed(log, pieces, total))
    }

    async fn live_log_append_unboxed(
        &self,
        log: &LiveLogHandle,
        pieces: &[(u64, &[u8])],
        total: u64,
    ) -> Result<bool> {
        self.live_log_write(log, pieces, total, None).await
    }

    /// The last write of a live log that has no other record (a terminal's, a background job's):
    /// its last chunks,
    /// and its end, `reason` in words and the program's exit code. `false` as for
    /// [`Store::live_log_append`].
    pub fn live_log_end<'a>(
        &'a self,
        log: &'a LiveLogHandle,
        pieces: &'a [(u64, &'a [u8])],
        total: u64,
        reason: &'a str,
        exit_code: Option<i64>,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.live_log_end_unboxed(log, pieces, total, reason, exit_code))
    }

    async fn live_log_end_unboxed(
        &self,
        log: &LiveLogHandle,
        pieces: &[(u64, &[u8])],
        total: u64,
        reason: &str,
        exit_code: Option<i64>,
    ) -> Result<bool> {
        self.live_log_write(log, pieces, total, Some((reason, exit_code)))
            .await
    }

    async fn live_log_write(
        &self,
        log: &LiveLogHandle,
        pieces: &[(u64, &[u8])],
        total: u64,
        end: Option<(&str, Option<i64>)>,
    ) -> Result<bool> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        // The row first: it locks the log against its deletion until this commits, and says
        // whether there is a log to write to at all.
        let mut touch = Query::update()
            .table(LiveLogs::Table)
            .value(LiveLogs::TotalBytes, to_i64(total))
            .value(LiveLogs::UpdatedAt, now)
            .and_where(Expr::col(LiveLogs::Id).eq(log.id))
            .and_where(Expr::col(LiveLogs::EndedAt).is_null())
            .to_owned();
        if let Some((reason, exit_code)) = end {
            touch
                .value(LiveLogs::EndedAt, now)
                .value(LiveLogs::EndReason, reason)
                .value(LiveLogs::ExitCode, exit_code);
        }
        if tx.execute(&touch).await? == 0 {
            tx.rollback().await?;
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
    pub fn live_logs<'a>(&'a self, task: TaskId) -> BoxFuture<'a, Result<Vec<LiveLog>>> {
        Box::pin(self.live_logs_unboxed(task))
    }

    async fn live_logs_unboxed(&self, task: TaskId) -> Result<Vec<LiveLog>> {
        let stmt = Query::select()
            .columns(COLUMNS)
            .from(LiveLogs::Table)
            .and_where(Expr::col(LiveLogs::TaskId).eq(task.0))
            .order_by(LiveLogs::Id, Order::Asc)
            .to_owned();
        self.pool.fetch_all(&stmt).await
    }

    /// The live log of one command of a task, if it has one.
    pub fn live_log<'a>(
        &'a self,
        task: TaskId,
        source: &'a str,
        key: i64,
    ) -> BoxFuture<'a, Result<Option<LiveLog>>> {
        Box::pin(self.live_log_unboxed(task, source, key))
    }

    async fn live_log_unboxed(
        &self,
        task: TaskId,
        source: &str,
        key: i64,
    ) -> Result<Option<LiveLog>> {
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
    pub fn live_log_read<'a>(
        &'a self,
        log: &'a LiveLog,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<(LogSlice, u64)>> {
        Box::pin(self.live_log_read_unboxed(log, from, limit))
    }

    async fn live_log_read_unboxed(
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
        let ended = log.ended_at.is_some();
        Ok((slice_after(pieces, total, from, limit, ended), total))
    }

    /// A log of a task (a gate's, a shell job's, a terminal's or a background job's) as it reads
    /// now, from byte `from`, at most `limit` bytes: its live output while it runs, its record
    /// once it ended. `GateNotFound`, `ShellJobNotFound`, `TerminalNotFound` or
    /// `BackgroundJobNotFound` when the task has no such one.
    pub fn log<'a>(
        &'a self,
        task: TaskId,
        kind: LogKind,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Log>> {
        Box::pin(self.log_unboxed(task, kind, from, limit))
    }

    async fn log_unboxed(
        &self,
        task: TaskId,
        kind: LogKind,
        from: u64,
        limit: usize,
    ) -> Result<Log> {
        match kind {
            LogKind::Gate(position) => self.gate_log(task, position, from, limit).await,
            LogKind::Job(job) => self.job_log(task, job, from, limit).await,
            LogKind::Terminal(n) => {
                let missing = Error::TerminalNotFound { task, terminal: n };
                self.process_log(task, kind, missing, from, limit).await
            }
            LogKind::Background(n) => {
                let missing = Error::BackgroundJobNotFound { task, job: n };
                self.process_log(task, kind, missing, from, limit).await
            }
        }
    }

    /// A live log read as it is now: `Log` without the kind's own record.
    async fn live_read(
        &self,
        task: TaskId,
        kind: LogKind,
        live: &LiveLog,
        state: &'static str,
        from: u64,
        limit: usize,
    ) -> Result<Log> {
        let (slice, total) = self.live_log_read(live, from, limit).await?;
        Ok(Log {
            task_id: task,
            kind,
            name: live.name.clone(),
            state,
            attempt: Some(live.attempt),
            total_bytes: total,
            slice,
            gate: None,
            first_failure: None,
            job: None,
            end_reason: live.end_reason.clone(),
            exit_code: live.exit_code,
            updated_at: Some(live.updated_at),
        })
    }

    async fn gate_log(&self, task: TaskId, position: i64, from: u64, limit: usize) -> Result<Log> {
        let kind = LogKind::Gate(position);
        let spec = self.get_task(task).await?;
        if let Some(live) = self.live_log(task, live_source::GATE, position).await? {
            // The chunks first: should the gate end meanwhile, its record tells (below), and a
            // read of chunks already deleted is never taken for a gap.
            let mut log = self
                .live_read(task, kind, &live, log_state::RUNNING, from, limit)
                .await?;
            let current = self.get_task(task).await?;
            let ours = current.state == TaskState::Running
                && current.attempt == live.attempt
                && live.ended_at.is_none();
            let gone = !ours
                && self
                    .live_log(task, live_source::GATE, position)
                    .await?
                    .is_none();
            if !gone {
                if !ours {
                    log.state = log_state::ABANDONED;
                    if log.end_reason.is_none() {
                        log.end_reason = Some("its attempt ended without recording it".into());
                    }
                }
                return Ok(log);
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
                    let captured = self.captured(id).await?;
                    let total = captured.original_len();
                    (captured, total)
                }
                None => (Captured::default(), 0),
            };
            let slice = slice_after(captured.pieces(), total, from, limit, true);
            let first_failure = self.first_failure(gate.id, &gate).await?;
            return Ok(Log {
                task_id: task,
                kind,
                name: gate.name.clone(),
                state: log_state::FINISHED,
                attempt: Some(gate.attempt),
                total_bytes: total,
                slice,
                exit_code: gate.exit_code.map(i64::from),
                gate: Some(gate),
                first_failure,
                job: None,
                end_reason: None,
                updated_at: None,
            });
        }
        let Some(spec_gate) = usize::try_from(position)
            .ok()
            .and_then(|p| spec.gates.get(p))
        else {
            return Err(Error::GateNotFound { task, position });
        };
        Ok(Log {
            task_id: task,
            kind,
            name: spec_gate.name.clone(),
            state: log_state::PENDING,
            attempt: None,
            total_bytes: 0,
            slice: LogSlice::default(),
            gate: None,
            first_failure: None,
            job: None,
            end_reason: None,
            exit_code: None,
            updated_at: None,
        })
    }

    /// An artifact's bytes as the capture they were kept from (head, cut, tail).
    async fn captured(&self, id: orchestrator_types::ArtifactId) -> Result<Captured> {
        let artifact = self.get_artifact(id).await?;
        let original = to_u64(artifact.meta.original_bytes);
        let cut = to_u64(artifact.meta.cut_bytes);
        Ok(
            Captured::from_kept(&artifact.bytes, original, cut).unwrap_or_else(|| Captured {
                // Not a capture's shape: show what is stored, whole.
                head: artifact.bytes.clone(),
                tail: Vec::new(),
                cut: 0,
            }),
        )
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
    async fn job_log(&self, task: TaskId, job: i64, from: u64, limit: usize) -> Result<Log> {
        let kind = LogKind::Job(job);
        let record = self
            .shell_job(job)
            .await?
            .filter(|j| j.task_id == task.0)
            .ok_or(Error::ShellJobNotFound { task, job })?;
        if let Some(live) = self.live_log(task, live_source::SHELL_JOB, job).await? {
            let mut log = self
                .live_read(task, kind, &live, log_state::RUNNING, from, limit)
                .await?;
            // The job may have ended since the row was read (its record replaced the chunks);
            // then the record below tells.
            let still = self.live_log(task, live_source::SHELL_JOB, job).await?;
            if let Some(live) = still {
                // A newer attempt's claim, or the rescuer's mark, says its worker is gone.
                let current = self.get_task(task).await?;
                log.state = match live.state(current.attempt) {
                    _ if record.status == crate::job_status::STALE => log_state::ABANDONED,
                    // A job's live log is replaced by its record when it ends, never ended by it.
                    log_state::FINISHED => log_state::ABANDONED,
                    state => state,
                };
                if log.state == log_state::ABANDONED && log.end_reason.is_none() {
                    log.end_reason = Some(WORKER_STOPPED.to_owned());
                }
                log.job = Some(record);
                return Ok(log);
            }
        }
        // Read again: it may have ended since the first read.
        let record = self
            .shell_job(job)
            .await?
            .ok_or(Error::ShellJobNotFound { task, job })?;
        let captured = match record.log_artifact_id {
            Some(id) => self.captured(orchestrator_types::ArtifactId(id)).await?,
            None => Captured::default(),
        };
        let total = captured.original_len();
        let (state, end_reason) = match record.status.as_str() {
            crate::job_status::RUNNING => (log_state::RUNNING, None),
            crate::job_status::STALE => (log_state::ABANDONED, Some(WORKER_STOPPED.to_owned())),
            _ => (log_state::FINISHED, None),
        };
        let ended = state != log_state::RUNNING;
        Ok(Log {
            task_id: task,
            kind,
            name: record.command.clone(),
            state,
            attempt: None,
            total_bytes: total,
            slice: slice_after(captured.pieces(), total, from, limit, ended),
            gate: None,
            first_failure: None,
            end_reason,
            exit_code: record.exit_code,
            job: Some(record),
            updated_at: None,
        })
    }

    /// The log of a background process of a task's agent (a terminal session `pty-N`, a
    /// background job `job-N`): its live log, whole once its program exited (it has no other
    /// record); `missing` when there is none.
    async fn process_log(
        &self,
        task: TaskId,
        kind: LogKind,
        missing: Error,
        from: u64,
        limit: usize,
    ) -> Result<Log> {
        let live = self
            .live_log(task, kind.source(), kind.key())
            .await?
            .ok_or(missing)?;
        let current = self.get_task(task).await?;
        let state = live.state(current.attempt);
        let mut log = self
            .live_read(task, kind, &live, state, from, limit)
            .await?;
        if state == log_state::ABANDONED && log.end_reason.is_none() {
            log.end_reason = Some(WORKER_STOPPED.to_owned());
        }
        Ok(log)
    }
}
