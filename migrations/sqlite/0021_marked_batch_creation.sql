-- A batch of new tasks carries its change number from the insert itself: the store reads the
-- number once, inside the batch's transaction, and sets it on every row (create.rs,
-- `insert_tasks`). This trigger (0008) then numbers only the rows inserted without one, a task
-- created alone, which stays one statement: for those it is still a second update of the new row,
-- and for a batch of 500 that second update of each row was about a quarter of the insert's time.
-- A daemon started before this migration inserts without a number, and the trigger numbers its
-- rows as before.
DROP TRIGGER tasks_change_insert;
CREATE TRIGGER tasks_change_insert AFTER INSERT ON tasks
WHEN NEW.change_id = 0
BEGIN
    UPDATE tasks SET change_id = 1 + max(
        IFNULL((SELECT MAX(change_id) FROM tasks), 0),
        IFNULL((SELECT MAX(change_id) FROM approvals), 0))
    WHERE id = NEW.id;
END;
