-- Deliveries that join a queued task instead of making one: one review with twelve inline
-- comments arrives as thirteen deliveries and makes one follow-up task. A rule's task names a join
-- key (the rule and the pull request); `task_joins` holds the last task made under each key, and
-- a delivery whose task has that key joins it while it has not started yet.
CREATE TABLE task_joins (
    join_key TEXT PRIMARY KEY,
    task_id BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
