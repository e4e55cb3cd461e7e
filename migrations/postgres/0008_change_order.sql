-- The live lists follow changes in the order they commit, not by their update time: a writer's
-- clock may be ahead, and a transaction may commit long after the time it wrote. Each row of the
-- tasks and the approvals carries the id of the transaction that last changed it (a new row takes
-- it as its default, a changed one from a trigger), and a reader reads only below the oldest
-- transaction still running, where nothing can commit any more (see the store's changes.rs).
ALTER TABLE tasks ADD COLUMN change_id BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ALTER COLUMN change_id SET DEFAULT (pg_current_xact_id()::text::bigint);
ALTER TABLE approvals ADD COLUMN change_id BIGINT NOT NULL DEFAULT 0;
ALTER TABLE approvals ALTER COLUMN change_id SET DEFAULT (pg_current_xact_id()::text::bigint);
CREATE FUNCTION orchestrator_mark_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_id := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END
$$;
-- A heartbeat, which moves only the lease's expiry, is not a change the lists show; every other
-- write to a task appends an event or stamps its update time.
CREATE TRIGGER tasks_mark_change BEFORE UPDATE ON tasks FOR EACH ROW
    WHEN (OLD.event_seq IS DISTINCT FROM NEW.event_seq
          OR OLD.updated_at IS DISTINCT FROM NEW.updated_at
          OR OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION orchestrator_mark_change();
CREATE TRIGGER approvals_mark_change BEFORE UPDATE ON approvals FOR EACH ROW
    EXECUTE FUNCTION orchestrator_mark_change();
-- The change order's indexes replace the update times' (0007), which nothing else reads.
DROP INDEX tasks_by_update;
DROP INDEX approvals_by_request;
DROP INDEX approvals_by_decision;
CREATE INDEX tasks_by_change ON tasks (change_id, id);
CREATE INDEX approvals_by_change ON approvals (change_id, id);
