//! The `task_messages` and `tool_calls` tables: an agent task's conversation, saved whole message by
//! whole message, and the record of each tool call.
//!
//! This is what makes agent work durable: a worker that resumes a task reads the messages back and
//! continues from the last one, and a tool call whose row says `started` but never finished is one
//! that a dead worker left behind, so the model is told it was interrupted. Every write is fenced by
//! the attempt's lease and carries its event, in one transaction.

use crate::events::{EventInsert, insert_events};
use crate::exec::{Pool, Tx};
use crate::fenced;
use crate::leases::{Lease, next_seq_fenced};
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{ArtifactId, ChatMessage, EventKind, TaskId, Usage, now_millis};
use sea_query::{Expr, ExprTrait, Func, Iden, Order, Query};
use serde::Serialize;

#[derive(Iden, Clone, Copy)]
pub(crate) enum TaskMessages {
    Table,
    TaskId,
    Seq,
    Turn,
    Role,
    Message,
    PromptTokens,
    CompletionTokens,
    ModelMs,
    Attempt,
    CreatedAt,
}

#[derive(Iden, Clone, Copy)]
enum ToolCalls {
    Table,
    TaskId,
    CallId,
    Turn,
    Position,
    Name,
    Arguments,
    Status,
    Summary,
    ArtifactId,
    DurationMs,
    Attempt,
    StartedAt,
    FinishedAt,
}

/// A message to save, with the usage of the model call that produced it (assistant messages).
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub turn: i64,
    pub message: ChatMessage,
    pub usage: Option<Usage>,
    pub model_ms: Option<i64>,
}

/// A saved message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SavedMessage {
    pub seq: i64,
    pub turn: i64,
    pub message: ChatMessage,
    pub usage: Option<Usage>,
    pub model_ms: Option<i64>,
    pub attempt: i64,
    pub created_at: i64,
}

/// Where a tool call is in its life.
pub mod call_status {
    /// The call was dispatched; a row left in this state by a dead worker is interrupted.
    pub const STARTED: &str = "started";
    pub const SUCCEEDED: &str = "succeeded";
    /// The tool refused or failed; the model was told why.
    pub const FAILED: &str = "failed";
    /// The worker died while the call ran; the model was told so.
    pub const INTERRUPTED: &str = "interrupted";
    /// Paused on an approval or a question; it runs (or is refused) when the answer comes.
    pub const WAITING: &str = "waiting";
}

/// A tool call as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCallRecord {
    pub call_id: String,
    pub turn: i64,
    pub position: i64,
    pub name: String,
    pub arguments: String,
    pub status: String,
    pub summary: Option<String>,
    pub artifact_id: Option<i64>,
    pub duration_ms: Option<i64>,
    pub attempt: i64,
    pub started_at: i64,
    pub finished_at: Option<i64>,
}

from_row!(ToolCallRecord {
    call_id,
    turn,
    position,
    name,
    arguments,
    status,
    summary,
    artifact_id,
    duration_ms,
    attempt,
    started_at,
    finished_at
});

/// The end of a tool call: its row's new state and the tool message the model will read.
#[derive(Debug, Clone)]
pub struct ToolCallEnd {
    pub call_id: String,
    pub turn: i64,
    pub status: &'static str,
    pub summary: String,
    pub artifact_id: Option<ArtifactId>,
    pub duration_ms: i64,
    /// The result as the model sees it.
    pub message: ChatMessage,
    /// Tokens the call spent on a model (llm_query_batched), saved with its message so the
    /// task's token budget counts them after a resume too.
    pub usage: Option<Usage>,
    /// The `tool_call` event's data.
    pub event: serde_json::Value,
    /// The call's start when no `tool_call_started` recorded it (a quick read-only call): the row
    /// is then inserted whole here, in the one transaction.
    pub unrecorded_start: Option<ToolCallStart>,
}

/// A tool call's row as it starts.
struct CallRow<'a> {
    task: TaskId,
    call_id: &'a str,
    turn: i64,
    position: i64,
    name: &'a str,
    arguments: &'a str,
    status: &'a str,
    attempt: i64,
    started_at: i64,
}

impl CallRow<'_> {
    /// Its columns and values; with `end` (and when it ended), the row's whole.
    fn columns_values(&self, end: Option<(&ToolCallEnd, i64)>) -> (Vec<ToolCalls>, Vec<Expr>) {
        let mut columns = vec![
            ToolCalls::TaskId,
            ToolCalls::CallId,
            ToolCalls::Turn,
            ToolCalls::Position,
            ToolCalls::Name,
            ToolCalls::Arguments,
            ToolCalls::Status,
            ToolCalls::Attempt,
            ToolCalls::StartedAt,
        ];
        let mut values: Vec<Expr> = vec![
            self.task.0.into(),
            self.call_id.into(),
            self.turn.into(),
            self.position.into(),
            self.name.into(),
            self.arguments.into(),
            self.status.into(),
            self.attempt.into(),
            self.started_at.into(),
        ];
        if let Some((end, finished_at)) = end {
            columns.extend([
                ToolCalls::Summary,
                ToolCalls::ArtifactId,
                ToolCalls::DurationMs,
                ToolCalls::FinishedAt,
            ]);
            values.extend([
                end.summary.as_str().into(),
                end.artifact_id.map(|a| a.0).into(),
                end.duration_ms.into(),
                finished_at.into(),
            ]);
        }
        (columns, values)
    }

    /// Its insert, as it starts.
    fn insert(&self) -> Result<sea_query::InsertStatement> {
        let (columns, values) = self.columns_values(None);
        Ok(Query::insert()
            .into_table(ToolCalls::Table)
            .columns(columns)
            .values(values)?
            .to_owned())
    }
}

impl ToolCallEnd {
    /// The update that ends the call's row, recorded when it started.
    fn update(&self, task: TaskId, now: i64) -> sea_query::UpdateStatement {
        Query::update()
            .table(ToolCalls::Table)
            .value(ToolCalls::Status, self.status)
            .value(ToolCalls::Summary, self.summary.as_str())
            .value(ToolCalls::ArtifactId, self.artifact_id.map(|a| a.0))
            .value(ToolCalls::DurationMs, self.duration_ms)
            .value(ToolCalls::FinishedAt, now)
            .and_where(Expr::col(ToolCalls::TaskId).eq(task.0))
            .and_where(Expr::col(ToolCalls::CallId).eq(self.call_id.as_str()))
            .to_owned()
    }

    /// The columns and values of the call's whole row, when no start recorded it.
    fn row(
        &self,
        task: TaskId,
        start: &ToolCallStart,
        attempt: i64,
        now: i64,
    ) -> (Vec<ToolCalls>, Vec<Expr>) {
        CallRow {
            task,
            call_id: &self.call_id,
            turn: self.turn,
            position: start.position,
            name: &start.name,
            arguments: &start.arguments,
            status: self.status,
            attempt,
            started_at: start.started_at,
        }
        .columns_values(Some((self, now)))
    }
}

/// What `tool_call_started` would have recorded.
#[derive(Debug, Clone)]
pub struct ToolCallStart {
    pub position: i64,
    pub name: String,
    pub arguments: String,
    pub started_at: i64,
}

type MessageRow = (
    i64,
    i64,
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    i64,
    i64,
);

/// `SELECT COALESCE(MAX(seq), 0) AS n`: the number of the task's last message, 0 before the first.
pub(crate) fn last_seq_of(task: i64) -> sea_query::SelectStatement {
    Query::select()
        .expr_as(
            Func::coalesce([
                Func::max(Expr::col(TaskMessages::Seq)).into(),
                Expr::val(0i64),
            ]),
            sea_query::Alias::new("n"),
        )
        .from(TaskMessages::Table)
        .and_where(Expr::col(TaskMessages::TaskId).eq(task))
        .to_owned()
}

/// The columns of a message's row, in the order of [`message_row`].
pub(crate) const MESSAGE_COLUMNS: [TaskMessages; 10] = [
    TaskMessages::TaskId,
    TaskMessages::Seq,
    TaskMessages::Turn,
    TaskMessages::Role,
    TaskMessages::Message,
    TaskMessages::PromptTokens,
    TaskMessages::CompletionTokens,
    TaskMessages::ModelMs,
    TaskMessages::Attempt,
    TaskMessages::CreatedAt,
];

/// The values of message `m`'s row, numbered `seq`.
pub(crate) fn message_row(
    task: i64,
    seq: Expr,
    attempt: i64,
    m: &NewMessage,
    now: i64,
) -> Result<Vec<Expr>> {
    let text = serde_json::to_string(&m.message).map_err(|e| Error::Corrupt {
        what: "message",
        message: e.to_string(),
    })?;
    Ok(vec![
        task.into(),
        seq,
        m.turn.into(),
        m.message.role.as_str().into(),
        text.into(),
        m.usage.map(|u| u.prompt_tokens as i64).into(),
        m.usage.map(|u| u.completion_tokens as i64).into(),
        m.model_ms.into(),
        attempt.into(),
        now.into(),
    ])
}

async fn insert_messages(
    tx: &mut Tx,
    task: TaskId,
    attempt: i64,
    messages: &[NewMessage],
    now: i64,
) -> Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    let (last,): (i64,) = tx
        .fetch_optional(&last_seq_of(task.0))
        .await?
        .ok_or_else(|| Error::Migration("max(seq) returned no row".into()))?;
    let mut stmt = Query::insert()
        .into_table(TaskMessages::Table)
        .columns(MESSAGE_COLUMNS)
        .to_owned();
    for (i, m) in messages.iter().enumerate() {
        stmt.values(message_row(
            task.0,
            (last + 1 + i as i64).into(),
            attempt,
            m,
            now,
        )?)?;
    }
    tx.execute(&stmt).await?;
    Ok(())
}

/// The messages and the one event that says what they are, in a fenced transaction (`seq` is what
/// the fence gave).
async fn insert_messages_with_event(
    tx: &mut Tx,
    lease: &Lease,
    seq: i64,
    now: i64,
    attempt: i64,
    messages: &[NewMessage],
    event: (EventKind, serde_json::Value),
) -> Result<()> {
    insert_messages(tx, lease.task_id, attempt, messages, now).await?;
    insert_events(
        tx,
        &[EventInsert {
            task_id: lease.task_id.0,
            seq,
            at: now,
            kind: event.0,
            data: event.1,
        }],
    )
    .await
}

impl Store {
    /// Saves whole messages of `turn` with one event, fenced by `lease`.
    pub fn append_messages<'a>(
        &'a self,
        lease: &'a Lease,
        attempt: i64,
        messages: &'a [NewMessage],
        event: (EventKind, serde_json::Value),
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.append_messages_unboxed(lease, attempt, messages, event))
    }

    async fn append_messages_unboxed(
        &self,
        lease: &Lease,
        attempt: i64,
        messages: &[NewMessage],
        event: (EventKind, serde_json::Value),
    ) -> Result<()> {
        self.append_on(&self.pool, lease, attempt, messages, event)
            .await
    }

    /// Saves a model's reply, as [`Store::append_messages`] does. On SQLite with
    /// `synchronous=FULL` it is written on the claims' connection (`synchronous=NORMAL`), whose
    /// commit does not wait for the disk. A reply acts on nothing by itself. What the attempt does
    /// next commits with a sync, and that sync puts the reply on disk too, before anything acts on
    /// it: a changing tool call's `started` row, a call's end, the attempt's end. A power loss
    /// before then may lose the reply, which the resumed attempt asks the model for again, and
    /// takes the worker with it; a crash of this process loses nothing. One fsync less per agent
    /// turn. On PostgreSQL the reply's commit waits for the server's sync like every other: there a
    /// crash of the server alone can lose an unsynced commit while the attempt runs on, and its
    /// calls' ends would then be saved after a conversation that lacks the reply that asked for
    /// them.
    pub fn append_reply<'a>(
        &'a self,
        lease: &'a Lease,
        attempt: i64,
        messages: &'a [NewMessage],
        event: (EventKind, serde_json::Value),
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.append_reply_unboxed(lease, attempt, messages, event))
    }

    async fn append_reply_unboxed(
        &self,
        lease: &Lease,
        attempt: i64,
        messages: &[NewMessage],
        event: (EventKind, serde_json::Value),
    ) -> Result<()> {
        // On PostgreSQL (or SQLite with synchronous=NORMAL) the claims' pool is the store's pool.
        self.append_on(&self.claims, lease, attempt, messages, event)
            .await
    }

    /// Saves `messages` with `event`: on PostgreSQL in one statement (see `fenced.rs`), otherwise,
    /// or if that statement collided, in a transaction on `pool`.
    async fn append_on(
        &self,
        pool: &Pool,
        lease: &Lease,
        attempt: i64,
        messages: &[NewMessage],
        event: (EventKind, serde_json::Value),
    ) -> Result<()> {
        let now = now_millis();
        if let Pool::Postgres(_) = &self.pool {
            let written = fenced::write(
                &self.pool,
                lease,
                now,
                attempt,
                messages,
                Vec::new(),
                event.0,
                &event.1,
            )
            .await?;
            if !fenced::collided(written, lease)? {
                return Ok(());
            }
        }
        let mut tx = pool.begin().await?;
        let seq = next_seq_fenced(&mut tx, lease, now).await?;
        insert_messages_with_event(&mut tx, lease, seq, now, attempt, messages, event).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Saves a compacted conversation: its `messages`, its summary (if the model wrote one) as a
    /// `compaction_summary` artifact, and the `compacted` event naming both, in one transaction
    /// fenced by `lease`. A crash leaves all of it or none, so a compaction is never half saved
    /// and never saved twice. Returns the summary's artifact.
    pub fn append_compaction<'a>(
        &'a self,
        lease: &'a Lease,
        attempt: i64,
        messages: &'a [NewMessage],
        event: serde_json::Value,
        summary: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<ArtifactId>>> {
        Box::pin(self.append_compaction_unboxed(lease, attempt, messages, event, summary))
    }

    async fn append_compaction_unboxed(
        &self,
        lease: &Lease,
        attempt: i64,
        messages: &[NewMessage],
        mut event: serde_json::Value,
        summary: Option<&str>,
    ) -> Result<Option<ArtifactId>> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let seq = next_seq_fenced(&mut tx, lease, now).await?;
        let artifact = match summary {
            Some(text) => {
                let captured = orchestrator_types::Captured::from_bytes(
                    text.as_bytes(),
                    crate::DEFAULT_ARTIFACT_CAP,
                );
                let compressed = crate::artifacts::compress(&captured)?;
                let label = format!(
                    "summary of compaction {}",
                    event["compaction"].as_u64().unwrap_or(0)
                );
                let id = crate::artifacts::insert_artifact(
                    &mut tx,
                    &crate::artifacts::ArtifactInsert {
                        task_id: Some(lease.task_id),
                        kind: "compaction_summary",
                        media_type: "text/markdown",
                        summary: &label,
                        captured: &captured,
                    },
                    compressed,
                )
                .await?;
                event["summary_artifact"] = serde_json::json!(id.0);
                Some(id)
            }
            None => None,
        };
        let event = (EventKind::Compacted, event);
        insert_messages_with_event(&mut tx, lease, seq, now, attempt, messages, event).await?;
        tx.commit().await?;
        Ok(artifact)
    }

    /// The conversation of a task, oldest first.
    pub fn messages<'a>(&'a self, task: TaskId) -> BoxFuture<'a, Result<Vec<SavedMessage>>> {
        Box::pin(self.messages_unboxed(task))
    }

    async fn messages_unboxed(&self, task: TaskId) -> Result<Vec<SavedMessage>> {
        let stmt = Query::select()
            .columns([
                TaskMessages::Seq,
                TaskMessages::Turn,
                TaskMessages::Message,
                TaskMessages::PromptTokens,
                TaskMessages::CompletionTokens,
                TaskMessages::ModelMs,
                TaskMessages::Attempt,
                TaskMessages::CreatedAt,
            ])
            .from(TaskMessages::Table)
            .and_where(Expr::col(TaskMessages::TaskId).eq(task.0))
            .order_by(TaskMessages::Seq, Order::Asc)
            .to_owned();
        let rows: Vec<MessageRow> = self.pool.fetch_all(&stmt).await?;
        rows.into_iter()
            .map(
                |(seq, turn, text, prompt, completion, model_ms, attempt, created_at)| {
                    let message = serde_json::from_str(&text).map_err(|e| Error::Corrupt {
                        what: "task_messages.message",
                        message: format!("task {task} message {seq}: {e}"),
                    })?;
                    let usage = match (prompt, completion) {
                        (None, None) => None,
                        (p, c) => {
                            let (p, c) = (p.unwrap_or(0) as u64, c.unwrap_or(0) as u64);
                            // Cache hits are kept in the message's event, not in this row.
                            Some(Usage {
                                prompt_tokens: p,
                                completion_tokens: c,
                                total_tokens: p + c,
                                cached_tokens: 0,
                            })
                        }
                    };
                    Ok(SavedMessage {
                        seq,
                        turn,
                        message,
                        usage,
                        model_ms,
                        attempt,
                        created_at,
                    })
                },
            )
            .collect()
    }

    /// Records that a tool call is about to run (or runs again after an approval), fenced by `lease`.
    /// No event: the `tool_call` event comes with its end.
    #[allow(clippy::too_many_arguments)]
    pub fn tool_call_started<'a>(
        &'a self,
        lease: &'a Lease,
        attempt: i64,
        turn: i64,
        position: i64,
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(
            self.tool_call_started_unboxed(
                lease, attempt, turn, position, call_id, name, arguments,
            ),
        )
    }

    #[allow(clippy::too_many_arguments)]
    async fn tool_call_started_unboxed(
        &self,
        lease: &Lease,
        attempt: i64,
        turn: i64,
        position: i64,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> Result<()> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        // The fence without an event: check the lease by locking the task row.
        let check = Query::update()
            .table(crate::tasks::Tasks::Table)
            .value(crate::tasks::Tasks::UpdatedAt, now)
            .and_where(Expr::col(crate::tasks::Tasks::Id).eq(lease.task_id.0))
            .and_where(Expr::col(crate::tasks::Tasks::Epoch).eq(lease.epoch))
            .and_where(crate::tasks::state_is(
                orchestrator_types::TaskState::Running,
            ))
            .to_owned();
        if tx.execute(&check).await? == 0 {
            return Err(Error::StaleLease {
                task: lease.task_id,
                epoch: lease.epoch,
            });
        }
        let update = Query::update()
            .table(ToolCalls::Table)
            .value(ToolCalls::Status, call_status::STARTED)
            .value(ToolCalls::Attempt, attempt)
            .value(ToolCalls::StartedAt, now)
            .and_where(Expr::col(ToolCalls::TaskId).eq(lease.task_id.0))
            .and_where(Expr::col(ToolCalls::CallId).eq(call_id))
            .to_owned();
        if tx.execute(&update).await? == 0 {
            let row = CallRow {
                task: lease.task_id,
                call_id,
                turn,
                position,
                name,
                arguments,
                status: call_status::STARTED,
                attempt,
                started_at: now,
            };
            tx.execute(&row.insert()?).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Ends a tool call: its row, its result message and its `tool_call` event in one transaction.
    pub fn tool_call_finished<'a>(
        &'a self,
        lease: &'a Lease,
        attempt: i64,
        end: &'a ToolCallEnd,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.tool_call_finished_unboxed(lease, attempt, end))
    }

    async fn tool_call_finished_unboxed(
        &self,
        lease: &Lease,
        attempt: i64,
        end: &ToolCallEnd,
    ) -> Result<()> {
        let now = now_millis();
        let message = NewMessage {
            turn: end.turn,
            message: end.message.clone(),
            usage: end.usage,
            model_ms: None,
        };
        if let Pool::Postgres(_) = &self.pool {
            let call = match &end.unrecorded_start {
                None => end
                    .update(lease.task_id, now)
                    .and_where(Expr::exists(fenced::fence_held()))
                    .to_owned()
                    .into(),
                Some(start) => {
                    let (columns, values) = end.row(lease.task_id, start, attempt, now);
                    Query::insert()
                        .into_table(ToolCalls::Table)
                        .columns(columns)
                        .select_from(fenced::from_fence(values))?
                        .to_owned()
                        .into()
                }
            };
            let written = fenced::write(
                &self.pool,
                lease,
                now,
                attempt,
                std::slice::from_ref(&message),
                vec![call],
                EventKind::ToolCall,
                &end.event,
            )
            .await?;
            if !fenced::collided(written, lease)? {
                return Ok(());
            }
        }
        let mut tx = self.pool.begin().await?;
        let seq = next_seq_fenced(&mut tx, lease, now).await?;
        match &end.unrecorded_start {
            None => {
                tx.execute(&end.update(lease.task_id, now)).await?;
            }
            Some(start) => {
                let (columns, values) = end.row(lease.task_id, start, attempt, now);
                let insert = Query::insert()
                    .into_table(ToolCalls::Table)
                    .columns(columns)
                    .values(values)?
                    .to_owned();
                tx.execute(&insert).await?;
            }
        }
        insert_messages(
            &mut tx,
            lease.task_id,
            attempt,
            std::slice::from_ref(&message),
            now,
        )
        .await?;
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: lease.task_id.0,
                seq,
                at: now,
                kind: EventKind::ToolCall,
                data: end.event.clone(),
            }],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Marks a tool call as waiting for an answer, fenced by `lease`.
    pub fn tool_call_waiting<'a>(
        &'a self,
        lease: &'a Lease,
        call_id: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.tool_call_waiting_unboxed(lease, call_id))
    }

    async fn tool_call_waiting_unboxed(&self, lease: &Lease, call_id: &str) -> Result<()> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let check = Query::update()
            .table(crate::tasks::Tasks::Table)
            .value(crate::tasks::Tasks::UpdatedAt, now)
            .and_where(Expr::col(crate::tasks::Tasks::Id).eq(lease.task_id.0))
            .and_where(Expr::col(crate::tasks::Tasks::Epoch).eq(lease.epoch))
            .to_owned();
        if tx.execute(&check).await? == 0 {
            return Err(Error::StaleLease {
                task: lease.task_id,
                epoch: lease.epoch,
            });
        }
        let update = Query::update()
            .table(ToolCalls::Table)
            .value(ToolCalls::Status, call_status::WAITING)
            .and_where(Expr::col(ToolCalls::TaskId).eq(lease.task_id.0))
            .and_where(Expr::col(ToolCalls::CallId).eq(call_id))
            .to_owned();
        tx.execute(&update).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The tool calls of a task in the order they were asked for.
    pub fn tool_calls<'a>(&'a self, task: TaskId) -> BoxFuture<'a, Result<Vec<ToolCallRecord>>> {
        Box::pin(self.tool_calls_unboxed(task))
    }

    async fn tool_calls_unboxed(&self, task: TaskId) -> Result<Vec<ToolCallRecord>> {
        let stmt = Query::select()
            .columns([
                ToolCalls::CallId,
                ToolCalls::Turn,
                ToolCalls::Position,
                ToolCalls::Name,
                ToolCalls::Arguments,
                ToolCalls::Status,
                ToolCalls::Summary,
                ToolCalls::ArtifactId,
                ToolCalls::DurationMs,
                ToolCalls::Attempt,
                ToolCalls::StartedAt,
                ToolCalls::FinishedAt,
            ])
            .from(ToolCalls::Table)
            .and_where(Expr::col(ToolCalls::TaskId).eq(task.0))
            .order_by(ToolCalls::Turn, Order::Asc)
            .order_by(ToolCalls::Position, Order::Asc)
            .to_owned();
        self.pool.fetch_all(&stmt).await
    }
}
