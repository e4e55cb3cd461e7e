-- The live lists follow changes in the order they commit, not by their update time: a writer's
-- clock may be ahead, and a transaction may commit long after the time it wrote. SQLite has one
-- writer at a time, so a number one above the largest given, taken inside the write, is in commit
-- order: each row of the tasks and the approvals carries the number of its last change (see the
-- store's changes.rs). Both tables count in one sequence, so one position says where a reader is.
ALTER TABLE tasks ADD COLUMN change_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE approvals ADD COLUMN change_id INTEGER NOT NULL DEFAULT 0;
-- The change order's indexes replace the update times' (0007), which nothing else reads.
DROP INDEX tasks_by_update;
DROP INDEX approvals_by_request;
DROP INDEX approvals_by_decision;
CREATE INDEX tasks_by_change ON tasks (change_id, id);
CREATE INDEX approvals_by_change ON approvals (change_id, id);
CREATE TRIGGER tasks_change_insert AFTER INSERT ON tasks BEGIN
    UPDATE tasks SET change_id = 1 + max(
        IFNULL((SELECT MAX(change_id) FROM tasks), 0),
        IFNULL((SELECT MAX(change_id) FROM approvals), 0))
    WHERE id = NEW.id;
END;
-- A heartbeat, which moves only the lease's expiry, is not a change the lists show; every other
-- write to a task appends an event or stamps its update time. The trigger's own update sets none
-- of these columns, so it does not fire itself.
CREATE TRIGGER tasks_change_update AFTER UPDATE OF event_seq, updated_at, state ON tasks
WHEN OLD.event_seq IS NOT NEW.event_seq
    OR OLD.updated_at IS NOT NEW.updated_at
    OR OLD.state IS NOT NEW.state
BEGIN
    UPDATE tasks SET change_id = 1 + max(
        IFNULL((SELECT MAX(change_id) FROM tasks), 0),
        IFNULL((SELECT MAX(change_id) FROM approvals), 0))
    WHERE id = NEW.id;
END;
CREATE TRIGGER approvals_change_insert AFTER INSERT ON approvals BEGIN
    UPDATE approvals SET change_id = 1 + max(
        IFNULL((SELECT MAX(change_id) FROM tasks), 0),
        IFNULL((SELECT MAX(change_id) FROM approvals), 0))
    WHERE id = NEW.id;
END;
-- Any update of an approval but the trigger's own, which changes only the number.
CREATE TRIGGER approvals_change_update AFTER UPDATE ON approvals
WHEN NEW.change_id IS OLD.change_id
BEGIN
    UPDATE approvals SET change_id = 1 + max(
        IFNULL((SELECT MAX(change_id) FROM tasks), 0),
        IFNULL((SELECT MAX(change_id) FROM approvals), 0))
    WHERE id = NEW.id;
END;
