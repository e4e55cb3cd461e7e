-- Deliveries that join a queued task instead of making one: one review with twelve inline
-- comments arrives as thirteen deliveries and makes one follow-up task. A rule's task names a join
-- key (the rule and the pull request); `task_joins` holds the last task made under each key, and
-- a delivery whose task has that key joins it while it has not started yet. `rounds` counts the
-- tasks made under the key since a person last asked again, so a rule can stop making them.
CREATE TABLE task_joins (
    join_key TEXT PRIMARY KEY,
    task_id BIGINT NOT NULL,
    rounds BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
