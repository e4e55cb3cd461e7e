-- Fairness between keys: among queued tasks of one priority, the claim takes the one whose
-- virtual time (`fair_vt`) is lowest, then the oldest. A task's virtual time is set when it is
-- made: one step (smaller for a heavier weight) after the last queued task of its key and
-- priority, or the priority's clock (the highest virtual time among its running tasks) when that
-- is later, so keys take turns instead of the oldest backlog running first. `fair_key` is the
-- task's key: the one it names, its repository, its concurrency key, its automation, or '' for
-- the rest.
ALTER TABLE tasks ADD COLUMN fair_key TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN fair_vt BIGINT NOT NULL DEFAULT 0;
DROP INDEX tasks_claimable;
CREATE INDEX tasks_claimable ON tasks (queue, priority DESC, fair_vt, id) WHERE state = 'queued';
CREATE INDEX tasks_fair_tail ON tasks (fair_key, priority, fair_vt) WHERE state = 'queued';
CREATE INDEX tasks_fair_clock ON tasks (priority, fair_vt) WHERE state = 'running';
