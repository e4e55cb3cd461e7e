-- The tasks' index by state (0001, `tasks_by_state`) held every task, so each claim and each end
-- wrote the task's new row version into it, on the queue's hot path, for lists that rarely need
-- it. Queued tasks are already indexed by `tasks_claimable` and running ones by `tasks_leased`,
-- both partial on their state; succeeded tasks are most of the table, which a scan by id reads in
-- order. What is left are the rare states, which a filter must find without reading every task:
-- they keep an index of their own, written only for a task that stops in one of them. The same
-- condition as SQLite's (an OR, which both databases prove `state = 'failed'` against).
CREATE INDEX tasks_settled ON tasks (state, id)
    WHERE state = 'waiting' OR state = 'failed' OR state = 'canceled';
DROP INDEX tasks_by_state;
