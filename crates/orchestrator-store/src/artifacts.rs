//! The `artifacts` table: bytes kept in the store, zstd-compressed, so every node of a deployment
//! sees them. Streams longer than the cap keep their head and tail and say how much was cut.

use crate::exec::Tx;
use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{ArtifactId, Captured, TaskId, now_millis};
use sea_query::{Expr, ExprTrait, Iden, Query};
use serde::Serialize;

/// Bytes of a stream kept by default: 4 MiB of head and 4 MiB of tail.
pub const DEFAULT_ARTIFACT_CAP: usize = 8 * 1024 * 1024;

/// Compression level: fast enough for logs written while a gate finishes, and logs shrink well.
const ZSTD_LEVEL: i32 = 3;

#[derive(Iden, Clone, Copy)]
pub(crate) enum Artifacts {
    Table,
    Id,
    TaskId,
    Kind,
    MediaType,
    Summary,
    OriginalBytes,
    KeptBytes,
    CutBytes,
    Compression,
    Data,
    CreatedAt,
}

/// What an artifact is, without its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArtifactMeta {
    pub id: ArtifactId,
    pub task_id: Option<TaskId>,
    /// What produced it: `gate_log`, `patch`, `tool_output`, ...
    pub kind: String,
    pub media_type: String,
    pub summary: String,
    /// Length of the stream that was captured.
    pub original_bytes: i64,
    /// Bytes stored (head and tail, before compression; without the marker).
    pub kept_bytes: i64,
    /// Bytes cut between head and tail; 0 when the whole stream was kept.
    pub cut_bytes: i64,
    pub created_at: i64,
}

/// An artifact with its bytes: head, the marker when something was cut, and tail.
#[derive(Debug, Clone)]
pub struct Artifact {
    pub meta: ArtifactMeta,
    pub bytes: Vec<u8>,
}

pub(crate) struct ArtifactInsert<'a> {
    pub task_id: Option<TaskId>,
    pub kind: &'a str,
    pub media_type: &'a str,
    pub summary: &'a str,
    pub captured: &'a Captured,
}

/// Compresses outside any transaction; only the insert holds the write lock. Head, marker and tail
/// are compressed where they lie, each into a zstd frame of its own, one after the other in one
/// buffer (a reader decodes the frames as one stream): copied into one buffer first, a gate's log
/// would cost its size (8 MiB at the default cap) once more at the moment it is recorded, the
/// peak of the gate-memory test, and a streaming encoder would keep a window of 2 MiB where the
/// one-shot context needs about 1 MiB.
pub(crate) fn compress(captured: &Captured) -> Result<Vec<u8>> {
    let fail = |e: std::io::Error| Error::Corrupt {
        what: "artifact compression",
        message: e.to_string(),
    };
    let joint = captured.joint();
    let parts: Vec<&[u8]> = [captured.head.as_slice(), joint.as_bytes(), &captured.tail]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect();
    let mut compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(fail)?;
    // The frames are appended at the cursor, into room reserved for the worst case.
    let mut out = std::io::Cursor::new(Vec::new());
    for part in if parts.is_empty() {
        vec![&[][..]]
    } else {
        parts
    } {
        let at = out.get_ref().len();
        out.get_mut()
            .reserve(zstd::zstd_safe::compress_bound(part.len()));
        out.set_position(at as u64);
        let written = compressor
            .compress_to_buffer(part, &mut out)
            .map_err(fail)?;
        out.set_position((at + written) as u64);
    }
    Ok(out.into_inner())
}

pub(crate) async fn insert_artifact(
    tx: &mut Tx,
    artifact: &ArtifactInsert<'_>,
    compressed: Vec<u8>,
) -> Result<ArtifactId> {
    let captured = artifact.captured;
    let stmt = Query::insert()
        .into_table(Artifacts::Table)
        .columns([
            Artifacts::TaskId,
            Artifacts::Kind,
            Artifacts::MediaType,
            Artifacts::Summary,
            Artifacts::OriginalBytes,
            Artifacts::KeptBytes,
            Artifacts::CutBytes,
            Artifacts::Compression,
            Artifacts::Data,
            Artifacts::CreatedAt,
        ])
        .values([
            artifact.task_id.map(|t| t.0).into(),
            artifact.kind.into(),
            artifact.media_type.into(),
            artifact.summary.into(),
            (captured.original_len() as i64).into(),
            ((captured.head.len() + captured.tail.len()) as i64).into(),
            (captured.cut as i64).into(),
            "zstd".into(),
            compressed.into(),
            now_millis().into(),
        ])?
        .returning_col(Artifacts::Id)
        .to_owned();
    let (id,): (i64,) = tx
        .fetch_optional(&stmt)
        .await?
        .ok_or_else(|| Error::Migration("artifact insert returned no id".into()))?;
    Ok(ArtifactId(id))
}

/// The columns of what an artifact is, in [`MetaRow`]'s order.
const META: [Artifacts; 9] = [
    Artifacts::Id,
    Artifacts::TaskId,
    Artifacts::Kind,
    Artifacts::MediaType,
    Artifacts::Summary,
    Artifacts::OriginalBytes,
    Artifacts::KeptBytes,
    Artifacts::CutBytes,
    Artifacts::CreatedAt,
];

type MetaRow = (i64, Option<i64>, String, String, String, i64, i64, i64, i64);

/// [`META`]'s columns, then the compression and the bytes.
type ArtifactRow = (
    i64,
    Option<i64>,
    String,
    String,
    String,
    i64,
    i64,
    i64,
    i64,
    String,
    Vec<u8>,
);

fn meta(row: MetaRow) -> ArtifactMeta {
    let (id, task_id, kind, media_type, summary, original, kept, cut, at) = row;
    ArtifactMeta {
        id: ArtifactId(id),
        task_id: task_id.map(TaskId),
        kind,
        media_type,
        summary,
        original_bytes: original,
        kept_bytes: kept,
        cut_bytes: cut,
        created_at: at,
    }
}

impl Store {
    /// Keeps `captured` (already bounded by its capture) as an artifact.
    pub fn put_artifact<'a>(
        &'a self,
        task_id: Option<TaskId>,
        kind: &'a str,
        media_type: &'a str,
        summary: &'a str,
        captured: &'a Captured,
    ) -> BoxFuture<'a, Result<ArtifactId>> {
        Box::pin(self.put_artifact_unboxed(task_id, kind, media_type, summary, captured))
    }

    async fn put_artifact_unboxed(
        &self,
        task_id: Option<TaskId>,
        kind: &str,
        media_type: &str,
        summary: &str,
        captured: &Captured,
    ) -> Result<ArtifactId> {
        let compressed = compress(captured)?;
        let mut tx = self.pool.begin().await?;
        self.check_fence(&mut tx, now_millis()).await?;
        let id = insert_artifact(
            &mut tx,
            &ArtifactInsert {
                task_id,
                kind,
                media_type,
                summary,
                captured,
            },
            compressed,
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    pub fn get_artifact<'a>(&'a self, id: ArtifactId) -> BoxFuture<'a, Result<Artifact>> {
        Box::pin(self.get_artifact_unboxed(id))
    }

    async fn get_artifact_unboxed(&self, id: ArtifactId) -> Result<Artifact> {
        let stmt = Query::select()
            .columns(META)
            .columns([Artifacts::Compression, Artifacts::Data])
            .from(Artifacts::Table)
            .and_where(Expr::col(Artifacts::Id).eq(id.0))
            .to_owned();
        let row: ArtifactRow = self
            .pool
            .fetch_optional(&stmt)
            .await?
            .ok_or(Error::ArtifactNotFound(id.0))?;
        let (id, task_id, kind, media_type, summary, original, kept, cut, at, compression, data) =
            row;
        let bytes = match compression.as_str() {
            "zstd" => zstd::stream::decode_all(data.as_slice()).map_err(|e| Error::Corrupt {
                what: "artifacts.data",
                message: format!("artifact {id}: {e}"),
            })?,
            "none" => data,
            other => {
                return Err(Error::Corrupt {
                    what: "artifacts.compression",
                    message: format!("artifact {id}: unknown compression {other:?}"),
                });
            }
        };
        Ok(Artifact {
            meta: meta((
                id, task_id, kind, media_type, summary, original, kept, cut, at,
            )),
            bytes,
        })
    }

    /// What a task's artifacts are (gate logs, tool outputs, patches, ...), oldest first, without
    /// their bytes.
    pub fn task_artifacts<'a>(&'a self, task: TaskId) -> BoxFuture<'a, Result<Vec<ArtifactMeta>>> {
        Box::pin(self.task_artifacts_unboxed(task))
    }

    async fn task_artifacts_unboxed(&self, task: TaskId) -> Result<Vec<ArtifactMeta>> {
        let stmt = Query::select()
            .columns(META)
            .from(Artifacts::Table)
            .and_where(Expr::col(Artifacts::TaskId).eq(task.0))
            .order_by(Artifacts::Id, sea_query::Order::Asc)
            .to_owned();
        let rows: Vec<MetaRow> = self.pool.fetch_all(&stmt).await?;
        Ok(rows.into_iter().map(meta).collect())
    }
}

#[cfg(test)]
mod compress_tests {
    use super::compress;
    use orchestrator_types::Captured;

    /// Head, marker and tail go in as frames of their own and come out as the one text a
    /// reader shows, with and without a cut, and for an empty log.
    #[test]
    fn the_frames_decode_as_the_whole_log() {
        let mut long = Vec::new();
        for n in 0..200_000u32 {
            long.extend_from_slice(format!("line {n}\n").as_bytes());
        }
        for (bytes, cap) in [
            (&long[..], 64 * 1024),
            (&long[..], long.len()),
            (&b"no newline at the end"[..], 8),
            (&b""[..], 16),
        ] {
            let captured = Captured::from_bytes(bytes, cap);
            let packed = compress(&captured).unwrap();
            let unpacked = zstd::stream::decode_all(packed.as_slice()).unwrap();
            assert_eq!(unpacked, captured.to_bytes(), "cap {cap}");
        }
    }
}
