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
-- Title search: a trigram index of the titles, kept by triggers, so a search that matches few of
-- many tasks reads those few instead of every title. Trigrams are case-insensitive, as the search.
CREATE VIRTUAL TABLE tasks_title USING fts5 (
    title, content = 'tasks', content_rowid = 'id', tokenize = 'trigram case_sensitive 0'
);
INSERT INTO tasks_title (tasks_title) VALUES ('rebuild');
CREATE TRIGGER tasks_title_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO tasks_title (rowid, title) VALUES (new.id, new.title);
END;
CREATE TRIGGER tasks_title_delete AFTER DELETE ON tasks BEGIN
    INSERT INTO tasks_title (tasks_title, rowid, title) VALUES ('delete', old.id, old.title);
END;
CREATE TRIGGER tasks_title_update AFTER UPDATE OF title ON tasks BEGIN
    INSERT INTO tasks_title (tasks_title, rowid, title) VALUES ('delete', old.id, old.title);
    INSERT INTO tasks_title (rowid, title) VALUES (new.id, new.title);
END;
-- The gate verdict filter finds the tasks of a rare verdict through this.
CREATE INDEX gates_by_verdict ON gates (verdict, task_id);
