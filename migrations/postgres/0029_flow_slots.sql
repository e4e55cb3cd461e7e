-- Concurrency keys: at most `max_running` tasks of one key run at once, whichever daemons run
-- them. A row is the turn an attempt took (its task and the epoch of its attempt); it counts while
-- that task is running at that epoch, so a turn ends with its attempt without a write of its own.
CREATE TABLE flow_slots (
    flow_key TEXT NOT NULL,
    task_id BIGINT NOT NULL,
    epoch BIGINT NOT NULL,
    taken_at BIGINT NOT NULL,
    PRIMARY KEY (flow_key, task_id)
);
