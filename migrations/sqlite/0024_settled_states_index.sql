-- The tasks' index by state (0001, `tasks_by_state`) held every task, so each claim and each end
-- moved the task's entry in it: a delete and an insert at both, on the queue's hot path, for
-- lists that rarely need it. Queued tasks are already indexed by `tasks_claimable` and running
-- ones by `tasks_leased`, both partial on their state; succeeded tasks are most of the table, which
-- a scan by id reads in order. What is left are the rare states, which a filter must find without
-- reading every task: they keep an index of their own, and a task enters it only when it stops in
-- one of them. Written as an OR, not a NOT IN: SQLite uses a partial index for `state = 'failed'`
-- only when that term is the index's condition or one arm of an OR in it. The lists and counts by
-- state read these indexes (tasks/read.rs, `state_filter` and `count_by_state`); a test holds
-- their plans.
CREATE INDEX tasks_settled ON tasks (state, id)
    WHERE state = 'waiting' OR state = 'failed' OR state = 'canceled';
DROP INDEX tasks_by_state;
