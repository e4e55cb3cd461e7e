-- Automations (a schedule in a time zone, policies and a task template) and their slots. A slot row
-- is unique on (automation_id, slot_at) and is written in the transaction that creates its tasks,
-- which is what makes a slot fire at most once, ever.

CREATE TABLE automations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    schedule TEXT NOT NULL,
    timezone TEXT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    source TEXT NOT NULL,
    source_path TEXT,
    next_slot_at INTEGER,
    next_fire_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE INDEX automations_due ON automations (next_fire_at) WHERE status = 'active';

CREATE TABLE automation_slots (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    automation_id INTEGER NOT NULL REFERENCES automations (id) ON DELETE CASCADE,
    slot_at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    scheduler TEXT NOT NULL,
    recorded_at INTEGER NOT NULL,
    fired_at INTEGER,
    UNIQUE (automation_id, slot_at)
);

CREATE INDEX automation_slots_buffered ON automation_slots (automation_id) WHERE status = 'buffered';

ALTER TABLE tasks ADD COLUMN automation_id INTEGER;
ALTER TABLE tasks ADD COLUMN slot_at INTEGER;

CREATE INDEX tasks_by_automation ON tasks (automation_id, slot_at) WHERE automation_id IS NOT NULL;
-- The overlap check ("is a previous run of this automation unfinished?") reads only live tasks.
CREATE INDEX tasks_unfinished_by_automation ON tasks (automation_id)
    WHERE automation_id IS NOT NULL AND state IN ('queued', 'running', 'waiting');
