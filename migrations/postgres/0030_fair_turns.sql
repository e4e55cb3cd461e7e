-- Fairness between keys: among queued tasks of one queue and priority, the claim takes the one
-- whose virtual time (`fair_vt`) is lowest, then the oldest. A task's virtual time is set when it
-- is made: one step (smaller for a heavier weight) after the last queued task of its key, or the
-- queue's runnable head when its key has none queued, so keys take turns instead of the oldest
-- backlog running first. `fair_key` is the task's key: its repository, its automation, its
-- concurrency key, or '' for the rest.
ALTER TABLE tasks ADD COLUMN fair_key TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN fair_vt BIGINT NOT NULL DEFAULT 0;
DROP INDEX tasks_claimable;
CREATE INDEX tasks_claimable ON tasks (queue, priority DESC, fair_vt, id) WHERE state = 'queued';
CREATE INDEX tasks_fair_tail ON tasks (fair_key, queue, priority, fair_vt) WHERE state = 'queued';
