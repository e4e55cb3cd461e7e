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
    task_id BIGINT PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    base TEXT NOT NULL,
    turn BIGINT NOT NULL,
    after_seq BIGINT NOT NULL,
    tree TEXT NOT NULL,
    files BIGINT NOT NULL,
    patch BYTEA NOT NULL,
    patch_bytes BIGINT NOT NULL,
    patch_sha256 TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    worker TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
