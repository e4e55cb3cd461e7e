-- The claim and the completion of a batch set change_id in their own UPDATE (one number for the
-- whole statement, read once), so the row trigger of 0008 need not run a second UPDATE of each
-- row they change: it now runs only for updates that leave change_id alone. Rows of one statement
-- share a number; readers walk (change_id, id), so a tie is ordered by id and nothing is missed.
DROP TRIGGER tasks_change_update;
CREATE TRIGGER tasks_change_update AFTER UPDATE OF event_seq, updated_at, state ON tasks
WHEN (OLD.event_seq IS NOT NEW.event_seq
    OR OLD.updated_at IS NOT NEW.updated_at
    OR OLD.state IS NOT NEW.state)
    AND NEW.change_id IS OLD.change_id
BEGIN
    UPDATE tasks SET change_id = 1 + max(
        IFNULL((SELECT MAX(change_id) FROM tasks), 0),
        IFNULL((SELECT MAX(change_id) FROM approvals), 0))
    WHERE id = NEW.id;
END;
