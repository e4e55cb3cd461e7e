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
UPDATE tasks SET repository = COALESCE(json_extract(spec, '$.worktree_of'), workspace);
CREATE INDEX tasks_by_repository ON tasks (repository, id) WHERE repository IS NOT NULL;
