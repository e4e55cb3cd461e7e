-- A claim's `claimed` event, written by the claim's own statement. The claim is one UPDATE that is a
-- transaction of its own, with no second statement to insert its events: each statement is a round
-- trip to the connection's thread, each on the way from a task's creation to its start. The
-- data is the object the store wrote before, keys in the same order
-- (leases.rs `claimed_data`); `at` is the claim's time, which the claim writes to `updated_at`.
-- Only a claim moves a task from `queued` to `running`.
CREATE TRIGGER tasks_claimed_event AFTER UPDATE OF state ON tasks
WHEN NEW.state = 'running' AND OLD.state = 'queued'
BEGIN
    INSERT INTO task_events (task_id, seq, at, kind, data)
    VALUES (
        NEW.id,
        NEW.event_seq,
        NEW.updated_at,
        'claimed',
        json_object('attempt', NEW.attempt, 'epoch', NEW.epoch, 'worker', NEW.lease_owner)
    );
END;
