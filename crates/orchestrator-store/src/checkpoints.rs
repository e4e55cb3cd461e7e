//! The `checkpoints` table: the latest checkpoint of each task's workspace, its difference from
//! the task's base commit as a byte-exact git patch, saved after a turn of its agent.
//!
//! One row per task, replaced by each save: a checkpoint is the whole difference from the base,
//! never from the checkpoint before, so restoring needs only the newest, and keeping older ones
//! would multiply what a task holds (up to the cap each) for nothing a restore reads.
//!
//! A save is fenced by the lease: its event's number is taken with the lease check, so a worker
//! that lost its task writes nothing. A save also names the checkpoint it follows (the tree of
//! the one its workspace was verified or restored against, or none), and replaces only that one:
//! a workspace that does not descend from the task's newest checkpoint (an old workspace found on
//! a machine the task comes back to) can never overwrite it. A patch over the cap is not kept: the save records a
//! `checkpoint_not_saved` event instead, and the task's last saved checkpoint (if any) stays, but
//! no longer describes the workspace; the caller keeps the task on its machine.
//!
//! The patch is stored zstd-compressed with its size and SHA-256, and a read checks both, as PR
//! attempts' patches are.

use crate::events::{EventInsert, insert_events};
use crate::leases::{Lease, next_seq_fenced};
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{EventKind, TaskId, now_millis};
use sea_query::{Expr, ExprTrait, Iden, OnConflict, Query};
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};

/// The largest checkpoint saved by default, in bytes of uncompressed patch. A workspace that
/// differs from its base by more (a vendored tree, build output that is not ignored) stays on its
/// machine: copying that much to the store after every turn would cost more than it saves.
pub const DEFAULT_CHECKPOINT_CAP: u64 = 32 * 1024 * 1024;

/// Compression level: patches are mostly source text.
const ZSTD_LEVEL: i32 = 3;

#[derive(Iden, Clone, Copy)]
enum Checkpoints {
    Table,
    TaskId,
    Base,
    Turn,
    AfterSeq,
    Tree,
    Files,
    Patch,
    PatchBytes,
    PatchSha256,
    Attempt,
    Worker,
    CreatedAt,
}

/// Every column but the patch.
const COLUMNS: [Checkpoints; 11] = [
    Checkpoints::TaskId,
    Checkpoints::Base,
    Checkpoints::Turn,
    Checkpoints::AfterSeq,
    Checkpoints::Tree,
    Checkpoints::Files,
    Checkpoints::PatchBytes,
    Checkpoints::PatchSha256,
    Checkpoints::Attempt,
    Checkpoints::Worker,
    Checkpoints::CreatedAt,
];

/// A checkpoint to save.
#[derive(Debug, Clone)]
pub struct NewCheckpoint<'a> {
    /// The full commit id the patch applies to: the task's base.
    pub base: &'a str,
    /// The turn after which the workspace was captured.
    pub turn: i64,
    /// The git tree id of the workspace as captured (the base with the patch applied), so a
    /// caller can tell an unchanged workspace without reading the patch.
    pub tree: &'a str,
    /// How many files the patch touches.
    pub files: i64,
    /// The patch, exactly as it applies to the base.
    pub patch: &'a [u8],
    /// The attempt that captured it.
    pub attempt: i64,
    /// The worker (daemon) that captured it.
    pub worker: &'a str,
    /// The tree of the task's checkpoint this one follows: the one the attempt's workspace was
    /// found holding or was restored from, then each one it saved since; `None` when the task had
    /// none. The save replaces only that checkpoint.
    pub follows: Option<&'a str>,
}

/// A saved checkpoint, without its patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Checkpoint {
    pub task_id: i64,
    pub base: String,
    pub turn: i64,
    /// The last conversation message saved when the checkpoint was taken: effects of tool calls
    /// whose results come after it are not in the checkpoint.
    pub after_seq: i64,
    pub tree: String,
    pub files: i64,
    /// Length of the patch, uncompressed.
    pub patch_bytes: i64,
    /// SHA-256 of the patch, lowercase hex.
    pub patch_sha256: String,
    pub attempt: i64,
    pub worker: String,
    pub created_at: i64,
}

from_row!(Checkpoint {
    task_id,
    base,
    turn,
    after_seq,
    tree,
    files,
    patch_bytes,
    patch_sha256,
    attempt,
    worker,
    created_at
});

/// What a save did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointSave {
    /// The checkpoint replaced the task's previous one, with a `checkpoint_saved` event.
    Saved(Checkpoint),
    /// The patch was over the cap: nothing was saved but a `checkpoint_not_saved` event.
    TooLarge { bytes: u64, cap: u64 },
    /// The task's checkpoint is not the one the save follows (another attempt saved a newer one,
    /// `tree`, or removed it): nothing was written, and the newer one stays.
    Superseded { tree: Option<String> },
}

/// SHA-256 of a patch, lowercase hex, as the store records it.
pub fn patch_sha256(patch: &[u8]) -> String {
    hex::encode(Sha256::digest(patch))
}

impl Store {
    /// Saves `new` as the latest checkpoint of the lease's task, replacing the one before, with a
    /// `checkpoint_saved` event (turn, size, hash; never the bytes), in one transaction fenced by
    /// the lease: `StaleLease` and nothing written once the lease is gone. A patch longer than
    /// `cap` bytes is not saved: a `checkpoint_not_saved` event says so instead (fenced the same
    /// way), and the previous checkpoint stays.
    pub fn save_checkpoint<'a>(
        &'a self,
        lease: &'a Lease,
        new: &'a NewCheckpoint<'a>,
        cap: u64,
    ) -> BoxFuture<'a, Result<CheckpointSave>> {
        Box::pin(self.save_checkpoint_unboxed(lease, new, cap))
    }

    async fn save_checkpoint_unboxed(
        &self,
        lease: &Lease,
        new: &NewCheckpoint<'_>,
        cap: u64,
    ) -> Result<CheckpointSave> {
        if new.base.trim().is_empty() {
            return Err(orchestrator_types::Error::invalid("base", "must not be empty").into());
        }
        let bytes = new.patch.len() as u64;
        if bytes > cap {
            self.append_event(
                lease,
                EventKind::CheckpointNotSaved,
                json!({
                    "turn": new.turn,
                    "bytes": bytes,
                    "cap": cap,
                    "base": new.base,
                    "reason": format!("{bytes} bytes, over the cap of {cap}"),
                }),
            )
            .await?;
            self.pin_to_this_host(
                lease,
                &format!("its checkpoint ({bytes} bytes) is over the cap of {cap}"),
            )
            .await?;
            return Ok(CheckpointSave::TooLarge { bytes, cap });
        }
        // Hash and compress before the transaction: only the writes hold the write lock.
        let sha256 = patch_sha256(new.patch);
        let compressed =
            zstd::bulk::compress(new.patch, ZSTD_LEVEL).map_err(|e| Error::Corrupt {
                what: "checkpoint compression",
                message: e.to_string(),
            })?;
        let now = now_millis();
        let mut tx = self.pool.begin().await?;
        let seq = next_seq_fenced(&mut tx, lease, now).await?;
        // The task's row is locked by the fence, so no message of this attempt lands in between.
        let last = Query::select()
            .expr(Expr::col(crate::conversation::TaskMessages::Seq).max())
            .from(crate::conversation::TaskMessages::Table)
            .and_where(Expr::col(crate::conversation::TaskMessages::TaskId).eq(lease.task_id.0))
            .to_owned();
        let after_seq = tx
            .fetch_optional::<(Option<i64>,), _>(&last)
            .await?
            .and_then(|(s,)| s)
            .unwrap_or(0);
        // The row is read under the fence's lock of the task, so no other save lands in between.
        let current = Query::select()
            .column(Checkpoints::Tree)
            .from(Checkpoints::Table)
            .and_where(Expr::col(Checkpoints::TaskId).eq(lease.task_id.0))
            .to_owned();
        let current = tx
            .fetch_optional::<(String,), _>(&current)
            .await?
            .map(|(t,)| t);
        if current.as_deref() != new.follows {
            tx.rollback().await?;
            return Ok(CheckpointSave::Superseded { tree: current });
        }
        let checkpoint = Checkpoint {
            task_id: lease.task_id.0,
            base: new.base.to_owned(),
            turn: new.turn,
            after_seq,
            tree: new.tree.to_owned(),
            files: new.files,
            patch_bytes: bytes as i64,
            patch_sha256: sha256,
            attempt: new.attempt,
            worker: new.worker.to_owned(),
            created_at: now,
        };
        let replaced = [
            Checkpoints::Base,
            Checkpoints::Turn,
            Checkpoints::AfterSeq,
            Checkpoints::Tree,
            Checkpoints::Files,
            Checkpoints::Patch,
            Checkpoints::PatchBytes,
            Checkpoints::PatchSha256,
            Checkpoints::Attempt,
            Checkpoints::Worker,
            Checkpoints::CreatedAt,
        ];
        let upsert = Query::insert()
            .into_table(Checkpoints::Table)
            .columns(std::iter::once(Checkpoints::TaskId).chain(replaced))
            .values([
                checkpoint.task_id.into(),
                checkpoint.base.as_str().into(),
                checkpoint.turn.into(),
                checkpoint.after_seq.into(),
                checkpoint.tree.as_str().into(),
                checkpoint.files.into(),
                compressed.into(),
                checkpoint.patch_bytes.into(),
                checkpoint.patch_sha256.as_str().into(),
                checkpoint.attempt.into(),
                checkpoint.worker.as_str().into(),
                checkpoint.created_at.into(),
            ])?
            .on_conflict(
                OnConflict::column(Checkpoints::TaskId)
                    .update_columns(replaced)
                    .to_owned(),
            )
            .to_owned();
        tx.execute(&upsert).await?;
        insert_events(
            &mut tx,
            &[EventInsert {
                task_id: lease.task_id.0,
                seq,
                at: now,
                kind: EventKind::CheckpointSaved,
                data: json!({
                    "turn": checkpoint.turn,
                    "after_seq": checkpoint.after_seq,
                    "bytes": checkpoint.patch_bytes,
                    "sha256": checkpoint.patch_sha256,
                    "files": checkpoint.files,
                    "base": checkpoint.base,
                    "tree": checkpoint.tree,
                }),
            }],
        )
        .await?;
        tx.commit().await?;
        Ok(CheckpointSave::Saved(checkpoint))
    }

    /// The latest checkpoint of a task, without its patch.
    pub fn checkpoint_info<'a>(
        &'a self,
        task: TaskId,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>>> {
        Box::pin(self.checkpoint_info_unboxed(task))
    }

    async fn checkpoint_info_unboxed(&self, task: TaskId) -> Result<Option<Checkpoint>> {
        let stmt = Query::select()
            .columns(COLUMNS)
            .from(Checkpoints::Table)
            .and_where(Expr::col(Checkpoints::TaskId).eq(task.0))
            .to_owned();
        self.pool.fetch_optional(&stmt).await
    }

    /// The latest checkpoint of a task with its patch, byte for byte as saved; `Corrupt` if the
    /// patch no longer matches its recorded size and SHA-256.
    #[allow(clippy::type_complexity)]
    pub fn latest_checkpoint<'a>(
        &'a self,
        task: TaskId,
    ) -> BoxFuture<'a, Result<Option<(Checkpoint, Vec<u8>)>>> {
        Box::pin(self.latest_checkpoint_unboxed(task))
    }

    async fn latest_checkpoint_unboxed(
        &self,
        task: TaskId,
    ) -> Result<Option<(Checkpoint, Vec<u8>)>> {
        let stmt = Query::select()
            .columns(COLUMNS)
            .column(Checkpoints::Patch)
            .from(Checkpoints::Table)
            .and_where(Expr::col(Checkpoints::TaskId).eq(task.0))
            .to_owned();
        let Some(row) = self.pool.fetch_optional::<CheckpointRow, _>(&stmt).await? else {
            return Ok(None);
        };
        let checkpoint = row.checkpoint;
        let patch = zstd::stream::decode_all(row.patch.as_slice()).map_err(|e| Error::Corrupt {
            what: "checkpoints.patch",
            message: format!("task {task}: {e}"),
        })?;
        if patch.len() as i64 != checkpoint.patch_bytes
            || patch_sha256(&patch) != checkpoint.patch_sha256
        {
            return Err(Error::Corrupt {
                what: "checkpoints.patch",
                message: format!(
                    "task {task}: the checkpoint no longer matches its recorded size and SHA-256"
                ),
            });
        }
        Ok(Some((checkpoint, patch)))
    }
}

struct CheckpointRow {
    checkpoint: Checkpoint,
    patch: Vec<u8>,
}

from_row!(CheckpointRow { patch } flatten { checkpoint });
