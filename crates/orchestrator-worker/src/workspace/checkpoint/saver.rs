//! The saver: after each call that may have changed the workspace and after each turn, a capture
//! (on a blocking thread, with a deadline) and its save in the store, fenced by the lease.

use super::*;

/// What one [`Saver::after_turn`] did, for the loop's logs and the bench.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnCheckpoint {
    /// The workspace's tree was the one saved last: nothing written.
    Unchanged,
    /// A checkpoint was saved.
    Saved { bytes: i64, files: usize },
    /// It was not saved (over the cap, or the workspace could not be read); an event says so.
    NotSaved(String),
}
/// The longest a capture may take before the attempt gives up on checkpoints.
const CAPTURE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// A turn whose calls could not have changed a file is not captured, unless the last capture is
/// older than this: what runs on its own in the workspace (a terminal's program, an MCP server)
/// can write between calls, and is saved this often at the latest, at a turn's end.
const CAPTURE_AT_LEAST_EVERY: std::time::Duration = std::time::Duration::from_secs(30);
/// Saves a checkpoint of an attempt's workspace after each turn that changed it. One per
/// attempt, made at its start.
#[derive(Debug)]
pub struct Saver {
    capturer: Option<Capturer>,
    base: String,
    /// The tree of the task's saved checkpoint (the base's when it was saved clean).
    last_tree: Option<String>,
    /// The tree of the task's checkpoint as this attempt knows it, whatever its base: the one
    /// a save replaces (the store refuses to replace any other).
    follows: Option<String>,
    /// The last turn's save failed and said so: the next failure is not said again.
    refused: bool,
    cap: u64,
    worker: String,
    /// A call that may have changed files, and did not say which, ran since the last capture (or
    /// none was made yet): the next capture walks the whole workspace.
    touched: bool,
    /// The paths file tools said they wrote since the last capture: what the next capture looks
    /// at when nothing else may have changed files.
    written: std::collections::BTreeSet<Vec<u8>>,
    /// When the last capture ended.
    captured_at: Option<Instant>,
}
impl Saver {
    /// A saver for the task's workspace, or `None` when the task has no base (its workspace is a
    /// plain path): then the turn path does no checkpoint work at all.
    pub async fn start(
        store: &Store,
        task: TaskId,
        workspace: &Path,
        cap: u64,
        worker: &str,
    ) -> orchestrator_store::Result<Option<Saver>> {
        let Some(base) = task_base(store, task).await? else {
            return Ok(None);
        };
        let info = store.checkpoint_info(task).await?;
        let follows = info.as_ref().map(|c| c.tree.clone());
        let last_tree = info
            .filter(|c| c.base.eq_ignore_ascii_case(&base))
            .map(|c| c.tree);
        let capturer = {
            let workspace = workspace.to_owned();
            let base = base.clone();
            tokio::task::spawn_blocking(move || {
                Capturer::new(&workspace, &base).map(|c| c.with_cap(cap))
            })
            .await
            .map_err(|e| CheckpointError::Interrupted(e.to_string()))
            .and_then(|r| r)
        };
        Ok(Some(Saver {
            touched: true,
            written: Default::default(),
            captured_at: None,
            refused: false,
            capturer: capturer
                .inspect_err(|e| tracing::warn!(%task, "checkpoints are off for this attempt: {e}"))
                .ok(),
            base,
            last_tree,
            follows,
            cap,
            worker: worker.to_owned(),
        }))
    }

    /// Says that a call that may change the workspace's files ran (anything but a read-only
    /// tool): the next [`Saver::after_turn`] captures the workspace. Without it, a turn's end
    /// costs nothing (see [`CAPTURE_AT_LEAST_EVERY`]).
    pub fn touched(&mut self) {
        self.touched = true;
        self.written.clear();
    }

    /// Says that a file tool wrote (or removed) `paths`, relative to the workspace, and nothing
    /// else: the next [`Saver::after_turn`] looks at those, not at the whole workspace, unless
    /// another call said [`Saver::touched`].
    pub fn wrote(&mut self, paths: impl IntoIterator<Item = String>) {
        if !self.touched {
            self.written
                .extend(paths.into_iter().map(String::into_bytes));
        }
    }

    /// Captures the workspace after `turn` and saves it fenced by `lease` when it changed since
    /// the last save. A workspace that cannot be read, or a patch over the cap, is not saved, and
    /// an event says the task cannot move (once, until a save succeeds again). Only the store's
    /// errors are errors (a stale lease among them). When no call that may change files ran
    /// since the last capture ([`Saver::touched`]), and that capture is recent, nothing is read:
    /// the workspace is what was saved.
    pub async fn after_turn(
        &mut self,
        store: &Store,
        lease: &Lease,
        attempt: i64,
        turn: i64,
    ) -> orchestrator_store::Result<TurnCheckpoint> {
        let recent = self
            .captured_at
            .is_some_and(|at| at.elapsed() < CAPTURE_AT_LEAST_EVERY);
        if !self.touched && self.written.is_empty() && recent && self.capturer.is_some() {
            return Ok(TurnCheckpoint::Unchanged);
        }
        // Only named paths to look at, unless a whole look is due anyway.
        let paths: Option<Vec<Vec<u8>>> = (!self.touched && recent && !self.written.is_empty())
            .then(|| self.written.iter().cloned().collect());
        let started = Instant::now();
        let captured = match self.capturer.take() {
            None => Err("the workspace is not a repository a checkpoint may read".to_owned()),
            Some(mut capturer) => {
                let last = self.last_tree.clone();
                let capture = tokio::task::spawn_blocking(move || {
                    let captured = match paths {
                        Some(paths) => capturer.capture_paths(last.as_deref(), &paths),
                        None => capturer.capture(last.as_deref()),
                    };
                    (capturer, captured)
                });
                // A capture that does not end (a file system that hangs) must not hold the agent:
                // the task goes on without checkpoints, and says so.
                match tokio::time::timeout(CAPTURE_TIMEOUT, capture).await {
                    Ok(Ok((capturer, captured))) => {
                        self.capturer = Some(capturer);
                        if captured.is_ok() {
                            self.touched = false;
                            self.written.clear();
                            self.captured_at = Some(Instant::now());
                        }
                        captured.map_err(|e| e.to_string())
                    }
                    Ok(Err(e)) => Err(format!("the capture stopped unexpectedly: {e}")),
                    Err(_) => Err(format!(
                        "the capture did not end within {} s",
                        CAPTURE_TIMEOUT.as_secs()
                    )),
                }
            }
        };
        let patch = match captured {
            Ok(Captured::Unchanged) => return Ok(TurnCheckpoint::Unchanged),
            // Back to the base with no checkpoint saved: nothing to restore either.
            Ok(Captured::Clean { .. }) if self.last_tree.is_none() => {
                return Ok(TurnCheckpoint::Unchanged);
            }
            Ok(Captured::Clean { tree }) => Patch {
                bytes: Vec::new(),
                tree,
                files: 0,
            },
            Ok(Captured::Changed(patch)) => patch,
            Err(reason) => return self.not_saved(store, lease, turn, reason, true).await,
        };
        if self.refused && patch.bytes.len() as u64 > self.cap {
            // Said already; the timeline gets one event, not one a turn.
            return Ok(TurnCheckpoint::NotSaved(format!(
                "{} bytes, over the cap of {}",
                patch.bytes.len(),
                self.cap
            )));
        }
        let capture_ms = started.elapsed().as_millis();
        let saved = store
            .save_checkpoint(
                lease,
                &NewCheckpoint {
                    base: &self.base,
                    turn,
                    tree: &patch.tree,
                    files: patch.files as i64,
                    patch: &patch.bytes,
                    attempt,
                    worker: &self.worker,
                    follows: self.follows.as_deref(),
                },
                self.cap,
            )
            .await?;
        match saved {
            CheckpointSave::Saved(checkpoint) => {
                tracing::debug!(
                    task = %lease.task_id,
                    turn,
                    bytes = checkpoint.patch_bytes,
                    capture_ms,
                    total_ms = started.elapsed().as_millis(),
                    "checkpoint saved"
                );
                self.follows = Some(checkpoint.tree.clone());
                self.last_tree = Some(checkpoint.tree);
                self.refused = false;
                Ok(TurnCheckpoint::Saved {
                    bytes: checkpoint.patch_bytes,
                    files: patch.files,
                })
            }
            // The store said so in the task's timeline already.
            CheckpointSave::TooLarge { bytes, cap } => {
                self.refused = true;
                Ok(TurnCheckpoint::NotSaved(format!(
                    "{bytes} bytes, over the cap of {cap}"
                )))
            }
            // This workspace does not descend from the task's newest checkpoint: saving it would
            // throw that one away. Not pinned either: this machine's files are not the task's.
            CheckpointSave::Superseded { tree } => {
                let reason = format!(
                    "the task's checkpoint is now {}, not the {} this attempt's workspace \
                     follows, so it is not replaced",
                    tree.as_deref().unwrap_or("none"),
                    self.follows.as_deref().unwrap_or("none")
                );
                self.not_saved(store, lease, turn, reason, false).await
            }
        }
    }

    async fn not_saved(
        &mut self,
        store: &Store,
        lease: &Lease,
        turn: i64,
        reason: String,
        pin: bool,
    ) -> orchestrator_store::Result<TurnCheckpoint> {
        if !self.refused {
            store
                .append_event(
                    lease,
                    EventKind::CheckpointNotSaved,
                    json!({"turn": turn, "reason": reason, "base": self.base, "pinned": pin}),
                )
                .await?;
            if pin {
                store.pin_to_this_host(lease, &reason).await?;
            }
            self.refused = true;
        }
        Ok(TurnCheckpoint::NotSaved(reason))
    }
}
