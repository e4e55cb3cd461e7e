-- GitHub work: recorded PR attempts (candidate patches, one of a group selected to open a PR with),
-- the ledger of webhook and poll deliveries, and each polled repository's cursor. Times are Unix
-- milliseconds (UTC). Booleans are 0/1. JSON columns hold text.

-- The patch is kept byte-exact (zstd-compressed, like artifacts), with its size and SHA-256 so a
-- reader can tell it is the same patch the gates ran against; diff_hash is the worktree's gate-tree
-- hash at record time, which matches gate rows' diff_hash.
CREATE TABLE pr_attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    group_name TEXT NOT NULL,
    label TEXT NOT NULL,
    base TEXT NOT NULL,
    head TEXT,
    diff_hash TEXT,
    patch BLOB NOT NULL,
    patch_bytes INTEGER NOT NULL,
    patch_sha256 TEXT NOT NULL,
    files TEXT NOT NULL,
    gates TEXT NOT NULL,
    selected INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    selected_at INTEGER
);

CREATE INDEX pr_attempts_by_group ON pr_attempts (task_id, group_name, id);

-- One row per delivery id (GitHub's X-GitHub-Delivery, or a synthetic id for polled events). The row
-- is marked processed in the transaction that creates its tasks, so a redelivery never creates them
-- twice and a crash never leaves tasks without their mark.
CREATE TABLE github_deliveries (
    delivery_id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    event TEXT NOT NULL,
    action TEXT,
    repo TEXT,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    task_ids TEXT NOT NULL,
    detail TEXT,
    received_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE INDEX github_deliveries_by_time ON github_deliveries (received_at);

CREATE TABLE github_poll_cursors (
    repo TEXT PRIMARY KEY,
    cursor TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
