//! The `pr_attempts` table: candidate patches recorded for a task, of which one per group is
//! selected to open a pull request with.
//!
//! A patch is kept byte-exact, because `git apply` is: a patch that lost a CR or a byte of a binary
//! hunk applies differently or not at all. It is stored zstd-compressed with its size and SHA-256,
//! and every read checks both, so damage surfaces as `Corrupt` instead of as a wrong pull request.
//!
//! Recording and selecting need no lease: the CLI records attempts from a person's worktree too. Each
//! still appends its task event in the same transaction, numbered from the task's counter.

use crate::events::{EventInsert, insert_events};
use crate::exec::Tx;
use crate::tasks::{Tasks, next_seq};
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{BEST_OF_GROUP, Byproducts, EventKind, TaskId, now_millis};
use sea_query::{Expr, ExprTrait, Iden, Order, Query, SelectStatement};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Compression level: patches are text and small next to the gate logs artifacts hold.
const ZSTD_LEVEL: i32 = 3;

#[derive(Iden, Clone, Copy)]
enum PrAttempts {
    Table,
    Id,
    TaskId,
    GroupName,
    Label,
    Base,
    Head,
    DiffHash,
    Patch,
    PatchBytes,
    PatchSha256,
    Files,
    Gates,
    LeftOut,
    Selected,
    CreatedAt,
    SelectedAt,
}

/// Every column but the patch, which only `attempt_patch` reads.
const COLUMNS: [PrAttempts; 15] = [
    PrAttempts::Id,
    PrAttempts::TaskId,
    PrAttempts::GroupName,
    PrAttempts::Label,
    PrAttempts::Base,
    PrAttempts::Head,
    PrAttempts::DiffHash,
    PrAttempts::PatchBytes,
    PrAttempts::PatchSha256,
    PrAttempts::Files,
    PrAttempts::Gates,
    PrAttempts::LeftOut,
    PrAttempts::Selected,
    PrAttempts::CreatedAt,
    PrAttempts::SelectedAt,
];

/// An attempt to record.
#[derive(Debug, Clone)]
pub struct NewAttempt<'a> {
    pub task: TaskId,
    /// Attempts compete within a group; selecting one unselects the others of its group only.
    pub group: &'a str,
    /// A short description of the attempt.
    pub label: &'a str,
    /// The commit the patch applies to.
    pub base: &'a str,
    /// HEAD of the worktree when the attempt was recorded.
    pub head: Option<&'a str>,
    /// The worktree's gate-tree hash when recorded, equal to the `diff_hash` of gates run on it.
    pub diff_hash: Option<&'a str>,
    /// The patch, exactly as `git apply` should see it.
    pub patch: &'a [u8],
    /// A JSON array: the files the patch touches.
    pub files: Value,
    /// A JSON array: the gates run on the attempt and their verdicts.
    pub gates: Value,
    /// Untracked files the worktree held that the patch does not: gates' byproducts whose content
    /// was still the gate's.
    pub left_out: Byproducts,
}

/// A recorded attempt, without its patch (see [`Store::attempt_patch`]).
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    pub id: i64,
    pub task_id: TaskId,
    pub group: String,
    pub label: String,
    pub base: String,
    pub head: Option<String>,
    pub diff_hash: Option<String>,
    /// Length of the patch, uncompressed.
    pub patch_bytes: i64,
    /// SHA-256 of the patch, lowercase hex.
    pub patch_sha256: String,
    pub files: Value,
    pub gates: Value,
    /// What the patch left out of the worktree (see [`NewAttempt::left_out`]).
    #[serde(skip_serializing_if = "Byproducts::is_empty")]
    pub left_out: Byproducts,
    pub selected: bool,
    pub created_at: i64,
    pub selected_at: Option<i64>,
}

struct AttemptRow {
    id: i64,
    task_id: i64,
    group_name: String,
    label: String,
    base: String,
    head: Option<String>,
    diff_hash: Option<String>,
    patch_bytes: i64,
    patch_sha256: String,
    files: String,
    gates: String,
    left_out: Option<String>,
    selected: bool,
    created_at: i64,
    selected_at: Option<i64>,
}

from_row!(AttemptRow {
    id,
    task_id,
    group_name,
    label,
    base,
    head,
    diff_hash,
    patch_bytes,
    patch_sha256,
    files,
    gates,
    left_out,
    selected,
    created_at,
    selected_at
});

impl TryFrom<AttemptRow> for Attempt {
    type Error = Error;
    fn try_from(row: AttemptRow) -> Result<Attempt> {
        let json = |what: &'static str, text: &str| {
            serde_json::from_str(text).map_err(|e| Error::Corrupt {
                what,
                message: format!("attempt {}: {e}", row.id),
            })
        };
        Ok(Attempt {
            files: json("pr_attempts.files", &row.files)?,
            gates: json("pr_attempts.gates", &row.gates)?,
            left_out: crate::gates::parse_byproducts(row.left_out.as_deref()).map_err(|e| {
                Error::Corrupt {
                    what: "pr_attempts.left_out",
                    message: format!("attempt {}: {e}", row.id),
                }
            })?,
            id: row.id,
            task_id: TaskId(row.task_id),
            group: row.group_name,
            label: row.label,
            base: row.base,
            head: row.head,
            diff_hash: row.diff_hash,
            patch_bytes: row.patch_bytes,
            patch_sha256: row.patch_sha256,
            selected: row.selected,
            created_at: row.created_at,
            selected_at: row.selected_at,
        })
    }
}

fn select_attempts() -> SelectStatement {
    Query::select()
        .columns(COLUMNS)
        .from(PrAttempts::Table)
        .to_owned()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `files` and `gates` are lists; anything else is a caller's mistake that would only show up when
/// a pull request is opened from the attempt.
fn require_array(field: &'static str, value: &Value) -> Result<()> {
    if value.is_array() {
        Ok(())
    } else {
        Err(orchestrator_types::Error::invalid(field, "must be a JSON array").into())
    }
}

async fn fetch_attempt_tx(tx: &mut Tx, id: i64) -> Result<Attempt> {
    let mut stmt = select_attempts();
    stmt.and_where(Expr::col(PrAttempts::Id).eq(id));
    tx.fetch_optional::<AttemptRow, _>(&stmt)
        .await?
        .ok_or(Error::AttemptNotFound(id))?
        .try_into()
}

impl Store {
    /// Records an attempt with its `attempt_recorded` event. The task must exist; no lease is
    /// needed.
    pub fn record_attempt<'a>(&'a self, new: &'a NewAttempt<'a>) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(self.record_attempt_unboxed(new))
    }

    async fn record_attempt_unboxed(&self, new: &NewAttempt<'_>) -> Result<Attempt> {
        for (field, text) in [
            ("group", new.group),
            ("label", new.label),
            ("base", new.base),
        ] {
            if text.trim().is_empty() {
                return Err(orchestrator_types::Error::invalid(field, "must not be empty").into());
            }
        }
        require_array("files", &new.files)?;
        require_array("gates", &new.gates)?;
        // Hash and compress before the transaction: only the insert holds the write lock.
        let patch_sha256 = sha256_hex(new.patch);
        let patch_bytes = new.patch.len() as i64;
        let compressed =
            zstd::bulk::compress(new.patch, ZSTD_LEVEL).map_err(|e| Error::Corrupt {
                what: "patch compression",
                message: e.to_string(),
            })?;
        let left_out = crate::gates::byproducts_json(&new.left_out)?;
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        self.check_fence(&mut tx, now).await?;
        // The counter first: it refuses an unknown task before the foreign key would, and clearly.
        let seq = next_seq(&mut tx, new.task, now).await?;
        let stmt = Query::insert()
            .into_table(PrAttempts::Table)
            .columns([
                PrAttempts::TaskId,
                PrAttempts::GroupName,
                PrAttempts::Label,
                PrAttempts::Base,
                PrAttempts::Head,
                PrAttempts::DiffHash,
                PrAttempts::Patch,
                PrAttempts::PatchBytes,
                PrAttempts::PatchSha256,
                PrAttempts::Files,
                PrAttempts::Gates,
                PrAttempts::LeftOut,
                PrAttempts::Selected,
                PrAttempts::CreatedAt,
            ])
            .values([
                new.task.0.into(),
                new.group.into(),
                new.label.into(),
                new.base.into(),
                new.head.into(),
                new.diff_hash.into(),
                compressed.into(),
                patch_bytes.into(),
                patch_sha256.as_str().into(),
                new.files.to_string().into(),
                new.gates.to_string().into(),
                left_out.into(),
                false.into(),
                now.into(),
            ])?
            .returning_col(PrAttempts::Id)
            .to_owned();
        let (id,): (i64,) = tx
            .fetch_optional(&stmt)
            .await?
            .ok_or_else(|| Error::Migration("attempt insert returned no id".into()))?;
        let files = new.files.as_array().map_or(0, Vec::len);
        let mut data = json!({
            "attempt": id,
            "group": new.group,
            "label": new.label,
            "files": files,
            "patch_bytes": patch_bytes,
        });
        if !new.left_out.is_empty() {
            data["left_out"] = json!(new.left_out.files.len() as u64 + new.left_out.omitted);
        }
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: new.task.0,
                seq,
                at: now,
                kind: EventKind::AttemptRecorded,
                data,
            }],
        )
        .await?;
        tx.commit().await?;
        Ok(Attempt {
            id,
            task_id: new.task,
            group: new.group.to_owned(),
            label: new.label.to_owned(),
            base: new.base.to_owned(),
            head: new.head.map(str::to_owned),
            diff_hash: new.diff_hash.map(str::to_owned),
            patch_bytes,
            patch_sha256,
            files: new.files.clone(),
            gates: new.gates.clone(),
            left_out: new.left_out.clone(),
            selected: false,
            created_at: now,
            selected_at: None,
        })
    }

    /// One attempt, without its patch.
    pub fn attempt<'a>(&'a self, id: i64) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(self.attempt_unboxed(id))
    }

    async fn attempt_unboxed(&self, id: i64) -> Result<Attempt> {
        let mut stmt = select_attempts();
        stmt.and_where(Expr::col(PrAttempts::Id).eq(id));
        self.pool
            .fetch_optional::<AttemptRow, _>(&stmt)
            .await?
            .ok_or(Error::AttemptNotFound(id))?
            .try_into()
    }

    /// The patch of an attempt, byte for byte as recorded; `Corrupt` if its size or hash no longer
    /// match.
    pub fn attempt_patch<'a>(&'a self, id: i64) -> BoxFuture<'a, Result<Vec<u8>>> {
        Box::pin(self.attempt_patch_unboxed(id))
    }

    async fn attempt_patch_unboxed(&self, id: i64) -> Result<Vec<u8>> {
        let stmt = Query::select()
            .columns([
                PrAttempts::Patch,
                PrAttempts::PatchBytes,
                PrAttempts::PatchSha256,
            ])
            .from(PrAttempts::Table)
            .and_where(Expr::col(PrAttempts::Id).eq(id))
            .to_owned();
        let (compressed, bytes, sha256): (Vec<u8>, i64, String) = self
            .pool
            .fetch_optional(&stmt)
            .await?
            .ok_or(Error::AttemptNotFound(id))?;
        let patch =
            zstd::stream::decode_all(compressed.as_slice()).map_err(|e| Error::Corrupt {
                what: "pr_attempts.patch",
                message: format!("attempt {id}: {e}"),
            })?;
        if patch.len() as i64 != bytes || sha256_hex(&patch) != sha256 {
            return Err(Error::Corrupt {
                what: "pr_attempts.patch",
                message: format!(
                    "attempt {id}: the patch no longer matches its recorded size and SHA-256"
                ),
            });
        }
        Ok(patch)
    }

    /// Attempts, oldest first, of one task and/or one group when given.
    pub fn attempts<'a>(
        &'a self,
        task: Option<TaskId>,
        group: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Attempt>>> {
        Box::pin(self.attempts_unboxed(task, group))
    }

    async fn attempts_unboxed(
        &self,
        task: Option<TaskId>,
        group: Option<&str>,
    ) -> Result<Vec<Attempt>> {
        let mut stmt = select_attempts();
        if let Some(task) = task {
            stmt.and_where(Expr::col(PrAttempts::TaskId).eq(task.0));
        }
        if let Some(group) = group {
            stmt.and_where(Expr::col(PrAttempts::GroupName).eq(group));
        }
        stmt.order_by(PrAttempts::Id, Order::Asc);
        self.pool
            .fetch_all::<AttemptRow, _>(&stmt)
            .await?
            .into_iter()
            .map(Attempt::try_from)
            .collect()
    }

    /// Selects an attempt: it becomes the only selected one of its task and group, with an
    /// `attempt_selected` event, all in one transaction. Selecting the selected one changes
    /// nothing and appends no event.
    ///
    /// A best-of sibling's attempt in the best-of group competes with its lead's other siblings':
    /// selecting it unselects theirs, and once the lead has chosen, a `best_of` step (`overridden`)
    /// on the lead says a person chose otherwise. Refused once the lead opened its pull request.
    pub fn select_attempt<'a>(&'a self, id: i64) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(self.select_attempt_unboxed(id))
    }

    async fn select_attempt_unboxed(&self, id: i64) -> Result<Attempt> {
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let before = fetch_attempt_tx(&mut tx, id).await?;
        let lead = match before.group.as_str() {
            BEST_OF_GROUP => crate::best_of::lead_of(&mut tx, before.task_id).await?,
            _ => None,
        };
        let mut events = select_in_tx(&mut tx, id, now).await?;
        if let (Some(lead), false) = (lead, events.is_empty()) {
            let steps = crate::best_of::steps_in_tx(&mut tx, lead).await?;
            if let Some(taken) = crate::best_of::opening(&steps) {
                return Err(crate::best_of::pull_taken(lead, taken));
            }
            let chosen = steps
                .iter()
                .rev()
                .find(|d| d["step"] == "chosen" || d["step"] == "overridden");
            if let Some(chosen) = chosen {
                let sibling = crate::best_of::sibling_number(&mut tx, before.task_id).await?;
                let seq = next_seq(&mut tx, lead, now).await?;
                events.push(EventInsert {
                    task_id: lead.0,
                    seq,
                    at: now,
                    kind: EventKind::BestOf,
                    data: json!({
                        "step": "overridden",
                        "sibling": sibling,
                        "task": before.task_id.0,
                        "attempt": id,
                        "was": chosen["sibling"],
                        "was_attempt": chosen["attempt"],
                    }),
                });
            }
        }
        insert_events(&mut tx, &events).await?;
        tx.commit().await?;
        Ok(Attempt {
            selected: true,
            selected_at: if before.selected {
                before.selected_at
            } else {
                Some(now)
            },
            ..before
        })
    }
}

/// Selects attempt `id` inside `tx` and returns its `attempt_selected` event to insert (none when
/// it was selected already). The attempts it competes with are its task's in its group, or, for a
/// best-of sibling's attempt in the best-of group, every sibling's of its lead in that group.
pub(crate) async fn select_in_tx(tx: &mut Tx, id: i64, now: i64) -> Result<Vec<EventInsert>> {
    let task = fetch_attempt_tx(tx, id).await?.task_id;
    let group = fetch_attempt_tx(tx, id).await?.group;
    let lead = match group.as_str() {
        BEST_OF_GROUP => crate::best_of::lead_of(tx, task).await?,
        _ => None,
    };
    // Hold the row of the task (or of the lead, for siblings) before looking at `selected`: on
    // PostgreSQL two selections in one group would otherwise each see "not selected yet", and each
    // clear the other's row (ending with two selected, or in a deadlock). SQLite's write lock
    // already holds all.
    let lock = Query::select()
        .column(Tasks::Id)
        .from(Tasks::Table)
        .and_where(Expr::col(Tasks::Id).eq(lead.unwrap_or(task).0))
        .lock(sea_query::LockType::Update)
        .to_owned();
    tx.fetch_optional::<(i64,), _>(&lock).await?;
    let attempt = fetch_attempt_tx(tx, id).await?;
    if attempt.selected {
        return Ok(Vec::new());
    }
    let seq = next_seq(tx, task, now).await?;
    let mut clear = Query::update()
        .table(PrAttempts::Table)
        .value(PrAttempts::Selected, false)
        .value(PrAttempts::SelectedAt, Option::<i64>::None)
        .and_where(Expr::col(PrAttempts::GroupName).eq(attempt.group.as_str()))
        .and_where(Expr::col(PrAttempts::Selected).eq(true))
        .returning_col(PrAttempts::Id)
        .to_owned();
    match lead {
        Some(lead) => clear.and_where(
            Expr::col(PrAttempts::TaskId).in_subquery(
                Query::select()
                    .column(Tasks::Id)
                    .from(Tasks::Table)
                    .and_where(Expr::col(Tasks::SiblingOf).eq(lead.0))
                    .to_owned(),
            ),
        ),
        None => clear.and_where(Expr::col(PrAttempts::TaskId).eq(task.0)),
    };
    let unselected: Vec<(i64,)> = tx.fetch_all(&clear).await?;
    let set = Query::update()
        .table(PrAttempts::Table)
        .value(PrAttempts::Selected, true)
        .value(PrAttempts::SelectedAt, now)
        .and_where(Expr::col(PrAttempts::Id).eq(id))
        .to_owned();
    tx.execute(&set).await?;
    Ok(vec![EventInsert {
        task_id: task.0,
        seq,
        at: now,
        kind: EventKind::AttemptSelected,
        data: json!({
            "attempt": id,
            "group": attempt.group,
            "label": attempt.label,
            "unselected": unselected.iter().map(|(id,)| *id).collect::<Vec<_>>(),
        }),
    }])
}
