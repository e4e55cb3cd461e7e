-- The durable core: tasks, their timeline, artifacts, gate evidence and the workers that ran them.
-- Times are Unix milliseconds (UTC). Booleans are 0/1. JSON columns hold text.

CREATE TABLE tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    prompt TEXT,
    spec TEXT NOT NULL,
    workspace TEXT,
    state TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    run_after INTEGER NOT NULL,
    epoch INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_expires_at INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    event_seq INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER
);

CREATE INDEX tasks_claimable ON tasks (queue, priority DESC, id) WHERE state = 'queued';
CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE state = 'running';
CREATE INDEX tasks_by_state ON tasks (state, id);

CREATE TABLE task_events (
    task_id INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
);

CREATE TABLE artifacts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id INTEGER REFERENCES tasks (id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    media_type TEXT NOT NULL,
    summary TEXT NOT NULL,
    original_bytes INTEGER NOT NULL,
    kept_bytes INTEGER NOT NULL,
    cut_bytes INTEGER NOT NULL,
    compression TEXT NOT NULL,
    data BLOB NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE INDEX artifacts_by_task ON artifacts (task_id);

CREATE TABLE gates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    command TEXT NOT NULL,
    verdict TEXT NOT NULL,
    failure_kind TEXT,
    exit_code INTEGER,
    signal INTEGER,
    duration_ms INTEGER NOT NULL,
    summary TEXT NOT NULL,
    details TEXT NOT NULL,
    log_artifact_id INTEGER REFERENCES artifacts (id),
    git_head TEXT,
    git_dirty INTEGER,
    diff_hash TEXT,
    started_at INTEGER NOT NULL,
    finished_at INTEGER NOT NULL
);

CREATE INDEX gates_by_task ON gates (task_id, attempt, position);

CREATE TABLE workers (
    id TEXT PRIMARY KEY,
    hostname TEXT NOT NULL,
    pid INTEGER NOT NULL,
    slots INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    stopped_at INTEGER
);
