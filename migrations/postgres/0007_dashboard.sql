-- The dashboard's live lists find what changed by its update time (every event bumps it).
CREATE INDEX tasks_by_update ON tasks (updated_at, id);
-- ... and which approvals were asked or decided since a moment.
CREATE INDEX approvals_by_request ON approvals (requested_at);
CREATE INDEX approvals_by_decision ON approvals (decided_at) WHERE decided_at IS NOT NULL;
-- A person's note on the last pause or resume of an automation ("paused during the freeze").
ALTER TABLE automations ADD COLUMN status_note TEXT;
-- The checkout a task works on (the one its workspace was cloned from, else its workspace): the
-- dashboard's repository filter.
ALTER TABLE tasks ADD COLUMN repository TEXT;
-- A spec is serde_json's text, which writes a NUL of a prompt as the escape \u0000; PostgreSQL's JSON
-- types refuse that escape, so it is read as U+FFFD here (as the store keeps NULs of plain text).
-- Amended after landing: the first text cast spec::jsonb as is and stopped the upgrade of a store
-- holding such a spec (the whole migration rolled back, so no store is at version 7 through it);
-- on every other store both texts fill the same values.
UPDATE tasks SET repository =
    COALESCE(replace(spec, E'\\u0000', E'\\uFFFD')::jsonb ->> 'worktree_of', workspace);
CREATE INDEX tasks_by_repository ON tasks (repository, id) WHERE repository IS NOT NULL;
-- Title search: a trigram index of the lower-cased titles (pg_trgm, shipped with PostgreSQL and
-- trusted, so any owner of the database may create it), which the planner uses for a search that
-- matches few of many tasks. Where the extension is missing or not allowed, the search still
-- works, scanning the titles.
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'pg_trgm is not available (%); title search scans the titles', SQLERRM;
END
$$;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        CREATE INDEX tasks_by_title ON tasks USING gin (lower(title) gin_trgm_ops);
    END IF;
END
$$;
-- The gate verdict filter finds the tasks of a rare verdict through this.
CREATE INDEX gates_by_verdict ON gates (verdict, task_id);
