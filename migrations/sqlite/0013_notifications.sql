-- Notifications (orchestrator-notify): what a person should be told, and each message to each sink
-- of the config, kept as an outbox so that a crash neither loses nor repeats one.

-- One row per thing to tell, whichever sinks want it. `key` names it for good (approval:12,
-- task_failed:40:1700000000000, ...): found again, it is the same row. Written in the transaction
-- of the change it tells (an automation parked, a delivery failed), or by the sending daemon from
-- the order of changes (an approval waiting, a task ended) together with the cursor it advanced.
CREATE TABLE notify_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    task_id INTEGER,
    at INTEGER NOT NULL,
    data TEXT NOT NULL,
    -- 1 once the sending daemon made its rows in notify_outbox (one per sink that wants it).
    fanned_out INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX notify_events_new ON notify_events (id) WHERE fanned_out = 0;

-- One message to one sink. `delivery_key` is the receiver's idempotency key, the same on every
-- try. `claimed_by`/`claimed_until` fence a try: a row is sent by the daemon that claimed it, and
-- taken over only once the claim ran out.
CREATE TABLE notify_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id INTEGER NOT NULL REFERENCES notify_events (id) ON DELETE CASCADE,
    sink TEXT NOT NULL,
    sink_kind TEXT NOT NULL,
    delivery_key TEXT NOT NULL UNIQUE,
    payload TEXT NOT NULL,
    -- 'pending', 'sent' or 'failed' (no try left).
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    claimed_by TEXT,
    claimed_until INTEGER,
    created_at INTEGER NOT NULL,
    sent_at INTEGER,
    last_error TEXT,
    UNIQUE (event_id, sink)
);

CREATE INDEX notify_outbox_due ON notify_outbox (next_attempt_at) WHERE status = 'pending';

-- How far the sending daemon has read the order of changes (changes.rs), per table it follows.
CREATE TABLE notify_cursors (
    name TEXT PRIMARY KEY,
    change_id INTEGER NOT NULL,
    row_id INTEGER NOT NULL,
    -- When the cursor started: what happened before is not news.
    started_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- The one daemon that sends, until `expires_at`; it renews the row while it runs, and another
-- takes it over once it ran out.
CREATE TABLE notify_sender (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
