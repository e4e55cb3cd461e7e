-- A task's creation is one INSERT on SQLite, a transaction of its own when it is alone: each
-- statement is a round trip to the connection's thread, and a creation was four of them (BEGIN,
-- the task, its `created` event, COMMIT) on the way from `create_task` to the task's start.
--
-- The `created` event is written by this trigger, its data the object the store wrote before,
-- keys in the same order (create.rs `created_data`, serde_json's sorted keys): an automation's
-- slot and time, or what made the task in words (the spec's `origin`), beside its title, queue and
-- number of gates. `at` is the creation's time. A test holds the two to the same text.
--
-- A table rebuilt by a later migration (a new `tasks` renamed into place) must create this
-- trigger again, or tasks would be created without their first event.
CREATE TRIGGER tasks_created_event AFTER INSERT ON tasks
BEGIN
    INSERT INTO task_events (task_id, seq, at, kind, data)
    VALUES (
        NEW.id,
        NEW.event_seq,
        NEW.created_at,
        'created',
        CASE
            WHEN NEW.automation_id IS NOT NULL THEN json_object(
                'automation_id', NEW.automation_id,
                'gates', IFNULL(json_array_length(NEW.spec, '$.gates'), 0),
                'queue', NEW.queue,
                'slot_at', NEW.slot_at,
                'title', NEW.title)
            WHEN json_type(NEW.spec, '$.origin') = 'text' THEN json_object(
                'gates', IFNULL(json_array_length(NEW.spec, '$.gates'), 0),
                'origin', json_extract(NEW.spec, '$.origin'),
                'queue', NEW.queue,
                'title', NEW.title)
            ELSE json_object(
                'gates', IFNULL(json_array_length(NEW.spec, '$.gates'), 0),
                'queue', NEW.queue,
                'title', NEW.title)
        END
    );
END;

-- The insert sets its own change number (the store's `change_mark`, as the claim and the
-- completion do), so the trigger of 0008 need not update each new row a second time: a rewrite of
-- the row and of its entry in `tasks_by_change`. An insert that leaves the column at its default
-- still gets its number here.
DROP TRIGGER tasks_change_insert;
CREATE TRIGGER tasks_change_insert AFTER INSERT ON tasks
WHEN NEW.change_id = 0
BEGIN
    UPDATE tasks SET change_id = 1 + max(
        IFNULL((SELECT MAX(change_id) FROM tasks), 0),
        IFNULL((SELECT MAX(change_id) FROM approvals), 0))
    WHERE id = NEW.id;
END;
