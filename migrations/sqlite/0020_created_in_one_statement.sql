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
-- trigger again, or tasks would be created without their first event. Daemons sharing one file are
-- upgraded together, as for 0017: a daemon started before this migration writes the event itself
-- too, and its creations fail on the events' key until it is restarted with this version.
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

