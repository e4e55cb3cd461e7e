-- The claim and the completion of a batch set change_id to their transaction's id in their own
-- UPDATE, so the row trigger of 0008 (a PL/pgSQL call per row, about 10 us each) runs only for
-- updates that leave change_id alone. An update that sets it to the current transaction's id
-- again (a row changed twice in one transaction) still runs the trigger, which writes the same.
DROP TRIGGER tasks_mark_change ON tasks;
CREATE TRIGGER tasks_mark_change BEFORE UPDATE ON tasks FOR EACH ROW
    WHEN ((OLD.event_seq IS DISTINCT FROM NEW.event_seq
           OR OLD.updated_at IS DISTINCT FROM NEW.updated_at
           OR OLD.state IS DISTINCT FROM NEW.state)
          AND OLD.change_id IS NOT DISTINCT FROM NEW.change_id)
    EXECUTE FUNCTION orchestrator_mark_change();
