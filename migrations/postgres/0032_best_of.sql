-- Best of N: a sibling names the lead it tries the task for. A lead waits for its siblings without
-- a lease; whoever ends a sibling queues its lead again, and the rescuer's pass finds a waiting
-- lead whose siblings all ended (a wake lost with a killed daemon).
ALTER TABLE tasks ADD COLUMN sibling_of BIGINT REFERENCES tasks (id);
CREATE INDEX tasks_by_sibling_of ON tasks (sibling_of, id) WHERE sibling_of IS NOT NULL;
