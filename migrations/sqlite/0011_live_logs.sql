-- The output of gates and shell jobs while they run, so a person (on any node) can watch it before
-- the log artifact exists. One row per running command, with its chunks beside it: the head of
-- the output (kept whole up to head_cap) and the chunks of its last tail_cap bytes, so a follower
-- asks for what lies after the byte it last saw. The row goes when the command's final log is
-- recorded, in the same transaction.
CREATE TABLE live_logs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    -- 'gate' (source_key: the gate's position) or 'shell_job' (source_key: the job's id).
    source TEXT NOT NULL,
    source_key INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    name TEXT NOT NULL,
    head_cap INTEGER NOT NULL,
    tail_cap INTEGER NOT NULL,
    total_bytes INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE UNIQUE INDEX live_logs_by_source ON live_logs (task_id, source, source_key);

CREATE TABLE live_log_chunks (
    live_log_id INTEGER NOT NULL REFERENCES live_logs (id) ON DELETE CASCADE,
    start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (live_log_id, start_offset)
);
