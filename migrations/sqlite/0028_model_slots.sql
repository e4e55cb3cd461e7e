-- Limits on a model server, shared by every daemon on the store. `model_servers` holds what the
-- daemons learnt of each server together: the in-flight limit now (in thousandths, raised by one
-- slot for every limit's worth of answers and halved by a 429 or an overload, never above the
-- configured ceiling), and until when every task waits after the server said so. `model_slots`
-- holds each request sent: in flight until released, and counted for the per-minute limits for a
-- minute after it was sent. `model_waiters` holds the requests waiting for a slot, so that a task
-- can say what it waits for and how many are ahead.
CREATE TABLE model_servers (
    server TEXT PRIMARY KEY,
    limit_milli BIGINT NOT NULL,
    paused_until BIGINT NOT NULL,
    streak BIGINT NOT NULL,
    throttled BIGINT NOT NULL,
    last_throttled_at BIGINT,
    updated_at BIGINT NOT NULL
);
CREATE TABLE model_slots (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    server TEXT NOT NULL,
    holder TEXT NOT NULL,
    task_id BIGINT,
    tokens BIGINT NOT NULL,
    taken_at BIGINT NOT NULL,
    released_at BIGINT
);
CREATE INDEX model_slots_by_server ON model_slots (server, taken_at);
CREATE TABLE model_waiters (
    server TEXT NOT NULL,
    ticket TEXT NOT NULL,
    holder TEXT NOT NULL,
    task_id BIGINT,
    since BIGINT NOT NULL,
    seen_at BIGINT NOT NULL,
    cause TEXT NOT NULL,
    until_at BIGINT,
    PRIMARY KEY (server, ticket)
);
CREATE INDEX model_waiters_by_task ON model_waiters (task_id);
