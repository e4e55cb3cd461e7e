-- Agent turns: the saved conversation, tool calls, the checklist, approvals and questions, durable
-- shell jobs, and the parent of a sub-agent's task. Times are Unix milliseconds (UTC).

ALTER TABLE tasks ADD COLUMN parent_id INTEGER REFERENCES tasks (id);

CREATE INDEX tasks_by_parent ON tasks (parent_id, id) WHERE parent_id IS NOT NULL;

-- One row per whole message, never per streamed chunk; seq numbers a task's conversation from 1.
CREATE TABLE task_messages (
    task_id INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    role TEXT NOT NULL,
    message TEXT NOT NULL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    model_ms INTEGER,
    attempt INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, seq)
);

CREATE TABLE tool_calls (
    task_id INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    call_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    arguments TEXT NOT NULL,
    status TEXT NOT NULL,
    summary TEXT,
    artifact_id INTEGER REFERENCES artifacts (id),
    duration_ms INTEGER,
    attempt INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    finished_at INTEGER,
    PRIMARY KEY (task_id, call_id)
);

CREATE TABLE checklist_items (
    task_id INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    text TEXT NOT NULL,
    status TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, position)
);

-- Approvals of guarded tool calls and questions to the user, one per tool call.
CREATE TABLE approvals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    call_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    reason TEXT NOT NULL,
    options TEXT,
    status TEXT NOT NULL,
    answer TEXT,
    decided_by TEXT,
    requested_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    decided_at INTEGER,
    UNIQUE (task_id, call_id)
);

CREATE INDEX approvals_pending ON approvals (expires_at) WHERE status = 'pending';

CREATE TABLE shell_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    command TEXT NOT NULL,
    cwd TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    worker_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    log_artifact_id INTEGER REFERENCES artifacts (id),
    summary TEXT,
    started_at INTEGER NOT NULL,
    finished_at INTEGER
);

CREATE INDEX shell_jobs_by_task ON shell_jobs (task_id, id);
