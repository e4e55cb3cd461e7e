-- Checkpoints of agents' workspaces: after each turn that changed the workspace of a task made from
-- a repository, the workspace's difference from the task's base commit as a byte-exact git patch,
-- so another machine can make the workspace again after the first one died. Times are Unix
-- milliseconds (UTC).

-- One row per task, the latest: every checkpoint is the whole difference from the base (not from
-- the checkpoint before), so a restore needs only the newest and older ones would only hold bytes.
-- The patch is zstd-compressed like PR attempts' patches, with its uncompressed size and SHA-256,
-- checked on every read. after_seq is the last conversation message saved when it was taken, so a
-- resumed agent can be told which later tool calls' effects on files are not in it.
CREATE TABLE checkpoints (
    task_id INTEGER PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    base TEXT NOT NULL,
    turn INTEGER NOT NULL,
    after_seq INTEGER NOT NULL,
    tree TEXT NOT NULL,
    files INTEGER NOT NULL,
    patch BLOB NOT NULL,
    patch_bytes INTEGER NOT NULL,
    patch_sha256 TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    worker TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
