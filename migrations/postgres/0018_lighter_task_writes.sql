-- A task's row is written three times on its way through the queue (created, claimed, ended), and
-- its claim and end change indexed columns, so PostgreSQL adds an entry to every index of the table
-- at each. Two costs rode on that path without being needed there: together about a fifth of the
-- server's CPU in a profile of the queue benchmark, which ran 1.4 to 1.5 times as many tasks a
-- second with both taken off (docs/ARCHITECTURE.md has the figures).

-- 1. Title search moves to a table of its own, written once per task, at its creation. A trigram
-- index on `tasks` was given a new entry per trigram of the title at every claim and every end,
-- for a title that never changes. The store's search reads candidates here and decides with the
-- same LIKE on `tasks`, as SQLite's `tasks_title` does. `title` is the lower-cased title, as the
-- search compares. New entries wait in the index's pending list, which every search reads through
-- until a vacuum or a full list merges it; 256 kB instead of the default 4 MB keeps that read under
-- a millisecond (a full 4 MB list made a rare search of 100,000 titles 6 ms instead of 0.1 ms).
CREATE TABLE task_titles (
    task_id BIGINT PRIMARY KEY,
    title TEXT NOT NULL
);
INSERT INTO task_titles (task_id, title) SELECT id, lower(title) FROM tasks;
DROP INDEX IF EXISTS tasks_by_title;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        CREATE INDEX task_titles_trigrams ON task_titles USING gin (title gin_trgm_ops)
            WITH (gin_pending_list_limit = 256);
    END IF;
END
$$;

-- 2. An event's task is no longer checked by a foreign key. The check was a query of its own per
-- event row (three per task in the queue), and every event is written by the store in the
-- statement or transaction that creates, locks or updates its task row, so it never failed. The
-- foreign key's ON DELETE CASCADE is kept by the trigger below, with the titles'.
ALTER TABLE task_events DROP CONSTRAINT IF EXISTS task_events_task_id_fkey;

-- Kept in step with `tasks` by statement triggers: one call per statement, whatever its rows, and
-- none at a claim or an end (which set no title and delete nothing).
CREATE FUNCTION orchestrator_titles_of_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_titles (task_id, title) SELECT id, lower(title) FROM created;
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_titles_of_created AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS created
    FOR EACH STATEMENT EXECUTE FUNCTION orchestrator_titles_of_created();

CREATE FUNCTION orchestrator_title_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE task_titles SET title = lower(NEW.title) WHERE task_id = NEW.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_title_changed AFTER UPDATE OF title ON tasks
    FOR EACH ROW WHEN (OLD.title IS DISTINCT FROM NEW.title)
    EXECUTE FUNCTION orchestrator_title_changed();

CREATE FUNCTION orchestrator_rows_of_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM task_titles WHERE task_id IN (SELECT id FROM deleted);
    DELETE FROM task_events WHERE task_id IN (SELECT id FROM deleted);
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_rows_of_deleted AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION orchestrator_rows_of_deleted();
